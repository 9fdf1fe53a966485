"""Tests of ``janitor.cli``: the real console script, its help and its screens."""
