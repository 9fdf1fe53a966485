"""Draws: the cuts drawn on a job's working set, one row per guarded cut.

A job's working set is one reservation (:mod:`janitor.admission.jobs`); each cut the guard
admits against it is a *draw*: its output, its bytes, the window of the source it reads (in
microseconds, when known) and the guard that runs it. A draw is ``live`` while its call runs
(its bytes may not be on disk yet, so other cuts racing it must count them) and ``done`` once
the call ended (its output is in the job's folder, which the reservation already measures). The
windows of every draw stay until the job ends, so a second cut of the same window (a group that
batchalign3 cuts again for its Whisper fallback) is known for what it is: growth past the
working set, admitted as such.
"""

from __future__ import annotations

import secrets
import sqlite3
from dataclasses import dataclass
from typing import Any

from janitor.ledger.paths import db_path, py_path

__all__ = ["DrawInfo", "Draws"]

_COLUMNS = (
    "id, reservation, job, source, path, bytes, start_us, end_us, owner_pid, owner_start, "
    "created, state"
)


@dataclass(frozen=True, slots=True)
class DrawInfo:
    """One cut drawn on a working set: the reservation and job it draws on, the source and
    output, the bytes, the source's window ``[start_us, end_us)`` when known, the guard that
    runs it, and whether it is still in flight (``live``) or ``done``."""

    id: str
    reservation: str
    job: str
    source: str
    path: str
    bytes: int
    start_us: int | None
    end_us: int | None
    owner_pid: int
    owner_start: float | None
    created: float
    state: str

    def overlap_us(self, start_us: int | None, end_us: int | None) -> int:
        """How much of ``[start_us, end_us)`` this draw's window covers (0 when either
        window is unknown)."""
        if None in (self.start_us, self.end_us, start_us, end_us):
            return 0
        assert self.start_us is not None and self.end_us is not None
        assert start_us is not None and end_us is not None
        return max(0, min(self.end_us, end_us) - max(self.start_us, start_us))


def _from_row(row: tuple[Any, ...]) -> DrawInfo:
    values = list(row)
    for i in (3, 4):  # source, path: names that are not UTF-8 are stored as blobs
        if isinstance(values[i], bytes):
            values[i] = py_path(values[i])
    return DrawInfo(*values)


class Draws:
    """The ``draws`` table inside one transaction."""

    __slots__ = ("_conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def add(
        self,
        reservation: str,
        job: str,
        *,
        source: str,
        path: str,
        nbytes: int,
        window: tuple[int | None, int | None],
        owner_pid: int,
        owner_start: float | None,
        now: float,
    ) -> DrawInfo:
        """Record a cut in flight on ``reservation`` (job ``job``)."""
        info = DrawInfo(
            "d-" + secrets.token_hex(8), reservation, job, source, path, nbytes, window[0],
            window[1], owner_pid, owner_start, now, "live",
        )  # fmt: skip
        self._conn.execute(
            f"INSERT INTO draws ({_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            (info.id, reservation, job, db_path(source), db_path(path), nbytes, window[0],
             window[1], owner_pid, owner_start, now, "live"),
        )  # fmt: skip
        return info

    def of_job(self, job: str) -> list[DrawInfo]:
        """Every draw of job ``job``, oldest first."""
        rows = self._conn.execute(
            f"SELECT {_COLUMNS} FROM draws WHERE job = ? ORDER BY created, id", (job,)
        ).fetchall()
        return [_from_row(r) for r in rows]

    def overlapping(self, job: str, source: str, start_us: int, end_us: int) -> list[DrawInfo]:
        """Job ``job``'s draws from ``source`` whose window overlaps ``[start_us, end_us)``."""
        rows = self._conn.execute(
            f"SELECT {_COLUMNS} FROM draws WHERE job = ? AND source = ? AND start_us < ? "
            "AND end_us > ?",
            (job, db_path(source), end_us, start_us),
        ).fetchall()
        return [_from_row(r) for r in rows]

    def in_flight(self, reservation: str) -> list[DrawInfo]:
        """The draws on ``reservation`` still marked live (their call may have ended since:
        the caller asks whether their guard still runs)."""
        rows = self._conn.execute(
            f"SELECT {_COLUMNS} FROM draws WHERE reservation = ? AND state = 'live'",
            (reservation,),
        ).fetchall()
        return [_from_row(r) for r in rows]

    def finish(self, ids: list[str]) -> int:
        """Mark the draws ``ids`` done (their call ended); returns how many were live."""
        n = 0
        for draw_id in ids:
            cur = self._conn.execute(
                "UPDATE draws SET state = 'done' WHERE id = ? AND state = 'live'", (draw_id,)
            )
            n += cur.rowcount
        return n

    def finish_one(self, draw_id: str) -> None:
        """Mark one draw done (its guard is gone: what it wrote is in the folder)."""
        self.finish([draw_id])

    def drop_job(self, job: str) -> int:
        """Forget job ``job``'s draws (the job ended); returns how many went."""
        return self._conn.execute("DELETE FROM draws WHERE job = ?", (job,)).rowcount
