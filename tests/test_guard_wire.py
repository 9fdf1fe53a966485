"""The guard's own JSON reader and writer agree with the json module (they exist only to keep
``json`` and ``re`` out of the guarded ffmpeg's start-up)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from janitor.jobs.guard import _dumps, _loads

text = st.text(st.characters(exclude_categories=["Cs"]))
values: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
    max_leaves=20,
)  # fmt: skip


@given(values)
def test_what_json_writes_the_guard_reads(value: Any) -> None:
    assert _loads(json.dumps(value).encode()) == value
    assert _loads(json.dumps(value, ensure_ascii=False, indent=1).encode()) == value


@given(values)
def test_what_the_guard_writes_json_reads(value: Any) -> None:
    assert json.loads(_dumps(value)) == value


@pytest.mark.parametrize("bad", [b"{", b"[1,", b'{"a" 1}', b"nul", b"1 2", b'"abc'])
def test_broken_json_is_an_error_not_a_value(bad: bytes) -> None:
    with pytest.raises(ValueError):
        _loads(bad)
