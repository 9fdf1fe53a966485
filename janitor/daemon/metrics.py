"""Prometheus metrics: the daemon's view of every volume and tree, read at scrape time.

Every series carries ``volume`` (mount point) and, for trees, ``tree`` labels, so one Prometheus
can watch a fleet (it adds ``instance`` itself). Levels are numbers: 0 ok, 1 warn, 2 critical.
No label holds a path of the user's files: tree names, mount points and reasons only, so the
text may leave the machine (``metrics_listen``, ``metrics_textfile``).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from janitor.admission.volume import Volume

__all__ = [
    "LEVEL_VALUES",
    "DaemonState",
    "TreeState",
    "VolumeState",
    "registry_for",
    "render",
    "render_down",
]

LEVEL_VALUES = {"ok": 0, "warn": 1, "critical": 2}

_UP_HELP = "1 while the daemon runs (0: a textfile's last word, written as it stopped)."


@dataclass
class VolumeState:
    """The latest sample and assessment of one volume."""

    device: int
    mount: str
    total: int = 0
    free: int = 0
    floor: int = 0
    free_low: int = 0
    free_target: int = 0
    reserved: int = 0
    live: int = 0
    level: str = "ok"
    reason: str = ""
    #: The damped level (worse at once, better after settle_s): for alerts and events.
    alert_level: str = "ok"
    at_risk: int = 0
    fill_rate: float = 0.0
    eta_floor: float | None = None
    eta_full: float | None = None
    confidence: float = 0.0
    horizon: float = 1800.0
    ballast: int = 0
    updated: float = 0.0

    @classmethod
    def of(cls, volume: Volume, *, horizon: float, updated: float) -> VolumeState:
        """A sample's state from the volume's numbers as measured; the level, reservations
        and forecast are filled in by the sampler."""
        return cls(
            device=volume.device,
            mount=volume.mount,
            total=volume.total,
            free=volume.free,
            floor=volume.floor,
            free_low=volume.free_low,
            free_target=volume.free_target,
            horizon=horizon,
            updated=updated,
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "mount": self.mount,
            "total": self.total,
            "free": self.free,
            "floor": self.floor,
            "free_low": self.free_low,
            "free_target": self.free_target,
            "reserved": self.reserved,
            "headroom": self.free - self.floor - self.reserved,
            "live_reservations": self.live,
            "level": self.level,
            "reason": self.reason,
            "alert_level": self.alert_level,
            "at_risk": self.at_risk,
            "fill_rate": self.fill_rate,
            "eta_floor": self.eta_floor,
            "eta_full": self.eta_full,
            "confidence": self.confidence,
            "horizon": self.horizon,
            "ballast": self.ballast,
            "updated": self.updated,
        }


@dataclass
class TreeState:
    """What the last sweep of a tree measured."""

    name: str
    role: str
    mount: str
    usage: int = 0
    quota: int | None = None
    units: int = 0
    last_sweep: float = 0.0
    watch: str = "polling"
    watch_reason: str = ""
    #: Units the sweep chose as orphans and could not remove (their paths, for the union with
    #: the orphaned jobs the reaper sees).
    orphans_left: frozenset[str] = frozenset()

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "role": self.role,
            "volume": self.mount,
            "usage": self.usage,
            "quota": self.quota,
            "units": self.units,
            "last_sweep": self.last_sweep,
            "watch": self.watch,
            "watch_reason": self.watch_reason,
        }


@dataclass
class DaemonState:
    """Everything the daemon publishes, guarded by one lock (scheduler threads write it)."""

    pid: int
    started: float
    version: str
    volumes: dict[int, VolumeState] = field(default_factory=dict)
    trees: dict[str, TreeState] = field(default_factory=dict)
    granted: dict[str, int] = field(default_factory=dict)
    refused: dict[str, int] = field(default_factory=dict)
    evicted_bytes: dict[tuple[str, str], int] = field(default_factory=dict)
    evicted_units: dict[tuple[str, str], int] = field(default_factory=dict)
    #: Each tree's orphaned job folders still there (every recorded writer died; a foreign one
    #: too, while it waits for its orphan_age), as the reaper last saw them.
    orphan_jobs: dict[str, frozenset[str]] = field(default_factory=dict)
    #: Each cache tree's entries awaiting use, as the reaper last saw them: (count, bytes).
    awaiting: dict[str, tuple[int, int]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def snapshot(self) -> dict[str, Any]:
        """A JSON-ready copy: what status.json and ``GET /v1/status``'s daemon part show."""
        with self.lock:
            return {
                "pid": self.pid,
                "started": self.started,
                "version": self.version,
                "volumes": [v.as_dict() for v in self.volumes.values()],
                "trees": [t.as_dict() for t in self.trees.values()],
            }


class _Collector(Collector):
    def __init__(self, state: DaemonState) -> None:
        self.state = state

    def collect(self) -> Iterator[Any]:
        s = self.state
        vol = ["volume"]
        gauges = {
            "free": GaugeMetricFamily(
                "janitor_volume_free_bytes", "Free bytes (f_bavail).", labels=vol
            ),
            "total": GaugeMetricFamily("janitor_volume_size_bytes", "Volume size.", labels=vol),
            "floor": GaugeMetricFamily(
                "janitor_volume_floor_bytes", "Reservation floor.", labels=vol
            ),
            "free_low": GaugeMetricFamily(
                "janitor_volume_free_low_bytes", "Pressure eviction starts below this.", labels=vol
            ),
            "free_target": GaugeMetricFamily(
                "janitor_volume_free_target_bytes",
                "Pressure eviction stops above this.",
                labels=vol,
            ),
            "reserved": GaugeMetricFamily(
                "janitor_volume_reserved_bytes",
                "Outstanding bytes of live reservations.",
                labels=vol,
            ),
            "headroom": GaugeMetricFamily(
                "janitor_volume_headroom_bytes", "free - floor - reserved.", labels=vol
            ),
            "live": GaugeMetricFamily(
                "janitor_reservations_live", "Live reservations.", labels=vol
            ),
            "level": GaugeMetricFamily(
                "janitor_volume_level", "0 ok, 1 warn, 2 critical (as read now).", labels=vol
            ),
            "alert_level": GaugeMetricFamily(
                "janitor_volume_alert_level",
                "The level damped: worse at once, better only after settle_s.",
                labels=vol,
            ),
            "at_risk": GaugeMetricFamily(
                "janitor_reservations_at_risk",
                "Live reservations told to stop (their volume is below its floor).",
                labels=vol,
            ),
            "fill_rate": GaugeMetricFamily(
                "janitor_volume_fill_rate_bytes_per_second",
                "Smoothed consumption rate (negative while freeing).",
                labels=vol,
            ),
            "eta_floor": GaugeMetricFamily(
                "janitor_volume_floor_eta_seconds",
                "Forecast seconds until the floor (+Inf if not falling).",
                labels=vol,
            ),
            "confidence": GaugeMetricFamily(
                "janitor_volume_forecast_confidence", "0..1 confidence of the forecast.", labels=vol
            ),
            "horizon": GaugeMetricFamily(
                "janitor_volume_horizon_seconds", "Forecast horizon of the warn level.", labels=vol
            ),
            "ballast": GaugeMetricFamily(
                "janitor_ballast_bytes", "Ballast held on the volume.", labels=vol
            ),
        }
        tl = ["tree", "volume"]
        usage = GaugeMetricFamily(
            "janitor_tree_usage_bytes", "Bytes a tree holds (last sweep).", labels=tl
        )
        quota = GaugeMetricFamily("janitor_tree_quota_bytes", "A tree's quota.", labels=tl)
        polling = GaugeMetricFamily(
            "janitor_tree_watch_polling",
            "1 when a tree's watch failed and it is polled.",
            labels=tl,
        )
        granted = CounterMetricFamily(
            "janitor_reservations_granted", "Reservations granted.", labels=["tree"]
        )
        refused = CounterMetricFamily(
            "janitor_reservations_refused", "Reservations refused.", labels=["tree"]
        )
        ebytes = CounterMetricFamily(
            "janitor_evicted_bytes", "Bytes deleted by the janitor.", labels=["tree", "reason"]
        )
        eunits = CounterMetricFamily(
            "janitor_evicted_units", "Units deleted by the janitor.", labels=["tree", "reason"]
        )
        orphans = GaugeMetricFamily(
            "janitor_tree_orphans",
            "Orphaned job folders of a scratch tree still there: every recorded writer died, "
            "or the last sweep chose it as an orphan and could not remove it.",
            labels=tl,
        )
        awaiting = GaugeMetricFamily(
            "janitor_tree_awaiting_use_entries",
            "Cache entries awaiting use (probed or converted, not yet cut from): never evicted.",
            labels=tl,
        )
        awaiting_bytes = GaugeMetricFamily(
            "janitor_tree_awaiting_use_bytes",
            "Bytes held by the cache entries awaiting use.",
            labels=tl,
        )
        started = GaugeMetricFamily(
            "janitor_daemon_start_time_seconds", "When the daemon started.", labels=["version"]
        )
        up = GaugeMetricFamily("janitor_up", _UP_HELP, value=1)
        with s.lock:
            started.add_metric([s.version], s.started)
            for v in s.volumes.values():
                m = [v.mount]
                gauges["free"].add_metric(m, v.free)
                gauges["total"].add_metric(m, v.total)
                gauges["floor"].add_metric(m, v.floor)
                gauges["free_low"].add_metric(m, v.free_low)
                gauges["free_target"].add_metric(m, v.free_target)
                gauges["reserved"].add_metric(m, v.reserved)
                gauges["headroom"].add_metric(m, v.free - v.floor - v.reserved)
                gauges["live"].add_metric(m, v.live)
                gauges["level"].add_metric(m, LEVEL_VALUES.get(v.level, 0))
                gauges["alert_level"].add_metric(m, LEVEL_VALUES.get(v.alert_level, 0))
                gauges["at_risk"].add_metric(m, v.at_risk)
                gauges["fill_rate"].add_metric(m, v.fill_rate)
                gauges["eta_floor"].add_metric(m, math.inf if v.eta_floor is None else v.eta_floor)
                gauges["confidence"].add_metric(m, v.confidence)
                gauges["horizon"].add_metric(m, v.horizon)
                gauges["ballast"].add_metric(m, v.ballast)
            for t in s.trees.values():
                labels = [t.name, t.mount]
                usage.add_metric(labels, t.usage)
                if t.quota is not None:
                    quota.add_metric(labels, t.quota)
                polling.add_metric(labels, 0 if t.watch == "watching" else 1)
                if t.role == "scratch":
                    left = t.orphans_left | s.orphan_jobs.get(t.name, frozenset())
                    orphans.add_metric(labels, len(left))
                if t.role == "cache":
                    n, nbytes = s.awaiting.get(t.name, (0, 0))
                    awaiting.add_metric(labels, n)
                    awaiting_bytes.add_metric(labels, nbytes)
            for tree, n in s.granted.items():
                granted.add_metric([tree], n)
            for tree, n in s.refused.items():
                refused.add_metric([tree], n)
            for (tree, reason), n in s.evicted_bytes.items():
                ebytes.add_metric([tree, reason], n)
            for (tree, reason), n in s.evicted_units.items():
                eunits.add_metric([tree, reason], n)
        yield from gauges.values()
        yield from (usage, quota, polling, orphans, awaiting, awaiting_bytes)
        yield from (granted, refused, ebytes, eunits, started, up)


def registry_for(state: DaemonState) -> CollectorRegistry:
    """A registry holding only the janitor's metrics."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(state))
    return registry


def render(registry: CollectorRegistry) -> bytes:
    """The Prometheus text exposition of ``registry``."""
    return generate_latest(registry)


class _Down(Collector):
    def collect(self) -> Iterator[Any]:
        yield GaugeMetricFamily("janitor_up", _UP_HELP, value=0)


def render_down() -> bytes:
    """The exposition of a stopped daemon: ``janitor_up 0`` alone (a textfile's last word)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Down())
    return generate_latest(registry)
