#!/usr/bin/env python3
"""What the guarded ffmpeg costs on the path of every alignment group, and the pre-flight's speed.

1. Cutting a 30-second segment PCM from a cached 10-minute WAV, batchalign3's forced-alignment
   write (``ffmpeg -y -ss S -to S+30 -i WAV -f f32le -acodec pcm_f32le -ar 16000 -ac 1 OUT``),
   side by side: bare ffmpeg, the compiled front end and the Python guard (both from ``janitor
   shim install --front-end ...``) asking the running daemon over its socket, and the Python
   guard with no daemon (the ledger directly). Rounds are interleaved (bare, compiled, python,
   library, bare, ...) so load drifts alike on all. A guarded round times a later cut of a job
   (drawn on the working set its first cut reserved: what hundreds of groups per recording do)
   and the first cut of a new job (its working set admitted, the job recorded). Targets: the
   compiled front end adds at most 5 ms to the later cut's median (issue 26); the Python guard
   at most 40 ms and 25 % (issue 13, item 6).
2. The calls batchalign3 makes around every conversion, by name through the ``PATH`` as it makes
   them, with the same daemon running: ``ffmpeg -version`` and an unestimable call (``-f null``:
   nothing written, so nothing to reserve), bare and through each front end; and ``ffprobe -v
   quiet -show_entries format=duration -of default=noprint_wrappers=1:nokey=1 WAV`` on the
   cached WAV, as batchalign3 probes it before UTR, bare and through each front end of the
   guarded ffprobe (the daemon marks the entry awaiting use for the prober). Interleaved with
   ``python -IS -c pass``, the interpreter start the Python guard cannot avoid. Targets: the
   compiled front end adds at most 2 ms to ``-version`` (issue 26) and to the probe (issue
   32); the Python guard at most 15 ms to ``-version`` (its start-up and an ``exec``).
3. ``janitor run --no-daemon --media FOLDER -- true`` over 100 media files with nothing
   remembered (a cold probe cache each round): target at most 2 s on 2 cores. Baselines:
   ffprobe over the same files one after another, and ``python -c pass``. Then what a run's
   own daemon costs once: ``janitor run -- true`` beside ``janitor run --no-daemon -- true``.

Everything runs in a throw-away sandbox (its own policy, state, cache, runtime and log
folders); the user's ledger and config are never touched.

    python benchmarks/bench_guard.py [--runs 30] [--files 100] [--json FILE] [--strict]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import percentile

TARGET_MS = 40.0
TARGET_PCT = 25.0
TARGET_PREFLIGHT_S = 2.0
TARGET_VERSION_MS = 15.0
#: The compiled front end (issue 26): added to the later cut's median, and to ``-version``.
TARGET_COMPILED_MS = 5.0
TARGET_COMPILED_VERSION_MS = 2.0
#: The guarded ffprobe's compiled front end (issue 32): added to batchalign3's probe.
TARGET_COMPILED_PROBE_MS = 2.0
#: batchalign3's duration query, as it runs it (the file is appended).
FFPROBE_DURATION = ["ffprobe", "-v", "quiet", "-show_entries", "format=duration", "-of",
                    "default=noprint_wrappers=1:nokey=1"]  # fmt: skip
FFMPEG = shutil.which("ffmpeg")
FFPROBE = shutil.which("ffprobe")


def janitor_bin() -> str:
    exe = Path(sys.executable).with_name("janitor")
    if not exe.exists():
        raise SystemExit(f"bench: no janitor beside {sys.executable}; pip install . first")
    return str(exe)


def sandbox(root: Path) -> dict[str, str]:
    """A policy with a media cache and a job temp tree under ``root``, and its folders."""
    cache, tmp = root / "cache", root / "tmp"
    cache.mkdir()
    tmp.mkdir()
    policy = root / "policy.toml"
    policy.write_text(
        '[volume]\nfloor = "64MiB"\n\n'
        f'[trees.media_cache]\nrole = "cache"\npath = {json.dumps(str(cache))}\n'
        'quota = "1GiB"\nmin_age = "10m"\n\n'
        f'[trees.job_tmp]\nrole = "scratch"\npath = {json.dumps(str(tmp))}\nunits = "dir"\n'
        'unit_glob = ".tmp*"\norphan_age = "12h"\nmin_age = "10m"\n'
    )
    (root / "config.toml").write_text("")
    runtime = Path(tempfile.mkdtemp(prefix="bg-", dir="/tmp"))  # short: a socket path
    env = {k: v for k, v in os.environ.items() if not k.startswith("JANITOR_")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed wheel is byte-compiled; match it
    env.update(
        HOME=str(root / "home"),
        XDG_CACHE_HOME=str(root / "home" / ".cache"),
        XDG_DATA_HOME=str(root / "home" / ".local" / "share"),
        TMPDIR=str(tmp),
        JANITOR_STATE_DIR=str(root / "state"),
        JANITOR_POLICY=str(policy),
        JANITOR_CONFIG=str(root / "config.toml"),
        JANITOR_RUNTIME_DIR=str(runtime),
        JANITOR_LOG_DIR=str(root / "log"),
    )
    return env


def make_wav(path: Path, seconds: int) -> None:
    subprocess.run(
        [FFMPEG, "-nostdin", "-loglevel", "error", "-y", "-f", "lavfi", "-i",
         f"sine=frequency=440:duration={seconds}", "-acodec", "pcm_s16le", "-ar", "16000",
         "-ac", "1", str(path)],
        check=True,
    )  # fmt: skip


def wait_socket(path: Path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(str(path))
                return
        except OSError:
            time.sleep(0.1)
    raise SystemExit("bench: the daemon did not open its socket")


def cut_args(wav: Path, out: Path, start: float) -> list[str]:
    return ["-nostdin", "-loglevel", "error", "-y", "-ss", f"{start:.3f}", "-to",
            f"{start + 30:.3f}", "-i", str(wav), "-f", "f32le", "-acodec", "pcm_f32le",
            "-ar", "16000", "-ac", "1", str(out)]  # fmt: skip


def timed(cmd: list[str], env: dict[str, str]) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t


def timed_output(cmd: list[str], env: dict[str, str]) -> tuple[float, bytes]:
    """Wall time and stdout of ``cmd``; a bare name is looked up on ``env``'s PATH."""
    t = time.perf_counter()
    done = subprocess.run(cmd, env=env, check=True, stdout=subprocess.PIPE)
    return time.perf_counter() - t, done.stdout


def bench_checks(
    root: Path, env: dict[str, str], envs: dict[str, dict[str, str]], runs: int
) -> dict[str, list[float]]:
    """batchalign3's calls around a conversion, bare and through each guarded PATH
    (``envs``: front end -> its environment), interleaved.

    Each call must print what the bare one prints (the real ffmpeg's version, the same
    duration): a guard that answered itself or failed would show here, not only as a time.
    """
    for name, genv in envs.items():
        guarded = shutil.which("ffprobe", path=genv["PATH"])
        if guarded is None or not guarded.startswith(str(root / f"bin-{name}")):
            raise SystemExit(f"bench: the {name} guard's PATH does not find its ffprobe first")
    version = ["ffmpeg", "-version"]
    wav = root / "cache" / "0123456789abcdef01234567.wav"
    # writes nothing, so nothing to reserve (the null muxer); one second decoded
    unestimable = ["ffmpeg", "-nostdin", "-loglevel", "error", "-t", "1", "-i", str(wav), "-f",
                   "null", "-"]  # fmt: skip
    probe = [*FFPROBE_DURATION, str(wav)]
    modes: list[tuple[str, list[str], dict[str, str]]] = [("version-bare", version, env)]
    modes += [(f"version-{n}", version, e) for n, e in envs.items()]
    modes += [("unestimable-bare", unestimable, env)]
    modes += [(f"unestimable-{n}", unestimable, e) for n, e in envs.items()]
    modes += [
        ("python-IS", [sys.executable, "-I", "-S", "-c", "pass"], env),
        ("ffprobe-bare", probe, env),
    ]
    modes += [(f"ffprobe-{n}", probe, e) for n, e in envs.items()]
    times: dict[str, list[float]] = {name: [] for name, _, _ in modes}
    expected: dict[str, bytes] = {}
    for i in range(runs + 3):
        for name, cmd, menv in modes:
            took, out = timed_output(cmd, menv)
            what = name.partition("-")[0]
            if expected.setdefault(what, out) != out:
                raise SystemExit(f"bench: {name} printed {out[:60]!r}, bare printed otherwise")
            if i >= 3:
                times[name].append(took)
    if not expected["version"].startswith(b"ffmpeg version"):
        raise SystemExit(f"bench: ffmpeg -version printed {expected['version'][:60]!r}")
    return times


#: The guarded modes of the cut: (name, front end, with the daemon running).
GUARDED = (("compiled", "compiled", True), ("python", "python", True), ("library", "python", False))


def bench_cut(
    root: Path, env: dict[str, str], runs: int
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """The cut rows, then (with the same daemon running) :func:`bench_checks`'s rows."""
    wav = root / "cache" / "0123456789abcdef01234567.wav"
    # Long enough for every round to cut a window of its own: a job's groups never repeat
    # (a window cut again is growth past the working set, admitted as such).
    make_wav(wav, 30 * (runs + 4))
    job = root / "tmp" / ".tmpBENCH" / "fa_v2" / "audio"
    job.mkdir(parents=True)
    exes: dict[str, str] = {"bare": str(FFMPEG)}
    envs: dict[str, dict[str, str]] = {"bare": env}
    for front in ("compiled", "python"):
        folder = root / f"bin-{front}"
        done = subprocess.run([janitor_bin(), "shim", "install", "--dir", str(folder),
                               "--front-end", front], env=env, capture_output=True,
                              text=True)  # fmt: skip
        if done.returncode != 0:
            raise SystemExit(f"bench: shim install --front-end {front}: {done.stderr.strip()}")
        path = f"{folder}{os.pathsep}{env['PATH']}"
        for name, fe, with_daemon in GUARDED:
            if fe == front:
                exes[name] = str(folder / "ffmpeg")
                envs[name] = dict(env, PATH=path)
                if not with_daemon:
                    envs[name]["JANITOR_RUNTIME_DIR"] = str(root / "no-daemon")
    daemon = subprocess.Popen([janitor_bin(), "daemon", "--quiet"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    times: dict[str, list[float]] = {"bare": []}
    for name, _, _ in GUARDED:
        times[name] = []
        times[name + "-first"] = []
    try:
        wait_socket(Path(env["JANITOR_RUNTIME_DIR"]) / "janitor.sock")
        for i in range(runs + 3):  # three rounds of warm-up: page cache, bytecode, probe cache
            for name, exe in exes.items():
                # A later cut of a job (it draws on the working set its first cut reserved),
                # then, guarded, the first cut of a new job (its working set admitted).
                folders = [job] if name == "bare" else [job, root / "tmp" / f".tmp{name}{i}"]
                for n, folder in enumerate(folders):
                    out = (
                        folder / "fa_v2" / "audio" / f"fa-v2-audio-{i}.pcm"
                        if n
                        else job / (f"fa-v2-audio-{name}-{i}.pcm")
                    )
                    out.parent.mkdir(parents=True, exist_ok=True)
                    took = timed([exe, *cut_args(wav, out, i * 30.0)], envs[name])
                    if out.stat().st_size != 30 * 64_000:
                        raise SystemExit(f"bench: {name} wrote {out.stat().st_size} bytes")
                    out.unlink()
                    if n:
                        shutil.rmtree(folder)  # the job done: its working set goes with it
                    if i >= 3:
                        times[name + ("-first" if n else "")].append(took)
        before = guard_log_text(env)
        checks = bench_checks(
            root, env, {"compiled": envs["compiled"], "python": envs["python"]}, runs
        )
        added = guard_log_text(env)[len(before) :]
        if "-version" in added:
            raise SystemExit("bench: ffmpeg -version through a guard wrote to guard.log")
        if added.count("unguarded (") != 2 * (runs + 3):
            raise SystemExit("bench: every unestimable call should leave one line in guard.log")
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(15)
        except subprocess.TimeoutExpired:
            daemon.kill()
    log = subprocess.run([janitor_bin(), "log", "--json"], env=env, capture_output=True,
                         text=True, check=True)  # fmt: skip
    # Every guarded cut was held: one working set for the shared job, one per new job.
    rounds = len(GUARDED) * (runs + 3)
    grants = sum(1 for e in json.loads(log.stdout) if e["event"] == "grant")
    if grants != 1 + rounds:
        raise SystemExit(f"bench: expected {1 + rounds} grants, the log has {grants}")
    text = guard_log_text(env)
    if text.count("working set)") != 2 * rounds:
        raise SystemExit(f"bench: expected {2 * rounds} guarded cuts in guard.log")
    if text.count("reserved through the daemon") != 4 * (runs + 3):
        raise SystemExit("bench: a guarded cut with the daemon running did not go through it")
    return times, checks


def guard_log_text(env: dict[str, str]) -> str:
    path = Path(env["JANITOR_LOG_DIR"]) / "guard.log"
    return path.read_text() if path.exists() else ""


def bench_preflight(root: Path, env: dict[str, str], files: int, rounds: int) -> dict[str, float]:
    media = root / "media"
    media.mkdir()
    first = media / "talk-000.m4a"
    subprocess.run(
        [FFMPEG, "-nostdin", "-loglevel", "error", "-y", "-f", "lavfi", "-i",
         "sine=frequency=440:duration=60", "-ac", "1", "-c:a", "aac", "-b:a", "32k", str(first)],
        check=True,
    )  # fmt: skip
    for i in range(1, files):
        shutil.copyfile(first, media / f"talk-{i:03d}.m4a")  # distinct files: each is probed
    probes = Path(env["XDG_CACHE_HOME"])
    cold: list[float] = []
    for _ in range(rounds):
        shutil.rmtree(probes, ignore_errors=True)
        t = time.perf_counter()
        done = subprocess.run([janitor_bin(), "run", "--no-daemon", "--media", str(media), "--",
                               "true"], env=env, capture_output=True, text=True)  # fmt: skip
        cold.append(time.perf_counter() - t)
        if done.returncode != 0 or f"{files} media files" not in done.stderr:
            raise SystemExit(f"bench: janitor run failed: {done.stderr}")
    t = time.perf_counter()
    subprocess.run([janitor_bin(), "run", "--no-daemon", "--media", str(media), "--", "true"],
                   env=env, capture_output=True, check=True)  # fmt: skip
    warm = time.perf_counter() - t
    # What a run's own daemon costs once (started, waited for, stopped), against --no-daemon:
    # it pays for itself from the few guarded calls it saves ~145 ms each.
    own: dict[str, list[float]] = {"daemon": [], "no-daemon": []}
    for _ in range(5):
        for mode in own:
            t = time.perf_counter()
            subprocess.run([janitor_bin(), "run", f"--{mode}", "--", "true"], env=env,
                           capture_output=True, check=True)  # fmt: skip
            own[mode].append(time.perf_counter() - t)
    t = time.perf_counter()
    for f in sorted(media.iterdir()):
        subprocess.run([FFPROBE, "-v", "error", "-show_entries", "format=duration", "-of",
                        "csv=p=0", str(f)], capture_output=True, check=True)  # fmt: skip
    serial = time.perf_counter() - t
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    bare_python = time.perf_counter() - t
    return {"cold_median_s": statistics.median(cold), "cold_max_s": max(cold), "warm_s": warm,
            "ffprobe_serial_s": serial, "python_pass_s": bare_python,
            "run_own_daemon_s": statistics.median(own["daemon"]),
            "run_no_daemon_s": statistics.median(own["no-daemon"])}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=30, help="timed cuts per mode")
    ap.add_argument("--files", type=int, default=100, help="media files for the pre-flight")
    ap.add_argument("--rounds", type=int, default=3, help="cold pre-flights")
    ap.add_argument("--json", type=Path, default=None, help="also write the numbers here")
    ap.add_argument("--strict", action="store_true", help="exit 1 if a target is missed")
    args = ap.parse_args(argv)
    if FFMPEG is None or FFPROBE is None:
        raise SystemExit("bench: ffmpeg and ffprobe are needed (Debian/Homebrew package ffmpeg)")
    with tempfile.TemporaryDirectory(prefix="bench-guard-") as tmp:
        root = Path(tmp)
        env = sandbox(root)
        try:
            cut, checks = bench_cut(root, env, args.runs)
            pre = bench_preflight(root, env, args.files, args.rounds)
        finally:
            shutil.rmtree(env["JANITOR_RUNTIME_DIR"], ignore_errors=True)

    def ms_(seconds: float) -> str:
        return f"{seconds * 1e3:.1f} ms"

    def paired(values: list[float], base: list[float]) -> float:
        """The median of the per-round differences: each guarded call against the bare call
        of its own round, so load that drifts between rounds cancels out."""
        return statistics.median(v - b for v, b in zip(values, base, strict=True))

    print(
        f"machine: nproc={os.cpu_count()}, load {os.getloadavg()[0]:.2f}, "
        f"CPython {sys.version.split()[0]}, {args.runs} rounds per mode"
    )
    rows = [("measurement", "median", "p90", "min", "vs bare: medians", "paired", "target",
             "verdict")]  # fmt: skip
    ok = True

    def add(label: str, values: list[float], base: list[float] | None = None,
            limit_ms: float | None = None, limit_pct: float | None = None) -> None:  # fmt: skip
        nonlocal ok
        med, p90, low = statistics.median(values), percentile(sorted(values), 90), min(values)
        if base is None:
            rows.append((label, ms_(med), ms_(p90), ms_(low), "baseline", "-", "-", "-"))
            return
        extra = med - statistics.median(base)
        pct = 100 * extra / statistics.median(base)
        pair = paired(values, base)
        target, verdict = "-", "-"
        if limit_ms is not None:
            meets = pair * 1e3 <= limit_ms and (limit_pct is None or pct <= limit_pct)
            ok &= meets
            target = f"<= +{limit_ms:g} ms" + (f", +{limit_pct:g} %" if limit_pct else "")
            verdict = "meets" if meets else "MISSES"
        rows.append((label, ms_(med), ms_(p90), ms_(low), f"{extra * 1e3:+.1f} ms ({pct:+.0f} %)",
                     f"{pair * 1e3:+.1f} ms", target, verdict))  # fmt: skip

    add("bare ffmpeg, 30 s segment PCM from a cached WAV", cut["bare"])
    add("compiled front end, later cut, daemon running", cut["compiled"], cut["bare"],
        TARGET_COMPILED_MS)  # fmt: skip
    add("compiled front end, first cut of a job, daemon", cut["compiled-first"], cut["bare"])
    add("Python guard, later cut, daemon running", cut["python"], cut["bare"], TARGET_MS,
        TARGET_PCT)  # fmt: skip
    add("Python guard, first cut of a job, daemon", cut["python-first"], cut["bare"])
    add("Python guard, later cut, no daemon (ledger)", cut["library"], cut["bare"])
    add("Python guard, first cut of a job, no daemon", cut["library-first"], cut["bare"])
    titles = {"version": "ffmpeg -version", "unestimable": "an unestimable call (-f null, 1 s)"}
    for what, title in titles.items():
        base = checks[f"{what}-bare"]
        version = what == "version"
        add(f"bare {title}, by name on PATH", base)
        add(f"compiled front end, {title}", checks[f"{what}-compiled"], base,
            TARGET_COMPILED_VERSION_MS if version else None)  # fmt: skip
        add(f"Python guard, {title}", checks[f"{what}-python"], base,
            TARGET_VERSION_MS if version else None)  # fmt: skip
    add("python -I -S -c pass (the Python guard's interpreter start)", checks["python-IS"])
    add("bare ffprobe duration of a cached WAV (batchalign3's probe)", checks["ffprobe-bare"])
    add("compiled front end, the probe (marks it awaiting use)", checks["ffprobe-compiled"],
        checks["ffprobe-bare"], TARGET_COMPILED_PROBE_MS)  # fmt: skip
    add("Python guard, the probe (marks it awaiting use)", checks["ffprobe-python"],
        checks["ffprobe-bare"])  # fmt: skip
    pre_ok = pre["cold_median_s"] <= TARGET_PREFLIGHT_S
    ok &= pre_ok
    rows.append((f"janitor run --media ({args.files} files), nothing remembered",
                 f"{pre['cold_median_s']:.2f} s", f"max {pre['cold_max_s']:.2f} s", "-",
                 f"ffprobe one by one {pre['ffprobe_serial_s']:.2f} s", "-",
                 f"<= {TARGET_PREFLIGHT_S:g} s", "meets" if pre_ok else "MISSES"))  # fmt: skip
    rows.append(("janitor run --media, probes remembered", f"{pre['warm_s']:.2f} s", "-", "-",
                 "-", "-", "-", "-"))  # fmt: skip
    rows.append(("janitor run -- true, its own daemon (the default)",
                 f"{pre['run_own_daemon_s']:.2f} s", "-", "-",
                 f"--no-daemon {pre['run_no_daemon_s']:.2f} s", "-", "-", "-"))  # fmt: skip
    rows.append(("python -c pass", f"{pre['python_pass_s'] * 1e3:.1f} ms", "-", "-", "-", "-",
                 "-", "-"))  # fmt: skip
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print(" | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))
    if args.json:
        args.json.write_text(json.dumps({"cut": cut, "checks": checks, "preflight": pre}, indent=2))
    return 1 if args.strict and not ok else 0


if __name__ == "__main__":
    sys.exit(main())
