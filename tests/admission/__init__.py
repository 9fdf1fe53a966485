"""Tests of ``janitor.admission``: admit or refuse a reservation, forecasts and risk."""
