"""Units: the groups of files a tree judges and deletes together, as the policy describes them.

``units = "file"``: each file is a unit, unless the tree's ``group`` regex puts several in one:
in the default policy ``{fp}.wav``, ``{fp}.tmp.wav`` and ``{fp}.wav.lock`` share the key ``fp``.
``units = "dir"``: each folder directly under the root that matches ``unit_glob`` (and holds an
entry matching one of ``unit_requires``) is a unit with everything inside it, like a job's
``.tmpXXXXXX`` folder. Grouping is pure: a snapshot and a policy in, units out.
"""

from __future__ import annotations

import fnmatch
import re
import stat
from collections.abc import Mapping
from typing import Literal, NamedTuple

from janitor.policy import TreePolicy
from janitor.scan import Entry, Snapshot, gc_paused

__all__ = ["Unit", "group_units", "unit_key_for"]


class Unit(NamedTuple):
    """Files that live and die together; ``last_use`` decides LRU order and orphan age.

    A NamedTuple rather than a dataclass: trees of a million files make a million of these, and
    a tuple is built several times faster while being just as immutable.
    """

    key: str
    kind: Literal["file", "dir"]
    path: str  # the folder of a dir unit; the first file of a file unit
    entries: tuple[Entry, ...]
    size: int
    last_use: float
    lock: str | None = None  # absolute path of the lock file whose holder keeps it in use

    @property
    def newest_mtime(self) -> float:
        """The latest modification of anything in the unit."""
        return max((e.mtime for e in self.entries), default=0.0)


def _globs(patterns: tuple[str, ...]) -> re.Pattern[str] | None:
    if not patterns:
        return None
    return re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in patterns))


def unit_key_for(tree: TreePolicy, rel: str) -> str:
    """The key of the unit that a path (relative to the root) belongs or would belong to."""
    if tree.units == "dir":
        return rel.split("/", 1)[0]
    folder, _, name = rel.rpartition("/")
    if tree.group:
        m = re.match(tree.group, name)
        if m:
            name = m.group("key")
    return f"{folder}/{name}" if folder else name


def group_units(
    snapshot: Snapshot, tree: TreePolicy, touches: Mapping[str, float] | None = None
) -> tuple[Unit, ...]:
    """Group a snapshot's entries into the tree's units (unmanaged entries are left out)."""
    touches = touches or {}
    include = _globs(tree.include)
    exclude = _globs(tree.exclude)
    with gc_paused():
        if tree.units == "dir":
            return _dir_units(snapshot, tree, touches, include, exclude)
        return _file_units(snapshot, tree, touches, include, exclude)


def _file_units(
    snapshot: Snapshot,
    tree: TreePolicy,
    touches: Mapping[str, float],
    include: re.Pattern[str] | None,
    exclude: re.Pattern[str] | None,
) -> tuple[Unit, ...]:
    group_rx = re.compile(tree.group) if tree.group else None
    groups: dict[str, list[Entry]] = {}
    lock_keys: dict[str, str] = {}
    s_isdir = stat.S_ISDIR
    for e in snapshot.entries:
        if s_isdir(e.mode):
            continue
        rel = e.rel
        if include is not None and not include.match(rel):
            continue
        if exclude is not None and exclude.match(rel):
            continue
        folder, _, name = rel.rpartition("/")
        key_name = name
        if group_rx is not None:
            m = group_rx.match(name)
            if m is not None:
                key_name = m.group("key")
                lock_keys.setdefault(f"{folder}/{key_name}" if folder else key_name, key_name)
        key = f"{folder}/{key_name}" if folder else key_name
        bucket = groups.get(key)
        if bucket is None:
            groups[key] = [e]
        else:
            bucket.append(e)
    root = snapshot.root
    units: list[Unit] = []
    append = units.append
    lock_template = tree.lock
    for key, files in groups.items():
        if len(files) == 1:
            e = files[0]
            size = e.size
            last = e.mtime if e.mtime > e.atime else e.atime
        else:
            size = 0
            last = 0.0
            for e in files:
                t = e.mtime if e.mtime > e.atime else e.atime
                if t > last:
                    last = t
                size += e.size
        if touches:
            for e in files:
                touched = touches.get(e.path)
                if touched is not None and touched > last:
                    last = touched
        lock = None
        if lock_template:
            lock_key = lock_keys.get(key)
            if lock_key is not None or "{key}" not in lock_template:
                folder = key.rpartition("/")[0]
                name = lock_template.replace("{key}", lock_key or "")
                lock = f"{root}/{folder}/{name}" if folder else f"{root}/{name}"
        main = files[0] if len(files) == 1 else min(files, key=lambda e: (len(e.rel), e.rel))
        append(Unit(key, "file", main.path, tuple(files), size, last, lock))
    return tuple(units)


def _dir_units(
    snapshot: Snapshot,
    tree: TreePolicy,
    touches: Mapping[str, float],
    include: re.Pattern[str] | None,
    exclude: re.Pattern[str] | None,
) -> tuple[Unit, ...]:
    glob = re.compile(fnmatch.translate(tree.unit_glob))
    requires = _globs(tree.unit_requires)
    heads: dict[str, Entry] = {}
    members: dict[str, list[Entry]] = {}
    marked: set[str] = set()
    for e in snapshot.entries:
        head, sep, rest = e.rel.partition("/")
        if not sep:
            if stat.S_ISDIR(e.mode) and glob.match(head):
                heads[head] = e
            continue
        members.setdefault(head, []).append(e)
        if requires is not None and "/" not in rest and requires.match(rest):
            marked.add(head)
    units = []
    for head, folder in heads.items():
        if requires is not None and head not in marked:
            continue  # a .tmp* folder of some other program: not ours to judge
        if include is not None and not include.match(head):
            continue
        if exclude is not None and exclude.match(head):
            continue
        inside = members.get(head, [])
        entries = (folder, *inside)
        last = max(e.mtime for e in entries)
        touched = max((touches.get(e.path, 0.0) for e in entries), default=0.0) if touches else 0.0
        units.append(
            Unit(
                head,
                "dir",
                folder.path,
                entries,
                sum(e.size for e in entries),
                max(last, touched),
            )
        )
    return tuple(units)
