"""``Janitor``: the library every front end calls (Python workers, the CLI, the daemon's API).

>>> from janitor import Janitor
>>> jan = Janitor.from_settings()                                  # doctest: +SKIP
>>> with jan.reserve("media_cache", "2G", path=out, job="fa"):     # doctest: +SKIP
...     run_ffmpeg(out)

Its reservation calls (reserve, would_fit, release, renew, grow, check_risk ...) come from
:class:`janitor.reserving.Reserving`; this module holds the rest: how a Janitor is made, pins
and touches, sweeps, reaps and the removal of orphans, status.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from janitor.admission.jobs import Reaped, folder_is, reap_all
from janitor.admission.reserve import live_reservations, resolve_path, tree_on
from janitor.admission.risk import RiskDecision
from janitor.admission.volume import Volume, measure
from janitor.config.policy import InTree, Policy, load_policy, tree_holding
from janitor.config.settings import Settings
from janitor.errors import ConfigError
from janitor.handles import Pin
from janitor.host.space import device_of
from janitor.ledger.db import Ledger
from janitor.ledger.jobs import JobInfo
from janitor.ledger.log import LogEntry
from janitor.ledger.pins import PinInfo
from janitor.reserving import Reserving, SpaceSignal

if TYPE_CHECKING:
    from janitor.admission.awaiting import Awaiting
    from janitor.cleanup.sweep import EmergencyResult, SweepResult
    from janitor.status import Status

__all__ = ["Janitor", "Reaped", "SpaceSignal"]


class Janitor(Reserving):
    """Reservations (:class:`~janitor.reserving.Reserving`), pins, sweeps, reaps and status over
    one policy and one ledger."""

    def __init__(self, settings: Settings, policy: Policy, ledger: Ledger | None = None) -> None:
        self.settings = settings
        self.policy = policy
        self.ledger = ledger or Ledger(settings.ledger_path, lock_timeout=settings.lock_timeout_s)
        #: Told when space may have come back here (waiting calls try again at once).
        self.space = SpaceSignal()

    @classmethod
    def from_settings(
        cls,
        settings: Settings | None = None,
        *,
        config: Path | str | None = None,
        policy: Path | str | None = None,
        **overrides: Any,
    ) -> Janitor:
        """A Janitor from ``JANITOR_*``, the config file and the policy they name.

        ``policy=`` and keyword overrides (``state_dir=...``) beat the environment.
        """
        if settings is None:
            settings = Settings.load(config, policy=policy, **overrides)
        elif policy is not None:
            settings = settings.with_policy(policy)
        pol = load_policy(
            settings.policy_path, state_dir=settings.state_dir, origin=settings.policy_origin
        )
        return cls(settings, pol)

    def relieve(self, device: int, *, evict: bool = True) -> RiskDecision | None:
        """A volume below its floor: evict caches on it first, then put at risk only the
        reservations still needed to cover what is missing (kubelet's order for node pressure:
        reclaim what can be rebuilt before stopping work). ``evict=False`` only decides (the
        daemon between two evictions, while it samples a low volume often)."""
        tree = tree_on(self.policy, device)
        if tree is None:
            return None
        vol = measure(self.policy, tree)
        if vol.free < vol.floor and evict:
            from janitor.cleanup.sweep import make_room

            def deficit() -> int:
                """What the volume lacks below its floor, counting what jobs still write."""
                now = measure(self.policy, tree)
                if now.free >= now.floor:
                    return 0
                with self.ledger.read() as tx:
                    live = live_reservations(tx, device=device)
                return now.floor + sum(r.outstanding for r in live) - now.free

            make_room(
                self.policy,
                self.ledger,
                self.settings.state_dir,
                device,
                deficit,
                reason="pressure",
            )
        return self.assess_risk(device)

    def make_room(
        self, tree: str, nbytes: int | str, *, path: str | os.PathLike[str] | None = None
    ) -> int:
        """Evict caches on ``tree``'s volume until ``nbytes`` would fit; returns bytes freed."""
        from janitor.cleanup.sweep import make_room

        tree_policy = self.policy.tree(tree)
        size = self._size(nbytes)
        where = None if path is None else resolve_path(tree_policy, path)

        def shortfall() -> int:
            return self.would_fit(tree, size, path=where).shortfall

        report = make_room(
            self.policy,
            self.ledger,
            self.settings.state_dir,
            device_of(tree_policy.path),
            shortfall,
        )
        return 0 if report is None else max(report.deleted_bytes, report.reclaimed_bytes)

    # -- sweeps, pins, touches -----------------------------------------------------------------

    def sweep(
        self,
        tree: str | None = None,
        *,
        dry_run: bool = False,
        pressure: bool = True,
        progress: Callable[[str, int], None] | None = None,
    ) -> SweepResult:
        """Bring one tree (or every tree) within its policy; ``dry_run`` only plans."""
        from janitor.cleanup.sweep import run_sweep

        return run_sweep(
            self.policy,
            self.ledger,
            self.settings.state_dir,
            tree=tree,
            dry_run=dry_run,
            pressure=pressure,
            progress=progress,
        )

    def emergency(self, *, dry_run: bool = False) -> EmergencyResult:
        """For a disk that is already full: free every ballast, then evict caches below
        free_low, writing nothing to the ledger (`janitor emergency`)."""
        from janitor.cleanup.sweep import emergency

        return emergency(self.policy, self.ledger, self.settings.state_dir, dry_run=dry_run)

    def _tree_of(self, path: str | os.PathLike[str]) -> InTree:
        inside = tree_holding(self.policy.trees.values(), path)
        if inside is None:
            absolute = os.path.normpath(os.path.abspath(os.fspath(path)))
            raise ConfigError(
                f"path {absolute} is in no managed tree; `janitor policy show` lists the trees"
            )
        return inside

    def pin(
        self,
        path: str | os.PathLike[str],
        *,
        owner_pid: int | None = None,
        ttl: float | str | None = None,
    ) -> Pin:
        """Protect a cache entry (file or folder) from eviction while the owner lives."""
        inside = self._tree_of(path)
        tree, where = inside.name, inside.path
        pid, start = self._owner(owner_pid)
        seconds = None if ttl is None else self._ttl(ttl)
        info = self.ledger.call(
            lambda tx: tx.pins.add(tree, where, owner_pid=pid, owner_start=start, ttl=seconds)
        )
        return Pin(self, info)

    def unpin(self, key: str | os.PathLike[str]) -> list[PinInfo]:
        """End a pin by id, or every live pin on a path."""
        text = os.fspath(key)
        if not text.startswith("p-"):
            text = os.path.normpath(os.path.abspath(text))
        return self.ledger.call(lambda tx: tx.pins.end(text))

    def pins(self) -> list[PinInfo]:
        """Every pin that protects now (entries awaiting use among them)."""
        with self.ledger.read() as tx:
            return tx.pins.live()

    def awaiting(self) -> list[Awaiting]:
        """The cache entries awaiting use now, with what each holds."""
        from janitor.admission.awaiting import awaiting_now

        with self.ledger.read() as tx:
            return awaiting_now(tx, self.policy)

    def touch(self, *paths: str | os.PathLike[str]) -> None:
        """Record a use of each path, so LRU eviction sees it as recently used."""
        resolved = [self._tree_of(p).path for p in paths]
        self.ledger.call(lambda tx: tx.touches.record(resolved))

    def log(self, *, since: float | None = None, events: tuple[str, ...] = ()) -> list[LogEntry]:
        """The ledger's log: grants, refusals, releases, deletions ... oldest first."""
        return self.ledger.entries(since=since, events=events)

    def samples(self, since_s: float = 3600.0) -> dict[int, list[tuple[float, int]]]:
        """The daemon's free-space samples per volume over the last ``since_s`` seconds."""
        with self.ledger.read() as tx:
            return tx.samples.since(time.time() - since_s)

    def reap(self, now: float | None = None) -> Reaped:
        """End, in one transaction, the reservations and pins whose owner died or whose TTL
        passed, and the jobs whose folder is gone or whose every writer died (those become
        orphans, to remove at once)."""
        at = time.time() if now is None else now
        ended: Reaped = self.ledger.call(reap_all, at)
        if ended.reservations or ended.jobs:
            self.space.notify()
        return ended

    def jobs(self) -> list[JobInfo]:
        """The job folders the guard recorded that are live or orphaned, oldest first."""
        with self.ledger.read() as tx:
            return tx.jobs.active()

    def remove_orphans(self, *, dry_run: bool = False) -> list[JobInfo]:
        """Remove the folders of orphaned jobs (every writer died) now, each with every deleter
        check; returns the jobs whose folder went."""
        from janitor.cleanup.sweep import remove_units

        removed = []
        for job in self.jobs():
            if job.state != "orphan" or job.foreign or job.tree not in self.policy.trees:
                continue
            if not folder_is(job):
                continue  # gone, or another folder of that name now: the next reap ends it
            report = remove_units(
                self.policy,
                self.ledger,
                self.settings.state_dir,
                job.tree,
                [os.path.basename(job.folder)],
                dry_run=dry_run,
            )
            if not report.outcomes and not dry_run and folder_is(job):
                # Not a unit of its tree any more (its scope folder went): its tree's own
                # rules judge it from now on, rather than a retry at every reap.
                self.ledger.call(lambda tx, j=job.id: tx.jobs.set_foreign(j))
            if any(o.deleted for o in report.outcomes) or (dry_run and report.outcomes):
                removed.append(job)
        if removed and not dry_run:
            self.reap()
        return removed

    # -- status --------------------------------------------------------------------------------

    def volumes(self) -> dict[str, Volume]:
        """Each tree's volume by tree name, measured now, with this policy's numbers for it."""
        return {name: Volume.at(self.policy, t.path) for name, t in self.policy.trees.items()}

    def status(self, *, with_usage: bool = True) -> Status:
        """Volumes, trees and live reservations, measured now."""
        # Here, not at the top: it loads every unit kind, which a reservation, a release or a
        # guarded cut decided in its own process never needs (16 ms of each start).
        from janitor.status import collect_status

        return collect_status(self.policy, self.ledger, with_usage=with_usage)
