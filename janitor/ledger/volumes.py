"""The ``volumes`` table: each volume's published level and forecast, one row per device.

The daemon writes it after every sample; readers (``janitor status``, a worker deciding whether
a daemon watches its volume) trust a row only while ``updated`` is fresh.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

__all__ = ["ForecastRow", "LevelRow", "Volumes"]

#: (device, mount, level, reason, fill_rate, eta_floor, eta_full, confidence, updated)
LevelRow = tuple[int, str, str, str, float | None, float | None, float | None, float | None, float]
#: (fill_rate, eta_floor, eta_full, confidence, updated)
ForecastRow = tuple[float | None, float | None, float | None, float | None, float]

_UPSERT = (
    "INSERT INTO volumes (device, mount, level, reason, fill_rate, eta_floor, "
    "eta_full, confidence, updated) VALUES (?,?,?,?,?,?,?,?,?) "
    "ON CONFLICT(device) DO UPDATE SET mount=excluded.mount, "
    "level=excluded.level, reason=excluded.reason, "
    "fill_rate=excluded.fill_rate, eta_floor=excluded.eta_floor, "
    "eta_full=excluded.eta_full, confidence=excluded.confidence, "
    "updated=excluded.updated"
)


class Volumes:
    """Published levels and forecasts inside one transaction."""

    __slots__ = ("_conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def publish(self, rows: Iterable[LevelRow]) -> None:
        """Replace the published row of each volume given."""
        for row in rows:
            self._conn.execute(_UPSERT, row)

    def forecasts(self) -> dict[int, ForecastRow]:
        """Every volume's last forecast, by device."""
        return {
            row[0]: row[1:]
            for row in self._conn.execute(
                "SELECT device, fill_rate, eta_floor, eta_full, confidence, updated FROM volumes"
            ).fetchall()
        }

    def updated(self, device: int) -> float | None:
        """When the daemon last published volume ``device`` (None: never)."""
        row = self._conn.execute(
            "SELECT updated FROM volumes WHERE device = ?", (device,)
        ).fetchone()
        return None if row is None else float(row[0])
