"""One guarded ffmpeg call, decided: the half both front ends of the guard share.

The guard has two front ends. The Python one (:mod:`janitor.jobs.guard`) works out a call's
writes itself and asks the daemon (or the ledger) to hold them. The compiled one
(``janitor/native/guard.c``) holds no such logic: it sends the call as it got it (its
arguments, folder, parent and the few ``JANITOR_*`` variables that shape it) to the daemon's
``POST /v1/guard/call``, which answers with a *verdict* built here, from the same functions:
run ffmpeg unguarded (``exec``), run it under these reservations (``run``), wait in turn
(``wait``) or refuse (``refuse``); each with the stderr line to print and the ``guard.log``
line to write, worded here once for both.

Imported by the Python guard on every call: at the top only what it loads anyway (the errors
and the size printer); the estimator and the ledger inside the functions that need them.
"""

from __future__ import annotations

import os
import time

from janitor.errors import NeverFits, ReservationRefused, WaitWontHelp
from janitor.humanize import format_duration, format_size

TYPE_CHECKING = False  # typing costs the guarded ffmpeg several ms at every start
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any

    from janitor.core import Janitor
    from janitor.jobs.held import WriteSession
    from janitor.jobs.writes import Prepared

__all__ = [
    "CALL_ENV",
    "Verdict",
    "call_options",
    "decide",
    "decide_wait",
    "plan",
    "refusal_line",
    "reserved_line",
    "stopped_before_line",
    "unguarded_line",
    "wait_seconds",
]

#: The variables that shape a call, sent by the compiled front end when they are set: the job
#: label and ``janitor run`` id, the policy expected, the probe cache, the wait for room.
CALL_ENV = ("JANITOR_JOB", "JANITOR_RUN", "JANITOR_POLICY", "JANITOR_CACHE_DIR",
            "JANITOR_GUARD_WAIT_S")  # fmt: skip


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


def call_options(
    env: Mapping[str, str],
    *,
    cache_dir: str | None,
    policy: str | None,
    wait_s: float,
) -> dict[str, Any]:
    """A call's job, run, policy, probe cache and wait, from its environment over what
    ``janitor shim install`` resolved (the environment wins)."""
    return {
        "job": env.get("JANITOR_JOB") or "ffmpeg",
        "run": env.get("JANITOR_RUN") or None,
        "policy": env.get("JANITOR_POLICY") or policy or None,
        "cache_dir": env.get("JANITOR_CACHE_DIR") or cache_dir or None,
        "wait_s": wait_seconds(env.get("JANITOR_GUARD_WAIT_S"), wait_s),
    }


def plan(
    args: Sequence[str],
    *,
    cwd: str,
    real: str,
    owner_pid: int,
    writer_pid: int,
    job: str,
    run: str | None,
    cache_dir: str | None = None,
    probe: Any = None,
    writer_is_parent: bool = True,
) -> dict[str, Any] | str:
    """The request for this call's writes (the body of ``POST /v1/guard``), or why it cannot be
    estimated. ``probe`` (a :class:`~janitor.jobs.ffmpeg.Probe`) is made from ``cache_dir`` and
    ``real`` when not given. ``writer_is_parent``: ``writer_pid`` is the guard's parent (what
    the guard read at its start), so it is read through the guard."""
    from janitor.jobs import ffmpeg

    if probe is None:
        probe = ffmpeg.Probe(ffmpeg.probe_cache_dir(cache_dir), ffmpeg=real)
    est = ffmpeg.estimate_command(list(args), cwd=cwd, probe=probe)
    if isinstance(est, ffmpeg.NotEstimable):
        return est.reason
    inv = ffmpeg.parse(list(args))
    sources = [ffmpeg.local_path(i.url) for i in inv.inputs]
    outputs = []
    for o in est:
        out: dict[str, Any] = {"path": o.path, "bytes": int(o.bytes)}
        source = sources[o.input_index] if o.input_index < len(sources) else None
        if source is not None:
            out["source"] = os.path.normpath(os.path.join(cwd, source))
            if o.whole_bytes:
                out["whole_bytes"] = int(o.whole_bytes)
                if o.start_us is not None:  # which part of the source it holds
                    out["start_us"] = int(o.start_us)
                    out["end_us"] = int(o.start_us + round(o.duration_s * 1e6))
        outputs.append(out)
    inputs = [os.path.normpath(os.path.join(cwd, i)) for i in ffmpeg.input_files(inv)]
    return {
        "outputs": outputs,
        "inputs": inputs,
        "owner_pid": owner_pid,
        "writer_pid": writer_pid,
        "writer_is_parent": writer_is_parent,
        "job": job,
        "run": run,
    }


# -- the lines both front ends print and log -------------------------------------------------------


def refusal_line(refused: ReservationRefused) -> str:
    """The line a refused call prints: the output, the bytes, the volume and its numbers, and
    what to do."""
    free, floor, reserved = refused.free, refused.floor, refused.reserved
    output, volume = refused.output or "", refused.volume
    head = f"refused to write {output} ({format_size(refused.requested)}) on volume {volume}: "
    if isinstance(refused, NeverFits):
        return (
            head + f"it can never fit there: capacity {format_size(refused.capacity)}, "
            f"floor {format_size(floor)}, {format_size(refused.held)} held by files outside "
            f"every reservation and cache leave at most {format_size(refused.most)} even "
            f"once every job ends. Free space on {volume} or use a bigger disk; ffmpeg did not run"
        )
    if isinstance(refused, WaitWontHelp):
        return (
            head + f"{format_size(free)} free, floor {format_size(floor)}, "
            f"{format_size(reserved)} reserved by others, short by "
            f"{format_size(refused.lacks)}; the work on {volume} gives back "
            f"{format_size(refused.coming)} when it ends, so waiting would not make it fit: "
            f"refused at once. Free space on {volume} (`janitor status` shows who holds it) and "
            "retry; ffmpeg did not run"
        )
    queued, evicted, waited = refused.queued, refused.evicted, refused.waited_s
    ahead = f", {format_size(queued)} held for the job first in line" if queued else ""
    after = f" (after evicting {format_size(evicted)} of cache)" if evicted else ""
    after += f" (after waiting {format_duration(waited)} for room)" if waited else ""
    return (
        head + f"{format_size(free)} free, floor {format_size(floor)}, {format_size(reserved)} "
        f"reserved by others{ahead}, short by {format_size(refused.shortfall)}{after}. Free "
        f"space on {volume} (`janitor status` shows who holds it) and retry; ffmpeg did not run"
    )


def reserved_line(via: str, session: WriteSession) -> str:
    """The ``guard.log`` line of a call that runs under its reservations (``via``: who held
    them, ``daemon`` or ``ledger``)."""
    return (
        f"reserved through the {via}"
        + (f" after waiting {session.waited_s:.1f} s" if session.waited_s else "")
        + ": "
        + ", ".join(
            f"{format_size(h.allowed)} for {h.output} ({h.reservation}"
            + (", the job's working set)" if h.pooled else ")")
            for h in session.writes
        )
    )


def unguarded_line(reason: str, args: Sequence[str]) -> str:
    """The ``guard.log`` line (DEBUG) of a call handed to ffmpeg as it is."""
    return f"unguarded ({reason}): ffmpeg {' '.join(args)}"


def stopped_before_line(reason: str) -> str:
    """The line of a call whose job must stop before ffmpeg ran (its working set at risk)."""
    return f"stopped before ffmpeg ran: {reason}. Free space there and retry"


# -- the daemon's verdict on a call the compiled front end sends -----------------------------------


class Verdict:
    """What ``POST /v1/guard/call`` answers: an HTTP status, the JSON body (its ``action`` says
    what the front end does) and, for a call that waits in turn, what the wait resumes."""

    __slots__ = ("body", "prepared", "status")

    def __init__(self, status: int, body: dict[str, Any], prepared: Prepared | None = None):
        self.status = status
        self.body = body
        self.prepared = prepared


def _exec(line: str | None) -> Verdict:
    return Verdict(200, {"action": "exec", "log": line, "debug": True})


def _refuse(exc: Exception) -> Verdict:
    from janitor.errors import SpaceRisk

    if isinstance(exc, SpaceRisk):
        line = stopped_before_line(exc.reason)
        return Verdict(507, {"action": "refuse", "say": line, "log": line})
    assert isinstance(exc, ReservationRefused)
    line = refusal_line(exc)
    return Verdict(507, {"action": "refuse", "say": line, "log": f"refused: {line}"})


def _run(session: WriteSession, job: str | None, run: str | None) -> Verdict:
    own, pins, draws = session.own, session.pins, session.draws
    return Verdict(
        200,
        {
            "action": "run",
            "session": session.as_dict(),
            "log": reserved_line("daemon", session),
            "holds": bool(own or pins or draws),
            "release": {
                "reservations": list(own),
                "pins": list(pins),
                "draws": list(draws),
                "job": job,
                "run": run,
            },
        },
    )


def decide(
    jan: Janitor,
    call: Mapping[str, Any],
    *,
    probe_for: Callable[[str | None, str], Any],
    policy_path: str,
    received: float | None = None,
) -> Verdict:
    """The daemon's verdict on one call of the compiled front end (the body of
    ``POST /v1/guard/call``): estimated as the Python guard estimates it, then prepared and
    granted as ``POST /v1/guard`` grants it. ``probe_for(cache_dir, ffmpeg)`` gives the probe
    to estimate with; ``policy_path`` is the daemon's policy (409 when the call expects
    another); ``received``: when the call came in (``time.monotonic()``; default now), where
    its wait for room starts: estimating it counts too. A ``wait`` verdict's ``wait_s`` is
    what is left of that wait, so the front end never waits for an answer past it."""
    from janitor.errors import SpaceRisk
    from janitor.jobs.writes import CallRequest, Queued, close_writes, grant, prepare

    received = time.monotonic() if received is None else received
    config = call.get("config") or {}
    try:
        default_wait = float(config.get("wait_s") or 0)
    except (TypeError, ValueError):
        default_wait = 0.0
    opts = call_options(
        call.get("env") or {},
        cache_dir=config.get("cache_dir"),
        policy=config.get("policy"),
        wait_s=default_wait,
    )
    expected = opts["policy"]
    if expected and os.path.realpath(expected) != os.path.realpath(policy_path):
        return Verdict(
            409,
            {
                "error": "policy_mismatch",
                "message": f"the daemon runs policy {policy_path}, not {expected}",
            },
        )
    args = list(call["args"])
    real = call["ffmpeg"]
    try:
        request = plan(
            args, cwd=call["cwd"], real=real, owner_pid=call["owner_pid"],
            writer_pid=call.get("writer_pid") or call["owner_pid"], job=opts["job"],
            run=opts["run"], probe=probe_for(opts["cache_dir"], real),
            writer_is_parent=bool(call.get("writer_pid")),
        )  # fmt: skip
    except Exception as exc:  # never break ffmpeg: an estimate we cannot make runs unguarded
        return _exec(unguarded_line(f"estimate failed: {exc!r}", args))
    if isinstance(request, str):
        return _exec(unguarded_line(request, args))
    request["wait_s"] = opts["wait_s"]
    prep = prepare(jan, CallRequest.from_wire(request), received=received)
    try:
        session = grant(jan, prep)
    except Queued as q:
        body = {"action": "wait", "ticket": q.ticket, "say": q.message,
                "log": f"waiting: {q.message}", "wait_s": prep.wait_left()}  # fmt: skip
        return Verdict(202, body, prep)
    except (ReservationRefused, SpaceRisk) as exc:
        return _refuse(exc)
    if not session.writes:
        close_writes(jan, session.own, session.pins, job=opts["job"], run=opts["run"])
        return _exec(unguarded_line("no managed volume", args))
    return _run(session, opts["job"], opts["run"])


def decide_wait(
    jan: Janitor, prep: Prepared, ticket: str, still_wanted: Callable[[], bool]
) -> Verdict:
    """The verdict on a call that waited its turn (``POST /v1/guard/call/wait``): run, or
    refused when the wait ran out."""
    from janitor.errors import SpaceRisk
    from janitor.jobs.writes import wait

    try:
        session = wait(jan, prep, ticket, still_wanted=still_wanted)
    except (ReservationRefused, SpaceRisk) as exc:
        return _refuse(exc)
    return _run(session, prep.request.job, prep.request.run)
