"""The ``janitor`` command line: parse, call the library, render (one module per command group)."""

from __future__ import annotations

import sys

__all__ = ["main"]


def main(argv: list[str] | None = None) -> None:
    """The ``janitor`` console script: ``janitor space`` starts its walk first
    (``janitor.cli.early``), then the command line is loaded and run (``janitor.cli.app``)."""
    from janitor.cli.early import start

    start(sys.argv[1:] if argv is None else argv)
    from janitor.cli.app import main as run

    run(argv)
