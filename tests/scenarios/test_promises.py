"""Nothing deleted without a record, nothing deleted that is not ours, bad input in our words
(issue 22). Real processes, a real tmpfs, a real daemon; a real second user and a real bind mount
where the machine can make them (skipped with the reason otherwise)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from janitor.humanize import plural
from tests._daemon_helpers import daemon_setup, running_daemon
from tests._fixtures import forkserver
from tests._fixtures.console import JANITOR_BIN, one_line_error
from tests._fixtures.space import MiB, fill_file

Cli = Callable[..., subprocess.CompletedProcess[str]]


# -- absurd durations ----------------------------------------------------------------------------


@pytest.mark.parametrize("ttl", ["1e308", "99999999999999999d", "11y", "inf", "4000w"])
def test_a_ttl_past_ten_years_is_refused_with_one_line_and_nothing_reserved(
    ttl: str, managed_volume: Callable[..., object], run_cli: Cli
) -> None:
    managed_volume()
    done = run_cli("reserve", "t", "1M", "--ttl", ttl)
    assert done.returncode == 2, (done.stdout, done.stderr)
    line = one_line_error(done.stderr)
    assert ttl in line and ("too long" in line or "not a duration" in line), line
    status = json.loads(run_cli("status", "--json").stdout)
    assert status["reservations"] == []


def test_ten_years_is_the_longest_ttl_and_status_shows_it(
    managed_volume: Callable[..., object], run_cli: Cli
) -> None:
    managed_volume()
    done = run_cli("reserve", "t", "1M", "--ttl", f"{10 * 365}d", "--json")
    assert done.returncode == 0, done.stderr
    r = json.loads(done.stdout)
    assert r["expires"] - r["created"] == pytest.approx(10 * 365 * 86400)


def test_the_api_answers_422_to_an_absurd_ttl(tmp_path: Path) -> None:
    with daemon_setup(tmp_path) as setup, running_daemon(setup) as d, d.client() as c:
        for ttl in (1e308, "99999999999999999d"):
            r = c.post("/v1/reservations", json={"tree": "cache", "bytes": 1024, "ttl": ttl})
            assert r.status_code == 422, r.text
            assert r.json()["error"] == "bad_request" and "too long" in r.json()["message"]
        assert c.get("/v1/status").json()["reservations"] == []


def test_a_policy_with_an_absurd_age_is_refused_naming_the_key(
    tmp_path: Path, run_cli: Cli
) -> None:
    policy = tmp_path / "p.toml"
    policy.write_text(
        f'[trees.jobs]\nrole = "scratch"\npath = "{tmp_path / "jobs"}"\n'
        'orphan_age = "99999999999999999d"\n'
    )
    done = run_cli("policy", "validate", str(policy))
    assert done.returncode == 2, done.stderr
    assert "orphan_age" in done.stderr and "too long" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_a_setting_past_ten_years_is_refused(
    managed_volume: Callable[..., object], run_cli: Cli
) -> None:
    managed_volume()
    done = run_cli("status", env={"JANITOR_DEFAULT_TTL_S": "1e308"})
    assert done.returncode == 2
    line = one_line_error(done.stderr)
    assert "default_ttl_s" in line, line


# -- a tree root that became a symlink -------------------------------------------------------------


def test_a_tree_root_that_became_a_symlink_is_not_swept_and_says_so(
    managed_volume: Callable[..., Any], run_cli: Cli, tmp_path: Path
) -> None:
    vol = managed_volume(quota="1MiB")
    elsewhere = tmp_path / "elsewhere"
    old = fill_file(elsewhere / "big.bin", 4 * MiB)  # over the quota, were it followed
    os.utime(old, (time.time() - 86400, time.time() - 86400))
    vol.tree.rmdir()
    vol.tree.symlink_to(elsewhere)
    done = run_cli("sweep", "--json")
    assert done.returncode == 1, done.stderr
    data = json.loads(done.stdout)
    assert data["items"] == [] and old.exists()
    (warning,) = [w for w in data["warnings"] if "symlink" in w]
    assert str(vol.tree) in warning and str(elsewhere) in warning, warning
    assert "warning:" in done.stderr and "was not swept" in done.stderr, done.stderr
    doctor = run_cli("doctor")
    assert "symlink" in doctor.stdout + doctor.stderr, doctor.stdout


# -- another user's state dir; sudo ------------------------------------------------------------

NOBODY = 65534


def _unprivileged(cmd: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``cmd`` as a user without root's rights over other users' files: this test's uid with
    every capability dropped (setpriv), so the kernel checks permissions as for anyone."""
    return subprocess.run(
        ["setpriv", "--bounding-set=-all", "--inh-caps=-all", *cmd],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip


@pytest.fixture
def others_state_dir(tmp_path: Path, run_cli: Cli) -> tuple[Path, Path]:
    """A state dir with a ledger, given to another user (uid 65534, mode 0700); a policy."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv (util-linux) to make a second user's state dir")
    tree = tmp_path / "t"
    tree.mkdir()
    policy = tmp_path / "p.toml"
    policy.write_text(f'[volume]\nfloor = "1MiB"\n[trees.t]\nrole = "cache"\npath = "{tree}"\n')
    state = tmp_path / "theirs"
    done = run_cli("reserve", "t", "1M", "--ttl", "1h", env={
        "JANITOR_STATE_DIR": str(state), "JANITOR_POLICY": str(policy)})  # fmt: skip
    assert done.returncode == 0, done.stderr
    for p in [state, *state.iterdir()]:
        os.chown(p, NOBODY, NOBODY)
    state.chmod(0o700)
    return state, policy


def _listing(folder: Path) -> list[tuple[str, int, int, int]]:
    return sorted((p.name, p.stat().st_uid, p.stat().st_size, p.stat().st_mtime_ns)
                  for p in folder.iterdir())  # fmt: skip


@pytest.mark.parametrize("args", [["status"], ["log"], ["sweep"], ["sweep", "--dry-run"],
                                  ["reserve", "t", "1M"], ["status", "--json"]])  # fmt: skip
def test_another_users_state_dir_is_one_line_naming_it_and_its_owner(
    args: list[str], others_state_dir: tuple[Path, Path]
) -> None:
    state, policy = others_state_dir
    before = _listing(state)
    env = dict(os.environ, JANITOR_STATE_DIR=str(state), JANITOR_POLICY=str(policy))
    done = _unprivileged([str(JANITOR_BIN), *args], env)
    assert done.returncode == 2, (done.stdout, done.stderr)
    line = one_line_error(done.stderr)
    assert str(state) in line and "uid 65534" in line and "JANITOR_STATE_DIR" in line, line
    assert _listing(state) == before  # nothing changed there


def test_sudo_janitor_is_refused_in_another_users_state_dir_and_creates_nothing(
    others_state_dir: tuple[Path, Path], run_cli: Cli
) -> None:
    state, policy = others_state_dir
    before = _listing(state)
    for args in (["sweep", "--dry-run"], ["status"], ["reserve", "t", "1M"]):
        done = run_cli(*args, env={"JANITOR_STATE_DIR": str(state), "JANITOR_POLICY": str(policy)})
        assert done.returncode == 2, (args, done.stderr)
        line = one_line_error(done.stderr)
        assert "refusing to run as root" in line and "uid 65534" in line, line
    assert _listing(state) == before  # no root-owned locks/ left behind


def test_a_users_janitor_moves_aside_what_an_earlier_root_run_left(
    tmp_path: Path, run_cli: Cli
) -> None:
    """The state dir is the user's, but a root run of an older janitor left ``locks/`` and the
    ledger's lock file there, owned by another user: the user's janitor moves them aside,
    says so once, and works. (The user: this test's uid without its rights; the leftovers
    belong to another uid, as root's do to a user.)"""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv (util-linux) to give files to another user")
    tree = tmp_path / "t"
    fill_file(tree / "old.bin", MiB)
    policy = tmp_path / "p.toml"
    policy.write_text(f'[volume]\nfloor = "1MiB"\n[trees.t]\nrole = "cache"\npath = "{tree}"\n')
    state = tmp_path / "mine"
    env = {"JANITOR_STATE_DIR": str(state), "JANITOR_POLICY": str(policy)}
    assert run_cli("sweep", "--dry-run", **{"env": env}).returncode == 0
    for p in [state / "locks", *(state / "locks").iterdir(), state / "ledger.sqlite3.lock"]:
        os.chown(p, NOBODY, NOBODY)
    (state / "locks").chmod(0o700)
    full = dict(os.environ, **env)
    done = _unprivileged([str(JANITOR_BIN), "sweep", "--dry-run"], full)
    assert done.returncode == 0, done.stderr
    assert "moved aside" in done.stderr and "uid 65534" in done.stderr, done.stderr
    assert (state / "locks").stat().st_uid == os.geteuid()
    again = _unprivileged([str(JANITOR_BIN), "sweep", "--dry-run"], full)
    assert again.returncode == 0 and "moved aside" not in again.stderr, again.stderr


# -- bind mounts -----------------------------------------------------------------------------------


def _old_files(folder: Path, n: int, size: int) -> list[Path]:
    """``n`` files a month old in ``folder`` (itself a month old too)."""
    files = [fill_file(folder / f"keep-{i}.bin", size) for i in range(n)]
    for f in [*files, folder]:
        os.utime(f, (time.time() - 30 * 86400, time.time() - 30 * 86400))
    return files


def test_a_bind_mount_inside_a_cache_is_another_filesystem(
    bind: Callable[[Path, Path], Path], tmp_path: Path, write_policy: Callable[..., Path],
    run_cli: Cli,
) -> None:  # fmt: skip
    """``mount --bind OUTSIDE TREE/bound``: the same filesystem, the same device number; a sweep
    deleted every old file of OUTSIDE. Now no file below the mount point is counted or chosen."""
    tree, outside = tmp_path / "cache", tmp_path / "outside"
    files = _old_files(outside, 4, MiB)
    write_policy({"c": {"role": "cache", "path": str(tree), "quota": "1MiB", "max_age": "1d",
                        "min_age": "0s"}}, floor="1MiB")  # fmt: skip
    bind(outside, tree / "bound")
    done = run_cli("sweep", "--json")
    assert done.returncode in (0, 1), done.stderr
    data = json.loads(done.stdout)
    assert data["items"] == [], data["items"]
    assert all(f.exists() for f in files)
    (t,) = json.loads(run_cli("status", "--json").stdout)["trees"]
    assert t["usage"] < MiB  # the outside files are not the tree's


def test_a_bind_mount_inside_a_job_folder_keeps_the_folder(
    bind: Callable[[Path, Path], Path], tmp_path: Path, write_policy: Callable[..., Path],
    run_cli: Cli,
) -> None:  # fmt: skip
    """An orphan job folder with a bind mount inside it, and a unit folder that is itself a bind
    mount: neither is removed, nothing of the outside folders goes."""
    jobs, outside, other = tmp_path / "jobs", tmp_path / "outside", tmp_path / "other"
    files = _old_files(outside, 3, 64 * 1024) + _old_files(other / "fa_v2", 2, 64 * 1024)
    os.utime(other, (time.time() - 30 * 86400, time.time() - 30 * 86400))
    orphan = jobs / ".tmpOLD"
    _old_files(orphan / "fa_v2", 1, 4096)
    write_policy({"j": {"role": "scratch", "path": str(jobs), "units": "dir",
                        "unit_glob": ".tmp*", "unit_requires": ["fa_v2"], "orphan_age": "1h",
                        "min_age": "0s"}}, floor="1MiB")  # fmt: skip
    bind(outside, orphan / "fa_v2" / "data")
    os.utime(orphan / "fa_v2", (time.time() - 86400, time.time() - 86400))
    os.utime(orphan, (time.time() - 86400, time.time() - 86400))
    bind(other, jobs / ".tmpBOUND")
    done = run_cli("sweep", "--json")
    data = json.loads(done.stdout)
    assert all(f.exists() for f in files), data
    assert not any(i["deleted"] for i in data["items"]), data["items"]
    assert orphan.exists()


# -- nothing deleted without a record ----------------------------------------------------------


def _recorded(state: Path) -> dict[str, str]:
    """Every path the log records as deleted or being deleted, with its event."""
    import sqlite3

    conn = sqlite3.connect(f"file:{state / 'ledger.sqlite3'}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT path, event FROM log WHERE event IN ('delete', 'deleting')"
        ).fetchall()
    finally:
        conn.close()
    return {p: e for p, e in rows}


@pytest.fixture
def many_units(tmpfs: Callable[..., Path], write_policy: Callable[..., Path]) -> Callable[..., Any]:
    """``many_units(n, state_size=None)``: a cache of n one-page files, all past the quota, and
    (with ``state_size``) the state dir on a tmpfs of its own of that size."""

    def make(n: int, state_size: str | None = None) -> tuple[Path, list[Path], Path]:
        mount = tmpfs("128m")
        tree = mount / "c"
        files = []
        for i in range(n):
            f = tree / f"{i // 1000:02d}" / f"f{i:06d}.bin"
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_bytes(b"x" * 100)
            files.append(f)
        old = time.time() - 86400
        for f in files:
            os.utime(f, (old, old))
        write_policy({"c": {"role": "cache", "path": str(tree), "max_age": "1h", "min_age": "0s"}},
                     floor="1MiB")  # fmt: skip
        state = tmpfs(state_size, name="state") / "s" if state_size else mount / ".." / "s"
        return tree, files, state

    return make


@pytest.mark.parametrize("sliver", [0, 160 * 1024])
def test_a_full_state_disk_deletes_nothing_it_cannot_record_and_says_what_happened(
    sliver: int, many_units: Callable[..., Any], run_cli: Cli
) -> None:
    """The state dir's disk full, or with room for a few batches' records: every file deleted
    has its record, and the one line says how many went and how many did not."""
    _, files, state = many_units(2000, state_size="4m")
    env = {"JANITOR_STATE_DIR": str(state)}
    assert run_cli("sweep", "--dry-run", env=env).returncode == 0  # ledger and locks made
    filler = state.parent / "filler"
    with open(filler, "wb") as f:  # the state dir's disk full but for a sliver
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass
    os.truncate(filler, max(0, filler.stat().st_size - sliver))
    done = run_cli("sweep", env=env)
    assert done.returncode == 75, (done.returncode, done.stderr)
    gone = [f for f in files if not f.exists()]
    filler.unlink()  # to read the log back
    recorded = _recorded(state)
    assert {str(f) for f in gone} <= set(recorded), len(set(map(str, gone)) - set(recorded))
    # One line says what did and did not happen, whichever write met the full disk first.
    said = done.stderr
    assert "disk is full" in said and "Traceback" not in said, said
    if gone:
        went = f"deleted {plural(len(gone), 'unit')} before"
        assert went in said and "not deleted" in said, said
    else:
        assert "nothing was deleted" in said or "no deletion" in said, said


def test_a_sweep_killed_midway_leaves_a_record_of_every_file_it_deleted(
    many_units: Callable[..., Any],
) -> None:
    _, files, state = many_units(12000)
    env = dict(os.environ, JANITOR_STATE_DIR=str(state))
    proc = forkserver.JanitorPopen([str(JANITOR_BIN), "sweep"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and all(f.exists() for f in files[:: len(files) // 20]):
        time.sleep(0.005)
    proc.kill()  # mid-sweep, as the OOM killer would
    proc.wait()
    gone = {str(f) for f in files if not f.exists()}
    assert 0 < len(gone) < len(files), len(gone)
    recorded = _recorded(state)
    assert gone <= set(recorded), f"{len(gone - set(recorded))} deleted without a record"
    log = forkserver.run([str(JANITOR_BIN), "log"], env=env, capture_output=True, text=True)
    if "deleting" in recorded.values():
        assert "being deleted when the janitor stopped" in log.stdout


# -- thousands of reservations -------------------------------------------------------------------


def test_status_shows_the_reservations_that_matter_and_counts_the_rest(
    managed_volume: Callable[..., Any], run_cli: Cli
) -> None:
    """300 live reservations: the table shows a dozen (the largest among them), says how many
    more there are, and --json still lists every one."""
    vol = managed_volume(size="64m", floor="4MiB")
    holder = subprocess.Popen(["sleep", "300"])
    try:
        jan = vol.janitor()
        ids = [jan.reserve("t", 1024, owner_pid=holder.pid, ttl="1h", job=f"j{i}").id
               for i in range(300)]  # fmt: skip
        big = jan.reserve("t", "5MiB", owner_pid=holder.pid, ttl="1h", job="the-big-one").id
        done = run_cli("status", env={"COLUMNS": "200"})
        assert done.returncode == 0, done.stderr
        rows = [ln for ln in done.stdout.splitlines() if " r-" in ln]
        assert len(rows) == 12, done.stdout
        assert any(big in ln for ln in rows)  # the largest is among them
        assert "and 289 more" in done.stdout and "--json" in done.stdout, done.stdout
        listed = json.loads(run_cli("status", "--json").stdout)["reservations"]
        assert {r["id"] for r in listed} == {*ids, big}
    finally:
        holder.kill()
        holder.wait()
