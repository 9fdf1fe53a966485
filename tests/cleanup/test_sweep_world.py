"""A sweep gathers its world once, then plans from it alone.

One read of the ledger before anything is deleted (one write transaction when it reaps, one
read snapshot for a dry run), with the touches of every tree in it; and ``plan_world`` plans
from a ``World`` without looking at a disk (its roots here do not exist).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest

import janitor.cleanup.sweep as sweep
from janitor.admission.volume import Volume
from janitor.cleanup.kinds import group_units
from janitor.cleanup.plan import Plan, Protection, ScannedTree
from janitor.cleanup.scan import Entry, Snapshot
from janitor.cleanup.world import World, plan_world
from janitor.config.policy import TreePolicy
from janitor.ledger.db import Ledger
from tests._enforce_helpers import KiB, cache_tree, fp, make_entry
from tests.cleanup.conftest import JanFor

DAY = 86400.0


class _Counted:
    """Counts the ledger's transactions (every Ledger of the process) while installed."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.reads = 0
        self.writes = 0
        real_read, real_write = Ledger.read, Ledger.write
        counter = self

        def read(self: Ledger) -> AbstractContextManager[Any]:
            counter.reads += 1
            return real_read(self)

        def write(self: Ledger) -> AbstractContextManager[Any]:
            counter.writes += 1
            return real_write(self)

        monkeypatch.setattr(Ledger, "read", read)
        monkeypatch.setattr(Ledger, "write", write)


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[_Counted, list[tuple[int, int]]]]:
    """The counter, and (reads, writes) as they stood each time the sweep called apply."""
    counter = _Counted(monkeypatch)
    at_apply: list[tuple[int, int]] = []
    real_apply = sweep.apply

    def apply(*args: Any, **kwargs: Any) -> Any:
        at_apply.append((counter.reads, counter.writes))
        return real_apply(*args, **kwargs)

    monkeypatch.setattr(sweep, "apply", apply)
    yield counter, at_apply


@pytest.mark.parametrize("dry_run", [False, True])
def test_a_sweep_reads_the_ledger_once_before_it_deletes(
    tmp_path: Path,
    jan_for: JanFor,
    counted: tuple[_Counted, list[tuple[int, int]]],
    dry_run: bool,
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    for root in (a, b):
        for i in range(4):
            make_entry(root, fp(i), 4 * KiB, age=(10 - i) * DAY)
    jan = jan_for(
        {
            "a": cache_tree(a, quota="8KiB", low_watermark="0%"),
            "b": cache_tree(b, quota="8KiB", low_watermark="0%"),
        }
    )
    # The newest entry of a was touched long after its files: the touch keeps it.
    jan.touch(a / f"{fp(0)}.wav")
    with jan.pin(b / f"{fp(0)}.wav"):
        counter, at_apply = counted
        counter.reads = counter.writes = 0
        result = jan.sweep(dry_run=dry_run, pressure=False)
    assert at_apply == [(1, 0) if dry_run else (0, 1)]
    chosen = {(i.tree, i.unit.key) for i in result.plan.items}
    assert ("a", fp(3)) in chosen and ("a", fp(0)) not in chosen  # the touch was read
    assert ("b", fp(0)) not in chosen  # the pin was read
    assert dict(next(t for t in result.plan.trees if t.tree == "b").kept) == {"pinned": 1}


def test_a_sweep_reaps_what_janitor_reap_reaps(tmp_path: Path, jan_for: JanFor) -> None:
    """A reservation and a pin whose owner died end with the sweep's one write transaction;
    a dry run ends nothing (and does not count them either)."""
    root = tmp_path / "c"
    make_entry(root, fp(1), 4 * KiB, age=DAY)
    jan = jan_for({"c": cache_tree(root, quota="1GiB")})
    owner = subprocess.Popen(["sleep", "600"])
    try:
        jan.reserve("c", "1MiB", path=root / "x.tmp.wav", owner_pid=owner.pid, ttl="1h")
        jan.pin(root / f"{fp(1)}.wav", owner_pid=owner.pid)
    finally:
        owner.kill()
        owner.wait()
    with jan.ledger.read() as tx:
        assert len(tx.reservations.live()) == 1 and len(tx.pins.live_paths()) == 1
    jan.sweep(dry_run=True)
    with jan.ledger.read() as tx:
        assert len(tx.reservations.live()) == 1 and len(tx.pins.live_paths()) == 1
    jan.sweep()
    with jan.ledger.read() as tx:
        assert tx.reservations.live() == [] and tx.pins.live_paths() == set()


# -- plan_world: pure ----------------------------------------------------------------------------

NOW = 1_700_000_000.0
DEV = 7
GIB = 1 << 30


def _cache(root: str, sizes: list[int], ino0: int, **keys: Any) -> tuple[Snapshot, TreePolicy]:
    """A cache whose entry k is ``sizes[k]`` bytes and k days old, one file each."""
    entries = tuple(
        Entry(
            f"{root}/{fp(k)}.wav",
            f"{fp(k)}.wav",
            size,
            ino0 + k,
            DEV,
            NOW - (k + 1) * DAY,
            NOW - (k + 1) * DAY,
            NOW - (k + 1) * DAY,
            0,
            0o100644,
            size,
        )
        for k, size in enumerate(sizes)
    )
    policy = TreePolicy.model_validate(
        {"name": root.rsplit("/", 1)[1], "role": "cache", "path": root, "min_age": 0, **keys}
    )
    return Snapshot(root, DEV, 2, NOW, entries), policy


def _volume(free: int, *, total: int = 100 * GIB) -> Volume:
    return Volume(DEV, "/nowhere", total, free, GIB, 2 * GIB, 3 * GIB, 0, "ok", "")


def _world(free: int, quota: str | None = None) -> World:
    scanned = []
    for root, sizes, ino0 in (("/nowhere/c1", [GIB // 2] * 4, 100), ("/nowhere/c2", [GIB], 200)):
        keys = {"quota": quota, "low_watermark": "100%"} if quota and root.endswith("1") else {}
        snap, tp = _cache(root, sizes, ino0, **keys)
        scanned.append(ScannedTree(snap, group_units(snap, tp), tp))
    return World(tuple(scanned), Protection(), {DEV: _volume(free)}, NOW)


def test_plan_world_adds_pressure_only_below_free_low_and_counts_the_rest_of_the_plan() -> None:
    above = plan_world(_world(free=2 * GIB))
    assert above == Plan((), above.trees) and not above.items
    # 1.5 GiB to free_target: the oldest first across both caches (c1's 4-day-old entry, then
    # c2's 1 GiB 1-day-old one is newer than c1's three older ones).
    below = plan_world(_world(free=int(1.5 * GIB)))
    assert [(i.tree, i.unit.key, i.reason) for i in below.items] == [
        ("c1", f"{fp(3)}.wav", "pressure"),
        ("c1", f"{fp(2)}.wav", "pressure"),
        ("c1", f"{fp(1)}.wav", "pressure"),
    ]
    assert plan_world(_world(free=int(1.5 * GIB)), pressure=False).items == ()


def test_plan_world_counts_a_trees_own_plan_against_the_volumes_need() -> None:
    # c1 over its 1 GiB quota comes down to it (low watermark 100 %: the quota) with its two
    # oldest, 1 GiB: that leaves 0.5 GiB of the volume's need of 1.5 GiB, its next oldest.
    plan = plan_world(_world(free=int(1.5 * GIB), quota="1GiB"))
    assert [(i.unit.key, i.reason) for i in plan.items] == [
        (f"{fp(3)}.wav", "quota"),
        (f"{fp(2)}.wav", "quota"),
        (f"{fp(1)}.wav", "pressure"),
    ]
