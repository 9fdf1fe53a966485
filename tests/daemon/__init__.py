"""Tests of ``janitor.daemon``: the real daemon, its API, metrics, logs and alert rules."""
