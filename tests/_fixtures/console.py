"""The real ``janitor`` console script, run in a subprocess (one at a time or several at once),
and what its errors must look like: one line on stderr, no traceback; and, for a test that
only reads what the janitor recorded (its log, its status) to assert on it, the same command run
by the console script's own entry point in the test's process (:func:`janitor_in_process`)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys  # noqa: F401
from collections.abc import Callable, Mapping
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from tests._fixtures import forkserver
from tests._fixtures.forkserver import JANITOR_BIN

__all__ = [
    "JANITOR_BIN",
    "assert_one_line",
    "janitor_in_process",
    "janitor_json",
    "one_line_error",
    "run_cli",
    "run_cli_many",
]


def _is_doctor(args: tuple[Any, ...]) -> bool:
    return "doctor" in (os.fspath(a) for a in args if isinstance(a, str | os.PathLike))


@pytest.fixture
def run_cli(machine_steady: Callable[[], None]) -> Callable[..., subprocess.CompletedProcess[str]]:
    """``run_cli(*args, env=None, cwd=None, timeout=60) -> CompletedProcess[str]``.

    Runs the real ``janitor`` console script (the one next to ``sys.executable``) as
    ``subprocess.run`` would (started by the worker's forkserver, ``tests._fixtures.forkserver``),
    capturing text stdout and stderr; never raises on a non-zero exit.
    The child inherits the isolated ``os.environ``; ``env`` adds to it, and a ``None`` value
    removes a variable. The child's parent process is the test process. A ``doctor`` run
    holds the machine steady for the rest of the test (tests._fixtures.machine).
    """
    assert JANITOR_BIN.exists(), f"console script {JANITOR_BIN} is not installed"

    def run(
        *args: str | os.PathLike[str],
        env: Mapping[str, str | None] | None = None,
        cwd: Path | None = None,
        timeout: float = 60,
    ) -> subprocess.CompletedProcess[str]:
        if _is_doctor(args):
            machine_steady()
        child_env = dict(os.environ)
        for key, value in (env or {}).items():
            if value is None:
                child_env.pop(key, None)
            else:
                child_env[key] = value
        return forkserver.run(
            [str(JANITOR_BIN), *map(os.fspath, args)],
            capture_output=True,
            text=True,
            env=child_env,
            cwd=cwd,
            timeout=timeout,
            check=False,
        )

    return run


@pytest.fixture
def run_cli_many(
    machine_steady: Callable[[], None],
) -> Callable[..., list[subprocess.CompletedProcess[str]]]:
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
            if _is_doctor(args):
                machine_steady()
            child_env = dict(os.environ)
            for key, value in {**(env or {}), **extra}.items():
                if value is None:
                    child_env.pop(key, None)
                else:
                    child_env[key] = value
            argv = [str(JANITOR_BIN), *map(os.fspath, args)]
            proc = forkserver.JanitorPopen(
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


def janitor_in_process(
    *args: str | os.PathLike[str], env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``janitor ARGS`` run by the console script's entry point (``janitor.cli.app.main``) in
    this process, with ``env`` as its whole environment (default: this process's): the same
    command, output and exit code, without a Python start (about a quarter of a CPU-second).

    For reading what the janitor recorded (``log --json``, ``status --json``) to assert on it,
    or to wait for it; a test whose subject is the command line runs the console script
    (:func:`run_cli`). ``os.environ`` is ``env`` for the call, so it is called from the test's
    own thread while no other thread of the test starts a process.
    """
    from janitor.cli.app import main

    out, err = io.StringIO(), io.StringIO()
    code: int = 0
    with (
        mock.patch.dict(os.environ, env or {}, clear=env is not None),
        redirect_stdout(out),
        redirect_stderr(err),
    ):
        try:
            main([os.fspath(a) for a in args])
        except SystemExit as exc:  # click ends every command with one, as the script does
            code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    return subprocess.CompletedProcess(["janitor", *map(os.fspath, args)], code,
                                       out.getvalue(), err.getvalue())  # fmt: skip


def janitor_json(*args: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> Any:
    """The JSON of ``janitor ARGS`` (a ``--json`` command) run in this process
    (:func:`janitor_in_process`); fails the test unless it exits 0."""
    done = janitor_in_process(*args, env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


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
