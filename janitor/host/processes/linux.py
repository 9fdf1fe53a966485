"""The process table from Linux's ``/proc``: one read of ``/proc/PID/stat`` where psutil costs
several (admission asks this of every live owner while it holds the ledger's writer lock), and
a pidfd on each owner seen alive, so asking about it again is one ``poll``. Where ``/proc``
cannot tell (another user's hidden process), psutil's answer is taken.

A start read here carries the boot time it was read with, so that it names its process across
a step of the wall clock (:mod:`janitor.host.processes.ticks`)."""

from __future__ import annotations

import os
import select
import threading
from collections.abc import Callable

from janitor.host.processes.api import ProcessInfo
from janitor.host.processes.portable import PortableProcesses
from janitor.host.processes.ticks import encode_start, read_btime, same_ticks, started_before

__all__ = ["LinuxProcesses"]


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


class _PidfdWatch:
    """Whether processes live, cheap enough to ask for every live reservation under the
    ledger's writer lock.

    The first time a process ``(pid, start)`` is seen, ``check`` (the full way: the pid runs,
    is no zombie, and started at ``start``) asks about it and a pidfd is opened on it. A pidfd
    names that very process, never a later one with its pid, and polls readable once it has
    exited (a zombie included), so every later ask is one ``poll(0)``, not an open, read and
    parse of ``/proc/PID/stat``. A few hundred processes are watched at most (the oldest
    first seen is dropped); past that, or for a process that cannot be watched, each ask is
    ``check``. Shared by the threads of a process; a forked child starts afresh.
    """

    _LIMIT = 256

    def __init__(self, check: Callable[[int, float | None], bool]) -> None:
        self._check = check
        self._guard = threading.Lock()
        self._pid = os.getpid()
        self._polls: dict[tuple[int, float], tuple[int, select.poll]] = {}

    def alive(self, pid: int, start: float | None) -> bool:
        """True while ``pid`` runs and is the process that started at ``start``."""
        if start is None or start < 0 or pid <= 0:
            return self._check(pid, start)
        key = (pid, start)
        with self._guard:
            if self._pid != os.getpid():  # a forked child: its copies of our pidfds are its own
                self._forget()
                self._pid = os.getpid()
            watched = self._polls.get(key)
            if watched is not None:
                if not watched[1].poll(0):
                    return True
                del self._polls[key]
                os.close(watched[0])
                return False
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            return self._check(pid, start)  # no such process (dead), not a leader, no pidfds ...
        # Opened first, checked second: if the pid changed hands in between, the check
        # sees the newcomer's start time and says dead, whichever process the pidfd names.
        try:
            if not self._check(pid, start):
                os.close(fd)
                return False
            poller = select.poll()
            poller.register(fd, select.POLLIN)
        except BaseException:
            os.close(fd)
            raise
        with self._guard:
            if self._pid != os.getpid() or key in self._polls:
                os.close(fd)  # another thread watched it first, or we forked meanwhile
                return True
            self._polls[key] = (fd, poller)
            if len(self._polls) > self._LIMIT:
                oldest = next(iter(self._polls))
                os.close(self._polls.pop(oldest)[0])
        return True

    def _forget(self) -> None:
        for fd, _ in self._polls.values():
            try:
                os.close(fd)
            except OSError:
                pass
        self._polls.clear()


class LinuxProcesses(PortableProcesses):
    """``/proc`` first; psutil only where ``/proc`` cannot tell; pidfds for processes asked
    about again and again."""

    def __init__(self, btime: Callable[[], int] = read_btime) -> None:
        """``btime``: how boot time is read (once, on first use: one process reads one boot
        time for every start it reads, so its own readings compare exactly)."""
        self._read_btime = btime
        self._boot_time: int | None = None
        pidfds = hasattr(os, "pidfd_open") and hasattr(select, "poll")
        self._watch = _PidfdWatch(self.alive) if pidfds else None

    def _started(self, fields: list[bytes]) -> float:
        """Start time as psutil computes it (boot time + starttime clock ticks), carrying the
        boot time it was read with (:func:`encode_start`)."""
        if self._boot_time is None:
            self._boot_time = self._read_btime()
        return encode_start(self._boot_time, int(fields[19]))

    def same_start(self, recorded: float, seen: float) -> bool:
        return same_ticks(recorded, seen)

    def started_before(self, seen: float, recorded: float) -> bool:
        return started_before(seen, recorded)

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
        return same_ticks(start, self._started(fields))

    def still_alive(self, pid: int, start: float | None) -> bool:
        if self._watch is None:
            return self.alive(pid, start)
        return self._watch.alive(pid, start)

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
        start = None if fields[0] in (b"Z", b"X") else self._started(fields)
        return ProcessInfo(
            pid, int(fields[1]), exe.removesuffix(" (deleted)"), args, start, int(fields[2])
        )

    def group(self, pgid: int) -> dict[int, ProcessInfo] | None:
        # One read of /proc/PID/stat per process (no psutil): a few milliseconds for a few
        # hundred processes, asked only of a job whose every recorded process died.
        try:
            names = os.listdir("/proc")
        except OSError:
            return super().group(pgid)
        wanted = str(pgid).encode()
        found: dict[int, ProcessInfo] = {}
        for name in names:
            if not name.isdigit():
                continue
            fields = _stat(int(name))
            if not fields or fields[2] != wanted or fields[0] in (b"Z", b"X"):
                continue  # gone, another group's, or a zombie that never writes again
            pid = int(name)
            found[pid] = ProcessInfo(pid, int(fields[1]), "", (), self._started(fields), pgid)
        return found
