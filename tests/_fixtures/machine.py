"""Processes every test on the machine sees: ``janitor doctor`` reads all of the user's.

A stand-in batchalign daemon, or a process named ``batchalign3``, that one test starts is in the
report of a ``janitor doctor`` another test runs at the same time in another pytest-xdist worker
(doctor then says the guard is not needed, or names a server that is not the test's). So a test
that starts one holds the run's machine lock alone (:func:`machine_alone`), and a test that runs
doctor holds it shared from its first doctor run to its end (:func:`machine_steady`, which
``run_cli`` takes for a doctor command line): the two never overlap, and doctors run together.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import pytest

__all__ = ["machine_alone", "machine_lock", "machine_steady"]

#: Whether this process (a worker) holds the machine alone now: its own doctor runs need not,
#: and must not, wait for the shared lock.
_ALONE: list[bool] = [False]


@pytest.fixture(scope="session")
def machine_lock(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run's machine lock file, in the run's temporary root (every worker's)."""
    base = tmp_path_factory.getbasetemp()
    return (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "machine.lock"


@pytest.fixture
def machine_alone(machine_lock: Path) -> Iterator[None]:
    """For a test that starts a process other tests' doctors would see: no doctor runs
    elsewhere in the run while it does."""
    with open(machine_lock, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        _ALONE[0] = True
        try:
            yield
        finally:
            _ALONE[0] = False


@pytest.fixture
def machine_steady(machine_lock: Path) -> Iterator[Callable[[], None]]:
    """``hold()``: from now to the end of the test, no other test starts a process its doctor
    would see (a test that holds the machine alone already has it so)."""
    held: list[IO[str]] = []

    def hold() -> None:
        if not held and not _ALONE[0]:
            fh = open(machine_lock, "a")  # noqa: SIM115 (closed at the test's end)
            fcntl.flock(fh, fcntl.LOCK_SH)
            held.append(fh)

    yield hold
    for fh in held:
        fh.close()
