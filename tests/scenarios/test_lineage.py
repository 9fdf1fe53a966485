"""A job lives while any of its processes runs (issue 33, items 1 and 3).

Item 1: the processes that keep a job's folder are every process its cuts came through (the one
that ran ffmpeg, the go-betweens, the writer) and what they forked that lives on after them (a
background subshell, a ``nohup``'ed loop), followed through its process group once its parent
is gone. Real scripts make real cuts through the real guard (both front ends) with the daemon
reaping every second, on a tmpfs.

Item 3: a pid is a process only with its exact start time: a new process handed a dead one's
pid through ``/proc/sys/kernel/ns_last_pid`` (root, Linux) a few clock ticks later is never
taken for it, by either backend, by the daemon's pidfd watch, or when a job is recorded.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests._daemon_helpers import eventually, running_daemon

from .test_jobs import JOB_TREE, Lib, site

needs_ffmpeg = pytest.mark.skipif(
    shutil.which("ffmpeg") is None or shutil.which("ffprobe") is None,
    reason="ffmpeg/ffprobe not installed (Debian package ffmpeg; .ci/run installs it)",
)

NS_LAST_PID = Path("/proc/sys/kernel/ns_last_pid")
needs_ns_last_pid = pytest.mark.skipif(
    not NS_LAST_PID.exists() or os.geteuid() != 0,
    reason="handing a pid on needs Linux's /proc/sys/kernel/ns_last_pid and root",
)

#: One cut of second $1 of "$SRC" into the job folder "$DIR", as batchalign3 makes an FA group.
CUT = textwrap.dedent(
    """\
    cut() {
        ffmpeg -nostdin -y -loglevel error -ss "$1" -to "$(($1 + 1))" -i "$SRC" \\
            -f f32le -acodec pcm_f32le -ar 16000 -ac 1 "$DIR/fa_v2/audio/fa-v2-audio-1-$1.pcm" \\
            || echo "cut $1 failed: $?" >> "$OUT/failed"
    }
    """
)


@pytest.fixture
def lib(tmpfs: Callable[..., Path], write_policy: Callable[..., Path]) -> Iterator[Lib]:
    """A tmpfs with a job tree and a source file, and a Janitor on them (as
    tests/scenarios/test_jobs)."""
    from janitor import Janitor

    mount = tmpfs("32m")
    tmp = mount / "tmp"
    tmp.mkdir()
    src = mount / "talk.wav"
    src.write_bytes(b"\0" * 4096)
    policy = write_policy({"job_tmp": {**JOB_TREE, "path": str(tmp), "min_age": "0s"}})
    jan = Janitor.from_settings(policy=policy)
    yield Lib(jan, mount, tmp, src)
    jan.ledger.close()


def _script(tmp_path: Path, body: str) -> Path:
    script = tmp_path / "job.sh"
    script.write_text("set -u\n" + CUT + textwrap.dedent(body))
    return script


def _gone(path: Path) -> bool:
    return not path.exists()


# -- item 1: what a writer forked keeps its job ---------------------------------------------------


#: The script cuts once, then leaves three cuts to what it forks, and exits at once; what it
#: forked writes how many cuts the folder holds when it is done, then ends.
LATER = {
    "subshell": """\
        cut 0
        (
            sleep 2
            for i in 1 2 3; do cut "$i"; sleep 0.3; done
            ls "$DIR/fa_v2/audio" | wc -l > "$OUT/held"
        ) &
        exit 0
        """,
    "nohup": """\
        cut 0
        nohup sh -c '
            sleep 2
            for i in 1 2 3; do
                ffmpeg -nostdin -y -loglevel error -ss "$i" -to "$((i + 1))" -i "$SRC" \\
                    -f f32le -acodec pcm_f32le -ar 16000 -ac 1 \\
                    "$DIR/fa_v2/audio/fa-v2-audio-1-$i.pcm" || echo "cut $i failed" >> "$OUT/failed"
                sleep 0.3
            done
            ls "$DIR/fa_v2/audio" | wc -l > "$OUT/held"
        ' > /dev/null 2>&1 &
        exit 0
        """,
}


#: A parent without job control, as a pipeline's master runs a script: the script stays in the
#: parent's group, and the parent starts another child after it (that is not the job's). It
#: started well before the script (a Linux start time counts 10 ms ticks: one started in the
#: same tick as the script would be no elder of it).
RUNNER = 'sleep 0.1; bash "$1"; echo $? > "$2"; sleep 600 & wait'


@contextlib.contextmanager
def _running(
    script: Path, tmp_path: Path, env: dict[str, str], own_group: bool
) -> Iterator[Callable[[], int]]:
    """``bash script`` run as a terminal runs it (a group of its own), or by a parent without
    job control in that parent's group: a group of the parent's own, not the test runner's,
    whose other workers' tests fork processes into it that a job there would rightly count as
    its own (they started after it and their parent is gone)."""
    if own_group:
        proc = subprocess.Popen(["bash", str(script)], env=env, start_new_session=True)
        try:
            yield lambda: proc.wait(timeout=60)
        finally:
            with contextlib.suppress(ProcessLookupError):  # what it forked, should it run on
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        return
    rc = tmp_path / "script.rc"
    runner = subprocess.Popen(
        ["sh", "-c", RUNNER, "runner", str(script), str(rc)], env=env, start_new_session=True
    )

    def ended() -> str | bool:
        return rc.exists() and rc.read_text().strip()

    try:
        yield lambda: int(eventually(ended, timeout=60, what="the script's end"))
    finally:
        os.killpg(runner.pid, signal.SIGKILL)
        runner.wait()


@needs_ffmpeg
@pytest.mark.usefixtures("front_end")
@pytest.mark.parametrize("own_group", [True, False], ids=["terminal-job", "no-job-control"])
@pytest.mark.parametrize("later", sorted(LATER))
def test_what_a_script_forks_keeps_its_job_after_the_script_exits(
    tmp_path: Path, m4a: Callable[[float], Path], later: str, own_group: bool
) -> None:
    """``bash job.sh`` cuts once and exits, leaving three cuts to a background subshell (or a
    ``nohup``'ed loop) that has not cut yet: the job's folder stays while that runs (it was
    removed within a second of the script's exit, and the later cuts failed), then goes at
    once. Run as a terminal runs it (a group of its own) and as a parent without job control
    runs it (in that parent's group: the parent and its other children do not keep it)."""
    src = m4a(8)
    out = tmp_path / "out"
    out.mkdir()
    with site(tmp_path) as s:
        folder = s.tmp / ".tmpSCRIPT"
        (folder / "fa_v2" / "audio").mkdir(parents=True)
        script = _script(tmp_path, LATER[later])
        env = s.env(DIR=str(folder), SRC=str(src), OUT=str(out))
        with running_daemon(s.setup), _running(script, tmp_path, env, own_group) as wait:
            assert wait() == 0  # it reaps every second
            exited = time.monotonic()
            held = eventually(lambda: (out / "held").exists(), timeout=60, what="the later cuts")
            assert held and time.monotonic() - exited > 2.5  # it outlived the script by that
            eventually(lambda: _gone(folder), timeout=15, what="the orphan's removal")
        log = s.log()
    failed = (out / "failed").read_text() if (out / "failed").exists() else ""
    assert failed == "" and (out / "held").read_text().strip() == "4", failed
    deletes = [e for e in log if e["event"] == "delete" and folder.name in (e["path"] or "")]
    assert deletes and deletes[0]["detail"].get("reason") == "orphan", deletes


#: A launcher starts ``sh -c LOOP``, waits for its first cut and exits: the loop goes on.
LAUNCHER = """\
import os, subprocess, sys, time
out = os.environ["OUT"]
loop = '''
for i in 0 1 2 3; do
    ffmpeg -nostdin -y -loglevel error -ss "$i" -to "$((i + 1))" -i "$SRC" \\
        -f f32le -acodec pcm_f32le -ar 16000 -ac 1 "$DIR/fa_v2/audio/fa-v2-audio-1-$i.pcm" \\
        || echo "cut $i failed: $?" >> "$OUT/failed"
    touch "$OUT/cut-$i"
    sleep 0.7
done
ls "$DIR/fa_v2/audio" | wc -l > "$OUT/held"
'''
subprocess.Popen(["sh", "-c", loop], start_new_session=len(sys.argv) > 1)
while not os.path.exists(os.path.join(out, "cut-0")):
    time.sleep(0.01)
"""


@needs_ffmpeg
@pytest.mark.usefixtures("front_end")
@pytest.mark.parametrize("loop_group", [False, True], ids=["same-group", "own-session"])
def test_a_loop_that_a_launcher_started_keeps_its_job_after_the_launcher_exits(
    tmp_path: Path, m4a: Callable[[float], Path], loop_group: bool
) -> None:
    """``sh -c LOOP`` started by a launcher that exits after the first cut: the launcher was
    the job's only recorded writer (the shell, a go-between, was skipped), so the folder went
    within a second and the later cuts failed. The shell is recorded too now, in a group of
    the launcher's or a session of its own."""
    src = m4a(8)
    out = tmp_path / "out"
    out.mkdir()
    launcher = tmp_path / "launch.py"
    launcher.write_text(LAUNCHER)
    with site(tmp_path) as s:
        folder = s.tmp / ".tmpLOOP"
        (folder / "fa_v2" / "audio").mkdir(parents=True)
        env = s.env(DIR=str(folder), SRC=str(src), OUT=str(out))
        args = [sys.executable, str(launcher), *(["own"] if loop_group else [])]
        with running_daemon(s.setup):
            proc = subprocess.Popen(args, env=env, start_new_session=True)
            assert proc.wait(timeout=60) == 0
            eventually(lambda: (out / "held").exists(), timeout=60, what="the loop's cuts")
            eventually(lambda: _gone(folder), timeout=15, what="the orphan's removal")
    failed = (out / "failed").read_text() if (out / "failed").exists() else ""
    assert failed == "" and (out / "held").read_text().strip() == "4", failed


# -- item 3: a pid is a process only with its exact start time ------------------------------------


def _hand_on(pid: int) -> subprocess.Popen[bytes] | None:
    """A new process given ``pid`` (free again) through ns_last_pid; None if another process
    of the machine took it first."""
    fd = os.open(NS_LAST_PID, os.O_WRONLY)
    try:
        os.write(fd, str(pid - 1).encode())
    finally:
        os.close(fd)
    proc = subprocess.Popen(["sleep", "30"])
    if proc.pid == pid:
        return proc
    proc.kill()
    proc.wait()
    return None


@pytest.fixture
def newcomers() -> Iterator[list[subprocess.Popen[bytes]]]:
    made: list[subprocess.Popen[bytes]] = []
    yield made
    for proc in made:
        proc.kill()
        proc.wait()


def _pid_handed_on(
    newcomers: list[subprocess.Popen[bytes]],
    dead: Callable[[], tuple[subprocess.Popen[bytes], float] | None],
) -> tuple[int, float, float]:
    """Start ``dead()`` (a short-lived process and its start time, read while it ran; None
    when it ended before it could be read, on a loaded machine: another try), wait for its end
    and hand its pid to a new process within 50 ms of its start (what the old tolerance took
    for the same process). Returns (pid, its start, the newcomer's start)."""
    from janitor.host.owner import process_start

    for _ in range(20):
        made = dead()
        if made is None:
            continue
        proc, start = made
        proc.wait()
        newcomer = _hand_on(proc.pid)
        if newcomer is None:
            continue
        newcomers.append(newcomer)
        later = process_start(newcomer.pid)
        assert later is not None and later != start
        if later - start < 0.05:
            return proc.pid, start, later
    pytest.skip("no new process got a dead one's pid within 50 ms of its start here")


def _short_lived() -> tuple[subprocess.Popen[bytes], float] | None:
    from janitor.host.owner import process_start

    proc = subprocess.Popen(["sleep", "0.02"])
    start = process_start(proc.pid)
    if start is None:  # ended before it was read
        proc.wait()
        return None
    return proc, start


@needs_ns_last_pid
def test_a_new_process_given_a_dead_ones_pid_is_not_it(
    newcomers: list[subprocess.Popen[bytes]],
) -> None:
    """A process that lived 20 ms, and a new one handed its pid right after: both backends
    say the first is dead, asked once or again and again (the pidfd watch opened now must not
    bind to the newcomer), while the newcomer is alive as itself."""
    from janitor.host.processes.linux import LinuxProcesses
    from janitor.host.processes.portable import PortableProcesses

    pid, start, later = _pid_handed_on(newcomers, _short_lived)
    for backend in (LinuxProcesses(), PortableProcesses()):
        name = type(backend).__name__
        assert not backend.alive(pid, start), (name, later - start)
        for _ in range(3):  # the first ask would open the watch, the later ones poll it
            assert not backend.still_alive(pid, start), (name, later - start)
        assert backend.alive(pid, later) and backend.still_alive(pid, later), name


@needs_ns_last_pid
def test_a_new_process_given_a_dead_writers_pid_does_not_keep_its_job(
    lib: Lib, newcomers: list[subprocess.Popen[bytes]]
) -> None:
    """A writer that exits right after its cut was recorded, and a new process handed its pid
    (in the writer's group, a child of the same long-running parent): the job is an orphan at
    the next reap, and goes."""
    from janitor.guarding.wait import open_writes

    tried: list[str] = []

    def writer_recorded() -> tuple[subprocess.Popen[bytes], float] | None:
        made = _short_lived()
        if made is None:
            return None
        proc, start = made
        tried.append(f".tmpjob{len(tried)}")
        req = dataclasses.replace(lib.cut(tried[-1], 0, 4096, 1 << 20), writer_pid=proc.pid)
        open_writes(lib.jan, req)
        Path(req.writes[0].path).write_bytes(b"\0" * 4096)  # what the cut wrote
        (job,) = [j for j in lib.jan.jobs() if j.folder.endswith(tried[-1])]
        if [(w.pid, w.start) for w in job.writers] != [(proc.pid, start)]:
            # It ended before its cut was recorded (a loaded machine): recorded as gone, as
            # it must be; this try shows nothing of a pid handed on.
            assert [w.start for w in job.writers] == [0.0], job
            proc.wait()
            return None
        return proc, start

    _, start, later = _pid_handed_on(newcomers, writer_recorded)
    lib.jan.reap()
    (job,) = [j for j in lib.jan.jobs() if j.folder.endswith(tried[-1])]
    assert job.state == "orphan", (later - start, job)
    assert str(lib.tmp / tried[-1]) in [j.folder for j in lib.jan.remove_orphans()]


@needs_ns_last_pid
def test_a_writer_gone_before_it_was_read_is_never_a_new_process_given_its_pid(
    lib: Lib, newcomers: list[subprocess.Popen[bytes]]
) -> None:
    """The process that ran ffmpeg exits before its guard's call is recorded (the guard is
    adopted), and a new process is handed its pid meanwhile: the guard's call (as both
    guards send it: the writer is the guard's parent) records the writer as gone, never the
    newcomer's identity."""
    from janitor.guarding.wait import open_writes
    from janitor.host.owner import process_start

    cutter = newcomer = None
    guard = 0
    try:
        for _ in range(20):
            # sh forks the "guard" (a sleep), tells its pid and exits: the guard is adopted.
            cutter = subprocess.Popen(
                ["sh", "-c", "sleep 30 & echo $!"], stdout=subprocess.PIPE, text=True
            )
            assert cutter.stdout is not None
            guard = int(cutter.stdout.readline())
            cutter.wait()
            cutter.stdout.close()
            newcomer = _hand_on(cutter.pid)
            if newcomer is not None:
                break
            os.kill(guard, signal.SIGKILL)
        if cutter is None or newcomer is None:
            pytest.skip("no new process got the dead writer's pid here")
        newcomers.append(newcomer)
        born = process_start(newcomer.pid)
        req = lib.cut(".tmpjob", 0, 4096, 4 << 20)
        call = dataclasses.replace(
            req, owner_pid=guard, writer_pid=cutter.pid, writer_is_parent=True
        )
        open_writes(lib.jan, call)
    finally:
        if guard:
            os.kill(guard, signal.SIGKILL)
    (job,) = lib.jan.jobs()
    assert cutter.pid == newcomer.pid and born is not None
    recorded = [(w.pid, w.start) for w in job.writers if w.pid == newcomer.pid]
    assert recorded == [(newcomer.pid, 0.0)], (recorded, born)  # gone; not the newcomer
