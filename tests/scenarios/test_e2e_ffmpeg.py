"""End to end with the real ffmpeg on a real small tmpfs (issue 5, item 4 a-d).

(a) a conversion that fits succeeds and leaves no reservation behind;
(b) one that cannot fit is refused before ffmpeg starts (exit 75, ffmpeg never ran);
(c) while a conversion runs at a controlled rate (``-readrate``), a writer outside the janitor
    fills the volume below its floor; `janitor exec` stops ffmpeg: free space never reached zero,
    exit 75, and with ``--cleanup-on-fail`` no partial WAV is left;
(d) a SIGKILLed worker's reservation stops counting and its orphaned job folder is removed by a
    sweep once orphan_age passes, while another program's ``.tmp*`` folder is left alone.

Everything is real: the console script in a subprocess, ffmpeg, a tmpfs mounted per test (root
only; skipped otherwise). The ledger lives in the isolated state dir, never on the tmpfs.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
import wave
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests._fixtures import forkserver
from tests._fixtures.console import JANITOR_BIN, one_line_error
from tests._fixtures.media import MediaStore, tone
from tests._fixtures.space import MiB, free_of

Cli = Callable[..., subprocess.CompletedProcess[str]]
Mount = Callable[..., Path]

pytestmark = pytest.mark.skipif(
    shutil.which("ffmpeg") is None or shutil.which("ffprobe") is None,
    reason="ffmpeg/ffprobe not installed (Debian package ffmpeg; .ci/run installs it)",
)

FLOOR = 8 * MiB
CONVERT = ("-ac", "1", "-ar", "16000", "-c:a", "pcm_s16le")
FFMPEG = ("ffmpeg", "-nostdin", "-hide_banner", "-loglevel", "error", "-y")


@pytest.fixture(scope="module")
def mp3(media_store: MediaStore) -> Path:
    """A 600 s mono mp3 at 32 kb/s (~2.4 MB); its 16 kHz WAV is ~19.2 MB."""
    if shutil.which("ffmpeg") is None:
        pytest.skip("ffmpeg not installed")
    return media_store.make("tone-600s-32k.mp3", *tone(600), "-ac", "1", "-b:a", "32k")


@dataclass
class Media:
    mount: Path
    cache: Path


@pytest.fixture
def media_volume(tmpfs: Mount, write_policy: Callable[..., Path]) -> Callable[[str], Media]:
    """``media_volume(size)``: a tmpfs with a ``media_cache`` cache tree, floor 8 MiB."""

    def make(size: str) -> Media:
        mount = tmpfs(size)
        cache = mount / "cache"
        cache.mkdir()
        write_policy(
            {"media_cache": {"role": "cache", "path": str(cache), "quota": "48MiB",
                             "min_age": "0s"}},
            floor="8MiB",
        )  # fmt: skip
        return Media(mount, cache)

    return make


def estimate(run_cli: Cli, media: Path) -> int:
    done = run_cli("estimate", media)
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


def log(run_cli: Cli) -> list[dict[str, Any]]:
    done = run_cli("log", "--json")
    assert done.returncode == 0, done.stderr
    entries: list[dict[str, Any]] = json.loads(done.stdout)
    return entries


def assert_no_live_reservation(run_cli: Cli) -> list[dict[str, Any]]:
    """`janitor status --json` lists none, and every grant was released (not reaped)."""
    done = run_cli("status", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["reservations"] == []
    entries = log(run_cli)
    granted = {e["reservation"] for e in entries if e["event"] == "grant"}
    released = {e["reservation"] for e in entries if e["event"] == "release"}
    assert granted == released, entries
    return entries


class FreeSampler:
    """A thread reading ``os.statvfs`` every ~5 ms; remembers the least free space seen."""

    def __init__(self, path: Path, interval: float = 0.005) -> None:
        self.path = path
        self.interval = interval
        self.min_free = free_of(path)
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="statvfs-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            free = free_of(self.path)
            if free < self.min_free:
                self.min_free = free
            self.samples += 1
            time.sleep(self.interval)

    def __enter__(self) -> FreeSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


# -- (a) it fits -------------------------------------------------------------------------------


def test_a_conversion_that_fits_succeeds_and_releases(
    mp3: Path, media_volume: Callable[[str], Media], run_cli: Cli
) -> None:
    vol = media_volume("64m")
    out = vol.cache / "0123456789abcdef01234567.wav"
    need = estimate(run_cli, mp3)
    done = run_cli(
        "exec", "media_cache", str(need), "--path", out, "--job", "convert", "--",
        *FFMPEG, "-i", mp3, *CONVERT, out,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    with wave.open(str(out), "rb") as w:
        assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (16000, 1, 2)
        assert abs(w.getnframes() / 16000 - 600) < 1
    assert out.stat().st_size <= need
    entries = assert_no_live_reservation(run_cli)
    (grant,) = [e for e in entries if e["event"] == "grant"]
    assert (grant["tree"], grant["bytes"], grant["path"]) == ("media_cache", need, str(out))


# -- (b) it cannot fit -----------------------------------------------------------------------------


def test_a_conversion_that_cannot_fit_is_refused_before_ffmpeg_starts(
    mp3: Path, media_volume: Callable[[str], Media], run_cli: Cli, tmp_path: Path
) -> None:
    vol = media_volume("24m")  # 24 MiB - 8 MiB floor leaves 16 MiB: less than the ~18.3 MiB WAV
    out = vol.cache / "0123456789abcdef01234567.wav"
    marker = tmp_path / "ffmpeg-ran"
    wrapper = tmp_path / "ffmpeg-wrapper"
    wrapper.write_text(f"#!/bin/sh\ntouch '{marker}'\nexec ffmpeg \"$@\"\n")
    wrapper.chmod(0o755)
    need = estimate(run_cli, mp3)
    free_before = vol_free = free_of(vol.mount)
    assert need > vol_free - FLOOR
    done = run_cli(
        "exec", "media_cache", str(need), "--path", out, "--cleanup-on-fail", "--",
        wrapper, "-nostdin", "-loglevel", "error", "-y", "-i", mp3, *CONVERT, out,
    )  # fmt: skip
    assert done.returncode == 75, done.stdout + done.stderr
    line = one_line_error(done.stderr)
    assert "refused" in line and "not started" in line, line
    assert not marker.exists(), "ffmpeg ran although the reservation was refused"
    assert not out.exists()
    assert free_of(vol.mount) == free_before
    entries = assert_no_live_reservation(run_cli)
    assert [e["event"] for e in entries if e["event"] in ("grant", "refuse")] == ["refuse"]


# -- (c) a writer outside the janitor fills the volume while ffmpeg runs ---------------------------

#: Fills the volume to ``target`` free bytes (below the floor, never to zero) in 256 KiB steps.
FILLER = textwrap.dedent(
    """
    import os, sys
    path, target = sys.argv[1], int(sys.argv[2])
    step = 256 * 1024
    block = os.urandom(step)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    while True:
        st = os.statvfs(path)
        if st.f_bavail * st.f_frsize - step < target:
            break
        os.write(fd, block)
    os.fsync(fd)
    os.close(fd)
    """
)


def _wait_for_size(path: Path, nbytes: int, proc: subprocess.Popen[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if path.stat().st_size >= nbytes:
                return
        except FileNotFoundError:
            pass
        if proc.poll() is not None:
            pytest.fail(f"janitor exec ended ({proc.returncode}) before ffmpeg wrote {nbytes} B")
        if time.monotonic() > deadline:
            pytest.fail(f"ffmpeg did not write {nbytes} B to {path} within {timeout:g}s")
        time.sleep(0.01)


@pytest.mark.parametrize("cleanup", [True, False], ids=["cleanup-on-fail", "keep-partial"])
def test_filling_the_volume_mid_conversion_stops_ffmpeg(
    mp3: Path,
    media_volume: Callable[[str], Media],
    run_cli: Cli,
    tmp_path: Path,
    cleanup: bool,
) -> None:
    vol = media_volume("64m")
    out = vol.cache / "0123456789abcdef01234567.wav"
    filler_script = tmp_path / "filler.py"
    filler_script.write_text(FILLER)
    need = estimate(run_cli, mp3)
    flags = ["--cleanup-on-fail"] if cleanup else []
    cmd = [
        str(JANITOR_BIN), "exec", "media_cache", str(need), "--path", str(out), "--job", "convert",
        "--poll", "50ms", "--grace", "5s", *flags, "--",
        *FFMPEG, "-readrate", "20", "-i", str(mp3), *CONVERT, str(out),
    ]  # fmt: skip
    with FreeSampler(vol.mount) as sampler:
        proc = forkserver.JanitorPopen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        try:
            # ffmpeg is converting at 20x real time (~640 kB/s of WAV; ~30 s for all of it)
            _wait_for_size(out, MiB, proc, timeout=30)
            filler = subprocess.run(
                [sys.executable, str(filler_script), str(vol.mount / "other-program.bin"),
                 str(FLOOR - 2 * MiB)],
                capture_output=True, text=True, timeout=60, check=False,
            )  # fmt: skip
            assert filler.returncode == 0, filler.stderr
            stdout, stderr = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert proc.returncode == 75, stdout + stderr
    assert "Traceback" not in stderr
    assert "stopped" in stderr and "floor" in stderr, stderr
    assert sampler.samples > 10
    assert sampler.min_free > 0, "free space reached zero"
    assert sampler.min_free >= MiB, f"free space fell to {sampler.min_free} B"
    assert free_of(vol.mount) < FLOOR  # the outside writer's bytes are still there
    if cleanup:
        assert not out.exists(), "the partial WAV was left behind"
    else:
        partial = out.stat().st_size
        assert MiB <= partial < need, partial  # stopped part way: the partial file stays
    assert_no_live_reservation(run_cli)


# -- (d) a SIGKILLed worker: its reservation stops counting, its job folder is swept -----------

SCOPES = [
    "fa_v2", "asr_v2", "speaker_v2", "diarize_v2", "opensmile_v2", "avqi_v2_*",
    "morphosyntax_v2", "utseg_v2", "translate_v2", "coref_v2",
]  # fmt: skip

#: A pipeline worker: makes its own .tmpXXXXXX/fa_v2/audio folder under TMPDIR, writes PCM,
#: reserves on job_tmp with its folder as the path, says so, and waits to be killed.
WORKER = textwrap.dedent(
    """
    import os, sys, tempfile, time
    from janitor import Janitor
    jan = Janitor.from_settings()
    job = tempfile.mkdtemp(prefix=".tmp")
    audio = os.path.join(job, "fa_v2", "audio")
    os.makedirs(audio)
    with open(os.path.join(audio, "00000.pcm"), "wb") as fh:
        fh.write(os.urandom(1024 * 1024))
    r = jan.reserve("job_tmp", sys.argv[1], path=job, job="fa_v2")
    print(r.id, job, flush=True)
    time.sleep(600)
    """
)


def _age(folder: Path, seconds: float) -> None:
    """Set the mtime (and atime) of ``folder`` and everything in it ``seconds`` into the past."""
    past = time.time() - seconds
    for root, dirs, files in os.walk(folder, topdown=False):
        for name in files + dirs:
            os.utime(os.path.join(root, name), (past, past), follow_symlinks=False)
    os.utime(folder, (past, past))


@pytest.fixture
def worker_proc() -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.communicate()


def test_a_killed_workers_reservation_stops_counting_and_its_folder_is_swept(
    tmpfs: Mount,
    write_policy: Callable[..., Path],
    run_cli: Cli,
    tmp_path: Path,
    worker_proc: list[subprocess.Popen[str]],
) -> None:
    mount = tmpfs("32m")
    tmp = mount / "tmp"
    tmp.mkdir()
    write_policy(
        {"job_tmp": {"role": "scratch", "path": str(tmp), "units": "dir", "unit_glob": ".tmp*",
                     "unit_requires": SCOPES, "orphan_age": "10m", "min_age": "0s"}},
        floor="4MiB",
    )  # fmt: skip
    # another program's folder in the same TMPDIR: no pipeline scope inside, so never ours
    other = tmp / ".tmpOTHER"
    (other / "audio").mkdir(parents=True)
    (other / "audio" / "data.pcm").write_bytes(b"x" * 100_000)
    (other / "notes.txt").write_text("not the pipeline's\n")

    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    worker = subprocess.Popen(
        [sys.executable, str(script), "20M"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(tmp)},
    )
    worker_proc.append(worker)
    assert worker.stdout is not None
    line = worker.stdout.readline().split()
    if len(line) != 2:
        worker.kill()
        pytest.fail(f"worker was not granted its reservation: {worker.communicate()[1]}")
    rid, job = line[0], Path(line[1])
    assert job.parent == tmp and job.name.startswith(".tmp")
    _age(job, 3600)  # older than orphan_age: only being live can keep it now
    _age(other, 3600)

    # alive: its 20 MiB (19 MiB not yet written) count, so 16 MiB more does not fit
    refused = run_cli("reserve", "job_tmp", "16M", "--json")
    assert refused.returncode == 75, refused.stdout + refused.stderr
    # and a sweep leaves a live worker's folder alone, however old its files look
    swept = run_cli("sweep", "job_tmp", "--json")
    assert swept.returncode == 0, swept.stderr
    assert json.loads(swept.stdout)["items"] == []
    assert (job / "fa_v2" / "audio" / "00000.pcm").exists()

    worker.send_signal(signal.SIGKILL)
    worker.wait(timeout=10)

    granted = run_cli("reserve", "job_tmp", "16M", "--json")
    assert granted.returncode == 0, granted.stderr
    mine = json.loads(granted.stdout)
    assert mine["bytes"] == 16 * MiB
    entries = log(run_cli)
    assert [e["event"] for e in entries if e["reservation"] == rid] == ["grant", "dead"]
    assert run_cli("release", mine["id"]).returncode == 0

    # dead but changed just now: not an orphan until orphan_age (10m) has passed
    _age(job, 0)
    swept = run_cli("sweep", "job_tmp", "--json")
    assert swept.returncode == 0, swept.stderr
    assert json.loads(swept.stdout)["items"] == []
    assert (job / "fa_v2" / "audio" / "00000.pcm").exists()

    # orphan_age later (mtimes set back an hour): the orphan goes, the other program's stays
    _age(job, 3600)
    swept = run_cli("sweep", "job_tmp", "--json")
    assert swept.returncode == 0, swept.stderr
    items = json.loads(swept.stdout)["items"]
    assert [(Path(i["path"]).name, i["reason"], i["deleted"]) for i in items] == [
        (job.name, "orphan", True)
    ]
    assert not job.exists()
    assert (other / "audio" / "data.pcm").read_bytes() == b"x" * 100_000
    assert (other / "notes.txt").read_text() == "not the pipeline's\n"
    assert sorted(p.name for p in tmp.iterdir()) == [".tmpOTHER"]
