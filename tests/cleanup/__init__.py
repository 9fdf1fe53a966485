"""Tests of ``janitor.cleanup``: scan, units and their kinds, plan, delete, sweep."""
