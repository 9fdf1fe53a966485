"""The ledger's writer lock: one writer at a time across processes, served in arrival order.

A plain ``flock`` is unfair under load: on unlock every waiter is woken and whichever process
happens to be on a CPU wins, so the process that just released usually takes it again and a
few unlucky ones wait tens of milliseconds. On Linux the lock therefore queues writers first,
like a ticket lock built from open-file-description (OFD) byte-range locks on the lock file:

* a writer takes a ticket ``t`` (a counter in the file, read and bumped under a lock on byte 0)
  and locks slot byte ``t`` before it lets go of byte 0;
* it then waits for slot ``t - 1`` (its predecessor's) to be unlocked, and unlocks its own
  slot when it leaves.

The kernel drops a dead process's locks, so a crashed writer never blocks the queue. The queue
only orders writers: mutual exclusion still comes from an ``flock`` taken after it, so a writer
that gives up waiting in the queue (``timeout``) cannot let anyone in early. Elsewhere (macOS
has no OFD locks) the lock is the ``flock`` alone.

A blocking lock call cannot time out, so a waiter does not block on its predecessor's slot:
it rings a *doorbell* instead. Before its last try of the slot it binds a datagram socket in
Linux's abstract namespace named after the lock file and its ticket, then sleeps in ``recv``
with a timeout; a writer leaving the queue unlocks its slot and then sends one byte to its
successor's name. The slot lock stays the truth: a doorbell only says "look again", and a lost
one (a predecessor killed, or in another network namespace) costs a re-check every
``_RECHECK_S``. This wakes the next writer's own thread directly, one hand-off per turn, where
a helper thread blocked in the lock call costs two wake-ups and several context switches, the
dearest thing on a machine with fewer cores than writers. Where no doorbell can be bound, and
for the ``flock``, a wait that may block runs in a helper thread, so it can time out with a
clear error.

A writer that gets the lock also rings its successor once, "ready": the next writer wakes while
the holder works and polls the slot (yielding the CPU between tries) for up to ``_SPIN_S``
before it sleeps again. Waking a sleeping process costs more than the turn itself on a virtual
machine whose idle vCPU has halted (measured 110-220 us per hand-off, the lock idle 40 % of the
time with 8 writers on 2 vCPUs); a successor already awake takes the lock the moment it is let
go. Only the one next in line polls, for about one turn.
"""

from __future__ import annotations

import errno
import fcntl
import os
import queue
import socket
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path

from janitor.errors import LedgerError, LedgerFull
from janitor.host.fastpaths import LINUX

__all__ = ["WriterLock"]

_OFD = LINUX and hasattr(fcntl, "F_OFD_SETLKW")
_SETLK = getattr(fcntl, "F_OFD_SETLK", 0)
_SETLKW = getattr(fcntl, "F_OFD_SETLKW", 0)
#: ``struct flock``: l_type, l_whence, l_start, l_len, l_pid (0 for OFD locks), padding.
_FLOCK = "@hhqqixxxx"
_COUNTER = 8  # offset of the 8-byte ticket counter (byte 0 is the ticket mutex)
_SLOTS = 1 << 20  # slot bytes start here; locks past the end of the file are fine
_SLOT_SPAN = 1 << 40
#: How often a waiter looks at its predecessor's slot with no doorbell rung (it died, or its
#: doorbell could not reach us): the most a lost doorbell delays the queue.
_RECHECK_S = 0.05
#: How long a writer told it is next polls its predecessor's slot before it sleeps again.
_SPIN_S = 0.002
#: Doorbell messages: the predecessor got the lock (get ready), or left it (go).
_READY, _GO = b"r", b"!"


def _range_lock(fd: int, kind: int, start: int, *, wait: bool) -> None:
    cmd = _SETLKW if wait else _SETLK
    fcntl.fcntl(fd, cmd, struct.pack(_FLOCK, kind, os.SEEK_SET, start, 1, 0))


class _Waiter:
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
        descriptor: _Descriptor,
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


class _Request:
    __slots__ = ("call", "cancelled", "descriptor", "done", "error", "guard", "undo")

    def __init__(
        self, call: Callable[[], None], undo: Callable[[], None], descriptor: _Descriptor
    ) -> None:
        self.call = call
        self.undo = undo
        self.descriptor = descriptor
        self.guard = threading.Lock()
        self.done = threading.Event()
        self.cancelled = False
        self.error: OSError | None = None


class _Descriptor:
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


class _ThreadState(threading.local):
    fd: _Descriptor | None = None
    pid: int = 0
    slot: int | None = None
    waiter: _Waiter | None = None
    bells: bytes = b""  # the lock file's doorbell names start with this
    ringer: socket.socket | None = None  # sends doorbells; opened on first use


class WriterLock:
    """The exclusive lock on ``path``, for every thread of every process that opens it.

    Each thread uses its own descriptor (flock and OFD locks belong to the open file, so threads
    of one process, the daemon's, must not share one); a forked child opens its own.
    """

    def __init__(self, path: Path, *, timeout: float) -> None:
        self.path = path
        self.timeout = timeout
        self._local = _ThreadState()

    def _fd(self) -> int:
        local = self._local
        if local.fd is not None and local.pid == os.getpid():
            return local.fd.fd
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                raise LedgerFull(
                    f"the ledger's disk is full ({self.path.parent}); nothing was granted, "
                    "free some space and retry"
                ) from None
            raise LedgerError(
                f"cannot open the ledger's lock file {self.path}: {exc.strerror}; "
                "check the permissions of JANITOR_STATE_DIR"
            ) from None
        local.fd, local.pid, local.slot, local.waiter = _Descriptor(fd), os.getpid(), None, None
        if local.ringer is not None:
            local.ringer.close()
            local.ringer = None
        st = os.fstat(fd)
        # Abstract names are per network namespace, not per file: the device and inode make
        # them this lock file's.
        local.bells = b"\0space-janitor/%x/%x/" % (st.st_dev, st.st_ino)
        return fd

    def _wait(self, call: Callable[[], None], undo: Callable[[], None], deadline: float) -> bool:
        local = self._local
        if local.waiter is None:
            local.waiter = _Waiter()
        assert local.fd is not None
        if local.waiter.wait(call, undo, max(0.0, deadline - time.monotonic()), local.fd):
            return True
        local.waiter = None  # still blocked in its call: the next wait needs a fresh one
        return False

    def acquire(self) -> None:
        """Block until this thread holds the lock; LedgerError after ``timeout`` seconds."""
        fd = self._fd()
        deadline = time.monotonic() + self.timeout
        if _OFD:
            self._queue(fd, deadline)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                got = self._wait(
                    lambda: fcntl.flock(fd, fcntl.LOCK_EX),
                    lambda: fcntl.flock(fd, fcntl.LOCK_UN),
                    deadline,
                )
            except BaseException:
                self._leave_queue(fd)  # the flock call failed: give our turn to the next
                raise
            if not got:
                self._leave_queue(fd)
                raise LedgerError(
                    f"the ledger's lock {self.path} stayed held for {self.timeout:g}s; another "
                    "process holds it (raise lock_timeout_s or find the stuck process)"
                ) from None
        self._ring_successor(_READY)

    def release(self) -> None:
        """Let the next writer in."""
        desc = self._local.fd
        if desc is None:
            return
        fcntl.flock(desc.fd, fcntl.LOCK_UN)
        self._leave_queue(desc.fd)

    def close(self) -> None:
        """Close this thread's descriptor (which drops any lock it still holds)."""
        desc, self._local.fd = self._local.fd, None
        self._local.slot = None
        if self._local.ringer is not None:
            self._local.ringer.close()
            self._local.ringer = None
        if desc is not None:
            desc.close()

    # -- the queue (Linux) ---------------------------------------------------------------------

    def _queue(self, fd: int, deadline: float) -> None:
        """Take a ticket and wait until every writer that came before has left."""
        _range_lock(fd, fcntl.F_WRLCK, 0, wait=True)  # held for microseconds by anyone
        try:
            raw = os.pread(fd, 8, _COUNTER)
            ticket = int.from_bytes(raw, "little") if len(raw) == 8 else 0
            os.pwrite(fd, ((ticket + 1) % _SLOT_SPAN).to_bytes(8, "little"), _COUNTER)
            slot = _SLOTS + ticket % _SLOT_SPAN
            # Locked before byte 0 is let go: a successor can only wait on a slot already held.
            _range_lock(fd, fcntl.F_WRLCK, slot, wait=True)
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                # No room for the counter: skip the queue; the flock alone still excludes.
                return
            raise
        finally:
            _range_lock(fd, fcntl.F_UNLCK, 0, wait=False)
        self._local.slot = slot
        before = _SLOTS + (ticket - 1) % _SLOT_SPAN
        if not _try_lock(fd, before):
            bell = self._doorbell(ticket)
            if bell is not None:
                with bell:
                    if not self._await_turn(fd, before, bell, deadline):
                        return  # past the deadline the queue's order is given up on
            elif not self._wait(
                lambda: _range_lock(fd, fcntl.F_WRLCK, before, wait=True),
                lambda: _range_lock(fd, fcntl.F_UNLCK, before, wait=False),
                deadline,
            ):
                return  # likewise: the flock decides
        _range_lock(fd, fcntl.F_UNLCK, before, wait=False)

    def _doorbell(self, ticket: int) -> socket.socket | None:
        """A socket bound to ticket's doorbell name, or None if none can be (then block)."""
        try:
            bell = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        except OSError:
            return None
        try:
            bell.bind(self._local.bells + b"%x" % ticket)
        except OSError:
            bell.close()  # the name is taken (by a stranger, or a ticket from long ago)
            return None
        return bell

    def _await_turn(self, fd: int, before: int, bell: socket.socket, deadline: float) -> bool:
        """Lock slot ``before`` once its writer leaves; False at the deadline (not locked).

        The doorbell is bound before the first try here, so a predecessor that leaves after
        that try rings a bell that is already listening: no wake-up can fall in between.
        """
        while not _try_lock(fd, before):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            bell.settimeout(min(left, _RECHECK_S))
            try:
                rung = bell.recv(16)
            except TimeoutError:
                continue
            if rung == _READY:  # next in line: stay awake for about one turn
                end = min(time.monotonic() + _SPIN_S, deadline)
                while time.monotonic() < end:
                    if _try_lock(fd, before):
                        return True
                    os.sched_yield()
        return True

    def _leave_queue(self, fd: int) -> None:
        slot, self._local.slot = self._local.slot, None
        if slot is None:
            return
        _range_lock(fd, fcntl.F_UNLCK, slot, wait=False)
        # Ring the successor's doorbell, after the unlock it announces.
        self._ring(slot, _GO)

    def _ring_successor(self, message: bytes) -> None:
        slot = self._local.slot
        if slot is not None:
            self._ring(slot, message)

    def _ring(self, slot: int, message: bytes) -> None:
        """Send ``message`` to the doorbell of the writer after the one in ``slot``.

        Nobody listening (no successor yet, or one that found the slot free on its own) is the
        usual reply.
        """
        local = self._local
        try:
            if local.ringer is None:
                local.ringer = socket.socket(
                    socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC
                )
                local.ringer.setblocking(False)
            local.ringer.sendto(message, local.bells + b"%x" % ((slot - _SLOTS + 1) % _SLOT_SPAN))
        except OSError:
            pass  # refused, not found, queue full ...: the successor re-checks on its own


def _try_lock(fd: int, start: int) -> bool:
    """Take the write lock on byte ``start`` if it is free now."""
    try:
        _range_lock(fd, fcntl.F_WRLCK, start, wait=False)
    except OSError as exc:
        if exc.errno not in (errno.EAGAIN, errno.EACCES):
            raise
        return False
    return True
