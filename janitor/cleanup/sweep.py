"""Sweeps and make-room: scan, gather what is in use, plan, apply, one tree lock at a time.

Every path that deletes goes through here: `janitor sweep`, volume pressure, and the make-room
step of a refused reservation. Each takes the per-tree lock files (``state_dir/locks``) of the
trees it may touch, in name order, so two sweeps in two processes never work on one tree at once
and never delete a file twice; the second one waits, scans afresh, and finds nothing to do.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from janitor.admission.jobs import reap_jobs
from janitor.admission.reserve import live_reservations, reap
from janitor.admission.volume import Volume
from janitor.cleanup.delete import Report, apply
from janitor.cleanup.glance import still_there, writing
from janitor.cleanup.plan import Plan, Protection, Reason, plan_pressure, plan_tree, plan_units
from janitor.cleanup.scan import Snapshot, display_path, scan
from janitor.cleanup.units import UnitTable, group_units
from janitor.config.policy import Policy, TreePolicy
from janitor.config.state_dir import access_error
from janitor.errors import LedgerError
from janitor.host.inuse import lock_held, locked_inodes, open_inodes, prepare_leases
from janitor.host.space import volume_stats
from janitor.ledger.db import Ledger

__all__ = [
    "EmergencyResult",
    "SweepResult",
    "emergency",
    "make_room",
    "remove_units",
    "run_sweep",
    "tree_locks",
]


@dataclass(frozen=True, slots=True)
class SweepResult:
    """A sweep's plan and what applying it did (a dry run's report deletes nothing), and the
    trees it could not sweep, each with why (``unswept``: a root that is a symlink or a file)."""

    plan: Plan
    report: Report
    unswept: tuple[str, ...] = ()
    #: Allocated bytes below each swept tree's root as the scan found them (what `janitor
    #: space` shows without walking the trees a second time).
    sizes: Mapping[str, int] = field(default_factory=dict)

    @property
    def warnings(self) -> tuple[str, ...]:
        """What the sweep has to say: trees it could not sweep, then what the deleter saw."""
        return self.unswept + self.report.warnings

    def as_dict(self) -> dict[str, Any]:
        """The JSON shape of `janitor sweep --json` and ``POST /v1/sweep``."""
        report = self.report
        items = [
            {
                "tree": o.item.tree,
                "path": display_path(o.item.unit.path),
                "kind": o.item.unit.kind,
                "reason": o.item.reason,
                "bytes": o.item.size,
                "last_use": o.item.last_use,
                "deleted": o.deleted,
                "files": o.files,
                "skipped": None if report.dry_run else o.skipped,
            }
            for o in report.outcomes
        ]
        trees = [
            {
                "tree": t.tree,
                "role": t.role,
                "path": display_path(t.root),
                "usage": t.usage,
                "units": t.units,
                "quota": t.quota,
                "low_watermark": t.low_watermark,
                "planned": t.planned,
                "reaches_target": t.reaches_target,
                "kept": dict(t.kept),
            }
            for t in self.plan.trees
        ]
        return {
            "dry_run": report.dry_run,
            "planned_bytes": self.plan.bytes,
            "deleted_bytes": report.deleted_bytes,
            "reclaimed_bytes": report.reclaimed_bytes,
            "items": items,
            "trees": trees,
            "volumes": [
                {
                    "mount": v.mount,
                    "free_before": v.free_before,
                    "free_after": v.free_after,
                    "reclaimed": v.reclaimed,
                }
                for v in report.volumes
            ],
            "warnings": list(self.warnings),
        }


@contextmanager
def tree_locks(state_dir: Path, names: Sequence[str], timeout: float = 600.0) -> Iterator[None]:
    """Hold the lock file of every named tree (sorted, so two callers cannot deadlock)."""
    folder = state_dir / "locks"
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise access_error(folder, exc, "create") from None
    with ExitStack() as stack:
        for name in sorted(set(names)):
            lock = folder / f"tree-{name}.lock"
            try:
                fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            except OSError as exc:
                raise access_error(lock, exc, "open the tree lock") from None
            stack.callback(os.close, fd)
            deadline = time.monotonic() + timeout
            delay = 0.001
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise LedgerError(
                            f"tree {name!r} stayed locked by another sweep for {timeout:g}s"
                        ) from None
                    time.sleep(delay)
                    delay = min(delay * 2, 0.05)
        yield


Scanned = list[tuple[Snapshot, UnitTable, TreePolicy]]


def _held_locks(scanned: Scanned) -> frozenset[str]:
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


def _protection(
    ledger: Ledger,
    scanned: Scanned,
    devices: set[int],
    now: float,
    opened: frozenset[tuple[int, int]] | None = None,
) -> Protection:
    """What a plan must leave alone. ``opened``: the open-file list if taken already (before
    the tree locks: it is the slow part, and every file is asked again right before its
    delete, by a lease or a fresh list, so taking it early loses nothing)."""
    with ledger.read() as tx:
        pins = frozenset(p.path for p in tx.pins.live(now=now))
        reserved = frozenset(r.path for r in live_reservations(tx, now=now) if r.path is not None)
        jobs = tx.jobs.active()
    live: set[str] = set()
    orphans: set[str] = set()
    sources: set[str] = set()
    for job in jobs:
        if writing(job):
            live.add(job.folder)
            # What a live job reads stays for the job's life, whichever writer pinned it.
            sources.update(s.source for s in job.sources if s.pin)
        elif still_there(job) and not job.foreign:
            orphans.add(job.folder)
    live.update(_active_staging(scanned))
    if opened is None:
        opened = open_inodes(devices)
    return Protection(
        pins | sources,
        reserved,
        _held_locks(scanned),
        opened,
        frozenset(live),
        frozenset(orphans),
    )


def _active_staging(scanned: Scanned) -> set[str]:
    """The folders of a staging tree (``active_jobs``) named for a job its program holds as
    queued or running: kept as a live job's folder. Unreadable job store: age alone judges."""
    from janitor.host.batchalign3 import jobs_db
    from janitor.ledger.foreign import active_jobs

    folders: set[str] = set()
    for snap, _table, tree in scanned:
        if tree.active_jobs != "batchalign3":
            continue
        ids = active_jobs(jobs_db())
        folders.update(os.path.join(snap.root, i) for i in ids or ())
    return folders


def _holds_entries(tree: TreePolicy) -> bool:
    """A glance at a tree's top folder: anything there but lock files?"""
    try:
        with os.scandir(tree.path) as it:
            return any(not e.name.endswith(".lock") for e in it)
    except OSError:
        return False


def _devices_of(trees: Sequence[TreePolicy]) -> set[int]:
    from janitor.host.space import device_of

    found = set()
    for t in trees:
        try:
            found.add(device_of(t.path))
        except OSError:
            continue
    return found


def _scan_trees(
    ledger: Ledger,
    trees: Sequence[TreePolicy],
    progress: Callable[[str, int], None] | None,
) -> Scanned:
    out = []
    for tree in trees:
        cb = None if progress is None else (lambda n, name=tree.name: progress(name, n))
        snap = scan(tree.path, progress=cb)
        with ledger.read() as tx:
            touches = tx.touches.under(snap.root)
        out.append((snap, group_units(snap, tree, touches), tree))
    return out


def run_sweep(
    policy: Policy,
    ledger: Ledger,
    state_dir: Path,
    *,
    tree: str | None = None,
    dry_run: bool = False,
    pressure: bool = True,
    progress: Callable[[str, int], None] | None = None,
    names: Sequence[str] | None = None,
) -> SweepResult:
    """Bring one tree (or ``names``, or all) within policy: quotas, ages, orphans, then volume
    pressure."""
    if tree is not None:
        trees = [policy.tree(tree)]
    elif names is not None:
        trees = [policy.tree(n) for n in names]
    else:
        trees = list(policy.trees.values())
    prepare_leases()
    early = _devices_of(trees)
    opened = open_inodes(early)  # before the locks: see _protection
    with tree_locks(state_dir, [t.name for t in trees]):
        now = time.time()
        if not dry_run:
            with ledger.write() as tx:
                reap(tx, now)
                tx.pins.reap(now)
                reap_jobs(tx, now)
        scanned = _scan_trees(ledger, trees, progress)
        devices = {s.device for s, _, _ in scanned if s.exists}
        protection = _protection(
            ledger, scanned, devices, now, opened if devices <= early else None
        )
        plan = Plan((), ())
        totals: dict[int, int] = {}
        for snap, units, tp in scanned:
            if not snap.exists:
                continue
            total = volume_stats(snap.root).total
            part = plan_tree(snap, units, tp, volume_total=total, protection=protection, now=now)
            plan = plan.merged(part)
            totals[snap.device] = totals.get(snap.device, 0) + part.bytes
        if pressure:
            for device in devices:
                on_volume = [s for s in scanned if s[0].device == device and s[0].exists]
                vs = Volume.at(policy, on_volume[0][0].root)
                if vs.free >= vs.free_low:
                    continue
                need = vs.free_target - vs.free - totals.get(device, 0)
                if need > 0:
                    extra = plan_pressure(
                        on_volume,
                        need,
                        protection=protection,
                        now=now,
                        exclude=[(i.tree, i.unit.key) for i in plan.items],
                    )
                    plan = plan.merged(Plan(extra.items, ()))
        report = apply(plan, ledger=ledger, dry_run=dry_run, open_set=protection.open)
    sizes = {tp.name: snap.total for snap, _, tp in scanned if snap.exists}
    return SweepResult(plan, report, tuple(_unswept(trees)), sizes)


def _unswept(trees: Sequence[TreePolicy]) -> Iterator[str]:
    """Why each tree whose root is there but is no folder of ours was not swept."""
    for tree in trees:
        root = str(tree.path)
        if os.path.islink(root):
            try:
                target = os.readlink(root)
            except OSError:
                target = "?"
            yield (
                f"tree {tree.name!r} was not swept: its root {root} is a symlink (to {target}), "
                "which the janitor never follows; point the policy at the real folder"
            )
        elif os.path.lexists(root) and not os.path.isdir(root):
            yield (
                f"tree {tree.name!r} was not swept: its root {root} is not a folder; fix the "
                "tree's path in the policy"
            )


def make_room(
    policy: Policy,
    ledger: Ledger,
    state_dir: Path,
    device: int,
    shortfall: Callable[[], int],
    *,
    reason: Reason = "make-room",
) -> Report | None:
    """Evict caches on volume ``device`` to cover a refused reservation's shortfall.

    ``shortfall()`` is asked again once the tree locks are held: another process may have made
    the room meanwhile. Returns None when there was nothing to do.
    """
    from janitor.host.space import device_of

    trees = []
    for t in policy.trees.values():
        if not t.evicts_for_room:
            continue
        try:
            if device_of(t.path) == device:
                trees.append(t)
        except OSError:
            continue
    if not trees:
        return None
    prepare_leases()
    # The open-file list before the locks (see _protection), when there may be something to
    # evict: a cache holding only lock files is not worth the walk over every process.
    opened = open_inodes({device}) if any(_holds_entries(t) for t in trees) else None
    with tree_locks(state_dir, [t.name for t in trees]):
        need = shortfall()
        if need <= 0:
            return None
        now = time.time()
        scanned = [s for s in _scan_trees(ledger, trees, None) if s[0].exists]
        if not any(len(units) > len(units.lock_only()) for _, units, _ in scanned):
            return None  # nothing to evict (lock files of evicted entries free nothing)
        protection = _protection(ledger, scanned, {device}, now, opened)
        plan = plan_pressure(scanned, need, protection=protection, now=now, reason=reason)
        if not plan.items:
            return None
        if reason == "make-room" and plan.bytes < need:
            # Evicting all that is evictable would still not make the reservation fit: the
            # refusal stands either way, so keep the cache rather than destroy it for nothing.
            return None
        return apply(plan, ledger=ledger, open_set=protection.open)


def remove_units(
    policy: Policy,
    ledger: Ledger,
    state_dir: Path,
    tree: str,
    keys: Sequence[str],
    *,
    dry_run: bool = False,
) -> Report:
    """Remove the named units of ``tree`` now (leftovers of a process tree known to be gone),
    under the tree's lock, with every check of the deleter; protected units are kept."""
    tp = policy.tree(tree)
    prepare_leases()
    with tree_locks(state_dir, [tree]):
        now = time.time()
        scanned = _scan_trees(ledger, [tp], None)
        snap, table, _ = scanned[0]
        if not snap.exists:
            return apply(Plan((), ()), ledger=ledger, dry_run=dry_run)
        protection = _protection(ledger, scanned, {snap.device}, now)
        plan = plan_units(snap, table, tp, keys, protection=protection)
        return apply(plan, ledger=ledger, dry_run=dry_run, open_set=protection.open)


@dataclass(frozen=True, slots=True)
class EmergencyResult:
    """What `janitor emergency` freed: ballast files, then cache units (nothing logged)."""

    ballast: tuple[tuple[str, int], ...]
    report: Report

    @property
    def freed(self) -> int:
        """Bytes deleted: ballast plus evicted cache units."""
        return sum(n for _, n in self.ballast) + self.report.deleted_bytes


def emergency(
    policy: Policy, ledger: Ledger, state_dir: Path, *, dry_run: bool = False
) -> EmergencyResult:
    """For a disk that is already full: free every ballast, then evict caches on each volume
    below free_low until free_target, without writing to the ledger (it may not be writable).

    Pins are still honoured (read from the ledger; reading needs no space), and every deleter
    check still applies.
    """
    from janitor.host.ballast import Ballast, ballast_path
    from janitor.host.space import device_of

    by_device: dict[int, list[TreePolicy]] = {}
    for t in policy.trees.values():
        try:
            by_device.setdefault(device_of(t.path), []).append(t)
        except OSError:
            continue
    freed: list[tuple[str, int]] = []
    for device, trees in by_device.items():
        where = ballast_path(state_dir, [t.path for t in trees], device)
        if where is None or not where.exists():
            continue
        size = os.lstat(where).st_blocks * 512
        if not dry_run:
            size = Ballast(where, size).release()
        freed.append((str(where), size))
    prepare_leases()
    plan = Plan((), ())
    now = time.time()
    open_set: frozenset[tuple[int, int]] = frozenset()
    for device, trees in by_device.items():
        caches = [t for t in trees if t.evicts_for_room]
        if not caches:
            continue
        vs = Volume.at(policy, caches[0].path)
        free_target = vs.free_target
        if vs.free >= vs.free_low and not dry_run:
            continue
        scanned = [s for s in _scan_trees(ledger, caches, None) if s[0].exists]
        try:
            protection = _protection(ledger, scanned, {device}, now)
        except LedgerError:
            # An unreadable ledger: pins cannot be known, so only what no process holds goes.
            protection = Protection(locked=_held_locks(scanned), open=open_inodes({device}))
        open_set = open_set | protection.open
        need = max(free_target - vs.free, 0) if not dry_run else free_target - vs.free
        part = plan_pressure(scanned, need, protection=protection, now=now, reason="pressure")
        plan = plan.merged(part)
    report = apply(plan, ledger=None, dry_run=dry_run, open_set=open_set)
    return EmergencyResult(tuple(freed), report)
