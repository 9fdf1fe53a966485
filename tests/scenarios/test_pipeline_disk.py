"""The rest of batchalign3's disk in the shipped policy: logs, job staging, diarization temp,
models and the analysis cache, on real files under the test's HOME and TMPDIR.

The shipped ``policies/batchalign3.toml`` is used as it is (``JANITOR_POLICY`` points at it),
with the real ``janitor sweep``; batchalign3's ``server.yaml`` and ``jobs.db`` are real files
in its state folder, made as batchalign3 makes them.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from janitor.config.policy import load_policy
from janitor.errors import PolicyError

Cli = Callable[..., subprocess.CompletedProcess[str]]

SHIPPED = Path(__file__).resolve().parents[2] / "policies" / "batchalign3.toml"
DAY = 86400.0


@pytest.fixture(autouse=True)
def shipped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JANITOR_POLICY", str(SHIPPED))


def state() -> Path:
    return Path.home() / ".batchalign3"


def put(path: Path, data: bytes = b"x" * 1000, *, age_days: float = 0.0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    age(path, age_days)
    return path


def age(path: Path, days: float) -> None:
    when = time.time() - days * DAY
    os.utime(path, (when, when), follow_symlinks=False)


def sweep(run_cli: Cli, *args: str) -> dict[str, Any]:
    done = run_cli("sweep", "--json", *args)
    assert done.returncode in (0, 1), done.stderr
    assert "Traceback" not in done.stderr
    return dict(json.loads(done.stdout))


def test_logs_go_after_14_days_never_one_open_and_nothing_else_of_the_state_folder(
    run_cli: Cli,
) -> None:
    s = state()
    old_daily = put(s / "server.log.2026-11-01", age_days=20)
    new_daily = put(s / "server.log.2026-12-01", age_days=4)
    open_daily = put(s / "server.log.2026-11-02", age_days=20)
    old_run = put(s / "logs" / "run-1.jsonl", age_days=30)
    old_bug = put(s / "bug-reports" / "b1.json", age_days=30)
    config = put(s / "server.yaml", b"port: 8123\n", age_days=100)
    pid = put(s / "server.pid", b"1\n", age_days=100)
    with open(open_daily, "rb"):  # a server still writing it: never deleted
        age(open_daily, 20)
        result = sweep(run_cli)
    gone = {i["path"] for i in result["items"] if i["deleted"]}
    assert gone == {str(old_daily), str(old_run), str(old_bug)}, result["items"]
    for kept in (new_daily, open_daily, config, pid):
        assert kept.exists(), kept


def write_jobs_db(rows: list[tuple[str, str]]) -> Path:
    db = state() / "jobs.db"
    db.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(db) as conn:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS jobs (job_id TEXT PRIMARY KEY, command TEXT NOT NULL "
            "DEFAULT '', status TEXT NOT NULL DEFAULT 'queued', staging_dir TEXT NOT NULL "
            "DEFAULT '', submitted_at REAL NOT NULL DEFAULT 0)"
        )
        conn.executemany("INSERT INTO jobs (job_id, status) VALUES (?, ?)", rows)
    return db


def staged(job: str, days: float) -> Path:
    folder = state() / "jobs" / job
    put(folder / "upload.wav", b"\0" * 4096, age_days=days)
    age(folder, days)
    return folder


def test_staging_goes_after_job_ttl_days_never_a_running_jobs(run_cli: Cli) -> None:
    done_old = staged("done-old", 9)
    running_old = staged("running-old", 9)
    queued_old = staged("queued-old", 9)
    recent = staged("recent", 3)
    write_jobs_db([("done-old", "completed"), ("running-old", "running"), ("queued-old", "queued")])
    result = sweep(run_cli)
    assert not done_old.exists()
    assert running_old.exists() and queued_old.exists() and recent.exists()
    tree = next(t for t in result["trees"] if t["tree"] == "batchalign3_jobs")
    assert tree["kept"].get("job") == 2, tree


def test_staging_follows_server_yaml_job_ttl_days(run_cli: Cli) -> None:
    put(state() / "server.yaml", b"job_ttl_days: 30\n")
    kept = staged("nine-days", 9)
    gone = staged("forty-days", 40)
    write_jobs_db([("nine-days", "completed"), ("forty-days", "completed")])
    sweep(run_cli)
    assert kept.exists() and not gone.exists()


def test_staging_with_an_unreadable_jobs_db_keeps_every_folder_and_says_so(run_cli: Cli) -> None:
    db = put(state() / "jobs.db", b"not a database")
    old = staged("old", 9)
    result = sweep(run_cli)
    assert old.exists()
    assert [w for w in result["warnings"] if str(db) in w] == [
        f"tree 'batchalign3_jobs': {db} cannot be read: file is not a database; kept 1 staging "
        "folder, as any could be a queued or running job's; batchalign3 keeps jobs.db in its "
        "state folder beside jobs/: point the tree at that jobs/ folder, or make jobs.db readable"
    ]


def test_diarization_and_cantonese_temp_are_orphans_by_age_other_tmp_folders_stay(
    run_cli: Cli,
) -> None:
    tmp = Path(os.environ["TMPDIR"])
    nemo = put(tmp / "tmpa1b2c3d4" / "mono_file.wav", age_days=2).parent
    prepared = put(tmp / "tmpz9y8x7w6" / "prepared_audio.wav", age_days=2).parent
    aliyun = put(tmp / "batchalign-hk-aliyun-x1" / "talk.wav", age_days=2).parent
    theirs = put(tmp / "tmpqqqqqqqq" / "report.pdf", age_days=2).parent
    fresh = put(tmp / "tmpfresh000" / "prepared_audio.wav").parent
    for folder in (nemo, prepared, aliyun, theirs):
        age(folder, 2)
    result = sweep(run_cli)
    gone = {p.name: not p.exists() for p in (nemo, prepared, aliyun)}
    assert all(gone.values()), (gone, result)
    assert theirs.exists() and fresh.exists()


def test_models_and_the_analysis_cache_are_reported_never_deleted(run_cli: Cli) -> None:
    hub = Path.home() / ".cache" / "huggingface" / "hub"
    blob = put(
        hub / "models--openai--whisper-tiny" / "blobs" / "ab12", b"\1" * 300_000, age_days=400
    )
    stanza = put(
        Path.home() / "stanza_resources" / "en" / "default.zip", b"\2" * 200_000, age_days=400
    )
    xdg = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    db = put(xdg / "batchalign3" / "cache.db", b"\3" * 100_000, age_days=400)
    result = sweep(run_cli)
    assert blob.exists() and stanza.exists() and db.exists()
    assert not [i for i in result["items"] if i["tree"] in ("hf_hub", "stanza", "analysis_cache")]
    status = json.loads(run_cli("status", "--json").stdout)
    usage = {t["name"]: t for t in status["trees"]}
    assert usage["hf_hub"]["role"] == "report" and usage["hf_hub"]["usage"] >= 300_000
    assert usage["stanza"]["usage"] >= 200_000
    assert usage["analysis_cache"]["usage"] >= 100_000


def test_the_shipped_paths_follow_batchalign3s_and_hugging_faces_variables(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    home = Path.home()
    trees = load_policy(SHIPPED).trees
    assert trees["batchalign3_logs"].path == home / ".batchalign3"
    assert trees["batchalign3_jobs"].path == home / ".batchalign3" / "jobs"
    assert trees["hf_hub"].path == home / ".cache" / "huggingface" / "hub"
    assert trees["stanza"].path == home / "stanza_resources"
    assert trees["batchalign3_jobs"].orphan_age == 7 * DAY
    monkeypatch.setenv("BATCHALIGN_STATE_DIR", str(tmp_path / "ba"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("STANZA_RESOURCES_DIR", str(tmp_path / "st"))
    trees = load_policy(SHIPPED).trees
    assert trees["batchalign3_jobs"].path == tmp_path / "ba" / "jobs"
    assert trees["hf_hub"].path == tmp_path / "hf" / "hub"
    assert trees["stanza"].path == tmp_path / "st"
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub-here"))
    assert load_policy(SHIPPED).trees["hf_hub"].path == tmp_path / "hub-here"


# -- the policy keys that make this possible ------------------------------------------------------


def policy_file(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "p.toml"
    path.write_text('[volume]\nfloor = "1MiB"\n' + body)
    return path


def test_a_report_tree_refuses_a_quota(tmp_path: Path, run_cli: Cli) -> None:
    path = policy_file(
        tmp_path, f'[trees.m]\nrole = "report"\npath = "{tmp_path}/m"\nquota = "1GiB"\n'
    )
    with pytest.raises(PolicyError, match="report tree is measured, never deleted"):
        load_policy(path)
    done = run_cli("policy", "validate", path)
    assert done.returncode == 2 and "Traceback" not in done.stderr


def test_trees_may_nest_only_where_the_outer_one_leaves_the_inner_out(tmp_path: Path) -> None:
    inner = f'[trees.inner]\nrole = "scratch"\npath = "{tmp_path}/a/jobs"\nunits = "dir"\n'
    outer = f'[trees.outer]\nrole = "scratch"\npath = "{tmp_path}/a"\n'
    with pytest.raises(PolicyError, match="trees must not overlap"):
        load_policy(policy_file(tmp_path, outer + inner))
    with pytest.raises(PolicyError, match="trees must not overlap"):
        load_policy(policy_file(tmp_path, outer + 'exclude = ["logs/*"]\n' + inner))
    ok = load_policy(policy_file(tmp_path, outer + 'exclude = ["jobs/*"]\n' + inner))
    assert set(ok.trees) == {"outer", "inner"}


def test_a_table_of_unit_requires_takes_no_unit_glob_and_only_dir_units(tmp_path: Path) -> None:
    base = f'[trees.t]\nrole = "scratch"\npath = "{tmp_path}/t"\n'
    table = '[trees.t.unit_requires]\n"tmp*" = ["a.wav"]\n'
    with pytest.raises(PolicyError, match="drop unit_glob"):
        load_policy(policy_file(tmp_path, base + 'units = "dir"\nunit_glob = "x*"\n' + table))
    with pytest.raises(PolicyError, match='units = "dir" only'):
        load_policy(policy_file(tmp_path, base + table))
    tree = load_policy(policy_file(tmp_path, base + 'units = "dir"\n' + table)).trees["t"]
    assert tree.is_unit_folder("tmpab", lambda: ["a.wav"])
    assert not tree.is_unit_folder("tmpab", lambda: ["b.wav"])
    assert not tree.is_unit_folder(".tmpab", lambda: ["a.wav"])
