"""How the ledger stores a path: as text, or as the raw bytes of a name that is not UTF-8."""

from __future__ import annotations

import os

__all__ = ["db_path", "py_path"]


def db_path(path: str) -> str | bytes:
    """A path as the ledger stores it: text, or the raw bytes of a name that is not UTF-8."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return os.fsencode(path)
    return path


def py_path(value: str | bytes) -> str:
    """A stored path back as ``os`` spells it (undecodable bytes as surrogates)."""
    return os.fsdecode(value) if isinstance(value, bytes) else value
