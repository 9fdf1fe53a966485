"""The portable writer lock: a plain ``flock`` (macOS, and Linux with ``JANITOR_PORTABLE=1``).

It excludes, but does not order: on unlock every waiter is woken and whichever process happens
to be on a CPU wins. A wait that may block runs in a helper thread, so it can time out with a
clear error.
"""

from __future__ import annotations

import fcntl

from janitor.ledger.writelock.api import BaseWriterLock

__all__ = ["FlockWriterLock"]


class FlockWriterLock(BaseWriterLock):
    """The writer lock as an exclusive ``flock`` on the lock file."""

    def _acquire(self, fd: int, deadline: float) -> bool:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return self._wait(
                lambda: fcntl.flock(fd, fcntl.LOCK_EX),
                lambda: fcntl.flock(fd, fcntl.LOCK_UN),
                deadline,
            )

    def _release(self, fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_UN)
