"""The ``samples`` table: the daemon's free-space readings, one row per volume per sample."""

from __future__ import annotations

import sqlite3

__all__ = ["Samples"]


class Samples:
    """Free-space samples inside one transaction (written by the daemon, read for forecasts)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def add(self, device: int, ts: float, free: int, total: int) -> None:
        """Record one reading of a volume."""
        self._conn.execute(
            "INSERT INTO samples (device, ts, free, total) VALUES (?, ?, ?, ?)",
            (device, ts, free, total),
        )

    def series(self, device: int, since: float) -> list[tuple[float, int]]:
        """``(ts, free)`` of one volume from ``since`` on, oldest first."""
        rows = self._conn.execute(
            "SELECT ts, free FROM samples WHERE device = ? AND ts >= ? ORDER BY ts",
            (device, since),
        ).fetchall()
        return [(float(t), int(f)) for t, f in rows]

    def since(self, cutoff: float) -> dict[int, list[tuple[float, int]]]:
        """``(ts, free)`` of every volume from ``cutoff`` on, oldest first, by device."""
        out: dict[int, list[tuple[float, int]]] = {}
        for device, ts, free in self._conn.execute(
            "SELECT device, ts, free FROM samples WHERE ts >= ? ORDER BY ts", (cutoff,)
        ):
            out.setdefault(int(device), []).append((float(ts), int(free)))
        return out

    def prune(self, before: float, batch: int) -> int:
        """Drop up to ``batch`` samples older than ``before``; returns how many went."""
        cur = self._conn.execute(
            "DELETE FROM samples WHERE rowid IN (SELECT rowid FROM samples WHERE ts < ? LIMIT ?)",
            (before, batch),
        )
        return cur.rowcount
