"""The daemon's HTTP API, for workers in other languages (the pipeline's Rust server).

Served on a Unix socket (mode 0600) in the user runtime dir, and on 127.0.0.1:PORT only when
configured. It calls the same ``Janitor`` methods as the CLI and the Python API. The OpenAPI
schema is at ``/openapi.json``.

The app is its routes, one module per resource (:mod:`janitor.daemon.routes`), their wire
models apart (:mod:`janitor.daemon.routes.models`), and its error handlers, every status read
from one table (:mod:`janitor.error_statuses`). Nothing that can wait runs on the event loop:
every ``Janitor`` call (a ledger write may wait for another process's writer lock, a reservation
may first evict caches, a sweep takes seconds) goes to a
:class:`~janitor.daemon.thread_pool.ThreadPool`. What stays on the loop is parsing, validation
and JSON.

    curl --unix-socket /run/user/1000/space-janitor/janitor.sock \\
         -X POST http://janitor/v1/reservations \\
         -H 'content-type: application/json' \\
         -d '{"tree": "media_cache", "bytes": "2G", "job": "fa", "owner_pid": 4242}'
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import FastAPI
from starlette.types import ASGIApp

from janitor.daemon.routes.errors import add_error_handlers
from janitor.daemon.routes.estimate import estimate_router
from janitor.daemon.routes.guard import guard_router
from janitor.daemon.routes.monitoring import monitoring_router
from janitor.daemon.routes.reservations import reservations_router
from janitor.daemon.routes.status import status_router
from janitor.daemon.routes.sweeps import sweeps_router
from janitor.daemon.thread_pool import ThreadPool

if TYPE_CHECKING:
    from janitor.daemon.view import DaemonView

__all__ = ["create_app", "serve_app"]


def serve_app(daemon: DaemonView, pool: ThreadPool) -> ASGIApp:
    """What the daemon serves: :func:`create_app` with its blocking calls in ``pool``."""
    return create_app(daemon, pool)


def create_app(daemon: DaemonView, pool: ThreadPool | None = None) -> FastAPI:
    """The ASGI app over a running daemon's janitor, state and event bus.

    ``pool`` runs the blocking calls (a private one when not given).
    """
    pool = pool or ThreadPool()
    app = FastAPI(
        title="space-janitor",
        version=daemon.state.version,
        description="Disk-space reservations, cache eviction and ENOSPC risk for one machine.",
    )
    add_error_handlers(app)
    app.include_router(reservations_router(daemon, pool))
    app.include_router(guard_router(daemon, pool))
    app.include_router(estimate_router(daemon, pool))
    app.include_router(status_router(daemon, pool))
    app.include_router(sweeps_router(daemon, pool))
    app.include_router(monitoring_router(daemon, pool))
    return app
