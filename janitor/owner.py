"""Owner processes: who holds a reservation or a pin, and whether that process still lives.

A pid alone is not an identity (pids are reused), so an owner is a pid plus the process's start
time; a zombie counts as dead, since it will never write again. On Linux both come from
/proc; psutil answers elsewhere, imported only there (the CLI's commands start faster).
"""

from __future__ import annotations

import os

__all__ = ["is_alive", "process_start"]

_PROC = os.path.isdir("/proc/self")

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
