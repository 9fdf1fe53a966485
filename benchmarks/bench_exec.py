#!/usr/bin/env python3
"""What watching costs: CPU of `janitor exec` while its command runs, at the default poll.

Runs ``janitor exec t 1M --path OUT -- sleep SECONDS`` in a sandbox (its own policy, state and
config folders; the user's ledger is never touched) and samples the CPU time of the janitor
process itself (not its child) with psutil once start-up is over and again just before the
command ends, so start-up and import costs are left out. Baseline in the same run: a plain
``sleep`` (zero) and ``python -c pass``'s start-up. Target (issue 5, item 1): watching costs
under 2 % of a core at the default poll (200 ms).

    python benchmarks/bench_exec.py [--seconds 10] [--poll 200ms] [--json FILE] [--strict]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

TARGET_PCT = 2.0


def sandbox(root: Path) -> dict[str, str]:
    tree = root / "tree"
    tree.mkdir()
    policy = root / "policy.toml"
    policy.write_text(
        '[volume]\nfloor = "4MiB"\n\n'
        f'[trees.t]\nrole = "cache"\npath = {json.dumps(str(tree))}\nquota = "1GiB"\n'
    )
    (root / "config.toml").write_text("")
    env = dict(os.environ)
    env.update(
        JANITOR_STATE_DIR=str(root / "state"),
        JANITOR_POLICY=str(policy),
        JANITOR_CONFIG=str(root / "config.toml"),
        JANITOR_RUNTIME_DIR=str(root / "runtime"),
        JANITOR_LOG_DIR=str(root / "log"),
    )
    return env


def janitor_cmd() -> list[str]:
    exe = Path(sys.executable).with_name("janitor")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "janitor"]


def measure(env: dict[str, str], root: Path, seconds: float, poll: str) -> dict[str, float]:
    out = root / "tree" / "out.bin"
    cmd = [*janitor_cmd(), "exec", "t", "1M", "--path", str(out), "--poll", poll, "--"]
    proc = subprocess.Popen([*cmd, "sleep", str(seconds)], env=env)
    p = psutil.Process(proc.pid)
    time.sleep(min(2.0, seconds / 4))  # start-up (imports, the reservation) is over
    c0, t0 = p.cpu_times(), time.monotonic()
    time.sleep(seconds - min(2.0, seconds / 4) - 0.5)
    c1, t1 = p.cpu_times(), time.monotonic()
    rc = proc.wait(30)
    if rc != 0:
        raise SystemExit(f"bench: janitor exec exited {rc}")
    cpu = (c1.user - c0.user) + (c1.system - c0.system)
    return {"window_s": t1 - t0, "cpu_s": cpu, "pct": 100 * cpu / (t1 - t0)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=10.0, help="how long the command runs")
    ap.add_argument("--poll", default="200ms", help="janitor exec --poll (default: the default)")
    ap.add_argument("--json", type=Path, default=None, help="also write the numbers here")
    ap.add_argument("--strict", action="store_true", help="exit 1 if the target is missed")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-exec-") as tmp:
        root = Path(tmp)
        env = sandbox(root)
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        pass_s = time.perf_counter() - t
        res = measure(env, root, args.seconds, args.poll)
    ok = res["pct"] < TARGET_PCT
    load = os.getloadavg()[0]
    print(f"machine: nproc={os.cpu_count()}, load {load:.2f}, CPython {sys.version.split()[0]}")
    rows = [
        ("measurement", "value", "baseline", "target", "verdict"),
        (
            f"janitor exec watching, poll {args.poll}, CPU over {res['window_s']:.1f} s",
            f"{res['pct']:.2f} % of a core ({res['cpu_s'] * 1000:.0f} ms)",
            "-",
            f"< {TARGET_PCT:g} %",
            "meets" if ok else "MISSES",
        ),
        ("python -c pass (start-up, not in the window)", f"{pass_s:.3f} s", "-", "-", "-"),
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    for r in rows:
        print(" | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))
    if args.json:
        args.json.write_text(json.dumps({**res, "poll": args.poll, "load": load}, indent=2))
    return 1 if args.strict and not ok else 0


if __name__ == "__main__":
    sys.exit(main())
