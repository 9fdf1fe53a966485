#!/usr/bin/env python3
"""pipeline_soak: the unchanged pipeline, guarded, racing outside writers on a small disk.

A simulated batchalign3 server whose worker processes make exactly batchalign3's calls (below)
through the installed guard (``janitor shim install``; ffmpeg found on
``PATH``, the worker is ffmpeg's parent, as the server is), several files at once:

1. for ``--asr-frac`` of the files, first a whole-file ``asr_v2`` PCM of the original media
   in a ``.tmpXXXXXX`` folder of its own (``ffmpeg -y -i SRC -f f32le -acodec pcm_f32le -ar
   16000 -ac 1 ...pcm``), removed once "ASR" is done;
2. inputs that need converting (``.m4a``) get the media-cache WAV: an exclusive ``flock`` on
   ``{fp}.wav.lock``, a re-check, ``ffmpeg -y -i SRC -acodec pcm_s16le -ar 16000 -ac 1
   CACHE/{fp}.tmp.wav``, unlock, rename; ``.wav`` inputs are read in place; a cache hit is a
   ``stat`` and nothing else;
3. forced alignment, as ``process_one_fa_file`` does it right after ``ensure_wav`` (2):
   ``ffprobe -v quiet -show_entries format=duration -of default=noprint_wrappers=1:nokey=1
   WAV`` by bare name from ``PATH`` (a failed probe is no error: batchalign3 goes on without
   the duration), then "UTR" for a random
   time up to ``--utr-max-s`` (minutes: Rev.AI or Whisper), then a new ``.tmpXXXXXX``: per 15 s
   group its JSON payload, its cut (``ffmpeg -y -ss S -to E -i WAV -f f32le ...
   fa_v2/audio/fa-v2-audio-{ns}-{g}.pcm``) and ``--compute-s`` of "inference"; a group falls
   back to Whisper with probability ``--recut-frac`` and is cut again (a new namespace, the
   same folder); every group's PCM stays until the file is done; then the folder is removed
   (the Rust ``TempDir`` dropped).

Meanwhile ``--outside`` writers with no reservation push the volume towards full in bursts (one
in four to ENOSPC), the harness SIGKILLs a worker mid-alignment every ``--kill-every`` seconds
(the OOM killer; the server starts another), and the real daemon runs. The policy is the
shipped one's for these two trees (``min_age`` 10 min) with a cache quota (``--quota``) smaller
than what a run converts. A tmpfs (root: it is mounted and unmounted here) holds the media
cache, the job temp folder and files that belong to no job (checked untouched at the end).

It prints one table (exit 0; ``--strict`` exits 1 when a goal is missed):

* files started / completed (goal: at least 80 % of those not killed on purpose) / refused at
  their first write, and of those how many while unused cache could have made room (goal 0) /
  failed later (with the groups of compute lost; goal 0) and stopped by outside writers
  (counted apart, with their groups: stopped by the guard as the volume fell below its floor,
  a cut that met the disk filled to its last byte, which the guard stops and says so, and the
  worker's own unguarded small writes that met ENOSPC then); probes refused as never fitting,
  and of those the first cut refused too, completed anyway (the refusal was wrong) and the WAV
  evicted before the first cut (a refused probe marks nothing awaiting use);
* inputs deleted under a live job or while awaiting use (0), admitted writes that met ENOSPC
  (0 that the guard did not stop as forced by outside writers), foreign files touched (0);
* seconds below the floor (goal: at most 5 % of the run); of those, the seconds while an
  outside writer aimed below it (a burst whose goal was under the floor, or ENOSPC, while it
  was written and held: no reservation covers it, and nothing the janitor may delete can lift
  the volume while the cache holds only what is in use), of those the seconds while one wrote
  until ENOSPC (whatever is freed then, it takes too), and the rest (admitted writes, the
  janitor's reaction); and the seconds while the cache still held entries nothing used (the
  janitor could have evicted); what held the volume while it was below the floor (mean MiB
  over those samples: free space, outside bursts, cache entries in use and unused, killed
  workers' job folders not yet removed, other job folders), which says whether anything the
  janitor may free was there; the cache's size against its quota plus what is in use (pinned
  or awaiting use);
* seconds from a writer's death to its folder's removal (goal at most 30 s);
* waits (from the guard's log): started, admitted, refused at the end (goal: at most 5 % of the
  waits), p50/p99; and the utilization of capacity minus floor while a job waits (used +
  promised bytes over capacity - floor, sampled 4 times a second; goal at least 90 %).

    sudo .venv/bin/python benchmarks/pipeline_soak.py --minutes 10
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import Row, percentile, verdict

MiB = 1024 * 1024
PCM_ARGS = ["-f", "f32le", "-acodec", "pcm_f32le", "-ar", "16000", "-ac", "1"]
#: batchalign3's probe of a cached WAV (fa_pipeline.rs: get_audio_duration_ms).
PROBE_ARGS = ["-v", "quiet", "-show_entries", "format=duration", "-of",
              "default=noprint_wrappers=1:nokey=1"]  # fmt: skip
_UNITS = {"B": 1, "KiB": 1024, "MiB": MiB, "GiB": 1024 * MiB}
JANITOR = [sys.executable, "-m", "janitor"]


# -- the worker: one process of the simulated server ---------------------------------------------


class Failed(Exception):
    """An ffmpeg call of the file failed: its kind (refused, stopped, enospc, input, error)."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind


def _kind(code: int, err: str, wav: str | None) -> str:
    if code == 75 and "space-janitor: stopped" in err:
        # The guard's own word: ffmpeg met ENOSPC while writers outside every reservation
        # held the disk to its last byte ("filled"), or it was stopped before that.
        return "filled" if "No space left on device" in err else "stopped"
    if "No space left on device" in err:
        return "enospc"
    if code == 75 and "space-janitor: refused" in err:
        return "refused"
    if wav is not None and not os.path.exists(wav):
        return "input"
    return "error"


def ffmpeg(*args: str, wav: str | None = None) -> None:
    proc = subprocess.run(["ffmpeg", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise Failed(_kind(proc.returncode, proc.stderr, wav), proc.stderr.strip()[-1000:])


def short_by(err: str) -> int:
    """The bytes a refusal line says the write was short by (0 when it does not say)."""
    m = re.search(r"short by ([\d.]+) (B|KiB|MiB|GiB)", err)
    return int(float(m.group(1)) * _UNITS[m.group(2)]) if m else 0


def unused_cache(cache: str, policy: str) -> int:
    """Bytes of the cache's WAVs that nothing uses now (no pin, no awaiting-use mark, no held
    lock): what a make-room could have evicted at the moment of a refusal."""
    from janitor import Janitor
    from janitor.host.inuse import lock_held

    jan = Janitor.from_settings(policy=policy)
    try:
        used = {os.path.basename(p.path).split(".")[0] for p in jan.pins()}
    finally:
        jan.ledger.close()
    total = 0
    for name in os.listdir(cache):
        if not name.endswith(".wav") or ".tmp" in name or name.split(".")[0] in used:
            continue
        path = os.path.join(cache, name)
        if lock_held(path + ".lock"):
            continue
        try:
            total += os.stat(path).st_blocks * 512
        except OSError:
            continue
    return total


def fingerprint(path: str) -> str:
    """A stand-in for batchalign3's BLAKE3 fingerprint (the same bytes, another hash)."""
    size = os.path.getsize(path)
    h = hashlib.blake2b(size.to_bytes(8, "big"))
    with open(path, "rb") as f:
        h.update(f.read(65536))
        if size > 65536:
            f.seek(-65536, os.SEEK_END)
            h.update(f.read(65536))
    return h.hexdigest()[:24]


def cached_wav(src: str, cache: str) -> str:
    if src.endswith(".wav"):
        return src
    fp = fingerprint(src)
    wav, tmp = os.path.join(cache, f"{fp}.wav"), os.path.join(cache, f"{fp}.tmp.wav")
    fd = os.open(os.path.join(cache, f"{fp}.wav.lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        if os.path.exists(wav):
            return wav
        ffmpeg("-y", "-i", src, "-acodec", "pcm_s16le", "-ar", "16000", "-ac", "1", tmp)
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
    os.rename(tmp, wav)
    return wav


class Worker:
    """One worker process: file after file until the stop file appears."""

    def __init__(self, slot: int, work: Path, cfg: dict[str, Any]) -> None:
        self.slot = slot
        self.work = work
        self.cfg = cfg
        self.rng = random.Random(cfg["seed"] * 1000 + slot * 7 + os.getpid())
        self.cache = str(work / "mnt" / "cache")
        self.tmp = str(work / "mnt" / "tmp")
        self.state_file = work / "state" / f"worker-{slot}.json"
        self.records = work / "records" / f"worker-{slot}.jsonl"

    def state(self, **data: Any) -> None:
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"pid": os.getpid(), **data}))
        os.replace(tmp, self.state_file)

    def run(self) -> None:
        sources = json.loads((self.work / "sources.json").read_text())
        stop = self.work / "stop"
        while not stop.exists():
            src = self.rng.choice(sources)
            rec: dict[str, Any] = {"src": os.path.basename(src["path"]), "t0": time.time()}
            rec["groups"] = -(-int(src["duration"]) // self.cfg["group_s"])
            rec["cuts"] = 0
            try:
                self.one(src, rec)
                rec["outcome"] = "completed"
            except Failed as exc:
                rec["outcome"], rec["detail"] = exc.kind, str(exc)
            except OSError as exc:  # the worker's own small writes (payloads) are unguarded
                rec["outcome"], rec["detail"] = "own-write", f"{exc.strerror}: {exc.filename}"
            rec["t1"] = time.time()
            with open(self.records, "a") as f:
                f.write(json.dumps(rec) + "\n")
            self.state(phase="idle")

    def one(self, src: dict[str, Any], rec: dict[str, Any]) -> None:
        cfg = self.cfg
        if self.rng.random() < cfg["asr_frac"]:
            # ASR reads the original media (its own stage, before the file's alignment).
            job = tempfile.mkdtemp(prefix=".tmp", dir=self.tmp)
            try:
                audio = os.path.join(job, "asr_v2", "audio")
                os.makedirs(audio)
                self.state(phase="asr", folder=job)
                ffmpeg("-y", "-i", src["path"], *PCM_ARGS, os.path.join(audio, "asr.pcm"))
                time.sleep(cfg["compute_s"] * 2)
            finally:
                shutil.rmtree(job, ignore_errors=True)
        # process_one_fa_file: ensure_wav (a cache hit is a stat), the WAV's identity (a stat),
        # the probe at once (a failure is no error), then UTR, then the cuts.
        self.state(phase="convert")
        wav = cached_wav(src["path"], self.cache)
        ino = os.stat(wav).st_ino
        rec["cached"] = wav.startswith(self.cache)
        self.state(phase="probe")
        probed = subprocess.run(["ffprobe", *PROBE_ARGS, wav], capture_output=True, text=True)
        rec["probe"] = probed.returncode
        if probed.returncode != 0 and not os.path.exists(wav):
            # Evicted between the cache hit (a stat: the pipeline holds nothing then) and the
            # probe that would have marked it awaiting use.
            raise Failed("hit-lost", f"{wav} gone between the cache hit and its probe")
        self.state(phase="utr")
        time.sleep(self.rng.uniform(0, cfg["utr_max_s"]))
        job = tempfile.mkdtemp(prefix=".tmp", dir=self.tmp)
        ns = self.rng.randrange(1 << 30)
        try:
            audio, text = (os.path.join(job, "fa_v2", d) for d in ("audio", "text"))
            os.makedirs(audio)
            os.makedirs(text)
            for g in range(rec["groups"]):
                start = g * cfg["group_s"]
                end = min((g + 1) * cfg["group_s"], src["duration"])
                with open(os.path.join(text, f"fa-v2-payload-{ns}-{g}.json"), "w") as f:
                    json.dump({"words": ["w"] * 40, "start_ms": int(start * 1000)}, f)
                windows = [ns]
                if self.rng.random() < cfg["recut_frac"]:
                    windows.append(ns + 1 + g)  # the Whisper fallback: cut again
                for space in windows:
                    st = os.stat(wav) if os.path.exists(wav) else None
                    if st is not None and st.st_ino != ino:
                        # The pipeline's own race, not a deletion: its converter unlocks before
                        # it renames, so a second converter may convert again and rename over
                        # the WAV (the same bytes); the next cut reads the new one by its path.
                        ino = st.st_ino
                        rec["replaced"] = rec.get("replaced", 0) + 1
                    if st is None:
                        # Before its first cut the WAV was only awaiting use (probed), or, its
                        # probe refused (the file can never fit), not even that.
                        kind = "input" if rec["cuts"] else "awaiting"
                        if not rec["cuts"] and rec["probe"] == 75:
                            # batchalign3 goes on after a failed probe (no duration), but a
                            # refused probe marked nothing: its WAV lay unprotected through UTR
                            kind = "probe-lost"
                        raise Failed(kind, f"{wav} deleted under the job")
                    pcm = os.path.join(audio, f"fa-v2-audio-{space}-{g}.pcm")
                    self.state(phase="fa", folder=job, cuts=rec["cuts"])
                    try:
                        ffmpeg("-y", "-ss", f"{start:.3f}", "-to", f"{end:.3f}", "-i", wav,
                               *PCM_ARGS, pcm, wav=wav)  # fmt: skip
                    except Failed as exc:
                        if exc.kind == "refused" and not rec["cuts"]:
                            rec["short"] = short_by(str(exc))
                            rec["unused_cache"] = unused_cache(self.cache, cfg["policy"])
                            if rec["probe"] == 75:
                                exc.kind = "probe-refused"  # said at the probe already
                        raise
                    rec["cuts"] += 1
                    self.state(phase="fa", folder=job, cuts=rec["cuts"])
                time.sleep(cfg["compute_s"])
        finally:
            shutil.rmtree(job, ignore_errors=True)


# -- the harness -----------------------------------------------------------------------------------


@dataclass
class Planted:
    path: Path
    ino: int
    size: int
    mtime_ns: int
    digest: str


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def plant(paths: list[Path], rng: random.Random) -> list[Planted]:
    out = []
    for p in paths:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(rng.randbytes(rng.randrange(4096, 65536)))
        old = time.time() - 86400 * 3
        os.utime(p, (old, old))
        st = p.stat()
        out.append(Planted(p, st.st_ino, st.st_size, st.st_mtime_ns, _digest(p)))
    return out


def touched(planted: list[Planted]) -> list[str]:
    bad = []
    for p in planted:
        try:
            st = p.path.stat()
        except OSError:
            bad.append(f"{p.path}: gone")
            continue
        if (st.st_ino, st.st_size, st.st_mtime_ns) != (p.ino, p.size, p.mtime_ns):
            bad.append(f"{p.path}: changed")
        elif _digest(p.path) != p.digest:
            bad.append(f"{p.path}: content changed")
    return bad


@dataclass
class Harness:
    args: argparse.Namespace
    work: Path
    env: dict[str, str]
    rng: random.Random
    stop: threading.Event = field(default_factory=threading.Event)
    workers: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)
    kills: list[dict[str, Any]] = field(default_factory=list)
    util: list[float] = field(default_factory=list)
    min_free: int = 1 << 62
    floor: int = 0
    quota: int = 0
    outside_enospc: int = 0
    #: Seconds sampled below the floor; the cache's size beside its quota and what is in use.
    below_floor_s: float = 0.0
    below_floor_unused_s: float = 0.0
    #: ... of those, while an outside writer aimed below the floor (or at ENOSPC): the bursts
    #: whose goal is under the floor, by name, while written and held.
    below_floor_outside_s: float = 0.0
    aiming_below: set[str] = field(default_factory=set)
    #: ... of those, while an outside writer wrote until ENOSPC (the disk to its last byte),
    #: by name, while written and held: no eviction or stop lifts a volume such a writer fills.
    below_floor_full_s: float = 0.0
    aiming_full: set[str] = field(default_factory=set)
    #: What held the volume while it was below the floor, summed over those samples (MiB x
    #: samples): free space, outside bursts, cache entries in use, cache entries nothing used,
    #: killed workers' job folders not yet removed, other job folders (live, or not ours).
    below_held: dict[str, float] = field(default_factory=dict)
    cache_over: list[tuple[int, int]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def mnt(self) -> Path:
        return self.work / "mnt"

    def spawn(self, slot: int) -> None:
        cfg = {
            "seed": self.args.seed,
            "group_s": self.args.group_s,
            "compute_s": self.args.compute_s,
            "asr_frac": self.args.asr_frac,
            "utr_max_s": self.args.utr_max_s,
            "recut_frac": self.args.recut_frac,
            "policy": str(self.work / "policy.toml"),
        }
        self.workers[slot] = subprocess.Popen(
            [sys.executable, __file__, "--worker", str(slot), "--work", str(self.work),
             "--config", json.dumps(cfg)],
            env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=open(self.work / "log" / f"worker-{slot}.err", "ab"),  # noqa: SIM115
        )  # fmt: skip

    def outside(self, k: int) -> None:
        """Bursts into outside/: towards the floor and below it, one in four until ENOSPC,
        held a few seconds, then deleted."""
        rng = random.Random(self.args.seed * 31 + k)
        folder = self.mnt / "outside"
        block = rng.randbytes(MiB)
        n = 0
        while not self.stop.wait(rng.uniform(2.0, 6.0)):
            path = folder / f"burst-{k}-{n}.bin"
            n += 1
            st = os.statvfs(self.mnt)
            free = st.f_bavail * st.f_frsize
            target = rng.uniform(0.3, 1.3) * self.floor  # down to around the floor, sometimes below
            want = max(0, int(free - target)) // self.args.outside
            if rng.random() < 0.25:
                want = free  # until the disk says ENOSPC
            below = want == free or target < self.floor
            if below:
                with self.lock:
                    self.aiming_below.add(path.name)
                    if want == free:
                        self.aiming_full.add(path.name)
            try:
                with open(path, "wb") as f:
                    left = want
                    while left > 0 and not self.stop.is_set():
                        f.write(block[: min(left, MiB)])
                        f.flush()
                        left -= MiB
                        time.sleep(MiB / (self.args.outside_rate * MiB))
            except OSError:
                with self.lock:
                    self.outside_enospc += 1
            self.stop.wait(rng.uniform(1.0, 4.0))
            path.unlink(missing_ok=True)
            with self.lock:
                self.aiming_below.discard(path.name)
                self.aiming_full.discard(path.name)

    def sampler(self) -> None:
        """Free space, and the utilization of capacity minus floor while a call waits."""
        from janitor import Janitor
        from janitor.admission.reserve import live_reservations

        jan = Janitor.from_settings(policy=self.work / "policy.toml")
        device = os.stat(self.mnt).st_dev
        cache = self.mnt / "cache"
        while not self.stop.wait(0.25):
            st = os.statvfs(self.mnt)
            free, total = st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize
            self.min_free = min(self.min_free, free)
            below = free < self.floor
            if below:
                self.below_floor_s += 0.25
                with self.lock:
                    outside_below, outside_full = bool(self.aiming_below), bool(self.aiming_full)
                if outside_below:
                    self.below_floor_outside_s += 0.25
                if outside_full:
                    self.below_floor_full_s += 0.25
            try:
                with jan.ledger.read() as tx:
                    used = {os.path.basename(p.path).split(".")[0] for p in tx.pins.live()}
                    waiting = bool(tx.waiters.on(device))
                    promised = sum(r.outstanding for r in live_reservations(tx, device=device))
            except Exception:
                continue
            size = in_use = 0
            for f in list(cache.iterdir()):
                try:
                    n = f.stat().st_blocks * 512
                except OSError:
                    continue
                size += n
                # pinned or awaiting use, or a conversion still being written (its reservation
                # holds it; nothing evicts a unit whose lock its writer holds)
                if f.name.split(".")[0] in used or f.name.endswith(".tmp.wav"):
                    in_use += n
            self.cache_over.append((size, self.quota + in_use))
            if below and size > in_use:
                # below the floor while the cache held entries nothing used: the janitor's
                # share of that time (the rest is the outside writers' alone)
                self.below_floor_unused_s += 0.25
            if below:
                self._held_below(free, in_use, size - in_use)
            if not waiting:
                continue
            self.util.append(min(1.0, (total - free + promised) / (total - self.floor)))

    def _held_below(self, free: int, cache_in_use: int, cache_unused: int) -> None:
        """Add one below-the-floor sample's breakdown of what holds the volume."""
        from janitor.host.space import allocated_size  # the janitor's own measure: no links

        dead = {k["folder"] for k in self.kills if k["gone"] is None}
        held = {
            "free": free,
            "outside": allocated_size(self.mnt / "outside"),
            "cache in use": cache_in_use,
            "cache unused": cache_unused,
            "other job folders": 0,
            "killed jobs' folders": 0,
        }
        for job in (self.mnt / "tmp").glob(".tmp*"):
            whose = "killed jobs' folders" if str(job) in dead else "other job folders"
            held[whose] += allocated_size(job)
        for k, n in held.items():
            self.below_held[k] = self.below_held.get(k, 0.0) + n / MiB

    def killer(self) -> None:
        """Every --kill-every seconds, SIGKILL a worker mid-alignment; the server restarts it."""
        while not self.stop.wait(self.rng.uniform(0.5, 1.5) * self.args.kill_every):
            candidates = []
            for slot in self.workers:
                try:
                    st = json.loads((self.work / "state" / f"worker-{slot}.json").read_text())
                except (OSError, ValueError):
                    continue
                if st.get("phase") == "fa" and st.get("cuts", 0) >= 2:
                    candidates.append((slot, st))
            if not candidates:
                continue
            slot, st = self.rng.choice(candidates)
            proc = self.workers[slot]
            if proc.pid != st["pid"]:
                continue
            proc.kill()
            proc.wait()
            kill = {"t": time.monotonic(), "folder": st["folder"], "gone": None}
            self.kills.append(kill)
            threading.Thread(target=self._watch_folder, args=(kill,), daemon=True).start()
            self.spawn(slot)

    def _watch_folder(self, kill: dict[str, Any]) -> None:
        deadline = kill["t"] + 120
        while time.monotonic() < deadline:
            if not os.path.exists(kill["folder"]):
                kill["gone"] = time.monotonic() - kill["t"]
                return
            time.sleep(0.1)


# -- setup -----------------------------------------------------------------------------------------


def make_sources(folder: Path, n: int, rng: random.Random) -> list[dict[str, Any]]:
    """``n`` recordings of 45-240 s, mostly ``.m4a`` (converted), a few ``.wav`` (read in place)."""
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(n):
        seconds = rng.randrange(45, 240)
        ext = ".wav" if i % 4 == 3 else ".m4a"
        path = folder / f"talk-{i}{ext}"
        codec = (
            ["-c:a", "pcm_s16le", "-ar", "16000"]
            if ext == ".wav"
            else ["-c:a", "aac", "-b:a", "24k"]
        )
        subprocess.run(
            ["ffmpeg", "-nostdin", "-loglevel", "error", "-y", "-f", "lavfi", "-i",
             f"sine=frequency={200 + 37 * i}:duration={seconds}", "-ac", "1", *codec, str(path)],
            check=True,
        )  # fmt: skip
        out.append({"path": str(path), "duration": seconds})
    return out


def policy_text(mnt: Path, floor: str, quota: str) -> str:
    return f"""[volume]
floor = "{floor}"

[trees.media_cache]
role = "cache"
path = "{mnt / "cache"}"
quota = "{quota}"
min_age = "10m"
group = '^(?P<key>[^/]+?)(?:\\.tmp)?\\.wav(?:\\.lock)?$'
lock = "{{key}}.wav.lock"

[trees.job_tmp]
role = "scratch"
path = "{mnt / "tmp"}"
units = "dir"
unit_glob = ".tmp*"
unit_requires = ["fa_v2", "asr_v2", "speaker_v2"]
orphan_age = "12h"
min_age = "10m"
"""


@contextlib.contextmanager
def mounted(where: Path, size: str) -> Iterator[None]:
    where.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], check=True)
    try:
        yield
    finally:
        for _ in range(20):
            if subprocess.run(["umount", str(where)], capture_output=True).returncode == 0:
                break
            time.sleep(0.5)
        else:
            subprocess.run(["umount", "-l", str(where)], capture_output=True)


def guard_log_waits(path: Path) -> tuple[int, list[float], list[float]]:
    """(waits started, seconds of those admitted, seconds of those refused) from guard.log."""
    started = 0
    admitted: list[float] = []
    refused: list[float] = []
    if not path.exists():
        return 0, [], []
    for line in path.read_text(errors="replace").splitlines():
        if "INFO" in line and ": waiting: " in line:
            started += 1
        m = re.search(r"after waiting ([\d.]+) s", line)
        if m is None:
            continue
        (refused if ": refused: " in line else admitted).append(float(m.group(1)))
    return started, admitted, refused


def run(args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="pipeline-soak-"))
    for d in ("state", "records", "log", "run", "bin", "home"):
        (work / d).mkdir()
    os.chmod(work / "run", 0o700)
    print(f"work folder {work}; making {args.sources} recordings ...", file=sys.stderr)
    sources = make_sources(work / "media", args.sources, rng)
    (work / "sources.json").write_text(json.dumps(sources))
    mnt = work / "mnt"
    with contextlib.ExitStack() as stack:
        stack.enter_context(mounted(mnt, args.size))
        for d in ("cache", "tmp", "outside"):
            (mnt / d).mkdir()
        planted = plant(
            [mnt / "keep" / "thesis.pdf", mnt / "tmp" / ".tmpNOTOURS" / "data.bin",
             mnt / "tmp" / "notes.txt", mnt / "tmp" / ".tmpOLDJOB" / "other" / "x.bin"],
            rng,
        )  # fmt: skip
        (work / "policy.toml").write_text(policy_text(mnt, args.floor, args.quota))
        env = {k: v for k, v in os.environ.items() if not k.startswith("JANITOR_")}
        env.update(
            HOME=str(work / "home"),
            XDG_DATA_HOME=str(work / "home" / "data"),
            XDG_CACHE_HOME=str(work / "home" / "cache"),
            JANITOR_POLICY=str(work / "policy.toml"),
            JANITOR_STATE_DIR=str(work / "state"),
            JANITOR_RUNTIME_DIR=str(work / "run"),
            JANITOR_LOG_DIR=str(work / "log"),
            TMPDIR=str(mnt / "tmp"),
        )
        os.environ.update({k: v for k, v in env.items() if k.startswith("JANITOR_")})
        subprocess.run([*JANITOR, "shim", "install", "--dir", str(work / "bin")], env=env,
                       check=True, capture_output=True)  # fmt: skip
        env["PATH"] = f"{work / 'bin'}{os.pathsep}{env['PATH']}"
        daemon = subprocess.Popen(
            [*JANITOR, "daemon", "--quiet"], env=env, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=open(work / "log" / "daemon.err", "wb"),  # noqa: SIM115
        )  # fmt: skip
        stack.callback(_stop, daemon)
        sock = work / "run" / "janitor.sock"
        for _ in range(200):
            if sock.exists():
                break
            time.sleep(0.1)
        h = Harness(args, work, env, rng)
        from janitor import Janitor

        jan = Janitor.from_settings(policy=work / "policy.toml")
        h.floor = jan.volumes()["job_tmp"].floor
        quota = jan.policy.tree("media_cache").quota_bytes(jan.volumes()["media_cache"].total)
        h.quota = quota or 0
        jan.ledger.close()
        threads = [threading.Thread(target=h.sampler, daemon=True),
                   threading.Thread(target=h.killer, daemon=True)]  # fmt: skip
        threads += [threading.Thread(target=h.outside, args=(k,), daemon=True)
                    for k in range(args.outside)]  # fmt: skip
        t0 = time.monotonic()
        for slot in range(args.workers):
            h.spawn(slot)
        for t in threads:
            t.start()
        print(f"running {args.minutes:g} min: {args.workers} workers ...", file=sys.stderr)
        while time.monotonic() - t0 < args.minutes * 60:
            time.sleep(1.0)
            for slot, proc in list(h.workers.items()):
                if proc.poll() is not None and not (work / "stop").exists():
                    h.spawn(slot)  # a worker that died on its own: the server starts another
        (work / "stop").touch()
        h.stop.set()
        for proc in h.workers.values():
            try:
                proc.wait(timeout=300)
            except subprocess.TimeoutExpired:
                proc.kill()
        for path in (mnt / "outside").iterdir():
            path.unlink()
        deadline = time.monotonic() + 60
        while any(k["gone"] is None for k in h.kills) and time.monotonic() < deadline:
            time.sleep(0.5)
        elapsed = time.monotonic() - t0
        records = []
        for f in (work / "records").glob("*.jsonl"):
            records += [json.loads(x) for x in f.read_text().splitlines() if x.strip()]
        left = sorted(p.name for p in (mnt / "tmp").glob(".tmp*"))
        return {
            "elapsed": elapsed,
            "records": records,
            "kills": h.kills,
            "util": h.util,
            "min_free": h.min_free,
            "floor": h.floor,
            "touched": touched(planted),
            "outside_enospc": h.outside_enospc,
            "below_floor_s": h.below_floor_s,
            "below_floor_unused_s": h.below_floor_unused_s,
            "below_floor_outside_s": h.below_floor_outside_s,
            "below_floor_full_s": h.below_floor_full_s,
            "below_held": h.below_held,
            "cache_over": h.cache_over,
            "waits": guard_log_waits(work / "log" / "guard.log"),
            "left": left,
            "work": str(work),
        }


def _stop(daemon: subprocess.Popen[bytes]) -> None:
    daemon.send_signal(signal.SIGTERM)
    try:
        daemon.wait(15)
    except subprocess.TimeoutExpired:
        daemon.kill()


def build_rows(r: dict[str, Any], args: argparse.Namespace) -> list[Row]:
    recs = r["records"]
    by = {k: [x for x in recs if x["outcome"] == k] for k in
          ("completed", "refused", "stopped", "filled", "enospc", "input", "awaiting", "error",
           "own-write", "hit-lost", "probe-refused", "probe-lost")}  # fmt: skip
    # The worker's own small writes (payloads) are unguarded: one that met ENOSPC met a disk
    # that writers outside every reservation filled to its last byte, as a "filled" cut did.
    own_full = [x for x in by["own-write"] if "No space left" in x.get("detail", "")]
    forced = by["stopped"] + by["filled"] + own_full
    first = [x for x in by["refused"] if x["cuts"] == 0]
    # A refusal that says how short it fell (never-fits says none: evicting every cache
    # entry would not have made it fit), beside what the cache held that nothing used.
    could = [x for x in first if 0 < x.get("short", 0) <= x.get("unused_cache", 0)]
    done = len(by["completed"]) / len(recs) if recs else 0.0
    over = [size - limit for size, limit in r["cache_over"]]
    worst = max(range(len(over)), key=over.__getitem__) if over else None
    probes_refused = sum(1 for x in recs if x.get("probe") == 75)
    rest = r["below_floor_s"] - r.get("below_floor_outside_s", 0.0)
    samples = r["below_floor_s"] / 0.25
    cache_row = "-"
    if worst is not None:
        size, limit = r["cache_over"][worst]
        cache_row = f"{size / MiB:.1f} MiB vs {limit / MiB:.1f} MiB ({over[worst] / MiB:+.1f} MiB)"
    later = [x for x in recs if x["outcome"] != "completed" and x["cuts"] > 0 and x not in forced]
    lost = sum(x["cuts"] for x in later)
    stopped_lost = sum(x["cuts"] for x in forced)
    gone = sorted(k["gone"] for k in r["kills"] if k["gone"] is not None)
    never = sum(1 for k in r["kills"] if k["gone"] is None)
    started, admitted, refused_after = r["waits"]
    waits = sorted(admitted + refused_after)
    util = sorted(r["util"])
    ended = len(admitted) + len(refused_after)
    rows = [
        Row("files started (killed mid-job not counted)", str(len(recs))),
        Row(
            "  completed",
            f"{len(by['completed'])} ({100 * done:.0f} %)",
            target=">= 80 %",
            verdict=verdict(done >= 0.8),
        ),
        Row("  refused at their first write", str(len(first))),
        Row(
            "    while unused cache could have made room",
            str(len(could)),
            target="0",
            verdict=verdict(not could),
        ),
        Row("  probes refused (the file could never fit)", str(probes_refused)),
        Row("    of those, their first cut refused too", str(len(by["probe-refused"]))),
        Row(
            "    of those, completed anyway (the refusal was wrong)",
            str(sum(1 for x in by["completed"] if x.get("probe") == 75)),
        ),
        Row(
            "    of those, the WAV evicted before the first cut (nothing held it)",
            str(len(by["probe-lost"])),
        ),
        Row(
            "  failed later (groups of compute lost)",
            f"{len(later)} ({lost})",
            target="0",
            verdict=verdict(not later),
        ),
        Row("  stopped by outside writers (groups lost)", f"{len(forced)} ({stopped_lost})"),
        Row(
            "    of those, a cut met a disk filled to its last byte",
            str(len(by["filled"])),
        ),
        Row("    of those, the worker's own unguarded write met ENOSPC", str(len(own_full))),
        Row("workers SIGKILLed mid-job", str(len(r["kills"]))),
        Row(
            "inputs deleted under a live job or awaiting use",
            f"{len(by['input'])} + {len(by['awaiting'])}",
            target="0",
            verdict=verdict(not by["input"] and not by["awaiting"]),
        ),
        Row(
            "  WAVs renamed over by the pipeline's own second conversion (not deleted)",
            str(sum(x.get("replaced", 0) for x in recs)),
        ),
        Row(
            "  cache hits evicted before their probe (nothing held them)",
            str(len(by["hit-lost"])),
        ),
        Row(
            "admitted writes that met ENOSPC (outside writers filled the disk: stopped)",
            f"{len(by['enospc']) + len(by['filled'])} ({len(by['filled'])})",
            target="0 unstopped",
            verdict=verdict(not by["enospc"]),
        ),
        Row(
            "foreign files touched",
            str(len(r["touched"])),
            target="0",
            verdict=verdict(not r["touched"]),
        ),
        Row(
            "writer's death to its folder's removal, max (p50)",
            f"{gone[-1]:.1f} s ({percentile(gone, 50):.1f} s)" if gone else "-",
            target="<= 30 s",
            verdict=verdict(bool(gone) and gone[-1] <= 30 and not never),
        ),
        Row("  folders never removed (within 120 s)", str(never)),
        Row(
            "seconds below the floor",
            f"{r['below_floor_s']:.1f} s ({100 * r['below_floor_s'] / r['elapsed']:.1f} %)",
            target="<= 5 %",
            verdict=verdict(r["below_floor_s"] <= 0.05 * r["elapsed"]),
        ),
        Row(
            "  of those, while an outside writer aimed below it",
            f"{r.get('below_floor_outside_s', 0.0):.1f} s",
        ),
        Row(
            "    of those, while one wrote until ENOSPC",
            f"{r.get('below_floor_full_s', 0.0):.1f} s "
            f"({100 * r.get('below_floor_full_s', 0.0) / r['elapsed']:.1f} %)",
        ),
        Row(
            "  the rest (admitted writes, the janitor's reaction)",
            f"{rest:.1f} s ({100 * rest / r['elapsed']:.1f} %)",
        ),
        Row(
            "  of all, while the cache held entries nothing used",
            f"{r.get('below_floor_unused_s', 0.0):.1f} s",
        ),
        Row(
            "  what held the volume then, mean MiB",
            ", ".join(f"{k} {v / samples:.1f}" for k, v in r.get("below_held", {}).items())
            if samples
            else "-",
        ),
        Row(
            "cache size, most over its quota + what is in use",
            cache_row,
        ),
        Row(
            "waits started / admitted / refused at the end",
            f"{started} / {len(admitted)} / {len(refused_after)}",
            target="<= 5 % refused",
            verdict=verdict(len(refused_after) <= 0.05 * ended),
        ),
        Row(
            "wait time p50 / p99",
            f"{percentile(waits, 50):.1f} s / {percentile(waits, 99):.1f} s" if waits else "-",
        ),
        Row(
            "utilization of capacity - floor while a job waits, mean (p10)",
            f"{100 * sum(util) / len(util):.1f} % ({100 * percentile(util, 10):.1f} %)"
            if util
            else "- (no job waited)",
            target=">= 90 %",
            verdict=verdict(bool(util) and sum(util) / len(util) >= 0.9),
        ),
        Row("lowest free space / floor", f"{r['min_free'] / MiB:.1f} / {r['floor'] / MiB:.1f} MiB"),
        Row(
            "other failures (ffmpeg errors; the worker's own writes)",
            f"{len(by['error'])}; {len(by['own-write'])}",
        ),
        Row("outside writes that met ENOSPC (promised nothing)", str(r["outside_enospc"])),
        Row(
            "job folders left at the end",
            str(len([x for x in r["left"] if x not in (".tmpNOTOURS", ".tmpOLDJOB")])),
        ),
    ]
    return rows


def print_table(rows: list[Row], r: dict[str, Any]) -> None:
    w = max(len(x.measurement) for x in rows)
    v = max(len(x.value) for x in rows)
    print(f"pipeline soak: {r['elapsed'] / 60:.1f} min on a tmpfs; work folder {r['work']}")
    print(f"{'measurement':<{w}}  {'value':<{v}}  {'target':<8}  verdict")
    for x in rows:
        print(f"{x.measurement:<{w}}  {x.value:<{v}}  {x.target:<8}  {x.verdict}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--minutes", type=float, default=5.0)
    p.add_argument("--size", default="192m", help="the tmpfs")
    p.add_argument("--floor", default="16MiB")
    p.add_argument("--quota", default="16MiB", help="the media cache's (less than a run converts)")
    p.add_argument("--workers", type=int, default=4, help="files aligned at once")
    p.add_argument("--sources", type=int, default=12, help="recordings to choose from")
    p.add_argument("--group-s", type=int, default=15)
    p.add_argument("--compute-s", type=float, default=0.3, help="'inference' per group")
    p.add_argument("--asr-frac", type=float, default=0.3)
    p.add_argument("--utr-max-s", type=float, default=120.0, help="UTR between probe and cuts")
    p.add_argument("--recut-frac", type=float, default=0.05, help="groups cut again")
    p.add_argument("--kill-every", type=float, default=25.0, help="seconds between SIGKILLs")
    p.add_argument("--outside", type=int, default=2, help="outside writers")
    p.add_argument("--outside-rate", type=float, default=24.0, help="MiB/s each")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--json", help="write the raw results here")
    p.add_argument("--strict", action="store_true", help="exit 1 when a goal is missed")
    p.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    p.add_argument("--work", help=argparse.SUPPRESS)
    p.add_argument("--config", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker is not None:
        Worker(args.worker, Path(args.work), json.loads(args.config)).run()
        return 0
    if os.geteuid() != 0:
        print("pipeline_soak mounts a tmpfs: run it as root (sudo)", file=sys.stderr)
        return 2
    result = run(args)
    rows = build_rows(result, args)
    print_table(rows, result)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, default=str))
    return 1 if args.strict and any(x.verdict == "MISSES" for x in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
