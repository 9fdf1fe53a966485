"""What the janitor asks of a process, whatever the platform: when it started, whether it still
runs (the same one: pids are reused), and what it is. ``linux`` and ``portable`` answer it."""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from dataclasses import dataclass

__all__ = ["ProcessInfo", "Processes", "same_start"]


def same_start(recorded: float, seen: float) -> bool:
    """True when two readings of a start time name one process: equal to the microsecond.

    The kernel gives a start exactly, and every reader turns it into the same epoch seconds:
    Linux counts clock ticks since boot (10 ms; ``/proc`` and psutil both add ``btime``), macOS
    keeps a ``timeval`` (1 µs). So no tolerance is allowed: a process given a dead one's pid
    30 ms later is another process (it once passed, within 50 ms). Only two processes that
    share a pid within one Linux tick look the same. Rounding to the microsecond absorbs no
    more than a float's last bit. Linux's ``btime`` moves with the wall clock, so two
    processes may read one start differently: :meth:`Processes.same_start` is the rule a
    backend applies to starts read apart (Linux's takes that move).
    """
    return round(recorded * 1_000_000) == round(seen * 1_000_000)


@dataclass(frozen=True, slots=True)
class ProcessInfo:
    """What the owner rule needs to know of one process: who it is (pid, start time), whose
    child it is now, its process group (its lineage once its parent is gone), and what it runs.
    ``start`` is None for a zombie, -1.0 where it cannot be read; ``pgid`` None if unknown."""

    pid: int
    ppid: int
    exe: str
    cmdline: tuple[str, ...]
    start: float | None = None
    pgid: int | None = None

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


class Processes(ABC):
    """One platform's way of reading the process table."""

    @abstractmethod
    def start(self, pid: int) -> float | None:
        """The start time of ``pid`` (epoch seconds); None if there is no such process (or
        only a zombie); -1.0 if it exists but its start time cannot be read."""

    @abstractmethod
    def alive(self, pid: int, start: float | None) -> bool:
        """True while ``pid`` runs (a zombie does not) and, when ``start`` is known (>= 0), is
        the process that started then."""

    def same_start(self, recorded: float, seen: float) -> bool:
        """True when two starts this backend read (maybe in two processes, a wall-clock step
        apart) name one process. Here: :func:`same_start`, to the microsecond."""
        return same_start(recorded, seen)

    def started_before(self, seen: float, recorded: float) -> bool:
        """True when the start ``seen`` (read now) is strictly earlier than ``recorded`` (read
        before, maybe by another process). Here: earlier, and not :func:`same_start`."""
        return seen < recorded and not same_start(seen, recorded)

    def still_alive(self, pid: int, start: float | None) -> bool:
        """:meth:`alive`, for a process asked about again and again (every admission asks it of
        every live reservation's owner, under the ledger's writer lock): a backend may watch
        the processes it has seen alive and answer for them more cheaply. This one asks
        :meth:`alive` every time."""
        return self.alive(pid, start)

    @abstractmethod
    def info(self, pid: int) -> ProcessInfo | None:
        """pid, parent pid, executable, command line, start time and process group of ``pid``,
        read together; None if it cannot be read."""

    @abstractmethod
    def group(self, pgid: int) -> dict[int, ProcessInfo] | None:
        """Every process of process group ``pgid`` that runs (zombies left out), by pid, with
        its parent, start time and group (executable and command line not read); None if the
        process table cannot be read."""

    def group_exists(self, pgid: int) -> bool:
        """True while process group ``pgid`` has a process (a zombie included): one
        ``kill(-pgid, 0)``, no walk of the process table."""
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True  # another user's processes hold it
        except OSError:
            return True  # cannot tell: as if it had one
        return True
