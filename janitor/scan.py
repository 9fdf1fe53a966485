"""Scanning: one pass over a tree into an immutable snapshot, touching nothing.

The walk never follows a symlink, never crosses into another filesystem, counts a hard-linked
file once, takes names that are not valid UTF-8 (kept with ``surrogateescape``, as ``os`` does),
and skips a folder that vanishes or cannot be read, counting it instead of failing.
"""

from __future__ import annotations

import gc
import os
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

__all__ = ["Entry", "Snapshot", "display_path", "gc_paused", "scan"]


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic GC while building a million small tuples that hold no cycles.

    Each allocation burst otherwise triggers collections that re-traverse every entry built so
    far, which costs more than the walk itself on big trees.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class Entry(NamedTuple):
    """One file, folder or symlink of a tree, as lstat saw it (sizes are allocated bytes)."""

    path: str
    rel: str
    size: int
    ino: int
    dev: int
    mtime: float
    atime: float
    ctime: float
    uid: int
    mode: int
    length: int  # st_size: compared again right before a delete

    @property
    def is_dir(self) -> bool:
        """True for a real folder (symlinks to folders are not folders here)."""
        return stat.S_ISDIR(self.mode)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A tree at one moment: its root's identity and every entry below it, in walk order."""

    root: str
    device: int
    root_ino: int
    taken: float
    entries: tuple[Entry, ...]
    skipped: int = 0  # folders that vanished or could not be read
    exists: bool = True

    @property
    def total(self) -> int:
        """Allocated bytes of every entry (hard links once), root folder excluded."""
        return sum(e.size for e in self.entries)

    def files(self) -> list[Entry]:
        """Entries that are not folders (regular files, symlinks, fifos ...)."""
        return [e for e in self.entries if not stat.S_ISDIR(e.mode)]


def display_path(path: str) -> str:
    """A path safe to print: undecodable bytes shown as U+FFFD instead of raising."""
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def scan(
    root: Path | str,
    *,
    progress: Callable[[int], None] | None = None,
    max_depth: int | None = None,
) -> Snapshot:
    """Walk ``root`` (without following symlinks or leaving its filesystem) into a Snapshot.

    A missing root gives an empty snapshot with ``exists=False``. ``progress`` is called with the
    running entry count every few thousand entries, for a progress bar.
    """
    with gc_paused():
        return _scan(root, progress=progress, max_depth=max_depth)


def _scan(
    root: Path | str,
    *,
    progress: Callable[[int], None] | None = None,
    max_depth: int | None = None,
) -> Snapshot:
    root = os.path.normpath(os.path.abspath(os.fspath(root)))
    if root == "/":
        raise ValueError("refusing to scan / as a tree")
    try:
        rst = os.lstat(root)
    except FileNotFoundError:
        return Snapshot(root, 0, 0, time.time(), (), 0, exists=False)
    if not stat.S_ISDIR(rst.st_mode):
        # A root swapped for a symlink or a file is not a tree we manage.
        return Snapshot(root, rst.st_dev, rst.st_ino, time.time(), (), 1, exists=False)
    device = rst.st_dev
    taken = time.time()
    entries: list[Entry] = []
    append = entries.append
    seen: set[tuple[int, int]] = set()
    skipped = 0
    # Folders are opened relative to their parent's descriptor with O_NOFOLLOW, and entries are
    # lstat'ed relative to it (fstatat): no symlink can redirect the walk, and the kernel does not
    # resolve the whole path again for every file, which is most of the walk's cost.
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        root_fd = os.open(root, flags)
    except OSError:
        return Snapshot(root, device, rst.st_ino, taken, (), 1, exists=False)
    if os.fstat(root_fd).st_ino != rst.st_ino:
        os.close(root_fd)
        return Snapshot(root, device, rst.st_ino, taken, (), 1, exists=False)
    stack: list[tuple[int, str, str, int]] = [(root_fd, root, "", 0)]
    s_isdir = stat.S_ISDIR
    next_report = 4096
    while stack:
        fd, folder, rel_folder, depth = stack.pop()
        try:
            it = os.scandir(fd)
        except OSError:
            os.close(fd)
            skipped += 1
            continue
        try:
            with it:
                for d in it:
                    try:
                        st = d.stat(follow_symlinks=False)
                    except OSError:
                        continue  # vanished between readdir and lstat
                    if st.st_dev != device:
                        continue  # a mount point inside the tree: never ours
                    mode = st.st_mode
                    if st.st_nlink > 1 and not s_isdir(mode):
                        key = (st.st_dev, st.st_ino)
                        if key in seen:
                            continue
                        seen.add(key)
                    name = d.name
                    path = folder + "/" + name
                    rel = rel_folder + name
                    append(
                        Entry(
                            path,
                            rel,
                            st.st_blocks * 512,
                            st.st_ino,
                            st.st_dev,
                            st.st_mtime,
                            st.st_atime,
                            st.st_ctime,
                            st.st_uid,
                            mode,
                            st.st_size,
                        )
                    )
                    if s_isdir(mode) and (max_depth is None or depth + 1 < max_depth):
                        try:
                            child = os.open(name, flags, dir_fd=fd)
                        except OSError:
                            skipped += 1
                            continue
                        stack.append((child, path, rel + "/", depth + 1))
        finally:
            os.close(fd)
        if progress is not None and len(entries) >= next_report:
            progress(len(entries))
            next_report = len(entries) + 4096
    if progress is not None:
        progress(len(entries))
    return Snapshot(root, device, rst.st_ino, taken, tuple(entries), skipped)
