"""Other programs' SQLite databases, read only: batchalign3's job store.

Kept beside our own SQL so every query of the package lives in one layer. Opened with
``mode=ro``: these databases are live (WAL mode) and never ours to change.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

__all__ = ["active_jobs"]


def active_jobs(db: Path) -> frozenset[str] | None:
    """The ids of the jobs batchalign3's ``jobs.db`` holds as queued or running (what its
    ``JobStatus::is_active`` calls active), or None when it cannot be read (no file, locked,
    another schema): then only age can judge a staging folder."""
    if not db.is_file():
        return None
    try:
        conn = sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True, timeout=1.0)
    except sqlite3.Error:
        return None
    try:
        rows = conn.execute(
            "SELECT job_id FROM jobs WHERE status IN ('queued', 'running')"
        ).fetchall()
    except sqlite3.Error:
        return None
    finally:
        conn.close()
    return frozenset(str(r[0]) for r in rows)
