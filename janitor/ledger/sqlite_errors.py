"""What a SQLite error means to whoever uses the ledger: each becomes one ``LedgerError`` that
names the problem and the fix (a full disk is ``LedgerFull``, exit 75: retry later).

Codes are SQLite's primary result codes, the low byte of ``sqlite_errorcode``.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from janitor.config.state_dir import access_error
from janitor.errors import LedgerBusy, LedgerError, LedgerFull

__all__ = ["SQLITE_BUSY", "SQLITE_LOCKED", "primary_code", "translate"]

SQLITE_BUSY = 5
SQLITE_LOCKED = 6
_SQLITE_READONLY = 8
_SQLITE_IOERR = 10
_SQLITE_CORRUPT = 11
_SQLITE_FULL = 13
_SQLITE_CANTOPEN = 14
_SQLITE_NOTADB = 26


def primary_code(exc: sqlite3.Error) -> int:
    """SQLite's primary result code of ``exc`` (0 when it carries none)."""
    return getattr(exc, "sqlite_errorcode", 0) & 0xFF


def translate(exc: sqlite3.Error, path: Path, lock_timeout: float) -> LedgerError:
    """The LedgerError to raise for ``exc``, met on the ledger at ``path``."""
    code = primary_code(exc)
    if code == _SQLITE_FULL or (code == _SQLITE_IOERR and _volume_full(path.parent)):
        return LedgerFull(
            f"the ledger's disk is full ({path.parent}): nothing was changed (no "
            "grant, no deletion); free some space there and retry"
        )
    if code in (_SQLITE_CORRUPT, _SQLITE_NOTADB):
        return LedgerError(
            f"ledger {path} is corrupt ({exc}); move it aside and space-janitor "
            "will start a new one"
        )
    if code in (_SQLITE_READONLY, _SQLITE_CANTOPEN):
        return access_error(path, PermissionError(13, str(exc)), "write the ledger")
    if code in (SQLITE_BUSY, SQLITE_LOCKED):
        return LedgerBusy(
            f"ledger {path} stayed locked for {lock_timeout:g}s; another "
            "process holds it (raise lock_timeout_s or find the stuck process)"
        )
    return LedgerError(f"ledger {path}: {exc}")


def _volume_full(folder: Path) -> bool:
    try:
        st = os.statvfs(folder)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < 64 * 1024
