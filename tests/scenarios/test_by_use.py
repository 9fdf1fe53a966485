"""Protection by use, not by age (issue 32): the guarded ffprobe, entries awaiting use, eviction
under pressure by use, waits only for space that will come, draws in flight, a group cut again.

Everything is real: ffmpeg and ffprobe, both front ends of the guard (``janitor shim install``),
the pipeline simulator (tests/pipeline_sim.py) and long-lived processes as the pipeline's
server, the daemon on its Unix socket, and a tmpfs per test (root only; skipped otherwise).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests._daemon_helpers import eventually, running_daemon
from tests._fixtures.pipeline import PCM_RATE, REAL_FFMPEG
from tests._fixtures.space import MiB, fill_file, free_of

from .test_jobs import Site, cuts_of, finish, site

REAL_FFPROBE = shutil.which("ffprobe") or "ffprobe"

pytestmark = pytest.mark.skipif(
    shutil.which("ffmpeg") is None or shutil.which("ffprobe") is None,
    reason="ffmpeg/ffprobe not installed (Debian package ffmpeg; .ci/run installs it)",
)

#: batchalign3's probe of a cached WAV (fa_pipeline.rs, get_audio_duration_ms).
PROBE = ["-v", "quiet", "-show_entries", "format=duration", "-of",
         "default=noprint_wrappers=1:nokey=1"]  # fmt: skip
PCM = ["-f", "f32le", "-acodec", "pcm_f32le", "-ar", "16000", "-ac", "1"]


def make_wav(path: Path, seconds: float) -> Path:
    """A 16 kHz mono s16le WAV of that length, as batchalign3's media cache holds them."""
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [REAL_FFMPEG, "-nostdin", "-loglevel", "error", "-y", "-f", "lavfi", "-i",
         f"sine=frequency=300:duration={seconds}", "-ac", "1", "-ar", "16000", "-c:a",
         "pcm_s16le", str(path)],
        check=True,
    )  # fmt: skip
    return path


def entry(s: Site, seconds: float, name: str = "a1") -> Path:
    """A cached WAV ``{fp}.wav`` (24 hex digits) of that length in the site's media cache."""
    return make_wav(s.cache / f"{name:0>24}.wav", seconds)


def sampled(s: Site) -> int:
    """How many free-space readings the daemon has recorded."""
    with sqlite3.connect(f"file:{s.setup.ledger}?mode=ro", uri=True) as db:
        return int(db.execute("SELECT count(*) FROM samples").fetchone()[0])


def readings_after(s: Site, seen: int, more: int = 1) -> None:
    """Wait until the daemon has recorded ``more`` readings after the ``seen`` it had (two:
    one begun and ended after)."""
    eventually(lambda: sampled(s) >= seen + more, timeout=30, what="a reading")


def awaiting(s: Site) -> list[dict[str, Any]]:
    marks: list[dict[str, Any]] = s.status()["awaiting"]
    return marks


#: A server's worker (batchalign3 runs ffprobe from its Rust process): probe, note the
#: outcome, then stay (UTR).
_WORKER = """
import pathlib, subprocess, sys, time
done = subprocess.run(["ffprobe", *sys.argv[3:], sys.argv[1]], capture_output=True)
flag = pathlib.Path(sys.argv[2])
pathlib.Path(f"{flag}.out").write_bytes(done.stdout)
pathlib.Path(f"{flag}.err").write_bytes(done.stderr)
flag.write_text(str(done.returncode))
time.sleep(300)
"""


@contextmanager
def prober(s: Site, target: Path, *, tmpdir: Path | None = None) -> Iterator[subprocess.Popen[str]]:
    """A long-lived process (a server's worker) that has probed ``target`` with the guarded
    ffprobe, as batchalign3 does, and then stays (UTR); killed at the end."""
    flag = s.setup.root / f"probed-{target.name}"
    flag.unlink(missing_ok=True)
    env = s.env(**({"TMPDIR": str(tmpdir)} if tmpdir is not None else {}))
    proc = subprocess.Popen(
        [sys.executable, "-c", _WORKER, str(target), str(flag), *PROBE], env=env, text=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        eventually(lambda: flag.exists() and flag.read_text().strip(), timeout=60,
                   what="the probe")  # fmt: skip
        yield proc
    finally:
        proc.kill()
        proc.wait()


def probe_result(s: Site, target: Path) -> tuple[int, str, str]:
    flag = s.setup.root / f"probed-{target.name}"
    code = int(flag.read_text().strip())
    out = Path(f"{flag}.out").read_text()
    err = Path(f"{flag}.err").read_text()
    return code, out, err


# -- 1. the guarded ffprobe ----------------------------------------------------------------------


@pytest.mark.usefixtures("front_end")
def test_the_guarded_ffprobe_is_ffprobe_to_its_caller(tmp_path: Path) -> None:
    """``shim install`` puts an ``ffprobe`` beside the guarded ffmpeg; to its caller it is
    ffprobe: the same stdout, stderr and exit code, stdin passed through, with and without the
    daemon."""
    with site(tmp_path) as s:
        assert (s.bin / "ffprobe").is_file()
        wav = entry(s, 3)
        audio = wav.read_bytes()
        cases: list[tuple[list[str], bytes | None]] = [
            ([*PROBE, str(wav)], None),
            ([*PROBE, str(s.cache / "missing.wav")], None),
            (["-version"], None),
            (["-hide_banner", "-show_entries", "stream=sample_rate,channels", "-i", "pipe:0"],
             audio),
            ([], None),
        ]  # fmt: skip
        for daemon in (False, True):
            with running_daemon(s.setup) if daemon else _nothing():
                for args, stdin in cases:
                    bare = subprocess.run([REAL_FFPROBE, *args], input=stdin, capture_output=True)
                    guarded = subprocess.run(
                        ["ffprobe", *args], input=stdin, capture_output=True, env=s.env()
                    )
                    assert shutil.which("ffprobe", path=s.env()["PATH"]) == str(s.bin / "ffprobe")
                    assert (guarded.returncode, guarded.stdout, guarded.stderr) == (
                        bare.returncode, bare.stdout, bare.stderr,
                    ), (daemon, args)  # fmt: skip


@contextmanager
def _nothing() -> Iterator[None]:
    yield


@pytest.mark.usefixtures("front_end")
def test_a_guarded_ffprobe_gives_all_it_writes_in_its_order(tmp_path: Path) -> None:
    """With the daemon answering (the compiled front end then runs ffprobe while the daemon
    decides, its output held until the answer), what ffprobe writes passes whole and in its
    order: more than a pipe holds (every packet of a 150 s WAV, about 190 KiB), and stdout and
    stderr into one pipe (2>&1) interleaved as ffprobe interleaves them."""
    with site(tmp_path) as s:
        wav = entry(s, 150)
        args = ["-hide_banner", "-v", "info", "-show_packets", "-of", "compact", str(wav)]
        with running_daemon(s.setup):
            for stderr in (subprocess.PIPE, subprocess.STDOUT):
                bare = subprocess.run([REAL_FFPROBE, *args], stdout=subprocess.PIPE,
                                      stderr=stderr)  # fmt: skip
                guarded = subprocess.run(["ffprobe", *args], stdout=subprocess.PIPE,
                                         stderr=stderr, env=s.env())  # fmt: skip
                assert len(bare.stdout) > 128 * 1024, len(bare.stdout)
                assert (guarded.returncode, guarded.stdout, guarded.stderr) == (
                    bare.returncode, bare.stdout, bare.stderr,
                ), stderr  # fmt: skip


@pytest.mark.usefixtures("front_end")
def test_a_signal_to_a_guarded_ffprobe_ends_its_ffprobe_as_it_would_end_ffprobe(
    tmp_path: Path,
) -> None:
    """A guarded ffprobe reading a stdin that never ends (the daemon answering): SIGTERM to the
    process its caller started ends it as SIGTERM ends ffprobe, and no ffprobe is left; SIGKILL
    ends it too, and its ffprobe ends at the latest when its caller's end closes its stdin
    (on Linux at once: the held ffprobe dies with its guard)."""
    with site(tmp_path) as s, running_daemon(s.setup):
        for sig in (signal.SIGTERM, signal.SIGKILL):
            _signal_a_probe(s, sig)


def _signal_a_probe(s: Site, sig: int) -> None:
    proc = subprocess.Popen(["ffprobe", "-v", "quiet", "-i", "pipe:0"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=s.env())  # fmt: skip
    try:
        probes = eventually(lambda: _ffprobes_of(proc.pid), timeout=20,
                            what="the real ffprobe running")  # fmt: skip
        proc.send_signal(sig)
        assert proc.wait(20) == -sig
        assert proc.stdin is not None
        proc.stdin.close()
        eventually(lambda: not any(_alive(p) for p in probes), timeout=10,
                   what="no ffprobe left")  # fmt: skip
    finally:
        proc.kill()
        proc.wait()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def _ffprobes_of(pid: int) -> list[int]:
    """The real ffprobe a guarded one runs: its own pid (exec'd) or a child's (held)."""
    found = []
    for p in [pid, *_children(pid)]:
        try:
            exe = os.readlink(f"/proc/{p}/exe")
        except OSError:
            continue
        if os.path.basename(exe) == "ffprobe" and os.path.realpath(exe) == os.path.realpath(
            REAL_FFPROBE
        ):
            found.append(p)
    return found


def _children(pid: int) -> list[int]:
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    kids: list[int] = []
    for tid in tasks:
        try:
            kids += [int(k) for k in Path(f"/proc/{pid}/task/{tid}/children").read_text().split()]
        except OSError:
            continue
    return kids


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.usefixtures("front_end")
def test_a_probe_of_a_cache_entry_marks_it_awaiting_use_until_its_prober_dies(
    tmp_path: Path,
) -> None:
    """A probe of a cached WAV marks it awaiting use for the process that ran ffprobe (its pid,
    shown in `janitor status`), through the daemon and without one; a probe of a file outside
    the caches marks nothing; the prober's death ends the mark."""
    with site(tmp_path) as s:
        outside = make_wav(s.setup.mount / "elsewhere.wav", 2)
        for daemon in (True, False):
            wav = entry(s, 2, name=f"d{int(daemon)}")
            with running_daemon(s.setup) if daemon else _nothing():
                with prober(s, outside) as other:
                    assert probe_result(s, outside)[0] == 0
                    assert awaiting(s) == []
                    other.kill()
                with prober(s, wav) as worker:
                    code, out, _ = probe_result(s, wav)
                    assert code == 0 and out.strip() == "2.000000"
                    marks = eventually(lambda: awaiting(s), timeout=10, what="the mark")
                    assert [(m["path"], m["prober_pid"]) for m in marks] == [(str(wav), worker.pid)]
                    assert marks[0]["bytes"] == wav.stat().st_blocks * 512
                    assert marks[0]["until"] - marks[0]["since"] == pytest.approx(4 * 3600)
                eventually(lambda: awaiting(s) == [], timeout=10, what="the mark to end")
        log = [e for e in s.log() if e["event"] in ("await", "await-end")]
    assert [e["event"] for e in log].count("await") == 2, log
    # A reap (the daemon's, or any admission's) ends a dead prober's mark in the ledger too.
    ends = [e["detail"]["why"] for e in log if e["event"] == "await-end"]
    assert set(ends) <= {"its prober died"}, log


@contextmanager
def ledger_held(s: Site) -> Iterator[threading.Event]:
    """The ledger's writer lock held by another process's long write (as a sweep holds it)
    until the event yielded is set."""
    from janitor.ledger.db import Ledger

    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        ledger = Ledger(s.setup.ledger)
        try:
            with ledger.write():
                held.set()
                release.wait(60)
        finally:
            ledger.close()

    thread = threading.Thread(target=hold, name="ledger-held", daemon=True)
    thread.start()
    assert held.wait(10), "the ledger's writer lock was not taken"
    try:
        yield release
    finally:
        release.set()
        thread.join(10)


@pytest.mark.usefixtures("front_end")
def test_a_probe_answered_as_the_daemon_stops_is_marked_before_it_exits(tmp_path: Path) -> None:
    """The daemon answers a probe from a read-only look and marks the entry once the answer
    is sent: the prober's ffprobe runs at once, even while the ledger's writer lock is held
    elsewhere. A daemon asked to stop meanwhile (a service restart) finishes that mark before
    it exits, the lock let go within its second of grace: a stop never loses a mark whose
    ffprobe already ran."""
    with site(tmp_path) as s:
        wav = entry(s, 2)
        with running_daemon(s.setup) as d, ledger_held(s) as release, prober(s, wav) as worker:
            code, out, _ = probe_result(s, wav)
            assert (code, out.strip()) == (0, "2.000000")
            d.proc.send_signal(signal.SIGTERM)
            try:  # one that left its mark behind is gone by now (it stops in ~0.2 s)
                d.proc.wait(0.6)
            except subprocess.TimeoutExpired:
                pass
            release.set()  # within the second of grace a stopping API gives what it started
            assert d.proc.wait(10) == 0, d.stderr()
            marks = awaiting(s)  # read from the ledger: no daemon answers now
            assert [(m["path"], m["prober_pid"]) for m in marks] == [(str(wav), worker.pid)]


@pytest.mark.usefixtures("front_end")
def test_a_conversion_awaits_use_under_its_key_and_the_first_cut_takes_it_over(
    tmp_path: Path, m4a: Callable[[float], Path]
) -> None:
    """The pipeline's own flow through the guard: the conversion into the cache marks the entry
    (written as ``{fp}.tmp.wav``, renamed: the mark is on the unit, so it stays), the probe
    keeps it, the first cut of the job takes it over (the job's source pin covers the entry from
    then on), and once the job is done nothing protects the entry."""
    report = tmp_path / "report.jsonl"
    with site(tmp_path) as s, running_daemon(s.setup):
        first = s.start("--groups", "0", "--probe", "--utr-s", "30", "--report", report,
                        m4a(20))  # fmt: skip
        eventually(lambda: awaiting(s), timeout=60, what="the conversion's mark")
        # The mark is made as the conversion is admitted; the WAV appears at its rename.
        (wav,) = eventually(
            lambda: [w for w in s.cache.glob("*.wav") if ".tmp" not in w.name], timeout=60,
            what="the converted WAV",
        )  # fmt: skip
        marks = awaiting(s)
        assert [m["unit"] for m in marks] == [wav.stem] and marks[0]["path"].endswith(".tmp.wav")
        assert marks[0]["bytes"] == wav.stat().st_blocks * 512  # the renamed file, by its key
        assert marks[0]["prober_pid"] == first.pid
        first.kill()
        finish(first)
        eventually(lambda: awaiting(s) == [], timeout=10, what="the dead prober's mark to end")
        # Now the whole flow: its mark is taken over at the first cut, pinned for the job.
        job = s.start("--groups", "3", "--group-s", "5", "--probe", "--report", report, m4a(20))
        assert finish(job)[0] == 0

        def ended() -> dict[str, Any] | None:
            st = s.status()
            return st if not st["jobs"] else None

        status = eventually(ended, timeout=10, what="the job's end to be reaped")
        log = s.log()
    ends = [e for e in log if e["event"] == "await-end"]
    assert any("cuts from it" in e["detail"].get("why", "") for e in ends), ends
    assert status["awaiting"] == [] and status["jobs"] == []
    assert [p for p in report_lines(report) if "probe" in p][-1]["duration"] == pytest.approx(
        20, abs=0.1
    )


def report_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def test_await_ttl_ends_a_mark(tmp_path: Path) -> None:
    """A prober that lives on (a server) and never cuts: its mark ends at the tree's
    ``await_ttl``."""
    with site(tmp_path) as s:
        trees = dict(s.setup.trees)
        trees["cache"] = {**trees["cache"], "await_ttl": "3s"}
        s.setup.write_policy(trees=trees)
        wav = entry(s, 2)
        with prober(s, wav):
            marks = eventually(lambda: awaiting(s), timeout=10, what="the mark")
            assert marks[0]["until"] - marks[0]["since"] == pytest.approx(3)
            eventually(lambda: awaiting(s) == [], timeout=10, what="await_ttl to pass")


# -- 4. pressure and make-room evict by use, not by age ---------------------------------------


def test_pressure_evicts_fresh_entries_nothing_uses_and_never_one_awaiting_use(
    tmp_path: Path,
) -> None:
    """The issue's reproduction: a 96 MiB tmpfs, free space at 20 MiB against a free_low of 40
    MiB, and fresh cache WAVs (min_age 10 min, as shipped) that nothing uses: the daemon evicts
    them, least recently used first, within seconds. One of them, the oldest, awaits use (a
    live process probed it): it stays. (Before, min_age shielded every one of them.)"""
    with site(tmp_path, size="96m", floor="12MiB", quota="1GiB", cache_min_age="10m") as s:
        s.setup.write_policy(
            volume={"floor": "12MiB", "free_low": "40MiB", "free_target": "44MiB"},
            trees=s.setup.trees,
        )
        wavs = [entry(s, 150, name=f"e{i}") for i in range(5)]  # 4.6 MiB each
        for i, w in enumerate(wavs):  # e0 used longest ago
            os.utime(w, (time.time() - 300 + i * 10, time.time() - 300 + i * 10))
        fill_file(s.setup.mount / "other" / "data.bin", free_of(s.setup.mount) - 20 * MiB)
        with prober(s, wavs[0]):
            eventually(lambda: awaiting(s), timeout=10, what="the mark")
            with running_daemon(s.setup):
                # 24 MiB to free, 18.3 MiB evictable: every entry nothing uses goes.
                eventually(lambda: not any(w.exists() for w in wavs[1:]), timeout=10,
                           what="pressure eviction")  # fmt: skip
                kept = [w.name for w in wavs if w.exists()]
            deletes = [e for e in s.log() if e["event"] == "delete"]
    assert wavs[0].name in kept  # awaiting use: never evicted
    gone = [Path(e["path"]).name for e in deletes]
    assert gone[:4] == [w.name for w in wavs[1:5]][: len(gone[:4])]  # least recently used first
    assert {e["detail"]["reason"] for e in deletes} == {"pressure"}


def test_make_room_takes_fresh_entries_nothing_uses(tmp_path: Path) -> None:
    """A reservation that does not fit makes room from fresh cache entries (min_age 10 min)
    that nothing uses, and is granted. (Before, min_age kept them and it was refused.)"""
    with site(tmp_path, size="64m", floor="8MiB", quota="1GiB", cache_min_age="10m") as s:
        for i in range(4):
            entry(s, 200, name=f"f{i}")  # 6.1 MiB each, written just now
        fill_file(s.setup.mount / "other" / "data.bin", free_of(s.setup.mount) - 12 * MiB)
        done = s.cli("reserve", "cache", "10MiB", "--json", "--ttl", "1m")
        log = s.log()
    assert done.returncode == 0, done.stderr
    assert {e["detail"]["reason"] for e in log if e["event"] == "delete"} == {"make-room"}


# -- 3. a hopeless file fails at its probe, before UTR ------------------------------------------


@pytest.mark.usefixtures("front_end")
def test_a_probe_of_a_wav_whose_alignment_could_never_fit_refuses(tmp_path: Path) -> None:
    """A 48 MiB volume with a 16 MiB floor, a 400 s WAV in its cache (12.2 MiB, kept while it
    is aligned): its cuts (400 s x 64,000 B/s, 24.4 MiB) could never fit beside it, so the
    guarded ffprobe of it, with the prober's TMPDIR on that volume, refuses at once: exit 75,
    one ``space-janitor:`` line, nothing on stdout, nothing reserved. The same probe with
    TMPDIR on a volume with room is answered as ffprobe answers. The daemon saw the volume
    with the room before the WAV was converted (its bytes were free then), as it sees it
    before every conversion that a probe follows: that is no room the cuts could have."""
    with site(tmp_path, size="48m", floor="16MiB", quota="1GiB") as s, running_daemon(s.setup):
        readings_after(s, sampled(s))  # one with room
        wav = entry(s, 400)
        with prober(s, wav, tmpdir=s.tmp):
            code, out, err = probe_result(s, wav)
            status = s.status()
        with prober(s, wav, tmpdir=s.setup.root / "home" / "tmp"):
            fine = probe_result(s, wav)
    assert code == 75 and out == "", (code, out, err)
    (line,) = err.splitlines()
    assert line.startswith("space-janitor: refused to probe") and "never" in line, line
    assert "24.4 MiB" in line and str(wav) in line and "not had that room" in line, line
    assert status["reservations"] == [] and status["awaiting"] == []
    assert fine[0] == 0 and fine[1].strip() == "400.000000"


@pytest.mark.usefixtures("front_end")
def test_a_probe_during_an_outside_burst_is_not_refused_as_never_fitting(tmp_path: Path) -> None:
    """A 64 MiB volume with a 16 MiB floor and a 200 s WAV in its cache (6.1 MiB; its cuts
    12.2 MiB). An outside writer's burst takes all but 18 MiB: counted as never freed, it
    leaves less than the cuts need, but the daemon sampled the volume with the room seconds
    ago, so the probe runs as ffprobe and marks the WAV awaiting use (a refused probe marks
    nothing, and batchalign3 goes on to UTR after it). (Before, it was refused as "can never
    hold them".) A volume that never had the room in the daemon's samples is still refused:
    the test above, whose daemon samples too."""
    with site(tmp_path, size="64m", floor="16MiB", quota="1GiB") as s, running_daemon(s.setup):
        wav = entry(s, 200)
        readings_after(s, sampled(s))  # one with room
        burst = s.setup.mount / "burst.bin"  # on the volume, in no tree
        # Held open meanwhile, as in use: the burst puts the volume under pressure, and the
        # pressure pass would otherwise evict the WAV, which nothing covers before its probe.
        with open(wav, "rb"):
            fill_file(burst, max(0, free_of(s.tmp) - 18 * MiB))
            with prober(s, wav, tmpdir=s.tmp):
                code, out, err = probe_result(s, wav)
                assert code == 0 and out.strip() == "200.000000", (code, out, err)
                eventually(lambda: awaiting(s), timeout=30, what="the mark")
                marks = awaiting(s)
    assert [Path(m["path"]).name for m in marks] == [wav.name], marks


# -- 5. wait only for space that will come ----------------------------------------------------


@pytest.mark.usefixtures("front_end")
def test_a_first_cut_that_nothing_running_can_make_fit_is_refused_at_once(
    tmp_path: Path, m4a: Callable[[float], Path]
) -> None:
    """Nothing runs that will give space back (a reservation whose file is written in full
    gives nothing back: the file stays when it ends), so a first cut that does not fit is
    refused at once, saying so, instead of waiting its JANITOR_GUARD_WAIT_S (30 s here) for
    nothing. (Before, it waited the whole time.)"""
    report = tmp_path / "report.jsonl"
    with site(tmp_path, size="64m", floor="8MiB") as s:
        holder = subprocess.Popen(["sleep", "300"])
        try:
            out = s.tmp / "export.bin"  # in the scratch tree, in no job's folder
            done = s.cli("reserve", "job_tmp", "30MiB", "--path", str(out), "--owner-pid",
                         str(holder.pid), "--json")  # fmt: skip
            assert done.returncode == 0, done.stderr
            fill_file(out, 30 * MiB)  # written in full under its reservation
            started = time.monotonic()
            job = s.start("--groups", "4", "--group-s", "20", "--report", report, m4a(300),
                          JANITOR_GUARD_WAIT_S="30")  # fmt: skip
            code, _, err = finish(job)
            took = time.monotonic() - started
        finally:
            holder.kill()
            holder.wait()
    assert code == 1, err
    assert "refused at once" in err and "waiting would not make it fit" in err, err
    assert cuts_of(report) == []
    assert took < 20, took


def test_whether_waiting_can_help_is_judged_on_the_volume_as_it_is_not_as_it_was_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Job J's working set (20 MiB, written in full) runs; H's first cut (30 MiB) does not fit
    and waits for it. J ends (its folder removed) between H's retry and H's asking whether
    waiting can still help (``cannot_wait``, every ``HOPE_EVERY_S`` of a wait): J's 20 MiB are
    free space now, and no longer a reservation that will come. H fits, so it waits (its next
    retry admits it). (Before, the question took free space from the refusal, before J ended:
    J's bytes were counted nowhere, and H was refused at once, "waiting would not make it fit".
    A job's first cut met this in CI, under load, when the job ahead of it ended.)"""
    from janitor.core import Janitor
    from janitor.guarding.grant import grant
    from janitor.guarding.prepare import Prepared, prepare
    from janitor.guarding.queue import Queued, cannot_wait
    from janitor.guarding.request import CallRequest, PlannedWrite

    with site(tmp_path, size="64m", floor="8MiB") as s:
        s.setup.apply_env(monkeypatch)
        jan = Janitor.from_settings()
        sleepers = [subprocess.Popen(["sleep", "300"]) for _ in range(2)]
        try:
            fill_file(s.setup.mount / "other" / "data.bin",
                      free_of(s.setup.mount) - 8 * MiB - 32 * MiB)  # fmt: skip

            def cut(i: int, nbytes: int, wait_s: float = 0.0) -> Prepared:
                out = s.tmp / f".tmp{i}" / "fa_v2" / "audio" / "g.pcm"
                out.parent.mkdir(parents=True, exist_ok=True)
                write = PlannedWrite(str(out), 1024, str(s.cache / f"{i}.wav"), nbytes)
                req = CallRequest((write,), (), sleepers[i].pid, sleepers[i].pid, wait_s=wait_s)
                return prepare(jan, req)

            grant(jan, cut(0, 20 * MiB))  # J
            fill_file(s.tmp / ".tmp0" / "fa_v2" / "audio" / "g.pcm", 20 * MiB)  # written in full
            h = cut(1, 30 * MiB, wait_s=60)
            with pytest.raises(Queued) as queued:
                grant(jan, h)  # 12 MiB free above the floor; J gives 20 back: H waits
            with jan.ledger.read() as tx:
                place = tx.waiters.get(queued.value.ticket)
            assert place is not None
            shutil.rmtree(s.tmp / ".tmp0")  # J ends: its 20 MiB are free space now
            verdict = cannot_wait(jan, h, queued.value.refusal, place.device, place.bytes)
        finally:
            for p in sleepers:
                p.kill()
                p.wait()
            jan.ledger.close()
    assert verdict is None, str(verdict)


def test_a_group_cut_again_does_not_wait_for_its_own_jobs_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Job J (a 20 MiB working set) cuts a window, then cuts it again (growth, 5 MiB) on a
    volume an outside writer has filled to its floor, with no other job running and no cache to
    evict: only J's own working set would give space back, and J cannot end while its own cut
    waits. So the cut is refused at once ("waiting would not make it fit"). (Before, J's
    working set counted as space that would come, and the cut waited its whole bound for it.)"""
    from janitor.core import Janitor
    from janitor.errors import WaitWontHelp
    from janitor.guarding.close import close_writes
    from janitor.guarding.grant import grant
    from janitor.guarding.prepare import prepare
    from janitor.guarding.request import CallRequest, PlannedWrite
    from janitor.guarding.wait import open_writes

    with site(tmp_path, size="64m", floor="8MiB") as s:
        s.setup.apply_env(monkeypatch)
        jan = Janitor.from_settings()
        sleeper = subprocess.Popen(["sleep", "300"])
        try:
            audio = s.tmp / ".tmpJ" / "fa_v2" / "audio"
            audio.mkdir(parents=True)

            def cut(name: str) -> CallRequest:
                write = PlannedWrite(str(audio / name), 5 * MiB, str(s.cache / "j.wav"),
                                     20 * MiB, 0, 20_000_000)  # fmt: skip
                return CallRequest((write,), (), sleeper.pid, sleeper.pid, wait_s=60)

            first = open_writes(jan, cut("fa-v2-audio-1-0.pcm"))
            fill_file(audio / "fa-v2-audio-1-0.pcm", 5 * MiB)
            close_writes(jan, first.own, first.pins)
            # An outside writer takes every byte above the floor but J's outstanding 15 MiB.
            fill_file(s.setup.mount / "other" / "data.bin",
                      free_of(s.setup.mount) - 8 * MiB - 15 * MiB)  # fmt: skip
            with pytest.raises(WaitWontHelp) as refused:
                grant(jan, prepare(jan, cut("fa-v2-audio-2-0.pcm")))  # the same window again
        finally:
            sleeper.kill()
            sleeper.wait()
            jan.ledger.close()
    assert refused.value.coming == 0, refused.value.as_dict()


@pytest.mark.usefixtures("front_end")
def test_a_first_cut_waits_for_space_an_outside_writer_took_moments_ago(
    tmp_path: Path, m4a: Callable[[float], Path]
) -> None:
    """An outside writer (no reservation) that comes and goes takes the volume's room just
    before a job's first cut, and gives it back a few seconds later. The daemon's readings
    show it gave that much back moments ago, so the cut waits for it (within
    JANITOR_GUARD_WAIT_S) and the file completes; before, nothing known would give it back and
    the cut was refused at once. (A writer that only took space is covered by the tests of a
    first cut refused at once: no rise, nothing to wait for.)"""
    report = tmp_path / "report.jsonl"
    with site(tmp_path, size="64m", floor="8MiB") as s, running_daemon(s.setup):
        eventually(lambda: sampled(s) > 0, timeout=30, what="the daemon's first reading")
        burst = s.setup.mount / "burst.bin"  # on the volume, in no tree
        # A writer that comes and goes: a burst the daemon sees taken, then given back...
        for _ in range(2):
            seen = sampled(s)
            fill_file(burst, max(0, free_of(s.tmp) - 8 * MiB - 512 * 1024))
            readings_after(s, seen, 2)
            burst.unlink()
            seen = sampled(s)
            readings_after(s, seen, 2)
        # ... then taken again just before the job's first cut
        fill_file(burst, max(0, free_of(s.tmp) - 8 * MiB - 512 * 1024))
        gone = threading.Timer(4.0, lambda: burst.unlink(missing_ok=True))
        gone.start()
        try:
            job = s.start("--groups", "3", "--group-s", "20", "--report", report, m4a(60),
                          JANITOR_GUARD_WAIT_S="60")  # fmt: skip
            code, _, err = finish(job)
        finally:
            gone.join()
        guard_log = (s.setup.log_dir / "guard.log").read_text()
    assert code == 0, err
    assert len(cuts_of(report)) == 3
    assert "waiting for" in guard_log, guard_log


def test_a_later_write_passes_the_head_of_the_queue_only_if_it_does_not_delay_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Backfill with a reservation for the head (Slurm's): job J (20 MiB) runs; H, the head,
    waits for 30 MiB, 20 of which J gives back when it ends; W1 (2 MiB) fits in what H does not
    need from what is free now and is admitted at once, ahead of H; W2 (4 MiB) would make H wait
    past J's end and is refused (``janitor.guarding``, as the guard's verdict calls it)."""
    from janitor.core import Janitor
    from janitor.errors import ReservationRefused
    from janitor.guarding.grant import grant
    from janitor.guarding.prepare import prepare
    from janitor.guarding.queue import Queued
    from janitor.guarding.request import CallRequest, PlannedWrite

    with site(tmp_path, size="64m", floor="8MiB") as s:
        s.setup.apply_env(monkeypatch)
        jan = Janitor.from_settings()
        sleepers = [subprocess.Popen(["sleep", "300"]) for _ in range(4)]
        try:
            free = free_of(s.setup.mount)
            fill_file(s.setup.mount / "other" / "data.bin", free - 8 * MiB - 32 * MiB)

            def cut(i: int, nbytes: int, wait_s: float = 0.0) -> Any:
                folder = s.tmp / f".tmp{i}" / "fa_v2" / "audio"
                folder.mkdir(parents=True, exist_ok=True)
                write = PlannedWrite(str(folder / "g.pcm"), 1024, str(s.cache / f"{i}.wav"),
                                     nbytes)  # fmt: skip
                req = CallRequest((write,), (), sleepers[i].pid, sleepers[i].pid, wait_s=wait_s)
                return grant(jan, prepare(jan, req))

            cut(0, 20 * MiB)  # J: 12 MiB left free above the floor
            with pytest.raises(Queued):
                cut(1, 30 * MiB, wait_s=60)  # H: 18 short, J gives 20 back: it waits, head
            first = cut(2, 2 * MiB)  # W1: 12 free, 10 held for H: fits in the 2 left
            with pytest.raises(ReservationRefused) as refused:
                cut(3, 4 * MiB)  # W2: only 0 left that H does not need
        finally:
            for p in sleepers:
                p.kill()
                p.wait()
            jan.ledger.close()
    assert first.writes and first.writes[0].pooled
    assert refused.value.queued == 10 * MiB, refused.value.as_dict()
    assert "held for the job first in line" in str(refused.value)


# -- 6. draws in flight count --------------------------------------------------------------------


@pytest.mark.usefixtures("front_end")
def test_racing_cuts_on_one_working_set_never_overdraw_it(tmp_path: Path) -> None:
    """The issue's reproduction: 30 guarded cuts at once, 10 into each of 3 job folders, each a
    30 s window of a 60 s WAV (each job's working set: 3.66 MiB) on a volume with a 12 MiB
    floor. Together they would write 55 MiB; what is admitted never exceeds the working sets
    plus the growth the volume had room for, so free space never goes below the floor (the cuts
    past that are refused, exit 75). (Before, every racing cut saw the whole balance and free
    space fell to 7 MiB.)"""
    with site(tmp_path, size="64m", floor="12MiB", quota="1GiB") as s:
        wav = entry(s, 60)
        floor = 12 * MiB
        lowest = [free_of(s.setup.mount)]
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                lowest[0] = min(lowest[0], free_of(s.setup.mount))
                time.sleep(0.002)

        watcher = threading.Thread(target=sample, daemon=True)
        watcher.start()
        procs = []
        for j in range(3):
            audio = s.tmp / f".tmpjob{j}" / "fa_v2" / "audio"
            audio.mkdir(parents=True)
            for k in range(10):
                procs.append(subprocess.Popen(
                    ["ffmpeg", "-y", "-ss", "0.000", "-to", "30.000", "-i", str(wav), *PCM,
                     str(audio / f"fa-v2-audio-{k}-0.pcm")],
                    env=s.env(JANITOR_GUARD_WAIT_S="0"), stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE, text=True,
                ))  # fmt: skip
        results = [(p.wait(timeout=120), p.stderr.read() if p.stderr else "") for p in procs]
        stop.set()
        watcher.join()
    codes = sorted(code for code, _ in results)
    assert set(codes) <= {0, 75}, results
    assert codes.count(0) >= 3 and 75 in codes, codes
    assert all("space-janitor: refused" in err for code, err in results if code == 75), results
    assert lowest[0] >= floor - 64 * 1024, f"free space fell to {lowest[0] / MiB:.2f} MiB"


# -- 7. a group cut twice -----------------------------------------------------------------------


@pytest.mark.usefixtures("front_end")
def test_a_group_cut_again_is_growth_admitted_at_that_cut_and_the_file_never_fails_late(
    tmp_path: Path, m4a: Callable[[float], Path]
) -> None:
    """Job A cuts group 0 a second time (batchalign3's Whisper fallback: the same window into a
    second PCM in the same folder). That second cut is growth past A's working set, admitted
    then (``recut`` in the log), so what the volume shows free for others already leaves A its
    last groups: another writer that takes all of it does not make A's last cut fail late; A
    cuts every group. (Before, the second cuts drew on the bytes of A's last groups and A failed
    at its last cut.)"""
    report = tmp_path / "report.jsonl"
    with site(tmp_path, size="64m", floor="8MiB") as s, running_daemon(s.setup):
        a = s.start("--groups", "10", "--group-s", "20", "--recut", "0", "--recut", "1",
                    "--pause-s", "1", "--report", report, m4a(200))  # fmt: skip
        eventually(lambda: len(cuts_of(report)) >= 4, timeout=60, what="A's re-cuts")
        check = json.loads(s.cli("check", "cache", "1", "--json").stdout)
        holder = subprocess.Popen(["sleep", "300"])
        try:
            taken = s.cli("reserve", "cache", str(check["available"]), "--owner-pid",
                          str(holder.pid), "--json")  # fmt: skip
            assert taken.returncode == 0, taken.stderr
            code, _, err = finish(a)
        finally:
            holder.kill()
            holder.wait()
        log = s.log()
    assert code == 0, err
    assert len(cuts_of(report)) == 12
    recuts = [e for e in log if e["event"] == "recut"]
    assert [e["bytes"] for e in recuts] == [20 * PCM_RATE] * 2, recuts


@pytest.mark.usefixtures("front_end")
def test_a_group_cut_again_without_room_waits_for_space_that_will_come(
    tmp_path: Path, m4a: Callable[[float], Path]
) -> None:
    """When the volume has no room for a second cut of a group, it waits (its compute is
    spent) for space that will come: another job's reservation that ends a few seconds later;
    then it is admitted and the file completes."""
    report, gate = tmp_path / "report.jsonl", tmp_path / "recut-gate"
    gate.touch()  # A cuts its group again only once the test has taken the room
    with site(tmp_path, size="64m", floor="8MiB") as s, running_daemon(s.setup):
        a = s.start("--groups", "3", "--group-s", "20", "--recut", "1", "--pause-s", "2",
                    "--recut-while", gate, "--report", report, m4a(60),
                    JANITOR_GUARD_WAIT_S="60")  # fmt: skip
        try:
            eventually(lambda: len(cuts_of(report)) >= 1, timeout=60, what="A's first cut")
            check = json.loads(s.cli("check", "cache", "1", "--json").stdout)
            holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(8)"])
            taken = s.cli("reserve", "cache", str(check["available"]), "--owner-pid",
                          str(holder.pid), "--json")  # fmt: skip
        finally:
            gate.unlink()
        assert taken.returncode == 0, taken.stderr
        code, _, err = finish(a)
        holder.wait()
        guard_log = (s.setup.log_dir / "guard.log").read_text()
    assert code == 0, err
    assert len(cuts_of(report)) == 4
    assert "a cut past its job's working set (a group cut again) waiting for" in guard_log


# -- an outside writer that fills the disk to its last byte --------------------------------------


@pytest.mark.usefixtures("front_end")
def test_a_cut_that_meets_a_disk_filled_to_its_last_byte_is_stopped_cleanly(
    tmp_path: Path,
) -> None:
    """An outside writer takes every free byte (fallocate) between a cut's admission and its
    first write: ffmpeg meets ENOSPC and ends before any watch can stop it. The guard says what
    happened, the job stopped by writers outside every reservation (exit 75, its line after
    ffmpeg's own), and removes the partial output. (Before, ffmpeg's exit 1 came back as a
    plain failure.)"""
    with site(tmp_path, size="64m", floor="8MiB") as s:
        wav = entry(s, 30)
        audio = s.tmp / ".tmpfull" / "fa_v2" / "audio"
        audio.mkdir(parents=True)
        out = audio / "fa-v2-audio-0-0.pcm"
        started, go = tmp_path / "started", tmp_path / "go"
        real = tmp_path / "slow-ffmpeg"  # ffmpeg, once the test has filled the disk
        real.write_text(
            f"#!/bin/sh\ntouch {started}\nwhile [ ! -e {go} ]; do sleep 0.01; done\n"
            f'exec {REAL_FFMPEG} "$@"\n'
        )
        real.chmod(0o755)
        cut = subprocess.Popen(
            ["ffmpeg", "-y", "-ss", "0.000", "-to", "20.000", "-i", str(wav), *PCM, str(out)],
            env=s.env(JANITOR_FFMPEG=str(real)), stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        eventually(started.exists, timeout=30, what="the cut to be admitted")
        with open(s.setup.mount / "outside.bin", "wb") as f:
            want = free_of(s.setup.mount)
            while want > 0:
                try:
                    os.posix_fallocate(f.fileno(), 0, want)
                    break
                except OSError:
                    want -= 4096
        go.touch()
        _, err = cut.communicate(timeout=60)
        code = cut.returncode
        left = out.exists()
    assert "No space left on device" in err, err
    assert code == 75, err
    last = err.strip().splitlines()[-1]
    # Said as a stop: found by the watch (the volume critical: this job among the fewest
    # stopped) when ffmpeg is slow to end, else when ffmpeg has failed (outside writers).
    assert last.startswith("space-janitor: stopped ffmpeg writing"), err
    assert "writers outside every reservation" in last or "is critical" in last, err
    assert not left
