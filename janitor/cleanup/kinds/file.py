"""``units = "file"``: each file is a unit, unless the tree's ``group`` regex gives several one
key (in the default policy ``{fp}.wav``, ``{fp}.tmp.wav`` and ``{fp}.wav.lock`` are one cache
entry, ``{fp}``); a unit may name a lock file (``lock``) whose holder keeps it in use.

Grouped column by column (:mod:`janitor.cleanup.kinds.file_grouping`); a unit of one file is
unlinked with the deleter's checks, a unit of several in one folder while holding its lock
file's ``flock`` (the lock file itself is never removed: see ``Deleter``).
"""

from __future__ import annotations

import os
from functools import partial
from typing import TYPE_CHECKING

from janitor.cleanup.kinds.base import Glance, Grouping, Site, UnitKind, children_older
from janitor.cleanup.recheck import FILE_FLAGS, Skip, close_held, why
from janitor.config.unit_rules import UNIT_RULES
from janitor.host.flock import try_lock
from janitor.host.sizewalk import FILES
from janitor.host.space import allocated_size

if TYPE_CHECKING:
    from janitor.cleanup.scan import Entry
    from janitor.cleanup.units import Unit, UnitTable
    from janitor.config.policy import TreePolicy
    from janitor.host.sizewalk import Measured

__all__ = ["FILE", "FileKind"]


class FileKind(UnitKind):
    """Files, alone or grouped by a key in their names (see the module docstring)."""

    __slots__ = ()

    rules = UNIT_RULES["file"]

    def _group(self, g: Grouping) -> UnitTable:
        from janitor.cleanup.kinds.file_grouping import file_units  # numpy: once per tree

        return file_units(g, self.name)

    def glance(self, tree: TreePolicy, m: Measured) -> Glance:
        """Every file of a tree that selects none (its last uses: bounded by its children's);
        else the files its include and exclude leave to it, each with its own last use."""
        if not tree.include and not tree.exclude:
            return Glance(m.bytes, True, partial(children_older, m))
        managed = [(size, use) for rel, size, use in m.files if tree.manages(rel)]
        return Glance(sum(size for size, _ in managed), False, partial(_files_older, m, managed))

    def usage(self, tree: TreePolicy) -> int:
        """The whole root."""
        return allocated_size(tree.path)

    def delete(self, site: Site, unit: Unit) -> tuple[int, int]:
        """A file alone, or the files of a unit in one folder under its lock file's flock."""
        entries = unit.entries
        if len(entries) == 1 and unit.lock is None:
            e = entries[0]
            folder, _, name = e.rel.rpartition("/")
            if name in ("", ".", ".."):
                raise Skip("bad path component")
            site.checks.unlink_file(site.folder(folder), name, e)
            return 1, e.size
        return _delete_locked(site, unit)


def _files_older(m: Measured, managed: list[tuple[int, float]], cutoff: float) -> bool:
    if m.folder.detail < FILES:
        return True  # measured with too little detail to tell
    return any(use <= cutoff for _, use in managed)


def _delete_locked(site: Site, unit: Unit) -> tuple[int, int]:
    """Remove a unit of files in one folder while holding its lock file's flock.

    The lock file itself is never removed (see ``Deleter``): only the files it guards.
    """
    folders = {e.rel.rpartition("/")[0] for e in unit.entries}
    if len(folders) != 1:
        raise Skip("unit spans folders")
    lock_name = unit.lock.rpartition("/")[2] if unit.lock is not None else None
    victims = [e for e in unit.entries if e.rel.rpartition("/")[2] != lock_name]
    if not victims:
        raise Skip("nothing but its lock file, which is never removed")
    checks = site.checks
    dir_fd = site.folder(folders.pop())
    lock_fd = None
    held: list[tuple[str, Entry, int | None]] = []  # (name, entry, fd of a regular file)
    try:
        if lock_name is not None:
            try:
                lock_fd = os.open(lock_name, FILE_FLAGS, dir_fd=dir_fd)
            except FileNotFoundError:
                lock_fd = None  # `cache clear` removed it, or no converter made one yet
            except OSError as exc:
                raise Skip(why(exc, "lock file")) from None
            if lock_fd is not None:
                try:
                    locked = try_lock(lock_fd)
                except OSError:
                    locked = False
                if not locked:
                    raise Skip("locked")
        # Every file is checked (and held) before any is removed, all under the lock: a
        # converter that comes meanwhile waits on it, then finds the WAV gone and converts.
        for e in victims:
            name = e.rel.rpartition("/")[2]
            if name in ("", ".", ".."):
                raise Skip("bad path component")
            held.append((name, e, checks.hold_entry(dir_fd, name, e)))
        removed = 0
        size = 0
        for name, e, _fd in held:
            try:
                os.unlink(name, dir_fd=dir_fd)
            except OSError:
                if removed:
                    break  # partly removed: what is left is judged again next sweep
                raise
            removed += 1
            size += e.size
        return removed, size
    finally:
        for _name, _e, fd in held:
            if fd is not None:
                close_held(fd)
        if lock_fd is not None:
            os.close(lock_fd)  # drops our flock: a waiting converter goes on


#: The one file kind.
FILE = FileKind()
