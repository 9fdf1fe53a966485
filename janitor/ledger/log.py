"""The ``log`` table: what was granted, refused, released, expired and deleted, in id order.

Lines are appended with rising ids; readers follow the log by id (the daemon's counters) or seek
a time by binary search on the id (there is no index on ``ts`` for every write to keep).
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

__all__ = ["LOG_SKEW_S", "Log", "LogEntry", "LogRow"]

#: Log lines are appended in commit order but stamped when their event happened (a batch of
#: deletions is written together; a writer stamps before it queues), so times may run a little
#: out of id order. A search by time starts this much earlier and filters on the time itself.
LOG_SKEW_S = 3600.0

#: json.dumps(..., sort_keys=True) without building an encoder for every log line.
_encode = json.JSONEncoder(sort_keys=True).encode

_INSERT = (
    "INSERT INTO log (ts, event, tree, device, reservation, bytes, path, detail) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)

#: A prebuilt line: (ts, event, tree, device, reservation, bytes, path, detail as JSON).
LogRow = tuple[float, str, str | None, int | None, str | None, int | None, str | None, str | None]


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One line of the ledger's log: a grant, refusal, release, expiry, deletion ..."""

    id: int
    ts: float
    event: str
    tree: str | None
    device: int | None
    reservation: str | None
    bytes: int | None
    path: str | None
    detail: dict[str, Any]


def _shown(path: str) -> str:
    """A path as the log shows it: undecodable bytes as backslash escapes."""
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


class Log:
    """The log inside one transaction."""

    __slots__ = ("_conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def add(
        self,
        event: str,
        *,
        tree: str | None = None,
        device: int | None = None,
        reservation: str | None = None,
        nbytes: int | None = None,
        path: str | None = None,
        ts: float | None = None,
        **detail: Any,
    ) -> None:
        """Append one line."""
        self._conn.execute(
            _INSERT,
            (
                time.time() if ts is None else ts,
                event,
                tree,
                device,
                reservation,
                nbytes,
                None if path is None else _shown(path),
                _encode(detail) if detail else None,
            ),
        )

    def add_rows(self, rows: Iterable[LogRow]) -> None:
        """Append prebuilt lines (a batch of deletions), in order."""
        self._conn.executemany(_INSERT, rows)

    def append(self, rows: list[LogRow]) -> range:
        """Append prebuilt lines; their ids (consecutive: the caller holds the write lock)."""
        self._conn.executemany(_INSERT, rows)
        last = self.last_id()
        return range(last - len(rows) + 1, last + 1)

    def remove_intents(self, ids: range) -> None:
        """Take out the ``deleting`` lines of a batch once its outcome is written."""
        if ids:
            self._conn.execute(
                "DELETE FROM log WHERE id BETWEEN ? AND ? AND event = 'deleting'",
                (ids.start, ids.stop - 1),
            )

    def last_id(self) -> int:
        """The id of the newest line (0 for an empty log)."""
        return int(self._conn.execute("SELECT coalesce(max(id), 0) FROM log").fetchone()[0])

    def after(
        self, last_id: int, limit: int = 5000
    ) -> list[tuple[int, str, str | None, int | None, str | None, str | None, str | None]]:
        """Lines past ``last_id``, oldest first: (id, event, tree, bytes, path, detail, rid)."""
        return self._conn.execute(
            "SELECT id, event, tree, bytes, path, detail, reservation FROM log "
            "WHERE id > ? ORDER BY id LIMIT ?",
            (last_id, limit),
        ).fetchall()

    def entries(
        self, *, since: float | None = None, events: tuple[str, ...] = (), limit: int | None = None
    ) -> list[LogEntry]:
        """Lines in order, optionally from ``since`` (epoch seconds) and of some events."""
        sql = "SELECT id, ts, event, tree, device, reservation, bytes, path, detail FROM log"
        where: list[str] = []
        args: list[Any] = []
        if since is not None:
            where.append("id >= ? AND ts >= ?")
            args.extend((self.first_id_at(since - LOG_SKEW_S), since))
        if events:
            where.append(f"event IN ({','.join('?' * len(events))})")
            args.extend(events)
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY id"
        if limit is not None:
            sql = f"SELECT * FROM ({sql} DESC LIMIT {int(limit)}) ORDER BY id"
        rows = self._conn.execute(sql, args).fetchall()
        return [
            LogEntry(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], json.loads(r[8] or "{}"))
            for r in rows
        ]

    def first_id_at(self, ts: float) -> int:
        """The id of the first line written at ``ts`` or later (one past the last if none).

        Lines are appended with rising ids and, give or take ``LOG_SKEW_S``, rising times, so
        a binary search on the id finds where a time starts without an index on ``ts`` that
        every write would have to keep. Callers search from a little earlier and filter on
        ``ts``; only a clock stepped back further than that can hide lines.
        """
        conn = self._conn
        bounds = "SELECT coalesce(min(id), 1), coalesce(max(id), 0) FROM log"
        lo, hi = conn.execute(bounds).fetchone()
        hi += 1
        seek = "SELECT id, ts FROM log WHERE id >= ? ORDER BY id LIMIT 1"
        while lo < hi:
            mid = (lo + hi) // 2
            row = conn.execute(seek, (mid,)).fetchone()
            if row is None or row[1] >= ts:
                hi = mid
            else:
                lo = row[0] + 1
        return int(lo)

    def prune(self, cutoff: float, batch: int) -> int:
        """Drop up to ``batch`` of the oldest lines before ``cutoff``; the newest always stays,
        so ids keep rising. Returns how many went."""
        first = self._conn.execute("SELECT coalesce(min(id), 0) FROM log").fetchone()[0]
        bound = min(self.first_id_at(cutoff - LOG_SKEW_S), first + batch)
        cur = self._conn.execute(
            "DELETE FROM log WHERE id < ? AND id < (SELECT max(id) FROM log)", (bound,)
        )
        return cur.rowcount
