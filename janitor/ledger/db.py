"""The ledger: one SQLite file (WAL) that every janitor process shares, daemon or not.

It holds reservations, pins, touches, free-space samples and a log of what was granted, refused,
released and deleted. Writers first queue for the writer lock (janitor.ledger.writelock: one at a
time, in arrival order, timing out with a clear error), then take SQLite's own write lock with
``BEGIN IMMEDIATE``, so callers never see "database is locked" and a contended write waits a
few transactions, not the luck of the scheduler.
"""

from __future__ import annotations

import os
import random
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from janitor.config.state_dir import access_error
from janitor.errors import LedgerError, LedgerFull
from janitor.ledger.log import LogEntry
from janitor.ledger.tx import Tx
from janitor.ledger.writelock import WriterLock

__all__ = ["KEEP_S", "SCHEMA_VERSION", "Ledger"]


SCHEMA_VERSION = 4

_T = TypeVar("_T")

#: WAL size past which a writer folds it back into the database after its transaction.
_CHECKPOINT_BYTES = 8 * 1024 * 1024
#: What the WAL file is cut back to when it restarts.
_WAL_KEEP_BYTES = 1024 * 1024

# Shaped for the writes that queue behind the writer lock (a reserve, a release), since each
# page such a write touches is re-read after another process wrote and copied into the WAL on
# COMMIT: reservations are kept in id order, and ids start with their creation time, so a grant
# and its release touch the table's last page; only live rows are indexed; the log is appended
# in rowid order with no other index (its ids rise with its times: Log.first_id_at).
# Pages stay 4 KiB: smaller ones would push a reservation with a long path into overflow pages.
_SCHEMA = """
CREATE TABLE IF NOT EXISTS reservations (
    id          TEXT PRIMARY KEY,
    tree        TEXT NOT NULL,
    device      INTEGER NOT NULL,
    volume      TEXT NOT NULL,
    bytes       INTEGER NOT NULL,
    path        TEXT,
    job         TEXT,
    owner_pid   INTEGER NOT NULL,
    owner_start REAL,
    created     REAL NOT NULL,
    expires     REAL NOT NULL,
    state       TEXT NOT NULL DEFAULT 'live',
    ended       REAL,
    at_risk     TEXT,
    command_pid   INTEGER,
    command_start REAL,
    job_id      TEXT
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS reservations_live ON reservations(device) WHERE state = 'live';
CREATE TABLE IF NOT EXISTS pins (
    id          TEXT PRIMARY KEY,
    tree        TEXT NOT NULL,
    path        TEXT NOT NULL,
    owner_pid   INTEGER NOT NULL,
    owner_start REAL,
    created     REAL NOT NULL,
    expires     REAL NOT NULL,
    state       TEXT NOT NULL DEFAULT 'live',
    ended       REAL
);
CREATE INDEX IF NOT EXISTS pins_state ON pins(state, path);
CREATE TABLE IF NOT EXISTS touches (
    path        TEXT PRIMARY KEY,
    ts          REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS samples (
    device      INTEGER NOT NULL,
    ts          REAL NOT NULL,
    free        INTEGER NOT NULL,
    total       INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS samples_device_ts ON samples(device, ts);
CREATE TABLE IF NOT EXISTS volumes (
    device      INTEGER PRIMARY KEY,
    mount       TEXT NOT NULL,
    level       TEXT NOT NULL,
    reason      TEXT,
    fill_rate   REAL,
    eta_floor   REAL,
    eta_full    REAL,
    confidence  REAL,
    updated     REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS log (
    id          INTEGER PRIMARY KEY,
    ts          REAL NOT NULL,
    event       TEXT NOT NULL,
    tree        TEXT,
    device      INTEGER,
    reservation TEXT,
    bytes       INTEGER,
    path        TEXT,
    detail      TEXT
);
{jobs}"""

#: Schema 4's tables: job folders (janitor.ledger.jobs) and the queue of first writes waiting.
_JOBS_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id          TEXT PRIMARY KEY,
    tree        TEXT NOT NULL,
    folder      TEXT NOT NULL,
    device      INTEGER NOT NULL,
    ino         INTEGER NOT NULL,
    run         TEXT,
    created     REAL NOT NULL,
    state       TEXT NOT NULL DEFAULT 'live',
    ended       REAL,
    foreign_files INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS jobs_active ON jobs(folder) WHERE state IN ('live', 'orphan');
CREATE TABLE IF NOT EXISTS job_writers (
    job         TEXT NOT NULL,
    pid         INTEGER NOT NULL,
    start       REAL,
    added       REAL NOT NULL,
    PRIMARY KEY (job, pid)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS job_sources (
    job         TEXT NOT NULL,
    source      TEXT NOT NULL,
    output_dir  TEXT,
    working_set INTEGER NOT NULL,
    pin         TEXT,
    PRIMARY KEY (job, source)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS waiters (
    id          TEXT PRIMARY KEY,
    device      INTEGER NOT NULL,
    bytes       INTEGER NOT NULL,
    owner_pid   INTEGER NOT NULL,
    owner_start REAL,
    since       REAL NOT NULL,
    what        TEXT
) WITHOUT ROWID
"""
_SCHEMA = _SCHEMA.format(jobs=_JOBS_SCHEMA)

#: How long ended reservations and pins and log lines are kept (Ledger.prune).
KEEP_S = 30 * 86400

#: Schema 1 -> 2: the tables are rebuilt in their new shape with the rows a prune would keep
#: (schema 1 never pruned, so an old ledger may hold years of log). A log line marks the
#: upgrade, with an id above every id schema 1 handed out, so log ids keep rising.
_MIGRATE_1 = """
DROP INDEX IF EXISTS reservations_state;
DROP INDEX IF EXISTS log_ts;
ALTER TABLE reservations RENAME TO reservations_v1;
ALTER TABLE log RENAME TO log_v1;
{schema};
INSERT INTO reservations ({reservation_columns}) SELECT {reservation_columns}
    FROM reservations_v1 WHERE state = 'live' OR ended IS NULL OR ended >= :cutoff;
INSERT INTO log SELECT * FROM log_v1 WHERE ts >= :cutoff;
INSERT INTO log (id, ts, event, detail) VALUES (
    max((SELECT coalesce(max(seq), 0) FROM sqlite_sequence WHERE name = 'log_v1'),
        (SELECT coalesce(max(id), 0) FROM log_v1)) + 1,
    :now, 'upgrade', '{{"from": 1, "to": 4}}');
DROP TABLE reservations_v1;
DROP TABLE log_v1;
DELETE FROM sqlite_sequence WHERE name IN ('log', 'log_v1')
"""

#: The reservation columns of schemas 1 and 2, copied by the upgrade from schema 1.
_RESERVATION_COLUMNS_1 = (
    "id, tree, device, volume, bytes, path, job, owner_pid, owner_start, created, expires, "
    "state, ended, at_risk"
)

#: Schema 2 -> 3: a reservation may be kept live by the command its supervisor runs, too.
_MIGRATE_2 = """
ALTER TABLE reservations ADD COLUMN command_pid INTEGER;
ALTER TABLE reservations ADD COLUMN command_start REAL
"""

#: Schema 3 -> 4: job folders, their writers and sources, the queue of waiting first writes,
#: and the job a working-set reservation serves.
_MIGRATE_3 = f"""
ALTER TABLE reservations ADD COLUMN job_id TEXT;
{_JOBS_SCHEMA}
"""

# SQLite primary result codes (the low byte of an extended code).
_SQLITE_CORRUPT = 11
_SQLITE_FULL = 13
_SQLITE_NOTADB = 26
_SQLITE_BUSY = 5
_SQLITE_LOCKED = 6
_SQLITE_READONLY = 8
_SQLITE_CANTOPEN = 14
_SQLITE_IOERR = 10


class Ledger:
    """The SQLite ledger at ``path`` (``~/.local/state/space-janitor/ledger.sqlite3`` on Linux).

    One connection per thread; safe for many processes. ``write()`` is the only way to change it.
    """

    def __init__(self, path: Path, *, lock_timeout: float = 30.0) -> None:
        self.path = Path(path)
        self.lock_timeout = lock_timeout
        self._local = threading.local()
        self._pid = os.getpid()
        self._wal_path = self.path.with_name(self.path.name + "-wal")
        self._last_checkpoint = 0.0
        # Writers queue here, in arrival order, before SQLite's own lock (janitor.ledger.writelock).
        self._writer = WriterLock(
            self.path.with_name(self.path.name + ".lock"), timeout=lock_timeout
        )

    # -- connections ---------------------------------------------------------------------------

    def _connect(self) -> tuple[sqlite3.Connection, Tx]:
        # A connection must not cross fork(): a child opens its own.
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is not None and self._pid == os.getpid():
            return conn, self._local.tx
        # A parent's connection is never used again here, even if opening ours fails.
        self._local.conn = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        except FileExistsError:
            raise LedgerError(
                f"cannot create the ledger: {self.path.parent} is not a folder; "
                "fix JANITOR_STATE_DIR"
            ) from None
        except OSError as exc:
            raise access_error(self.path.parent, exc, "create the state dir") from None
        conn = None
        try:
            if not self.path.exists():
                # Created 0600: the ledger names jobs and paths of this user only.
                fd = os.open(self.path, os.O_CREAT | os.O_WRONLY, 0o600)
                os.close(fd)
            conn = sqlite3.connect(
                self.path, timeout=self.lock_timeout, isolation_level=None, check_same_thread=False
            )
            # Writers already queue in janitor.ledger.writelock; what still meets SQLite's lock is
            # rare and short (opening a WAL another process is recovering or checkpointing,
            # a reader's snapshot), so SQLite's own busy handler may wait the whole timeout:
            # under load, 50 ms was not enough and surfaced as "locked".
            conn.execute(f"PRAGMA busy_timeout = {int(self.lock_timeout * 1000)}")
            # A ledger of a newer space-janitor is refused before anything is changed in it.
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            self._refuse_newer(version)
            # Processes opening a new ledger at once race to switch it to WAL; SQLite answers
            # the losers "locked" without calling its busy handler, so they wait here instead.
            mode = self._retry_busy(lambda: conn.execute("PRAGMA journal_mode = WAL").fetchone())[0]
            if str(mode).lower() != "wal":
                conn.execute("PRAGMA journal_mode = DELETE")
            conn.execute("PRAGMA synchronous = NORMAL")
            # Checkpoints (which fsync) run after the writer lock is released, not inside some
            # unlucky writer's transaction: see _maybe_checkpoint.
            conn.execute("PRAGMA wal_autocheckpoint = 0")
            # After a checkpoint, the next writer restarts the WAL and truncates it to this.
            conn.execute(f"PRAGMA journal_size_limit = {_WAL_KEEP_BYTES}")
            conn.execute("PRAGMA foreign_keys = ON")
            if version != SCHEMA_VERSION:
                self._ensure_schema(conn)
        except BaseException as exc:
            if conn is not None:
                conn.close()
            if isinstance(exc, sqlite3.Error):
                raise self._translate(exc) from None
            if isinstance(exc, OSError) and not isinstance(exc, LedgerError):
                raise access_error(self.path, exc, "open the ledger") from None
            raise
        self._local.conn = conn
        self._local.tx = tx = Tx(conn)
        self._pid = os.getpid()
        return conn, tx

    def _ensure_schema(self, conn: sqlite3.Connection) -> None:
        """Create the tables of a new ledger, or upgrade an older one, in one transaction.

        It queues for the writer lock like any writer, so the writers that come meanwhile
        wait their turn behind it rather than in SQLite's busy loop.
        """
        self._writer.acquire()
        try:
            self._begin(conn)
            try:
                # Read under the write lock: another process may have just made or upgraded it.
                version = conn.execute("PRAGMA user_version").fetchone()[0]
                self._refuse_newer(version)
                if version < SCHEMA_VERSION:
                    if version == 1:
                        script = _MIGRATE_1.format(
                            schema=_SCHEMA, reservation_columns=_RESERVATION_COLUMNS_1
                        )
                    elif version in (2, 3):
                        steps = (_MIGRATE_2, _MIGRATE_3) if version == 2 else (_MIGRATE_3,)
                        note = "INSERT INTO log (ts, event, detail) VALUES (:now, 'upgrade', "
                        note += f'\'{{"from": {version}, "to": {SCHEMA_VERSION}}}\')'
                        script = ";".join((*steps, note))
                    else:
                        script = _SCHEMA
                    now = time.time()
                    args = {"cutoff": now - KEEP_S, "now": now}
                    # One statement at a time: executescript() would commit our transaction.
                    for statement in script.split(";"):
                        if statement.strip():
                            conn.execute(statement, args)
                    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        finally:
            self._writer.release()
        if version == 1:
            try:  # fold the copied tables into the file now, not in some writer's turn
                conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            except sqlite3.Error:
                pass

    def _refuse_newer(self, version: int) -> None:
        if version > SCHEMA_VERSION:
            raise LedgerError(
                f"ledger {self.path} was written by a newer space-janitor (schema {version}); "
                "upgrade space-janitor"
            )

    def close(self) -> None:
        """Close this thread's connection and lock file (others close when their thread ends)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None
        self._writer.close()

    # -- transactions --------------------------------------------------------------------------

    def _begin(self, conn: sqlite3.Connection) -> None:
        self._retry_busy(lambda: conn.execute("BEGIN IMMEDIATE"))

    def _retry_busy(self, fn: Callable[[], _T]) -> _T:
        """``fn()``, again after a short random sleep while SQLite says busy or locked, for at
        most ``lock_timeout`` seconds."""
        deadline = time.monotonic() + self.lock_timeout
        delay = 0.0002
        while True:
            try:
                return fn()
            except sqlite3.OperationalError as exc:
                code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
                if code not in (_SQLITE_BUSY, _SQLITE_LOCKED) or time.monotonic() > deadline:
                    raise
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 0.005)

    @contextmanager
    def write(self) -> Iterator[Tx]:
        """One write transaction, serialised with every other writer of this ledger."""
        conn, tx = self._connect()
        self._writer.acquire()
        try:
            try:
                self._begin(conn)
            except sqlite3.Error as exc:
                raise self._translate(exc) from None
            try:
                yield tx
            except BaseException:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
                raise
            try:
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
                raise self._translate(exc) from None
        finally:
            self._writer.release()
        self._maybe_checkpoint(conn)

    def _maybe_checkpoint(self, conn: sqlite3.Connection) -> None:
        """Fold the WAL back into the database once it passes a few MiB.

        PASSIVE never waits for other connections, and runs outside the writer lock, so other
        writers go on while this one pays for the fsync.
        """
        try:
            size = os.stat(self._wal_path).st_size
        except OSError:
            return
        if size < _CHECKPOINT_BYTES:
            return
        now = time.monotonic()
        if now - self._last_checkpoint < 1.0:
            return  # a reader kept the last one from finishing: do not retry on every write
        self._last_checkpoint = now
        try:
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        except sqlite3.Error:
            pass  # busy or full: the next writer tries again

    @contextmanager
    def read(self) -> Iterator[Tx]:
        """A consistent read snapshot (WAL readers never block writers)."""
        try:
            conn, tx = self._connect()
        except LedgerError:
            # A read-only state dir: nobody can write the ledger, so read it as immutable.
            try:
                readable = self.path.is_file() and os.access(self.path, os.R_OK)
            except OSError:
                readable = False  # not even to be looked at (another user's state dir)
            if not readable or os.access(self.path.parent, os.W_OK):
                raise
            conn = sqlite3.connect(
                f"file:{self.path}?mode=ro&immutable=1",
                uri=True,
                isolation_level=None,
                check_same_thread=False,
            )
            self._local.conn = conn
            self._local.tx = tx = Tx(conn)
            self._pid = os.getpid()
        try:
            conn.execute("BEGIN")
        except sqlite3.Error as exc:
            raise self._translate(exc) from None
        try:
            yield tx
        except sqlite3.Error as exc:
            raise self._translate(exc) from None
        finally:
            try:
                conn.execute("COMMIT")
            except sqlite3.Error:
                pass

    def call(self, fn: Callable[..., _T], *args: Any) -> _T:
        """Run ``fn(tx, *args)`` inside ``write()``, translating SQLite errors."""
        try:
            with self.write() as tx:
                return fn(tx, *args)
        except sqlite3.Error as exc:
            raise self._translate(exc) from None

    def _translate(self, exc: sqlite3.Error) -> LedgerError:
        code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
        if code == _SQLITE_FULL or (code == _SQLITE_IOERR and _volume_full(self.path.parent)):
            return LedgerFull(
                f"the ledger's disk is full ({self.path.parent}): nothing was changed (no "
                "grant, no deletion); free some space there and retry"
            )
        if code in (_SQLITE_CORRUPT, _SQLITE_NOTADB):
            return LedgerError(
                f"ledger {self.path} is corrupt ({exc}); move it aside and space-janitor "
                "will start a new one"
            )
        if code in (_SQLITE_READONLY, _SQLITE_CANTOPEN):
            return access_error(self.path, PermissionError(13, str(exc)), "write the ledger")
        if code in (_SQLITE_BUSY, _SQLITE_LOCKED):
            return LedgerError(
                f"ledger {self.path} stayed locked for {self.lock_timeout:g}s; another "
                "process holds it (raise lock_timeout_s or find the stuck process)"
            )
        return LedgerError(f"ledger {self.path}: {exc}")

    # -- what the ledger answers itself ----------------------------------------------------

    def entries(
        self, *, since: float | None = None, events: tuple[str, ...] = (), limit: int | None = None
    ) -> list[LogEntry]:
        """Log lines in order, optionally from ``since`` (epoch seconds) and of some events."""
        with self.read() as tx:
            return tx.log.entries(since=since, events=events, limit=limit)

    def last_log_id(self) -> int:
        """The id of the newest log line (0 for an empty log): where a reader starts following."""
        with self.read() as tx:
            return tx.log.last_id()

    def prune(self, *, keep_s: float = KEEP_S, batch: int = 5000) -> bool:
        """Drop ended reservations, pins and jobs and log lines past ``keep_s``, samples past a
        day.

        At most ``batch`` rows of each table go per call, in one short write transaction, so
        reservations queued behind it wait milliseconds; returns whether some are left. The
        newest log line always stays, so log ids keep rising (readers follow the log by id).
        """
        now = time.time()
        cutoff = now - keep_s
        counts = self.call(
            lambda tx: (
                tx.reservations.prune(cutoff, batch),
                tx.pins.prune(cutoff, batch),
                tx.log.prune(cutoff, batch),
                tx.samples.prune(now - 86400, batch),
                tx.jobs.prune(cutoff, batch),
            )
        )
        return bool(max(counts) >= batch)

    def integrity_check(self) -> str:
        """SQLite's ``PRAGMA integrity_check`` of the file: ``"ok"`` or what is wrong.

        It opens the file read-only on a connection of its own, so it neither creates nor
        upgrades a ledger; LedgerError when the file cannot be read as a database.
        """
        try:
            conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=5)
            try:
                return str(conn.execute("PRAGMA integrity_check").fetchone()[0])
            finally:
                conn.close()
        except sqlite3.Error as exc:
            raise LedgerError(f"{self.path}: {exc}") from None


def _volume_full(folder: Path) -> bool:
    try:
        st = os.statvfs(folder)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < 64 * 1024
