"""The guarded ffprobe: to its caller it is ffprobe; a probe of a cache entry marks it in use.

batchalign3 probes a cached WAV's duration with a bare ``ffprobe`` from ``PATH`` between its
cache hit and its first cut, and may run UTR for minutes in between; a guard first on ``PATH``
(``janitor shim install``, ``janitor run``) sees that probe. It sends the call as it got it
(its arguments, folder, parent and ``TMPDIR``) to the daemon's ``POST /v1/guard/probe``, or,
with no daemon, decides it here through the ledger (:mod:`janitor.guarding.probe_call`): the cache
entries it probes are marked awaiting use for the prober, and a probe of a cached WAV whose
alignment could never fit is refused (exit 75, one ``space-janitor:`` line). Then, and in
every other case, it becomes the real ffprobe (``exec``): the same arguments, stdin, stdout,
stderr and exit code. Nothing here ever breaks a probe: what cannot be decided runs as it is.

Like the ffmpeg guard, it imports next to nothing at start.
"""

from __future__ import annotations

import os
import sys

from janitor.commands.guard import (
    ELAPSED_ENV,
    EXIT_NO_FFMPEG,
    EXIT_REFUSED,
    FALLBACK_ENV,
    GuardError,
    _exec,
    _log,
    _say,
    asks_only_for_information,
    find_real,
)
from janitor.guarding.protocol import PROBE_ENV, call_body

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

__all__ = ["ANSWER_TIMEOUT_S", "main"]

#: How long the daemon may take to decide a probe (it may work out a volume's capacity).
ANSWER_TIMEOUT_S = 10.0


def _call(args: Sequence[str], real: str, config: dict[str, str]) -> dict[str, Any]:
    return call_body(
        "ffprobe", real, list(args), cwd=os.getcwd(), owner_pid=os.getpid(),
        writer_pid=os.getppid(), env={k: os.environ[k] for k in PROBE_ENV if os.environ.get(k)},
        config=config,
    )  # fmt: skip


def _through_daemon(call: dict[str, Any], socket_path: str | None) -> dict[str, Any] | None:
    """The daemon's verdict, or None when none answers with one (another policy, no daemon)."""
    runtime = os.environ.get("JANITOR_RUNTIME_DIR")
    path = os.path.join(runtime, "janitor.sock") if runtime else socket_path
    if not path:
        return None
    from janitor.commands.daemon_client import DaemonClient

    try:
        daemon = DaemonClient(path, timeout=ANSWER_TIMEOUT_S)
    except OSError:
        return None
    try:
        status, body = daemon.call("POST", "/v1/guard/probe", call)
    except (OSError, ValueError):
        return None
    finally:
        daemon.close()
    if status in (200, 507) and isinstance(body, dict) and body.get("action"):
        return body
    return None


def _through_ledger(call: dict[str, Any], policy: str | None) -> dict[str, Any]:
    from janitor.core import Janitor
    from janitor.guarding.probe_call import probe_here

    jan = Janitor.from_settings()
    try:
        verdict = probe_here(jan, call)
    finally:
        jan.ledger.close()
    return verdict.body


def main(
    argv: Sequence[str] | None = None,
    *,
    socket_path: str | None = None,
    cache_dir: str | None = None,
    log_dir: str | None = None,
    policy: str | None = None,
    me: str | None = None,
    wait_s: float = 0.0,
) -> int:
    """Run one guarded ffprobe call; returns the exit code (75 refused, 127 no ffprobe).

    The settings are those ``janitor shim install`` resolved for the ffmpeg guard (``wait_s``
    is not used: a probe never waits); ``JANITOR_RUNTIME_DIR``, ``JANITOR_LOG_DIR`` and
    ``JANITOR_POLICY`` override them.
    """
    del wait_s, cache_dir
    args = list(sys.argv[1:] if argv is None else argv)
    handed_over = os.environ.pop(FALLBACK_ENV, None)
    os.environ.pop(ELAPSED_ENV, None)  # a probe never waits; ffprobe never sees it
    try:
        real = find_real("ffprobe", me=me)
    except GuardError as exc:
        _say(str(exc))
        return EXIT_NO_FFMPEG
    if asks_only_for_information(args):
        return _exec(real, args)
    config = {"policy": policy} if policy else {}
    try:
        call = _call(args, real, config)
        verdict = None if handed_over is not None else _through_daemon(call, socket_path)
        if verdict is None:
            verdict = _through_ledger(call, policy)
    except Exception as exc:  # a broken ledger, a confused daemon: probe as it is, say so
        _log(log_dir, f"unguarded probe (cannot decide: {exc}): ffprobe {' '.join(args)}")
        return _exec(real, args)
    line = verdict.get("log")
    if line:
        _log(log_dir, str(line), debug=bool(verdict.get("debug")))
    if verdict.get("action") == "refuse":
        _say(str(verdict.get("say") or "refused"))
        return EXIT_REFUSED
    return _exec(real, args)
