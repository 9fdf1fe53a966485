"""Write locks on single bytes of a file, owned by the open file description (Linux's OFD locks,
``F_OFD_SETLK`` and ``F_OFD_SETLKW``): take now, wait, let go.

Unlike classic POSIX record locks they belong to the open file (as ``flock``'s do), not to the
process, so two threads with two descriptors exclude each other and closing another descriptor
of the file drops nothing; unlike ``flock`` each byte is a lock of its own, so one file holds a
queue of them. The kernel drops them when the file's last descriptor closes, a dead process's
included. A byte past the end of the file can be locked. The ledger's fair queue
(``janitor.ledger.writelock.fairqueue``) is built of them. :data:`AVAILABLE` is False where
the kernel has none (macOS): nothing here may be called there.
"""

from __future__ import annotations

import errno
import fcntl
import os
import struct

__all__ = ["AVAILABLE", "lock_byte", "try_lock_byte", "unlock_byte"]

#: True where the kernel has OFD locks (Linux 3.15 and later); ``janitor.ledger.writelock``
#: also honours ``JANITOR_PORTABLE`` when it picks the backend.
AVAILABLE = hasattr(fcntl, "F_OFD_SETLKW")
_SETLK = getattr(fcntl, "F_OFD_SETLK", 0)
_SETLKW = getattr(fcntl, "F_OFD_SETLKW", 0)
#: ``struct flock``: l_type, l_whence, l_start, l_len, l_pid (0 for OFD locks), padding.
_FLOCK = "@hhqqixxxx"


def _set(fd: int, kind: int, start: int, *, wait: bool) -> None:
    cmd = _SETLKW if wait else _SETLK
    fcntl.fcntl(fd, cmd, struct.pack(_FLOCK, kind, os.SEEK_SET, start, 1, 0))


def lock_byte(fd: int, start: int) -> None:
    """Write-lock byte ``start`` of ``fd``'s file, waiting as long as it takes (run it in a
    thread of its own where a wait must be bounded)."""
    _set(fd, fcntl.F_WRLCK, start, wait=True)


def try_lock_byte(fd: int, start: int) -> bool:
    """Write-lock byte ``start`` if it is free now; False when another open file holds it.
    Any other failure is raised as the ``OSError`` it is."""
    try:
        _set(fd, fcntl.F_WRLCK, start, wait=False)
    except OSError as exc:
        if exc.errno not in (errno.EAGAIN, errno.EACCES):
            raise
        return False
    return True


def unlock_byte(fd: int, start: int) -> None:
    """Let go of byte ``start`` (nothing happens if this open file did not hold it)."""
    _set(fd, fcntl.F_UNLCK, start, wait=False)
