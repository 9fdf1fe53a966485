#!/usr/bin/env python3
"""Two versions of the janitor side by side: each benchmark run alternately from this source
tree and from a baseline commit's, in one session; prints one table per benchmark, exits 0
(not a test).

This VM's speed drifts by up to a factor of 2 within an hour, so numbers from different runs
cannot be compared; alternating the two versions run by run (the order swapped each round)
spreads the drift over both. Each benchmark runs as its own script from its own version's
source tree (``git archive REF``), with that tree first on ``PYTHONPATH``: each version is
measured by its own benchmark code, and the numbers both write with ``--json`` are compared
key by key (the median over the rounds; a list of numbers counts as its median). A key only one
version writes is shown with a dash. ``within`` says whether the new median is no more than
``--tolerance`` worse, for numbers where higher or lower is known to be better by their name
(``*_s``, ``*_ms``, ``p50``..., ``per_s``, ``rate``); other numbers (counts, sizes) are shown
for reference.

A number more than ``--tolerance`` worse by its median is also judged against the runs'
spread: ``apart`` says whether every run of the new version was worse than every run of the
baseline. This VM's drift moves even the baselines the benchmarks time beside the janitor
(``du``, ``find``, ``python -c pass``) by 10 to 15 % between runs, so a median alone misses
by noise. With n rounds, runs all apart by chance alone happen once in C(2n, n) (1 in 20 for
3 rounds, 1 in 70 for 4): the exact one-sided rank (Mann-Whitney) test at its smallest p, as
pyperf's "significant" is a test, not a threshold. The last line counts both.

    python benchmarks/compare.py --baseline 3ea629b                  # all four, 3 rounds
    python benchmarks/compare.py --baseline main~1 --only guard --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

HERE = Path(__file__).resolve().parent
SOURCE = HERE.parent

#: Each benchmark and the arguments that keep one run of it to a minute or two.
BENCHES: dict[str, list[str]] = {
    "reserve": ["--quick"],
    "sweep": ["--files", "50000", "--delete", "20000", "--repeat", "1"],
    "daemon": ["--quick"],
    "guard": ["--runs", "20", "--rounds", "2"],
}

_HIGHER = re.compile(r"(^|pairs_|files_|bytes_|mb_|units_)per_s$|(^|_)rate$|throughput")
_LOWER = re.compile(r"(^|_)(p\d+|median|mean|min|max)$|_(s|ms|us)$|^cpu|per_pair")


def export(ref: str, into: Path) -> Path:
    """The source tree of ``ref`` in ``into``, its bytecode compiled as an install has it."""
    archive = subprocess.run(
        ["git", "-C", str(SOURCE), "archive", ref], capture_output=True, check=True
    ).stdout
    into.mkdir(parents=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(into / "janitor")], check=True)
    return into


def flatten(value: Any, key: str = "") -> dict[str, float]:
    """Every number in a JSON value, by its path (``a.b``); a list of numbers as its median, a
    table's row by its ``measurement`` (``rows[cut, through the daemon]``)."""
    out: dict[str, float] = {}
    if isinstance(value, bool):
        return out
    if isinstance(value, (int, float)):
        out[key] = float(value)
    elif isinstance(value, dict):
        for k, v in value.items():
            out.update(flatten(v, f"{key}.{k}" if key else str(k)))
    elif isinstance(value, list):
        numbers = [v for v in value if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if numbers and len(numbers) == len(value):
            out[f"{key}[median]"] = float(statistics.median(numbers))
            return out
        for i, v in enumerate(value):
            # A table's rows by what they measure, not their place: a row added or removed in
            # one version leaves the others lined up.
            name = v.get("measurement", v.get("name")) if isinstance(v, dict) else None
            out.update(flatten(v, f"{key}[{name if isinstance(name, str) else i}]"))
    return out


def run_once(bench: str, source: Path, args: list[str], work: Path) -> dict[str, float]:
    """One run of ``bench`` from ``source``; the numbers it wrote."""
    out = work / f"{bench}-{source.name}-{time.monotonic_ns()}.json"
    env = {**os.environ, "PYTHONPATH": str(source)}
    script = source / "benchmarks" / f"bench_{bench}.py"
    done = subprocess.run(
        [sys.executable, str(script), *args, "--json", str(out)],
        cwd=work,  # not a source tree: `python -m` would put it first on sys.path
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0 or not out.exists():
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise SystemExit(f"bench_{bench} from {source} failed ({done.returncode}): {tail}")
    return flatten(json.loads(out.read_text()))


def better(key: str) -> str | None:
    """'lower' or 'higher' when the key's last part says which is better (a time, a
    percentile, CPU; a rate), else None (counts, sizes, times whose key names no unit)."""
    last = key.rsplit(".", 1)[-1].lower()
    if _HIGHER.search(last):
        return "higher"
    if _LOWER.search(last):
        return "lower"
    return None


def change(base: float, new: float, way: str | None, tolerance: float) -> tuple[str, bool | None]:
    """The change from base to new in percent, and whether it is within the tolerance."""
    if base == 0:
        return ("-", None) if new == 0 else ("new", None)
    pct = (new - base) / abs(base) * 100
    if way is None:
        return f"{pct:+.1f} %", None
    worse = pct if way == "lower" else -pct
    return f"{pct:+.1f} %", worse <= tolerance


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", required=True, help="the commit to compare with (a git ref)")
    ap.add_argument("--rounds", type=int, default=3, help="runs of each version (default 3)")
    ap.add_argument("--only", default=",".join(BENCHES), help="benchmarks, comma-separated")
    ap.add_argument("--tolerance", type=float, default=10.0, help="percent (default 10)")
    ap.add_argument("--all-keys", action="store_true", help="also keys of unknown direction")
    args = ap.parse_args()
    benches = [b.strip() for b in args.only.split(",") if b.strip()]
    unknown = [b for b in benches if b not in BENCHES]
    if unknown:
        raise SystemExit(f"unknown benchmark {unknown[0]!r}: choose from {', '.join(BENCHES)}")
    work = Path(tempfile.mkdtemp(prefix="janitor-compare-"))
    try:
        base = export(args.baseline, work / "baseline")
        new = SOURCE
        numbers: dict[str, dict[str, list[dict[str, float]]]] = {
            b: {"baseline": [], "new": []} for b in benches
        }
        for r in range(args.rounds):
            for bench in benches:
                order = [("baseline", base), ("new", new)]
                if r % 2:
                    order.reverse()
                for label, source in order:
                    print(f"round {r + 1}/{args.rounds}: bench_{bench} ({label})", file=sys.stderr)
                    numbers[bench][label].append(run_once(bench, source, BENCHES[bench], work))
        console = Console(width=150)
        misses = apart = 0
        for bench in benches:
            title = (f"bench_{bench}: baseline {args.baseline} vs this tree, "
                     f"median of {args.rounds} alternated runs")  # fmt: skip
            table, verdict = render(title, numbers[bench], args.tolerance, args.all_keys)
            console.print(table)
            misses += verdict.worse
            apart += verdict.apart
        print(
            f"{misses} number(s) more than {args.tolerance:g} % worse by the median; "
            f"{apart} of them with every run worse than every baseline run"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


@dataclass(frozen=True)
class Verdict:
    """How many numbers of a table are more than the tolerance worse by their medians, and how
    many of those also have every new run worse than every baseline run."""

    worse: int
    apart: int


def all_worse(base: list[float], new: list[float], way: str) -> bool:
    """Whether every run of ``new`` is worse than every run of ``base``."""
    return min(new) > max(base) if way == "lower" else max(new) < min(base)


def render(
    title: str, runs: dict[str, list[dict[str, float]]], tolerance: float, all_keys: bool
) -> tuple[Table, Verdict]:
    """One benchmark's table (a row per number, baseline and new medians side by side) and its
    verdict: how many numbers are more than ``tolerance`` percent worse, and how many of those
    are worse in every run (``apart``)."""
    table = Table(title=title)
    for col in ("number", "baseline", "new", "change", "better", "within", "apart"):
        table.add_column(col)
    misses = apart = 0
    for key in sorted({k for d in runs["baseline"] + runs["new"] for k in d}):
        way = better(key)
        if way is None and not all_keys:
            continue
        b = [d[key] for d in runs["baseline"] if key in d]
        n = [d[key] for d in runs["new"] if key in d]
        if not b or not n:
            table.add_row(Text(key), _fmt(b), _fmt(n), "-", way or "?", "-", "-")
            continue
        text, ok = change(statistics.median(b), statistics.median(n), way, tolerance)
        verdict = "-" if ok is None else ("yes" if ok else "NO")
        separated = "-"
        if ok is False and way is not None:
            misses += 1
            if all_worse(b, n, way):
                apart += 1
                separated = "YES"
            else:
                separated = "no"
        # Text, not a markup string: a row's name in brackets is not a rich tag
        table.add_row(Text(key), _fmt(b), _fmt(n), text, way or "?", verdict, separated)
    return table, Verdict(worse=misses, apart=apart)


def _fmt(values: list[float]) -> str:
    if not values:
        return "-"
    m = statistics.median(values)
    return f"{m:.4g}"


if __name__ == "__main__":
    sys.exit(main())
