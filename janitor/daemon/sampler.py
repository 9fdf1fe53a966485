"""The volume sample: free space read, forecast, a damped level published, and acted on.

Every ``sample_interval_s`` each managed volume is read and recorded in the ledger; every
``sample_interval_low_s`` while a volume is below free_low, or close enough to it that the
fastest fill seen in the forecast window could take it there within two calm intervals (an
outside writer's burst crosses free_low and the floor between two calm samples). The series of
the forecast window gives a fill rate and the time left to the floor; the reading gives the
level shown, a tracker damps it for alerts. A low volume asks the eviction thread for a pressure
sweep, a critical one releases its ballast and has jobs put at risk. Then the log is tailed and
``status.json`` written (and ``metrics_textfile``, when configured).
"""

from __future__ import annotations

import logging
import time

from janitor.admission.reserve import live_reservations
from janitor.admission.risk import LevelTracker, fastest_fill, finite, forecast
from janitor.admission.volume import Volume, assess
from janitor.config.settings import Settings
from janitor.core import Janitor
from janitor.daemon.at_risk import RiskMarker
from janitor.daemon.ballast import BallastKeeper
from janitor.daemon.counters import LogCounters, StatusFile
from janitor.daemon.events import EventBus
from janitor.daemon.metrics import DaemonState, VolumeState
from janitor.daemon.pace import SamplePace
from janitor.daemon.schedule import Scheduler
from janitor.daemon.sweeper import Pending
from janitor.daemon.textfile import Textfile
from janitor.daemon.volumes import volume_trees
from janitor.host.space import volume_stats
from janitor.ledger.tx import Tx
from janitor.sizes import format_size

__all__ = ["Sampler"]

log = logging.getLogger("janitor.daemon")

#: A volume's level changed: (device, before, after, why).
_Change = tuple[int, str, str, str]


#: Free space that grew by more than this since the last sample wakes the calls waiting for room
#: (an outside writer deleted its files: nothing else would tell them).
FREED = 1 << 20


class Sampler:
    """The ``sample`` job and what it decides; it runs on the scheduler's thread."""

    def __init__(
        self,
        janitor: Janitor,
        settings: Settings,
        bus: EventBus,
        state: DaemonState,
        *,
        scheduler: Scheduler,
        pending: Pending,
        ballast: BallastKeeper,
        risk: RiskMarker,
        counters: LogCounters,
        status_file: StatusFile,
        textfile: Textfile | None = None,
    ) -> None:
        self.janitor = janitor
        self.settings = settings
        self.bus = bus
        self.state = state
        self.scheduler = scheduler
        self.pending = pending
        self.ballast = ballast
        self.risk = risk
        self.counters = counters
        self.status_file = status_file
        self.textfile = textfile
        self._trackers: dict[int, LevelTracker] = {}
        self._pressed_at: dict[int, float] = {}  # monotonic time of the last pressure sweep
        self._pace = SamplePace(
            settings.sample_interval_s, settings.sample_interval_low_s, settings.settle_s
        )
        self._free: dict[int, int] = {}  # each volume's free space at the last sample

    def sample(self) -> None:
        """Sample every volume, forecast, update levels, act on changes, publish."""
        now = time.time()
        policy = self.janitor.policy
        ledger = self.janitor.ledger
        readings: dict[int, VolumeState] = {}
        for device, roots in volume_trees(policy).items():
            volume = Volume.of(policy, volume_stats(roots[0]))
            horizon = policy.volume_policy(device).horizon
            readings[device] = VolumeState.of(volume, horizon=horizon, updated=now)
        cutoff = now - self.settings.forecast_window_s

        def record(tx: Tx) -> dict[int, list[tuple[float, int]]]:
            series: dict[int, list[tuple[float, int]]] = {}
            for device, vs in readings.items():
                tx.samples.add(device, now, vs.free, vs.total)
                series[device] = tx.samples.series(device, cutoff)
            return series

        series = ledger.call(record)
        freed = [d for d, vs in readings.items() if vs.free > self._free.get(d, vs.free) + FREED]
        self._free = {d: vs.free for d, vs in readings.items()}
        if freed:
            self.janitor.space.notify()  # a call waiting for room tries again now
        with ledger.read() as tx:
            live = live_reservations(tx, now=now)
        changes: list[_Change] = []
        watch: str | None = None  # why some volume is sampled often, if one is
        for device, vs in readings.items():
            fc = forecast(series.get(device, []), vs.floor)
            if watch is None:
                watch = self._watch_closely(vs, fastest_fill(series.get(device, [])))
            vs.fill_rate = round(fc.fill_rate, 3)
            vs.eta_floor = finite(fc.eta_floor)
            vs.eta_full = finite(fc.eta_full)
            vs.confidence = fc.confidence
            mine = [r for r in live if r.device == device]
            vs.reserved = sum(r.outstanding for r in mine)
            vs.live = len(mine)
            tracker = self._trackers.setdefault(device, LevelTracker(self.settings.settle_s))
            before = tracker.level
            reading = assess(vs.free, vs.floor, vs.free_low, fc, horizon=vs.horizon)
            if tracker.update(reading, now):
                changes.append((device, before, tracker.level, tracker.reason))
            # The level shown and acted on is this reading's; the damped one (worse at once,
            # better after settle_s) is for alerts: level events, log lines, the ballast's
            # return. Stopping jobs never waits for a level to catch up.
            vs.level, vs.reason = reading.level, reading.reason
            vs.alert_level = tracker.level
            if reading.level != "ok" and vs.free < vs.free_low and self._due(device, vs):
                self.pending.volume(device)
            self.ballast.manage(device, vs, reading.level, tracker.level)
            if reading.level == "critical" or any(r.at_risk for r in mine):
                self.risk.decide(device, vs)
        self._publish_levels(readings, changes, now)
        self._pace_sampling(watch)
        with self.state.lock:
            self.state.volumes = readings
        self.counters.tail_log()
        self.status_file.write()
        if self.textfile is not None:
            self.textfile.write()

    def _due(self, device: int, vs: VolumeState) -> bool:
        """Whether volume ``device``, below free_low, gets a pressure pass now.

        At most every ``sample_interval_s``: a pressure pass walks the caches under their
        locks, which a refused reservation's make-room needs too, so sampling a low volume more
        often must not sweep it more often. One exception: below the floor, after a pass that
        freed something, the next comes at the next sample. A pass that found something to take
        may find more (an outside writer took the room it made, a conversion just ended), and
        every second below the floor is a second in which an admitted write can meet ENOSPC; a
        pass that found nothing waits its turn, so a volume full of what is in use is not
        walked four times a second.
        """
        now = time.monotonic()
        again = vs.free < vs.floor and self.pending.last_freed(device)
        if not again and now - self._pressed_at.get(device, -1e9) < (
            self.settings.sample_interval_s * 0.9
        ):
            return False
        self._pressed_at[device] = now
        return True

    def _watch_closely(self, vs: VolumeState, fastest: float) -> str | None:
        """Why volume ``vs`` is sampled every ``sample_interval_low_s``, or None when it can
        wait ``sample_interval_s``: it is below free_low, or the fastest fill seen in the
        forecast window (``fastest``, bytes per second) could take it there within two calm
        intervals, before the next calm sample could see it coming."""
        if vs.free < vs.free_low:
            return "a volume is low"
        reach = 2 * self.settings.sample_interval_s * fastest
        if vs.free - vs.free_low < reach:
            return (
                f"a volume {format_size(vs.free - vs.free_low)} above free_low has filled at "
                f"{format_size(int(fastest))}/s"
            )
        return None

    def _pace_sampling(self, watch: str | None) -> None:
        """Sample every ``sample_interval_low_s`` while some volume is watched closely (``watch``
        says why), and until ``settle_s`` after, else every ``sample_interval_s``: jobs must
        hear they are at risk, and the cache give up what nothing uses, before an outside writer
        fills the rest (the soak: 24 MiB/s against a 16 MiB floor)."""
        every = self._pace.update(watch, time.monotonic())
        if every is not None:
            self.scheduler.reschedule("sample", every)
            log.info("sampling every %gs (%s)", every, watch or "all volumes ok")

    def _publish_levels(
        self, readings: dict[int, VolumeState], changes: list[_Change], now: float
    ) -> None:
        rows = [
            (
                device,
                vs.mount,
                vs.level,
                vs.reason,
                vs.fill_rate,
                vs.eta_floor,
                vs.eta_full,
                vs.confidence,
                now,
            )
            for device, vs in readings.items()
        ]
        self.janitor.ledger.call(lambda tx: tx.volumes.publish(rows))
        for device, before, after, why in changes:
            vs = readings[device]
            log.warning("volume %s: level %s -> %s (%s)", vs.mount, before, after, why)
            self.bus.publish(
                "level",
                volume=vs.mount,
                level=after,
                previous=before,
                reason=why,
                free=vs.free,
                floor=vs.floor,
                eta_floor=vs.eta_floor,
            )
