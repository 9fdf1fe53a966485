"""Whole-file advisory locks (``flock``) on a descriptor the caller opened.

The lock belongs to the open file description, so it lasts until the last descriptor to it is
closed, and the kernel drops it when its process dies: a killed holder leaves nothing to clean
up. It is advisory: it excludes only those who ask for it (batchalign3's converter takes one on
``{fp}.wav.lock``; the deleter takes it too before removing the entry it guards).
"""

from __future__ import annotations

import fcntl

__all__ = ["try_lock"]


def try_lock(fd: int) -> bool:
    """Take the exclusive lock on ``fd`` if no one else holds it now; False when someone does.
    Any other failure (``ENOLCK``, a bad descriptor) is raised as the ``OSError`` it is."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True
