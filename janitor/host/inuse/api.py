"""Is a file in use? What the deleter asks, whatever the platform; ``linux`` and ``portable``
answer it.

Two answers, for two moments. Before planning, ``open_inodes`` lists every ``(dev, ino)`` open
or memory-mapped by any process we can see (best effort where the OS hides other users'
processes). Right before a delete, ``lease`` asks the kernel itself where it can: a write lease
is granted only when no other process has the file open, and holding it makes a late opener
wait until the file is gone.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod

from janitor.host.flock import try_lock

__all__ = ["DELETER_FDS", "InUse", "lock_held"]

#: Descriptors the deleter itself holds open right now (to check and unlink a file): they are
#: left out of this process's open files, or every file would look in use while it is checked.
DELETER_FDS: set[int] = set()


def lock_held(name: str, dir_fd: int | None = None) -> bool:
    """True if another process holds a flock on the lock file (False if it does not exist)."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return False
    try:
        return not try_lock(fd)
    except OSError:
        return True
    finally:
        os.close(fd)  # closing drops our probe lock


class InUse(ABC):
    """One platform's way of telling whether files are in use."""

    @abstractmethod
    def open_inodes(self, devices: set[int] | None = None) -> frozenset[tuple[int, int]]:
        """``(dev, ino)`` of every file some process has open or mapped, and of every folder
        that is some process's working directory (a job's folder a process works in is in use
        though it has nothing open there), on ``devices`` if given (this process's
        ``DELETER_FDS`` left out)."""

    @abstractmethod
    def locked_inodes(self) -> frozenset[int] | None:
        """Inode numbers of the files some process holds a lock on; None where the system
        keeps no such list. Only a filter: a hit is confirmed with :func:`lock_held`."""

    @abstractmethod
    def prepare_leases(self) -> bool:
        """Make write leases safe in this process; whether :meth:`lease` can be used."""

    @property
    @abstractmethod
    def leases_ready(self) -> bool:
        """True once :meth:`prepare_leases` made leases usable here."""

    @abstractmethod
    def lease(self, fd: int) -> bool | None:
        """Take a write lease on open file ``fd`` (closing ``fd`` ends it): True when granted
        (no other process has the file open, and none can until it is closed), False when
        another process has it open, None when this filesystem grants none."""
