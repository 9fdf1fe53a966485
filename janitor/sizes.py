"""Sizes and durations as people type them, and as the janitor prints them.

Sizes are 1024-based whatever the spelling, as the pipeline prints them: ``500M``, ``2G``,
``1.5GiB``, ``10MiB``, ``2048`` (bytes). Durations: ``90s``, ``30m``, ``2h``, ``7d``, ``1h30m``,
or plain seconds; what the janitor prints (``1 h 30 min``) reads back too.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

from janitor.errors import ConfigError
from janitor.humanize import format_duration, format_size

__all__ = [
    "MAX_DURATION_S",
    "MAX_SIZE",
    "format_duration",
    "format_size",
    "parse_duration",
    "parse_size",
]

#: The largest size the ledger can hold (SQLite INTEGER is 64-bit signed).
MAX_SIZE = 2**63 - 1
#: The longest duration taken anywhere (a TTL, an age, a wait): ten years. Past it a value is a
#: typo or a wish for "never", and gives expiries no clock can show.
MAX_DURATION_S = 10 * 365 * 86400

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1024,
    "m": 1024**2,
    "g": 1024**3,
    "t": 1024**4,
    "p": 1024**5,
}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?|\.\d+)\s*([kmgtp]?)(i?b?)\s*$", re.IGNORECASE)
_DURATION_UNITS = {
    "ms": 0.001, "s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, "w": 604800
}  # fmt: skip
_DURATION_RE = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|min|s|m|h|d|w)", re.IGNORECASE)


def parse_size(text: str | int, *, allow_zero: bool = False, what: str = "size") -> int:
    """Bytes from ``"1.5GiB"``, ``"500M"``, ``"2048"`` or an int; 1024-based.

    Raises ConfigError with a one-line reason for anything else (negative, empty, ``"5 apples"``).
    """
    if isinstance(text, bool):
        raise ConfigError(f"{what} {text!r} is not a size; use e.g. 500M, 2G, 1.5GiB or bytes")
    if isinstance(text, int):
        value = text
    else:
        m = _SIZE_RE.match(str(text))
        if not m:
            raise ConfigError(f"{what} {text!r} is not a size; use e.g. 500M, 2G, 1.5GiB or bytes")
        number, unit, suffix = m.groups()
        if suffix.lower() == "i":  # "Gi" without the "B" is common enough to accept
            suffix = "ib"
        if unit == "" and suffix.lower() not in ("", "b"):
            raise ConfigError(f"{what} {text!r} is not a size; use e.g. 500M, 2G, 1.5GiB or bytes")
        # Fraction, not float: plain byte counts stay exact beyond 2**53.
        value = math.floor(Fraction(number) * _UNITS[unit.lower()])
    if value < 0 or (value == 0 and not allow_zero):
        raise ConfigError(f"{what} {text!r} must be {'zero or ' if allow_zero else ''}positive")
    if value > MAX_SIZE:
        raise ConfigError(f"{what} {text!r} is too large (at most {format_size(MAX_SIZE)})")
    return value


def parse_duration(text: str | float, *, what: str = "duration") -> float:
    """Seconds from ``"30m"``, ``"1h30m"``, ``"90s"``, ``"250ms"`` or a number of seconds."""
    if isinstance(text, bool):
        raise ConfigError(f"{what} {text!r} is not a duration; use e.g. 90s, 30m, 2h, 7d")
    if isinstance(text, int | float):
        seconds = float(text)
    else:
        s = str(text).strip().lower()
        try:
            seconds = float(s)
        except ValueError:
            parts = _DURATION_RE.findall(s)
            if not parts or _DURATION_RE.sub("", s).strip():
                raise ConfigError(
                    f"{what} {text!r} is not a duration; use e.g. 90s, 30m, 2h, 7d"
                ) from None
            seconds = sum(float(v) * _DURATION_UNITS[u] for v, u in parts)
    if seconds < 0 or math.isnan(seconds):
        raise ConfigError(f"{what} {text!r} must be a positive duration")
    if seconds > MAX_DURATION_S:
        raise ConfigError(
            f"{what} {text!r} is too long (at most 10 years, {MAX_DURATION_S:.0f} s); "
            "give a shorter one"
        )
    return seconds
