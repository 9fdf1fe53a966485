"""Ballast: a preallocated file per volume, given back at once when the volume turns critical.

Like a ship's ballast, it holds space in reserve: when something outside the janitor fills the
disk anyway, deleting the ballast gives the machine (and the janitor's own ledger) room to keep
working while jobs stop. It is recreated only once free space is back above free_target.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Ballast", "ballast_path"]

BALLAST_NAME = ".space-janitor-ballast"
_CHUNK = 1024 * 1024


def ballast_path(state_dir: Path, tree_roots: list[Path], device: int) -> Path | None:
    """Where a volume's ballast lives: the state dir if it is on that volume, else beside (not
    inside) the first tree root on it, so no sweep ever sees it. None if neither fits."""
    try:
        if os.stat(state_dir).st_dev == device:
            return state_dir / f"ballast-{device}"
    except OSError:
        pass
    for root in tree_roots:
        parent = root.parent
        try:
            if os.stat(parent).st_dev == device and os.access(parent, os.W_OK):
                return parent / BALLAST_NAME
        except OSError:
            continue
    return None


@dataclass
class Ballast:
    """The ballast file of one volume."""

    path: Path
    size: int

    def present(self) -> bool:
        """True when the file exists with (at least) its full allocated size."""
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            return False
        return st.st_blocks * 512 >= self.size

    def create(self) -> bool:
        """Allocate the file (posix_fallocate, or written zeros where unsupported).

        Returns False, leaving nothing behind, if the volume has no room for it.
        """
        if self.present():
            return True
        tmp = self.path.with_name(self.path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            try:
                os.posix_fallocate(fd, 0, self.size)
            except OSError as exc:
                if exc.errno == errno.ENOSPC:
                    raise
                _write_zeros(fd, self.size)  # EOPNOTSUPP/EINVAL: filesystems without fallocate
            os.fsync(fd)
        except OSError:
            os.close(fd)
            os.unlink(tmp)
            return False
        os.close(fd)
        os.replace(tmp, self.path)
        return True

    def release(self) -> int:
        """Delete the ballast; returns the bytes it held (0 if there was none)."""
        try:
            st = os.lstat(self.path)
            os.unlink(self.path)
        except FileNotFoundError:
            return 0
        return st.st_blocks * 512


def _write_zeros(fd: int, size: int) -> None:
    block = bytes(_CHUNK)
    left = size
    while left > 0:
        n = os.write(fd, block[: min(left, _CHUNK)])
        left -= n
