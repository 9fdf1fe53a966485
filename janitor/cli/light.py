"""The output helpers and state-dir check every command shares, without typer: the commands
that answer before the command-line framework loads (``janitor.cli.quick``) use them too, and
``janitor.cli.common`` hands them on to the others."""

from __future__ import annotations

import gc
import json
import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from janitor.config.settings import Settings

__all__ = ["lasting", "own_state_dir", "print_json", "say"]


def say(message: str) -> None:
    """One message on stderr, prefixed ``janitor:``: one line into a pipe or a log, whole;
    in a terminal, wrapped to its width (between words; a path longer than the width is
    broken), the lines after the first indented."""
    line = f"janitor: {message}"
    try:
        width = os.get_terminal_size(sys.stderr.fileno()).columns if sys.stderr.isatty() else 0
    except (OSError, ValueError):
        width = 0
    if 20 <= width < len(line):
        import textwrap

        line = textwrap.fill(
            line, width, subsequent_indent="  ", break_on_hyphens=False, break_long_words=True
        )
    print(line, file=sys.stderr)


def print_json(data: Any) -> None:
    """``data`` as indented JSON on stdout."""
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False) + "\n")


def own_state_dir(s: Settings) -> None:
    """Root is refused in another user's state dir; a user's state dir is rid of what an
    earlier root run left there, saying so (janitor.config.state_dir)."""
    from janitor.config.state_dir import refuse_root, repair

    refuse_root(s.state_dir)
    for line in repair(s.state_dir):
        say(f"note: {line}")


def lasting() -> None:
    """Called by the commands that may run for hours: the cyclic GC runs again for them.

    What start-up made (modules, classes, the command tree) stays in the permanent generation,
    where no collection walks it (``gc.freeze``, as a pre-fork server does).
    """
    gc.freeze()
    gc.enable()
