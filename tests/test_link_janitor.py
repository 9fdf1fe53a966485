"""``scripts/link-janitor.sh``: the README's first line runs it where the Python refuses outside
installs, so that a new shell finds ``janitor``. It links into the first of ``~/.local/bin``
and ``/usr/local/bin`` on PATH that it may write, replaces only a link, never a file, and says
what it did in one line (exit 0), or why not (exit 2, nothing changed)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "link-janitor.sh"


def _venv(tmp_path: Path) -> Path:
    """A stand-in environment: ``bin/janitor`` that says who it is."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    janitor = venv / "bin" / "janitor"
    janitor.write_text("#!/bin/sh\necho janitor from the venv\n")
    janitor.chmod(0o755)
    return venv


def _run(tmp_path: Path, path: str, venv: Path | None) -> subprocess.CompletedProcess[str]:
    env = {"HOME": str(tmp_path / "home"), "PATH": f"{path}:/usr/bin:/bin"}
    if venv is not None:
        env["VIRTUAL_ENV"] = str(venv)
    return subprocess.run(["sh", str(SCRIPT)], env=env, capture_output=True, text=True)


def test_links_into_local_bin_on_path_and_a_new_shell_runs_it(tmp_path: Path) -> None:
    local = tmp_path / "home" / ".local" / "bin"
    local.mkdir(parents=True)
    done = _run(tmp_path, str(local), _venv(tmp_path))
    assert done.returncode == 0, done.stderr
    assert os.readlink(local / "janitor") == str(tmp_path / "venv" / "bin" / "janitor")
    fresh = subprocess.run(
        ["sh", "-c", "janitor"], env={"PATH": f"{local}:/usr/bin:/bin"},
        capture_output=True, text=True,
    )  # fmt: skip
    assert fresh.stdout == "janitor from the venv\n"
    assert done.stdout.count("\n") == 1 and str(local / "janitor") in done.stdout


def test_an_older_link_is_replaced(tmp_path: Path) -> None:
    local = tmp_path / "home" / ".local" / "bin"
    local.mkdir(parents=True)
    (local / "janitor").symlink_to(tmp_path / "old-clone" / ".venv" / "bin" / "janitor")
    assert _run(tmp_path, str(local), _venv(tmp_path)).returncode == 0
    assert os.readlink(local / "janitor") == str(tmp_path / "venv" / "bin" / "janitor")


def test_a_file_in_the_way_is_kept_and_named(tmp_path: Path) -> None:
    local = tmp_path / "home" / ".local" / "bin"
    local.mkdir(parents=True)
    (local / "janitor").write_text("someone else's\n")
    done = _run(tmp_path, str(local), _venv(tmp_path))
    assert done.returncode == 2
    assert (local / "janitor").read_text() == "someone else's\n"
    assert done.stderr.count("\n") == 1 and "is a file, not a link" in done.stderr


def test_without_an_active_environment_nothing_is_linked(tmp_path: Path) -> None:
    local = tmp_path / "home" / ".local" / "bin"
    local.mkdir(parents=True)
    done = _run(tmp_path, str(local), None)
    assert done.returncode == 2
    assert "no janitor in an active environment" in done.stderr
    assert list(local.iterdir()) == []


def test_with_no_writable_folder_on_path_it_makes_local_bin_and_says_how_to_add_it(
    tmp_path: Path,
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = _run(tmp_path, str(elsewhere), _venv(tmp_path))
    local = tmp_path / "home" / ".local" / "bin"
    assert done.returncode == 0, done.stderr
    assert (local / "janitor").is_symlink()
    assert "is not on PATH; add it" in done.stdout
