"""Pins and touches: what a running process says about the cache entries it uses.

A pin keeps an entry (file or folder) from being evicted while its owner process lives, the way
a reservation keeps bytes. A pin of kind ``await`` marks a cache entry **awaiting use**: the
pipeline probed it or just converted it and will cut from it (the guard's ffprobe and ffmpeg
record it for the caller, with the entry's unit key, so a rename within the unit keeps it). It
ends at the first of: a job of its owner starting to cut from the entry (that job's source pin
covers it from then on), its owner's death, and its TTL (the tree's ``await_ttl``).

A touch records a hit, so an entry read through a path that does not update atime
(``noatime`` mounts, reads from memory) still counts as recently used.
"""

from __future__ import annotations

import math
import os
import secrets
import sqlite3
import time
from dataclasses import asdict, dataclass, replace
from typing import Any

from janitor.errors import UnknownPin
from janitor.host.owner import is_alive, same_owner
from janitor.ledger.log import Log
from janitor.ledger.paths import db_path, py_path

__all__ = ["AWAIT", "PIN", "PinInfo", "Pins", "Touches"]

_COLUMNS = "id, tree, path, owner_pid, owner_start, created, expires, state, ended, kind, unit"

#: The kinds of pin: held by its owner (``pin``), or an entry awaiting use (``await``).
PIN, AWAIT = "pin", "await"


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
    #: ``pin``, or ``await`` (an entry awaiting use) with the ``unit`` key it covers.
    kind: str = PIN
    unit: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The JSON shape of a pin (README: "JSON shapes")."""
        data = asdict(self)
        data.pop("owner_start")
        data["expires"] = None if math.isinf(self.expires) else self.expires
        return data


def _from_row(row: tuple[Any, ...]) -> PinInfo:
    info = PinInfo(*row)
    return replace(info, path=py_path(info.path)) if isinstance(info.path, bytes) else info


class Pins:
    """The ``pins`` table inside one transaction; every change leaves its log line."""

    __slots__ = ("_conn", "_log")

    def __init__(self, conn: sqlite3.Connection, log: Log) -> None:
        self._conn = conn
        self._log = log

    def add(
        self,
        tree: str,
        path: str,
        *,
        owner_pid: int,
        owner_start: float | None,
        ttl: float | None,
        now: float | None = None,
        kind: str = PIN,
        unit: str | None = None,
    ) -> PinInfo:
        """Record a pin on ``path`` owned by ``owner_pid`` (``kind`` ``await``: the entry
        ``unit`` of ``tree`` awaiting use by its owner, logged as ``await``)."""
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
            kind=kind,
            unit=unit,
        )
        self._conn.execute(
            f"INSERT INTO pins ({_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            (info.id, tree, db_path(path), owner_pid, owner_start, now, info.expires, "live", None,
             kind, unit),
        )  # fmt: skip
        extra: dict[str, Any] = {"ttl": ttl} if kind == AWAIT else {}
        self._log.add(
            "await" if kind == AWAIT else "pin", tree=tree, path=path, ts=now, pin=info.id,
            owner_pid=owner_pid, **extra,
        )  # fmt: skip
        return info

    def awaiting_on(self, tree: str, unit: str) -> list[PinInfo]:
        """The live ``await`` pins on entry ``unit`` of ``tree`` (owners not checked)."""
        rows = self._conn.execute(
            f"SELECT {_COLUMNS} FROM pins WHERE state = 'live' AND kind = ? AND tree = ? "
            "AND unit = ?",
            (AWAIT, tree, unit),
        ).fetchall()
        return [_from_row(r) for r in rows]

    def extend(self, pin_id: str, expires: float) -> None:
        """Push a live pin's end to ``expires`` (never earlier than it was)."""
        self._conn.execute(
            "UPDATE pins SET expires = max(expires, ?) WHERE id = ? AND state = 'live'",
            (expires, pin_id),
        )

    def take_over(
        self, tree: str, unit: str, *, owner_pid: int, owner_start: float | None, job: str,
        now: float,
    ) -> int:  # fmt: skip
        """End the live ``await`` pins of ``owner_pid`` on entry ``unit`` of ``tree``: a job of
        that owner now cuts from it, and the job's source pin covers it until the job ends.
        Returns how many ended."""
        rows = self._conn.execute(
            f"SELECT {_COLUMNS} FROM pins WHERE state = 'live' AND kind = ? AND tree = ? "
            "AND unit = ? AND owner_pid = ?",
            (AWAIT, tree, unit, owner_pid),
        ).fetchall()
        n = 0
        for info in map(_from_row, rows):
            if not same_owner(info.owner_start, owner_start):
                continue  # another process that was given the same pid
            self._set_state(info.id, "released", now)
            self._log.add(
                "await-end", tree=info.tree, path=info.path, ts=now, pin=info.id,
                why=f"job {job} cuts from it", job_id=job,
            )  # fmt: skip
            n += 1
        return n

    def end(self, key: str, *, now: float | None = None) -> list[PinInfo]:
        """End the live pin with id ``key``, or every live pin on path ``key``."""
        now = time.time() if now is None else now
        rows = self._conn.execute(
            f"SELECT {_COLUMNS} FROM pins WHERE state = 'live' AND (id = ? OR path = ?)",
            (key, db_path(key)),
        ).fetchall()
        if not rows:
            raise UnknownPin(f"no live pin {key!r}; `janitor status --json` lists the pins")
        out = []
        for row in rows:
            info = _from_row(row)
            self._set_state(info.id, "released", now)
            self._log.add("unpin", tree=info.tree, path=info.path, ts=now, pin=info.id)
            out.append(replace(info, state="released", ended=now))
        return out

    def live_one(self, pin_id: str) -> PinInfo | None:
        """The pin ``pin_id`` while it is live in the ledger (owner not checked)."""
        row = self._conn.execute(
            f"SELECT {_COLUMNS} FROM pins WHERE id = ? AND state = 'live'", (pin_id,)
        ).fetchone()
        return None if row is None else _from_row(row)

    def end_ids(self, ids: list[str], state: str, *, now: float) -> int:
        """End the live pins among ``ids`` with ``state`` (``released``: their job is done;
        ``dead``: its writers died); returns how many."""
        n = 0
        for pin_id in ids:
            info = self.live_one(pin_id)
            if info is None:
                continue
            self._set_state(pin_id, state, now)
            event = "unpin" if state == "released" else f"pin-{state}"
            self._log.add(event, tree=info.tree, path=info.path, ts=now, pin=pin_id)
            n += 1
        return n

    def _set_state(self, pid: str, state: str, now: float) -> None:
        self._conn.execute("UPDATE pins SET state = ?, ended = ? WHERE id = ?", (state, now, pid))

    def reap(self, now: float) -> int:
        """End pins whose owner died or whose TTL passed; returns how many."""
        n = 0
        for info in self._live_rows():
            if info.expires <= now:
                state = "expired"
            elif not is_alive(info.owner_pid, info.owner_start):
                state = "dead"
            else:
                continue
            self._set_state(info.id, state, now)
            if info.kind == AWAIT:
                why = "await_ttl passed" if state == "expired" else "its prober died"
                self._log.add(
                    "await-end", tree=info.tree, path=info.path, ts=now, pin=info.id, why=why
                )
            else:
                self._log.add(f"pin-{state}", tree=info.tree, path=info.path, ts=now, pin=info.id)
            n += 1
        return n

    def _live_rows(self) -> list[PinInfo]:
        rows = self._conn.execute(f"SELECT {_COLUMNS} FROM pins WHERE state = 'live'").fetchall()
        return [_from_row(row) for row in rows]

    def live(self, *, now: float | None = None) -> list[PinInfo]:
        """Pins that protect now: live in the ledger, TTL not passed, owner alive (no writes)."""
        now = time.time() if now is None else now
        return [
            info
            for info in self._live_rows()
            if info.expires > now and is_alive(info.owner_pid, info.owner_start)
        ]

    def awaiting(self, *, now: float | None = None) -> list[PinInfo]:
        """The entries awaiting use now (``await`` pins that protect: see :meth:`live`)."""
        return [p for p in self.live(now=now) if p.kind == AWAIT]

    def live_paths(self) -> set[str]:
        """The paths of live pins, as the ledger holds them (owners not checked)."""
        rows = self._conn.execute("SELECT path FROM pins WHERE state = 'live'").fetchall()
        return {py_path(r[0]) for r in rows}

    def prune(self, cutoff: float, batch: int) -> int:
        """Drop up to ``batch`` pins that ended before ``cutoff``; returns how many went."""
        return prune_ended(self._conn, "pins", cutoff, batch)


def prune_ended(conn: sqlite3.Connection, table: str, cutoff: float, batch: int) -> int:
    cur = conn.execute(
        f"DELETE FROM {table} WHERE id IN (SELECT id FROM {table} "
        "WHERE state != 'live' AND ended < ? LIMIT ?)",
        (cutoff, batch),
    )
    return cur.rowcount


class Touches:
    """The ``touches`` table: the latest recorded hit of each cache path."""

    __slots__ = ("_conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def record(self, paths: list[str], *, now: float | None = None) -> None:
        """Record a hit on each path (the latest wins)."""
        now = time.time() if now is None else now
        self._conn.executemany(
            "INSERT INTO touches (path, ts) VALUES (?, ?) "
            "ON CONFLICT(path) DO UPDATE SET ts = max(ts, excluded.ts)",
            [(db_path(p), now) for p in paths],
        )

    def under(self, root: str) -> dict[str, float]:
        """Recorded touches of paths inside ``root``."""
        lo = root.rstrip("/") + "/"
        hi = root.rstrip("/") + "0"  # '0' sorts right after '/'
        # Names that are not UTF-8 are stored as blobs; their bounds are the same bytes.
        rows = self._conn.execute(
            "SELECT path, ts FROM touches "
            "WHERE (path >= ? AND path < ?) OR (path >= ? AND path < ?)",
            (lo, hi, os.fsencode(lo), os.fsencode(hi)),
        )
        return {py_path(path): ts for path, ts in rows.fetchall()}
