"""The isolated environment every test runs in (autouse), and the guard's front end.

:func:`janitor_env` points ``HOME``, every ``XDG_*`` dir, ``TMPDIR`` and ``JANITOR_STATE_DIR``
into the test's ``tmp_path`` (and ``JANITOR_NATIVE_DIR`` into the session's ``native_dir``), so
nothing touches the real home folder; subprocesses inherit it through ``os.environ``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

__all__ = ["RUN_KNOBS", "JanitorEnv", "front_end", "janitor_env", "native_dir"]

#: The variables a whole run of the suite is started with, which every test keeps, so that the
#: processes a test starts get them too: ``JANITOR_PORTABLE=1`` (CI's second pass: the code
#: paths macOS takes, janitor/host/fastpaths.py) and ``JANITOR_TEST_EXEC=1`` (every ``janitor``
#: exec'd, not started by the worker's forkserver: tests._fixtures.forkserver).
RUN_KNOBS = frozenset({"JANITOR_TEST_EXEC", "JANITOR_PORTABLE"})


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
    run: built once, by the first test that needs one, not once per test's cache dir nor once
    per pytest-xdist worker (the workers share the run's temporary root). Two workers building
    the same helper at once is safe: janitor.host.cbuild compiles under a temporary name and
    renames the program into place. A test that makes a build fail uses a folder of its own."""
    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "native"
    folder.mkdir(exist_ok=True)
    return folder


@pytest.fixture(autouse=True)
def janitor_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, native_dir: Path
) -> Iterator[JanitorEnv]:
    """Point HOME, XDG_*, TMPDIR and JANITOR_STATE_DIR into ``tmp_path/env``; unset the rest.

    ``XDG_RUNTIME_DIR`` is a short folder of its own under /tmp instead (removed at the end),
    as a real one is short (``/run/user/UID``): the daemon's socket must fit a Unix socket's
    path (108 bytes), and a parallel worker's ``tmp_path`` is longer than a serial run's.

    The state dir is a plain folder on tmp_path's filesystem, never on a tmpfs under test, so
    the ledger's own writes never change a tested volume's free space. ``JANITOR_CONFIG``,
    ``JANITOR_POLICY`` (and every other ``JANITOR_*`` but the run's knobs, :data:`RUN_KNOBS`)
    and ``BATCHALIGN_MEDIA_CACHE_DIR`` are removed. ``tempfile``'s cached temp dir is reset so
    ``{tmp}`` follows the new ``TMPDIR``. Subprocesses inherit all of it through ``os.environ``.
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
        runtime_dir=Path(tempfile.mkdtemp(prefix="jr-", dir="/tmp")),
    )
    for folder in (env.home, env.tmp, env.config_home, env.data_home, env.cache_home):
        folder.mkdir(parents=True)
    for name in list(os.environ):
        if name.startswith("JANITOR_") and name not in RUN_KNOBS:
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
    yield env
    shutil.rmtree(env.runtime_dir, ignore_errors=True)


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
