"""The suite's forkserver (``tests/_fixtures/forkserver.py``): a ``janitor`` it starts is the
process the test asked for (its argv, environment, folder, umask, streams, exit status, and the
test's process as its parent), and a call it cannot start that way is exec'd."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from tests._daemon_helpers import socket_answers
from tests._fixtures import forkserver
from tests._fixtures.console import janitor_json
from tests._fixtures.forkserver import JANITOR_BIN, JanitorPopen


def _served() -> None:
    if os.environ.get("JANITOR_TEST_EXEC", "") not in ("", "0"):
        pytest.skip("JANITOR_TEST_EXEC is set: every janitor is exec'd")
    forkserver.run([str(JANITOR_BIN), "--version"], capture_output=True)
    if JanitorPopen.started_by != "server":
        pytest.skip("this platform's clone is not known here (not glibc on x86-64 or arm64)")


def test_a_served_command_gets_its_argv_env_folder_and_umask_and_exits_with_its_code(
    tmp_path: Path,
) -> None:
    _served()
    (tmp_path / "mine.toml").write_text((Path(__file__).parents[2] / "policies" /
                                         "batchalign3.toml").read_text())  # fmt: skip
    env = {**os.environ, "JANITOR_STATE_DIR": str(tmp_path / "state")}
    done = forkserver.run(
        [str(JANITOR_BIN), "paths", "--json"], capture_output=True, text=True, env=env
    )
    assert JanitorPopen.started_by == "server"
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["state_dir"] == str(tmp_path / "state")
    # a relative path is found in the folder the call was given, and only there
    here = forkserver.run([str(JANITOR_BIN), "policy", "validate", "mine.toml"],
                          capture_output=True, text=True, cwd=tmp_path)  # fmt: skip
    assert JanitorPopen.started_by == "server"
    assert here.returncode == 0, here.stderr
    elsewhere = forkserver.run([str(JANITOR_BIN), "policy", "validate", "mine.toml"],
                               capture_output=True, text=True, cwd=tmp_path.parent)  # fmt: skip
    assert elsewhere.returncode == 2 and "does not exist" in elsewhere.stderr
    # a relative folder is the test's, from where the test is now (not the server's folder)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "mine.toml").write_bytes((tmp_path / "mine.toml").read_bytes())
    here_now = os.getcwd()
    os.chdir(tmp_path)
    try:
        nested = forkserver.run([str(JANITOR_BIN), "policy", "validate", "mine.toml"],
                                capture_output=True, text=True, cwd="sub")  # fmt: skip
    finally:
        os.chdir(here_now)
    assert JanitorPopen.started_by == "server"
    assert nested.returncode == 0, nested.stderr
    # the umask the test process has now, not the server's (the folders the command makes)
    for umask, mode in ((0o077, 0o700), (0o022, 0o755)):
        folder = tmp_path / f"{umask:o}" / "bin"
        old = os.umask(umask)
        try:
            made = forkserver.run([str(JANITOR_BIN), "shim", "install", "--dir", str(folder)],
                                  capture_output=True, text=True)  # fmt: skip
        finally:
            os.umask(old)
        assert made.returncode == 0, made.stderr
        assert (tmp_path / f"{umask:o}").stat().st_mode & 0o777 == mode
    # an unknown command: click's usage error, exit 2, on the stderr pipe. Popen reads a
    # process that is not its child as exit 0 (ECHILD), so 2 also says whose child it is.
    bad = forkserver.run([str(JANITOR_BIN), "no-such-command"], capture_output=True, text=True)
    assert JanitorPopen.started_by == "server"
    assert bad.returncode == 2 and "No such command" in bad.stderr


def test_a_served_daemon_is_the_test_process_child_and_ends_by_its_signal(
    tmp_path: Path,
) -> None:
    _served()
    sock = Path(janitor_json("paths", "--json")["socket"])
    err = tmp_path / "daemon.err"
    with open(err, "wb") as stderr:
        proc = JanitorPopen([str(JANITOR_BIN), "daemon"], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=stderr)  # fmt: skip
    try:
        assert JanitorPopen.started_by == "server"
        child = psutil.Process(proc.pid)
        assert child.ppid() == os.getpid()
        deadline = time.monotonic() + 20
        while not socket_answers(sock) and proc.poll() is None:
            assert time.monotonic() < deadline, err.read_text()
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0, err.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize(
    "why",
    [
        "preexec_fn",
        "close_fds",
        "JANITOR_PORTABLE",
        "LC_ALL",
        "JANITOR_TEST_EXEC",
        "another program",
    ],
)
def test_a_call_it_cannot_start_the_same_way_is_execd(
    why: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the server's copy could get wrong (module docstring) runs the real console script."""
    env = dict(os.environ)
    kwargs: dict[str, object] = {}
    argv = [str(JANITOR_BIN), "--version"]
    if why == "preexec_fn":
        kwargs["preexec_fn"] = os.getpid
    elif why == "close_fds":  # the worker's other descriptors are the child's too
        kwargs["close_fds"] = False
    elif why == "JANITOR_PORTABLE":
        env["JANITOR_PORTABLE"] = "0" if env.get("JANITOR_PORTABLE", "") not in ("", "0") else "1"
    elif why == "LC_ALL":
        env["LC_ALL"] = "C" if env.get("LC_ALL") != "C" else "C.UTF-8"
    elif why == "JANITOR_TEST_EXEC":
        monkeypatch.setenv("JANITOR_TEST_EXEC", "1")
    else:
        argv = ["/bin/true"]
    done = forkserver.run(argv, capture_output=True, text=True, env=env, **kwargs)
    assert JanitorPopen.started_by == "exec"
    assert done.returncode == 0, done.stderr


def test_a_server_that_died_leaves_every_call_to_exec(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker whose server is gone (killed, crashed) runs the console script, not an error."""
    _served()
    server = forkserver._Server()
    monkeypatch.setattr(forkserver, "_SERVER_OF_WORKER", server)
    first = forkserver.run([str(JANITOR_BIN), "--version"], capture_output=True, text=True)
    assert JanitorPopen.started_by == "server" and first.returncode == 0, first.stderr
    assert server.proc is not None
    server.proc.kill()
    server.proc.wait()
    for _ in range(2):  # the call that finds it gone, and the next
        again = forkserver.run([str(JANITOR_BIN), "--version"], capture_output=True, text=True)
        assert JanitorPopen.started_by == "exec"
        assert again.returncode == 0 and again.stdout == first.stdout, again.stderr
