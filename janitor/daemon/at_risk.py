"""Below the floor: evict caches, then tell the fewest jobs that must stop (``at-risk``)."""

from __future__ import annotations

import logging
import time

from janitor.config.settings import Settings
from janitor.core import Janitor
from janitor.daemon.events import EventBus
from janitor.daemon.metrics import VolumeState
from janitor.sizes import format_size

__all__ = ["RiskMarker"]

log = logging.getLogger("janitor.daemon")


class RiskMarker:
    """Puts live reservations at risk and clears the marks; ``Janitor.relieve`` decides."""

    def __init__(self, janitor: Janitor, settings: Settings, bus: EventBus) -> None:
        self.janitor = janitor
        self.settings = settings
        self.bus = bus
        self._evicted_at: dict[int, float] = {}  # monotonic time of the last relief eviction

    def decide(self, device: int, vs: VolumeState) -> None:
        """Below the floor: evict caches, then mark the fewest reservations that must stop;
        above it: clear the marks. Janitor.relieve decides, as a worker's check() would.

        Eviction runs at most every ``sample_interval_s`` per volume (it walks the caches under
        their locks, which a refused reservation's make-room also needs); the marks follow
        every sample, so a job hears it is at risk within ``sample_interval_low_s``."""
        now = time.monotonic()
        evicted = self._evicted_at.get(device, 0.0)
        evict = now - evicted >= self.settings.sample_interval_s * 0.9
        if evict:
            self._evicted_at[device] = now
        decision = self.janitor.relieve(device, evict=evict)
        if decision is None:
            return
        vs.free = decision.free
        vs.at_risk = len(decision.at_risk)
        for rid in decision.marked:
            job = decision.jobs.get(rid) or ""
            log.warning(
                "reservation %s (%s) put at risk on %s: %s missing below the floor",
                rid,
                job,
                vs.mount,
                format_size(decision.deficit),
            )
            self.bus.publish(
                "at-risk",
                reservation=rid,
                job=job,
                volume=vs.mount,
                free=decision.free,
                floor=decision.floor,
                deficit=decision.deficit,
            )
        for rid in decision.cleared:
            log.info("reservation %s no longer at risk on %s", rid, vs.mount)
            self.bus.publish("risk-cleared", reservation=rid, volume=vs.mount)
