"""``/v1/reservations``: reserve bytes on a tree's volume, read, release, renew, grow, cover.

Each route's blocking half (a ledger write may wait for another process's writer lock; a
reservation may first evict caches) runs in the app's thread pool.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Body

from janitor.daemon.routes.answers import ERROR_RESPONSES, dumps, json_answer
from janitor.daemon.routes.models import (
    CoverRequest,
    GrowRequest,
    RefusalOut,
    RenewRequest,
    ReservationOut,
    ReserveRequest,
)
from janitor.error_statuses import status_of

if TYPE_CHECKING:
    from janitor.daemon.thread_pool import ThreadPool
    from janitor.daemon.view import DaemonView
    from janitor.ledger.reservations import ReservationInfo

__all__ = ["reservations_router"]

#: The keys of a reservation answer, in the documented order (what ``response_model`` kept).
_RESERVATION_KEYS = tuple(ReservationOut.model_fields)


def _reservation_body(info: ReservationInfo) -> bytes:
    body = {k: getattr(info, k) for k in _RESERVATION_KEYS}
    if body["expires"] == float("inf"):
        body["expires"] = None  # a job's working set: it ends with the job, not by a TTL
    return dumps(body)


class _Reservations:
    """The blocking halves of the routes, run in the pool's threads."""

    def __init__(self, daemon: DaemonView) -> None:
        self.daemon = daemon

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


def reservations_router(daemon: DaemonView, pool: ThreadPool) -> APIRouter:
    """The reservation routes over ``daemon``, their blocking halves run in ``pool``."""
    calls = _Reservations(daemon)
    router = APIRouter()
    errors = ERROR_RESPONSES
    refused = status_of("refused")

    @router.post(
        "/v1/reservations",
        status_code=201,
        response_model=ReservationOut,
        responses={
            refused: {"model": RefusalOut, "description": "Refused: not enough space"},
            **errors,
        },
    )
    async def reserve(req: ReserveRequest) -> Any:
        """Reserve bytes on a tree's volume (make room by evicting caches first, if allowed)."""
        return json_answer(await pool.run(calls.reserve, req), 201)

    @router.get("/v1/reservations/{rid}", response_model=ReservationOut, responses=errors)
    async def get_reservation(rid: str) -> Any:
        """One reservation in any state; ``at_risk`` is set while its volume is critical."""
        return json_answer(await pool.run(calls.get, rid))

    @router.delete("/v1/reservations/{rid}", response_model=ReservationOut, responses=errors)
    async def release(rid: str) -> Any:
        """Release a live reservation."""
        return json_answer(await pool.run(calls.release, rid))

    @router.post("/v1/reservations/{rid}/renew", response_model=ReservationOut, responses=errors)
    async def renew(rid: str, req: Annotated[RenewRequest | None, Body()] = None) -> Any:
        """Push a live reservation's expiry to now + ttl."""
        return json_answer(await pool.run(calls.renew, rid, None if req is None else req.ttl))

    @router.post(
        "/v1/reservations/{rid}/grow",
        response_model=ReservationOut,
        responses={
            refused: {"model": RefusalOut, "description": "Refused: the rest does not fit"},
            **errors,
        },
    )
    async def grow(rid: str, req: GrowRequest) -> Any:
        """Raise a live reservation to a new total, if the volume has room for the rest
        (a writer that learns its size late); 507 with the refusal's numbers if not."""
        return json_answer(await pool.run(calls.grow, rid, req.bytes))

    @router.post("/v1/reservations/{rid}/cover", response_model=ReservationOut, responses=errors)
    async def cover(rid: str, req: CoverRequest) -> Any:
        """Keep a live reservation live while process ``pid`` runs too (its command)."""
        return json_answer(await pool.run(calls.cover, rid, req.pid))

    return router
