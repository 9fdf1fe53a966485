"""Who owns a reservation or pin made on the command line: the process the user means.

Real bash scripts run with ``bash script.sh``: the owner of ``id=$(janitor reserve ...)`` must be
the script, not the subshell bash forks for the command substitution (which exits at once); the
same through a pipe, a ``( ... )`` subshell and ``2>/dev/null``; a Python worker that runs the
CLI with subprocess stays the owner, even a forked multiprocessing worker.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from janitor.host.owner import choose_owner
from tests._fixtures.console import JANITOR_BIN
from tests._fixtures.volumes import Volume

MakeVolume = Callable[..., Volume]

#: Pull the id out of `janitor reserve --json` / `janitor pin --json` without jq.
SED_ID = r"""sed -n 's/^  "id": "\([rp]-[0-9a-f]*\)".*/\1/p'"""


@pytest.fixture
def vol(managed_volume: MakeVolume) -> Volume:
    return managed_volume(size="64m", floor="8MiB", quota="32MiB")


def status() -> dict[str, object]:
    done = subprocess.run(
        [str(JANITOR_BIN), "status", "--json"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def pins() -> list[dict[str, object]]:
    from janitor import Janitor

    jan = Janitor.from_settings()
    try:
        return [p.as_dict() for p in jan.pins()]
    finally:
        jan.ledger.close()


def run_script(tmp_path: Path, body: str) -> tuple[subprocess.Popen[str], int, str, Path]:
    """Run ``body`` as ``bash script.sh``; it writes its pid and the id it got, then waits for
    ``go`` to appear. Returns (process, script pid, id, go)."""
    script = tmp_path / "script.sh"
    ready, go = tmp_path / "ready", tmp_path / "go"
    script.write_text(
        textwrap.dedent(
            f"""\
            set -e
            PATH="{JANITOR_BIN.parent}:$PATH"
            {body}
            echo "$$ $id" > "{ready}.tmp"; mv "{ready}.tmp" "{ready}"
            while [ ! -e "{go}" ]; do sleep 0.05; done
            """
        )
    )
    proc = subprocess.Popen(
        ["bash", str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 30
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            _out, err = proc.communicate()
            pytest.fail(f"the script failed ({proc.returncode}): {err}")
        time.sleep(0.02)
    pid, got = ready.read_text().split()
    return proc, int(pid), got, go


def finish(proc: subprocess.Popen[str], go: Path) -> str:
    go.touch()
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    return err


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(f"id=$(janitor reserve t 2M --json 2>/dev/null | {SED_ID})", id="subst-pipe"),
        pytest.param("id=$(janitor reserve t 2M 2>/dev/null)", id="subst"),
        pytest.param("janitor reserve t 2M 2>/dev/null | cat > ids; id=$(cat ids)", id="pipe"),
        pytest.param("(janitor reserve t 2M > ids 2>/dev/null); id=$(cat ids)", id="subshell"),
        pytest.param(
            "{ janitor reserve t 2M > ids 2>/dev/null & wait; }; id=$(cat ids)", id="background"
        ),
    ],
)
def test_a_script_owns_what_it_reserves_however_it_calls_janitor(
    vol: Volume, tmp_path: Path, body: str
) -> None:
    (tmp_path / "w").mkdir()
    proc, script_pid, rid, go = run_script(tmp_path, f"cd {tmp_path / 'w'}\n{body}")
    try:
        live = status()["reservations"]
        assert isinstance(live, list)
        assert [(r["id"], r["owner_pid"]) for r in live] == [(rid, script_pid)]
    finally:
        finish(proc, go)
    assert status()["reservations"] == []  # the script ended: so did its reservation


def test_the_message_names_the_owner_and_a_script_owns_its_pins(
    vol: Volume, tmp_path: Path
) -> None:
    cached = vol.tree / "ab.wav"
    cached.write_bytes(b"x" * 4096)
    proc, script_pid, pid_id, go = run_script(
        tmp_path, f"id=$(janitor pin {cached} --json 2>{tmp_path / 'err'} | {SED_ID})"
    )
    try:
        assert [(p["id"], p["owner_pid"]) for p in pins()] == [(pid_id, script_pid)]
        err = (tmp_path / "err").read_text()
        long_form = f"(bash {tmp_path / 'script.sh'})"
        assert f"for pid {script_pid} " in err
        assert (long_form if len(long_form) <= 82 else "(bash script.sh)") in err
        assert "warning" not in err
    finally:
        finish(proc, go)
    assert pins() == []


WORKER = textwrap.dedent(
    """
    import json, multiprocessing, os, subprocess, sys, time

    def reserve(tag):
        out = subprocess.run([sys.argv[1], "reserve", "t", "1M", "--json", "--job", tag],
                             capture_output=True, text=True, check=True).stdout
        return os.getpid(), json.loads(out)["owner_pid"]

    if __name__ == "__main__":
        mine = reserve("main")
        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(1) as pool:
            forked = pool.apply(reserve, ("forked",))
        print(json.dumps({"main": mine, "forked": forked}), flush=True)
        sys.stdin.readline()
    """
)


def test_a_python_worker_calling_the_cli_stays_the_owner(vol: Volume, tmp_path: Path) -> None:
    """Also a forked multiprocessing worker: it is a copy of its parent, but not a shell."""
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    proc = subprocess.Popen(
        [sys.executable, str(script), str(JANITOR_BIN)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        line = proc.stdout.readline()
        assert line, proc.stderr.read() if proc.stderr else ""
        got = json.loads(line)
        assert got["main"][1] == got["main"][0] == proc.pid
        assert got["forked"][1] == got["forked"][0] != proc.pid  # the worker, not its parent
        live = status()["reservations"]
        assert isinstance(live, list)
        # The pool's worker has exited since: its reservation ended with it; ours lives.
        assert [(r["job"], r["owner_pid"]) for r in live] == [("main", proc.pid)]
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        proc.wait(timeout=30)
    assert status()["reservations"] == []


def test_an_owner_gone_already_falls_to_init_with_a_warning() -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    owner = choose_owner(gone.pid)
    assert owner.pid == 1 and owner.warning is not None
    assert "has exited already" in owner.warning and "--owner-pid" in owner.warning
    mine = choose_owner(os.getpid())
    assert mine.pid == os.getpid() and mine.warning is None


def test_explicit_owner_pid_is_taken_as_given(vol: Volume, tmp_path: Path) -> None:
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        done = subprocess.run(
            [str(JANITOR_BIN), "reserve", "t", "1M", "--owner-pid", str(sleeper.pid), "--json"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["owner_pid"] == sleeper.pid
        assert f"for pid {sleeper.pid} (sleep 60)" in done.stderr
    finally:
        sleeper.kill()
        sleeper.wait()
