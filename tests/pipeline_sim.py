#!/usr/bin/env python3
"""A stand-in for batchalign3's file operations, exactly as batchalign3 makes them (below).

For each media file, one after the other (or ``--concurrency`` at once, as the server's workers):

1. Inputs that need converting (``.mp4 .m4a .webm .wma``) get a media-cache WAV: the converter
   takes an exclusive ``flock`` on ``CACHE/{fp}.wav.lock``, re-checks for ``{fp}.wav``, runs
   ``ffmpeg -y -i SRC -acodec pcm_s16le -ar 16000 -ac 1 CACHE/{fp}.tmp.wav``, unlocks, then
   renames the WAV into place (so the lock is free a moment before the WAV appears). The lock file
   is never deleted. Other inputs are read in place.
2. With ``--probe``, its duration is asked of ``ffprobe -v quiet -show_entries format=duration
   -of default=noprint_wrappers=1:nokey=1 WAV`` (found on ``PATH``; a failed probe is no error,
   as batchalign3's ``get_audio_duration_ms`` returns None), then ``--utr-s`` of "UTR".
3. A job temp folder ``$TMPDIR/.tmpXXXXXX`` (as Rust's tempfile makes it) gets one segment PCM per
   forced-alignment group, each cut from the WAV by its own ffmpeg:
   ``ffmpeg -y -ss S.SSS -to E.EEE -i WAV -f f32le -acodec pcm_f32le -ar 16000 -ac 1
   .tmpXXXXXX/fa_v2/audio/fa-v2-audio-{group}.pcm``; every group's PCM stays until the file is
   done. With ``--whole`` it also writes the whole-file PCM of a scope
   (``ffmpeg -y -i SRC -f f32le -acodec pcm_f32le -ar 16000 -ac 1
   .tmpXXXXXX/asr_v2/audio/{id}.pcm``). ``--recut G`` cuts group G a second time, the same
   window into ``fa-v2-audio-fallback-{G}.pcm`` (batchalign3's Whisper fallback for a group
   Wave2Vec could not align: a new namespace, the same folder); with ``--recut-while F``, only
   once file F is gone (a test's gate: it takes the room first).
4. The folder is removed when the file is done, or when a write fails (the Rust object is
   dropped); a SIGKILL leaves it behind, as it leaves the pipeline's.

``ffmpeg`` is called by name, found on ``PATH`` as the server finds it. When ffmpeg fails the
simulator prints its stderr as the job's error (as the server does) and exits 1. ``--report``
writes one JSON line per file written: ``{"path", "bytes"}``, sizes taken before the folder is
removed.

    python tests/pipeline_sim.py --cache C --tmpdir T --groups 4 --group-s 3 talk.m4a
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import wave
from concurrent.futures import ThreadPoolExecutor

FORCED_CONVERSION = (".mp4", ".m4a", ".webm", ".wma")
PCM_ARGS = ["-f", "f32le", "-acodec", "pcm_f32le", "-ar", "16000", "-ac", "1"]
#: How often a gate file (``--recut-while``, ``--hold-while``) is looked at.
GATE_POLL_S = 0.02
_report_lock = threading.Lock()


class JobFailed(Exception):
    """An ffmpeg call failed: its stderr is the job's error message."""


def fingerprint(path: str) -> str:
    """batchalign3's media fingerprint (ensure_wav.rs ``media_fingerprint``): BLAKE3 of (size as
    u64 BE, the first 64 KiB, the last 64 KiB read from the end). Without the blake3 module
    (an optional extra of ours) BLAKE2b of the same bytes: another key, the same file operations.
    """
    try:
        from blake3 import blake3 as hasher
    except ImportError:
        from hashlib import blake2b as hasher

    size = os.path.getsize(path)
    h = hasher(size.to_bytes(8, "big"))
    with open(path, "rb") as f:
        h.update(f.read(65536))
        if size > 65536:
            f.seek(-65536, os.SEEK_END)
            h.update(f.read(65536))
    return h.hexdigest()[:24]


def ffmpeg(*args: str) -> None:
    proc = subprocess.run(["ffmpeg", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise JobFailed(f"ffmpeg failed (exit {proc.returncode}): {proc.stderr.strip()}")


def report(out: str | None, path: str) -> None:
    if out is None:
        return
    line = json.dumps({"path": path, "bytes": os.path.getsize(path)})
    with _report_lock, open(out, "a") as f:
        f.write(line + "\n")


def cached_wav(src: str, cache: str, out: str | None) -> str:
    """The WAV the aligner reads: the media-cache conversion for inputs that need one."""
    if not src.lower().endswith(FORCED_CONVERSION):
        return src
    fp = fingerprint(src)
    wav = os.path.join(cache, f"{fp}.wav")
    tmp = os.path.join(cache, f"{fp}.tmp.wav")
    os.makedirs(cache, exist_ok=True)
    fd = os.open(os.path.join(cache, f"{fp}.wav.lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        if os.path.exists(wav):
            return wav
        ffmpeg("-y", "-i", src, "-acodec", "pcm_s16le", "-ar", "16000", "-ac", "1", tmp)
        report(out, tmp)
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
    os.rename(tmp, wav)
    return wav


def duration_of(wav: str) -> float:
    with wave.open(wav) as w:
        return w.getnframes() / w.getframerate()


def _daemonize() -> bool:
    """Fork twice with a setsid between, as a daemon does: True in the process that returns at
    once (the launcher), False in the grandchild that goes on, re-parented to init."""
    if os.fork() > 0:
        os.wait()  # the first child exits right after its fork
        return True
    os.setsid()
    if os.fork() > 0:
        os._exit(0)
    return False


def probe(wav: str) -> float | None:
    """The duration ffprobe says, or None when it fails (no error: batchalign3 goes on)."""
    done = subprocess.run(
        ["ffprobe", "-v", "quiet", "-show_entries", "format=duration", "-of",
         "default=noprint_wrappers=1:nokey=1", wav],
        capture_output=True, text=True,
    )  # fmt: skip
    if done.returncode != 0:
        return None
    try:
        return float(done.stdout.strip())
    except ValueError:
        return None


def align(src: str, args: argparse.Namespace) -> None:
    wav = cached_wav(src, args.cache, args.report)
    if args.probe:
        said = probe(wav)
        if args.report:
            with _report_lock, open(args.report, "a") as f:
                f.write(json.dumps({"probe": wav, "duration": said}) + "\n")
    if args.utr_s:
        time.sleep(args.utr_s)
    job = args.job_dir or tempfile.mkdtemp(prefix=".tmp", dir=args.tmpdir)
    try:
        audio = os.path.join(job, "fa_v2", "audio")
        os.makedirs(audio, exist_ok=True)
        total = duration_of(wav) if wav.endswith(".wav") else args.groups * args.group_s
        for g in range(args.groups):
            start = g * args.group_s
            end = min((g + 1) * args.group_s, total)
            if end <= start:
                break
            pcm = os.path.join(audio, f"fa-v2-audio-{g}.pcm")
            ffmpeg("-y", "-ss", f"{start:.3f}", "-to", f"{end:.3f}", "-i", wav, *PCM_ARGS, pcm)
            report(args.report, pcm)
            if g in (args.recut or ()):
                while args.recut_while and os.path.exists(args.recut_while):
                    time.sleep(GATE_POLL_S)
                again = os.path.join(audio, f"fa-v2-audio-fallback-{g}.pcm")
                ffmpeg("-y", "-ss", f"{start:.3f}", "-to", f"{end:.3f}", "-i", wav, *PCM_ARGS,
                       again)  # fmt: skip
                report(args.report, again)
            if args.pause_s:
                time.sleep(args.pause_s)
        if args.whole:
            scope = os.path.join(job, "asr_v2", "audio")
            os.makedirs(scope)
            pcm = os.path.join(scope, f"{os.path.basename(src)}.pcm")
            rate = ["-readrate", str(args.readrate)] if args.readrate else []
            ffmpeg("-y", *rate, "-i", src, *PCM_ARGS, pcm)
            report(args.report, pcm)
        if args.hold_s:
            time.sleep(args.hold_s)
        while args.hold_while and os.path.exists(args.hold_while):
            time.sleep(GATE_POLL_S)
    finally:
        if not args.job_dir:
            shutil.rmtree(job, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("media", nargs="+")
    p.add_argument("--cache", required=True, help="the media cache folder")
    p.add_argument("--tmpdir", default=os.environ.get("TMPDIR", tempfile.gettempdir()))
    p.add_argument("--groups", type=int, default=3, help="alignment groups per file")
    p.add_argument("--group-s", type=float, default=2.0, help="seconds per group")
    p.add_argument("--pause-s", type=float, default=0.0, help="compute between two group cuts")
    p.add_argument("--hold-s", type=float, default=0.0, help="compute after the last cut")
    p.add_argument("--whole", action="store_true", help="also write a whole-file PCM")
    p.add_argument("--probe", action="store_true", help="ffprobe the WAV's duration first")
    p.add_argument("--utr-s", type=float, default=0.0, help="'UTR' between probe and first cut")
    p.add_argument(
        "--recut", type=int, action="append", help="cut this group again (a Whisper fallback)"
    )
    p.add_argument(
        "--recut-while", help="before cutting a group again, wait while this file exists"
    )
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--readrate", type=float, help="read the whole-file PCM's input at this speed")
    p.add_argument("--report", help="append one JSON line per file written")
    p.add_argument("--hold-while", help="after the last cut, wait while this file exists")
    p.add_argument(
        "--job-dir",
        help="cut into this existing job folder (another job's) instead of a new one; kept",
    )
    p.add_argument(
        "--daemonize",
        action="store_true",
        help="double-fork and setsid first (a server that leaves its launcher): the command "
        "exits at once, the work goes on in the background",
    )
    args = p.parse_args(argv)
    if args.daemonize and _daemonize():
        return 0
    try:
        with ThreadPoolExecutor(args.concurrency) as pool:
            for future in [pool.submit(align, m, args) for m in args.media]:
                future.result()
    except JobFailed as exc:
        print(f"job failed: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
