"""``janitor space`` answered before the command-line framework loads.

``janitor space`` must be faster than ``du`` over the same folders. Its walk runs in other
processes from the very start (``janitor.cli.early``), and this process needs the settings and
the policy (pydantic) to use it; typer and the command tree would cost as much again. So a
plain ``janitor [--config F] [--policy F] space [--json]`` runs here, as the typer command
(``janitor.cli.status.space``) runs it: the same report, output, messages and exit codes
(2 bad input or configuration, 75 a ledger whose disk is full). Any other command line, its
``--help`` too, goes to typer.
"""

from __future__ import annotations

import gc
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from janitor.cli.early import root_options

__all__ = ["SpaceArgs", "space", "space_args"]


@dataclass(frozen=True, slots=True)
class SpaceArgs:
    """A plain ``space`` command line: the root options and ``--json``."""

    config: str | None
    policy: str | None
    as_json: bool


def space_args(argv: Sequence[str]) -> SpaceArgs | None:
    """The ``space`` command line in ``argv`` if it is a plain one, else None."""
    found = root_options(argv)
    if found is None:
        return None
    opts, rest = found
    if any(t != "--json" for t in rest):
        return None
    return SpaceArgs(opts.get("--config"), opts.get("--policy"), bool(rest))


def space(args: SpaceArgs) -> int:
    """Run ``janitor space``; its exit code."""
    from janitor.cli.light import say
    from janitor.errors import EXIT_BAD_INPUT, JanitorError

    gc.disable()  # as janitor.cli.app.main: a short command, no cyclic garbage that matters
    try:
        return _space(args)
    except JanitorError as exc:
        say(f"error: {exc}")
        return exc.exit_code
    except PermissionError as exc:  # a file of the janitor's that it may not use
        from janitor.config.state_dir import access_error

        say(f"error: {access_error(exc.filename or '?', exc, 'use')}")
        return EXIT_BAD_INPUT


def _space(args: SpaceArgs) -> int:
    from janitor.cli.early import take
    from janitor.cli.light import console, own_state_dir, print_json
    from janitor.config.policy import load_policy
    from janitor.config.settings import Settings
    from janitor.ledger.db import Ledger
    from janitor.usage import space_report

    early = take()
    policy = Path(args.policy) if args.policy else None
    config = Path(args.config) if args.config else None
    settings = Settings.load(config, policy=policy)
    own_state_dir(settings)
    # What Janitor.from_settings opens, without the rest of the library (janitor.core)
    loaded = load_policy(settings.policy_path, state_dir=settings.state_dir)
    ledger = Ledger(settings.ledger_path, lock_timeout=settings.lock_timeout_s)
    try:
        report = space_report(loaded, ledger, settings.state_dir, early=early)
    finally:
        ledger.close()
    if args.as_json:
        print_json({"volumes": [v.as_dict() for v in report]})
        return 0
    from janitor.cli.view import render_space

    out = console()
    for part in render_space(report):
        out.print(part)
    return 0
