"""The metrics listener: ``metrics_listen`` served with :mod:`.metrics_app`, for a Prometheus on
another machine, as an exporter serves it (node_exporter's ``:9100``).

It is served by uvicorn from a thread and event loop of its own (an :class:`.HttpPart`, as the
API), started after the API server and stopped before it. What other machines open on it is
bounded (:mod:`.http_limits`): a share of the daemon's descriptors at most, idle connections
closed, so no network can take the descriptors the socket API needs. An address that cannot be
bound (the port in use, an address this machine does not have, a name that does not resolve)
is one ERROR line in the daemon's log, and the daemon runs on without the listener: the socket
API, the reservations and the evictions matter more to the jobs on this machine than being
scraped, and Prometheus sees the target down (``up == 0``). Fix the address or free the port,
then restart the daemon.
"""

from __future__ import annotations

import errno
import logging
import socket
import threading
from typing import Any

from janitor.config.listen import ListenAddress
from janitor.daemon.http_limits import ConnectionLimits, limits_for
from janitor.daemon.http_thread import HttpPart
from janitor.daemon.metrics_app import MetricsSource, metrics_app
from janitor.daemon.thread_pool import ThreadPool
from janitor.host.fdlimit import open_files

__all__ = ["MetricsListener", "bind_listen"]

log = logging.getLogger("janitor.daemon")

#: Scrapes read the ledger and every volume: two at a time at most, the rest queue.
_WORKERS = 2


class MetricsListener(HttpPart):
    """Serves ``/metrics`` of ``source`` on ``address`` from ``start()`` until ``stop()``; its
    connections get their share of the open-file limit as it is then (the daemon raised it)."""

    def __init__(
        self,
        source: MetricsSource,
        address: ListenAddress,
        stop: threading.Event,
        *,
        version: str,
    ) -> None:
        super().__init__()
        self.source = source
        self.address = address
        self.version = version
        #: What its connections may hold (set by ``start()``).
        self.limits: ConnectionLimits | None = None
        #: Why the listener does not listen (None while it does, or before ``start()``).
        self.error: str | None = None
        self._stop = stop

    def start(self) -> None:
        """Bind and serve; a failure to bind is logged, never raised."""
        try:
            sockets = bind_listen(self.address)
        except OSError as exc:
            self.error = exc.strerror or str(exc)
            log.error(
                "metrics_listen %s: cannot listen: %s; the daemon runs on without it "
                "(free the port or change metrics_listen, then restart the daemon)",
                self.address,
                self.error,
            )
            return
        limits = self.limits = limits_for(open_files().soft)
        pool = self._closes(ThreadPool(max_workers=_WORKERS, name="janitor-metrics-worker"))
        self._serve(
            metrics_app(self.source, pool, version=self.version),
            sockets,
            self._stop,
            name="janitor-metrics",
            what="metrics listener",
            on_failure=self._failed,
            server_header=False,  # nothing about us for strangers beyond what is asked
            limits=limits,
        )
        where = ", ".join(_url(s.getsockname()) for s in sockets)
        log.info(
            "serving GET /metrics (nothing else) on %s: at most %d connections, idle ones "
            "closed after %g s",
            where,
            limits.max_connections,
            limits.idle_timeout_s,
        )

    def _failed(self) -> None:
        self.error = "stopped unexpectedly"
        log.error("the metrics listener stopped; the daemon runs on without it")


def bind_listen(address: ListenAddress) -> list[socket.socket]:
    """Listening sockets for ``address`` (OSError, socket.gaierror included, if impossible).

    ``:PORT`` is one dual-stack socket on ``::`` (IPv4 too), or ``0.0.0.0`` where the machine
    has no IPv6. A host name gets a socket on each address it resolves to that this machine
    has (``localhost``: 127.0.0.1 and ::1), as clients may try either.
    """
    port = address.port
    if address.every_interface:
        if socket.has_dualstack_ipv6():
            try:
                return [_server(("::", port), socket.AF_INET6, dualstack=True)]
            except OSError as exc:
                if exc.errno not in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT):
                    raise  # in use: IPv4 alone would be in use too
        return [_server(("0.0.0.0", port), socket.AF_INET)]
    infos = socket.getaddrinfo(address.host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    sockets: list[socket.socket] = []
    missing: OSError | None = None
    try:
        for family, sockaddr in dict.fromkeys((i[0], i[4]) for i in infos):
            try:
                sockets.append(_server(sockaddr, family))
            except OSError as exc:
                # An address the name has but this machine does not (::1 without IPv6).
                if exc.errno not in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT):
                    raise
                missing = exc
    except BaseException:
        for s in sockets:
            s.close()
        raise
    if not sockets:
        raise missing or OSError(errno.EADDRNOTAVAIL, f"{address.host} has no address here")
    return sockets


def _server(
    sockaddr: tuple[Any, ...], family: socket.AddressFamily, *, dualstack: bool = False
) -> socket.socket:
    sock = socket.create_server(
        sockaddr, family=family, backlog=128, dualstack_ipv6=dualstack, reuse_port=False
    )
    sock.set_inheritable(False)
    return sock


def _url(sockname: tuple[Any, ...]) -> str:
    host, port = sockname[0], sockname[1]
    return f"http://[{host}]:{port}/metrics" if ":" in host else f"http://{host}:{port}/metrics"
