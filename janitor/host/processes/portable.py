"""The process table through psutil: what macOS (and ``JANITOR_PORTABLE=1``) uses. psutil is
imported on first use, not with this module (the CLI's commands start faster)."""

from __future__ import annotations

import os
import sys

from janitor.host.processes.api import Processes, ProcessInfo, same_start
from janitor.host.processes.ticks import coded, read_btime, same_ticks, started_before

__all__ = ["PortableProcesses"]

#: psutil reads a start on Linux from /proc (ticks plus btime) even in the portable mode.
_ON_LINUX = sys.platform.startswith("linux")


def _start(create_time: float, btime: int | None = None) -> float:
    """psutil's start of a process as this backend gives it: on Linux, carrying the boot time
    it was read with (:func:`janitor.host.processes.ticks.coded`), as the Linux backend's.
    ``btime``: one already read for a whole scan of the process table."""
    if not _ON_LINUX:
        return create_time
    return coded(create_time, read_btime() if btime is None else btime)


def _pgid(pid: int) -> int | None:
    """The process group of ``pid`` (POSIX ``getpgid``: psutil does not tell it); None if it
    cannot be read."""
    try:
        return os.getpgid(pid)
    except OSError:
        return None


class PortableProcesses(Processes):
    """psutil's answers."""

    def same_start(self, recorded: float, seen: float) -> bool:
        # On Linux psutil reads a start as /proc's ticks plus btime: given its code (_start),
        # compared as the Linux backend compares.
        return same_ticks(recorded, seen) if _ON_LINUX else same_start(recorded, seen)

    def started_before(self, seen: float, recorded: float) -> bool:
        if _ON_LINUX:
            return started_before(seen, recorded)
        return super().started_before(seen, recorded)

    def start(self, pid: int) -> float | None:
        import psutil

        try:
            proc = psutil.Process(pid)
            with proc.oneshot():
                if proc.status() == psutil.STATUS_ZOMBIE:  # as /proc says: it never writes again
                    return None
                return _start(float(proc.create_time()))
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            return None
        except psutil.AccessDenied:
            return None if not psutil.pid_exists(pid) else -1.0

    def alive(self, pid: int, start: float | None) -> bool:
        import psutil

        try:
            proc = psutil.Process(pid)
            with proc.oneshot():
                if proc.status() == psutil.STATUS_ZOMBIE:  # never writes again
                    return False
                if start is None or start < 0:
                    return True
                return self.same_start(start, _start(proc.create_time()))
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            return False
        except psutil.AccessDenied:
            # Another user's process: it exists, and we cannot tell its start time.
            return bool(psutil.pid_exists(pid))

    def info(self, pid: int) -> ProcessInfo | None:
        import psutil

        try:
            proc = psutil.Process(pid)
            with proc.oneshot():
                ppid = proc.ppid()
                try:
                    start: float | None = _start(float(proc.create_time()))
                    if proc.status() == psutil.STATUS_ZOMBIE:
                        start = None
                except (psutil.AccessDenied, psutil.ZombieProcess):
                    start = -1.0
                try:
                    exe = proc.exe()
                except (psutil.AccessDenied, psutil.ZombieProcess, OSError):
                    exe = ""
                try:
                    args = tuple(proc.cmdline())
                except (psutil.AccessDenied, psutil.ZombieProcess, OSError):
                    args = ()
            return ProcessInfo(pid, ppid, exe, args, start, _pgid(pid))
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return None

    def group(self, pgid: int) -> dict[int, ProcessInfo] | None:
        import psutil

        found: dict[int, ProcessInfo] = {}
        try:
            procs = list(psutil.process_iter(["ppid", "create_time", "status"]))
        except (psutil.Error, OSError):
            return None
        btime = read_btime() if _ON_LINUX else None  # once for the scan, not once a process
        for proc in procs:
            if _pgid(proc.pid) != pgid:
                continue
            info = proc.info
            if info.get("status") == psutil.STATUS_ZOMBIE or info.get("ppid") is None:
                continue  # a zombie never writes again; an entry gone meanwhile
            read = info.get("create_time")
            start = -1.0 if read is None else _start(float(read), btime)
            found[proc.pid] = ProcessInfo(proc.pid, int(info["ppid"]), "", (), start, pgid)
        return found
