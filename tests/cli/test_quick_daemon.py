"""A plain ``janitor daemon`` starts without typer (``janitor.cli.quick``).

It must be the typer command in every way a user sees: the same settings, the same one-line
errors and exit codes, and an admission-only daemon (``janitor run``'s own) that serves its
socket and opens none of the ports. Real processes (the console script, exec'd), a real tmpfs
and the real socket.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests._daemon_helpers import (
    DaemonSetup,
    daemon_setup,
    eventually,
    free_port,
    socket_answers,
    start_daemon,
    uds_client,
)
from tests._fixtures.console import JANITOR_BIN

#: The console script, exec'd: the quick path is what it takes.
MAIN = [str(JANITOR_BIN), "daemon"]
#: The typer command, for comparison.
TYPER = [sys.executable, "-c", "import sys; from janitor.cli.app import main; main(sys.argv[1:])",
         "daemon"]  # fmt: skip


def _start(setup: DaemonSetup, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([*MAIN, *args], env=setup.env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)  # fmt: skip


def test_an_admission_only_daemon_serves_its_socket_and_opens_no_port(tmp_path: Path) -> None:
    """The settings ask for a loopback port: a run's own daemon leaves the ports to the user's
    daemon, and serves its socket alone."""
    import psutil

    with daemon_setup(tmp_path, settings={"JANITOR_HTTP_PORT": str(free_port())}) as setup:
        proc = _start(setup, "--quiet", "--admission-only")
        try:
            eventually(lambda: socket_answers(setup.socket) or proc.poll() is not None,
                       timeout=60, what="the socket")  # fmt: skip
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            with uds_client(setup.socket) as c:
                status = c.get("/v1/status").json()
            assert status["daemon"]["pid"] == proc.pid
            listening = [c for c in psutil.Process(proc.pid).net_connections(kind="inet")
                         if c.status == psutil.CONN_LISTEN]  # fmt: skip
            assert listening == []
            assert "admission only" in setup.log_file.read_text()
        finally:
            proc.terminate()
            _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert err == b""  # --quiet: the log file only


def test_a_plain_daemon_command_loads_no_typer_and_help_still_does(tmp_path: Path) -> None:
    with daemon_setup(tmp_path) as setup:
        bad = tmp_path / "bad.toml"
        bad.write_text("floor = = 1\n")  # it stops at once, after the command line is read
        env = setup.env(JANITOR_CONFIG=str(bad))
        loaded = {}
        for how in (["--quiet", "--admission-only"], ["--help"]):
            done = subprocess.run([sys.executable, "-X", "importtime", *MAIN, *how], env=env,
                                  capture_output=True, text=True, timeout=60)  # fmt: skip
            loaded[how[0]] = {ln.rpartition("|")[2].strip() for ln in done.stderr.splitlines()
                              if ln.startswith("import time:")}  # fmt: skip
    assert "janitor.config.settings" in loaded["--quiet"]
    assert "typer" not in loaded["--quiet"] and "janitor.cli.app" not in loaded["--quiet"]
    assert "typer" in loaded["--help"]


def test_a_bad_config_and_a_second_daemon_read_as_janitor_daemon_says_them(
    tmp_path: Path,
) -> None:
    """The same line and exit code as the typer command: a config that is not TOML, then a
    daemon already holding the lock."""
    with daemon_setup(tmp_path) as setup:
        bad = tmp_path / "bad.toml"
        bad.write_text("floor = = 1\n")
        env = setup.env(JANITOR_CONFIG=str(bad))
        ours = subprocess.run([*MAIN, "--quiet"], env=env, capture_output=True, text=True,
                              timeout=60)  # fmt: skip
        theirs = subprocess.run([*TYPER, "--quiet"], env=env, capture_output=True, text=True,
                                timeout=60)  # fmt: skip
        assert (ours.returncode, ours.stderr) == (theirs.returncode, theirs.stderr)
        assert ours.returncode == 2 and ours.stderr.count("\n") == 1, ours.stderr
        assert "Traceback" not in ours.stderr
        first = start_daemon(setup)
        try:
            ours = subprocess.run([*MAIN, "--quiet"], env=setup.env(), capture_output=True,
                                  text=True, timeout=60)  # fmt: skip
            theirs = subprocess.run([*TYPER, "--quiet"], env=setup.env(), capture_output=True,
                                    text=True, timeout=60)  # fmt: skip
        finally:
            first.stop()
    assert (ours.returncode, ours.stderr) == (theirs.returncode, theirs.stderr)
    assert ours.returncode == 2 and ours.stderr.startswith("janitor: error: "), ours.stderr
