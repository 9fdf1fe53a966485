"""The guard's wire: its own JSON reader and writer agree with the json module (they exist only
to keep ``json`` and ``re`` out of the guarded ffmpeg's start-up), and what a guarded call holds
and a refusal's numbers cross it unchanged."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import janitor
from janitor.admission.reserve import Admission
from janitor.commands.daemon_client import dumps, loads
from janitor.errors import NeverFits, ReservationRefused
from janitor.guarding.held import HeldWrite, WriteSession, Written

text = st.text(st.characters(exclude_categories=["Cs"]))
values: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
    max_leaves=20,
)  # fmt: skip


@given(values)
def test_what_json_writes_the_guard_reads(value: Any) -> None:
    assert loads(json.dumps(value).encode()) == value
    assert loads(json.dumps(value, ensure_ascii=False, indent=1).encode()) == value


@given(values)
def test_what_the_guard_writes_json_reads(value: Any) -> None:
    assert json.loads(dumps(value)) == value


@pytest.mark.parametrize("bad", [b"{", b"[1,", b'{"a" 1}', b"nul", b"1 2", b'"abc'])
def test_broken_json_is_an_error_not_a_value(bad: bytes) -> None:
    with pytest.raises(ValueError):
        loads(bad)


#: What the guarded ffmpeg loads to send a call and carry out its verdict.
WIRE = ("janitor.commands.daemon_client", "janitor.guarding.held", "janitor.guarding.protocol",
        "janitor.commands.watch", "janitor.commands.guard")  # fmt: skip


def test_the_guards_wire_loads_nothing_heavy() -> None:
    """The client, its JSON, the protocol, the held values and the watch of a running writer
    load none of what they exist to avoid, nor the guard that uses them."""
    root = str(Path(janitor.__file__).parent.parent)
    code = f"import sys; sys.path[:0] = [{root!r}]; import {', '.join(WIRE)}"
    traced = subprocess.run(
        [sys.executable, "-I", "-S", "-X", "importtime", "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert traced.returncode == 0, traced.stderr
    imported = {
        line.rpartition("|")[2].strip()
        for line in traced.stderr.splitlines()
        if line.startswith("import time:")
    }
    assert set(WIRE) <= imported
    heavy = {"typing", "dataclasses", "json", "re", "socket", "enum", "http.client"}
    # nor the decision, the estimator or the library: only a call no daemon takes loads them
    heavy |= {"janitor.guarding.verdict", "janitor.guarding.ffmpeg", "janitor.core"}
    assert imported & heavy == set()


def test_a_write_session_crosses_the_wire_unchanged() -> None:
    session = WriteSession(
        (HeldWrite("r1", "/t/a.pcm", 4096, 1 << 20, pooled=True), HeldWrite("r2", "/t/b", 5, 6)),
        pins=("p1",),
        unguarded=("/elsewhere.wav",),
        jobs=("j1",),
        waited_s=1.5,
    )
    body = json.loads(dumps(session.as_dict()))
    assert WriteSession.from_wire(body) == session
    assert session.own == ("r2",)
    written = Written("/t/a.pcm", 123)
    assert Written.from_wire(loads(json.dumps(written.as_dict()).encode())) == written
    assert repr(written) == "Written(path='/t/a.pcm', bytes=123)"


@pytest.mark.parametrize("kind", [ReservationRefused, NeverFits])
def test_a_refusal_read_back_from_its_507_body_keeps_its_numbers(
    kind: type[ReservationRefused],
) -> None:
    """The guard reads a refusal back from the daemon's answer: the same class, numbers, output
    and message as the refusal the daemon raised (available and shortfall as admission said)."""
    decision = Admission("t", "/mnt", 1, requested=10 << 20, free=20 << 20, floor=8 << 20,
                         reserved=6 << 20, evicted=1 << 20, queued=2 << 20)  # fmt: skip
    extra = {"capacity": 64 << 20, "held": 40 << 20} if kind is NeverFits else {}
    refused = kind(decision, output="/t/a.wav", waited_s=3.0, **extra)
    assert (refused.available, refused.shortfall) == (decision.available, decision.shortfall)
    back = ReservationRefused.from_dict(loads(dumps(refused.as_dict()).encode()))
    assert type(back) is kind
    assert back.as_dict() == refused.as_dict()
    assert (back.output, back.filename, str(back)) == ("/t/a.wav", "/t/a.wav", str(refused))
