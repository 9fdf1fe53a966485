"""The API server: the Unix socket (and loopback TCP when configured), served by uvicorn from
its own thread and event loop.

uvicorn is driven through ``startup()`` and ``shutdown()`` rather than ``serve()``, whose main
loop wakes ten times a second to refresh the ``Date`` header and look at ``should_exit``: here
the loop sleeps until a request or the stop comes, and the ``Date`` header is computed when a
response is sent (:class:`_DateHeaders`). httptools and uvloop are used where installed, else
h11 and asyncio.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from email.utils import formatdate
from typing import Any

import uvicorn

from janitor.config.settings import Settings
from janitor.daemon.api import DaemonView, Offload, serve_app

__all__ = ["ApiServer"]

log = logging.getLogger("janitor.daemon")


class ApiServer:
    """Serves ``view`` until stopped; ``on_failure()`` is called if it ends on its own."""

    def __init__(
        self,
        view: DaemonView,
        settings: Settings,
        stop: threading.Event,
        *,
        on_failure: Callable[[], None],
    ) -> None:
        self.view = view
        self.settings = settings
        self.on_failure = on_failure
        #: True once the server ended without being asked to.
        self.failed = False
        self._stop = stop
        self._sockets: list[socket.socket] = []
        self._offload: Offload | None = None
        self._server: uvicorn.Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._exit: asyncio.Event | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Bind the sockets and serve them; returns once uvicorn listens (10 s at most)."""
        self._bind()
        self._offload = Offload()
        config = uvicorn.Config(
            serve_app(self.view, self._offload),
            log_config=None,
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=1,
            timeout_keep_alive=30,
            http="auto",  # httptools if installed, else h11
            proxy_headers=False,  # local sockets only: no proxy to trust
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
                await server.startup(sockets=self._sockets)
                server.server_state.default_headers = _DateHeaders(extra, config.date_header)
            finally:
                started.set()
            if self._stop.is_set():
                self._exit.set()
            await self._exit.wait()
            await server.shutdown(sockets=self._sockets)

        def serve() -> None:
            try:
                with asyncio.Runner(loop_factory=_loop_factory()) as runner:
                    runner.run(main())
            except BaseException:
                log.exception("the API server failed")
            finally:
                started.set()
                if not self._stop.is_set():
                    self.failed = True
                    self.on_failure()

        self._thread = threading.Thread(target=serve, name="janitor-api", daemon=True)
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
        """Wait for the server thread (3 s at most), then close and remove the sockets."""
        if self._thread is not None:
            self._thread.join(timeout=3.0)
        if self._offload is not None:
            self._offload.close()
        for sock in self._sockets:
            try:
                sock.close()
            except OSError:
                pass
        # Ours even when binding failed half-way: we hold the daemon lock.
        try:
            self.settings.socket_path.unlink()
        except OSError:
            pass

    def _bind(self) -> None:
        path = self.settings.socket_path
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        # We hold the daemon lock, so a socket file left here is a dead daemon's.
        try:
            path.unlink()
        except FileNotFoundError:
            pass
        uds = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sockets.append(uds)
        old = os.umask(0o177)  # created 0600: only this user may connect
        try:
            uds.bind(str(path))
        finally:
            os.umask(old)
        os.chmod(path, 0o600)
        uds.listen(128)
        if self.settings.http_port is not None:
            tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self._sockets.append(tcp)
            tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            tcp.bind(("127.0.0.1", self.settings.http_port))  # loopback only, by design
            tcp.listen(128)
        for s in self._sockets:
            s.set_inheritable(False)


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
