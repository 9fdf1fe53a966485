#!/usr/bin/env python3
"""`janitor space` beside `du -sx` over the same folders: prints one table, exits 0 (not a test).

In a fresh work folder (``--where``, default under /tmp) it builds a home as batchalign3 fills
one: a media cache of ``--files`` WAV-named files, TMPDIR with job folders (``.tmp*/fa_v2``)
and other programs' files, ``~/.batchalign3`` with logs and staged jobs, a Hugging Face hub and
Stanza resources. Then, interleaved, ``--repeat`` times each:

* ``janitor space --json`` with the shipped policy (every tree walked once by the dry-run
  sweep's scan, what it would free planned, the unmanaged folders walked in parallel);
* ``du -sx`` over the same folders (the tree roots and the pipeline's other folders), the
  baseline: it only adds sizes, and says nothing of what a sweep frees.

Both are whole commands (their start-up included), each the median of ``--repeat`` runs, with
the page cache warm (each tree read once before) and, as root, cold (``drop_caches`` before
each run: what a first "why is my disk full" meets). Target
(issue 23, item 5): ``janitor space`` faster than ``du`` over the same folders.

    python benchmarks/bench_space.py                 # 100,000 files, 5 runs each
    python benchmarks/bench_space.py --files 300000 --repeat 3
"""

from __future__ import annotations

import argparse
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
JANITOR = Path(sys.executable).parent / "janitor"


def build(root: Path, files: int) -> dict[str, str]:
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
    return env


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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--where", type=Path, default=None)
    args = ap.parse_args()
    if not JANITOR.exists():
        raise SystemExit(f"{JANITOR} not found: run with the venv's python")
    root = Path(tempfile.mkdtemp(prefix="janitor-bench-space-", dir=args.where))
    try:
        print(f"building {args.files:,} files in {root} ...", file=sys.stderr)
        env = build(root, args.files)
        du = ["du", "-sxc", *folders(env)]
        space = [str(JANITOR), "space", "--json"]
        timed(du, env)  # warm the page cache for both
        _, out = timed(space, env)
        rows = json.loads(out)["volumes"][0]["rows"]
        ours: list[float] = []
        theirs: list[float] = []
        for _ in range(args.repeat):
            ours.append(timed(space, env)[0])
            theirs.append(timed(du, env)[0])
        a, b = statistics.median(ours), statistics.median(theirs)
        cold: list[tuple[float, float]] = []
        if can_drop_caches():
            for _ in range(args.repeat):
                drop_caches()
                x = timed(space, env)[0]
                drop_caches()
                cold.append((x, timed(du, env)[0]))
        table = Table(
            title=f"janitor space vs du -sx, {args.files:,} files (median of {args.repeat})"
        )
        for col in ("measurement", "janitor space", "du -sxc", "ratio", "target", "verdict"):
            table.add_column(col)
        table.add_row(
            "whole command, warm cache",
            f"{a * 1000:.0f} ms",
            f"{b * 1000:.0f} ms",
            f"{a / b:.2f}x",
            "< 1.0x du",
            "meets" if a < b else "MISSES",
        )
        if cold:
            ca = statistics.median(c[0] for c in cold)
            cb = statistics.median(c[1] for c in cold)
            table.add_row(
                "whole command, cold cache (drop_caches)",
                f"{ca * 1000:.0f} ms",
                f"{cb * 1000:.0f} ms",
                f"{ca / cb:.2f}x",
                "< 1.0x du",
                "meets" if ca < cb else "MISSES",
            )
        else:
            print("cold-cache row skipped: needs root to drop the page cache", file=sys.stderr)
        table.add_row(
            "python -c pass (start-up floor)",
            f"{timed([sys.executable, '-c', 'pass'], env)[0] * 1000:.0f} ms",
            "-",
            "-",
            "-",
            "info",
        )
        Console().print(table)
        print(
            f"runs (s): janitor space {[round(x, 3) for x in ours]}, "
            f"du {[round(x, 3) for x in theirs]}"
        )
        print("rows: " + ", ".join(f"{r['name']} {r['bytes']}" for r in rows[:6]))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
