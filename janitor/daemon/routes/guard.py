"""``/v1/guard/*``: the guarded ffmpeg's calls decided, a queued call's wait, the guarded
ffprobe's calls, and the end of what a call held.

Both front ends of the guard send a call as they got it (:mod:`janitor.guarding.protocol`); the
routes hand it to :mod:`janitor.guarding` and answer its verdict as it is (its status and
body). A call that waits in turn is parked here under its ticket until its guard comes back to
wait for it (``POST /v1/guard/call/wait``); those waits run in threads of their own, so a queue
never holds up the API.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter
from starlette.background import BackgroundTask

from janitor.daemon.routes.answers import ERROR_RESPONSES, dumps, error_answer, json_answer
from janitor.daemon.routes.models import ErrorOut, GuardCall, GuardRelease, GuardWait, ProbeCall
from janitor.daemon.thread_pool import ThreadPool
from janitor.error_statuses import status_of

if TYPE_CHECKING:
    from janitor.daemon.view import DaemonView
    from janitor.guarding.ffmpeg import Probe
    from janitor.guarding.prepare import Prepared
    from janitor.guarding.probe_call import AwaitingUse

__all__ = ["guard_router"]

log = logging.getLogger("janitor.daemon")

#: How long a queued call's place is kept for a guard that never comes back for it (killed
#: between its two calls): longer than any wait could last.
_PARKED_MAX_S = 86400
#: The most probes kept (one per probe cache and real ffmpeg the guards name).
_PROBES_MAX = 16


class _GuardCalls:
    """The blocking halves of the guard's routes, run in the pool's threads, with what they
    keep between calls: the queued calls by ticket, and the guards' probes."""

    def __init__(self, daemon: DaemonView) -> None:
        self.daemon = daemon
        #: Queued calls by ticket, between their 202 answer and their wait (and since when).
        self._queued: dict[str, tuple[Prepared, float]] = {}
        self._queued_lock = threading.Lock()
        #: The guards' probes, by probe cache and real ffmpeg (see _guard_probe).
        self._probes: dict[tuple[str | None, str], Probe] = {}

    def guard_call(self, req: GuardCall, received: float) -> tuple[int, bytes]:
        """``received``: when the request came in (``time.monotonic()``): the call's wait for
        room counts from then, estimating it too."""
        from janitor.guarding.verdict import decide

        if not os.path.isabs(req.cwd):
            return error_answer("bad_request", f"cwd {req.cwd!r} is relative")
        verdict = decide(
            self.daemon.janitor,
            req.model_dump(),
            probe_for=self._guard_probe,
            policy_path=str(self.daemon.settings.policy_path),
            received=received,
        )
        if verdict.prepared is not None:
            self._park(verdict.body["ticket"], verdict.prepared)
        return verdict.status, dumps(verdict.body)

    def guard_probe(self, req: ProbeCall) -> tuple[int, bytes, AwaitingUse | None]:
        """A probe decided from a read-only look: the answer, and the marks to make once it is
        sent (:meth:`mark`)."""
        from janitor.guarding.probe_call import decide_probe

        if not os.path.isabs(req.cwd):
            return (*error_answer("bad_request", f"cwd {req.cwd!r} is relative"), None)
        decided = decide_probe(
            self.daemon.janitor, req.model_dump(), policy_path=str(self.daemon.settings.policy_path)
        )
        return decided.verdict.status, dumps(decided.verdict.body), decided.then

    def mark(self, marks: AwaitingUse) -> None:
        """A probe's marks, made after its answer was sent: an error is the daemon log's, as
        nobody waits for it (the probe runs as it would without a mark)."""
        from janitor.guarding.probe_call import mark_awaiting_use

        try:
            mark_awaiting_use(self.daemon.janitor, marks)
        except Exception:
            names = ", ".join(e.path for e in marks.entries)
            log.exception("marking %s awaiting use failed", names)

    def guard_call_wait(self, req: GuardWait) -> tuple[int, bytes]:
        from janitor.guarding.verdict import decide_wait
        from janitor.host.owner import is_alive, process_start

        prep = self._unpark(req.ticket)
        if prep is None:
            return error_answer("not_found", f"no queued call {req.ticket!r} here")
        start = process_start(req.owner_pid)
        verdict = decide_wait(
            self.daemon.janitor, prep, req.ticket, lambda: is_alive(req.owner_pid, start)
        )
        return verdict.status, dumps(verdict.body)

    def guard_release(self, req: GuardRelease) -> bytes:
        from janitor.guarding.close import close_writes
        from janitor.guarding.held import Written

        written = [Written(w.path, w.bytes) for w in req.written]
        jan = self.daemon.janitor
        close_writes(
            jan, req.reservations, req.pins, written, job=req.job, run=req.run, draws=req.draws
        )
        return dumps({"reservations": req.reservations, "pins": req.pins})

    def _guard_probe(self, cache_dir: str | None, ffmpeg_path: str) -> Probe:
        """A probe per probe cache and real ffmpeg the guards name, kept (its memory too)."""
        from janitor.guarding import ffmpeg

        key = (cache_dir, ffmpeg_path)
        with self._queued_lock:
            probe = self._probes.get(key)
            if probe is None:
                if len(self._probes) >= _PROBES_MAX:
                    self._probes.clear()
                folder = ffmpeg.probe_cache_dir(cache_dir)
                probe = self._probes[key] = ffmpeg.Probe(folder, ffmpeg=ffmpeg_path)
        return probe

    def _park(self, ticket: str, prep: Prepared) -> None:
        """Keep a queued call's place until its guard comes back to wait for it."""
        with self._queued_lock:
            # A guard that never came back for its place (killed between the two calls)
            # leaves its entry: those older than any wait could last are dropped.
            stale = time.monotonic() - _PARKED_MAX_S
            for old in [t for t, (_, at) in self._queued.items() if at < stale]:
                del self._queued[old]
            self._queued[ticket] = (prep, time.monotonic())

    def _unpark(self, ticket: str) -> Prepared | None:
        with self._queued_lock:
            entry = self._queued.pop(ticket, None)
        return None if entry is None else entry[0]


def guard_router(daemon: DaemonView, pool: ThreadPool) -> APIRouter:
    """The guard's routes over ``daemon``: their blocking halves run in ``pool``, the waits of
    queued calls in a pool of their own."""
    calls = _GuardCalls(daemon)
    # Queued calls wait in threads of their own, so a queue never holds up the API.
    waits = ThreadPool(max_workers=256, name="janitor-api-wait")
    router = APIRouter()
    errors = ERROR_RESPONSES
    refused = status_of("refused")

    @router.post(
        "/v1/guard/call",
        response_model=dict[str, Any],
        responses={
            202: {"description": "Queued (action wait): then POST /v1/guard/call/wait"},
            refused: {"description": "Refused: an output does not fit (action refuse)"},
            status_of("policy_mismatch"): {
                "model": ErrorOut,
                "description": "The daemon runs another policy",
            },
            **errors,
        },
    )
    async def guard_call(req: GuardCall) -> Any:
        """One ffmpeg call of a guard (either front end), as it got it, decided whole: estimated,
        then its writes admitted as part of their job and its cached inputs pinned (the first
        cut from a source reserves the source's whole working set, later cuts draw on it; all
        or none, making room first). The answer's ``action`` says
        what the guard does: ``exec`` (run ffmpeg as it is: not estimable, or on no managed
        volume), ``run`` (under ``session``'s reservations; ``release`` is the body of ``POST
        /v1/guard/release`` at its end, ``written`` added), ``wait`` (202: its turn, with
        ``POST /v1/guard/call/wait``) or ``refuse`` (507); ``say`` is the stderr line to
        print and ``log`` the ``guard.log`` line to write (``debug``: at DEBUG)."""
        status, body = await pool.run(calls.guard_call, req, time.monotonic())
        return json_answer(body, status)

    @router.post(
        "/v1/guard/probe",
        response_model=dict[str, Any],
        responses={
            refused: {"description": "Refused: the probed WAV's alignment can never fit"},
            **errors,
        },
    )
    async def guard_probe(req: ProbeCall) -> Any:
        """One ffprobe call of a guarded ffprobe: the cache entries it probes are marked
        awaiting use for its caller; ``exec`` (run the real ffprobe) or ``refuse`` (507: a cached
        WAV whose alignment could never fit in the caller's ``TMPDIR``), with the lines to print
        and log."""
        status, body, then = await pool.run(calls.guard_probe, req)
        answer = json_answer(body, status)
        if then is not None:
            # Marked once the answer is sent: the prober's ffprobe runs meanwhile, and its
            # first cut, which needs the mark, comes after UTR (janitor.guarding.probe_call).
            answer.background = BackgroundTask(pool.run, calls.mark, then)
        return answer

    @router.post(
        "/v1/guard/call/wait",
        response_model=dict[str, Any],
        responses={refused: {"description": "Refused: the wait ran out"}, **errors},
    )
    async def guard_call_wait(req: GuardWait) -> Any:
        """Wait, in turn, for a call that ``POST /v1/guard/call`` queued: ``run`` when
        admitted, ``refuse`` (507) when its wait runs out."""
        status, body = await waits.run(calls.guard_call_wait, req)
        return json_answer(body, status)

    @router.post("/v1/guard/release", response_model=dict[str, Any], responses=errors)
    async def guard_release(req: GuardRelease) -> Any:
        """End what a guarded call held (reservations and pins already ended are skipped)."""
        return json_answer(await pool.run(calls.guard_release, req))

    return router
