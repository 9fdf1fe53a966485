"""The ``janitor`` command line: parse, call the library, render (one module per command group)."""

from __future__ import annotations

import sys

__all__ = ["main"]


def main(argv: list[str] | None = None) -> None:
    """The ``janitor`` console script: ``janitor space`` starts its walk first
    (``janitor.cli.early``) and a plain one is answered at once (``janitor.cli.quick``); any
    other command line is loaded and run by typer (``janitor.cli.app``)."""
    from janitor.cli.early import start
    from janitor.cli.quick import space, space_args

    args = sys.argv[1:] if argv is None else argv
    start(args)
    plain = space_args(args)
    if plain is not None:  # answered without loading typer (janitor.cli.quick)
        sys.exit(space(plain))
    from janitor.cli.app import main as run

    run(argv)
