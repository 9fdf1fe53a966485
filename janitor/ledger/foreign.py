"""Other programs' SQLite databases, read only: batchalign3's job store.

Kept beside our own SQL so every query of the package lives in one layer. Opened with
``mode=ro``: these databases are live (WAL mode) and never ours to change. A read sees the last
committed state, rows still only in the ``-wal`` file included; a write transaction another
process holds open blocks nothing (WAL readers never wait for a writer), and its rows are not
seen until it commits.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

__all__ = ["TERMINAL_STATUSES", "UnfinishedJobs", "unfinished_jobs"]

#: batchalign3's job states that never change again (``JobStatus::is_terminal``: completed,
#: failed, cancelled, interrupted). Every other status is a job that may still use its staging
#: folder: ``queued`` and ``running`` today (``is_active``), and any state a newer batchalign3
#: adds, which is taken as unfinished until it is known to be terminal.
TERMINAL_STATUSES = ("completed", "failed", "cancelled", "interrupted")

#: How long a read waits for a lock (a checkpoint, a recovery): then the store is unreadable.
_BUSY_TIMEOUT_S = 1.0


@dataclass(frozen=True, slots=True)
class UnfinishedJobs:
    """What ``jobs.db`` at ``db`` says of the jobs not yet finished: their ids and the staging
    folders it recorded for them (``staging_dir``). ``problem`` says why it could not be read;
    then nothing is known, and every staging folder could be a live job's."""

    db: Path
    ids: frozenset[str] = frozenset()
    staging: frozenset[str] = frozenset()
    problem: str | None = None


def unfinished_jobs(db: Path) -> UnfinishedJobs:
    """Read batchalign3's ``jobs.db`` at ``db`` (read only): every job whose status is not
    terminal (see :data:`TERMINAL_STATUSES`), or why it cannot be read (no file, locked, not
    a database, not batchalign3's schema)."""
    if not db.exists():
        return UnfinishedJobs(db, problem=f"{db} does not exist")
    if not db.is_file():
        return UnfinishedJobs(db, problem=f"{db} is not a file")
    try:
        uri = f"{db.absolute().as_uri()}?mode=ro"
        conn = sqlite3.connect(uri, uri=True, timeout=_BUSY_TIMEOUT_S)
    except sqlite3.Error as exc:
        return UnfinishedJobs(db, problem=f"{db} cannot be opened: {exc}")
    try:
        columns = {str(r[1]) for r in conn.execute("PRAGMA table_info(jobs)")}
        if not {"job_id", "status"} <= columns:
            return UnfinishedJobs(db, problem=f"{db} has no jobs table of batchalign3's")
        staging = "staging_dir" if "staging_dir" in columns else "''"
        marks = ", ".join("?" * len(TERMINAL_STATUSES))
        rows = conn.execute(
            f"SELECT job_id, {staging} FROM jobs WHERE coalesce(status, '') NOT IN ({marks})",
            TERMINAL_STATUSES,
        ).fetchall()
    except sqlite3.Error as exc:
        return UnfinishedJobs(db, problem=f"{db} cannot be read: {exc}")
    finally:
        conn.close()
    return UnfinishedJobs(
        db,
        frozenset(str(r[0]) for r in rows),
        frozenset(str(r[1]) for r in rows if r[1]),
    )
