"""One ASGI app served by uvicorn on sockets bound already, from its own thread and event loop.

The API server (:mod:`.server`) and the metrics listener (:mod:`.metrics_listener`) each run
one, so a failure of one never takes the other's sockets with it, and each is started and
stopped with the daemon like any other service: both are an :class:`HttpPart`, which stops and
joins its thread and closes what its app used.

uvicorn is driven through ``startup()`` and ``shutdown()`` rather than ``serve()``, whose main
loop wakes ten times a second to refresh the ``Date`` header and look at ``should_exit``: here
the loop sleeps until a request or the stop comes, and the ``Date`` header is computed when a
response is sent (:class:`_DateHeaders`). httptools and uvloop are used where installed, else
h11 and asyncio.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from email.utils import formatdate
from typing import Any, Protocol, TypeVar

import uvicorn
from starlette.types import ASGIApp

from janitor.daemon.http_limits import ConnectionLimits, bounded_protocol

__all__ = ["HttpPart", "HttpThread"]

log = logging.getLogger("janitor.daemon")


class _Closable(Protocol):
    def close(self) -> None: ...


_C = TypeVar("_C", bound=_Closable)


class HttpThread:
    """Serves ``app`` on ``sockets`` until stopped; ``on_failure()`` if it ends on its own.

    ``name`` is the thread's, ``what`` the server's in log lines ("API server"). ``limits``
    bound its connections (a listener other machines reach: :mod:`.http_limits`); without
    them, uvicorn's own rules apply (the API's socket, reached by this user alone).
    """

    def __init__(
        self,
        app: ASGIApp,
        sockets: list[socket.socket],
        stop: threading.Event,
        *,
        name: str,
        what: str,
        on_failure: Callable[[], None],
        server_header: bool = True,
        limits: ConnectionLimits | None = None,
    ) -> None:
        self.app = app
        self.sockets = sockets
        self.name = name
        self.what = what
        self.on_failure = on_failure
        self.server_header = server_header
        self.limits = limits
        #: True once the server ended without being asked to.
        self.failed = False
        self._stop = stop
        self._server: uvicorn.Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._exit: asyncio.Event | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Serve the sockets; returns once uvicorn listens (10 s at most)."""
        # httptools if installed, else h11; a listener with limits: httptools under them.
        http: Any = "auto"
        keep_alive, ws = 30, "auto"
        if self.limits is not None:
            http = bounded_protocol(self.limits, what=self.what)
            keep_alive = max(1, int(self.limits.idle_timeout_s))
            ws = "none"  # no upgrade to hold a connection past the limits
        config = uvicorn.Config(
            self.app,
            log_config=None,
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=1,
            timeout_keep_alive=keep_alive,
            http=http,
            ws=ws,
            proxy_headers=False,  # nothing in front of us to trust
            server_header=self.server_header,
            loop="none",  # the loop is made in the thread
        )
        config.load()
        server = self._server = uvicorn.Server(config)
        started = threading.Event()

        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._exit = asyncio.Event()
            server.lifespan = config.lifespan_class(config)
            extra = config.encoded_headers
            try:
                await server.startup(sockets=self.sockets)
                server.server_state.default_headers = _DateHeaders(extra, config.date_header)
            finally:
                started.set()
            if self._stop.is_set():
                self._exit.set()
            await self._exit.wait()
            await server.shutdown(sockets=self.sockets)

        def serve() -> None:
            try:
                with asyncio.Runner(loop_factory=_loop_factory()) as runner:
                    runner.run(main())
            except BaseException:
                log.exception("the %s failed", self.what)
            finally:
                started.set()
                if not self._stop.is_set():
                    self.failed = True
                    self.on_failure()

        self._thread = threading.Thread(target=serve, name=self.name, daemon=True)
        self._thread.start()
        started.wait(10)

    def stop(self) -> None:
        """Stop accepting; open connections get uvicorn's one second of grace."""
        if self._server is None:
            return
        self._server.should_exit = True
        if self._loop is not None and self._exit is not None:
            try:
                self._loop.call_soon_threadsafe(self._exit.set)
            except RuntimeError:  # the loop already ended
                pass

    def join(self) -> None:
        """Wait for the server thread (3 s at most), then close the sockets."""
        if self._thread is not None:
            self._thread.join(timeout=3.0)
        for sock in self.sockets:
            try:
                sock.close()
            except OSError:
                pass


class HttpPart:
    """A part of the daemon that serves one app on an :class:`HttpThread`, once ``start()``
    got that far (binding its sockets may fail first): ``stop()`` asks the server to stop,
    ``join()`` waits for its thread and closes its sockets, then what the app used (its
    worker pool, registered with :meth:`_closes`)."""

    def __init__(self) -> None:
        self._http: HttpThread | None = None
        self._closing: list[_Closable] = []

    def _closes(self, thing: _C) -> _C:
        """``thing``, to be closed by ``join()`` after the server's thread ended."""
        self._closing.append(thing)
        return thing

    def _serve(
        self,
        app: ASGIApp,
        sockets: list[socket.socket],
        stop: threading.Event,
        *,
        name: str,
        what: str,
        on_failure: Callable[[], None],
        server_header: bool = True,
        limits: ConnectionLimits | None = None,
    ) -> None:
        """Serve ``app`` on ``sockets`` from a thread of its own (see :class:`HttpThread`)."""
        self._http = HttpThread(
            app,
            sockets,
            stop,
            name=name,
            what=what,
            on_failure=on_failure,
            server_header=server_header,
            limits=limits,
        )
        self._http.start()

    def stop(self) -> None:
        """Stop accepting; open connections get uvicorn's one second of grace."""
        if self._http is not None:
            self._http.stop()

    def join(self) -> None:
        """Wait for the server's thread (3 s at most), close its sockets, then what its app
        used."""
        if self._http is not None:
            self._http.join()
        for thing in self._closing:
            thing.close()


class _DateHeaders(list[tuple[bytes, bytes]]):
    """uvicorn's default response headers with a ``Date`` that is current when it is read.

    uvicorn's protocols read ``ServerState.default_headers`` only by iterating it or adding it
    to a list; both refresh the date here (at most once a second), so nothing needs a timer.
    """

    def __init__(self, extra: list[tuple[bytes, bytes]], date: bool = True) -> None:
        super().__init__(extra)
        self._extra = list(extra)
        self._date = date
        self._second = -1
        self._refresh()

    def _refresh(self) -> None:
        if not self._date:
            return
        now = int(time.time())
        if now != self._second:
            self._second = now
            self[:] = [(b"date", formatdate(now, usegmt=True).encode()), *self._extra]

    def __iter__(self) -> Iterator[tuple[bytes, bytes]]:
        self._refresh()
        return super().__iter__()

    def __add__(self, other: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:  # type: ignore[override]
        self._refresh()
        return list(super().__iter__()) + other


def _loop_factory() -> Callable[[], Any] | None:
    """uvloop's loop where it is installed (not on Windows), else asyncio's default."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop
