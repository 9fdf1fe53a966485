"""Real bytes on a volume: files written block by block (never sparse), a volume filled until it
says ENOSPC, and its free space read fresh from ``statvfs``."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

import pytest

KiB = 1024
MiB = 1024 * 1024

__all__ = [
    "KiB",
    "MiB",
    "fill",
    "fill_file",
    "fill_until_full",
    "free_bytes",
    "free_of",
    "total_of",
]


def fill_file(path: Path, nbytes: int, *, chunk: int = MiB) -> Path:
    """Append ``nbytes`` of real data to ``path`` (created with its parents) and fsync it.

    The bytes are written, never seeked over, so the file is not sparse and its ``st_blocks``
    count all of them.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    block = (os.urandom(64) * (chunk // 64 + 1))[:chunk]
    with open(path, "ab") as fh:
        left = nbytes
        while left > 0:
            n = min(left, chunk)
            fh.write(block[:n])
            left -= n
        fh.flush()
        os.fsync(fh.fileno())
    return path


def free_of(path: Path) -> int:
    """Bytes free to an unprivileged writer on ``path``'s volume: ``f_bavail * f_frsize``."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def total_of(path: Path) -> int:
    """Size of ``path``'s volume: ``f_blocks * f_frsize``."""
    st = os.statvfs(path)
    return st.f_blocks * st.f_frsize


@pytest.fixture
def fill() -> Callable[..., Path]:
    """``fill(path, nbytes)``: write ``nbytes`` of real bytes to ``path`` (appends; fsynced)."""
    return fill_file


@pytest.fixture
def fill_until_full() -> Callable[[Path], int]:
    """``fill_until_full(path) -> int``: write to ``path`` until ENOSPC; returns bytes written."""

    def run(path: Path) -> int:
        path.parent.mkdir(parents=True, exist_ok=True)
        written = 0
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            for size in (MiB, 64 * 1024, 4096, 512, 1):
                block = b"\x5a" * size
                while True:
                    try:
                        n = os.write(fd, block)
                    except OSError as exc:
                        if exc.errno != errno.ENOSPC:
                            raise
                        break
                    written += n
                    if n < size:
                        break
        finally:
            os.close(fd)
        return written

    return run


@pytest.fixture
def free_bytes() -> Callable[[Path], int]:
    """``free_bytes(path) -> int``: ``f_bavail * f_frsize`` of ``path``'s volume, read now."""
    return free_of
