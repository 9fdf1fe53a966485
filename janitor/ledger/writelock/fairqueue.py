"""The Linux writer lock: writers queue in arrival order before the ``flock``.

A plain ``flock`` is unfair under load: on unlock every waiter is woken and whichever process
happens to be on a CPU wins, so the process that just released usually takes it again and a
few unlucky ones wait tens of milliseconds. This backend therefore queues writers first, like a
ticket lock built from open-file-description (OFD) byte-range locks on the lock file
(``janitor.host.ofdlock``):

* a writer takes a ticket ``t`` (a counter in the file, read and bumped under a lock on byte 0)
  and locks slot byte ``t`` before it lets go of byte 0;
* it then waits for slot ``t - 1`` (its predecessor's) to be unlocked, and unlocks its own
  slot when it leaves.

The kernel drops a dead process's locks, so a crashed writer never blocks the queue. The queue
only orders writers: mutual exclusion still comes from the ``flock`` of ``FlockWriterLock``
taken after it, so a writer that gives up waiting in the queue (``timeout``) cannot let anyone
in early.

A blocking lock call cannot time out, so a waiter does not block on its predecessor's slot:
it rings a *doorbell* instead. Before its last try of the slot it binds a datagram socket in
Linux's abstract namespace named after the lock file and its ticket, then sleeps in ``recv``
with a timeout; a writer leaving the queue unlocks its slot and then sends one byte to its
successor's name. The slot lock stays the truth: a doorbell only says "look again", and a lost
one (a predecessor killed, or in another network namespace) costs a re-check every
``_RECHECK_S``. This wakes the next writer's own thread directly, one hand-off per turn, where
a helper thread blocked in the lock call costs two wake-ups and several context switches, the
dearest thing on a machine with fewer cores than writers. Where no doorbell can be bound, the
wait runs in a helper thread, as the ``flock``'s does.

A writer that gets the lock also rings its successor once, "ready": the next writer wakes while
the holder works and polls the slot (yielding the CPU between tries) for up to ``_SPIN_S``
before it sleeps again. Waking a sleeping process costs more than the turn itself on a virtual
machine whose idle vCPU has halted (measured 110-220 us per hand-off, the lock idle 40 % of the
time with 8 writers on 2 vCPUs); a successor already awake takes the lock the moment it is let
go. Only the one next in line polls, for about one turn.
"""

from __future__ import annotations

import errno
import os
import socket
import threading
import time
from pathlib import Path

from janitor.host.ofdlock import AVAILABLE, lock_byte, try_lock_byte, unlock_byte
from janitor.ledger.writelock.flock import FlockWriterLock

__all__ = ["OFD_LOCKS", "FairQueueWriterLock"]

#: True where the kernel interface exists (Linux); ``janitor.ledger.writelock`` also honours
#: ``JANITOR_PORTABLE`` when it picks the backend.
OFD_LOCKS = AVAILABLE
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


class _Turn(threading.local):
    """One thread's place in the queue, and its doorbells."""

    slot: int | None = None
    bells: bytes = b""  # the lock file's doorbell names start with this
    ringer: socket.socket | None = None  # sends doorbells; opened on first use


class FairQueueWriterLock(FlockWriterLock):
    """The ``flock``, taken in arrival order: a writer first waits for the one before it."""

    def __init__(self, path: Path, *, timeout: float) -> None:
        super().__init__(path, timeout=timeout)
        self._turn = _Turn()

    def _acquire(self, fd: int, deadline: float) -> bool:
        self._queue(fd, deadline)
        try:
            got = super()._acquire(fd, deadline)
        except BaseException:
            self._leave_queue(fd)  # the flock call failed: give our turn to the next
            raise
        if not got:
            self._leave_queue(fd)
            return False
        slot = self._turn.slot
        if slot is not None:
            self._ring(slot, _READY)
        return True

    def _release(self, fd: int) -> None:
        super()._release(fd)
        self._leave_queue(fd)

    def _opened(self, fd: int) -> None:
        turn = self._turn
        turn.slot = None
        if turn.ringer is not None:
            turn.ringer.close()
            turn.ringer = None
        st = os.fstat(fd)
        # Abstract names are per network namespace, not per file: the device and inode make
        # them this lock file's.
        turn.bells = b"\0space-janitor/%x/%x/" % (st.st_dev, st.st_ino)

    def _closing(self) -> None:
        turn = self._turn
        turn.slot = None
        if turn.ringer is not None:
            turn.ringer.close()
            turn.ringer = None

    # -- the queue -----------------------------------------------------------------------------

    def _queue(self, fd: int, deadline: float) -> None:
        """Take a ticket and wait until every writer that came before has left."""
        lock_byte(fd, 0)  # held for microseconds by anyone
        try:
            raw = os.pread(fd, 8, _COUNTER)
            ticket = int.from_bytes(raw, "little") if len(raw) == 8 else 0
            os.pwrite(fd, ((ticket + 1) % _SLOT_SPAN).to_bytes(8, "little"), _COUNTER)
            slot = _SLOTS + ticket % _SLOT_SPAN
            # Locked before byte 0 is let go: a successor can only wait on a slot already held.
            lock_byte(fd, slot)
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                # No room for the counter: skip the queue; the flock alone still excludes.
                return
            raise
        finally:
            unlock_byte(fd, 0)
        self._turn.slot = slot
        before = _SLOTS + (ticket - 1) % _SLOT_SPAN
        if not try_lock_byte(fd, before):
            bell = self._doorbell(ticket)
            if bell is not None:
                with bell:
                    if not self._await_turn(fd, before, bell, deadline):
                        return  # past the deadline the queue's order is given up on
            elif not self._wait(
                lambda: lock_byte(fd, before),
                lambda: unlock_byte(fd, before),
                deadline,
            ):
                return  # likewise: the flock decides
        unlock_byte(fd, before)

    def _doorbell(self, ticket: int) -> socket.socket | None:
        """A socket bound to ticket's doorbell name, or None if none can be (then block)."""
        try:
            bell = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        except OSError:
            return None
        try:
            bell.bind(self._turn.bells + b"%x" % ticket)
        except OSError:
            bell.close()  # the name is taken (by a stranger, or a ticket from long ago)
            return None
        return bell

    def _await_turn(self, fd: int, before: int, bell: socket.socket, deadline: float) -> bool:
        """Lock slot ``before`` once its writer leaves; False at the deadline (not locked).

        The doorbell is bound before the first try here, so a predecessor that leaves after
        that try rings a bell that is already listening: no wake-up can fall in between.
        """
        while not try_lock_byte(fd, before):
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
                    if try_lock_byte(fd, before):
                        return True
                    os.sched_yield()
        return True

    def _leave_queue(self, fd: int) -> None:
        slot, self._turn.slot = self._turn.slot, None
        if slot is None:
            return
        unlock_byte(fd, slot)
        # Ring the successor's doorbell, after the unlock it announces.
        self._ring(slot, _GO)

    def _ring(self, slot: int, message: bytes) -> None:
        """Send ``message`` to the doorbell of the writer after the one in ``slot``.

        Nobody listening (no successor yet, or one that found the slot free on its own) is the
        usual reply.
        """
        turn = self._turn
        try:
            if turn.ringer is None:
                turn.ringer = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
                turn.ringer.setblocking(False)
            turn.ringer.sendto(message, turn.bells + b"%x" % ((slot - _SLOTS + 1) % _SLOT_SPAN))
        except OSError:
            pass  # refused, not found, queue full ...: the successor re-checks on its own
