"""The ledger's file: its schema, the upgrade from schema 1, ids, the log's time search, pruning.

Real SQLite files in the isolated state dir; a schema-1 ledger is written with the statements
space-janitor 0.x shipped, so the upgrade runs on what a user's disk really holds.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import secrets
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from janitor import Janitor
from janitor.errors import LedgerBusy, LedgerError
from janitor.ledger.db import SCHEMA_VERSION, Ledger
from tests._fixtures.env import JanitorEnv
from tests._fixtures.ledger import raw_sql

#: The schema-1 tables that changed, as schema 1 created them.
_V1 = """
CREATE TABLE reservations (
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
    at_risk     TEXT
);
CREATE INDEX reservations_state ON reservations(state, device);
CREATE TABLE pins (
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
CREATE INDEX pins_state ON pins(state, path);
CREATE TABLE touches (path TEXT PRIMARY KEY, ts REAL NOT NULL);
CREATE TABLE samples (device INTEGER NOT NULL, ts REAL NOT NULL, free INTEGER NOT NULL,
                      total INTEGER NOT NULL);
CREATE INDEX samples_device_ts ON samples(device, ts);
CREATE TABLE volumes (device INTEGER PRIMARY KEY, mount TEXT NOT NULL, level TEXT NOT NULL,
    reason TEXT, fill_rate REAL, eta_floor REAL, eta_full REAL, confidence REAL,
    updated REAL NOT NULL);
CREATE TABLE log (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    ts          REAL NOT NULL,
    event       TEXT NOT NULL,
    tree        TEXT,
    device      INTEGER,
    reservation TEXT,
    bytes       INTEGER,
    path        TEXT,
    detail      TEXT
);
CREATE INDEX log_ts ON log(ts);
PRAGMA user_version = 1;
"""

ID_RE = re.compile(r"^r-[0-9a-f]{16}$")


@pytest.fixture
def cache_janitor(
    write_policy: Callable[..., Path], tmp_path: Path
) -> Iterator[Callable[[], Janitor]]:
    """``Janitor``s on a policy with one cache tree ``t`` (the volume's real free space and a
    floor of 4 MiB; these tests reserve a few bytes)."""
    tree = tmp_path / "tree"
    tree.mkdir()
    write_policy({"t": tree})
    made: list[Janitor] = []

    def make() -> Janitor:
        jan = Janitor.from_settings()
        made.append(jan)
        return jan

    yield make
    for jan in made:
        jan.ledger.close()


def _schema_sql(path: Path) -> dict[str, str]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT name, sql FROM sqlite_master").fetchall()
    return {name: sql or "" for name, sql in rows}


def test_a_new_ledger_has_the_current_schema(
    cache_janitor: Callable[[], Janitor], janitor_env: JanitorEnv
) -> None:
    jan = cache_janitor()
    jan.reserve("t", 1).release()
    with sqlite3.connect(janitor_env.ledger) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 5
    sql = _schema_sql(janitor_env.ledger)
    assert "WITHOUT ROWID" in sql["reservations"] and "job_id" in sql["reservations"]
    assert {"jobs", "job_writers", "job_sources", "waiters", "jobs_active", "draws"} <= set(sql)
    assert "kind" in sql["pins"] and "unit" in sql["pins"]
    assert "WHERE state = 'live'" in sql["reservations_live"]
    assert "AUTOINCREMENT" not in sql["log"]
    assert "log_ts" not in sql and "reservations_state" not in sql


def test_schema_1_is_upgraded_in_place_keeping_what_a_prune_would_keep(
    cache_janitor: Callable[[], Janitor], janitor_env: JanitorEnv
) -> None:
    """Live and recently ended reservations and recent log lines come across unchanged; what is
    past 30 days does not; an ``upgrade`` log line gets an id above every id schema 1 used."""
    janitor_env.state_dir.mkdir(parents=True)
    now = time.time()
    old = now - 40 * 86400
    me = os.getpid()
    from janitor.host.owner import process_start

    start = process_start(me)
    with sqlite3.connect(janitor_env.ledger) as conn:
        conn.executescript(_V1)
        rows = [
            # (id, bytes, state, ended): one still live (this process owns it), two ended.
            ("r-00000000000000aa", 3 << 20, "live", None),
            ("r-00000000000000bb", 5 << 20, "released", now - 60),
            ("r-00000000000000cc", 7 << 20, "expired", old),
        ]
        for rid, nbytes, state, ended in rows:
            conn.execute(
                "INSERT INTO reservations (id, tree, device, volume, bytes, owner_pid, "
                "owner_start, created, expires, state, ended) "
                "VALUES (?, 't', ?, '/', ?, ?, ?, ?, ?, ?, ?)",
                (rid, os.stat(janitor_env.root).st_dev, nbytes, me, start, old, now + 600, state,
                 ended),
            )  # fmt: skip
        for ts in [old, old + 1, now - 3, now - 2, now - 1]:
            conn.execute("INSERT INTO log (ts, event) VALUES (?, 'grant')", (ts,))
        conn.execute("DELETE FROM log WHERE id = 5")  # AUTOINCREMENT remembers 5 was used
    jan = cache_janitor()
    live = jan.reservations()
    assert [(r.id, r.bytes) for r in live] == [("r-00000000000000aa", 3 << 20)]
    with sqlite3.connect(janitor_env.ledger) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 5
        assert conn.execute("SELECT id, state FROM reservations ORDER BY id").fetchall() == [
            ("r-00000000000000aa", "live"),
            ("r-00000000000000bb", "released"),
        ]
        assert conn.execute("SELECT id, event FROM log ORDER BY id").fetchall() == [
            (3, "grant"),
            (4, "grant"),
            (6, "upgrade"),
        ]
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    sql = _schema_sql(janitor_env.ledger)
    assert "WITHOUT ROWID" in sql["reservations"] and "AUTOINCREMENT" not in sql["log"]
    assert not {"reservations_v1", "log_v1", "log_ts", "reservations_state"} & set(sql)
    # The reservation made before the upgrade is still the same one: it can be released.
    jan.release("r-00000000000000aa")
    assert jan.reservations() == []
    ids = [e.id for e in jan.ledger.entries()]
    assert ids[:3] == [3, 4, 6] and ids[3:] and min(ids[3:]) > 6


def test_schema_2_gains_the_command_columns_and_keeps_its_reservations(
    cache_janitor: Callable[[], Janitor], janitor_env: JanitorEnv
) -> None:
    """A schema-2 ledger (no command columns, no jobs) is upgraded in place: the live
    reservation stays live and can then cover a command."""
    jan = cache_janitor()
    r = jan.reserve("t", 1 << 20)
    jan.ledger.close()
    with sqlite3.connect(janitor_env.ledger) as conn:  # back to schema 2, as 0.1 wrote it
        _back_to_schema_4(conn)
        for table in ("jobs", "job_writers", "job_sources", "waiters"):
            conn.execute(f"DROP TABLE {table}")
        conn.execute("ALTER TABLE reservations DROP COLUMN job_id")
        conn.execute("ALTER TABLE reservations DROP COLUMN command_start")
        conn.execute("ALTER TABLE reservations DROP COLUMN command_pid")
        conn.execute("PRAGMA user_version = 2")
    again = cache_janitor()
    assert [x.id for x in again.reservations()] == [r.id]
    covered = again.cover(r.id, os.getpid())
    assert covered.command_pid == os.getpid()
    with sqlite3.connect(janitor_env.ledger) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 5
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert conn.execute("SELECT count(*) FROM jobs").fetchone()[0] == 0
    assert [e.detail for e in again.ledger.entries(events=("upgrade",))] == [{"from": 2, "to": 5}]
    again.release(r.id)


def test_schema_3_gains_the_job_tables_and_keeps_its_reservations(
    cache_janitor: Callable[[], Janitor], janitor_env: JanitorEnv
) -> None:
    """A schema-3 ledger (before jobs) is upgraded in place: its live reservation stays live,
    and jobs can be recorded."""
    jan = cache_janitor()
    r = jan.reserve("t", 1 << 20)
    jan.ledger.close()
    with sqlite3.connect(janitor_env.ledger) as conn:  # back to schema 3
        _back_to_schema_4(conn)
        for table in ("jobs", "job_writers", "job_sources", "waiters"):
            conn.execute(f"DROP TABLE {table}")
        conn.execute("ALTER TABLE reservations DROP COLUMN job_id")
        conn.execute("PRAGMA user_version = 3")
    again = cache_janitor()
    assert [(x.id, x.job_id) for x in again.reservations()] == [(r.id, None)]
    assert again.jobs() == []
    with sqlite3.connect(janitor_env.ledger) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 5
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert [e.detail for e in again.ledger.entries(events=("upgrade",))] == [{"from": 3, "to": 5}]
    again.release(r.id)


def _back_to_schema_4(conn: sqlite3.Connection) -> None:
    """Undo schema 5: no draws, pins without a kind or a unit, writers without a group."""
    conn.execute("DROP TABLE draws")
    conn.execute("ALTER TABLE pins DROP COLUMN unit")
    conn.execute("ALTER TABLE pins DROP COLUMN kind")
    conn.execute("ALTER TABLE job_writers DROP COLUMN leader_start")
    conn.execute("ALTER TABLE job_writers DROP COLUMN pgid")


def test_schema_4_gains_pin_kinds_and_draws_and_keeps_its_pins(
    cache_janitor: Callable[[], Janitor], janitor_env: JanitorEnv
) -> None:
    """A schema-4 ledger (pins of one kind, no draws) is upgraded in place: its live pin stays
    live, a pin of its owner's, and cache entries can then await use."""
    jan = cache_janitor()
    entry = Path(jan.policy.tree("t").path) / "entry.bin"
    entry.parent.mkdir(parents=True, exist_ok=True)
    entry.write_bytes(b"x" * 4096)
    pin = jan.pin(entry)
    jan.ledger.close()
    with sqlite3.connect(janitor_env.ledger) as conn:
        _back_to_schema_4(conn)
        conn.execute("PRAGMA user_version = 4")
    again = cache_janitor()
    assert [(p.id, p.kind) for p in again.pins()] == [(pin.id, "pin")]
    with sqlite3.connect(janitor_env.ledger) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 5
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert conn.execute("SELECT count(*) FROM draws").fetchone()[0] == 0
    assert [e.detail for e in again.ledger.entries(events=("upgrade",))] == [{"from": 4, "to": 5}]
    again.unpin(pin.id)


def test_schema_4_keeps_its_jobs_and_their_writers(
    cache_janitor: Callable[[], Janitor], janitor_env: JanitorEnv, tmp_path: Path
) -> None:
    """A schema-4 ledger (writers without their process group) is upgraded in place: a live
    job keeps its writer, which knows no group (its lineage is not followed, as before)."""
    from janitor.admission.jobs import JobFolder, record_job
    from janitor.host.owner import process_start
    from janitor.ledger.jobs import Writer

    folder = tmp_path / ".tmpjob"
    folder.mkdir()
    st = folder.stat()
    where = JobFolder("t", str(folder), st.st_dev, st.st_ino)
    me, start = os.getpid(), process_start(os.getpid())
    jan = cache_janitor()
    job = jan.ledger.call(lambda tx: record_job(tx, where, Writer(me, start), run=None, now=1.0))
    jan.ledger.close()
    with sqlite3.connect(janitor_env.ledger) as conn:
        _back_to_schema_4(conn)
        conn.execute("PRAGMA user_version = 4")
    again = cache_janitor()
    (kept,) = again.jobs()
    assert (kept.id, kept.state, kept.writers) == (job.id, "live", (Writer(me, start),))
    with sqlite3.connect(janitor_env.ledger) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert [e.detail for e in again.ledger.entries(events=("upgrade",))] == [{"from": 4, "to": 5}]
    again.ledger.close()


def test_a_ledger_from_a_newer_version_is_refused_untouched(
    cache_janitor: Callable[[], Janitor], janitor_env: JanitorEnv
) -> None:
    janitor_env.state_dir.mkdir(parents=True)
    with sqlite3.connect(janitor_env.ledger) as conn:
        conn.execute("CREATE TABLE future (x)")
        conn.execute("PRAGMA user_version = 99")
    before = janitor_env.ledger.read_bytes()
    with pytest.raises(LedgerError, match="newer space-janitor"):
        cache_janitor().reserve("t", 1)
    assert janitor_env.ledger.read_bytes() == before


def test_ids_rise_with_time_and_keep_their_format(cache_janitor: Callable[[], Janitor]) -> None:
    jan = cache_janitor()
    ids = []
    for _ in range(20):
        with jan.reserve("t", 1) as r:
            ids.append(r.id)
        time.sleep(0.002)
    assert all(ID_RE.match(i) for i in ids)
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert abs(int(ids[-1][2:13], 16) / 1000 - time.time()) < 60  # the first 11 digits: ms


def test_two_grants_that_draw_the_same_id_both_succeed(
    cache_janitor: Callable[[], Janitor], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same millisecond and the same 20 random bits: the second grant draws again."""
    draws = iter([7, 7, 7, 8])
    monkeypatch.setattr(secrets, "randbits", lambda _bits: next(draws))
    monkeypatch.setattr(time, "time", lambda: 1_800_000_000.0)
    jan = cache_janitor()
    a = jan.reserve("t", 1, ttl=10**8)
    b = jan.reserve("t", 1, ttl=10**8)
    assert a.id == "r-1a3185c500000007"
    assert b.id == "r-1a3185c500000008"
    assert {r.id for r in jan.reservations()} == {a.id, b.id}


def _append_log(ledger: Ledger, times: list[float]) -> None:
    with ledger.write() as tx:
        for ts in times:
            tx.log.add("grant", ts=ts)


@pytest.mark.parametrize("gap", [False, True])
def test_log_since_finds_the_first_line_at_that_time(tmp_path: Path, gap: bool) -> None:
    ledger = Ledger(tmp_path / "l.sqlite3")
    times = [1000.0 + i // 3 for i in range(60)]  # three lines a second, ties included
    _append_log(ledger, times)
    if gap:  # holes in the ids, as pruning and deletes leave them
        with raw_sql(ledger) as conn:
            conn.execute("DELETE FROM log WHERE id % 4 = 0 OR id BETWEEN 20 AND 35")
    kept = [e.ts for e in ledger.entries()]
    for since in [0.0, 999.5, 1000.0, 1003.0, 1006.5, 1011.0, 1019.0, 1020.0, 5000.0]:
        assert [e.ts for e in ledger.entries(since=since)] == [t for t in kept if t >= since]
    assert [e.ts for e in ledger.entries(since=1010.0, limit=2)] == [
        t for t in kept if t >= 1010.0
    ][-2:]
    empty = Ledger(tmp_path / "empty.sqlite3")
    assert empty.entries(since=0.0) == []
    ledger.close()
    empty.close()


def test_log_since_keeps_lines_stamped_a_little_out_of_order(tmp_path: Path) -> None:
    """Deletions are logged in batches and writers stamp before they queue: a line may carry
    an earlier time than the line before it; `since` still finds every line at or after it."""
    ledger = Ledger(tmp_path / "l.sqlite3")
    base = time.time() - 600
    _append_log(ledger, [base + t for t in (10, 40, 20, 30, 50)])
    assert [e.id for e in ledger.entries(since=base + 35)] == [2, 5]
    assert [e.id for e in ledger.entries(since=base + 15)] == [2, 3, 4, 5]
    ledger.close()


def test_prune_drops_what_is_past_its_time_in_batches_and_keeps_the_newest_line(
    tmp_path: Path,
) -> None:
    ledger = Ledger(tmp_path / "l.sqlite3")
    now = time.time()
    old = now - 40 * 86400
    _append_log(ledger, [old + i for i in range(25)])
    with raw_sql(ledger) as conn:
        for i, (state, ended) in enumerate(
            [("released", old), ("expired", old), ("released", now), ("live", None)]
        ):
            conn.execute(
                "INSERT INTO reservations (id, tree, device, volume, bytes, owner_pid, created, "
                "expires, state, ended) VALUES (?, 't', 1, '/', 1, 1, ?, ?, ?, ?)",
                (f"r-{i:016x}", old, old + 1, state, ended),
            )
        conn.execute("INSERT INTO samples VALUES (1, ?, 1, 1), (1, ?, 1, 1)", (old, now))
    # Every log line is old: all go but the newest, 10 a call.
    rounds = 0
    while ledger.prune(batch=10):
        rounds += 1
    assert rounds == 2
    assert [e.ts for e in ledger.entries()] == [old + 24]
    with raw_sql(ledger) as conn:
        assert conn.execute("SELECT id FROM reservations ORDER BY id").fetchall() == [
            ("r-0000000000000002",),
            ("r-0000000000000003",),
        ]
        assert conn.execute("SELECT ts FROM samples").fetchall() == [(now,)]
    # New lines after the prune still get ids above every id handed out before.
    _append_log(ledger, [now, now])
    ids = [e.id for e in ledger.entries()]
    assert ids == sorted(ids) and ids[0] == 25 and len(ids) == 3
    _append_log(ledger, [now - 100])  # recent lines stay, the old one goes now
    assert ledger.prune(batch=10) is False
    assert [e.ts for e in ledger.entries()] == [now, now, now - 100]
    ledger.close()


def _open_and_write(path: str, go: Any, out: Any) -> None:
    try:
        ledger = Ledger(Path(path), lock_timeout=10)
        go.wait()
        with ledger.write() as tx:
            tx.log.add("upgrade", pid=os.getpid())
        out.put("ok")
    except BaseException as exc:
        out.put(f"{type(exc).__name__}: {exc}")


def test_many_processes_opening_a_new_ledger_at_once_all_get_in(tmp_path: Path) -> None:
    """They race to switch the new file to WAL, and SQLite tells the losers "locked" without
    waiting: each must wait its turn, not fail."""
    ctx = multiprocessing.get_context("fork")
    for round_ in range(12):
        path = tmp_path / f"r{round_}" / "ledger.sqlite3"
        go, out = ctx.Event(), ctx.Queue()
        procs = [ctx.Process(target=_open_and_write, args=(str(path), go, out)) for _ in range(8)]
        for p in procs:
            p.start()
        go.set()
        results = [out.get(timeout=60) for _ in procs]
        for p in procs:
            p.join(30)
        assert results == ["ok"] * len(procs), results
        assert len(Ledger(path).entries(events=("upgrade",))) == len(procs)


def test_a_measured_reservation_keeps_every_field_but_its_outstanding_bytes(tmp_path: Path) -> None:
    """``ReservationInfo.measured`` is built field by field (it is on the path of every live
    reservation read): it must equal ``dataclasses.replace`` with the bytes measured, field for
    field, so a field added to the class and not to it fails here."""
    import dataclasses

    from janitor.ledger.reservations import ReservationInfo

    written = tmp_path / "out.pcm"
    written.write_bytes(os.urandom(64 * 1024))  # real blocks: 64 KiB of the 1 MiB written
    values: dict[str, Any] = {}
    for k, f in enumerate(dataclasses.fields(ReservationInfo)):
        # A distinct value of the field's kind for each, so a swap of two fields shows.
        kind = str(f.type)
        values[f.name] = (
            str(written) if f.name == "path"
            else 1 << 20 if f.name == "bytes"
            else float(k) + 0.5 if "float" in kind
            else k if "int" in kind
            else f"v{k}"
        )  # fmt: skip
    info = ReservationInfo(**values)
    measured = info.measured()
    left = (1 << 20) - os.stat(written).st_blocks * 512
    assert measured == dataclasses.replace(info, outstanding=left)
    assert 0 < measured.outstanding < 1 << 20


def test_a_write_waits_for_a_hung_writer_at_most_as_long_as_it_is_told(tmp_path: Path) -> None:
    """``waiting_at_most``: a write waits that long for the lock another process holds (and
    hangs with), not ``lock_timeout``, then raises LedgerBusy (a LedgerError); the ledger's own
    timeout is back after the block, and a write goes through once the other writer is gone."""
    path = tmp_path / "ledger.sqlite3"
    ledger = Ledger(path, lock_timeout=20)
    ledger.close()
    hold = (
        "import sys\nfrom pathlib import Path\nfrom janitor.ledger.db import Ledger\n"
        f"with Ledger(Path({str(path)!r})).write():\n"
        "    print('held', flush=True)\n    sys.stdin.read()\n"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", hold], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        t0 = time.monotonic()
        with (
            ledger.waiting_at_most(0.3),
            pytest.raises(LedgerBusy, match="stayed held"),
            ledger.write(),
        ):
            pass
        assert time.monotonic() - t0 < 10  # not the 20 s of lock_timeout
        assert ledger.lock_timeout == 20
    finally:
        holder.kill()
        holder.wait()
    with ledger.write():
        pass
    ledger.close()
    assert issubclass(LedgerBusy, LedgerError)
