"""Reserving the writes of one guarded ffmpeg call as part of its job, in a deliberate order.

1. **What it reads stays** (:func:`prepare`, one transaction, committed first): each write into
   a job folder (a unit of a scratch tree, or the folder of a job the ledger knows, whatever
   a policy reload since made of its tree) records the job with its writer; the inputs that lie
   in cache trees are touched and pinned: for a job, by its writer, for the job's life (the
   pipeline re-reads a cached WAV once per group with nothing open in between); for any other
   write, by the guard, for the call. So no room made for the outputs can evict an input.
2. **Whole-file admission** (:func:`grant`, one transaction, all or none): the first cut from
   a source into a job folder reserves the whole source at the cut's byte rate (the job keeps
   every group's PCM until the file is done) on the folder its cuts go to; later cuts draw on it
   with no new admission, only a check that it is live and not at risk. Any other write is
   reserved for the call alone, on the tree that holds it (a write on a covered volume outside
   every tree under a tree of that volume, so it still keeps the floor; on a volume the policy
   does not cover, unguarded).
   Cuts racing on one working set count each other's bytes in flight (their *draws*,
   :mod:`janitor.ledger.draws`), and a cut of a window its job has cut already (a group cut
   again) is growth past the working set, admitted as growth at that cut.
3. **Room, then a turn**: a refused call evicts caches once (by use: never a pinned input, an
   entry awaiting use, a locked or open one) and tries again; a job's first write (or a cut's
   growth) that still does not fit waits in the volume's queue (:class:`Queued`) only for space
   that will come (:mod:`janitor.admission.queue`), and :func:`wait` admits it in its turn; one
   that could never fit, or that what will come cannot cover, is refused at once
   (:class:`~janitor.errors.NeverFits`, :class:`~janitor.errors.WaitWontHelp`).
4. :func:`close_writes` ends what the call alone held and its draws; the job's working set and
   pins stay.

A conversion into a cache marks the entry awaiting use for the writer
(:mod:`janitor.admission.awaiting`), and a job's first cut from a cache entry takes its
writer's mark over: the job's source pin covers the entry from then on.

What a call holds and leaves (:class:`~janitor.jobs.held.WriteSession`,
:class:`~janitor.jobs.held.Written`) lives in :mod:`janitor.jobs.held`, which the guard imports
without this module.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from janitor.errors import (
    NeverFits,
    ReservationRefused,
    SpaceRisk,
    UnknownPin,
    UnknownReservation,
    WaitWontHelp,
)
from janitor.humanize import format_size
from janitor.jobs.held import HeldWrite, WriteSession, Written

if TYPE_CHECKING:
    from janitor.admission.jobs import JobFolder
    from janitor.admission.reserve import Admission
    from janitor.config.policy import TreePolicy
    from janitor.core import Janitor
    from janitor.ledger.jobs import JobInfo, Waiter, Writer
    from janitor.ledger.reservations import ReservationInfo
    from janitor.ledger.tx import Tx

__all__ = [
    "CallRequest",
    "Located",
    "PlannedWrite",
    "Prepared",
    "Queued",
    "close_writes",
    "grant",
    "locate",
    "open_writes",
    "prepare",
    "wait",
]

#: How often a waiting call looks again without being told (no daemon to tell it), and how
#: often it tries to make room by evicting caches while it is first in line.
POLL_S = 1.0
ROOM_EVERY_S = 10.0
#: How often a waiting call asks whether what it waits for can still come.
HOPE_EVERY_S = 2.0
#: How far a job's cuts may pass its working set, on their own, without a new admission: each
#: cut's file rounds up to whole blocks of its filesystem (4 KiB; a few hundred per hour of
#: audio), which the working set, worked out from the duration, cannot know.
WORKING_SET_MARGIN = 0.02
WORKING_SET_SLACK = 1 << 20


@dataclass(frozen=True, slots=True)
class PlannedWrite:
    """One file a command will write, and how many bytes. A cut (a window of its input)
    names its ``source`` and ``whole_bytes``, what the whole source takes in the same format:
    the working set of a job that cuts it group by group; and, when known, the window of the
    source it holds, ``[start_us, end_us)``."""

    path: str
    bytes: int
    source: str | None = None
    whole_bytes: int | None = None
    start_us: int | None = None
    end_us: int | None = None


@dataclass(frozen=True, slots=True)
class CallRequest:
    """What one guarded call asks for: its writes and inputs; the guard (``owner_pid``: the
    call's own reservations and pins end with it) and its parent (``writer_pid``: the process
    that ran ffmpeg, where the job's writer chain starts; ``writer_is_parent``: it is the
    guard's parent, as both guards send it, so it is read through the guard); a label, the
    ``janitor run`` it belongs to, and how long a job's first write may still wait for room,
    counted from when the request is received (a front end sends what is left of the call's
    wait: one deadline, however the call is handed on)."""

    writes: tuple[PlannedWrite, ...]
    inputs: tuple[str, ...]
    owner_pid: int
    writer_pid: int | None = None
    job: str | None = None
    run: str | None = None
    wait_s: float = 0.0
    writer_is_parent: bool = False

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> CallRequest:
        """From the JSON body of ``POST /v1/guard`` (what the guard sends)."""
        return cls(
            tuple(
                PlannedWrite(
                    w["path"],
                    int(w["bytes"]),
                    w.get("source"),
                    w.get("whole_bytes"),
                    w.get("start_us"),
                    w.get("end_us"),
                )
                for w in data["outputs"]
            ),
            tuple(data.get("inputs", ())),
            int(data["owner_pid"]),
            data.get("writer_pid"),
            data.get("job"),
            data.get("run"),
            float(data.get("wait_s") or 0.0),
            bool(data.get("writer_is_parent")),
        )


class Queued(Exception):
    """A job's first write does not fit now but will once running jobs end: it holds place
    ``ticket`` in its volume's queue; :func:`wait` admits it in turn."""

    def __init__(self, ticket: str, message: str, refusal: ReservationRefused) -> None:
        super().__init__(message)
        self.ticket = ticket
        self.message = message
        self.refusal = refusal


@dataclass(frozen=True, slots=True)
class Located:
    """Where a write lands, as admission sees it: the tree it is reserved on, and the path
    recorded for it (None: outside every tree, on a volume a tree of the policy is on)."""

    tree: str
    path: str | None

    @property
    def in_tree(self) -> bool:
        """True when a tree holds the write itself, not only its volume."""
        return self.path is not None


def locate(jan: Janitor, path: str) -> Located | None:
    """Where a write to ``path`` lands: the tree holding it and the path as that tree records
    it; a tree on its volume and no path when it lies outside every tree there; None when no
    tree is on its volume (the policy does not cover it)."""
    from janitor.admission.reserve import tree_on
    from janitor.config.policy import tree_holding
    from janitor.host.space import device_of

    inside = tree_holding(jan.policy.trees.values(), path)
    if inside is not None:
        return Located(inside.name, inside.path)
    try:
        device = device_of(os.path.dirname(path) or ".")
    except OSError:
        return None
    on_volume = tree_on(jan.policy, device)
    return None if on_volume is None else Located(on_volume.name, None)


# -- 1. what it reads stays ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Target:
    """One guarded write: the write, the tree and recorded path it is reserved under, and the
    job folder it lands in (None: not a job's)."""

    write: PlannedWrite
    tp: TreePolicy
    recorded: str | None
    folder: JobFolder | None

    @property
    def tree(self) -> str:
        """The name of the tree it is reserved on."""
        return self.tp.name

    @property
    def cut(self) -> bool:
        """A window of a source into a job folder: drawn from the job's working set."""
        return (
            self.folder is not None
            and self.recorded is not None
            and self.write.source is not None
            and bool(self.write.whole_bytes)
        )


@dataclass(frozen=True, slots=True)
class Prepared:
    """A call after :func:`prepare`: its targets, the writer of its jobs, the jobs, the pins
    that end with the call, whether it is a job's first write (the only kind that waits), and
    its ``deadline`` (this process's ``time.monotonic()``): when its wait for room ends, fixed
    once as the request came in, whether it then waits or not."""

    request: CallRequest
    targets: tuple[_Target, ...]
    unguarded: tuple[str, ...]
    writer: Writer
    jobs: dict[str, str] = field(default_factory=dict)  # job folder -> job id
    pins: tuple[str, ...] = ()
    first: bool = True
    deadline: float = 0.0

    def wait_left(self) -> float:
        """Seconds left before the call's deadline (0 once it passed)."""
        return max(0.0, self.deadline - time.monotonic())


def prepare(jan: Janitor, req: CallRequest, *, received: float | None = None) -> Prepared:
    """Classify the call's writes, record its jobs and pin its inputs, in one transaction; a
    job's first cut from a cache entry takes over its writer's awaiting-use mark on it.
    ``received``: when the request came in (``time.monotonic()``; default now): its
    ``wait_s`` counts from then, whatever estimating and preparing it takes."""
    from janitor.admission.awaiting import cache_entry, take_over
    from janitor.admission.jobs import record_job
    from janitor.host.owner import process_start, writer_chain
    from janitor.ledger.jobs import Writer

    deadline = (time.monotonic() if received is None else received) + req.wait_s
    targets, unguarded = _classify(jan, req.writes)
    folders = {t.folder.folder: t.folder for t in targets if t.folder is not None}
    into_cache = any(
        t.folder is None and t.recorded is not None and t.tp.evicts_for_room for t in targets
    )
    lineage: tuple[Writer, ...] = ()
    if (folders or into_cache) and req.writer_pid:
        # The guard's parent, PID 1 included (a server that is a container's entrypoint), and
        # the go-betweens up to the writer, all recorded: the job lives while any of them, or
        # what they forked, runs. One gone before it was read has a start time no process has.
        # A conversion into a cache needs only the writer: its entry awaits the writer's use.
        parent = req.writer_is_parent and req.writer_pid != req.owner_pid
        guard = req.owner_pid if parent else None
        chain = writer_chain(req.writer_pid, guard=guard)
        lineage = tuple(Writer(c.pid, c.start, c.pgid, c.leader_start) for c in chain.links)
        top = chain.writer
        writer = Writer(top.pid, top.start, top.pgid, top.leader_start)
    else:  # a client that is the writer itself (the HTTP API without writer_pid)
        writer = Writer(req.owner_pid, process_start(req.owner_pid))
    inputs = _cached_inputs(jan, req.inputs)
    guard_start = process_start(req.owner_pid)
    now = time.time()
    cuts = [
        (t.folder.folder, entry)
        for t in targets
        if t.cut and t.folder is not None and t.write.source is not None
        for entry in (cache_entry(jan.policy, t.write.source),)
        if entry is not None
    ]

    def write(tx: Tx) -> Prepared:
        jobs: dict[str, JobInfo] = {}
        first = True
        for path, where in folders.items():
            existing = tx.jobs.active_at(path)
            if existing is not None and existing.ino == where.ino and existing.wrote:
                first = False  # the job wrote already: compute is spent, it never waits
            jobs[path] = record_job(tx, where, writer, run=req.run, now=now, lineage=lineage)
        if inputs:
            tx.touches.record([p for _, p in inputs])
        call_pins: list[str] = []
        for tree, path in inputs:
            if jobs:
                for job in jobs.values():
                    _pin_source(tx, job, tree, path, writer, now)
            else:
                pin = tx.pins.add(tree, path, owner_pid=req.owner_pid, owner_start=guard_start,
                                  ttl=None, now=now)  # fmt: skip
                call_pins.append(pin.id)
        for folder, entry in cuts:  # pinned for the job just above: its mark is done
            take_over(tx, entry, writer_pid=writer.pid, writer_start=writer.start,
                      job=jobs[folder].id, now=now)  # fmt: skip
        return Prepared(
            req,
            tuple(targets),
            tuple(unguarded),
            writer,
            {path: job.id for path, job in jobs.items()},
            tuple(call_pins),
            first,
            deadline,
        )

    if not folders and not inputs:  # nothing to record before the grant
        return Prepared(req, tuple(targets), tuple(unguarded), writer, deadline=deadline)
    prepared: Prepared = jan.ledger.call(write)
    return prepared


def _classify(jan: Janitor, writes: Sequence[PlannedWrite]) -> tuple[list[_Target], list[str]]:
    """Where each write lands (its target), and the writes left unguarded (on no volume the
    policy covers). A write into the folder of a job the ledger knows is that job's, whatever
    the policy now says (a reload may have dropped its tree, moved or respelled its root):
    the job stays its job until it ends. Any other write is placed by the policy."""
    from janitor.admission.jobs import job_folder, job_tree, known_job

    with jan.ledger.read() as tx:
        known = {w.path: known_job(tx, w.path) for w in writes}
    targets: list[_Target] = []
    unguarded: list[str] = []
    for w in writes:
        hit = known[w.path]
        if hit is not None:
            targets.append(_Target(w, job_tree(jan.policy, hit.job), hit.path, hit.folder))
            continue
        where = locate(jan, w.path)
        if where is None:
            unguarded.append(w.path)
            continue
        tree, recorded = jan.policy.tree(where.tree), where.path
        folder = None if recorded is None else job_folder(jan.policy, tree.name, recorded)
        targets.append(_Target(w, tree, recorded, folder))
    return targets, unguarded


def _cached_inputs(jan: Janitor, inputs: Sequence[str]) -> list[tuple[str, str]]:
    """(tree, recorded path) of the inputs that lie inside cache trees."""
    from janitor.config.policy import tree_holding

    caches = [t for t in jan.policy.trees.values() if t.role == "cache"]
    found = (tree_holding(caches, path) for path in inputs)
    return [(inside.name, inside.path) for inside in found if inside is not None]


def _pin_source(tx: Tx, job: JobInfo, tree: str, path: str, writer: Writer, now: float) -> None:
    """Pin a job's source for the job's life (once: a live pin is kept)."""
    from janitor.ledger.jobs import SourceInfo

    known = job.source(path)
    if known is not None and known.pin is not None and tx.pins.live_one(known.pin) is not None:
        return
    pin = tx.pins.add(tree, path, owner_pid=writer.pid, owner_start=writer.start, ttl=None, now=now)
    tx.jobs.set_source(
        job.id,
        SourceInfo(
            path,
            None if known is None else known.output_dir,
            0 if known is None else known.working_set,
            pin.id,
        ),
    )


# -- 2. whole-file admission -----------------------------------------------------------------------


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
    SpaceRisk when a later cut's job is at risk (it must stop), :class:`Queued` when it may
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
                break  # a waiter's retry: room is made, and the refusal logged, by wait()
            _log_refusal(jan, prep, short)
            if attempt == 0:
                evicted = _make_room(jan, prep, short.decision.tree, short.decision.requested)
                if evicted > 0:
                    continue
            break
        else:
            return session
    refused = short.decision.refusal(short.output)
    if ticket is not None:
        raise refused  # still waiting: what the call holds stays
    if (prep.first or short.growth) and prep.wait_left() > 0:
        raise _queue(jan, prep, refused, short)
    _give_back(jan, prep)
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

    def __init__(self, ctx: _Granting, tp: TreePolicy, t: _Target, job_id: str) -> None:
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


def _give_back(jan: Janitor, prep: Prepared) -> None:
    """A refused call: the pins that were only the call's end now (a job's stay with it)."""
    for pin in prep.pins:
        try:
            jan.unpin(pin)
        except UnknownPin:
            pass


# -- 3. room, then a turn --------------------------------------------------------------------------


def _cannot_wait(
    jan: Janitor, prep: Prepared, refused: ReservationRefused, device: int, need: int
) -> ReservationRefused | None:
    """Why waiting cannot make ``need`` bytes fit on ``device`` (NeverFits: more than the
    volume could ever give; WaitWontHelp: more than the work on it will give back), or None
    when it may. The call's own pinned sources count for neither: they stay while it waits."""
    from janitor.admission.jobs import capacity
    from janitor.admission.queue import will_come
    from janitor.admission.volume import Volume

    vol = Volume.at(jan.policy, _tree_named(jan, prep, refused.tree).path)
    whole = replace(_numbers(refused), requested=need, queued=0)
    with jan.ledger.read() as tx:
        own = [tx.jobs.get(j) for j in set(prep.jobs.values())]
        kept = frozenset(s.source for j in own if j is not None for s in j.sources if s.pin)
        cap = capacity(tx, jan.policy, vol, kept=kept)
        if need > cap.most:
            return NeverFits(whole, output=refused.output, capacity=cap.total, held=cap.held)
        coming = will_come(tx, jan.policy, device, kept=kept).total
    lacks = need - max(0, refused.free - refused.floor - refused.reserved)
    if lacks > coming:
        return WaitWontHelp(whole, output=refused.output, waited_s=refused.waited_s, coming=coming)
    return None


def _tree_named(jan: Janitor, prep: Prepared, name: str) -> TreePolicy:
    """The tree ``name`` as the call was admitted on it: a target's (a known job's tree, which
    a reload may have dropped from the policy), else the policy's."""
    for t in prep.targets:
        if t.tp.name == name:
            return t.tp
    return jan.policy.tree(name)


def _make_room(jan: Janitor, prep: Prepared, tree: str, nbytes: int) -> int:
    """Evict caches on the volume of ``tree`` (as the call names it) until ``nbytes`` would
    fit; bytes freed. A known job's tree the policy no longer has makes room through a tree
    the policy still has on that volume; with none there, no cache of the policy is on it:
    nothing to evict."""
    from janitor.admission.reserve import tree_on

    tp = _tree_named(jan, prep, tree)
    held = tp if jan.policy.trees.get(tp.name) is tp else tree_on(jan.policy, _device(jan, tp))
    return 0 if held is None else jan.make_room(held.name, nbytes)


def _numbers(refused: ReservationRefused) -> Admission:
    """The decision behind a refusal, as admission made it."""
    from janitor.admission.reserve import Admission

    return Admission(
        tree=refused.tree, volume=refused.volume, device=0, requested=refused.requested,
        free=refused.free, floor=refused.floor, reserved=refused.reserved,
        evicted=refused.evicted, queued=refused.queued,
    )  # fmt: skip


def _queue(jan: Janitor, prep: Prepared, refused: ReservationRefused, short: _Short) -> Exception:
    """Queue a refused first write (or a cut's growth), or say why waiting cannot help
    (:func:`_cannot_wait`: refused at once, with all the call wants on the volume). A growth
    waits ahead of the first writes that came after its job began: its compute is spent."""
    device = short.decision.device
    need = short.needs.get(device, refused.requested)
    hopeless = _cannot_wait(jan, prep, refused, device, need)
    if hopeless is not None:
        _give_back(jan, prep)
        return hopeless
    req = prep.request
    what = refused.output or "?"

    def enqueue(tx: Tx) -> Waiter:
        tx.waiters.remove_of(req.owner_pid)  # a place it lost track of must not wait ahead of it
        since = time.time()
        if short.growth:
            since = min([since, *(j.created for j in map(tx.jobs.get, prep.jobs.values()) if j)])
        return tx.waiters.add(
            device, need, owner_pid=req.owner_pid, owner_start=_start(req.owner_pid),
            since=since, what=what,
        )  # fmt: skip

    waiter = jan.ledger.call(enqueue)
    with jan.ledger.read() as tx:
        ahead = [w for w in tx.waiters.on(device) if w.since < waiter.since]
        held = len(_live_on(tx, device))
    kind = "a cut past its job's working set (a group cut again) " if short.growth else ""
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


def _live_on(tx: Tx, device: int) -> list[Any]:
    from janitor.admission.reserve import live_reservations

    return live_reservations(tx, device=device)


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
                    final = _cannot_wait(jan, prep, exc, place.device, place.bytes)
                if final is not None:
                    _give_back(jan, prep)
                    final = _waited(final, now - started)
                    jan.ledger.call(log_refuse_error, final, prep.request.job, time.time())
                    raise final from None
                if now - last_room >= ROOM_EVERY_S:
                    last_room = now
                    _make_room(jan, prep, exc.tree, exc.requested)
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
    """Prepare, grant, and wait in turn if need be: the whole flow in one process (the guard
    without a daemon, tests). ``on_wait(message)`` is told once when the call starts to wait."""
    prep = prepare(jan, req)
    try:
        return grant(jan, prep)
    except Queued as q:
        if on_wait is not None:
            on_wait(q.message)
        return wait(jan, prep, q.ticket)


# -- 4. the end of a call ------------------------------------------------------------------------


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
