"""The ledger: one SQLite file (WAL) that every janitor process shares, daemon or not.

It holds reservations, pins, touches, free-space samples and a log of what was granted, refused,
released and deleted. Writers first queue for the writer lock (janitor.ledger.writelock: one at a
time, in arrival order, timing out with a clear error), then take SQLite's own write lock with
``BEGIN IMMEDIATE``, so callers never see "database is locked" and a contended write waits a
few transactions, not the luck of the scheduler.

This module holds the connections and transactions; the tables and their upgrades are in
:mod:`janitor.ledger.schema`, what a SQLite error means to the user in
:mod:`janitor.ledger.sqlite_errors`, and each table's rows in a module of its own.
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
from janitor.ledger.schema import KEEP_S, SCHEMA_VERSION, migrate, refuse_newer
from janitor.ledger.snapshot import snapshot
from janitor.ledger.sqlite_errors import SQLITE_BUSY, SQLITE_LOCKED, primary_code, translate
from janitor.ledger.tx import Tx
from janitor.ledger.writelock import WriterLock

__all__ = ["KEEP_S", "SCHEMA_VERSION", "Ledger"]

_T = TypeVar("_T")

#: WAL size past which a writer folds it back into the database after its transaction.
_CHECKPOINT_BYTES = 8 * 1024 * 1024
#: What the WAL file is cut back to when it restarts.
_WAL_KEEP_BYTES = 1024 * 1024


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
        #: Why the last ``read()`` read the file as it lies on disk (None: the usual way).
        self.read_only: LedgerError | None = None
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
            refuse_newer(version, self.path)
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
        """Create the tables of a new ledger, or upgrade an older one, in one transaction
        (janitor.ledger.schema says how).

        It queues for the writer lock like any writer, so the writers that come meanwhile
        wait their turn behind it rather than in SQLite's busy loop.
        """
        self._writer.acquire()
        try:
            self._begin(conn)
            try:
                version = migrate(conn, self.path)
                conn.execute("COMMIT")
            except BaseException:
                try:  # SQLite may have rolled back already (a full disk): keep the first error
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
                raise
        finally:
            self._writer.release()
        if version == 1:
            try:  # fold the copied tables into the file now, not in some writer's turn
                conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            except sqlite3.Error:
                pass

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
                code = primary_code(exc)
                if code not in (SQLITE_BUSY, SQLITE_LOCKED) or time.monotonic() > deadline:
                    raise
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 0.005)

    @contextmanager
    def waiting_at_most(self, seconds: float) -> Iterator[None]:
        """Within, a write waits at most ``seconds`` (not ``lock_timeout``) for another writer,
        then raises LedgerBusy: a guard's own decision (one thread) ends by its call's deadline."""
        full, self.lock_timeout = self.lock_timeout, min(self.lock_timeout, max(0.0, seconds))
        self._writer.timeout = self.lock_timeout
        try:
            yield
        finally:
            self.lock_timeout = full
            self._writer.timeout = full

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
        """A consistent read snapshot (WAL readers never block writers).

        Where nothing can be written beside the ledger (its disk full, a read-only folder), it
        is read as it lies on disk instead (:mod:`janitor.ledger.snapshot`), on a connection
        of this read alone: the next read tries the usual way again, and ``read_only`` says
        why this one could not (None when it could).
        """
        opened: sqlite3.Connection | None = None
        try:
            conn, tx = self._connect()
            self.read_only = None
        except LedgerError as exc:
            conn = opened = snapshot(self.path, exc)
            tx = Tx(conn)
            self.read_only = exc
        try:
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
        finally:
            if opened is not None:
                opened.close()

    def call(self, fn: Callable[..., _T], *args: Any) -> _T:
        """Run ``fn(tx, *args)`` inside ``write()``, translating SQLite errors."""
        try:
            with self.write() as tx:
                return fn(tx, *args)
        except sqlite3.Error as exc:
            raise self._translate(exc) from None

    def _translate(self, exc: sqlite3.Error) -> LedgerError:
        return translate(exc, self.path, self.lock_timeout)

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
        upgrades a ledger; LedgerError when the file cannot be read as a database, LedgerFull
        when it cannot be opened for want of space beside it (a full disk, not a bad file).
        """
        try:
            conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=5)
            try:
                return str(conn.execute("PRAGMA integrity_check").fetchone()[0])
            finally:
                conn.close()
        except sqlite3.Error as exc:
            why = self._translate(exc)
            if isinstance(why, LedgerFull):
                raise why from None
            raise LedgerError(f"{self.path}: {exc}") from None
