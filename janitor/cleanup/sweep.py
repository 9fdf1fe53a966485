"""Sweeps and make-room: scan, gather what is in use, plan, apply, one tree lock at a time.

Every path that deletes goes through here: `janitor sweep`, volume pressure, and the make-room
step of a refused reservation. Each takes the per-tree lock files (``state_dir/locks``) of the
trees it may touch, in name order, so two sweeps in two processes never work on one tree at once
and never delete a file twice; the second one waits, scans afresh, and finds nothing to do.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from janitor.admission.volume import Volume
from janitor.cleanup.apply import Report, apply
from janitor.cleanup.plan import Plan, Reason, plan_pressure, plan_units
from janitor.cleanup.scan import display_path
from janitor.cleanup.staging import StagingJobs
from janitor.cleanup.world import World, measure_volumes, plan_world, survey
from janitor.config.policy import Policy, TreePolicy, trees_by_device
from janitor.config.state_dir import access_error
from janitor.errors import LedgerError
from janitor.host.flock import lock_until
from janitor.host.inuse import open_inodes, prepare_leases
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
    #: What each staging tree's job store said (a store that cannot be read keeps every folder).
    staging: tuple[StagingJobs, ...] = ()

    @property
    def warnings(self) -> tuple[str, ...]:
        """What the sweep has to say: trees it could not sweep, staging trees whose job store
        could not be read (one line a tree), then what the deleter saw."""
        stores = tuple(w for w in (s.warning for s in self.staging) if w is not None)
        return self.unswept + stores + self.report.warnings

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
            if not lock_until(fd, time.monotonic() + timeout):
                raise LedgerError(f"tree {name!r} stayed locked by another sweep for {timeout:g}s")
        yield


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
    pressure. Its world is gathered once (``janitor.cleanup.world``), then planned from."""
    if tree is not None:
        trees = [policy.tree(tree)]
    elif names is not None:
        trees = [policy.tree(n) for n in names]
    else:
        trees = list(policy.trees.values())
    prepare_leases()
    early = set(trees_by_device(trees))
    opened = open_inodes(early)  # before the locks: see Survey.protection
    with tree_locks(state_dir, [t.name for t in trees]):
        found = survey(ledger, trees, time.time(), reap=not dry_run, progress=progress)
        devices = found.devices
        world = World(
            found.scanned,
            found.protection(devices, opened if devices <= early else None),
            measure_volumes(policy, found.scanned),
            found.now,
        )
        plan = plan_world(world, pressure=pressure)
        report = apply(plan, ledger=ledger, dry_run=dry_run, open_set=world.protection.open)
    sizes = {s.tree.name: s.snapshot.total for s in world.scanned}
    return SweepResult(plan, report, tuple(_unswept(trees)), sizes, found.staging)


def _holds_entries(tree: TreePolicy) -> bool:
    """A glance at a tree's top folder: anything there but lock files?"""
    try:
        with os.scandir(tree.path) as it:
            return any(not e.name.endswith(".lock") for e in it)
    except OSError:
        return False


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
    evicting = (t for t in policy.trees.values() if t.evicts_for_room)
    trees = trees_by_device(evicting).get(device, [])
    if not trees:
        return None
    prepare_leases()
    # The open-file list before the locks (see Survey.protection), when there may be something
    # to evict: a cache holding only lock files is not worth the walk over every process.
    opened = open_inodes({device}) if any(_holds_entries(t) for t in trees) else None
    with tree_locks(state_dir, [t.name for t in trees]):
        need = shortfall()
        if need <= 0:
            return None
        found = survey(ledger, trees, time.time())
        if not found.evictable():
            return None  # nothing to evict (lock files of evicted entries free nothing)
        protection = found.protection({device}, opened)
        plan = plan_pressure(found.scanned, need, protection=protection, reason=reason)
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
        found = survey(ledger, [tp], time.time())
        if not found.scanned:
            return apply(Plan((), ()), ledger=ledger, dry_run=dry_run)
        snap, table, _ = found.scanned[0]
        protection = found.protection({snap.device})
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

    by_device = trees_by_device(policy.trees.values())
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
        if vs.free >= vs.free_low and not dry_run:
            continue
        # An unreadable ledger: pins cannot be known, so only what no process holds goes.
        found = survey(ledger, caches, now, ledger_optional=True)
        protection = found.protection({device})
        open_set = open_set | protection.open
        need = max(vs.free_target - vs.free, 0) if not dry_run else vs.free_target - vs.free
        part = plan_pressure(found.scanned, need, protection=protection, reason="pressure")
        plan = plan.merged(part)
    report = apply(plan, ledger=None, dry_run=dry_run, open_set=open_set)
    return EmergencyResult(tuple(freed), report)
