"""Nothing deleted without a record, nothing deleted that is not ours, bad input in our words
(issue 22). Real processes, a real tmpfs, a real daemon; a real second user and a real bind mount
where the machine can make them (skipped with the reason otherwise)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ._daemon_helpers import daemon_setup, running_daemon
from .conftest import MiB, fill_file, one_line_error

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
