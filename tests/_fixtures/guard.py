"""The guarded ffmpeg as ``janitor shim install --dir FOLDER`` writes it, written in this process.

Most tests that run the guard need it installed and are not about installing it, and the console
script costs a Python start each time (about a quarter of a CPU-second: the suite installed it
some 180 times). :func:`install_guard` calls the command's own function
(``janitor.commands.shim.install``) with the environment the command would have had, the
interpreter its script runs on and the janitor package that interpreter imports (the installed
one, where the tests' process imports the clone's: ``pip install .``, as CI installs), so it
writes the same files to the byte for a policy, compiled front end or Python's
(``tests/commands/test_guard.py::test_the_guard_the_tests_install_is_what_shim_install_writes``
holds it so; where no policy is named, the shipped one is the clone's copy of that file). The
command itself is run as a console script where it is the subject.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

from tests._fixtures.console import JANITOR_BIN

TYPE_CHECKING = False
if TYPE_CHECKING:
    from janitor.commands.front_end import FrontEnd

__all__ = ["install_guard"]


def _console_python() -> str:
    """The interpreter the console script runs on: its ``#!`` line."""
    with open(JANITOR_BIN, "rb") as fh:
        first = fh.readline().decode().strip()
    assert first.startswith("#!"), f"{JANITOR_BIN} has no #! line: {first!r}"
    return first[2:].split()[0]


@functools.cache
def _console_import_paths() -> tuple[str, ...]:
    """Where the console script's interpreter finds janitor and what it imports (asked of it
    once: ``-I``, so neither the current folder nor the environment comes first)."""
    done = subprocess.run(
        [_console_python(), "-I", "-c", "import json\n"
         "from janitor.commands.front_end import _import_paths\n"
         "print(json.dumps(_import_paths()))"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return tuple(json.loads(done.stdout))


@contextmanager
def _as_the_command(env: Mapping[str, str] | None) -> Iterator[None]:
    """This process as the console script would be: ``env`` as its whole environment (this
    process's own when None), ``sys.executable`` the script's interpreter, and the janitor
    package that interpreter imports as the one the guard's script imports."""
    paths = list(_console_import_paths())
    with (
        mock.patch.dict(os.environ, env or {}, clear=env is not None),
        mock.patch.object(sys, "executable", _console_python()),
        mock.patch("janitor.commands.front_end._import_paths", lambda: paths),
    ):
        yield


def install_guard(folder: Path, env: Mapping[str, str] | None = None) -> FrontEnd:
    """``janitor shim install --dir folder`` under ``env`` (default: this process's
    environment), in this process; the front end it installed."""
    from janitor.commands.shim import install
    from janitor.config.settings import Settings

    with _as_the_command(env):
        _, front = install(Settings.load(), folder)
    return front
