"""The daemon a ``janitor run`` talks to: the standing one, else one of its own for the run.

With no daemon, every guarded ffmpeg call opens the ledger itself (about +230 ms a call, against
+28 ms over the daemon's socket: ``benchmarks/bench_guard.py``). So ``janitor run`` uses the
user's daemon when one answers and runs the run's policy; else (unless ``--no-daemon``) a
daemon of its own,
``janitor daemon --admission-only`` in a runtime folder of its own
(``/run/user/1000/space-janitor/run-3f2a9c1b/janitor.sock``), and points the command's guard
at it through ``JANITOR_RUNTIME_DIR``. That daemon admits, queues and watches risk, as the
guard would without it; it never sweeps or removes a folder. It is stopped when the run ends
and never outlives it (it is supervised like the command: a killed run takes it along).
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from janitor.commands.supervise import Supervised
    from janitor.config.settings import Settings

__all__ = ["READY_TIMEOUT_S", "RunDaemon", "daemon_status", "run_daemon"]

#: How long a run waits for its own daemon to answer before going on without it.
READY_TIMEOUT_S = 15.0
#: Longest socket path we make (sun_path is 108 bytes on Linux, 104 on macOS).
_SUN_PATH_MAX = 100


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float = 2.0) -> None:
        super().__init__("janitor", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self._path)


def daemon_status(sock: Path, timeout: float = 2.0) -> dict[str, Any] | None:
    """``GET /v1/status`` over the daemon's socket, or None if nothing answers."""
    conn = _UnixHTTPConnection(str(sock), timeout)
    try:
        conn.request("GET", "/v1/status")
        resp = conn.getresponse()
        if resp.status != 200:
            return None
        data: dict[str, Any] = json.loads(resp.read())
        return data
    except (OSError, ValueError, http.client.HTTPException):
        return None
    finally:
        conn.close()


def _same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


@dataclass(slots=True)
class RunDaemon:
    """The daemon of one run. ``note`` says which, and ``notable`` whether the run should say
    it (a daemon with another policy, one that could not start); ``env`` is what the command's
    environment needs to reach it (empty for the standing daemon); ``stop()`` ends one of the
    run's own and removes its runtime folder."""

    note: str
    env: dict[str, str]
    notable: bool = False
    own: Supervised | None = None
    folder: Path | None = None
    ready: Callable[[], bool] | None = None

    def wait_ready(self) -> str | None:
        """Block until the run's own daemon answers; a line saying why not, or None."""
        if self.ready is None or self.ready():
            return None
        why = ""
        if self.folder is not None:
            try:
                lines = (self.folder / "daemon.err").read_text(errors="replace").splitlines()
                why = f" ({lines[-1].strip()})" if lines else ""
            except OSError:
                pass
        self.stop()
        return f"the run's own daemon did not start{why}; guarded calls open the ledger themselves"

    def stop(self) -> None:
        """Stop the run's own daemon (SIGTERM, then SIGKILL after 5 s); remove its folder."""
        if self.own is not None:
            self.own.stop(5.0)
            self.own = None
        self.env = {}
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None


def run_daemon(settings: Settings, run_id: str, *, start: bool = True) -> RunDaemon:
    """The standing daemon when it answers with the run's policy; else, with ``start``, a
    daemon of the run's own (started now, without waiting: see ``RunDaemon.wait_ready``)."""
    status = daemon_status(settings.socket_path)
    if status is not None:
        info = status.get("daemon") or {}
        theirs, pid = str(info.get("policy", "")), info.get("pid", "?")
        if theirs and _same_file(theirs, settings.policy_path):
            return RunDaemon(f"guarded calls go to the daemon (pid {pid})", {})
        mismatch = True
        note = (
            f"the daemon (pid {pid}) runs policy {theirs}, not this run's "
            f"{settings.policy_path}: it cannot admit the run's writes"
        )
    else:
        note, mismatch = "no daemon runs", False
    if not start:
        return RunDaemon(
            note + "; guarded calls open the ledger themselves (--no-daemon)",
            {},
            mismatch,
        )
    own = _start_own(settings, run_id, note)
    own.notable = own.notable or mismatch
    return own


def _start_own(settings: Settings, run_id: str, note: str) -> RunDaemon:
    from janitor.commands.supervise import Supervised

    folder = settings.runtime_dir / f"run-{run_id}"
    try:
        if len(os.fsencode(folder / "janitor.sock")) > _SUN_PATH_MAX:
            # A socket's path must fit sun_path: a deep runtime dir gets a private /tmp folder.
            folder = Path(tempfile.mkdtemp(prefix=f"janitor-run-{run_id}-", dir="/tmp"))
        else:
            folder.mkdir(mode=0o700, parents=True)
    except OSError as exc:
        return RunDaemon(f"{note}; cannot make {folder} ({exc.strerror})", {}, True)
    env = dict(os.environ)
    env["JANITOR_RUNTIME_DIR"] = str(folder)
    env["JANITOR_POLICY"] = str(settings.policy_path)
    env["JANITOR_STATE_DIR"] = str(settings.state_dir)
    env["JANITOR_LOG_DIR"] = str(settings.log_dir)
    argv = [sys.executable, "-m", "janitor", "daemon", "--quiet", "--admission-only"]
    errors = os.open(folder / "daemon.err", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        devnull = os.open(os.devnull, os.O_RDWR)
        try:
            own = Supervised(
                argv, env=env, foreground=False, stdin=devnull, stdout=devnull, stderr=errors
            )
        finally:
            os.close(devnull)
    except OSError as exc:
        shutil.rmtree(folder, ignore_errors=True)
        return RunDaemon(f"{note}; cannot start a daemon for the run ({exc.strerror})", {}, True)
    finally:
        os.close(errors)
    sock = folder / "janitor.sock"

    def ready() -> bool:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if own.wait(0) is not None:
                return False
            if sock.exists() and daemon_status(sock, timeout=1.0) is not None:
                return True
            time.sleep(0.05)
        return False

    return RunDaemon(
        f"{note}; started one for this run (pid {own.pid}, socket {sock})",
        {"JANITOR_RUNTIME_DIR": str(folder)},
        False,
        own,
        folder,
        ready,
    )
