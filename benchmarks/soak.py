#!/usr/bin/env python3
"""Chaos soak for space-janitor: simulated alignment jobs, outside writers and the real daemon
racing on a small tmpfs for ``--minutes``; prints one table (exits 0: it does not assert).

Setup (root: it mounts a tmpfs, ``--size`` 256 MiB, and unmounts it on exit, error, Ctrl-C or
SIGTERM). On the tmpfs: a scratch tree ``job_tmp`` (``units = "dir"``, ``unit_glob = ".tmp*"``,
``unit_requires`` the pipeline's scopes, ``orphan_age`` ``--orphan-age`` 20 s, ``min_age``
10 s), a cache tree ``media_cache`` (``{fp}.wav`` entries grouped with ``.tmp.wav`` and
``.wav.lock``, quota 48 MiB, ``min_age`` 10 s, 8 entries planted hours old), a folder
``outside/`` for the outside writers, and planted files that belong to no tree (``keep/``, a
``.tmp*`` folder in the scratch root without a pipeline scope, a plain file in the scratch
root). The volume's floor is the product's default (``min(10GiB, 10%)``: 25.6 MiB here) or
``--floor``. Ledger, state, runtime and log dirs are in a work folder off the tmpfs. The real
daemon (``python -m janitor daemon``, product default intervals: a sample every 2 s, reaping
every 10 s, a full sweep every 5 min) runs throughout.

Processes (forked from a forkserver that imported janitor once):

* ``--jobs`` workers (24), each running job after job. A job is a 1-5 min recording: its PCM is
  ``duration x 64,000`` bytes (float32, 16 kHz: 3.7-18.3 MiB). With probability ``--pin-frac``
  (0.5) it first pins a cached WAV (``jan.pin``), converting it under a ``media_cache``
  reservation if it is missing (``flock`` on ``{fp}.wav.lock``, ``{fp}.tmp.wav`` written in
  1 MiB chunks with ``check()`` between, unlock, rename); then it makes
  ``scratch/.tmpXXXXXX``, reserves its bytes on ``job_tmp`` with ``path=`` the folder (first
  without ``wait``; if refused, it counts as waiting and retries with ``wait=`` ``--wait``
  30 s, like the pipeline's memory gate), writes ``fa_v2/audio/fa-v2-audio-N.pcm`` files of
  1 MiB every ``--chunk-interval`` (0.3 s), calling ``r.check()`` before each and, if it holds
  a WAV, reading 64 KiB of it and checking it is the same inode. On SpaceRisk it removes its
  folder and records "stopped" with the reason, the free space at that moment (a statvfs right
  after the exception) and the time since it was admitted; on OSError ENOSPC it records
  "ENOSPC". At the end it checks every file it wrote is still there, removes its folder, then
  releases. ``--kill-frac`` (10 %) of jobs are SIGKILLed by the harness once they wrote a
  random number of chunks: their folders are orphans.
* ``--outside`` writers (3) with no reservation: bursts of 16-48 MiB into ``outside/`` in
  1 MiB chunks at ``--outside-rate`` MiB/s each (4), held 2-5 s, deleted, 1-4 s of pause; they
  may meet ENOSPC (counted apart: nobody promised them anything).
* a probe: about once a second, ``jan.reserve("job_tmp", total - floor + 1 MiB)`` without
  ``wait`` and with the default make-room behaviour: it can never fit; its time to
  ReservationRefused is the refusal latency (p50/p99).

The harness samples free space every 50 ms (statvfs) together with what the workers report
through shared memory (bytes reserved and written, waiting or not), SIGKILLs the doomed jobs,
and respawns dead workers. After ``--minutes`` it stops taking new jobs, stops the outside
writers and the probe, lets running jobs finish (a waiting one up to ``--wait``), waits until
the last orphan is ``orphan_age`` old, runs ``janitor sweep``, then checks the planted files
(same inode, size, mtime and SHA-256) and reads the ledger's log (``janitor log --json``) and
``daemon.log``.

Lines of the table and their targets:

* admitted writes that hit ENOSPC: 0 (PCM and WAV writes under a granted reservation);
* files in use deleted: 0 (a pinned WAV gone or replaced while held; a job's own file gone);
* files outside every tree touched: 0;
* orphans left after orphan_age plus ``janitor sweep`` at the end: 0;
* jobs admitted / completed / stopped early, and why (the SpaceRisk reasons, numbers left out);
  of the stopped: how many while free space was above the floor (0), how many within 2 s of
  being admitted, how many when the rule's deficit (running jobs' outstanding bytes plus half
  the floor, minus free, from the harness's own numbers) was already 0;
* jobs refused after waiting, jobs SIGKILLed;
* lowest free space against the floor, and the share of the run spent below the floor;
* utilization while some job waits for space, over the 50 ms samples in which at least one
  worker had been refused and was waiting: physical ``(total - free) / (total - floor)`` and
  committed ``(total - free + outstanding) / (total - floor)`` (outstanding: what live
  reservations have not written yet), each sample capped at 100 %. The goal (>= 90 %) applies
  to committed: a job waits only for bytes that are promised to others, and the janitor
  decides promises, not how fast granted jobs write, so physical utilization is bounded by how
  far into their writes the admitted jobs are (about half way on average). A janitor that
  refuses everything scores near 0 % on both, one that grants everything has no waiting jobs
  (and ENOSPC instead);
* refusal latency p50/p99 of the probe: < 0.35 s.

    sudo .venv/bin/python benchmarks/soak.py --minutes 1      # a short run, ~2.5 min in all
    sudo .venv/bin/python benchmarks/soak.py                  # 10 minutes, ~11.5 min in all
    sudo .venv/bin/python benchmarks/soak.py --json soak.json --keep   # keep ledger and logs
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import fcntl
import hashlib
import json
import math
import multiprocessing as mp
import os
import platform
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from common import Row, percentile, verdict  # beside this script

MiB = 1024 * 1024
CHUNK = MiB
TARGET_REFUSAL_S = 0.35
TARGET_UTILIZATION = 0.90
MONITOR_S = 0.05
SUPERVISE_S = 0.02
STOP_SOON_S = 2.0
SCOPES = (
    "fa_v2",
    "asr_v2",
    "speaker_v2",
    "diarize_v2",
    "opensmile_v2",
    "avqi_v2_*",
    "morphosyntax_v2",
    "utseg_v2",
    "translate_v2",
    "coref_v2",
)
CACHE_GROUP = r"^(?P<key>[^/]+?)(?:\.tmp)?\.wav(?:\.lock)?$"
WAV_HEADER = 44

# -- shared memory between the harness and its processes ----------------------------------------
# One row of doubles per process slot (workers first, then outside writers), then a flag row.
NF = 8
F_PID, F_STATE, F_BYTES, F_WRITTEN, F_WAIT_T, F_CHUNKS, F_DOOM, F_ADMIT_T = range(NF)
IDLE, WAITING, WRITING, FINISHING, OUTSIDE = 0, 1, 2, 3, 4


class Slots:
    """A view of the shared array (no locks: a SIGKILLed writer must not leave one held)."""

    def __init__(self, arr: Any, n: int) -> None:
        self.arr = arr
        self.n = n

    def get(self, slot: int, f: int) -> float:
        return float(self.arr[slot * NF + f])

    def set(self, slot: int, f: int, value: float) -> None:
        self.arr[slot * NF + f] = value

    def clear(self, slot: int) -> None:
        for f in range(NF):
            self.arr[slot * NF + f] = 0.0
        self.arr[slot * NF + F_DOOM] = -1.0

    @property
    def stopping(self) -> bool:
        return bool(self.arr[self.n * NF])

    def stop(self) -> None:
        self.arr[self.n * NF] = 1.0


@dataclass(frozen=True)
class Config:
    """What every child process needs to know (picklable)."""

    mnt: str
    scratch: str
    cache: str
    outside: str
    records: str
    fps: tuple[str, ...]
    wait_s: float
    chunk_interval_s: float
    kill_frac: float
    pin_frac: float
    outside_rate: float
    nslots: int
    seed: int
    probe_bytes: int


class Recorder:
    """JSON lines appended with one write(2) each: a SIGKILL never leaves half a line."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)

    def write(self, **rec: Any) -> None:
        os.write(self.fd, (json.dumps(rec) + "\n").encode())


def _free(path: str) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


_DATA = bytes(range(256)) * (CHUNK // 256)


# -- a worker: job after job ----------------------------------------------------------------------


class _Lost(Exception):
    """A file this job holds (its pinned WAV, its own PCM) disappeared under it."""


def worker_main(slot: int, cfg: Config, arr: Any) -> None:
    """Run simulated alignment jobs until the harness says stop."""
    from janitor import Janitor

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the harness stops us (Ctrl-C is its)
    slots = Slots(arr, cfg.nslots)
    pid = os.getpid()
    slots.clear(slot)
    slots.set(slot, F_PID, pid)
    rng = random.Random(cfg.seed * 1_000_003 + pid)
    rec = Recorder(os.path.join(cfg.records, f"worker-{pid}.jsonl"))
    jan = Janitor.from_settings()
    n = 0
    while not slots.stopping:
        n += 1
        try:
            run_job(jan, cfg, slots, slot, rng, rec, f"w{pid}-{n}")
        except Exception as exc:  # a bug of ours or the janitor's: record it, go on
            rec.write(ev="error", job=f"w{pid}-{n}", t=time.time(), error=repr(exc))
            time.sleep(0.5)
        slots.clear(slot)
        slots.set(slot, F_PID, pid)


def _reserve(
    jan: Any,
    tree: str,
    nbytes: int,
    path: str,
    job: str,
    cfg: Config,
    slots: Slots,
    slot: int,
) -> tuple[Any, float, float, Any]:
    """Reserve like the pipeline's memory gate: at once if it fits, else wait up to
    ``cfg.wait_s``. Returns (reservation or None, requested at, admitted at, refusal)."""
    from janitor import ReservationRefused

    t_req = time.time()
    try:
        return jan.reserve(tree, nbytes, path=path, job=job), t_req, time.time(), None
    except ReservationRefused:
        pass
    slots.set(slot, F_WAIT_T, time.time())
    slots.set(slot, F_STATE, WAITING)
    try:
        r = jan.reserve(tree, nbytes, path=path, job=job, wait=cfg.wait_s)
        return r, t_req, time.time(), None
    except ReservationRefused as exc:
        return None, t_req, time.time(), exc
    finally:
        slots.set(slot, F_WAIT_T, 0.0)
        slots.set(slot, F_STATE, IDLE)


def _stopped(exc: Any, cfg: Config, t_admit: float) -> dict[str, Any]:
    now = time.time()
    return {
        "outcome": "stopped",
        "reason": exc.reason,
        "free": _free(cfg.mnt),
        "t_end": now,
        "since_admit": now - t_admit,
    }


def _enospc(cfg: Config, t_admit: float, where: str) -> dict[str, Any]:
    now = time.time()
    return {
        "outcome": "ENOSPC",
        "free": _free(cfg.mnt),
        "t_end": now,
        "since_admit": now - t_admit,
        "where": where,
    }


def convert(
    jan: Any,
    cfg: Config,
    slots: Slots,
    slot: int,
    rng: random.Random,
    rec: Recorder,
    job: str,
    fp: str,
) -> bool:
    """Make ``{fp}.wav`` as the pipeline does; True when it exists afterwards."""
    from janitor import SpaceRisk

    wav = os.path.join(cfg.cache, f"{fp}.wav")
    tmp = os.path.join(cfg.cache, f"{fp}.tmp.wav")
    lock = os.open(os.path.join(cfg.cache, f"{fp}.wav.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(wav):
            return True
        nbytes = int(rng.uniform(60, 300) * 32_000) + WAV_HEADER
        r, t_req, t_admit, refusal = _reserve(
            jan, "media_cache", nbytes, tmp, job + "-wav", cfg, slots, slot
        )
        base = {"ev": "end", "kind": "wav", "job": job, "bytes": nbytes, "t_req": t_req}
        if r is None:
            rec.write(
                **base,
                outcome="refused",
                t_end=t_admit,
                waited=t_admit - t_req,
                shortfall=refusal.shortfall,
                free=refusal.free,
            )
            return False
        rec.write(
            ev="admit",
            kind="wav",
            job=job,
            id=r.id,
            bytes=nbytes,
            t_req=t_req,
            t_admit=t_admit,
            path=tmp,
        )
        base["id"] = r.id
        slots.set(slot, F_BYTES, nbytes)
        slots.set(slot, F_WRITTEN, 0)
        slots.set(slot, F_ADMIT_T, t_admit)
        slots.set(slot, F_STATE, WRITING)
        result: dict[str, Any] = {"outcome": "completed"}
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                left = nbytes
                while left > 0:
                    try:
                        r.check()
                    except SpaceRisk as exc:
                        result = _stopped(exc, cfg, t_admit)
                        break
                    part = min(CHUNK, left)
                    try:
                        _write_all(fd, _DATA[:part])
                    except OSError as exc:
                        if exc.errno != errno.ENOSPC:
                            raise
                        result = _enospc(cfg, t_admit, "wav")
                        break
                    left -= part
                    slots.set(slot, F_WRITTEN, nbytes - left)
                    time.sleep(cfg.chunk_interval_s * rng.uniform(0.2, 0.6))
            finally:
                os.close(fd)
            if result["outcome"] == "completed":
                fcntl.flock(lock, fcntl.LOCK_UN)  # the pipeline unlocks, then renames
                try:
                    os.rename(tmp, wav)
                except FileNotFoundError:
                    # The pipeline's own race: a converter that locked in the moment between
                    # our unlock and rename wrote the same tmp and renamed it first. Not ours.
                    rec.write(ev="replaced", job=job, t=time.time(), wav=wav)
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
        finally:
            slots.set(slot, F_STATE, FINISHING)
            slots.set(slot, F_WRITTEN, 0)
            r.release()
        result.setdefault("t_end", time.time())
        rec.write(**base, **result)
        return bool(result["outcome"] == "completed")
    finally:
        os.close(lock)


def _check_wav(wav: str, ino: int, rng: random.Random, rec: Recorder, job: str) -> int:
    """Read a pinned WAV as the aligner does (by path, no lock); _Lost if it is gone.

    Returns its inode. Another inode means a second converter renamed its own conversion over
    it: the pipeline unlocks before it renames, so one that got the lock in that moment
    converts again. Not a deletion (the path always held a WAV), so it is counted apart.
    """
    try:
        fd = os.open(wav, os.O_RDONLY)
    except FileNotFoundError:
        raise _Lost(f"pinned {wav} is gone") from None
    try:
        st = os.fstat(fd)
        if st.st_ino != ino:
            rec.write(ev="replaced", job=job, t=time.time(), wav=wav)
        os.pread(fd, 65536, rng.randrange(0, max(1, st.st_size - 65536)))
        return st.st_ino
    finally:
        os.close(fd)


def run_job(
    jan: Any,
    cfg: Config,
    slots: Slots,
    slot: int,
    rng: random.Random,
    rec: Recorder,
    job: str,
) -> None:
    """One alignment job: an optional pinned WAV, then PCM files under a reservation."""
    from janitor import SpaceRisk
    from janitor.commands.estimate import pcm_bytes

    nbytes = pcm_bytes(rng.uniform(60, 300), 16000, 1, 4)
    chunks = math.ceil(nbytes / CHUNK)
    doom = rng.randint(1, max(1, chunks - 1)) if rng.random() < cfg.kill_frac else -1
    with contextlib.ExitStack() as stack:
        wav: str | None = None
        ino = 0
        if rng.random() < cfg.pin_frac:
            fp = rng.choice(cfg.fps)
            wav = os.path.join(cfg.cache, f"{fp}.wav")
            pin = jan.pin(wav)
            stack.callback(pin.unpin)
            if not os.path.exists(wav) and not convert(jan, cfg, slots, slot, rng, rec, job, fp):
                rec.write(ev="abandon", job=job, t=time.time(), why="wav not converted")
                return
            try:
                st = os.stat(wav)
            except FileNotFoundError:
                rec.write(
                    ev="end",
                    kind="pin",
                    job=job,
                    outcome="lost",
                    t_end=time.time(),
                    detail=f"pinned {wav} vanished right after it was made",
                )
                return
            ino = st.st_ino
        folder = tempfile.mkdtemp(prefix=".tmp", dir=cfg.scratch)
        r, t_req, t_admit, refusal = _reserve(jan, "job_tmp", nbytes, folder, job, cfg, slots, slot)
        base = {"ev": "end", "kind": "pcm", "job": job, "bytes": nbytes, "t_req": t_req}
        if r is None:
            os.rmdir(folder)
            rec.write(
                **base,
                outcome="refused",
                t_end=t_admit,
                waited=t_admit - t_req,
                shortfall=refusal.shortfall,
                free=refusal.free,
            )
            return
        rec.write(
            ev="admit",
            kind="pcm",
            job=job,
            id=r.id,
            bytes=nbytes,
            t_req=t_req,
            t_admit=t_admit,
            path=folder,
            doom=doom,
            wav=wav,
        )
        base["id"] = r.id
        base["t_admit"] = t_admit
        slots.set(slot, F_BYTES, nbytes)
        slots.set(slot, F_WRITTEN, 0)
        slots.set(slot, F_CHUNKS, 0)
        slots.set(slot, F_ADMIT_T, t_admit)
        slots.set(slot, F_DOOM, doom)
        slots.set(slot, F_STATE, WRITING)
        audio = os.path.join(folder, "fa_v2", "audio")
        result: dict[str, Any] = {"outcome": "completed"}
        sizes: dict[str, int] = {}
        try:
            try:
                os.makedirs(audio)
                left = nbytes
                i = 0
                while left > 0:
                    try:
                        r.check()
                    except SpaceRisk as exc:
                        result = _stopped(exc, cfg, t_admit)
                        break
                    if wav is not None:
                        ino = _check_wav(wav, ino, rng, rec, job)
                    part = min(CHUNK, left)
                    name = os.path.join(audio, f"fa-v2-audio-{i}.pcm")
                    try:
                        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                    except FileNotFoundError:
                        raise _Lost(f"job folder {folder} is gone") from None
                    try:
                        _write_all(fd, _DATA[:part])
                    finally:
                        os.close(fd)
                    sizes[name] = part
                    left -= part
                    i += 1
                    slots.set(slot, F_WRITTEN, nbytes - left)
                    slots.set(slot, F_CHUNKS, i)
                    time.sleep(cfg.chunk_interval_s * rng.uniform(0.5, 1.5))
                if result["outcome"] == "completed":
                    for name, want in sizes.items():
                        try:
                            if os.stat(name).st_size != want:
                                raise _Lost(f"{name} changed size")
                        except FileNotFoundError:
                            raise _Lost(f"{name} is gone") from None
                    if wav is not None:
                        ino = _check_wav(wav, ino, rng, rec, job)
            except OSError as exc:
                if exc.errno != errno.ENOSPC or isinstance(exc, SpaceRisk):
                    raise
                result = _enospc(cfg, t_admit, "pcm")
            except _Lost as exc:
                result = {"outcome": "lost", "detail": str(exc), "t_end": time.time()}
        finally:
            slots.set(slot, F_STATE, FINISHING)
            shutil.rmtree(folder, ignore_errors=True)  # the pipeline's temp dir goes first
            slots.set(slot, F_WRITTEN, 0)
            r.release()
        result.setdefault("t_end", time.time())
        result["written"] = sum(sizes.values())
        rec.write(**base, **result)


# -- outside writers and the probe ----------------------------------------------------------------


def outside_main(slot: int, k: int, cfg: Config, arr: Any) -> None:
    """Bursts of 16-48 MiB with no reservation, held a few seconds, then deleted."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    slots = Slots(arr, cfg.nslots)
    slots.clear(slot)
    slots.set(slot, F_PID, os.getpid())
    slots.set(slot, F_STATE, OUTSIDE)
    rng = random.Random(cfg.seed * 7919 + k)
    rec = Recorder(os.path.join(cfg.records, f"outside-{k}.jsonl"))
    n = 0
    time.sleep(rng.uniform(0, 3))
    while not slots.stopping:
        n += 1
        path = os.path.join(cfg.outside, f"burst-{k}-{n}.bin")
        want = rng.randint(16, 48) * MiB
        written, hit = 0, False
        t0 = time.monotonic()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            while written < want and not slots.stopping:
                try:
                    _write_all(fd, _DATA)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    hit = True
                    break
                written += CHUNK
                slots.set(slot, F_WRITTEN, written)
                ahead = t0 + written / (cfg.outside_rate * MiB) - time.monotonic()
                if ahead > 0:
                    time.sleep(ahead)
        finally:
            os.close(fd)
        rec.write(ev="burst", t=time.time(), bytes=written, wanted=want, enospc=hit)
        end = time.monotonic() + rng.uniform(2, 5)
        while time.monotonic() < end and not slots.stopping:
            time.sleep(0.1)
        os.unlink(path)
        slots.set(slot, F_WRITTEN, 0)
        end = time.monotonic() + rng.uniform(1, 4)
        while time.monotonic() < end and not slots.stopping:
            time.sleep(0.1)


class _Timers:
    """Seconds spent in parts of a refusal, to say where a slow one went (diagnostic only:
    it wraps the ledger's write call and make-room's steps in the probe's own process)."""

    def __init__(self, jan: Any) -> None:
        import janitor.cleanup.sweep as sweep

        self.t: dict[str, float] = {}
        jan.ledger.call = self._timed("admit", jan.ledger.call)
        jan.make_room = self._timed("room", jan.make_room)
        for name, key in (("_scan_trees", "scan"), ("_protection", "protect")):
            if hasattr(sweep, name):
                setattr(sweep, name, self._timed(key, getattr(sweep, name)))
        if hasattr(sweep, "tree_locks"):
            locks = sweep.tree_locks

            @contextlib.contextmanager
            def timed_locks(*a: Any, **kw: Any) -> Iterator[None]:
                t0 = time.perf_counter()
                with locks(*a, **kw):
                    self.t["locks"] = self.t.get("locks", 0.0) + time.perf_counter() - t0
                    yield

            sweep.tree_locks = timed_locks

    def _timed(self, key: str, fn: Any) -> Any:
        def run(*a: Any, **kw: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                self.t[key] = self.t.get(key, 0.0) + time.perf_counter() - t0

        return run

    def take(self) -> dict[str, float]:
        out, self.t = self.t, {}
        return {k: round(v, 4) for k, v in out.items()}


def probe_main(cfg: Config, arr: Any) -> None:
    """About once a second, a reservation that can never fit; time to its refusal."""
    from janitor import Janitor, ReservationRefused

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    slots = Slots(arr, cfg.nslots)
    rng = random.Random(cfg.seed + 17)
    rec = Recorder(os.path.join(cfg.records, "probe.jsonl"))
    jan = Janitor.from_settings()
    timers = _Timers(jan)
    with contextlib.suppress(ReservationRefused):  # warm-up, untimed: imports, first scan
        jan.reserve("job_tmp", cfg.probe_bytes, job="probe").release()
    timers.take()
    while not slots.stopping:
        time.sleep(rng.uniform(0.8, 1.2))
        t0 = time.perf_counter()
        try:
            jan.reserve("job_tmp", cfg.probe_bytes, job="probe").release()
            dt = time.perf_counter() - t0
            rec.write(ev="probe", t=time.time(), granted=True, s=dt, parts=timers.take())
        except ReservationRefused as exc:
            dt = time.perf_counter() - t0
            rec.write(
                ev="probe",
                t=time.time(),
                granted=False,
                s=dt,
                evicted=exc.evicted,
                parts=timers.take(),
                load=os.getloadavg()[0],
            )


# -- the harness --------------------------------------------------------------------------------


@dataclass
class Work:
    root: Path
    mnt: Path
    state: Path
    runtime: Path
    logs: Path
    home: Path
    records: Path
    policy: Path
    config: Path

    @property
    def scratch(self) -> Path:
        return self.mnt / "scratch"

    @property
    def cache(self) -> Path:
        return self.mnt / "cache"

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("JANITOR_")}
        env.update(
            JANITOR_POLICY=str(self.policy),
            JANITOR_CONFIG=str(self.config),
            JANITOR_STATE_DIR=str(self.state),
            JANITOR_RUNTIME_DIR=str(self.runtime),
            JANITOR_LOG_DIR=str(self.logs),
            HOME=str(self.home),
            TMPDIR=str(self.home / "tmp"),
            XDG_CONFIG_HOME=str(self.home / ".config"),
            XDG_DATA_HOME=str(self.home / ".local" / "share"),
            XDG_STATE_HOME=str(self.home / ".local" / "state"),
            XDG_CACHE_HOME=str(self.home / ".cache"),
            XDG_RUNTIME_DIR=str(self.runtime),
        )
        return env


def mount_tmpfs(where: Path, size: str) -> None:
    where.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise OSError(f"cannot mount a tmpfs at {where}: {done.stderr.strip()}")


def unmount(where: Path) -> None:
    """Unmount ``where``; lazily if something still holds it. Never raises."""
    if not os.path.ismount(where):
        return
    done = subprocess.run(["umount", str(where)], capture_output=True, check=False)
    if done.returncode != 0:
        subprocess.run(["umount", "-l", str(where)], capture_output=True, check=False)
    if os.path.ismount(where):
        print(f"soak: warning: {where} is still mounted", file=sys.stderr)


def write_policy(w: Work, floor: str | None, orphan_age: float) -> None:
    lines = ["[volume]"]
    if floor is not None:
        lines.append(f"floor = {json.dumps(floor)}")
    lines += [
        "",
        "[trees.media_cache]",
        'role = "cache"',
        f"path = {json.dumps(str(w.cache))}",
        'quota = "48MiB"',
        'low_watermark = "90%"',
        'min_age = "10s"',
        f"group = '{CACHE_GROUP}'",
        'lock = "{key}.wav.lock"',
        "",
        "[trees.job_tmp]",
        'role = "scratch"',
        f"path = {json.dumps(str(w.scratch))}",
        'units = "dir"',
        'unit_glob = ".tmp*"',
        f"unit_requires = {json.dumps(list(SCOPES))}",
        f'orphan_age = "{orphan_age:g}s"',
        'min_age = "10s"',
    ]
    w.policy.write_text("\n".join(lines) + "\n")


@dataclass
class Planted:
    path: str
    ino: int
    size: int
    mtime_ns: int
    sha256: str


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def plant(w: Work, rng: random.Random) -> list[Planted]:
    """Files no tree owns: outside every tree, and in the scratch root but not ours."""
    old = time.time() - 2 * 86400
    files = [
        (w.mnt / "keep" / "notes.txt", 4096),
        (w.mnt / "keep" / "big.bin", 2 * MiB),
        (w.scratch / ".tmpforeign" / "data" / "model.bin", MiB),  # a .tmp* without a scope
        (w.scratch / ".tmpforeign" / "audio" / "x.pcm", 256 * 1024),
        (w.scratch / ".tmpQ7z2Kx" / "session.lock", 64),
        (w.scratch / "README.keep", 1234),  # in the scratch root, no unit
    ]
    out = []
    for path, size in files:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(rng.randbytes(size))
        os.utime(path, (old, old))
        st = path.stat()
        out.append(Planted(str(path), st.st_ino, st.st_size, st.st_mtime_ns, _digest(path)))
    return out


def touched(planted: list[Planted]) -> list[str]:
    out = []
    for p in planted:
        path = Path(p.path)
        try:
            st = path.stat()
        except FileNotFoundError:
            out.append(f"{p.path}: deleted")
            continue
        if (st.st_ino, st.st_size, st.st_mtime_ns) != (p.ino, p.size, p.mtime_ns):
            out.append(f"{p.path}: inode/size/mtime changed")
        elif _digest(path) != p.sha256:
            out.append(f"{p.path}: content changed")
    return out


def plant_cache(w: Work, fps: tuple[str, ...], rng: random.Random) -> None:
    """Half the fingerprints already converted, hours ago (evictable)."""
    for fp in fps[: len(fps) // 2]:
        wav = w.cache / f"{fp}.wav"
        wav.write_bytes(_DATA[:WAV_HEADER] + b"\0" * int(rng.uniform(60, 300) * 32_000))
        (w.cache / f"{fp}.wav.lock").touch()
        t = time.time() - rng.uniform(3600, 86400)
        for p in (wav, w.cache / f"{fp}.wav.lock"):
            os.utime(p, (t, t))


@dataclass
class Sample:
    t: float
    free: int
    outstanding: int
    outside: int
    waiting: int
    writing: int


@dataclass
class Harness:
    cfg: Config
    slots: Slots
    ctx: Any
    njobs: int
    workers: dict[int, Any] = field(default_factory=dict)
    others: list[Any] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    kills: list[dict[str, Any]] = field(default_factory=list)
    crashes: list[dict[str, Any]] = field(default_factory=list)
    respawning: bool = True
    done: threading.Event = field(default_factory=threading.Event)
    errors: list[str] = field(default_factory=list)

    def spawn(self, slot: int) -> None:
        p = self.ctx.Process(target=worker_main, args=(slot, self.cfg, self.slots.arr))
        p.start()
        self.workers[slot] = p

    def monitor(self) -> None:
        """Every 50 ms: free space, and what the processes say they hold and wait for."""
        try:
            while not self.done.is_set():
                free = _free(self.cfg.mnt)
                outstanding = outside = waiting = writing = 0
                for s in range(self.slots.n):
                    state = self.slots.get(s, F_STATE)
                    if state in (WRITING, FINISHING):
                        left = self.slots.get(s, F_BYTES) - self.slots.get(s, F_WRITTEN)
                        outstanding += max(0, int(left))
                        writing += 1
                    elif state == WAITING:
                        waiting += 1
                    elif state == OUTSIDE:
                        outside += int(self.slots.get(s, F_WRITTEN))
                self.samples.append(
                    Sample(time.time(), free, outstanding, outside, waiting, writing)
                )
                self.done.wait(MONITOR_S)
        except Exception as exc:  # pragma: no cover - reported, not fatal
            self.errors.append(f"monitor: {exc!r}")

    def supervise(self) -> None:
        """SIGKILL doomed jobs mid-write; respawn dead workers."""
        try:
            while not self.done.is_set():
                for slot, p in list(self.workers.items()):
                    doom = self.slots.get(slot, F_DOOM)
                    if (
                        p.is_alive()
                        and doom >= 0
                        and self.slots.get(slot, F_STATE) == WRITING
                        and self.slots.get(slot, F_CHUNKS) >= doom
                    ):
                        os.kill(p.pid, signal.SIGKILL)
                        p.join()
                        self.kills.append({"t": time.time(), "pid": p.pid, "slot": slot})
                    if not p.is_alive():
                        p.join()
                        killed = any(k["pid"] == p.pid for k in self.kills[-50:])
                        if not killed and p.exitcode != 0:
                            self.crashes.append(
                                {"t": time.time(), "pid": p.pid, "exitcode": p.exitcode}
                            )
                        self.slots.clear(slot)
                        del self.workers[slot]
                        if self.respawning:
                            self.spawn(slot)
                self.done.wait(SUPERVISE_S)
        except Exception as exc:  # pragma: no cover
            self.errors.append(f"supervisor: {exc!r}")

    def kill_all(self) -> None:
        for p in [*self.workers.values(), *self.others]:
            if p.is_alive():
                os.kill(p.pid, signal.SIGKILL)
            p.join(5)


def janitor_cli(w: Work, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("janitor")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "janitor"]
    return subprocess.run(
        [*cmd, *args], capture_output=True, text=True, env=w.env(), timeout=timeout, check=False
    )


@dataclass
class Daemon:
    proc: subprocess.Popen[bytes]
    stderr: Path

    def stop(self) -> None:
        if self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def start_daemon(w: Work, stack: contextlib.ExitStack) -> Daemon:
    err = w.root / "daemon.stderr"
    with open(err, "wb") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "janitor", "daemon", "--quiet"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=fh,
            env=w.env(),
            start_new_session=True,
        )
    d = Daemon(proc, err)
    stack.callback(d.stop)
    deadline = time.monotonic() + 60
    status = w.runtime / "status.json"
    while not (status.exists() and (w.runtime / "janitor.sock").exists()):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the daemon did not start:\n{err.read_text(errors='replace')}")
        time.sleep(0.05)
    return d


def read_records(records: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for path in sorted(records.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip():
                out.append(json.loads(line))
    return out


def _normalize(reason: str) -> str:
    reason = re.sub(r"\d+(?:\.\d+)? ?(?:B|KiB|MiB|GiB|TiB)\b", "N", reason)
    return re.sub(r"volume \S+ is", "volume V is", reason)


def _nearest(samples: list[Sample], t: float) -> Sample | None:
    best = None
    for s in samples:
        if s.t <= t:
            best = s
        else:
            break
    return best


def _stop_deficit(free: int, floor: int, reserved: int) -> int:
    from janitor.admission.risk import stop_deficit

    return stop_deficit(free, floor, reserved)


def run(args: argparse.Namespace, stack: contextlib.ExitStack, out: dict[str, Any]) -> None:
    rng = random.Random(args.seed)
    root = Path(tempfile.mkdtemp(prefix="janitor-soak-", dir=args.where))
    out["work"] = str(root)
    if args.keep:
        stack.callback(print, f"soak: kept {root} (ledger, logs, records)", file=sys.stderr)
    else:
        stack.callback(shutil.rmtree, root, True)
    w = Work(
        root=root,
        mnt=root / "mnt",
        state=root / "state",
        runtime=root / "run",
        logs=root / "log",
        home=root / "home",
        records=root / "records",
        policy=root / "policy.toml",
        config=root / "config.toml",
    )
    mount_tmpfs(w.mnt, args.size)
    stack.callback(unmount, w.mnt)  # after every process (registered later) has stopped
    for d in (w.scratch, w.cache, w.mnt / "outside", w.records, w.home / "tmp", w.state):
        d.mkdir(parents=True, exist_ok=True)
    w.config.write_text("")
    write_policy(w, args.floor, args.orphan_age)
    planted = plant(w, rng)
    fps = tuple(f"{rng.getrandbits(96):024x}" for _ in range(16))
    plant_cache(w, fps, rng)
    os.environ.clear()
    os.environ.update(w.env())  # the forkserver and everything it forks inherit it

    shown = janitor_cli(w, "policy", "show", "--json")
    if shown.returncode != 0:
        raise RuntimeError(f"janitor policy show failed: {shown.stderr.strip()}")
    vol = next(v for v in json.loads(shown.stdout)["volumes"] if v["mount"] == str(w.mnt))
    total, floor = int(vol["total"]), int(vol["floor"])
    out["volume"] = vol
    daemon = start_daemon(w, stack)

    nslots = args.jobs + args.outside
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(
        ["__main__", "janitor.core", "janitor.cleanup.sweep", "janitor.commands.estimate"]
    )
    arr = ctx.RawArray("d", (nslots + 1) * NF)
    slots = Slots(arr, nslots)
    for s in range(nslots):
        slots.clear(s)
    cfg = Config(
        mnt=str(w.mnt),
        scratch=str(w.scratch),
        cache=str(w.cache),
        outside=str(w.mnt / "outside"),
        records=str(w.records),
        fps=fps,
        wait_s=args.wait,
        chunk_interval_s=args.chunk_interval,
        kill_frac=args.kill_frac,
        pin_frac=args.pin_frac,
        outside_rate=args.outside_rate,
        nslots=nslots,
        seed=args.seed,
        probe_bytes=total - floor + MiB,
    )
    h = Harness(cfg, slots, ctx, args.jobs)
    stack.callback(h.kill_all)  # runs before the daemon stops and the tmpfs is unmounted
    t_start = time.time()
    for k in range(args.outside):
        p = ctx.Process(target=outside_main, args=(args.jobs + k, k, cfg, arr))
        p.start()
        h.others.append(p)
    probe = ctx.Process(target=probe_main, args=(cfg, arr))
    probe.start()
    h.others.append(probe)
    for slot in range(args.jobs):
        h.spawn(slot)
    threads = [threading.Thread(target=fn, daemon=True) for fn in (h.monitor, h.supervise)]
    for t in threads:
        t.start()
    end = t_start + args.minutes * 60
    while time.time() < end:
        time.sleep(min(30.0, max(0.0, end - time.time())))
        last = h.samples[-1] if h.samples else None
        if last is not None and time.time() < end - 1:
            print(
                f"soak: {time.time() - t_start:5.0f} s, free {last.free / MiB:.1f} MiB, "
                f"{last.writing} writing, {last.waiting} waiting, {len(h.kills)} killed",
                file=sys.stderr,
            )
        if daemon.proc.poll() is not None:
            h.errors.append(f"the daemon exited with {daemon.proc.returncode}")
            break
    t_stop = time.time()
    print("soak: stopping new jobs, letting running ones finish", file=sys.stderr)
    h.respawning = False
    slots.stop()
    for p in h.others:
        p.join(15)
    deadline = time.monotonic() + args.wait + 60
    while any(p.is_alive() for p in h.workers.values()) and time.monotonic() < deadline:
        time.sleep(0.2)
    h.done.set()
    for t in threads:
        t.join(5)
    leftover = [p.pid for p in h.workers.values() if p.is_alive()]
    h.kill_all()
    t_drained = time.time()

    # Orphans: what SIGKILLed jobs left. Wait until the newest is orphan_age old, then sweep.
    records = read_records(w.records)
    ends = {r["job"] for r in records if r["ev"] in ("end", "error") and r.get("kind") != "wav"}
    admitted = [r for r in records if r["ev"] == "admit" and r["kind"] == "pcm"]
    orphan_dirs = [r["path"] for r in admitted if r["job"] not in ends]
    newest = 0.0
    for d in orphan_dirs:
        for dirpath, _, files in os.walk(d):
            for name in [*files, "."]:
                with contextlib.suppress(OSError):
                    newest = max(newest, os.stat(os.path.join(dirpath, name)).st_mtime)
    ready = max(newest, max((k["t"] for k in h.kills), default=0.0)) + args.orphan_age + 5
    pause = ready - time.time()
    if pause > 0:
        print(f"soak: waiting {pause:.0f} s for the orphans to age", file=sys.stderr)
        time.sleep(pause)
    swept = janitor_cli(w, "sweep", "--json")
    sweep_json = json.loads(swept.stdout) if swept.stdout.strip() else {}
    # Only a folder that still holds a pipeline scope is ours (one SIGKILLed in the middle
    # of its own rmtree may have lost it: then it is nobody's, as the policy says).
    ours = [str(p) for p in w.scratch.glob(".tmp*") if p.is_dir() and any(p.glob("*_v2*"))]
    left_orphans = [d for d in ours if d in orphan_dirs]
    strays = [d for d in ours if d not in orphan_dirs]
    untouched = touched(planted)

    log = janitor_cli(w, "log", "--json")
    ledger_log = json.loads(log.stdout) if log.returncode == 0 else []
    daemon_log = (w.logs / "daemon.log").read_text(errors="replace")
    daemon.stop()

    out.update(
        analyse(
            args,
            records,
            h,
            total=total,
            floor=floor,
            t_start=t_start,
            t_stop=t_stop,
            t_drained=t_drained,
            leftover=leftover,
            orphan_dirs=orphan_dirs,
            left_orphans=left_orphans,
            strays=strays,
            touched=untouched,
            planted=len(planted),
            sweep=sweep_json,
            ledger_log=ledger_log,
            daemon_log=daemon_log,
        )
    )


def in_use_deletes(
    ledger_log: list[dict[str, Any]], records: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Deletions the ledger logged of a WAV while a pin on it was live, or of a job folder
    while its job ran (admitted, not yet ended, not SIGKILLed)."""
    pins: dict[str, tuple[str, float]] = {}
    spans: dict[str, list[tuple[float, float]]] = {}
    for e in ledger_log:
        d = e.get("detail") or {}
        if e["event"] == "pin":
            pins[d["pin"]] = (e["path"], e["time"])
        elif e["event"] in ("unpin", "pin-dead", "pin-expired") and d.get("pin") in pins:
            path, t0 = pins.pop(d["pin"])
            spans.setdefault(path, []).append((t0, e["time"]))
    for path, t0 in pins.values():
        spans.setdefault(path, []).append((t0, math.inf))
    ended = {r["job"]: r["t_end"] for r in records if r["ev"] == "end" and r["kind"] == "pcm"}
    for r in records:
        if r["ev"] == "admit" and r["kind"] == "pcm" and r["job"] in ended:
            spans.setdefault(r["path"], []).append((r["t_admit"], ended[r["job"]]))
    out = []
    for e in ledger_log:
        if e["event"] != "delete" or e["path"] is None:
            continue
        for t0, t1 in spans.get(e["path"], ()):
            if t0 <= e["time"] <= t1:
                out.append(
                    {
                        "time": e["time"],
                        "path": e["path"],
                        "tree": e["tree"],
                        "detail": e.get("detail"),
                        "held": [t0, t1],
                    }
                )
    return out


def analyse(
    args: argparse.Namespace,
    records: list[dict[str, Any]],
    h: Harness,
    *,
    total: int,
    floor: int,
    t_start: float,
    t_stop: float,
    t_drained: float,
    leftover: list[int],
    orphan_dirs: list[str],
    left_orphans: list[str],
    strays: list[str],
    touched: list[str],
    planted: int,
    sweep: dict[str, Any],
    ledger_log: list[dict[str, Any]],
    daemon_log: str,
) -> dict[str, Any]:
    """The numbers behind the table."""
    ends = [r for r in records if r["ev"] == "end"]
    pcm = [r for r in ends if r["kind"] == "pcm"]
    wav = [r for r in ends if r["kind"] == "wav"]
    admits = [r for r in records if r["ev"] == "admit"]
    pcm_admits = [r for r in admits if r["kind"] == "pcm"]
    by_outcome = Counter(r["outcome"] for r in pcm)
    wav_outcome = Counter(r["outcome"] for r in wav)
    stops = [r for r in ends if r["outcome"] == "stopped"]
    for s in stops:
        m = _nearest(h.samples, s["t_end"])
        s["deficit_then"] = None if m is None else _stop_deficit(m.free, floor, m.outstanding)
    enospc = [r for r in ends if r["outcome"] == "ENOSPC"]
    lost = [r for r in ends if r["outcome"] == "lost"]
    lost_ledger = in_use_deletes(ledger_log, records)
    errors = [r for r in records if r["ev"] == "error"]
    probes = sorted(r["s"] for r in records if r["ev"] == "probe" and not r["granted"])
    probe_granted = sum(1 for r in records if r["ev"] == "probe" and r["granted"])
    bursts = [r for r in records if r["ev"] == "burst"]
    run_samples = [s for s in h.samples if s.t <= t_stop]
    grantable = max(1, total - floor)
    waiting = [s for s in run_samples if s.waiting > 0]
    phys = [min(1.0, (total - s.free) / grantable) for s in waiting]
    comm = [min(1.0, (total - s.free + s.outstanding) / grantable) for s in waiting]
    below = sum(1 for s in run_samples if s.free < floor)
    lowest = min(run_samples, key=lambda s: s.free) if run_samples else None
    dips: list[dict[str, float]] = []  # runs of samples below the floor
    for smp in run_samples:
        if smp.free < floor:
            if dips and dips[-1]["end"] == -1:
                dips[-1]["lowest"] = min(dips[-1]["lowest"], smp.free)
                dips[-1]["last"] = smp.t
            else:
                dips.append({"start": smp.t, "last": smp.t, "end": -1, "lowest": smp.free})
        elif dips and dips[-1]["end"] == -1:
            dips[-1]["end"] = smp.t
    for dip in dips:
        dip["seconds"] = (dip["end"] if dip["end"] > 0 else dip["last"]) - dip["start"]
        dip["start"] -= t_start
        del dip["end"], dip["last"]
    slow = [r["parts"] for r in records if r["ev"] == "probe" and r["s"] >= TARGET_REFUSAL_S]
    slow_parts = (
        {
            k: round(sum(p.get(k, 0.0) for p in slow) / len(slow), 3)
            for k in ("admit", "room", "locks", "scan", "protect")
        }
        if slow
        else {}
    )
    events = Counter(e["event"] for e in ledger_log)
    deletes = Counter(
        (e.get("detail") or {}).get("reason", "?") for e in ledger_log if e["event"] == "delete"
    )
    log_lines = daemon_log.splitlines()
    daemon_errors = [ln for ln in log_lines if " ERROR " in ln or "Traceback" in ln]
    waits = sorted(r["t_admit"] - r["t_req"] for r in pcm_admits)
    return {
        "duration_s": t_stop - t_start,
        "drain_s": t_drained - t_stop,
        "total": total,
        "floor": floor,
        "jobs": {
            "admitted": len(pcm_admits),
            "outcomes": dict(by_outcome),
            "killed": len(h.kills),
            "refused_after_wait": by_outcome.get("refused", 0),
            "waited": sum(1 for x in waits if x > 0.5),
            "wait_p50_s": percentile(waits, 50),
            "wait_p99_s": percentile(waits, 99),
            "abandoned": sum(1 for r in records if r["ev"] == "abandon"),
            "leftover_killed_at_end": leftover,
        },
        "conversions": {
            "admitted": sum(1 for r in admits if r["kind"] == "wav"),
            "outcomes": dict(wav_outcome),
        },
        "enospc": enospc,
        "lost": lost,
        "lost_ledger": lost_ledger,
        "wav_replaced": sum(1 for r in records if r["ev"] == "replaced"),
        "errors": errors,
        "crashes": h.crashes,
        "harness_errors": h.errors,
        "stops": stops,
        "stop_reasons": dict(Counter(_normalize(s["reason"]) for s in stops)),
        "stopped_above_floor": sum(1 for s in stops if s["free"] >= floor),
        "stopped_soon": sum(1 for s in stops if s["since_admit"] < STOP_SOON_S),
        "stopped_no_deficit": sum(1 for s in stops if s["deficit_then"] == 0),
        "orphans": {"made": len(orphan_dirs), "left": left_orphans, "strays": strays},
        "touched": touched,
        "planted": planted,
        "lowest_free": None if lowest is None else lowest.free,
        "lowest_free_at_s": None if lowest is None else lowest.t - t_start,
        "below_floor_share": below / max(1, len(run_samples)),
        "dips": dips,
        "samples": len(run_samples),
        "waiting_samples": len(waiting),
        "utilization_physical": sum(phys) / len(phys) if phys else None,
        "utilization_committed": sum(comm) / len(comm) if comm else None,
        "probe": {
            "n": len(probes),
            "p50_s": percentile(probes, 50),
            "p99_s": percentile(probes, 99),
            "max_s": probes[-1] if probes else None,
            "granted": probe_granted,
            "slow": len(slow),
            "slow_mean_parts_s": slow_parts,
        },
        "outside": {
            "bursts": len(bursts),
            "bytes": sum(b["bytes"] for b in bursts),
            "enospc": sum(1 for b in bursts if b["enospc"]),
        },
        "ledger_events": dict(events),
        "deletes_by_reason": dict(deletes),
        "sweep_at_end": {k: sweep.get(k) for k in ("deleted_bytes", "planned_bytes")},
        "daemon_errors": daemon_errors[:20],
        "daemon_warnings": sum(1 for ln in log_lines if " WARNING " in ln),
        "timeline": [
            {
                "t": round(s.t - t_start, 2),
                "free": s.free,
                "outstanding": s.outstanding,
                "outside": s.outside,
                "waiting": s.waiting,
                "writing": s.writing,
            }
            for s in run_samples[:: max(1, round(1.0 / MONITOR_S))]
        ],
    }


def _mib(n: float | None) -> str:
    return "-" if n is None else f"{n / MiB:.1f} MiB"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f} %"


def _zero(n: int) -> str:
    return verdict(n == 0)


def build_rows(r: dict[str, Any], args: argparse.Namespace) -> list[Row]:
    j = r["jobs"]
    o = j["outcomes"]
    enospc = r["enospc"]
    n_pcm = sum(1 for e in enospc if e["kind"] == "pcm")
    lost = r["lost"]
    rows = [
        Row(
            "admitted writes that hit ENOSPC",
            f"{len(enospc)} (PCM {n_pcm}, WAV {len(enospc) - n_pcm})",
            target="0",
            verdict=_zero(len(enospc)),
        ),
        Row(
            "files in use deleted: seen by jobs; deletes in the ledger",
            f"{len(lost)}; {len(r['lost_ledger'])}",
            baseline=f"{r['wav_replaced']} WAV reads saw a re-conversion",
            target="0; 0",
            verdict=_zero(len(lost) + len(r["lost_ledger"])),
        ),
        Row(
            "files outside every tree touched",
            f"{len(r['touched'])} of {r['planted']}",
            target="0",
            verdict=_zero(len(r["touched"])),
        ),
        Row(
            f"orphans left after orphan_age ({args.orphan_age:g} s) + janitor sweep",
            f"{len(r['orphans']['left']) + len(r['orphans']['strays'])} of "
            f"{r['orphans']['made']} made",
            target="0",
            verdict=_zero(len(r["orphans"]["left"]) + len(r["orphans"]["strays"])),
        ),
        Row(
            "jobs admitted / completed / stopped early",
            f"{j['admitted']} / {o.get('completed', 0)} / {o.get('stopped', 0)}",
            baseline=f"{j['killed']} SIGKILLed",
        ),
    ]
    for reason, n in sorted(r["stop_reasons"].items(), key=lambda kv: -kv[1]):
        short = reason if len(reason) <= 60 else reason[:57] + "..."
        rows.append(Row(f"  stopped because: {short}", str(n)))
    stops = len(r["stops"])
    rows += [
        Row(
            "  stopped while free space above the floor",
            f"{r['stopped_above_floor']} of {stops}",
            target="0",
            verdict=_zero(r["stopped_above_floor"]),
        ),
        Row(
            f"  stopped within {STOP_SOON_S:g} s of being admitted",
            f"{r['stopped_soon']} of {stops}",
        ),
        Row(
            "  stopped when the rule's deficit was already 0",
            f"{r['stopped_no_deficit']} of {stops}",
        ),
        Row(
            f"jobs refused after waiting {args.wait:g} s",
            str(j["refused_after_wait"]),
            baseline=f"{j['waited']} waited > 0.5 s; p99 wait {j['wait_p99_s']:.1f} s",
        ),
        Row(
            "cache conversions admitted / completed / stopped / refused",
            f"{r['conversions']['admitted']} / "
            + " / ".join(
                str(r["conversions"]["outcomes"].get(k, 0))
                for k in ("completed", "stopped", "refused")
            ),
        ),
        Row(
            "lowest free space",
            _mib(r["lowest_free"]),
            baseline=f"floor {_mib(r['floor'])}",
            ratio=f"{r['lowest_free'] / r['floor']:.2f}x" if r["lowest_free"] is not None else "-",
        ),
        Row(
            "time below the floor; dips; longest dip",
            f"{_pct(r['below_floor_share'])}; {len(r['dips'])}; "
            f"{max((d['seconds'] for d in r['dips']), default=0):.2f} s",
        ),
        Row(
            "utilization while a job waits: committed",
            _pct(r["utilization_committed"]),
            baseline=f"{r['waiting_samples'] * MONITOR_S:.0f} s with a waiter",
            target=f">= {TARGET_UTILIZATION:.0%}",
            verdict=verdict((r["utilization_committed"] or 0) >= TARGET_UTILIZATION),
        ),
        Row(
            "utilization while a job waits: physical",
            _pct(r["utilization_physical"]),
            target="(goal is on committed)",
        ),
    ]
    p = r["probe"]
    ok = p["n"] > 0 and p["p99_s"] < TARGET_REFUSAL_S and p["p50_s"] < TARGET_REFUSAL_S
    rows += [
        Row(
            "refusal latency p50 / p99 (probe, no wait, make-room on)",
            f"{p['p50_s']:.3f} / {p['p99_s']:.3f} s",
            baseline=f"{p['n']} probes, max {p['max_s'] or 0:.3f} s",
            target=f"< {TARGET_REFUSAL_S:g} s",
            verdict=verdict(ok),
        ),
    ]
    if p["slow_mean_parts_s"]:
        parts = ", ".join(f"{k} {v:.2f}" for k, v in p["slow_mean_parts_s"].items())
        rows.append(Row(f"  {p['slow']} slow refusals, mean s in: {parts}", ""))
    rows += [
        Row(
            "outside writers: bursts / written / met ENOSPC",
            f"{r['outside']['bursts']} / {_mib(r['outside']['bytes'])} / {r['outside']['enospc']}",
        ),
        Row(
            "ledger: at-risk / risk-cleared / dead / refuse",
            " / ".join(
                str(r["ledger_events"].get(k, 0))
                for k in ("at-risk", "risk-cleared", "dead", "refuse")
            ),
            baseline="deleted: "
            + ", ".join(f"{k} {v}" for k, v in sorted(r["deletes_by_reason"].items())),
        ),
        Row(
            "daemon log errors; job errors; worker crashes",
            f"{len(r['daemon_errors'])}; {len(r['errors'])}; {len(r['crashes'])}",
            target="0",
            verdict=_zero(len(r["daemon_errors"]) + len(r["errors"]) + len(r["crashes"])),
        ),
    ]
    return rows


def print_table(rows: list[Row], out: dict[str, Any]) -> None:
    from rich.console import Console, JustifyMethod
    from rich.table import Table

    console = Console(width=180)
    table = Table(title=f"space-janitor chaos soak ({out['args']['minutes']:g} min)")
    columns: list[tuple[str, JustifyMethod]] = [
        ("measurement", "left"),
        ("value", "right"),
        ("baseline", "right"),
        ("ratio", "right"),
        ("target", "right"),
        ("verdict", "left"),
    ]
    for name, justify in columns:
        table.add_column(name, justify=justify)
    for row in rows:
        style = {"meets": "green", "MISSES": "bold red"}.get(row.verdict)
        shown = f"[{style}]{row.verdict}[/]" if style else row.verdict
        table.add_row(row.measurement, row.value, row.baseline, row.ratio, row.target, shown)
    console.print(table)
    r = out.get("results", {})
    if r:
        console.print(
            f"run {r['duration_s']:.0f} s, drain {r['drain_s']:.0f} s; volume "
            f"{_mib(r['total'])}, floor {_mib(r['floor'])}; load average {out['loadavg']}"
        )
    for e in r.get("lost_ledger", []):
        # Each, whole: a miss of this row must be diagnosable from the printed report alone.
        t0, t1 = e["held"]
        console.print(
            f"deleted while in use (ledger): {e['path']} ({e['tree']}) at {e['time']:.3f}, "
            f"held {t0:.3f} to {t1:.3f}; {json.dumps(e.get('detail'), sort_keys=True)}",
            highlight=False,
            soft_wrap=True,
        )
    missed = [row.measurement for row in rows if row.verdict == "MISSES"]
    if out.get("error"):
        console.print(f"[bold red]error[/]: {out['error']}")
    if missed:
        console.print(f"[bold red]{len(missed)} target(s) missed[/]: " + "; ".join(missed))
    elif not out.get("error"):
        console.print("[green]all targets met[/]")


@contextlib.contextmanager
def _signals_unwind() -> Iterator[None]:
    """SIGTERM and SIGHUP raise SystemExit, so every cleanup callback runs."""

    def handler(signum: int, _frame: Any) -> None:
        raise SystemExit(128 + signum)

    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0, help="length of the run (10)")
    ap.add_argument("--jobs", type=int, default=24, help="job worker processes (24)")
    ap.add_argument("--outside", type=int, default=3, help="outside writer processes (3)")
    ap.add_argument("--outside-rate", type=float, default=4.0, help="MiB/s per outside writer")
    ap.add_argument("--size", default="256m", help="tmpfs size (256m)")
    ap.add_argument("--floor", help="the volume's floor (default: the product's, 10 %%)")
    ap.add_argument("--wait", type=float, default=30.0, help="a job's wait= in seconds (30)")
    ap.add_argument("--chunk-interval", type=float, default=0.3, help="s between 1 MiB chunks")
    ap.add_argument("--kill-frac", type=float, default=0.1, help="jobs SIGKILLed (0.1)")
    ap.add_argument("--pin-frac", type=float, default=0.5, help="jobs reading a WAV (0.5)")
    ap.add_argument("--orphan-age", type=float, default=20.0, help="scratch orphan_age, s (20)")
    ap.add_argument("--seed", type=int, default=12)
    ap.add_argument("--where", type=Path, help="parent of the work folder (default: TMPDIR)")
    ap.add_argument("--keep", action="store_true", help="keep the work folder (ledger, logs)")
    ap.add_argument("--json", metavar="FILE", help="also write the raw numbers as JSON")
    ap.add_argument("--strict", action="store_true", help="exit 1 if a target is missed")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("soak: needs root (it mounts a tmpfs)", file=sys.stderr)
        return 2
    out: dict[str, Any] = {
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "machine": {
            "nproc": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "loadavg_at_start": os.getloadavg()[0],
        },
    }
    results: dict[str, Any] = {}
    t0 = time.monotonic()
    env = dict(os.environ)
    try:
        with _signals_unwind(), contextlib.ExitStack() as stack:
            run(args, stack, results)
    except (Exception, KeyboardInterrupt) as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        os.environ.clear()
        os.environ.update(env)
    out["wall_s"] = time.monotonic() - t0
    out["loadavg"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    rows: list[Row] = []
    if "jobs" in results:
        out["results"] = results
        rows = build_rows(results, args)
    out["rows"] = [asdict(row) for row in rows]
    print_table(rows, out)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1, default=str) + "\n")
    if out.get("error"):
        return 2
    return 1 if args.strict and any(row.verdict == "MISSES" for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
