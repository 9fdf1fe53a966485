"""Tests of ``janitor.host``: what the machine says (space, processes, locks, C builds)."""
