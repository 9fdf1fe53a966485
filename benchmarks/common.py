"""What the benchmark scripts share: the nearest-rank percentile and the rows of their tables.

Imported by the scripts beside it (``python benchmarks/bench_x.py`` puts this folder on
``sys.path``).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Row", "ms", "percentile", "verdict"]


def percentile(sorted_values: list[float], q: float) -> float:
    """The q-th percentile (0..100) of already sorted values, nearest-rank."""
    if not sorted_values:
        return float("nan")
    k = max(0, min(len(sorted_values) - 1, round(q / 100 * len(sorted_values) + 0.5) - 1))
    return sorted_values[k]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


def verdict(ok: bool) -> str:
    return "meets" if ok else "MISSES"


@dataclass
class Row:
    """One line of a table: what was measured, beside its baseline and target."""

    measurement: str
    value: str
    baseline: str = "-"
    ratio: str = "-"
    target: str = "-"
    verdict: str = "-"  # meets / MISSES / - (informational)
