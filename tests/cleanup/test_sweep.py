"""Sweeps end to end: pins and touches, make-room on a real tmpfs, volume pressure, and two
sweeps racing in two processes.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from janitor import Janitor
from janitor.errors import ConfigError, ReservationRefused
from tests._enforce_helpers import (
    DAY,
    KiB,
    age_tree,
    allocated,
    cache_tree,
    fp,
    make_entry,
    make_file,
    pinned_by_child,
    run_janitor,
    scratch_tree,
)
from tests._fixtures.console import JANITOR_BIN
from tests._fixtures.space import MiB
from tests.cleanup.conftest import JanFor


def _deleted_paths(jan: Janitor, reason: str | None = None) -> list[str]:
    return [
        e.path
        for e in jan.log(events=("delete",))
        if e.path is not None and (reason is None or e.detail.get("reason") == reason)
    ]


def _planned_keys(jan: Janitor) -> list[str]:
    return [i.unit.key for i in jan.sweep(dry_run=True).plan.items]


# -- pins ------------------------------------------------------------------------------------------


def test_a_pin_protects_its_entry_through_a_sweep(tmp_path: Path, jan_for: JanFor) -> None:
    root = tmp_path / "cache"
    for i in range(3):
        make_entry(root, fp(i), 16 * KiB, age=(3 - i) * DAY, tmp=True, lock=False)
    jan = jan_for({"cache": cache_tree(root, quota="4KiB", low_watermark="0%")})
    wav = root / f"{fp(0)}.wav"
    with jan.pin(wav) as pin:
        assert pin.id.startswith("p-")
        assert [p.path for p in jan.pins()] == [str(wav)]
        result = jan.sweep()
        assert wav.exists() and (root / f"{fp(0)}.tmp.wav").exists()
        assert dict(result.plan.trees[0].kept) == {"pinned": 1}
        assert result.report.deleted_units == 2
    assert jan.pins() == []
    result = jan.sweep()
    assert [o.item.unit.key for o in result.report.outcomes if o.deleted] == [fp(0)]
    assert not wav.exists()


def test_a_pin_on_a_folder_protects_what_is_inside(tmp_path: Path, jan_for: JanFor) -> None:
    root = tmp_path / "cache"
    for i in range(2):
        make_entry(root / "keep", fp(i), 8 * KiB, age=3 * DAY, lock=False)
        make_entry(root / "keepers", fp(10 + i), 8 * KiB, age=3 * DAY, lock=False)
    jan = jan_for({"cache": cache_tree(root, quota="4KiB", low_watermark="0%")})
    with jan.pin(root / "keep"):
        jan.sweep()
    assert sorted(os.listdir(root / "keep")) == sorted(f"{fp(i)}.wav" for i in range(2))
    assert os.listdir(root / "keepers") == []  # a name prefix is not the folder


def test_a_pin_whose_owner_was_killed_stops_protecting(tmp_path: Path, jan_for: JanFor) -> None:
    root = tmp_path / "cache"
    for i in range(2):
        make_entry(root, fp(i), 16 * KiB, age=(2 - i) * DAY, lock=False)
    jan = jan_for({"cache": cache_tree(root, quota="4KiB", low_watermark="0%")})
    wav = root / f"{fp(0)}.wav"
    policy = jan.settings.policy_path
    with pinned_by_child(policy, wav) as (proc, pin_id):
        assert [p.id for p in jan.pins()] == [pin_id]
        assert _planned_keys(jan) == [fp(1)]
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert jan.pins() == []
    result = jan.sweep()
    assert {o.item.unit.key for o in result.report.outcomes if o.deleted} == {fp(0), fp(1)}
    assert not wav.exists()
    events = [(e.event, e.path) for e in jan.log(events=("pin", "pin-dead"))]
    assert events == [("pin", str(wav)), ("pin-dead", str(wav))]


@pytest.mark.parametrize("how", ["pin", "touch", "reserve"])
def test_a_pin_touch_or_reservation_through_a_symlinked_alias_of_the_tree_counts(
    tmp_path: Path, jan_for: JanFor, how: str
) -> None:
    """The tree's folder reached through another name (``/tmp`` vs ``/private/tmp`` on macOS,
    ``/var/folders`` vs ``/private/var/folders``): the janitor accepts the path as inside the
    tree, so the pin, touch or reservation must protect (or freshen) the entry the scan sees.
    """
    root = tmp_path / "cache"
    alias = tmp_path / "alias"
    for i in range(2):
        make_entry(root, fp(i), 16 * KiB, age=(2 - i) * DAY, lock=False)
    alias.symlink_to(root, target_is_directory=True)
    unit = allocated(root / f"{fp(0)}.wav")
    jan = jan_for({"cache": cache_tree(root, quota=f"{2 * unit - 1}", low_watermark=f"{unit}")})
    assert _planned_keys(jan) == [fp(0)]
    target = alias / f"{fp(0)}.wav"
    if how == "pin":
        with jan.pin(target):
            jan.sweep()
    elif how == "reserve":
        with jan.reserve("cache", 4096, path=target):
            jan.sweep()
    else:
        jan.touch(target)
        jan.sweep()
    assert (root / f"{fp(0)}.wav").exists(), (
        f"the entry ({how}) reached through the alias was evicted"
    )
    assert not (root / f"{fp(1)}.wav").exists()


def test_pinning_a_path_outside_every_tree_is_refused(tmp_path: Path, jan_for: JanFor) -> None:
    root = tmp_path / "cache"
    root.mkdir()
    elsewhere = make_file(tmp_path / "elsewhere.wav", 10)
    jan = jan_for({"cache": cache_tree(root)})
    with pytest.raises(ConfigError) as info:
        jan.pin(elsewhere)
    assert "in no managed tree" in str(info.value)
    assert jan.pins() == []


def test_unpin_by_path_ends_every_pin_on_it(tmp_path: Path, jan_for: JanFor) -> None:
    root = tmp_path / "cache"
    wav = make_file(root / f"{fp(0)}.wav", 10)
    jan = jan_for({"cache": cache_tree(root)})
    first, second = jan.pin(wav), jan.pin(wav)
    ended = jan.unpin(wav)
    assert {p.id for p in ended} == {first.id, second.id}
    assert jan.pins() == []
    first.unpin()  # already ended: harmless


# -- touches ---------------------------------------------------------------------------------------


def test_a_touch_makes_an_old_entry_recently_used(tmp_path: Path, jan_for: JanFor) -> None:
    root = tmp_path / "cache"
    ages = {"a": 3 * DAY, "b": 2 * DAY, "c": 1 * DAY}
    files = {
        name: make_file(root / f"{name}{fp(0)}.wav", 16 * KiB, age=age)
        for name, age in ages.items()
    }
    unit = allocated(files["a"])
    # Three units over the quota by one: exactly one goes, the least recently used.
    jan = jan_for(
        {
            "cache": cache_tree(
                root, quota=f"{3 * unit - 1}", low_watermark=f"{2 * unit}", min_age="1s"
            )
        }
    )
    assert _planned_keys(jan) == [f"a{fp(0)}"]
    jan.touch(files["a"])
    assert _planned_keys(jan) == [f"b{fp(0)}"]
    jan.sweep()
    assert files["a"].exists() and files["c"].exists()
    assert not files["b"].exists()


def test_touching_a_path_outside_every_tree_is_refused(tmp_path: Path, jan_for: JanFor) -> None:
    (tmp_path / "cache").mkdir()
    jan = jan_for({"cache": cache_tree(tmp_path / "cache")})
    with pytest.raises(ConfigError):
        jan.touch(tmp_path / "elsewhere.wav")


# -- make room on admission ------------------------------------------------------------------------


@pytest.fixture
def full_volume(tmpfs: Callable[..., Path], jan_for: JanFor) -> tuple[Janitor, Path, list[Path]]:
    """A 64 MiB tmpfs holding a cache of six 8 MiB entries (oldest first) and a job tree.

    Floor 8 MiB: about 16 MiB are free, so a 20 MiB reservation is refused unless two entries
    are evicted first.
    """
    mount = tmpfs("64m")
    cache = mount / "cache"
    work = mount / "work"
    work.mkdir()
    wavs = [make_entry(cache, fp(i), 8 * MiB, age=(6 - i) * DAY, lock=False)[0] for i in range(6)]
    jan = jan_for(
        {
            "cache": cache_tree(cache, quota="60MiB", low_watermark="90%", min_age="1s"),
            "work": scratch_tree(work),
        },
        floor="8MiB",
    )
    return jan, work, wavs


def test_a_reservation_is_admitted_after_evicting_the_oldest_entries(
    full_volume: tuple[Janitor, Path, list[Path]],
) -> None:
    jan, work, wavs = full_volume
    assert jan.would_fit("work", "20MiB").fits is False
    with jan.reserve("work", "20MiB", path=work / ".tmpjob", job="fa") as r:
        assert r.nbytes == 20 * MiB
        gone = [w for w in wavs if not w.exists()]
        assert gone == wavs[:2], "the two least recently used entries go, and only they"
        assert _deleted_paths(jan, "make-room") == [str(w) for w in wavs[:2]]
        assert [e.event for e in jan.log(events=("delete", "grant"))][-1] == "grant"
    assert _deleted_paths(jan) == _deleted_paths(jan, "make-room")


def test_make_room_never_evicts_a_pinned_entry(
    full_volume: tuple[Janitor, Path, list[Path]],
) -> None:
    jan, _, wavs = full_volume
    with jan.pin(wavs[0]), jan.reserve("work", "20MiB"):
        assert [w.exists() for w in wavs] == [True, False, False, True, True, True]


def test_no_evict_refuses_and_deletes_nothing(
    full_volume: tuple[Janitor, Path, list[Path]],
) -> None:
    jan, _, wavs = full_volume
    with pytest.raises(ReservationRefused) as info:
        jan.reserve("work", "20MiB", evict=False)
    assert info.value.errno == errno.ENOSPC
    assert info.value.evicted == 0
    assert info.value.shortfall > 0
    assert all(w.exists() for w in wavs)
    assert _deleted_paths(jan) == []


def test_when_evicting_everything_is_not_enough_nothing_is_evicted(
    full_volume: tuple[Janitor, Path, list[Path]],
) -> None:
    """Make-room deletes only when that makes the reservation fit: a refusal that stands
    anyway must not cost the cache its entries."""
    jan, _, wavs = full_volume
    with pytest.raises(ReservationRefused) as info:
        jan.reserve("work", "60MiB")
    refusal = info.value
    assert refusal.evicted == 0
    assert refusal.shortfall > 0
    assert all(w.exists() for w in wavs)
    assert _deleted_paths(jan, "make-room") == []


def test_cli_reserve_no_evict_exits_75_and_evict_admits(
    full_volume: tuple[Janitor, Path, list[Path]],
) -> None:
    _, _, wavs = full_volume
    refused = run_janitor("reserve", "work", "20MiB", "--no-evict", "--json")
    assert refused.returncode == 75, refused.stderr
    assert json.loads(refused.stdout)["evicted"] == 0
    assert all(w.exists() for w in wavs)
    granted = run_janitor("reserve", "work", "20MiB", "--json")
    assert granted.returncode == 0, granted.stderr
    rid = json.loads(granted.stdout)["id"]
    assert [w.exists() for w in wavs] == [False, False, True, True, True, True]
    assert run_janitor("release", rid).returncode == 0


# -- volume pressure -------------------------------------------------------------------------------


def test_pressure_evicts_oldest_first_across_caches_until_free_target(
    tmpfs: Callable[..., Path], jan_for: JanFor
) -> None:
    mount = tmpfs("64m")
    one, two = mount / "one", mount / "two"
    ages = {one: (6, 4, 2), two: (5, 3, 1)}
    wavs = {
        (root, age): make_entry(root, fp(age), 8 * MiB, age=age * DAY, lock=False)[0]
        for root, days in ages.items()
        for age in days
    }
    jan = jan_for(
        {"one": cache_tree(one, quota=None), "two": cache_tree(two, quota=None)},
        floor="4MiB",
        volume={"free_low": "24MiB", "free_target": "30MiB"},
    )
    assert jan.sweep(pressure=False).plan.items == ()
    result = jan.sweep()
    gone = sorted(age for (_, age), w in wavs.items() if not w.exists())
    assert gone == [5, 6]  # 16 MiB free + the two oldest across both caches >= 30 MiB
    assert {i.reason for i in result.plan.items} == {"pressure"}
    assert os.statvfs(mount).f_bavail * os.statvfs(mount).f_frsize >= 30 * MiB


# -- two sweeps at once ----------------------------------------------------------------------------


def test_two_sweeps_in_two_processes_never_delete_a_file_twice(
    tmp_path: Path, jan_for: JanFor
) -> None:
    cache, jobs = tmp_path / "cache", tmp_path / "jobs"
    n = 240
    for i in range(n):
        make_entry(cache, fp(i), 4 * KiB, age=DAY + i, tmp=i % 3 == 0, lock=False)
    for i in range(20):
        make_file(jobs / f".tmp{i:04d}" / "fa_v2" / "audio" / "0.pcm", 4 * KiB)
    age_tree(jobs, 2 * DAY)
    unit = allocated(cache / f"{fp(1)}.wav")
    jan = jan_for(
        {
            "cache": cache_tree(
                cache, quota=f"{(n // 2) * unit}", low_watermark=f"{(n // 4) * unit}"
            ),
            "jobs": scratch_tree(jobs),
        }
    )
    commands = [["sweep", "--json"], ["sweep", "--json"], ["sweep", "cache", "--json"]]
    procs = [
        subprocess.Popen(
            [str(JANITOR_BIN), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=dict(os.environ),
        )
        for args in commands
    ]
    outputs = [p.communicate(timeout=120) for p in procs]
    deleted: list[str] = []
    for proc, (out, err) in zip(procs, outputs, strict=True):
        assert "Traceback" not in err, err
        assert proc.returncode == 0, err
        data = json.loads(out)
        deleted += [it["path"] for it in data["items"] if it["deleted"]]
    assert len(deleted) == len(set(deleted)), "a unit was reported deleted twice"
    logged = _deleted_paths(jan)
    assert len(logged) == len(set(logged)), "a deletion was logged twice"
    assert sorted(logged) == sorted(deleted)
    assert sum(1 for p in deleted if "/jobs/" in p) == 20
    assert os.listdir(jobs) == []
    left = {name.split(".")[0] for name in os.listdir(cache)}
    assert n - len(left) == len(deleted) - 20
