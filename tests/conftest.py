"""Shared fixtures for the space-janitor test suites.

Everything here is real: tmpfs volumes mounted for the test (root only), real files with real
allocated blocks, the real ``janitor`` console script in a subprocess. Nothing touches the real
home folder: :func:`~tests._fixtures.env.janitor_env` (autouse) points ``HOME``, every ``XDG_*``
dir, ``TMPDIR`` and ``JANITOR_STATE_DIR`` into the test's ``tmp_path`` (and
``JANITOR_NATIVE_DIR`` into the session's).

The fixtures several layers use live in ``tests/_fixtures/``, one module per job, loaded here;
a fixture only one layer uses lives in that layer's ``conftest.py`` (``tests/host``:
``size_walker``; ``tests/cleanup``: ``jan_for``; ``tests/cli``: ``ledger_dump``). A test imports
the helpers beside them from their module (``from tests._fixtures.space import MiB, free_of``).

Fixtures (function scoped unless said), by module of ``tests/_fixtures/``:

``env``       ``janitor_env`` the isolated environment (autouse), a :class:`JanitorEnv` with its
              folders; ``native_dir`` one ``JANITOR_NATIVE_DIR`` for the session (the C helpers
              are built once, not once a test); ``front_end`` the guarded ffmpeg's front end,
              ``compiled`` then ``python`` (parametrized).
``mounts``    ``tmpfs("64m") -> Path``: a fresh tmpfs under tmp_path (root only); ``bind``;
              ``remount_tmpfs(mount, "ro")``.
``space``     ``fill(path, nbytes)``: real (non-sparse) bytes; ``fill_until_full(path) -> int``;
              ``free_bytes(path) -> int``: ``f_bavail * f_frsize`` from a fresh statvfs.
``policies``  ``write_policy(trees={...}, floor="4MiB") -> Path``: a small TOML policy.
``volumes``   ``managed_volume(size="64m", floor="8MiB") -> Volume``: tmpfs + tree + policy.
``console``   ``run_cli("status", "--json") -> CompletedProcess``: the real console script;
              ``run_cli_many([args, ...])``: several at once; ``assert_one_line(stderr)``.
``holder``    ``holder(policy, tree, nbytes) -> Holder``: a process holding a reservation.
``machine``   ``machine_alone``: a test that starts a process every ``janitor doctor`` sees;
              ``machine_steady``: a test's doctor runs (``run_cli`` takes it for them).
``media``     ``m4a(seconds) -> Path``: a mono AAC recording (real ffmpeg); ``media_store`` makes
              any other recording; both once for the run, shared by every worker (read-only).
``pipeline``  ``pipeline("64m") -> Pipeline``: batchalign3's two trees on a tmpfs.
``order``     no fixture: the longest tests first, dealt to the heads of the workers' queues.

Beside them, ``guard.install_guard(folder, env)`` writes the guard ``janitor shim install --dir``
writes, in the test's process (for the tests that run the guard and are not about installing it).
"""

import pytest

# Assertions in the fixture modules read as pytest's, though this module imports some of them
# below before pytest loads them as plugins.
pytest.register_assert_rewrite("tests._fixtures")

pytest_plugins = [
    "tests._fixtures.env",
    "tests._fixtures.mounts",
    "tests._fixtures.space",
    "tests._fixtures.policies",
    "tests._fixtures.volumes",
    "tests._fixtures.machine",
    "tests._fixtures.console",
    "tests._fixtures.holder",
    "tests._fixtures.media",
    "tests._fixtures.pipeline",
    "tests._fixtures.order",
]

# The helpers a test module imported from here before the split, still importable from here
# (``from .conftest import MiB``) so a test file written against it keeps working; a new one
# imports them from their module in tests/_fixtures/.
from tests._fixtures.console import JANITOR_BIN, one_line_error  # noqa: E402
from tests._fixtures.env import JanitorEnv  # noqa: E402
from tests._fixtures.holder import Holder  # noqa: E402
from tests._fixtures.ledger import raw_sql  # noqa: E402
from tests._fixtures.pipeline import PCM_RATE, REAL_FFMPEG, WAV_RATE, Pipeline, sim_command  # noqa: E402
from tests._fixtures.policies import SHIPPED_TREES  # noqa: E402
from tests._fixtures.space import MiB, fill_file, free_of, total_of  # noqa: E402
from tests._fixtures.volumes import Volume  # noqa: E402

__all__ = [
    "JANITOR_BIN",
    "PCM_RATE",
    "REAL_FFMPEG",
    "SHIPPED_TREES",
    "WAV_RATE",
    "Holder",
    "JanitorEnv",
    "MiB",
    "Pipeline",
    "Volume",
    "fill_file",
    "free_of",
    "one_line_error",
    "raw_sql",
    "sim_command",
    "total_of",
]
