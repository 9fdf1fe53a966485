"""Reserving the writes of one guarded ffmpeg call as part of its job, in a deliberate order.

1. **What it reads stays** (:func:`prepare`, one transaction, committed first): each write into
   a job folder (a unit of a scratch tree) records the job with its writer; the inputs that lie
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
3. **Room, then a turn**: a refused call evicts caches once (never a pinned input) and tries
   again; a job's first write that still does not fit, but would once running jobs end, takes
   a place in the volume's queue (:class:`Queued`) and :func:`wait` admits it in turn, first come
   first served; one that could never fit is refused at once (:class:`~janitor.errors.NeverFits`).
4. :func:`close_writes` ends what the call alone held; the job's working set and pins stay.

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
)
from janitor.humanize import format_size
from janitor.jobs.held import HeldWrite, WriteSession, Written

if TYPE_CHECKING:
    from janitor.admission.jobs import JobFolder
    from janitor.admission.reserve import Admission
    from janitor.config.policy import TreePolicy
    from janitor.core import Janitor
    from janitor.ledger.jobs import JobInfo, Waiter, Writer
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
#: How far a job's cuts may pass its working set, on their own, without a new admission: each
#: cut's file rounds up to whole blocks of its filesystem (4 KiB; a few hundred per hour of
#: audio), which the working set, worked out from the duration, cannot know.
WORKING_SET_MARGIN = 0.02
WORKING_SET_SLACK = 1 << 20


@dataclass(frozen=True, slots=True)
class PlannedWrite:
    """One file a command will write, and how many bytes. A cut (a window of its input)
    names its ``source`` and ``whole_bytes``, what the whole source takes in the same format:
    the working set of a job that cuts it group by group."""

    path: str
    bytes: int
    source: str | None = None
    whole_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class CallRequest:
    """What one guarded call asks for: its writes and inputs; the guard (``owner_pid``: the
    call's own reservations and pins end with it) and its parent (``writer_pid``: the process
    that ran ffmpeg, where the job's writer chain starts; ``writer_is_parent``: it is the
    guard's parent, as both guards send it, so it is read through the guard); a label, the
    ``janitor run`` it belongs to, and how long a job's first write may wait for room."""

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
                PlannedWrite(w["path"], int(w["bytes"]), w.get("source"), w.get("whole_bytes"))
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
    tree: str
    recorded: str | None
    folder: JobFolder | None

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
    that end with the call, and whether it is a job's first write (the only kind that waits)."""

    request: CallRequest
    targets: tuple[_Target, ...]
    unguarded: tuple[str, ...]
    writer: Writer
    jobs: dict[str, str] = field(default_factory=dict)  # job folder -> job id
    pins: tuple[str, ...] = ()
    first: bool = True


def prepare(jan: Janitor, req: CallRequest) -> Prepared:
    """Classify the call's writes, record its jobs and pin its inputs, in one transaction."""
    from janitor.admission.jobs import job_folder, record_job
    from janitor.host.owner import process_start, writer_chain
    from janitor.ledger.jobs import Writer

    targets: list[_Target] = []
    unguarded: list[str] = []
    for w in req.writes:
        where = locate(jan, w.path)
        if where is None:
            unguarded.append(w.path)
            continue
        tree, recorded = where.tree, where.path
        folder = None if recorded is None else job_folder(jan.policy, tree, recorded)
        targets.append(_Target(w, tree, recorded, folder))
    folders = {t.folder.folder: t.folder for t in targets if t.folder is not None}
    lineage: tuple[Writer, ...] = ()
    if folders and req.writer_pid:
        # The guard's parent, PID 1 included (a server that is a container's entrypoint), and
        # the go-betweens up to the writer, all recorded: the job lives while any of them, or
        # what they forked, runs. One gone before it was read has a start time no process has.
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
        return Prepared(
            req,
            tuple(targets),
            tuple(unguarded),
            writer,
            {path: job.id for path, job in jobs.items()},
            tuple(call_pins),
            first,
        )

    if not folders and not inputs:
        return Prepared(req, tuple(targets), tuple(unguarded), writer)
    prepared: Prepared = jan.ledger.call(write)
    return prepared


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
    """Raised inside the grant transaction to roll it back: what did not fit, and where."""

    def __init__(self, decision: Admission, output: str, needs: dict[int, int]) -> None:
        super().__init__(output)
        self.decision = decision
        self.output = output
        self.needs = needs  # device -> what the call wants there


def grant(jan: Janitor, prep: Prepared, *, ticket: str | None = None) -> WriteSession:
    """Reserve every write of a prepared call, all or none, in one transaction.

    Raises ReservationRefused for the first write that does not fit (``output`` names it),
    SpaceRisk when a later cut's job is at risk (it must stop), :class:`Queued` when a first
    write may wait, NeverFits when it never could. A call holding ``ticket`` is the waiter of
    that place in the queue: only the calls ahead of it count against it.
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
                evicted = jan.make_room(short.decision.tree, short.decision.requested)
                if evicted > 0:
                    continue
            break
        else:
            return session
    refused = short.decision.refusal(short.output)
    if ticket is not None:
        raise refused  # still waiting: what the call holds stays
    if prep.first and prep.request.wait_s > 0:
        raise _queue(jan, prep, refused, short)
    _give_back(jan, prep)
    raise refused


def _grant(tx: Tx, jan: Janitor, prep: Prepared, ticket: str | None, evicted: int) -> WriteSession:
    from janitor.admission.jobs import queued_ahead
    from janitor.admission.reserve import admit

    policy = jan.policy
    now = time.time()
    req = prep.request
    queued: dict[int, int] = {}
    needs: dict[int, int] = {}
    held: list[HeldWrite] = []
    for t in prep.targets:
        tp = policy.tree(t.tree)
        w = t.write
        if t.cut:
            assert t.folder is not None and t.recorded is not None and w.source is not None
            job_id = prep.jobs[t.folder.folder]
            held.append(_draw(tx, jan, tp, t, job_id, prep, ticket, queued, needs, evicted, now))
            continue
        device = _device(jan, tp)
        needs[device] = needs.get(device, 0) + w.bytes
        if prep.first and device not in queued:
            queued[device] = queued_ahead(tx, device, ticket)
        decision, info = admit(
            tx, policy, tp, w.bytes, path=t.recorded, job=req.job, owner_pid=req.owner_pid,
            owner_start=_start(req.owner_pid), ttl=jan.settings.default_ttl_s, now=now,
            evicted=evicted, queued=queued.get(device, 0), log_refusal=False,
        )  # fmt: skip
        if info is None:
            raise _Short(decision, w.path, needs)
        if t.folder is not None and w.source is not None and t.recorded is not None:
            _note_source(tx, prep.jobs[t.folder.folder], w.source, os.path.dirname(t.recorded), 0)
        held.append(HeldWrite(info.id, w.path, w.bytes, decision.floor))
    return WriteSession(
        tuple(held),
        prep.pins,
        prep.unguarded,
        tuple(dict.fromkeys(prep.jobs.values())),
    )


def _draw(
    tx: Tx,
    jan: Janitor,
    tp: TreePolicy,
    t: _Target,
    job_id: str,
    prep: Prepared,
    ticket: str | None,
    queued: dict[int, int],
    needs: dict[int, int],
    evicted: int,
    now: float,
) -> HeldWrite:
    """A cut: drawn from its job's working set for its source, reserved at the first cut."""
    from janitor.admission.jobs import queued_ahead
    from janitor.admission.reserve import admit, grow_reservation, read_volume

    w = t.write
    assert t.recorded is not None and w.source is not None and w.whole_bytes is not None
    out_dir = os.path.dirname(t.recorded)
    job = tx.jobs.get(job_id)
    assert job is not None
    pool = tx.reservations.pool(job_id, out_dir)
    known = job.source(w.source)
    vol = read_volume(jan.policy, tp)  # once: its device, floor and free space now
    device = vol.device
    if pool is not None and known is not None and known.output_dir == out_dir:
        # A later cut: no new admission; stopped if its job must stop.
        if pool.at_risk is not None and vol.free < vol.floor:
            raise SpaceRisk(pool.id, pool.volume, pool.at_risk)
        if w.bytes <= pool.outstanding:
            return HeldWrite(pool.id, w.path, pool.outstanding, vol.floor, pooled=True)
        # More than the working set has left. Within the estimate's margin (each cut's file
        # rounds up to whole blocks, which the working set cannot know) it is granted as it
        # stands: an admitted file is never refused midway, and the floor's margin covers it.
        # Past that (a group cut twice), the rest is admitted like any growth.
        extra = w.bytes - pool.outstanding
        planned = sum(s.working_set for s in job.sources if s.output_dir == out_dir)
        if pool.bytes + extra <= planned * (1 + WORKING_SET_MARGIN) + WORKING_SET_SLACK:
            tx.reservations.set_bytes(pool.id, pool.bytes + extra)
            tx.log.add(
                "grow", tree=pool.tree, device=pool.device, reservation=pool.id,
                nbytes=pool.bytes + extra, path=pool.path, ts=now, previous=pool.bytes,
                within_margin=True,
            )  # fmt: skip
            return HeldWrite(pool.id, w.path, w.bytes, vol.floor, pooled=True)
        needs[device] = needs.get(device, 0) + extra
        decision, grown = grow_reservation(tx, jan.policy, tp, pool.id, pool.bytes + extra, now=now)
        if grown is None:
            raise _Short(decision, w.path, needs)
        return HeldWrite(pool.id, w.path, w.bytes, decision.floor, pooled=True)
    # The first cut from this source into this folder: the whole source's working set.
    working_set = w.whole_bytes
    needs[device] = needs.get(device, 0) + working_set
    if prep.first and device not in queued:
        queued[device] = queued_ahead(tx, device, ticket)
    if pool is None:
        writer = prep.writer
        decision, info = admit(
            tx, jan.policy, tp, working_set, path=out_dir, job=prep.request.job,
            owner_pid=writer.pid, owner_start=writer.start, ttl=math.inf, now=now,
            evicted=evicted, queued=queued.get(device, 0), job_id=job_id, log_refusal=False,
        )  # fmt: skip
        if info is None:
            raise _Short(decision, w.path, needs)
        pool = info
    else:  # another source cutting into the same folder: its working set joins
        decision, grown = grow_reservation(
            tx, jan.policy, tp, pool.id, pool.bytes + working_set, now=now
        )
        if grown is None:
            raise _Short(decision, w.path, needs)
        pool = grown
    _note_source(tx, job_id, w.source, out_dir, working_set)
    return HeldWrite(pool.id, w.path, max(pool.outstanding, w.bytes), decision.floor, pooled=True)


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


def _queue(jan: Janitor, prep: Prepared, refused: ReservationRefused, short: _Short) -> Exception:
    """Queue a refused first write, or say it never fits (refused at once): NeverFits takes its
    numbers from the decision that refused, asking for all the call wants on the volume."""
    from janitor.admission.jobs import capacity
    from janitor.admission.volume import Volume

    tp = jan.policy.tree(refused.tree)
    vol = Volume.at(jan.policy, tp.path)
    need = short.needs.get(vol.device, refused.requested)
    with jan.ledger.read() as tx:
        own = [tx.jobs.get(j) for j in set(prep.jobs.values())]
        kept = frozenset(s.source for j in own if j is not None for s in j.sources if s.pin)
        cap = capacity(tx, jan.policy, vol, kept=kept)
    if need > cap.most:
        _give_back(jan, prep)
        whole = replace(short.decision, requested=need, queued=0)
        return NeverFits(whole, output=refused.output, capacity=cap.total, held=cap.held)
    req = prep.request
    what = refused.output or "?"

    def enqueue(tx: Tx) -> Waiter:
        tx.waiters.remove_of(req.owner_pid)  # a place it lost track of must not wait ahead of it
        return tx.waiters.add(
            vol.device, need, owner_pid=req.owner_pid, owner_start=_start(req.owner_pid),
            since=time.time(), what=what,
        )  # fmt: skip

    waiter = jan.ledger.call(enqueue)
    with jan.ledger.read() as tx:
        ahead = [w for w in tx.waiters.on(vol.device) if w.since < waiter.since]
        held = len(_live_on(tx, vol.device))
    message = (
        f"waiting for {format_size(need)} on volume {refused.volume} to write {what}: "
        f"{format_size(max(0, refused.free - refused.floor - refused.reserved))} free above the "
        f"floor, {format_size(refused.reserved)} held by {held} running job"
        f"{'' if held == 1 else 's'} and write"
        f"{'' if held == 1 else 's'}"
        + (f", {len(ahead)} waiting ahead" if ahead else "")
        + f"; up to {req.wait_s:g} s (JANITOR_GUARD_WAIT_S=0 refuses at once)"
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
    """Admit a queued call in its turn, within its ``wait_s``: tried again whenever space is
    freed here (a release, a job's end: ``jan.space``) and every POLL_S anyway; room is made
    again every ROOM_EVERY_S. ReservationRefused (with the seconds waited) when time is up.

    ``still_wanted()`` False (the caller is gone) ends the wait at once.
    """
    started = time.monotonic()
    deadline = started + prep.request.wait_s
    last_room = started
    try:
        while True:
            try:
                session = grant(jan, prep, ticket=ticket)
            except ReservationRefused as exc:
                now = time.monotonic()
                if now >= deadline or not still_wanted():
                    _give_back(jan, prep)
                    final = _waited(exc, now - started)
                    jan.ledger.call(log_refuse_error, final, prep.request.job, time.time())
                    raise final from None
                if now - last_room >= ROOM_EVERY_S:
                    last_room = now
                    jan.make_room(exc.tree, exc.requested)
                jan.space.wait(min(POLL_S, deadline - now))
                continue
            waited = time.monotonic() - started
            return WriteSession(
                session.writes, session.pins, session.unguarded, session.jobs, waited
            )
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
) -> None:
    """End what a call alone held (those already ended are skipped; a job's stay), after one
    ``wrote`` line per output in the log: what ``janitor run`` sums up as written, whether the
    bytes were drawn on a reservation of the call's own or on its job's working set."""
    if written:

        def note(tx: Tx) -> None:
            now = time.time()
            for w in written:
                tx.log.add("wrote", path=w.path, nbytes=w.bytes, ts=now, job=job, run=run)

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
