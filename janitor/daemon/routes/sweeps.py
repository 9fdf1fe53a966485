"""``/v1/sweep``: sweep one tree or all, or only plan it, as ``janitor sweep --json`` reports.

A sweep takes seconds: it runs in the app's thread pool, and its answer (every unit it
planned) is encoded there too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Body
from fastapi.encoders import jsonable_encoder
from fastapi.responses import Response

from janitor.daemon.routes.answers import ERROR_RESPONSES, dumps, json_answer
from janitor.daemon.routes.models import SweepRequest

if TYPE_CHECKING:
    from janitor.daemon.thread_pool import ThreadPool
    from janitor.daemon.view import DaemonView

__all__ = ["sweeps_router"]


def sweeps_router(daemon: DaemonView, pool: ThreadPool) -> APIRouter:
    """The sweep route over ``daemon``'s janitor, run in ``pool``."""
    router = APIRouter()

    @router.post("/v1/sweep", response_model=dict[str, Any], responses=ERROR_RESPONSES)
    async def sweep(req: Annotated[SweepRequest | None, Body()] = None) -> Response:
        """Sweep one tree or all (as `janitor sweep --json` reports it)."""
        r = req or SweepRequest()

        def work() -> bytes:
            result = daemon.janitor.sweep(r.tree, dry_run=r.dry_run, pressure=r.pressure)
            return dumps(jsonable_encoder(result.as_dict()))

        return json_answer(await pool.run(work))

    return router
