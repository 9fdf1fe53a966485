"""``/v1/status`` and ``/v1/space``: what the daemon sees of its volumes, trees and
reservations, measured now (or, for ``/v1/space``'s walk, recently enough).

These answers can be large (every reservation): they are encoded in the worker too, as FastAPI
would (``jsonable_encoder``, then JSONResponse's JSON).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Query
from fastapi.encoders import jsonable_encoder
from fastapi.responses import Response

from janitor.daemon.routes.answers import ERROR_RESPONSES, dumps, json_answer
from janitor.sizes import MAX_DURATION_S
from janitor.usage import SPACE_MAX_AGE_S

if TYPE_CHECKING:
    from janitor.daemon.thread_pool import ThreadPool
    from janitor.daemon.view import DaemonView

__all__ = ["status_router"]


def status_router(daemon: DaemonView, pool: ThreadPool) -> APIRouter:
    """The status and space routes over ``daemon``, measured in ``pool``."""
    router = APIRouter()
    errors = ERROR_RESPONSES

    @router.get("/v1/status", response_model=dict[str, Any], responses=errors)
    async def status() -> Response:
        """Volumes, trees and live reservations measured now, plus the daemon's forecasts."""

        def work() -> bytes:
            now = daemon.refresh()
            st = now.as_dict()
            st["daemon"] = daemon.snapshot(now)
            return dumps(jsonable_encoder(st))

        return json_answer(await pool.run(work))

    @router.get("/v1/space", response_model=dict[str, Any], responses=errors)
    async def space(
        max_age: Annotated[float, Query(ge=0, le=MAX_DURATION_S)] = SPACE_MAX_AGE_S,
    ) -> Response:
        """What takes each volume's space (`janitor space --json`'s volumes), as the daemon
        last measured it (again first, when that is more than ``max_age`` seconds ago), and
        what it was measured for: policy file and version, state folder, folders walked."""
        return json_answer(await pool.run(lambda: dumps(daemon.space_report(max_age))))

    return router
