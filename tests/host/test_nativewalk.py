"""The compiled size walker (``janitor/native/sizewalk.c``, ``janitor.host.nativewalk``) against
the Python walk (``janitor.host.sizewalk``) on the same real trees: every measure equal, to the
byte, the entry and the float (hard links across folders, symlinks, odd names, pruned folders,
a tmpfs and bind mounts below a top, unreadable folders, a tree far deeper than PATH_MAX and
than the walk's open-folder budget, one big folder shared out among threads); then how it is
built, found again, remembered as failed, and used by ``janitor space`` end to end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from janitor.host import cbuild, nativewalk
from janitor.host.fastpaths import LINUX
from janitor.host.sizewalk import CHILDREN, FILES, SIZE, Folder, Measured, SizeWalk
from tests._fixtures.space import MiB

COUNTS = [1, 2, 4]


def python_walk(folders: list[Folder], count: int) -> dict[Folder, Measured]:
    walk = SizeWalk.start(folders, count=count)
    got = walk.results()
    assert walk.backend in ("processes", "here")
    return got


def native_walk(folders: list[Folder], count: int, walker: Path) -> dict[Folder, Measured]:
    walk = SizeWalk.start(folders, count=count, native=walker)
    got = walk.results()
    assert walk.backend == "native", walk.native_failure
    return got


def canonical(got: dict[Folder, Measured]) -> dict[Folder, Any]:
    """A measure with its lists in one order (threads and processes meet entries in any)."""
    return {
        f: (
            m.device,
            m.bytes,
            m.entries,
            m.own,
            sorted(
                (c.name, c.is_dir, c.bytes, c.newest_mtime, c.oldest_use, c.linked)
                for c in m.children
            ),
            sorted(m.files),
        )
        for f, m in got.items()
    }


def assert_same(folders: list[Folder], walker: Path, counts: list[int] = COUNTS) -> None:
    """Both walks, with each count, give the very same measures."""
    want = canonical(python_walk(folders, 1))
    assert want, "nothing measured"
    for count in counts:
        assert canonical(python_walk(folders, count)) == want
        assert canonical(native_walk(folders, count, walker)) == want


def every_detail(*paths: Path) -> list[Folder]:
    """Each folder told as much as can be, then again with less (its links then count in the
    first listing: the others show what a folder whose links are had elsewhere tells)."""
    return [Folder(str(p), (), detail) for detail in (FILES, CHILDREN, SIZE) for p in paths]


def odd_tree(root: Path) -> Path:
    """Names with newlines, tabs, spaces, backslashes, bytes that are not UTF-8, 255 bytes;
    symlinks of every kind, a fifo, hard links, sparse files, empty folders, old times."""
    root.mkdir(parents=True)
    raw = os.fsencode(root)
    names = [b"new\nline", b"tab\there", b"sp ace", b"back\\slash", b"\xff\xfe-not-utf8",
             "été".encode(), b"x" * 255, b"-dash", b".hidden"]  # fmt: skip
    for i, name in enumerate(names):
        d = raw + b"/" + name
        os.mkdir(d)
        with open(d + b"/" + name[:200] + b".bin", "wb") as f:
            f.write(os.urandom(1000 * (i + 1)))
        with open(raw + b"/file-" + name[:200], "wb") as f:
            f.write(os.urandom(3000))
    (root / "empty").mkdir()
    (root / "dangling").symlink_to(root / "nowhere")
    (root / "to-parent").symlink_to(root.parent)
    (root / "to-file").symlink_to(root / "sp ace")
    os.mkfifo(root / "fifo")
    (root / "links").mkdir()
    (root / "links" / "a.bin").write_bytes(os.urandom(50_000))
    os.link(root / "links" / "a.bin", root / "links" / "b.bin")
    os.link(root / "links" / "a.bin", root / "top-link.bin")
    with open(root / "sparse.img", "wb") as f:
        f.seek(5 * MiB)
        f.write(b"x" * 8192)
    old = time.time() - 30 * 86400
    os.utime(root / "sp ace", (old, old))
    os.utime(root / "file-sp ace", (old - 100, old + 100))  # atime before mtime
    os.utime(root / "empty", (old, old))
    return root


def test_odd_names_symlinks_and_hard_links_measure_the_same(
    tmp_path: Path, size_walker: Path
) -> None:
    one, two = odd_tree(tmp_path / "one"), odd_tree(tmp_path / "two")
    os.link(one / "links" / "a.bin", two / "from-one.bin")  # across folders: the first has it
    os.link(two / "sparse.img", one / "links" / "from-two.img")
    assert_same(every_detail(one, two), size_walker)
    got = native_walk([Folder(str(one), detail=FILES)], 2, size_walker)
    (m,) = got.values()
    assert "new\nline/new\nline.bin" in {f[0] for f in m.files}
    assert os.fsdecode(b"\xff\xfe-not-utf8") in {c.name for c in m.children}


def test_the_same_folder_twice_and_folders_inside_each_other(
    tmp_path: Path, size_walker: Path
) -> None:
    root = odd_tree(tmp_path / "t")
    nested, deeper = root / "links", root / "sp ace"
    folders = [
        Folder(str(root), (str(nested), str(deeper)), CHILDREN),
        Folder(str(nested), (), FILES),
        Folder(str(deeper), (), SIZE),
        Folder(str(root) + "/", (), SIZE),  # the same top again (the first one has its links)
    ]
    assert_same(folders, size_walker)


def deep_comb(root: Path, levels: int) -> Path:
    """A chain of ``levels`` folders of 100-byte names (far past PATH_MAX and the walk's
    budget of open folders), each level with a side folder and a file: the walk climbs back
    through folders it closed, with siblings still to enter."""
    root.mkdir()
    fd = os.open(root, os.O_RDONLY)
    try:
        for i in range(levels):
            os.mkdir(f"side{i}", dir_fd=fd)
            side = os.open(f"side{i}", os.O_RDONLY, dir_fd=fd)
            try:
                with open(
                    os.open("s.bin", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=side), "wb"
                ) as f:
                    f.write(os.urandom(500 + i))
            finally:
                os.close(side)
            name = f"{i:03d}" + "d" * 97
            os.mkdir(name, dir_fd=fd)
            nxt = os.open(name, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = nxt
        with open(os.open("bottom.bin", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd), "wb") as f:
            f.write(os.urandom(70_000))
    finally:
        os.close(fd)
    return root


def test_a_tree_deeper_than_path_max_and_the_open_folder_budget(
    tmp_path: Path, size_walker: Path
) -> None:
    root = deep_comb(tmp_path / "deep", 120)  # 120 x 101 bytes, 120 > 32 folders kept open
    assert_same(every_detail(root), size_walker)
    (m,) = native_walk([Folder(str(root))], 2, size_walker).values()
    assert m.entries == 120 * 3 + 1
    du = subprocess.run(["du", "-sxB1", str(root)], capture_output=True, text=True, check=True)
    assert m.bytes + m.own == int(du.stdout.split()[0])


def test_one_big_folder_is_shared_out_and_still_counts_the_same(
    tmp_path: Path, size_walker: Path
) -> None:
    root = tmp_path / "t"
    big = root / "only"
    for j in range(150):
        d = big / f"job{j:03d}" / "fa_v2"
        d.mkdir(parents=True)
        for i in range(12):
            (d / f"w{i}.pcm").write_bytes(b"x" * (100 * i))
        if j % 10 == 0:
            os.link(d / "w5.pcm", root / f"link{j}.pcm")
    assert_same(every_detail(root), size_walker, counts=[4, 8])


def test_mount_points_below_a_top_are_left_out_the_same(
    tmp_path: Path,
    size_walker: Path,
    tmpfs: Callable[..., Path],
    bind: Callable[[Path, Path], Path],
) -> None:
    root = odd_tree(tmp_path / "t")
    inner = tmpfs("16m", name="t/sp ace/inner mnt")
    (inner / "big.bin").write_bytes(os.urandom(3 * MiB))
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "theirs.bin").write_bytes(os.urandom(2 * MiB))
    for where in (root / "bound", root / "new\nline" / "bo\\und\ttab", root / "links" / "b"):
        bind(outside, where)
    folders = every_detail(root)
    assert_same(folders, size_walker)
    (m,) = native_walk([Folder(str(root), detail=CHILDREN)], 2, size_walker).values()
    assert "bound" not in {c.name for c in m.children}
    assert m.bytes < 2 * MiB  # nothing of the tmpfs nor of the bound folder


_AS_UNPRIVILEGED = """
import json, sys
from pathlib import Path
from janitor.host.sizewalk import Folder, SizeWalk
folders = [Folder(p, (), d) for p, d in json.loads(sys.argv[1])]
out = []
for native in (None, Path(sys.argv[2])):
    for count in (1, 2):
        walk = SizeWalk.start(folders, count=count, native=native)
        got = walk.results()
        out.append([walk.backend, {f.path + str(f.detail): [m.bytes, m.entries, m.own,
            sorted([c.name, c.bytes, c.newest_mtime, c.oldest_use] for c in m.children),
            sorted(m.files)] for f, m in got.items()}])
print(json.dumps(out))
"""


def test_unreadable_folders_are_skipped_the_same(tmp_path: Path, size_walker: Path) -> None:
    root = odd_tree(tmp_path / "t")
    for locked in (root / "sp ace", root / "links"):
        locked.chmod(0)
    (root / "new\nline").chmod(0o300)  # can enter, cannot list
    try:
        cmd = [sys.executable, "-c", _AS_UNPRIVILEGED]
        if os.geteuid() == 0:  # root reads anything: without the capabilities that let it
            cmd = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--", *cmd]
        spec = json.dumps([[str(root), d] for d in (SIZE, CHILDREN, FILES)])
        done = subprocess.run([*cmd, spec, str(size_walker)], capture_output=True, text=True)
        if done.returncode != 0 and "setpriv" in done.stderr:
            pytest.skip(f"cannot drop root's file capabilities here: {done.stderr.strip()}")
        assert done.returncode == 0, done.stderr
        runs = json.loads(done.stdout)
    finally:
        for locked in (root / "sp ace", root / "links", root / "new\nline"):
            locked.chmod(0o755)
    backends = [b for b, _ in runs]
    assert backends[2:] == ["native", "native"]
    first = runs[0][1]
    assert all(got == first for _, got in runs)
    (m,) = python_walk([Folder(str(root))], 1).values()
    assert first[str(root) + "0"][0] < m.bytes  # something was unreadable to it indeed


# -- building, finding, falling back ----------------------------------------------------------


def test_it_is_built_once_then_found_without_the_compiler(
    tmp_path: Path, size_walker: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    into = tmp_path / "native"
    built = nativewalk.walker(into)
    assert built is not None and built.parent == into
    assert nativewalk.walker_state(into).path == built

    def no(*a: object, **k: object) -> None:
        raise AssertionError("built again")

    monkeypatch.setattr(cbuild, "build", no)
    monkeypatch.setattr(cbuild, "compiler", no)
    assert nativewalk.walker(into) == built
    built.chmod(0o775)  # writable by its group: not ours to run any more
    assert nativewalk.walker(into, build=False) is None


def test_a_failed_build_is_remembered_and_the_python_walk_measures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tries: list[Path] = []

    def failing(source: Path, into: Path, name: str, **kw: object) -> Path:
        tries.append(into)
        raise cbuild.BuildFailed("sizewalk: error: no pthread.h")

    monkeypatch.setattr(cbuild, "build", failing)
    into = tmp_path / "native"
    into.mkdir()
    assert nativewalk.walker(into) is None
    assert nativewalk.walker(into) is None
    assert len(tries) == 1  # not tried again on every run
    state = nativewalk.walker_state(into)
    assert state.path is None and state.failed == "sizewalk: error: no pthread.h"
    assert state.marker is not None and state.marker.exists()
    long_ago = time.time() - nativewalk.FAILED_RETRY_S - 60
    os.utime(state.marker, (long_ago, long_ago))
    assert nativewalk.walker(into) is None
    assert len(tries) == 2  # a day later, tried again


def test_a_walker_that_fails_leaves_the_measure_to_python(tmp_path: Path) -> None:
    root = odd_tree(tmp_path / "t")
    fake = tmp_path / "fake-walker"
    fake.write_text("#!/bin/sh\ncat >/dev/null\nprintf 'sizewalk1'\nexit 0\n")
    fake.chmod(0o755)
    folders = every_detail(root)
    walk = SizeWalk.start(folders, count=2, native=fake)
    got = walk.results()
    assert walk.backend == "here"
    assert walk.native_failure == "the walker's output is not what it should be"
    assert canonical(got) == canonical(python_walk(folders, 1))
    walk = SizeWalk.start(folders, count=2, native=tmp_path / "missing")
    assert canonical(walk.results()) == canonical(got)
    assert walk.native_failure == "the walker could not be started"
    assert walk.backend == ("processes" if LINUX else "here")


@pytest.mark.parametrize(
    "spec",
    [b"", b"nonsense\0", b"sizewalk1\x002\x001\x000\0", b"sizewalk1\x002\x001\x009\0/\x000\x000\0",
     b"sizewalk1\x002\x001\x000\0/\x000\x000\0extra\0", b"sizewalk1\x00-1\x000\0"],
)  # fmt: skip
def test_bad_input_exits_2_and_says_nothing(size_walker: Path, spec: bytes) -> None:
    done = subprocess.run([str(size_walker)], input=spec, capture_output=True)
    assert (done.returncode, done.stdout, done.stderr) == (2, b"", b"")


def test_the_c_source_ships_inside_the_package() -> None:
    assert nativewalk.SOURCE.is_file()
    assert nativewalk.SOURCE.parent.name == "native"
    assert nativewalk.SOURCE.parent.parent.name == "janitor"  # inside the package: in the wheel


def test_janitor_space_builds_it_and_reports_what_the_python_walk_does(
    run_cli: Callable[..., subprocess.CompletedProcess[str]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    shipped = Path(__file__).resolve().parents[2] / "policies" / "batchalign3.toml"
    monkeypatch.setenv("JANITOR_POLICY", str(shipped))
    odd_tree(Path(os.environ["TMPDIR"]) / "some-program")
    odd_tree(Path.home() / ".batchalign3" / "logs")
    into = tmp_path / "fresh-native"
    monkeypatch.setenv("JANITOR_NATIVE_DIR", str(into))

    def rows(**env: str) -> list[Any]:
        done = run_cli("space", "--json", env=env or None)
        assert done.returncode == 0, done.stderr
        assert done.stderr == ""
        return [v["rows"][:-1] for v in json.loads(done.stdout)["volumes"]]

    native = rows()
    assert nativewalk.walker_state(into).path is not None  # built by that first run
    assert rows(JANITOR_NATIVE="0") == native


def test_doctor_says_which_walk_janitor_space_takes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, size_walker: Path
) -> None:
    from janitor.config.settings import Settings
    from janitor.doctor import run_checks

    def check() -> tuple[str, str, str]:
        (c,) = [c for c in run_checks(Settings.load()) if c.name == "size walk"]
        return c.verdict, c.message, c.fix

    verdict, message, _ = check()
    assert verdict == "ok" and message == f"compiled walker {size_walker}"
    fresh = tmp_path / "not-yet"
    monkeypatch.setenv("JANITOR_NATIVE_DIR", str(fresh))
    verdict, message, _ = check()
    assert verdict == "ok" and message.startswith("the first `janitor space` builds")
    assert not fresh.exists()  # nothing built by doctor

    def failing(source: Path, into: Path, name: str, **kw: object) -> Path:
        raise cbuild.BuildFailed("sizewalk: error: no pthread.h")

    monkeypatch.setattr(cbuild, "build", failing)
    fresh.mkdir()
    assert nativewalk.walker(fresh) is None
    verdict, message, fix = check()
    assert verdict == "warn" and "(sizewalk: error: no pthread.h)" in message
    marker = nativewalk.walker_state(fresh).marker
    assert marker is not None and str(marker) in fix
    monkeypatch.setenv("JANITOR_NATIVE", "0")
    assert check()[:2] == (
        "ok",
        "JANITOR_NATIVE=0: `janitor space` walks in Python, slower than du",
    )
