"""Pins and touches: what a running process says about the cache entries it uses.

A pin keeps an entry (file or folder) from being evicted while its owner process lives, the way
a reservation keeps bytes. A touch records a hit, so an entry read through a path that does not
update atime (``noatime`` mounts, reads from memory) still counts as recently used.
"""

from __future__ import annotations

import math
import os
import secrets
import sqlite3
import time
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

from janitor.errors import UnknownPin
from janitor.host.owner import is_alive
from janitor.ledger.db import Ledger, db_path, py_path

if TYPE_CHECKING:
    from types import TracebackType

    from janitor.core import Janitor

__all__ = [
    "Pin",
    "PinInfo",
    "add_pin",
    "end_pin",
    "live_pins",
    "reap_pins",
    "record_touches",
    "touches_under",
]

_COLUMNS = "id, tree, path, owner_pid, owner_start, created, expires, state, ended"


@dataclass(frozen=True, slots=True)
class PinInfo:
    """One pin as the ledger holds it. ``expires`` is ``inf`` for a pin without a TTL."""

    id: str
    tree: str
    path: str
    owner_pid: int
    owner_start: float | None
    created: float
    expires: float
    state: str
    ended: float | None = None

    def as_dict(self) -> dict[str, Any]:
        """The JSON shape of a pin (README: "JSON shapes")."""
        data = asdict(self)
        data.pop("owner_start")
        data["expires"] = None if math.isinf(self.expires) else self.expires
        return data


def _from_row(row: tuple[Any, ...]) -> PinInfo:
    info = PinInfo(*row)
    return replace(info, path=py_path(info.path)) if isinstance(info.path, bytes) else info


def add_pin(
    conn: sqlite3.Connection,
    tree: str,
    path: str,
    *,
    owner_pid: int,
    owner_start: float | None,
    ttl: float | None,
    now: float | None = None,
) -> PinInfo:
    """Record a pin on ``path`` owned by ``owner_pid``."""
    now = time.time() if now is None else now
    info = PinInfo(
        id="p-" + secrets.token_hex(8),
        tree=tree,
        path=path,
        owner_pid=owner_pid,
        owner_start=owner_start,
        created=now,
        expires=math.inf if ttl is None else now + ttl,
        state="live",
    )
    conn.execute(
        f"INSERT INTO pins ({_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?)",
        (info.id, tree, db_path(path), owner_pid, owner_start, now, info.expires, "live", None),
    )
    Ledger.log(conn, "pin", tree=tree, path=path, ts=now, pin=info.id, owner_pid=owner_pid)
    return info


def end_pin(conn: sqlite3.Connection, key: str, *, now: float | None = None) -> list[PinInfo]:
    """End the live pin with id ``key``, or every live pin on path ``key``."""
    now = time.time() if now is None else now
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM pins WHERE state = 'live' AND (id = ? OR path = ?)",
        (key, db_path(key)),
    ).fetchall()
    if not rows:
        raise UnknownPin(f"no live pin {key!r}; `janitor status --json` lists the pins")
    out = []
    for row in rows:
        info = _from_row(row)
        conn.execute("UPDATE pins SET state = 'released', ended = ? WHERE id = ?", (now, info.id))
        Ledger.log(conn, "unpin", tree=info.tree, path=info.path, ts=now, pin=info.id)
        out.append(replace(info, state="released", ended=now))
    return out


def reap_pins(conn: sqlite3.Connection, now: float) -> int:
    """End pins whose owner died or whose TTL passed; returns how many."""
    n = 0
    for row in conn.execute(f"SELECT {_COLUMNS} FROM pins WHERE state = 'live'").fetchall():
        info = _from_row(row)
        if info.expires <= now:
            state = "expired"
        elif not is_alive(info.owner_pid, info.owner_start):
            state = "dead"
        else:
            continue
        conn.execute("UPDATE pins SET state = ?, ended = ? WHERE id = ?", (state, now, info.id))
        Ledger.log(conn, f"pin-{state}", tree=info.tree, path=info.path, ts=now, pin=info.id)
        n += 1
    return n


def live_pins(conn: sqlite3.Connection, *, now: float | None = None) -> list[PinInfo]:
    """Pins that protect now: live in the ledger, TTL not passed, owner alive (no writes)."""
    now = time.time() if now is None else now
    out = []
    for row in conn.execute(f"SELECT {_COLUMNS} FROM pins WHERE state = 'live'").fetchall():
        info = _from_row(row)
        if info.expires > now and is_alive(info.owner_pid, info.owner_start):
            out.append(info)
    return out


def record_touches(conn: sqlite3.Connection, paths: list[str], *, now: float | None = None) -> None:
    """Record a hit on each path (the latest wins)."""
    now = time.time() if now is None else now
    conn.executemany(
        "INSERT INTO touches (path, ts) VALUES (?, ?) "
        "ON CONFLICT(path) DO UPDATE SET ts = max(ts, excluded.ts)",
        [(db_path(p), now) for p in paths],
    )


def touches_under(conn: sqlite3.Connection, root: str) -> dict[str, float]:
    """Recorded touches of paths inside ``root``."""
    lo = root.rstrip("/") + "/"
    hi = root.rstrip("/") + "0"  # '0' sorts right after '/'
    # Names that are not UTF-8 are stored as blobs; their bounds are the same bytes.
    rows = conn.execute(
        "SELECT path, ts FROM touches WHERE (path >= ? AND path < ?) OR (path >= ? AND path < ?)",
        (lo, hi, os.fsencode(lo), os.fsencode(hi)),
    )
    return {py_path(path): ts for path, ts in rows.fetchall()}


class Pin:
    """A live pin held by this process; a context manager that unpins on exit.

    >>> with jan.pin(cache / f"{fp}.wav"):     # doctest: +SKIP
    ...     samples = read_wav(cache / f"{fp}.wav")
    """

    def __init__(self, janitor: Janitor, info: PinInfo) -> None:
        self._janitor = janitor
        self.info = info
        self._ended = False

    @property
    def id(self) -> str:
        """The pin's id, e.g. ``p-0c1d2e3f40516273``."""
        return self.info.id

    def unpin(self) -> None:
        """End the pin; harmless if it already ended."""
        if self._ended:
            return
        self._ended = True
        try:
            self._janitor.unpin(self.id)
        except UnknownPin:
            pass

    def __enter__(self) -> Pin:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.unpin()
