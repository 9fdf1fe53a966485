"""What `janitor status` shows: each volume's numbers and level, each tree's use, live reservations.

Reading status never writes the ledger, so it works on a read-only state dir and costs no lock.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from janitor.admission.awaiting import Awaiting, awaiting_now
from janitor.admission.reserve import live_reservations
from janitor.admission.volume import ORDER, Forecast, Level, Volume
from janitor.cleanup.kinds import kind_of
from janitor.config.policy import Policy, TreePolicy
from janitor.host.space import VolumeStats, volume_stats
from janitor.ledger.db import Ledger
from janitor.ledger.jobs import JobInfo, Waiter
from janitor.ledger.reservations import ReservationInfo

__all__ = [
    "Level",
    "Status",
    "TreeStatus",
    "Volume",
    "collect_status",
    "tree_usage",
]


@dataclass(frozen=True, slots=True)
class TreeStatus:
    """One managed tree: where it is, its role, what it holds against its quota."""

    name: str
    role: str
    path: str
    exists: bool
    device: int
    usage: int
    quota: int | None
    low_watermark: int | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Status:
    """The whole picture, as ``jan.status()`` returns it and ``janitor status --json`` prints it."""

    time: float
    policy: str
    volumes: tuple[Volume, ...]
    trees: tuple[TreeStatus, ...]
    reservations: tuple[ReservationInfo, ...] = field(default=())
    #: Job folders the guard recorded that are live or orphaned (awaiting removal).
    jobs: tuple[JobInfo, ...] = field(default=())
    #: Calls waiting for room, first come first.
    waiting: tuple[Waiter, ...] = field(default=())
    #: Cache entries awaiting use (probed or converted, not yet cut from): never evicted.
    awaiting: tuple[Awaiting, ...] = field(default=())

    @property
    def level(self) -> Level:
        """The worst level of any volume."""
        worst = max((ORDER[v.level] for v in self.volumes), default=0)
        levels: tuple[Level, ...] = ("ok", "warn", "critical")
        return levels[worst]

    def volume(self, device: int) -> Volume:
        """The status of the volume with this ``st_dev``."""
        for v in self.volumes:
            if v.device == device:
                return v
        raise KeyError(device)

    def as_dict(self) -> dict[str, Any]:
        return {
            "time": self.time,
            "policy": self.policy,
            "level": self.level,
            "volumes": [v.as_dict() for v in self.volumes],
            "trees": [t.as_dict() for t in self.trees],
            "reservations": [r.as_dict() for r in self.reservations],
            "jobs": [j.as_dict() for j in self.jobs],
            "waiting": [
                {
                    "id": w.id,
                    "device": w.device,
                    "bytes": w.bytes,
                    "since": w.since,
                    "path": w.what,
                    "owner_pid": w.owner_pid,
                }
                for w in self.waiting
            ],
            "awaiting": [a.as_dict() for a in self.awaiting],
        }


def tree_usage(tree: TreePolicy) -> int:
    """Allocated bytes the tree manages: the whole root, only its matching unit folders, or
    its Hugging Face revisions (what the planner weighs against the quota), as its kind
    measures them."""
    return kind_of(tree).usage(tree)


def collect_status(policy: Policy, ledger: Ledger, *, with_usage: bool = True) -> Status:
    """Measure every volume and tree now, and read live reservations and forecasts."""
    now = time.time()
    stats: dict[int, VolumeStats] = {}
    tree_rows: list[TreeStatus] = []
    members: dict[int, list[str]] = {}
    for name, tree in policy.trees.items():
        vol = volume_stats(tree.path)
        stats.setdefault(vol.device, vol)
        members.setdefault(vol.device, []).append(name)
        tree_rows.append(
            TreeStatus(
                name=name,
                role=tree.role,
                path=str(tree.path),
                exists=tree.path.is_dir(),
                device=vol.device,
                usage=tree_usage(tree) if with_usage else 0,
                quota=tree.quota_bytes(vol.total),
                low_watermark=tree.low_bytes(vol.total),
            )
        )
    with ledger.read() as tx:
        live = live_reservations(tx, now=now)
        forecasts = tx.volumes.forecasts()
        jobs = tuple(tx.jobs.active())
        waiting = tuple(tx.waiters.all())
        awaiting = tuple(awaiting_now(tx, policy, now=now))
    volumes = []
    for device, vol in stats.items():
        reserved = sum(r.outstanding for r in live if r.device == device)
        fc = None
        row = forecasts.get(device)
        # A forecast is only trusted while the daemon keeps it fresh; the level is judged the
        # way the daemon judges it (Volume.of), from this reading of free space.
        if row is not None and now - row[4] < 60:
            fill_rate, eta_floor, eta_full, confidence, updated = row
            fc = Forecast(fill_rate or 0.0, eta_floor, eta_full, confidence or 0.0, 0)
        volumes.append(
            Volume.of(
                policy,
                vol,
                reserved=reserved,
                forecast=fc,
                trees=tuple(members[device]),
                fill_rate=None if fc is None else fill_rate,
                eta_floor=None if fc is None else eta_floor,
                forecast_updated=None if fc is None else updated,
            )
        )
    # A mark counts only while its volume is below the floor (as Reservation.check() reads
    # it), so a reservation is never shown at risk on a volume shown above its floor.
    below = {v.device for v in volumes if v.free < v.floor}
    live = [
        r
        if r.at_risk is None or r.device in below or r.device not in stats
        else replace(r, at_risk=None)
        for r in live
    ]
    return Status(
        time=now,
        policy=str(policy.source or ""),
        volumes=tuple(volumes),
        trees=tuple(tree_rows),
        reservations=tuple(live),
        jobs=jobs,
        waiting=waiting,
        awaiting=awaiting,
    )
