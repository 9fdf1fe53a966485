"""One open ledger transaction, and the tables it reaches, each behind named methods.

``Ledger.write()`` and ``Ledger.read()`` hand out a ``Tx``, never a connection: every SQL
statement the janitor runs stands in this package.
"""

from __future__ import annotations

import sqlite3

from janitor.ledger.draws import Draws
from janitor.ledger.jobs import Jobs, Waiters
from janitor.ledger.log import Log
from janitor.ledger.pins import Pins, Touches
from janitor.ledger.reservations import Reservations
from janitor.ledger.samples import Samples
from janitor.ledger.volumes import Volumes

__all__ = ["Tx"]


class Tx:
    """The tables, inside one transaction (read-only when it came from ``Ledger.read()``)."""

    __slots__ = (
        "draws", "jobs", "log", "pins", "reservations", "samples", "touches", "volumes", "waiters"
    )  # fmt: skip

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.log = Log(conn)
        self.reservations = Reservations(conn)
        self.pins = Pins(conn, self.log)
        self.touches = Touches(conn)
        self.samples = Samples(conn)
        self.volumes = Volumes(conn)
        self.jobs = Jobs(conn)
        self.waiters = Waiters(conn)
        self.draws = Draws(conn)
