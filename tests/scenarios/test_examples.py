"""Each example under ``examples/`` run for real: the Python worker, the shell wrapper, curl.

The worker and the shell script run with the *shipped* default policy (``JANITOR_POLICY`` unset)
and the pipeline's own variables pointing into a small tmpfs: ``BATCHALIGN_MEDIA_CACHE_DIR`` for
the media cache and ``TMPDIR`` for the job temp tree. The curl example talks to a real
``janitor daemon`` over its Unix socket. Skipped with the reason where ffmpeg, curl or root (for
the tmpfs) is missing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from tests._daemon_helpers import daemon_setup, running_daemon
from tests._fixtures.console import JANITOR_BIN, one_line_error
from tests._fixtures.media import MediaStore, tone
from tests._fixtures.space import MiB

Mount = Callable[..., Path]

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
VENV_BIN = Path(sys.executable).parent
FP_WAV = re.compile(r"^[0-9a-f]{24}\.wav$")

needs_ffmpeg = pytest.mark.skipif(
    shutil.which("ffmpeg") is None or shutil.which("ffprobe") is None,
    reason="ffmpeg/ffprobe not installed (Debian package ffmpeg; .ci/run installs it)",
)


@pytest.fixture(scope="module")
def mp3(media_store: MediaStore) -> Path:
    """A 120 s mono mp3: a ~3.84 MB WAV in the cache, ~7.7 MB of float32 PCM while aligning."""
    if shutil.which("ffmpeg") is None:
        pytest.skip("ffmpeg not installed")
    return media_store.make("tone-120s-32k.mp3", *tone(120), "-ac", "1", "-b:a", "32k")


def pipeline_env(cache: Path, tmp: Path, **extra: str) -> dict[str, str]:
    """The test's isolated env with the shipped policy, the cache and TMPDIR on the tmpfs, and
    the venv's bin first on PATH (so scripts find `janitor`)."""
    env = {k: v for k, v in os.environ.items() if k != "JANITOR_POLICY"}
    env.update(
        BATCHALIGN_MEDIA_CACHE_DIR=str(cache),
        TMPDIR=str(tmp),
        PATH=f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
    )
    env.update(extra)
    return env


def run(
    args: list[str | os.PathLike[str]], env: Mapping[str, str], timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [os.fspath(a) for a in args],
        capture_output=True,
        text=True,
        env=dict(env),
        timeout=timeout,
        check=False,
    )


def janitor(env: Mapping[str, str], *args: str) -> Any:
    done = run([JANITOR_BIN, *args], env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def job_folders(tmp: Path) -> list[str]:
    return sorted(p.name for p in tmp.iterdir() if p.name.startswith(".tmp"))


# -- examples/align_worker.py --------------------------------------------------------------------


@needs_ffmpeg
def test_align_worker_end_to_end(mp3: Path, tmpfs: Mount) -> None:
    mount = tmpfs("64m")
    cache, tmp = mount / "media_cache", mount / "tmp"
    tmp.mkdir()  # the cache folder is left for the worker to create, as on a first run
    env = pipeline_env(cache, tmp)
    done = run([sys.executable, EXAMPLES / "align_worker.py", mp3], env)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert "12 windows" in done.stderr  # 120 s in 10 s windows

    wavs = sorted(p.name for p in cache.iterdir())
    assert len(wavs) == 1 and FP_WAV.match(wavs[0]), wavs  # no .tmp.wav left beside it
    import wave

    with wave.open(str(cache / wavs[0]), "rb") as w:
        assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (16000, 1, 2)
        assert abs(w.getnframes() / 16000 - 120) < 1
    assert job_folders(tmp) == []

    policy = janitor(env, "paths", "--json")["policy"]
    assert Path(policy).name == "batchalign3.toml"  # the shipped default, not a test policy
    entries = janitor(env, "log", "--json")
    grants = {e["tree"]: e for e in entries if e["event"] == "grant"}
    assert set(grants) == {"media_cache", "job_tmp"}, entries
    assert grants["media_cache"]["path"].endswith(".tmp.wav")
    assert Path(grants["job_tmp"]["path"]).parent == tmp
    assert grants["job_tmp"]["bytes"] >= 120 * 64_000  # float32 PCM of the whole file
    released = {e["reservation"] for e in entries if e["event"] == "release"}
    assert released == {g["reservation"] for g in grants.values()}
    pins = [e for e in entries if e["event"] == "pin"]
    assert [p["path"] for p in pins] == [str(cache / wavs[0])]
    assert any(e["event"] == "unpin" for e in entries)
    assert janitor(env, "status", "--json")["reservations"] == []

    # a second run hits the cache: no new conversion, only the job_tmp reservation
    again = run([sys.executable, EXAMPLES / "align_worker.py", mp3], env)
    assert again.returncode == 0, again.stderr
    entries = janitor(env, "log", "--json")
    assert [e["tree"] for e in entries if e["event"] == "grant"].count("media_cache") == 1
    assert job_folders(tmp) == []


@needs_ffmpeg
def test_align_worker_unreadable_media_is_one_line_and_exit_2(tmp_path: Path, tmpfs: Mount) -> None:
    mount = tmpfs("16m")
    cache, tmp = mount / "media_cache", mount / "tmp"
    tmp.mkdir()
    env = pipeline_env(cache, tmp)
    bogus = tmp_path / "notes.mp3"
    bogus.write_text("not audio at all\n")
    done = run([sys.executable, EXAMPLES / "align_worker.py", bogus], env)
    assert done.returncode == 2, done.stdout + done.stderr
    line = one_line_error(done.stderr)
    assert "notes.mp3" in line, line
    assert not cache.exists() or list(cache.iterdir()) == []
    assert janitor(env, "status", "--json")["reservations"] == []


@needs_ffmpeg
def test_align_worker_refused_when_the_cache_volume_is_too_small(mp3: Path, tmpfs: Mount) -> None:
    mount = tmpfs("3m")  # default floor 10 %: ~2.7 MiB left, less than the ~3.7 MiB WAV
    cache, tmp = mount / "media_cache", mount / "tmp"
    tmp.mkdir()
    env = pipeline_env(cache, tmp)
    done = run([sys.executable, EXAMPLES / "align_worker.py", mp3], env)
    assert done.returncode == 75, done.stdout + done.stderr
    line = one_line_error(done.stderr)
    assert "not enough disk space" in line and "refused" in line, line
    assert list(cache.iterdir()) == []  # ffmpeg never wrote a byte
    assert job_folders(tmp) == []
    assert janitor(env, "status", "--json")["reservations"] == []


@needs_ffmpeg
def test_align_worker_refused_when_the_job_temp_volume_is_too_small(
    mp3: Path, tmpfs: Mount
) -> None:
    """The WAV fits, its float32 PCM does not: exit 75, the job folder is removed anyway."""
    cache_mount = tmpfs("64m", name="cache")
    tmp = tmpfs("6m", name="tmp")  # ~5.4 MiB above the floor: less than the ~7.3 MiB of PCM
    cache = cache_mount / "media_cache"
    env = pipeline_env(cache, tmp)
    done = run([sys.executable, EXAMPLES / "align_worker.py", mp3], env)
    assert done.returncode == 75, done.stdout + done.stderr
    line = one_line_error(done.stderr)
    assert "not enough disk space" in line and "job_tmp" in line, line
    assert job_folders(tmp) == []
    assert [p.name for p in cache.iterdir() if FP_WAV.match(p.name)]  # the conversion stays
    assert janitor(env, "status", "--json")["reservations"] == []


# -- examples/convert.sh ---------------------------------------------------------------------------


@needs_ffmpeg
def test_convert_sh_converts(mp3: Path, tmpfs: Mount) -> None:
    mount = tmpfs("64m")
    cache, tmp = mount / "media_cache", mount / "tmp"
    cache.mkdir()
    tmp.mkdir()
    env = pipeline_env(cache, tmp)
    out = cache / "0123456789abcdef01234567.wav"
    done = run(["bash", EXAMPLES / "convert.sh", mp3, out], env)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    import wave

    with wave.open(str(out), "rb") as w:
        assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (16000, 1, 2)
        assert abs(w.getnframes() / 16000 - 120) < 1
    entries = janitor(env, "log", "--json")
    (grant,) = [e for e in entries if e["event"] == "grant"]
    assert grant["path"] == str(out) and grant["tree"] == "media_cache"
    assert grant["bytes"] >= out.stat().st_size
    assert [e["reservation"] for e in entries if e["event"] == "release"] == [grant["reservation"]]
    assert janitor(env, "status", "--json")["reservations"] == []


@needs_ffmpeg
def test_convert_sh_exits_75_when_it_cannot_fit(mp3: Path, tmpfs: Mount) -> None:
    mount = tmpfs("3m")
    cache, tmp = mount / "media_cache", mount / "tmp"
    cache.mkdir()
    tmp.mkdir()
    env = pipeline_env(cache, tmp)
    out = cache / "0123456789abcdef01234567.wav"
    done = run(["bash", EXAMPLES / "convert.sh", mp3, out], env)
    assert done.returncode == 75, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert "not started" in done.stderr
    assert not out.exists()


# -- examples/reserve_curl.sh ----------------------------------------------------------------------


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl not installed")
def test_reserve_curl_against_the_daemon(tmp_path: Path) -> None:
    with daemon_setup(tmp_path, size="32m", volume={"floor": "4MiB"}) as setup:
        path = f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}"
        env = setup.env(PATH=path)
        with running_daemon(setup):
            done = run(["bash", EXAMPLES / "reserve_curl.sh", "cache", "1M"], env, timeout=60)
            assert done.returncode == 0, done.stdout + done.stderr
            body = json.loads(done.stdout)
            assert re.match(r"^r-[0-9a-f]{16}$", body["id"])
            assert (body["tree"], body["bytes"], body["job"]) == ("cache", MiB, "curl-example")
            assert body["state"] == "live"
            assert f"released {body['id']}" in done.stderr

            refused = run(["bash", EXAMPLES / "reserve_curl.sh", "cache", "100M"], env, timeout=60)
            assert refused.returncode == 75, refused.stdout + refused.stderr
            numbers = json.loads(refused.stdout)
            assert numbers["requested"] == 100 * MiB
            assert numbers["shortfall"] > 0
            assert {"free", "floor", "reserved"} <= set(numbers)
            assert "refused" in refused.stderr

            status = run([JANITOR_BIN, "status", "--json"], env)
            assert json.loads(status.stdout)["reservations"] == []
        entries = json.loads(run([JANITOR_BIN, "log", "--json"], env).stdout)
        events = [(e["event"], e["reservation"]) for e in entries if e["event"] != "sample"]
        assert ("grant", body["id"]) in events and ("release", body["id"]) in events
        assert any(e == "refuse" for e, _ in events)


#: Fills a volume to ``target`` free bytes in 256 KiB steps (a writer outside the janitor).
FILLER = """
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
os.close(fd)
"""


@needs_ffmpeg
def test_align_worker_stops_early_when_the_volume_goes_critical(
    mp3: Path, tmpfs: Mount, tmp_path: Path
) -> None:
    """An outside writer takes the job temp volume below its floor while the worker writes
    windows: it stops at the next window (SpaceRisk, exit 75) instead of hitting ENOSPC."""
    cache = tmpfs("64m", name="cache") / "media_cache"
    tmp = tmpfs("64m", name="tmp")
    floor = int(64 * MiB * 0.10)  # the shipped policy's default floor: min(10GiB, 10 %)
    env = pipeline_env(cache, tmp)
    # small windows: many checks, and time for the outside writer to act mid-job
    proc = subprocess.Popen(
        [sys.executable, str(EXAMPLES / "align_worker.py"), str(mp3), "--window", "0.05"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 60
        while not any(len(list(d.glob("fa_v2/audio/*.pcm"))) >= 5 for d in tmp.glob(".tmp*")):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the worker wrote no windows: {proc.communicate()[1]}")
            time.sleep(0.005)
        # Held still while the outside writer fills the volume, so the job is surely mid-way
        # when it goes critical (on a loaded machine it could otherwise finish first).
        proc.send_signal(signal.SIGSTOP)
        try:
            filler = run(
                [sys.executable, "-c", FILLER, tmp / "other-program.bin", str(floor - MiB)], env
            )
        finally:
            proc.send_signal(signal.SIGCONT)
        assert filler.returncode == 0, filler.stderr
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 75, stderr
    line = one_line_error(stderr)
    assert "stopped early" in line and "at risk" in line, line
    assert job_folders(tmp) == []  # the job folder is removed on the way out
    assert janitor(env, "status", "--json")["reservations"] == []
