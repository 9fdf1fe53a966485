"""What a sweep plans from, gathered once; then planning is pure.

A sweep first looks (:func:`survey`): it scans each of its trees, reads the ledger once, in one
transaction (:func:`read_ledger`: pins, reservations, jobs and the touches under each tree;
reaped first when the sweep may delete, the same reap as ``Janitor.reap``), and groups each
tree into its units, and reads the job store beside each staging tree once
(:func:`janitor.cleanup.staging.read_active`: for batchalign 0.10, its running processes).
Then it gathers what is in use now (:meth:`Survey.protection`: also the held lock files, the
open files, a staging tree's unfinished jobs) and measures each volume once
(:func:`measure_volumes`). :func:`plan_world` plans from that :class:`World` alone.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from janitor.admission.jobs import reap_all
from janitor.admission.reserve import live_reservations
from janitor.admission.volume import Volume
from janitor.cleanup.glance import still_there, writing
from janitor.cleanup.kinds import group_units
from janitor.cleanup.plan import Plan, Protection, ScannedTree, plan_pressure, plan_tree
from janitor.cleanup.scan import scan
from janitor.cleanup.staging import StagingJobs, read_active
from janitor.config.policy import Policy, TreePolicy
from janitor.errors import LedgerError
from janitor.host.inuse import lock_held, locked_inodes, open_inodes
from janitor.ledger.db import Ledger
from janitor.ledger.jobs import JobInfo
from janitor.ledger.tx import Tx

__all__ = [
    "Recorded",
    "Survey",
    "World",
    "held_locks",
    "measure_volumes",
    "plan_world",
    "read_ledger",
    "survey",
]


@dataclass(frozen=True, slots=True)
class Recorded:
    """What the ledger says a sweep must respect, read in one transaction: the paths pinned
    and reserved by live owners, the jobs live or orphaned, the touches under each tree root."""

    pins: frozenset[str] = frozenset()
    reserved: frozenset[str] = frozenset()
    jobs: tuple[JobInfo, ...] = ()
    touches: Mapping[str, Mapping[str, float]] = field(default_factory=dict)


def read_ledger(ledger: Ledger, roots: Iterable[str], now: float, *, reap: bool) -> Recorded:
    """One read of the ledger for trees ``roots``; with ``reap``, in one write transaction that
    first ends what outlived its owner or its time (``reap_all``), else in a read snapshot,
    leaving out what a reap would end."""

    def read(tx: Tx) -> Recorded:
        if reap:
            reap_all(tx, now)
        live = live_reservations(tx, now=now, check_owners=not reap)
        return Recorded(
            frozenset(p.path for p in tx.pins.live(now=now)),
            frozenset(r.path for r in live if r.path is not None),
            tuple(tx.jobs.active()),
            {root: tx.touches.under(root) for root in roots},
        )

    if reap:
        recorded: Recorded = ledger.call(read)
        return recorded
    with ledger.read() as tx:
        return read(tx)


@dataclass(frozen=True, slots=True)
class Survey:
    """A sweep's trees as it found them (those whose root is there: scanned, and grouped with
    the touches recorded), with what the ledger said, at ``now``, and what the job store of
    each staging tree said (``staging``)."""

    scanned: tuple[ScannedTree, ...]
    recorded: Recorded
    now: float
    staging: tuple[StagingJobs, ...] = ()

    @property
    def devices(self) -> set[int]:
        """The volumes the trees found are on."""
        return {s.snapshot.device for s in self.scanned}

    def evictable(self) -> bool:
        """Whether any tree holds a unit that is more than its lock file (lock files of
        evicted entries are never removed, and free nothing)."""
        return any(len(s.units) > len(s.units.lock_only()) for s in self.scanned)

    def protection(
        self, devices: set[int], opened: frozenset[tuple[int, int]] | None = None
    ) -> Protection:
        """What a plan must leave alone now. ``opened``: the open-file list on ``devices`` if
        taken already (before the tree locks: it is the slow part, and every file is asked
        again right before its delete, by a lease or a fresh list, so taking it early loses
        nothing)."""
        live: set[str] = set()
        orphans: set[str] = set()
        sources: set[str] = set()
        for job in self.recorded.jobs:
            if writing(job):
                live.add(job.folder)
                # What a live job reads stays for the job's life, whichever writer pinned it.
                sources.update(s.source for s in job.sources if s.pin)
            elif still_there(job) and not job.foreign:
                orphans.add(job.folder)
        for store in self.staging:
            live.update(store.live)
        return Protection(
            self.recorded.pins | sources,
            self.recorded.reserved,
            held_locks(self.scanned),
            open_inodes(devices) if opened is None else opened,
            frozenset(live),
            frozenset(orphans),
        )


def survey(
    ledger: Ledger,
    trees: Sequence[TreePolicy],
    now: float,
    *,
    reap: bool = False,
    progress: Callable[[str, int], None] | None = None,
    ledger_optional: bool = False,
) -> Survey:
    """Scan ``trees``, read the ledger once (see :func:`read_ledger`), group each tree found.

    ``ledger_optional``: a ledger that cannot be read is taken as holding nothing (`janitor
    emergency`: the disk may be too full to open it); pins are then unknown, and only what
    no process holds or has open goes.
    """
    snaps = []
    for tree in trees:
        cb = None if progress is None else (lambda n, name=tree.name: progress(name, n))
        snaps.append((tree, scan(tree.path, progress=cb)))
    found = [(tree, snap) for tree, snap in snaps if snap.exists]
    try:
        recorded = read_ledger(ledger, [snap.root for _, snap in found], now, reap=reap)
    except LedgerError:
        if not ledger_optional:
            raise
        recorded = Recorded()
    scanned = tuple(
        ScannedTree(snap, group_units(snap, tree, recorded.touches.get(snap.root)), tree)
        for tree, snap in found
    )
    staging = tuple(
        read_active(s.tree, s.snapshot.root, s.units)
        for s in scanned
        if s.tree.active_jobs is not None
    )
    return Survey(scanned, recorded, now, staging)


def held_locks(scanned: Iterable[ScannedTree]) -> frozenset[str]:
    """The units' lock files that some process holds a flock on now.

    Where the kernel lists its locks (Linux's /proc/locks), only files whose inode is listed
    there are probed, a handful instead of every unit's lock file (a million in a big cache);
    elsewhere every unit's lock path is. A lock taken after this is still caught: the deleter
    takes each unit's lock itself before removing anything.
    """
    inodes = locked_inodes()
    held: set[str] = set()
    for snap, table, tree in scanned:
        if not tree.lock or not len(table):
            continue
        candidates: Iterable[str | None]
        if inodes is None:
            candidates = map(table.lock, range(len(table)))
        elif not inodes:
            continue
        else:
            candidates = [e.path for e in snap.entries if e.ino in inodes]
        held.update(p for p in candidates if p is not None and os.path.lexists(p) and lock_held(p))
    return frozenset(held)


def measure_volumes(policy: Policy, scanned: Iterable[ScannedTree]) -> dict[int, Volume]:
    """One ``Volume`` for each volume the trees are on, measured now (free space, its size
    and the policy's numbers for it)."""
    volumes: dict[int, Volume] = {}
    for s in scanned:
        if s.snapshot.device not in volumes:
            volumes[s.snapshot.device] = Volume.at(policy, s.snapshot.root)
    return volumes


@dataclass(frozen=True, slots=True)
class World:
    """Everything a sweep plans from, gathered once: each tree found, what is in use, each
    volume measured, and the time it is judged at."""

    scanned: tuple[ScannedTree, ...]
    protection: Protection
    volumes: Mapping[int, Volume]
    now: float


def plan_world(world: World, *, pressure: bool = True) -> Plan:
    """What a sweep deletes (pure: reads nothing but ``world``): each tree's quota, ages and
    orphans; then, with ``pressure``, on each volume below free_low, the oldest cache units
    until free_target is free once the rest of the plan is done."""
    plan = Plan((), ())
    planned: dict[int, int] = {}
    for s in world.scanned:
        total = world.volumes[s.snapshot.device].total
        part = plan_tree(
            s.snapshot,
            s.units,
            s.tree,
            volume_total=total,
            protection=world.protection,
            now=world.now,
        )
        plan = plan.merged(part)
        planned[s.snapshot.device] = planned.get(s.snapshot.device, 0) + part.bytes
    if not pressure:
        return plan
    for device, vol in world.volumes.items():
        if vol.free >= vol.free_low:
            continue
        need = vol.free_target - vol.free - planned.get(device, 0)
        if need > 0:
            extra = plan_pressure(
                [s for s in world.scanned if s.snapshot.device == device],
                need,
                protection=world.protection,
                exclude=[(i.tree, i.unit.key) for i in plan.items],
            )
            plan = plan.merged(Plan(extra.items, ()))
    return plan
