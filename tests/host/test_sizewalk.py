"""The size walk (``janitor.host.sizewalk``) against ``du -sxB1`` on real trees: hard links
(within a folder and across folders), sparse files, symlinks, a tree deeper than PATH_MAX, a
tmpfs and a bind mount inside (root only), in the forked processes, in this one and by the
compiled walker (``janitor.host.nativewalk``) alike: every test runs with each.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from janitor.host.fastpaths import LINUX
from janitor.host.sizewalk import CHILDREN, FILES, Folder, Measured, SizeWalk
from tests._fixtures.space import MiB

COUNTS = [1, 2, 4]  # 1: in this process; more: forked (on Linux)


def du(*paths: Path) -> int:
    """``du -sxcB1``'s total (each top's own blocks included)."""
    out = subprocess.run(["du", "-sxcB1", *map(str, paths)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return int(out.stdout.splitlines()[-1].split()[0])


def whole(m: Measured) -> int:
    return m.bytes + m.own


@pytest.fixture(params=["python", "native"])
def native(request: pytest.FixtureRequest) -> Path | None:
    """The walker under test: None for the Python walk, else the compiled walker's path."""
    if request.param == "python":
        return None
    walker: Path = request.getfixturevalue("size_walker")
    return walker


def measure(native: Path | None, count: int, *folders: Folder) -> dict[Folder, Measured]:
    """The folders' measures by the walker asked for, checked to be the one that measured."""
    walk = SizeWalk.start(folders, count=count, native=native)
    got = walk.results()
    if native is not None:
        assert walk.backend == "native", walk.native_failure
    else:
        assert walk.backend == ("processes" if LINUX and count > 1 else "here")
    return got


def sparse(path: Path, length: int, data_at: int = 0) -> Path:
    with open(path, "wb") as f:
        f.seek(data_at)
        f.write(os.urandom(8192))
        f.truncate(length)
    return path


def messy_tree(root: Path) -> Path:
    """Files, empty folders, symlinks, hard links within the tree, sparse files, many small
    files in one folder and subfolders of several levels."""
    (root / "a" / "b" / "c").mkdir(parents=True)
    (root / "empty").mkdir()
    (root / "a" / "one.bin").write_bytes(os.urandom(100_000))
    os.link(root / "a" / "one.bin", root / "a" / "b" / "same.bin")  # counted once
    os.link(root / "a" / "one.bin", root / "top-link.bin")
    sparse(root / "a" / "b" / "c" / "sparse.img", 50 * MiB, 20 * MiB)
    (root / "dangling").symlink_to(root / "nowhere")
    (root / "up").symlink_to(root.parent)  # never followed
    flat = root / "flat"
    flat.mkdir()
    for i in range(3000):
        (flat / f"f{i:05d}").write_bytes(b"x" * (i % 7 * 1000))
    for j in range(40):
        d = root / "jobs" / f".tmp{j}" / "fa_v2" / "audio"
        d.mkdir(parents=True)
        (d / "w.pcm").write_bytes(os.urandom(5000))
    (root / "top.txt").write_text("hello")
    return root


@pytest.mark.parametrize("count", COUNTS)
def test_it_agrees_with_du_byte_for_byte(tmp_path: Path, native: Path | None, count: int) -> None:
    root = messy_tree(tmp_path / "t")
    (m,) = measure(native, count, Folder(str(root))).values()
    assert whole(m) == du(root)
    assert m.bytes == du(root) - root.lstat().st_blocks * 512
    assert m.device == root.stat().st_dev
    assert m.entries == sum(len(ds) + len(fs) for _, ds, fs in os.walk(root))  # every name


@pytest.mark.parametrize("count", COUNTS)
def test_a_file_linked_into_two_folders_counts_in_the_first_as_du_c(
    tmp_path: Path, native: Path | None, count: int
) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    for d in (one, two):
        (d / "sub").mkdir(parents=True)
        (d / "own.bin").write_bytes(os.urandom(40_000))
    (one / "sub" / "shared.bin").write_bytes(os.urandom(300_000))
    os.link(one / "sub" / "shared.bin", two / "sub" / "shared.bin")
    os.link(one / "sub" / "shared.bin", two / "top-shared.bin")
    got = measure(native, count, Folder(str(one)), Folder(str(two)))
    a, b = got[Folder(str(one))], got[Folder(str(two))]
    assert whole(a) + whole(b) == du(one, two)
    assert whole(a) == du(one)
    assert whole(b) == du(one, two) - du(one)


@pytest.mark.parametrize("count", COUNTS)
def test_a_tree_deeper_than_path_max(tmp_path: Path, native: Path | None, count: int) -> None:
    root = tmp_path / "deep"
    root.mkdir()
    fd = os.open(root, os.O_RDONLY)
    try:
        for i in range(60):  # 60 x 101 bytes: far past PATH_MAX (4096)
            name = f"{i:02d}" + "d" * 99
            os.mkdir(name, dir_fd=fd)
            nxt = os.open(name, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = nxt
        with open(os.open("bottom.bin", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd), "wb") as f:
            f.write(os.urandom(70_000))
    finally:
        os.close(fd)
    (m,) = measure(native, count, Folder(str(root))).values()
    assert whole(m) == du(root)
    assert m.entries == 61


@pytest.mark.parametrize("count", COUNTS)
def test_it_never_enters_a_tmpfs_mounted_inside(
    tmpfs: Callable[..., Path], tmp_path: Path, native: Path | None, count: int
) -> None:
    root = messy_tree(tmp_path / "t")
    inner = root / "a" / "mnt"
    inner.mkdir()
    before, hidden = du(root), inner.lstat().st_blocks * 512
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(inner)], check=True)
    try:
        (inner / "big.bin").write_bytes(os.urandom(4 * MiB))
        (m,) = measure(native, count, Folder(str(root))).values()
        assert whole(m) == du(root)  # du -x leaves it out as well
        assert whole(m) == before - hidden  # the folder under the mount point is hidden
    finally:
        subprocess.run(["umount", str(inner)], check=False)


@pytest.mark.parametrize("count", COUNTS)
def test_it_never_enters_a_bind_mount_of_the_same_filesystem(
    bind: Callable[[Path, Path], Path], tmp_path: Path, native: Path | None, count: int
) -> None:
    root = messy_tree(tmp_path / "t")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "theirs.bin").write_bytes(os.urandom(3 * MiB))
    alone = du(root)
    for where in (root / "bound", root / "a" / "b" / "bound"):  # at the top, and deeper
        bind(outside, where)
    assert (root / "bound").stat().st_dev == root.stat().st_dev  # du -x would go in
    (m,) = measure(native, count, Folder(str(root))).values()
    # The mount points hide folders made for them (one block each): those are not counted
    assert whole(m) == alone
    assert (outside / "theirs.bin").exists()


@pytest.mark.parametrize("count", COUNTS)
def test_a_nested_folder_is_measured_on_its_own(
    tmp_path: Path, native: Path | None, count: int
) -> None:
    root = messy_tree(tmp_path / "t")
    nested = root / "jobs"
    outer, inner = Folder(str(root), prune=(str(nested),)), Folder(str(nested))
    got = measure(native, count, outer, inner)
    assert got[outer].bytes + got[inner].bytes == du(root) - root.lstat().st_blocks * 512
    assert whole(got[inner]) == du(nested)


@pytest.mark.parametrize("count", COUNTS)
def test_children_and_files_tell_what_each_entry_holds(
    tmp_path: Path, native: Path | None, count: int
) -> None:
    root = messy_tree(tmp_path / "t")
    old = time.time() - 5 * 86400
    os.utime(root / "top.txt", (old, old))
    os.utime(root / "flat" / "f00007", (old - 60, old - 60))
    kids = Folder(str(root), detail=CHILDREN)
    m = measure(native, count, kids)[kids]
    by = {c.name: c for c in m.children}
    assert set(by) == set(os.listdir(root))
    assert by["flat"].is_dir and by["flat"].bytes == du(root / "flat")
    assert by["flat"].oldest_use == pytest.approx(old - 60, abs=1)
    assert by["jobs"].newest_mtime == max(
        p.lstat().st_mtime for p in [root / "jobs", *(root / "jobs").rglob("*")]
    )
    assert not by["top.txt"].is_dir and by["top.txt"].oldest_use == pytest.approx(old, abs=1)
    assert by["top-link.bin"].linked and by["a"].linked and not by["flat"].linked
    assert by["empty"].oldest_use == float("inf")
    files = Folder(str(root / "a"), detail=FILES)
    f = measure(native, count, files)[files]
    got = {rel: (size, use) for rel, size, use in f.files}
    assert set(got) == {"one.bin", "b/same.bin", "b/c/sparse.img"}
    for rel, (size, use) in got.items():
        st = (root / "a" / rel).lstat()
        assert size == st.st_blocks * 512 and use == max(st.st_mtime, st.st_atime)
    assert got["b/c/sparse.img"][0] < MiB  # allocated bytes, not the length


def test_missing_or_not_a_folder_has_no_measure(tmp_path: Path, native: Path | None) -> None:
    (tmp_path / "file").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path)
    folders = [Folder(str(tmp_path / n)) for n in ("nope", "file", "link")]
    for count in COUNTS:
        assert measure(native, count, *folders) == {}


@pytest.mark.skipif(not LINUX, reason="the walk forks only on Linux")
def test_close_ends_every_process_of_the_walk(tmp_path: Path) -> None:
    """A walk whose results are not taken (the command failed) is ended, every process of it."""
    root = tmp_path / "big"
    for j in range(200):
        d = root / f"d{j}"
        d.mkdir(parents=True)
        for i in range(100):
            (d / f"f{i}").touch()
    walk = SizeWalk.start([Folder(str(root))], count=3)
    group = walk._pid
    assert group > 0
    walk.close()
    deadline = time.monotonic() + 10
    while True:  # killed at once; a worker's zombie lasts until init reaps it
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            break
        assert time.monotonic() < deadline, "a process of the walk outlived close()"
        time.sleep(0.05)


def test_close_ends_the_compiled_walker(tmp_path: Path, size_walker: Path) -> None:
    """The compiled walker is one process: ``close`` ends it when its results are not taken."""
    root = tmp_path / "big"
    for j in range(200):
        d = root / f"d{j}"
        d.mkdir(parents=True)
        for i in range(100):
            (d / f"f{i}").touch()
    walk = SizeWalk.start([Folder(str(root))], count=2, native=size_walker)
    assert walk._native is not None
    pid = walk._native.pid
    assert pid > 0
    walk.close()
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # ended and reaped
    assert walk._native is None
