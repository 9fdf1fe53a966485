"""One volume's numbers, as one immutable value: free space against its floor, and its level.

``Volume.of`` is the one place a volume's policy numbers (floor, free_low, free_target) are
worked out from its size, and its level judged from them; admission, status, sweeps, the daemon
and the CLI all read these values.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from janitor.host.space import VolumeStats, volume_stats
from janitor.humanize import format_duration

if TYPE_CHECKING:
    from janitor.config.policy import Policy

__all__ = ["ORDER", "Forecast", "Level", "Reading", "Volume", "assess", "level_of"]

#: A volume's level: ``ok``, ``warn`` (below free_low, or the floor forecast within the
#: horizon) or ``critical`` (below the floor).
Level = Literal["ok", "warn", "critical"]

#: Levels from best to worst.
ORDER: dict[str, int] = {"ok": 0, "warn": 1, "critical": 2}


@dataclass(frozen=True, slots=True)
class Forecast:
    """Where a volume's free space is heading.

    ``fill_rate``: bytes per second being consumed (negative while space is freed).
    ``eta_floor`` / ``eta_full``: seconds until free space reaches the floor / zero at that rate
    (None when it is not falling). ``confidence``: 0..1, low with few samples or a noisy fit.
    """

    fill_rate: float
    eta_floor: float | None
    eta_full: float | None
    confidence: float
    samples: int


@dataclass(frozen=True, slots=True)
class Reading:
    """A level assessment of one moment, before damping."""

    level: Level
    reason: str


def assess(
    free: int,
    floor: int,
    free_low: int,
    fc: Forecast | None,
    *,
    horizon: float,
    min_confidence: float = 0.5,
) -> Reading:
    """critical below the floor; warn below free_low or when the floor is forecast within the
    horizon with enough confidence; ok otherwise."""
    if free < floor:
        return Reading("critical", "free space is below the floor")
    if free < free_low:
        return Reading("warn", "free space is below free_low")
    if (
        fc is not None
        and fc.eta_floor is not None
        and fc.confidence >= min_confidence
        and fc.eta_floor <= horizon
    ):
        return Reading("warn", f"forecast reaches the floor in {format_duration(fc.eta_floor)}")
    return Reading("ok", "")


def level_of(free: int, floor: int, free_low: int) -> tuple[Level, str]:
    """The level a free-space reading alone implies, and why (no forecast)."""
    reading = assess(free, floor, free_low, None, horizon=0.0)
    return reading.level, reading.reason


@dataclass(frozen=True, slots=True)
class Volume:
    """One volume: free space against its floor, what reservations still claim, its level.

    ``trees`` and the forecast fields are filled where they are known (``janitor status``).
    """

    device: int
    mount: str
    total: int
    free: int
    floor: int
    free_low: int
    free_target: int
    reserved: int
    level: Level
    reason: str
    trees: tuple[str, ...] = ()
    fill_rate: float | None = None
    eta_floor: float | None = None
    forecast_updated: float | None = None

    @classmethod
    def of(
        cls,
        policy: Policy,
        stats: VolumeStats,
        *,
        reserved: int = 0,
        forecast: Forecast | None = None,
        trees: tuple[str, ...] = (),
        fill_rate: float | None = None,
        eta_floor: float | None = None,
        forecast_updated: float | None = None,
    ) -> Volume:
        """The volume ``stats`` measured, with its policy's numbers and the level they give
        (judged with ``forecast`` too, when the daemon has a fresh one)."""
        vp = policy.volume_policy(stats.device)
        floor, free_low, free_target = vp.numbers(stats.total)
        reading = assess(stats.free, floor, free_low, forecast, horizon=vp.horizon)
        return cls(
            stats.device,
            stats.mount,
            stats.total,
            stats.free,
            floor,
            free_low,
            free_target,
            reserved,
            reading.level,
            reading.reason,
            trees,
            fill_rate,
            eta_floor,
            forecast_updated,
        )

    @classmethod
    def at(cls, policy: Policy, path: Path | str, *, reserved: int = 0) -> Volume:
        """The volume holding ``path`` (or its nearest existing parent), measured now."""
        return cls.of(policy, volume_stats(path), reserved=reserved)

    @property
    def headroom(self) -> int:
        """Bytes a new reservation could get now: free - floor - reserved (may be negative)."""
        return self.free - self.floor - self.reserved

    def as_dict(self) -> dict[str, Any]:
        """The JSON shape of a volume in ``janitor status --json``."""
        data = asdict(self)
        data["trees"] = list(self.trees)
        data["headroom"] = self.headroom
        return data
