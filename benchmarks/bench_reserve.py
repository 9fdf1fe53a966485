#!/usr/bin/env python3
"""Reservation and CLI benchmark for space-janitor: prints one table, exits 0 (not a timed test).

Measures, in one run on an isolated, throw-away state dir and policy:

* reserve+release pairs through the Python API in one process: pairs/s, p50/p99 of a pair
  (and of reserve and release alone), beside a floor: two bare SQLite write transactions on a
  ledger-like file with the same pragmas;
* the same with N processes (default 8) hammering one ledger at once: aggregate pairs/s and
  p50/p99 of a pair across all of them;
* wall time of ``janitor reserve t 1M --ttl 1m``, ``janitor release ID``, ``janitor status`` and
  ``janitor --help`` beside ``python -c pass`` (the same interpreter), median of several runs.

Targets (issue 2, item 10, for a 2-core machine): >= 2,000 pairs/s in one process; p99 <= 10 ms
with 8 processes; each CLI command under 0.35 s.

    python benchmarks/bench_reserve.py            # full run (~1 min on 2 cores)
    python benchmarks/bench_reserve.py --quick    # fewer iterations (~15 s)

Nothing outside a temporary directory is read or written: JANITOR_STATE_DIR, JANITOR_POLICY,
JANITOR_CONFIG, JANITOR_RUNTIME_DIR and JANITOR_LOG_DIR all point into it, for this process, its
worker processes and the ``janitor`` subprocesses.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from common import Row, ms, percentile, verdict  # beside this script

TARGET_PAIRS_PER_S = 2000.0
TARGET_P99_MULTI_S = 0.010
TARGET_CLI_S = 0.35
#: Live reservations for the `janitor status` rows that show how it scales (issue 22, item 7).
MANY_RESERVATIONS = 5000

_ENV_KEYS = (
    "JANITOR_STATE_DIR",
    "JANITOR_POLICY",
    "JANITOR_CONFIG",
    "JANITOR_RUNTIME_DIR",
    "JANITOR_LOG_DIR",
)


# -- isolation ---------------------------------------------------------------------------------


def make_sandbox(root: Path) -> dict[str, str]:
    """A tree folder, a minimal policy, an empty config and a state dir under ``root``.

    Returns the JANITOR_* variables that point at them (also set in os.environ).
    """
    tree = root / "tree"
    tree.mkdir()
    policy = root / "policy.toml"
    policy.write_text(
        '[volume]\nfloor = "4MiB"\n\n'
        f'[trees.t]\nrole = "cache"\npath = {json.dumps(str(tree))}\nquota = "10MiB"\n'
    )
    config = root / "config.toml"
    config.write_text("")  # named explicitly, so the user's config.toml is never read
    env = {
        "JANITOR_STATE_DIR": str(root / "state"),
        "JANITOR_POLICY": str(policy),
        "JANITOR_CONFIG": str(config),
        "JANITOR_RUNTIME_DIR": str(root / "runtime"),
        "JANITOR_LOG_DIR": str(root / "log"),
    }
    os.environ.update(env)
    return env


def _check_isolated(root: Path) -> None:
    for key in _ENV_KEYS:
        value = os.environ.get(key, "")
        if not value.startswith(str(root)):
            raise SystemExit(f"bench: refusing to run, {key}={value!r} is not inside {root}")


# -- statistics --------------------------------------------------------------------------------


# -- (a) one process ---------------------------------------------------------------------------


def _pairs(jan: Any, n: int) -> tuple[list[float], list[float], list[float], float]:
    """n reserve+release pairs; per-pair, per-reserve, per-release seconds and the total."""
    clock = time.perf_counter
    pair, res, rel = [], [], []
    t_start = clock()
    for _ in range(n):
        t0 = clock()
        r = jan.reserve("t", 1 << 20)
        t1 = clock()
        r.release()
        t2 = clock()
        pair.append(t2 - t0)
        res.append(t1 - t0)
        rel.append(t2 - t1)
    return pair, res, rel, clock() - t_start


def bench_single(n: int, warmup: int) -> dict[str, float]:
    from janitor import Janitor

    jan = Janitor.from_settings()
    _pairs(jan, warmup)
    before = _usage()
    pair, res, rel, total = _pairs(jan, n)
    cpu = _usage()[0] - before[0]
    pair.sort()
    res.sort()
    rel.sort()
    jan.ledger.close()
    return {
        "pairs": n,
        "pairs_per_s": n / total,
        "p50": percentile(pair, 50),
        "p99": percentile(pair, 99),
        "reserve_p50": percentile(res, 50),
        "release_p50": percentile(rel, 50),
        "cpu_per_pair": cpu / n,
    }


def bench_sqlite_floor(root: Path, n: int) -> float:
    """Pairs/s of two bare write transactions (INSERT, then UPDATE) on a WAL file, no Python API.

    The same pragmas as janitor/ledger.py, on a separate file: the most a pair could reach
    through SQLite from Python on this machine.
    """
    conn = sqlite3.connect(root / "floor.sqlite3", isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("CREATE TABLE r (id INTEGER PRIMARY KEY, state TEXT, ended REAL)")

    def one(i: int) -> None:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO r (id, state) VALUES (?, 'live')", (i,))
        conn.execute("COMMIT")
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("UPDATE r SET state = 'released', ended = ? WHERE id = ?", (time.time(), i))
        conn.execute("COMMIT")

    for i in range(200):
        one(-1 - i)
    t0 = time.perf_counter()
    for i in range(n):
        one(i)
    elapsed = time.perf_counter() - t0
    conn.close()
    return n / elapsed


# -- (b) many processes ------------------------------------------------------------------------


def _usage() -> tuple[float, int, int]:
    """(CPU seconds, voluntary, involuntary context switches) of this process so far."""
    try:
        import resource
    except ImportError:  # not POSIX
        return 0.0, 0, 0
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime, ru.ru_nvcsw, ru.ru_nivcsw


def _worker(n: int, warmup: int, barrier: Any, out: Any) -> None:
    from janitor import Janitor

    jan = Janitor.from_settings()
    _pairs(jan, warmup)
    barrier.wait()
    before = _usage()
    start = time.perf_counter()  # CLOCK_MONOTONIC: comparable across processes on Linux/macOS
    pair, _, _, _ = _pairs(jan, n)
    end = time.perf_counter()
    after = _usage()
    jan.ledger.close()
    out.put((start, end, pair, tuple(a - b for a, b in zip(after, before, strict=True))))


def _spin(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def _cpu_worker(n: int, op_s: float, barrier: Any, out: Any) -> None:
    _spin(0.01)
    barrier.wait()
    clock = time.perf_counter
    lat = []
    start = clock()
    for _ in range(n):
        t0 = clock()
        _spin(op_s)
        lat.append(clock() - t0)
    out.put((start, clock(), lat))


def _run_workers(target: Any, procs: int, args: tuple[Any, ...]) -> list[Any]:
    ctx = mp.get_context("spawn")  # each worker imports janitor afresh, like a real worker
    barrier = ctx.Barrier(procs)
    out = ctx.Queue()
    workers = [ctx.Process(target=target, args=(*args, barrier, out)) for _ in range(procs)]
    for w in workers:
        w.start()
    results = [out.get(timeout=600) for _ in workers]
    for w in workers:
        w.join()
        if w.exitcode != 0:
            raise SystemExit(f"bench: a worker exited with {w.exitcode}")
    return results


def bench_scheduler_floor(procs: int, n: int, op_s: float) -> dict[str, float]:
    """p99 of a pure-CPU op as long as one pair, in ``procs`` processes: no ledger, no lock.

    With more processes than cores, a process is preempted now and then mid-op; this is the
    tail the scheduler alone adds, the least the ledger's p99 can be on this machine.
    """
    results = _run_workers(_cpu_worker, procs, (n, op_s))
    lat = sorted(x for _, _, lats in results for x in lats)
    return {"op": op_s, "p50": percentile(lat, 50), "p99": percentile(lat, 99)}


def bench_multi(procs: int, n: int, warmup: int) -> dict[str, float]:
    results = _run_workers(_worker, procs, (n, warmup))
    starts, ends, lats, usage = zip(*results, strict=True)
    wall = max(ends) - min(starts)
    all_lat = sorted(x for lat in lats for x in lat)
    pairs = procs * n
    return {
        "procs": procs,
        "pairs": pairs,
        "pairs_per_s": pairs / wall,
        "p50": percentile(all_lat, 50),
        "p99": percentile(all_lat, 99),
        "max": all_lat[-1],
        # What each pair cost the machine: with fewer cores than writers, CPU and hand-offs
        # (context switches) are what bound the queue's pace.
        "cpu_per_pair": sum(u[0] for u in usage) / pairs,
        "vcsw_per_pair": sum(u[1] for u in usage) / pairs,
        "ivcsw_per_pair": sum(u[2] for u in usage) / pairs,
    }


# -- (c) the CLI -------------------------------------------------------------------------------


def _janitor_cmd() -> list[str]:
    beside = Path(sys.executable).parent / "janitor"
    if beside.exists():
        return [str(beside)]
    found = shutil.which("janitor")
    return [found] if found else [sys.executable, "-m", "janitor"]


def _children_cpu() -> float:
    try:
        import resource
    except ImportError:  # not POSIX
        return float("nan")
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _cli_env() -> dict[str, str]:
    """The environment of the timed commands: this one, with bytecode caching allowed.

    An installed wheel is byte-compiled by pip; an editable install under
    PYTHONDONTWRITEBYTECODE (set on some dev machines and CI images) would compile every
    module of janitor on every run, ~50 ms that no user pays. The untimed first round writes
    the cache.
    """
    env = os.environ.copy()
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _run(cmd: list[str]) -> tuple[tuple[float, float], subprocess.CompletedProcess[str]]:
    """(wall, cpu) seconds of one run of ``cmd``, and its result; exits if it failed."""
    c0 = _children_cpu()
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_cli_env())
    elapsed = time.perf_counter() - t0, _children_cpu() - c0
    if proc.returncode != 0:
        raise SystemExit(f"bench: {' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr.strip()}")
    return elapsed, proc


def bench_cli(runs: int) -> dict[str, dict[str, float]]:
    """Median and min wall time (and median CPU time) of each command, runs interleaved."""
    jan = _janitor_cmd()
    times: dict[str, list[tuple[float, float]]] = {
        "python -c pass": [],
        "janitor --help": [],
        "janitor reserve t 1M --ttl 1m": [],
        "janitor release ID": [],
        "janitor status": [],
    }
    for i in range(runs + 1):  # the first round warms the page cache and .pyc files, untimed
        samples = {
            "python -c pass": _run([sys.executable, "-c", "pass"])[0],
            "janitor --help": _run([*jan, "--help"])[0],
        }
        t, proc = _run([*jan, "reserve", "t", "1M", "--ttl", "1m"])
        samples["janitor reserve t 1M --ttl 1m"] = t
        rid = proc.stdout.strip().splitlines()[-1]
        samples["janitor release ID"] = _run([*jan, "release", rid])[0]
        samples["janitor status"] = _run([*jan, "status"])[0]
        if i:
            for key, value in samples.items():
                times[key].append(value)
    # The same, with thousands of live reservations: the table shows the few that matter and
    # counts the rest; --json lists every one.
    many = f"janitor status, {MANY_RESERVATIONS} live reservations"
    many_json = f"janitor status --json, {MANY_RESERVATIONS} live reservations"
    times[many], times[many_json] = [], []
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    try:
        from janitor import Janitor

        reserver = Janitor.from_settings()
        for k in range(MANY_RESERVATIONS):
            reserver.reserve("t", 1024, owner_pid=holder.pid, ttl="1h", job=f"job-{k}")
        reserver.ledger.close()
        for i in range(runs + 1):
            t_many = _run([*jan, "status"])[0]
            t_json = _run([*jan, "status", "--json"])[0]
            if i:
                times[many].append(t_many)
                times[many_json].append(t_json)
    finally:
        holder.kill()
        holder.wait()
    return {
        k: {
            "median": statistics.median(w for w, _ in v),
            "min": min(w for w, _ in v),
            "cpu_median": statistics.median(c for _, c in v),
            "runs": len(v),
        }
        for k, v in times.items()
    }


# -- report ------------------------------------------------------------------------------------


@dataclass
class Report:
    machine: dict[str, Any] = field(default_factory=dict)
    results: dict[str, Any] = field(default_factory=dict)
    rows: list[Row] = field(default_factory=list)

    @property
    def missed(self) -> list[str]:
        return [r.measurement for r in self.rows if r.verdict == "MISSES"]


def machine_facts() -> dict[str, Any]:
    facts: dict[str, Any] = {
        "nproc": os.cpu_count(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "executable": sys.executable,
        "sqlite": sqlite3.sqlite_version,
        "platform": platform.platform(),
    }
    if hasattr(os, "sched_getaffinity"):
        facts["usable_cpus"] = len(os.sched_getaffinity(0))
    if hasattr(os, "getloadavg"):
        facts["loadavg_1m_at_start"] = round(os.getloadavg()[0], 2)
    busy = _busy_share()
    if busy is not None:
        facts["cpu_busy_before"] = round(busy, 3)
    return facts


def _busy_share(seconds: float = 1.0) -> float | None:
    """The share of all CPUs busy during ``seconds`` before the run (Linux), else None.

    Unlike the load average, which lags by a minute and so counts the run's own 8 workers
    (and the previous run's), this sees only what else is running now.
    """

    def sample() -> tuple[int, int]:
        with open("/proc/stat") as f:
            ticks = [int(x) for x in f.readline().split()[1:]]
        return sum(ticks), ticks[3] + ticks[4]  # all, idle + iowait

    try:
        total0, idle0 = sample()
        time.sleep(seconds)
        total1, idle1 = sample()
    except (OSError, ValueError, IndexError):
        return None
    return 1.0 - (idle1 - idle0) / max(1, total1 - total0)


def build_rows(rep: Report) -> None:
    r = rep.results
    rows = rep.rows
    if "single" in r:
        s = r["single"]
        floor = r.get("sqlite_floor_pairs_per_s")
        rows.append(
            Row(
                f"1 proc: reserve+release pairs/s ({s['pairs']} pairs)",
                f"{s['pairs_per_s']:,.0f}/s",
                f"{floor:,.0f}/s bare SQLite" if floor else "-",
                f"{s['pairs_per_s'] / floor:.2f}x" if floor else "-",
                f">= {TARGET_PAIRS_PER_S:,.0f}/s",
                verdict(s["pairs_per_s"] >= TARGET_PAIRS_PER_S),
            )
        )
        rows.append(Row("1 proc: pair p50", ms(s["p50"])))
        rows.append(Row("1 proc: pair p99", ms(s["p99"])))
        rows.append(
            Row(
                "1 proc: reserve p50 / release p50",
                f"{ms(s['reserve_p50'])} / {ms(s['release_p50'])}",
            )
        )
    if "multi" in r:
        m = r["multi"]
        single = r.get("single")
        rows.append(
            Row(
                f"{m['procs']} procs: aggregate pairs/s ({m['pairs']} pairs)",
                f"{m['pairs_per_s']:,.0f}/s",
                f"{single['pairs_per_s']:,.0f}/s 1 proc" if single else "-",
                f"{m['pairs_per_s'] / single['pairs_per_s']:.2f}x" if single else "-",
            )
        )
        rows.append(
            Row(
                f"{m['procs']} procs: pair p50",
                ms(m["p50"]),
                ms(single["p50"]) + " 1 proc" if single else "-",
                f"{m['p50'] / single['p50']:.1f}x" if single else "-",
            )
        )
        rows.append(
            Row(
                f"{m['procs']} procs: pair p99",
                ms(m["p99"]),
                ms(single["p99"]) + " 1 proc" if single else "-",
                f"{m['p99'] / TARGET_P99_MULTI_S:.2f}x of target",
                f"<= {ms(TARGET_P99_MULTI_S)}",
                verdict(m["p99"] <= TARGET_P99_MULTI_S),
            )
        )
        rows.append(Row(f"{m['procs']} procs: pair max", ms(m["max"])))
        if "cpu_per_pair" in m:
            single_cpu = single and single.get("cpu_per_pair")
            rows.append(
                Row(
                    f"{m['procs']} procs: CPU per pair; context switches per pair (vol/invol)",
                    f"{m['cpu_per_pair'] * 1e6:,.0f} us; "
                    f"{m['vcsw_per_pair']:.1f} / {m['ivcsw_per_pair']:.2f}",
                    f"{single_cpu * 1e6:,.0f} us 1 proc" if single_cpu else "-",
                    f"{m['cpu_per_pair'] / single_cpu:.1f}x" if single_cpu else "-",
                )
            )
        fl = r.get("sched_floor")
        if fl:
            rows.append(
                Row(
                    f"{m['procs']} procs: p99 of {ms(fl['op'])} pure CPU, no ledger",
                    ms(fl["p99"]),
                    "-",
                    f"{m['p99'] / fl['p99']:.1f}x (ledger/floor)",
                    "(scheduler floor)",
                )
            )
    if "cli" in r:
        c = r["cli"]
        base = c["python -c pass"]["median"]
        for name, t in c.items():
            med = t["median"]
            row = Row(
                f"CLI: {name}",
                f"{med:.3f} s (min {t['min']:.3f}, cpu {t['cpu_median']:.3f})",
                f"{base:.3f} s",
                f"{med / base:.1f}x",
            )
            if name.startswith("janitor"):
                row.target = f"< {TARGET_CLI_S:.2f} s"
                row.verdict = verdict(med < TARGET_CLI_S)
            rows.append(row)


def print_table(rep: Report) -> None:
    from rich.console import Console
    from rich.table import Table

    # Wide enough for one line a row even when piped (rich falls back to 80 columns then).
    console = Console(width=max(160, shutil.get_terminal_size((160, 24)).columns))
    m = rep.machine
    console.print(
        f"machine: nproc={m['nproc']}"
        + (f" (usable {m['usable_cpus']})" if "usable_cpus" in m else "")
        + (f", load {m['loadavg_1m_at_start']}" if "loadavg_1m_at_start" in m else "")
        + (f", CPUs busy before {m['cpu_busy_before']:.0%}" if "cpu_busy_before" in m else "")
        + f", {m['python']}, SQLite {m['sqlite']}, {m['platform']}"
    )
    runs = rep.results.get("cli", {}).get("python -c pass", {}).get("runs")
    caption = (
        f"CLI rows: median wall time of {runs} runs each, interleaved; baseline is "
        "`python -c pass` on the same interpreter in the same run."
        if runs
        else None
    )
    table = Table(
        title="space-janitor benchmark",
        title_justify="left",
        caption=caption,
        caption_justify="left",
    )
    table.add_column("measurement")
    table.add_column("value", justify="right")
    table.add_column("baseline", justify="right")
    table.add_column("ratio", justify="right")
    table.add_column("target", justify="right")
    table.add_column("verdict")
    for row in rep.rows:
        style = {"meets": "green", "MISSES": "bold red"}.get(row.verdict)
        verdict = f"[{style}]{row.verdict}[/]" if style else row.verdict
        table.add_row(row.measurement, row.value, row.baseline, row.ratio, row.target, verdict)
    console.print(table)
    notes = []
    busy = m.get("cpu_busy_before")
    if busy is None and m.get("nproc"):  # no /proc/stat: the load average, lagging as it does
        busy = m.get("loadavg_1m_at_start", 0) / m["nproc"]
    if busy is not None and busy > 0.25:
        notes.append(
            f"other work kept {busy:.0%} of the CPUs busy just before this run: latencies and "
            "CLI times are inflated; rerun on a quiet machine"
        )
    for note in notes:
        console.print(f"[yellow]note[/]: {note}")
    if rep.missed:
        console.print(f"[bold red]{len(rep.missed)} target(s) missed[/]: " + "; ".join(rep.missed))
    else:
        console.print("[green]all targets met[/]")


# -- main --------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer iterations (a smoke run)")
    ap.add_argument("--pairs", type=int, help="pairs in the one-process run (default 3000)")
    ap.add_argument("--procs", type=int, default=8, help="processes in the parallel run")
    ap.add_argument("--pairs-per-proc", type=int, help="pairs per process (default 500)")
    ap.add_argument("--cli-runs", type=int, help="timed runs of each command (default 10)")
    ap.add_argument(
        "--only",
        choices=("single", "multi", "cli"),
        action="append",
        help="run only these parts (repeatable)",
    )
    ap.add_argument("--json", metavar="FILE", help="also write the raw numbers as JSON")
    ap.add_argument("--strict", action="store_true", help="exit 1 if a target is missed")
    args = ap.parse_args(argv)

    pairs = args.pairs or (500 if args.quick else 3000)
    per_proc = args.pairs_per_proc or (100 if args.quick else 500)
    cli_runs = args.cli_runs or (3 if args.quick else 10)
    warmup = 50 if args.quick else 200
    parts = set(args.only or ("single", "multi", "cli"))

    rep = Report(machine=machine_facts())
    with tempfile.TemporaryDirectory(prefix="janitor-bench-") as tmp:
        root = Path(tmp)
        rep.machine["sandbox"] = tmp
        make_sandbox(root)
        _check_isolated(root)
        if "single" in parts:
            rep.results["single"] = bench_single(pairs, warmup)
            rep.results["sqlite_floor_pairs_per_s"] = bench_sqlite_floor(root, pairs)
        if "multi" in parts:
            rep.results["multi"] = bench_multi(args.procs, per_proc, warmup // 4)
            op = rep.results.get("single", {}).get("p50", 0.0004)
            rep.results["sched_floor"] = bench_scheduler_floor(args.procs, per_proc, op)
        if "cli" in parts:
            rep.results["cli"] = bench_cli(cli_runs)
    build_rows(rep)
    print_table(rep)
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "machine": rep.machine,
                    "results": rep.results,
                    "rows": [asdict(r) for r in rep.rows],
                },
                indent=2,
            )
            + "\n"
        )
    return 1 if args.strict and rep.missed else 0


if __name__ == "__main__":
    sys.exit(main())
