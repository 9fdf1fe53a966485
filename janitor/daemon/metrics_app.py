"""What the metrics listener answers: ``GET /metrics`` and a one-line page at ``/``, as
exporters do; 404 for every other path and 405 for every other method.

A separate app from the API's (:mod:`.api`), not a filter in front of it: nothing that reserves,
sweeps, reads a path or streams events is routed here, so none of it can be reached from the
network whatever a request looks like. ``/metrics`` is the same text as ``/metrics`` on the
socket (:meth:`LiveView.metrics_text <janitor.daemon.view.LiveView.metrics_text>`): numbers,
tree names and mount points. Compressed with gzip when the scraper asks (Prometheus does).
"""

from __future__ import annotations

import html
import logging
from typing import Protocol

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.gzip import GZipMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp

from janitor.daemon.thread_pool import ThreadPool

__all__ = ["MetricsSource", "metrics_app"]

log = logging.getLogger("janitor.daemon")


class MetricsSource(Protocol):
    """What the app reads (``janitor.daemon.view.LiveView`` fits)."""

    def metrics_text(self) -> bytes:
        """The Prometheus exposition, measured now."""
        ...


def metrics_app(source: MetricsSource, pool: ThreadPool, *, version: str) -> ASGIApp:
    """The ASGI app: ``/metrics`` from ``source`` (read in ``pool``), ``/`` a pointer to it."""
    from prometheus_client import CONTENT_TYPE_LATEST

    landing = (
        "<!DOCTYPE html><html><head><title>space-janitor</title></head><body>"
        f"<h1>space-janitor {html.escape(version)}</h1>"
        '<p><a href="/metrics">Metrics</a></p></body></html>\n'
    )

    async def metrics(request: Request) -> Response:
        try:
            text = await pool.run(source.metrics_text)
        except Exception:
            log.exception("the metrics listener could not read the metrics")
            return PlainTextResponse("metrics unavailable; see the daemon's log\n", 500)
        return Response(text, media_type=CONTENT_TYPE_LATEST)

    async def index(request: Request) -> Response:
        return HTMLResponse(landing)

    app = Starlette(
        routes=[Route("/metrics", metrics, methods=["GET"]), Route("/", index, methods=["GET"])],
        middleware=[Middleware(GZipMiddleware, minimum_size=1024)],
    )
    app.router.redirect_slashes = False  # /metrics/ is not found, not a redirect elsewhere
    return app
