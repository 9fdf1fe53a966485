#!/usr/bin/env python3
"""A minimal alignment-style worker that fails fast instead of filling the disk.

1. Converts MEDIA to a 16 kHz mono 16-bit WAV in the media cache with ffmpeg, under a
   reservation sized by `janitor.commands.estimate` (skipped when the cached WAV is already there).
2. Pins the cached WAV while it reads it, so no sweep evicts it mid-job, and records the hit.
3. Writes float32 PCM windows into its own `.tmpXXXXXX/fa_v2/audio/` folder under TMPDIR, under a
   second reservation on the job temp tree, checking that reservation between windows.
4. Stops with one clear line and exit 75 on ReservationRefused (not enough room up front) or
   SpaceRisk (the volume went critical while it ran); the job folder is removed either way.
   Media ffprobe cannot read is exit 2, an ffmpeg failure exit 1, each with one line.

    python examples/align_worker.py MEDIA [--window 10]

The policy's trees are `media_cache` and `job_tmp` (the shipped batchalign3 policy).
"""

from __future__ import annotations

import argparse
import array
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import wave
from pathlib import Path

from janitor import Janitor, JanitorError, ReservationRefused, SpaceRisk
from janitor.commands.estimate import estimate_media, pcm_bytes


def fingerprint(media: Path) -> str:
    """24 hex chars naming the cache entry, like the pipeline's `{fp}.wav`."""
    st = media.stat()
    key = f"{media.resolve()}:{st.st_size}:{st.st_mtime_ns}".encode()
    return hashlib.sha256(key).hexdigest()[:24]


def convert(jan: Janitor, media: Path, cache: Path) -> Path:
    """The cached WAV of ``media``, converted under a reservation if it is not there yet."""
    wav = cache / f"{fingerprint(media)}.wav"
    if wav.exists():
        return wav
    cache.mkdir(parents=True, exist_ok=True)
    tmp = wav.with_name(wav.stem + ".tmp.wav")
    need = estimate_media(media, fmt="wav16").bytes
    with jan.reserve("media_cache", need, path=tmp, job="convert"):
        try:
            subprocess.run(
                [
                    "ffmpeg",
                    "-nostdin",
                    "-hide_banner",
                    "-loglevel",
                    "error",
                    "-y",
                    "-i",
                    str(media),
                    "-ac",
                    "1",
                    "-ar",
                    "16000",
                    "-c:a",
                    "pcm_s16le",
                    str(tmp),
                ],
                check=True,
            )
        except BaseException:
            tmp.unlink(missing_ok=True)  # never leave a half-written WAV in the cache
            raise
        os.replace(tmp, wav)
    return wav


def align(jan: Janitor, wav: Path, window_s: float) -> int:
    """Write float32 windows of the WAV into a fresh job folder; returns windows written."""
    job_dir = Path(tempfile.mkdtemp(prefix=".tmp"))
    audio = job_dir / "fa_v2" / "audio"
    audio.mkdir(parents=True)
    try:
        with jan.pin(wav), wave.open(str(wav), "rb") as src:
            jan.touch(wav)
            frames = src.getnframes()
            rate = src.getframerate()
            need = pcm_bytes(frames / rate, rate, 1, 4)
            with jan.reserve("job_tmp", max(need, 1), path=job_dir, job="fa_v2") as r:
                per_window = int(window_s * rate)
                n = 0
                while True:
                    r.check()  # SpaceRisk: stop at a window boundary, not mid-write
                    chunk = src.readframes(per_window)
                    if not chunk:
                        break
                    samples = array.array("h", chunk)
                    floats = array.array("f", (s / 32768.0 for s in samples))
                    (audio / f"{n:05d}.pcm").write_bytes(floats.tobytes())
                    n += 1
                return n
    finally:
        shutil.rmtree(job_dir, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("media", type=Path)
    parser.add_argument("--window", type=float, default=10.0, help="seconds per PCM window")
    args = parser.parse_args()
    jan = Janitor.from_settings()
    cache = jan.policy.tree("media_cache").path
    try:
        wav = convert(jan, args.media, cache)
        windows = align(jan, wav, args.window)
    except ReservationRefused as exc:
        print(f"align_worker: not enough disk space, job not started: {exc}", file=sys.stderr)
        return 75
    except SpaceRisk as exc:
        print(f"align_worker: stopped early, the disk is nearly full: {exc}", file=sys.stderr)
        return 75
    except JanitorError as exc:  # unreadable media, no ffprobe, a bad policy
        print(f"align_worker: {exc}", file=sys.stderr)
        return 2
    except subprocess.CalledProcessError as exc:
        print(f"align_worker: ffmpeg failed with exit code {exc.returncode}", file=sys.stderr)
        return 1
    print(f"align_worker: {args.media} -> {wav.name}, {windows} windows", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
