"""`janitor doctor`: each check's verdict on real files, ledgers, sockets and daemons.

Everything is real except ``tmutil`` (macOS only), which :func:`janitor.doctor.run_checks` takes
as an injected ``run``. The ledger is made by the real ``janitor reserve``/``release``; the socket
checks bind a real AF_UNIX socket; the healthy-daemon check runs the real ``janitor daemon``.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from janitor.config.settings import Settings
from janitor.doctor import Check, run_checks
from tests._fixtures.console import one_line_error

Cli = Callable[..., subprocess.CompletedProcess[str]]

CHECK_KEYS = {"name", "verdict", "message", "fix"}


@pytest.fixture
def dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """State, runtime and log dirs in tmp_path, set through JANITOR_*."""
    d = {"state": tmp_path / "state", "runtime": tmp_path / "run", "log": tmp_path / "log"}
    d["runtime"].mkdir(mode=0o700)
    monkeypatch.setenv("JANITOR_STATE_DIR", str(d["state"]))
    monkeypatch.setenv("JANITOR_RUNTIME_DIR", str(d["runtime"]))
    monkeypatch.setenv("JANITOR_LOG_DIR", str(d["log"]))
    return d


@pytest.fixture
def trees(tmp_path: Path) -> dict[str, Path]:
    cache = tmp_path / "trees" / "cache"
    scratch = tmp_path / "trees" / "scratch"
    cache.mkdir(parents=True)
    scratch.mkdir(parents=True)
    (cache / "sub").mkdir()
    (cache / "sub" / "a.bin").write_bytes(b"x" * 5000)
    return {"cache": cache, "scratch": scratch}


@pytest.fixture
def good_policy(
    dirs: dict[str, Path], trees: dict[str, Path], write_policy: Callable[..., Path]
) -> Path:
    return write_policy(
        {
            "cache": {"role": "cache", "path": str(trees["cache"]), "quota": "10MiB"},
            "scratch": {"role": "scratch", "path": str(trees["scratch"])},
        },
        floor="4MiB",
    )


def by_name(checks: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for c in checks:
        assert c["name"] not in out, f"two checks named {c['name']!r}"
        out[c["name"]] = c
    return out


def doctor_json(run_cli: Cli) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    done = run_cli("doctor", "--json")
    assert "Traceback" not in done.stderr, done.stderr
    data = json.loads(done.stdout)
    assert isinstance(data, list) and data
    for c in data:
        assert set(c) == CHECK_KEYS, c
        assert c["verdict"] in ("ok", "warn", "fail"), c
        assert isinstance(c["name"], str) and isinstance(c["message"], str)
        assert isinstance(c["fix"], str)
    return done, data


def make_ledger(run_cli: Cli) -> None:
    """A real ledger, written by the real CLI: reserve, then release."""
    done = run_cli("reserve", "cache", "1M", "--job", "doctor-test")
    assert done.returncode == 0, done.stderr
    rid = done.stdout.strip().splitlines()[-1]
    assert rid.startswith("r-"), done.stdout
    done = run_cli("release", rid)
    assert done.returncode == 0, done.stderr


# -- a healthy setup ----------------------------------------------------------------------------


def test_doctor_healthy_without_daemon(
    run_cli: Cli, dirs: dict[str, Path], trees: dict[str, Path], good_policy: Path
) -> None:
    make_ledger(run_cli)
    ledger = dirs["state"] / "ledger.sqlite3"
    assert ledger.is_file()

    done, data = doctor_json(run_cli)
    assert done.returncode == 0, done.stdout + done.stderr
    checks = by_name(data)
    names = [c["name"] for c in data]

    assert checks["config"]["verdict"] == "ok"
    assert checks["policy"]["verdict"] == "ok"
    assert str(good_policy) in checks["policy"]["message"]
    assert "2 trees" in checks["policy"]["message"]
    for tree in ("cache", "scratch"):
        c = checks[f"tree {tree}"]
        assert c["verdict"] == "ok", c
        assert str(trees[tree]) in c["message"]
    volumes = [n for n in names if n.startswith("volume ")]
    assert len(volumes) == 1, names  # both trees are on tmp_path's volume
    vol = checks[volumes[0]]
    assert vol["verdict"] == "ok", vol
    assert "floor 4 MiB" in vol["message"]
    assert checks["ledger"] == {
        "name": "ledger",
        "verdict": "ok",
        "message": f"{ledger}: integrity ok",
        "fix": "",
    }
    daemon = checks["daemon"]
    assert daemon["verdict"] == "warn"
    assert "not running" in daemon["message"]
    assert str(dirs["runtime"] / "janitor.sock") in daemon["message"]
    assert daemon["fix"]
    assert "daemon socket" not in checks
    if sys.platform.startswith("linux"):
        ino = checks["inotify"]
        assert ino["verdict"] in ("ok", "warn")
        # the cache tree has two folders (its root and sub/); scratch trees are not watched
        assert ino["message"].startswith("2 folders to watch"), ino
    assert not any(c["verdict"] == "fail" for c in data)
    assert "local snapshots" not in checks


def test_doctor_human_output_prints_verdicts_and_fixes(
    run_cli: Cli, dirs: dict[str, Path], good_policy: Path
) -> None:
    done = run_cli("doctor")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert any(ln.split()[:2] == ["ok", "policy:"] for ln in lines), done.stdout
    i = next(i for i, ln in enumerate(lines) if ln.split()[:2] == ["warn", "daemon:"])
    fixes = [ln.strip() for ln in lines[i + 1 :] if ln.strip().startswith("fix: ")]
    assert fixes and "janitor service install" in fixes[0], done.stdout
    assert not any(ln.strip().startswith("fix: ") for ln in lines[:i])  # ok checks: no fix
    assert "\x1b[" not in done.stdout


def test_doctor_no_ledger_yet_is_ok(run_cli: Cli, dirs: dict[str, Path], good_policy: Path) -> None:
    done, data = doctor_json(run_cli)
    assert done.returncode == 0
    ledger = by_name(data)["ledger"]
    assert ledger["verdict"] == "ok"
    assert "not created yet" in ledger["message"]


# -- failures -------------------------------------------------------------------------------------


def test_doctor_garbage_ledger_fails(
    run_cli: Cli, dirs: dict[str, Path], good_policy: Path
) -> None:
    dirs["state"].mkdir()
    ledger = dirs["state"] / "ledger.sqlite3"
    ledger.write_bytes(os.urandom(16384))
    os.chmod(ledger, 0o600)

    done, data = doctor_json(run_cli)
    assert done.returncode == 1, done.stdout + done.stderr
    c = by_name(data)["ledger"]
    assert c["verdict"] == "fail", c
    assert str(ledger) in c["message"]
    assert c["fix"]


def test_doctor_damaged_ledger_pages_fail(
    run_cli: Cli, dirs: dict[str, Path], good_policy: Path
) -> None:
    make_ledger(run_cli)
    ledger = dirs["state"] / "ledger.sqlite3"
    for side in ("-wal", "-shm"):
        Path(str(ledger) + side).unlink(missing_ok=True)
    size = ledger.stat().st_size
    assert size > 8192
    with open(ledger, "r+b") as fh:  # keep the header page, scramble every page after it
        fh.seek(4096)
        fh.write(os.urandom(size - 4096))

    done, data = doctor_json(run_cli)
    assert done.returncode == 1, done.stdout + done.stderr
    assert by_name(data)["ledger"]["verdict"] == "fail"


@pytest.mark.parametrize(
    "text",
    [
        "[trees.c\nrole = 'cache'\n",  # not TOML
        '[trees.c]\nrole = "landfill"\npath = "/tmp"\n',  # bad role
        '[trees.c]\nrole = "cache"\npath = "/tmp"\nquota = "lots"\n',  # bad size
    ],
    ids=["not-toml", "bad-role", "bad-quota"],
)
def test_doctor_bad_policy_fails_without_traceback(
    run_cli: Cli, dirs: dict[str, Path], tmp_path: Path, text: str
) -> None:
    policy = tmp_path / "bad-policy.toml"
    policy.write_text(text)
    done = run_cli("doctor", "--json", env={"JANITOR_POLICY": str(policy)})
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 1, done.stdout + done.stderr
    checks = by_name(json.loads(done.stdout))
    assert checks["policy"]["verdict"] == "fail"
    assert checks["policy"]["message"]
    assert checks["policy"]["fix"]

    human = run_cli("doctor", env={"JANITOR_POLICY": str(policy)})
    assert human.returncode == 1
    assert "Traceback" not in human.stderr
    assert any(ln.split()[:2] == ["fail", "policy:"] for ln in human.stdout.splitlines())


def test_doctor_lists_each_problem_of_a_bad_policy_under_its_check(
    run_cli: Cli, dirs: dict[str, Path], tmp_path: Path
) -> None:
    policy = tmp_path / "bad-policy.toml"
    policy.write_text("[trees.media]\nrole = \"cache\"\npath = 5\nquota = 'lots'\n")
    env = {"JANITOR_POLICY": str(policy), "COLUMNS": "300"}  # rich wraps at 80 columns
    message = by_name(json.loads(run_cli("doctor", "--json", env=env).stdout))["policy"]["message"]
    lines = message.splitlines()
    assert lines[0] == f"policy file {policy} has 2 problems:"
    assert lines[1].startswith("  trees.media.path = 5: ")
    assert lines[2].startswith('  trees.media.quota = "lots": ')

    human = run_cli("doctor", env=env).stdout.splitlines()
    at = next(i for i, ln in enumerate(human) if ln.split()[:2] == ["fail", "policy:"])
    # Under the message, not at the left margin where the next check's verdict goes.
    assert human[at + 1 : at + 3] == [" " * 6 + lines[1], " " * 6 + lines[2]]


def test_doctor_missing_policy_file_fails(
    run_cli: Cli, dirs: dict[str, Path], tmp_path: Path
) -> None:
    done = run_cli("doctor", "--json", env={"JANITOR_POLICY": str(tmp_path / "nope.toml")})
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 1
    assert by_name(json.loads(done.stdout))["policy"]["verdict"] == "fail"


def test_doctor_missing_tree_warns_and_file_tree_fails(
    run_cli: Cli, dirs: dict[str, Path], tmp_path: Path, write_policy: Callable[..., Path]
) -> None:
    not_a_dir = tmp_path / "afile"
    not_a_dir.write_text("x")
    write_policy(
        {
            "later": {"role": "cache", "path": str(tmp_path / "not-yet"), "quota": "1MiB"},
            "wrong": {"role": "cache", "path": str(not_a_dir), "quota": "1MiB"},
        }
    )
    done, data = doctor_json(run_cli)
    checks = by_name(data)
    assert checks["tree later"]["verdict"] == "warn"
    assert "does not exist" in checks["tree later"]["message"]
    assert checks["tree wrong"]["verdict"] == "fail"
    assert done.returncode == 1


def test_doctor_volume_below_floor_fails(
    run_cli: Cli, dirs: dict[str, Path], trees: dict[str, Path], write_policy: Callable[..., Path]
) -> None:
    write_policy(
        {"cache": {"role": "cache", "path": str(trees["cache"]), "quota": "1MiB"}}, floor="100%"
    )
    done, data = doctor_json(run_cli)
    assert done.returncode == 1
    vol = [c for c in data if c["name"].startswith("volume ")]
    assert any(c["verdict"] == "fail" and "below the floor" in c["message"] for c in vol), vol


# -- the daemon's socket ------------------------------------------------------------------------


@pytest.fixture
def bound_socket(
    dirs: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[[int], Path]]:
    """``bind(mode) -> Path``: a real AF_UNIX socket at the socket path, bound, never listening."""
    socks: list[socket.socket] = []

    def bind(mode: int) -> Path:
        path = dirs["runtime"] / "janitor.sock"
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        socks.append(s)
        monkeypatch.chdir(dirs["runtime"])  # a relative bind avoids sun_path's length limit
        s.bind("janitor.sock")
        os.chmod(path, mode)
        assert stat.S_ISSOCK(os.lstat(path).st_mode)
        assert stat.S_IMODE(os.lstat(path).st_mode) == mode
        return path

    yield bind
    for s in socks:
        s.close()


def test_doctor_world_writable_dead_socket_fails_twice(
    run_cli: Cli, dirs: dict[str, Path], good_policy: Path, bound_socket: Callable[[int], Path]
) -> None:
    sock = bound_socket(0o666)
    done, data = doctor_json(run_cli)
    assert done.returncode == 1, done.stdout + done.stderr
    checks = by_name(data)
    assert checks["daemon socket"]["verdict"] == "fail"
    assert "666" in checks["daemon socket"]["message"]
    assert str(sock) in checks["daemon socket"]["message"]
    assert checks["daemon socket"]["fix"]
    assert checks["daemon"]["verdict"] == "fail"
    assert "nothing answers" in checks["daemon"]["message"]


def test_doctor_private_dead_socket_fails_only_the_daemon(
    run_cli: Cli, dirs: dict[str, Path], good_policy: Path, bound_socket: Callable[[int], Path]
) -> None:
    bound_socket(0o600)
    done, data = doctor_json(run_cli)
    assert done.returncode == 1
    checks = by_name(data)
    assert checks["daemon socket"]["verdict"] == "ok"
    assert checks["daemon"]["verdict"] == "fail"


def test_doctor_with_a_running_daemon(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ._daemon_helpers import daemon_setup, running_daemon

    with daemon_setup(tmp_path / "d") as setup, running_daemon(setup) as d:
        done = setup.run_cli("doctor", "--json")
        assert "Traceback" not in done.stderr, done.stderr
        checks = by_name(json.loads(done.stdout))
        assert checks["daemon socket"]["verdict"] == "ok", checks["daemon socket"]
        daemon = checks["daemon"]
        assert daemon["verdict"] in ("ok", "warn"), daemon
        assert daemon["message"].startswith(f"running, pid {d.pid}"), daemon
        if daemon["verdict"] == "warn":
            assert "polled" in daemon["message"]
        assert done.returncode == 0, done.stdout + done.stderr


# -- macOS local snapshots (tmutil injected) ------------------------------------------------------

TMUTIL_TWO = """Snapshots for disk /:
com.apple.TimeMachine.2025-01-01-101500.local
com.apple.TimeMachine.2025-01-01-111500.local
"""


class FakeTmutil:
    def __init__(self, code: int = 0, out: str = "", err: str = "") -> None:
        self.calls: list[list[str]] = []
        self.reply = (code, out, err)

    def __call__(self, cmd: list[str]) -> subprocess.CompletedProcess[str]:
        self.calls.append(list(cmd))
        code, out, err = self.reply
        return subprocess.CompletedProcess(cmd, code, out, err)


def darwin_checks(run: Callable[[list[str]], subprocess.CompletedProcess[str]]) -> dict[str, Check]:
    checks = run_checks(Settings.load(), platform="darwin", run=run)
    return {c.name: c for c in checks}


def test_snapshots_two_warn(dirs: dict[str, Path], good_policy: Path) -> None:
    fake = FakeTmutil(out=TMUTIL_TWO)
    checks = darwin_checks(fake)
    assert fake.calls == [["tmutil", "listlocalsnapshots", "/"]]
    snap = checks["local snapshots"]
    assert snap.verdict == "warn"
    assert snap.message.startswith("2 "), snap.message
    assert "thinlocalsnapshots" in snap.fix
    assert "inotify" not in checks


def test_snapshots_none_ok(dirs: dict[str, Path], good_policy: Path) -> None:
    snap = darwin_checks(FakeTmutil(out="Snapshots for disk /:\n"))["local snapshots"]
    assert snap.verdict == "ok"


def test_snapshots_tmutil_missing_warns(dirs: dict[str, Path], good_policy: Path) -> None:
    def missing(cmd: list[str]) -> subprocess.CompletedProcess[str]:
        raise FileNotFoundError(2, "No such file or directory", cmd[0])

    snap = darwin_checks(missing)["local snapshots"]
    assert snap.verdict == "warn"


def test_snapshots_tmutil_failing_is_not_reported_ok(
    dirs: dict[str, Path], good_policy: Path
) -> None:
    """tmutil ran but failed (no Full Disk Access, old macOS): we do not know; do not say ok."""
    fake = FakeTmutil(code=1, err="listlocalsnapshots: Operation not permitted\n")
    snap = darwin_checks(fake)["local snapshots"]
    assert snap.verdict == "warn", snap


def test_linux_checks_do_not_run_tmutil(dirs: dict[str, Path], good_policy: Path) -> None:
    fake = FakeTmutil(out=TMUTIL_TWO)
    checks = run_checks(Settings.load(), platform="linux", run=fake)
    assert fake.calls == []
    assert "inotify" in {c.name for c in checks}
    assert "local snapshots" not in {c.name for c in checks}


def test_cli_bad_config_is_exit_2_one_line(
    run_cli: Cli, dirs: dict[str, Path], good_policy: Path, tmp_path: Path
) -> None:
    cfg = tmp_path / "config.toml"
    cfg.write_text("this is = = not toml\n")
    done = run_cli("--config", cfg, "doctor")
    assert done.returncode == 2
    one_line_error(done.stderr)
