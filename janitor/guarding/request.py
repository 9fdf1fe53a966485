"""What one guarded call asks for: its writes and inputs, worked out from its arguments.

A front end sends the call as it got it (:mod:`janitor.guarding.protocol`); :func:`plan` makes
it a :class:`CallRequest` with the one estimator (:mod:`janitor.guarding.ffmpeg`): each file
ffmpeg will write and its bytes, and for a cut (a window of a source) the source, what the
whole source takes in the same format (its job's working set) and the window. The variables
that shape a call (its job label, ``janitor run``, policy, probe cache and wait) are read over
what ``janitor shim install`` resolved by :func:`call_options`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from janitor.guarding.ffmpeg import Probe

__all__ = ["CallOptions", "CallRequest", "PlannedWrite", "call_options", "plan", "wait_seconds"]


@dataclass(frozen=True, slots=True)
class PlannedWrite:
    """One file a command will write, and how many bytes. A cut (a window of its input)
    names its ``source`` and ``whole_bytes``, what the whole source takes in the same format:
    the working set of a job that cuts it group by group; and, when known, the window of the
    source it holds, ``[start_us, end_us)``."""

    path: str
    bytes: int
    source: str | None = None
    whole_bytes: int | None = None
    start_us: int | None = None
    end_us: int | None = None


@dataclass(frozen=True, slots=True)
class CallRequest:
    """What one guarded call asks for: its writes and inputs; the guard (``owner_pid``: the
    call's own reservations and pins end with it) and its parent (``writer_pid``: the process
    that ran ffmpeg, where the job's writer chain starts; ``writer_is_parent``: it is the
    guard's parent, as both front ends send it, so it is read through the guard); a label, the
    ``janitor run`` it belongs to, and how long a job's first write may wait for room, counted
    from when the call is received (one deadline, however the call is handed on)."""

    writes: tuple[PlannedWrite, ...]
    inputs: tuple[str, ...]
    owner_pid: int
    writer_pid: int | None = None
    job: str | None = None
    run: str | None = None
    wait_s: float = 0.0
    writer_is_parent: bool = False


@dataclass(frozen=True, slots=True)
class CallOptions:
    """What shapes a call beside its arguments: its job label, ``janitor run`` id, the policy
    it expects (None: any), its probe cache and how long its first write may wait for room."""

    job: str
    run: str | None
    policy: str | None
    cache_dir: str | None
    wait_s: float


def wait_seconds(text: str | None, default: float) -> float:
    """How long a job's first write may wait for room: ``text`` (``JANITOR_GUARD_WAIT_S``) when
    it is a number of seconds from 0 to a day, else ``default``; 0 refuses at once."""
    if text:
        try:
            value = float(text)
        except ValueError:
            return default
        if value == value and 0 <= value < 86400:  # not NaN, at most a day
            return value
    return default


def call_options(env: Mapping[str, str], config: Mapping[str, str]) -> CallOptions:
    """A call's options from its variables (``env``) over what ``janitor shim install``
    resolved (``config``: ``policy``, ``cache_dir``, ``wait_s`` as text): the variables win."""
    try:
        default_wait = float(config.get("wait_s") or 0)
    except (TypeError, ValueError):
        default_wait = 0.0
    return CallOptions(
        job=env.get("JANITOR_JOB") or "ffmpeg",
        run=env.get("JANITOR_RUN") or None,
        policy=env.get("JANITOR_POLICY") or config.get("policy") or None,
        cache_dir=env.get("JANITOR_CACHE_DIR") or config.get("cache_dir") or None,
        wait_s=wait_seconds(env.get("JANITOR_GUARD_WAIT_S"), default_wait),
    )


def plan(
    args: Sequence[str],
    *,
    cwd: str,
    probe: Probe,
    owner_pid: int,
    writer_pid: int,
    writer_is_parent: bool,
    options: CallOptions,
) -> CallRequest | str:
    """The request for this ffmpeg call's writes, or why it cannot be estimated (it then runs
    as it is). ``probe`` measures its inputs; ``writer_is_parent``: ``writer_pid`` is the
    guard's parent, read at its start, so it is read through the guard."""
    from janitor.guarding import ffmpeg

    est = ffmpeg.estimate_command(list(args), cwd=cwd, probe=probe)
    if isinstance(est, ffmpeg.NotEstimable):
        return est.reason
    inv = ffmpeg.parse(list(args))
    sources = [ffmpeg.local_path(i.url) for i in inv.inputs]
    writes = []
    for o in est:
        source = sources[o.input_index] if o.input_index < len(sources) else None
        if source is None:
            writes.append(PlannedWrite(o.path, int(o.bytes)))
            continue
        whole = int(o.whole_bytes) if o.whole_bytes else None
        start = end = None
        if whole and o.start_us is not None:  # which part of the source it holds
            start = int(o.start_us)
            end = int(o.start_us + round(o.duration_s * 1e6))
        path = os.path.normpath(os.path.join(cwd, source))
        writes.append(PlannedWrite(o.path, int(o.bytes), path, whole, start, end))
    inputs = tuple(os.path.normpath(os.path.join(cwd, i)) for i in ffmpeg.input_files(inv))
    return CallRequest(
        tuple(writes), inputs, owner_pid, writer_pid, options.job, options.run,
        options.wait_s, writer_is_parent,
    )  # fmt: skip
