"""Whole-file advisory locks (``flock``) on a descriptor the caller opened: take now, wait, wait
until a deadline, let go.

The lock belongs to the open file description, so it lasts until ``unlock`` or until the last
descriptor to it is closed, and the kernel drops it when its process dies: a killed holder
leaves nothing to clean up. It is advisory: it excludes only those who ask for it. Every
``flock`` call of the package is here (the daemon's one-per-user lock, the sweeps' tree locks,
the ledger's writer lock, the probe of a cache entry's lock file), as
``janitor.host.ofdlock`` holds the byte-range locks of the ledger's fair queue.
"""

from __future__ import annotations

import fcntl
import time

__all__ = ["POLL_FIRST_S", "POLL_MAX_S", "lock", "lock_until", "try_lock", "unlock"]

#: :func:`lock_until` tries again after this long, doubling each time up to ``POLL_MAX_S``: a
#: lock held for a moment is taken within a millisecond; one held for minutes costs 20 tries
#: a second.
POLL_FIRST_S = 0.001
POLL_MAX_S = 0.05


def try_lock(fd: int) -> bool:
    """Take the exclusive lock on ``fd`` if no one else holds it now; False when someone does.
    Any other failure (``ENOLCK``, a bad descriptor) is raised as the ``OSError`` it is."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def lock(fd: int) -> None:
    """Take the exclusive lock on ``fd``, waiting as long as it takes (a call that cannot time
    out: run it in a thread of its own where a wait must be bounded)."""
    fcntl.flock(fd, fcntl.LOCK_EX)


def lock_until(fd: int, deadline: float) -> bool:
    """Take the exclusive lock on ``fd``, trying until ``deadline`` (``time.monotonic()``);
    False when it was still held then.

    It polls (a try, then a sleep from ``POLL_FIRST_S`` doubling up to ``POLL_MAX_S``) rather
    than blocking, so the wait is bounded without a helper thread and a signal is served at
    once: the locks waited on this way are held for seconds, by a sweep.
    """
    delay = POLL_FIRST_S
    while not try_lock(fd):
        if time.monotonic() > deadline:
            return False
        time.sleep(delay)
        delay = min(delay * 2, POLL_MAX_S)
    return True


def unlock(fd: int) -> None:
    """Let go of the lock on ``fd`` (the descriptor stays open)."""
    fcntl.flock(fd, fcntl.LOCK_UN)
