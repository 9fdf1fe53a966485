"""The daemon's HTTP API, for workers in other languages (the pipeline's Rust server).

Served on a Unix socket (mode 0600) in the user runtime dir, and on 127.0.0.1:PORT only when
configured. It calls the same ``Janitor`` methods as the CLI and the Python API. The OpenAPI
schema is at ``/openapi.json``.

Nothing that can wait runs on the event loop: every ``Janitor`` call (a ledger write may wait
for another process's writer lock, a reservation may first evict caches, a sweep takes seconds)
goes to :class:`Offload`'s threads. What stays on the loop is parsing, validation and JSON.
Answers are serialised once, from the documented models' keys, rather than re-validated
against ``response_model`` (which stays, for the schema).

    curl --unix-socket /run/user/1000/space-janitor/janitor.sock \\
         -X POST http://janitor/v1/reservations \\
         -H 'content-type: application/json' \\
         -d '{"tree": "media_cache", "bytes": "2G", "job": "fa", "owner_pid": 4242}'
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import queue
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Annotated, Any, Protocol, TypeVar

from fastapi import Body, FastAPI, Query, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp

from janitor.errors import (
    ConfigError,
    JanitorError,
    LedgerError,
    LedgerFull,
    ReservationRefused,
    UnknownPin,
    UnknownReservation,
)
from janitor.sizes import MAX_DURATION_S
from janitor.usage import SPACE_MAX_AGE_S

if TYPE_CHECKING:
    from janitor.config.settings import Settings
    from janitor.core import Janitor
    from janitor.daemon.events import EventBus
    from janitor.daemon.metrics import DaemonState
    from janitor.ledger.reservations import ReservationInfo
    from janitor.status import Status

__all__ = ["DaemonView", "Offload", "create_app", "serve_app"]

_T = TypeVar("_T")
log = logging.getLogger("janitor.daemon")


class DaemonView(Protocol):
    """What the app uses of the running daemon (``janitor.daemon.view.LiveView``): its
    janitor, settings, state and event bus, and its views measured now."""

    @property
    def janitor(self) -> Janitor: ...

    @property
    def settings(self) -> Settings: ...

    @property
    def state(self) -> DaemonState: ...

    @property
    def bus(self) -> EventBus: ...

    def refresh(self) -> Status:
        """Measure every volume now; the status measured."""
        ...

    def snapshot(self, status: Status | None = None) -> dict[str, Any]:
        """The daemon's published view (``status.json``)."""
        ...

    def metrics_text(self) -> bytes:
        """The Prometheus exposition, measured now."""
        ...

    def space_report(self, max_age: float) -> dict[str, Any]:
        """The last ``janitor space`` report, measured again if older than ``max_age`` s."""
        ...


class ReserveRequest(BaseModel):
    """A reservation request. ``bytes`` takes an integer or a size such as ``"2G"``."""

    model_config = ConfigDict(extra="forbid")

    tree: str = Field(min_length=1, max_length=200)
    bytes: int | str = Field(description="Bytes (integer) or a size: 500M, 2G, 1.5GiB.")
    path: str | None = Field(default=None, max_length=4096)
    job: str | None = Field(default=None, max_length=200)
    ttl: float | str | None = Field(default=None, description="Seconds, or 30m, 2h.")
    owner_pid: int | None = Field(
        default=None,
        ge=1,
        description="Process whose exit ends the reservation (default: the daemon; then only "
        "the TTL or a release ends it).",
    )
    evict: bool = Field(default=True, description="Evict caches to make room before refusing.")


class RenewRequest(BaseModel):
    """New lifetime from now; the default TTL when absent."""

    model_config = ConfigDict(extra="forbid")

    ttl: float | str | None = None


class GrowRequest(BaseModel):
    """The reservation's new total size: an integer or a size such as ``"3G"``."""

    model_config = ConfigDict(extra="forbid")

    bytes: int | str = Field(description="New total (not an increment): bytes or 500M, 2G.")


class CoverRequest(BaseModel):
    """A process the reservation must stay live for (the command run under it)."""

    model_config = ConfigDict(extra="forbid")

    pid: int = Field(ge=1)


class GuardWait(BaseModel):
    """A queued call's place (the ticket of ``POST /v1/guard/call``'s 202 answer), waited on
    until admitted."""

    model_config = ConfigDict(extra="forbid")

    ticket: str = Field(min_length=1, max_length=64)
    owner_pid: int = Field(ge=1, description="The guard: the wait ends if it does.")


class GuardCall(BaseModel):
    """One ffmpeg call as a guard (either front end) got it, for the daemon to estimate, admit,
    pin and record (``POST /v1/guard/call``): its arguments and folder, the guard and its
    parent, the real ffmpeg (its ffprobe measures the inputs), the ``JANITOR_*`` variables that
    shape a call (``JANITOR_JOB``, ``JANITOR_RUN``, ``JANITOR_POLICY``, ``JANITOR_CACHE_DIR``,
    ``JANITOR_GUARD_WAIT_S``) and what ``janitor shim install`` resolved (``policy``,
    ``cache_dir``, ``wait_s``), the variables winning."""

    model_config = ConfigDict(extra="forbid")

    args: list[Annotated[str, Field(max_length=65536)]] = Field(max_length=4096)
    cwd: str = Field(min_length=1, max_length=4096)
    owner_pid: int = Field(ge=1, description="The guard's pid: its exit ends the call's own.")
    writer_pid: int | None = Field(default=None, ge=1, description="The guard's parent.")
    ffmpeg: str = Field(min_length=1, max_length=4096, description="The real ffmpeg it runs.")
    elapsed_s: float = Field(
        default=0.0,
        ge=0,
        le=86400,
        description="Seconds the call had taken when it was sent (the front end's own start): "
        "its wait for room counts from the guarded ffmpeg's start, one deadline.",
    )
    env: dict[str, Annotated[str, Field(max_length=4096)]] = Field(
        default_factory=dict, max_length=16
    )
    config: dict[str, Annotated[str, Field(max_length=4096)]] = Field(
        default_factory=dict, max_length=16
    )


class ProbeCall(BaseModel):
    """One ffprobe call as a guarded ffprobe got it (``POST /v1/guard/probe``): its arguments
    and folder, the guard and its parent (the prober), the real ffprobe, the variables that
    shape it (``TMPDIR``: where the prober's jobs go; ``JANITOR_POLICY``,
    ``JANITOR_CACHE_DIR``) and what ``janitor shim install`` resolved (``policy``)."""

    model_config = ConfigDict(extra="forbid")

    args: list[Annotated[str, Field(max_length=65536)]] = Field(max_length=4096)
    cwd: str = Field(min_length=1, max_length=4096)
    owner_pid: int = Field(ge=1, description="The guard's pid.")
    writer_pid: int | None = Field(default=None, ge=1, description="The guard's parent.")
    ffprobe: str = Field(min_length=1, max_length=4096, description="The real ffprobe it runs.")
    env: dict[str, Annotated[str, Field(max_length=4096)]] = Field(
        default_factory=dict, max_length=16
    )
    config: dict[str, Annotated[str, Field(max_length=4096)]] = Field(
        default_factory=dict, max_length=16
    )


class EstimateRequest(BaseModel):
    """An ffmpeg argument list (without ``ffmpeg``) whose output bytes are wanted."""

    model_config = ConfigDict(extra="forbid")

    args: list[str] = Field(min_length=1, max_length=1024)
    cwd: str | None = Field(
        default=None,
        max_length=4096,
        description="The folder relative paths are taken against (absolute); required when "
        "an input or output path is relative.",
    )


class WrittenOutput(BaseModel):
    """One output of a guarded call and the bytes it held when ffmpeg ended."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(max_length=4096)
    bytes: int = Field(ge=0, le=1 << 50)


class GuardRelease(BaseModel):
    """What a guarded call held: its reservations and pins, ended together."""

    model_config = ConfigDict(extra="forbid")

    reservations: list[str] = Field(default_factory=list, max_length=256)
    pins: list[str] = Field(default_factory=list, max_length=256)
    #: Its cuts on its jobs' working sets, no longer in flight.
    draws: list[str] = Field(default_factory=list, max_length=256)
    #: What the call left at its outputs (``janitor run`` sums it up), its job and run.
    written: list[WrittenOutput] = Field(default_factory=list, max_length=256)
    job: str | None = Field(None, max_length=256)
    run: str | None = Field(None, max_length=64)


class SweepRequest(BaseModel):
    """Which tree to sweep (all when absent), and whether only to plan."""

    model_config = ConfigDict(extra="forbid")

    tree: str | None = None
    dry_run: bool = False
    pressure: bool = True


class ReservationOut(BaseModel):
    """A reservation, as `janitor reserve --json` prints it."""

    id: str
    tree: str
    device: int
    volume: str
    bytes: int
    path: str | None
    job: str | None
    owner_pid: int
    created: float
    expires: float | None = Field(description="null for a job's working set: it ends with the job")
    state: str
    ended: float | None
    at_risk: str | None
    outstanding: int
    command_pid: int | None = None
    job_id: str | None = None


class RefusalOut(BaseModel):
    """507: the request does not fit; the numbers say by how much."""

    error: str
    tree: str
    volume: str
    requested: int
    free: int
    floor: int
    reserved: int
    available: int
    shortfall: int
    evicted: int
    queued: int = Field(0, description="Bytes wanted by calls waiting ahead of this one.")
    waited_s: float = Field(0.0, description="Seconds this call waited for room.")
    output: str | None = Field(None, description="The output file refused (a guarded call).")
    message: str


class ErrorOut(BaseModel):
    """Any other error: a kind and a one-line message."""

    error: str
    message: str


#: The keys of a reservation answer, in the documented order (what ``response_model`` kept).
_RESERVATION_KEYS = tuple(ReservationOut.model_fields)


def _dumps(data: Any) -> bytes:
    """JSON as Starlette's JSONResponse renders it (compact, UTF-8, no NaN)."""
    return json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


def _reservation_body(info: ReservationInfo) -> bytes:
    body = {k: getattr(info, k) for k in _RESERVATION_KEYS}
    if body["expires"] == float("inf"):
        body["expires"] = None  # a job's working set: it ends with the job, not by a TTL
    return _dumps(body)


def _json(body: bytes, status: int = 200) -> Response:
    return Response(body, status_code=status, media_type="application/json")


class Offload:
    """Runs blocking calls in worker threads and awaits them on the event loop.

    A leaner ``run_in_executor``: one queue, daemon threads started as needed (up to
    ``max_workers``) and kept, so each keeps its ledger connection; a stopping daemon never
    waits for a sweep in progress.
    """

    def __init__(self, max_workers: int = 32, name: str = "janitor-api-worker") -> None:
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._max = max_workers
        self._name = name
        self._threads = 0
        self._idle = 0
        self._after = threading.local()

    def after(self, work: Callable[[], object]) -> None:
        """From inside a call: run ``work`` in the same worker once the call's answer is
        handed back (what need not delay the answer). Its errors are logged, not raised."""
        pending: list[Callable[[], object]] | None = getattr(self._after, "work", None)
        if pending is None:
            work()  # not inside a worker: at once
        else:
            pending.append(work)

    async def run(self, fn: Callable[..., _T], *args: Any) -> _T:
        """``fn(*args)`` in a worker; its exception is raised here."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[_T] = loop.create_future()
        with self._lock:
            spawn = self._idle == 0 and self._threads < self._max
            if spawn:
                self._threads += 1
                name = f"{self._name}-{self._threads}"
            else:
                self._idle -= 1  # taken: the next call must not count on the same worker
        if spawn:
            threading.Thread(target=self._work, name=name, daemon=True).start()
        self._queue.put((loop, fut, fn, args))
        return await fut

    def _work(self) -> None:
        get = self._queue.get
        while True:
            item = get()
            if item is None:
                return
            loop, fut, fn, args = item
            pending: list[Callable[[], object]] = []
            self._after.work = pending
            try:
                result, error = fn(*args), None
            except BaseException as exc:  # handed to the awaiting request
                result, error = None, exc
            try:
                loop.call_soon_threadsafe(_settle, fut, result, error)
            except RuntimeError:  # the loop is closed: nobody waits any more
                pass
            self._after.work = None
            for work in pending:
                try:
                    work()
                except Exception:
                    log.exception("work after an answer failed")
            with self._lock:
                self._idle += 1

    def close(self) -> None:
        """Let idle workers end (busy ones end after their call)."""
        with self._lock:
            n = self._threads
        for _ in range(n):
            self._queue.put(None)


def _settle(fut: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if fut.cancelled():
        return
    if error is not None:
        fut.set_exception(error)
    else:
        fut.set_result(result)


def _error(status: int, kind: str, exc: BaseException | str) -> JSONResponse:
    return JSONResponse({"error": kind, "message": str(exc)}, status_code=status)


def _janitor_error(exc: JanitorError) -> JSONResponse:
    if isinstance(exc, ReservationRefused):
        return JSONResponse(exc.as_dict(), status_code=507, headers={"Retry-After": "5"})
    if isinstance(exc, UnknownReservation | UnknownPin):
        return _error(404, "not_found", exc)
    if isinstance(exc, LedgerFull):
        return _error(507, "ledger_full", exc)
    if isinstance(exc, ConfigError):
        return _error(422, "bad_request", exc)
    if isinstance(exc, LedgerError):
        return _error(503, "ledger_unavailable", exc)
    return _error(400, "error", exc)


class _Calls:
    """The blocking halves of the endpoints, run in the offload threads."""

    def __init__(self, daemon: DaemonView, offload: Offload) -> None:
        self.daemon = daemon
        #: Work to run after an answer is handed back (janitor.guarding.probe_call's marking).
        self.after = offload.after
        #: Queued calls by ticket, between their 202 answer and their wait (and since when).
        self._queued: dict[str, tuple[Any, float]] = {}
        self._queued_lock = threading.Lock()
        #: The guards' probes, by probe cache and real ffmpeg (see _guard_probe).
        self._probes: dict[tuple[str | None, str], Any] = {}

    def reserve(self, req: ReserveRequest) -> bytes:
        r = self.daemon.janitor.reserve(
            req.tree,
            req.bytes,
            path=req.path,
            job=req.job,
            ttl=req.ttl,
            owner_pid=req.owner_pid,
            evict=req.evict,
        )
        return _reservation_body(r.info)

    def get(self, rid: str) -> bytes:
        return _reservation_body(self.daemon.janitor.get(rid))

    def release(self, rid: str) -> bytes:
        return _reservation_body(self.daemon.janitor.release(rid))

    def renew(self, rid: str, ttl: float | str | None) -> bytes:
        return _reservation_body(self.daemon.janitor.renew(rid, ttl))

    def grow(self, rid: str, nbytes: int | str) -> bytes:
        return _reservation_body(self.daemon.janitor.grow(rid, nbytes))

    def cover(self, rid: str, pid: int) -> bytes:
        return _reservation_body(self.daemon.janitor.cover(rid, pid))

    def estimate(self, req: EstimateRequest) -> tuple[int, bytes]:
        from janitor.guarding import ffmpeg
        from janitor.guarding.prepare import locate

        if req.cwd is not None and not os.path.isabs(req.cwd):
            return 422, _dumps(
                {"error": "bad_request", "message": f"cwd {req.cwd!r} is not absolute"}
            )
        if req.cwd is None:
            inv = ffmpeg.parse(req.args)
            paths = [*ffmpeg.input_files(inv), *(ffmpeg.local_path(o.url) for o in inv.outputs)]
            relative = [p for p in paths if p is not None and not os.path.isabs(p)]
            if relative:
                return 422, _dumps(
                    {"error": "bad_request", "message": f"{relative[0]!r} is relative: give cwd"}
                )
        est = ffmpeg.estimate_command(req.args, cwd=req.cwd or "/", probe=self._probe())
        if isinstance(est, ffmpeg.NotEstimable):
            return 200, _dumps({"estimable": False, "reason": est.reason})
        jan = self.daemon.janitor
        outputs = []
        for o in est:
            where = locate(jan, o.path)
            outputs.append(
                {
                    "path": o.path,
                    "bytes": o.bytes,
                    "header_bytes": o.header_bytes,
                    "duration_s": o.duration_s,
                    "format": o.format,
                    "codec": o.codec,
                    "sample_rate": o.sample_rate,
                    "channels": o.channels,
                    "tree": None if where is None else where.tree,
                    "in_tree": where is not None and where.in_tree,
                }
            )
        total = sum(o.bytes for o in est)
        return 200, _dumps({"estimable": True, "outputs": outputs, "total_bytes": total})

    def _probe(self) -> Any:
        """The guard's probe cache (one per user), so a recording is probed once for both."""
        from janitor.guarding import ffmpeg

        probe = getattr(self, "_probe_cache", None)
        if probe is None:
            probe = self._probe_cache = ffmpeg.Probe(ffmpeg.probe_cache_dir())
        return probe

    def guard_call(self, req: GuardCall, received: float) -> tuple[int, bytes]:
        """``received``: when the request came in (``time.monotonic()``): the call's wait for
        room counts from then, estimating it too."""
        from janitor.guarding.verdict import decide

        if not os.path.isabs(req.cwd):
            return 422, _dumps({"error": "bad_request", "message": f"cwd {req.cwd!r} is relative"})
        verdict = decide(
            self.daemon.janitor,
            req.model_dump(),
            probe_for=self._guard_probe,
            policy_path=str(self.daemon.settings.policy_path),
            received=received,
        )
        if verdict.prepared is not None:
            self._park(verdict.body["ticket"], verdict.prepared)
        return verdict.status, _dumps(verdict.body)

    def guard_probe(self, req: ProbeCall) -> tuple[int, bytes]:
        from janitor.guarding.probe_call import decide_probe

        if not os.path.isabs(req.cwd):
            return 422, _dumps({"error": "bad_request", "message": f"cwd {req.cwd!r} is relative"})
        verdict = decide_probe(
            self.daemon.janitor,
            req.model_dump(),
            policy_path=str(self.daemon.settings.policy_path),
            defer=self.after,
        )
        return verdict.status, _dumps(verdict.body)

    def guard_call_wait(self, req: GuardWait) -> tuple[int, bytes]:
        from janitor.guarding.verdict import decide_wait
        from janitor.host.owner import is_alive, process_start

        prep = self._unpark(req.ticket)
        if prep is None:
            return 404, _dumps(
                {"error": "not_found", "message": f"no queued call {req.ticket!r} here"}
            )
        start = process_start(req.owner_pid)
        verdict = decide_wait(
            self.daemon.janitor, prep, req.ticket, lambda: is_alive(req.owner_pid, start)
        )
        return verdict.status, _dumps(verdict.body)

    def _guard_probe(self, cache_dir: str | None, ffmpeg_path: str) -> Any:
        """A probe per probe cache and real ffmpeg the guards name, kept (its memory too)."""
        from janitor.guarding import ffmpeg

        key = (cache_dir, ffmpeg_path)
        with self._queued_lock:
            probe = self._probes.get(key)
            if probe is None:
                if len(self._probes) >= 16:
                    self._probes.clear()
                folder = ffmpeg.probe_cache_dir(cache_dir)
                probe = self._probes[key] = ffmpeg.Probe(folder, ffmpeg=ffmpeg_path)
        return probe

    def _park(self, ticket: str, prep: Any) -> None:
        """Keep a queued call's place until its guard comes back to wait for it."""
        with self._queued_lock:
            # A guard that never came back for its place (killed between the two calls)
            # leaves its entry: those older than any wait could last are dropped.
            stale = time.monotonic() - 86400
            for old in [t for t, (_, at) in self._queued.items() if at < stale]:
                del self._queued[old]
            self._queued[ticket] = (prep, time.monotonic())

    def _unpark(self, ticket: str) -> Any:
        with self._queued_lock:
            entry = self._queued.pop(ticket, None)
        return None if entry is None else entry[0]

    def guard_release(self, req: GuardRelease) -> bytes:
        from janitor.guarding.close import close_writes
        from janitor.guarding.held import Written

        written = [Written(w.path, w.bytes) for w in req.written]
        jan = self.daemon.janitor
        close_writes(
            jan, req.reservations, req.pins, written, job=req.job, run=req.run, draws=req.draws
        )
        return _dumps({"reservations": req.reservations, "pins": req.pins})


def serve_app(daemon: DaemonView, offload: Offload) -> ASGIApp:
    """What the daemon serves: :func:`create_app` with its blocking calls in ``offload``."""
    return create_app(daemon, offload)


def create_app(daemon: DaemonView, offload: Offload | None = None) -> FastAPI:
    """The ASGI app over a running daemon's janitor, state and event bus.

    ``offload`` runs the blocking calls (a private one when not given).
    """
    off = offload or Offload()
    # Queued calls wait in threads of their own, so a queue never holds up the API.
    waits = Offload(max_workers=256, name="janitor-api-wait")
    calls = _Calls(daemon, off)
    app = FastAPI(
        title="space-janitor",
        version=daemon.state.version,
        description="Disk-space reservations, cache eviction and ENOSPC risk for one machine.",
    )
    errors: dict[int | str, dict[str, Any]] = {
        404: {"model": ErrorOut, "description": "Unknown reservation"},
        422: {"model": ErrorOut, "description": "Bad request"},
    }

    @app.exception_handler(JanitorError)
    async def _on_janitor_error(request: Request, exc: JanitorError) -> JSONResponse:
        return _janitor_error(exc)

    @app.exception_handler(StarletteHTTPException)
    async def _on_http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400:  # an undecodable body: a bad request like any other
            return _error(422, "bad_request", f"body: {exc.detail}")
        kinds = {404: "not_found", 405: "method_not_allowed"}
        return _error(exc.status_code, kinds.get(exc.status_code, "error"), str(exc.detail))

    @app.exception_handler(RequestValidationError)
    async def _on_validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body") or "body"
        return _error(422, "bad_request", f"{where}: {first.get('msg')}")

    @app.post(
        "/v1/reservations",
        status_code=201,
        response_model=ReservationOut,
        responses={
            507: {"model": RefusalOut, "description": "Refused: not enough space"},
            **errors,
        },
    )
    async def reserve(req: ReserveRequest) -> Any:
        """Reserve bytes on a tree's volume (make room by evicting caches first, if allowed)."""
        return _json(await off.run(calls.reserve, req), 201)

    @app.get("/v1/reservations/{rid}", response_model=ReservationOut, responses=errors)
    async def get_reservation(rid: str) -> Any:
        """One reservation in any state; ``at_risk`` is set while its volume is critical."""
        return _json(await off.run(calls.get, rid))

    @app.delete("/v1/reservations/{rid}", response_model=ReservationOut, responses=errors)
    async def release(rid: str) -> Any:
        """Release a live reservation."""
        return _json(await off.run(calls.release, rid))

    @app.post("/v1/reservations/{rid}/renew", response_model=ReservationOut, responses=errors)
    async def renew(rid: str, req: Annotated[RenewRequest | None, Body()] = None) -> Any:
        """Push a live reservation's expiry to now + ttl."""
        return _json(await off.run(calls.renew, rid, None if req is None else req.ttl))

    @app.post(
        "/v1/reservations/{rid}/grow",
        response_model=ReservationOut,
        responses={
            507: {"model": RefusalOut, "description": "Refused: the rest does not fit"},
            **errors,
        },
    )
    async def grow(rid: str, req: GrowRequest) -> Any:
        """Raise a live reservation to a new total, if the volume has room for the rest
        (a writer that learns its size late); 507 with the refusal's numbers if not."""
        return _json(await off.run(calls.grow, rid, req.bytes))

    @app.post("/v1/reservations/{rid}/cover", response_model=ReservationOut, responses=errors)
    async def cover(rid: str, req: CoverRequest) -> Any:
        """Keep a live reservation live while process ``pid`` runs too (its command)."""
        return _json(await off.run(calls.cover, rid, req.pid))

    @app.post(
        "/v1/guard/call",
        response_model=dict[str, Any],
        responses={
            202: {"description": "Queued (action wait): then POST /v1/guard/call/wait"},
            507: {"description": "Refused: an output does not fit (action refuse)"},
            409: {"model": ErrorOut, "description": "The daemon runs another policy"},
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
        status, body = await off.run(calls.guard_call, req, time.monotonic())
        return _json(body, status)

    @app.post(
        "/v1/guard/probe",
        response_model=dict[str, Any],
        responses={507: {"description": "Refused: the probed WAV's alignment can never fit"},
                   **errors},
    )  # fmt: skip
    async def guard_probe(req: ProbeCall) -> Any:
        """One ffprobe call of a guarded ffprobe: the cache entries it probes are marked
        awaiting use for its caller; ``exec`` (run the real ffprobe) or ``refuse`` (507: a cached
        WAV whose alignment could never fit in the caller's ``TMPDIR``), with the lines to print
        and log."""
        status, body = await off.run(calls.guard_probe, req)
        return _json(body, status)

    @app.post(
        "/v1/guard/call/wait",
        response_model=dict[str, Any],
        responses={507: {"description": "Refused: the wait ran out"}, **errors},
    )
    async def guard_call_wait(req: GuardWait) -> Any:
        """Wait, in turn, for a call that ``POST /v1/guard/call`` queued: ``run`` when
        admitted, ``refuse`` (507) when its wait runs out."""
        status, body = await waits.run(calls.guard_call_wait, req)
        return _json(body, status)

    @app.post("/v1/estimate", response_model=dict[str, Any], responses=errors)
    async def estimate(req: EstimateRequest) -> Any:
        """The files an ffmpeg command will write and their bytes, as the guard works them out
        (``estimable: false`` with the reason when it cannot be sure), and the tree of each."""
        status, body = await off.run(calls.estimate, req)
        return _json(body, status)

    @app.post("/v1/guard/release", response_model=dict[str, Any], responses=errors)
    async def guard_release(req: GuardRelease) -> Any:
        """End what a guarded call held (reservations and pins already ended are skipped)."""
        return _json(await off.run(calls.guard_release, req))

    # These answers can be large (every reservation; every unit a sweep planned): they are
    # encoded in the worker too, as FastAPI would (jsonable_encoder, then JSONResponse's JSON).
    @app.get("/v1/status", response_model=dict[str, Any], responses=errors)
    async def status() -> Response:
        """Volumes, trees and live reservations measured now, plus the daemon's forecasts."""

        def work() -> bytes:
            now = daemon.refresh()
            st = now.as_dict()
            st["daemon"] = daemon.snapshot(now)
            return _dumps(jsonable_encoder(st))

        return _json(await off.run(work))

    @app.get("/v1/space", response_model=dict[str, Any], responses=errors)
    async def space(
        max_age: Annotated[float, Query(ge=0, le=MAX_DURATION_S)] = SPACE_MAX_AGE_S,
    ) -> Response:
        """What takes each volume's space (`janitor space --json`'s volumes), as the daemon
        last measured it (again first, when that is more than ``max_age`` seconds ago), and
        what it was measured for: policy file and version, state folder, folders walked."""
        return _json(await off.run(lambda: _dumps(daemon.space_report(max_age))))

    @app.post("/v1/sweep", response_model=dict[str, Any], responses=errors)
    async def sweep(req: Annotated[SweepRequest | None, Body()] = None) -> Response:
        """Sweep one tree or all (as `janitor sweep --json` reports it)."""
        r = req or SweepRequest()

        def work() -> bytes:
            result = daemon.janitor.sweep(r.tree, dry_run=r.dry_run, pressure=r.pressure)
            return _dumps(jsonable_encoder(result.as_dict()))

        return _json(await off.run(work))

    @app.get("/metrics", response_class=Response, responses={200: {"content": {"text/plain": {}}}})
    async def metrics() -> Response:
        """Prometheus text exposition."""
        from prometheus_client import CONTENT_TYPE_LATEST

        text = await off.run(daemon.metrics_text)
        return Response(text, media_type=CONTENT_TYPE_LATEST)

    @app.get(
        "/v1/events",
        response_class=StreamingResponse,
        responses={200: {"content": {"text/event-stream": {}}}},
    )
    async def events() -> StreamingResponse:
        """Server-Sent Events: level changes, refusals, reservations at risk, evictions."""
        queue = daemon.bus.subscribe()

        async def stream() -> AsyncIterator[str]:
            try:
                yield ": connected\n\n"
                while True:
                    try:
                        event = await asyncio.wait_for(queue.get(), timeout=15)
                    except TimeoutError:
                        yield ": keepalive\n\n"
                        continue
                    if event is None:
                        return
                    yield event.sse()
            finally:
                daemon.bus.unsubscribe(queue)

        return StreamingResponse(
            stream(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"}
        )

    return app
