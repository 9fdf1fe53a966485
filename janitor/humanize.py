"""Sizes, durations and counts as the janitor prints them: ``1.5 GiB``, ``1 h 30 min``,
``22 h ago``, ``1 folder``.

The bottom of the package: it imports nothing of ours, so error messages (``janitor.errors``)
and the parsers (``janitor.sizes``, which re-exports these) can both use it.
"""

from __future__ import annotations

__all__ = ["format_ago", "format_duration", "format_size", "plural"]


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


#: The units of a printed duration, largest first, with their seconds.
_UNITS = (("d", 86400), ("h", 3600), ("min", 60), ("s", 1))


def format_duration(seconds: float) -> str:
    """A duration as people read it, coarse: ``5400`` -> ``"1 h 30 min"``, ``79201`` -> ``"22 h"``.

    The largest unit (d, h, min, s), and the next one too while the first counts less than
    ten: ``"2 d 3 h"``, ``"12 d"``, ``"3 min 20 s"``, ``"42 s"``; below a second, ``"250 ms"``.
    What is left out is dropped, never rounded up (an age never reads older than it is).
    :func:`janitor.sizes.parse_duration` reads every form back.
    """
    if seconds < 0:
        return "-" + format_duration(-seconds)
    if seconds == 0:
        return "0 s"
    if seconds < 1:
        return f"{max(1, int(seconds * 1000))} ms"
    s = int(seconds)
    for i, (unit, size) in enumerate(_UNITS):
        if s >= size or unit == "s":
            count, rest = divmod(s, size)
            text = f"{count} {unit}"
            if count < 10 and i + 1 < len(_UNITS):
                sub_unit, sub_size = _UNITS[i + 1]
                if rest // sub_size:
                    text += f" {rest // sub_size} {sub_unit}"
            return text
    raise AssertionError("unreachable")


def format_ago(seconds: float) -> str:
    """How long ago something happened, ``seconds`` before now: ``"22 h ago"``, ``"just now"``.

    Under a second, or in the future (a clock that moved back), is ``"just now"``.
    """
    return "just now" if seconds < 1 else f"{format_duration(seconds)} ago"


def plural(count: int, word: str, words: str | None = None) -> str:
    """``count`` and the word that goes with it: ``"1 folder"``, ``"2 folders"``, ``"0 folders"``.

    ``words`` is the plural when adding an ``s`` is wrong (``plural(n, "entry", "entries")``).
    """
    return f"{count} {word if count == 1 else words or word + 's'}"
