"""Where a guarded call's writes land, and what it reads kept: the first step of its admission.

:func:`locate` says where a write lands as admission sees it (the tree that holds it, or only
a tree on its volume); :func:`prepare` then, in one transaction committed before anything is
reserved, classifies each write (:class:`Target`), records the jobs it writes into with its
writer, and touches and pins its inputs that lie in cache trees:

* a write into a job folder (a unit of a scratch tree, or the folder of a job the ledger
  knows, whatever a policy reload since made of its tree) records the job with its writer and
  the processes it came through;
* its cached inputs are pinned: for a job, by its writer, for the job's life (the pipeline
  re-reads a cached WAV once per group with nothing open in between); for any other write, by
  the guard, for the call. So no room made for the outputs can evict an input;
* a job's first cut from a cache entry takes over its writer's awaiting-use mark on it
  (:mod:`janitor.admission.awaiting`): the job's source pin covers the entry from then on.

The :class:`Prepared` call is what :mod:`janitor.guarding.grant` reserves and
:mod:`janitor.guarding.wait` waits with; its ``deadline`` is fixed here, once.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from janitor.guarding.request import CallRequest, PlannedWrite

if TYPE_CHECKING:
    from janitor.admission.jobs import JobFolder
    from janitor.config.policy import TreePolicy
    from janitor.core import Janitor
    from janitor.ledger.jobs import JobInfo, Writer
    from janitor.ledger.tx import Tx

__all__ = ["Located", "Prepared", "Target", "locate", "prepare"]


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


@dataclass(frozen=True, slots=True)
class Target:
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
    targets: tuple[Target, ...]
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


def _classify(jan: Janitor, writes: Sequence[PlannedWrite]) -> tuple[list[Target], list[str]]:
    """Where each write lands (its target), and the writes left unguarded (on no volume the
    policy covers). A write into the folder of a job the ledger knows is that job's, whatever
    the policy now says (a reload may have dropped its tree, moved or respelled its root):
    the job stays its job until it ends. Any other write is placed by the policy."""
    from janitor.admission.jobs import job_folder, job_tree, known_job

    with jan.ledger.read() as tx:
        known = {w.path: known_job(tx, w.path) for w in writes}
    targets: list[Target] = []
    unguarded: list[str] = []
    for w in writes:
        hit = known[w.path]
        if hit is not None:
            targets.append(Target(w, job_tree(jan.policy, hit.job), hit.path, hit.folder))
            continue
        where = locate(jan, w.path)
        if where is None:
            unguarded.append(w.path)
            continue
        tree, recorded = jan.policy.tree(where.tree), where.path
        folder = None if recorded is None else job_folder(jan.policy, tree.name, recorded)
        targets.append(Target(w, tree, recorded, folder))
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
