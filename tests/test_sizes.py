"""Sizes and durations as people type them: 1024-based, strict, one-line ConfigError otherwise."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from janitor.errors import ConfigError, JanitorError
from janitor.humanize import format_ago, plural
from janitor.sizes import format_duration, format_size, parse_duration, parse_size

KiB, MiB, GiB, TiB = 1024, 1024**2, 1024**3, 1024**4

#: No example database: the suite writes nothing outside its tmp folders.
no_db = settings(database=None)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2048", 2048),
        ("1", 1),
        ("2048B", 2048),
        ("10MiB", 10 * MiB),
        ("500M", 500 * MiB),
        ("500m", 500 * MiB),
        ("2G", 2 * GiB),
        ("2GB", 2 * GiB),
        ("2Gi", 2 * GiB),
        ("1.5GiB", GiB + GiB // 2),
        ("1.5 GiB", GiB + GiB // 2),
        ("  4k ", 4 * KiB),
        ("1KiB", KiB),
        ("3T", 3 * TiB),
        (".5M", MiB // 2),
        (4096, 4096),
    ],
)
def test_parse_size_accepts_the_documented_spellings(text: str | int, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "0",
        "0M",
        "0.0001K",  # rounds down to zero bytes
        0,
        "-1",
        "-5M",
        -1,
        "",
        "   ",
        "abc",
        "5 apples",
        "GiB",
        "1.2.3",
        "1iB",
        "5%",
        "1e3",
        "ten MiB",
        True,
    ],
)
def test_parse_size_refuses_zero_negative_and_garbage(text: str | int) -> None:
    with pytest.raises(ConfigError) as info:
        parse_size(text)
    message = str(info.value)
    assert "\n" not in message
    assert repr(text) in message
    assert isinstance(info.value, JanitorError)
    assert isinstance(info.value, ValueError)
    assert info.value.exit_code == 2


def test_parse_size_zero_only_when_allowed() -> None:
    assert parse_size("0", allow_zero=True) == 0
    assert parse_size(0, allow_zero=True) == 0
    with pytest.raises(ConfigError):
        parse_size("-1", allow_zero=True)


def test_parse_size_names_what_is_being_parsed() -> None:
    with pytest.raises(ConfigError, match="reservation size 'x'"):
        parse_size("x", what="reservation size")


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1 KiB"),
        (1536, "1.5 KiB"),
        (10 * MiB, "10 MiB"),
        (GiB + GiB // 2, "1.5 GiB"),
        (2048 * TiB, "2048 TiB"),
        (-2 * MiB, "-2 MiB"),
    ],
)
def test_format_size(n: int, text: str) -> None:
    assert format_size(n) == text


_UNIT_SIZES = {"": 1, "K": KiB, "KiB": KiB, "M": MiB, "MiB": MiB, "G": GiB, "GiB": GiB}


@no_db
@given(st.integers(min_value=1, max_value=2**53))
def test_plain_bytes_round_trip(n: int) -> None:
    assert parse_size(str(n)) == n


@pytest.mark.parametrize("n", [2**53 + 1, 10**17 + 3, 2**62 + 1])
def test_plain_bytes_are_exact_beyond_float_precision(n: int) -> None:
    """A plain byte count is an integer: it must not go through a float and lose its last digits.

    BUG (janitor/sizes.py parse_size): ``float(number) * unit`` rounds above 2**53.
    """
    assert parse_size(str(n)) == n
    assert parse_size(f"{n}B") == n


@no_db
@given(st.integers(min_value=1, max_value=10**6), st.sampled_from(sorted(_UNIT_SIZES)))
def test_integer_with_unit_is_exact(k: int, unit: str) -> None:
    assert parse_size(f"{k}{unit}") == k * _UNIT_SIZES[unit]


@no_db
@given(st.integers(min_value=1, max_value=2**60))
def test_format_then_parse_is_within_rounding(n: int) -> None:
    """format_size keeps one decimal of the largest unit: at most 5 % off, never more."""
    back = parse_size(format_size(n))
    assert abs(back - n) <= n * 0.05 + 1


@no_db
@given(st.integers(min_value=1, max_value=1023))
def test_small_sizes_format_exactly(n: int) -> None:
    assert parse_size(format_size(n)) == n


# -- durations -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90.0),
        ("30m", 1800.0),
        ("2h", 7200.0),
        ("7d", 7 * 86400.0),
        ("1w", 604800.0),
        ("1h30m", 5400.0),
        ("1h 30m", 5400.0),
        ("250ms", 0.25),
        ("42", 42.0),
        ("0.5", 0.5),
        ("1.5h", 5400.0),
        (12, 12.0),
        (2.5, 2.5),
    ],
)
def test_parse_duration(text: str | float, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "text",
    ["", "abc", "-5m", "-1", -1, "5 apples", "1h30", "m", "nan", "inf", "10 parsecs", True],
)
def test_parse_duration_refuses_garbage_and_negative(text: str | float) -> None:
    with pytest.raises(ConfigError) as info:
        parse_duration(text)
    assert "\n" not in str(info.value)


@no_db
@given(
    st.integers(min_value=0, max_value=100),
    st.integers(min_value=0, max_value=59),
    st.integers(min_value=0, max_value=59),
)
def test_compound_durations_add_up(h: int, m: int, s: int) -> None:
    assert parse_duration(f"{h}h{m}m{s}s") == h * 3600 + m * 60 + s


@no_db
@given(st.integers(min_value=0, max_value=10**7))
def test_format_duration_parses_back_coarsely(seconds: int) -> None:
    """format_duration keeps the largest unit, and the next one while the first counts under
    ten; parsing it back loses only what it left out, never adds."""
    text = format_duration(seconds)
    back = parse_duration(text)
    assert back <= seconds
    units = [(86400, "d"), (3600, "h"), (60, "min"), (1, "s")]
    i = next((k for k, (u, _) in enumerate(units) if seconds >= u), 3)
    size, unit = units[i]
    assert text.split()[:2] == [str(seconds // size), unit], text
    if seconds // size < 10 and i < 3:
        kept = units[i + 1][0]  # two units: less than one of the second is lost
        assert len(text.split()) in (2, 4), text
    else:
        kept = size  # one unit: less than one of it is lost
        assert len(text.split()) == 2, text
    assert seconds - back < kept


def test_format_duration_examples() -> None:
    """One form everywhere a person reads a duration: coarse, spaced, one or two units."""
    assert format_duration(5400) == "1 h 30 min"
    assert format_duration(22 * 3600 + 1) == "22 h"  # not "22h1s" (issue 24)
    assert format_duration(5 * 3600 + 13) == "5 h"  # not "5h13s"
    assert format_duration(5 * 3600 + 13 * 60) == "5 h 13 min"
    assert format_duration(2 * 86400 + 3 * 3600 + 59) == "2 d 3 h"
    assert format_duration(15 * 86400 + 3 * 3600) == "15 d"
    assert format_duration(90) == "1 min 30 s"
    assert format_duration(42.5) == "42 s"
    assert format_duration(0.25) == "250 ms"
    assert format_duration(0) == "0 s"
    assert format_duration(-90) == "-1 min 30 s"


def test_format_ago_and_plural() -> None:
    assert format_ago(79201) == "22 h ago"
    assert format_ago(180) == "3 min ago"
    assert format_ago(0.5) == "just now"
    assert format_ago(-30) == "just now"  # a clock set back: never "-30 s ago"
    assert [plural(n, "folder") for n in (0, 1, 2)] == ["0 folders", "1 folder", "2 folders"]
    assert plural(1, "entry", "entries") == "1 entry"
    assert plural(3, "entry", "entries") == "3 entries"


def test_parse_duration_reads_min() -> None:
    assert parse_duration("3 min") == 180
    assert parse_duration("1 h 30 min") == 5400
    assert parse_duration("2min") == 120
    assert parse_duration("250 ms") == 0.25
