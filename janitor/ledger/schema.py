"""The ledger's tables, and how a ledger of an older schema becomes the current one.

:func:`migrate` runs inside a write transaction that :class:`janitor.ledger.db.Ledger` opens
under the writer lock; it reads the file's ``user_version``, refuses a newer one untouched,
and creates or upgrades the tables (schema 1, 2, 3 or 4 to 5), every row kept.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from janitor.errors import LedgerError

__all__ = ["KEEP_S", "SCHEMA_VERSION", "migrate", "refuse_newer"]

SCHEMA_VERSION = 5

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

#: Schema 5's table: the cuts drawn on a job's working set (janitor.ledger.draws), in flight
#: while their call runs, then kept with their window until the job ends.
_DRAWS_SCHEMA = """
CREATE TABLE IF NOT EXISTS draws (
    id          TEXT PRIMARY KEY,
    reservation TEXT NOT NULL,
    job         TEXT NOT NULL,
    source      TEXT NOT NULL,
    path        TEXT NOT NULL,
    bytes       INTEGER NOT NULL,
    start_us    INTEGER,
    end_us      INTEGER,
    owner_pid   INTEGER NOT NULL,
    owner_start REAL,
    created     REAL NOT NULL,
    state       TEXT NOT NULL DEFAULT 'live'
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS draws_job ON draws(job);
CREATE INDEX IF NOT EXISTS draws_live ON draws(reservation) WHERE state = 'live'
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
    :now, 'upgrade', '{{"from": 1, "to": {version}}}');
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

#: Schema 4 -> 5, applied to every older or new ledger after its own steps (the tables above
#: are schema 4's): a pin's kind (``pin``, or ``await``: a cache entry awaiting use, with the
#: unit key it covers); each process recorded with a job keeps its process group and the start
#: of the process that held the group's number then, so what it forked is followed once it
#: exits (janitor.host.lineage); the draws on a job's working set.
_MIGRATE_4 = f"""
ALTER TABLE pins ADD COLUMN kind TEXT NOT NULL DEFAULT 'pin';
ALTER TABLE pins ADD COLUMN unit TEXT;
ALTER TABLE job_writers ADD COLUMN pgid INTEGER;
ALTER TABLE job_writers ADD COLUMN leader_start REAL;
{_DRAWS_SCHEMA}
"""


def refuse_newer(version: int, path: Path) -> None:
    """LedgerError for a ledger that a newer space-janitor wrote (schema ``version``)."""
    if version > SCHEMA_VERSION:
        raise LedgerError(
            f"ledger {path} was written by a newer space-janitor (schema {version}); "
            "upgrade space-janitor"
        )


def migrate(conn: sqlite3.Connection, path: Path) -> int:
    """Create the tables of a new ledger, or upgrade an older one, in the caller's write
    transaction; returns the schema version the file had (0 for a new one).

    The version is read here, under the write lock: another process may have just made or
    upgraded the file.
    """
    version: int = conn.execute("PRAGMA user_version").fetchone()[0]
    refuse_newer(version, path)
    if version >= SCHEMA_VERSION:
        return version
    if version == 1:
        first = _MIGRATE_1.format(
            schema=_SCHEMA, reservation_columns=_RESERVATION_COLUMNS_1, version=SCHEMA_VERSION
        )
        script = ";".join((first, _MIGRATE_4))
    elif version in (2, 3, 4):
        steps = (_MIGRATE_2, _MIGRATE_3)[version - 2 :]
        note = "INSERT INTO log (ts, event, detail) VALUES (:now, 'upgrade', "
        note += f'\'{{"from": {version}, "to": {SCHEMA_VERSION}}}\')'
        script = ";".join((*steps, _MIGRATE_4, note))
    else:
        script = ";".join((_SCHEMA, _MIGRATE_4))
    now = time.time()
    args = {"cutoff": now - KEEP_S, "now": now}
    # One statement at a time: executescript() would commit our transaction.
    for statement in script.split(";"):
        if statement.strip():
            conn.execute(statement, args)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    return version
