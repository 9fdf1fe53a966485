"""Limits on the connections of a listener that other machines reach (``metrics_listen``), so
that what they open can never take the descriptors the local API needs.

uvicorn alone does not bound them (read in its source, 0.55): it accepts every connection
while the process has a descriptor left; ``limit_concurrency`` only answers 503 to a *request*
once that many connections are open, so connections that never send one are kept all the same;
``timeout_keep_alive`` is armed only after a response, so a connection that sends nothing, or
sends a request head a byte at a time, is kept forever; and httptools sets no bound on a
request head (``h11_max_incomplete_event_size`` is h11's alone). 1,100 such connections took
all of a daemon's 1,024 descriptors, and its Unix socket could accept no call.

So each connection of such a listener (:func:`bounded_protocol`, uvicorn's httptools protocol
with these checks) is held to :class:`ConnectionLimits`:

- at most ``max_connections`` at once: one past them is answered ``503`` at once and closed
  (accepted only to be closed: it costs a descriptor for a moment, never for long), as nginx
  stops at ``worker_connections``;
- ``idle_timeout_s`` from its accept, or from its last response, to the end of its next
  request's head, else it is closed: one that sends nothing, or trickles its head, goes;
- ``request_timeout_s`` more for a request being answered when that timer runs out;
- at most ``max_head_bytes`` of request head (400 and closed past it), as h11's limit.

:func:`limits_for` sizes ``max_connections`` from the open-file limit, so the rest of it stays
the API's and the daemon's own.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["ConnectionLimits", "bounded_protocol", "limits_for"]

log = logging.getLogger("janitor.daemon")

#: A Prometheus HA pair keeps one connection each; node_exporter serves 40 scrapes at once.
MAX_CONNECTIONS = 64
#: Never more than this share of the open-file limit (the rest is the API's and the daemon's).
SHARE = 8
#: Prometheus sends its request as soon as it connects; uvicorn's keep-alive default is 5 s.
IDLE_TIMEOUT_S = 10.0
#: What a scrape may take once its head is in (Prometheus's own scrape_timeout is 10 s).
REQUEST_TIMEOUT_S = 30.0
#: h11's default bound on an incomplete request head (a scrape's head is a few hundred bytes).
MAX_HEAD_BYTES = 16 * 1024
#: At most one log line about refused connections in this many seconds.
_LOG_EVERY_S = 60.0

_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\n"
    b"content-type: text/plain; charset=utf-8\r\n"
    b"content-length: 26\r\n"
    b"connection: close\r\n"
    b"\r\n"
    b"too many open connections\n"
)


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """What one listener's connections may hold (see the module's docstring)."""

    max_connections: int
    idle_timeout_s: float = IDLE_TIMEOUT_S
    request_timeout_s: float = REQUEST_TIMEOUT_S
    max_head_bytes: int = MAX_HEAD_BYTES


def limits_for(open_files: int) -> ConnectionLimits:
    """The limits for a listener in a process allowed ``open_files`` descriptors: at most
    :data:`MAX_CONNECTIONS`, and never more than an eighth of them (at least 4)."""
    return ConnectionLimits(max_connections=max(4, min(MAX_CONNECTIONS, open_files // SHARE)))


class _Refusals:
    """Connections refused at the limit, said in the log at most once a minute."""

    def __init__(self, what: str, limits: ConnectionLimits) -> None:
        self.what = what
        self.limits = limits
        self.count = 0
        self._said = -_LOG_EVERY_S

    def one(self) -> None:
        self.count += 1
        now = time.monotonic()
        if now - self._said >= _LOG_EVERY_S:
            self._said = now
            log.warning(
                "%s: at its limit of %d open connections: new ones are answered 503 until "
                "some close (idle ones after %g s); %d refused since the last such line",
                self.what,
                self.limits.max_connections,
                self.limits.idle_timeout_s,
                self.count,
            )
            self.count = 0


def bounded_protocol(limits: ConnectionLimits, *, what: str) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol under ``limits``, for ``Config(http=...)``; ``what`` names
    the listener in log lines. One class per listener: its connections are counted together
    (uvicorn's ``server_state.connections``)."""
    refusals = _Refusals(what, limits)

    class Bounded(HttpToolsProtocol):
        """One connection, held to the listener's limits."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._refused = False
            self._timer: asyncio.TimerHandle | None = None
            self._head_bytes = 0
            self._overtime: object = None  # the request given request_timeout_s already

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            if len(self.connections) >= limits.max_connections:
                self._refused = True
                refusals.one()
                transport.write(_BUSY)
                transport.close()
                return
            super().connection_made(transport)
            self._arm(limits.idle_timeout_s)

        def data_received(self, data: bytes) -> None:
            if self._refused or self.transport.is_closing():
                return  # refused, cut off or timed out: nothing more is read
            if not self._answering():
                self._head_bytes += len(data)
                if self._head_bytes > limits.max_head_bytes:
                    self.send_400_response("Request header too large")
                    return
            super().data_received(data)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._head_bytes = 0
            if not self.transport.is_closing():
                self._arm(limits.idle_timeout_s)

        def connection_lost(self, exc: Exception | None) -> None:
            if self._refused:
                return
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            super().connection_lost(exc)

        def _answering(self) -> bool:
            """True while a request whose head is in has not been answered in full."""
            return self.cycle is not None and not self.cycle.response_complete

        def _arm(self, delay: float) -> None:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = self.loop.call_later(delay, self._expired)

        def _expired(self) -> None:
            self._timer = None
            if self.transport.is_closing():
                return
            if self._answering() and self._overtime is not self.cycle:
                self._overtime = self.cycle  # once per request
                self._arm(limits.request_timeout_s)
                return
            self.transport.close()

    return Bounded
