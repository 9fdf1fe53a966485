"""The ledger read as it lies on disk, for a command that only reads, when it cannot be opened
the usual way because nothing can be written where it lives: its disk is full, or its folder
or filesystem is read-only.

Opening a WAL database writes even to read it: SQLite creates the ``-wal`` and ``-shm`` files
beside it and sizes the ``-shm`` (32 KiB) before the first read, so on a full disk opening
fails (``SQLITE_IOERR_SHMSIZE``), whether read-write or ``mode=ro``: ``sqlite3 -readonly``
fails there too (``disk I/O error (10)``). Only ``immutable=1`` reads without them: it reads
the database file alone, with no lock and no WAL.

That is exactly the ledger when its WAL holds nothing, so a snapshot is taken only then: no
``-wal`` file, or an empty one (what a clean close, or an open that failed for lack of space,
leaves). A connection that is open keeps its ``-shm`` sized, so the usual way still works
while another process (the daemon) has the ledger open; a WAL with frames and no usable
``-shm`` is past what can be read exactly, and the error stands. A read-only folder (another
user's state dir, a filesystem mounted read-only) is read as immutable whatever its WAL holds:
nobody can write there (what the janitor always did); one without a ledger stays an error.

A ledger of an older schema is copied into memory and upgraded there, never in its file: a
reader sees the tables it expects, and the file is left as it was. On a full disk, no ledger
yet (or the empty file an open that failed left) reads as an empty ledger.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from janitor.errors import LedgerError, LedgerFull
from janitor.ledger.schema import SCHEMA_VERSION, migrate, refuse_newer

__all__ = ["snapshot"]


def snapshot(path: Path, why: LedgerError) -> sqlite3.Connection:
    """A read-only connection to the ledger at ``path`` as it lies on disk (or to a copy of it
    in memory), which could not be opened the usual way for ``why``; ``why`` is raised again
    when no snapshot would be exact (see the module's docstring). The caller closes it."""
    try:
        writable = os.access(path.parent, os.W_OK)
        size = path.stat().st_size if path.exists() else 0
        wal = _size(path.with_name(path.name + "-wal"))
    except OSError:
        raise why from None  # not even to be looked at (another user's state dir)
    if size and not os.access(path, os.R_OK):
        raise why
    if writable:  # a full disk, and nothing in the WAL that the file lacks
        if not isinstance(why, LedgerFull) or wal:
            raise why
        if size == 0:  # no ledger yet (or the empty file a failed open left): nothing recorded
            return _upgraded(None, path)
    elif size == 0:  # a read-only folder without a ledger: the error stands, as it always did
        raise why
    conn = None
    try:
        conn = sqlite3.connect(
            f"file:{path}?mode=ro&immutable=1",
            uri=True,
            isolation_level=None,
            check_same_thread=False,
        )
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        refuse_newer(version, path)
        return conn if version == SCHEMA_VERSION else _upgraded(conn, path)
    except BaseException as exc:
        if conn is not None:
            conn.close()
        if isinstance(exc, sqlite3.Error):
            raise why from None  # not a database to read either: the first error says it
        raise


def _upgraded(conn: sqlite3.Connection | None, path: Path) -> sqlite3.Connection:
    """A copy in memory of ``conn``'s database (an empty one for None), upgraded to this
    schema; ``conn`` is closed."""
    memory = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    try:
        if conn is not None:
            conn.backup(memory)
            conn.close()
        memory.execute("BEGIN")
        migrate(memory, path)
        memory.execute("COMMIT")
    except BaseException:
        memory.close()
        raise
    return memory


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0
