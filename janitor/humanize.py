"""Sizes and durations as the janitor prints them: ``1.5 GiB``, ``1h30m``.

The bottom of the package: it imports nothing of ours, so error messages (``janitor.errors``)
and the parsers (``janitor.sizes``, which re-exports these) can both use it.
"""

from __future__ import annotations

__all__ = ["format_duration", "format_size"]


def format_size(n: float) -> str:
    """``1610612736`` -> ``"1.5 GiB"``; exact bytes below 1 KiB; negative sizes keep their sign."""
    sign = "-" if n < 0 else ""
    n = abs(n)
    if n < 1024:
        return f"{sign}{int(n)} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        n /= 1024
        if n < 1024 or unit == "TiB":
            text = f"{n:.1f}".rstrip("0").rstrip(".")
            return f"{sign}{text} {unit}"
    raise AssertionError("unreachable")


def format_duration(seconds: float) -> str:
    """``5400`` -> ``"1h30m"``; ``42.5`` -> ``"42s"``; compact, for tables."""
    if seconds < 0:
        return "-" + format_duration(-seconds)
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    s = int(seconds)
    out = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if s >= size:
            out.append(f"{s // size}{unit}")
            s %= size
        if len(out) == 2:
            break
    return "".join(out) or "0s"
