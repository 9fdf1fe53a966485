"""Removing a folder unit (the ``dir`` kind: a job's ``.tmpXXXXXX`` folder), at any depth.

The whole folder is checked first, every entry against the scan (:func:`_walk_verify`): anything
new or changed means a job is still writing, and nothing of it is removed. Then it goes bottom
up (:func:`_remove_tree`), each file with the deleter's checks again right before its unlink
(:meth:`janitor.cleanup.recheck.Rechecks.unlink_file`). Folders are entered one at a time by
inode (``FolderChain``), never through a symlink, never onto another filesystem or mount.

A folder whose files only work together (an LMDB environment: ``data.mdb`` with its
``lock.mdb``) goes whole or not at all (:func:`remove_folder_whole`): checked, then renamed
aside in one step, checked again, and only then emptied.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from janitor.cleanup.recheck import Partial, Rechecks, Skip, close_held, why
from janitor.cleanup.scan import Entry
from janitor.host.fdwalk import FolderChain, FolderChanged

if TYPE_CHECKING:
    from janitor.cleanup.units import Unit

__all__ = ["remove_folder_unit", "remove_folder_whole"]

#: Why a folder whose inode is some process's working directory is kept.
_WORKS_IN = "a process works in it (its working directory)"


@dataclass(frozen=True, slots=True)
class _Opened:
    """A unit's folder opened (``fd``) and found as the scan saw it (``known``: its entries)."""

    fd: int
    known: _Known
    head: Entry


def _open_unchanged(checks: Rechecks, root_fd: int, unit: Unit) -> _Opened:
    """Open the folder right under the root that is ``unit``, and check it whole before
    anything of it goes: the same inode as scanned, ours, no process working in it, and
    nothing in it new or changed (a job still writing). Skip otherwise, the folder closed."""
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
        if checks.is_open((head.dev, head.ino)):
            raise Skip(_WORKS_IN)
        _walk_verify(checks, unit_fd, unit.key, known)
    except BaseException:
        os.close(unit_fd)
        raise
    return _Opened(unit_fd, known, head)


def _rmdir_emptied(root_fd: int, name: str) -> bool:
    """Remove the emptied folder ``name``; False when something is left in it (or it went)."""
    try:
        os.rmdir(name, dir_fd=root_fd)
    except OSError as exc:
        if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT):
            raise
        return False
    return True


def remove_folder_unit(checks: Rechecks, root_fd: int, unit: Unit) -> tuple[int, int]:
    """Remove a folder right under the root (``root_fd``) and all it holds; (files removed,
    bytes), Skip before anything is removed, or Partial once something was."""
    opened = _open_unchanged(checks, root_fd, unit)
    done = [0, 0]
    try:
        _remove_tree(checks, opened.fd, unit.key, opened.known, done)
    except Skip as exc:
        if done[0] or done[1]:
            raise Partial(done[0], done[1], str(exc)) from None
        raise
    finally:
        os.close(opened.fd)
    removed, size = done
    if _rmdir_emptied(root_fd, unit.key):
        size += opened.head.size
    return removed, size


def remove_folder_whole(checks: Rechecks, root_fd: int, unit: Unit) -> tuple[int, int]:
    """Remove a folder right under the root whose files only work together (an LMDB
    environment), whole or not at all, for any process that opens it by its path.

    Every entry is checked (none new, changed, open or mapped); then the folder is renamed
    aside (``.NAME.janitor-PID-XXXXXXXX``, one ``rename`` in the root: no one can open it by
    its path from then on, and a newcomer makes a new one) and checked again, for a process
    that opened it between the first check and the rename; found so, it is renamed back and
    kept. Only then are its files removed. Skip before anything is removed; Partial, with what
    is left of it aside (not at its path: no program uses it), when a removal fails after.
    """
    opened = _open_unchanged(checks, root_fd, unit)
    aside = f".{unit.key}.janitor-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        os.rename(unit.key, aside, src_dir_fd=root_fd, dst_dir_fd=root_fd)
        if os.stat(aside, dir_fd=root_fd, follow_symlinks=False).st_ino != opened.head.ino:
            _put_back(root_fd, aside, unit.key)  # swapped between the check and the rename
            raise Skip("replaced since the scan")
        try:
            _walk_verify(checks, opened.fd, unit.key, opened.known)
        except Skip:
            _put_back(root_fd, aside, unit.key)
            raise
        done = [0, 0]
        try:
            _remove_tree(checks, opened.fd, unit.key, opened.known, done)
        except Skip as exc:
            raise Partial(done[0], done[1], f"{exc}; the rest is in {aside}") from None
        removed, size = done
    finally:
        os.close(opened.fd)
    if _rmdir_emptied(root_fd, aside):
        size += opened.head.size
    return removed, size


def _put_back(root_fd: int, aside: str, name: str) -> None:
    """Rename a folder set aside back to its name, unless a new one took the name meanwhile
    (then it stays aside, whole: whoever has it open goes on with it)."""
    try:
        os.stat(name, dir_fd=root_fd, follow_symlinks=False)
    except FileNotFoundError:
        os.rename(aside, name, src_dir_fd=root_fd, dst_dir_fd=root_fd)


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
                if checks.is_open((e.dev, e.ino)):
                    raise Skip(_WORKS_IN)
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
