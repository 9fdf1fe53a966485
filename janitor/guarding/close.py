"""The end of a guarded call: what it alone held, ended; its job's working set and pins stay.

A call that ran ends with :func:`close_writes` (through the daemon's ``POST
/v1/guard/release``, or in the guard's own process with :func:`close_released`, from the
``release`` its verdict named): its own reservations and pins, and its draws on its jobs'
working sets, after one ``wrote`` line per output in the log. A call refused or stopped
before it ran gives back the pins that were only its own (:func:`give_back`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from janitor.errors import UnknownPin, UnknownReservation

if TYPE_CHECKING:
    from janitor.core import Janitor
    from janitor.guarding.held import Written
    from janitor.guarding.prepare import Prepared
    from janitor.ledger.tx import Tx

__all__ = ["close_released", "close_writes", "give_back"]


def close_writes(
    jan: Janitor,
    reservations: Sequence[str],
    pins: Sequence[str],
    written: Sequence[Written] = (),
    *,
    job: str | None = None,
    run: str | None = None,
    draws: Sequence[str] = (),
) -> None:
    """End what a call alone held (those already ended are skipped; a job's stay) and its
    draws on its jobs' working sets (no longer in flight: what they wrote is in the folder),
    after one ``wrote`` line per output in the log: what ``janitor run`` sums up as written,
    whether the bytes were drawn on a reservation of the call's own or on its job's working
    set."""
    if written or draws:

        def note(tx: Tx) -> None:
            now = time.time()
            for w in written:
                tx.log.add("wrote", path=w.path, nbytes=w.bytes, ts=now, job=job, run=run)
            tx.draws.finish(list(draws))

        jan.ledger.call(note)
    for rid in reservations:
        try:
            jan.release(rid)
        except UnknownReservation:
            pass
    for pid in pins:
        try:
            jan.unpin(pid)
        except UnknownPin:
            pass


def close_released(jan: Janitor, release: Mapping[str, Any], written: Sequence[Written]) -> None:
    """:func:`close_writes` from a ``run`` verdict's ``release`` (the body a front end sends to
    ``POST /v1/guard/release``), as the guard ends a call it held through the ledger."""
    close_writes(
        jan, release.get("reservations", ()), release.get("pins", ()), written,
        job=release.get("job"), run=release.get("run"), draws=release.get("draws", ()),
    )  # fmt: skip


def give_back(jan: Janitor, prep: Prepared) -> None:
    """A refused call: the pins that were only the call's end now (a job's stay with it)."""
    for pin in prep.pins:
        try:
            jan.unpin(pin)
        except UnknownPin:
            pass
