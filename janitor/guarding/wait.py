"""A queued call's turn: admitted in its turn, by its deadline, or refused with the wait.

A call queued by its grant (:class:`~janitor.guarding.queue.Queued`) waits here: tried again
whenever space is freed on the machine (a release, a job's end: ``Janitor.space``) and every
:data:`POLL_S` anyway; room is made again every :data:`ROOM_EVERY_S`, and every
:data:`HOPE_EVERY_S` it asks whether the space it waits for can still come. The wait ends at
the deadline :func:`~janitor.guarding.prepare.prepare` fixed as the call came in: one deadline,
however the call is handed on. :func:`open_writes` is the whole flow in one process.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from janitor.errors import ReservationRefused
from janitor.guarding.close import give_back
from janitor.guarding.grant import grant
from janitor.guarding.held import WriteSession
from janitor.guarding.prepare import prepare
from janitor.guarding.queue import Queued, cannot_wait, make_room

if TYPE_CHECKING:
    from janitor.core import Janitor
    from janitor.guarding.prepare import Prepared
    from janitor.guarding.request import CallRequest
    from janitor.ledger.tx import Tx

__all__ = ["HOPE_EVERY_S", "POLL_S", "ROOM_EVERY_S", "log_refuse_error", "open_writes", "wait"]

#: How often a waiting call looks again without being told (no daemon to tell it), and how
#: often it tries to make room by evicting caches while it is first in line.
POLL_S = 1.0
ROOM_EVERY_S = 10.0
#: How often a waiting call asks whether what it waits for can still come.
HOPE_EVERY_S = 2.0


def wait(
    jan: Janitor,
    prep: Prepared,
    ticket: str,
    *,
    still_wanted: Callable[[], bool] = lambda: True,
) -> WriteSession:
    """Admit a queued call in its turn, by its deadline: tried again whenever space is
    freed here (a release, a job's end: ``jan.space``) and every POLL_S anyway; room is made
    again every ROOM_EVERY_S, and every HOPE_EVERY_S it asks whether the space it waits for
    can still come (the work it counted on may have ended without giving enough back).
    ReservationRefused (with the seconds waited) when time is up, or waiting cannot help.

    ``still_wanted()`` False (the caller is gone) ends the wait at once.
    """
    started = time.monotonic()
    deadline = prep.deadline  # fixed as the call came in: never restarted here
    last_room = last_hope = started
    with jan.ledger.read() as tx:
        place = tx.waiters.get(ticket)
    try:
        while True:
            try:
                session = grant(jan, prep, ticket=ticket)
            except ReservationRefused as exc:
                now = time.monotonic()
                final: ReservationRefused | None = None
                if now >= deadline or not still_wanted():
                    final = exc
                elif place is not None and now - last_hope >= HOPE_EVERY_S:
                    last_hope = now
                    final = cannot_wait(jan, prep, exc, place.device, place.bytes)
                if final is not None:
                    give_back(jan, prep)
                    final = _waited(final, now - started)
                    jan.ledger.call(log_refuse_error, final, prep.request.job, time.time())
                    raise final from None
                if now - last_room >= ROOM_EVERY_S:
                    last_room = now
                    make_room(jan, prep, exc.tree, exc.requested)
                jan.space.wait(min(POLL_S, deadline - now))
                continue
            waited = time.monotonic() - started
            return WriteSession(
                session.writes, session.pins, session.unguarded, session.jobs, waited,
                session.draws,
            )  # fmt: skip
    finally:
        jan.ledger.call(lambda tx: tx.waiters.remove(ticket))
        jan.space.notify()  # the next in line


def log_refuse_error(tx: Tx, exc: ReservationRefused, job: str | None, ts: float) -> None:
    """The log line of a refusal after a wait (one per wait, not one per poll)."""
    tx.log.add(
        "refuse", tree=exc.tree, nbytes=exc.requested, path=exc.output, ts=ts, free=exc.free,
        floor=exc.floor, reserved=exc.reserved, job=job, queued=exc.queued,
        waited_s=round(exc.waited_s, 3),
    )  # fmt: skip


def _waited(exc: ReservationRefused, seconds: float) -> ReservationRefused:
    """The same refusal, after ``seconds`` of waiting for room."""
    return ReservationRefused.from_dict({**exc.as_dict(), "waited_s": seconds})


def open_writes(
    jan: Janitor, req: CallRequest, *, on_wait: Callable[[str], None] | None = None
) -> WriteSession:
    """Prepare, grant, and wait in turn if need be: the whole flow in one process, for a
    caller that needs no verdict. ``on_wait(message)`` is told once when the call starts to
    wait."""
    prep = prepare(jan, req)
    try:
        return grant(jan, prep)
    except Queued as q:
        if on_wait is not None:
            on_wait(q.message)
        return wait(jan, prep, q.ticket)
