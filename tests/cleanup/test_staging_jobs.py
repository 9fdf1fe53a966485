"""A staging tree's live jobs are read from the jobs.db beside it (issue 33 item 6).

batchalign3 stages each server job in ``<state>/jobs/<job_id>`` and records it in
``<state>/jobs.db`` (SQLite in WAL mode, written while we read). Here the staging tree has a
literal path in the policy, in a state folder that is neither the janitor's ``HOME`` nor its
``BATCHALIGN_STATE_DIR`` (those point at another state folder, whose jobs.db says otherwise).
The jobs.db is a real one, with batchalign3's schema, kept mid-write by a real writer process:
committed rows still only in its ``-wal`` file, and a write transaction held open. The real
``janitor sweep``, the real daemon and ``janitor doctor`` run on it; a folder that could be a
live job's must survive, and a jobs.db that cannot be read must keep every folder and be said
once.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from janitor.config.policy import load_policy
from tests._daemon_helpers import daemon_setup, eventually, running_daemon

Cli = Callable[..., subprocess.CompletedProcess[str]]
DAY = 86400.0

#: batchalign3's ``jobs`` table: its first migration (``20260101000000_initial.sql``) and the
#: columns later ones add (``job_retry_state``, ``job_lease_state``).
SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    job_id TEXT PRIMARY KEY, command TEXT NOT NULL, lang TEXT NOT NULL,
    num_speakers INTEGER NOT NULL DEFAULT 1, status TEXT NOT NULL DEFAULT 'queued', error TEXT,
    staging_dir TEXT NOT NULL, filenames TEXT NOT NULL, has_chat TEXT NOT NULL,
    options TEXT NOT NULL DEFAULT '{}', engine_overrides TEXT NOT NULL DEFAULT '{}',
    media_mapping TEXT NOT NULL DEFAULT '', media_subdir TEXT NOT NULL DEFAULT '',
    source_dir TEXT NOT NULL DEFAULT '', submitted_by TEXT NOT NULL DEFAULT '',
    submitted_by_name TEXT NOT NULL DEFAULT '', submitted_at REAL NOT NULL, completed_at REAL,
    num_workers INTEGER, paths_mode INTEGER NOT NULL DEFAULT 0,
    source_paths TEXT NOT NULL DEFAULT '[]', output_paths TEXT NOT NULL DEFAULT '[]',
    correlation_id TEXT NOT NULL DEFAULT '', next_eligible_at REAL, leased_by_node TEXT,
    lease_expires_at REAL, lease_heartbeat_at REAL
);
"""

INSERT = (
    "INSERT OR REPLACE INTO jobs (job_id, command, lang, status, staging_dir, filenames, "
    "has_chat, submitted_at) VALUES (?, 'align', 'eng', ?, ?, '[]', '[]', ?)"
)

#: A process that writes jobs.db as batchalign3's server does (WAL), commits ``committed``
#: without checkpointing (so those rows are only in the -wal file), then opens a write
#: transaction with ``pending`` in it and holds it until its stdin closes.
WRITER = textwrap.dedent(
    """
    import json, sqlite3, sys, time
    db, state = sys.argv[1], json.loads(sys.argv[2])
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA wal_autocheckpoint=0")
    conn.executescript(state["schema"])
    now = time.time()
    conn.execute("BEGIN")
    for job, status in state["committed"]:
        conn.execute(state["insert"], (job, status, state["jobs"] + "/" + job, now - 9 * 86400))
    conn.execute("COMMIT")
    conn.execute("BEGIN IMMEDIATE")
    for job, status in state["pending"]:
        conn.execute(state["insert"], (job, status, state["jobs"] + "/" + job, now))
    print("ready", flush=True)
    sys.stdin.read()
    """
)


@contextmanager
def writing(
    state: Path,
    committed: Sequence[tuple[str, str]],
    pending: Sequence[tuple[str, str]] = (),
) -> Iterator[Path]:
    """``state/jobs.db`` held mid-write by a real process (see :data:`WRITER`)."""
    db = state / "jobs.db"
    state.mkdir(parents=True, exist_ok=True)
    args = {
        "schema": SCHEMA,
        "insert": INSERT,
        "jobs": str(state / "jobs"),
        "committed": list(committed),
        "pending": list(pending),
    }
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(db), json.dumps(args)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        yield db
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(10)


def write_jobs_db(state: Path, rows: Sequence[tuple[str, str]]) -> Path:
    """A plain, committed jobs.db with batchalign3's schema."""
    state.mkdir(parents=True, exist_ok=True)
    db = state / "jobs.db"
    with sqlite3.connect(db) as conn:
        conn.executescript(SCHEMA)
        for job, status in rows:
            conn.execute(INSERT, (job, status, str(state / "jobs" / job), time.time()))
    conn.close()
    return db


def staged(jobs: Path, job: str, *, days: float = 9.0) -> Path:
    """A staging folder with an upload in it, unchanged for ``days``."""
    folder = jobs / job
    folder.mkdir(parents=True, exist_ok=True)
    upload = folder / "upload.wav"
    upload.write_bytes(b"\0" * 4096)
    when = time.time() - days * DAY
    for p in (upload, folder):
        os.utime(p, (when, when))
    return folder


def staging_tree(jobs: Path, **extra: Any) -> dict[str, Any]:
    """A staging tree as the shipped policy has it, at a literal path."""
    return {
        "role": "scratch",
        "path": str(jobs),
        "units": "dir",
        "active_jobs": "batchalign3",
        "min_age": "1h",
        **extra,
    }


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The janitor's own BATCHALIGN_STATE_DIR: another state folder, whose jobs.db holds every
    job of these tests as completed (what a sweep must not go by)."""
    state = tmp_path / "elsewhere"
    ids = ["running", "queued", "retrying", "done", "failed", "cancelled", "interrupted"]
    write_jobs_db(state, [(i, "completed") for i in ids])
    monkeypatch.setenv("BATCHALIGN_STATE_DIR", str(state))
    return state


def sweep(run_cli: Cli, *args: str) -> dict[str, Any]:
    done = run_cli("sweep", "--json", *args)
    assert done.returncode in (0, 1), done.stderr
    assert "Traceback" not in done.stderr
    return dict(json.loads(done.stdout))


def tree_of(result: Mapping[str, Any], name: str) -> dict[str, Any]:
    return dict(next(t for t in result["trees"] if t["tree"] == name))


#: The jobs of a state folder: batchalign3's six states and one it may add (not terminal).
LIVE = [("running", "running"), ("queued", "queued"), ("retrying", "retrying")]
FINISHED = [
    ("done", "completed"),
    ("failed", "failed"),
    ("cancelled", "cancelled"),
    ("interrupted", "interrupted"),
]


def test_the_sweep_reads_the_jobs_db_beside_a_literal_staging_tree_mid_write(
    tmp_path: Path, elsewhere: Path, write_policy: Callable[..., Path], run_cli: Cli
) -> None:
    state = tmp_path / "srv" / "batchalign3"
    jobs = state / "jobs"
    folders = {job: staged(jobs, job) for job, _ in LIVE + FINISHED}
    fresh = staged(jobs, "fresh", days=0)  # its row is not committed yet
    write_policy({"batchalign3_jobs": staging_tree(jobs)})
    pending = [("running", "completed"), ("fresh", "queued")]
    with writing(state, LIVE + FINISHED, pending) as db:
        wal = db.with_name("jobs.db-wal")
        # Mid-write for real: the committed rows are only in the -wal file.
        assert b"retrying" in wal.read_bytes() and b"retrying" not in db.read_bytes()
        before = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in (db, wal)}
        result = sweep(run_cli)
        assert {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in (db, wal)} == before
    gone = {i["path"] for i in result["items"] if i["deleted"]}
    assert gone == {str(folders[job]) for job, _ in FINISHED}, result
    for job, _ in LIVE:
        assert folders[job].exists(), job
    assert fresh.exists()
    assert tree_of(result, "batchalign3_jobs")["kept"] == {"job": 3, "young": 1}
    assert result["warnings"] == []


def test_orphan_age_is_the_job_ttl_days_of_the_server_yaml_beside_the_tree(
    tmp_path: Path, elsewhere: Path, write_policy: Callable[..., Path], run_cli: Cli
) -> None:
    (elsewhere / "server.yaml").write_text("job_ttl_days: 30\n")
    state = tmp_path / "srv" / "batchalign3"
    (state / "jobs").mkdir(parents=True)
    (state / "server.yaml").write_text("job_ttl_days: 3\n")
    write_jobs_db(state, [("old", "completed"), ("recent", "completed")])
    old = staged(state / "jobs", "old", days=5)
    recent = staged(state / "jobs", "recent", days=2)
    policy = write_policy({"batchalign3_jobs": staging_tree(state / "jobs")})
    assert load_policy(policy).trees["batchalign3_jobs"].orphan_age == 3 * DAY
    sweep(run_cli)
    assert not old.exists() and recent.exists()


@contextmanager
def locked(state: Path) -> Iterator[Path]:
    """A jobs.db (rollback journal) whose writer holds an exclusive lock: no reader gets in."""
    db = write_jobs_db(state, [("a", "completed")])
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("BEGIN EXCLUSIVE")
    conn.execute("UPDATE jobs SET status = 'running'")
    try:
        yield db
    finally:
        conn.close()


def test_a_jobs_db_that_cannot_be_read_keeps_every_folder_and_is_said_once(
    tmp_path: Path, elsewhere: Path, write_policy: Callable[..., Path], run_cli: Cli
) -> None:
    srv = tmp_path / "srv"
    (srv / "corrupt").mkdir(parents=True)
    (srv / "corrupt" / "jobs.db").write_bytes(b"not a database" * 100)
    other = sqlite3.connect(srv / "other.db")
    other.execute("CREATE TABLE tasks (id TEXT)")
    other.commit()
    other.close()
    (srv / "foreign").mkdir()
    os.replace(srv / "other.db", srv / "foreign" / "jobs.db")
    cases = ("missing", "corrupt", "foreign", "locked")
    trees = {}
    for case in cases:
        for job in ("running", "done", "failed"):
            staged(srv / case / "jobs", job)
        trees[f"jobs_{case}"] = staging_tree(srv / case / "jobs")
    write_policy(trees)
    with locked(srv / "locked"):
        result = sweep(run_cli)
        human = run_cli("sweep")
    assert not [i for i in result["items"] if i["deleted"]], result["items"]
    for case in cases:
        for job in ("running", "done", "failed"):
            assert (srv / case / "jobs" / job).exists(), (case, job)
        assert tree_of(result, f"jobs_{case}")["kept"] == {"job": 3}
        db = str(srv / case / "jobs.db")
        said = [w for w in result["warnings"] if db in w]
        assert len(said) == 1, result["warnings"]
        assert f"tree 'jobs_{case}': " in said[0] and "kept 3 staging folders" in said[0]
        assert len([ln for ln in human.stderr.splitlines() if db in ln]) == 1, human.stderr
    assert len(result["warnings"]) == len(cases)
    why = {case: next(w for w in result["warnings"] if f"'jobs_{case}'" in w) for case in cases}
    assert "does not exist" in why["missing"]
    assert "not a database" in why["corrupt"]
    assert "no jobs table" in why["foreign"]
    assert "locked" in why["locked"]


def test_the_daemon_keeps_live_jobs_folders_and_logs_an_unreadable_jobs_db_once(
    tmp_path: Path,
) -> None:
    live_state = tmp_path / "srv" / "a"
    broken_state = tmp_path / "srv" / "b"
    live = {job: staged(live_state / "jobs", job) for job, _ in LIVE + FINISHED}
    broken = {job: staged(broken_state / "jobs", job) for job in ("running", "done")}
    (broken_state / "jobs.db").write_bytes(b"not a database" * 100)
    elsewhere = tmp_path / "elsewhere"
    write_jobs_db(elsewhere, [(job, "completed") for job, _ in LIVE + FINISHED])
    settings = {"JANITOR_SWEEP_INTERVAL_S": "0.3"}
    with daemon_setup(tmp_path, settings=settings) as setup:
        setup.trees["jobs_a"] = staging_tree(live_state / "jobs")
        setup.trees["jobs_b"] = staging_tree(broken_state / "jobs")
        setup.write_policy()
        env = {"BATCHALIGN_STATE_DIR": str(elsewhere)}
        with writing(live_state, LIVE + FINISHED), running_daemon(setup, extra_env=env) as d:
            sweeps: set[float] = set()

            def swept(n: int) -> bool:
                trees = {t["name"]: t for t in (d.status_json() or {}).get("trees", [])}
                if "jobs_a" in trees and trees["jobs_a"]["last_sweep"]:
                    sweeps.add(trees["jobs_a"]["last_sweep"])
                return len(sweeps) >= n

            eventually(lambda: swept(4), timeout=30, what="four sweeps of the staging trees")
            for job, _ in FINISHED:
                assert not live[job].exists(), job
            for job, _ in LIVE:
                assert live[job].exists(), job
            assert all(p.exists() for p in broken.values())
            log = setup.log_file.read_text()
            db = str(broken_state / "jobs.db")
            said = [ln for ln in log.splitlines() if db in ln]
            assert len(said) == 1, log
            assert "tree 'jobs_b'" in said[0] and "kept 2 staging folders" in said[0]
            assert str(live_state / "jobs.db") not in log

            # Made readable: said once more, then its folders go by it.
            write_jobs_db(broken_state.parent / "b-new", [("running", "running")])
            os.replace(broken_state.parent / "b-new" / "jobs.db", broken_state / "jobs.db")
            eventually(lambda: not broken["done"].exists(), timeout=30, what="done removed")
            sweeps.clear()
            eventually(lambda: swept(2), timeout=30, what="two sweeps more")
        assert broken["running"].exists()
        log = setup.log_file.read_text()
        said = [ln for ln in log.splitlines() if db in ln]
        assert len(said) == 2 and re.search(r"can be read again", said[1]), log


def test_doctor_names_the_jobs_db_each_staging_tree_goes_by_and_whether_it_reads(
    tmp_path: Path, elsewhere: Path, write_policy: Callable[..., Path], run_cli: Cli
) -> None:
    srv = tmp_path / "srv"
    for job in ("running", "done"):
        staged(srv / "a" / "jobs", job)
        staged(srv / "b" / "jobs", job)
    (srv / "a" / "server.yaml").write_text("job_ttl_days: 3\n")
    (srv / "b" / "jobs.db").write_bytes(b"not a database" * 100)
    write_policy(
        {"jobs_a": staging_tree(srv / "a" / "jobs"), "jobs_b": staging_tree(srv / "b" / "jobs")}
    )
    with writing(srv / "a", [("running", "running"), ("done", "completed")]):
        done = run_cli("doctor", "--json")
    assert "Traceback" not in done.stderr
    checks = {c["name"]: c for c in json.loads(done.stdout)}
    a, b = checks["staging jobs_a"], checks["staging jobs_b"]
    assert a["verdict"] == "ok", a
    assert f"jobs from {srv / 'a' / 'jobs.db'};" in a["message"]
    assert f"job_ttl_days 3 in {srv / 'a' / 'server.yaml'}" in a["message"]
    assert "1 folder of unfinished jobs kept" in a["message"]
    assert b["verdict"] == "warn", b
    assert f"jobs from {srv / 'b' / 'jobs.db'};" in b["message"]
    assert "not a database" in b["message"] and "kept 2 staging folders" in b["message"]
    assert "jobs.db" in b["fix"]
    assert str(elsewhere) not in a["message"] + b["message"]
