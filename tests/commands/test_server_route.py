"""`janitor run` and `doctor` say where a batchalign3 job's ffmpeg runs, before it starts.

Against a real stand-in server: a small HTTP server on a loopback port that answers ``/health``
as batchalign3's does, started with the ``PATH`` under test (a real guard from
``janitor shim install`` first, or not), its port written into a real ``server.yaml`` in
batchalign3's state folder (``$HOME/.batchalign3``). The command is a stand-in ``batchalign3``
script that leaves a marker when it runs, so a refused run is seen not to start it.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from janitor.host import batchalign3
from janitor.ledger.foreign import unfinished_jobs
from tests._fixtures.console import one_line_error
from tests._fixtures.guard import install_guard

pytestmark = pytest.mark.usefixtures("front_end")  # both front ends of the guard

Cli = Callable[..., subprocess.CompletedProcess[str]]

SERVER = textwrap.dedent(
    """
    import http.server, json, sys
    body = sys.argv[1].encode()

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/health" else 404)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    srv = http.server.HTTPServer(("127.0.0.1", 0), Health)
    print(srv.server_address[1], flush=True)
    srv.serve_forever()
    """
)
HEALTH = json.dumps({"status": "ok", "version": "0.9.0", "active_jobs": 0, "capabilities": []})


@pytest.fixture
def standin(tmp_path: Path) -> Iterator[Callable[..., tuple[int, int]]]:
    """``standin(path_var, body=HEALTH) -> (port, pid)``: a server up, its port in server.yaml."""
    procs: list[subprocess.Popen[str]] = []

    def start(path_var: str, body: str = HEALTH) -> tuple[int, int]:
        script = tmp_path / "standin_server.py"
        script.write_text(SERVER)
        env = {**os.environ, "PATH": path_var}
        proc = subprocess.Popen(
            [sys.executable, str(script), body], env=env, stdout=subprocess.PIPE, text=True
        )
        procs.append(proc)
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        write_config(f"port: {port}\n")
        return port, proc.pid

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


def write_config(text: str) -> Path:
    path = batchalign3.state_dir() / "server.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def cli_cmd(tmp_path: Path) -> tuple[Path, Path]:
    """A stand-in ``batchalign3`` CLI that touches a marker file; (its path, the marker)."""
    marker = tmp_path / "ran"
    cmd = tmp_path / "bin" / "batchalign3"
    cmd.parent.mkdir()
    cmd.write_text(f"#!/bin/sh\ntouch {marker}\n")
    cmd.chmod(0o755)
    return cmd, marker


@pytest.fixture
def guard_bin(tmp_path: Path) -> Path:
    """The guard `janitor shim install --dir` writes (tests._fixtures.guard)."""
    folder = tmp_path / "guardbin"
    install_guard(folder)
    return folder


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


BARE_PATH = "/usr/local/bin:/usr/bin:/bin"


def test_an_unguarded_server_is_named_with_the_fix_and_require_fit_refuses(
    run_cli: Cli, standin: Callable[..., tuple[int, int]], cli_cmd: tuple[Path, Path]
) -> None:
    port, pid = standin(BARE_PATH)
    cmd, marker = cli_cmd
    done = run_cli("run", "--", cmd, "align", "in", "out")
    assert done.returncode == 0, done.stderr
    assert marker.exists()
    assert f"hands the job to its server on 127.0.0.1:{port} (pid {pid})" in done.stderr
    assert "with no guard: none of the job's writes are reserved" in done.stderr
    assert "fix: add --no-server" in done.stderr

    marker.unlink()
    done = run_cli("run", "--require-fit", "--", cmd, "align", "in", "out")
    assert done.returncode == 75, done.stderr
    assert not marker.exists(), "the command ran although --require-fit refused it"
    assert "Traceback" not in done.stderr
    error = one_line_error(done.stderr)
    assert "was not started (--require-fit). Fix: add --no-server" in error
    assert f"127.0.0.1:{port} (pid {pid})" in error


def test_a_guarded_server_is_said_so_and_require_fit_lets_the_command_run(
    run_cli: Cli,
    standin: Callable[..., tuple[int, int]],
    cli_cmd: tuple[Path, Path],
    guard_bin: Path,
) -> None:
    port, pid = standin(f"{guard_bin}:{BARE_PATH}")
    cmd, marker = cli_cmd
    done = run_cli("run", "--require-fit", "--", cmd, "align", "in", "out")
    assert done.returncode == 0, done.stderr
    assert marker.exists()
    assert f"127.0.0.1:{port} (pid {pid}), whose ffmpeg is the guard ({guard_bin}/ffmpeg)" in (
        done.stderr
    )


def test_no_server_answering_is_direct_mode(run_cli: Cli, cli_cmd: tuple[Path, Path]) -> None:
    port = free_port()
    write_config(f"port: {port}\njob_ttl_days: 3\n")
    cmd, marker = cli_cmd
    done = run_cli("run", "--require-fit", "--", cmd, "align", "in", "out")
    assert done.returncode == 0, done.stderr
    assert marker.exists()
    assert f"no batchalign3 server answers on 127.0.0.1:{port}: " in done.stderr
    assert "direct mode" in done.stderr


def test_no_server_option_is_direct_mode_whatever_server_runs(
    run_cli: Cli, standin: Callable[..., tuple[int, int]], cli_cmd: tuple[Path, Path]
) -> None:
    standin(BARE_PATH)
    cmd, marker = cli_cmd
    done = run_cli("run", "--require-fit", "--", cmd, "--no-server", "align", "in", "out")
    assert done.returncode == 0, done.stderr
    assert marker.exists()
    assert "--no-server: batchalign3 runs the job itself" in done.stderr


def test_an_answer_that_is_not_batchalign3s_health_is_no_server(
    run_cli: Cli, standin: Callable[..., tuple[int, int]], cli_cmd: tuple[Path, Path]
) -> None:
    port, _ = standin(BARE_PATH, body="<html>hello</html>")
    cmd, _ = cli_cmd
    done = run_cli("run", "--require-fit", "--", cmd, "align", "in", "out")
    assert done.returncode == 0, done.stderr
    assert f"no batchalign3 server answers on 127.0.0.1:{port}" in done.stderr


def test_a_remote_server_is_out_of_reach_and_require_fit_refuses(
    run_cli: Cli, cli_cmd: tuple[Path, Path]
) -> None:
    cmd, marker = cli_cmd
    remote = "http://192.0.2.10:8000"  # TEST-NET-1: never contacted
    done = run_cli("run", "--", cmd, "align", "in", "out", env={"BATCHALIGN_SERVER": remote})
    assert done.returncode == 0, done.stderr
    assert f"sends the job to {remote}: its ffmpeg runs on that host" in done.stderr
    marker.unlink()
    done = run_cli("run", "--require-fit", "--", cmd, "--server", remote, "align", "in", "o")
    assert done.returncode == 75, done.stderr
    assert not marker.exists()


def test_a_script_that_may_call_batchalign3_gets_a_warning_not_a_refusal(
    run_cli: Cli, standin: Callable[..., tuple[int, int]], tmp_path: Path
) -> None:
    port, _ = standin(BARE_PATH)
    script = tmp_path / "pipeline.sh"
    script.write_text("#!/bin/sh\nexit 3\n")
    script.chmod(0o755)
    done = run_cli("run", "--require-fit", "--", script)
    assert done.returncode == 3, done.stderr
    assert f"if {script} runs batchalign3 without --no-server: " in done.stderr
    assert f"127.0.0.1:{port}" in done.stderr


def test_a_plain_command_with_no_server_says_nothing(run_cli: Cli) -> None:
    write_config(f"port: {free_port()}\n")
    done = run_cli("run", "--", "true")
    assert done.returncode == 0, done.stderr
    assert "batchalign3" not in done.stderr


def doctor_server(run_cli: Cli) -> dict[str, Any]:
    done = run_cli("doctor", "--json")
    assert "Traceback" not in done.stderr, done.stderr
    found = [c for c in json.loads(done.stdout) if c["name"] == "batchalign3 server"]
    assert len(found) == 1, done.stdout
    return dict(found[0])


def test_doctor_says_the_same(
    run_cli: Cli, standin: Callable[..., tuple[int, int]], guard_bin: Path
) -> None:
    port, pid = standin(BARE_PATH)
    check = doctor_server(run_cli)
    assert check["verdict"] == "fail"
    assert f"127.0.0.1:{port} (pid {pid})" in check["message"]
    assert "--no-server" in check["fix"]

    port, pid = standin(f"{guard_bin}:{BARE_PATH}")
    check = doctor_server(run_cli)
    assert check["verdict"] == "ok", check
    assert f"(pid {pid}), whose ffmpeg is the guard" in check["message"]

    write_config(f"port: {free_port()}\n")
    check = doctor_server(run_cli)
    assert check["verdict"] == "ok" and "direct mode" in check["message"], check


# -- batchalign3's own files, read as it reads them -----------------------------------------------


def test_server_config_defaults_and_validation(monkeypatch: pytest.MonkeyPatch) -> None:
    assert batchalign3.server_config().port == batchalign3.DEFAULT_PORT  # no file
    write_config("port: 8123\njob_ttl_days: 0\nmemory_gate_mb: 2048\n")
    cfg = batchalign3.server_config()
    assert (cfg.port, cfg.job_ttl_days, cfg.problem) == (8123, 1, None)
    write_config("port: 0\n")
    assert batchalign3.server_config().port == 8000
    write_config("port: [oops\n")
    cfg = batchalign3.server_config()
    assert cfg.port == 8000 and cfg.problem and "not valid YAML" in cfg.problem
    elsewhere = batchalign3.state_dir().parent / "elsewhere"
    monkeypatch.setenv("BATCHALIGN_STATE_DIR", f" {elsewhere} ")
    assert batchalign3.state_dir() == elsewhere
    assert batchalign3.server_config().path == elsewhere / "server.yaml"


def test_unfinished_jobs_read_only_from_jobs_db() -> None:
    """Every status batchalign3 does not hold as terminal (queued, running, and one it may add)
    is unfinished; the file is never written; what cannot be read says why."""
    db = batchalign3.jobs_db()
    read = unfinished_jobs(db)
    assert read.problem == f"{db} does not exist" and not read.ids
    db.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(db) as conn:
        conn.execute(
            "CREATE TABLE jobs (job_id TEXT PRIMARY KEY, status TEXT NOT NULL, staging_dir TEXT)"
        )
        conn.executemany(
            "INSERT INTO jobs VALUES (?, ?, ?)",
            [
                ("a", "queued", "/s/jobs/a"),
                ("b", "running", ""),
                ("c", "completed", "/s/jobs/c"),
                ("d", "interrupted", ""),
                ("e", "failed", ""),
                ("f", "cancelled", ""),
                ("g", "paused", ""),  # a state batchalign3 may add: not known to be finished
            ],
        )
    conn.close()
    before = db.stat().st_mtime_ns
    read = unfinished_jobs(db)
    assert (read.ids, read.staging, read.problem) == ({"a", "b", "g"}, {"/s/jobs/a"}, None)
    assert db.stat().st_mtime_ns == before
    db.write_bytes(b"not a database")
    read = unfinished_jobs(db)
    assert read.problem is not None and "not a database" in read.problem and not read.ids
