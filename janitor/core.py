"""``Janitor``: the library every front end calls (Python workers, the CLI, the daemon's API).

>>> from janitor import Janitor
>>> jan = Janitor.from_settings()                                  # doctest: +SKIP
>>> with jan.reserve("media_cache", "2G", path=out, job="fa"):     # doctest: +SKIP
...     run_ffmpeg(out)
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from janitor.admission.jobs import Reaped, folder_is, reap_all
from janitor.admission.reserve import (
    Admission,
    admit,
    cover_reservation,
    end_reservation,
    get_reservation,
    grow_reservation,
    live_reservations,
    renew_reservation,
    resolve_path,
    tree_on,
)
from janitor.admission.risk import RiskDecision, assess_risk
from janitor.admission.volume import Volume, measure
from janitor.config.policy import InTree, Policy, load_policy, tree_holding
from janitor.config.settings import Settings
from janitor.errors import ConfigError, SpaceRisk
from janitor.handles import Pin, Reservation
from janitor.host.owner import process_start
from janitor.host.space import device_of
from janitor.ledger.db import Ledger
from janitor.ledger.jobs import JobInfo
from janitor.ledger.log import LogEntry
from janitor.ledger.pins import PinInfo
from janitor.ledger.reservations import ReservationInfo
from janitor.sizes import parse_duration, parse_size
from janitor.status import Status, collect_status

if TYPE_CHECKING:
    from janitor.cleanup.sweep import EmergencyResult, SweepResult

__all__ = ["Janitor", "Reaped", "SpaceSignal"]


class SpaceSignal:
    """Told when space may have come back (a release, a job's end, a sweep), so that calls
    waiting for room in this process try again at once rather than at their next poll."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._generation = 0

    def notify(self) -> None:
        """Wake every waiter."""
        with self._cond:
            self._generation += 1
            self._cond.notify_all()

    def wait(self, timeout: float) -> bool:
        """Sleep until notified or ``timeout`` seconds passed; True if notified."""
        with self._cond:
            seen = self._generation
            return self._cond.wait_for(lambda: self._generation != seen, max(0.0, timeout))


class Janitor:
    """Reservations, status and (later) sweeps over one policy and one ledger."""

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

    # -- reservations --------------------------------------------------------------------------

    def _size(self, nbytes: int | str) -> int:
        return parse_size(nbytes, what="reservation size")

    def _ttl(self, ttl: float | str | None) -> float:
        if ttl is None:
            return self.settings.default_ttl_s
        seconds = parse_duration(ttl, what="ttl")
        if seconds <= 0:
            raise ConfigError(f"ttl {ttl!r} must be positive")
        return seconds

    def _owner(self, owner_pid: int | None) -> tuple[int, float | None]:
        pid = os.getpid() if owner_pid is None else owner_pid
        start = process_start(pid)
        if start is None:
            raise ConfigError(f"owner pid {pid} is not a running process")
        return pid, start

    def reserve(
        self,
        tree: str,
        nbytes: int | str,
        *,
        path: str | os.PathLike[str] | None = None,
        job: str | None = None,
        ttl: float | str | None = None,
        wait: float | str | None = None,
        owner_pid: int | None = None,
        evict: bool = True,
    ) -> Reservation:
        """Reserve ``nbytes`` on ``tree``'s volume, or raise ReservationRefused (ENOSPC).

        ``path``: the file or folder the bytes go to; only the part not yet written counts.
        ``wait``: keep retrying for this long (seconds or ``"2m"``) before refusing.
        ``owner_pid``: the process whose death ends the reservation (default: this one).
        ``evict``: when it does not fit, first evict cache entries on the same volume to cover
        the shortfall (least recently used first); the refusal says how much was evicted.
        """
        tree_policy = self.policy.tree(tree)
        size = self._size(nbytes)
        seconds = self._ttl(ttl)
        where = None if path is None else resolve_path(tree_policy, path)
        pid, start = self._owner(owner_pid)
        deadline = None if wait is None else time.monotonic() + parse_duration(wait, what="wait")
        delay = 0.05
        evicted = 0
        tried_room = False
        while True:
            decision, info = self.ledger.call(
                lambda tx, freed=evicted: admit(
                    tx,
                    self.policy,
                    tree_policy,
                    size,
                    path=where,
                    job=job,
                    owner_pid=pid,
                    owner_start=start,
                    ttl=seconds,
                    evicted=freed,
                )
            )
            if info is not None:
                return Reservation(self, info)
            if evict and not tried_room:
                tried_room = True  # once per call: a scan per retry of `wait` would be waste
                freed = self.make_room(tree, size, path=where)
                if freed > 0:
                    evicted = freed
                    continue
            if deadline is None or time.monotonic() >= deadline:
                raise decision.refusal()
            time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 2, 1.0)

    def check(
        self, tree: str, nbytes: int | str, *, path: str | os.PathLike[str] | None = None
    ) -> Admission:
        """Would ``nbytes`` be granted now? The numbers, without reserving anything."""
        tree_policy = self.policy.tree(tree)
        size = self._size(nbytes)
        where = None if path is None else resolve_path(tree_policy, path)
        pid, start = os.getpid(), None
        decision, _ = self.ledger.call(
            lambda tx: admit(
                tx,
                self.policy,
                tree_policy,
                size,
                path=where,
                job=None,
                owner_pid=pid,
                owner_start=start,
                ttl=1.0,
                grant=False,
            )
        )
        return decision

    def release(self, reservation_id: str) -> ReservationInfo:
        """End a live reservation; UnknownReservation if it is unknown or already ended."""
        info: ReservationInfo = self.ledger.call(end_reservation, reservation_id)
        self.space.notify()
        return info

    def renew(self, reservation_id: str, ttl: float | str | None = None) -> ReservationInfo:
        """Extend a live reservation's TTL to now + ``ttl`` (default TTL if None)."""
        seconds = self._ttl(ttl)
        info: ReservationInfo = self.ledger.call(renew_reservation, reservation_id, seconds)
        return info

    def grow(self, reservation_id: str, nbytes: int | str) -> ReservationInfo:
        """Raise a live reservation to ``nbytes`` in all, for a writer that learns its size late;
        ReservationRefused (with the numbers) if the rest does not fit. A smaller total gives
        the difference back."""
        size = self._size(nbytes)
        info = self.get(reservation_id)
        tree_policy = self.policy.tree(info.tree)
        decision, grown = self.ledger.call(
            lambda tx: grow_reservation(tx, self.policy, tree_policy, reservation_id, size)
        )
        if grown is None:
            raise decision.refusal()
        return grown

    def get(self, reservation_id: str) -> ReservationInfo:
        """One reservation in whatever state the ledger has it.

        ``at_risk`` is shown only while its volume is below the floor now: a mark the next
        decision will clear no longer stops anyone (``check()`` reads it the same way).
        """
        with self.ledger.read() as tx:
            info = get_reservation(tx, reservation_id)
        if info.at_risk is not None and not self._below_floor(info):
            info = replace(info, at_risk=None)
        return info

    def cover(self, reservation_id: str, pid: int) -> ReservationInfo:
        """Keep a live reservation live while process ``pid`` runs too: the command that a
        supervisor (``janitor exec``, the guarded ffmpeg) runs under it."""
        start = process_start(pid)
        if start is None:
            raise ConfigError(f"pid {pid} is not a running process")
        info: ReservationInfo = self.ledger.call(cover_reservation, reservation_id, pid, start)
        return info

    def reservations(self) -> list[ReservationInfo]:
        """Every live reservation, oldest first, with outstanding bytes measured now."""
        with self.ledger.read() as tx:
            return live_reservations(tx)

    def _below_floor(self, info: ReservationInfo) -> bool:
        tree = self.policy.trees.get(info.tree)
        if tree is None:
            return True  # cannot measure it any more: the mark stands
        vol = measure(self.policy, tree)
        return vol.free < vol.floor

    def check_risk(self, info: ReservationInfo) -> None:
        """Raise SpaceRisk if this reservation must stop: its volume is below the floor now and
        it is among the fewest whose stopping covers what the volume lacks.

        Above the floor it never raises (one statvfs). Below it, the mark decides: the daemon's
        (which evicts caches first), or, when no daemon watches the volume, this call makes
        the same decision itself (evicting first too). Other jobs on the volume go on.
        """
        tree = self.policy.trees.get(info.tree)
        if tree is not None:
            vol = measure(self.policy, tree)
            if vol.free >= vol.floor:
                return
        with self.ledger.read() as tx:
            reason = tx.reservations.at_risk(info.id)
        if reason is None and tree is not None and not self.daemon_watches(info.device):
            decision = self.relieve(info.device)
            if decision is not None and info.id in decision.at_risk:
                reason = self.get(info.id).at_risk
        if reason:
            raise SpaceRisk(info.id, info.volume, reason)

    def daemon_watches(self, device: int) -> bool:
        """True while a daemon samples volume ``device`` (its reading in the ledger is fresh)."""
        window = max(5.0, 3 * self.settings.sample_interval_s)
        with self.ledger.read() as tx:
            updated = tx.volumes.updated(device)
        return updated is not None and time.time() - updated < window

    def assess_risk(self, device: int) -> RiskDecision | None:
        """Mark the fewest reservations on volume ``device`` whose stopping covers what it lacks
        below its floor, and clear the marks no longer needed (None: no tree measures it)."""
        tree = tree_on(self.policy, device)
        if tree is None:
            return None
        decision: RiskDecision = self.ledger.call(lambda tx: assess_risk(tx, self.policy, tree))
        return decision

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
            return self.check(tree, size, path=where).shortfall

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
        """Every pin that protects now."""
        with self.ledger.read() as tx:
            return tx.pins.live()

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
        return collect_status(self.policy, self.ledger, with_usage=with_usage)
