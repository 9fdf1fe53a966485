"""The deleter on a real filesystem: whatever changes between plan and delete, it only ever
removes what it planned, inside the tree, unused and owned by us, and logs every removal.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from janitor import Janitor
from janitor.cleanup.apply import Outcome, Report, apply
from janitor.cleanup.plan import Plan
from janitor.host import inuse
from tests._enforce_helpers import (
    DAY,
    HOUR,
    KiB,
    age_tree,
    cache_tree,
    flock_held,
    fp,
    held_open,
    listing,
    make_entry,
    make_file,
    make_job,
    scratch_tree,
    set_age,
)
from tests._fixtures.space import MiB
from tests.cleanup.conftest import JanFor


def _cache(jan_for: JanFor, root: Path, **keys: Any) -> Janitor:
    keys.setdefault("quota", "4KiB")
    keys.setdefault("low_watermark", "0%")
    return jan_for({"cache": cache_tree(root, **keys)})


def _by_key(report: Report) -> dict[str, Outcome]:
    return {o.item.unit.key: o for o in report.outcomes}


def _deletes(jan: Janitor) -> list[Any]:
    return jan.log(events=("delete",))


def _exists(*paths: Path) -> bool:
    return all(os.path.lexists(p) for p in paths)


# -- symlinks swapped in between plan and delete ---------------------------------------------------


@pytest.mark.parametrize("how", ["moved", "copied"])
def test_a_subfolder_swapped_for_a_symlink_redirects_nothing(
    tmp_path: Path, jan_for: JanFor, how: str
) -> None:
    root = tmp_path / "cache"
    sub = root / "sub"
    for i in range(4):
        make_entry(sub, fp(i), 32 * KiB, age=(i + 1) * DAY, tmp=True)
    make_entry(root, fp(99), 32 * KiB, age=DAY)
    jan = _cache(jan_for, root)
    plan = jan.sweep(dry_run=True).plan
    assert {i.unit.key for i in plan.items} == {f"sub/{fp(i)}" for i in range(4)} | {fp(99)}

    outside = tmp_path / "outside"
    if how == "moved":
        os.rename(sub, outside)  # the very same inodes, sizes and mtimes, now outside the tree
    else:
        shutil.copytree(sub, outside, copy_function=shutil.copy2)
        shutil.rmtree(sub)
    os.symlink(outside, sub, target_is_directory=True)
    before = listing(outside)
    assert len(before) == 12

    report = apply(plan, ledger=jan.ledger)

    assert listing(outside) == before
    assert os.path.islink(sub)
    outcomes = _by_key(report)
    for i in range(4):
        o = outcomes[f"sub/{fp(i)}"]
        assert not o.deleted and o.files == 0
        assert o.skipped is not None and "symlink" in o.skipped
    assert outcomes[fp(99)].deleted  # the rest of the plan still runs
    assert not (root / f"{fp(99)}.wav").exists()
    assert [e.path for e in _deletes(jan)] == [outcomes[fp(99)].item.unit.path]


def test_the_tree_root_swapped_for_a_symlink_redirects_nothing(
    tmp_path: Path, jan_for: JanFor
) -> None:
    root = tmp_path / "cache"
    for i in range(5):
        make_entry(root, fp(i), 32 * KiB, age=(i + 1) * DAY, tmp=i % 2 == 0)
    jan = _cache(jan_for, root)
    plan = jan.sweep(dry_run=True).plan
    assert len(plan.items) == 5

    outside = tmp_path / "outside"
    os.rename(root, outside)  # same root inode: only O_NOFOLLOW tells them apart
    os.symlink(outside, root, target_is_directory=True)
    before = listing(outside)

    report = apply(plan, ledger=jan.ledger)
    assert listing(outside) == before
    assert report.deleted_units == 0
    for o in report.outcomes:
        assert o.skipped is not None and "symlink" in o.skipped, o.skipped

    # A full sweep now finds no tree (its root is a symlink) and touches nothing either.
    result = jan.sweep()
    assert result.plan.items == ()
    assert listing(outside) == before
    assert _deletes(jan) == []


@pytest.mark.parametrize("swap", ["job-folder", "scope-folder"])
def test_a_job_folder_swapped_for_a_symlink_redirects_nothing(
    tmp_path: Path, jan_for: JanFor, swap: str
) -> None:
    root = tmp_path / "jobs"
    job = make_job(root, ".tmpab12cd", "fa_v2", age=2 * DAY, files=3)
    jan = jan_for({"jobs": scratch_tree(root)})
    plan = jan.sweep(dry_run=True).plan
    assert [i.unit.key for i in plan.items] == [".tmpab12cd"]

    victim = job if swap == "job-folder" else job / "fa_v2"
    outside = tmp_path / "outside"
    os.rename(victim, outside)
    os.symlink(outside, victim, target_is_directory=True)
    before = listing(outside)

    report = apply(plan, ledger=jan.ledger)
    assert listing(outside) == before
    (o,) = report.outcomes
    assert not o.deleted and o.skipped
    assert os.path.islink(victim)
    assert _deletes(jan) == []


# -- entries that changed, are locked, open, pinned or foreign -------------------------------------


@pytest.mark.parametrize("change", ["appended", "mtime", "replaced"])
def test_a_file_changed_after_planning_is_kept(
    tmp_path: Path, jan_for: JanFor, change: str
) -> None:
    root = tmp_path / "cache"
    make_entry(root, fp(0), 32 * KiB, age=3 * DAY)
    make_entry(root, fp(1), 32 * KiB, age=2 * DAY)
    jan = _cache(jan_for, root)
    plan = jan.sweep(dry_run=True).plan
    assert len(plan.items) == 2

    wav = root / f"{fp(0)}.wav"
    st = os.stat(wav)
    if change == "appended":
        with open(wav, "ab") as fh:
            fh.write(b"more audio")
        os.utime(wav, ns=(st.st_atime_ns, st.st_mtime_ns))  # same mtime, new size
    elif change == "mtime":
        os.utime(wav, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    else:
        fresh = root / "incoming"
        shutil.copyfile(wav, fresh)  # same bytes, same length, same mtime, another inode
        os.utime(fresh, ns=(st.st_atime_ns, st.st_mtime_ns))
        os.replace(fresh, wav)
    content = wav.read_bytes()

    report = apply(plan, ledger=jan.ledger)
    o = _by_key(report)
    assert not o[fp(0)].deleted
    assert o[fp(0)].skipped in ("changed since the scan", "replaced since the scan")
    assert wav.read_bytes() == content
    assert _exists(root / f"{fp(0)}.wav.lock")
    assert o[fp(1)].deleted


@pytest.mark.parametrize("proc_locks", [True, False], ids=["proc-locks", "probe-every-lock"])
def test_a_held_flock_on_the_lock_file_protects_the_entry_in_a_sweep(
    tmp_path: Path, jan_for: JanFor, monkeypatch: pytest.MonkeyPatch, proc_locks: bool
) -> None:
    """Found through /proc/locks where the kernel lists its locks, else by probing each
    unit's lock file: the sweep keeps the entry and says why, either way."""
    if proc_locks and inuse.locked_inodes() is None:
        pytest.skip("no /proc/locks on this system")
    if not proc_locks:
        if inuse.locked_inodes() is not None:  # hide the kernel's list
            monkeypatch.setattr(inuse.probe, "proc_locks", str(tmp_path / "no-such-file"))
        assert inuse.locked_inodes() is None
    root = tmp_path / "cache"
    for i in range(3):
        make_entry(root, fp(i), 32 * KiB, age=(3 - i) * DAY, tmp=True)  # fp(0) is the oldest
    jan = _cache(jan_for, root)
    entry = [root / f"{fp(0)}{s}" for s in (".wav", ".tmp.wav", ".wav.lock")]
    with flock_held(root / f"{fp(0)}.wav.lock"):
        result = jan.sweep()
        assert _exists(*entry)
    assert dict(result.plan.trees[0].kept) == {"locked": 1}
    assert fp(0) not in {i.unit.key for i in result.plan.items}
    assert not (root / f"{fp(1)}.wav").exists() and not (root / f"{fp(2)}.wav").exists()


def test_a_flock_taken_after_planning_protects_the_entry(tmp_path: Path, jan_for: JanFor) -> None:
    root = tmp_path / "cache"
    make_entry(root, fp(0), 32 * KiB, age=2 * DAY, tmp=True)
    make_entry(root, fp(1), 32 * KiB, age=1 * DAY)
    jan = _cache(jan_for, root)
    plan = jan.sweep(dry_run=True).plan
    assert {i.unit.key for i in plan.items} == {fp(0), fp(1)}
    entry = [root / f"{fp(0)}{s}" for s in (".wav", ".tmp.wav", ".wav.lock")]
    with flock_held(root / f"{fp(0)}.wav.lock"):
        report = apply(plan, ledger=jan.ledger)
        assert _exists(*entry)
    o = _by_key(report)
    assert not o[fp(0)].deleted and o[fp(0)].skipped == "locked"
    assert o[fp(1)].deleted


def test_a_file_held_open_by_another_process_survives_a_sweep(
    tmp_path: Path, jan_for: JanFor
) -> None:
    root = tmp_path / "cache"
    for i in range(3):
        make_entry(root, fp(i), 32 * KiB, age=(3 - i) * DAY)
    jan = _cache(jan_for, root)
    wav = root / f"{fp(0)}.wav"
    with held_open(wav):
        result = jan.sweep()
        assert wav.exists()
    assert dict(result.plan.trees[0].kept) == {"open": 1}
    assert not (root / f"{fp(1)}.wav").exists()


def test_a_file_opened_after_planning_survives(tmp_path: Path, jan_for: JanFor) -> None:
    root = tmp_path / "cache"
    make_entry(root, fp(0), 32 * KiB, age=2 * DAY)
    make_entry(root, fp(1), 32 * KiB, age=1 * DAY)
    jan = _cache(jan_for, root)
    plan = jan.sweep(dry_run=True).plan
    wav = root / f"{fp(0)}.wav"
    with held_open(wav):
        # The open set gathered at planning time did not see it: only the kernel can tell now.
        report = apply(plan, ledger=jan.ledger, open_set=frozenset())
        assert wav.exists()
    o = _by_key(report)
    assert not o[fp(0)].deleted and o[fp(0)].skipped == "open in another process"
    assert o[fp(1)].deleted


def test_a_job_folder_with_a_file_opened_after_planning_is_left_whole(
    tmp_path: Path, jan_for: JanFor
) -> None:
    """A job that opens one of its files after the plan is alive: none of its files may go.

    The open file is the one the folder lists last, so a deleter that checks each file only as
    it removes it would already have removed the others.
    """
    root = tmp_path / "jobs"
    job = make_job(root, ".tmpab12cd", "fa_v2", age=2 * DAY, files=1)
    audio = job / "fa_v2" / "audio"
    for i in range(1, 12):
        make_file(audio / f"{i}.pcm", 4 * KiB)
    age_tree(job, 2 * DAY)
    jan = jan_for({"jobs": scratch_tree(root)})
    plan = jan.sweep(dry_run=True).plan
    assert [i.unit.key for i in plan.items] == [".tmpab12cd"]
    before = listing(job)
    last = audio / [d.name for d in os.scandir(audio)][-1]

    with held_open(last):
        report = apply(plan, ledger=jan.ledger, open_set=frozenset())

    (o,) = report.outcomes
    assert not o.deleted
    lost = sorted(set(before) - set(listing(job)))
    assert not lost, f"a live job lost {len(lost)} files: {lost[:3]} ..."


def test_a_pin_taken_after_planning_protects_the_entry(tmp_path: Path, jan_for: JanFor) -> None:
    root = tmp_path / "cache"
    make_entry(root, fp(0), 32 * KiB, age=2 * DAY)
    make_entry(root, fp(1), 32 * KiB, age=1 * DAY)
    jan = _cache(jan_for, root)
    plan = jan.sweep(dry_run=True).plan
    with jan.pin(root / f"{fp(0)}.wav"):
        report = apply(plan, ledger=jan.ledger)
    o = _by_key(report)
    assert not o[fp(0)].deleted and o[fp(0)].skipped == "pinned"
    assert (root / f"{fp(0)}.wav").exists()
    assert o[fp(1)].deleted


def test_a_delete_line_carries_the_time_the_unit_went_not_its_confirmation(
    tmp_path: Path, jan_for: JanFor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch's ``delete`` lines are written once it is done, in a second transaction that may
    wait for the ledger's writer lock (behind a pin taken meanwhile, on a new file at that
    path): each line's time is when its unit went, not when that transaction came. Here the
    confirmation waits 0.5 s (the only thing not real: a writer lock held that long)."""
    from janitor.cleanup import apply as applying

    root = tmp_path / "cache"
    make_entry(root, fp(0), 32 * KiB, age=2 * DAY)
    jan = _cache(jan_for, root)
    plan = jan.sweep(dry_run=True).plan
    confirming: list[float] = []
    confirm = applying._Log.confirm

    def late(self: Any, intents: Any, outcomes: Any, device: int) -> None:
        confirming.append(time.time())  # every unit of the batch has gone by now
        time.sleep(0.5)
        confirm(self, intents, outcomes, device)

    monkeypatch.setattr(applying._Log, "confirm", late)
    report = apply(plan, ledger=jan.ledger)
    assert _by_key(report)[fp(0)].deleted
    (line,) = _deletes(jan)
    assert line.ts <= confirming[0], (line.ts, confirming)


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
def test_files_of_another_user_are_not_deleted(tmp_path: Path, jan_for: JanFor) -> None:
    root = tmp_path / "cache"
    jobs = tmp_path / "jobs"
    make_entry(root, fp(0), 32 * KiB, age=3 * DAY, tmp=True)
    make_entry(root, fp(1), 32 * KiB, age=2 * DAY)
    os.chown(root / f"{fp(0)}.tmp.wav", 65534, 65534)
    job = make_job(jobs, ".tmpforeign", "fa_v2", age=2 * DAY, files=3)
    os.chown(job / "fa_v2" / "text" / "2.json", 65534, 65534)
    ours = make_job(jobs, ".tmpours", "fa_v2", age=2 * DAY)
    jan = jan_for(
        {"cache": cache_tree(root, quota="4KiB", low_watermark="0%"), "jobs": scratch_tree(jobs)}
    )
    before = listing(job)

    report = jan.sweep().report

    o = {(x.item.tree, x.item.unit.key): x for x in report.outcomes}
    assert not o[("cache", fp(0))].deleted
    assert o[("cache", fp(0))].skipped == "owned by another user"
    assert _exists(*(root / f"{fp(0)}{s}" for s in (".wav", ".tmp.wav", ".wav.lock")))
    assert o[("cache", fp(1))].deleted
    assert not o[("jobs", ".tmpforeign")].deleted
    assert listing(job) == before
    assert o[("jobs", ".tmpours")].deleted and not ours.exists()


@pytest.mark.parametrize("where", ["top", "nested"])
def test_a_job_folder_that_gets_a_new_file_after_planning_is_kept(
    tmp_path: Path, jan_for: JanFor, where: str
) -> None:
    root = tmp_path / "jobs"
    job = make_job(root, ".tmpab12cd", "fa_v2", age=2 * DAY)
    jan = jan_for({"jobs": scratch_tree(root)})
    plan = jan.sweep(dry_run=True).plan
    assert [i.unit.key for i in plan.items] == [".tmpab12cd"]
    new = job / "resumed.pcm" if where == "top" else job / "fa_v2" / "audio" / "9.pcm"
    make_file(new, 4 * KiB)
    before = listing(job)

    report = apply(plan, ledger=jan.ledger)

    (o,) = report.outcomes
    assert not o.deleted and o.skipped is not None and "new files" in o.skipped
    assert listing(job) == before
    assert _deletes(jan) == []


def test_a_job_folder_whose_file_grew_after_planning_is_kept(
    tmp_path: Path, jan_for: JanFor
) -> None:
    root = tmp_path / "jobs"
    job = make_job(root, ".tmpab12cd", "asr_v2", age=2 * DAY)
    jan = jan_for({"jobs": scratch_tree(root)})
    plan = jan.sweep(dry_run=True).plan
    with open(job / "asr_v2" / "audio" / "1.pcm", "ab") as fh:
        fh.write(b"\0" * 4096)
    before = listing(job)
    report = apply(plan, ledger=jan.ledger)
    assert not report.outcomes[0].deleted
    assert listing(job) == before


# -- what a sweep removes, and what it records -----------------------------------------------------


def test_an_evicted_entry_goes_with_its_tmp_wav_but_its_lock_file_stays(
    tmp_path: Path, jan_for: JanFor
) -> None:
    """The lock file guards the entry's name for the converters (never unlinked: a converter
    that opened it a moment before would lock a dead inode); everything else goes."""
    root = tmp_path / "cache"
    make_entry(root, fp(0), 32 * KiB, age=2 * DAY, tmp=True)
    lock = root / f"{fp(0)}.wav.lock"
    ino = os.lstat(lock).st_ino
    jan = _cache(jan_for, root)
    report = jan.sweep().report
    (o,) = report.outcomes
    assert o.deleted
    assert sorted(os.listdir(root)) == [lock.name]
    assert os.lstat(lock).st_ino == ino  # the very same file, not a new one
    assert o.files == 2
    unit = o.item.unit
    assert o.bytes == sum(e.size for e in unit.entries if e.path != unit.lock)
    (row,) = _deletes(jan)
    assert row.path == str(root / f"{fp(0)}.wav")


def test_lock_files_left_by_evicted_entries_are_never_planned_nor_counted(
    tmp_path: Path, jan_for: JanFor
) -> None:
    """A unit that is only its lock file frees nothing: it is not chosen (not even past
    max_age), not kept for any reason, not a unit in the counts, and it does not keep a cache
    from reaching its target."""
    root = tmp_path / "cache"
    for i in range(6):
        make_entry(root, fp(i), 32 * KiB, age=(10 - i) * DAY)
    for i in range(100, 140):  # leftovers of entries evicted long ago
        make_file(root / f"{fp(i)}.wav.lock", 0, age=30 * DAY)
    with flock_held(root / f"{fp(100)}.wav.lock"):  # a converter about to convert it anew
        jan = _cache(jan_for, root, quota="100KiB", low_watermark="64KiB", max_age="20d")
        result = jan.sweep()
    (tp,) = result.plan.trees
    assert tp.units == 6
    assert dict(tp.kept) == {}
    planned = {i.unit.key for i in result.plan.items}
    assert planned == {fp(0), fp(1), fp(2), fp(3)}, planned  # LRU down to 64 KiB
    assert tp.reaches_target
    assert all(o.deleted for o in result.report.outcomes)
    assert len(os.listdir(root)) == 2 * 2 + 40 + 4  # 2 entries kept; every lock file stays

    again = jan.sweep()  # what is left is under quota, and the leftovers change nothing
    assert again.plan.items == ()
    (tp,) = again.plan.trees
    assert (tp.units, tp.planned, tp.reaches_target, dict(tp.kept)) == (2, 0, True, {})


def test_a_cache_cleared_by_batchalign3_still_sweeps(tmp_path: Path, jan_for: JanFor) -> None:
    """`batchalign3 cache clear` deletes every file, lock files (even held ones) included:
    entries made afterwards, with or without a lock file, are evicted as before, and a
    conversion killed after the clear (a lone .tmp.wav, no lock file) is cleaned up."""
    root = tmp_path / "cache"
    for i in range(3):
        make_entry(root, fp(i), 32 * KiB, age=(3 - i) * DAY, tmp=True)
    jan = _cache(jan_for, root)
    assert jan.sweep().report.deleted_units == 3
    assert sorted(os.listdir(root)) == sorted(f"{fp(i)}.wav.lock" for i in range(3))
    for name in os.listdir(root):  # cache clear
        os.unlink(root / name)
    make_entry(root, fp(5), 32 * KiB, age=2 * DAY)  # converted again since: a new lock file
    make_entry(root, fp(6), 32 * KiB, age=2 * DAY, lock=False)
    make_file(root / f"{fp(7)}.tmp.wav", 16 * KiB, age=2 * DAY)
    result = jan.sweep()
    assert {o.item.unit.key: o.deleted for o in result.report.outcomes} == {
        fp(5): True,
        fp(6): True,
        fp(7): True,
    }
    assert sorted(os.listdir(root)) == [f"{fp(5)}.wav.lock"]


def test_a_scratch_sweep_removes_whole_orphan_folders_but_never_the_root(
    tmp_path: Path, jan_for: JanFor
) -> None:
    root = tmp_path / "jobs"
    make_job(root, ".tmpold1", "fa_v2", age=2 * DAY)
    make_job(root, ".tmpold2", "avqi_v2_1", age=3 * DAY)
    young = make_job(root, ".tmpyoung", "fa_v2", age=HOUR)  # not yet an orphan (12h)
    other = root / ".tmpother"
    make_file(other / "x.bin", 4 * KiB)
    age_tree(other, 10 * DAY)  # some other program's: never ours
    set_age(root, 10 * DAY)
    jan = jan_for({"jobs": scratch_tree(root)})
    report = jan.sweep().report
    assert {o.item.unit.key for o in report.outcomes if o.deleted} == {".tmpold1", ".tmpold2"}
    assert all(o.item.reason == "orphan" for o in report.outcomes)
    assert sorted(os.listdir(root)) == [".tmpother", ".tmpyoung"]
    assert young.exists() and (other / "x.bin").exists()
    assert root.is_dir()


def test_symlinks_inside_a_job_folder_are_removed_not_followed(
    tmp_path: Path, jan_for: JanFor
) -> None:
    root = tmp_path / "jobs"
    outside = tmp_path / "outside"
    make_file(outside / "model.bin", 16 * KiB)
    make_file(outside / "data" / "x.pcm", 16 * KiB)
    job = root / ".tmpab12cd"
    make_file(job / "fa_v2" / "audio" / "0.pcm", 4 * KiB)
    (job / "fa_v2" / "model.bin").symlink_to(outside / "model.bin")
    (job / "fa_v2" / "data").symlink_to(outside / "data", target_is_directory=True)
    age_tree(job, 2 * DAY)
    before = listing(outside)
    jan = jan_for({"jobs": scratch_tree(root)})
    report = jan.sweep().report
    assert report.deleted_units == 1
    assert not os.path.lexists(job)
    assert listing(outside) == before


def test_a_job_folder_with_a_filesystem_mounted_inside_is_left_alone(
    tmp_path: Path, jan_for: JanFor, tmpfs: Callable[..., Path]
) -> None:
    root = tmp_path / "jobs"
    job = make_job(root, ".tmpab12cd", "fa_v2", age=2 * DAY)
    mnt = tmpfs("8m", name="jobs/.tmpab12cd/fa_v2/mnt")
    make_file(mnt / "inside.pcm", 64 * KiB)
    age_tree(job, 2 * DAY)
    before = listing(mnt)
    jan = jan_for({"jobs": scratch_tree(root)})
    report = jan.sweep().report
    assert report.deleted_units == 0
    assert listing(mnt) == before
    assert (job / "fa_v2" / "audio" / "0.pcm").exists()


def test_an_orphan_job_folder_holding_hard_links_is_removed(
    tmp_path: Path, jan_for: JanFor
) -> None:
    """Two names of one file inside a dead job's folder are not "new files since the scan".

    The scanner counts a hard-linked file once (its other names are not entries); the deleter
    must not take those other names for files a live job just wrote.
    """
    root = tmp_path / "jobs"
    job = make_job(root, ".tmpab12cd", "fa_v2", age=2 * DAY)
    os.link(job / "fa_v2" / "audio" / "0.pcm", job / "fa_v2" / "audio" / "0-copy.pcm")
    age_tree(job, 2 * DAY)
    jan = jan_for({"jobs": scratch_tree(root)})
    report = jan.sweep().report
    (o,) = report.outcomes
    assert o.deleted, o.skipped
    assert not job.exists()


def test_a_cache_emptied_completely_keeps_its_root(tmp_path: Path, jan_for: JanFor) -> None:
    root = tmp_path / "cache"
    for i in range(3):
        make_entry(root / "sub", fp(i), 8 * KiB, age=DAY, lock=False)
    jan = _cache(jan_for, root)
    assert jan.sweep().report.deleted_units == 3
    assert root.is_dir()


def test_every_deletion_is_in_the_log_with_its_reason(tmp_path: Path, jan_for: JanFor) -> None:
    cache = tmp_path / "cache"
    jobs = tmp_path / "jobs"
    for i in range(4):
        make_entry(cache, fp(i), 16 * KiB, age=(4 - i) * DAY, lock=False)
    make_entry(cache, fp(50), 16 * KiB, age=40 * DAY, lock=False)  # past max_age
    make_job(jobs, ".tmpdead", "fa_v2", age=2 * DAY)
    jan = jan_for(
        {
            "cache": cache_tree(cache, quota="60KiB", low_watermark="40KiB", max_age="30d"),
            "jobs": scratch_tree(jobs),
        }
    )
    result = jan.sweep()
    deleted = [o for o in result.report.outcomes if o.deleted]
    assert {(o.item.tree, o.item.reason) for o in deleted} == {
        ("cache", "age"),
        ("cache", "quota"),
        ("jobs", "orphan"),
    }
    log = _deletes(jan)
    assert len(log) == len(deleted)
    assert sorted((e.tree, e.path, e.detail["reason"], e.bytes) for e in log) == sorted(
        (o.item.tree, o.item.unit.path, o.item.reason, o.bytes) for o in deleted
    )
    for e in log:
        assert e.bytes and e.bytes > 0
        assert e.detail["files"] >= 1
    # Nothing that was kept shows up as deleted.
    for path in (cache / f"{fp(3)}.wav",):
        assert path.exists()
        assert str(path) not in {e.path for e in log}


def test_a_dry_run_deletes_nothing(tmp_path: Path, jan_for: JanFor) -> None:
    cache = tmp_path / "cache"
    jobs = tmp_path / "jobs"
    for i in range(4):
        make_entry(cache, fp(i), 16 * KiB, age=(i + 1) * DAY, tmp=True)
    make_job(jobs, ".tmpdead", "fa_v2", age=2 * DAY)
    jan = jan_for(
        {
            "cache": cache_tree(cache, quota="4KiB", low_watermark="0%"),
            "jobs": scratch_tree(jobs),
        }
    )
    before = (listing(cache), listing(jobs))
    result = jan.sweep(dry_run=True)
    assert len(result.plan.items) == 5
    assert result.report.dry_run and result.report.deleted_units == 0
    assert all(o.skipped == "dry run" for o in result.report.outcomes)
    assert (listing(cache), listing(jobs)) == before
    assert _deletes(jan) == []


def test_applying_a_plan_twice_deletes_each_file_once(tmp_path: Path, jan_for: JanFor) -> None:
    root = tmp_path / "cache"
    for i in range(5):
        make_entry(root, fp(i), 16 * KiB, age=(i + 1) * DAY, tmp=True)
    jan = _cache(jan_for, root)
    plan: Plan = jan.sweep(dry_run=True).plan
    first = apply(plan, ledger=jan.ledger)
    second = apply(plan, ledger=jan.ledger)
    assert first.deleted_units == 5
    assert second.deleted_units == 0
    assert all(o.skipped == "gone since the scan" for o in second.outcomes)
    paths = [e.path for e in _deletes(jan)]
    assert len(paths) == len(set(paths)) == 5


def test_a_name_that_is_not_utf8_is_deleted_and_logged(tmp_path: Path, jan_for: JanFor) -> None:
    root = tmp_path / "cache"
    root.mkdir()
    bad = os.fsencode(root) + b"/caf\xe9.wav"
    with open(bad, "wb") as fh:
        fh.write(b"x" * 20_000)
    set_age(bad, 2 * DAY)
    make_entry(root, fp(0), 16 * KiB, age=DAY, lock=False)
    jan = _cache(jan_for, root)
    result = jan.sweep()
    assert not os.path.lexists(bad)
    assert result.report.deleted_units == 2
    assert len(_deletes(jan)) == 2


# -- filesystems -----------------------------------------------------------------------------------


def test_a_filesystem_mounted_inside_the_tree_is_never_touched(
    tmp_path: Path, jan_for: JanFor, tmpfs: Callable[..., Path]
) -> None:
    root = tmp_path / "cache"
    make_entry(root, fp(0), 16 * KiB, age=DAY)
    mnt = tmpfs("8m", name="cache/mnt")
    for i in range(3):
        make_entry(mnt, fp(10 + i), 64 * KiB, age=10 * DAY)
    before = listing(mnt)
    jan = _cache(jan_for, root)
    result = jan.sweep()
    assert [i.unit.key for i in result.plan.items] == [fp(0)]
    assert listing(mnt) == before


def test_reclaimed_space_is_measured_and_a_shortfall_warned_about(
    jan_for: JanFor, tmpfs: Callable[..., Path]
) -> None:
    mount = tmpfs("32m")
    root = mount / "cache"
    linked = make_file(root / f"{fp(0)}.wav", 4 * MiB, age=2 * DAY)
    os.link(linked, mount / "kept-elsewhere.wav")  # the blocks stay in use after the delete
    make_file(root / f"{fp(1)}.wav", 2 * MiB, age=DAY)
    jan = _cache(jan_for, root)
    report = jan.sweep().report
    assert report.deleted_units == 2
    assert report.deleted_bytes >= 6 * MiB
    (vol,) = report.volumes
    assert vol.mount == str(mount)
    # Only the unlinked 2 MiB came back; the hard-linked 4 MiB is still held.
    assert 2 * MiB <= vol.reclaimed < 3 * MiB
    assert report.reclaimed_bytes == vol.reclaimed
    assert len(report.warnings) == 1 and "free space grew by only" in report.warnings[0]


def test_freed_space_matches_deleted_bytes_on_a_tmpfs(
    jan_for: JanFor, tmpfs: Callable[..., Path]
) -> None:
    mount = tmpfs("32m")
    root = mount / "cache"
    for i in range(4):
        make_entry(root, fp(i), 2 * MiB, age=(i + 1) * DAY, lock=False)
    jan = _cache(jan_for, root)
    report = jan.sweep().report
    assert report.deleted_units == 4
    assert report.reclaimed_bytes >= report.deleted_bytes - 64 * KiB
    assert report.warnings == ()


# -- big trees: several threads, the same checks -----------------------------------------------


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_many_units_go_with_every_check_and_are_logged_in_plan_order(
    tmp_path: Path, jan_for: JanFor, monkeypatch: pytest.MonkeyPatch, threads: int
) -> None:
    """Threads (forced here from the first units on) change nothing but speed: each unit is
    still checked right before it goes, outcomes and the log keep the plan's LRU order."""
    import janitor.cleanup.apply as applying

    monkeypatch.setattr(applying, "_THREADS", threads)
    monkeypatch.setattr(applying, "_PROBE", 2)
    monkeypatch.setattr(applying, "_THREADS_MIN", 1)
    monkeypatch.setattr(applying, "_CHUNK", 3)
    monkeypatch.setattr(applying, "_WAIT_RATIO", 0.0)
    root = tmp_path / "cache"
    for i in range(40):
        folder = root / ("sub" if i % 3 else "")
        make_entry(folder, fp(i), 4 * KiB, age=(50 - i) * HOUR, tmp=i % 4 == 0, lock=i % 2 == 0)
    jan = _cache(jan_for, root)
    plan = jan.sweep(dry_run=True).plan
    assert len(plan.items) == 40
    changed, opened, pinned = root / f"{fp(6)}.wav", root / "sub" / f"{fp(20)}.wav", fp(31)
    with open(changed, "ab") as fh:
        fh.write(b"more")
    with held_open(opened), jan.pin(root / "sub" / f"{pinned}.wav"):
        report = apply(plan, ledger=jan.ledger, open_set=frozenset())
    assert [o.item for o in report.outcomes] == list(plan.items)
    skipped = {o.item.unit.key: o.skipped for o in report.outcomes if not o.deleted}
    assert skipped == {
        fp(6): "changed since the scan",
        f"sub/{fp(20)}": "open in another process",
        f"sub/{pinned}": "pinned",
    }
    left = {p.name for p in root.rglob("*") if p.is_file()}
    assert changed.name in left and opened.name in left and f"{pinned}.wav" in left
    locks = {f"{fp(i)}.wav.lock" for i in range(0, 40, 2)}
    assert locks <= left  # lock files are never removed
    assert all(n.startswith((fp(6), fp(20), fp(31))) for n in left - locks), sorted(left)
    deleted = [o.item.unit.path for o in report.outcomes if o.deleted]
    assert [e.path for e in _deletes(jan)] == deleted


def test_locked_inodes_lists_a_file_while_another_process_holds_its_flock(tmp_path: Path) -> None:
    if inuse.locked_inodes() is None:
        pytest.skip("no /proc/locks on this system")
    lock = tmp_path / "x.wav.lock"
    lock.touch()
    ino = lock.stat().st_ino
    with flock_held(lock):
        found = inuse.locked_inodes()
        assert found is not None and ino in found
        assert inuse.lock_held(str(lock))
    after = inuse.locked_inodes()
    assert after is not None and ino not in after
