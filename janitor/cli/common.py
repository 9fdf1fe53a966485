"""What every command shares: the global options, the output helpers, the library it opens.

Exit codes: 0 ok; 1 ran and found a problem; 2 bad input or configuration; 75 refused or stopped
for lack of space (EX_TEMPFAIL). Messages go to stderr; data (ids, tables, JSON) to stdout.
Only light modules are imported here: ``janitor --help`` loads this for every command.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from janitor.cli.light import lasting, own_state_dir, print_json, say

if TYPE_CHECKING:
    from janitor.config.settings import Settings
    from janitor.core import Janitor
    from janitor.host.owner import Owner
    from janitor.ledger.db import Ledger

__all__ = [
    "DryRunOpt",
    "G",
    "JsonOpt",
    "at_least",
    "fail",
    "lasting",
    "open_janitor",
    "open_ledger",
    "own_state_dir",
    "owner",
    "print_json",
    "say",
    "settings",
]


class Globals:
    """The root options (``--config``, ``--policy``) and what the command opened."""

    config: Path | None = None
    policy: Path | None = None

    def __init__(self) -> None:
        #: Ledgers this command opened, closed when it ends: the process exits without a last
        #: garbage collection (main), so nothing else would close them, and closing the last
        #: connection folds SQLite's WAL back into the ledger file.
        self.ledgers: list[Ledger] = []


G = Globals()

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON (shapes: docs/json.md).")]
DryRunOpt = Annotated[
    bool, typer.Option("--dry-run", "-n", help="Print the file and commands; change nothing.")
]


def fail(message: str, code: int) -> NoReturn:
    """Say ``error: message`` and end the command with exit ``code``."""
    say(f"error: {message}")
    raise typer.Exit(code)


def at_least(minimum: float) -> Callable[[typer.CallbackParam, Any], Any]:
    """An option's callback: its value, or exit 2 with one line when it is below ``minimum``.

    Said here rather than with typer's ``min=``, whose help shows a range (``x>=1`` in brackets) and
    whose refusal is a framed block rather than one line.
    """

    def check(param: typer.CallbackParam, value: Any) -> Any:
        if value is not None and value < minimum:
            fail(f"{max(param.opts, key=len)} {value:g} must be at least {minimum:g}", 2)
        return value

    return check


def settings() -> Settings:
    """The settings the root options and the environment name."""
    from janitor.config.settings import Settings

    return Settings.load(G.config, policy=G.policy)


def open_janitor() -> Janitor:
    """The library over the root options' config and policy; its ledger closes at exit."""
    from janitor.core import Janitor

    s = settings()
    own_state_dir(s)
    jan = Janitor.from_settings(s)
    G.ledgers.append(jan.ledger)
    return jan


def open_ledger(s: Settings) -> Ledger:
    """The ledger alone, for a command that needs no policy; it closes at exit."""
    from janitor.ledger.db import Ledger

    own_state_dir(s)
    ledger = Ledger(s.ledger_path, lock_timeout=s.lock_timeout_s)
    G.ledgers.append(ledger)
    return ledger


def owner(owner_pid: int | None) -> Owner:
    """The owner of a reservation or pin made here: ``--owner-pid``, else the process that ran
    janitor, past the shells and launchers that exit with it (janitor.host.owner.choose_owner)."""
    from janitor.host.owner import Owner, choose_owner, process_info, process_start

    if owner_pid is None:
        return choose_owner()
    proc = process_info(owner_pid)
    return Owner(owner_pid, process_start(owner_pid), proc.describe() if proc else "?")
