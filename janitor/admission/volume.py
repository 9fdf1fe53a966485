"""One volume's numbers, as one immutable value: free space against its floor, and its level.

``Volume.of`` is the one place a volume's policy numbers (floor, free_low, free_target) are
worked out from its size, and its level judged from them; admission, status, sweeps, the daemon
and the CLI all read these values. ``read_volume`` is what admission reads at every decision:
free space now, beside the numbers of the last ``Volume`` measured there (``FreeSpace``).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from janitor.host.space import VolumeStats, existing_ancestor, volume_stats
from janitor.humanize import format_duration

if TYPE_CHECKING:
    from janitor.config.policy import Policy, TreePolicy

__all__ = [
    "ORDER",
    "Forecast",
    "FreeSpace",
    "Level",
    "Reading",
    "Volume",
    "assess",
    "known_device",
    "level_of",
    "measure",
    "read_volume",
]

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


def measure(policy: Policy, tree: TreePolicy) -> Volume:
    """The tree's volume, from a fresh statvfs (its mount point found and its numbers worked
    out afresh too)."""
    return Volume.at(policy, tree.path)


@dataclass(frozen=True, slots=True)
class FreeSpace:
    """A tree's volume as :func:`read_volume` reads it: which volume it is, its free bytes now,
    and the floors they are weighed against."""

    device: int
    mount: str
    free: int
    floor: int
    free_low: int


#: tree path -> (policy, folder statted, the volume as last measured): what a volume is and its
#: numbers change only when something is mounted or resized, which changes device or size.
_VOLUMES: dict[Path, tuple[Policy, str, Volume]] = {}


def read_volume(policy: Policy, tree: TreePolicy) -> FreeSpace:
    """The tree's volume and its free space now, at the cost of one statvfs and one stat while
    nothing changed.

    Free space is always read afresh; the device, mount and numbers (``Volume.of``) are
    reused while the same folder still reports the same device and size (walking up to the
    mount point and resolving the volume's policy cost more than the statvfs).
    """
    known = _VOLUMES.get(tree.path)
    if known is not None and known[0] is policy:
        _, folder, vol = known
        try:
            st = os.statvfs(folder)
            same = os.stat(folder).st_dev == vol.device and st.f_blocks * st.f_frsize == vol.total
        except OSError:
            same = False
        # A missing tree is measured at its nearest existing parent, until it is created.
        if same and (folder == str(tree.path) or str(existing_ancestor(tree.path)) == folder):
            free = st.f_bavail * st.f_frsize
            return FreeSpace(vol.device, vol.mount, free, vol.floor, vol.free_low)
    folder = str(existing_ancestor(tree.path))
    vol = Volume.at(policy, folder)
    if len(_VOLUMES) > 64:
        _VOLUMES.clear()
    _VOLUMES[tree.path] = (policy, folder, vol)
    return FreeSpace(vol.device, vol.mount, vol.free, vol.floor, vol.free_low)


def known_device(policy: Policy, tree: TreePolicy) -> int | None:
    """The device of the tree's volume as :func:`read_volume` last read it under this policy,
    without reading it again; None when it has not read it yet."""
    known = _VOLUMES.get(tree.path)
    return known[2].device if known is not None and known[0] is policy else None
