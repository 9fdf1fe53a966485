"""Removing a folder unit (the ``dir`` kind: a job's ``.tmpXXXXXX`` folder), at any depth.

The whole folder is checked first, every entry against the scan (:func:`_walk_verify`): anything
new or changed means a job is still writing, and nothing of it is removed. Then it goes bottom
up (:func:`_remove_tree`), each file with the deleter's checks again right before its unlink
(:meth:`janitor.cleanup.recheck.Rechecks.unlink_file`). Folders are entered one at a time by
inode (``FolderChain``), never through a symlink, never onto another filesystem or mount.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable
from typing import TYPE_CHECKING

from janitor.cleanup.recheck import Partial, Rechecks, Skip, close_held, why
from janitor.cleanup.scan import Entry
from janitor.host.fdwalk import FolderChain, FolderChanged

if TYPE_CHECKING:
    from janitor.cleanup.units import Unit

__all__ = ["remove_folder_unit"]


def remove_folder_unit(checks: Rechecks, root_fd: int, unit: Unit) -> tuple[int, int]:
    """Remove a folder right under the root (``root_fd``) and all it holds; (files removed,
    bytes), Skip before anything is removed, or Partial once something was."""
    if "/" in unit.key or unit.key in ("", ".", ".."):
        raise Skip("not a folder directly under the root")
    head = unit.entries[0]
    known = _Known(unit.entries)
    unit_fd = checks.open_sub(root_fd, unit.key)
    try:
        st = os.fstat(unit_fd)
        if st.st_ino != head.ino:
            raise Skip("replaced since the scan")
        if st.st_uid != checks.uid:
            raise Skip("owned by another user")
        # Verify the whole folder first: anything new or changed means a job is alive.
        _walk_verify(checks, unit_fd, unit.key, known)
        done = [0, 0]
        try:
            _remove_tree(checks, unit_fd, unit.key, known, done)
        except Skip as exc:
            if done[0] or done[1]:
                raise Partial(done[0], done[1], str(exc)) from None
            raise
        removed, size = done
    finally:
        os.close(unit_fd)
    try:
        os.rmdir(unit.key, dir_fd=root_fd)
        size += head.size
    except OSError as exc:
        if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT):
            raise
    return removed, size


def _enter(chain: FolderChain, name: str, e: Entry) -> int:
    """Go into a scanned folder of the unit: the same inode, on the tree's filesystem."""
    try:
        return chain.enter(name, e.ino)
    except FolderChanged as exc:
        raise Skip(str(exc)) from None
    except OSError as exc:
        raise Skip(why(exc, "folder")) from None


def _walk_verify(checks: Rechecks, unit_fd: int, rel: str, known: _Known) -> None:
    """Check every entry of a folder unit, at any depth, before anything of it is removed:
    anything new or changed means a job is still alive."""
    chain = FolderChain(unit_fd, boundary=checks.edge)
    where = rel  # the folder the walk is in, relative to the root
    todo = [_names(unit_fd)]
    try:
        while True:
            names = todo[-1]
            if not names:
                todo.pop()
                if not todo:
                    return
                where = where.rpartition("/")[0]
                if not chain.leave():
                    raise Skip("moved since the scan")
                continue
            name = names.pop()
            fd = chain.fd
            crel = f"{where}/{name}"
            e = known.find(fd, name, crel)
            if e is None:
                raise Skip("new files since the scan: a job is still writing")
            if stat.S_ISDIR(e.mode):
                st = checks.verify(fd, name, e)
                if not stat.S_ISDIR(st.st_mode):
                    raise Skip("replaced since the scan")
                todo.append(_names(_enter(chain, name, e)))
                where = crel
            elif checks.is_open((e.dev, e.ino)):
                raise Skip("open in another process")
            elif stat.S_ISREG(e.mode):
                # Ask the kernel now, before anything of the unit is removed.
                close_held(checks.hold(fd, name, e))
            else:
                checks.verify(fd, name, e)
    finally:
        chain.close()


def _remove_tree(checks: Rechecks, unit_fd: int, rel: str, known: _Known, done: list[int]) -> None:
    """Remove a folder's contents bottom-up, at any depth; ``done`` counts [files, bytes]
    as it goes."""
    chain = FolderChain(unit_fd, boundary=checks.edge)
    where = rel
    todo = [_names(unit_fd)]
    inside: list[tuple[str, Entry]] = []  # the folder entered at each level below the unit
    try:
        while True:
            names = todo[-1]
            if not names:
                todo.pop()
                if not todo:
                    return
                where = where.rpartition("/")[0]
                name, folder = inside.pop()
                if not chain.leave():
                    raise Skip("moved since the scan")
                os.rmdir(name, dir_fd=chain.fd)
                done[1] += folder.size
                continue
            name = names.pop()
            crel = f"{where}/{name}"
            e = known.find(chain.fd, name, crel)
            if e is None:
                raise Skip("new files since the scan: a job is still writing")
            if stat.S_ISDIR(e.mode):
                todo.append(_names(_enter(chain, name, e)))
                inside.append((name, e))
                where = crel
            else:
                checks.unlink_file(chain.fd, name, e)
                done[0] += 1
                done[1] += e.size
    finally:
        chain.close()


def _names(fd: int) -> list[str]:
    """A folder's names, last listed first (``pop()`` takes them in listing order)."""
    with os.scandir(fd) as it:
        names = [d.name for d in it]
    names.reverse()
    return names


class _Known:
    """A folder unit's scanned entries by path relative to the root, and by inode for another
    name of a hard-linked file (that index made only when first needed)."""

    __slots__ = ("_by_ino", "by_rel")

    def __init__(self, entries: Iterable[Entry]) -> None:
        self.by_rel = {e.rel: e for e in entries}
        self._by_ino: dict[tuple[int, int], Entry] | None = None

    def find(self, fd: int, name: str, crel: str) -> Entry | None:
        """The scanned entry of ``name`` in folder ``fd`` (whose path is ``crel``), if any."""
        e = self.by_rel.get(crel)
        if e is not None:
            return e
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except OSError:
            return None
        if stat.S_ISDIR(st.st_mode):
            return None
        if self._by_ino is None:
            self._by_ino = {
                (k.dev, k.ino): k for k in self.by_rel.values() if not stat.S_ISDIR(k.mode)
            }
        return self._by_ino.get((st.st_dev, st.st_ino))
