#!/usr/bin/env python3
"""`janitor space` beside `du -sx` over the same folders: prints one table, exits 0 (not a test).

In a fresh work folder (``--where``, default under /tmp) it builds a home as batchalign3 fills
one: a media cache of ``--files`` WAV-named files, TMPDIR with job folders (``.tmp*/fa_v2``)
and other programs' files, ``~/.batchalign3`` with logs and staged jobs, a Hugging Face hub and
Stanza resources (``--orphans K``: K of the job folders two days old, so that a sweep would
free them and ``janitor space`` runs its dry-run sweep). Then, interleaved, ``--repeat`` times
each:

* ``janitor space --json`` with the shipped policy, this source tree's, with its compiled size
  walker (``janitor/native/sizewalk.c``, built by the first run into the work folder's
  ``JANITOR_NATIVE_DIR``: the "walker" row says whether it was);
* the same with ``JANITOR_NATIVE=0``: this source's Python walk (forked processes);
* the same command from ``--baseline DIR`` (another version's source tree, e.g. main's:
  ``git archive main | tar -x -C DIR``), if given;
* ``du -sx`` over the same folders (the tree roots and the pipeline's other folders), the
  baseline: it only adds sizes, and says nothing of what a sweep frees;

then, unless ``--no-daemon``, with this source's ``janitor daemon`` running: ``janitor space
--json`` (which then shows the daemon's last report) beside ``du`` again.

Every command is a whole process (its start-up included; both janitors as
``python -m janitor`` with their source first on ``PYTHONPATH``, their bytecode compiled
first, as an installed package has it), each the median of ``--repeat`` runs, with the page
cache warm (each tree read once before) and, as root, cold (``drop_caches`` before each run:
what a first "why is my disk full" meets). Target (issue 23, item 5): ``janitor space``
faster than ``du`` over the same folders.

    python benchmarks/bench_space.py                 # 100,000 files, 5 runs each
    python benchmarks/bench_space.py --files 300000 --repeat 3 --baseline /tmp/main-src
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

HERE = Path(__file__).resolve().parent
POLICY = HERE.parent / "policies" / "batchalign3.toml"
SOURCE = HERE.parent


def janitor_cmd(source: Path) -> tuple[list[str], dict[str, str]]:
    """``janitor space --json`` of the janitor in ``source``, and the env that selects it."""
    compileall.compile_dir(source / "janitor", quiet=1)
    return [sys.executable, "-m", "janitor", "space", "--json"], {"PYTHONPATH": str(source)}


def build(root: Path, files: int, orphans: int = 0) -> dict[str, str]:
    """The home and its environment; returns the env for both commands."""
    home, tmp = root / "home", root / "tmp"
    data, cache_home = home / ".local" / "share", home / ".cache"
    media = data / "batchalign3" / "media_cache"
    hub = cache_home / "huggingface" / "hub"
    for d in (media, tmp, hub, home / ".batchalign3" / "logs", home / "stanza_resources" / "en"):
        d.mkdir(parents=True, exist_ok=True)
    blob = b"\0" * 2048
    n_media = files // 2
    for i in range(n_media):
        (media / f"{i:024x}.wav").write_bytes(blob)
    n_jobs = files // 4 // 50
    for j in range(n_jobs):
        audio = tmp / f".tmp{j:06d}" / "fa_v2" / "audio"
        audio.mkdir(parents=True)
        for g in range(50):
            (audio / f"fa-v2-audio-{j}-{g}.pcm").write_bytes(blob)
        if j < orphans:  # left by a job that died two days ago: a sweep removes it
            old = time.time() - 2 * 86400
            for p in (*audio.iterdir(), audio, audio.parent, audio.parent.parent):
                os.utime(p, (old, old))
    other = tmp / "other-program"
    other.mkdir()
    for i in range(files // 8):
        (other / f"f{i}").write_bytes(blob)
    for i in range(files // 16):
        (hub / f"blob{i}").write_bytes(blob)
    for i in range(files // 16):
        (home / ".batchalign3" / "logs" / f"run-{i}.jsonl").write_bytes(blob)
    env = {
        **os.environ,
        "HOME": str(home),
        "TMPDIR": str(tmp),
        "XDG_DATA_HOME": str(data),
        "XDG_CACHE_HOME": str(cache_home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_RUNTIME_DIR": str(root / "run"),
        "JANITOR_STATE_DIR": str(root / "state"),
        "JANITOR_POLICY": str(POLICY),
    }
    (root / "run").mkdir(mode=0o700)
    env.pop("PYTHONPATH", None)
    return env


def count(paths: list[str]) -> tuple[int, int]:
    """Files and folders below ``paths`` (each top included), as du walks them."""
    files = dirs = 0
    for top in paths:
        dirs += 1
        for _, ds, fs in os.walk(top):
            dirs += len(ds)
            files += len(fs)
    return files, dirs


def folders(env: dict[str, str]) -> list[str]:
    home = Path(env["HOME"])
    out = [
        Path(env["XDG_DATA_HOME"]) / "batchalign3" / "media_cache",
        Path(env["TMPDIR"]),
        home / ".batchalign3",
        Path(env["XDG_CACHE_HOME"]) / "huggingface" / "hub",
        home / "stanza_resources",
    ]
    return [str(p) for p in out if p.exists()]


def can_drop_caches() -> bool:
    return os.geteuid() == 0 and os.access("/proc/sys/vm/drop_caches", os.W_OK)


def drop_caches() -> None:
    """Empty the page cache, dentries and inodes (root, Linux): a walk then reads the disk."""
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    took = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{cmd[0]} failed ({done.returncode}): {done.stderr.strip()}")
    return took, done.stdout


def _spin(n: int) -> None:
    x = 0
    for i in range(n):
        x += i


def cores_free(n: int = 3_000_000) -> float:
    """How many cores this run gets now: two processes spinning side by side against one alone
    (2.0 on an idle two-core machine; near 1 when something else keeps a core busy). The
    walk's processes gain only what this shows."""
    start = time.perf_counter()
    _spin(n)
    alone = time.perf_counter() - start
    start = time.perf_counter()
    pids = []
    for _ in range(2):
        pid = os.fork()
        if pid == 0:
            _spin(n)
            os._exit(0)
        pids.append(pid)
    for pid in pids:
        os.waitpid(pid, 0)
    return 2 * alone / (time.perf_counter() - start)


def measure(
    runs: dict[str, list[str]], envs: dict[str, dict[str, str]], repeat: int
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Each command ``repeat`` times, interleaved, with the page cache warm, then cold (as root:
    ``drop_caches`` before each run); the seconds each took."""
    warm: dict[str, list[float]] = {n: [] for n in runs}
    for _ in range(repeat):
        for n in runs:
            warm[n].append(timed(runs[n], envs[n])[0])
    cold: dict[str, list[float]] = {n: [] for n in runs}
    if can_drop_caches():
        for _ in range(repeat):
            for n in runs:
                drop_caches()
                cold[n].append(timed(runs[n], envs[n])[0])
    return warm, cold


def start_daemon(env: dict[str, str], space: list[str]) -> subprocess.Popen[bytes]:
    """``janitor daemon`` of this source, once ``janitor space`` answers from its report."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "janitor", "daemon", "--quiet"],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"janitor daemon exited with {proc.returncode}")
        done = subprocess.run(space, env=env, capture_output=True, text=True, check=False)
        if done.returncode == 0 and json.loads(done.stdout)["source"] == "daemon":
            time.sleep(3)  # its first sweep and report are done: nothing else runs
            return proc
        time.sleep(0.5)
    proc.terminate()
    raise SystemExit("janitor daemon did not answer within 60 s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--orphans", type=int, default=0, help="job folders two days old")
    ap.add_argument("--baseline", type=Path, default=None, help="another version's source")
    ap.add_argument("--no-daemon", action="store_true", help="skip the rows with a daemon")
    ap.add_argument("--where", type=Path, default=None)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="janitor-bench-space-", dir=args.where))
    try:
        print(f"building {args.files:,} files in {root} ...", file=sys.stderr)
        env = build(root, args.files, args.orphans)
        # Out of any source tree: ``python -m janitor`` puts the working folder first on
        # sys.path, and a janitor package there would run instead of the one on PYTHONPATH.
        os.chdir(root)
        where = folders(env)
        files, dirs = count(where)
        runs: dict[str, list[str]] = {}
        envs: dict[str, dict[str, str]] = {}
        cmd, extra = janitor_cmd(SOURCE)
        native_dir = root / "native"
        ours = {**env, **extra, "JANITOR_NATIVE_DIR": str(native_dir)}
        runs["janitor space"], envs["janitor space"] = cmd, ours
        runs["Python walk"], envs["Python walk"] = cmd, {**ours, "JANITOR_NATIVE": "0"}
        if args.baseline is not None:
            cmd, extra = janitor_cmd(args.baseline)
            runs["baseline"], envs["baseline"] = cmd, {**env, **extra}
        runs["du -sxc"], envs["du -sxc"] = ["du", "-sxc", *where], env
        names = list(runs)
        outputs = {n: timed(runs[n], envs[n])[1] for n in names}  # warms the page cache too
        report = json.loads(outputs["janitor space"])
        assert report["source"] == "walk", report["source"]
        rows = report["volumes"][0]["rows"]
        built = sorted(native_dir.glob("sizewalk-src-*"))
        walkers = {
            "janitor space": "compiled (C, threads)" if built else "Python (no build: see doctor)",
            "Python walk": "Python (processes)",
            "baseline": "as that version has it",
            "du -sxc": "-",
        }
        python_rows = json.loads(outputs["Python walk"])["volumes"][0]["rows"]
        same = [(r["name"], r["bytes"], r["frees"]) for r in rows[:-1]] == [
            (r["name"], r["bytes"], r["frees"]) for r in python_rows[:-1]
        ]
        print(f"rows of the compiled walker equal to the Python walk's: {same}", file=sys.stderr)
        if "baseline" in outputs:
            theirs = json.loads(outputs["baseline"])["volumes"][0]["rows"]
            same = [(r["name"], r["bytes"], r["frees"]) for r in rows[:-1]] == [
                (r["name"], r["bytes"], r["frees"]) for r in theirs[:-1]
            ]
            print(f"rows equal to the baseline's: {same}", file=sys.stderr)
            if "source" in json.loads(outputs["baseline"]):
                print("note: the baseline reports a source: another version?", file=sys.stderr)
        free_before = cores_free()
        results = [("measured now", *measure(runs, envs, args.repeat))]
        free_after = cores_free()
        if not args.no_daemon:
            daemon = start_daemon(ours, runs["janitor space"])
            try:
                pair = {n: runs[n] for n in ("janitor space", "du -sxc")}
                results.append(("a daemon's report", *measure(pair, envs, args.repeat)))
            finally:
                daemon.terminate()
                daemon.wait(30)
        if not can_drop_caches():
            print("cold-cache rows skipped: needs root to drop the page cache", file=sys.stderr)
        title = (
            f"janitor space vs du -sx: {files:,} files and {dirs:,} folders in {len(where)} "
            f"folders, {args.orphans} old job folders (median of {args.repeat})"
        )
        table = Table(title=title)
        for col in ("measurement", *names, "ratio to du", "target", "verdict"):
            table.add_column(col)
        table.add_row("walker", *(walkers[n] for n in names), "-", "-", "info")
        for how, warm, cold in results:
            for label, got in (("warm cache", warm), ("cold cache (drop_caches)", cold)):
                if not got["du -sxc"]:
                    continue
                med = {n: statistics.median(got[n]) for n in got}
                du = med["du -sxc"]
                ratios = ", ".join(f"{med[n] / du:.2f}x" for n in got if n != "du -sxc")
                table.add_row(
                    f"{how}, {label}",
                    *(f"{med[n] * 1000:.0f} ms" if n in med else "-" for n in names),
                    ratios,
                    "< 1.0x du",
                    "meets" if med["janitor space"] < du else "MISSES",
                )
        pass_s = timed([sys.executable, "-c", "pass"], env)[0]
        table.add_row(
            "python -c pass (start-up floor)",
            f"{pass_s * 1000:.0f} ms",
            *("-" for _ in names[1:]),
            "-",
            "-",
            "info",
        )
        Console(width=160).print(table)
        print(
            f"cores free for this run (of {os.cpu_count()}): {free_before:.2f} before the "
            f"'measured now' rows, {free_after:.2f} after"
        )
        for how, warm, cold in results:
            for label, got in (("warm", warm), ("cold", cold)):
                if got["du -sxc"]:
                    print(
                        f"{how}, {label} runs (s): "
                        + "; ".join(f"{n} {[round(x, 3) for x in got[n]]}" for n in got)
                    )
        print("rows: " + ", ".join(f"{r['name']} {r['bytes']} (frees {r['frees']})" for r in rows))
    finally:
        os.chdir(HERE)
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
