"""The real `janitor` console script: sweep, log, touch, pin and unpin."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from janitor import Janitor
from tests._enforce_helpers import (
    DAY,
    HOUR,
    KiB,
    allocated,
    cache_tree,
    fp,
    make_entry,
    make_file,
    make_job,
    run_janitor,
    scratch_tree,
    set_age,
)

ITEM_KEYS = {"tree", "path", "kind", "reason", "bytes", "last_use", "deleted", "files", "skipped"}
TREE_KEYS = {
    "tree",
    "role",
    "path",
    "usage",
    "units",
    "quota",
    "low_watermark",
    "planned",
    "reaches_target",
    "kept",
}


def _one_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


def _json(args: list[str], code: int = 0) -> Any:
    done = run_janitor(*args)
    assert done.returncode == code, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    return json.loads(done.stdout)


@pytest.fixture
def two_caches(tmp_path: Path, write_policy: Callable[..., Path]) -> tuple[Path, Path, Path]:
    """Two cache trees ``one`` and ``two`` over quota, and a job tree with one orphan."""
    one, two, jobs = tmp_path / "one", tmp_path / "two", tmp_path / "jobs"
    for root in (one, two):
        for i in range(3):
            make_entry(root, fp(i), 16 * KiB, age=(3 - i) * DAY, lock=False)
    make_job(jobs, ".tmpdead", "fa_v2", age=2 * DAY)
    write_policy(
        {
            "one": cache_tree(one, quota="40KiB", low_watermark="20KiB"),
            "two": cache_tree(two, quota="40KiB", low_watermark="20KiB"),
            "jobs": scratch_tree(jobs),
        },
        floor="1MiB",
    )
    return one, two, jobs


def test_sweep_dry_run_json_shape(two_caches: tuple[Path, Path, Path]) -> None:
    one, two, jobs = two_caches
    data = _json(["sweep", "--dry-run", "--json"])
    assert data["dry_run"] is True
    assert data["deleted_bytes"] == 0
    assert data["planned_bytes"] == sum(it["bytes"] for it in data["items"])
    for it in data["items"]:
        assert set(it) >= ITEM_KEYS
        assert it["deleted"] is False and it["files"] == 0 and it["skipped"] is None
        assert isinstance(it["bytes"], int) and it["bytes"] > 0
        assert isinstance(it["last_use"], float)
    by_path = {it["path"]: it for it in data["items"]}
    oldest = one / f"{fp(0)}.wav"
    assert by_path[str(oldest)]["tree"] == "one"
    assert by_path[str(oldest)]["reason"] == "quota"
    assert by_path[str(oldest)]["kind"] == "file"
    assert by_path[str(oldest)]["bytes"] == allocated(oldest)
    assert by_path[str(oldest)]["last_use"] == pytest.approx(os.stat(oldest).st_mtime)
    assert by_path[str(jobs / ".tmpdead")]["reason"] == "orphan"
    assert by_path[str(jobs / ".tmpdead")]["kind"] == "dir"
    # LRU: from each cache the two oldest go (48 KiB down to <= 20 KiB).
    assert {p for p, it in by_path.items() if it["tree"] == "two"} == {
        str(two / f"{fp(0)}.wav"),
        str(two / f"{fp(1)}.wav"),
    }
    trees = {t["tree"]: t for t in data["trees"]}
    assert set(trees) == {"one", "two", "jobs"}
    for t in trees.values():
        assert set(t) >= TREE_KEYS
        assert isinstance(t["kept"], dict)
    assert trees["one"]["quota"] == 40 * KiB and trees["one"]["low_watermark"] == 20 * KiB
    assert trees["one"]["usage"] == sum(allocated(p) for p in one.iterdir())
    assert trees["one"]["planned"] == sum(
        it["bytes"] for it in data["items"] if it["tree"] == "one"
    )
    assert trees["one"]["reaches_target"] is True
    assert trees["jobs"]["role"] == "scratch" and trees["jobs"]["quota"] is None
    assert all(p.exists() for p in one.iterdir()) and (jobs / ".tmpdead").exists()
    assert (one / f"{fp(0)}.wav").exists()


def test_sweep_json_after_evictions_that_leave_lock_files(
    tmp_path: Path, write_policy: Callable[..., Path]
) -> None:
    """Evicted entries keep their lock files; the JSON keeps its shape and its numbers: files
    removed without the lock, bytes as planned, and the leftovers counted nowhere next time."""
    cache = tmp_path / "cache"
    for i in range(4):
        make_entry(cache, fp(i), 16 * KiB, age=(5 - i) * DAY, tmp=i == 0)
    write_policy({"cache": cache_tree(cache, quota="40KiB", low_watermark="20KiB")}, floor="1MiB")
    data = _json(["sweep", "--json"])
    assert set(data) == {
        "dry_run",
        "planned_bytes",
        "deleted_bytes",
        "reclaimed_bytes",
        "items",
        "trees",
        "volumes",
        "warnings",
    }
    items = {it["path"]: it for it in data["items"]}
    assert set(items) == {str(cache / f"{fp(i)}.wav") for i in range(3)}
    for it in items.values():
        assert set(it) == ITEM_KEYS
        assert it["deleted"] is True and it["skipped"] is None
    assert items[str(cache / f"{fp(0)}.wav")]["files"] == 2  # the .wav and its .tmp.wav
    assert items[str(cache / f"{fp(1)}.wav")]["files"] == 1
    assert data["deleted_bytes"] == data["planned_bytes"]  # lock files hold no blocks
    (tree,) = data["trees"]
    assert set(tree) == TREE_KEYS
    assert (tree["units"], tree["reaches_target"]) == (4, True)
    assert sorted(os.listdir(cache)) == sorted(
        [f"{fp(3)}.wav", *(f"{fp(i)}.wav.lock" for i in range(4))]
    )

    again = _json(["sweep", "--json"])
    assert again["items"] == [] and again["planned_bytes"] == 0
    (tree,) = again["trees"]
    assert (tree["units"], tree["planned"], tree["kept"], tree["reaches_target"]) == (
        1,
        0,
        {},
        True,
    )
    assert tree["usage"] == allocated(cache / f"{fp(3)}.wav")


def test_sweep_one_tree_touches_only_that_tree(two_caches: tuple[Path, Path, Path]) -> None:
    one, two, jobs = two_caches
    before_two = sorted(os.listdir(two))
    done = run_janitor("sweep", "one")
    assert done.returncode == 0, done.stderr
    assert "deleted" in done.stdout
    assert sorted(os.listdir(one)) == [f"{fp(2)}.wav"]
    assert sorted(os.listdir(two)) == before_two
    assert (jobs / ".tmpdead").exists()
    data = _json(["sweep", "--json"])
    assert data["dry_run"] is False
    deleted = {it["path"] for it in data["items"] if it["deleted"]}
    assert deleted == {str(two / f"{fp(0)}.wav"), str(two / f"{fp(1)}.wav"), str(jobs / ".tmpdead")}
    assert data["deleted_bytes"] == sum(it["bytes"] for it in data["items"] if it["deleted"])


def test_sweep_of_an_unknown_tree_is_one_line_exit_2(two_caches: tuple[Path, Path, Path]) -> None:
    done = run_janitor("sweep", "nope")
    assert done.returncode == 2
    line = _one_line(done.stderr)
    assert "nope" in line and "one" in line


def test_sweep_exits_1_when_a_cache_cannot_reach_its_low_watermark(
    tmp_path: Path, write_policy: Callable[..., Path]
) -> None:
    root = tmp_path / "cache"
    for i in range(3):
        make_entry(root, fp(i), 16 * KiB, age=60, lock=False)  # younger than min_age
    write_policy({"cache": cache_tree(root, quota="8KiB", min_age="10m")})
    data = _json(["sweep", "--json"], code=1)
    (tree,) = data["trees"]
    assert tree["reaches_target"] is False
    assert tree["kept"] == {"young": 3}
    assert data["items"] == []
    assert len(os.listdir(root)) == 3


def test_log_since_json(two_caches: tuple[Path, Path, Path]) -> None:
    one, _, _ = two_caches
    jan = Janitor.from_settings()
    try:
        # An entry from two hours ago, written through the ledger's own API.
        jan.ledger.call(
            lambda tx: tx.log.add(
                "delete",
                tree="one",
                path="/old/entry.wav",
                nbytes=1,
                ts=time.time() - 2 * HOUR,
            )
        )
    finally:
        jan.ledger.close()
    assert run_janitor("sweep", "one").returncode == 0
    recent = _json(["log", "--since", "1h", "--json"])
    deletes = [e for e in recent if e["event"] == "delete"]
    assert {e["path"] for e in deletes} == {str(one / f"{fp(0)}.wav"), str(one / f"{fp(1)}.wav")}
    for e in deletes:
        assert set(e) >= {"id", "time", "event", "tree", "bytes", "path", "detail"}
        assert e["tree"] == "one" and e["detail"]["reason"] == "quota" and e["bytes"] > 0
        assert time.time() - e["time"] < HOUR
    everything = _json(["log", "--since", "3h", "--json", "--event", "delete"])
    assert "/old/entry.wav" in {e["path"] for e in everything}
    assert all(e["event"] == "delete" for e in everything)
    text = run_janitor("log", "--since", "1h")
    assert text.returncode == 0
    assert "delete" in text.stdout and "(quota)" in text.stdout
    assert "/old/entry.wav" not in text.stdout


def test_touch_changes_the_lru_order(tmp_path: Path, write_policy: Callable[..., Path]) -> None:
    root = tmp_path / "cache"
    a = make_file(root / "a.wav", 16 * KiB, age=3 * DAY)
    b = make_file(root / "b.wav", 16 * KiB, age=2 * DAY)
    unit = allocated(a)
    write_policy({"cache": cache_tree(root, quota=f"{2 * unit - 1}", low_watermark=f"{unit}")})
    before = _json(["sweep", "--dry-run", "--json"])
    assert [it["path"] for it in before["items"]] == [str(a)]
    done = run_janitor("touch", str(a))
    assert done.returncode == 0, done.stderr
    after = _json(["sweep", "--dry-run", "--json"])
    assert [it["path"] for it in after["items"]] == [str(b)]
    outside = run_janitor("touch", str(tmp_path / "elsewhere.wav"))
    assert outside.returncode == 2
    assert "no managed tree" in _one_line(outside.stderr)


def test_pin_and_unpin_exit_codes(tmp_path: Path, write_policy: Callable[..., Path]) -> None:
    root = tmp_path / "cache"
    wav = make_entry(root, fp(0), 16 * KiB, age=2 * DAY, lock=False)[0]
    make_entry(root, fp(1), 16 * KiB, age=DAY, lock=False)
    write_policy({"cache": cache_tree(root, quota="4KiB", low_watermark="0%")})

    pinned = run_janitor("pin", str(wav))
    assert pinned.returncode == 0, pinned.stderr
    pin_id = pinned.stdout.strip()
    assert pin_id.startswith("p-")
    # The pin's owner is the process that ran janitor (this test): it protects now, so the
    # cache stays above its watermark (exit 1).
    swept = _json(["sweep", "--json"], code=1)
    assert swept["trees"][0]["kept"] == {"pinned": 1}
    assert wav.exists()

    assert run_janitor("unpin", pin_id).returncode == 0
    again = run_janitor("unpin", pin_id)
    assert again.returncode == 2
    assert pin_id in _one_line(again.stderr)

    as_json = _json(["pin", str(wav), "--json"])
    assert as_json["path"] == str(wav) and as_json["state"] == "live"
    assert as_json["owner_pid"] == os.getpid()
    assert run_janitor("unpin", str(wav)).returncode == 0  # by path
    assert run_janitor("unpin", str(wav)).returncode == 2

    outside = make_file(tmp_path / "elsewhere.wav", 10)
    refused = run_janitor("pin", str(outside))
    assert refused.returncode == 2
    assert "no managed tree" in _one_line(refused.stderr)
    dead = run_janitor("pin", str(wav), "--owner-pid", "999999999")
    assert dead.returncode == 2
    _one_line(dead.stderr)

    swept = _json(["sweep", "--json"])
    assert not wav.exists()
    assert swept["trees"][0]["kept"] == {}


def test_sweep_handles_names_that_are_not_utf8(
    tmp_path: Path, write_policy: Callable[..., Path]
) -> None:
    root = tmp_path / "cache"
    root.mkdir()
    bad = os.fsencode(root) + b"/caf\xe9.wav"
    with open(bad, "wb") as fh:
        fh.write(b"x" * 20_000)
    set_age(bad, 2 * DAY)
    write_policy({"cache": cache_tree(root, quota="4KiB", low_watermark="0%")})
    plan = _json(["sweep", "--dry-run", "--json"])
    (item,) = plan["items"]
    assert item["path"] == str(root / "caf\ufffd.wav")
    assert os.path.lexists(bad)
    done = run_janitor("sweep", "--json")
    assert "Traceback" not in done.stderr, done.stderr.strip().splitlines()[-1]
    assert done.returncode == 0, done.stderr
    assert not os.path.lexists(bad)
