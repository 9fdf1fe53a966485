"""Walking trees of any depth: no recursion, no full paths, a bounded number of open folders.

A tree may hold a folder ten thousand levels deep (the classic way to break a tmp cleaner). Its
full path is then far longer than PATH_MAX, so nothing here passes a path to the kernel below
the walk's top: every folder is opened relative to its parent's descriptor, without following
symlinks. The walk loops instead of recursing, and :class:`FolderChain` keeps at most a few
dozen of the chain's folders open, reopening a closed one through ``..`` of its child (checked
to be the very folder left before) when the walk climbs back to it.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from janitor.host.mounts import Boundary, boundary

__all__ = ["DIR_FLAGS", "FolderChain", "FolderChanged", "TreeShape", "tree_shape", "tree_size"]

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: Folders of a chain kept open below its top: deeper than this, the shallowest are closed.
CHAIN_FDS = 32


class FolderChanged(Exception):
    """A folder is not the one the walk saw: replaced, moved away, or on another filesystem."""


class FolderChain:
    """The folders from a walk's top down to where it is now, each opened relative to its
    parent; the deepest is always open (``fd``), at most ``budget`` below the top are.

    ``enter`` goes one level down, ``leave`` one level up. A folder closed to stay within the
    budget is reopened when the walk comes back to it: through ``..`` of the folder just left
    (one system call), else down again from the top by name; either way it must be the same
    inode on the same device, or ``leave`` says so and the caller skips what is left in it.
    The top's descriptor belongs to the caller and is never closed here.
    """

    __slots__ = ("_first_open", "_inos", "_names", "boundary", "budget", "device", "fds")

    def __init__(
        self, top_fd: int, *, budget: int = CHAIN_FDS, boundary: Boundary | None = None
    ) -> None:
        st = os.fstat(top_fd)
        self.device = st.st_dev
        #: The mount points the walk must not enter (a bind mount has the top's device).
        self.boundary = boundary
        self.budget = max(1, budget)
        self.fds = [top_fd]  # -1: closed to save descriptors
        self._inos = [st.st_ino]
        self._names = [""]
        # fds[1:_first_open] are closed, fds[_first_open:] open: the walk closes the shallowest
        # ones first and reopens only the deepest, so the closed ones are always a prefix.
        self._first_open = 1

    @property
    def fd(self) -> int:
        """The descriptor of the folder the walk is in (always open)."""
        return self.fds[-1]

    @property
    def depth(self) -> int:
        """Levels below the top (0: at the top)."""
        return len(self.fds) - 1

    def enter(self, name: str, ino: int | None = None) -> int:
        """Open folder ``name`` of the current one and go into it; its descriptor.

        OSError if it cannot be opened (gone, a symlink, not a folder); FolderChanged if it is
        on another filesystem or not inode ``ino`` (the one the caller saw).
        """
        if name in ("", ".", ".."):
            raise FolderChanged("bad path component")
        fd = os.open(name, DIR_FLAGS, dir_fd=self.fds[-1])
        try:
            st = os.fstat(fd)
            if st.st_dev != self.device:
                raise FolderChanged("folder is on another filesystem")
            if self.boundary is not None and self.boundary.crosses(fd, st):
                raise FolderChanged("folder is a mount point (another filesystem mounted there)")
            if ino is not None and st.st_ino != ino:
                raise FolderChanged("replaced since the scan")
        except BaseException:
            os.close(fd)
            raise
        self.fds.append(fd)
        self._inos.append(st.st_ino)
        self._names.append(name)
        if len(self.fds) - self._first_open > self.budget:
            k = self._first_open
            os.close(self.fds[k])
            self.fds[k] = -1
            self._first_open = k + 1
        return fd

    def leave(self) -> bool:
        """Go back up one level; False if the folder there could not be reopened as the very
        one left (moved meanwhile): then ``fd`` is -1 and the caller skips the rest of it."""
        if len(self.fds) < 2:
            raise ValueError("already at the top of the chain")
        child = self.fds.pop()
        self._inos.pop()
        self._names.pop()
        k = len(self.fds) - 1
        try:
            if self.fds[k] >= 0:
                return True
            fd = self._reopen_up(child, k) if child >= 0 else -1
            if fd < 0:
                fd = self._reopen_down(k)
            if fd < 0:
                self._first_open = k + 1
                return False
            self.fds[k] = fd
            self._first_open = k
            return True
        finally:
            if child >= 0:
                os.close(child)

    def _same(self, fd: int, k: int) -> bool:
        st = os.fstat(fd)
        return st.st_dev == self.device and st.st_ino == self._inos[k]

    def _reopen_up(self, child: int, k: int) -> int:
        try:
            fd = os.open("..", DIR_FLAGS, dir_fd=child)
        except OSError:
            return -1
        if self._same(fd, k):
            return fd
        os.close(fd)
        return -1

    def _reopen_down(self, k: int) -> int:
        """Open level ``k`` again from the nearest open level above it, name by name."""
        j = k - 1
        while j > 0 and self.fds[j] < 0:
            j -= 1
        fd = self.fds[j]
        mine = False
        try:
            for level in range(j + 1, k + 1):
                nxt = os.open(self._names[level], DIR_FLAGS, dir_fd=fd)
                if mine:
                    os.close(fd)
                fd, mine = nxt, True
                if not self._same(fd, level):
                    os.close(fd)
                    return -1
            return fd
        except OSError:
            if mine:
                os.close(fd)
            return -1

    def close(self) -> None:
        """Close every descriptor the chain opened (not the top's)."""
        for fd in self.fds[1:]:
            if fd >= 0:
                os.close(fd)
        del self.fds[1:], self._inos[1:], self._names[1:]
        self._first_open = 1


def _listing(fd: int) -> list[os.DirEntry[str]]:
    with os.scandir(fd) as it:
        return list(it)


def tree_size(path: Path | str) -> int:
    """Allocated bytes of a file, or of a folder's whole tree, of any depth; 0 if missing.

    Never follows symlinks, never crosses into another filesystem (nor a bind mount of this
    one: janitor.host.mounts), counts hard links once, and
    skips whatever vanishes or cannot be read while it walks. A ``path`` itself too long for
    the kernel (ENAMETOOLONG) measures 0, like a missing one.
    """
    try:
        st = os.lstat(path)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ENAMETOOLONG):
            return 0
        raise
    total = st.st_blocks * 512
    if not stat.S_ISDIR(st.st_mode):
        return total
    try:
        top = os.open(path, DIR_FLAGS)
    except OSError:
        return total
    try:
        fst = os.fstat(top)
        if (fst.st_dev, fst.st_ino) != (st.st_dev, st.st_ino):
            return total  # swapped between the lstat and the open
        device = st.st_dev
        seen: set[int] = set()
        chain = FolderChain(top, boundary=boundary(top, os.fspath(path)))
        try:
            todo: list[list[tuple[str, int]]] = []
            listing: list[tuple[str, int]] | None = None
            while True:
                if listing is None:
                    listing = []
                    try:
                        entries = _listing(chain.fd)
                    except OSError:
                        entries = []
                    for d in entries:
                        try:
                            est = d.stat(follow_symlinks=False)
                        except OSError:
                            continue
                        if est.st_dev != device:
                            continue
                        isdir = stat.S_ISDIR(est.st_mode)
                        if est.st_nlink > 1 and not isdir:
                            if est.st_ino in seen:
                                continue
                            seen.add(est.st_ino)
                        total += est.st_blocks * 512
                        if isdir:
                            listing.append((d.name, est.st_ino))
                    todo.append(listing)
                if todo[-1]:
                    name, ino = todo[-1].pop()
                    try:
                        chain.enter(name, ino)
                    except (OSError, FolderChanged):
                        continue
                    listing = None
                    continue
                todo.pop()
                if not todo:
                    return total
                if not chain.leave():
                    todo[-1].clear()
        finally:
            chain.close()
    finally:
        os.close(top)


@dataclass(frozen=True, slots=True)
class TreeShape:
    """How many folders a tree holds and how deep and long its deepest folder path is."""

    folders: int  # the top included
    depth: int  # levels below the top of the deepest folder
    longest: int  # bytes of the longest folder path below the top, "a/b/c" (0: none)
    complete: bool = True  # False when the walk stopped at a limit


def tree_shape(
    path: Path | str, *, max_depth: int | None = None, max_length: int | None = None
) -> TreeShape:
    """Count the folders of a tree (not crossing filesystems, not following symlinks), and
    find its deepest and longest folder paths; stops early once past ``max_depth`` levels or
    ``max_length`` bytes of relative path. A missing or unreadable top counts as one folder."""
    try:
        top = os.open(path, DIR_FLAGS)
    except OSError:
        return TreeShape(1, 0, 0)
    folders = 1
    depth = longest = 0
    try:
        device = os.fstat(top).st_dev
        chain = FolderChain(top, boundary=boundary(top, os.fspath(path)))
        lengths = [0]  # bytes of each level's relative path
        try:
            todo: list[list[tuple[str, int]]] = []
            listing: list[tuple[str, int]] | None = None
            while True:
                if listing is None:
                    listing = []
                    try:
                        entries = _listing(chain.fd)
                    except OSError:
                        entries = []
                    for d in entries:
                        try:
                            if not d.is_dir(follow_symlinks=False):
                                continue
                            est = d.stat(follow_symlinks=False)
                        except OSError:
                            continue
                        if est.st_dev == device:
                            listing.append((d.name, est.st_ino))
                    folders += len(listing)
                    todo.append(listing)
                if todo[-1]:
                    name, ino = todo[-1].pop()
                    try:
                        chain.enter(name, ino)
                    except (OSError, FolderChanged):
                        continue
                    length = lengths[-1] + len(os.fsencode(name)) + (1 if lengths[-1] else 0)
                    lengths.append(length)
                    depth = max(depth, chain.depth)
                    longest = max(longest, length)
                    if (max_depth is not None and depth > max_depth) or (
                        max_length is not None and longest > max_length
                    ):
                        return TreeShape(folders, depth, longest, complete=False)
                    listing = None
                    continue
                todo.pop()
                if not todo:
                    return TreeShape(folders, depth, longest)
                lengths.pop()
                if not chain.leave():
                    todo[-1].clear()
        finally:
            chain.close()
    finally:
        os.close(top)
