"""The portable writer lock: a plain ``flock`` (macOS, and Linux with ``JANITOR_PORTABLE=1``).

It excludes, but does not order: on unlock every waiter is woken and whichever process happens
to be on a CPU wins. A wait that may block runs in a helper thread, so it can time out with a
clear error.
"""

from __future__ import annotations

from janitor.host import flock
from janitor.ledger.writelock.api import BaseWriterLock

__all__ = ["FlockWriterLock"]


class FlockWriterLock(BaseWriterLock):
    """The writer lock as an exclusive ``flock`` on the lock file."""

    def _acquire(self, fd: int, deadline: float) -> bool:
        if flock.try_lock(fd):
            return True
        return self._wait(lambda: flock.lock(fd), lambda: flock.unlock(fd), deadline)

    def _release(self, fd: int) -> None:
        flock.unlock(fd)
