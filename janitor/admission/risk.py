"""ENOSPC risk: a smoothed fill rate from free-space samples, a forecast, damped levels, and
which jobs stop when a volume falls below its floor.

Pure functions and small state machines, fed by the daemon's samples: ``forecast`` fits the
recent samples by least squares (weighting newer ones more), and ``LevelTracker`` turns
readings into ``ok``/``warn``/``critical`` with hysteresis, so a volume hovering at a threshold
does not flap: a worse level takes effect at once, a better one only after it held for
``settle_s``. Below the floor, ``stop_deficit`` says what stopping jobs must cover and
``choose_at_risk`` the fewest that cover it; ``assess_risk`` applies them to the ledger's live
reservations, inside the caller's write transaction (a ``RiskDecision``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from itertools import pairwise
from typing import TYPE_CHECKING

from janitor.admission.reserve import log_row, reap
from janitor.admission.volume import ORDER, Forecast, Level, Reading, read_volume
from janitor.host.space import allocated_size
from janitor.ledger.paths import py_path
from janitor.sizes import format_size

if TYPE_CHECKING:
    from janitor.config.policy import Policy, TreePolicy
    from janitor.ledger.tx import Tx

__all__ = [
    "Claim",
    "LevelTracker",
    "RiskDecision",
    "assess_risk",
    "choose_at_risk",
    "fastest_fill",
    "finite",
    "forecast",
    "risk_order",
    "risk_reason",
    "stop_deficit",
]


def forecast(
    samples: Sequence[tuple[float, int]], floor: int, *, half_life: float = 60.0
) -> Forecast:
    """Fit ``(time, free)`` samples (oldest first) and extrapolate to the floor and to zero."""
    n = len(samples)
    if n < 2:
        return Forecast(0.0, None, None, 0.0, n)
    t_last = samples[-1][0]
    weights = [0.5 ** ((t_last - t) / half_life) for t, _ in samples]
    sw = sum(weights)
    mt = sum(w * t for w, (t, _) in zip(weights, samples, strict=True)) / sw
    mf = sum(w * f for w, (_, f) in zip(weights, samples, strict=True)) / sw
    stt = sum(w * (t - mt) ** 2 for w, (t, _) in zip(weights, samples, strict=True))
    stf = sum(w * (t - mt) * (f - mf) for w, (t, f) in zip(weights, samples, strict=True))
    sff = sum(w * (f - mf) ** 2 for w, (_, f) in zip(weights, samples, strict=True))
    if stt <= 0:
        return Forecast(0.0, None, None, 0.0, n)
    slope = stf / stt  # bytes per second, negative while filling
    r2 = 1.0 if sff == 0 else min(1.0, (stf * stf) / (stt * sff))
    span = samples[-1][0] - samples[0][0]
    # Confidence grows with the number of samples and the time they span, and with the fit.
    confidence = min(1.0, (n - 1) / 8) * min(1.0, span / 10.0) * r2
    rate = -slope
    free_now = samples[-1][1]
    eta_floor = eta_full = None
    if rate > 0:
        eta_full = max(0.0, free_now / rate)
        eta_floor = max(0.0, (free_now - floor) / rate)
    return Forecast(rate, eta_floor, eta_full, round(confidence, 3), n)


def fastest_fill(samples: Sequence[tuple[float, int]]) -> float:
    """The fastest fall of free space between two consecutive ``(time, free)`` samples, in
    bytes per second (0.0 when it never fell).

    The fitted rate of :func:`forecast` is what a volume fills at over minutes; this is how fast
    it has been seen to fill at all. An outside writer's burst (a download, a build, a copy)
    lasts a second or two, which a fit over ten minutes smooths away, and it is the burst that
    can take a volume from above free_low to its floor between two calm samples.
    """
    fastest = 0.0
    for (t0, f0), (t1, f1) in pairwise(samples):
        if t1 > t0 and f1 < f0:
            fastest = max(fastest, (f0 - f1) / (t1 - t0))
    return fastest


class LevelTracker:
    """Damped level of one volume: worse at once, better only after ``settle_s`` of calm."""

    def __init__(self, settle_s: float = 10.0) -> None:
        self.settle_s = settle_s
        self.level: Level = "ok"
        self.reason = ""
        self._better_since: float | None = None

    def update(self, reading: Reading, now: float) -> bool:
        """Feed one reading; True when the published level changed."""
        if ORDER[reading.level] >= ORDER[self.level]:
            self._better_since = None
            changed = reading.level != self.level
            self.level, self.reason = reading.level, reading.reason
            return changed
        if self._better_since is None:
            self._better_since = now
        if now - self._better_since >= self.settle_s:
            self._better_since = None
            self.level, self.reason = reading.level, reading.reason
            return True
        return False


def finite(x: float | None) -> float | None:
    """``x`` unless it is None, inf or nan (JSON has no infinity)."""
    return None if x is None or math.isinf(x) or math.isnan(x) else x


@dataclass(frozen=True, slots=True)
class Claim:
    """A live reservation as the at-risk decision sees it.

    ``outstanding``: what it still has to write; ``written``: what its path holds, given back
    when a stopped job removes its partial output (the guarded ffmpeg does, a pipeline job's
    temp folder goes with it). A job that keeps its output frees less than counted: the next
    reading shows it, and more are chosen.
    """

    id: str
    outstanding: int
    created: float
    at_risk: bool = False
    written: int = 0

    @property
    def frees(self) -> int:
        """Bytes stopping this job is counted to give the volume."""
        return self.outstanding + self.written


def stop_deficit(free: int, floor: int, reserved: int) -> int:
    """Bytes the volume lacks that stopping jobs must cover; 0 while it is not below its floor.

    Below the floor the volume must still hold what its running jobs will write
    (``reserved``) plus half the floor, the margin kept for what writers outside any
    reservation add before the next look: ``reserved + floor / 2 - free``. A dip below the
    floor that running jobs still fit into stops nobody.
    """
    if free >= floor:
        return 0
    return max(0, reserved + floor // 2 - free)


def risk_order(claim: Claim) -> tuple[bool, int, float]:
    """The order in which reservations are put at risk (smallest key first)."""
    return (not claim.at_risk, -claim.outstanding, -claim.created)


def choose_at_risk(deficit: int, claims: Sequence[Claim]) -> tuple[str, ...]:
    """The fewest reservations whose stopping covers ``deficit`` bytes, as kubelet ranks pods
    under node pressure instead of evicting them all.

    Order (:func:`risk_order`): those already at risk first (their jobs may be stopping
    already; telling another job instead would stop two), then the most outstanding bytes
    first (what a job still writes is what would take the volume further down, and the most
    left to write is the least done), then the newest. Each counts what stopping it frees
    (:attr:`Claim.frees`). A reservation with nothing left to write is never chosen: it takes
    nothing more, and stopping it would only throw away finished work. When all of them
    together cannot cover the deficit, all of them are chosen: a job stopped with a reason is
    better off than one that meets ENOSPC.
    """
    if deficit <= 0:
        return ()
    chosen: list[str] = []
    covered = 0
    for claim in sorted((c for c in claims if c.outstanding > 0), key=risk_order):
        if covered >= deficit:
            break
        chosen.append(claim.id)
        covered += claim.frees
    return tuple(chosen)


@dataclass(frozen=True, slots=True)
class RiskDecision:
    """One at-risk decision on a volume: the numbers, and which reservations must stop.

    ``deficit`` is what the volume lacks, below its floor, to hold what running jobs still
    write plus half the floor (:func:`stop_deficit`); ``at_risk`` are the fewest reservations
    whose stopping covers it (:func:`choose_at_risk`).
    """

    device: int
    volume: str
    free: int
    floor: int
    reserved: int
    deficit: int
    at_risk: tuple[str, ...] = ()
    marked: tuple[str, ...] = ()
    cleared: tuple[str, ...] = ()
    jobs: dict[str, str | None] = field(default_factory=dict)

    @property
    def critical(self) -> bool:
        """True while free space is below the floor."""
        return self.free < self.floor


def risk_reason(decision: RiskDecision) -> str:
    """The reason a reservation at risk carries (what ``check()`` raises and the API shows)."""
    return (
        f"volume {decision.volume} is critical: {format_size(decision.free)} free is below the "
        f"floor of {format_size(decision.floor)} and running jobs still write "
        f"{format_size(decision.reserved)}; this job is among the fewest stopped to cover the "
        f"{format_size(decision.deficit)} missing"
    )


def assess_risk(
    tx: Tx, policy: Policy, tree: TreePolicy, *, now: float | None = None
) -> RiskDecision:
    """Decide, inside the caller's write transaction, which reservations on ``tree``'s volume
    must stop, and mark them (``at_risk``); clear the marks no longer needed.

    It reads the numbers admission reads, the same way (reservations summed, then a fresh
    statvfs), under the same writer lock, so a reservation is never stopped on a reading older
    than the one that granted it. Above the floor every mark on the volume is cleared.
    """
    now = time.time() if now is None else now
    vol = read_volume(policy, tree)
    if vol.free >= vol.floor:
        cleared = tx.reservations.marked_on(vol.device)
        if cleared:
            tx.reservations.clear_marks_on(vol.device)
            for rid in cleared:
                log_row(tx, "risk-cleared", now, device=vol.device, reservation=rid)
        return RiskDecision(vol.device, vol.mount, vol.free, vol.floor, 0, 0, (), (), cleared)
    reap(tx, now)  # end what dead owners left, so it is neither counted nor told
    claims = []
    jobs: dict[str, str | None] = {}
    for rid, nbytes, path, created, flag, job in tx.reservations.claims(vol.device):
        written = 0 if path is None else allocated_size(py_path(path))
        left = max(0, nbytes - written)
        claims.append(Claim(rid, left, created, flag is not None, written))
        jobs[rid] = job
    vol = read_volume(policy, tree)  # read after the sum, as admit() does
    reserved = sum(c.outstanding for c in claims)
    deficit = stop_deficit(vol.free, vol.floor, reserved)
    chosen = choose_at_risk(deficit, claims)
    decision = RiskDecision(
        vol.device, vol.mount, vol.free, vol.floor, reserved, deficit, chosen, jobs=jobs
    )
    flagged = {c.id for c in claims if c.at_risk}
    marked = tuple(rid for rid in chosen if rid not in flagged)
    cleared = tuple(sorted(flagged - set(chosen)))
    if marked:
        reason = risk_reason(decision)
        for rid in marked:
            tx.reservations.mark(rid, reason)
            log_row(
                tx, "at-risk", now, device=vol.device, reservation=rid, free=vol.free,
                floor=vol.floor, reserved=reserved, deficit=deficit,
            )  # fmt: skip
    for rid in cleared:
        tx.reservations.mark(rid, None)
        log_row(tx, "risk-cleared", now, device=vol.device, reservation=rid)
    return replace(decision, marked=marked, cleared=cleared)
