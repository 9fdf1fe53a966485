"""``/metrics`` and ``/v1/events``: what a monitor reads of the daemon, its Prometheus text
exposition (measured now) and its events as Server-Sent Events (level changes, refusals,
reservations at risk, evictions), with a comment line every 15 s on an idle stream."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from fastapi import APIRouter
from fastapi.responses import Response, StreamingResponse

if TYPE_CHECKING:
    from janitor.daemon.thread_pool import ThreadPool
    from janitor.daemon.view import DaemonView

__all__ = ["monitoring_router"]

#: Seconds between two keep-alive comments on an idle stream.
_KEEPALIVE_S = 15


def monitoring_router(daemon: DaemonView, pool: ThreadPool) -> APIRouter:
    """The metrics of ``daemon`` (measured in ``pool``) and the event stream of its bus (which
    waits on the event loop: no thread)."""
    router = APIRouter()

    @router.get(
        "/metrics", response_class=Response, responses={200: {"content": {"text/plain": {}}}}
    )
    async def metrics() -> Response:
        """Prometheus text exposition."""
        from prometheus_client import CONTENT_TYPE_LATEST

        text = await pool.run(daemon.metrics_text)
        return Response(text, media_type=CONTENT_TYPE_LATEST)

    @router.get(
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
                        event = await asyncio.wait_for(queue.get(), timeout=_KEEPALIVE_S)
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

    return router
