"""The queue of writes waiting for room on a volume: who may wait, and who may pass whom.

A job's first write that does not fit now may wait (``guard_wait_s``), but only for space that
will come: :func:`will_come` is what the running work on the volume gives back once it ends
(the live reservations: a job's whole working set, its folder removed with it; what any other
write has still to write) and what its caches hold (taken by make-room now, or once the pin or
awaiting-use mark on an entry ends). Other waiters give nothing back, and neither does what
no reservation or cache holds. A write that lacks more than that is refused at once
(:class:`~janitor.errors.WaitWontHelp`): waiting would only spend the job's time.

Among the waiters of a volume, the first in line (the *head*) is never delayed by those behind
it, and a waiter that cannot be served now does not hold back one behind it that can: Slurm's
backfill with a reservation for the head of the queue. A later write may be admitted ahead of
the head when, with its bytes taken, what the volume holds free plus what the work that ran
when the head began to wait gives back still covers the head (:func:`held_for_head`); so the
head is served no later than when that work ends, and a big job is never starved by small
ones passing it one after another (what they take comes from work that started after the head
queued, which the head's promise does not count on).

Everything here runs inside the caller's transaction.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from janitor.admission.reserve import live_reservations
from janitor.host.owner import still_alive
from janitor.host.space import allocated_size

if TYPE_CHECKING:
    from janitor.config.policy import Policy
    from janitor.ledger.tx import Tx

__all__ = ["Coming", "came_back", "had_room", "held_for_head", "will_come"]

#: How long a cache's measured size is reused: every admission on a volume where a call waits
#: asks it, under the ledger's writer lock, and a cache holds thousands of entries.
_CACHE_SIZE_TTL_S = 2.0
_sizes: dict[str, tuple[float, int]] = {}


@dataclass(frozen=True, slots=True)
class Coming:
    """Bytes that will come back on a volume: from its live reservations when they end, and
    from its caches (by make-room now, or once their pins and awaiting-use marks end)."""

    reservations: int
    caches: int

    @property
    def total(self) -> int:
        """All of it."""
        return self.reservations + self.caches


def _cache_bytes(root: str) -> int:
    now = time.monotonic()
    seen = _sizes.get(root)
    if seen is not None and now - seen[0] < _CACHE_SIZE_TTL_S:
        return seen[1]
    size = allocated_size(root)
    _sizes[root] = (now, size)
    return size


def came_back(tx: Tx, device: int, free_now: int, *, window_s: float) -> int:
    """Free space that writers outside every reservation have lately given back on volume
    ``device`` and may give back again: within the last ``window_s``, the largest rise of its
    free space in the daemon's readings (:mod:`janitor.daemon.sampler`), at most what it held
    free then above ``free_now``.

    A download, a build or another program's burst takes space and gives it back; a volume
    seen to give back that much within a wait of the same length may do it again, so a write
    that lacks no more than that may wait for it, within its bound, rather than be refused at
    once. Space that was only taken (a file written and kept, the job's own conversion) is no
    rise: a volume whose free space only fell or stood still, or one no daemon samples, gives
    nothing here, and a write nothing can make fit is still refused at once."""
    if window_s <= 0:
        return 0
    frees = [free for _, free in tx.samples.series(device, time.time() - window_s)]
    rise, low = 0, None
    for free in frees:
        low = free if low is None else min(low, free)
        rise = max(rise, free - low)
    return max(0, min(rise, max(frees, default=0) - free_now))


def had_room(tx: Tx, device: int, need: int, floor: int, *, since: float) -> bool:
    """Whether the daemon's readings of volume ``device`` since ``since`` (a time) show it with
    ``need`` bytes free above ``floor``: a volume seen with the room lately is not one that can
    never have it, whatever an outside writer's burst holds now. None sampled since: False."""
    return any(free - floor >= need for _, free in tx.samples.series(device, since))


def will_come(
    tx: Tx,
    policy: Policy,
    device: int,
    *,
    before: float | None = None,
    kept: frozenset[str] = frozenset(),
    mine: frozenset[str] = frozenset(),
) -> Coming:
    """What the work on volume ``device`` gives back (see the module's docstring). ``before``:
    only reservations made by then count (the work that ran when a waiter began to wait).
    ``kept``: files the asker keeps for itself (its job's pinned sources): they never come
    back to it. ``mine``: the asker's own jobs (ids), whose working sets cannot end while it
    waits (a group cut again waits inside its job)."""
    from janitor.config.policy import trees_by_device

    back = 0
    for r in live_reservations(tx, device=device):
        if before is not None and r.created > before:
            continue
        if r.job_id is not None and r.job_id in mine:
            continue
        # A job's working set comes back whole (its folder goes with the job); any other
        # write keeps what it wrote (a conversion into a cache is counted with the cache).
        back += r.bytes if r.job_id is not None else r.outstanding
    caches = trees_by_device(t for t in policy.trees.values() if t.evicts_for_room)
    roots = [os.path.normpath(os.path.abspath(t.path)) for t in caches.get(device, ())]
    held = sum(_cache_bytes(root) for root in roots)
    inside = tuple(root + os.sep for root in roots)
    held -= sum(allocated_size(path) for path in kept if path.startswith(inside))
    return Coming(back, max(0, held))


def held_for_head(tx: Tx, policy: Policy, device: int, me: str | None) -> int:
    """Bytes a write on ``device`` must leave free for the first call in line there (0 when
    it is that call, or none waits): the head's need less what the work that ran when it began
    to wait will give back. ``me``: the asker's place in line (None: not queued). Waiters whose
    process died are taken off the queue."""
    head = None
    for w in tx.waiters.on(device):
        if not still_alive(w.owner_pid, w.owner_start):
            tx.waiters.remove(w.id)
            continue
        head = w
        break
    if head is None or head.id == me:
        return 0
    return max(0, head.bytes - will_come(tx, policy, device, before=head.since).total)
