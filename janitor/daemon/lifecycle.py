"""What every part of the daemon is (a :class:`DaemonPart`): started in order, asked to stop,
then joined, in reverse order.

``stop()`` only asks (it never waits), so the supervisor can ask every service first and wait
for them after: a stopping daemon waits for its slowest thread, not for the sum of them.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Protocol

__all__ = ["DaemonPart", "OnStop", "guarded"]

log = logging.getLogger("janitor.daemon")


class DaemonPart(Protocol):
    """A part of the daemon with a lifetime: ``start()``, ``stop()`` (ask), ``join()`` (wait).

    ``stop()`` and ``join()`` are called even when ``start()`` failed half-way, so they must
    cope with what was never started.
    """

    def start(self) -> None:
        """Begin working (start threads, bind sockets, read the starting point)."""

    def stop(self) -> None:
        """Ask to stop; returns at once."""

    def join(self) -> None:
        """Wait (bounded) until stopped, then release what the service holds."""


class OnStop:
    """A service that only releases something when the daemon stops (the ledger connection)."""

    def __init__(self, release: Callable[[], None]) -> None:
        self._release = release

    def start(self) -> None:
        """Nothing to start."""

    def stop(self) -> None:
        """Nothing to ask."""

    def join(self) -> None:
        """Release it."""
        self._release()


def guarded(fn: Callable[[], None], stop: threading.Event) -> Callable[[], None]:
    """``fn`` as a job: skipped once the daemon stops, its exception logged, never raised
    (a failed sample or sweep must not end the thread that runs it)."""

    def run() -> None:
        if stop.is_set():
            return
        try:
            fn()
        except Exception:
            log.exception("%s failed", fn.__name__)

    run.__name__ = fn.__name__
    return run
