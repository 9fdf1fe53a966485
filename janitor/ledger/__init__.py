"""The ledger: one SQLite database, its fair writer lock, and one module per table.

Every SQL statement the janitor runs lives in this package.
"""
