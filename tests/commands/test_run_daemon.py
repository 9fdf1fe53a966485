"""`janitor run` with no daemon starts one of its own, so every guarded call takes the socket.

Real processes throughout: `janitor run` over the pipeline simulator (real ffmpeg through the
real guard) on a real tmpfs, the run's own `janitor daemon --admission-only`, a standing
daemon started by the test. What the guard did is read from its own log (`guard.log`); what
the daemon did from its log (`daemon.log`).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from janitor.config.settings import Settings
from tests._daemon_helpers import eventually
from tests._fixtures import forkserver
from tests._fixtures.console import JANITOR_BIN
from tests._fixtures.guard import install_guard
from tests._fixtures.pipeline import Pipeline

pytestmark = pytest.mark.usefixtures("front_end")  # both front ends of the guard

Cli = Callable[..., subprocess.CompletedProcess[str]]

RUN_START = re.compile(r"started \(pid (\d+), socket (\S+), policy (\S+), admission only")


def log_dir() -> Path:
    return Settings().log_dir


def guard_lines() -> list[str]:
    path = log_dir() / "guard.log"
    return path.read_text().splitlines() if path.exists() else []


def run_daemons() -> list[tuple[int, str, str]]:
    """(pid, socket, policy) of every run's own daemon the log saw start."""
    path = log_dir() / "daemon.log"
    text = path.read_text() if path.exists() else ""
    return [(int(m[1]), m[2], m[3]) for m in RUN_START.finditer(text)]


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_run_starts_a_daemon_of_its_own_and_every_guarded_call_takes_the_socket(
    pipeline: Callable[..., Pipeline], m4a: Callable[[float], Path], run_cli: Cli, tmp_path: Path
) -> None:
    p = pipeline("64m")
    src = m4a(12)
    done = run_cli("run", "--", *p.sim("--groups", "2", "--group-s", "2", src), timeout=180)
    assert done.returncode == 0, done.stderr
    reserved = [ln for ln in guard_lines() if " reserved through the " in ln]
    assert len(reserved) == 3, guard_lines()  # the cache WAV and the two cuts
    assert all("through the daemon" in ln for ln in reserved), reserved
    ((pid, sock, policy),) = run_daemons()
    assert os.path.realpath(policy) == os.path.realpath(p.policy)
    assert gone(pid), "the run's daemon outlived the run"
    assert not Path(sock).exists() and not Path(sock).parent.exists()
    assert "daemon" not in done.stderr  # nothing notable to say
    # It deleted nothing (the job removed its own folder; nothing was left to remove).
    log = json.loads(run_cli("log", "--json").stdout)
    assert [e for e in log if e["event"] in ("delete", "deleting")] == [], log


def test_without_daemon_the_guard_opens_the_ledger(
    pipeline: Callable[..., Pipeline], m4a: Callable[[float], Path], run_cli: Cli
) -> None:
    p = pipeline("64m")
    done = run_cli("run", "--no-daemon", "--", *p.sim(m4a(5)), timeout=180)
    assert done.returncode == 0, done.stderr
    reserved = [ln for ln in guard_lines() if " reserved through the " in ln]
    assert reserved and all("through the ledger" in ln for ln in reserved), reserved
    assert run_daemons() == []


def test_a_run_whose_daemon_dies_goes_on_through_the_ledger(
    pipeline: Callable[..., Pipeline], m4a: Callable[[float], Path], run_cli: Cli, tmp_path: Path
) -> None:
    """The run's own daemon SIGKILLed after the job's first cut: the later cuts are admitted
    through the ledger, the job ends well, and nothing stays held."""
    p = pipeline("64m")
    report = tmp_path / "report.jsonl"
    sim = p.sim("--groups", "4", "--group-s", "2", "--pause-s", "1.5", "--report", report, m4a(12))
    run = forkserver.JanitorPopen(
        [str(JANITOR_BIN), "run", "--", *sim],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        eventually(
            lambda: report.exists() and len(report.read_text().splitlines()) >= 2,
            timeout=90,
            what="the cache WAV and the first cut",
        )
        ((pid, _sock, _policy),) = run_daemons()
        os.kill(pid, signal.SIGKILL)
        _out, err = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert run.returncode == 0, err
    writes = [json.loads(ln) for ln in report.read_text().splitlines()]
    assert len(writes) == 5, writes  # the cache WAV and four cuts, every one whole
    reserved = [ln for ln in guard_lines() if " reserved through the " in ln]
    assert any("through the daemon" in ln for ln in reserved), reserved
    assert "through the ledger" in reserved[-1], reserved  # the last cut: after the kill
    held = json.loads(run_cli("status", "--json").stdout)
    assert held["reservations"] == [], held


def test_the_runs_daemon_never_sweeps_what_a_standing_daemon_would(
    pipeline: Callable[..., Pipeline], run_cli: Cli, tmp_path: Path
) -> None:
    """A cache over its quota, old enough to go: a run's daemon leaves it (a run without a
    daemon would), and `janitor sweep` afterwards shows it was there to sweep."""
    p = pipeline("64m", quota="1MiB", cache_min_age="0s")
    old = time.time() - 3600
    for i in range(4):
        f = p.cache / f"{i:024x}.wav"
        f.write_bytes(b"\0" * (512 * 1024))
        os.utime(f, (old, old))
    done = run_cli("run", "--", "sleep", "3", timeout=60)
    assert done.returncode == 0, done.stderr
    assert len(run_daemons()) == 1
    assert len(list(p.cache.glob("*.wav"))) == 4
    plan = json.loads(run_cli("sweep", "--dry-run", "--json").stdout)
    assert len([i for i in plan["items"] if i["tree"] == "media_cache"]) >= 2, plan


def test_a_killed_run_takes_its_daemon_along(
    pipeline: Callable[..., Pipeline], tmp_path: Path
) -> None:
    pipeline("64m")
    run = forkserver.JanitorPopen(
        [str(JANITOR_BIN), "run", "--daemon", "--", "sleep", "60"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        found = eventually(lambda: run_daemons() or None, timeout=30, what="the run's daemon")
        pid = found[0][0]
        eventually(
            lambda: any("sleep" in c.name() for c in psutil.Process(run.pid).children()),
            timeout=30,
            what="the command to start",
        )
        run.kill()
        run.wait()
        eventually(lambda: gone(pid), timeout=10, what="the run's daemon to go with it")
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()


def test_a_standing_daemon_with_the_runs_policy_is_used_as_it_is(
    pipeline: Callable[..., Pipeline], m4a: Callable[[float], Path], run_cli: Cli, tmp_path: Path
) -> None:
    p = pipeline("64m")
    standing = _standing(p, tmp_path)
    try:
        done = run_cli("run", "--", *p.sim(m4a(5)), timeout=180)
        assert done.returncode == 0, done.stderr
        assert run_daemons() == []
        reserved = [ln for ln in guard_lines() if " reserved through the " in ln]
        assert reserved and all("through the daemon" in ln for ln in reserved), reserved
    finally:
        standing.send_signal(signal.SIGTERM)
        standing.wait(10)


def test_a_daemon_with_another_policy_is_named_by_run_guard_and_doctor(
    pipeline: Callable[..., Pipeline],
    m4a: Callable[[float], Path],
    run_cli: Cli,
    tmp_path: Path,
    write_policy: Callable[..., Path],
) -> None:
    p = pipeline("64m")
    other = tmp_path / "other-policy.toml"
    other.write_text(p.policy.read_text())
    standing = _standing(p, tmp_path, policy=other)
    try:
        env = {"JANITOR_POLICY": str(p.policy)}
        done = run_cli("run", "--daemon", "--", *p.sim(m4a(5)), env=env, timeout=180)
        assert done.returncode == 0, done.stderr
        assert f"the daemon (pid {standing.pid}) runs policy {other}, not this run's " in (
            done.stderr
        )
        assert len(run_daemons()) == 1  # so it started one of its own, with the run's policy

        # The guard, called outside a run, says why it passed the daemon over.
        guard = tmp_path / "guardbin"
        install_guard(guard, {**os.environ, **env})  # what `janitor shim install` writes
        out = p.cache / "direct.tmp.wav"
        call = subprocess.run(
            [guard / "ffmpeg", "-nostdin", "-y", "-i", m4a(5), "-acodec", "pcm_s16le", "-ar",
             "16000", "-ac", "1", out],
            env={**os.environ, **env},
            capture_output=True,
            timeout=120,
            check=False,
        )  # fmt: skip
        assert call.returncode == 0, call.stderr
        passed = [ln for ln in guard_lines() if "did not take this call" in ln]
        assert passed and f"runs policy {other}" in passed[-1], guard_lines()

        check = next(
            c
            for c in json.loads(run_cli("doctor", "--json", env=env).stdout)
            if c["name"] == "daemon"
        )
        assert check["verdict"] == "warn" and f"with policy {other}, not " in check["message"]
    finally:
        standing.send_signal(signal.SIGTERM)
        standing.wait(10)


def _standing(
    p: Pipeline, tmp_path: Path, *, policy: Path | None = None
) -> subprocess.Popen[bytes]:
    """The user's standing daemon, on the default socket, with ``policy`` (else the run's)."""
    env = {**os.environ, "JANITOR_POLICY": str(policy or p.policy)}
    proc = forkserver.JanitorPopen(
        [str(JANITOR_BIN), "daemon", "--quiet"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    sock = Settings().socket_path
    try:
        eventually(lambda: sock.exists() or proc.poll() is not None, timeout=20, what="daemon")
    except BaseException:
        proc.kill()
        raise
    assert proc.poll() is None, "the standing daemon did not start"
    time.sleep(0.3)
    return proc


def test_the_runs_daemon_takes_no_port_the_users_daemon_would(
    pipeline: Callable[..., Pipeline], m4a: Callable[[float], Path], run_cli: Cli, tmp_path: Path
) -> None:
    """http_port, metrics_listen and metrics_textfile are the user's daemon's: a run's own
    daemon serves its socket only, so a port already taken does not stop it."""
    import socket

    p = pipeline("64m")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        textfile = tmp_path / "janitor.prom"
        env = {
            "JANITOR_HTTP_PORT": str(port),
            "JANITOR_METRICS_LISTEN": f"127.0.0.1:{port + 1 if port < 65535 else port - 1}",
            "JANITOR_METRICS_TEXTFILE": str(textfile),
        }
        done = run_cli("run", "--daemon", "--", *p.sim(m4a(5)), env=env, timeout=180)
    assert done.returncode == 0, done.stderr
    assert len(run_daemons()) == 1
    reserved = [ln for ln in guard_lines() if " reserved through the " in ln]
    assert reserved and all("through the daemon" in ln for ln in reserved), (reserved, done.stderr)
    assert not textfile.exists()
