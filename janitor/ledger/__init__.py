"""The ledger: one SQLite database, its fair writer lock, and one module per table.

``Ledger`` (db) opens the file and hands out transactions (tx); each table (reservations, pins
and touches, jobs and waiters, log, volumes, samples) keeps its statements behind methods named
for what they do.
Every SQL statement the janitor runs lives in this package.
"""

from __future__ import annotations

from janitor.ledger.db import Ledger
from janitor.ledger.log import LogEntry
from janitor.ledger.tx import Tx

__all__ = ["Ledger", "LogEntry", "Tx"]
