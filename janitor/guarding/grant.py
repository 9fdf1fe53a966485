"""Whole-file admission: a prepared call's writes reserved all or none, in one transaction.

The first cut from a source into a job folder reserves the whole source at the cut's byte rate
(its job keeps every group's PCM until the file is done) on the folder its cuts go to; later
cuts draw on it (a ``_Cut``) with no new admission, only a check that it is live and not at
risk. Cuts racing on one working set count each other's bytes in flight (their *draws*,
:mod:`janitor.ledger.draws`), and a cut of a window its job has cut already (a group cut
again) is growth past the working set, admitted as growth at that cut. Any other write is
reserved for the call alone, on the tree that holds it (a write on a covered volume outside
every tree under a tree of that volume, so it still keeps the floor); a conversion into a
cache marks its entry awaiting use for the writer (:mod:`janitor.admission.awaiting`).

A call refused makes room once and tries again; then a first write (or a growth) takes its
turn (:mod:`janitor.guarding.queue`), anything else is refused.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from janitor.errors import SpaceRisk
from janitor.guarding.close import give_back
from janitor.guarding.held import HeldWrite, WriteSession
from janitor.guarding.queue import enqueue, make_room

if TYPE_CHECKING:
    from janitor.admission.reserve import Admission
    from janitor.config.policy import TreePolicy
    from janitor.core import Janitor
    from janitor.guarding.prepare import Prepared, Target
    from janitor.guarding.request import PlannedWrite
    from janitor.ledger.jobs import JobInfo
    from janitor.ledger.reservations import ReservationInfo
    from janitor.ledger.tx import Tx

__all__ = ["RECUT_FRACTION", "WORKING_SET_MARGIN", "WORKING_SET_SLACK", "grant"]

#: How far a job's cuts may pass its working set, on their own, without a new admission: each
#: cut's file rounds up to whole blocks of its filesystem (4 KiB; a few hundred per hour of
#: audio), which the working set, worked out from the duration, cannot know.
WORKING_SET_MARGIN = 0.02
WORKING_SET_SLACK = 1 << 20


class _Short(Exception):
    """Raised inside the grant transaction to roll it back: what did not fit, and where;
    ``growth``: a cut of a job that wrote already, past its working set (it may wait too)."""

    def __init__(
        self, decision: Admission, output: str, needs: dict[int, int], *, growth: bool = False
    ) -> None:
        super().__init__(output)
        self.decision = decision
        self.output = output
        self.needs = needs  # device -> what the call wants there
        self.growth = growth


def grant(jan: Janitor, prep: Prepared, *, ticket: str | None = None) -> WriteSession:
    """Reserve every write of a prepared call, all or none, in one transaction.

    Raises ReservationRefused for the first write that does not fit (``output`` names it),
    SpaceRisk when a later cut's job is at risk (it must stop), :class:`~.queue.Queued` when it may
    wait (a first write, or a cut's growth past its working set), NeverFits when it never could,
    WaitWontHelp when what will come cannot cover it. A call holding ``ticket`` is the waiter
    of that place in the queue: it leaves room only for the head of the queue, if another.
    """
    evicted = 0
    for attempt in range(2):
        try:
            session: WriteSession = jan.ledger.call(_grant, jan, prep, ticket, evicted)
        except _Short as exc:
            short = exc
            if ticket is not None:
                break  # a waiter's retry: room is made, and the refusal logged, by its wait
            _log_refusal(jan, prep, short)
            if attempt == 0:
                evicted = make_room(jan, prep, short.decision.tree, short.decision.requested)
                if evicted > 0:
                    continue
            break
        else:
            return session
    refused = short.decision.refusal(short.output)
    if ticket is not None:
        raise refused  # still waiting: what the call holds stays
    if (prep.first or short.growth) and prep.wait_left() > 0:
        device = short.decision.device
        need = short.needs.get(device, refused.requested)
        raise enqueue(jan, prep, refused, device=device, need=need, growth=short.growth)
    give_back(jan, prep)
    raise refused


def _grant(tx: Tx, jan: Janitor, prep: Prepared, ticket: str | None, evicted: int) -> WriteSession:
    from janitor.admission.awaiting import cache_entry, mark_awaiting
    from janitor.admission.queue import held_for_head
    from janitor.admission.reserve import admit

    policy = jan.policy
    now = time.time()
    req = prep.request
    ctx = _Granting(tx, jan, prep, ticket, evicted, now)
    queued, needs = ctx.queued, ctx.needs
    held: list[HeldWrite] = []
    draws: list[str] = []
    for t in prep.targets:
        tp = t.tp
        w = t.write
        if t.cut:
            assert t.folder is not None
            cut = _Cut(ctx, tp, t, prep.jobs[t.folder.folder])
            held.append(cut.draw())
            draws.append(cut.draw_id)
            continue
        device = _device(jan, tp)
        needs[device] = needs.get(device, 0) + w.bytes
        if prep.first and device not in queued:
            queued[device] = held_for_head(tx, policy, device, ticket)
        decision, info = admit(
            tx, policy, tp, w.bytes, path=t.recorded, job=req.job, owner_pid=req.owner_pid,
            owner_start=_start(req.owner_pid), ttl=jan.settings.default_ttl_s, now=now,
            evicted=evicted, queued=queued.get(device, 0), log_refusal=False,
        )  # fmt: skip
        if info is None:
            raise _Short(decision, w.path, needs)
        if t.folder is not None and w.source is not None and t.recorded is not None:
            _note_source(tx, prep.jobs[t.folder.folder], w.source, os.path.dirname(t.recorded), 0)
        if t.folder is None and t.recorded is not None and tp.evicts_for_room:
            # A conversion into a cache: the entry awaits its use by the writer.
            entry = cache_entry(policy, t.recorded)
            if entry is not None:
                mark_awaiting(tx, policy, entry, owner_pid=prep.writer.pid,
                              owner_start=prep.writer.start, now=now)  # fmt: skip
        held.append(HeldWrite(info.id, w.path, w.bytes, decision.floor))
    return WriteSession(
        tuple(held),
        prep.pins,
        prep.unguarded,
        tuple(dict.fromkeys(prep.jobs.values())),
        draws=tuple(draws),
    )


#: A later cut whose window lies this much (or more) within windows its job cut already from
#: the same source is a group cut again (batchalign3's Whisper fallback: the same window, a new
#: namespace): growth past the working set. Less is the slight overlap of neighbouring groups.
RECUT_FRACTION = 0.5


@dataclass(slots=True)
class _Granting:
    """One grant transaction's shared state: the call, its place in line (``ticket``), what
    make-room evicted, the time, and, per volume, what is held for the head of its queue and
    what the call wants there."""

    tx: Tx
    jan: Janitor
    prep: Prepared
    ticket: str | None
    evicted: int
    now: float
    queued: dict[int, int] = field(default_factory=dict)
    needs: dict[int, int] = field(default_factory=dict)


class _Cut:
    """One cut drawn on its job's working set for its source, inside the grant transaction:
    reserved whole at the first cut; later cuts draw on it, counting the draws still in flight
    (other cuts racing it), and a window cut again is growth, admitted as such."""

    def __init__(self, ctx: _Granting, tp: TreePolicy, t: Target, job_id: str) -> None:
        from janitor.admission.reserve import read_volume

        assert t.recorded is not None and t.write.source is not None
        self.ctx, self.tp, self.job_id = ctx, tp, job_id
        self.tx, self.jan, self.prep, self.now = ctx.tx, ctx.jan, ctx.prep, ctx.now
        self.needs = ctx.needs
        self.w = t.write
        self.out_dir = os.path.dirname(t.recorded)
        self.vol = read_volume(ctx.jan.policy, tp)  # once: its device, floor and free space now
        self.draw_id = ""

    def draw(self) -> HeldWrite:
        """The write held for this cut (a new working set, or a draw on one)."""
        tx, w = self.tx, self.w
        job = tx.jobs.get(self.job_id)
        assert job is not None and w.source is not None
        pool = tx.reservations.pool(self.job_id, self.out_dir)
        known = job.source(w.source)
        if pool is not None and known is not None and known.output_dir == self.out_dir:
            held = self._later(pool, job)
        else:
            held = self._first(pool)
        self.draw_id = tx.draws.add(
            held.reservation, self.job_id, source=w.source, path=w.path, nbytes=w.bytes,
            window=(w.start_us, w.end_us), owner_pid=self.prep.request.owner_pid,
            owner_start=_start(self.prep.request.owner_pid), now=self.now,
        ).id  # fmt: skip
        return held

    def _later(self, pool: ReservationInfo, job: JobInfo) -> HeldWrite:
        """A later cut: no new admission, stopped if its job must stop; more than the working
        set has left (counting the cuts in flight), or a window cut again, is growth."""
        from janitor.admission.reserve import grow_reservation

        tx, w, vol, now = self.tx, self.w, self.vol, self.now
        if pool.at_risk is not None and vol.free < vol.floor:
            raise SpaceRisk(pool.id, pool.volume, pool.at_risk)
        again = _cut_again(tx, self.job_id, w)
        balance = pool.outstanding - _in_flight(tx, pool.id)
        extra = again + max(0, w.bytes - again - balance)
        if not extra:
            return HeldWrite(pool.id, w.path, max(w.bytes, balance), vol.floor, pooled=True)
        # Within the estimate's margin (each cut's file rounds up to whole blocks, which the
        # working set cannot know) the rest is granted as it stands: an admitted file is never
        # refused midway, and the floor's margin covers it. A window cut again, or more than
        # the margin, is admitted like any growth, at this cut.
        planned = sum(s.working_set for s in job.sources if s.output_dir == self.out_dir)
        margin = planned * (1 + WORKING_SET_MARGIN) + WORKING_SET_SLACK
        if not again and pool.bytes + extra <= margin:
            tx.reservations.set_bytes(pool.id, pool.bytes + extra)
            tx.log.add(
                "grow", tree=pool.tree, device=pool.device, reservation=pool.id,
                nbytes=pool.bytes + extra, path=pool.path, ts=now, previous=pool.bytes,
                within_margin=True,
            )  # fmt: skip
            return HeldWrite(pool.id, w.path, w.bytes, vol.floor, pooled=True)
        device = vol.device
        self.needs[device] = self.needs.get(device, 0) + extra
        decision, grown = grow_reservation(
            tx, self.jan.policy, self.tp, pool.id, pool.bytes + extra, now=now
        )
        if grown is None:
            raise _Short(decision, w.path, self.needs, growth=True)
        if again:  # the source's working set grew by the window cut again
            assert w.source is not None
            known = job.source(w.source)
            base = known.working_set if known is not None else 0
            _note_source(tx, self.job_id, w.source, self.out_dir, base + again)
            tx.log.add(
                "recut", tree=pool.tree, device=pool.device, reservation=pool.id, nbytes=again,
                path=w.path, ts=now, job_id=self.job_id,
            )  # fmt: skip
        return HeldWrite(pool.id, w.path, max(w.bytes, balance + extra), decision.floor, True)

    def _first(self, pool: ReservationInfo | None) -> HeldWrite:
        """The first cut from this source into this folder: the whole source's working set."""
        from janitor.admission.queue import held_for_head
        from janitor.admission.reserve import admit, grow_reservation

        tx, w, vol, now, prep = self.tx, self.w, self.vol, self.now, self.prep
        assert w.whole_bytes is not None and w.source is not None
        working_set = w.whole_bytes
        device = vol.device
        self.needs[device] = self.needs.get(device, 0) + working_set
        queued = self.ctx.queued
        if prep.first and device not in queued:
            queued[device] = held_for_head(tx, self.jan.policy, device, self.ctx.ticket)
        if pool is None:
            writer = prep.writer
            decision, info = admit(
                tx, self.jan.policy, self.tp, working_set, path=self.out_dir,
                job=prep.request.job, owner_pid=writer.pid, owner_start=writer.start,
                ttl=math.inf, now=now, evicted=self.ctx.evicted, queued=queued.get(device, 0),
                job_id=self.job_id, log_refusal=False,
            )  # fmt: skip
            if info is None:
                raise _Short(decision, w.path, self.needs)
            pool = info
        else:  # another source cutting into the same folder: its working set joins
            decision, grown = grow_reservation(
                tx, self.jan.policy, self.tp, pool.id, pool.bytes + working_set, now=now
            )
            if grown is None:
                raise _Short(decision, w.path, self.needs, growth=not prep.first)
            pool = grown
        _note_source(tx, self.job_id, w.source, self.out_dir, working_set)
        return HeldWrite(pool.id, w.path, max(pool.outstanding, w.bytes), decision.floor, True)


def _cut_again(tx: Tx, job: str, w: PlannedWrite) -> int:
    """The bytes of cut ``w`` whose window its job cut already from the same source (a group
    cut again), or 0: less than :data:`RECUT_FRACTION` of it is a neighbour's overlap."""
    if w.start_us is None or w.end_us is None or w.end_us <= w.start_us or w.source is None:
        return 0
    span = w.end_us - w.start_us
    draws = tx.draws.overlapping(job, w.source, w.start_us, w.end_us)
    covered = sum(d.overlap_us(w.start_us, w.end_us) for d in draws)
    if covered < span * RECUT_FRACTION:
        return 0
    return w.bytes * min(covered, span) // span


def _in_flight(tx: Tx, reservation: str) -> int:
    """What the cuts still running on ``reservation`` have yet to write: their bytes less
    what their output holds. A cut whose guard has exited has written all it will: its draw is
    done (marked so here, if its release did not say so already)."""
    from janitor.host.owner import still_alive
    from janitor.host.space import allocated_size

    total = 0
    ended: list[str] = []
    for d in tx.draws.in_flight(reservation):
        if still_alive(d.owner_pid, d.owner_start):
            total += max(0, d.bytes - allocated_size(d.path))
        else:
            ended.append(d.id)
    if ended:
        tx.draws.finish(ended)
    return total


def _note_source(tx: Tx, job_id: str, source: str, out_dir: str | None, working_set: int) -> None:
    from janitor.ledger.jobs import SourceInfo

    job = tx.jobs.get(job_id)
    assert job is not None
    known = job.source(source)
    pin = None if known is None else known.pin
    if not working_set and known is not None and known.working_set:
        out_dir, working_set = known.output_dir, known.working_set  # a cut's record stays
    tx.jobs.set_source(job_id, SourceInfo(source, out_dir, working_set, pin))


def _device(jan: Janitor, tp: TreePolicy) -> int:
    from janitor.admission.reserve import read_volume

    return read_volume(jan.policy, tp).device


def _start(pid: int) -> float | None:
    from janitor.host.owner import process_start

    return process_start(pid)


def _log_refusal(jan: Janitor, prep: Prepared, short: _Short) -> None:
    from janitor.admission.reserve import log_refuse

    jan.ledger.call(
        lambda tx: log_refuse(
            tx, short.decision, path=short.output, ts=time.time(), job=prep.request.job
        )
    )
