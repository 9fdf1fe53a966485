"""The planner: property tests of plan_tree and plan_pressure on in-memory snapshots.

Every example builds units with known ages, sizes and protections (pinned, reserved, locked,
open) and checks the plan against an independent description of what the policy means.
"""

from __future__ import annotations

import stat
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from janitor.cleanup.kinds import group_units
from janitor.cleanup.plan import KEEP_REASONS, Plan, Protection, plan_pressure, plan_tree
from janitor.cleanup.scan import Entry, Snapshot
from janitor.cleanup.units import Unit, UnitTable
from janitor.config.policy import TreePolicy

NOW = 1_700_000_000.0
DEV = 7
GROUP = r"^(?P<key>[^/]+?)(?:\.tmp)?\.wav(?:\.lock)?$"
ROOT = "/data/cache"

PROPS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

_FILE = stat.S_IFREG | 0o644
_DIR = stat.S_IFDIR | 0o755


@dataclass(frozen=True)
class Spec:
    """One unit as the test sees it: its size, age and what protects it."""

    size: int
    age: float
    folder: str = ""
    pinned: bool = False
    reserved: bool = False
    locked: bool = False
    open: bool = False


@dataclass
class World:
    """A tree's snapshot and units built from specs, with the protections they imply."""

    snapshot: Snapshot
    units: list[Unit]
    specs: dict[str, Spec]
    protection: Protection

    def spec(self, unit: Unit) -> Spec:
        return self.specs[unit.key]


rare = st.integers(0, 7).map(lambda n: n == 0)
specs_st = st.lists(
    st.builds(
        Spec,
        size=st.integers(0, 50_000),
        age=st.integers(0, 400_000).map(float),
        folder=st.sampled_from(["", "", "sub", "subway"]),
        pinned=rare,
        reserved=rare,
        locked=rare,
        open=rare,
    ),
    max_size=40,
)


def _entry(path: str, rel: str, size: int, ino: int, t: float, mode: int = _FILE) -> Entry:
    return Entry(path, rel, size, ino, DEV, t, t, t, 0, mode, size)


def _protection(
    pinned: set[str], reserved: set[str], locked: set[str], opened: set[tuple[int, int]]
) -> Protection:
    return Protection(frozenset(pinned), frozenset(reserved), frozenset(locked), frozenset(opened))


def cache_world(
    specs: Sequence[Spec],
    *,
    root: str = ROOT,
    extra_pins: Sequence[str] = (),
    ino0: int = 100,
    lock_files: bool = True,
) -> World:
    """Media-cache units ``{key}.wav`` + ``{key}.wav.lock`` (some in subfolders); without
    ``lock_files``, the ``.wav`` alone (its lock path is still the unit's)."""
    entries: list[Entry] = []
    units: list[Unit] = []
    by_key: dict[str, Spec] = {}
    pinned, reserved, locked = set(extra_pins), set(), set()
    opened: set[tuple[int, int]] = set()
    for folder in sorted({s.folder for s in specs if s.folder}):
        entries.append(_entry(f"{root}/{folder}", folder, 4096, ino0 - 1 - len(entries), NOW, _DIR))
    for i, s in enumerate(specs):
        base = f"{s.folder}/k{i:04d}" if s.folder else f"k{i:04d}"
        t = NOW - s.age
        wav = _entry(f"{root}/{base}.wav", f"{base}.wav", s.size, ino0 + 2 * i, t)
        lock = _entry(f"{root}/{base}.wav.lock", f"{base}.wav.lock", 0, ino0 + 2 * i + 1, t)
        members = (wav, lock) if lock_files else (wav,)
        entries += members
        units.append(Unit(base, "file", wav.path, members, s.size, t, lock.path))
        by_key[base] = s
        if s.pinned:
            pinned.add(wav.path)
        if s.reserved:  # a writer reserved the entry's .tmp.wav: the whole entry is in use
            reserved.add(f"{root}/{base}.tmp.wav")
        if s.locked:
            locked.add(lock.path)
        if s.open:
            opened.add((DEV, wav.ino))
    snap = Snapshot(root, DEV, 2, NOW, tuple(entries))
    return World(snap, units, by_key, _protection(pinned, reserved, locked, opened))


def scratch_world(specs: Sequence[Spec], *, root: str = "/data/jobs") -> World:
    """Job folders ``.tmpNNNN/fa_v2/audio/0.pcm`` whose last activity is the spec's age."""
    entries: list[Entry] = []
    units: list[Unit] = []
    by_key: dict[str, Spec] = {}
    pinned, reserved = set(), set()
    opened: set[tuple[int, int]] = set()
    for i, s in enumerate(specs):
        key = f".tmp{i:04d}"
        t = NOW - s.age
        ino = 10_000 + 4 * i
        inside = [
            _entry(f"{root}/{key}", key, 4096, ino, t, _DIR),
            _entry(f"{root}/{key}/fa_v2", f"{key}/fa_v2", 4096, ino + 1, t, _DIR),
            _entry(f"{root}/{key}/fa_v2/audio", f"{key}/fa_v2/audio", 4096, ino + 2, t, _DIR),
            _entry(
                f"{root}/{key}/fa_v2/audio/0.pcm", f"{key}/fa_v2/audio/0.pcm", s.size, ino + 3, t
            ),
        ]
        entries += inside
        units.append(
            Unit(key, "dir", inside[0].path, tuple(inside), sum(e.size for e in inside), t)
        )
        by_key[key] = s
        if s.pinned:
            pinned.add(inside[3].path)
        if s.reserved:
            reserved.add(f"{root}/{key}/fa_v2/text/0.json")  # a file the job is about to write
        if s.open or s.locked:
            opened.add((DEV, ino + 3))
    snap = Snapshot(root, DEV, 3, NOW, tuple(entries))
    return World(snap, units, by_key, _protection(pinned, reserved, set(), opened))


def tree(role: str = "cache", root: str = ROOT, name: str = "t", **keys: Any) -> TreePolicy:
    body: dict[str, Any] = {"name": name, "role": role, "path": root}
    if role == "cache":
        body.update(group=GROUP, lock="{key}.wav.lock")
    else:
        body.update(units="dir", unit_glob=".tmp*")
    body.update({k: v for k, v in keys.items() if v is not None})
    return TreePolicy.model_validate(body)


def protected(s: Spec, *, pin_folder: str | None = None) -> bool:
    return (
        s.pinned
        or s.reserved
        or s.locked
        or s.open
        or (pin_folder is not None and s.folder == pin_folder)
    )


def evictable(world: World, tp: TreePolicy, *, pin_folder: str | None = None) -> list[Unit]:
    """Units the policy may choose: unprotected and at least min_age old."""
    return [
        u
        for u in world.units
        if not protected(world.spec(u), pin_folder=pin_folder) and world.spec(u).age >= tp.min_age
    ]


def unused(world: World) -> list[Unit]:
    """Units nothing uses (not pinned, reserved, locked or open), whatever their age: what
    volume pressure and make-room may take."""
    return [u for u in world.units if not protected(world.spec(u))]


def expected_kept(world: World, tp: TreePolicy, *, pin_folder: str | None = None) -> dict[str, int]:
    kept = dict.fromkeys(KEEP_REASONS, 0)
    for u in world.units:
        s = world.spec(u)
        if s.pinned or (pin_folder is not None and s.folder == pin_folder):
            kept["pinned"] += 1
        elif s.reserved:
            kept["reserved"] += 1
        elif s.locked and tp.role == "cache":
            kept["locked"] += 1
        elif s.open or (s.locked and tp.role == "scratch"):
            kept["open"] += 1
        elif s.age < tp.min_age:
            kept["young"] += 1
    return {k: v for k, v in kept.items() if v}


def _plan(world: World, tp: TreePolicy, volume_total: int = 10**12) -> Plan:
    return plan_tree(
        world.snapshot,
        world.units,
        tp,
        volume_total=volume_total,
        protection=world.protection,
        now=NOW,
    )


def _non_decreasing(values: Sequence[float]) -> bool:
    return all(a <= b for a, b in pairwise(values))


# -- plan_tree: caches -----------------------------------------------------------------------------


@PROPS
@given(
    specs=specs_st,
    pin_sub=st.booleans(),
    quota=st.integers(1, 2_000_000),
    low_pct=st.integers(0, 100),
    min_age=st.integers(0, 200_000),
    max_age=st.one_of(st.none(), st.integers(1, 400_000)),
)
def test_never_selects_pinned_reserved_locked_open_or_young(
    specs: list[Spec],
    pin_sub: bool,
    quota: int,
    low_pct: int,
    min_age: int,
    max_age: int | None,
) -> None:
    pin_folder = "sub" if pin_sub else None
    world = cache_world(specs, extra_pins=[f"{ROOT}/sub"] if pin_sub else [])
    tp = tree(quota=quota, low_watermark=f"{low_pct}%", min_age=min_age, max_age=max_age)
    plan = _plan(world, tp)
    keys = [i.unit.key for i in plan.items]
    assert len(keys) == len(set(keys)), "a unit planned twice"
    for item in plan.items:
        s = world.spec(item.unit)
        assert not protected(s, pin_folder=pin_folder), (item.unit.key, s)
        assert NOW - item.last_use >= min_age
        assert item.unit.path.startswith(ROOT + "/") and item.unit.path != ROOT
        assert item.tree == "t"
    (summary,) = plan.trees
    assert dict(summary.kept) == expected_kept(world, tp, pin_folder=pin_folder)
    assert summary.planned == plan.bytes == sum(i.size for i in plan.items)
    assert summary.usage == sum(u.size for u in world.units)


@PROPS
@given(
    specs=specs_st,
    quota=st.integers(1, 1_000_000),
    low_pct=st.integers(0, 100),
    min_age=st.integers(0, 200_000),
)
def test_quota_evicts_lru_first_down_to_the_low_watermark(
    specs: list[Spec], quota: int, low_pct: int, min_age: int
) -> None:
    world = cache_world(specs)
    tp = tree(quota=quota, low_watermark=f"{low_pct}%", min_age=min_age)
    plan = _plan(world, tp)
    usage = sum(u.size for u in world.units)
    low = tp.low_bytes(10**12)
    assert low is not None
    (summary,) = plan.trees
    if usage <= quota:
        assert plan.items == ()
        assert summary.reaches_target
        return
    assert all(i.reason == "quota" for i in plan.items)
    assert _non_decreasing([i.last_use for i in plan.items])
    free = evictable(world, tp)
    chosen = {i.unit.key for i in plan.items}
    need = usage - low
    planned = plan.bytes
    if sum(u.size for u in free) >= need:
        assert usage - planned <= low
        assert summary.reaches_target
    else:
        assert chosen == {u.key for u in free}
        assert summary.reaches_target is (usage - planned <= low)
    if plan.items:
        # It stops as soon as the watermark is reached: without the last item it was not.
        assert planned - plan.items[-1].size < need
        # Least recently used first: nothing left behind is older than anything chosen.
        newest_chosen = max(i.last_use for i in plan.items)
        left = [u.last_use for u in free if u.key not in chosen]
        assert all(t >= newest_chosen for t in left)


@PROPS
@given(
    specs=st.lists(
        st.builds(
            Spec,
            size=st.integers(0, 50_000),
            age=st.sampled_from([1000.0, 2000.0, 3000.0]),
            folder=st.sampled_from(["", "sub"]),
            pinned=rare,
        ),
        max_size=40,
    ),
    quota=st.integers(1, 1_000_000),
    low_pct=st.integers(0, 100),
    max_age=st.one_of(st.none(), st.just(1500)),
    rnd=st.randoms(use_true_random=False),
)
def test_ties_of_last_use_go_in_key_order_whatever_the_input_order(
    specs: list[Spec], quota: int, low_pct: int, max_age: int | None, rnd: Any
) -> None:
    world = cache_world(specs)
    rnd.shuffle(world.units)
    tp = tree(quota=quota, low_watermark=f"{low_pct}%", min_age=0, max_age=max_age)
    plan = _plan(world, tp)
    # The reference: every evictable unit in (last_use, key) order; expired ones first, then
    # the quota takes them in that order until the low watermark is reached.
    order = sorted(evictable(world, tp), key=lambda u: (u.last_use, u.key))
    expired = [u for u in order if max_age is not None and u.last_use < NOW - max_age]
    usage = sum(u.size for u in world.units)
    low = tp.low_bytes(10**12)
    assert low is not None
    chosen = list(expired)
    need = usage - sum(u.size for u in expired) - low
    if usage > quota:
        for u in order[len(expired) :]:
            if need <= 0:
                break
            chosen.append(u)
            need -= u.size
    assert [i.unit.key for i in plan.items] == [u.key for u in chosen]
    assert plan == _plan(world, tp)


@PROPS
@given(specs=specs_st, slack=st.integers(0, 1_000_000), min_age=st.integers(0, 200_000))
def test_under_quota_and_without_max_age_nothing_is_planned(
    specs: list[Spec], slack: int, min_age: int
) -> None:
    world = cache_world(specs)
    usage = sum(u.size for u in world.units)
    for quota in (usage + slack, None):
        if quota == 0:
            continue
        plan = _plan(world, tree(quota=quota, min_age=min_age))
        assert plan.items == ()
        assert plan.trees[0].planned == 0


@PROPS
@given(
    specs=specs_st,
    max_age=st.integers(1, 400_000),
    min_age=st.integers(0, 200_000),
    quota=st.one_of(st.none(), st.integers(1, 1_000_000)),
)
def test_max_age_expires_entries_regardless_of_quota(
    specs: list[Spec], max_age: int, min_age: int, quota: int | None
) -> None:
    world = cache_world(specs)
    tp = tree(quota=quota, min_age=min_age, max_age=max_age)
    plan = _plan(world, tp)
    expired = {u.key for u in evictable(world, tp) if u.last_use < NOW - max_age}
    age_items = [i for i in plan.items if i.reason == "age"]
    assert {i.unit.key for i in age_items} == expired
    assert _non_decreasing([i.last_use for i in age_items])
    # Expired entries come first; quota items (if any) follow and are never expired ones.
    assert plan.items[: len(age_items)] == tuple(age_items)
    for item in plan.items[len(age_items) :]:
        assert item.reason == "quota"
        assert item.unit.key not in expired
    if quota is None or sum(u.size for u in world.units) <= quota:
        assert len(age_items) == len(plan.items)


# -- plan_tree: scratch trees ----------------------------------------------------------------------


@PROPS
@given(
    specs=specs_st,
    orphan_age=st.integers(1, 300_000),
    min_age=st.integers(0, 100_000),
    quota=st.one_of(st.none(), st.integers(1, 100_000)),
)
def test_scratch_trees_plan_only_orphans(
    specs: list[Spec], orphan_age: int, min_age: int, quota: int | None
) -> None:
    world = scratch_world(specs)
    tp = tree("scratch", "/data/jobs", orphan_age=orphan_age, min_age=min_age, quota=quota)
    plan = _plan(world, tp)
    orphans = {u.key for u in evictable(world, tp) if u.last_use <= NOW - orphan_age}
    assert {i.unit.key for i in plan.items} == orphans
    assert all(i.reason == "orphan" for i in plan.items)
    assert _non_decreasing([i.last_use for i in plan.items])
    for item in plan.items:
        assert item.unit.path != "/data/jobs"
        assert item.unit.path.startswith("/data/jobs/")
    assert dict(plan.trees[0].kept) == expected_kept(world, tp)


# -- the root and pins on folders ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pin", "blocks_all"),
    [
        (ROOT, True),
        (ROOT + "/", True),
        ("/data", True),
        ("/data/cache-other", False),
        ("/data/cach", False),
        (ROOT + "/subway", False),
    ],
)
def test_pins_on_the_root_or_above_protect_everything_and_prefixes_do_not(
    pin: str, blocks_all: bool
) -> None:
    specs = [Spec(1000, 10 * 86400.0, folder) for folder in ("", "sub", "")]
    world = cache_world(specs, extra_pins=[pin])
    tp = tree(quota=1, low_watermark="0%", min_age=0)
    plan = _plan(world, tp)
    if blocks_all:
        assert plan.items == ()
        assert dict(plan.trees[0].kept) == {"pinned": 3}
    else:
        assert len(plan.items) == 3


def test_a_pin_on_a_folder_protects_only_that_folder() -> None:
    specs = [Spec(1000, 86400.0 * (3 - i), f) for i, f in enumerate(("sub", "subway", ""))]
    world = cache_world(specs, extra_pins=[f"{ROOT}/sub"])
    plan = _plan(world, tree(quota=1, low_watermark="0%", min_age=0))
    assert [i.unit.key for i in plan.items] == ["subway/k0001", "k0002"]


def test_the_plan_is_a_pure_function_of_its_inputs() -> None:
    specs = [Spec(1000 + i, 1000.0 * (i % 5), "") for i in range(30)]
    world = cache_world(specs)
    tp = tree(quota=10_000, low_watermark="50%", min_age=0)
    assert _plan(world, tp) == _plan(world, tp)


# -- plan_pressure ---------------------------------------------------------------------------------


@PROPS
@given(
    a=specs_st,
    b=specs_st,
    jobs=specs_st,
    need=st.integers(0, 2_000_000),
    min_a=st.integers(0, 200_000),
    min_b=st.integers(0, 200_000),
    exclude_every=st.integers(0, 5),
)
def test_pressure_evicts_least_recently_used_first_across_caches_until_covered(
    a: list[Spec],
    b: list[Spec],
    jobs: list[Spec],
    need: int,
    min_a: int,
    min_b: int,
    exclude_every: int,
) -> None:
    wa = cache_world(a, root="/data/c1")
    wb = cache_world(b, root="/data/c2", ino0=50_000)
    wj = scratch_world(jobs)
    ta = tree(root="/data/c1", name="c1", quota=10, min_age=min_a)
    tb = tree(root="/data/c2", name="c2", quota=10, min_age=min_b)
    tj = tree("scratch", "/data/jobs", name="jobs", orphan_age=1, min_age=0)
    protection = Protection(
        wa.protection.pinned | wb.protection.pinned | wj.protection.pinned,
        wa.protection.reserved | wb.protection.reserved | wj.protection.reserved,
        wa.protection.locked | wb.protection.locked,
        wa.protection.open | wb.protection.open | wj.protection.open,
    )
    excluded: set[tuple[str, str]] = set()
    if exclude_every:
        excluded = {("c1", u.key) for u in wa.units[::exclude_every]}
    plan = plan_pressure(
        [(wa.snapshot, wa.units, ta), (wj.snapshot, wj.units, tj), (wb.snapshot, wb.units, tb)],
        need,
        protection=protection,
        reason="make-room",
        exclude=excluded,
    )
    # By use, not by age: min_age (min_a, min_b) shields nothing from pressure or make-room.
    pool = [("c1", u) for u in unused(wa) if ("c1", u.key) not in excluded]
    pool += [("c2", u) for u in unused(wb)]
    assert all(i.tree in ("c1", "c2") for i in plan.items), "scratch trees are never evicted"
    assert all(i.reason == "make-room" for i in plan.items)
    chosen = {(i.tree, i.unit.key) for i in plan.items}
    assert len(chosen) == len(plan.items)
    assert chosen <= {(t, u.key) for t, u in pool}
    assert _non_decreasing([i.last_use for i in plan.items])
    if plan.items:
        newest = max(i.last_use for i in plan.items)
        assert all(u.last_use >= newest for t, u in pool if (t, u.key) not in chosen)
        assert plan.bytes - plan.items[-1].size < need
    if sum(u.size for _, u in pool) >= need:
        assert plan.bytes >= need
    else:
        assert chosen == {(t, u.key) for t, u in pool}
    planned = {t.tree: t.planned for t in plan.trees}
    assert planned == {
        "c1": sum(i.size for i in plan.items if i.tree == "c1"),
        "c2": sum(i.size for i in plan.items if i.tree == "c2"),
    }


def test_pressure_with_nothing_needed_plans_nothing() -> None:
    world = cache_world([Spec(1000, 99_999.0) for _ in range(5)])
    tp = tree(quota=10, min_age=0)
    plan = plan_pressure([(world.snapshot, world.units, tp)], 0, protection=Protection())
    assert plan.items == ()


# -- the unit table: what group_units gives the planner --------------------------------


@PROPS
@given(
    specs=specs_st,
    lock_files=st.booleans(),
    pin_sub=st.booleans(),
    quota=st.integers(1, 2_000_000),
    low_pct=st.integers(0, 100),
    min_age=st.integers(0, 200_000),
    max_age=st.one_of(st.none(), st.integers(1, 400_000)),
    need=st.integers(0, 2_000_000),
)
def test_the_unit_table_of_a_snapshot_plans_exactly_as_its_units_do(
    specs: list[Spec],
    lock_files: bool,
    pin_sub: bool,
    quota: int,
    low_pct: int,
    min_age: int,
    max_age: int | None,
    need: int,
) -> None:
    """group_units' table finds protected units by their names and derives keys lazily; the
    plans it leads to must be those of the same units given as a plain list."""
    world = cache_world(specs, extra_pins=[f"{ROOT}/sub"] if pin_sub else [], lock_files=lock_files)
    tp = tree(quota=quota, low_watermark=f"{low_pct}%", min_age=min_age, max_age=max_age)
    table = group_units(world.snapshot, tp)
    assert isinstance(table, UnitTable)
    assert sorted(table) == sorted(world.units)
    from_table = plan_tree(
        world.snapshot, table, tp, volume_total=10**12, protection=world.protection, now=NOW
    )
    assert from_table == _plan(world, tp)
    assert from_table.bytes == sum(i.size for i in from_table.items)
    pressure = [
        plan_pressure([(world.snapshot, units, tp)], need, protection=world.protection)
        for units in (table, world.units)
    ]
    assert pressure[0] == pressure[1]


def test_open_files_with_inode_numbers_past_2_to_the_63_are_found() -> None:
    """Some filesystems (XFS, NFS, FUSE) hand out 64-bit inode numbers; a signed column would
    overflow, and an open file must still be kept."""
    big = 2**64 - 5
    world = cache_world([Spec(size=1000, age=90_000.0)] * 3, lock_files=False, ino0=big - 4)
    opened = world.units[1].entries[0]
    assert opened.ino >= 2**63
    tp = tree(quota=1, low_watermark="0%")
    table = group_units(world.snapshot, tp)
    plan = plan_tree(
        world.snapshot,
        table,
        tp,
        volume_total=10**12,
        protection=Protection(open=frozenset({(DEV, opened.ino)})),
        now=NOW,
    )
    assert [i.unit.key for i in plan.items] == [world.units[0].key, world.units[2].key]
    assert dict(plan.trees[0].kept) == {"open": 1}


@pytest.mark.parametrize("lock", ["{key}.wav.lock", ".{key}.lock", None])
def test_a_held_lock_protects_a_unit_whose_key_is_empty(lock: str | None) -> None:
    """A group whose key may be empty makes the root's ``.wav`` the unit ``""``; its held lock
    (``<root>/.wav.lock``) must keep it, from a UnitTable as from a list of its units."""
    e = Entry(f"{ROOT}/.wav", ".wav", 1000, 101, DEV, NOW - 9e4, NOW - 9e4, NOW, 0, _FILE, 1000)
    snap = Snapshot(ROOT, DEV, 1, NOW, (e,))
    tp = TreePolicy.model_validate(
        {
            "name": "t",
            "role": "cache",
            "path": ROOT,
            "group": r"^(?P<key>.*?)\.wav$",
            "lock": lock,
            "quota": 1,
            "low_watermark": "0%",
            "min_age": 0,
        }
    )
    table = group_units(snap, tp)
    held = table[0].lock
    assert held == (None if lock is None else f"{ROOT}/{lock.replace('{key}', '')}")
    prot = Protection(locked=frozenset({held or f"{ROOT}/.wav.lock"}))
    for units in (table, list(table)):
        plan = plan_tree(snap, units, tp, volume_total=10**9, protection=prot, now=NOW)
        if lock is None:
            assert [i.unit.key for i in plan.items] == [""]
        else:
            assert plan.items == ()
            assert dict(plan.trees[0].kept) == {"locked": 1}
