"""The group-key fast path (it reads CPython's private ``re._parser``) agrees with ``re.match``.

``janitor.cleanup.group_keys`` recognises regexes of the shape ``^(?P<key>[^/]+?)SUFFIX$`` and
finds every key with one substitution. These properties generate such regexes (and near
misses), and names built from the same pieces, and compare each key with the one ``re.match``
gives name by name. If a new Python changes its parser, they fail or the fast path falls back.
"""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from janitor.cleanup.group_keys import group_keys, match_key, suffix_form

_CHARS = ["a", "b", ".", "w", "-", "é", " ", "/"]
literal = st.lists(st.sampled_from(_CHARS[:-1]), min_size=1, max_size=4).map("".join)


@st.composite
def fragment(draw: st.DrawFn, depth: int = 0) -> str:
    """A regex fragment of literals, optional parts, alternatives and small repeats."""
    kinds = ["lit", "opt", "alt", "rep"] if depth < 2 else ["lit"]
    kind = draw(st.sampled_from(kinds))
    if kind == "lit":
        return re.escape(draw(literal))
    inner = draw(fragment(depth + 1))
    if kind == "opt":
        return f"(?:{inner})?"
    if kind == "rep":
        lo = draw(st.integers(0, 1))
        return f"(?:{inner}){{{lo},2}}"
    other = draw(fragment(depth + 1))
    return f"(?:{inner}|{other})"


key_part = st.sampled_from(
    [r"(?P<key>[^/]+?)", r"(?P<key>.+?)", r"(?P<key>.*?)", r"(?P<key>[^/]*?)"]
)
start = st.sampled_from(["^", "", r"\A"])
end = st.sampled_from(["$", r"\Z"])


@st.composite
def suffix_regex(draw: st.DrawFn) -> str:
    """A regex of the shape the fast path is for."""
    parts = draw(st.lists(fragment(), min_size=1, max_size=3))
    return draw(start) + draw(key_part) + "".join(parts) + draw(end)


def names_for(pattern: str) -> st.SearchStrategy[list[str]]:
    """Names made of the pieces the regex uses, so that many match and many nearly do."""
    pieces = [*_CHARS, ".wav", ".tmp", ".lock", "x"]
    name = st.lists(st.sampled_from(pieces), min_size=0, max_size=7).map("".join)
    folder = st.sampled_from(["", "sub/", "sub/deep/", "x.wav/"])
    # Paths as a scan makes them, relative to the root: no leading, doubled or trailing "/".
    rel = st.tuples(folder, name).map("".join).filter(_relative)
    return st.lists(rel, max_size=30)


def _relative(rel: str) -> bool:
    return bool(rel) and not rel.startswith("/") and not rel.endswith("/") and "//" not in rel


def reference(pattern: str, rels: list[str]) -> tuple[list[str], list[bool]]:
    rx = re.compile(pattern)
    got = [match_key(rx, rel) for rel in rels]
    return [k for k, _ in got], [hit for _, hit in got]


@settings(max_examples=400, deadline=None)
@given(data=st.data(), pattern=suffix_regex())
def test_fast_keys_are_the_keys_re_match_gives(data: st.DataObject, pattern: str) -> None:
    rels = data.draw(names_for(pattern))
    keys, matched = group_keys(pattern, rels)
    want_keys, want_hits = reference(pattern, rels)
    assert keys == want_keys
    assert (matched if matched is not None else [True] * len(rels)) == want_hits


@settings(max_examples=200, deadline=None)
@given(suffixes=st.lists(literal.filter(lambda s: "\n" not in s), min_size=1, max_size=4))
def test_a_plain_suffix_list_takes_the_fast_path(suffixes: list[str]) -> None:
    """The shape the shipped policies use is recognised (so the property above covers it)."""
    alts = "|".join(re.escape(s) for s in suffixes)
    pattern = rf"^(?P<key>[^/]+?)(?:{alts})$"
    form = suffix_form(pattern)
    assert form is not None
    assert form[2] == frozenset(s for s in suffixes if "/" not in s)


def test_other_shapes_are_matched_name_by_name() -> None:
    for pattern in (
        r"^(?P<key>[^.]+)\.(?:wav|lock)$",  # greedy key
        r"^(?P<key>[^/]+?)\.wav",  # no end anchor
        r"(?i)^(?P<key>[^/]+?)\.wav$",  # case-insensitive
        r"^(?P<key>[^/]+?)\.w[a-z]v$",  # a class, not literals
        r"^(?P<key>[^/]+?)(\.wav)+$",  # unbounded repeat
    ):
        assert suffix_form(pattern) is None, pattern
        rels = ["a.wav", "b.WAV", "c.wav.lock", "sub/d.wawv", "e"]
        keys, matched = group_keys(pattern, rels)
        assert (keys, matched) == reference(pattern, rels)
