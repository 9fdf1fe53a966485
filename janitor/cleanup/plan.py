"""Eviction planning: a pure function from units, policy and what is in use to a plan of what to
delete and why.

``plan_tree`` (quota, age, orphans) and ``plan_pressure`` (make room on a volume at risk) read
nothing from the disk, so they are tested exhaustively without one; ``janitor.cleanup.apply``
is what carries a plan out.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from itertools import accumulate, chain, pairwise
from typing import Any, Literal, NamedTuple

import numpy as np

from janitor.cleanup.scan import Snapshot, gc_paused
from janitor.cleanup.units import Floats, Ints, LazySequence, Unit, UnitTable, column
from janitor.config.policy import TreePolicy
from janitor.host.fdwalk import DIR_FLAGS

__all__ = [
    "KEEP_REASONS",
    "Plan",
    "PlanItem",
    "Protection",
    "Reason",
    "ScannedTree",
    "TreePlan",
    "plan_pressure",
    "plan_tree",
    "plan_units",
]

Reason = Literal["quota", "age", "orphan", "pressure", "make-room"]
#: Why a unit was kept although it could have been chosen (``job``: a job folder whose
#: recorded writer still runs).
KEEP_REASONS = ("pinned", "reserved", "locked", "open", "job", "young")

_DIR_FLAGS = DIR_FLAGS

# Column getters (C-level) of Unit and PlanItem, both NamedTuples.
_U_SIZE = column(Unit, "size")


class ScannedTree(NamedTuple):
    """One tree as a sweep found it, what the planner is given for each tree: its snapshot,
    its units as ``group_units`` grouped them, and its policy."""

    snapshot: Snapshot
    units: UnitTable
    tree: TreePolicy


@dataclass(frozen=True, slots=True)
class Protection:
    """What is in use, gathered before planning: paths pinned or reserved, held lock files,
    ``(dev, ino)`` of files open or mapped in some process; and the job folders the guard
    recorded: those a writer still writes (kept whatever their age) and the orphans, whose every
    writer died (removed at once, whatever their age)."""

    pinned: frozenset[str] = frozenset()
    reserved: frozenset[str] = frozenset()
    locked: frozenset[str] = frozenset()
    open: frozenset[tuple[int, int]] = frozenset()
    jobs: frozenset[str] = frozenset()
    orphans: frozenset[str] = frozenset()


class PlanItem(NamedTuple):
    """One unit to delete, and why (a NamedTuple: a plan may hold a million of them)."""

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


_ITEM_UNIT = column(PlanItem, "unit")
_ITEM_TREE = column(PlanItem, "tree")


@dataclass(frozen=True, slots=True)
class _Run:
    """Consecutive items of one tree and reason: positions in that tree's unit table."""

    tree: str
    table: UnitTable
    positions: list[int]
    reason: Reason

    def __len__(self) -> int:
        return len(self.positions)

    def item(self, j: int) -> PlanItem:
        return PlanItem(self.tree, self.table[self.positions[j]], self.reason)

    def __iter__(self) -> Iterator[PlanItem]:
        return map(self.item, range(len(self.positions)))


class PlanItems(LazySequence[PlanItem]):
    """A plan's items, in order; each PlanItem (and its Unit) is built when read.

    A plan over a million-file tree may choose half a million units: the planner decides with
    positions in the unit tables, and the objects are made only as ``apply`` (or a listing)
    reaches them. Equal to any sequence of the same items, a tuple included.
    """

    __slots__ = ("_ends", "_parts")

    def __init__(self, parts: Iterable[_Run | tuple[PlanItem, ...]]) -> None:
        self._parts = tuple(p for p in parts if len(p))
        self._ends = list(accumulate(map(len, self._parts)))

    @classmethod
    def join(cls, *seqs: Sequence[PlanItem]) -> PlanItems:
        """The items of each sequence, one after the other."""
        parts: list[_Run | tuple[PlanItem, ...]] = []
        for seq in seqs:
            parts.extend(seq._parts if isinstance(seq, PlanItems) else (tuple(seq),))
        return cls(parts)

    def __len__(self) -> int:
        return self._ends[-1] if self._ends else 0

    def _item(self, i: int) -> PlanItem:
        k = bisect_right(self._ends, i)
        part = self._parts[k]
        j = i - (self._ends[k - 1] if k else 0)
        return part.item(j) if isinstance(part, _Run) else part[j]

    def __iter__(self) -> Iterator[PlanItem]:
        return chain.from_iterable(self._parts)

    def __hash__(self) -> int:  # a Plan, frozen, stays hashable as it was with a tuple
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"<PlanItems: {len(self)} units>"

    @property
    def bytes(self) -> int:
        """Allocated bytes of every item's unit (without building them)."""
        total = 0
        for p in self._parts:
            if isinstance(p, _Run):
                total += int(p.table.size[p.positions].sum())
            else:
                total += sum(map(_U_SIZE, map(_ITEM_UNIT, p)))
        return total

    def trees(self) -> set[str]:
        """Names of the trees the items are from."""
        out: set[str] = set()
        for p in self._parts:
            out.update((p.tree,) if isinstance(p, _Run) else map(_ITEM_TREE, p))
        return out


def _trees_of(items: Sequence[PlanItem]) -> set[str]:
    return items.trees() if isinstance(items, PlanItems) else set(map(_ITEM_TREE, items))


@dataclass(frozen=True, slots=True)
class TreePlan:
    """A tree's numbers in a plan: what it holds, its targets, what is planned and what is kept."""

    tree: str
    role: str
    kind: str  # the tree's ``units``: how the deleter removes them
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

    items: Sequence[PlanItem]
    trees: tuple[TreePlan, ...]

    @property
    def bytes(self) -> int:
        """Allocated bytes the plan would delete."""
        if isinstance(self.items, PlanItems):
            return self.items.bytes
        return sum(map(_U_SIZE, map(_ITEM_UNIT, self.items)))

    def merged(self, other: Plan) -> Plan:
        """Both plans' items (other's after ours, duplicates dropped) and tree numbers."""
        extra = other.items
        both = _trees_of(self.items) & _trees_of(extra) if self.items and extra else set()
        if both:  # only units of a tree in both plans can be there twice
            seen = {(i.tree, i.unit.key) for i in self.items if i.tree in both}
            extra = tuple(i for i in extra if (i.tree, i.unit.key) not in seen)
        return Plan(PlanItems.join(self.items, extra), self.trees + other.trees)


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
            keys.add(tree.unit_key(rel))
            prefixes.append(rel + "/")
    return whole, keys, tuple(prefixes)


def _protected(
    table: UnitTable, tree: TreePolicy, root: str, protection: Protection
) -> dict[int, str]:
    """Positions of the units kept for a reason other than age, with the first reason that
    applies (pinned, reserved, locked, open).

    Each kind of protection costs one pass in C over the table, and only when something of that
    kind exists; the few units a pass finds are then judged exactly, one by one.
    """
    n = len(table)
    pin_all, pin_keys, pin_pre = _blocked_keys(tree, root, protection.pinned)
    res_all, res_keys, res_pre = _blocked_keys(tree, root, protection.reserved)
    _, job_keys, _ = _blocked_keys(tree, root, protection.jobs)
    locked = protection.locked
    open_set = protection.open
    if pin_all:
        return dict.fromkeys(range(n), "pinned")
    hits: set[int] = set()
    hits.update(table.with_keys(pin_keys | res_keys | job_keys))
    hits.update(table.under(pin_pre + res_pre))
    out: dict[int, str] = {}
    if res_all:  # the whole tree is reserved: only pins are worth telling apart
        out = dict.fromkeys(range(n), "reserved")
    else:
        hits.update(table.locked_by(locked))
        hits.update(table.holding(open_set))
    for i in sorted(hits):
        key = table.key(i)
        if key in pin_keys or (pin_pre and key.startswith(pin_pre)):
            out[i] = "pinned"
        elif res_all or key in res_keys or (res_pre and key.startswith(res_pre)):
            out[i] = "reserved"
        elif locked and table.lock(i) in locked:
            out[i] = "locked"
        elif open_set and any((e.dev, e.ino) in open_set for e in table.members(i)):
            out[i] = "open"
        elif key in job_keys:
            out[i] = "job"
    return out


def _judge(
    table: UnitTable, tree: TreePolicy, root: str, protection: Protection
) -> tuple[Ints, dict[str, int], int]:
    """Positions of the units neither pinned, reserved, locked nor open; counts of those kept,
    by reason; and how many units there are to judge at all.

    A unit that is only its lock file (an evicted entry's leftover: lock files are never
    removed) frees nothing: it is neither chosen, nor kept, nor counted as a unit.
    """
    kept = dict.fromkeys(KEEP_REASONS, 0)
    idle = table.lock_only()
    protected = _protected(table, tree, root, protection)
    if len(idle) and protected:
        for i in idle.tolist():
            protected.pop(i, None)
    if not protected and not len(idle):
        return np.arange(len(table)), kept, len(table)
    for why in protected.values():
        kept[why] += 1
    mask = np.ones(len(table), np.bool_)
    mask[list(protected)] = False
    mask[idle] = False
    return np.flatnonzero(mask), kept, len(table) - len(idle)


def _lru_order(last_use: Floats, positions: Ints) -> tuple[Ints, Floats]:
    """``positions`` by last use, oldest first (ties in no set order: see _order_ties)."""
    order = positions[np.argsort(last_use[positions])]
    return order, last_use[order]


def _order_ties(
    order: Ints, lasts: Floats, end: int, key: Callable[[int], Any]
) -> tuple[bool, Ints]:
    """Put units of equal last use in ``key`` order, in every run of ties that reaches into
    ``order[:end]`` (ties further on change nothing in a plan); True if there was any.

    Sorting the floats alone and then mending the (rare) ties is much faster than sorting a
    million (last_use, key) pairs, and gives the same order.
    """
    if end <= 0:
        return False, order
    stop = min(end + 1, len(order))
    same = np.flatnonzero(lasts[1:stop] == lasts[: stop - 1]).tolist()
    if not same:
        return False, order
    runs: list[tuple[int, int]] = []
    first = prev = same[0]
    for j in same[1:]:
        if j != prev + 1:
            runs.append((first, prev + 2))
            first = j
        prev = j
    last = prev + 2
    if last == stop:  # the run may go on past what was compared
        last = int(np.searchsorted(lasts, lasts[last - 1], side="right"))
    runs.append((first, last))
    order = order.copy()
    for a, b in runs:
        order[a:b] = sorted(order[a:b].tolist(), key=key)
    return True, order


def _prefix_for(sizes: Ints, need: int) -> tuple[int, int]:
    """How many of ``sizes`` (in order) it takes until they reach ``need`` (all of them if they
    never do), and their bytes."""
    if not len(sizes) or need <= 0:
        return 0, 0
    acc = np.cumsum(sizes)
    if int(acc[-1]) < need:
        return len(acc), int(acc[-1])
    k = int(np.searchsorted(acc, need, side="left"))
    return k + 1, int(acc[k])


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

    Ties of last use are broken by unit key, so the plan is a pure function of its inputs.
    ``units`` is best the UnitTable that ``group_units`` gives; any sequence of Units works.
    """
    table = UnitTable.of(units, snapshot.root)
    with gc_paused():
        free, kept, count = _judge(table, tree, snapshot.root, protection)
        usage = int(table.size.sum())
        quota = tree.quota_bytes(volume_total)
        low = tree.low_bytes(volume_total)
        min_age = tree.min_age
        runs: list[_Run] = []
        planned = 0
        over = quota is not None and low is not None and usage > quota
        name = tree.name
        if tree.role == "scratch" or tree.max_age is not None or over:
            order, lasts = _lru_order(table.last_use, free)
            # LRU order puts the young last: ``now - last_use < min_age`` only grows along it.
            old = len(order) - int(np.count_nonzero(now - lasts < min_age))
            kept["young"] = len(order) - old
            if tree.role == "scratch":
                n = int(np.count_nonzero(lasts[:old] <= now - tree.orphan_age))
                _, order = _order_ties(order, lasts, n, table.key)
                # A job folder whose every writer died is an orphan at once, young or not.
                _, exact, _ = _blocked_keys(tree, snapshot.root, protection.orphans)
                late = [int(i) for i in order[n:] if exact and table.key(int(i)) in exact]
                if late:
                    kept["young"] -= sum(1 for i in late if now - table.last_use[i] < min_age)
                chosen = [*order[:n].tolist(), *late]
                runs.append(_Run(name, table, chosen, "orphan"))
                planned = int(table.size[chosen].sum()) if chosen else 0
            else:
                n = k = need = nbytes = 0
                if tree.max_age is not None:
                    n = int(np.count_nonzero(lasts[:old] < now - tree.max_age))
                    planned = int(table.size[order[:n]].sum())
                if over:
                    assert low is not None
                    need = usage - planned - low
                    k, nbytes = _prefix_for(table.size[order[n:old]], need)
                ties, order = _order_ties(order, lasts, n + k, table.key)
                if ties and k:  # ties reordered: count again
                    k, nbytes = _prefix_for(table.size[order[n:old]], need)
                runs.append(_Run(name, table, order[:n].tolist(), "age"))
                runs.append(_Run(name, table, order[n : n + k].tolist(), "quota"))
                planned += nbytes
        else:
            kept["young"] = int(np.count_nonzero(now - table.last_use[free] < min_age))
        summary = TreePlan(
            tree=name,
            role=tree.role,
            kind=tree.units,
            root=snapshot.root,
            device=snapshot.device,
            root_ino=snapshot.root_ino,
            usage=usage,
            units=count,
            quota=quota,
            low_watermark=low,
            planned=planned,
            kept=tuple((k, v) for k, v in kept.items() if v),
        )
        return Plan(PlanItems(runs), (summary,))


def plan_pressure(
    candidates: Sequence[ScannedTree],
    need: int,
    *,
    protection: Protection,
    reason: Reason = "pressure",
    exclude: Iterable[tuple[str, str]] = (),
) -> Plan:
    """Evict across several caches on one volume, least recently used first, until ``need``
    bytes.

    Nix's min-free/max-free: used when free space is below free_low (need = free_target - free)
    and to make room for a reservation (need = its shortfall). Protection is by use, not by
    age, as kubelet ranks images under node pressure: ``min_age`` shields nothing here; what
    is pinned (a job's source, an entry awaiting use), reserved, locked or open is kept, and
    everything else may go, oldest last use first. Scratch trees are never used, nor caches of
    Hugging Face revisions (only their own quota evicts them: a model evicted on an offline
    machine cannot be downloaded again).
    Ties of last use are broken by tree name, then unit key.
    """
    skip: dict[str, set[str]] = {}
    for tree_name, key in exclude:
        skip.setdefault(tree_name, set()).add(key)
    tables: list[UnitTable] = []
    names: list[str] = []
    pool_pos: list[Ints] = []
    trees: list[TreePlan] = []
    with gc_paused():
        for snapshot, units, tree in candidates:
            if not tree.evicts_for_room:  # scratch trees; Hugging Face revisions (quota only)
                continue
            table = UnitTable.of(units, snapshot.root)
            free, kept, count = _judge(table, tree, snapshot.root, protection)
            name = tree.name
            if name in skip:
                free = np.setdiff1d(free, table.with_keys(skip[name]), assume_unique=True)
            tables.append(table)
            names.append(name)
            pool_pos.append(free)
            trees.append(
                TreePlan(
                    tree=name,
                    role=tree.role,
                    kind=tree.units,
                    root=snapshot.root,
                    device=snapshot.device,
                    root_ino=snapshot.root_ino,
                    usage=int(table.size.sum()),
                    units=count,
                    quota=None,
                    low_watermark=None,
                    planned=0,
                    kept=tuple((k, v) for k, v in kept.items() if v),
                )
            )
        runs: list[_Run] = []
        planned: dict[str, int] = {}
        if tables and need > 0:
            # One pool over every tree: (last use, tree name's rank, position), oldest first.
            rank = {n: r for r, n in enumerate(sorted(set(names)))}
            which = np.concatenate([np.full(len(p), t, np.int64) for t, p in enumerate(pool_pos)])
            pos = np.concatenate(pool_pos)
            lasts = np.concatenate([t.last_use[p] for t, p in zip(tables, pool_pos, strict=True)])
            sizes = np.concatenate([t.size[p] for t, p in zip(tables, pool_pos, strict=True)])
            ranks = np.array([rank[names[t]] for t in range(len(names))], np.int64)[which]
            order = np.lexsort((ranks, lasts))
            lasts = lasts[order]

            def tie_key(j: int) -> tuple[str, str]:
                t = int(which[j])
                return names[t], tables[t].key(int(pos[j]))

            k, _ = _prefix_for(sizes[order], need)
            ties, order = _order_ties(order, lasts, k, tie_key)
            if ties:
                k, _ = _prefix_for(sizes[order], need)
            chosen = order[:k]
            for t, name in enumerate(names):
                mine = chosen[which[chosen] == t]
                if len(mine):
                    planned[name] = planned.get(name, 0) + int(sizes[mine].sum())
            # Consecutive items of one tree make one run.
            w = which[chosen]
            cuts = [0, *(np.flatnonzero(w[1:] != w[:-1]) + 1).tolist(), len(chosen)]
            for a, b in pairwise(cuts):
                if b > a:
                    t = int(w[a])
                    runs.append(_Run(names[t], tables[t], pos[chosen[a:b]].tolist(), reason))
    trees = [replace(t, planned=planned.get(t.tree, 0)) for t in trees]
    return Plan(PlanItems(runs), tuple(trees))


def plan_units(
    snapshot: Snapshot,
    units: Sequence[Unit],
    tree: TreePolicy,
    keys: Iterable[str],
    *,
    protection: Protection,
    reason: Reason = "orphan",
) -> Plan:
    """The units named by ``keys``, unless pinned, reserved, locked or open: what a caller that
    knows them to be leftovers (``janitor run``, once its command's processes are gone) removes
    without waiting for their age. The deleter still checks each file as for any sweep."""
    table = UnitTable.of(units, snapshot.root)
    wanted = set(keys)
    free, kept, count = _judge(table, tree, snapshot.root, protection)
    chosen = [int(i) for i in free if table.key(int(i)) in wanted]
    summary = TreePlan(
        tree=tree.name,
        role=tree.role,
        kind=tree.units,
        root=snapshot.root,
        device=snapshot.device,
        root_ino=snapshot.root_ino,
        usage=int(table.size.sum()),
        units=count,
        quota=None,
        low_watermark=None,
        planned=int(table.size[chosen].sum()) if chosen else 0,
        kept=tuple((k, v) for k, v in kept.items() if v),
    )
    return Plan(PlanItems([_Run(tree.name, table, chosen, reason)]), (summary,))
