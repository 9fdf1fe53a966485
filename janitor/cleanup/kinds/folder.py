"""``units = "dir"``: each folder right under the root that matches a ``unit_glob`` (and holds
an entry matching one of its ``unit_requires``) is a unit with everything inside it, like a
job's ``.tmpXXXXXX`` folder; another program's folder beside them is not the tree's to judge.
A file right under the root that one of the tree's ``unit_files`` globs names is a unit on its
own (a Python tempfile's loose ``tmpXXXXXXXX.wav``).

A unit's last use is the latest change of anything in it, its own folder included; it goes
whole, checked first, then bottom up (:mod:`janitor.cleanup.kinds.folder_removal`), and a pin
anywhere below its folder keeps it.
"""

from __future__ import annotations

import fnmatch
import os
import re
import stat
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from janitor.cleanup.kinds.base import Glance, Grouping, Site, UnitKind
from janitor.cleanup.kinds.folder_removal import remove_folder_unit
from janitor.config.unit_rules import UNIT_RULES
from janitor.host.sizewalk import CHILDREN
from janitor.host.space import allocated_size

if TYPE_CHECKING:
    from janitor.cleanup.recheck import Rechecks
    from janitor.cleanup.scan import Entry
    from janitor.cleanup.units import Unit, UnitTable
    from janitor.config.policy import TreePolicy
    from janitor.host.sizewalk import Measured

__all__ = ["FOLDER", "FolderKind"]

#: A unit folder as a size walk saw it: (name, bytes, newest mtime, holds a file linked twice).
_UnitFolder = tuple[str, int, float, bool]


class FolderKind(UnitKind):
    """Folders right under the root, each with all it holds (see the module docstring)."""

    __slots__ = ()

    rules = UNIT_RULES["dir"]

    def _group(self, g: Grouping) -> UnitTable:
        from janitor.cleanup.units import Unit, UnitTable  # numpy: once per tree

        # Each rule: a folder glob and what one of its entries must be named (unit_rules()).
        rules = [
            (re.compile(fnmatch.translate(glob)), _globs(req)) for glob, req in g.tree.unit_rules()
        ]
        heads: dict[str, Entry] = {}
        members: dict[str, list[Entry]] = {}
        loose: list[Entry] = []
        for e in g.snapshot.entries:
            head, sep, _ = e.rel.partition("/")
            if not sep:
                if stat.S_ISDIR(e.mode) and any(rx.match(head) for rx, _ in rules):
                    heads[head] = e
                elif stat.S_ISREG(e.mode) and g.tree.is_unit_file(head):
                    loose.append(e)
                continue
            members.setdefault(head, []).append(e)
        units = [_file_unit(self.name, e, g) for e in loose if _selected(g, e.rel)]
        touches = g.touches
        for head, folder in heads.items():
            names = [e.rel[len(head) + 1 :] for e in members.get(head, ())]
            names = [n for n in names if "/" not in n]
            if not any(
                rx.match(head) and (req is None or any(map(req.match, names))) for rx, req in rules
            ):
                continue  # a .tmp* folder of some other program: not ours to judge
            if not _selected(g, head):
                continue
            inside = members.get(head, [])
            entries = (folder, *inside)
            last = max(e.mtime for e in entries)
            touched = (
                max((touches.get(e.path, 0.0) for e in entries), default=0.0) if touches else 0.0
            )
            units.append(
                Unit(
                    head,
                    self.name,
                    folder.path,
                    entries,
                    sum(e.size for e in entries),
                    max(last, touched),
                )
            )
        return UnitTable.of(units, g.snapshot.root, self.name)

    def walk_detail(self, role: str, selects: bool, max_age: bool) -> int:
        """Each entry right under the root, its unit folders among them."""
        return CHILDREN

    def glance(self, tree: TreePolicy, m: Measured) -> Glance:
        """Its unit folders' trees; a folder's last use is exactly the walk's newest mtime in
        it (the folder's own included)."""
        found = _unit_folders(tree, m)
        return Glance(sum(size for _, size, _, _ in found), False, partial(_older, m, found))

    def usage(self, tree: TreePolicy) -> int:
        """Its unit folders' trees, each measured whole, and its loose unit files."""
        total = 0
        try:
            children = list(os.scandir(tree.path))
        except OSError:
            return 0
        for child in children:
            if child.is_dir(follow_symlinks=False):
                unit = _is_unit(tree, Path(child.path))
            else:
                unit = child.is_file(follow_symlinks=False) and tree.is_unit_file(child.name)
            if unit:
                total += allocated_size(child.path)
        return total

    def recheck(self, checks: Rechecks, unit: Unit) -> None:
        """Skip when a pin covers anything in the unit's folder."""
        checks.check_pins(unit, unit.path)

    def delete(self, site: Site, unit: Unit) -> tuple[int, int]:
        """The folder right under the root and all it holds; a loose unit file alone."""
        head = unit.entries[0]
        if len(unit.entries) == 1 and stat.S_ISREG(head.mode) and "/" not in head.rel:
            site.checks.unlink_file(site.root_fd, head.rel, head)
            return 1, head.size
        return remove_folder_unit(site.checks, site.root_fd, unit)


def _selected(g: Grouping, name: str) -> bool:
    """Whether the tree's include and exclude globs leave a unit's name to it."""
    if g.include is not None and not g.include.match(name):
        return False
    return g.exclude is None or not g.exclude.match(name)


def _file_unit(kind: str, e: Entry, g: Grouping) -> Unit:
    """A loose file right under the root (``unit_files``) as a unit of its own: its last use
    is its last change, or a touch recorded later."""
    from janitor.cleanup.units import Unit

    return Unit(e.rel, kind, e.path, (e,), e.size, max(e.mtime, g.touches.get(e.path, 0.0)))


def _globs(patterns: tuple[str, ...]) -> re.Pattern[str] | None:
    from janitor.config.policy import glob_regex  # loaded already: a tree is being grouped

    return glob_regex(tuple(patterns))


def _unit_folders(tree: TreePolicy, m: Measured) -> list[_UnitFolder]:
    """The unit folders right under the walked root, as the walk saw them (a rule's required
    names are listed from the disk)."""
    root = m.folder.path
    return [
        (c.name, c.bytes, c.newest_mtime, c.linked)
        for c in m.children
        if tree.manages(c.name)
        and (
            tree.is_unit_folder(c.name, _lister(os.path.join(root, c.name)))
            if c.is_dir
            else tree.is_unit_file(c.name)
        )
    ]


def _lister(path: str) -> Callable[[], Iterable[str]]:
    def names() -> list[str]:
        try:
            st = os.lstat(path)
            if not stat.S_ISDIR(st.st_mode):
                return []
            return os.listdir(path)
        except OSError:
            return []

    return names


def _older(m: Measured, found: list[_UnitFolder], cutoff: float) -> bool:
    if m.folder.detail < CHILDREN:
        return True  # measured with too little detail to tell
    return any(linked or newest <= cutoff for _, _, newest, linked in found)


def _is_unit(tree: TreePolicy, unit: Path) -> bool:
    return tree.is_unit_folder(unit.name, lambda: os.listdir(unit))


#: The one folder kind.
FOLDER = FolderKind()
