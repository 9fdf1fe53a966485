"""A plain SQLite connection to a ledger's file, for tests that fabricate rows or read a table."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

from janitor.ledger.db import Ledger

__all__ = ["raw_sql"]


@contextmanager
def raw_sql(ledger: Ledger) -> Iterator[sqlite3.Connection]:
    """A plain SQLite connection to a ledger's file (created first), committed on exit: for
    tests that fabricate rows (old lines, a daemon's forecast) or read a table directly."""
    with ledger.read():
        pass
    conn = sqlite3.connect(ledger.path, timeout=30)
    try:
        with conn:
            yield conn
    finally:
        conn.close()
