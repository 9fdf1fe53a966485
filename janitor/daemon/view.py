"""What the daemon shows: its state with every volume measured now, as JSON and as metrics.

:class:`DaemonView` is what the HTTP app uses of the running daemon (its routes read nothing
else); :class:`LiveView` is the one it is given, and what ``status.json`` is written from.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

from prometheus_client import CollectorRegistry

from janitor.config.settings import Settings
from janitor.core import Janitor
from janitor.daemon.events import EventBus
from janitor.daemon.metrics import DaemonState, render
from janitor.daemon.space import SpaceKeeper
from janitor.status import Status

__all__ = ["DaemonView", "LiveView"]


class DaemonView(Protocol):
    """What the app uses of the running daemon (:class:`LiveView`): its janitor, settings,
    state and event bus, and its views measured now."""

    @property
    def janitor(self) -> Janitor: ...

    @property
    def settings(self) -> Settings: ...

    @property
    def state(self) -> DaemonState: ...

    @property
    def bus(self) -> EventBus: ...

    def refresh(self) -> Status:
        """Measure every volume now; the status measured."""
        ...

    def snapshot(self, status: Status | None = None) -> dict[str, Any]:
        """The daemon's published view (``status.json``)."""
        ...

    def metrics_text(self) -> bytes:
        """The Prometheus exposition, measured now."""
        ...

    def space_report(self, max_age: float) -> dict[str, Any]:
        """The last ``janitor space`` report, measured again if older than ``max_age`` s."""
        ...


class LiveView:
    """The running daemon's janitor, settings, state and event bus, and views measured now."""

    def __init__(
        self,
        janitor: Janitor,
        settings: Settings,
        bus: EventBus,
        state: DaemonState,
        registry: CollectorRegistry,
        space: SpaceKeeper | None = None,
    ) -> None:
        self.janitor = janitor
        self.settings = settings
        self.bus = bus
        self.state = state
        self.registry = registry
        self.space = space if space is not None else SpaceKeeper(janitor, settings)

    def refresh(self) -> Status:
        """Measure every volume now and bring the published numbers up to date with it.

        Called before ``/metrics`` and ``/v1/status`` answer, so they show what
        ``janitor status`` and ``check --reservation`` would say at that moment, not what the
        last sample saw.
        """
        status = self.janitor.status(with_usage=False)
        at_risk: dict[int, int] = {}
        for r in status.reservations:
            if r.at_risk is not None:
                at_risk[r.device] = at_risk.get(r.device, 0) + 1
        with self.state.lock:
            for v in status.volumes:
                vs = self.state.volumes.get(v.device)
                if vs is None:
                    continue
                vs.free, vs.reserved, vs.level, vs.reason = v.free, v.reserved, v.level, v.reason
                vs.live = sum(1 for r in status.reservations if r.device == v.device)
                vs.at_risk = at_risk.get(v.device, 0)
        return status

    def space_report(self, max_age: float) -> dict[str, Any]:
        """The last ``janitor space`` report, measured again if older than ``max_age`` s."""
        return self.space.report(max_age)

    def metrics_text(self) -> bytes:
        """The Prometheus exposition, measured now (see refresh)."""
        self.refresh()
        return render(self.registry)

    def snapshot(self, status: Status | None = None) -> dict[str, Any]:
        """The daemon's published view (status.json and part of ``GET /v1/status``)."""
        if status is None:
            status = self.janitor.status(with_usage=False)
        data = self.state.snapshot()
        data["reservations"] = [r.as_dict() for r in status.reservations]
        data["time"] = time.time()
        data["policy"] = str(self.settings.policy_path)
        data["socket"] = str(self.settings.socket_path)
        return data
