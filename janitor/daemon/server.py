"""The API server: the Unix socket (and loopback TCP when configured), served by uvicorn from
its own thread and event loop (an :class:`~janitor.daemon.http_thread.HttpPart`)."""

from __future__ import annotations

import os
import socket
import sys
import threading
from collections.abc import Callable

from janitor.config.settings import Settings
from janitor.daemon.api import serve_app
from janitor.daemon.http_thread import HttpPart
from janitor.daemon.thread_pool import ThreadPool
from janitor.daemon.view import DaemonView
from janitor.errors import ConfigError

__all__ = ["ApiServer"]

#: sockaddr_un's sun_path: 108 bytes on Linux, 104 on macOS, with its terminating NUL.
_SUN_PATH = 104 if sys.platform == "darwin" else 108


class ApiServer(HttpPart):
    """Serves ``view`` until stopped; ``on_failure()`` is called if it ends on its own."""

    def __init__(
        self,
        view: DaemonView,
        settings: Settings,
        stop: threading.Event,
        *,
        on_failure: Callable[[], None],
    ) -> None:
        super().__init__()
        self.view = view
        self.settings = settings
        self.on_failure = on_failure
        self._stop = stop
        self._sockets: list[socket.socket] = []

    @property
    def failed(self) -> bool:
        """True once the server ended without being asked to."""
        return self._http is not None and self._http.failed

    def start(self) -> None:
        """Bind the sockets and serve them; returns once uvicorn listens (10 s at most)."""
        self._bind()
        pool = self._closes(ThreadPool())
        self._serve(
            serve_app(self.view, pool),
            self._sockets,
            self._stop,
            name="janitor-api",
            what="API server",
            on_failure=self.on_failure,
        )

    def join(self) -> None:
        """Wait for the server thread (3 s at most), then close and remove the sockets (those
        bound before a failed start too)."""
        super().join()
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
        if len(os.fsencode(path)) >= _SUN_PATH:
            raise ConfigError(
                f"the daemon's socket {path} is {len(os.fsencode(path))} bytes long, more than a "
                f"Unix socket's path may be ({_SUN_PATH - 1}); set runtime_dir "
                "(JANITOR_RUNTIME_DIR) to a shorter folder"
            )
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
