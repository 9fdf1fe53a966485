"""Room, then a turn: what a refused call may still hope for, and its place in the queue.

A call refused at its grant first makes room (:func:`make_room`: caches on its volume evicted
by use, never a pinned input or an entry awaiting use). A job's first write (or a cut's growth
past its working set) that still does not fit takes a place in its volume's queue
(:func:`enqueue`, :class:`Queued`), only for space that will come
(:mod:`janitor.admission.queue`): one that could never fit, or that what the work on the volume
gives back cannot cover, is refused at once (:func:`cannot_wait`:
:class:`~janitor.errors.NeverFits`, :class:`~janitor.errors.WaitWontHelp`).
:mod:`janitor.guarding.wait` then admits it in its turn.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from typing import TYPE_CHECKING

from janitor.errors import NeverFits, ReservationRefused, WaitWontHelp
from janitor.guarding.close import give_back
from janitor.humanize import format_size

if TYPE_CHECKING:
    from janitor.admission.reserve import Admission
    from janitor.config.policy import TreePolicy
    from janitor.core import Janitor
    from janitor.guarding.prepare import Prepared
    from janitor.ledger.jobs import Waiter
    from janitor.ledger.tx import Tx

__all__ = ["Queued", "cannot_wait", "enqueue", "make_room", "tree_named"]


class Queued(Exception):
    """A job's first write does not fit now but will once running jobs end: it holds place
    ``ticket`` in its volume's queue; :func:`janitor.guarding.wait.wait` admits it in turn."""

    def __init__(self, ticket: str, message: str, refusal: ReservationRefused) -> None:
        super().__init__(message)
        self.ticket = ticket
        self.message = message
        self.refusal = refusal


def cannot_wait(
    jan: Janitor, prep: Prepared, refused: ReservationRefused, device: int, need: int
) -> ReservationRefused | None:
    """Why waiting cannot make ``need`` bytes fit on ``device`` (NeverFits: more than the
    volume could ever give; WaitWontHelp: more than the work on it will give back), or None
    when it may. The call's own pinned sources count for neither: they stay while it waits.
    Free space that writers outside every reservation gave back on the volume within the
    call's wait bound counts for both (:func:`~janitor.admission.queue.came_back`): it came
    and went, so it may come again while the call waits.

    Its numbers are read afresh, not taken from ``refused``: a job that ended since that
    refusal gave its bytes back to free space, and its reservation is no longer among what
    will come; counted from the refusal's numbers, those bytes would be nowhere, and a call
    that now fits would be refused as one that waiting cannot help. The call's own jobs give
    it nothing while it waits (a group cut again waits inside its job)."""
    from janitor.admission.jobs import capacity
    from janitor.admission.queue import came_back, will_come
    from janitor.admission.reserve import live_reservations, read_volume
    from janitor.admission.volume import Volume

    tree = tree_named(jan, prep, refused.tree)
    vol = Volume.at(jan.policy, tree.path)
    mine = frozenset(prep.jobs.values())
    with jan.ledger.read() as tx:
        own = [tx.jobs.get(j) for j in mine]
        kept = frozenset(s.source for j in own if j is not None for s in j.sources if s.pin)
        # What will come, then free space, then what is reserved: whatever a job does between
        # the reads errs towards waiting. One that ends is counted at least once (as coming,
        # or in free space); what one writes after free space is read is no longer
        # outstanding either, so it is counted against the call nowhere, never twice.
        back = will_come(tx, jan.policy, device, kept=kept, mine=mine).total
        now = read_volume(jan.policy, tree)
        if now.device != device:
            return None  # the tree's volume changed meanwhile: the next try decides there
        reserved = sum(r.outstanding for r in live_reservations(tx, device=device))
        cap = capacity(tx, jan.policy, vol, kept=kept)
        swing = came_back(tx, device, now.free, window_s=prep.request.wait_s)
    numbers = replace(
        _numbers(refused), requested=need, queued=0, free=now.free, floor=now.floor,
        reserved=reserved,
    )  # fmt: skip
    if need > cap.most + swing:
        return NeverFits(numbers, output=refused.output, capacity=cap.total, held=cap.held)
    coming = back + swing
    if need - max(0, now.free - now.floor - reserved) > coming:
        return WaitWontHelp(
            numbers, output=refused.output, waited_s=refused.waited_s, coming=coming
        )
    return None


def tree_named(jan: Janitor, prep: Prepared, name: str) -> TreePolicy:
    """The tree ``name`` as the call was admitted on it: a target's (a known job's tree, which
    a reload may have dropped from the policy), else the policy's."""
    for t in prep.targets:
        if t.tp.name == name:
            return t.tp
    return jan.policy.tree(name)


def make_room(jan: Janitor, prep: Prepared, tree: str, nbytes: int) -> int:
    """Evict caches on the volume of ``tree`` (as the call names it) until ``nbytes`` would
    fit; bytes freed. A known job's tree the policy no longer has makes room through a tree
    the policy still has on that volume; with none there, no cache of the policy is on it:
    nothing to evict."""
    from janitor.admission.reserve import read_volume, tree_on

    tp = tree_named(jan, prep, tree)
    if jan.policy.trees.get(tp.name) is tp:
        held: TreePolicy | None = tp
    else:
        held = tree_on(jan.policy, read_volume(jan.policy, tp).device)
    return 0 if held is None else jan.make_room(held.name, nbytes)


def _numbers(refused: ReservationRefused) -> Admission:
    """The decision behind a refusal, as admission made it."""
    from janitor.admission.reserve import Admission

    return Admission(
        tree=refused.tree, volume=refused.volume, device=0, requested=refused.requested,
        free=refused.free, floor=refused.floor, reserved=refused.reserved,
        evicted=refused.evicted, queued=refused.queued,
    )  # fmt: skip


def enqueue(
    jan: Janitor,
    prep: Prepared,
    refused: ReservationRefused,
    *,
    device: int,
    need: int,
    growth: bool,
) -> Exception:
    """Queue a refused first write (or a cut's ``growth``) for the ``need`` bytes the call
    wants on ``device``: its :class:`Queued` place, or why waiting cannot help
    (:func:`cannot_wait`: refused at once, with all the call wants on the volume). A growth
    waits ahead of the first writes that came after its job began: its compute is spent."""
    from janitor.admission.reserve import live_reservations
    from janitor.host.owner import process_start

    hopeless = cannot_wait(jan, prep, refused, device, need)
    if hopeless is not None:
        give_back(jan, prep)
        return hopeless
    req = prep.request
    what = refused.output or "?"

    def add(tx: Tx) -> Waiter:
        tx.waiters.remove_of(req.owner_pid)  # a place it lost track of must not wait ahead of it
        since = time.time()
        if growth:
            since = min([since, *(j.created for j in map(tx.jobs.get, prep.jobs.values()) if j)])
        return tx.waiters.add(
            device, need, owner_pid=req.owner_pid, owner_start=process_start(req.owner_pid),
            since=since, what=what,
        )  # fmt: skip

    waiter = jan.ledger.call(add)
    with jan.ledger.read() as tx:
        ahead = [w for w in tx.waiters.on(device) if w.since < waiter.since]
        held = len(live_reservations(tx, device=device))
    kind = "a cut past its job's working set (a group cut again) " if growth else ""
    message = (
        f"{kind}waiting for {format_size(need)} on volume {refused.volume} to write {what}: "
        f"{format_size(max(0, refused.free - refused.floor - refused.reserved))} free above the "
        f"floor, {format_size(refused.reserved)} held by {held} running job"
        f"{'' if held == 1 else 's'} and write"
        f"{'' if held == 1 else 's'}"
        + (f", {len(ahead)} waiting ahead" if ahead else "")
        + f"; up to {math.ceil(prep.wait_left()):d} s (JANITOR_GUARD_WAIT_S=0 refuses at once)"
    )
    return Queued(waiter.id, message, refused)
