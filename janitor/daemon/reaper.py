"""Reaping: reservations and pins whose owners died or whose TTL passed are ended, orphaned job
folders removed (and those that stay counted, for ``janitor_tree_orphans``); hourly, the ledger
drops what it no longer needs (ended reservations, old log lines, old samples)."""

from __future__ import annotations

import logging
import threading
import time

from janitor.core import Janitor
from janitor.daemon.metrics import DaemonState

__all__ = ["PRUNE_INTERVAL_S", "Reaper"]

log = logging.getLogger("janitor.daemon")

#: How often the daemon drops what the ledger no longer needs (Ledger.prune).
PRUNE_INTERVAL_S = 3600.0


class Reaper:
    """The ``reap`` job."""

    def __init__(
        self,
        janitor: Janitor,
        stop: threading.Event,
        state: DaemonState,
        remove_orphans: bool = True,
    ) -> None:
        self.janitor = janitor
        self.state = state
        self.remove_orphans = remove_orphans  # False in a run's own daemon: it deletes nothing
        self._stop = stop
        self._pruned: float | None = None  # monotonic time of the last Ledger.prune

    def reap(self) -> None:
        """End reservations and pins whose owners died or whose TTL passed; hourly, prune."""
        ended = self.janitor.reap(time.time())
        for info in ended.reservations:
            log.info("reservation %s ended: %s", info.id, info.state)
        for end in ended.jobs:
            log.info("job %s (%s) %s: %s", end.job.id, end.job.folder, end.state, end.why)
        # Every orphan, not only those that became one now: a sweep may have marked it, or a
        # file still open in it (the dead writer's last ffmpeg) kept it at the last try.
        jobs = self.janitor.jobs()
        if self.remove_orphans and any(j.state == "orphan" and not j.foreign for j in jobs):
            for job in self.janitor.remove_orphans():
                log.info("removed the folder of orphaned job %s: %s", job.id, job.folder)
            jobs = self.janitor.jobs()
        # What stays (a file in it still open, a foreign folder waiting for its orphan_age):
        # counted until it goes.
        left: dict[str, set[str]] = {}
        for j in jobs:
            if j.state == "orphan":
                left.setdefault(j.tree, set()).add(j.folder)
        awaiting: dict[str, tuple[int, int]] = {}
        for a in self.janitor.awaiting():
            n, nbytes = awaiting.get(a.mark.tree, (0, 0))
            awaiting[a.mark.tree] = (n + 1, nbytes + a.bytes)
        with self.state.lock:
            self.state.orphan_jobs = {tree: frozenset(f) for tree, f in left.items()}
            self.state.awaiting = awaiting
        if self._pruned is None or time.monotonic() - self._pruned >= PRUNE_INTERVAL_S:
            # Ended reservations, old log lines and samples: a few thousand rows per
            # transaction, so reservations queued behind it wait milliseconds, not seconds.
            while self.janitor.ledger.prune() and not self._stop.is_set():
                pass
            self._pruned = time.monotonic()
