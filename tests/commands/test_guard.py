"""The guarded ffmpeg and `janitor run`, end to end (issue 13, item 5 a-f, and items 1-3).

Everything is real: the console script, the guard script it writes, ffmpeg and ffprobe, the
pipeline simulator (tests/pipeline_sim.py: batchalign3's file operations as the brief lists
them, calling ``ffmpeg`` by name from ``PATH``), and a tmpfs mounted per test (root only;
skipped otherwise) holding a media cache and a job temp tree shaped like the shipped policy.
The ledger lives in the isolated state dir, never on the tmpfs.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests._daemon_helpers import daemon_setup, eventually, running_daemon
from tests._fixtures import forkserver
from tests._fixtures.console import JANITOR_BIN, janitor_in_process, janitor_json
from tests._fixtures.guard import install_guard
from tests._fixtures.pipeline import PCM_RATE, REAL_FFMPEG, SIM, Pipeline
from tests._fixtures.space import MiB, fill_file, free_of
from tests.scenarios.test_e2e_ffmpeg import FreeSampler

Cli = Callable[..., subprocess.CompletedProcess[str]]

pytestmark = [
    pytest.mark.skipif(
        shutil.which("ffmpeg") is None or shutil.which("ffprobe") is None,
        reason="ffmpeg/ffprobe not installed (Debian package ffmpeg; .ci/run installs it)",
    ),
    pytest.mark.usefixtures("front_end"),  # every test against both front ends of the guard
]


def log_of() -> list[dict[str, Any]]:
    """``janitor log --json``'s entries (run in this process: tests._fixtures.console)."""
    entries: list[dict[str, Any]] = janitor_json("log", "--json")
    return entries


def assert_nothing_held(*, killed: bool = False) -> list[dict[str, Any]]:
    """No reservation or pin is left, and every grant was released (not reaped); with
    ``killed``, a job's working set may have ended with its dead writer instead."""
    status = janitor_json("status", "--json")
    assert status["reservations"] == [], status["reservations"]
    entries = log_of()
    granted = {e["reservation"] for e in entries if e["event"] == "grant"}
    ended = {"release", "dead"} if killed else {"release"}
    released = {e["reservation"] for e in entries if e["event"] in ended}
    assert granted and granted == released, entries
    return entries


def working_sets(entries: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The grants of jobs' working sets (one per job folder and source), by the folder the
    job's cuts go to."""
    return {e["path"]: e for e in entries if e["event"] == "grant" and e["detail"].get("job_id")}


def report_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


# -- (a) a job that fits ------------------------------------------------------------------------


def test_a_job_that_fits_has_every_write_reserved_at_its_size(
    pipeline: Callable[..., Pipeline], m4a: Callable[[float], Path], run_cli: Cli, tmp_path: Path
) -> None:
    p = pipeline("64m")
    report = tmp_path / "report.jsonl"
    src = m4a(30)
    done = run_cli(
        "run",
        "--",
        *p.sim("--groups", "3", "--group-s", "4.5", "--whole", "--report", report, src),
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    writes = report_of(report)
    assert len(writes) == 5, writes  # the cache WAV, three group PCMs, the whole-file PCM
    entries = assert_nothing_held()
    grants = {e["path"]: e for e in entries if e["event"] == "grant"}
    for w in writes:
        if "fa_v2" in w["path"]:
            continue  # a group cut draws on its job's working set (below)
        assert w["path"] in grants, (w, sorted(grants))
        reserved = grants[w["path"]]["bytes"]
        # from ffprobe's duration of the AAC input: within 1 %
        assert abs(reserved - w["bytes"]) <= w["bytes"] / 100, (w, reserved)
    cuts = [w for w in writes if "fa_v2" in w["path"]]
    assert [c["bytes"] for c in cuts] == [int(4.5 * PCM_RATE)] * 3
    # The first cut reserved the whole cached WAV's working set for the folder, at once: its
    # samples x 4 bytes (ffprobe's microseconds may round it up by one sample); the other cuts
    # drew on it.
    wav = next(w for w in writes if w["path"].endswith(".tmp.wav"))
    sets = working_sets(entries)
    audio = os.path.dirname(cuts[0]["path"])
    assert list(sets) == [audio], sets
    exact = (wav["bytes"] - 78) * 2  # 16-bit samples after the WAV's 78-byte header
    assert 0 <= sets[audio]["bytes"] - exact <= 4, (sets[audio], wav)
    assert "run " in done.stderr and "3 reservations of its guarded writes held" in done.stderr, (
        done.stderr
    )
    assert len(list(p.cache.glob("*.wav"))) == 1  # the conversion stayed, renamed into place
    assert p.job_folders() == []  # the job removed its folder itself


def test_the_guard_asks_the_daemon_when_it_runs(
    tmp_path: Path, m4a: Callable[[float], Path], pipeline_sim_env: None
) -> None:
    src = m4a(20)
    with daemon_setup(tmp_path, size="48m", tree={"quota": "32MiB", "min_age": "10m"}) as setup:
        tmp = setup.mount / "tmp"
        tmp.mkdir()
        trees = dict(setup.trees)
        trees["job_tmp"] = {
            "role": "scratch",
            "path": str(tmp),
            "units": "dir",
            "unit_glob": ".tmp*",
            "orphan_age": "1h",
            "min_age": "0s",
        }
        setup.write_policy(trees=trees)
        with running_daemon(setup) as daemon:
            report = tmp_path / "report.jsonl"
            cmd = [
                sys.executable,
                str(SIM),
                "--cache",
                str(setup.tree),
                "--tmpdir",
                str(tmp),
                "--groups",
                "2",
                "--group-s",
                "3",
                "--report",
                str(report),
                str(src),
            ]
            done = setup.run_cli("run", "--", *cmd, timeout=180)
            assert done.returncode == 0, done.stderr
            log = json.loads(setup.run_cli("log", "--json").stdout)
            grants = {e["path"]: e for e in log if e["event"] == "grant"}
            written = [w["path"] for w in report_of(report)]
            assert len(written) == 3, written  # the cache WAV and two group cuts
            assert set(grants) == {written[0], os.path.dirname(written[1])}, grants
            # the daemon made them: the guard went through the socket, not the ledger
            lines = (setup.log_dir / "guard.log").read_text().splitlines()
            reserved = [ln for ln in lines if " reserved through the " in ln]
            assert len(reserved) == len(written), lines
            assert all("through the daemon" in ln for ln in reserved), lines
            status = setup.run_cli("status", "--json")
            assert json.loads(status.stdout)["reservations"] == [], status.stdout
            assert daemon.pid > 0


# -- (b) a job that cannot fit ------------------------------------------------------------------


def test_require_fit_refuses_a_job_that_cannot_fit_before_it_starts(
    pipeline: Callable[..., Pipeline], m4a: Callable[[float], Path], run_cli: Cli, tmp_path: Path
) -> None:
    p = pipeline("16m", floor="4MiB")
    src = m4a(150)  # WAV 4.8 MB + whole-file PCM 9.6 MB > 12 MiB above the floor
    marker = tmp_path / "started"
    free = free_of(p.mount)
    done = run_cli(
        "run",
        "--media",
        src,
        "--require-fit",
        "--",
        "sh",
        "-c",
        f'touch "{marker}"; exec "$@"',
        "sh",
        *p.sim("--whole", src),
        timeout=120,
        env={"BATCHALIGN_MEDIA_CACHE_DIR": str(p.cache), "TMPDIR": str(p.tmp)},
    )
    assert done.returncode == 75, (done.stdout, done.stderr)
    assert not marker.exists()  # the command never started
    line = [ln for ln in done.stderr.splitlines() if "does not fit" in ln]
    assert line and str(p.mount) in line[0] and "was not started" in line[0], done.stderr
    assert "PCM working set" in done.stderr and "13.7 MiB" in done.stderr, done.stderr
    assert free_of(p.mount) == free and list(p.cache.iterdir()) == []


def test_without_require_fit_the_first_write_that_cannot_fit_fails_above_the_floor(
    pipeline: Callable[..., Pipeline], m4a: Callable[[float], Path], run_cli: Cli, tmp_path: Path
) -> None:
    p = pipeline("16m", floor="4MiB")
    src = m4a(150)  # its FA working set, 9.6 MB, cannot fit beside its own 4.8 MB cached WAV
    report = tmp_path / "report.jsonl"
    with FreeSampler(p.mount, interval=0.002) as sampler:
        done = run_cli(
            "run",
            "--",
            *p.sim("--groups", "2", "--group-s", "5", "--whole", "--report", report, src),
            timeout=180,
        )
    assert done.returncode == 1, (done.stdout, done.stderr)  # the job failed, as batchalign3's
    error = [ln for ln in done.stderr.splitlines() if ln.startswith("job failed")]
    assert error, done.stderr
    # Refused at the first cut, at once (it could never fit: waiting would not help), before
    # any group's compute: no cut was written.
    assert "space-janitor: refused to write" in error[0] and "fa-v2-audio-0" in error[0], error
    for word in ("MiB", "never fit", "capacity", "floor", "held", str(p.mount)):
        assert word in error[0], (word, error[0])
    assert [w for w in report_of(report) if "fa_v2" in w["path"]] == []
    assert sampler.min_free >= 4 * MiB, sampler.min_free
    assert len(list(p.cache.glob("*.wav"))) == 1  # the conversion before it went through
    assert p.job_folders() == []
    log = log_of()
    assert [e for e in log if e["event"] == "refuse" and "fa_v2" in (e["path"] or "")], log


# -- (c) an outside writer mid-job --------------------------------------------------------------


def test_an_outside_writer_makes_the_guard_stop_ffmpeg_above_zero(
    pipeline: Callable[..., Pipeline], m4a: Callable[[float], Path], tmp_path: Path
) -> None:
    p = pipeline("64m", floor="8MiB")
    src = m4a(150)  # whole-file PCM 9.6 MB, read at 8x: ~19 s of writing
    hog = p.mount / "hog.bin"
    proc = forkserver.JanitorPopen(
        [str(JANITOR_BIN), "run", "--", *p.sim("--groups", "0", "--whole", "--readrate", "8", src)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        with FreeSampler(p.mount, interval=0.002) as sampler:
            pcm = eventually(
                lambda: list(p.tmp.glob(".tmp*/asr_v2/audio/*.pcm")),
                timeout=60,
                what="the whole-file PCM to begin",
            )
            assert pcm
            eventually(
                lambda: pcm[0].exists() and pcm[0].stat().st_size > 256 * 1024,
                timeout=30,
                what="ffmpeg to write",
            )
            # an outside writer, with no reservation, takes the volume 2 MiB below its floor
            fill_file(hog, max(0, free_of(p.mount) - 6 * MiB))
            out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1, (out, err)
    assert "space-janitor: stopped ffmpeg" in err, err
    assert sampler.min_free > 0, sampler.min_free
    assert "1 stopped early" in err or "stopped" in err
    assert p.job_folders() == []
    hog.unlink()
    assert_nothing_held()


# -- (d) a SIGKILLed job -------------------------------------------------------------------------


def _sim_process(run: subprocess.Popen[str]) -> psutil.Process:
    # The simulator itself: argv[1] is its script. A child that ``janitor run`` forked and has
    # not exec'd yet (the run's own daemon, or the command) still carries the run's argv, which
    # names the simulator further on: killing that one kills the wrong process.
    def find() -> psutil.Process | None:
        for child in psutil.Process(run.pid).children(recursive=True):
            try:
                if child.cmdline()[1:2] == [str(SIM)]:
                    return child
            except psutil.Error:
                continue
        return None

    found: psutil.Process = eventually(find, timeout=30, what="the simulator to start")
    return found


def test_a_sigkilled_job_leaves_nothing_behind(
    pipeline: Callable[..., Pipeline], m4a: Callable[[float], Path], tmp_path: Path
) -> None:
    p = pipeline("64m")
    other = p.tmp / ".tmpNOTOURS"  # another program's temp folder, made before the run
    (other / "fa_v2").mkdir(parents=True)
    (other / "fa_v2" / "keep.pcm").write_bytes(b"x" * 4096)
    report = tmp_path / "report.jsonl"
    src = m4a(20)
    run = forkserver.JanitorPopen(
        [
            str(JANITOR_BIN),
            "run",
            "--",
            *p.sim("--groups", "3", "--group-s", "2", "--hold-s", "60", "--report", report, src),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        sim = _sim_process(run)
        eventually(lambda: len(report_of(report)) == 4, timeout=60, what="the job's writes")
        mine = [f for f in p.job_folders() if f != other]
        assert len(mine) == 1 and (mine[0] / "fa_v2" / "audio").is_dir()
        sim.kill()  # what the OOM killer does
        out, err = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert run.returncode == 128 + signal.SIGKILL, (out, err)
    assert not mine[0].exists(), err
    assert "removed 1 job folder left behind" in err and mine[0].name in err, err
    assert (other / "fa_v2" / "keep.pcm").read_bytes() == b"x" * 4096  # not the run's: kept
    assert len(list(p.cache.glob("*.wav"))) == 1  # the cache is not a leftover
    assert_nothing_held(killed=True)


# -- (e) a cached WAV being cut from is not evicted ---------------------------------------------


def test_a_cached_wav_a_job_keeps_cutting_from_is_never_evicted(
    pipeline: Callable[..., Pipeline], m4a: Callable[[float], Path], run_cli: Cli, tmp_path: Path
) -> None:
    # quota 4 MiB: the job's WAV (3.8 MB) and an older entry (2 MiB) are over it, and the WAV
    # alone is over the low watermark, so every sweep wants to evict it once the old one is gone
    p = pipeline("32m", floor="4MiB", quota="3MiB", cache_min_age="3s")
    old = p.cache / ("0" * 24 + ".wav")
    fill_file(old, 2 * MiB)
    os.utime(old, (time.time() - 86400, time.time() - 86400))
    src = m4a(120)
    report = tmp_path / "report.jsonl"
    held = tmp_path / "held"  # the job goes on (after its last cut) while this exists
    held.touch()
    # 8 group cuts with 1 s of "compute" between them: longer than min_age, not open between cuts
    sim = p.sim("--groups", "8", "--group-s", "5", "--pause-s", "1.0", "--report", report)
    run = forkserver.JanitorPopen(
        [str(JANITOR_BIN), "run", "--", *sim, "--hold-while", str(held), str(src)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    inode: list[int] = []
    sweeps: list[subprocess.CompletedProcess[str]] = []
    stop = threading.Event()

    def press() -> None:  # three times a second (janitor's own commands, in this process)
        while not stop.wait(0.3):
            sweeps.append(janitor_in_process("sweep", "media_cache"))
            # make-room: a reservation in the temp tree that only eviction could fit
            got = janitor_in_process("reserve", "job_tmp", "20MiB", "--json", "--ttl", "5s")
            if got.returncode == 0:
                janitor_in_process("release", json.loads(got.stdout)["id"])

    try:
        wav = eventually(
            lambda: [w for w in p.cache.glob("*.wav") if w != old and ".tmp" not in w.name],
            timeout=60,
            what="the cache WAV",
        )
        inode.append(wav[0].stat().st_ino)
        presser = threading.Thread(target=press, daemon=True)
        presser.start()
        # Pressed until the last cut, while the job still runs: a sweep after the job ended
        # may evict its WAV, rightly, and one in flight then would race the job's end.
        eventually(
            lambda: len([w for w in report_of(report) if "fa_v2" in w["path"]]) >= 8,
            timeout=120,
            what="the job's last cut",
        )
        stop.set()
        presser.join(60)
        held.unlink()
        out, err = run.communicate(timeout=120)
    finally:
        stop.set()
        if run.poll() is None:
            run.kill()
            run.wait()
    assert run.returncode == 0, (out, err)
    assert not old.exists()  # the sweeps did evict what they could
    assert sweeps and all(s.returncode in (0, 1) for s in sweeps), [s.stderr for s in sweeps]
    assert wav[0].stat().st_ino == inode[0]  # the same WAV all along: never evicted, never redone
    cuts = [w for w in report_of(report) if "fa_v2" in w["path"]]
    assert len(cuts) == 8 and all(c["bytes"] == 5 * PCM_RATE for c in cuts), cuts
    assert len([w for w in report_of(report) if w["path"].endswith(".tmp.wav")]) == 1
    deleted = [e for e in log_of() if e["event"] == "delete"]
    assert deleted and all(wav[0].name not in (e["path"] or "") for e in deleted), deleted


# -- (f) what the guard cannot estimate ---------------------------------------------------------


@pytest.fixture
def pipeline_sim_env() -> None:
    """Nothing to set: the name documents that a test runs the simulator under a daemon."""


@pytest.fixture
def guard(tmp_path: Path) -> Path:
    """The guard `janitor shim install --dir` writes (tests._fixtures.guard)."""
    folder = tmp_path / "bin"
    install_guard(folder)
    return folder / "ffmpeg"


def _both(guard: Path, args: list[str], cwd: Path) -> tuple[Any, Any]:
    env = dict(os.environ, PATH=f"{guard.parent}{os.pathsep}{os.environ['PATH']}")
    guarded = subprocess.run([str(guard), *args], capture_output=True, cwd=cwd, env=env, timeout=60)
    bare = subprocess.run([REAL_FFMPEG, *args], capture_output=True, cwd=cwd, timeout=60)
    return guarded, bare


@pytest.fixture
def wav_on_volume(pipeline: Callable[..., Pipeline]) -> Path:
    p = pipeline("32m")
    wav = p.cache / "in.wav"
    subprocess.run(
        [
            REAL_FFMPEG,
            "-loglevel",
            "error",
            "-f",
            "lavfi",
            "-i",
            "sine=duration=2",
            "-ac",
            "1",
            "-ar",
            "16000",
            str(wav),
        ],
        check=True,
    )
    return wav


def _untimed(stderr: bytes) -> list[bytes]:
    return [ln for ln in stderr.replace(b"\r", b"\n").splitlines() if b"speed=" not in ln]


@pytest.mark.parametrize(
    "args",
    [
        ["-version"],
        ["-hide_banner", "-i", "in.wav", "-f", "null", "-"],
        ["-hide_banner", "-loglevel", "error", "-i", "in.wav", "-f", "s16le", "-"],
        ["-hide_banner", "-i", "missing.wav", "out.wav"],
        ["-hide_banner", "-i", "in.wav"],
        ["-hide_banner", "-i", "in.wav", "-no-such-option", "1", "x.wav"],
    ],
    ids=["version", "null-muxer", "pipe-to-stdout", "missing-input", "no-output", "unknown-opt"],
)
def test_calls_it_cannot_estimate_behave_exactly_as_bare_ffmpeg(
    guard: Path, wav_on_volume: Path, args: list[str]
) -> None:
    guarded, bare = _both(guard, args, wav_on_volume.parent)
    assert guarded.returncode == bare.returncode
    assert guarded.stdout == bare.stdout
    # line for line (bar ffmpeg's own timing figures): nothing of ours is added
    assert _untimed(guarded.stderr) == _untimed(bare.stderr)
    entries = log_of()
    assert not [e for e in entries if e["event"] in ("grant", "refuse")], entries


def test_an_unestimable_call_leaves_one_debug_line_in_the_guard_log(
    guard: Path, wav_on_volume: Path, janitor_env: Any
) -> None:
    _both(guard, ["-hide_banner", "-i", "in.wav", "-f", "null", "-"], wav_on_volume.parent)
    logs = list(Path(os.environ.get("XDG_STATE_HOME", "")).rglob("guard.log"))
    logs += list(Path(os.environ["HOME"]).rglob("guard.log"))
    lines = [ln for f in set(logs) for ln in f.read_text().splitlines()]
    assert len([ln for ln in lines if "unguarded" in ln and "null" in ln]) == 1, lines
    assert all(" DEBUG " in ln for ln in lines if "unguarded" in ln)


def test_information_options_are_the_ones_the_estimator_stops_at() -> None:
    from janitor.commands.guard import INFO_OPTIONS, asks_only_for_information
    from janitor.guarding import ffmpeg
    from janitor.guarding.ffmpeg.args import EXIT, OPTIONS

    exits = {f"-{name}" for name, kind in OPTIONS.items() if kind & EXIT}
    assert exits == INFO_OPTIONS
    for option in INFO_OPTIONS:
        assert "writes no file" in (ffmpeg.parse([option, "-i", "a.wav", "b.wav"]).problem or "")
    assert asks_only_for_information([]) and asks_only_for_information(["-version"])
    assert not asks_only_for_information(["-y", "-version"])  # the parser decides those
    assert not asks_only_for_information(["-i", "-version", "out.wav"])  # an input named so


def test_ffmpeg_version_is_execd_before_the_estimator_loads_and_is_not_logged(
    guard: Path, tmp_path: Path, janitor_env: Any, front_end: str
) -> None:
    """batchalign3 runs ``ffmpeg -version`` before every conversion: the guard hands it to the
    real ffmpeg before importing the estimator, and writes no guard.log line for it. The
    compiled front end execs it before it asks anyone; the Python guard behind it (its
    ``ffmpeg.guard``) loads no estimator for it either."""
    env = dict(os.environ, PATH=f"{guard.parent}{os.pathsep}{os.environ['PATH']}")
    script = guard if front_end == "python" else guard.with_name("ffmpeg.guard")
    traced = subprocess.run(
        [sys.executable, "-I", "-S", "-X", "importtime", str(script), "-version"],
        capture_output=True,
        cwd=tmp_path,
        env=env,
        timeout=60,
    )
    bare = subprocess.run([REAL_FFMPEG, "-version"], capture_output=True, timeout=60)
    assert traced.returncode == bare.returncode == 0
    assert traced.stdout == bare.stdout
    imported = [
        line.rpartition("|")[2].strip()
        for line in traced.stderr.decode().splitlines()
        if line.startswith("import time:")
    ]
    assert "janitor.commands.guard" in imported, traced.stderr
    assert "janitor.guarding.ffmpeg" not in imported, imported
    for args in (["-version"], ["-buildconf"], ["-h"], []):
        guarded, bare = _both(guard, args, tmp_path)
        assert (guarded.returncode, guarded.stdout) == (bare.returncode, bare.stdout), args
        assert _untimed(guarded.stderr) == _untimed(bare.stderr), args
    logs = list(Path(os.environ.get("XDG_STATE_HOME", "")).rglob("guard.log"))
    logs += list(Path(os.environ["HOME"]).rglob("guard.log"))
    assert [ln for f in set(logs) for ln in f.read_text().splitlines()] == []


def test_a_guarded_write_gives_the_same_file_and_exit_as_bare_ffmpeg(
    guard: Path, wav_on_volume: Path
) -> None:
    args = [
        "-hide_banner",
        "-loglevel",
        "error",
        "-y",
        "-ss",
        "0.5",
        "-to",
        "1.5",
        "-i",
        "in.wav",
        "-f",
        "f32le",
        "-acodec",
        "pcm_f32le",
        "-ar",
        "16000",
        "-ac",
        "1",
    ]
    folder = wav_on_volume.parent
    guarded = subprocess.run([str(guard), *args, "g.pcm"], capture_output=True, cwd=folder)
    bare = subprocess.run([REAL_FFMPEG, *args, "b.pcm"], capture_output=True, cwd=folder)
    assert guarded.returncode == bare.returncode == 0, guarded.stderr
    assert guarded.stderr == bare.stderr == b""
    assert (folder / "g.pcm").read_bytes() == (folder / "b.pcm").read_bytes()
    grants = [e for e in log_of() if e["event"] == "grant"]
    assert [(g["path"], g["bytes"]) for g in grants] == [(str(folder / "g.pcm"), PCM_RATE)]


def test_signals_reach_ffmpeg_and_the_exit_is_ffmpegs(guard: Path, wav_on_volume: Path) -> None:
    folder = wav_on_volume.parent
    args = [
        "-hide_banner",
        "-loglevel",
        "error",
        "-y",
        "-readrate",
        "0.05",
        "-i",
        "in.wav",
        "-f",
        "f32le",
        "-acodec",
        "pcm_f32le",
        "out.pcm",
    ]
    codes = []
    for exe in (str(guard), REAL_FFMPEG):
        proc = subprocess.Popen([exe, *args], cwd=folder, stderr=subprocess.PIPE)
        eventually(lambda: (folder / "out.pcm").exists(), timeout=30, what="ffmpeg to start")
        time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
        codes.append(proc.returncode)
        (folder / "out.pcm").unlink(missing_ok=True)
    assert codes[0] == codes[1], codes  # ffmpeg handles SIGTERM and exits 255; so does the guard
    # This test's out.pcm (its cwd): other tests, run in parallel, write one too.
    left = [
        p
        for p in psutil.process_iter(["cmdline", "cwd"])
        if "out.pcm" in (p.info["cmdline"] or []) and p.info["cwd"] == str(folder)
    ]
    assert not left


# -- finding the real ffmpeg --------------------------------------------------------------------


def test_the_guard_never_runs_itself(guard: Path, tmp_path: Path) -> None:
    env = {"PATH": f"{guard.parent}{os.pathsep}{guard.parent}", "HOME": str(tmp_path)}
    done = subprocess.run([str(guard), "-version"], capture_output=True, text=True, env=env)
    assert done.returncode == 127
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("space-janitor: no ffmpeg")
    env["JANITOR_FFMPEG"] = str(guard)
    done = subprocess.run([str(guard), "-version"], capture_output=True, text=True, env=env)
    assert done.returncode == 127 and "is the guard itself" in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1
    env["JANITOR_FFMPEG"] = REAL_FFMPEG
    done = subprocess.run([str(guard), "-version"], capture_output=True, text=True, env=env)
    assert done.returncode == 0 and done.stdout.startswith("ffmpeg version"), done.stderr


# -- where an output lies -----------------------------------------------------------------------


def test_an_output_outside_every_tree_is_held_to_its_volumes_floor(
    pipeline: Callable[..., Pipeline], guard: Path, m4a: Callable[[float], Path]
) -> None:
    p = pipeline("12m", floor="4MiB")  # 8 MiB above the floor; the PCM is 9.2 MiB
    loose = p.mount / "elsewhere"
    loose.mkdir()
    args = [
        "-hide_banner",
        "-loglevel",
        "error",
        "-y",
        "-i",
        str(m4a(150)),
        "-f",
        "f32le",
        "-acodec",
        "pcm_f32le",
        "-ar",
        "16000",
        "-ac",
        "1",
        "big.pcm",
    ]
    done = subprocess.run([str(guard), *args], capture_output=True, text=True, cwd=loose)
    assert done.returncode == 75, done.stderr
    assert done.stderr.startswith("space-janitor: refused to write " + str(loose / "big.pcm"))
    assert done.stderr.count("\n") == 1
    assert not (loose / "big.pcm").exists()
    # a small one fits, and is reserved against the same volume
    small = [*args[:6], "-t", "5", *args[6:-1], "small.pcm"]
    done = subprocess.run([str(guard), *small], capture_output=True, text=True, cwd=loose)
    assert done.returncode == 0, done.stderr
    grants = [e for e in log_of() if e["event"] == "grant"]
    assert [g["bytes"] for g in grants] == [5 * PCM_RATE], grants


def test_an_output_on_a_volume_the_policy_does_not_cover_runs_unguarded(
    pipeline: Callable[..., Pipeline],
    guard: Path,
    tmpfs: Callable[..., Path],
    wav_on_volume: Path,
) -> None:
    other = tmpfs("8m", name="other")
    args = [
        "-hide_banner",
        "-loglevel",
        "error",
        "-y",
        "-i",
        str(wav_on_volume),
        "-f",
        "f32le",
        "-acodec",
        "pcm_f32le",
        "out.pcm",
    ]
    done = subprocess.run([str(guard), *args], capture_output=True, text=True, cwd=other)
    assert done.returncode == 0, done.stderr
    assert (other / "out.pcm").stat().st_size == 2 * PCM_RATE
    assert not [e for e in log_of() if e["event"] == "grant"]


# -- the shim ------------------------------------------------------------------------------------


def test_the_guard_the_tests_install_is_what_shim_install_writes(
    run_cli: Cli, tmp_path: Path, front_end: str, write_policy: Callable[..., Path]
) -> None:
    """tests._fixtures.guard.install_guard, which most guard tests install with, writes what the
    console script `janitor shim install --dir` writes for a policy, to the byte and the mode,
    for each front end, however janitor was installed; and then what it writes is current for
    the command (`shim status`)."""
    write_policy({"cache": str(tmp_path / "cache")})
    by_cli, in_process = tmp_path / "cli", tmp_path / "in-process"
    done = run_cli("shim", "install", "--dir", by_cli)
    assert done.returncode == 0, done.stderr
    assert f"the {front_end} front end" in done.stderr, done.stderr
    assert install_guard(in_process).kind == front_end

    def files(folder: Path) -> dict[str, tuple[bytes, int]]:
        return {f.name: (f.read_bytes(), f.stat().st_mode) for f in sorted(folder.iterdir())}

    assert files(in_process) == files(by_cli)
    assert len(files(by_cli)) == (4 if front_end == "compiled" else 2)
    status = run_cli("shim", "status", "--dir", in_process, "--json")
    state = json.loads(status.stdout)
    assert state["installed"] and state["current"], state
    assert state["front_end"]["kind"] == front_end, state


def test_shim_install_status_uninstall(run_cli: Cli, tmp_path: Path) -> None:
    folder = tmp_path / "bin"
    dry = run_cli("shim", "install", "--dir", folder, "--dry-run")
    assert dry.returncode == 0 and not folder.exists(), dry.stderr
    done = run_cli("shim", "install", "--dir", folder)
    assert done.returncode == 0, done.stderr
    text = done.stdout + done.stderr
    assert f'export PATH={folder}:"$PATH"' in text, text  # the shell line
    assert "launchctl" in text or "Environment=" in text, text  # and a server's
    status = run_cli("shim", "status", "--dir", folder, "--json")
    state = json.loads(status.stdout)
    assert state["installed"] and not state["first_on_path"], state
    assert status.returncode == 1  # installed but not first on PATH: not protecting anything
    on_path = run_cli(
        "shim", "status", "--dir", folder, "--json", env={"PATH": f"{folder}:{os.environ['PATH']}"}
    )
    state = json.loads(on_path.stdout)
    assert on_path.returncode == 0 and state["first_on_path"], state
    assert state["real_ffmpeg"] == REAL_FFMPEG
    gone = run_cli("shim", "uninstall", "--dir", folder)
    assert gone.returncode == 0 and not (folder / "ffmpeg").exists(), gone.stderr


#: What the Python scripts of a guard an earlier ``shim install`` wrote import, by where the
#: guard lived then: ``janitor.guard`` (a Python script alone, before the compiled front end
#: and the guarded ffprobe), then ``janitor.jobs.guard`` and ``janitor.jobs.probe_guard``
#: (both front ends, before the package was named ``janitor.commands``).
OLD_IMPORTS = {
    "janitor.guard": {"janitor.commands.guard": "janitor.guard"},
    "janitor.jobs": {
        "janitor.commands.guard": "janitor.jobs.guard",
        "janitor.commands.probe_guard": "janitor.jobs.probe_guard",
    },
}


@pytest.mark.parametrize("old", sorted(OLD_IMPORTS))
def test_a_guard_written_before_the_upgrade_still_runs_and_is_called_stale(
    run_cli: Cli, tmp_path: Path, front_end: str, old: str
) -> None:
    """Guards written before the guard moved to ``janitor.commands.guard`` import it from its
    old address (``OLD_IMPORTS``): ffmpeg and ffprobe must keep working through them until
    ``shim install`` rewrites them."""
    folder = tmp_path / "bin"
    assert run_cli("shim", "install", "--dir", folder).returncode == 0
    shim = folder / "ffmpeg"
    files = {p.name: p.read_bytes() for p in folder.iterdir()}
    want = (
        ["ffmpeg", "ffprobe"]
        if front_end == "python"
        else ["ffmpeg", "ffmpeg.guard", "ffprobe", "ffprobe.guard"]
    )
    assert sorted(files) == want
    scripts = {
        program: folder / (program if front_end == "python" else f"{program}.guard")
        for program in ("ffmpeg", "ffprobe")
    }
    sources = {program: script.read_text() for program, script in scripts.items()}
    assert "from janitor.commands.guard import main" in sources["ffmpeg"]
    assert "from janitor.commands.probe_guard import main" in sources["ffprobe"]
    if old == "janitor.guard":  # a Python script alone, importing the old module
        (folder / "ffmpeg.guard").unlink(missing_ok=True)
        scripts = {"ffmpeg": shim}
    for program, script in scripts.items():
        text = sources[program]
        for now, then in OLD_IMPORTS[old].items():
            text = text.replace(f"from {now} import main", f"from {then} import main")
        assert "janitor.commands" not in text
        script.write_text(text)
        script.chmod(0o755)
    env = {**os.environ, "PATH": f"{folder}:{os.environ['PATH']}"}
    for program, script in scripts.items():
        # the Python script itself: the compiled front end execs -version before any Python
        ran = subprocess.run([str(script), "-version"], capture_output=True, text=True, env=env)
        real = REAL_FFMPEG if program == "ffmpeg" else shutil.which(program) or program
        bare = subprocess.run([real, "-version"], capture_output=True, text=True)
        assert (ran.returncode, ran.stdout) == (bare.returncode, bare.stdout), ran.stderr
    state = json.loads(run_cli("shim", "status", "--dir", folder, "--json").stdout)
    assert state["installed"] and not state["current"], state
    kind = "python" if old == "janitor.guard" else front_end
    assert state["front_end"]["kind"] == kind, state
    assert state["would_install"]["kind"] == front_end, state
    assert run_cli("shim", "install", "--dir", folder).returncode == 0
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == files
    state = json.loads(run_cli("shim", "status", "--dir", folder, "--json").stdout)
    assert state["current"] and state["front_end"]["kind"] == front_end, state


def test_shim_uninstall_refuses_a_file_that_is_not_the_guard(run_cli: Cli, tmp_path: Path) -> None:
    folder = tmp_path / "bin"
    folder.mkdir()
    theirs = folder / "ffmpeg"
    theirs.write_text('#!/bin/sh\nexec /usr/bin/ffmpeg "$@"\n')
    done = run_cli("shim", "uninstall", "--dir", folder)
    assert done.returncode != 0
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert theirs.exists()
    done = run_cli("shim", "install", "--dir", folder)
    assert done.returncode != 0 and theirs.read_text().startswith("#!/bin/sh"), done.stderr


@pytest.fixture(autouse=True)
def _no_stray_ffmpeg() -> Iterator[None]:
    """No ffmpeg started by a test outlives it (the guard never leaves one behind). Only this
    test's are judged, by the isolated HOME they inherit: tests run in parallel start theirs."""
    home = os.environ["HOME"]
    yield
    for proc in psutil.process_iter(["name", "ppid", "environ"]):
        if proc.info["name"] == "ffmpeg" and proc.info["ppid"] == 1:
            if (proc.info["environ"] or {}).get("HOME") != home:
                continue
            proc.kill()
            pytest.fail(f"an ffmpeg outlived its test: pid {proc.pid}")


# -- doctor ---------------------------------------------------------------------------------------


@pytest.mark.usefixtures("machine_alone")  # its batchalign3 is every doctor's to see
def test_doctor_says_whether_a_running_batchalign3_server_has_the_guard_first(
    run_cli: Cli, guard: Path, tmp_path: Path
) -> None:
    def guard_checks(path: str) -> list[dict[str, Any]]:
        # a stand-in server: a process named batchalign3 with that PATH in its environment
        server = subprocess.Popen(
            ["bash", "-c", "exec -a batchalign3 sleep 60"], env={**os.environ, "PATH": path}
        )
        try:
            eventually(
                lambda: psutil.Process(server.pid).cmdline()[:1] == ["batchalign3"],
                what="the stand-in server",
            )
            done = run_cli("doctor", "--json")
        finally:
            server.kill()
            server.wait()
        checks: list[dict[str, Any]] = json.loads(done.stdout)
        return [c for c in checks if c["name"] == "guard" and str(server.pid) in c["message"]]

    without = guard_checks(os.environ["PATH"])
    assert [c["verdict"] for c in without] == ["fail"], without
    assert "not the guard" in without[0]["message"] and "shim install" in without[0]["fix"]
    guarded = guard_checks(f"{guard.parent}{os.pathsep}{os.environ['PATH']}")
    assert [c["verdict"] for c in guarded] == ["ok"], guarded
    assert str(guard) in guarded[0]["message"]


# -- janitor run passes signals on and exits with the command's code ----------------------------


def test_run_exits_with_the_commands_code_and_passes_signals_on(
    run_cli: Cli, pipeline: Callable[..., Pipeline]
) -> None:
    pipeline("16m")
    assert run_cli("run", "--", "sh", "-c", "exit 3").returncode == 3
    ready = Path(os.environ["TMPDIR"]) / "ready"
    run = forkserver.JanitorPopen(
        [str(JANITOR_BIN), "run", "--", "sh", "-c",
         f'trap "exit 42" TERM; touch "{ready}"; while :; do sleep 0.1; done'],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        eventually(ready.exists, timeout=30, what="the command to start")
        run.send_signal(signal.SIGTERM)
        run.communicate(timeout=30)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert run.returncode == 42
    missing = run_cli("run", "--", "no-such-command-here")
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1, missing.stderr
    assert "not found on PATH" in missing.stderr
