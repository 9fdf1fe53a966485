"""``benchmarks/compare.py``: the table that says whether a change's numbers are within 10 % of
its base commit's, row by row."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from rich.console import Console

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "compare.py"


def _compare() -> ModuleType:
    spec = importlib.util.spec_from_file_location("janitor_bench_compare", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _sweep(ratios: dict[str, float]) -> dict[str, object]:
    """What ``bench_sweep --json`` writes: a table's rows, each named by its measurement."""
    return {"rows": [{"measurement": m, "cpu_ratio": r} for m, r in ratios.items()]}


def test_each_table_row_is_named_by_what_it_measures_and_judged_on_its_own() -> None:
    """Rows of one table share their numbers' names; the comparison must say which row missed.
    A row's name is written in brackets, which rich would read as a style tag and drop, leaving
    five rows called ``rows.cpu_ratio``."""
    compare = _compare()
    base = compare.flatten(_sweep({"a clean tree": 3.0, "a tree over quota": 2.0}))
    new = compare.flatten(_sweep({"a clean tree": 3.6, "a tree over quota": 2.0}))
    table, misses = compare.render("bench_sweep", {"baseline": [base], "new": [new]}, 10.0, False)
    console = Console(width=200, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(table)
    lines = console.export_text().splitlines()
    over = [line for line in lines if "rows[a clean tree].cpu_ratio" in line]
    same = [line for line in lines if "rows[a tree over quota].cpu_ratio" in line]
    assert len(over) == 1 and "+20.0 %" in over[0] and "NO" in over[0], lines
    assert len(same) == 1 and "yes" in same[0], lines
    assert misses.worse == 1 and misses.apart == 1


def test_a_rate_is_better_higher_and_a_time_or_a_wakeup_rate_lower() -> None:
    compare = _compare()
    assert compare.better("results.rpc.floor.per_s") == "higher"
    assert compare.better("results.rpc.http.pairs_per_s") == "higher"
    assert compare.better("results.idle.idle_wakeups_per_s") == "lower"
    assert compare.better("results.idle.socket_up_s") == "lower"
    assert compare.better("results.idle.threads") is None


def test_a_median_worse_by_noise_is_told_from_one_worse_in_every_run() -> None:
    """Three runs each: a number whose runs overlap the baseline's is worse by its median only;
    one whose every run is worse than every baseline run is apart."""
    compare = _compare()

    def runs(*values: float) -> list[dict[str, float]]:
        return [{"cli.status.median": v} for v in values]

    noisy = {"baseline": runs(1.0, 1.3, 1.0), "new": runs(1.2, 1.15, 0.95)}
    _, verdict = compare.render("noisy", noisy, 10.0, False)
    assert (verdict.worse, verdict.apart) == (1, 0)
    slower = {"baseline": runs(1.0, 1.05, 0.98), "new": runs(1.2, 1.15, 1.25)}
    _, verdict = compare.render("slower", slower, 10.0, False)
    assert (verdict.worse, verdict.apart) == (1, 1)
    faster = {"baseline": runs(1.0, 1.05, 0.98), "new": runs(0.8, 0.85, 0.9)}
    assert compare.render("faster", faster, 10.0, False)[1] == compare.Verdict(worse=0, apart=0)
