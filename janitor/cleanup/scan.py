"""Scanning: one pass over a tree into an immutable snapshot, touching nothing.

The walk never follows a symlink, never crosses into another filesystem (a bind mount of this
one included: every mount point below the root is a boundary), counts a hard-linked
file once, takes names that are not valid UTF-8 (kept with ``surrogateescape``, as ``os`` does),
and skips a folder that vanishes, cannot be read or is swapped for another between its lstat and
its open, counting it instead of failing. Trees of any depth are walked without recursion and
with a bounded number of open folders, relative to their parents (``janitor.host.fdwalk``): no full
path longer than the root's is ever passed to the kernel.
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

from janitor.host.fdwalk import DIR_FLAGS, FolderChain, FolderChanged
from janitor.host.mounts import boundary

__all__ = ["Entry", "Snapshot", "display_path", "gc_paused", "scan"]

_DIR_FLAGS = DIR_FLAGS
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
    try:
        root_fd = os.open(root, _DIR_FLAGS)
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
    edge = boundary(root_fd, root)
    chain = FolderChain(root_fd, boundary=edge)
    try:
        skipped = _walk(chain, root, entries, device, progress, max_depth, edge.paths)
    finally:
        chain.close()  # every folder below the root the walk still had open
        os.close(root_fd)
    if progress is not None:
        progress(len(entries))
    return Snapshot(root, device, rst.st_ino, taken, tuple(entries), skipped)


def _walk(
    chain: FolderChain,
    root: str,
    entries: list[Entry],
    device: int,
    progress: Callable[[int], None] | None,
    max_depth: int | None,
    mounts: frozenset[str] = frozenset(),
) -> int:
    """Walk the tree below ``chain``'s top depth first into ``entries``; the number of folders
    skipped. ``mounts``: the mount points below the top (left out, with what is below them).

    No recursion and no full paths: each folder is opened relative to its parent (``chain``
    keeps a bounded number open however deep the tree goes), and its subfolders wait in a list
    per level of the chain, as (name, inode, path, rel, depth). The order is the one of a stack
    of folders: a folder's entries, then its subfolders' trees, the last listed first.

    The loop body runs once per file and is most of the scan's Python time, so every name it
    needs is a local, each entry is built with ``tuple.__new__`` (the NamedTuple constructor is a
    Python-level call per file) and its path with one concatenation, and the device number stored
    is the root's own int object (equal by then), one allocation less per entry: the memory the
    snapshot holds (about half a KiB a file, all freshly faulted in) is much of the scan's cost.
    A snapshot holds every entry's full path: a deep tree costs memory in the sum of its paths'
    lengths (10,000 levels of one-letter names: about 200 MB).
    """
    append = entries.append
    new = cast("Callable[[type[Entry], tuple[object, ...]], Entry]", tuple.__new__)
    scandir = os.scandir
    s_isdir = stat.S_ISDIR
    seen: set[int] = set()  # inodes of multiply-linked files already listed (one device)
    skipped = 0
    next_report = _REPORT_EVERY
    # Per level of the chain: the subfolders not yet walked (name, ino, path, rel, depth).
    todo: list[list[tuple[str, int, str, str, int]]] = []
    here: tuple[str, str, int] | None = (root, "", 0)  # the folder to list: path, rel, depth
    while True:
        if here is not None:
            path, rel_dir, depth = here
            here = None
            prefix = path + "/"
            rel_prefix = rel_dir + "/" if rel_dir else ""
            descend = max_depth is None or depth + 1 < max_depth
            subs: list[tuple[str, int, str, str, int]] = []
            todo.append(subs)
            push = subs.append
            try:
                with scandir(chain.fd) as it:
                    for d in it:
                        try:
                            st = d.stat(follow_symlinks=False)
                        except OSError:
                            continue  # vanished between readdir and lstat
                        if st.st_dev != device:
                            continue  # a mount point inside the tree: never ours
                        if mounts and prefix + d.name in mounts:
                            continue  # a bind mount has the tree's device: the table says
                        mode = st.st_mode
                        if st.st_nlink > 1 and not s_isdir(mode):
                            ino = st.st_ino
                            if ino in seen:
                                continue
                            seen.add(ino)
                        name = d.name
                        rel = rel_prefix + name
                        full = prefix + name
                        append(
                            new(
                                Entry,
                                (
                                    full,
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
                            push((name, st.st_ino, full, rel, depth + 1))
            except OSError:
                skipped += 1  # it cannot be listed, or the listing failed part way (I/O error)
            if progress is not None and len(entries) >= next_report:
                progress(len(entries))
                next_report = len(entries) + _REPORT_EVERY
        subs = todo[-1]
        if subs:
            name, ino, path, rel_dir, depth = subs.pop()
            try:
                # The folder opened must be the one just lstat'ed, not one renamed or mounted
                # into its place in between.
                chain.enter(name, ino)
            except (OSError, FolderChanged):
                skipped += 1
                continue
            here = (path, rel_dir, depth)
            continue
        todo.pop()
        if not todo:
            return skipped
        if not chain.leave():
            # The parent moved away while its subtree was walked: what it still had to walk
            # cannot be reached as the folder that was listed.
            skipped += len(todo[-1])
            todo[-1].clear()
