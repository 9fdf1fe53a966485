"""Owner processes: who holds a reservation or a pin, whether it still lives, and which process
a command-line user means (:func:`choose_owner`).

A pid alone is not an identity (pids are reused), so an owner is a pid plus the process's start
time; a zombie counts as dead, since it will never write again. On Linux both come from
/proc; psutil answers elsewhere, imported only there (the CLI's commands start faster).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from janitor.host.fastpaths import LINUX

__all__ = [
    "LAUNCHERS",
    "SHELLS",
    "Owner",
    "ProcessInfo",
    "choose_owner",
    "is_alive",
    "process_info",
    "process_start",
]

_PROC = LINUX and os.path.isdir("/proc/self")

# psutil derives start times from boot time and clock ticks; two readings of one process agree
# to well under this, while a reused pid starts later by at least a scheduler tick.
_START_TOLERANCE_S = 0.05


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_boot_time: float | None = None


def _proc_stat(pid: int) -> list[bytes] | None:
    """The fields of /proc/PID/stat after the name; [] when no such process; None: cannot tell."""
    # os.open/os.read rather than open(): no buffered file object, half the cost; admission
    # asks this of every live owner while it holds the ledger's writer lock.
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return []
    except OSError:
        return None
    try:
        data = os.read(fd, 4096)
    except ProcessLookupError:
        return []  # the process exited between open and read
    except OSError:
        return None
    finally:
        os.close(fd)
    # The command name may hold spaces and parentheses: fields start after the last ')'.
    fields = data[data.rfind(b")") + 2 :].split()
    return fields if len(fields) > 19 else None


def _btime() -> float:
    """Boot time as psutil reads it on Linux (``btime`` in /proc/stat), without importing psutil
    (a tenth of a CLI command's start-up)."""
    try:
        with open("/proc/stat", "rb") as f:
            for line in f:
                if line.startswith(b"btime "):
                    return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    import psutil

    return float(psutil.boot_time())


def _started(fields: list[bytes]) -> float:
    """Start time from /proc/PID/stat as psutil computes it: boot time + starttime ticks."""
    global _boot_time
    if _boot_time is None:
        _boot_time = _btime()
    return _boot_time + int(fields[19]) / _CLOCK_TICKS


def _proc_alive(pid: int, start: float | None) -> bool | None:
    """Linux fast path: one read of /proc/PID/stat (psutil costs several). None: cannot tell."""
    fields = _proc_stat(pid)
    if fields is None:
        return None
    if not fields or fields[0] in (b"Z", b"X"):
        return False  # a zombie never writes again
    if start is None or start < 0:
        return True
    return abs(_started(fields) - start) < _START_TOLERANCE_S


def process_start(pid: int) -> float | None:
    """The start time of process ``pid`` (epoch seconds), or None if there is no such process."""
    if pid == os.getpid():
        # Our own start never changes; every reserve asks for it. Keyed by pid for fork().
        cached = _own_start.get(pid)
        if cached is None:
            cached = _own_start[pid] = _process_start(pid)
        return cached
    return _process_start(pid)


_own_start: dict[int, float | None] = {}


def _process_start(pid: int) -> float | None:
    if _PROC:
        fields = _proc_stat(pid)
        if fields is not None:
            if not fields or fields[0] in (b"Z", b"X"):
                return None  # gone, or a zombie that will never write again
            return _started(fields)
    import psutil

    try:
        return float(psutil.Process(pid).create_time())
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return None
    except psutil.AccessDenied:
        return None if not psutil.pid_exists(pid) else -1.0


def is_alive(pid: int, start: float | None) -> bool:
    """True while process ``pid`` runs and, when ``start`` is known, is the same process."""
    if pid <= 0:
        return False
    if _PROC:
        fast = _proc_alive(pid, start)
        if fast is not None:
            return fast
    import psutil

    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            if proc.status() == psutil.STATUS_ZOMBIE:  # never writes again
                return False
            if start is None or start < 0:
                return True
            return bool(abs(proc.create_time() - start) < _START_TOLERANCE_S)
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False
    except psutil.AccessDenied:
        # Another user's process: it exists, and we cannot tell its start time.
        return bool(psutil.pid_exists(pid))


# -- choosing the owner a command-line user means --------------------------------------------

#: Shells: a forked copy of one (what `$(...)`, a pipe, `( ... )` or `&` makes) exits as soon
#: as the command it waits for does, so it is never the owner.
SHELLS = frozenset(
    {"sh", "bash", "dash", "zsh", "ksh", "ksh93", "mksh", "oksh", "ash", "busybox", "yash",
     "posh", "fish", "tcsh", "csh"}
)  # fmt: skip
#: Launchers that only wait for the command they start and exit with it.
LAUNCHERS = frozenset(
    {"timeout", "flock", "xargs", "uv", "uvx", "poetry", "pipenv", "pdm", "hatch", "rye", "pipx",
     "conda", "mamba", "micromamba", "pixi"}
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class ProcessInfo:
    """What the owner rule needs to know of one process."""

    pid: int
    ppid: int
    exe: str
    cmdline: tuple[str, ...]

    @property
    def name(self) -> str:
        """The executable's file name (``bash``), or the command's first word."""
        base = os.path.basename(self.exe) if self.exe else ""
        if not base and self.cmdline:
            base = os.path.basename(self.cmdline[0]).lstrip("-")  # "-bash": a login shell
        return base

    def describe(self) -> str:
        """``bash /home/me/jobs/script.sh``: the command line for a message; a long one shows
        paths by their file names (``bash script.sh``) and is cut at 80 characters."""
        text = " ".join(self.cmdline) or self.exe or "?"
        if len(text) > 80:
            text = " ".join(os.path.basename(a) if "/" in a else a for a in self.cmdline)
        return text if len(text) <= 80 else text[:77] + "..."


@dataclass(frozen=True, slots=True)
class Owner:
    """The process chosen to own a reservation or pin, and what a message should say of it."""

    pid: int
    start: float | None
    description: str
    warning: str | None = None


def process_info(pid: int) -> ProcessInfo | None:
    """pid, parent pid, executable and command line of ``pid``; None if it cannot be read."""
    if _PROC:
        fields = _proc_stat(pid)
        if fields:
            try:
                exe = os.readlink(f"/proc/{pid}/exe")
            except OSError:
                exe = ""
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    raw = f.read()
            except OSError:
                raw = b""
            args = tuple(os.fsdecode(a) for a in raw.split(b"\0") if a)
            return ProcessInfo(pid, int(fields[1]), exe.removesuffix(" (deleted)"), args)
        if fields is not None:
            return None
    import psutil

    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            ppid = proc.ppid()
            try:
                exe = proc.exe()
            except (psutil.AccessDenied, psutil.ZombieProcess, OSError):
                exe = ""
            try:
                args = tuple(proc.cmdline())
            except (psutil.AccessDenied, psutil.ZombieProcess, OSError):
                args = ()
        return ProcessInfo(pid, ppid, exe, args)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def _transient(proc: ProcessInfo, parent: ProcessInfo) -> bool:
    """True for a go-between that exits as soon as the command it runs does."""
    if proc.name in LAUNCHERS:
        return True
    if proc.name not in SHELLS:
        return False
    # A forked copy: same program, same command line as its parent (it never exec'd).
    return bool(proc.exe) and proc.exe == parent.exe and proc.cmdline == parent.cmdline


def choose_owner(start_pid: int | None = None) -> Owner:
    """The owner a command-line user means: the process that ran ``janitor`` (``start_pid``,
    default our parent), skipping go-betweens that exit as soon as janitor does.

    A go-between is a shell that is a forked copy of its parent (what ``$(...)``, a pipe,
    ``( ... )`` and ``&`` make: same executable and command line as its parent) or a launcher
    that only waits for its child (``timeout``, ``flock``, ``xargs``, ``uv run``, ...). So
    ``id=$(janitor reserve ...)`` in ``script.sh`` is owned by ``bash script.sh``, and a Python
    worker that runs the CLI with subprocess (even a forked multiprocessing worker) by that
    worker. ``warning`` says when the owner found is gone already or is init, for then only
    the TTL or a release ends the reservation.
    """
    pid = os.getppid() if start_pid is None else start_pid
    proc = process_info(pid)
    hops = 0
    while proc is not None and proc.ppid > 1 and hops < 64:
        parent = process_info(proc.ppid)
        if parent is None or not _transient(proc, parent):
            break
        proc, hops = parent, hops + 1
    owner_pid = pid if proc is None else proc.pid
    start = process_start(owner_pid)
    warning = None
    description = "?" if proc is None else proc.describe()
    if start is None:
        warning = (
            f"the process that ran janitor (pid {owner_pid}) has exited already, so init owns "
            "this: only the TTL or a release ends it; pass --owner-pid to tie it to a process "
            "that lives"
        )
        owner_pid, start, description = 1, process_start(1), "init"
    elif owner_pid == 1:
        warning = (
            "janitor was started by init (the process that ran it has exited); only the TTL or "
            "a release ends this; pass --owner-pid to tie it to a process that lives"
        )
    return Owner(owner_pid, start, description, warning)
