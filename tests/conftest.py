"""Shared fixtures for the space-janitor test suites.

Everything here is real: tmpfs volumes mounted for the test (root only), real files with real
allocated blocks, the real ``janitor`` console script in a subprocess. Nothing touches the real
home folder: :func:`janitor_env` (autouse) points ``HOME``, every ``XDG_*`` dir, ``TMPDIR`` and
``JANITOR_STATE_DIR`` into the test's ``tmp_path`` (and ``JANITOR_NATIVE_DIR`` into the
session's).

Fixtures (function scoped unless said):

``janitor_env``       the isolated environment (autouse); a :class:`JanitorEnv` with its folders
                      (C helpers: one ``JANITOR_NATIVE_DIR`` for the session, ``native_dir``).
``size_walker``       the compiled size walker, built (session scoped; skips without a compiler).
``tmpfs``             ``tmpfs("64m") -> Path``: mount a fresh tmpfs under tmp_path (root only).
``write_policy``      ``write_policy(trees={...}, floor="4MiB") -> Path``: a small TOML policy.
``managed_volume``    ``managed_volume(size="64m", floor="8MiB") -> Volume``: tmpfs + tree + policy.
``run_cli``           ``run_cli("status", "--json") -> CompletedProcess``: the real console script.
``run_cli_many``      ``run_cli_many([args, ...]) -> [CompletedProcess]``: several at once.
``fill``              ``fill(path, nbytes)``: write real (non-sparse) bytes to a file.
``fill_until_full``   ``fill_until_full(path) -> int``: write until the volume says ENOSPC.
``free_bytes``        ``free_bytes(path) -> int``: ``f_bavail * f_frsize`` from a fresh statvfs.
``ledger_dump``       ``ledger_dump(path) -> list[str]``: the ledger's logical content (iterdump).
``holder``            ``holder(policy, tree, nbytes) -> Holder``: a process holding a reservation.
``assert_one_line``   ``assert_one_line(stderr) -> str``: one line on stderr and no traceback.
``remount_tmpfs``     ``remount_tmpfs(mount, "ro")``: remount a tmpfs with new options.
``m4a``               ``m4a(seconds) -> Path``: a mono AAC recording (module scoped; real ffmpeg).
``pipeline``          ``pipeline("64m") -> Pipeline``: batchalign3's two trees on a tmpfs.
``front_end``         the guarded ffmpeg's front end, ``compiled`` then ``python`` (parametrized).

The compiled guard is built once for the session (``JANITOR_NATIVE_DIR``), not once a test.
"""

from __future__ import annotations

import errno
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from janitor.core import Janitor
from janitor.ledger.db import Ledger

MiB = 1024 * 1024

#: The console script installed next to the interpreter running the tests.
JANITOR_BIN = Path(sys.executable).parent / "janitor"


# -- isolated environment -----------------------------------------------------------------------


@dataclass(frozen=True)
class JanitorEnv:
    """The folders the isolated environment points the janitor at (all inside tmp_path)."""

    root: Path
    home: Path
    tmp: Path
    state_dir: Path
    config_home: Path
    data_home: Path
    state_home: Path
    cache_home: Path
    runtime_dir: Path

    @property
    def ledger(self) -> Path:
        """Where the ledger lives with ``JANITOR_STATE_DIR`` as set by the fixture."""
        return self.state_dir / "ledger.sqlite3"

    @property
    def config_file(self) -> Path:
        """The default config file location (``$XDG_CONFIG_HOME/space-janitor/config.toml``)."""
        return self.config_home / "space-janitor" / "config.toml"


@pytest.fixture(scope="session")
def native_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One folder for the C helpers the janitor builds (``JANITOR_NATIVE_DIR``), for the whole
    session: built once, by the first test that needs one, not once per test's cache dir."""
    return tmp_path_factory.mktemp("native")


@pytest.fixture(scope="session")
def size_walker(native_dir: Path) -> Path:
    """The compiled size walker (``janitor.host.nativewalk``), built; skips without a compiler."""
    from janitor.host.cbuild import BuildFailed, why_not
    from janitor.host.nativewalk import build_walker

    try:
        return build_walker(native_dir)
    except BuildFailed as exc:
        pytest.skip(f"the size walker cannot be built here: {why_not() or exc.reason}")


@pytest.fixture(autouse=True)
def janitor_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, native_dir: Path) -> JanitorEnv:
    """Point HOME, XDG_*, TMPDIR and JANITOR_STATE_DIR into ``tmp_path/env``; unset the rest.

    The state dir is a plain folder on tmp_path's filesystem, never on a tmpfs under test, so
    the ledger's own writes never change a tested volume's free space. ``JANITOR_CONFIG``,
    ``JANITOR_POLICY`` (and every other ``JANITOR_*``) and ``BATCHALIGN_MEDIA_CACHE_DIR`` are
    removed. ``tempfile``'s cached temp dir is reset so ``{tmp}`` follows the new ``TMPDIR``.
    Subprocesses inherit all of it through ``os.environ``.
    """
    root = tmp_path / "env"
    env = JanitorEnv(
        root=root,
        home=root / "home",
        tmp=root / "tmp",
        state_dir=root / "state",
        config_home=root / "xdg" / "config",
        data_home=root / "xdg" / "data",
        state_home=root / "xdg" / "state",
        cache_home=root / "xdg" / "cache",
        runtime_dir=root / "xdg" / "runtime",
    )
    for folder in (env.home, env.tmp, env.config_home, env.data_home, env.cache_home):
        folder.mkdir(parents=True)
    env.runtime_dir.mkdir(parents=True, mode=0o700)
    for name in list(os.environ):
        if name.startswith("JANITOR_"):
            monkeypatch.delenv(name)
    for name in ("BATCHALIGN_MEDIA_CACHE_DIR", "BATCHALIGN_STATE_DIR", "BATCHALIGN_SERVER"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(env.home))
    monkeypatch.setenv("TMPDIR", str(env.tmp))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(env.config_home))
    monkeypatch.setenv("XDG_DATA_HOME", str(env.data_home))
    monkeypatch.setenv("XDG_STATE_HOME", str(env.state_home))
    monkeypatch.setenv("XDG_CACHE_HOME", str(env.cache_home))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(env.runtime_dir))
    monkeypatch.setenv("JANITOR_STATE_DIR", str(env.state_dir))
    monkeypatch.setenv("JANITOR_NATIVE_DIR", str(native_dir))
    monkeypatch.setattr(tempfile, "tempdir", None)
    return env


@pytest.fixture(params=["compiled", "python"])
def front_end(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, janitor_env: JanitorEnv
) -> str:
    """The guarded ffmpeg's front end for every ``shim install`` and ``janitor run`` of the
    test (``JANITOR_GUARD_FRONT_END``): a module runs its guard tests against both with
    ``pytestmark = pytest.mark.usefixtures("front_end")``. The compiled one is skipped, with
    the reason, where there is no C compiler."""
    if request.param == "compiled":
        from janitor.host import cbuild

        if cbuild.compiler() is None:
            pytest.skip(f"the compiled front end needs a C compiler: {cbuild.why_not()}")
    monkeypatch.setenv("JANITOR_GUARD_FRONT_END", request.param)
    return str(request.param)


# -- tmpfs ----------------------------------------------------------------------------------------


def _unmount(mount: Path) -> None:
    done = subprocess.run(["umount", str(mount)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        # Something (a leaked SQLite connection, a killed child's open file) still holds it:
        # detach now, the kernel frees it once the last user lets go.
        subprocess.run(["umount", "-l", str(mount)], capture_output=True, check=False)


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Callable[..., Path]]:
    """Factory: ``tmpfs(size="64m", name=None, options="") -> Path`` mounts a fresh tmpfs.

    ``size`` is anything mount(8) takes (``"64m"``, ``"1m"``, bytes as int). ``options`` are
    extra comma-separated mount options (e.g. ``"ro"``). Each mount lives under ``tmp_path``
    and is unmounted at teardown (lazily if still busy). Skips the test when not root or when
    the mount fails (e.g. in an unprivileged container), with the reason.
    """
    mounted: list[Path] = []

    def mount(size: str | int = "64m", name: str | None = None, options: str = "") -> Path:
        if os.geteuid() != 0:
            pytest.skip("mounting a tmpfs needs root")
        where = tmp_path / (name or f"tmpfs{len(mounted)}")
        where.mkdir(parents=True, exist_ok=True)
        opts = f"size={size}" + (f",{options}" if options else "")
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(where)],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs at {where}: {done.stderr.strip()}")
        mounted.append(where)
        return where

    yield mount
    for where in reversed(mounted):
        _unmount(where)


@pytest.fixture
def bind(tmp_path: Path) -> Iterator[Callable[[Path, Path], Path]]:
    """``bind(outside, where)``: ``mount --bind outside where`` (root only), undone at the end."""
    made: list[Path] = []

    def mount(outside: Path, where: Path) -> Path:
        if os.geteuid() != 0:
            pytest.skip("a bind mount needs root")
        where.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(["mount", "--bind", str(outside), str(where)], capture_output=True,
                              text=True)  # fmt: skip
        if done.returncode != 0:
            pytest.skip(f"cannot bind-mount here: {done.stderr.strip()}")
        made.append(where)
        return where

    yield mount
    for where in reversed(made):
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def remount(mount: Path, options: str) -> None:
    """``mount -o remount,OPTIONS MOUNT`` (e.g. ``"ro"``); fails the test if it does not work."""
    subprocess.run(["mount", "-o", f"remount,{options}", str(mount)], check=True)


@pytest.fixture
def remount_tmpfs() -> Callable[[Path, str], None]:
    """``remount_tmpfs(mount, "ro")``: remount a tmpfs from :func:`tmpfs` with new options."""
    return remount


# -- files and space -------------------------------------------------------------------------------


def fill_file(path: Path, nbytes: int, *, chunk: int = MiB) -> Path:
    """Append ``nbytes`` of real data to ``path`` (created with its parents) and fsync it.

    The bytes are written, never seeked over, so the file is not sparse and its ``st_blocks``
    count all of them.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    block = (os.urandom(64) * (chunk // 64 + 1))[:chunk]
    with open(path, "ab") as fh:
        left = nbytes
        while left > 0:
            n = min(left, chunk)
            fh.write(block[:n])
            left -= n
        fh.flush()
        os.fsync(fh.fileno())
    return path


def free_of(path: Path) -> int:
    """Bytes free to an unprivileged writer on ``path``'s volume: ``f_bavail * f_frsize``."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def total_of(path: Path) -> int:
    """Size of ``path``'s volume: ``f_blocks * f_frsize``."""
    st = os.statvfs(path)
    return st.f_blocks * st.f_frsize


@pytest.fixture
def fill() -> Callable[..., Path]:
    """``fill(path, nbytes)``: write ``nbytes`` of real bytes to ``path`` (appends; fsynced)."""
    return fill_file


@pytest.fixture
def fill_until_full() -> Callable[[Path], int]:
    """``fill_until_full(path) -> int``: write to ``path`` until ENOSPC; returns bytes written."""

    def run(path: Path) -> int:
        path.parent.mkdir(parents=True, exist_ok=True)
        written = 0
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            for size in (MiB, 64 * 1024, 4096, 512, 1):
                block = b"\x5a" * size
                while True:
                    try:
                        n = os.write(fd, block)
                    except OSError as exc:
                        if exc.errno != errno.ENOSPC:
                            raise
                        break
                    written += n
                    if n < size:
                        break
        finally:
            os.close(fd)
        return written

    return run


@pytest.fixture
def free_bytes() -> Callable[[Path], int]:
    """``free_bytes(path) -> int``: ``f_bavail * f_frsize`` of ``path``'s volume, read now."""
    return free_of


# -- policies ------------------------------------------------------------------------------------


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str | os.PathLike):
        text = os.fspath(value)
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r} as TOML")


def _toml_table(name: str, body: Mapping[str, Any]) -> str:
    lines = [f"[{name}]"]
    lines += [f"{key} = {_toml_value(value)}" for key, value in body.items()]
    return "\n".join(lines) + "\n"


def policy_text(
    trees: Mapping[str, Mapping[str, Any] | str | os.PathLike[str]],
    *,
    floor: str | int | None = "4MiB",
    volume: Mapping[str, Any] | None = None,
) -> str:
    """TOML text of a policy: a ``[volume]`` table and one ``[trees.NAME]`` table per tree.

    A tree given as a plain path is ``role = "cache"`` with ``quota = "10MiB"``, as in the
    issue's minimal example. ``volume`` adds keys to ``[volume]`` (``free_low`` ...).
    """
    vol: dict[str, Any] = {} if floor is None else {"floor": floor}
    vol.update(volume or {})
    parts = [_toml_table("volume", vol)] if vol else []
    for name, spec in trees.items():
        if isinstance(spec, str | os.PathLike):
            body: Mapping[str, Any] = {"role": "cache", "path": os.fspath(spec), "quota": "10MiB"}
        else:
            body = spec
        parts.append(_toml_table(f"trees.{name}", body))
    return "\n".join(parts)


@pytest.fixture
def write_policy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Path]:
    """``write_policy(trees={...}, floor="4MiB", volume=None, name="policy.toml", activate=True)``.

    Writes a small TOML policy under ``tmp_path/policies`` and returns its path. ``trees`` maps a
    tree name to a table (``{"role": "scratch", "path": ..., ...}``) or just a path (a cache with
    a 10MiB quota). With ``activate`` (default) ``JANITOR_POLICY`` points at it, so the CLI and
    ``Janitor.from_settings()`` use it without flags.
    """
    folder = tmp_path / "policies"

    def write(
        trees: Mapping[str, Mapping[str, Any] | str | os.PathLike[str]] | None = None,
        *,
        floor: str | int | None = "4MiB",
        volume: Mapping[str, Any] | None = None,
        name: str = "policy.toml",
        activate: bool = True,
    ) -> Path:
        folder.mkdir(exist_ok=True)
        path = folder / name
        path.write_text(policy_text(trees or {}, floor=floor, volume=volume))
        if activate:
            monkeypatch.setenv("JANITOR_POLICY", str(path))
        return path

    return write


#: ``jan_for({"name": tree_table, ...}, floor=..., volume=...) -> Janitor``.
JanFor = Callable[..., Janitor]


@pytest.fixture
def jan_for(write_policy: Callable[..., Path]) -> Iterator[JanFor]:
    """``jan_for({"name": tree_table, ...}, floor=..., volume=...) -> Janitor`` on a fresh
    policy (isolated state; floor 1 MiB unless given); each ledger closed at the end."""
    made: list[Janitor] = []

    def make(trees: dict[str, Any], **kwargs: Any) -> Janitor:
        kwargs.setdefault("floor", "1MiB")
        jan = Janitor.from_settings(policy=write_policy(trees, **kwargs))
        made.append(jan)
        return jan

    yield make
    for jan in made:
        jan.ledger.close()


@dataclass
class Volume:
    """A tmpfs with one managed cache tree ``t`` (``mount/t``) and a policy that names it."""

    mount: Path
    tree: Path
    policy: Path
    floor_spec: str
    tree_name: str = "t"
    _janitors: list[Any] = field(default_factory=list)

    def janitor(self) -> Any:
        """A ``Janitor`` on this volume's policy and the isolated state dir."""
        from janitor import Janitor

        jan = Janitor.from_settings(policy=self.policy)
        self._janitors.append(jan)
        return jan

    def free(self) -> int:
        """``f_bavail * f_frsize`` of the tmpfs, read now."""
        return free_of(self.mount)

    def total(self) -> int:
        """``f_blocks * f_frsize`` of the tmpfs."""
        return total_of(self.mount)


@pytest.fixture
def managed_volume(
    tmpfs: Callable[..., Path], write_policy: Callable[..., Path]
) -> Iterator[Callable[..., Volume]]:
    """``managed_volume(size="64m", floor="8MiB", quota="32MiB") -> Volume``.

    Mounts a tmpfs, makes the tree folder ``t`` on it, and writes (and activates) a policy with
    that floor and one cache tree ``t``. The ledger stays in the isolated state dir, off the
    tmpfs, so the tmpfs's free space only changes when the test writes to it.
    """
    made: list[Volume] = []

    def make(size: str = "64m", floor: str = "8MiB", quota: str = "32MiB") -> Volume:
        mount = tmpfs(size)
        tree = mount / "t"
        tree.mkdir()
        policy = write_policy(
            {"t": {"role": "cache", "path": str(tree), "quota": quota}}, floor=floor
        )
        vol = Volume(mount=mount, tree=tree, policy=policy, floor_spec=floor)
        made.append(vol)
        return vol

    yield make
    for vol in made:
        for jan in vol._janitors:
            jan.ledger.close()


# -- the console script ------------------------------------------------------------------------


@pytest.fixture
def run_cli() -> Callable[..., subprocess.CompletedProcess[str]]:
    """``run_cli(*args, env=None, cwd=None, timeout=60) -> CompletedProcess[str]``.

    Runs the real ``janitor`` console script (the one next to ``sys.executable``) with
    ``subprocess.run``, capturing text stdout and stderr; never raises on a non-zero exit.
    The child inherits the isolated ``os.environ``; ``env`` adds to it, and a ``None`` value
    removes a variable. The child's parent process is the test process.
    """
    assert JANITOR_BIN.exists(), f"console script {JANITOR_BIN} is not installed"

    def run(
        *args: str | os.PathLike[str],
        env: Mapping[str, str | None] | None = None,
        cwd: Path | None = None,
        timeout: float = 60,
    ) -> subprocess.CompletedProcess[str]:
        child_env = dict(os.environ)
        for key, value in (env or {}).items():
            if value is None:
                child_env.pop(key, None)
            else:
                child_env[key] = value
        return subprocess.run(
            [str(JANITOR_BIN), *map(os.fspath, args)],
            capture_output=True,
            text=True,
            env=child_env,
            cwd=cwd,
            timeout=timeout,
            check=False,
        )

    return run


# -- the ledger ---------------------------------------------------------------------------------


@pytest.fixture
def ledger_dump() -> Callable[[Path], list[str]]:
    """``ledger_dump(path) -> list[str]``: the ledger's SQL dump, read through a ro connection."""

    def dump(path: Path) -> list[str]:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            return list(conn.iterdump())
        finally:
            conn.close()

    return dump


def one_line_error(stderr: str) -> str:
    """Assert ``stderr`` is exactly one line and no traceback; returns that line."""
    assert "Traceback" not in stderr, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}:\n{stderr}"
    return lines[0]


@pytest.fixture
def assert_one_line() -> Callable[[str], str]:
    """``assert_one_line(stderr) -> str``: one line on stderr, no traceback; returns the line."""
    return one_line_error


# -- reservations held by other processes ----------------------------------------------------------

_HOLDER = r"""
import sys
from janitor import Janitor

jan = Janitor.from_settings(policy=sys.argv[1])
r = jan.reserve(sys.argv[2], int(sys.argv[3]), job="holder")
print(r.id, flush=True)
sys.stdin.read()  # hold the reservation until stdin closes (or the process is killed)
r.release()
print("released", flush=True)
"""


@dataclass
class Holder:
    """A separate Python process that holds one reservation through the Python API."""

    proc: subprocess.Popen[str]
    id: str

    @property
    def pid(self) -> int:
        """The owner pid the ledger records for the reservation."""
        return self.proc.pid

    def release(self) -> None:
        """Close its stdin: it releases the reservation and exits 0."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        assert self.proc.stdout.readline().strip() == "released"
        assert self.proc.wait(timeout=30) == 0


@pytest.fixture
def holder() -> Iterator[Callable[[Path, str, int], Holder]]:
    """``holder(policy, tree, nbytes) -> Holder``: another process that reserves and waits.

    Returns once the reservation is granted (its id is read from the child's stdout); fails the
    test with the child's stderr if it was not. Children still running at teardown are killed.
    """
    procs: list[subprocess.Popen[str]] = []

    def start(policy: Path, tree: str, nbytes: int) -> Holder:
        proc = subprocess.Popen(
            [sys.executable, "-c", _HOLDER, str(policy), tree, str(nbytes)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        procs.append(proc)
        assert proc.stdout is not None and proc.stderr is not None
        line = proc.stdout.readline().strip()
        if not line.startswith("r-"):
            proc.kill()
            proc.wait()
            pytest.fail(f"holder was not granted {nbytes} B on {tree}: {proc.stderr.read()}")
        return Holder(proc, line)

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


@pytest.fixture
def run_cli_many() -> Callable[..., list[subprocess.CompletedProcess[str]]]:
    """``run_cli_many([args, ...], env=None) -> [CompletedProcess, ...]``: run them concurrently.

    Like :func:`run_cli` for several independent invocations at once (the console script's
    start-up dominates, and the machine has more than one core); results keep the input order.
    Each item is a tuple of arguments, or ``(args, env)`` with per-run environment changes.
    """
    assert JANITOR_BIN.exists(), f"console script {JANITOR_BIN} is not installed"

    def run(
        runs: list[tuple[Any, ...]],
        env: Mapping[str, str | None] | None = None,
        timeout: float = 60,
    ) -> list[subprocess.CompletedProcess[str]]:
        procs = []
        for item in runs:
            if len(item) == 2 and isinstance(item[0], tuple):
                args, extra = item
            else:
                args, extra = item, {}
            child_env = dict(os.environ)
            for key, value in {**(env or {}), **extra}.items():
                if value is None:
                    child_env.pop(key, None)
                else:
                    child_env[key] = value
            argv = [str(JANITOR_BIN), *map(os.fspath, args)]
            proc = subprocess.Popen(
                argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=child_env,
            )
            procs.append((argv, proc))
        results = []
        for argv, proc in procs:
            out, err = proc.communicate(timeout=timeout)
            results.append(subprocess.CompletedProcess(argv, proc.returncode, out, err))
        return results

    return run


@contextmanager
def raw_sql(ledger: Ledger) -> Iterator[sqlite3.Connection]:
    """A plain SQLite connection to a ledger's file (created first), committed on exit: for
    tests that fabricate rows (old lines, a daemon's forecast) or read a table directly."""
    with ledger.read():
        pass
    conn = sqlite3.connect(ledger.path, timeout=30)
    try:
        with conn:
            yield conn
    finally:
        conn.close()


# -- the pipeline: media, and batchalign3's two trees on a tmpfs ---------------------------------

SIM = Path(__file__).with_name("pipeline_sim.py")
REAL_FFMPEG = shutil.which("ffmpeg") or "ffmpeg"

#: The trees of the shipped policy (policies/batchalign3.toml), by name.
SHIPPED_TREES = frozenset(
    {
        "media_cache",
        "job_tmp",
        "batchalign3_logs",
        "batchalign3_jobs",
        "batchalign_api_jobs",
        "batchalign_cache",
        "hf_hub",
        "stanza",
        "analysis_cache",
    }
)
PCM_RATE = 64_000  # 16 kHz mono f32le
WAV_RATE = 32_000  # 16 kHz mono s16le


@pytest.fixture(scope="module")
def m4a(tmp_path_factory: pytest.TempPathFactory) -> Callable[[float], Path]:
    """``m4a(seconds)``: a mono AAC recording of that length (made once per length)."""
    folder = tmp_path_factory.mktemp("media")
    made: dict[float, Path] = {}

    def make(seconds: float) -> Path:
        if seconds not in made:
            out = folder / f"talk-{seconds:g}s.m4a"
            subprocess.run(
                [
                    REAL_FFMPEG,
                    "-nostdin",
                    "-loglevel",
                    "error",
                    "-y",
                    "-f",
                    "lavfi",
                    "-i",
                    f"sine=frequency=440:duration={seconds}",
                    "-ac",
                    "1",
                    "-c:a",
                    "aac",
                    "-b:a",
                    "24k",
                    str(out),
                ],
                check=True,
            )
            made[seconds] = out
        return made[seconds]

    return make


def sim_command(cache: Path, tmp: Path, *args: str | os.PathLike[str]) -> list[str]:
    """The pipeline simulator's command line, for a media cache and a job temp folder."""
    return [sys.executable, str(SIM), "--cache", str(cache), "--tmpdir", str(tmp),
            *map(os.fspath, args)]  # fmt: skip


@dataclass
class Pipeline:
    """A tmpfs with batchalign3's two trees on it, and the policy naming them."""

    mount: Path
    cache: Path
    tmp: Path
    policy: Path

    def sim(self, *args: str | os.PathLike[str]) -> list[str]:
        """The simulator's command line for this volume's cache and temp folder."""
        return sim_command(self.cache, self.tmp, *args)

    def job_folders(self) -> list[Path]:
        return sorted(self.tmp.glob(".tmp*"))


@pytest.fixture
def pipeline(
    tmpfs: Callable[..., Path], write_policy: Callable[..., Path]
) -> Callable[..., Pipeline]:
    """``pipeline(size, floor=, quota=, cache_min_age=)``: the shipped policy's two trees on a
    tmpfs (``cache/`` the media cache, ``tmp/`` the job temp folder), short ages."""

    def make(
        size: str = "64m",
        *,
        floor: str = "8MiB",
        quota: str = "40MiB",
        cache_min_age: str = "10m",
    ) -> Pipeline:
        mount = tmpfs(size)
        cache, tmp = mount / "cache", mount / "tmp"
        cache.mkdir()
        tmp.mkdir()
        policy = write_policy(
            {
                "media_cache": {
                    "role": "cache",
                    "path": str(cache),
                    "quota": quota,
                    "min_age": cache_min_age,
                    "low_watermark": "90%",
                    "group": r"^(?P<key>[^/]+?)(?:\.tmp)?\.wav(?:\.lock)?$",
                    "lock": "{key}.wav.lock",
                },
                "job_tmp": {
                    "role": "scratch",
                    "path": str(tmp),
                    "units": "dir",
                    "unit_glob": ".tmp*",
                    "unit_requires": ["fa_v2", "asr_v2"],
                    "orphan_age": "1h",
                    "min_age": "0s",
                },
            },
            floor=floor,
        )
        return Pipeline(mount, cache, tmp, policy)

    return make
