"""Reservations held by other processes: a separate Python process that reserves and waits."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

__all__ = ["Holder", "end_helper", "holder"]


def end_helper(proc: subprocess.Popen[str]) -> None:
    """A helper process ended: killed if it still runs, waited for, its pipes closed."""
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()


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
        end_helper(proc)
