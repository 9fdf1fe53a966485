"""Helpers for the enforcement tests (scan, units, planner, deleter, sweeps, CLI sweep).

Real files with real blocks, ages set with ``os.utime``, and real helper processes that hold a
``flock``, hold a file open or own a pin, so the janitor's in-use checks are exercised against
the kernel rather than against mocks.
"""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests._fixtures import forkserver
from tests._fixtures.console import JANITOR_BIN
from tests._fixtures.holder import end_helper
from tests._fixtures.space import KiB

HOUR = 3600.0
DAY = 86400.0

#: A cache-entry fingerprint as the pipeline names them: 24 hex chars.
FP_LEN = 24


def fp(n: int) -> str:
    """A deterministic 24-hex-char fingerprint."""
    return hashlib.sha1(str(n).encode()).hexdigest()[:FP_LEN]


def set_age(path: Path | str | bytes, seconds_ago: float, *, now: float | None = None) -> float:
    """Set atime and mtime of ``path`` (not following symlinks) to ``seconds_ago`` in the past."""
    t = (time.time() if now is None else now) - seconds_ago
    os.utime(path, (t, t), follow_symlinks=False)
    return t


def make_file(
    path: Path, nbytes: int, *, age: float | None = None, data: bytes | None = None
) -> Path:
    """Write ``nbytes`` real bytes (or ``data``) to ``path`` (parents made); optionally age it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = data if data is not None else (os.urandom(251) * (nbytes // 251 + 1))[:nbytes]
    with open(path, "wb") as fh:
        fh.write(payload)
        fh.flush()
        os.fsync(fh.fileno())
    if age is not None:
        set_age(path, age)
    return path


def commit(tag: str) -> str:
    """A 40-hex commit hash, as huggingface_hub names snapshot folders."""
    return hashlib.sha1(tag.encode()).hexdigest()


class Hub:
    """A hub cache folder, filled as huggingface_hub fills it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def repo(self, name: str) -> Path:
        return self.root / f"models--{name.replace('/', '--')}"

    def blob(self, repo: Path, data: bytes) -> Path:
        path = repo / "blobs" / hashlib.sha256(data).hexdigest()
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            path.write_bytes(data)
        return path

    def revision(
        self,
        name: str,
        tag: str,
        files: dict[str, bytes],
        *,
        age_days: float,
        ref: str | None = None,
    ) -> Path:
        """``snapshots/<commit>/`` linking each file to its blob; everything of it (links,
        folders, blobs) last used ``age_days`` ago."""
        repo = self.repo(name)
        snap = repo / "snapshots" / commit(tag)
        when = time.time() - age_days * DAY
        for rel, data in files.items():
            blob = self.blob(repo, data)
            link = snap / rel
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(os.path.relpath(blob, link.parent))
            os.utime(link, (when, when), follow_symlinks=False)
            os.utime(blob, (when, when))
        if ref is not None:
            (repo / "refs").mkdir(exist_ok=True)
            (repo / "refs" / ref).write_text(commit(tag))
        for folder in (p for p in [snap, *snap.rglob("*")] if p.is_dir() and not p.is_symlink()):
            os.utime(folder, (when, when))
        return snap


def allocated(path: Path | str | bytes) -> int:
    """Allocated bytes of one file as the kernel reports them (``st_blocks * 512``)."""
    return os.lstat(path).st_blocks * 512


def _sha256_noatime(path: str) -> str:
    """The file's SHA-256, read without updating its atime (which would make it "used")."""
    flags = os.O_RDONLY | getattr(os, "O_NOATIME", 0)
    try:
        fd = os.open(path, flags)
    except PermissionError:  # O_NOATIME needs ownership (or CAP_FOWNER)
        fd = os.open(path, os.O_RDONLY)
    with os.fdopen(fd, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def listing(root: Path | str) -> dict[str, tuple[int, int, int, float, str]]:
    """Everything below ``root`` without following symlinks: rel -> (mode, ino, size, mtime, sha).

    Used to prove that a folder outside a tree is byte-for-byte and inode-for-inode unchanged.
    Reading does not touch atimes, so listing a cache does not make its entries recently used.
    """
    out: dict[str, tuple[int, int, int, float, str]] = {}
    base = os.fspath(root)
    for dirpath, dirnames, filenames in os.walk(base, followlinks=False):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            digest = ""
            if stat.S_ISREG(st.st_mode):
                digest = _sha256_noatime(p)
            elif stat.S_ISLNK(st.st_mode):
                digest = os.readlink(p)
            out[os.path.relpath(p, base)] = (
                st.st_mode,
                st.st_ino,
                st.st_size,
                st.st_mtime,
                digest,
            )
    return out


def cache_tree(path: Path, **keys: Any) -> dict[str, Any]:
    """A ``[trees.X]`` table of a cache with the batchalign3 media-cache grouping and lock.

    A key given as None is left out (``quota=None``: no quota).
    """
    body: dict[str, Any] = {
        "role": "cache",
        "path": str(path),
        "quota": "1MiB",
        "low_watermark": "50%",
        "min_age": "1s",
        "group": r"^(?P<key>[^/]+?)(?:\.tmp)?\.wav(?:\.lock)?$",
        "lock": "{key}.wav.lock",
    }
    body.update(keys)
    return {k: v for k, v in body.items() if v is not None}


def scratch_tree(path: Path, **keys: Any) -> dict[str, Any]:
    """A ``[trees.X]`` table of a job-temp tree like the shipped ``job_tmp``."""
    body: dict[str, Any] = {
        "role": "scratch",
        "path": str(path),
        "units": "dir",
        "unit_glob": ".tmp*",
        "unit_requires": ["fa_v2", "asr_v2", "avqi_v2_*"],
        "orphan_age": "12h",
        "min_age": "10m",
    }
    body.update(keys)
    return body


def make_entry(
    folder: Path, key: str, nbytes: int, *, age: float, tmp: bool = False, lock: bool = True
) -> list[Path]:
    """A media-cache entry: ``{key}.wav`` (+ ``{key}.tmp.wav``) (+ ``{key}.wav.lock``), aged."""
    made = [make_file(folder / f"{key}.wav", nbytes, age=age)]
    if tmp:
        made.append(make_file(folder / f"{key}.tmp.wav", nbytes // 2, age=age))
    if lock:
        made.append(make_file(folder / f"{key}.wav.lock", 0, age=age))
    return made


def make_job(tmp: Path, name: str, scope: str, *, age: float, files: int = 2) -> Path:
    """A job folder ``tmp/name/scope/{audio,text}/...`` whose every entry is ``age`` old."""
    job = tmp / name
    for i in range(files):
        make_file(job / scope / "audio" / f"{i}.pcm", 8 * KiB)
        make_file(job / scope / "text" / f"{i}.json", 100)
    age_tree(job, age)
    return job


def age_tree(folder: Path, age: float) -> None:
    """Age every entry below ``folder`` and the folder itself (children first)."""
    now = time.time()
    for dirpath, dirnames, filenames in os.walk(folder, topdown=False):
        for name in filenames + dirnames:
            set_age(os.path.join(dirpath, name), age, now=now)
    set_age(folder, age, now=now)


# -- helper processes ------------------------------------------------------------------------------

_FLOCK = r"""
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX)
print("ready", flush=True)
sys.stdin.read()
"""

_OPEN = r"""
import sys, time
f = open(sys.argv[1], "rb")
f.read(1)
print("ready", flush=True)
sys.stdin.read()
"""

_PIN = r"""
import sys
from janitor import Janitor
jan = Janitor.from_settings(policy=sys.argv[1])
p = jan.pin(sys.argv[2])
print(p.id, flush=True)
sys.stdin.read()
"""


@contextmanager
def _helper(script: str, *args: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", script, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        line = proc.stdout.readline().strip()
        if not line:
            proc.kill()
            proc.wait()
            raise AssertionError(f"helper process failed: {proc.stderr.read()}")
        yield proc, line
    finally:
        end_helper(proc)


@contextmanager
def flock_held(lock_file: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process holds an exclusive ``flock`` on ``lock_file`` inside the block."""
    with _helper(_FLOCK, str(lock_file)) as (proc, _):
        yield proc


@contextmanager
def held_open(path: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process holds ``path`` open for reading inside the block."""
    with _helper(_OPEN, str(path)) as (proc, _):
        yield proc


@contextmanager
def pinned_by_child(policy: Path, path: Path) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """Another process pins ``path`` through the Python API; yields (process, pin id)."""
    with _helper(_PIN, str(policy), str(path)) as (proc, pin_id):
        assert pin_id.startswith("p-"), pin_id
        yield proc, pin_id


def run_janitor(
    *args: str | os.PathLike[str], timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run the real console script with the (isolated) environment of the test process (started
    by the worker's forkserver: tests._fixtures.forkserver)."""
    return forkserver.run(
        [str(JANITOR_BIN), *map(os.fspath, args)],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=timeout,
        check=False,
    )
