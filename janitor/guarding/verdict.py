"""One guarded ffmpeg call, decided whole: the verdict both front ends of the guard carry out.

Each front end sends the call as it got it (:mod:`janitor.guarding.protocol`): the daemon
decides it with :func:`decide` (``POST /v1/guard/call``); a front end with no daemon decides
it in its own process with the same steps, :func:`planned` then :func:`admitted` (the ledger
opened only for a call that writes what can be reserved). The verdict says what to do: run
ffmpeg as it is (``exec``: not estimable, or on no managed volume), run it under these
reservations (``run``), wait in turn (``wait``: then :func:`decide_wait`) or refuse
(``refuse``); each with the stderr line to print and the ``guard.log`` line to write
(:mod:`janitor.guarding.lines`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from janitor.error_statuses import status_of
from janitor.errors import ReservationRefused, SpaceRisk
from janitor.guarding.lines import refusal_line, reserved_line, stopped_before_line, unguarded_line
from janitor.guarding.request import CallRequest, call_options, plan

if TYPE_CHECKING:
    from janitor.core import Janitor
    from janitor.guarding.ffmpeg import Probe
    from janitor.guarding.held import WriteSession
    from janitor.guarding.prepare import Prepared

__all__ = [
    "Verdict",
    "admitted",
    "decide",
    "decide_wait",
    "local_probe",
    "planned",
    "policy_mismatch",
]

#: Gives the probe that measures a call's inputs: (its probe cache folder, the real ffmpeg).
ProbeFor = Callable[[str | None, str], "Probe"]


@dataclass(frozen=True, slots=True)
class Verdict:
    """A call decided: the HTTP status and the JSON body a front end carries out (its
    ``action``, the lines to print and log), and, for a call that waits in turn, what its
    wait resumes (``prepared``)."""

    status: int
    body: dict[str, Any]
    prepared: Prepared | None = None


def policy_mismatch(expected: str | None, policy_path: str | None) -> Verdict | None:
    """409 when a call expects a policy other than the one deciding it (``policy_path``; None:
    the caller's own, as a front end deciding in its own process), else None."""
    if not expected or policy_path is None or expected == policy_path:
        return None
    if os.path.realpath(expected) == os.path.realpath(policy_path):
        return None
    message = f"the daemon runs policy {policy_path}, not {expected}"
    return Verdict(status_of("policy_mismatch"), {"error": "policy_mismatch", "message": message})


def local_probe(cache_dir: str | None, ffmpeg_path: str) -> Probe:
    """A probe of this process's own over the shared probe cache (the daemon keeps one per
    cache and real ffmpeg instead)."""
    from janitor.guarding import ffmpeg

    return ffmpeg.Probe(ffmpeg.probe_cache_dir(cache_dir), ffmpeg=ffmpeg_path)


def _exec(line: str | None) -> Verdict:
    return Verdict(200, {"action": "exec", "log": line, "debug": True})


def _refuse(exc: Exception) -> Verdict:
    """A call refused for room (or stopped before it began: its volume at risk), answered
    with the status of a refusal (:mod:`janitor.error_statuses`)."""
    if isinstance(exc, SpaceRisk):
        line = stopped_before_line(exc.reason)
        return Verdict(status_of("refused"), {"action": "refuse", "say": line, "log": line})
    assert isinstance(exc, ReservationRefused)
    line = refusal_line(exc)
    body = {"action": "refuse", "say": line, "log": f"refused: {line}"}
    return Verdict(status_of("refused"), body)


def _run(session: WriteSession, job: str | None, run: str | None, via: str) -> Verdict:
    own, pins, draws = session.own, session.pins, session.draws
    return Verdict(
        200,
        {
            "action": "run",
            "session": session.as_dict(),
            "log": reserved_line(via, session),
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


def planned(call: Mapping[str, Any], *, probe_for: ProbeFor) -> CallRequest | Verdict:
    """A call's request (its writes estimated as the guard estimates them), or the ``exec``
    verdict of a call that cannot be estimated (it runs as it is: the guard never breaks an
    ffmpeg call). ``probe_for(cache_dir, ffmpeg)`` gives the probe to estimate with."""
    opts = call_options(call.get("env") or {}, call.get("config") or {})
    args = list(call["args"])
    owner, writer = int(call["owner_pid"]), call.get("writer_pid")
    try:
        request = plan(
            args, cwd=call["cwd"], probe=probe_for(opts.cache_dir, call["ffmpeg"]),
            owner_pid=owner, writer_pid=int(writer or owner), writer_is_parent=bool(writer),
            options=opts,
        )  # fmt: skip
    except Exception as exc:  # never break ffmpeg: an estimate we cannot make runs unguarded
        return _exec(unguarded_line(f"estimate failed: {exc!r}", args))
    if isinstance(request, str):
        return _exec(unguarded_line(request, args))
    return request


def admitted(
    jan: Janitor,
    request: CallRequest,
    args: list[str],
    *,
    received: float | None = None,
    via: str = "daemon",
) -> Verdict:
    """The verdict on a call's request (``args``, its arguments, for the log): prepared and
    granted (:mod:`janitor.guarding.prepare`, :mod:`janitor.guarding.grant`), queued, refused,
    or run as it is when it writes to no managed volume. ``received``: when the call came in
    (``time.monotonic()``; default now), where its wait for room starts: estimating it counts
    too. A ``wait`` verdict's ``wait_s`` is what is left of that wait, so the front end never
    waits for an answer past it. ``via`` (``daemon`` or ``ledger``) words the log line."""
    from janitor.guarding.close import close_writes
    from janitor.guarding.grant import grant
    from janitor.guarding.prepare import prepare
    from janitor.guarding.queue import Queued

    prep = prepare(jan, request, received=time.monotonic() if received is None else received)
    try:
        session = grant(jan, prep)
    except Queued as q:
        body = {"action": "wait", "ticket": q.ticket, "say": q.message,
                "log": f"waiting: {q.message}", "wait_s": prep.wait_left()}  # fmt: skip
        return Verdict(202, body, prep)
    except (ReservationRefused, SpaceRisk) as exc:
        return _refuse(exc)
    if not session.writes:
        close_writes(jan, session.own, session.pins, job=request.job, run=request.run)
        return _exec(unguarded_line("no managed volume", args))
    return _run(session, request.job, request.run, via)


def decide(
    jan: Janitor,
    call: Mapping[str, Any],
    *,
    probe_for: ProbeFor,
    policy_path: str | None,
    received: float | None = None,
    via: str = "daemon",
) -> Verdict:
    """The verdict on one ffmpeg call as a front end sent it (the body of ``POST
    /v1/guard/call``): :func:`planned`, then :func:`admitted`, its wait for room counted from
    the guarded ffmpeg's start (``received`` less the call's ``elapsed_s``). 409 when the call
    expects a policy other than ``policy_path`` (:func:`policy_mismatch`)."""
    received = time.monotonic() if received is None else received
    elapsed = call.get("elapsed_s") or 0.0
    received -= min(max(float(elapsed), 0.0), 86400.0)
    opts = call_options(call.get("env") or {}, call.get("config") or {})
    mismatch = policy_mismatch(opts.policy, policy_path)
    if mismatch is not None:
        return mismatch
    request = planned(call, probe_for=probe_for)
    if isinstance(request, Verdict):
        return request
    return admitted(jan, request, list(call["args"]), received=received, via=via)


def decide_wait(
    jan: Janitor,
    prep: Prepared,
    ticket: str,
    still_wanted: Callable[[], bool] = lambda: True,
    *,
    via: str = "daemon",
) -> Verdict:
    """The verdict on a call that waited its turn (``POST /v1/guard/call/wait``, or a front
    end's own wait): run, or refused when the wait ran out (``still_wanted()`` False: its
    caller is gone, and the wait ends at once)."""
    from janitor.guarding.wait import wait

    try:
        session = wait(jan, prep, ticket, still_wanted=still_wanted)
    except (ReservationRefused, SpaceRisk) as exc:
        return _refuse(exc)
    return _run(session, prep.request.job, prep.request.run, via)
