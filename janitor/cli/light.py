"""The output helpers and state-dir check every command shares, without typer: the commands
that answer before the command-line framework loads (``janitor.cli.quick``) use them too, and
``janitor.cli.common`` hands them on to the others."""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from janitor.config.settings import Settings

__all__ = ["console", "own_state_dir", "print_json", "say"]


def say(message: str) -> None:
    """One message line on stderr, prefixed ``janitor:``."""
    print(f"janitor: {message}", file=sys.stderr)


def print_json(data: Any) -> None:
    """``data`` as indented JSON on stdout."""
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False) + "\n")


def console() -> Any:
    """A rich console for stdout; piped, it never truncates ids and paths to 80 columns."""
    from rich.console import Console

    out = Console()
    if not out.is_terminal and "COLUMNS" not in os.environ:
        out = Console(width=1000)
    return out


def own_state_dir(s: Settings) -> None:
    """Root is refused in another user's state dir; a user's state dir is rid of what an
    earlier root run left there, saying so (janitor.config.state_dir)."""
    from janitor.config.state_dir import refuse_root, repair

    refuse_root(s.state_dir)
    for line in repair(s.state_dir):
        say(f"note: {line}")
