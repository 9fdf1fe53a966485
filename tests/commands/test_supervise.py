"""A supervised command never outlives its supervisor, and its bytes stay reserved while it runs.

Real processes throughout: ``janitor exec`` is started as the console script, SIGKILLed as the
OOM killer would, and the command it ran must be gone within a few seconds, on the Linux path
(``PR_SET_PDEATHSIG``) and on the portable path macOS takes (the sentinel; forced on Linux with
``JANITOR_PORTABLE=1``). A shell wrapper's children go too: the command leads its own process
group.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from janitor import Janitor
from janitor.host.fastpaths import PORTABLE
from tests._fixtures.console import JANITOR_BIN
from tests._fixtures.volumes import Volume

PY = sys.executable
MakeVolume = Callable[..., Volume]

#: Appends a line to OUT every 20 ms, forever; prints its pid first.
WRITER = textwrap.dedent(
    """
    import os, sys, time
    print(os.getpid(), flush=True)
    with open(sys.argv[1], "ab") as fh:
        while True:
            fh.write(b"x" * 4096)
            fh.flush()
            time.sleep(0.02)
    """
)


@pytest.fixture
def vol(managed_volume: MakeVolume) -> Volume:
    """A 64 MiB tmpfs, floor 8 MiB, cache tree ``t``."""
    return managed_volume(size="64m", floor="8MiB", quota="32MiB")


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie, waiting for init to reap it, does not)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return False
    return data[data.rfind(b")") + 2 :][:1] not in (b"Z", b"X")


def wait_gone(pid: int, timeout: float = 5.0) -> float:
    """Seconds until ``pid`` stopped running; fails after ``timeout``."""
    start = time.monotonic()
    while alive(pid):
        assert time.monotonic() - start < timeout, f"pid {pid} still runs after {timeout}s"
        time.sleep(0.02)
    return time.monotonic() - start


def live_reservations() -> list[dict[str, object]]:
    done = subprocess.run(
        [str(JANITOR_BIN), "status", "--json"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout)["reservations"])


@pytest.fixture
def supervised(
    vol: Volume, tmp_path: Path
) -> Iterator[Callable[..., tuple[subprocess.Popen[str], int, Path]]]:
    """``start(*wrapper, portable=False) -> (janitor exec, command pid, output)``: janitor exec
    running WRITER (inside ``wrapper``, e.g. ``sh -c '... & wait'``), once the writer wrote."""
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    procs: list[subprocess.Popen[str]] = []
    pids: list[int] = []

    def start(*wrapper: str, portable: bool = False) -> tuple[subprocess.Popen[str], int, Path]:
        out = vol.tree / f"out{len(procs)}.bin"
        env = {**os.environ, "JANITOR_PORTABLE": "1" if portable else "0"}
        command = [*wrapper, f"{PY} {script} {out}"] if wrapper else [PY, str(script), str(out)]
        proc = subprocess.Popen(
            [str(JANITOR_BIN), "exec", "t", "20M", "--path", str(out), "--", *command],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        procs.append(proc)
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        assert line.isdigit(), proc.stderr.read() if proc.stderr else line
        pids.append(int(line))
        deadline = time.monotonic() + 10
        while not (out.exists() and out.stat().st_size > 0):
            assert time.monotonic() < deadline, "the writer never wrote"
            time.sleep(0.01)
        return proc, int(line), out

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    for pid in pids:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize(
    "portable",
    [
        pytest.param(False, id="linux-pdeathsig", marks=pytest.mark.skipif(
            PORTABLE or not sys.platform.startswith("linux"), reason="the Linux path")),
        pytest.param(True, id="portable-sentinel"),
    ],
)  # fmt: skip
def test_a_sigkilled_exec_takes_its_command_with_it(
    supervised: Callable[..., tuple[subprocess.Popen[str], int, Path]], portable: bool
) -> None:
    proc, writer, out = supervised(portable=portable)
    (r,) = live_reservations()
    assert r["command_pid"] == writer and r["owner_pid"] == proc.pid
    proc.send_signal(signal.SIGKILL)  # what the OOM killer does
    proc.wait()
    assert wait_gone(writer) < 3.0
    size = out.stat().st_size
    time.sleep(0.1)
    assert out.stat().st_size == size, "the output still grows"
    assert live_reservations() == []  # both owners gone: the bytes are free again


@pytest.mark.parametrize("portable", [False, True], ids=["default", "portable"])
def test_a_shell_wrapper_and_its_children_die_with_the_supervisor(
    supervised: Callable[..., tuple[subprocess.Popen[str], int, Path]], portable: bool
) -> None:
    """The writer is the wrapper's child, not ours: only the process-group kill reaches it."""
    proc, writer, _out = supervised("sh", "-c", "$0 & wait", portable=portable)
    assert os.getpgid(writer) != os.getpgid(proc.pid)  # the command leads a group of its own
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert wait_gone(writer) < 3.0


@pytest.mark.skipif(PORTABLE or not sys.platform.startswith("linux"), reason="the Linux path")
def test_pdeathsig_stops_the_command_even_with_the_sentinel_killed_too(
    supervised: Callable[..., tuple[subprocess.Popen[str], int, Path]],
) -> None:
    proc, writer, _ = supervised()
    sentinels = subprocess.run(
        ["pgrep", "-f", f"janitor-sentinel -{writer}"], capture_output=True, text=True
    ).stdout.split()
    assert len(sentinels) == 1, sentinels
    os.kill(int(sentinels[0]), signal.SIGKILL)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert wait_gone(writer) < 3.0


def test_exec_that_ends_normally_leaves_no_sentinel(vol: Volume, tmp_path: Path) -> None:
    marker = tmp_path / "pid"
    done = subprocess.run(
        [str(JANITOR_BIN), "exec", "t", "1M", "--path", str(vol.tree / "o"), "--",
         "sh", "-c", f"echo $$ > {marker}"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    pid = marker.read_text().strip()
    left = subprocess.run(
        ["pgrep", "-f", f"janitor-sentinel -{pid}"], capture_output=True, text=True
    ).stdout.split()
    assert left == []


def test_a_reservation_lives_while_its_command_runs_after_its_owner_died(
    vol: Volume,
) -> None:
    """The owner covers the command: a dead supervisor's bytes stay reserved until its command
    is gone too (the moment the command takes to stop)."""
    owner = subprocess.Popen(["sleep", "60"])
    command = subprocess.Popen(["sleep", "60"])
    jan = Janitor.from_settings()
    try:
        r = jan.reserve("t", "4M", owner_pid=owner.pid)
        jan.cover(r.id, command.pid)
        owner.kill()
        owner.wait()
        assert [x.id for x in jan.reservations()] == [r.id]
        assert jan.would_fit("t", "1M").reserved == 4 << 20  # still counted by admission
        command.kill()
        command.wait()
        assert jan.reservations() == []
        assert jan.would_fit("t", "1M").reserved == 0
        assert [e.event for e in jan.log() if e.reservation == r.id] == ["grant", "dead"]
    finally:
        for p in (owner, command):
            if p.poll() is None:
                p.kill()
                p.wait()
        jan.ledger.close()
