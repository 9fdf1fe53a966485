"""The daemon's HTTP API, for workers in other languages (the pipeline's Rust server).

Served on a Unix socket (mode 0600) in the user runtime dir, and on 127.0.0.1:PORT only when
configured. It calls the same ``Janitor`` methods as the CLI and the Python API. The OpenAPI
schema is at ``/openapi.json``.

    curl --unix-socket /run/user/1000/space-janitor/janitor.sock \\
         -X POST http://janitor/v1/reservations \\
         -H 'content-type: application/json' \\
         -d '{"tree": "media_cache", "bytes": "2G", "job": "fa", "owner_pid": 4242}'
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import Body, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from janitor.errors import (
    ConfigError,
    JanitorError,
    LedgerError,
    LedgerFull,
    ReservationRefused,
    UnknownPin,
    UnknownReservation,
)

if TYPE_CHECKING:
    from janitor.daemon import Daemon

__all__ = ["create_app"]


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
    expires: float
    state: str
    ended: float | None
    at_risk: str | None
    outstanding: int


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
    message: str


class ErrorOut(BaseModel):
    """Any other error: a kind and a one-line message."""

    error: str
    message: str


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


def create_app(daemon: Daemon) -> FastAPI:
    """The ASGI app over a running daemon's janitor, state and event bus."""
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
    def reserve(req: ReserveRequest) -> Any:
        """Reserve bytes on a tree's volume (make room by evicting caches first, if allowed)."""
        r = daemon.janitor.reserve(
            req.tree,
            req.bytes,
            path=req.path,
            job=req.job,
            ttl=req.ttl,
            owner_pid=req.owner_pid,
            evict=req.evict,
        )
        return r.info.as_dict()

    @app.get("/v1/reservations/{rid}", response_model=ReservationOut, responses=errors)
    def get_reservation(rid: str) -> Any:
        """One reservation in any state; ``at_risk`` is set while its volume is critical."""
        return daemon.janitor.get(rid).as_dict()

    @app.delete("/v1/reservations/{rid}", response_model=ReservationOut, responses=errors)
    def release(rid: str) -> Any:
        """Release a live reservation."""
        return daemon.janitor.release(rid).as_dict()

    @app.post("/v1/reservations/{rid}/renew", response_model=ReservationOut, responses=errors)
    def renew(rid: str, req: Annotated[RenewRequest | None, Body()] = None) -> Any:
        """Push a live reservation's expiry to now + ttl."""
        return daemon.janitor.renew(rid, None if req is None else req.ttl).as_dict()

    @app.get("/v1/status", responses=errors)
    def status() -> dict[str, Any]:
        """Volumes, trees and live reservations measured now, plus the daemon's forecasts."""
        st = daemon.janitor.status(with_usage=False).as_dict()
        st["daemon"] = daemon.snapshot()
        return st

    @app.post("/v1/sweep", responses=errors)
    def sweep(req: Annotated[SweepRequest | None, Body()] = None) -> dict[str, Any]:
        """Sweep one tree or all (as `janitor sweep --json` reports it)."""
        req = req or SweepRequest()
        result = daemon.janitor.sweep(req.tree, dry_run=req.dry_run, pressure=req.pressure)
        return result.as_dict()

    @app.get("/metrics", response_class=Response, responses={200: {"content": {"text/plain": {}}}})
    def metrics() -> Response:
        """Prometheus text exposition."""
        from prometheus_client import CONTENT_TYPE_LATEST

        from janitor.metrics import render

        return Response(render(daemon.registry), media_type=CONTENT_TYPE_LATEST)

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
