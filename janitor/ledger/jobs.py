"""The ``jobs`` tables: each job folder the guard saw, its writers and its sources; and the
``waiters`` queue of first writes waiting for room, first come first served.

A job is what batchalign3 does with one recording in one ``.tmpXXXXXX`` folder (a unit of a
scratch tree): the folder, the processes its cuts came through (its writers: the one that ran
ffmpeg, the go-betweens, the writer; each a pid and a start time, so a reused pid is never taken
for one, and its process group, its lineage), and the inputs it cuts from (its sources,
each with the working set reserved for it and the pin that keeps it in the cache). The rows
outlive any process, the daemon's included; janitor.admission.jobs decides with them.
"""

from __future__ import annotations

import secrets
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from janitor.host.owner import same_owner
from janitor.ledger.paths import db_path, py_path

__all__ = ["JOB_STATES", "JobInfo", "Jobs", "SourceInfo", "Waiter", "Waiters", "Writer"]

#: ``live``: a writer runs and the folder is there; ``done``: the folder went while a writer
#: lived (the job ended as it should); ``orphan``: every writer died, the folder is still
#: there; ``removed``: an orphan's folder is gone.
JOB_STATES = ("live", "done", "orphan", "removed")
_ACTIVE = "state IN ('live', 'orphan')"
_JOB_COLUMNS = "id, tree, folder, device, ino, run, created, state, ended, foreign_files"
_WRITER_COLUMNS = "pid, start, pgid, leader_start"


@dataclass(frozen=True, slots=True)
class Writer:
    """A process a job's cuts came through: pid and start time (its identity), and its process
    group with the start of the process that held the group's number when it was recorded
    (what :mod:`janitor.host.lineage` follows once it exits; None: not known)."""

    pid: int
    start: float | None
    pgid: int | None = None
    leader_start: float | None = None


@dataclass(frozen=True, slots=True)
class SourceInfo:
    """An input a job cuts from: where its cuts go (the working-set reservation's folder; None
    for a job that only read it whole), the working set reserved for it, and its pin."""

    source: str
    output_dir: str | None
    working_set: int
    pin: str | None


@dataclass(frozen=True, slots=True)
class JobInfo:
    """One job folder as the ledger holds it."""

    id: str
    tree: str
    folder: str
    device: int
    ino: int
    run: str | None
    created: float
    state: str
    ended: float | None
    #: The folder held files older than the job's first guarded write (another job's, not
    #: seen written): never an orphan at once, only by the tree's ``orphan_age``.
    foreign: bool = False
    writers: tuple[Writer, ...] = ()
    sources: tuple[SourceInfo, ...] = ()

    @property
    def wrote(self) -> bool:
        """True once a write of the job was granted (a source with the folder it went to; a
        source only pinned so far has none)."""
        return any(s.output_dir is not None for s in self.sources)

    def source(self, path: str) -> SourceInfo | None:
        """The record of input ``path``, if the job cuts or reads it."""
        for s in self.sources:
            if s.source == path:
                return s
        return None

    def as_dict(self) -> dict[str, Any]:
        """The JSON shape of a job (``janitor status --json``'s ``jobs``)."""
        return {
            "id": self.id,
            "tree": self.tree,
            "folder": self.folder,
            "run": self.run,
            "created": self.created,
            "state": self.state,
            "ended": self.ended,
            "foreign": self.foreign,
            "writers": [w.pid for w in self.writers],
            "sources": [
                {"path": s.source, "working_set": s.working_set, "output_dir": s.output_dir}
                for s in self.sources
            ],
        }


def new_job_id(now: float) -> str:
    """``j-`` and the creation time in milliseconds, then 20 random bits (ids rise with time)."""
    return f"j-{int(now * 1000) & 0xFFFFFFFFFFF:011x}{secrets.randbits(20):05x}"


class Jobs:
    """The ``jobs``, ``job_writers`` and ``job_sources`` tables inside one transaction."""

    __slots__ = ("_conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def _build(self, rows: Iterable[tuple[Any, ...]]) -> list[JobInfo]:
        jobs = [
            JobInfo(r[0], r[1], py_path(r[2]), r[3], r[4], r[5], r[6], r[7], r[8], bool(r[9]))
            for r in rows
        ]
        if not jobs:
            return []
        ids = [j.id for j in jobs]
        marks = ",".join("?" * len(ids))
        writers: dict[str, list[Writer]] = {}
        for job, *writer in self._conn.execute(
            f"SELECT job, {_WRITER_COLUMNS} FROM job_writers WHERE job IN ({marks}) ORDER BY added",
            ids,
        ):
            writers.setdefault(job, []).append(Writer(*writer))
        sources: dict[str, list[SourceInfo]] = {}
        for job, source, out, ws, pin in self._conn.execute(
            "SELECT job, source, output_dir, working_set, pin FROM job_sources "
            f"WHERE job IN ({marks})",
            ids,
        ):
            sources.setdefault(job, []).append(
                SourceInfo(py_path(source), None if out is None else py_path(out), ws, pin)
            )
        return [
            JobInfo(
                j.id,
                j.tree,
                j.folder,
                j.device,
                j.ino,
                j.run,
                j.created,
                j.state,
                j.ended,
                j.foreign,
                tuple(writers.get(j.id, ())),
                tuple(sources.get(j.id, ())),
            )
            for j in jobs
        ]

    def get(self, job_id: str) -> JobInfo | None:
        """The job ``job_id`` in any state."""
        rows = self._conn.execute(f"SELECT {_JOB_COLUMNS} FROM jobs WHERE id = ?", (job_id,))
        found = self._build(rows.fetchall())
        return found[0] if found else None

    def active_at(self, folder: str) -> JobInfo | None:
        """The live or orphaned job of ``folder``, if the ledger has one."""
        rows = self._conn.execute(
            f"SELECT {_JOB_COLUMNS} FROM jobs WHERE folder = ? AND {_ACTIVE}", (db_path(folder),)
        )
        found = self._build(rows.fetchall())
        return found[0] if found else None

    def active_with(self, identities: Iterable[tuple[int, int]]) -> list[JobInfo]:
        """The live or orphaned jobs whose folder had one of these identities (device, inode)
        when it was recorded."""
        pairs = list(dict.fromkeys(identities))
        if not pairs:
            return []
        marks = ",".join("(?,?)" for _ in pairs)
        rows = self._conn.execute(
            f"SELECT {_JOB_COLUMNS} FROM jobs WHERE {_ACTIVE} AND (device, ino) IN "
            f"(VALUES {marks}) ORDER BY created",
            [n for pair in pairs for n in pair],
        )
        return self._build(rows.fetchall())

    def active(self) -> list[JobInfo]:
        """Every live or orphaned job, oldest first."""
        rows = self._conn.execute(
            f"SELECT {_JOB_COLUMNS} FROM jobs WHERE {_ACTIVE} ORDER BY created"
        )
        return self._build(rows.fetchall())

    def of_run(self, run: str) -> list[JobInfo]:
        """Every job first written by ``janitor run`` ``run``, in any state."""
        rows = self._conn.execute(
            f"SELECT {_JOB_COLUMNS} FROM jobs WHERE run = ? ORDER BY created", (run,)
        )
        return self._build(rows.fetchall())

    def insert(self, job: JobInfo) -> None:
        """Record a new live job (its writers and sources go in with add_writer/set_source)."""
        self._conn.execute(
            f"INSERT INTO jobs ({_JOB_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?)",
            (
                job.id,
                job.tree,
                db_path(job.folder),
                job.device,
                job.ino,
                job.run,
                job.created,
                job.state,
                job.ended,
                int(job.foreign),
            ),
        )

    def add_writer(self, job_id: str, writer: Writer, now: float) -> bool:
        """Record ``writer`` for the job; False when it was recorded already."""
        row = self._conn.execute(
            "SELECT start FROM job_writers WHERE job = ? AND pid = ?", (job_id, writer.pid)
        ).fetchone()
        if row is not None and (
            row[0] == writer.start
            or (None not in (row[0], writer.start) and same_owner(row[0], writer.start))
        ):
            return False  # the same process (read again after a clock step, maybe): as first read
        self._conn.execute(
            f"INSERT INTO job_writers (job, {_WRITER_COLUMNS}, added) VALUES (?,?,?,?,?,?) "
            "ON CONFLICT(job, pid) DO UPDATE SET start = excluded.start, pgid = excluded.pgid, "
            "leader_start = excluded.leader_start, added = excluded.added",
            (job_id, writer.pid, writer.start, writer.pgid, writer.leader_start, now),
        )
        return True

    def set_source(self, job_id: str, source: SourceInfo) -> None:
        """Record (or replace) what the job holds for one of its inputs."""
        self._conn.execute(
            "INSERT INTO job_sources (job, source, output_dir, working_set, pin) "
            "VALUES (?,?,?,?,?) ON CONFLICT(job, source) DO UPDATE SET "
            "output_dir = excluded.output_dir, working_set = excluded.working_set, "
            "pin = excluded.pin",
            (
                job_id,
                db_path(source.source),
                None if source.output_dir is None else db_path(source.output_dir),
                source.working_set,
                source.pin,
            ),
        )

    def set_state(self, job_id: str, state: str, now: float) -> None:
        """Move the job to ``state``; the end time is set when it leaves ``live``."""
        self._conn.execute(
            "UPDATE jobs SET state = ?, ended = coalesce(ended, ?) WHERE id = ?",
            (state, None if state == "live" else now, job_id),
        )

    def writers(self, job_id: str) -> list[Writer]:
        """The writers recorded for ``job_id``."""
        rows = self._conn.execute(
            f"SELECT {_WRITER_COLUMNS} FROM job_writers WHERE job = ? ORDER BY added", (job_id,)
        )
        return [Writer(*row) for row in rows]

    def set_foreign(self, job_id: str) -> None:
        """Mark a job's folder as not ours to remove at once (orphan_age decides)."""
        self._conn.execute("UPDATE jobs SET foreign_files = 1 WHERE id = ?", (job_id,))

    def prune(self, cutoff: float, batch: int) -> int:
        """Drop up to ``batch`` jobs that ended (done, removed) before ``cutoff``, with their
        writers and sources; returns how many went."""
        ids = [
            r[0]
            for r in self._conn.execute(
                "SELECT id FROM jobs WHERE state IN ('done', 'removed') AND ended < ? LIMIT ?",
                (cutoff, batch),
            )
        ]
        if not ids:
            return 0
        marks = ",".join("?" * len(ids))
        for table, key in (("job_writers", "job"), ("job_sources", "job"), ("jobs", "id")):
            self._conn.execute(f"DELETE FROM {table} WHERE {key} IN ({marks})", ids)
        return len(ids)


@dataclass(frozen=True, slots=True)
class Waiter:
    """A first write waiting for room on a volume: its bytes, who waits, since when."""

    id: str
    device: int
    bytes: int
    owner_pid: int
    owner_start: float | None
    since: float
    what: str


class Waiters:
    """The ``waiters`` queue inside one transaction: one row per waiting call, in arrival
    order (its ``since``, then its id)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def add(
        self,
        device: int,
        nbytes: int,
        *,
        owner_pid: int,
        owner_start: float | None,
        since: float,
        what: str,
    ) -> Waiter:
        """Put a call at the end of the volume's queue."""
        waiter = Waiter(
            "w-" + secrets.token_hex(8), device, nbytes, owner_pid, owner_start, since, what
        )
        self._conn.execute(
            "INSERT INTO waiters (id, device, bytes, owner_pid, owner_start, since, what) "
            "VALUES (?,?,?,?,?,?,?)",
            (waiter.id, device, nbytes, owner_pid, owner_start, since, what),
        )
        return waiter

    def get(self, waiter_id: str) -> Waiter | None:
        """The waiter ``waiter_id``, if it still waits."""
        row = self._conn.execute(
            "SELECT id, device, bytes, owner_pid, owner_start, since, what FROM waiters "
            "WHERE id = ?",
            (waiter_id,),
        ).fetchone()
        return None if row is None else Waiter(*row)

    def on(self, device: int) -> list[Waiter]:
        """Every waiter on ``device``, first come first."""
        rows = self._conn.execute(
            "SELECT id, device, bytes, owner_pid, owner_start, since, what FROM waiters "
            "WHERE device = ? ORDER BY since, id",
            (device,),
        ).fetchall()
        return [Waiter(*r) for r in rows]

    def all(self) -> list[Waiter]:
        """Every waiter, first come first."""
        rows = self._conn.execute(
            "SELECT id, device, bytes, owner_pid, owner_start, since, what FROM waiters "
            "ORDER BY since, id"
        ).fetchall()
        return [Waiter(*r) for r in rows]

    def remove_of(self, owner_pid: int) -> None:
        """Take every place of process ``owner_pid`` off the queues (a process waits for one call
        at a time: a place it holds still is one it lost track of, e.g. across a daemon's
        restart)."""
        self._conn.execute("DELETE FROM waiters WHERE owner_pid = ?", (owner_pid,))

    def remove(self, waiter_id: str) -> None:
        """Take a waiter off its queue (admitted, refused, given up, or its owner died)."""
        self._conn.execute("DELETE FROM waiters WHERE id = ?", (waiter_id,))
