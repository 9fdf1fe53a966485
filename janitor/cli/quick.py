"""``janitor space`` and ``janitor daemon`` run before the command-line framework loads.

``janitor space`` must be faster than ``du`` over the same folders. A plain
``janitor [--config F] [--policy F] space [--json] [--fresh]`` runs here, without typer (which
would cost as much again as the settings and the policy): the same report, output, messages
and exit codes as the typer command (``janitor.cli.status.space``, which calls this too):

1. Unless ``--fresh``: when a daemon runs, its last report (``GET /v1/space``, at most
   ``SPACE_MAX_AGE_S`` old: ``janitor.daemon.space``), if it was measured for what this command
   would measure (the same policy file, unchanged since; the same state folder; the same
   folders, as the policy file's raw text and this environment name them). Shown with its age.
2. Else it measures now: the walk starts at once (``janitor.cli.early``), then the settings,
   the policy and the ledger are loaded and the report made (``janitor.usage``).

A plain ``janitor [--config F] [--policy F] daemon [--quiet] [--admission-only]`` runs here
too: the daemon starts without typer and the command tree, which were a fourth of the time
before its socket answered (``janitor run`` starts one for every run; launchd and systemd
start the user's). The same settings, daemon, messages and exit codes as the typer command
(``janitor.cli.service.daemon``).

Any other command line, ``--help`` too, goes to typer.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from janitor.cli.early import root_options

__all__ = ["DaemonArgs", "SpaceArgs", "daemon", "daemon_args", "space", "space_args"]

#: How long the daemon may take to answer (it measures first when its report is too old).
DAEMON_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class SpaceArgs:
    """A plain ``space`` command line: the root options, ``--json`` and ``--fresh``."""

    config: str | None
    policy: str | None
    as_json: bool = False
    fresh: bool = False


def space_args(argv: Sequence[str]) -> SpaceArgs | None:
    """The ``space`` command line in ``argv`` if it is a plain one, else None."""
    found = root_options(argv)
    if found is None:
        return None
    opts, rest = found
    if any(t not in ("--json", "--fresh") for t in rest):
        return None
    return SpaceArgs(
        opts.get("--config"), opts.get("--policy"), "--json" in rest, "--fresh" in rest
    )


@dataclass(frozen=True, slots=True)
class DaemonArgs:
    """A plain ``daemon`` command line: the root options, ``--quiet`` and ``--admission-only``."""

    config: str | None
    policy: str | None
    quiet: bool = False
    admission_only: bool = False


#: ``janitor daemon``'s options, as its typer command spells them.
_DAEMON_FLAGS = ("--quiet", "-q", "--admission-only")


def daemon_args(argv: Sequence[str]) -> DaemonArgs | None:
    """The ``daemon`` command line in ``argv`` if it is a plain one, else None."""
    found = root_options(argv, "daemon")
    if found is None:
        return None
    opts, rest = found
    if any(t not in _DAEMON_FLAGS for t in rest):
        return None  # --help, a typo: typer says it
    quiet = "--quiet" in rest or "-q" in rest
    return DaemonArgs(opts.get("--config"), opts.get("--policy"), quiet, "--admission-only" in rest)


def space(args: SpaceArgs) -> int:
    """Run ``janitor space``; its exit code."""
    return _in_our_words(lambda: _space(args))


def daemon(args: DaemonArgs) -> int:
    """Run ``janitor daemon`` in the foreground until it is stopped; its exit code."""
    return _in_our_words(lambda: _daemon(args))


def _in_our_words(command: Callable[[], int]) -> int:
    """``command()``'s exit code; the library's errors as the typer commands give them: one
    line and their exit code."""
    from janitor.cli.light import say
    from janitor.errors import EXIT_BAD_INPUT, JanitorError

    try:
        return command()
    except JanitorError as exc:
        say(f"error: {exc}")
        return exc.exit_code
    except PermissionError as exc:  # a file of the janitor's that it may not use
        from janitor.config.state_dir import access_error

        say(f"error: {access_error(exc.filename or '?', exc, 'use')}")
        return EXIT_BAD_INPUT


def _daemon(args: DaemonArgs) -> int:
    from janitor.cli.light import lasting, own_state_dir
    from janitor.config.settings import Settings
    from janitor.daemon.supervisor import Daemon

    lasting()  # the daemon lives for hours: the cyclic GC runs for it
    policy = Path(args.policy) if args.policy else None
    settings = Settings.load(Path(args.config) if args.config else None, policy=policy)
    own_state_dir(settings)  # never root in a user's state dir
    return Daemon(settings, log_to_stderr=not args.quiet, admission_only=args.admission_only).run()


def _space(args: SpaceArgs) -> int:
    from janitor.cli.early import glimpsed_plan, start

    try:
        plan = glimpsed_plan(args.config, args.policy)
    except Exception:  # only a guess: the loaded policy will say what is wrong
        plan = None
    answer = None if args.fresh or plan is None else _from_daemon(args, plan)
    if answer is not None:
        return _show(args, answer["volumes"], answer["measured_at"], "daemon")
    start(plan)
    return _measure(args)


def _measure(args: SpaceArgs) -> int:
    from janitor.cli.early import take
    from janitor.cli.light import own_state_dir
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
    at = time.time()
    try:
        report = space_report(loaded, ledger, settings.state_dir, early=early)
    finally:
        ledger.close()
    return _show(args, [v.as_dict() for v in report], at, "walk")


def _show(args: SpaceArgs, volumes: list[dict[str, Any]], at: float, source: str) -> int:
    if args.as_json:
        from janitor.cli.light import print_json

        print_json({"measured_at": at, "source": source, "volumes": volumes})
        return 0
    from janitor.cli.layout import layout_width, screen
    from janitor.cli.view import render_space
    from janitor.usage import VolumeSpace

    out = screen()
    for part in render_space([VolumeSpace.from_dict(v) for v in volumes], layout_width(out)):
        out.print(part)
    if source == "daemon":
        from janitor.humanize import format_duration

        age = format_duration(max(0.0, time.time() - at))
        out.print(f"measured by the daemon {age} ago; `janitor space --fresh` measures now")
    return 0


def _from_daemon(args: SpaceArgs, plan: Any) -> dict[str, Any] | None:
    """The running daemon's report, if it is one this command may show (module docstring)."""
    from janitor.config.glimpse import folder_setting, policy_file
    from janitor.usage import SPACE_MAX_AGE_S, file_stamp, folders_key

    try:
        sock = folder_setting("runtime_dir", args.config) / "janitor.sock"
        if not sock.exists():
            return None
        data = _get(sock, f"/v1/space?max_age={SPACE_MAX_AGE_S:g}")
        path = policy_file(args.config, args.policy)
        state = folder_setting("state_dir", args.config)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(data, dict):
        return None
    stamp = file_stamp(path)
    same = (
        stamp is not None
        and data.get("policy_stamp") == stamp
        and data.get("policy") == str(path)
        and data.get("state_dir") == str(state)
        and data.get("folders") == folders_key(plan.folders)
        and time.time() - float(data.get("measured_at", 0)) <= SPACE_MAX_AGE_S
    )
    return data if same and isinstance(data.get("volumes"), list) else None


def _get(sock: Path, url: str) -> Any:
    """``GET url`` on the daemon's socket; the JSON it answers with 200, else None."""
    import _socket

    s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        s.settimeout(DAEMON_TIMEOUT_S)
        s.connect(str(sock))
        s.sendall(f"GET {url} HTTP/1.1\r\nhost: janitor\r\nconnection: close\r\n\r\n".encode())
        chunks = []
        while chunk := s.recv(1 << 16):
            chunks.append(chunk)
    finally:
        s.close()
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0].split()
    if len(status) < 2 or status[1] != b"200":
        return None
    return json.loads(body)
