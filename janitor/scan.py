"""Scanning: one pass over a tree into an immutable snapshot, touching nothing.

The walk never follows a symlink, never crosses into another filesystem, counts a hard-linked
file once, takes names that are not valid UTF-8 (kept with ``surrogateescape``, as ``os`` does),
and skips a folder that vanishes, cannot be read or is swapped for another between its lstat and
its open, counting it instead of failing.
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
from typing import NamedTuple, cast

__all__ = ["Entry", "Snapshot", "display_path", "gc_paused", "scan"]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_REPORT_EVERY = 4096  # entries between two progress calls


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
    # Folders are opened relative to their parent's descriptor with O_NOFOLLOW, and entries are
    # lstat'ed relative to it (fstatat): no symlink can redirect the walk, and the kernel does not
    # resolve the whole path again for every file, which is most of the walk's cost.
    flags = _DIR_FLAGS
    try:
        root_fd = os.open(root, flags)
    except OSError:
        return Snapshot(root, device, rst.st_ino, taken, (), 1, exists=False)
    try:
        fst = os.fstat(root_fd)
    except OSError:
        fst = None
    if fst is None or (fst.st_dev, fst.st_ino) != (device, rst.st_ino):
        os.close(root_fd)
        return Snapshot(root, device, rst.st_ino, taken, (), 1, exists=False)
    entries: list[Entry] = []
    skipped = 0
    # (folder's descriptor, its path + "/", its path relative to the root + "/" or "", depth)
    stack: list[tuple[int, str, str, int]] = [(root_fd, root + "/", "", 0)]
    try:
        skipped = _walk(stack, entries, device, progress, max_depth)
    finally:
        for fd, *_ in stack:  # left open only when the walk was interrupted
            os.close(fd)
    if progress is not None:
        progress(len(entries))
    return Snapshot(root, device, rst.st_ino, taken, tuple(entries), skipped)


def _walk(
    stack: list[tuple[int, str, str, int]],
    entries: list[Entry],
    device: int,
    progress: Callable[[int], None] | None,
    max_depth: int | None,
) -> int:
    """Drain ``stack`` depth first into ``entries``; the number of folders skipped.

    The loop body runs once per file and is most of the scan's Python time, so every name it
    needs is a local, each entry is built with ``tuple.__new__`` (the NamedTuple constructor is a
    Python-level call per file) and its path with one concatenation, and the device number stored
    is the root's own int object (equal by then), one allocation less per entry: the memory the
    snapshot holds (about half a KiB a file, all freshly faulted in) is much of the scan's cost.
    """
    append = entries.append
    pop = stack.pop
    push = stack.append
    new = cast("Callable[[type[Entry], tuple[object, ...]], Entry]", tuple.__new__)
    scandir = os.scandir
    open_ = os.open
    close = os.close
    fstat = os.fstat
    s_isdir = stat.S_ISDIR
    flags = _DIR_FLAGS
    seen: set[int] = set()  # inodes of multiply-linked files already listed (one device)
    skipped = 0
    next_report = _REPORT_EVERY
    while stack:
        fd, prefix, rel_prefix, depth = pop()
        descend = max_depth is None or depth + 1 < max_depth
        try:
            it = scandir(fd)
        except OSError:
            close(fd)
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
                        ino = st.st_ino
                        if ino in seen:
                            continue
                        seen.add(ino)
                    name = d.name
                    rel = rel_prefix + name
                    append(
                        new(
                            Entry,
                            (
                                prefix + name,
                                rel,
                                st.st_blocks * 512,
                                st.st_ino,
                                device,
                                st.st_mtime,
                                st.st_atime,
                                st.st_ctime,
                                st.st_uid,
                                mode,
                                st.st_size,
                            ),
                        )
                    )
                    if descend and s_isdir(mode):
                        try:
                            child = open_(name, flags, dir_fd=fd)
                        except OSError:
                            skipped += 1
                            continue
                        # The folder opened must be the one just lstat'ed, not one renamed or
                        # mounted into its place in between.
                        try:
                            cst = fstat(child)
                        except OSError:
                            cst = None
                        if cst is None or cst.st_ino != st.st_ino or cst.st_dev != device:
                            close(child)
                            skipped += 1
                            continue
                        push((child, prefix + name + "/", rel + "/", depth + 1))
        except OSError:
            skipped += 1  # the listing itself failed part way (an I/O error, a revoked mount)
        finally:
            close(fd)
        if progress is not None and len(entries) >= next_report:
            progress(len(entries))
            next_report = len(entries) + _REPORT_EVERY
    return skipped
