"""Prometheus metrics: the daemon's view of every volume and tree, read at scrape time.

Every series carries ``volume`` (mount point) and, for trees, ``tree`` labels, so one Prometheus
can watch a fleet (it adds ``instance`` itself). Levels are numbers: 0 ok, 1 warn, 2 critical.
No label holds a path of the user's files: tree names, mount points and reasons only, so the
text may leave the machine (``metrics_listen``, ``metrics_textfile``).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

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

_Of = TypeVar("_Of")


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


@dataclass(frozen=True, slots=True)
class _Gauge(Generic[_Of]):
    """One gauge family: its name and help, and its value for one volume or tree (``None``:
    no sample for that one)."""

    name: str
    help: str
    value: Callable[[_Of], float | None]


@dataclass(frozen=True, slots=True)
class _TreeView:
    """A tree's state beside what the daemon knows of it outside the last sweep."""

    tree: TreeState
    orphans: frozenset[str]
    awaiting: tuple[int, int]


#: Every volume's gauges, labelled ``volume``.
_VOLUME_GAUGES: tuple[_Gauge[VolumeState], ...] = (
    _Gauge("janitor_volume_free_bytes", "Free bytes (f_bavail).", lambda v: v.free),
    _Gauge("janitor_volume_size_bytes", "Volume size.", lambda v: v.total),
    _Gauge("janitor_volume_floor_bytes", "Reservation floor.", lambda v: v.floor),
    _Gauge(
        "janitor_volume_free_low_bytes", "Pressure eviction starts below this.",
        lambda v: v.free_low,
    ),
    _Gauge(
        "janitor_volume_free_target_bytes", "Pressure eviction stops above this.",
        lambda v: v.free_target,
    ),
    _Gauge(
        "janitor_volume_reserved_bytes", "Outstanding bytes of live reservations.",
        lambda v: v.reserved,
    ),
    _Gauge(
        "janitor_volume_headroom_bytes", "free - floor - reserved.",
        lambda v: v.free - v.floor - v.reserved,
    ),
    _Gauge("janitor_reservations_live", "Live reservations.", lambda v: v.live),
    _Gauge(
        "janitor_volume_level", "0 ok, 1 warn, 2 critical (as read now).",
        lambda v: LEVEL_VALUES.get(v.level, 0),
    ),
    _Gauge(
        "janitor_volume_alert_level",
        "The level damped: worse at once, better only after settle_s.",
        lambda v: LEVEL_VALUES.get(v.alert_level, 0),
    ),
    _Gauge(
        "janitor_reservations_at_risk",
        "Live reservations told to stop (their volume is below its floor).",
        lambda v: v.at_risk,
    ),
    _Gauge(
        "janitor_volume_fill_rate_bytes_per_second",
        "Smoothed consumption rate (negative while freeing).",
        lambda v: v.fill_rate,
    ),
    _Gauge(
        "janitor_volume_floor_eta_seconds",
        "Forecast seconds until the floor (+Inf if not falling).",
        lambda v: math.inf if v.eta_floor is None else v.eta_floor,
    ),
    _Gauge(
        "janitor_volume_forecast_confidence", "0..1 confidence of the forecast.",
        lambda v: v.confidence,
    ),
    _Gauge(
        "janitor_volume_horizon_seconds", "Forecast horizon of the warn level.",
        lambda v: v.horizon,
    ),
    _Gauge("janitor_ballast_bytes", "Ballast held on the volume.", lambda v: v.ballast),
)  # fmt: skip

#: Every tree's gauges, labelled ``tree`` and ``volume``.
_TREE_GAUGES: tuple[_Gauge[_TreeView], ...] = (
    _Gauge("janitor_tree_usage_bytes", "Bytes a tree holds (last sweep).", lambda t: t.tree.usage),
    _Gauge("janitor_tree_quota_bytes", "A tree's quota.", lambda t: t.tree.quota),
    _Gauge(
        "janitor_tree_watch_polling", "1 when a tree's watch failed and it is polled.",
        lambda t: 0 if t.tree.watch == "watching" else 1,
    ),
    _Gauge(
        "janitor_tree_orphans",
        "Orphaned job folders of a scratch tree still there: every recorded writer died, "
        "or the last sweep chose it as an orphan and could not remove it.",
        lambda t: len(t.orphans) if t.tree.role == "scratch" else None,
    ),
    _Gauge(
        "janitor_tree_awaiting_use_entries",
        "Cache entries awaiting use (probed or converted, not yet cut from): never evicted.",
        lambda t: t.awaiting[0] if t.tree.role == "cache" else None,
    ),
    _Gauge(
        "janitor_tree_awaiting_use_bytes", "Bytes held by the cache entries awaiting use.",
        lambda t: t.awaiting[1] if t.tree.role == "cache" else None,
    ),
)  # fmt: skip

#: The counters: (name, help, labels, the DaemonState field that counts them).
_COUNTERS = (
    ("janitor_reservations_granted", "Reservations granted.", ("tree",), "granted"),
    ("janitor_reservations_refused", "Reservations refused.", ("tree",), "refused"),
    ("janitor_evicted_bytes", "Bytes deleted by the janitor.", ("tree", "reason"),
     "evicted_bytes"),
    ("janitor_evicted_units", "Units deleted by the janitor.", ("tree", "reason"),
     "evicted_units"),
)  # fmt: skip


def _gauges(
    specs: Iterable[_Gauge[_Of]], labels: list[str], rows: list[tuple[list[str], _Of]]
) -> Iterator[GaugeMetricFamily]:
    for spec in specs:
        family = GaugeMetricFamily(spec.name, spec.help, labels=labels)
        for values, row in rows:
            value = spec.value(row)
            if value is not None:
                family.add_metric(values, value)
        yield family


class _Collector(Collector):
    """The metrics of a daemon's state, read at scrape time from the tables above."""

    def __init__(self, state: DaemonState) -> None:
        self.state = state

    def collect(self) -> Iterator[Any]:
        s = self.state
        with s.lock:
            volumes = [([v.mount], v) for v in s.volumes.values()]
            trees = [
                (
                    [t.name, t.mount],
                    _TreeView(
                        t,
                        t.orphans_left | s.orphan_jobs.get(t.name, frozenset()),
                        s.awaiting.get(t.name, (0, 0)),
                    ),
                )
                for t in s.trees.values()
            ]
            counted = [
                (name, text, list(labels), dict(getattr(s, field)))
                for name, text, labels, field in _COUNTERS
            ]
            version, started = s.version, s.started
        yield from _gauges(_VOLUME_GAUGES, ["volume"], volumes)
        yield from _gauges(_TREE_GAUGES, ["tree", "volume"], trees)
        for name, text, labels, counts in counted:
            family = CounterMetricFamily(name, text, labels=labels)
            for key, n in counts.items():
                family.add_metric(list(key) if isinstance(key, tuple) else [key], n)
            yield family
        start = GaugeMetricFamily(
            "janitor_daemon_start_time_seconds", "When the daemon started.", labels=["version"]
        )
        start.add_metric([version], started)
        yield start
        yield GaugeMetricFamily("janitor_up", _UP_HELP, value=1)


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
