"""A command that only reads answers when the ledger's disk is full (#33 item 7), for real: the
state dir on a small tmpfs, a ledger with rows made by the real console script, the tmpfs then
filled until it says ENOSPC; ``janitor status``, ``status --json`` and ``log`` must answer with
what the ledger holds (exit 0), with the daemon stopped and with it running, while a write
(``janitor reserve``) still fails cleanly (one line, exit 75) and the file is left as it was.

Opening a WAL database writes even to read it (its ``-shm`` file is sized first), so before this
every read on a full disk failed, as ``sqlite3 -readonly`` fails there (see
``janitor.ledger.snapshot``).
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests._daemon_helpers import daemon_setup, running_daemon
from tests._fixtures.console import one_line_error
from tests._fixtures.space import free_of

Cli = Callable[..., subprocess.CompletedProcess[str]]

FULL_NOTE = "note: the ledger's disk is full"


def _ok(done: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert done.returncode == 0, f"exit {done.returncode}: {done.stdout}{done.stderr}"
    return done


def _rows(run: Cli) -> tuple[str, list[int]]:
    """Three reservations (two released), owned by this process; the live one's id and the
    log's ids."""
    me = str(os.getpid())
    ids = []
    for size in ("1M", "2M", "512K"):
        done = _ok(run("reserve", "cache", size, "--owner-pid", me, "--ttl", "1h", "--json"))
        ids.append(json.loads(done.stdout)["id"])
    for rid in ids[1:]:
        _ok(run("release", rid))
    log = json.loads(_ok(run("log", "--json")).stdout)
    assert [e["event"] for e in log] == ["grant", "grant", "grant", "release", "release"]
    return ids[0], [e["id"] for e in log]


def _answers_as_recorded(run: Cli, live: str, log_ids: list[int], *, note: bool) -> None:
    """status (both ways) and log (both ways) exit 0 with what the ledger holds."""
    done = _ok(run("status", "--json"))
    data = json.loads(done.stdout)
    assert [r["id"] for r in data["reservations"]] == [live]
    assert [r["bytes"] for r in data["reservations"]] == [1 << 20]
    if note:
        assert one_line_error(done.stderr).startswith(f"janitor: {FULL_NOTE}")
    table = _ok(run("status"))
    assert live in table.stdout and "Volumes" in table.stdout
    log = json.loads(_ok(run("log", "--json")).stdout)
    assert [e["id"] for e in log] == log_ids
    lines = _ok(run("log")).stdout.splitlines()
    assert len(lines) == len(log_ids) and live in lines[0] and "grant" in lines[0]


def _write_fails_cleanly(run: Cli) -> None:
    done = run("reserve", "cache", "1M")
    assert done.returncode == 75, f"exit {done.returncode}: {done.stdout}{done.stderr}"
    assert done.stdout == ""
    assert "disk is full" in one_line_error(done.stderr)


@pytest.mark.parametrize("daemon", [False, True], ids=["daemon stopped", "daemon running"])
def test_status_and_log_answer_on_a_full_state_disk(
    daemon: bool,
    tmp_path: Path,
    tmpfs: Callable[..., Path],
    fill_until_full: Callable[[Path], int],
) -> None:
    state_mount = tmpfs("1m", name="state")
    state = state_mount / "state"
    with daemon_setup(tmp_path / "d", settings={"JANITOR_STATE_DIR": str(state)}) as setup:
        run = setup.run_cli
        live, log_ids = _rows(run)
        ledger = state / "ledger.sqlite3"
        before = ledger.read_bytes()
        if daemon:
            with running_daemon(setup):
                assert fill_until_full(state_mount / "filler") > 0
                assert free_of(state_mount) < 4096
                # Its connection keeps the -shm sized: read the usual way (no note).
                _answers_as_recorded(run, live, log_ids, note=False)
                _write_fails_cleanly(run)
            return
        assert not ledger.with_name("ledger.sqlite3-wal").exists()  # folded at the last close
        assert fill_until_full(state_mount / "filler") > 0
        assert free_of(state_mount) < 4096
        _answers_as_recorded(run, live, log_ids, note=True)
        _write_fails_cleanly(run)
        _answers_as_recorded(run, live, log_ids, note=True)  # after a failed write too
        # doctor names the full disk, and never tells to move an intact ledger aside.
        checks = {c["name"]: c for c in json.loads(run("doctor", "--json").stdout)}
        assert checks["ledger"]["verdict"] == "fail", checks["ledger"]
        assert "is full" in checks["ledger"]["message"]
        assert "move the file aside" not in checks["ledger"]["fix"]
        assert ledger.read_bytes() == before  # nothing was written, not even an upgrade
        (state_mount / "filler").unlink()
        # Space back: read the usual way again, and writes work.
        done = _ok(run("status", "--json"))
        assert FULL_NOTE not in done.stderr
        assert [r["id"] for r in json.loads(done.stdout)["reservations"]] == [live]
        _ok(run("reserve", "cache", "1M"))


def test_an_older_ledger_or_none_is_read_on_a_full_disk_without_being_written(
    tmp_path: Path, tmpfs: Callable[..., Path], fill_until_full: Callable[[Path], int]
) -> None:
    """A schema-3 ledger is read upgraded in memory (its file untouched, upgraded once space is
    back); a state dir with no ledger yet reads as an empty one."""
    state_mount = tmpfs("1m", name="state")
    state = state_mount / "state"
    with daemon_setup(tmp_path / "d", settings={"JANITOR_STATE_DIR": str(state)}) as setup:
        run = setup.run_cli
        live, _ = _rows(run)
        ledger = state / "ledger.sqlite3"
        conn = sqlite3.connect(ledger, isolation_level=None)
        try:  # back to schema 3 (before jobs); closed, so its WAL is folded into the file
            conn.execute("DROP TABLE draws")
            conn.execute("ALTER TABLE pins DROP COLUMN unit")
            conn.execute("ALTER TABLE pins DROP COLUMN kind")
            for table in ("jobs", "job_writers", "job_sources", "waiters"):
                conn.execute(f"DROP TABLE {table}")
            conn.execute("ALTER TABLE reservations DROP COLUMN job_id")
            conn.execute("PRAGMA user_version = 3")
        finally:
            conn.close()
        before = ledger.read_bytes()
        fill_until_full(state_mount / "filler")
        data: dict[str, Any] = json.loads(_ok(run("status", "--json")).stdout)
        assert [r["id"] for r in data["reservations"]] == [live] and data["jobs"] == []
        assert ledger.read_bytes() == before
        empty = state_mount / "empty"
        done = _ok(run("status", "--json", JANITOR_STATE_DIR=str(empty)))
        assert json.loads(done.stdout)["reservations"] == []
        assert _ok(run("log", JANITOR_STATE_DIR=str(empty))).stdout == ""
        (state_mount / "filler").unlink()
        _ok(run("status"))
        conn = sqlite3.connect(ledger)
        try:
            assert conn.execute("PRAGMA user_version").fetchone()[0] == 5
        finally:
            conn.close()


def test_status_and_log_answer_on_a_read_only_state_dir(
    tmp_path: Path, tmpfs: Callable[..., Path], remount_tmpfs: Callable[[Path, str], None]
) -> None:
    """Remounted read-only: read as it lies, no note (nothing is full); a write is refused,
    exit 2, naming the ledger (what it always did)."""
    state_mount = tmpfs("1m", name="state")
    state = state_mount / "state"
    with daemon_setup(tmp_path / "d", settings={"JANITOR_STATE_DIR": str(state)}) as setup:
        run = setup.run_cli
        live, log_ids = _rows(run)
        remount_tmpfs(state_mount, "ro")
        _answers_as_recorded(run, live, log_ids, note=False)
        assert FULL_NOTE not in _ok(run("status")).stderr
        done = run("reserve", "cache", "1M")
        assert done.returncode == 2 and str(state / "ledger.sqlite3") in one_line_error(done.stderr)
        # A state dir that cannot be made there is still one line and exit 2, not an empty read.
        done = run("status", JANITOR_STATE_DIR=str(state_mount / "none"))
        assert done.returncode == 2 and str(state_mount / "none") in one_line_error(done.stderr)
