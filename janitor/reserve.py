"""Admission control: grant bytes on a volume only while the floor stays free.

A reservation is granted inside one ledger write transaction when::

    free - floor - outstanding(other live reservations on the volume) >= requested

where a reservation's outstanding part is its bytes minus what its path already holds (never
below zero; no path counts in full). Reservations whose owner died or whose TTL passed are
ended first, at every admission, so no daemon is needed for them to stop counting.
"""

from __future__ import annotations

import os
import secrets
import sqlite3
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from janitor.errors import ConfigError, ReservationRefused, UnknownReservation
from janitor.ledger import Ledger, db_path, py_path
from janitor.owner import is_alive
from janitor.space import allocated_size, volume_stats

if TYPE_CHECKING:
    from types import TracebackType

    from janitor.core import Janitor
    from janitor.policy import Policy, TreePolicy

__all__ = [
    "Admission",
    "Reservation",
    "ReservationInfo",
    "admit",
    "end_reservation",
    "grow_reservation",
    "live_reservations",
    "reap",
    "renew_reservation",
    "resolve_path",
]

_COLUMNS = (
    "id, tree, device, volume, bytes, path, job, owner_pid, owner_start, created, expires, "
    "state, ended, at_risk"
)


@dataclass(frozen=True, slots=True)
class ReservationInfo:
    """A reservation as the ledger holds it; ``outstanding`` is measured when it is read."""

    id: str
    tree: str
    device: int
    volume: str
    bytes: int
    path: str | None
    job: str | None
    owner_pid: int
    owner_start: float | None
    created: float
    expires: float
    state: str
    ended: float | None = None
    at_risk: str | None = None
    outstanding: int = 0

    @classmethod
    def from_row(cls, row: tuple[Any, ...], *, measure: bool = True) -> ReservationInfo:
        """A value from a ``SELECT {_COLUMNS}`` row, with its outstanding bytes measured."""
        info = cls(*row)
        if isinstance(info.path, bytes):
            info = replace(info, path=py_path(info.path))
        if measure:
            info = replace(info, outstanding=outstanding(info.bytes, info.path))
        return info

    def as_dict(self) -> dict[str, Any]:
        """The JSON shape of a reservation (README: "JSON shapes")."""
        data = asdict(self)
        data.pop("owner_start")
        return data


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

    @property
    def available(self) -> int:
        """What could still be granted: free - floor - reserved by others, never below zero."""
        return max(0, self.free - self.floor - self.reserved)

    @property
    def fits(self) -> bool:
        """True when the request can be granted."""
        return self.requested <= self.free - self.floor - self.reserved

    @property
    def shortfall(self) -> int:
        """Bytes missing for the request to fit."""
        return max(0, self.requested - (self.free - self.floor - self.reserved))

    def refusal(self) -> ReservationRefused:
        """The error to raise when the request does not fit."""
        return ReservationRefused(
            self.tree,
            self.requested,
            self.free,
            self.floor,
            self.reserved,
            self.volume,
            self.evicted,
        )

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
        }


def outstanding(nbytes: int, path: str | None) -> int:
    """The part of a reservation not yet written: bytes minus its path's allocated size."""
    if path is None:
        return nbytes
    return max(0, nbytes - allocated_size(path))


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


def reap(conn: sqlite3.Connection, now: float) -> list[ReservationInfo]:
    """End live reservations whose TTL passed or whose owner died; returns the ones ended."""
    return _reap_and_sum(conn, now, None)[0]


def _reap_and_sum(
    conn: sqlite3.Connection, now: float, device: int | None
) -> tuple[list[ReservationInfo], int]:
    """One pass over the live reservations, inside the caller's write transaction.

    Ends those whose TTL passed or whose owner died and sums the outstanding bytes of the rest
    on ``device``. Admission runs this under the writer lock, so it reads each row once, builds
    a value only for the rare row it ends, and asks the OS about each owner once.
    """
    rows = conn.execute(f"SELECT {_COLUMNS} FROM reservations WHERE state = 'live'").fetchall()
    ended = []
    reserved = 0
    alive: dict[tuple[int, float | None], bool] = {}
    for row in rows:
        # _COLUMNS: id, tree, device, volume, bytes, path, job, owner_pid, owner_start, ..., expires
        owner = (row[7], row[8])
        if row[10] <= now:
            state = "expired"
        else:
            ok = alive.get(owner)
            if ok is None:
                ok = alive[owner] = is_alive(*owner)
            if ok:
                if row[2] == device:
                    path = row[5]
                    reserved += outstanding(row[4], py_path(path) if path is not None else None)
                continue
            state = "dead"
        info = ReservationInfo.from_row(row, measure=False)
        conn.execute(
            "UPDATE reservations SET state = ?, ended = ? WHERE id = ?", (state, now, info.id)
        )
        Ledger.log(
            conn,
            state,
            tree=info.tree,
            device=info.device,
            reservation=info.id,
            nbytes=info.bytes,
            path=info.path,
            ts=now,
            owner_pid=info.owner_pid,
        )
        ended.append(replace(info, state=state, ended=now))
    return ended, reserved


def live_reservations(
    conn: sqlite3.Connection,
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
    sql = f"SELECT {_COLUMNS} FROM reservations WHERE state = 'live'"
    args: tuple[Any, ...] = ()
    if device is not None:
        sql += " AND device = ?"
        args = (device,)
    out = []
    for row in conn.execute(sql + " ORDER BY created", args).fetchall():
        info = ReservationInfo.from_row(row, measure=False)
        if info.expires <= now:
            continue
        if check_owners and not is_alive(info.owner_pid, info.owner_start):
            continue
        out.append(replace(info, outstanding=outstanding(info.bytes, info.path)))
    return out


def measure(policy: Policy, tree: TreePolicy) -> tuple[int, str, int, int]:
    """(device, mount, free, floor) of the tree's volume, from a fresh statvfs."""
    vol = volume_stats(tree.path)
    floor, _, _ = policy.volume_policy(vol.device).numbers(vol.total)
    return vol.device, vol.mount, vol.free, floor


def admit(
    conn: sqlite3.Connection,
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
) -> tuple[Admission, ReservationInfo | None]:
    """Decide, inside the caller's write transaction; insert the reservation if granted.

    With ``grant=False`` it only answers (`janitor check`); a refusal is logged either way.
    """
    now = time.time() if now is None else now
    device, mount, free, floor = measure(policy, tree)
    _, reserved = _reap_and_sum(conn, now, device)
    decision = Admission(tree.name, mount, device, nbytes, free, floor, reserved, evicted)
    if not decision.fits and grant:
        Ledger.log(
            conn,
            "refuse",
            tree=tree.name,
            device=device,
            nbytes=nbytes,
            path=path,
            ts=now,
            free=free,
            floor=floor,
            reserved=reserved,
            job=job,
            check=not grant,
        )
        return decision, None
    if not grant:
        return decision, None
    info = ReservationInfo(
        id="r-" + secrets.token_hex(8),
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
    )
    conn.execute(
        f"INSERT INTO reservations ({_COLUMNS}) VALUES ({','.join('?' * 14)})",
        (
            info.id,
            info.tree,
            info.device,
            info.volume,
            info.bytes,
            None if info.path is None else db_path(info.path),
            info.job,
            info.owner_pid,
            info.owner_start,
            info.created,
            info.expires,
            info.state,
            None,
            None,
        ),
    )
    Ledger.log(
        conn,
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
    )
    return decision, info


def get_reservation(conn: sqlite3.Connection, rid: str) -> ReservationInfo:
    """The reservation ``rid`` in any state; UnknownReservation if the ledger never had it."""
    row = conn.execute(f"SELECT {_COLUMNS} FROM reservations WHERE id = ?", (rid,)).fetchone()
    if row is None:
        raise UnknownReservation(
            f"no reservation {rid!r} in the ledger; `janitor status` lists the live ones"
        )
    return ReservationInfo.from_row(row)


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


def end_reservation(
    conn: sqlite3.Connection, rid: str, *, now: float | None = None
) -> ReservationInfo:
    """Release a live reservation; UnknownReservation if it is unknown or already ended."""
    now = time.time() if now is None else now
    info = get_reservation(conn, rid)
    if info.state == "live" and info.expires <= now:
        reap(conn, now)
        info = get_reservation(conn, rid)
    _require_live(info, "release")
    conn.execute("UPDATE reservations SET state = 'released', ended = ? WHERE id = ?", (now, rid))
    Ledger.log(
        conn,
        "release",
        tree=info.tree,
        device=info.device,
        reservation=rid,
        nbytes=info.bytes,
        path=info.path,
        ts=now,
        written=info.bytes - info.outstanding,
    )
    return replace(info, state="released", ended=now)


def grow_reservation(
    conn: sqlite3.Connection,
    policy: Policy,
    tree: TreePolicy,
    rid: str,
    new_bytes: int,
    *,
    now: float | None = None,
) -> tuple[Admission, ReservationInfo | None]:
    """Raise a live reservation to ``new_bytes`` if the volume still has room for the rest.

    Its own written part is already out of free space, so the test is
    ``free - floor - others >= new_bytes - written``.
    """
    now = time.time() if now is None else now
    reap(conn, now)
    info = get_reservation(conn, rid)
    _require_live(info, "grow")
    device, mount, free, floor = measure(policy, tree)
    others = [
        r
        for r in live_reservations(conn, device=device, now=now, check_owners=False)
        if r.id != rid
    ]
    reserved = sum(r.outstanding for r in others)
    written = info.bytes - info.outstanding
    decision = Admission(tree.name, mount, device, new_bytes - written, free, floor, reserved)
    if not decision.fits:
        Ledger.log(
            conn,
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
    conn.execute("UPDATE reservations SET bytes = ? WHERE id = ?", (new_bytes, rid))
    Ledger.log(
        conn,
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


def renew_reservation(
    conn: sqlite3.Connection, rid: str, ttl: float, *, now: float | None = None
) -> ReservationInfo:
    """Push a live reservation's expiry to now + ttl."""
    now = time.time() if now is None else now
    reap(conn, now)
    info = get_reservation(conn, rid)
    _require_live(info, "renew")
    conn.execute("UPDATE reservations SET expires = ? WHERE id = ?", (now + ttl, rid))
    Ledger.log(conn, "renew", tree=info.tree, device=info.device, reservation=rid, ts=now, ttl=ttl)
    return replace(info, expires=now + ttl)


class Reservation:
    """A granted reservation, held by this process; a context manager that releases on exit.

    >>> with jan.reserve("media_cache", "2G", path=out) as r:   # doctest: +SKIP
    ...     convert(out)
    ...     r.check()          # SpaceRisk once the volume is critical: stop early
    """

    def __init__(self, janitor: Janitor, info: ReservationInfo) -> None:
        self._janitor = janitor
        self.info = info
        self._released = False

    @property
    def id(self) -> str:
        """The reservation's id, e.g. ``r-3f2a9c1b7d0e4a65``."""
        return self.info.id

    @property
    def nbytes(self) -> int:
        """Bytes granted."""
        return self.info.bytes

    @property
    def path(self) -> Path | None:
        """The file or folder the reservation writes to, if one was given."""
        return None if self.info.path is None else Path(self.info.path)

    @property
    def released(self) -> bool:
        """True once release() ran (or the context exited)."""
        return self._released

    def release(self) -> None:
        """End the reservation now. Releasing twice, or after it expired, is harmless."""
        if self._released:
            return
        self._released = True
        try:
            self._janitor.release(self.id)
        except UnknownReservation:
            pass  # expired or reaped already: the bytes no longer count either way

    def renew(self, ttl: float | str | None = None) -> None:
        """Extend the TTL to now + ``ttl`` (the janitor's default TTL if None)."""
        self.info = self._janitor.renew(self.id, ttl)

    def check(self) -> None:
        """Raise SpaceRisk if the volume is critical or the daemon marked this reservation."""
        self._janitor.check_risk(self.info)

    def __enter__(self) -> Reservation:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def __repr__(self) -> str:
        state = "released" if self._released else "live"
        return f"<Reservation {self.id} {self.info.tree} {self.info.bytes} B {state}>"
