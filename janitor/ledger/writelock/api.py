"""The writer lock's interface: the workflow every backend shares, and the two hooks it needs.

``BaseWriterLock`` owns what does not depend on how the lock is taken: each thread's own
descriptor of the lock file (flock and OFD locks belong to the open file, so threads of one
process, the daemon's, must not share one; a forked child opens its own), the deadline and the
error when it passes, release, close and the context manager. A backend says only how to take
the lock by a deadline (``_acquire``) and how to let it go (``_release``), as filelock's
``BaseFileLock`` leaves ``_acquire``/``_release`` to its platform classes.
"""

from __future__ import annotations

import errno
import os
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Self

from janitor.errors import LedgerBusy, LedgerError, LedgerFull
from janitor.ledger.writelock.waiter import Descriptor, Waiter

__all__ = ["BaseWriterLock"]


class _ThreadState(threading.local):
    fd: Descriptor | None = None
    pid: int = 0
    waiter: Waiter | None = None


class BaseWriterLock(ABC):
    """The exclusive lock on ``path``, for every thread of every process that opens it."""

    def __init__(self, path: Path, *, timeout: float) -> None:
        self.path = path
        self.timeout = timeout
        self._local = _ThreadState()

    def acquire(self) -> None:
        """Block until this thread holds the lock; LedgerError after ``timeout`` seconds."""
        fd = self._fd()
        if not self._acquire(fd, time.monotonic() + self.timeout):
            raise LedgerBusy(
                f"the ledger's lock {self.path} stayed held for {self.timeout:g}s; another "
                "process holds it (raise lock_timeout_s or find the stuck process)"
            )

    def release(self) -> None:
        """Let the next writer in."""
        desc = self._local.fd
        if desc is not None:
            self._release(desc.fd)

    def close(self) -> None:
        """Close this thread's descriptor (which drops any lock it still holds)."""
        desc, self._local.fd = self._local.fd, None
        self._closing()
        if desc is not None:
            desc.close()

    def __enter__(self) -> Self:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    # -- what a backend provides ---------------------------------------------------------------

    @abstractmethod
    def _acquire(self, fd: int, deadline: float) -> bool:
        """Take the lock through ``fd`` by ``deadline`` (``time.monotonic``); False if it stayed
        held, with nothing of it kept."""

    @abstractmethod
    def _release(self, fd: int) -> None:
        """Let go of the lock taken through ``fd``."""

    def _opened(self, fd: int) -> None:  # noqa: B027 (a hook: most backends need nothing here)
        """This thread has a new descriptor (first use, after a fork, or after close)."""

    def _closing(self) -> None:  # noqa: B027
        """This thread's descriptor is about to be closed."""

    # -- for backends --------------------------------------------------------------------------

    def _fd(self) -> int:
        """This thread's descriptor of the lock file, opened on first use (and in a child)."""
        local = self._local
        if local.fd is not None and local.pid == os.getpid():
            return local.fd.fd
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                raise LedgerFull(
                    f"the ledger's disk is full ({self.path.parent}): nothing was changed (no "
                    "grant, no deletion); free some space there and retry"
                ) from None
            raise LedgerError(
                f"cannot open the ledger's lock file {self.path}: {exc.strerror}; "
                "check the permissions of JANITOR_STATE_DIR"
            ) from None
        local.fd, local.pid, local.waiter = Descriptor(fd), os.getpid(), None
        self._opened(fd)
        return fd

    def _wait(self, call: Callable[[], None], undo: Callable[[], None], deadline: float) -> bool:
        """Make the blocking lock call ``call`` in a helper thread, so it can time out: True
        once it returned, False at ``deadline`` (``undo`` then runs once it does return)."""
        local = self._local
        if local.waiter is None:
            local.waiter = Waiter()
        assert local.fd is not None
        if local.waiter.wait(call, undo, max(0.0, deadline - time.monotonic()), local.fd):
            return True
        local.waiter = None  # still blocked in its call: the next wait needs a fresh one
        return False
