"""Tests of ``janitor.ledger``: the SQLite ledger, its writer lock, reads on a full disk."""
