"""The reservation half of ``Janitor``: grant, refuse, release, renew, grow, and say who is at
risk (:class:`Reserving`, which ``janitor.core.Janitor`` extends with pins, sweeps and reaps).

A mixin rather than a collaborator, so ``jan.reserve(...)`` stays one call on one object; the
state it shares with the rest of ``Janitor`` is declared here, and set by ``Janitor.__init__``.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import replace
from typing import TYPE_CHECKING

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
from janitor.admission.volume import measure
from janitor.errors import ConfigError, SpaceRisk
from janitor.handles import Reservation
from janitor.host.owner import process_start
from janitor.sizes import parse_duration, parse_size

if TYPE_CHECKING:
    from janitor.config.policy import Policy
    from janitor.config.settings import Settings
    from janitor.ledger.db import Ledger
    from janitor.ledger.reservations import ReservationInfo

__all__ = ["Reserving", "SpaceSignal"]


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


class Reserving:
    """Reservations over one policy and one ledger: the methods of ``Janitor`` that admit."""

    settings: Settings
    policy: Policy
    ledger: Ledger
    #: Told when space may have come back here (waiting calls try again at once).
    space: SpaceSignal

    if TYPE_CHECKING:
        # Janitor's own (janitor.core): evicting is a sweep's work, not admission's.
        def make_room(
            self, tree: str, nbytes: int | str, *, path: str | os.PathLike[str] | None = None
        ) -> int: ...
        def relieve(self, device: int, *, evict: bool = True) -> RiskDecision | None: ...

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

    def would_fit(
        self, tree: str, nbytes: int | str, *, path: str | os.PathLike[str] | None = None
    ) -> Admission:
        """Would ``nbytes`` be granted now? The numbers, without reserving anything
        (``janitor check TREE SIZE``; ``Reservation.check()`` asks another thing: am I at risk)."""
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
