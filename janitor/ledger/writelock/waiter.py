"""Blocking lock calls that can time out: each runs in a helper thread the caller waits on.

A blocking ``flock`` or ``F_OFD_SETLKW`` cannot be given a timeout, so a waiter that must give
up after ``timeout`` seconds has a helper thread make the call. A call that returns after its
caller gave up is undone there at once, and the descriptor it used stays open until then even
if its owner closes it: a late unlock must never hit a reused descriptor number.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable

__all__ = ["Descriptor", "Waiter"]


class Descriptor:
    """One thread's descriptor of the lock file; closed only once no abandoned wait uses it."""

    __slots__ = ("closing", "fd", "guard", "pending")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.guard = threading.Lock()
        self.pending = 0
        self.closing = False

    def hold(self) -> None:
        with self.guard:
            self.pending += 1

    def finish(self) -> None:
        with self.guard:
            self.pending -= 1
            if self.closing and not self.pending:
                os.close(self.fd)

    def close(self) -> None:
        with self.guard:
            if self.pending:
                self.closing = True
            else:
                os.close(self.fd)


class _Request:
    __slots__ = ("call", "cancelled", "descriptor", "done", "error", "guard", "undo")

    def __init__(
        self, call: Callable[[], None], undo: Callable[[], None], descriptor: Descriptor
    ) -> None:
        self.call = call
        self.undo = undo
        self.descriptor = descriptor
        self.guard = threading.Lock()
        self.done = threading.Event()
        self.cancelled = False
        self.error: OSError | None = None


class Waiter:
    """A thread that makes blocking lock calls for one thread, so that thread can time out."""

    def __init__(self) -> None:
        self._requests: queue.SimpleQueue[_Request] = queue.SimpleQueue()
        threading.Thread(target=self._run, name="janitor-ledger-lock", daemon=True).start()

    def _run(self) -> None:
        while True:
            request = self._requests.get()
            try:
                request.call()
            except OSError as exc:
                request.error = exc
            with request.guard:
                if request.cancelled:
                    if request.error is None:
                        request.undo()  # the caller gave up before we got it: let go at once
                    request.descriptor.finish()
                request.done.set()

    def wait(
        self,
        call: Callable[[], None],
        undo: Callable[[], None],
        timeout: float,
        descriptor: Descriptor,
    ) -> bool:
        """Run ``call`` (blocking) here; True once it returned, False after ``timeout``.

        After False, ``undo`` runs here once ``call`` returns, and ``descriptor`` stays open
        until then even if its owner closes it: a late unlock must not hit a reused number.
        """
        request = _Request(call, undo, descriptor)
        self._requests.put(request)
        request.done.wait(timeout)
        with request.guard:
            if not request.done.is_set():
                request.cancelled = True
                descriptor.hold()
                return False
        if request.error is not None:
            raise request.error
        return True
