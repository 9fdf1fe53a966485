"""The ``reservations`` table: every grant, live or ended, and the value it is read back as.

Admission (janitor.admission.reserve) decides; this module holds the statements it decides
with, each behind a method named for what it does.
"""

from __future__ import annotations

import math
import secrets
import sqlite3
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from typing import Any

from janitor.host.space import allocated_size
from janitor.ledger.paths import db_path, py_path
from janitor.ledger.pins import prune_ended

__all__ = ["COLUMNS", "LiveRow", "ReservationInfo", "Reservations", "new_id", "outstanding"]

COLUMNS = (
    "id, tree, device, volume, bytes, path, job, owner_pid, owner_start, created, expires, "
    "state, ended, at_risk, command_pid, command_start, job_id"
)


def outstanding(nbytes: int, path: str | None) -> int:
    """The part of a reservation not yet written: bytes minus its path's allocated size."""
    if path is None:
        return nbytes
    return max(0, nbytes - allocated_size(path))


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
    #: The command a supervisor runs under the reservation (``janitor exec``, the guarded
    #: ffmpeg): the reservation stays live while either process runs.
    command_pid: int | None = None
    command_start: float | None = None
    #: The job whose working set this reserves (janitor.admission.jobs): it has no TTL and
    #: ends with the job, when its folder is removed or its writer dies.
    job_id: str | None = None

    @classmethod
    def from_row(cls, row: tuple[Any, ...], *, measure: bool = True) -> ReservationInfo:
        """A value from a ``SELECT {COLUMNS}`` row, with its outstanding bytes measured."""
        # Built once, with the path decoded and the bytes measured first: a release builds
        # one under the writer lock, and dataclasses.replace() costs as much as the build.
        path = row[5]
        if isinstance(path, bytes):
            path = py_path(path)
        left = outstanding(row[4], path) if measure else 0
        rid, tree, device, volume, nbytes, _, job, pid, start, created, expires, state = row[:12]
        return cls(
            rid,
            tree,
            device,
            volume,
            nbytes,
            path,
            job,
            pid,
            start,
            created,
            expires,
            state,
            row[12],
            row[13],
            left,
            row[14],
            row[15],
            row[16],
        )

    def measured(self) -> ReservationInfo:
        """This reservation with its outstanding bytes measured now.

        Built field by field, as :meth:`from_row` builds one: it is called for every live
        reservation a status or an admission reads (5,000 of them took ``janitor status`` 40 ms
        through ``dataclasses.replace``, which looks the fields up and passes them by name).
        """
        return ReservationInfo(
            self.id,
            self.tree,
            self.device,
            self.volume,
            self.bytes,
            self.path,
            self.job,
            self.owner_pid,
            self.owner_start,
            self.created,
            self.expires,
            self.state,
            self.ended,
            self.at_risk,
            outstanding(self.bytes, self.path),
            self.command_pid,
            self.command_start,
            self.job_id,
        )

    def as_dict(self) -> dict[str, Any]:
        """The JSON shape of a reservation (README: "JSON shapes")."""
        data = asdict(self)
        data.pop("owner_start")
        data.pop("command_start")
        if math.isinf(self.expires):
            data["expires"] = None  # a job's working set: it ends with the job, not by a TTL
        return data


def new_id(now: float) -> str:
    """A reservation id such as ``r-19adf3c2b41e7a5c``: the creation time in milliseconds (11
    hex digits), then 20 random bits.

    Ids that rise with time keep the ledger's writes on its last pages (see janitor.ledger.db).
    """
    return f"r-{int(now * 1000) & 0xFFFFFFFFFFF:011x}{secrets.randbits(20):05x}"


#: What admission reads of each live reservation (the rest only for the rare row it ends):
#: (id, device, bytes, path, owner_pid, owner_start, expires, command_pid, command_start,
#: job_id).
LiveRow = tuple[str, int, int, Any, int, Any, float, Any, Any, Any]
_LIVE = (
    "SELECT id, device, bytes, path, owner_pid, owner_start, expires, command_pid, "
    "command_start, job_id FROM reservations WHERE state = 'live'"
)
#: SQLITE_CONSTRAINT_PRIMARYKEY, the extended code of a duplicate id.
_PRIMARY_KEY_TAKEN = 1555
_INSERT = f"INSERT INTO reservations ({COLUMNS}) VALUES ({','.join('?' * 17)})"
#: SQLite 3.35 added RETURNING: a release is then one statement under the writer lock.
RETURNING = sqlite3.sqlite_version_info >= (3, 35, 0)
_END_LIVE = (
    "UPDATE reservations SET state = 'released', ended = ? "
    f"WHERE id = ? AND state = 'live' AND expires > ? RETURNING {COLUMNS}"
)
_AT_RISK = "device = ? AND state = 'live' AND at_risk IS NOT NULL"


class Reservations:
    """The reservations table inside one transaction."""

    __slots__ = ("_conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def live_rows(self) -> Iterator[LiveRow]:
        """The few columns admission needs of every live reservation (a cursor: iterate once)."""
        return self._conn.execute(_LIVE)

    def get(self, rid: str, *, measure: bool = True) -> ReservationInfo | None:
        """The reservation ``rid`` in any state, or None if the ledger never had it."""
        row = self._conn.execute(
            f"SELECT {COLUMNS} FROM reservations WHERE id = ?", (rid,)
        ).fetchone()
        return None if row is None else ReservationInfo.from_row(row, measure=measure)

    def live(self, device: int | None = None) -> list[ReservationInfo]:
        """Live rows (optionally on one volume), oldest first, outstanding bytes not measured."""
        sql = f"SELECT {COLUMNS} FROM reservations WHERE state = 'live'"
        args: tuple[Any, ...] = ()
        if device is not None:
            sql += " AND device = ?"
            args = (device,)
        rows = self._conn.execute(sql + " ORDER BY created", args).fetchall()
        return [ReservationInfo.from_row(row, measure=False) for row in rows]

    def insert(self, info: ReservationInfo) -> ReservationInfo:
        """Add a new live reservation; returns it, with a fresh id if its id was taken."""
        row = [
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
            None,
            None,
            info.job_id,
        ]
        for attempt in range(8):
            try:
                self._conn.execute(_INSERT, row)
                break
            except sqlite3.IntegrityError as exc:
                # Two grants in one millisecond drew the same 20 random bits: draw again.
                if attempt == 7 or getattr(exc, "sqlite_errorcode", 0) != _PRIMARY_KEY_TAKEN:
                    raise
                info = replace(info, id=new_id(info.created))
                row[0] = info.id
        return info

    def release_live(self, rid: str, now: float) -> ReservationInfo | None:
        """Release ``rid`` in one statement if it is live and within its TTL (SQLite 3.35+);
        None otherwise, or where RETURNING is missing."""
        if not RETURNING:
            return None
        rows = self._conn.execute(_END_LIVE, (now, rid, now)).fetchall()
        return ReservationInfo.from_row(rows[0]) if rows else None

    def end(self, rid: str, state: str, now: float) -> None:
        """Set the end state (released, expired, dead) of ``rid``."""
        self._conn.execute(
            "UPDATE reservations SET state = ?, ended = ? WHERE id = ?", (state, now, rid)
        )

    def set_bytes(self, rid: str, nbytes: int) -> None:
        """Change what ``rid`` reserves (a grow or a shrink)."""
        self._conn.execute("UPDATE reservations SET bytes = ? WHERE id = ?", (nbytes, rid))

    def set_expires(self, rid: str, expires: float) -> None:
        """Move the TTL of ``rid`` (a renew)."""
        self._conn.execute("UPDATE reservations SET expires = ? WHERE id = ?", (expires, rid))

    def set_command(self, rid: str, pid: int, start: float | None) -> None:
        """Record the command a supervisor runs under ``rid``."""
        self._conn.execute(
            "UPDATE reservations SET command_pid = ?, command_start = ? WHERE id = ?",
            (pid, start, rid),
        )

    def pool(self, job_id: str, path: str) -> ReservationInfo | None:
        """The live working-set reservation of job ``job_id`` for its cuts into ``path``."""
        row = self._conn.execute(
            f"SELECT {COLUMNS} FROM reservations WHERE state = 'live' AND job_id = ? AND path = ?",
            (job_id, db_path(path)),
        ).fetchone()
        return None if row is None else ReservationInfo.from_row(row)

    def of_job(self, job_id: str) -> list[ReservationInfo]:
        """The live working-set reservations of job ``job_id`` (outstanding not measured)."""
        rows = self._conn.execute(
            f"SELECT {COLUMNS} FROM reservations WHERE state = 'live' AND job_id = ?", (job_id,)
        ).fetchall()
        return [ReservationInfo.from_row(r, measure=False) for r in rows]

    def claims(self, device: int) -> list[tuple[str, int, Any, float, str | None, str | None]]:
        """(id, bytes, path, created, at_risk, job) of each live reservation on ``device``."""
        return self._conn.execute(
            "SELECT id, bytes, path, created, at_risk, job FROM reservations "
            "WHERE state = 'live' AND device = ?",
            (device,),
        ).fetchall()

    def at_risk(self, rid: str) -> str | None:
        """The at-risk mark of ``rid`` (None: not marked, or unknown)."""
        row = self._conn.execute("SELECT at_risk FROM reservations WHERE id = ?", (rid,)).fetchone()
        return None if row is None else row[0]

    def marked_on(self, device: int) -> tuple[str, ...]:
        """Ids of the live reservations on ``device`` that carry an at-risk mark."""
        rows = self._conn.execute(
            f"SELECT id FROM reservations WHERE {_AT_RISK}", (device,)
        ).fetchall()
        return tuple(r[0] for r in rows)

    def clear_marks_on(self, device: int) -> None:
        """Clear every at-risk mark on ``device``."""
        self._conn.execute(f"UPDATE reservations SET at_risk = NULL WHERE {_AT_RISK}", (device,))

    def mark(self, rid: str, reason: str | None) -> None:
        """Set (or with None, clear) the at-risk mark of ``rid``."""
        self._conn.execute("UPDATE reservations SET at_risk = ? WHERE id = ?", (reason, rid))

    def prune(self, cutoff: float, batch: int) -> int:
        """Drop up to ``batch`` reservations that ended before ``cutoff``; returns how many."""
        return prune_ended(self._conn, "reservations", cutoff, batch)
