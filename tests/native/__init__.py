"""Tests of ``janitor/native``: the compiled guard alone, under hostile input."""
