"""The ``janitor`` command line: parse, call the library, render (one module per command group)."""

from __future__ import annotations

import gc
import sys

__all__ = ["main"]


def main(argv: list[str] | None = None) -> None:
    """The ``janitor`` console script: a plain ``janitor space`` is answered at once
    (``janitor.cli.quick``); any other command line is loaded and run by typer
    (``janitor.cli.app``)."""
    from janitor.cli.quick import space, space_args

    plain = space_args(sys.argv[1:] if argv is None else argv)
    if plain is not None:  # answered without loading typer (janitor.cli.quick)
        # The cyclic GC as janitor.cli.app.main keeps it: off, and what is alive frozen at the
        # end, so that the interpreter's last collection skips it.
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            code = space(plain)
        finally:
            if argv is None:
                gc.freeze()
            elif was_enabled:
                gc.enable()
        sys.exit(code)
    from janitor.cli.app import main as run

    run(argv)
