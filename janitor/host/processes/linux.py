"""The process table from Linux's ``/proc``: one read of ``/proc/PID/stat`` where psutil costs
several (admission asks this of every live owner while it holds the ledger's writer lock).
Where ``/proc`` cannot tell (another user's hidden process), psutil's answer is taken."""

from __future__ import annotations

import os

from janitor.host.processes.api import START_TOLERANCE_S, ProcessInfo
from janitor.host.processes.portable import PortableProcesses

__all__ = ["LinuxProcesses"]

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat(pid: int) -> list[bytes] | None:
    """The fields of /proc/PID/stat after the name; [] when no such process; None: cannot tell."""
    # os.open/os.read rather than open(): no buffered file object, half the cost.
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


class LinuxProcesses(PortableProcesses):
    """``/proc`` first; psutil only where ``/proc`` cannot tell."""

    def __init__(self) -> None:
        self._boot_time: float | None = None

    def _started(self, fields: list[bytes]) -> float:
        """Start time as psutil computes it: boot time + starttime clock ticks."""
        if self._boot_time is None:
            self._boot_time = _btime()
        return self._boot_time + int(fields[19]) / _CLOCK_TICKS

    def start(self, pid: int) -> float | None:
        fields = _stat(pid)
        if fields is None:
            return super().start(pid)
        if not fields or fields[0] in (b"Z", b"X"):
            return None  # gone, or a zombie that will never write again
        return self._started(fields)

    def alive(self, pid: int, start: float | None) -> bool:
        fields = _stat(pid)
        if fields is None:
            return super().alive(pid, start)
        if not fields or fields[0] in (b"Z", b"X"):
            return False  # a zombie never writes again
        if start is None or start < 0:
            return True
        return abs(self._started(fields) - start) < START_TOLERANCE_S

    def info(self, pid: int) -> ProcessInfo | None:
        fields = _stat(pid)
        if fields is None:
            return super().info(pid)
        if not fields:
            return None
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
