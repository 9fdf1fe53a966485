"""Trees of any depth: a folder 10,000 levels down, whose full path is five times PATH_MAX.

The classic way to break a tmp cleaner (tmpwatch had it): scan, plan, delete, measure and watch
must go through it without recursion, without passing a path longer than PATH_MAX to the
kernel, and without one descriptor per pending folder. The trees are made with fd-relative
``mkdir`` (their full paths cannot be used), checked against GNU ``find`` and ``du`` (which walk
them with fts), and removed with ``rm -rf`` at teardown (Python 3.11's ``shutil.rmtree``
recurses and would fail on them).
"""

from __future__ import annotations

import json
import logging
import os
import resource
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from janitor import Janitor
from janitor.cleanup.apply import apply
from janitor.cleanup.scan import scan
from janitor.config.policy import Policy
from janitor.daemon.tree_watcher import TreeWatcher
from janitor.host.fdwalk import FolderChain, tree_shape, tree_size
from janitor.host.space import allocated_size
from tests._enforce_helpers import DAY, KiB, cache_tree, make_job, scratch_tree, set_age
from tests._fixtures.console import JANITOR_BIN

DEPTH = 10_000
#: Descriptors the janitor gets in the CLI runs: far fewer than the tree's levels.
NOFILE = 96
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


def make_chain(
    top: Path,
    depth: int,
    *,
    name: str = "d",
    files_at: tuple[int, ...] = (),
    file_size: int = 4 * KiB,
    siblings: bool = False,
    age: float | None = None,
) -> None:
    """``top/d/d/.../d``, ``depth`` levels, made relative to each parent's fd; a file ``f{k}``
    at each level k of ``files_at`` (k = 1: in the first ``d``); with ``siblings``, an empty
    folder ``s`` beside each ``d`` (a walk then has a folder pending at every level); with
    ``age``, every entry (and ``top``) is that old."""
    payload = os.urandom(file_size)
    wanted = set(files_at)
    fd = os.open(top, _DIR)
    try:
        for level in range(1, depth + 1):
            os.mkdir(name, dir_fd=fd)
            if siblings:
                os.mkdir("s", dir_fd=fd)
            nxt = os.open(name, _DIR, dir_fd=fd)
            os.close(fd)
            fd = nxt
            if level in wanted:
                f = os.open(f"f{level}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644, dir_fd=fd)
                os.write(f, payload)
                os.close(f)
    finally:
        os.close(fd)
    if age is not None:
        # A second pass: setting a child's times leaves its folder's alone, creating it did not.
        t = time.time() - age
        fd = os.open(top, _DIR)
        try:
            for level in range(depth + 1):
                for n in os.listdir(fd):
                    os.utime(n, (t, t), dir_fd=fd, follow_symlinks=False)
                if level < depth:
                    nxt = os.open(name, _DIR, dir_fd=fd)
                    os.close(fd)
                    fd = nxt
        finally:
            os.close(fd)
        os.utime(top, (t, t))


def open_at_depth(top: Path, depth: int, name: str = "d") -> int:
    """An fd of ``top`` + ``depth`` levels of ``name`` (the caller closes it)."""
    fd = os.open(top, _DIR)
    for _ in range(depth):
        nxt = os.open(name, _DIR, dir_fd=fd)
        os.close(fd)
        fd = nxt
    return fd


def find_count(path: Path, *args: str) -> int:
    """Entries GNU find lists below ``path`` (fts: any depth), ``path`` itself left out."""
    out = subprocess.run(
        ["find", str(path), "-mindepth", "1", *args], capture_output=True, check=True
    ).stdout
    return out.count(b"\n")


def du_bytes(path: Path) -> int:
    """Allocated bytes of ``path``'s tree as GNU du counts them."""
    out = subprocess.run(["du", "-s", "-B1", str(path)], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[0])


def _limit_fds() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, NOFILE))


def run_limited(*args: str) -> subprocess.CompletedProcess[str]:
    """The real console script, allowed only ``NOFILE`` open descriptors."""
    return subprocess.run(
        [str(JANITOR_BIN), *args],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=300,
        check=False,
        preexec_fn=_limit_fds,
    )


@pytest.fixture
def base(tmp_path: Path, tmpfs: Callable[..., Path]) -> Path:
    """Where the deep trees go: a fresh tmpfs as root (no disk I/O in 20,000 mkdirs), else
    tmp_path."""
    return tmpfs("256m") if os.geteuid() == 0 else tmp_path


@pytest.fixture
def deep_trees(base: Path) -> Iterator[Callable[[Path], Path]]:
    """``deep_trees(path) -> path``: registers a folder to remove with ``rm -rf`` at teardown."""
    made: list[Path] = []

    def register(path: Path) -> Path:
        made.append(path)
        return path

    yield register
    for path in reversed(made):
        subprocess.run(["rm", "-rf", "--one-file-system", str(path)], check=False)


# -- the walk itself -------------------------------------------------------------------------------


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_folder_chain_keeps_few_descriptors_and_climbs_back_to_the_same_folders(
    tmp_path: Path, deep_trees: Callable[[Path], Path]
) -> None:
    top = deep_trees(tmp_path / "top")
    top.mkdir()
    make_chain(top, 300)
    before = _open_fds() + 1  # with top_fd
    top_fd = os.open(top, _DIR)
    chain = FolderChain(top_fd, budget=4)
    inos = [os.fstat(top_fd).st_ino]
    try:
        for _ in range(300):
            chain.enter("d")
            inos.append(os.fstat(chain.fd).st_ino)
            assert _open_fds() - before <= 4
        assert chain.depth == 300
        for level in range(299, -1, -1):
            assert chain.leave()
            assert os.fstat(chain.fd).st_ino == inos[level]
            assert _open_fds() - before <= 4
        assert chain.depth == 0 and chain.fd == top_fd
    finally:
        chain.close()
        os.close(top_fd)
    assert _open_fds() == before - 1


def test_a_folder_chain_finds_a_closed_parent_again_or_says_it_moved(tmp_path: Path) -> None:
    """Reopened through '..' of the folder left; if that folder was moved elsewhere, by name
    from above; if the parent itself is gone from its place, leave() says so."""
    top = tmp_path / "top"
    (top / "a" / "b" / "c").mkdir(parents=True)
    top_fd = os.open(top, _DIR)
    try:
        chain = FolderChain(top_fd, budget=1)
        for name in "abc":
            chain.enter(name)
        b_ino = os.stat(top / "a" / "b").st_ino
        os.rename(top / "a" / "b" / "c", top / "c2")  # '..' of c is now top, not b
        assert chain.leave()
        assert os.fstat(chain.fd).st_ino == b_ino
        chain.close()

        (top / "a" / "b" / "c").mkdir()
        chain = FolderChain(top_fd, budget=1)
        for name in "abc":
            chain.enter(name)
        os.rename(top / "a" / "b" / "c", top / "c3")
        os.rename(top / "a" / "b", top / "b2")  # b is no longer at a/b either
        assert not chain.leave()
        assert chain.fd == -1
        assert chain.leave()  # a is still where it was
        assert os.fstat(chain.fd).st_ino == os.stat(top / "a").st_ino
        chain.close()
    finally:
        os.close(top_fd)


def test_a_cache_tree_with_a_deep_folder_is_scanned_and_its_usage_counted(
    base: Path, deep_trees: Callable[[Path], Path], write_policy: Callable[..., Path]
) -> None:
    root = deep_trees(base / "cache")
    root.mkdir()
    (root / "top.wav").write_bytes(os.urandom(8 * KiB))
    make_chain(root, DEPTH, files_at=(1, 2, 999, 5000, DEPTH - 1, DEPTH), siblings=True)
    snap = scan(root)
    assert snap.skipped == 0
    assert len(snap.entries) == find_count(root)
    assert len(snap.files()) == find_count(root, "-type", "f") == 7
    deepest = max(snap.entries, key=lambda e: len(e.rel))
    assert deepest.rel.count("/") == DEPTH - 1 + 1  # f{DEPTH} below DEPTH folders
    assert len(deepest.path) > 4 * 4096
    rst = os.lstat(root)
    whole = snap.total + rst.st_blocks * 512
    assert whole == du_bytes(root) == tree_size(root) == allocated_size(root)
    shape = tree_shape(root)
    assert (shape.folders, shape.depth) == (1 + 2 * DEPTH, DEPTH)

    write_policy({"cache": cache_tree(root, quota="1GiB")}, floor="1MiB")
    done = run_limited("status", "--json")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    (tree,) = json.loads(done.stdout)["trees"]
    assert tree["usage"] == whole
    done = run_limited("sweep", "--dry-run", "--json")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    (tree,) = json.loads(done.stdout)["trees"]
    assert tree["usage"] == sum(e.size for e in snap.files())  # a sweep counts its units
    assert tree["units"] == 7  # one per file, the deepest included
    assert tree["reaches_target"] is True


def test_doctor_counts_the_folders_of_a_deep_cache_tree(
    base: Path, deep_trees: Callable[[Path], Path]
) -> None:
    from janitor.doctor import _inotify_check

    root = deep_trees(base / "cache")
    root.mkdir()
    make_chain(root, DEPTH)
    check = _inotify_check(_policy(cache=root))
    assert check.message.startswith(f"{DEPTH + 1} folders to watch"), check


# -- sweeping an orphan that holds a deep chain -------------------------------------------------


@pytest.fixture
def deep_orphan(
    base: Path, deep_trees: Callable[[Path], Path], write_policy: Callable[..., Path]
) -> tuple[Path, Path, Path]:
    """A job tree with an orphaned job folder holding a DEPTH-level chain (a sibling folder at
    each level, files at several depths), a young job beside it, and a policy naming it."""
    jobs = deep_trees(base / "jobs")
    orphan = make_job(jobs, ".tmpdeep01", "fa_v2", age=2 * DAY)
    (orphan / "fa_v2" / "deep").mkdir()
    make_chain(
        orphan / "fa_v2" / "deep",
        DEPTH,
        files_at=(1, 100, 2500, 5000, 7500, DEPTH),
        siblings=True,
        age=2 * DAY,
    )
    for folder in (orphan / "fa_v2", orphan):  # changed by the mkdir of "deep"
        set_age(folder, 2 * DAY)
    young = make_job(jobs, ".tmpyoung1", "fa_v2", age=60)
    write_policy({"jobs": scratch_tree(jobs)}, floor="1MiB")
    return jobs, orphan, young


def test_sweep_removes_an_orphan_job_folder_holding_a_10000_level_chain(
    deep_orphan: tuple[Path, Path, Path],
) -> None:
    jobs, orphan, young = deep_orphan
    entries = find_count(orphan)
    files = find_count(orphan, "-type", "f")
    assert entries > 2 * DEPTH and files == 2 * 2 + 6
    size = du_bytes(orphan)

    dry = run_limited("sweep", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    assert "Traceback" not in dry.stderr, dry.stderr
    data = json.loads(dry.stdout)
    (item,) = data["items"]
    assert (item["path"], item["reason"], item["kind"]) == (str(orphan), "orphan", "dir")
    assert item["bytes"] == size and item["deleted"] is False
    assert find_count(orphan) == entries and du_bytes(orphan) == size  # nothing deleted

    done = run_limited("sweep", "--json")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    data = json.loads(done.stdout)
    (item,) = data["items"]
    assert item["deleted"] is True and item["skipped"] is None, item
    assert item["files"] == files
    assert data["deleted_bytes"] == size
    assert not os.path.lexists(orphan)
    assert sorted(os.listdir(jobs)) == [young.name]
    assert find_count(young, "-type", "f") == 4

    log = subprocess.run(
        [str(JANITOR_BIN), "log", "--event", "delete", "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert [row["path"] for row in json.loads(log.stdout)] == [str(orphan)]


@pytest.mark.parametrize("change", ["added", "grown"])
def test_a_file_added_or_grown_deep_inside_during_the_sweep_keeps_the_unit(
    deep_orphan: tuple[Path, Path, Path], change: str
) -> None:
    """The deleter re-checks the whole unit, 10,000 levels down, before removing anything."""
    _jobs, orphan, _young = deep_orphan
    jan = Janitor.from_settings()
    try:
        plan = jan.sweep(dry_run=True).plan
        assert [i.unit.path for i in plan.items] == [str(orphan)]
        fd = open_at_depth(orphan / "fa_v2" / "deep", DEPTH - 10 if change == "added" else 5000)
        try:
            if change == "added":
                f = os.open("resumed.pcm", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
            else:
                f = os.open("f5000", os.O_WRONLY | os.O_APPEND, dir_fd=fd)
            os.write(f, b"\0" * 4096)
            os.close(f)
        finally:
            os.close(fd)
        entries = find_count(orphan)
        size = du_bytes(orphan)

        report = apply(plan, ledger=jan.ledger)

        (o,) = report.outcomes
        assert not o.deleted and o.files == 0
        expect = "new files" if change == "added" else "changed since the scan"
        assert o.skipped is not None and expect in o.skipped, o.skipped
        assert find_count(orphan) == entries and du_bytes(orphan) == size
        assert jan.log(events=("delete",)) == []
    finally:
        jan.ledger.close()


# -- watching ------------------------------------------------------------------------------------


def _policy(**trees: Path) -> Policy:
    return Policy.model_validate(
        {"trees": {n: {"role": "cache", "path": str(p), "quota": "1GiB"} for n, p in trees.items()}}
    )


def _eventually(check: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _state(w: TreeWatcher, tree: str) -> Any:
    return next(s for s in w.status() if s.tree == tree)


def _other_tree_reports_writes(w: TreeWatcher, dirty: list[str], other: Path) -> None:
    dirty.clear()
    (other / f"w{time.monotonic_ns()}.wav").write_bytes(b"x" * 100)
    _eventually(lambda: "other" in dirty, "the other tree's write to be reported")


def test_a_deep_folder_in_a_watched_tree_makes_only_that_tree_poll(
    base: Path, deep_trees: Callable[[Path], Path]
) -> None:
    deep = deep_trees(base / "deep")
    other = base / "other"
    deep.mkdir()
    other.mkdir()
    make_chain(deep, DEPTH)
    dirty: list[str] = []
    pol = _policy(deep=deep, other=other)
    w = TreeWatcher(list(pol.trees.values()), dirty.append, quiet_s=0.05, max_delay_s=0.2)
    w.start()
    try:
        st = _state(w, "deep")
        assert st.mode == "polling" and "deep" in st.reason, st
        assert w.polling() == ["deep"]
        _other_tree_reports_writes(w, dirty, other)
        w.rearm()  # measured again only later: no walk of the deep tree on every re-arm
        assert _state(w, "deep").mode == "polling"
    finally:
        t0 = time.monotonic()
        w.stop()
        assert time.monotonic() - t0 < 5


# watchdog warns (a whole tree's watch table in one line) when it re-adds a watch it has.
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("how", ["moved-in", "grown-long"])
def test_a_deep_folder_appearing_in_a_watched_tree_never_stops_the_others(
    base: Path,
    deep_trees: Callable[[Path], Path],
    caplog: pytest.LogCaptureFixture,
    how: str,
) -> None:
    """Moved in whole (watchdog's walk of it dies with RecursionError in Python 3.11), or grown
    level by level past PATH_MAX (watchdog can no longer watch below): that tree polls, with the
    reason, once the daemon's periodic rearm() ran, and every other tree is watched."""
    deep = base / "deep"
    other = base / "other"
    stage = deep_trees(base / "stage")
    deep_trees(deep)
    for p in (deep, other, stage):
        p.mkdir()
    dirty: list[str] = []
    pol = _policy(deep=deep, other=other)
    w = TreeWatcher(list(pol.trees.values()), dirty.append, quiet_s=0.05, max_delay_s=0.2)
    w.start()
    caplog.set_level(logging.WARNING, logger="janitor.watch")
    try:
        assert w.polling() == []
        if how == "moved-in":
            make_chain(stage, 3000)
            os.rename(stage / "d", deep / "moved")
        else:
            make_chain(deep, 25, name="n" * 200)  # 25 x 201 bytes: past PATH_MAX at level 20
        _eventually(lambda: _state(w, "deep").mode == "polling", "the deep tree to poll")
        w.rearm()  # the daemon does this every 5 s
        st = _state(w, "deep")
        assert st.mode == "polling", st
        assert "PATH_MAX" in st.reason or "deep" in st.reason, st
        assert _state(w, "other").mode == "watching"
        _other_tree_reports_writes(w, dirty, other)
        assert "Traceback" not in caplog.text
    finally:
        t0 = time.monotonic()
        w.stop()
        assert time.monotonic() - t0 < 5
