"""Mount points inside a tree: every one is a boundary, a bind mount of the same filesystem too.

A walk never leaves its tree's filesystem (``st_dev``), but ``mount --bind OUTSIDE TREE/bound``
puts a folder of the same filesystem there with the same device number: only the mount table
says it is another mount. Containers and devcontainers make such mounts all the time. So every
walk (the scanner, the deleter, the size of a folder) stops at every mount point below its top:

- on Linux, each folder entered is asked its mount id (``mnt_id`` in ``/proc/self/fdinfo``),
  which names the mount the descriptor is on, whatever was mounted or renamed meanwhile;
- everywhere (macOS, ``JANITOR_PORTABLE``), the mount table (``/proc/self/mountinfo``, else
  psutil's ``getfsstat``) gives the mount points below the top, and a folder is one when its
  device and inode are those of a mount point's root.

Both also give the mount points' paths, so a scan leaves them out before it even opens them.
"""

from __future__ import annotations

import os
import time
from abc import ABC, abstractmethod

from janitor.host.fastpaths import LINUX

__all__ = ["Boundary", "boundary", "mount_points", "mounts_under"]


def _unescape(field: str) -> str:
    """A path of /proc/self/mountinfo: spaces, tabs, newlines and backslashes are octal."""
    if "\\" not in field:
        return field
    out = bytearray()
    raw = field.encode("utf-8", "surrogateescape")
    i = 0
    while i < len(raw):
        if raw[i] == 0x5C and i + 3 < len(raw) and raw[i + 1 : i + 4].isdigit():
            out.append(int(raw[i + 1 : i + 4], 8))
            i += 4
        else:
            out.append(raw[i])
            i += 1
    return os.fsdecode(bytes(out))


#: The mount table read last, and when (monotonic): a walk per admission must not reread it.
_table: tuple[float, list[str]] = (-1.0, [])
#: How long a reading of the mount table is used again (a mount made within it is still caught
#: on Linux, where each folder entered is asked its mount id).
TABLE_TTL_S = 1.0


def mount_points(*, fresh: bool = False) -> list[str]:
    """Every mount point this process sees, as paths (read at most once a second, unless
    ``fresh``)."""
    global _table
    at, points = _table
    now = time.monotonic()
    if now - at < TABLE_TTL_S and not fresh:
        return points
    points = _read_table()
    _table = (now, points)
    return points


def _read_table() -> list[str]:
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
            return [_unescape(line.split(" ", 5)[4]) for line in f if line.count(" ") >= 5]
    except OSError:
        pass
    try:
        import psutil

        return [p.mountpoint for p in psutil.disk_partitions(all=True)]
    except Exception:
        return []


def mounts_under(top: str, *, fresh: bool = False) -> frozenset[str]:
    """The mount points strictly below ``top`` (``top`` itself is where a walk starts); with
    ``fresh``, from the mount table as it is now."""
    base = os.path.normpath(top).rstrip("/") + "/"
    points = (os.path.normpath(m) for m in mount_points(fresh=fresh))
    return frozenset(p for p in points if p.startswith(base))


class Boundary(ABC):
    """Where a walk from one top must stop: the mount points below it."""

    #: The mount points below the top, by path, as the mount table listed them when the walk
    #: started: a scan leaves them out of its listing.
    paths: frozenset[str]

    @abstractmethod
    def crosses(self, fd: int, st: os.stat_result) -> bool:
        """True when folder ``fd`` (``st``: its fstat), just entered, is another mount."""


class _MountIds(Boundary):
    """Linux: the mount id of every descriptor, from /proc/self/fdinfo."""

    def __init__(self, top_fd: int, paths: frozenset[str]) -> None:
        self.paths = paths
        self.top = _mount_id(top_fd)

    def crosses(self, fd: int, st: os.stat_result) -> bool:
        if self.top is None:
            return False
        mine = _mount_id(fd)
        return mine is not None and mine != self.top


class _MountRoots(Boundary):
    """Everywhere: the device and inode of each mount point's root below the top."""

    def __init__(self, paths: frozenset[str]) -> None:
        self.paths = paths
        roots = set()
        for p in paths:
            try:
                st = os.stat(p)  # the mounted folder, as a walk entering it sees it
            except OSError:
                continue
            roots.add((st.st_dev, st.st_ino))
        self.roots = frozenset(roots)

    def crosses(self, fd: int, st: os.stat_result) -> bool:
        return (st.st_dev, st.st_ino) in self.roots


def _mount_id(fd: int) -> int | None:
    try:
        with open(f"/proc/self/fdinfo/{fd}", encoding="ascii") as f:
            for line in f:
                if line.startswith("mnt_id:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def boundary(top_fd: int, top: str) -> Boundary:
    """The boundary of a walk from folder ``top`` (open as ``top_fd``)."""
    paths = mounts_under(top)
    if LINUX and _mount_id(top_fd) is not None:
        return _MountIds(top_fd, paths)
    return _MountRoots(paths)
