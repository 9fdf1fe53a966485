"""Fixtures of the command line's tests: the ledger's logical content, as a dump."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture
def ledger_dump() -> Callable[[Path], list[str]]:
    """``ledger_dump(path) -> list[str]``: the ledger's SQL dump, read through a ro connection."""

    def dump(path: Path) -> list[str]:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            return list(conn.iterdump())
        finally:
            conn.close()

    return dump
