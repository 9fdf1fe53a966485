"""Jobs, not writes (issue 21): the guard admits a job's whole file at its first cut, keeps what the
job reads, waits when space will come, and knows exactly which folders are orphans.

Everything is real: ffmpeg, the guard (``janitor shim install`` or ``janitor run``), the pipeline
simulator (tests/pipeline_sim.py: batchalign3's exact calls, ffmpeg found on ``PATH``), the
daemon on its Unix socket, and a tmpfs per test (root only; skipped otherwise) holding the media
cache and the job temp tree, as the shipped policy shapes them.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests._daemon_helpers import DaemonSetup, daemon_setup, eventually, running_daemon
from tests._fixtures import forkserver
from tests._fixtures.console import JANITOR_BIN, janitor_json
from tests._fixtures.guard import install_guard
from tests._fixtures.pipeline import PCM_RATE, Pipeline, sim_command
from tests._fixtures.space import MiB, fill_file, free_of
from tests.commands.test_guard import log_of, report_of

pytestmark = [
    pytest.mark.skipif(
        shutil.which("ffmpeg") is None or shutil.which("ffprobe") is None,
        reason="ffmpeg/ffprobe not installed (Debian package ffmpeg; .ci/run installs it)",
    ),
    pytest.mark.usefixtures("front_end"),  # every test against both front ends of the guard
]

Cli = Callable[..., subprocess.CompletedProcess[str]]

#: The shipped policy's job tree, on a tmpfs (scopes as batchalign3 names them).
JOB_TREE = {
    "role": "scratch",
    "units": "dir",
    "unit_glob": ".tmp*",
    "unit_requires": ["fa_v2", "asr_v2"],
    "orphan_age": "12h",
    "min_age": "10m",
}
CACHE_GROUP = r"^(?P<key>[^/]+?)(?:\.tmp)?\.wav(?:\.lock)?$"


@dataclass
class Site:
    """A tmpfs with batchalign3's two trees, a daemon's environment, and a guard to put first
    on PATH: what a user has after ``janitor shim install`` (and ``janitor daemon``)."""

    setup: DaemonSetup
    cache: Path
    tmp: Path
    bin: Path

    def env(self, **extra: str | None) -> dict[str, str]:
        env = self.setup.env(**extra)
        env["PATH"] = f"{self.bin}{os.pathsep}{env['PATH']}"
        return env

    def sim(self, *args: str | os.PathLike[str]) -> list[str]:
        return sim_command(self.cache, self.tmp, *args)

    def start(self, *args: str | os.PathLike[str], **env: str | None) -> subprocess.Popen[str]:
        """The simulator in the background, ffmpeg resolved through the guard."""
        return subprocess.Popen(
            self.sim(*args),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self.env(**env),
        )

    def cli(self, *args: str, **env: str | None) -> subprocess.CompletedProcess[str]:
        return self.setup.run_cli(*args, **env)

    def log(self) -> list[dict[str, Any]]:
        """``janitor log --json``'s entries (run in this process: tests._fixtures.console)."""
        entries: list[dict[str, Any]] = janitor_json("log", "--json", env=self.setup.env())
        return entries

    def status(self) -> dict[str, Any]:
        """``janitor status --json`` (run in this process: tests._fixtures.console)."""
        status: dict[str, Any] = janitor_json("status", "--json", env=self.setup.env())
        return status

    def folders(self) -> list[Path]:
        return sorted(self.tmp.glob(".tmp*"))


@contextmanager
def site(
    tmp_path: Path,
    *,
    size: str = "64m",
    floor: str = "8MiB",
    quota: str = "40MiB",
    cache_min_age: str = "0s",
    settings: dict[str, str | None] | None = None,
) -> Iterator[Site]:
    """A tmpfs site (see :class:`Site`), the guard installed for it."""
    with daemon_setup(
        tmp_path,
        size=size,
        volume={"floor": floor},
        tree={"quota": quota, "min_age": cache_min_age, "group": CACHE_GROUP,
              "lock": "{key}.wav.lock"},
        settings=settings,
    ) as setup:  # fmt: skip
        tmp = setup.mount / "tmp"
        tmp.mkdir()
        trees = dict(setup.trees)
        trees["job_tmp"] = {**JOB_TREE, "path": str(tmp)}
        setup.write_policy(trees=trees)
        setup.trees = trees
        bin_dir = tmp_path / "bin"
        install_guard(bin_dir, setup.env())  # what `janitor shim install --dir` writes
        yield Site(setup, setup.tree, tmp, bin_dir)


def cuts_of(report: Path) -> list[dict[str, Any]]:
    return [w for w in report_of(report) if "fa_v2" in w.get("path", "")]


def finish(proc: subprocess.Popen[str], timeout: float = 180) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, out, err


# -- what a job reads stays; a file that cannot fit fails at its first cut -------------------------


def test_a_job_that_fits_only_if_its_own_wav_went_is_refused_at_its_first_cut(
    tmp_path: Path, m4a: Callable[[float], Path]
) -> None:
    """The issue's reproduction: 400 s cut into 20 groups from its cached WAV, on a 48 MiB
    tmpfs where the job fits only if that WAV were evicted. Before, the groups were admitted one
    by one and group 14's make-room evicted the WAV itself. Now the WAV is pinned before any
    room is made, and the working set (400 s x 64,000 B/s) is asked for at the first cut:
    it can never fit beside the WAV it reads, so it is refused at once, no group cut."""
    src = m4a(400)
    report = tmp_path / "report.jsonl"
    with site(tmp_path, size="48m", floor="16MiB") as s:
        proc = s.start("--groups", "20", "--group-s", "20", "--report", report, src)
        code, _, err = finish(proc)
        wavs = [w.stat().st_size for w in s.cache.glob("*.wav") if ".tmp" not in w.name]
        deleted = [e for e in s.log() if e["event"] == "delete"]
    assert code == 1, err
    assert "space-janitor: refused to write" in err and "never fit" in err, err
    assert "fa-v2-audio-0.pcm" in err, err  # the first cut: no group's compute spent
    assert cuts_of(report) == []
    assert len(wavs) == 1 and wavs[0] > 12 * MiB  # the WAV it reads stayed
    assert deleted == [], deleted


def test_room_is_made_from_other_entries_never_from_the_wav_the_job_reads(
    tmp_path: Path, m4a: Callable[[float], Path]
) -> None:
    """Inputs are pinned before outputs make room: the volume is so full that the very first
    cut needs cache entries evicted. The job's own WAV (a cache hit, two days unused: the first
    that least-recently-used order takes) stays; the unrelated entry, one day unused, goes;
    every group is cut from the WAV (5 groups of 60 s: the whole recording). (Before, the first
    cut's make-room took the WAV itself.)"""
    src = m4a(300)  # WAV 9.2 MiB, working set 18.3 MiB
    report = tmp_path / "report.jsonl"
    with site(tmp_path, size="64m", floor="16MiB", quota="64MiB") as s:
        # noatime, as many volumes are mounted: reading the WAV's header does not make it recent.
        subprocess.run(["mount", "-o", "remount,noatime", str(s.setup.mount)], check=True)
        made = s.start("--groups", "0", src)  # the conversion alone: a cache entry to hit later
        assert finish(made)[0] == 0
        (hit,) = [w for w in s.cache.glob("*.wav") if ".tmp" not in w.name]
        for f in (hit, hit.with_name(hit.name + ".lock")):  # the entry, and its lock file
            os.utime(f, (time.time() - 2 * 86400, time.time() - 2 * 86400))
        old = s.cache / ("0" * 24 + ".wav")
        fill_file(old, 20 * MiB)
        os.utime(old, (time.time() - 86400, time.time() - 86400))
        # Another program's file: what is left above the floor is less than one cut.
        fill_file(s.setup.mount / "filler.bin", 19 * MiB)
        proc = s.start("--groups", "5", "--group-s", "60", "--report", report, src)
        code, _, err = finish(proc)
        log = s.log()
        wavs = [w.name for w in s.cache.glob("*.wav") if ".tmp" not in w.name]
        old_left = old.exists()
    assert code == 0, err
    assert not old_left
    assert len(cuts_of(report)) == 5 and all(c["bytes"] == 60 * PCM_RATE for c in cuts_of(report))
    assert wavs == [hit.name]  # the job's WAV, never evicted
    deleted = [e for e in log if e["event"] == "delete"]
    assert deleted and all(wavs[0] not in (e["path"] or "") for e in deleted), deleted
    assert {e["detail"].get("reason") for e in deleted} == {"make-room"}, deleted


# -- whole-file admission: an admitted job is never refused midway ---------------------------------


def test_a_second_job_is_refused_at_its_first_cut_while_the_first_finishes_every_group(
    tmp_path: Path, m4a: Callable[[float], Path]
) -> None:
    """Two 400 s recordings that do not fit together (JANITOR_GUARD_WAIT_S=0: refuse at once):
    the one admitted first keeps its whole working set and cuts all 5 groups (80 s each, 2 s of
    compute after each); the other is refused at its first cut, before any group's compute."""
    a_src, b_src = m4a(400), m4a(401)
    a_report, b_report = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    with site(tmp_path, size="64m", floor="8MiB") as s:
        a = s.start(
            "--groups", "5", "--group-s", "80", "--pause-s", "2", "--report", a_report, a_src
        )
        eventually(lambda: cuts_of(a_report), timeout=60, what="job A's first cut")
        b = s.start(
            "--groups", "5", "--group-s", "80", "--report", b_report, b_src,
            JANITOR_GUARD_WAIT_S="0",
        )  # fmt: skip
        b_code, _, b_err = finish(b)
        a_code, _, a_err = finish(a)
    assert a_code == 0, a_err
    assert len(cuts_of(a_report)) == 5
    assert b_code == 1, b_err
    assert "refused to write" in b_err and "fa-v2-audio-0.pcm" in b_err, b_err
    assert cuts_of(b_report) == []


# -- waiting for room ----------------------------------------------------------------------------


def test_a_waiting_job_is_admitted_the_moment_the_other_jobs_folder_is_removed(
    tmp_path: Path, m4a: Callable[[float], Path]
) -> None:
    """Through the daemon: B's first cut does not fit while A runs, but will once A ends; it
    says so on stderr and waits; A's folder removed, B is admitted at once and cuts every
    group (5 of 80 s each)."""
    a_src, b_src = m4a(400), m4a(401)
    a_report, b_report = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    with site(tmp_path, size="64m", floor="8MiB") as s, running_daemon(s.setup):
        a = s.start(
            "--groups", "5", "--group-s", "80", "--pause-s", "1", "--hold-s", "3",
            "--report", a_report, a_src,
        )  # fmt: skip
        eventually(lambda: cuts_of(a_report), timeout=60, what="job A's first cut")
        b = s.start("--groups", "5", "--group-s", "80", "--report", b_report, b_src)
        a_code, _, a_err = finish(a)
        a_done = time.time()  # A removed its folder just before it exited
        b_code, _, b_err = finish(b)
        log = s.log()
        guard_log = (s.setup.log_dir / "guard.log").read_text()
    assert a_code == 0 and b_code == 0, (a_err, b_err, guard_log)
    assert len(cuts_of(a_report)) == 5 and len(cuts_of(b_report)) == 5
    # The pipeline shows ffmpeg's stderr only when it fails; the guard's log keeps the line.
    waited = [ln for ln in guard_log.splitlines() if "waiting: waiting for" in ln]
    assert len(waited) == 1 and "running job" in waited[0], guard_log
    assert "through the daemon after waiting" in guard_log, guard_log
    # B's working set was granted after A's was released, and promptly: the daemon told it.
    sets = [e for e in log if e["event"] == "grant" and e["detail"].get("job_id")]
    assert len(sets) == 2, sets
    first = sets[0]["reservation"]
    released = [e for e in log if e["event"] == "release" and e["reservation"] == first]
    assert released and released[0]["time"] <= sets[1]["time"] <= a_done + 5, (released, sets)


def test_a_waiter_that_cannot_be_served_does_not_hold_back_one_that_can(
    tmp_path: Path, m4a: Callable[[float], Path]
) -> None:
    """Without a daemon (the guard polls): B waits for A's working set (A holds it until the
    test kills it, so however slowly B starts on a loaded machine, A holds it then); C, small
    enough to fit beside A, does not delay B (what A gives back when it ends still covers B with
    C's bytes taken), so it passes B at once (backfill) and cuts its group; B's wait ends refused
    at its JANITOR_GUARD_WAIT_S, saying how long it waited. (Before, C waited behind B and both
    were refused.)"""
    a_src, b_src = m4a(400), m4a(402)
    reports = {k: tmp_path / f"{k}.jsonl" for k in "abc"}
    with site(tmp_path, size="64m", floor="8MiB") as s:
        a = s.start("--groups", "2", "--group-s", "20", "--hold-s", "600", "--report",
                    reports["a"], a_src)  # fmt: skip
        eventually(lambda: len(cuts_of(reports["a"])) == 2, timeout=60, what="job A's cuts")
        b = s.start("--groups", "2", "--group-s", "20", "--report", reports["b"], b_src,
                    JANITOR_GUARD_WAIT_S="6")  # fmt: skip
        _until_waiting(s, b, "B")
        c = s.start("--groups", "1", "--group-s", "5", "--report", reports["c"], m4a(30),
                    JANITOR_GUARD_WAIT_S="3")  # fmt: skip
        c_code, _, c_err = finish(c)
        b_code, _, b_err = finish(b)
        a.kill()
        finish(a)
    assert c_code == 0, c_err
    assert len(cuts_of(reports["c"])) == 1
    assert b_code == 1, b_err
    assert "waiting for" in b_err and "after waiting" in b_err, b_err
    assert cuts_of(reports["b"]) == []


def _until_waiting(s: Site, proc: subprocess.Popen[str], name: str) -> None:
    """Until ``proc`` (job ``name``) waits in the volume's queue; if it ends first, or does not
    wait within 60 s, the failure says what it and the guard said (a run on a loaded machine
    once timed out here with nothing to go on)."""

    def said() -> str:
        log = s.setup.log_dir / "guard.log"
        tail = log.read_text().splitlines()[-15:] if log.exists() else []
        return "guard.log, last lines:\n" + "\n".join(tail)

    def waiting() -> bool:
        if proc.poll() is not None:
            err = proc.stderr.read() if proc.stderr else ""
            pytest.fail(f"{name} ended ({proc.returncode}) before it waited: {err}\n{said()}")
        return _waiters(s) == 1

    try:
        eventually(waiting, timeout=60, what=f"{name} to wait")
    except pytest.fail.Exception as e:
        if "before it waited" in str(e):
            raise
        pytest.fail(f"{e}\n{said()}")


def _waiters(s: Site) -> int:
    import sqlite3

    conn = sqlite3.connect(f"file:{s.setup.ledger}?mode=ro", uri=True)
    try:
        return int(conn.execute("SELECT count(*) FROM waiters").fetchone()[0])
    except sqlite3.Error:
        return 0
    finally:
        conn.close()


# -- exact orphans ---------------------------------------------------------------------------------


def test_a_sigkilled_writers_folder_is_removed_by_the_daemon_within_seconds(
    tmp_path: Path, m4a: Callable[[float], Path]
) -> None:
    """The daemon at its default reap interval: the job folder of a writer killed mid-job goes
    within 30 s (not orphan_age's 12 h), with its working set; another program's old folder
    and a live job's folder stay."""
    src = m4a(60)
    report = tmp_path / "report.jsonl"
    with site(tmp_path, settings={"JANITOR_REAP_INTERVAL_S": None}) as s:
        other = s.tmp / ".tmpOTHERS"  # another program's, never seen by the guard
        (other / "fa_v2").mkdir(parents=True)
        (other / "fa_v2" / "keep.pcm").write_bytes(b"x" * 4096)
        with running_daemon(s.setup):
            live = s.start("--groups", "2", "--group-s", "5", "--hold-s", "60", m4a(20))
            doomed = s.start(
                "--groups", "6", "--group-s", "5", "--pause-s", "0.5", "--report", report, src
            )
            eventually(lambda: len(cuts_of(report)) >= 2, timeout=60, what="two cuts")
            mine = Path(cuts_of(report)[0]["path"]).parents[2]
            eventually(lambda: len(s.folders()) == 3, timeout=60, what="the live job's folder")
            doomed.kill()  # what the OOM killer does
            doomed.wait()
            killed = time.monotonic()
            eventually(lambda: not mine.exists(), timeout=30, what="the orphan's removal")
            gone_after = time.monotonic() - killed
            status = s.status()
            kept = [f for f in s.folders() if f not in (other,)]
            live.kill()
            finish(live)
        log = s.log()
        other_kept = (other / "fa_v2" / "keep.pcm").read_bytes() == b"x" * 4096
    assert gone_after < 30
    assert other_kept
    assert len(kept) == 1  # the live job's folder, while its writer ran
    deletes = [e for e in log if e["event"] == "delete" and mine.name in (e["path"] or "")]
    assert deletes and deletes[0]["detail"].get("reason") == "orphan", deletes
    assert all(r["path"] is None or mine.name not in r["path"] for r in status["reservations"])


def test_run_removes_only_what_is_its_own(
    tmp_path: Path, m4a: Callable[[float], Path], pipeline: Callable[..., Pipeline], run_cli: Cli
) -> None:
    """A folder that existed before the run, holding another job's files, survives a guarded
    write of the run into it; the run's own folder of a killed job goes."""
    p = pipeline("64m")
    theirs = p.tmp / ".tmpTHEIRS"
    (theirs / "fa_v2" / "audio").mkdir(parents=True)
    (theirs / "fa_v2" / "audio" / "other-job.pcm").write_bytes(b"y" * 8192)
    hour_ago = time.time() - 3600  # another job's, written before the run
    os.utime(theirs / "fa_v2" / "audio" / "other-job.pcm", (hour_ago, hour_ago))
    report = tmp_path / "report.jsonl"
    done = run_cli(
        "run", "--",
        *p.sim("--groups", "2", "--group-s", "3", "--job-dir", theirs, "--report", report,
               m4a(20)),
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert len(cuts_of(report)) == 2  # written into the other job's folder, guarded
    assert (theirs / "fa_v2" / "audio" / "other-job.pcm").read_bytes() == b"y" * 8192
    assert theirs.exists() and "existed before the run" in done.stderr, done.stderr
    assert "removed" not in done.stderr, done.stderr
    # Nor does a sweep take it at once (its writer is dead, but it held another job's files).
    swept = run_cli("sweep", "--json")
    assert swept.returncode in (0, 1), swept.stderr
    assert (theirs / "fa_v2" / "audio" / "other-job.pcm").read_bytes() == b"y" * 8192


def test_run_keeps_a_daemonized_childs_folder_and_its_guard(
    tmp_path: Path, m4a: Callable[[float], Path], pipeline: Callable[..., Pipeline]
) -> None:
    """A command that daemonizes (double fork, setsid) and goes on cutting after it exits:
    ``janitor run`` ends, keeps the child's live folder (its writer runs) and leaves the guard
    in place: the child's 8 later cuts are all guarded and all succeed."""
    p = pipeline("64m")
    report = tmp_path / "report.jsonl"
    err_file = tmp_path / "run.err"
    with open(err_file, "w") as err:
        run = forkserver.JanitorPopen(
            [str(JANITOR_BIN), "run", "--",
             *p.sim("--daemonize", "--groups", "8", "--group-s", "2", "--pause-s", "0.5",
                    "--report", report, m4a(20))],
            stdout=subprocess.DEVNULL, stderr=err, text=True,
        )  # fmt: skip
        assert run.wait(timeout=120) == 0
    said = err_file.read_text()
    # The run ended before the child's cuts did; it kept the child's folder and said why.
    assert "still runs" in said or "removed" not in said, said
    cuts = eventually(lambda: len(cuts_of(report)) == 8 and cuts_of(report), timeout=120,
                      what="the child's 8 cuts")  # fmt: skip
    assert all(c["bytes"] == 2 * PCM_RATE for c in cuts)
    eventually(lambda: p.job_folders() == [], timeout=30, what="the child to finish")
    log = log_of()
    sets = [e for e in log if e["event"] == "grant" and e["detail"].get("job_id")]
    assert len(sets) == 1 and sets[0]["path"] == os.path.dirname(cuts[0]["path"]), sets
    assert not [e for e in log if e["event"] == "delete"], log  # nothing was removed under it


def test_job_records_survive_a_daemon_restart(tmp_path: Path, m4a: Callable[[float], Path]) -> None:
    """A job recorded through the daemon is still known after the daemon restarts: its later
    cuts draw on the same working set, and no second one is granted."""
    report = tmp_path / "report.jsonl"
    with site(tmp_path) as s:
        with running_daemon(s.setup):
            proc = s.start(
                "--groups", "6", "--group-s", "5", "--pause-s", "1.0", "--report", report, m4a(40)
            )
            eventually(lambda: len(cuts_of(report)) >= 1, timeout=60, what="a first cut")
        jobs_between = s.status()["jobs"]
        with running_daemon(s.setup):
            code, _, err = finish(proc)
        log = s.log()
    assert code == 0, err
    assert len(jobs_between) == 1 and jobs_between[0]["state"] == "live", jobs_between
    assert len(cuts_of(report)) == 6
    sets = [e for e in log if e["event"] == "grant" and e["detail"].get("job_id")]
    assert len(sets) == 1, sets


def test_a_writer_is_its_pid_and_start_time(tmp_path: Path) -> None:
    """A job whose recorded writer's pid now names another process (another start time) is an
    orphan: a reused pid is never taken for the writer."""
    from janitor import Janitor
    from janitor.admission.jobs import JobFolder, reap_jobs, record_job
    from janitor.host.owner import process_start
    from janitor.ledger.jobs import Writer

    tmp = tmp_path / "tmp"
    folder = tmp / ".tmpabc"
    (folder / "fa_v2").mkdir(parents=True)
    policy = tmp_path / "policy.toml"
    policy.write_text(
        f'[volume]\nfloor = "1MiB"\n[trees.job_tmp]\nrole = "scratch"\npath = "{tmp}"\n'
        'units = "dir"\nunit_glob = ".tmp*"\n'
    )
    jan = Janitor.from_settings(policy=policy)
    st = folder.stat()
    where = JobFolder("job_tmp", str(folder), st.st_dev, st.st_ino)
    me = os.getpid()
    start = process_start(me)
    assert start is not None
    live = jan.ledger.call(lambda tx: record_job(tx, where, Writer(me, start), run=None, now=1.0))
    assert jan.ledger.call(lambda tx: reap_jobs(tx)) == []  # its writer, this process, runs
    other = tmp / ".tmpdef"
    (other / "fa_v2").mkdir(parents=True)
    st = other.stat()
    stale = JobFolder("job_tmp", str(other), st.st_dev, st.st_ino)
    jan.ledger.call(lambda tx: record_job(tx, stale, Writer(me, start - 100), run=None, now=2.0))
    ended = jan.ledger.call(lambda tx: reap_jobs(tx))
    assert [(e.job.folder, e.state) for e in ended] == [(str(other), "orphan")]
    assert [j.id for j in jan.jobs() if j.state == "live"] == [live.id]
    jan.ledger.close()


def test_a_parent_shell_that_runs_one_command_string_is_not_the_writer() -> None:
    """``sh -c "ffmpeg ...; true"`` per call: the shell ends with the call, so the writer is
    the process that ran it."""
    from janitor.host.owner import choose_writer

    # A group of its own, all killed at the end: a ``sleep`` left running in the test runner's
    # group would keep other tests' jobs of that group alive (tests/scenarios/test_lineage).
    proc = subprocess.Popen(["sh", "-c", "sleep 30; true"], start_new_session=True)
    try:
        shell = psutil.Process(proc.pid)
        eventually(lambda: shell.children(), timeout=10, what="sleep to start")
        assert choose_writer(proc.pid).pid == os.getpid()
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


# -- the library, without ffmpeg ---------------------------------------------------------------


@dataclass
class Lib:
    """A tmpfs with a job tree, a media file outside every tree, and a Janitor on them."""

    jan: Any
    mount: Path
    tmp: Path
    src: Path

    def cut(self, folder: str, n: int, nbytes: int, whole: int) -> Any:
        from janitor.guarding.request import CallRequest, PlannedWrite

        out = self.tmp / folder / "fa_v2" / "audio" / f"fa-v2-audio-1-{n}.pcm"
        out.parent.mkdir(parents=True, exist_ok=True)
        return CallRequest(
            (PlannedWrite(str(out), nbytes, str(self.src), whole),),
            (str(self.src),),
            owner_pid=os.getpid(),
            writer_pid=os.getpid(),
        )


@pytest.fixture
def lib(tmpfs: Callable[..., Path], write_policy: Callable[..., Path]) -> Iterator[Lib]:
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


def test_later_cuts_draw_on_the_working_set_with_no_new_admission(lib: Lib) -> None:
    from janitor.guarding.close import close_writes
    from janitor.guarding.wait import open_writes

    first = open_writes(lib.jan, lib.cut(".tmpjob", 0, MiB, 10 * MiB))
    (held,) = first.writes
    assert held.pooled and held.allowed == 10 * MiB
    fill_file(Path(held.output), MiB)
    close_writes(lib.jan, first.own, first.pins)
    later = open_writes(lib.jan, lib.cut(".tmpjob", 1, MiB, 10 * MiB))
    assert [w.reservation for w in later.writes] == [held.reservation]
    assert later.writes[0].allowed == 9 * MiB  # what the job has left
    grants = [e for e in lib.jan.log() if e.event == "grant"]
    assert len(grants) == 1 and grants[0].bytes == 10 * MiB
    (job,) = lib.jan.jobs()
    assert job.folder == str(lib.tmp / ".tmpjob") and [w.pid for w in job.writers] == [os.getpid()]
    # Its folder removed, the job is done and its working set released.
    shutil.rmtree(lib.tmp / ".tmpjob")
    lib.jan.reap()
    assert lib.jan.jobs() == [] and lib.jan.reservations() == []


def test_a_later_cut_of_a_job_put_at_risk_is_stopped_before_ffmpeg_runs(lib: Lib) -> None:
    from janitor.errors import SpaceRisk
    from janitor.guarding.wait import open_writes

    first = open_writes(lib.jan, lib.cut(".tmpjob", 0, MiB, 8 * MiB))
    hog = fill_file(lib.mount / "hog.bin", free_of(lib.mount) - 2 * MiB)  # below the floor
    decision = lib.jan.assess_risk(lib.jan.reservations()[0].device)
    assert decision is not None and first.writes[0].reservation in decision.at_risk
    with pytest.raises(SpaceRisk):
        open_writes(lib.jan, lib.cut(".tmpjob", 1, MiB, 8 * MiB))
    hog.unlink()


def test_a_working_set_that_could_never_fit_is_refused_at_once_with_the_numbers(lib: Lib) -> None:
    from janitor.errors import NeverFits
    from janitor.guarding.wait import open_writes

    req = lib.cut(".tmpbig", 0, MiB, 40 * MiB)  # more than the 32 MiB volume can ever give
    started = time.monotonic()
    with pytest.raises(NeverFits) as caught:
        open_writes(lib.jan, dataclasses.replace(req, wait_s=60))
    assert time.monotonic() - started < 30  # not the 60 s wait
    exc = caught.value
    assert exc.requested == 40 * MiB and exc.capacity == 32 * MiB and exc.floor == 4 * MiB
    assert exc.most < exc.requested and "never fit" in str(exc)
    assert exc.as_dict()["error"] == "never_fits"
    assert lib.jan.reservations() == []


def test_a_job_folder_that_held_older_files_is_not_removed_at_once(lib: Lib) -> None:
    """A folder with another job's old files, written into by a writer that then died: its
    files are not the guard's to judge at once; orphan_age decides."""
    folder = lib.tmp / ".tmptheirs"
    old = fill_file(folder / "fa_v2" / "audio" / "theirs.pcm", 4096)
    hour_ago = time.time() - 3600
    os.utime(old, (hour_ago, hour_ago))
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        from janitor.guarding.wait import open_writes

        req = dataclasses.replace(lib.cut(".tmptheirs", 0, MiB, 2 * MiB), writer_pid=child.pid)
        open_writes(lib.jan, req)
    finally:
        child.kill()
        child.wait()
    lib.jan.reap()
    (job,) = lib.jan.jobs()
    assert job.state == "orphan" and job.foreign
    assert lib.jan.remove_orphans() == []
    result = lib.jan.sweep()
    assert old.exists() and not [o for o in result.report.outcomes if o.deleted]


def test_a_jobs_working_set_cannot_be_renewed_and_shows_no_ttl(lib: Lib, run_cli: Cli) -> None:
    from janitor.guarding.wait import open_writes

    session = open_writes(lib.jan, lib.cut(".tmpjob", 0, MiB, 4 * MiB))
    rid = session.writes[0].reservation
    done = run_cli("renew", rid, "--ttl", "1h")
    assert done.returncode == 2 and "ends with its job" in done.stderr, done.stderr
    status = json.loads(run_cli("status", "--json").stdout)
    (r,) = [x for x in status["reservations"] if x["id"] == rid]
    assert r["expires"] is None and r["job_id"] == session.jobs[0]
    shown = run_cli("status")
    assert shown.returncode == 0 and "with its job" in shown.stdout, shown.stdout


def _sleeper() -> subprocess.Popen[bytes]:
    """A process to stand for a writer (the server that runs ffmpeg)."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def test_a_job_lives_while_any_of_its_writers_runs(lib: Lib) -> None:
    """Two writers: the first, which made the first cut (and owns its working set and the pin),
    dies; the job lives on with the second, keeps its working set (later cuts still draw on
    it, with no new admission) and what it reads."""
    from janitor.guarding.wait import open_writes

    w1, w2 = _sleeper(), _sleeper()
    try:
        first = open_writes(
            lib.jan, dataclasses.replace(lib.cut(".tmpjob", 0, MiB, 8 * MiB), writer_pid=w1.pid)
        )
        open_writes(
            lib.jan, dataclasses.replace(lib.cut(".tmpjob", 1, MiB, 8 * MiB), writer_pid=w2.pid)
        )
        w1.kill()
        w1.wait()
        lib.jan.reap()
        (job,) = lib.jan.jobs()
        assert job.state == "live"
        pool = first.writes[0].reservation
        assert [r.id for r in lib.jan.reservations()] == [pool]
        later = open_writes(
            lib.jan, dataclasses.replace(lib.cut(".tmpjob", 2, MiB, 8 * MiB), writer_pid=w2.pid)
        )
        assert later.writes[0].reservation == pool
        assert [e.event for e in lib.jan.log()].count("grant") == 1
    finally:
        for w in (w1, w2):
            w.kill()
            w.wait()
    lib.jan.reap()
    assert lib.jan.jobs()[0].state == "orphan" and lib.jan.reservations() == []


def test_pid_1_is_a_writer_like_any_other(lib: Lib) -> None:
    """A server that is a container's entrypoint runs ffmpeg as PID 1: its jobs live while it
    does (before, the guard itself was taken for the writer, and the job's folder went at the
    next reap, mid-job)."""
    from janitor.guarding.wait import open_writes

    guard = _sleeper()  # the guard: it exits after the call
    try:
        req = dataclasses.replace(
            lib.cut(".tmpjob", 0, MiB, 4 * MiB), writer_pid=1, owner_pid=guard.pid
        )
        open_writes(lib.jan, req)
    finally:
        guard.kill()
        guard.wait()
    lib.jan.reap()
    assert [j.state for j in lib.jan.jobs()] == ["live"]
    assert lib.jan.remove_orphans() == [] and (lib.tmp / ".tmpjob").exists()


def test_a_write_into_a_folder_without_a_pipeline_scope_is_no_job(lib: Lib) -> None:
    """``.tmp*`` folders of other programs (no fa_v2, asr_v2 ...) are not the pipeline's jobs."""
    from janitor.guarding.request import CallRequest, PlannedWrite
    from janitor.guarding.wait import open_writes

    out = lib.tmp / ".tmpRUSTC" / "out.pcm"
    out.parent.mkdir()
    req = CallRequest(
        (PlannedWrite(str(out), MiB, str(lib.src), 4 * MiB),), (), os.getpid(), os.getpid()
    )
    session = open_writes(lib.jan, req)
    assert lib.jan.jobs() == [] and not session.writes[0].pooled
    assert session.writes[0].allowed == MiB  # reserved for the call alone


def test_a_queued_call_keeps_its_input_pinned_while_it_waits_and_after(
    tmpfs: Callable[..., Path], write_policy: Callable[..., Path], holder: Callable[..., Any]
) -> None:
    """A conversion (not a job) whose input lies in a cache tree waits its turn: its pin on the
    input holds through every retry and after it is admitted."""
    import threading

    from janitor import Janitor
    from janitor.guarding.grant import grant
    from janitor.guarding.prepare import prepare
    from janitor.guarding.queue import Queued
    from janitor.guarding.request import CallRequest, PlannedWrite
    from janitor.guarding.wait import wait

    mount = tmpfs("32m")
    cache = mount / "cache"
    src = fill_file(cache / "in.wav", MiB)
    policy = write_policy({"c": {"role": "cache", "path": str(cache), "quota": "30MiB"}})
    jan = Janitor.from_settings(policy=policy)
    held = holder(policy, "c", 20 * MiB)  # 32 - 4 (floor) - 1 (in.wav) - 20 leaves ~7 MiB
    out = cache / "out.wav"
    req = CallRequest(
        (PlannedWrite(str(out), 10 * MiB),), (str(src),), os.getpid(), os.getpid(), wait_s=30
    )
    prep = prepare(jan, req)
    with pytest.raises(Queued) as q:
        grant(jan, prep)
    # A prepare again (a guard falling back after its daemon went away) is still a first write.
    assert prepare(jan, req).first
    releaser = threading.Timer(2.5, held.release)
    releaser.start()
    session = wait(jan, prep, q.value.ticket)
    releaser.join(60)  # the holder has exited, before the fixture's teardown would kill it
    assert session.waited_s > 2
    live = {p.id for p in jan.pins()}
    assert session.pins and set(session.pins) <= live
    jan.ledger.close()
