"""What the janitor asks of a process, whatever the platform: when it started, whether it still
runs (the same one: pids are reused), and what it is. ``linux`` and ``portable`` answer it."""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from dataclasses import dataclass

__all__ = ["START_TOLERANCE_S", "ProcessInfo", "Processes"]

#: psutil derives start times from boot time and clock ticks; two readings of one process agree
#: to well under this, while a reused pid starts later by at least a scheduler tick.
START_TOLERANCE_S = 0.05


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

    def still_alive(self, pid: int, start: float | None) -> bool:
        """:meth:`alive`, for a process asked about again and again (every admission asks it of
        every live reservation's owner, under the ledger's writer lock): a backend may watch
        the processes it has seen alive and answer for them more cheaply. This one asks
        :meth:`alive` every time."""
        return self.alive(pid, start)

    @abstractmethod
    def info(self, pid: int) -> ProcessInfo | None:
        """pid, parent pid, executable and command line of ``pid``; None if it cannot be read."""
