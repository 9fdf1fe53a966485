"""Volumes and sizes as the kernel reports them.

A volume is a filesystem, named by ``st_dev``; trees on one volume share its free space and its
floor. Free space is what an unprivileged writer can use (``f_bavail * f_frsize``), and sizes are
allocated bytes (``st_blocks * 512``), so a sparse or compressed file counts what it really takes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from janitor.host.fdwalk import tree_size

__all__ = [
    "VolumeStats",
    "allocated_size",
    "device_of",
    "existing_ancestor",
    "mount_point",
    "volume_stats",
]


@dataclass(frozen=True, slots=True)
class VolumeStats:
    """One statvfs reading of a volume."""

    device: int
    mount: str
    total: int
    free: int

    @property
    def used(self) -> int:
        """Bytes not free to an unprivileged writer (includes root's reserve)."""
        return self.total - self.free


def existing_ancestor(path: Path | str) -> Path:
    """``path`` itself if it exists, else its nearest existing parent (a tree not yet created)."""
    p = Path(os.path.abspath(path))
    while not os.path.lexists(p) and p != p.parent:
        p = p.parent
    return p


def device_of(path: Path | str) -> int:
    """The ``st_dev`` of ``path``'s volume (of its nearest existing ancestor if it is missing)."""
    return os.stat(existing_ancestor(path)).st_dev


_MOUNTS: dict[tuple[str, int], str] = {}


def mount_point(path: Path | str) -> str:
    """The folder where ``path``'s volume is mounted: ``/`` or ``/System/Volumes/Data`` ..."""
    p = existing_ancestor(path)
    dev = os.stat(p).st_dev
    # Walking up costs a stat per level on every admission; a path's mount point changes only
    # when something is mounted or unmounted, which changes the device it reports.
    key = (str(p), dev)
    cached = _MOUNTS.get(key)
    if cached is not None:
        return cached
    mount = _walk_up(p, dev)
    if len(_MOUNTS) > 1024:
        _MOUNTS.clear()
    _MOUNTS[key] = mount
    return mount


def _walk_up(p: Path, dev: int) -> str:
    while p != p.parent:
        parent = p.parent
        if os.stat(parent).st_dev != dev:
            break
        p = parent
    return str(p)


def volume_stats(path: Path | str) -> VolumeStats:
    """A fresh statvfs of ``path``'s volume (no caching: admission needs the real number)."""
    p = existing_ancestor(path)
    st = os.statvfs(p)
    return VolumeStats(
        device=os.stat(p).st_dev,
        mount=mount_point(p),
        total=st.f_blocks * st.f_frsize,
        free=st.f_bavail * st.f_frsize,
    )


def allocated_size(path: Path | str) -> int:
    """Allocated bytes of a file, or of a folder's whole tree; 0 if it does not exist.

    Never follows symlinks, never crosses into another filesystem, counts hard links once, and
    skips whatever vanishes while it walks, so it is safe on a tree that a job is writing. Any
    depth: the walk goes folder by folder relative to its parent (no path longer than ``path``
    reaches the kernel, no recursion).
    """
    return tree_size(path)
