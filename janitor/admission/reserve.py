"""Admission control: grant bytes on a volume only while the floor stays free.

A reservation is granted inside one ledger write transaction when::

    free - floor - outstanding(other live reservations on the volume) >= requested

where a reservation's outstanding part is its bytes minus what its path already holds (never
below zero; no path counts in full). Reservations whose owner died or whose TTL passed are
ended first, at every admission, so no daemon is needed for them to stop counting.
"""

from __future__ import annotations

import os
import select
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from janitor.admission.risk import Claim, choose_at_risk, stop_deficit
from janitor.admission.volume import Level, Volume, level_of
from janitor.errors import ConfigError, ReservationRefused, UnknownReservation
from janitor.host.fastpaths import LINUX
from janitor.host.owner import is_alive
from janitor.host.space import allocated_size, existing_ancestor
from janitor.ledger.paths import py_path
from janitor.ledger.reservations import ReservationInfo, new_id, outstanding
from janitor.sizes import format_size

if TYPE_CHECKING:
    from janitor.config.policy import Policy, TreePolicy
    from janitor.ledger.tx import Tx

__all__ = [
    "Admission",
    "Reading",
    "RiskDecision",
    "admit",
    "assess_risk",
    "cover_reservation",
    "end_logged",
    "end_reservation",
    "grow_reservation",
    "live_reservations",
    "log_refuse",
    "owner_alive",
    "owners_alive",
    "read_volume",
    "reap",
    "renew_reservation",
    "resolve_path",
    "tree_on",
]


@dataclass(frozen=True, slots=True)
class Admission:
    """The numbers behind one admission decision."""

    tree: str
    volume: str
    device: int
    requested: int
    free: int
    floor: int
    reserved: int
    evicted: int = 0
    free_low: int = 0
    #: Bytes that calls waiting ahead of this one need (first come, first served): counted as
    #: reserved, so a newcomer never takes the room an earlier waiter waits for.
    queued: int = 0

    @property
    def level(self) -> Level:
        """The volume's level on this reading of free space (no forecast)."""
        return level_of(self.free, self.floor, self.free_low)[0]

    @property
    def reason(self) -> str:
        """Why the volume is at that level (empty when ok)."""
        return level_of(self.free, self.floor, self.free_low)[1]

    @property
    def headroom(self) -> int:
        """free - floor - reserved by others - queued ahead (may be negative)."""
        return self.free - self.floor - self.reserved - self.queued

    @property
    def available(self) -> int:
        """What could still be granted: the headroom, never below zero."""
        return max(0, self.headroom)

    @property
    def fits(self) -> bool:
        """True when the request can be granted."""
        return self.requested <= self.headroom

    @property
    def shortfall(self) -> int:
        """Bytes missing for the request to fit."""
        return max(0, self.requested - self.headroom)

    def refusal(self, output: str | None = None, waited_s: float = 0.0) -> ReservationRefused:
        """The error to raise when the request does not fit (``output``: the file refused)."""
        return ReservationRefused(self, output=output, waited_s=waited_s)

    def as_dict(self) -> dict[str, Any]:
        """The JSON shape of `janitor check`."""
        return {
            "tree": self.tree,
            "volume": self.volume,
            "requested": self.requested,
            "free": self.free,
            "floor": self.floor,
            "reserved": self.reserved,
            "available": self.available,
            "shortfall": self.shortfall,
            "fits": self.fits,
            "level": self.level,
        }


def resolve_path(tree: TreePolicy, path: str | os.PathLike[str]) -> str:
    """``path`` made absolute; ConfigError unless it lies inside the tree's root.

    Symlinks in the path are resolved for the check only, so ``/tmp`` vs ``/private/tmp`` on
    macOS does not matter, but a symlink pointing out of the tree is refused.
    """
    if "\0" in os.fsdecode(path):
        raise ConfigError(f"path {os.fsdecode(path)!r} contains a NUL byte")
    absolute = os.path.normpath(os.path.abspath(os.fspath(path)))
    root_real = os.path.realpath(tree.path)
    real = os.path.realpath(absolute)
    if real != root_real and not real.startswith(root_real.rstrip("/") + "/"):
        raise ConfigError(
            f"path {absolute} is outside tree {tree.name!r} ({tree.path}); "
            "reserve on the tree that holds it"
        )
    if real == root_real:
        raise ConfigError(
            f"path {absolute} is the root of tree {tree.name!r}; name the file or job folder"
        )
    # Record it as the scan sees it: under the tree's root as the policy spells it.
    base = os.path.normpath(os.path.abspath(tree.path))
    return os.path.join(base, os.path.relpath(real, root_real))


def reap(tx: Tx, now: float) -> list[ReservationInfo]:
    """End live reservations whose TTL passed or whose owner died; returns the ones ended."""
    return _reap_and_sum(tx, now, None)[0]


class _OwnerWatch:
    """Whether owner processes live, cheap enough to ask for every live reservation under the
    writer lock.

    The first time an owner ``(pid, start)`` is seen, ``is_alive`` checks it the full way (the
    pid runs, is no zombie, and started at ``start``) and, on Linux, a pidfd is opened on it.
    A pidfd names that very process, never a later one with its pid, and polls readable once
    it has exited (a zombie included), so every later check is one ``poll(0)``, not an open,
    read and parse of ``/proc/PID/stat``. A few hundred owners are watched at most (the oldest
    first seen is dropped); past that, or where pidfds are missing, each check is
    ``is_alive``. Shared by the threads of a process; a forked child starts afresh.
    """

    _LIMIT = 256

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._pid = os.getpid()
        self._polls: dict[tuple[int, float], tuple[int, select.poll]] = {}
        self._enabled = LINUX and hasattr(os, "pidfd_open") and hasattr(select, "poll")

    def alive(self, pid: int, start: float | None) -> bool:
        if not self._enabled or start is None or start < 0 or pid <= 0:
            return is_alive(pid, start)
        key = (pid, start)
        with self._guard:
            if self._pid != os.getpid():  # a forked child: its copies of our pidfds are its own
                self._forget()
                self._pid = os.getpid()
            watched = self._polls.get(key)
            if watched is not None:
                if not watched[1].poll(0):
                    return True
                del self._polls[key]
                os.close(watched[0])
                return False
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            return is_alive(pid, start)  # no such process (dead), not a leader, no pidfds ...
        # Opened first, checked second: if the pid changed hands in between, the check
        # sees the newcomer's start time and says dead, whichever process the pidfd names.
        try:
            if not is_alive(pid, start):
                os.close(fd)
                return False
            poller = select.poll()
            poller.register(fd, select.POLLIN)
        except BaseException:
            os.close(fd)
            raise
        with self._guard:
            if self._pid != os.getpid() or key in self._polls:
                os.close(fd)  # another thread watched it first, or we forked meanwhile
                return True
            self._polls[key] = (fd, poller)
            if len(self._polls) > self._LIMIT:
                oldest = next(iter(self._polls))
                os.close(self._polls.pop(oldest)[0])
        return True

    def _forget(self) -> None:
        for fd, _ in self._polls.values():
            try:
                os.close(fd)
            except OSError:
                pass
        self._polls.clear()


_owners = _OwnerWatch()


def _reap_and_sum(tx: Tx, now: float, device: int | None) -> tuple[list[ReservationInfo], int]:
    """One pass over the live reservations, inside the caller's write transaction.

    Ends those whose TTL passed or whose owner died and sums the outstanding bytes of the rest
    on ``device``. Admission runs this under the writer lock, so it reads only the columns it
    needs, builds a value only for the rare row it ends, and asks about each owner once, the
    cheap way (_OwnerWatch).
    """
    ending: list[tuple[str, str]] = []
    reserved = 0
    alive: dict[tuple[int, float | None], bool] = {}
    for row in tx.reservations.live_rows():
        rid, dev, nbytes, path, pid, start, expires, cpid, cstart, job_id = row
        if expires <= now:
            ending.append((rid, "expired"))
            continue
        if job_id is not None:
            # A job's working set lives while its folder is there and any of its writers runs.
            if not os.path.lexists(py_path(path)):
                ending.append((rid, "released"))  # its job folder is gone: the job is done
                continue
            runs = False
            for w in tx.jobs.writers(job_id):
                key = (w.pid, w.start)
                if key not in alive:
                    alive[key] = _owners.alive(w.pid, w.start)
                if alive[key]:
                    runs = True
                    break
            if not runs:
                ending.append((rid, "dead"))
            elif dev == device:
                reserved += outstanding(nbytes, py_path(path))
            continue
        owner = (pid, start)
        ok = alive.get(owner)
        if ok is None:
            ok = alive[owner] = _owners.alive(pid, start)
        if not ok and cpid is not None:
            command = (cpid, cstart)
            ok = alive.get(command)
            if ok is None:
                ok = alive[command] = _owners.alive(cpid, cstart)
        if not ok:
            ending.append((rid, "dead"))
        elif dev == device:
            if path is None:
                reserved += nbytes
            else:
                reserved += outstanding(nbytes, py_path(path))
    ended = []
    for rid, state in ending:
        info = tx.reservations.get(rid, measure=False)
        assert info is not None  # read in this very transaction
        if state == "released":
            ended.append(end_logged(tx, info, state, now, why="job folder removed"))
        else:
            ended.append(end_logged(tx, info, state, now, owner_pid=info.owner_pid))
    return ended, reserved


def end_logged(
    tx: Tx, info: ReservationInfo, state: str, now: float, **detail: Any
) -> ReservationInfo:
    """End a live reservation as ``state`` (released, expired, dead) with its log line."""
    tx.reservations.end(info.id, state, now)
    tx.log.add(
        "release" if state == "released" else state,
        tree=info.tree,
        device=info.device,
        reservation=info.id,
        nbytes=info.bytes,
        path=info.path,
        ts=now,
        **detail,
    )
    return replace(info, state=state, ended=now)


def owner_alive(pid: int, start: float | None) -> bool:
    """Whether process ``pid`` (started at ``start``) runs, the cheap way (_OwnerWatch)."""
    return _owners.alive(pid, start)


def owners_alive(info: ReservationInfo) -> bool:
    """True while the reservation's owner, or the command run under it, still runs."""
    if _owners.alive(info.owner_pid, info.owner_start):
        return True
    return info.command_pid is not None and _owners.alive(info.command_pid, info.command_start)


def live_reservations(
    tx: Tx,
    *,
    device: int | None = None,
    now: float | None = None,
    check_owners: bool = True,
) -> list[ReservationInfo]:
    """Live reservations (optionally on one volume) with their outstanding bytes measured.

    Without writing, also leaves out those a reaper would end (TTL passed, owner dead), so a
    read-only caller such as `janitor status` sees what admission would see. A caller that
    has just reaped in the same transaction passes ``check_owners=False``.
    """
    now = time.time() if now is None else now
    out = []
    for info in tx.reservations.live(device):
        if info.expires <= now:
            continue
        if info.job_id is not None:
            if info.path is not None and not os.path.lexists(info.path):
                continue  # its job folder is gone: admission ends it next
            writers = tx.jobs.writers(info.job_id)
            if check_owners and not any(_owners.alive(w.pid, w.start) for w in writers):
                continue  # every writer of its job died
        elif check_owners and not owners_alive(info):
            continue
        out.append(replace(info, outstanding=outstanding(info.bytes, info.path)))
    return out


def measure(policy: Policy, tree: TreePolicy) -> Volume:
    """The tree's volume, from a fresh statvfs."""
    return Volume.at(policy, tree.path)


#: tree path -> (policy, folder statted, the volume as last measured): what a volume is and its
#: numbers change only when something is mounted or resized, which changes device or size.
_VOLUMES: dict[Path, tuple[Policy, str, Volume]] = {}


class Reading(NamedTuple):
    """A tree's volume as :func:`read_volume` reads it: which it is, free space now, its floors."""

    device: int
    mount: str
    free: int
    floor: int
    free_low: int


def read_volume(policy: Policy, tree: TreePolicy) -> Reading:
    """The tree's volume and its free space now, at the cost of one statvfs and one stat while
    nothing changed (see :func:`_measure_fast`)."""
    return _measure_fast(policy, tree)


def _measure_fast(policy: Policy, tree: TreePolicy) -> Reading:
    """(device, mount, free, floor, free_low) of the tree's volume at the cost of one statvfs
    and one stat while nothing changed.

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
            return Reading(vol.device, vol.mount, free, vol.floor, vol.free_low)
    folder = str(existing_ancestor(tree.path))
    vol = Volume.at(policy, folder)
    if len(_VOLUMES) > 64:
        _VOLUMES.clear()
    _VOLUMES[tree.path] = (policy, folder, vol)
    return Reading(vol.device, vol.mount, vol.free, vol.floor, vol.free_low)


def admit(
    tx: Tx,
    policy: Policy,
    tree: TreePolicy,
    nbytes: int,
    *,
    path: str | None,
    job: str | None,
    owner_pid: int,
    owner_start: float | None,
    ttl: float,
    grant: bool = True,
    now: float | None = None,
    evicted: int = 0,
    queued: int = 0,
    job_id: str | None = None,
    log_refusal: bool = True,
) -> tuple[Admission, ReservationInfo | None]:
    """Decide, inside the caller's write transaction; insert the reservation if granted.

    With ``grant=False`` it only answers (`janitor check`); a refusal is logged unless
    ``log_refusal`` is False (a caller that rolls its transaction back logs it itself).
    ``queued``: bytes that calls waiting ahead need, counted as reserved. ``job_id``: the job
    whose working set this is (``ttl`` is then ``math.inf``: it ends with the job).
    """
    now = time.time() if now is None else now
    known = _VOLUMES.get(tree.path)
    device = known[2].device if known is not None and known[0] is policy else -1
    if device == -1:
        device = _measure_fast(policy, tree)[0]  # first admission on this tree here
    while True:
        _, reserved = _reap_and_sum(tx, now, device)
        # Free space is read after the reserved bytes are summed: a job writing meanwhile
        # only lowers free and raises what its reservation has written, which errs on the
        # safe side (the other order would count what it wrote as free and as still to come).
        measured, mount, free, floor, free_low = _measure_fast(policy, tree)
        if measured == device:
            break
        device = measured  # its volume changed meanwhile: sum again for the new one
    decision = Admission(
        tree.name, mount, device, nbytes, free, floor, reserved, evicted, free_low, queued
    )
    if not decision.fits and grant:
        if log_refusal:
            log_refuse(tx, decision, path=path, ts=now, job=job)
        return decision, None
    if not grant:
        return decision, None
    info = ReservationInfo(
        id=new_id(now),
        tree=tree.name,
        device=device,
        volume=mount,
        bytes=nbytes,
        path=path,
        job=job,
        owner_pid=owner_pid,
        owner_start=owner_start,
        created=now,
        expires=now + ttl,
        state="live",
        outstanding=outstanding(nbytes, path),
        job_id=job_id,
    )
    info = tx.reservations.insert(info)
    tx.log.add(
        "grant",
        tree=tree.name,
        device=device,
        reservation=info.id,
        nbytes=nbytes,
        path=path,
        ts=now,
        free=free,
        floor=floor,
        reserved=reserved,
        job=job,
        owner_pid=owner_pid,
        **({"job_id": job_id} if job_id else {}),
    )
    return decision, info


def log_refuse(
    tx: Tx, decision: Admission, *, path: str | None, ts: float, job: str | None, **extra: Any
) -> None:
    """The log line of a refusal, with its numbers."""
    if decision.queued:
        extra["queued"] = decision.queued
    tx.log.add(
        "refuse",
        tree=decision.tree,
        device=decision.device,
        nbytes=decision.requested,
        path=path,
        ts=ts,
        free=decision.free,
        floor=decision.floor,
        reserved=decision.reserved,
        job=job,
        **extra,
    )


def get_reservation(tx: Tx, rid: str) -> ReservationInfo:
    """The reservation ``rid`` in any state; UnknownReservation if the ledger never had it."""
    info = tx.reservations.get(rid)
    if info is None:
        raise UnknownReservation(
            f"no reservation {rid!r} in the ledger; `janitor status` lists the live ones"
        )
    return info


def _require_live(info: ReservationInfo, verb: str) -> None:
    if info.state != "live":
        why = {
            "released": "was released",
            "expired": "expired (its TTL passed)",
            "dead": "ended when its owner process died",
        }.get(info.state, info.state)
        raise UnknownReservation(
            f"cannot {verb} reservation {info.id}: it {why}; make a new reservation"
        )


def end_reservation(tx: Tx, rid: str, *, now: float | None = None) -> ReservationInfo:
    """Release a live reservation; UnknownReservation if it is unknown or already ended.

    A release needs no admission, so the usual case, a live reservation within its TTL, is a
    single UPDATE (and its log line); anything else takes the long way to say why it failed.
    """
    now = time.time() if now is None else now
    released = tx.reservations.release_live(rid, now)
    if released is not None:
        _log_release(tx, released, now)
        return released
    info = get_reservation(tx, rid)
    if info.state == "live" and info.expires <= now:
        reap(tx, now)
        info = get_reservation(tx, rid)
    _require_live(info, "release")
    tx.reservations.end(rid, "released", now)
    info = replace(info, state="released", ended=now)
    _log_release(tx, info, now)
    return info


def _log_release(tx: Tx, info: ReservationInfo, now: float) -> None:
    tx.log.add(
        "release",
        tree=info.tree,
        device=info.device,
        reservation=info.id,
        nbytes=info.bytes,
        path=info.path,
        ts=now,
        written=info.bytes - info.outstanding,
    )


def grow_reservation(
    tx: Tx,
    policy: Policy,
    tree: TreePolicy,
    rid: str,
    new_bytes: int,
    *,
    now: float | None = None,
) -> tuple[Admission, ReservationInfo | None]:
    """Raise a live reservation to ``new_bytes`` if the volume still has room for the rest.

    Its own written part is already out of free space, so the test is
    ``free - floor - others >= new_bytes - written``. A smaller total always succeeds: it
    gives the difference back.
    """
    now = time.time() if now is None else now
    reap(tx, now)
    info = get_reservation(tx, rid)
    _require_live(info, "grow")
    vol = measure(policy, tree)
    device, mount, free, floor = vol.device, vol.mount, vol.free, vol.floor
    others = [
        r for r in live_reservations(tx, device=device, now=now, check_owners=False) if r.id != rid
    ]
    reserved = sum(r.outstanding for r in others)
    written = info.bytes - info.outstanding
    decision = Admission(
        tree.name, mount, device, new_bytes - written, free, floor, reserved, 0, vol.free_low
    )
    if new_bytes > info.bytes and not decision.fits:
        tx.log.add(
            "refuse",
            tree=tree.name,
            device=device,
            reservation=rid,
            nbytes=new_bytes,
            path=info.path,
            ts=now,
            free=free,
            floor=floor,
            reserved=reserved,
            grow=True,
        )
        return decision, None
    tx.reservations.set_bytes(rid, new_bytes)
    tx.log.add(
        "grow",
        tree=tree.name,
        device=device,
        reservation=rid,
        nbytes=new_bytes,
        path=info.path,
        ts=now,
        previous=info.bytes,
    )
    return decision, replace(info, bytes=new_bytes, outstanding=new_bytes - written)


def cover_reservation(tx: Tx, rid: str, pid: int, start: float | None) -> ReservationInfo:
    """Keep a live reservation live while process ``pid`` runs too (its supervised command)."""
    info = get_reservation(tx, rid)
    _require_live(info, "cover a command with")
    tx.reservations.set_command(rid, pid, start)
    return replace(info, command_pid=pid, command_start=start)


@dataclass(frozen=True, slots=True)
class RiskDecision:
    """One at-risk decision on a volume: the numbers, and which reservations must stop.

    ``deficit`` is what the volume lacks, below its floor, to hold what running jobs still
    write plus half the floor (janitor.admission.risk.stop_deficit); ``at_risk`` are the fewest
    reservations whose stopping covers it (janitor.admission.risk.choose_at_risk).
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
    device, mount, free, floor, _ = _measure_fast(policy, tree)
    if free >= floor:
        cleared = tx.reservations.marked_on(device)
        if cleared:
            tx.reservations.clear_marks_on(device)
            for rid in cleared:
                tx.log.add("risk-cleared", device=device, reservation=rid, ts=now)
        return RiskDecision(device, mount, free, floor, 0, 0, (), (), cleared)
    _reap_and_sum(tx, now, None)  # end what dead owners left, so it is neither counted nor told
    claims = []
    jobs: dict[str, str | None] = {}
    for rid, nbytes, path, created, flag, job in tx.reservations.claims(device):
        written = 0 if path is None else allocated_size(py_path(path))
        left = max(0, nbytes - written)
        claims.append(Claim(rid, left, created, flag is not None, written))
        jobs[rid] = job
    device, mount, free, floor, _ = _measure_fast(policy, tree)  # read after the sum, as admit()
    reserved = sum(c.outstanding for c in claims)
    deficit = stop_deficit(free, floor, reserved)
    chosen = choose_at_risk(deficit, claims)
    decision = RiskDecision(device, mount, free, floor, reserved, deficit, chosen, jobs=jobs)
    flagged = {c.id for c in claims if c.at_risk}
    marked = tuple(rid for rid in chosen if rid not in flagged)
    cleared = tuple(sorted(flagged - set(chosen)))
    if marked:
        reason = risk_reason(decision)
        for rid in marked:
            tx.reservations.mark(rid, reason)
            tx.log.add(
                "at-risk",
                device=device,
                reservation=rid,
                ts=now,
                free=free,
                floor=floor,
                reserved=reserved,
                deficit=deficit,
            )
    for rid in cleared:
        tx.reservations.mark(rid, None)
        tx.log.add("risk-cleared", device=device, reservation=rid, ts=now)
    return replace(decision, marked=marked, cleared=cleared)


def tree_on(policy: Policy, device: int) -> TreePolicy | None:
    """A tree of the policy on volume ``device`` (to measure it by), or None."""
    for tree in policy.trees.values():
        known = _VOLUMES.get(tree.path)
        if known is not None and known[0] is policy:
            if known[2].device == device:
                return tree
            continue
        try:
            if _measure_fast(policy, tree)[0] == device:
                return tree
        except OSError:
            continue
    return None


def renew_reservation(tx: Tx, rid: str, ttl: float, *, now: float | None = None) -> ReservationInfo:
    """Push a live reservation's expiry to now + ttl."""
    now = time.time() if now is None else now
    reap(tx, now)
    info = get_reservation(tx, rid)
    _require_live(info, "renew")
    if info.job_id is not None:
        raise ConfigError(
            f"reservation {rid} is the working set of job {info.job_id}: it has no TTL and "
            "ends with its job (its folder removed, or its writer gone); nothing to renew"
        )
    tx.reservations.set_expires(rid, now + ttl)
    tx.log.add("renew", tree=info.tree, device=info.device, reservation=rid, ts=now, ttl=ttl)
    return replace(info, expires=now + ttl)
