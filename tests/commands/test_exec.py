"""`janitor exec`: the real console script running real child processes on a real tmpfs.

Each test mounts a small tmpfs with one cache tree ``t`` (``managed_volume``); the ledger stays in
the isolated state dir off the tmpfs. After every case no live reservation may remain: `janitor
status --json` lists none, and the ledger's log shows each grant ended by a *release* (not by the
reaper noticing a dead owner or a lapsed TTL).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests._fixtures import forkserver
from tests._fixtures.console import JANITOR_BIN, one_line_error
from tests._fixtures.space import MiB
from tests._fixtures.volumes import Volume

Cli = Callable[..., subprocess.CompletedProcess[str]]
MakeVolume = Callable[..., Volume]

PY = sys.executable

#: A writer that grows a file step by step, then leaves a marker (outside the tree) if it got
#: to the end: ``grow.py OUT TOTAL STEP PAUSE DONE_MARKER``.
GROWER = textwrap.dedent(
    """
    import os, sys, time
    out, done = sys.argv[1], sys.argv[5]
    total, step, pause = int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
    block = os.urandom(step)
    written = 0
    with open(out, "wb") as fh:
        while written < total:
            fh.write(block)
            fh.flush()
            written += step
            time.sleep(pause)
    with open(done, "w") as fh:
        fh.write(str(written))
    """
)

#: A child that traps signals: writes the signal's name to a marker and exits 7.
TRAPPER = textwrap.dedent(
    """
    import signal, sys, time
    marker = sys.argv[1]
    def handler(signum, frame):
        with open(marker, "w") as fh:
            fh.write(signal.Signals(signum).name)
        sys.exit(7)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1):
        signal.signal(sig, handler)
    print("ready", flush=True)
    time.sleep(60)
    sys.exit(9)
    """
)


def log_entries() -> list[dict[str, Any]]:
    """The ledger's log, read with the library the CLI uses (no extra process per check)."""
    from janitor import Janitor

    jan = Janitor.from_settings()
    try:
        return [
            {
                "event": e.event,
                "reservation": e.reservation,
                "path": e.path,
                "bytes": e.bytes,
                "tree": e.tree,
            }
            for e in jan.log()
        ]
    finally:
        jan.ledger.close()


def assert_nothing_left(run_cli: Cli | None = None) -> list[dict[str, Any]]:
    """No live reservation, and every grant in the log was released (not reaped).

    With ``run_cli`` the live list is read through `janitor status --json`; otherwise in-process.
    """
    from janitor import Janitor

    if run_cli is not None:
        done = run_cli("status", "--json")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["reservations"] == []
    jan = Janitor.from_settings()
    try:
        assert jan.status(with_usage=False).as_dict()["reservations"] == []
    finally:
        jan.ledger.close()
    entries = log_entries()
    granted = {e["reservation"] for e in entries if e["event"] == "grant"}
    released = {e["reservation"] for e in entries if e["event"] == "release"}
    reaped = [e for e in entries if e["event"] in ("dead", "expired")]
    assert granted == released, entries
    assert reaped == [], reaped
    return entries


def grants(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in entries if e["event"] == "grant"]


@pytest.fixture
def vol(managed_volume: MakeVolume) -> Volume:
    """A 64 MiB tmpfs, floor 8 MiB, cache tree ``t``."""
    return managed_volume(size="64m", floor="8MiB", quota="32MiB")


# -- the child's environment and exit code -------------------------------------------------------


def test_child_gets_the_reservation_id(vol: Volume, run_cli: Cli) -> None:
    out = vol.tree / "out.bin"
    code = textwrap.dedent(
        """
        import json, os
        from janitor import Janitor
        print(os.environ["JANITOR_RESERVATION"])
        live = Janitor.from_settings().reservations()
        print(json.dumps([[r.id, r.path, r.owner_pid, r.state] for r in live]))
        print(os.getppid())
        """
    )
    done = run_cli("exec", "t", "1M", "--path", out, "--job", "idtest", "--", PY, "-c", code)
    assert done.returncode == 0, done.stderr
    rid, live, parent = done.stdout.splitlines()
    assert rid.startswith("r-")
    # while the child runs, its reservation is live, on its path, owned by janitor exec
    assert json.loads(live) == [[rid, str(out), int(parent), "live"]]
    entries = assert_nothing_left(run_cli)
    (grant,) = grants(entries)
    assert grant["reservation"] == rid
    assert grant["path"] == str(out)
    assert grant["bytes"] == MiB
    assert grant["tree"] == "t"
    release = [e for e in entries if e["event"] == "release"]
    assert [e["reservation"] for e in release] == [rid]


@pytest.mark.parametrize(("script", "expected"), [("exit 3", 3), ("exit 42", 42)])
def test_child_exit_code_is_passed_on(
    vol: Volume, run_cli: Cli, script: str, expected: int
) -> None:
    done = run_cli("exec", "t", "1M", "--path", vol.tree / "o", "--", "sh", "-c", script)
    assert done.returncode == expected, done.stderr
    assert "Traceback" not in done.stderr
    assert_nothing_left()


def test_child_killed_by_a_signal_exits_128_plus_n(vol: Volume, run_cli: Cli) -> None:
    done = run_cli("exec", "t", "1M", "--path", vol.tree / "o", "--", "sh", "-c", "kill -9 $$")
    assert done.returncode == 128 + signal.SIGKILL, done.stderr
    assert_nothing_left()


def test_cleanup_on_fail_removes_output_of_a_failed_command(vol: Volume, run_cli: Cli) -> None:
    out = vol.tree / "partial.bin"
    script = f"head -c 100000 /dev/zero > '{out}'; exit 3"
    kept = run_cli("exec", "t", "1M", "--path", out, "--", "sh", "-c", script)
    assert kept.returncode == 3, kept.stderr
    assert out.stat().st_size == 100_000  # without the flag, partial output stays
    out.unlink()
    cleaned = run_cli(
        "exec", "t", "1M", "--path", out, "--cleanup-on-fail", "--", "sh", "-c", script
    )
    assert cleaned.returncode == 3, cleaned.stderr
    assert not out.exists()
    ok = run_cli(
        "exec", "t", "1M", "--path", out, "--cleanup-on-fail", "--", "sh", "-c", f"echo x > '{out}'"
    )
    assert ok.returncode == 0, ok.stderr
    assert out.read_text() == "x\n"  # success: the output is kept
    assert_nothing_left()


# -- output that outgrows its reservation ----------------------------------------------------------


def test_output_past_its_reservation_is_stopped(vol: Volume, run_cli: Cli, tmp_path: Path) -> None:
    out = vol.tree / "grow.bin"
    script = tmp_path / "grow.py"
    script.write_text(GROWER)
    done_marker = tmp_path / "grow.done"
    total = 16 * MiB
    done = run_cli(
        "exec", "t", "1M", "--path", out, "--poll", "20ms", "--",
        PY, script, out, str(total), str(128 * 1024), "0.02", done_marker,
    )  # fmt: skip
    assert done.returncode == 75, done.stdout + done.stderr
    line = one_line_error(done.stderr)
    assert "stopped" in line and "reservation" in line, line
    assert not done_marker.exists(), "the writer ran to the end: it was not stopped"
    size = out.stat().st_size  # without --cleanup-on-fail the partial output stays
    assert MiB * 1.1 < size < total
    assert_nothing_left()


def test_output_within_the_margin_is_not_stopped(vol: Volume, run_cli: Cli, tmp_path: Path) -> None:
    out = vol.tree / "grow.bin"
    script = tmp_path / "grow.py"
    script.write_text(GROWER)
    done_marker = tmp_path / "grow.done"
    # 1 MiB + 5 %: inside the default 10 % margin; the pause lets several polls see it
    done = run_cli(
        "exec", "t", "1M", "--path", out, "--poll", "20ms", "--",
        PY, script, out, str(MiB + MiB // 20), str(MiB + MiB // 20), "0.5", done_marker,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done_marker.exists()
    assert_nothing_left()


def test_grow_extends_the_reservation(vol: Volume, run_cli: Cli, tmp_path: Path) -> None:
    out = vol.tree / "grow.bin"
    script = tmp_path / "grow.py"
    script.write_text(GROWER)
    done_marker = tmp_path / "grow.done"
    total = 6 * MiB
    done = run_cli(
        "exec", "t", "1M", "--path", out, "--poll", "20ms", "--grow", "--",
        PY, script, out, str(total), str(128 * 1024), "0.02", done_marker,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done_marker.exists()
    assert out.stat().st_size == total
    assert "grown" in done.stderr
    entries = assert_nothing_left()
    (grant,) = grants(entries)
    grows = [e for e in entries if e["event"] == "grow"]
    assert grows, entries
    assert {e["reservation"] for e in grows} == {grant["reservation"]}
    assert max(e["bytes"] for e in grows) > MiB


def test_grow_that_cannot_fit_stops_the_command(
    managed_volume: MakeVolume, run_cli: Cli, tmp_path: Path
) -> None:
    """--grow on a volume with no room left for more: stopped (75) before the disk fills."""
    vol = managed_volume(size="32m", floor="8MiB", quota="16MiB")
    out = vol.tree / "grow.bin"
    script = tmp_path / "grow.py"
    script.write_text(GROWER)
    done_marker = tmp_path / "grow.done"
    total = 40 * MiB  # more than the volume holds: unstopped, the writer would hit ENOSPC
    done = run_cli(
        "exec", "t", "2M", "--path", out, "--poll", "20ms", "--grow", "--",
        PY, script, out, str(total), str(256 * 1024), "0.01", done_marker,
    )  # fmt: skip
    assert done.returncode == 75, done.stdout + done.stderr
    assert "cannot grow" in done.stderr
    assert "ENOSPC" not in done.stderr and "No space left" not in done.stderr
    assert not done_marker.exists()
    assert vol.free() > 0
    assert_nothing_left()


#: Like GROWER, but ignores SIGTERM (as a stuck writer might) and records its pid first.
STUBBORN = (
    "import os, signal, sys\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    + ("open(sys.argv[6], 'w').write(str(os.getpid()))\n")
    + GROWER
)


def test_a_child_that_ignores_sigterm_is_killed_after_the_grace(
    vol: Volume, run_cli: Cli, tmp_path: Path
) -> None:
    out = vol.tree / "grow.bin"
    script = tmp_path / "stubborn.py"
    script.write_text(STUBBORN)
    done_marker, pid_file = tmp_path / "grow.done", tmp_path / "pid"
    done = run_cli(
        "exec", "t", "1M", "--path", out, "--poll", "20ms", "--grace", "500ms", "--",
        PY, script, out, str(16 * MiB), str(128 * 1024), "0.02", done_marker, pid_file,
    )  # fmt: skip
    assert done.returncode == 75, done.stdout + done.stderr
    assert "stopped" in done.stderr
    assert not done_marker.exists()
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # SIGKILLed and reaped by janitor exec
    assert_nothing_left()


def test_a_long_command_keeps_its_reservation_renewed(vol: Volume, run_cli: Cli) -> None:
    """A TTL shorter than the command: renewed while it runs, released (not expired) after."""
    done = run_cli(
        "exec", "t", "1M", "--path", vol.tree / "o", "--ttl", "1s", "--poll", "50ms", "--",
        "sleep", "2",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    entries = assert_nothing_left()  # fails on an 'expired' entry
    (grant,) = grants(entries)
    renews = [e for e in entries if e["event"] == "renew"]
    assert renews and {e["reservation"] for e in renews} == {grant["reservation"]}


# -- signals ---------------------------------------------------------------------------------------


def _start_exec(vol: Volume, *command: str | os.PathLike[str]) -> subprocess.Popen[str]:
    return forkserver.JanitorPopen(
        [str(JANITOR_BIN), "exec", "t", "1M", "--path", str(vol.tree / "o"), "--",
         *(os.fspath(c) for c in command)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGUSR1])
def test_a_signal_to_janitor_exec_reaches_the_child(
    vol: Volume, run_cli: Cli, tmp_path: Path, sig: signal.Signals
) -> None:
    script = tmp_path / "trap.py"
    script.write_text(TRAPPER)
    marker = tmp_path / "trapped"
    proc = _start_exec(vol, PY, script, marker)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready", proc.stderr and proc.stderr.read()
        proc.send_signal(sig)  # to janitor exec, not to the child
        try:
            code = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            # Once seen in a CI pass (SIGINT, the portable mode): say what each side did.
            proc.kill()
            proc.wait()
            trapped = marker.read_text() if marker.exists() else "nothing"
            said = proc.stderr.read() if proc.stderr else ""
            pytest.fail(
                f"janitor exec still ran 30 s after {sig.name}; the child trapped {trapped}; "
                f"its stderr: {said}"
            )
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        stderr = proc.stderr.read() if proc.stderr else ""
    assert marker.read_text() == sig.name, stderr
    assert code == 7, stderr  # the child's own exit code, passed on
    assert_nothing_left()


def test_sigterm_kills_an_untrapping_child_and_exit_says_so(
    vol: Volume, run_cli: Cli, tmp_path: Path
) -> None:
    ready = tmp_path / "ready"
    proc = _start_exec(vol, "sh", "-c", f"touch '{ready}'; exec sleep 60")
    try:
        deadline = time.monotonic() + 30
        while not ready.exists():
            assert proc.poll() is None, proc.stderr and proc.stderr.read()
            assert time.monotonic() < deadline, "the child never started"
            time.sleep(0.01)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == 128 + signal.SIGTERM
    assert_nothing_left()


# -- bad input: exit 2, one line, nothing run, nothing reserved -----------------------------------


def test_missing_command_exits_2(vol: Volume, run_cli: Cli) -> None:
    done = run_cli("exec", "t", "1M", "--path", vol.tree / "o", "--", "no-such-command-xyz", "-v")
    assert done.returncode == 2
    assert "no-such-command-xyz" in one_line_error(done.stderr)
    entries = assert_nothing_left()
    assert grants(entries) == []


@pytest.mark.parametrize("kind", ["not-executable", "folder", "garbage-executable"])
def test_a_command_that_cannot_be_run_exits_2(
    vol: Volume, run_cli: Cli, tmp_path: Path, kind: str
) -> None:
    """It exists but cannot be executed: bad input (one line, exit 2), not a traceback."""
    if kind == "folder":
        command = tmp_path / "adir"
        command.mkdir()
    else:
        command = tmp_path / "prog"
        command.write_bytes(b"\x00\x01garbage, no shebang, no ELF header\n")
        command.chmod(0o755 if kind == "garbage-executable" else 0o644)
    done = run_cli("exec", "t", "1M", "--path", vol.tree / "o", "--", command)
    assert done.returncode == 2, done.stderr.strip().splitlines()[-1:]
    assert command.name in one_line_error(done.stderr)
    assert_nothing_left()


def test_path_outside_the_tree_exits_2(vol: Volume, run_cli: Cli, tmp_path: Path) -> None:
    ran = tmp_path / "ran"
    outside = vol.mount / "not-in-tree.wav"
    for where in (outside, tmp_path / "elsewhere.wav", vol.tree):
        done = run_cli("exec", "t", "1M", "--path", where, "--", "touch", ran)
        assert done.returncode == 2, (where, done.stderr)
        one_line_error(done.stderr)
        assert not ran.exists(), "the command ran although its --path was refused"
    entries = assert_nothing_left()
    assert grants(entries) == []


@pytest.mark.parametrize(
    "args",
    [
        ("nosuchtree", "1M"),
        ("t", "lots"),
        ("t", "1M", "--poll", "soon"),
        ("t", "1M", "--margin", "much"),
    ],
)
def test_bad_arguments_exit_2(
    vol: Volume, run_cli: Cli, tmp_path: Path, args: tuple[str, ...]
) -> None:
    ran = tmp_path / "ran"
    done = run_cli("exec", *args, "--path", vol.tree / "o", "--", "touch", ran)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert not ran.exists()
    assert grants(assert_nothing_left()) == []
