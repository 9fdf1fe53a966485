"""Tests of ``janitor.config``: settings and policy files."""
