"""Where a batchalign3 command's ffmpeg runs, and whether the guard stands in front of it.

batchalign3's CLI sends a job to ``--server``/``$BATCHALIGN_SERVER`` when given; else it asks
``127.0.0.1:{port}/health`` (the port from its ``server.yaml``) and, if a server answers,
hands the job to it. Then the ``PATH`` that ``janitor run`` sets never reaches the process that
runs ffmpeg: the server's own ``PATH`` decides. Only with no server (or ``--no-server``) does
the CLI run ffmpeg itself (direct mode). :func:`route` finds out which case holds before the
command starts, so a run never protects nothing in silence; ``janitor doctor`` asks the same.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

from janitor.host import batchalign3

__all__ = ["ProcessFfmpeg", "Route", "is_batchalign", "listener_of", "process_ffmpeg", "route"]

#: How each case stands: ``direct`` (the CLI runs ffmpeg: a guard on its PATH sees it),
#: ``guarded`` (a local server runs the guard), ``unguarded`` (a local server runs a bare
#: ffmpeg), ``unknown`` (a server answers, its PATH cannot be read), ``remote`` (another host).
Case = Literal["direct", "guarded", "unguarded", "unknown", "remote"]
_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


@dataclass(frozen=True, slots=True)
class ProcessFfmpeg:
    """Which ffmpeg a running process finds first on its PATH, and whether it is our guard
    (None: its environment could not be read); ``how_to_check`` shows its PATH by hand."""

    pid: int
    ffmpeg: str | None
    guarded: bool | None
    how_to_check: str


def process_ffmpeg(pid: int, platform: str = sys.platform) -> ProcessFfmpeg:
    """What process ``pid`` runs when it runs ``ffmpeg``: its environment's PATH (Linux:
    ``/proc/PID/environ``; macOS: the kernel's copy, readable for the same user's processes)."""
    import psutil

    from janitor.commands.shim import first_ffmpeg, is_guard

    how = (
        f"ps -wwE -p {pid} | tr ' ' '\\n' | grep ^PATH="
        if platform == "darwin"
        else f"tr '\\0' '\\n' < /proc/{pid}/environ | grep ^PATH="
    )
    try:
        path_var = psutil.Process(pid).environ().get("PATH", os.defpath)
    except (psutil.Error, OSError):
        return ProcessFfmpeg(pid, None, None, how)
    first = first_ffmpeg(path_var)
    return ProcessFfmpeg(pid, first, first is not None and is_guard(first), how)


def listener_of(port: int) -> int | None:
    """The pid of the process listening on TCP ``port`` (any local address), or None.

    The system-wide table first (Linux; root on macOS); else this user's processes one by one,
    which is what an unprivileged macOS user may read.
    """
    import psutil

    def listens(conn: object) -> bool:
        laddr = getattr(conn, "laddr", None)
        return getattr(conn, "status", None) == psutil.CONN_LISTEN and (
            getattr(laddr, "port", None) == port
        )

    try:
        for conn in psutil.net_connections(kind="tcp"):
            if conn.pid and listens(conn):
                return conn.pid
    except (psutil.Error, OSError):
        pass
    me = os.getuid()
    for proc in psutil.process_iter(["uids"]):
        try:
            uids = proc.info["uids"]
            if (
                uids is not None
                and uids.real == me
                and any(listens(c) for c in proc.net_connections(kind="tcp"))
            ):
                return proc.pid
        except (psutil.Error, OSError):
            continue
    return None


def is_batchalign(command: Sequence[str]) -> bool:
    """True when ``command`` runs batchalign3's CLI itself (not a script that may call it).
    ``batchalign`` itself is the second generation's (0.10 and later), which runs no ffmpeg."""
    name = os.path.basename(command[0]) if command else ""
    return name.startswith("batchalign") and name != "batchalign"


@dataclass(frozen=True, slots=True)
class Route:
    """Where a batchalign3 job's ffmpeg runs and whether its writes are guarded: ``message``
    says which case holds, ``fix`` what to do when they are not. ``sure`` is False when the
    command is not batchalign3's CLI (a script that may call it): then it is a warning only."""

    case: Case
    message: str
    fix: str | None = None
    port: int | None = None
    pid: int | None = None
    sure: bool = True

    @property
    def protected(self) -> bool:
        """True when a guard stands in front of the ffmpeg that does the job's writes."""
        return self.case in ("direct", "guarded")

    def as_dict(self) -> dict[str, object]:
        return {
            "case": self.case,
            "protected": self.protected,
            "port": self.port,
            "pid": self.pid,
            "message": self.message,
            "fix": self.fix,
        }


_FIX = (
    "add --no-server to the command (direct mode: the guard sees every ffmpeg call), or put "
    "the guard first on the server's PATH and restart it: `batchalign3 serve start` from a "
    "shell that has it, the PATH key of the launchd plist, or the desktop app's environment "
    "(`janitor shim install` prints each)"
)


def _options(command: Sequence[str]) -> tuple[bool, str | None]:
    """``--no-server`` and ``--server URL`` (global options: anywhere after the program)."""
    no_server, server = False, None
    args = list(command[1:])
    for i, arg in enumerate(args):
        if arg == "--":
            break
        if arg == "--no-server":
            no_server = True
        elif arg == "--server" and i + 1 < len(args):
            server = args[i + 1]
        elif arg.startswith("--server="):
            server = arg.partition("=")[2]
    return no_server, server


def _local(port: int, where: str, *, sure: bool) -> Route:
    """A server said to be on ``127.0.0.1:port``: who runs it, and which ffmpeg it finds."""
    if batchalign3.local_server(port) is None:
        return Route(
            "direct",
            f"no batchalign3 server answers on {where}: batchalign3 runs the job itself (direct "
            "mode), and the guard sees every ffmpeg call it makes",
            port=port,
            sure=sure,
        )
    pid = listener_of(port)
    if pid is None:
        return Route(
            "unknown",
            f"batchalign3 hands the job to the server answering on {where}, whose process this "
            "user cannot see (another user's, or a container's): cannot tell whether its ffmpeg "
            "is the guard",
            f"`lsof -nP -iTCP:{port} -sTCP:LISTEN` names it; or add --no-server to the command",
            port=port,
            sure=sure,
        )
    seen = process_ffmpeg(pid)
    who = f"its server on {where} (pid {pid})"
    if seen.guarded is None:
        return Route(
            "unknown",
            f"batchalign3 hands the job to {who}, whose environment cannot be read: cannot tell "
            "whether its ffmpeg is the guard",
            f"`{seen.how_to_check}` shows its PATH; or add --no-server to the command",
            port=port,
            pid=pid,
            sure=sure,
        )
    if seen.guarded:
        return Route(
            "guarded",
            f"batchalign3 hands the job to {who}, whose ffmpeg is the guard ({seen.ffmpeg}): its "
            "writes are reserved by the server's guard (this run's summary counts only its own)",
            port=port,
            pid=pid,
            sure=sure,
        )
    return Route(
        "unguarded",
        f"batchalign3 hands the job to {who}, which runs {seen.ffmpeg or 'an ffmpeg'} with no "
        "guard: none of the job's writes are reserved",
        _FIX,
        port=port,
        pid=pid,
        sure=sure,
    )


def route(command: Sequence[str] | None, env: Mapping[str, str] | None = None) -> Route | None:
    """Which case holds for ``command`` (None: batchalign3 as ``doctor`` sees it), with the
    environment it will get; None when the command cannot reach a server (``serve``)."""
    env = os.environ if env is None else env
    sure = command is None or is_batchalign(command)
    no_server, server = _options(command) if command and sure else (False, None)
    if command and sure and len(command) > 1 and command[1] == "serve":
        return None  # it starts or asks a server; it hands no job over
    if no_server:
        return Route(
            "direct",
            "--no-server: batchalign3 runs the job itself, and the guard sees every ffmpeg call "
            "it makes",
        )
    server = server or env.get("BATCHALIGN_SERVER") or None
    if server:
        url = urlsplit(server if "://" in server else f"http://{server}")
        try:
            port = url.port or (443 if url.scheme == "https" else 80)
        except ValueError:
            port = None
        if url.hostname in _LOOPBACK and port is not None:
            return _local(port, f"{url.hostname}:{port} (--server)", sure=sure)
        return Route(
            "remote",
            f"batchalign3 sends the job to {shlex.quote(server)}: its ffmpeg runs on that host, "
            "out of this machine's janitor's reach",
            "run the janitor and the guard on that host, or drop --server/BATCHALIGN_SERVER "
            "to run the job here",
            sure=sure,
        )
    config = batchalign3.server_config(env)
    where = f"127.0.0.1:{config.port}"
    if config.problem:
        where += f" ({config.problem})"
    return _local(config.port, where, sure=sure)
