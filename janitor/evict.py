"""Eviction: a pure planner that chooses what to delete and why, and the one executor that does.

``plan_tree`` and ``plan_pressure`` are pure functions of units, policy and what is in use, so
they are tested exhaustively without a disk. ``apply`` is the only code in the janitor that
removes files; it re-checks every file right before removing it (same inode, size and mtime;
owned by us; not pinned, locked or open now), removes it relative to an opened parent folder
without following symlinks, never leaves the tree's filesystem, never removes the tree root,
and logs every unit it removed with its reason.
"""

from __future__ import annotations

import errno
import fcntl
import os
import sqlite3
import stat
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from janitor.inuse import exclusive
from janitor.ledger import Ledger, py_path
from janitor.policy import TreePolicy
from janitor.scan import Entry, Snapshot, gc_paused
from janitor.space import volume_stats
from janitor.units import Unit, unit_key_for

__all__ = [
    "KEEP_REASONS",
    "Outcome",
    "Plan",
    "PlanItem",
    "Protection",
    "Reason",
    "Report",
    "TreePlan",
    "apply",
    "plan_pressure",
    "plan_tree",
]

Reason = Literal["quota", "age", "orphan", "pressure", "make-room"]
#: Why a unit was kept although it could have been chosen.
KEEP_REASONS = ("pinned", "reserved", "locked", "open", "young")

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True, slots=True)
class Protection:
    """What is in use, gathered before planning: paths pinned or reserved, held lock files,
    and ``(dev, ino)`` of files open or mapped in some process."""

    pinned: frozenset[str] = frozenset()
    reserved: frozenset[str] = frozenset()
    locked: frozenset[str] = frozenset()
    open: frozenset[tuple[int, int]] = frozenset()


@dataclass(frozen=True, slots=True)
class PlanItem:
    """One unit to delete, and why."""

    tree: str
    unit: Unit
    reason: Reason

    @property
    def size(self) -> int:
        """Allocated bytes the unit holds."""
        return self.unit.size

    @property
    def last_use(self) -> float:
        """When the unit was last used (latest of mtime, atime, recorded touch)."""
        return self.unit.last_use


@dataclass(frozen=True, slots=True)
class TreePlan:
    """A tree's numbers in a plan: what it holds, its targets, what is planned and what is kept."""

    tree: str
    role: str
    root: str
    device: int
    root_ino: int
    usage: int
    units: int
    quota: int | None
    low_watermark: int | None
    planned: int
    kept: tuple[tuple[str, int], ...] = ()

    @property
    def reaches_target(self) -> bool:
        """False when a cache stays above its low watermark because too little was evictable."""
        if self.low_watermark is None or self.quota is None or self.usage <= self.quota:
            return True
        return self.usage - self.planned <= self.low_watermark


@dataclass(frozen=True, slots=True)
class Plan:
    """Ordered items to delete, with the per-tree numbers that led to them."""

    items: tuple[PlanItem, ...]
    trees: tuple[TreePlan, ...]

    @property
    def bytes(self) -> int:
        """Allocated bytes the plan would delete."""
        return sum(i.size for i in self.items)

    def merged(self, other: Plan) -> Plan:
        """Both plans' items (other's after ours, duplicates dropped) and tree numbers."""
        seen = {(i.tree, i.unit.key) for i in self.items}
        extra = tuple(i for i in other.items if (i.tree, i.unit.key) not in seen)
        return Plan(self.items + extra, self.trees + other.trees)


def _blocked_keys(
    tree: TreePolicy, root: str, paths: Iterable[str]
) -> tuple[bool, set[str], tuple[str, ...]]:
    """Unit keys (and key prefixes, for folders) that pins or reservations cover."""
    whole = False
    keys: set[str] = set()
    prefixes: list[str] = []
    base = root.rstrip("/") + "/"
    for p in paths:
        if p == root or base.startswith(p.rstrip("/") + "/"):
            whole = True
        elif p.startswith(base):
            rel = p[len(base) :].rstrip("/")
            keys.add(unit_key_for(tree, rel))
            prefixes.append(rel + "/")
    return whole, keys, tuple(prefixes)


def _classify(
    units: Sequence[Unit], tree: TreePolicy, root: str, protection: Protection, now: float
) -> tuple[list[Unit], dict[str, int]]:
    """Units that may be chosen, and counts of those kept, by reason."""
    kept = dict.fromkeys(KEEP_REASONS, 0)
    pin_all, pin_keys, pin_pre = _blocked_keys(tree, root, protection.pinned)
    res_all, res_keys, res_pre = _blocked_keys(tree, root, protection.reserved)
    locked = protection.locked
    open_set = protection.open
    min_age = tree.min_age
    free: list[Unit] = []
    for u in units:
        key = u.key
        if pin_all or key in pin_keys or (pin_pre and key.startswith(pin_pre)):
            kept["pinned"] += 1
        elif res_all or key in res_keys or (res_pre and key.startswith(res_pre)):
            kept["reserved"] += 1
        elif u.lock is not None and u.lock in locked:
            kept["locked"] += 1
        elif open_set and any((e.dev, e.ino) in open_set for e in u.entries):
            kept["open"] += 1
        elif now - u.last_use < min_age:
            kept["young"] += 1
        else:
            free.append(u)
    return free, kept


def plan_tree(
    snapshot: Snapshot,
    units: Sequence[Unit],
    tree: TreePolicy,
    *,
    volume_total: int,
    protection: Protection,
    now: float,
) -> Plan:
    """What a tree's policy says to delete now.

    A cache over its quota comes down to its low watermark, least recently used first, and
    entries past max_age go regardless of quota. A scratch tree loses only orphans: units
    unchanged for orphan_age with nothing live in them. Pinned, reserved, locked, open and
    young units are never chosen; the tree root is never a unit.
    """
    with gc_paused():
        free, kept = _classify(units, tree, snapshot.root, protection, now)
        usage = sum(u.size for u in units)
        quota = tree.quota_bytes(volume_total)
        low = tree.low_bytes(volume_total)
        items: list[PlanItem] = []
        if tree.role == "scratch":
            cutoff = now - tree.orphan_age
            orphans = [u for u in free if u.last_use <= cutoff]
            orphans.sort(key=lambda u: (u.last_use, u.key))
            items = [PlanItem(tree.name, u, "orphan") for u in orphans]
        else:
            rest = free
            if tree.max_age is not None:
                cutoff = now - tree.max_age
                expired = [u for u in free if u.last_use < cutoff]
                expired.sort(key=lambda u: (u.last_use, u.key))
                items = [PlanItem(tree.name, u, "age") for u in expired]
                rest = [u for u in free if u.last_use >= cutoff]
            planned = sum(i.size for i in items)
            if quota is not None and low is not None and usage > quota:
                need = usage - planned - low
                if need > 0:
                    rest.sort(key=lambda u: (u.last_use, u.key))
                    for u in rest:
                        if need <= 0:
                            break
                        items.append(PlanItem(tree.name, u, "quota"))
                        need -= u.size
        summary = TreePlan(
            tree=tree.name,
            role=tree.role,
            root=snapshot.root,
            device=snapshot.device,
            root_ino=snapshot.root_ino,
            usage=usage,
            units=len(units),
            quota=quota,
            low_watermark=low,
            planned=sum(i.size for i in items),
            kept=tuple((k, v) for k, v in kept.items() if v),
        )
        return Plan(tuple(items), (summary,))


def plan_pressure(
    candidates: Sequence[tuple[Snapshot, Sequence[Unit], TreePolicy]],
    need: int,
    *,
    protection: Protection,
    now: float,
    reason: Reason = "pressure",
    exclude: Iterable[tuple[str, str]] = (),
) -> Plan:
    """Evict across several caches on one volume, oldest last use first, until ``need`` bytes.

    Nix's min-free/max-free: used when free space is below free_low (need = free_target - free)
    and to make room for a reservation (need = its shortfall). Scratch trees are never used.
    """
    skip = set(exclude)
    pool: list[tuple[float, str, str, Unit]] = []
    trees: list[TreePlan] = []
    with gc_paused():
        for snapshot, units, tree in candidates:
            if tree.role != "cache":
                continue
            free, kept = _classify(units, tree, snapshot.root, protection, now)
            pool.extend(
                (u.last_use, tree.name, u.key, u) for u in free if (tree.name, u.key) not in skip
            )
            trees.append(
                TreePlan(
                    tree=tree.name,
                    role=tree.role,
                    root=snapshot.root,
                    device=snapshot.device,
                    root_ino=snapshot.root_ino,
                    usage=sum(u.size for u in units),
                    units=len(units),
                    quota=None,
                    low_watermark=None,
                    planned=0,
                    kept=tuple((k, v) for k, v in kept.items() if v),
                )
            )
        pool.sort(key=lambda t: (t[0], t[1], t[2]))
        items: list[PlanItem] = []
        for _, name, _, unit in pool:
            if need <= 0:
                break
            items.append(PlanItem(name, unit, reason))
            need -= unit.size
    planned: dict[str, int] = {}
    for i in items:
        planned[i.tree] = planned.get(i.tree, 0) + i.size
    trees = [replace(t, planned=planned.get(t.tree, 0)) for t in trees]
    return Plan(tuple(items), tuple(trees))


# -- the executor ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Outcome:
    """What happened to one planned unit."""

    item: PlanItem
    deleted: bool
    files: int
    bytes: int
    skipped: str | None = None


@dataclass(frozen=True, slots=True)
class VolumeDelta:
    """Free space of a volume before and after the deletes."""

    device: int
    mount: str
    free_before: int
    free_after: int

    @property
    def reclaimed(self) -> int:
        """Free space gained (other writers may make this smaller or larger)."""
        return self.free_after - self.free_before


@dataclass(frozen=True, slots=True)
class Report:
    """The executor's account: each unit's outcome and each volume's reclaimed space."""

    outcomes: tuple[Outcome, ...]
    volumes: tuple[VolumeDelta, ...] = ()
    dry_run: bool = False
    warnings: tuple[str, ...] = field(default=())

    @property
    def deleted_bytes(self) -> int:
        """Allocated bytes of the files removed."""
        return sum(o.bytes for o in self.outcomes if o.deleted)

    @property
    def reclaimed_bytes(self) -> int:
        """Free space actually gained, summed over volumes."""
        return sum(v.reclaimed for v in self.volumes)

    @property
    def deleted_units(self) -> int:
        """Units removed."""
        return sum(1 for o in self.outcomes if o.deleted)


class _Skip(Exception):
    """A unit that must be left alone; the message says why."""


class _Partial(Exception):
    """A unit whose removal stopped part way (something came alive); what went is counted."""

    def __init__(self, files: int, size: int, why: str) -> None:
        super().__init__(why)
        self.files = files
        self.size = size


class _Deleter:
    """Deletes the units of one tree, relative to the tree root opened at the start."""

    def __init__(
        self,
        plan: TreePlan,
        open_set: frozenset[tuple[int, int]],
        pinned: Callable[[], frozenset[str]],
    ) -> None:
        self.plan = plan
        self.root = plan.root
        self.open_set = open_set
        self.pinned = pinned
        self.uid = os.geteuid()
        self.root_fd = os.open(plan.root, _DIR_FLAGS)
        st = os.fstat(self.root_fd)
        if (st.st_dev, st.st_ino) != (plan.device, plan.root_ino):
            os.close(self.root_fd)
            raise _Skip("tree root was replaced since the scan")

    def close(self) -> None:
        os.close(self.root_fd)

    # -- helpers -------------------------------------------------------------------------------

    def _open_dir(self, rel_parts: Sequence[str]) -> int:
        """Open a folder below the root one component at a time, never following a symlink."""
        fd = os.dup(self.root_fd)
        try:
            for part in rel_parts:
                if part in ("", ".", ".."):
                    raise _Skip("bad path component")
                try:
                    nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    raise _Skip(_why(exc, "folder")) from None
                os.close(fd)
                fd = nfd
                if os.fstat(fd).st_dev != self.plan.device:
                    raise _Skip("folder is on another filesystem")
            return fd
        except BaseException:
            os.close(fd)
            raise

    def _check_pins(self, unit: Unit) -> None:
        pins = self.pinned()
        if not pins:
            return
        base = self.root.rstrip("/") + "/"
        unit_path = unit.path if unit.kind == "dir" else None
        for p in pins:
            if not (p.startswith(base) or base.startswith(p.rstrip("/") + "/")):
                continue
            for e in unit.entries:
                if e.path == p or e.path.startswith(p.rstrip("/") + "/"):
                    raise _Skip("pinned")
            if unit_path is not None and p.startswith(unit_path + "/"):
                raise _Skip("pinned")

    def _verify(self, dir_fd: int, name: str, e: Entry) -> os.stat_result:
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            raise _Skip("gone since the scan") from None
        if st.st_ino != e.ino or st.st_dev != e.dev:
            raise _Skip("replaced since the scan")
        if not stat.S_ISDIR(st.st_mode) and (st.st_size != e.length or st.st_mtime != e.mtime):
            raise _Skip("changed since the scan")
        if st.st_uid != self.uid:
            raise _Skip("owned by another user")
        return st

    def _unlink_file(self, dir_fd: int, name: str, e: Entry, held: int | None = None) -> None:
        """Remove one non-folder entry after the last checks (``held``: our open fd of it)."""
        st = self._verify(dir_fd, name, e)
        if not stat.S_ISREG(st.st_mode):
            os.unlink(name, dir_fd=dir_fd)  # symlinks, fifos ...: remove the name, never follow
            return
        fd = held
        if fd is None:
            fd = os.open(
                name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd
            )
        try:
            fst = os.fstat(fd)
            if fst.st_ino != e.ino:
                raise _Skip("replaced since the scan")
            with exclusive(fd) as alone:
                if alone is False:
                    raise _Skip("open in another process")
                if alone is None and (fst.st_dev, fst.st_ino) in self.open_set:
                    raise _Skip("open in another process")
                os.unlink(name, dir_fd=dir_fd)
        finally:
            if held is None:
                os.close(fd)

    # -- units ---------------------------------------------------------------------------------

    def delete(self, unit: Unit) -> tuple[int, int]:
        """Delete one unit; (files removed, bytes) or _Skip before anything is removed."""
        self._check_pins(unit)
        if unit.kind == "dir":
            return self._delete_dir_unit(unit)
        return self._delete_file_unit(unit)

    def _delete_file_unit(self, unit: Unit) -> tuple[int, int]:
        by_folder: dict[str, list[Entry]] = {}
        for e in unit.entries:
            folder = e.rel.rpartition("/")[0]
            by_folder.setdefault(folder, []).append(e)
        if len(by_folder) != 1:
            raise _Skip("unit spans folders")
        folder, entries = next(iter(by_folder.items()))
        dir_fd = self._open_dir(folder.split("/") if folder else [])
        lock_fd = None
        try:
            lock_name = None
            if unit.lock is not None:
                lock_name = unit.lock.rpartition("/")[2]
                try:
                    lock_fd = os.open(
                        lock_name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd
                    )
                except FileNotFoundError:
                    lock_fd = None
                except OSError as exc:
                    raise _Skip(_why(exc, "lock file")) from None
                if lock_fd is not None:
                    try:
                        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except OSError:
                        raise _Skip("locked") from None
            for e in entries:  # every file is checked before any is removed
                self._verify(dir_fd, e.rel.rpartition("/")[2], e)
            removed = 0
            size = 0
            # The lock file goes last, while we still hold it.
            ordered = sorted(entries, key=lambda e: e.rel.rpartition("/")[2] == lock_name)
            for e in ordered:
                try:
                    name = e.rel.rpartition("/")[2]
                    self._unlink_file(dir_fd, name, e, lock_fd if name == lock_name else None)
                except _Skip:
                    if removed:
                        break  # partly removed: what is left is judged again next sweep
                    raise
                removed += 1
                size += e.size
            return removed, size
        finally:
            if lock_fd is not None:
                os.close(lock_fd)
            os.close(dir_fd)

    def _delete_dir_unit(self, unit: Unit) -> tuple[int, int]:
        if "/" in unit.key or unit.key in ("", ".", ".."):
            raise _Skip("not a folder directly under the root")
        head = unit.entries[0]
        known = {e.rel: e for e in unit.entries}
        unit_fd = self._open_dir([unit.key])
        try:
            st = os.fstat(unit_fd)
            if st.st_ino != head.ino:
                raise _Skip("replaced since the scan")
            if st.st_uid != self.uid:
                raise _Skip("owned by another user")
            # Verify the whole folder first: anything new or changed means a job is alive.
            self._walk_verify(unit_fd, unit.key, known)
            done = [0, 0]
            try:
                self._remove_tree(unit_fd, unit.key, known, done)
            except _Skip as exc:
                if done[0] or done[1]:
                    raise _Partial(done[0], done[1], str(exc)) from None
                raise
            removed, size = done
        finally:
            os.close(unit_fd)
        try:
            os.rmdir(unit.key, dir_fd=self.root_fd)
            size += head.size
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT):
                raise
        return removed, size

    def _known(self, fd: int, name: str, crel: str, known: dict[str, Entry]) -> Entry | None:
        """The scanned entry of a name, including another name of a hard-linked file."""
        e = known.get(crel)
        if e is not None:
            return e
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except OSError:
            return None
        if stat.S_ISDIR(st.st_mode):
            return None
        for k in known.values():
            if (k.dev, k.ino) == (st.st_dev, st.st_ino):
                return k
        return None

    def _walk_verify(self, fd: int, rel: str, known: dict[str, Entry]) -> None:
        with os.scandir(fd) as it:
            children = list(it)
        for d in children:
            crel = f"{rel}/{d.name}"
            e = self._known(fd, d.name, crel, known)
            if e is None:
                raise _Skip("new files since the scan: a job is still writing")
            st = self._verify(fd, d.name, e)
            if stat.S_ISDIR(st.st_mode):
                sub = os.open(d.name, _DIR_FLAGS, dir_fd=fd)
                try:
                    if os.fstat(sub).st_dev != self.plan.device:
                        raise _Skip("folder is on another filesystem")
                    self._walk_verify(sub, crel, known)
                finally:
                    os.close(sub)
            elif (e.dev, e.ino) in self.open_set:
                raise _Skip("open in another process")
            elif stat.S_ISREG(st.st_mode):
                # Ask the kernel now, before anything of the unit is removed.
                probe = os.open(
                    d.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=fd
                )
                try:
                    with exclusive(probe) as alone:
                        if alone is False:
                            raise _Skip("open in another process")
                finally:
                    os.close(probe)

    def _remove_tree(self, fd: int, rel: str, known: dict[str, Entry], done: list[int]) -> None:
        """Remove a folder's contents bottom-up; ``done`` counts [files, bytes] as it goes."""
        with os.scandir(fd) as it:
            children = list(it)
        for d in children:
            crel = f"{rel}/{d.name}"
            e = self._known(fd, d.name, crel, known)
            if e is None:
                raise _Skip("new files since the scan: a job is still writing")
            if stat.S_ISDIR(e.mode):
                sub = os.open(d.name, _DIR_FLAGS, dir_fd=fd)
                try:
                    if os.fstat(sub).st_ino != e.ino:
                        raise _Skip("replaced since the scan")
                    self._remove_tree(sub, crel, known, done)
                finally:
                    os.close(sub)
                os.rmdir(d.name, dir_fd=fd)
                done[1] += e.size
            else:
                self._unlink_file(fd, d.name, e)
                done[0] += 1
                done[1] += e.size


def _why(exc: OSError, what: str) -> str:
    if exc.errno == errno.ELOOP or exc.errno == errno.ENOTDIR:
        return f"{what} is now a symlink or not a folder"
    if exc.errno == errno.ENOENT:
        return f"{what} gone since the scan"
    return f"{what}: {exc.strerror}"


def apply(
    plan: Plan,
    *,
    ledger: Ledger | None,
    dry_run: bool = False,
    open_set: frozenset[tuple[int, int]] = frozenset(),
    on_progress: Callable[[int], None] | None = None,
    batch: int = 256,
) -> Report:
    """Delete the plan's units (or, with ``dry_run``, only say what would go).

    Every removal is logged in the ledger (event ``delete``) with its tree, path, bytes and
    reason, committed in batches as the deletes go.
    """
    if dry_run or not plan.items:
        return Report(
            tuple(Outcome(i, False, 0, 0, "dry run" if dry_run else None) for i in plan.items),
            dry_run=dry_run,
        )
    trees = {t.tree: t for t in plan.trees}
    by_tree: dict[str, list[PlanItem]] = {}
    for item in plan.items:
        by_tree.setdefault(item.tree, []).append(item)
    volumes: dict[int, tuple[str, int]] = {}
    for name in by_tree:
        vs = volume_stats(trees[name].root)
        volumes.setdefault(vs.device, (vs.mount, vs.free))

    pin_cache: list[tuple[float, frozenset[str]]] = []

    def pinned() -> frozenset[str]:
        # Re-read at most every 50 ms: a pin taken during a long sweep is seen within that.
        now = time.monotonic()
        if pin_cache and now - pin_cache[0][0] < 0.05:
            return pin_cache[0][1]
        paths: frozenset[str] = frozenset()
        if ledger is not None:
            with ledger.read() as conn:
                paths = frozenset(
                    py_path(r[0])
                    for r in conn.execute("SELECT path FROM pins WHERE state = 'live'")
                )
        pin_cache[:] = [(now, paths)]
        return paths

    outcomes: list[Outcome] = []
    pending: list[Outcome] = []

    def flush() -> None:
        if ledger is None or not pending:
            pending.clear()
            return
        batch_items = list(pending)
        pending.clear()

        def write(conn: sqlite3.Connection) -> None:
            for o in batch_items:
                t = trees[o.item.tree]
                Ledger.log(
                    conn,
                    "delete",
                    tree=o.item.tree,
                    device=t.device,
                    nbytes=o.bytes,
                    path=o.item.unit.path,
                    reason=o.item.reason,
                    files=o.files,
                    last_use=o.item.last_use,
                )

        ledger.call(write)

    for name, items in by_tree.items():
        try:
            deleter = _Deleter(trees[name], open_set, pinned)
        except (_Skip, OSError) as exc:
            why = str(exc) if isinstance(exc, _Skip) else _why(exc, "tree root")
            outcomes.extend(Outcome(i, False, 0, 0, why) for i in items)
            continue
        try:
            for item in items:
                try:
                    files, size = deleter.delete(item.unit)
                    o = Outcome(item, files > 0, files, size)
                except _Partial as exc:
                    o = Outcome(item, True, exc.files, exc.size, f"partly removed: {exc}")
                except _Skip as exc:
                    o = Outcome(item, False, 0, 0, str(exc))
                except OSError as exc:
                    o = Outcome(item, False, 0, 0, f"error: {exc.strerror}")
                outcomes.append(o)
                if o.deleted:
                    pending.append(o)
                    if len(pending) >= batch:
                        flush()
                if on_progress is not None:
                    on_progress(len(outcomes))
        finally:
            deleter.close()
            flush()
    deltas = []
    warnings = []
    deleted_on: dict[int, int] = {}
    for o in outcomes:
        if o.deleted:
            dev = trees[o.item.tree].device
            deleted_on[dev] = deleted_on.get(dev, 0) + o.bytes
    for device, (mount, before) in volumes.items():
        after = volume_stats_of_mount(mount)
        delta = VolumeDelta(device, mount, before, after)
        deltas.append(delta)
        deleted = deleted_on.get(device, 0)
        if deleted >= 1024 * 1024 and delta.reclaimed < deleted // 2:
            warnings.append(
                f"{mount}: deleted {deleted} B but free space grew by only {delta.reclaimed} B; "
                "files may still be held open, or snapshots (Time Machine local snapshots, "
                "btrfs/ZFS) may keep the blocks"
            )
    return Report(tuple(outcomes), tuple(deltas), False, tuple(warnings))


def volume_stats_of_mount(mount: str) -> int:
    """Free bytes of the volume mounted at ``mount``."""
    return volume_stats(mount).free
