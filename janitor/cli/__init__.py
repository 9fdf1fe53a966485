"""The ``janitor`` command line: parse, call the library, render (one module per command group)."""

from __future__ import annotations

import gc
import sys

__all__ = ["main"]


def main(argv: list[str] | None = None) -> None:
    """The ``janitor`` console script: a plain ``janitor space`` is answered at once and a
    plain ``janitor daemon`` started at once (``janitor.cli.quick``); any other command line
    is loaded and run by typer (``janitor.cli.app``)."""
    from janitor.cli.quick import daemon, daemon_args, space, space_args

    args = sys.argv[1:] if argv is None else argv
    plain = space_args(args)
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
    serve = daemon_args(args)
    if serve is not None:  # started without loading typer (janitor.cli.quick)
        was_enabled = gc.isenabled()
        try:
            code = daemon(serve)  # the GC frozen, then on for the daemon's life
        finally:
            if argv is not None:  # called in-process (tests): the caller's GC as it was
                gc.unfreeze()
                if was_enabled:
                    gc.enable()
                else:
                    gc.disable()
        sys.exit(code)
    from janitor.cli.app import main as run

    run(argv)
