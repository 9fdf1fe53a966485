"""The ``janitor`` command line: parse, call the library, render (one module per command group)."""

from __future__ import annotations

from janitor.cli.app import main

__all__ = ["main"]
