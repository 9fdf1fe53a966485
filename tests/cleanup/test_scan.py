"""The scanner: one pass over a real tree, never following symlinks or leaving the filesystem."""

from __future__ import annotations

import os
import shutil
import stat
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from janitor.cleanup.scan import Entry, Snapshot, display_path, scan
from tests._enforce_helpers import KiB, allocated, listing, make_file
from tests._fixtures.space import MiB


def _rels(snap: Snapshot) -> set[str]:
    return {e.rel for e in snap.entries}


def test_entries_are_immutable_and_describe_the_files(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    a = make_file(root / "a.wav", 10_000)
    make_file(root / "sub" / "b.wav", 3 * KiB)
    snap = scan(root)
    assert snap.exists and snap.skipped == 0
    assert snap.root == str(root)
    rst = os.lstat(root)
    assert (snap.device, snap.root_ino) == (rst.st_dev, rst.st_ino)
    assert _rels(snap) == {"a.wav", "sub", "sub/b.wav"}  # the root itself is never an entry
    entry = next(e for e in snap.entries if e.rel == "a.wav")
    st = os.lstat(a)
    assert entry.path == str(a)
    assert (entry.ino, entry.dev, entry.uid) == (st.st_ino, st.st_dev, st.st_uid)
    assert (entry.mtime, entry.atime, entry.ctime) == (st.st_mtime, st.st_atime, st.st_ctime)
    assert entry.length == 10_000
    assert not entry.is_dir
    assert next(e for e in snap.entries if e.rel == "sub").is_dir
    with pytest.raises(AttributeError):
        entry.size = 0  # type: ignore[misc]
    with pytest.raises(AttributeError):
        snap.entries = ()  # type: ignore[misc]


def test_sizes_are_allocated_bytes_not_apparent_length(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    dense = make_file(root / "dense.wav", 100_000)
    sparse = root / "sparse.wav"
    with open(sparse, "wb") as fh:
        fh.truncate(8 * MiB)  # a hole: 8 MiB long, (almost) nothing allocated
    snap = scan(root)
    by_rel = {e.rel: e for e in snap.entries}
    assert by_rel["dense.wav"].size == os.lstat(dense).st_blocks * 512
    assert by_rel["dense.wav"].size >= 100_000
    assert by_rel["sparse.wav"].length == 8 * MiB
    assert by_rel["sparse.wav"].size == os.lstat(sparse).st_blocks * 512
    assert by_rel["sparse.wav"].size < MiB
    assert snap.total == sum(e.size for e in snap.entries)
    assert snap.total < 2 * MiB


def test_symlinks_are_listed_as_links_and_never_followed(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    outside = tmp_path / "outside"
    make_file(outside / "secret.wav", 64 * KiB)
    make_file(outside / "deeper" / "more.wav", 64 * KiB)
    make_file(root / "real.wav", 4 * KiB)
    (root / "dirlink").symlink_to(outside, target_is_directory=True)
    (root / "filelink.wav").symlink_to(outside / "secret.wav")
    (root / "dangling").symlink_to(tmp_path / "nowhere")
    outside_inodes = {os.lstat(outside / p).st_ino for p in listing(outside)}

    snap = scan(root)

    assert _rels(snap) == {"real.wav", "dirlink", "filelink.wav", "dangling"}
    for e in snap.entries:
        assert e.path.startswith(str(root) + "/")
        assert e.ino not in outside_inodes
    link = next(e for e in snap.entries if e.rel == "dirlink")
    assert stat.S_ISLNK(link.mode) and not link.is_dir
    # The link's own blocks, never the 128 KiB it points at.
    assert snap.total < 64 * KiB


def test_a_root_that_is_a_symlink_is_not_scanned(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    make_file(outside / "x.wav", 4 * KiB)
    root = tmp_path / "tree"
    root.symlink_to(outside, target_is_directory=True)
    snap = scan(root)
    assert not snap.exists
    assert snap.entries == ()


def test_missing_root_gives_an_empty_snapshot(tmp_path: Path) -> None:
    snap = scan(tmp_path / "not-there")
    assert snap.exists is False
    assert snap.entries == ()
    assert snap.total == 0


def test_scanning_slash_is_refused() -> None:
    with pytest.raises(ValueError):
        scan("/")


def test_hard_links_are_counted_once(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    a = make_file(root / "a.wav", 256 * KiB)
    os.link(a, root / "b.wav")
    (root / "sub").mkdir()
    os.link(a, root / "sub" / "c.wav")
    make_file(root / "other.wav", 8 * KiB)
    snap = scan(root)
    files = snap.files()
    ino = os.lstat(a).st_ino
    assert [e.ino for e in files].count(ino) == 1
    assert len(files) == 2
    assert snap.total == allocated(a) + allocated(root / "other.wav") + allocated(root / "sub")


def test_a_filesystem_mounted_inside_the_tree_is_not_entered(
    tmp_path: Path, tmpfs: Callable[..., Path]
) -> None:
    root = tmp_path / "tree"
    make_file(root / "here.wav", 4 * KiB)
    mnt = tmpfs("8m", name="tree/mnt")
    assert mnt == root / "mnt"
    make_file(mnt / "there.wav", 64 * KiB)
    make_file(mnt / "sub" / "deeper.wav", 64 * KiB)
    snap = scan(root)
    assert _rels(snap) == {"here.wav"}
    assert {e.dev for e in snap.entries} == {snap.device}


def test_names_that_are_not_utf8_are_scanned(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    root.mkdir()
    broot = os.fsencode(root)
    bad_file = broot + b"/caf\xe9.wav"
    bad_dir = broot + b"/d\xff\xfe"
    with open(bad_file, "wb") as fh:
        fh.write(b"x" * 5000)
    os.mkdir(bad_dir)
    with open(bad_dir + b"/inner\x80.wav", "wb") as fh:
        fh.write(b"y" * 5000)
    snap = scan(root)
    paths = {os.fsencode(e.path) for e in snap.entries}
    assert paths == {bad_file, bad_dir, bad_dir + b"/inner\x80.wav"}
    for e in snap.entries:
        assert os.path.lexists(e.path)  # the str form round-trips to the same file
        shown = display_path(e.path)
        shown.encode("utf-8")  # printable: no lone surrogates
        assert "\ufffd" in shown


def test_a_folder_removed_mid_scan_is_skipped_not_fatal(tmp_path: Path) -> None:
    # (An unreadable folder cannot be made for root, who reads through any mode bits; a folder
    # deleted while the walk still holds it open is the real-world case anyway.)
    root = tmp_path / "tree"
    root.mkdir()
    # Enough entries at the top for the progress callback to fire after the first folder, while
    # the subfolders are still waiting on the walk's stack.
    for i in range(4200):
        (root / f"f{i:05d}").touch()
    make_file(root / "doomed" / "deep" / "lost.wav", 4 * KiB)
    make_file(root / "doomed" / "gone.wav", 4 * KiB)
    make_file(root / "kept" / "stays.wav", 4 * KiB)
    removed: list[int] = []

    def progress(n: int) -> None:
        if not removed:
            shutil.rmtree(root / "doomed")
            removed.append(n)

    snap = scan(root, progress=progress)

    assert removed, "the progress callback never fired"
    rels = _rels(snap)
    assert "kept/stays.wav" in rels
    assert not any(r.startswith("doomed/") for r in rels)
    assert sum(1 for r in rels if r.startswith("f")) == 4200


def test_folders_vanishing_during_many_scans_never_break_the_walk(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    make_file(root / "stable" / "keep.wav", 4 * KiB)
    stop = threading.Event()
    errors: list[BaseException] = []

    def churn() -> None:
        i = 0
        try:
            while not stop.is_set():
                job = root / f"job{i % 4}"
                for d in range(5):
                    (job / f"d{d}" / "x").mkdir(parents=True, exist_ok=True)
                    (job / f"d{d}" / "x" / "f").touch()
                shutil.rmtree(job, ignore_errors=True)
                i += 1
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    worker = threading.Thread(target=churn)
    worker.start()
    try:
        for _ in range(150):
            snap = scan(root)
            assert "stable/keep.wav" in _rels(snap)
            assert all(e.path.startswith(str(root) + "/") for e in snap.entries)
    finally:
        stop.set()
        worker.join()
    assert not errors


def test_progress_reports_the_final_count(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    for i in range(10):
        make_file(root / f"{i}.wav", 10)
    seen: list[int] = []
    snap = scan(root, progress=seen.append)
    assert seen and seen[-1] == len(snap.entries) == 10


def test_entries_are_plain_entries_equal_to_constructed_ones(tmp_path: Path) -> None:
    # The scan builds entries with tuple.__new__ (no Python-level constructor per file); they
    # must be indistinguishable from Entry(...): same type, fields, equality and helpers.
    root = tmp_path / "tree"
    make_file(root / "a.wav", 5000)
    (root / "sub").mkdir()
    snap = scan(root)
    assert snap.entries
    for e in snap.entries:
        assert type(e) is Entry
        assert Entry(*e) == e
        assert e._fields == Entry._fields
        assert e._replace(size=1).size == 1
        assert e.dev == snap.device
        st = os.lstat(e.path)
        assert (e.mode, e.length, e.uid) == (st.st_mode, st.st_size, st.st_uid)
        assert e.path == f"{root}/{e.rel}"


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_no_descriptor_is_left_open_even_when_the_scan_is_interrupted(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    for d in range(6):
        for i in range(1000):
            (root / f"d{d}").mkdir(parents=True, exist_ok=True)
            (root / f"d{d}" / f"f{i}").touch()
    before = _open_fds()
    scan(root)
    assert _open_fds() == before

    def stop(n: int) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        scan(root, progress=stop)  # raised while folders still wait, open, on the stack
    assert _open_fds() == before


def test_a_listing_that_fails_part_way_is_skipped_not_fatal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "tree"
    make_file(root / "bad" / "one.wav", 10)
    make_file(root / "bad" / "two.wav", 10)
    make_file(root / "good" / "kept.wav", 10)
    bad_ino = os.lstat(root / "bad").st_ino
    real_scandir = os.scandir

    class Failing:
        """A listing that yields one entry, then fails the way readdir(3) can (EIO)."""

        def __init__(self, fd: int) -> None:
            self.it = real_scandir(fd)
            self.n = 0

        def __enter__(self) -> Failing:
            return self

        def __exit__(self, *exc: object) -> None:
            self.it.close()

        def __iter__(self) -> Failing:
            return self

        def __next__(self) -> os.DirEntry[str]:
            if self.n:
                raise OSError(5, "Input/output error")
            self.n += 1
            return next(self.it)

    def scandir(fd: int) -> object:
        return Failing(fd) if os.fstat(fd).st_ino == bad_ino else real_scandir(fd)

    monkeypatch.setattr(os, "scandir", scandir)
    snap = scan(root)
    assert snap.skipped == 1
    rels = _rels(snap)
    assert {"bad", "good", "good/kept.wav"} <= rels
    assert len({"bad/one.wav", "bad/two.wav"} & rels) <= 1


def test_a_folder_swapped_before_it_is_opened_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "tree"
    (root / "a").mkdir(parents=True)  # empty, so another folder can be renamed over it
    make_file(root / "b" / "intruder.wav", 10)
    real_open = os.open
    swapped: list[str] = []

    def open_(path: str, flags: int, *args: object, **kwargs: object) -> int:
        if path == "a" and not swapped:
            os.rename(root / "b", root / "a")  # between the walk's lstat and its open
            swapped.append(path)
        return real_open(path, flags, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", open_)
    snap = scan(root)
    assert swapped
    # Whichever order the folder was listed in, the renamed folder's content is never filed
    # under the inode the walk saw as "a".
    assert not any(r.startswith("a/") for r in _rels(snap))
    # "a" is skipped; so is "b" if the walk saw it before it was renamed away (then it vanished
    # between its lstat and its open).
    assert snap.skipped == 1 + ("b" in _rels(snap))


def test_max_depth_limits_the_walk(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    make_file(root / "top.wav", 10)
    make_file(root / "one" / "mid.wav", 10)
    make_file(root / "one" / "two" / "deep.wav", 10)
    assert _rels(scan(root, max_depth=1)) == {"top.wav", "one"}
    assert _rels(scan(root, max_depth=2)) == {"top.wav", "one", "one/mid.wav", "one/two"}
    assert len(scan(root).entries) == 5
