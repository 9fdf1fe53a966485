"""Admission control: grant bytes on a volume only while the floor stays free.

A reservation is granted inside one ledger write transaction when::

    free - floor - outstanding(other live reservations on the volume) >= requested

where a reservation's outstanding part is its bytes minus what its path already holds (never
below zero; no path counts in full). Reservations whose owner died or whose TTL passed are
ended first, at every admission, so no daemon is needed for them to stop counting. The volume's
numbers come from ``janitor.admission.volume`` (``read_volume``), whether an owner still runs
from ``janitor.host.owner`` (``still_alive``); every log line admission writes goes through
:func:`log_row`.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from janitor.admission.volume import Level, known_device, level_of, read_volume
from janitor.errors import ConfigError, ReservationRefused, UnknownReservation
from janitor.host.lineage import keepers
from janitor.host.owner import still_alive
from janitor.ledger.paths import py_path
from janitor.ledger.reservations import ReservationInfo, new_id, outstanding

if TYPE_CHECKING:
    from janitor.config.policy import Policy, TreePolicy
    from janitor.ledger.tx import Tx

__all__ = [
    "Admission",
    "admit",
    "cover_reservation",
    "end_logged",
    "end_reservation",
    "get_reservation",
    "grow_reservation",
    "live_reservations",
    "log_refuse",
    "log_row",
    "owners_alive",
    "read_volume",  # where it used to live: janitor.guarding imports it from here
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
    macOS does not matter, but a symlink pointing out of the tree is refused
    (:func:`janitor.config.policy.tree_holding`).
    """
    from janitor.config.policy import tree_holding  # loaded already: ``tree`` is one of its

    if "\0" in os.fsdecode(path):
        raise ConfigError(f"path {os.fsdecode(path)!r} contains a NUL byte")
    inside = tree_holding((tree,), path)
    if inside is not None:
        return inside.path
    absolute = os.path.normpath(os.path.abspath(os.fspath(path)))
    if os.path.realpath(absolute) == os.path.realpath(tree.path):
        raise ConfigError(
            f"path {absolute} is the root of tree {tree.name!r}; name the file or job folder"
        )
    raise ConfigError(
        f"path {absolute} is outside tree {tree.name!r} ({tree.path}); "
        "reserve on the tree that holds it"
    )


def reap(tx: Tx, now: float) -> list[ReservationInfo]:
    """End live reservations whose TTL passed or whose owner died; returns the ones ended."""
    return _reap_and_sum(tx, now, None)[0]


def _reap_and_sum(tx: Tx, now: float, device: int | None) -> tuple[list[ReservationInfo], int]:
    """One pass over the live reservations, inside the caller's write transaction.

    Ends those whose TTL passed or whose owner died and sums the outstanding bytes of the rest
    on ``device``. Admission runs this under the writer lock, so it reads only the columns it
    needs, builds a value only for the rare row it ends, and asks about each owner once, the
    cheap way (``still_alive``).
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
            # A job's working set lives while its folder is there and any of its processes runs
            # (a writer, or what one forked that lives on: janitor.host.lineage).
            if not os.path.lexists(py_path(path)):
                ending.append((rid, "released"))  # its job folder is gone: the job is done
                continue
            if not keepers(tx.jobs.writers(job_id)):
                ending.append((rid, "dead"))
            elif dev == device:
                reserved += outstanding(nbytes, py_path(path))
            continue
        owner = (pid, start)
        ok = alive.get(owner)
        if ok is None:
            ok = alive[owner] = still_alive(pid, start)
        if not ok and cpid is not None:
            command = (cpid, cstart)
            ok = alive.get(command)
            if ok is None:
                ok = alive[command] = still_alive(cpid, cstart)
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
    log_row(tx, "release" if state == "released" else state, now, info, **detail)
    return replace(info, state=state, ended=now)


def log_row(
    tx: Tx,
    event: str,
    now: float,
    info: ReservationInfo | None = None,
    decision: Admission | None = None,
    **detail: Any,
) -> None:
    """Append one line to the ledger's log, stamped ``now``: the tree, volume, id, bytes and
    path of reservation ``info``; the tree, volume and numbers (free, floor, reserved) of
    ``decision``, and its bytes requested when there is no ``info``; then ``detail``, which
    wins over both."""
    row: dict[str, Any] = {}
    if info is not None:
        row.update(
            tree=info.tree,
            device=info.device,
            reservation=info.id,
            nbytes=info.bytes,
            path=info.path,
        )
    if decision is not None:
        row.update(
            tree=decision.tree,
            device=decision.device,
            free=decision.free,
            floor=decision.floor,
            reserved=decision.reserved,
        )
        if info is None:
            row["nbytes"] = decision.requested
    row.update(detail)
    tx.log.add(event, ts=now, **row)


def owners_alive(info: ReservationInfo) -> bool:
    """True while the reservation's owner, or the command run under it, still runs."""
    if still_alive(info.owner_pid, info.owner_start):
        return True
    return info.command_pid is not None and still_alive(info.command_pid, info.command_start)


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
            if check_owners and not keepers(tx.jobs.writers(info.job_id)):
                continue  # every process of its job is gone
        elif check_owners and not owners_alive(info):
            continue
        out.append(info.measured())
    return out


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
    device = known_device(policy, tree)
    if device is None:
        device = read_volume(policy, tree).device  # first admission on this tree here
    while True:
        _, reserved = _reap_and_sum(tx, now, device)
        # Free space is read after the reserved bytes are summed: a job writing meanwhile
        # only lowers free and raises what its reservation has written, which errs on the
        # safe side (the other order would count what it wrote as free and as still to come).
        vol = read_volume(policy, tree)
        if vol.device == device:
            break
        device = vol.device  # its volume changed meanwhile: sum again for the new one
    decision = Admission(
        tree=tree.name, volume=vol.mount, device=device, requested=nbytes, free=vol.free,
        floor=vol.floor, reserved=reserved, evicted=evicted, free_low=vol.free_low, queued=queued,
    )  # fmt: skip
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
        volume=vol.mount,
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
    log_row(
        tx,
        "grant",
        now,
        info,
        decision,
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
    log_row(tx, "refuse", ts, decision=decision, path=path, job=job, **extra)


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
        log_row(tx, "release", now, released, written=released.bytes - released.outstanding)
        return released
    info = get_reservation(tx, rid)
    if info.state == "live" and info.expires <= now:
        reap(tx, now)
        info = get_reservation(tx, rid)
    _require_live(info, "release")
    tx.reservations.end(rid, "released", now)
    info = replace(info, state="released", ended=now)
    log_row(tx, "release", now, info, written=info.bytes - info.outstanding)
    return info


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
    vol = read_volume(policy, tree)
    others = [
        r
        for r in live_reservations(tx, device=vol.device, now=now, check_owners=False)
        if r.id != rid
    ]
    reserved = sum(r.outstanding for r in others)
    written = info.bytes - info.outstanding
    decision = Admission(
        tree=tree.name, volume=vol.mount, device=vol.device, requested=new_bytes - written,
        free=vol.free, floor=vol.floor, reserved=reserved, free_low=vol.free_low,
    )  # fmt: skip
    if new_bytes > info.bytes and not decision.fits:
        log_row(tx, "refuse", now, info, decision, nbytes=new_bytes, grow=True)
        return decision, None
    tx.reservations.set_bytes(rid, new_bytes)
    log_row(
        tx, "grow", now, info, tree=tree.name, device=vol.device, nbytes=new_bytes,
        previous=info.bytes,
    )  # fmt: skip
    return decision, replace(info, bytes=new_bytes, outstanding=new_bytes - written)


def cover_reservation(tx: Tx, rid: str, pid: int, start: float | None) -> ReservationInfo:
    """Keep a live reservation live while process ``pid`` runs too (its supervised command)."""
    info = get_reservation(tx, rid)
    _require_live(info, "cover a command with")
    tx.reservations.set_command(rid, pid, start)
    return replace(info, command_pid=pid, command_start=start)


def tree_on(policy: Policy, device: int) -> TreePolicy | None:
    """A tree of the policy on volume ``device`` (to measure it by), or None."""
    for tree in policy.trees.values():
        known = known_device(policy, tree)
        if known is not None:
            if known == device:
                return tree
            continue
        try:
            if read_volume(policy, tree).device == device:
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
    log_row(tx, "renew", now, tree=info.tree, device=info.device, reservation=rid, ttl=ttl)
    return replace(info, expires=now + ttl)
