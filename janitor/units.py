"""Units: the groups of files a tree judges and deletes together, as the policy describes them.

``units = "file"``: each file is a unit, unless the tree's ``group`` regex puts several in one:
in the default policy ``{fp}.wav``, ``{fp}.tmp.wav`` and ``{fp}.wav.lock`` share the key ``fp``.
``units = "dir"``: each folder directly under the root that matches ``unit_glob`` (and holds an
entry matching one of ``unit_requires``) is a unit with everything inside it, like a job's
``.tmpXXXXXX`` folder. Grouping is pure: a snapshot and a policy in, units out.

Trees hold up to millions of files, so the file grouping works column by column: each step is
one pass that runs in C (``map``, ``zip``, ``compress``, one regex substitution over all names
joined) rather than a Python statement per file.
"""

from __future__ import annotations

import fnmatch
import re
import stat
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import lru_cache, partial
from itertools import compress, repeat
from operator import itemgetter, lt, not_
from typing import Any, Literal, NamedTuple

from janitor.policy import TreePolicy
from janitor.scan import Entry, Snapshot, gc_paused

__all__ = ["Unit", "column", "group_units", "unit_key_for"]


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


def column(cls: type[tuple[Any, ...]], field: str) -> itemgetter[Any]:
    """A C-level getter of one field of NamedTuple ``cls``, found by name, not by position."""
    return itemgetter(cls._fields.index(field))  # type: ignore[attr-defined]


# Column getters of Entry: C-level, unlike attribute access in a lambda.
_PATH = column(Entry, "path")
_REL = column(Entry, "rel")
_SIZE = column(Entry, "size")
_MTIME = column(Entry, "mtime")
_ATIME = column(Entry, "atime")
_MODE = column(Entry, "mode")
#: ``Unit`` built from one iterable of its seven fields, without the NamedTuple's Python __new__.
_new_unit: Callable[[Iterable[object]], Unit] = partial(tuple.__new__, Unit)


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


# -- group keys ----------------------------------------------------------------------------------


def _literals(items: Iterable[tuple[Any, Any]], limit: int = 64) -> set[str] | None:
    """Every string a regex fragment of literals, optional parts and alternatives can match;
    None when it holds anything else (or too many strings)."""
    from re import _constants as c  # type: ignore[attr-defined]

    out = {""}
    for op, av in items:
        alts: set[str] | None
        if op is c.LITERAL:
            alts = {chr(av)}
        elif op is c.SUBPATTERN:
            _gid, add, remove, sub = av
            alts = None if add or remove else _literals(sub, limit)
        elif op is c.BRANCH:
            alts = set()
            for alt in av[1]:
                got = _literals(alt, limit)
                if got is None:
                    return None
                alts |= got
        elif op is c.MAX_REPEAT or op is c.MIN_REPEAT:
            lo, hi, sub = av
            one = _literals(sub, limit)
            if one is None or hi > 4:
                return None
            alts = set()
            step = {""}
            for k in range(hi + 1):
                if k >= lo:
                    alts |= step
                step = {a + b for a in step for b in one}
        elif op is c.IN:
            alts = set()
            for iop, iav in av:
                if iop is not c.LITERAL:
                    return None
                alts.add(chr(iav))
        else:
            return None
        if alts is None:
            return None
        out = {a + b for a in out for b in alts}
        if len(out) > limit:
            return None
    return out


@lru_cache(maxsize=32)
def _suffix_form(pattern: str) -> tuple[int, re.Pattern[str]] | None:
    """The common shape ``^(?P<key>[^/]+?)SUFFIX$`` (key lazy, SUFFIX one of a few literal
    strings), as (least key length, a regex that strips the longest suffix at each line end).

    Matched with ``re.match`` on a name, such a pattern takes the shortest key: the name minus the
    longest of the suffixes it ends with, if at least the least key length is left. One
    substitution over all names joined by newlines finds the same keys without a regex call
    (and its lazy scan) per file. Any other shape returns None and is matched name by name.
    """
    try:
        from re import _constants as c  # type: ignore[attr-defined]
        from re import _parser  # type: ignore[attr-defined]

        rx = re.compile(pattern)
        if rx.flags & re.IGNORECASE:
            return None
        items = list(_parser.parse(pattern))
        if items and items[0] in ((c.AT, c.AT_BEGINNING), (c.AT, c.AT_BEGINNING_STRING)):
            items = items[1:]
        if len(items) < 3 or items[-1] not in ((c.AT, c.AT_END), (c.AT, c.AT_END_STRING)):
            return None
        op, av = items[0]
        if op is not c.SUBPATTERN or av[0] != rx.groupindex["key"] or av[1] or av[2]:
            return None
        (rep,) = list(av[3])
        if rep[0] is not c.MIN_REPEAT:
            return None
        least, most, body = rep[1]
        if most != c.MAXREPEAT or least not in (0, 1):
            return None
        # The key may be any characters of a name: "." (no newline: names with one are matched
        # one by one) or "[^/]".
        (char,) = list(body)
        if char not in ((c.ANY, None), (c.NOT_LITERAL, ord("/"))) and not (
            char[0] is c.IN and list(char[1]) == [(c.NEGATE, None), (c.LITERAL, ord("/"))]
        ):
            return None
        suffixes = _literals(items[1:-1])
    except Exception:  # an unexpected parser shape or version: match name by name
        return None
    if not suffixes or "" in suffixes:
        return None
    suffixes = {s for s in suffixes if "/" not in s and "\n" not in s}  # never end a name
    if not suffixes:
        return None
    alts = "|".join(re.escape(s) for s in sorted(suffixes, key=lambda s: (-len(s), s)))
    return least, re.compile(f"(?:{alts})$", re.MULTILINE)


def _group_keys(pattern: str, rels: list[str]) -> tuple[list[str], list[bool] | None]:
    """Each file's unit key, and whether the group regex matched its name (None: every name
    matched); ``rels`` are the files' paths relative to the root."""
    n = len(rels)
    form = _suffix_form(pattern)
    if form is not None and n:
        least, strip = form
        joined = "\n".join(rels)
        if joined.count("\n") == n - 1:  # no name holds a newline
            stripped, hits = strip.subn("", joined)
            keys = stripped.split("\n")
            matched = None if hits == n else list(map(lt, map(len, keys), map(len, rels)))
            if least:
                # The longest suffix left no key ("sub/.wav"): a shorter one may; ask the regex.
                redo = list(compress(range(n), map(str.endswith, keys, repeat("/"))))
                if "" in keys:
                    redo += [i for i, k in enumerate(keys) if not k]
                if redo:
                    rx = re.compile(pattern)
                    if matched is None:
                        matched = [True] * n
                    for i in redo:
                        keys[i], matched[i] = _match_key(rx, rels[i])
            return keys, matched
    rx = re.compile(pattern)
    keys = []
    flags = []
    for rel in rels:
        key, hit = _match_key(rx, rel)
        keys.append(key)
        flags.append(hit)
    return keys, flags


def _match_key(rx: re.Pattern[str], rel: str) -> tuple[str, bool]:
    folder, _, name = rel.rpartition("/")
    m = rx.match(name)
    if m is None:
        return rel, False
    key_name: str = m.group("key")
    return (f"{folder}/{key_name}" if folder else key_name), True


# -- file units ----------------------------------------------------------------------------------


def _lock_path(root: str, template: str, key: str) -> str:
    folder, _, key_name = key.rpartition("/")
    name = template.replace("{key}", key_name)
    return f"{root}/{folder}/{name}" if folder else f"{root}/{name}"


def _file_units(
    snapshot: Snapshot,
    tree: TreePolicy,
    touches: Mapping[str, float],
    include: re.Pattern[str] | None,
    exclude: re.Pattern[str] | None,
) -> tuple[Unit, ...]:
    entries = snapshot.entries
    files: list[Entry] = list(compress(entries, map(not_, map(stat.S_ISDIR, map(_MODE, entries)))))
    rels: list[str] = list(map(_REL, files))
    if include is not None:
        wanted = list(map(include.match, rels))
        files, rels = list(compress(files, wanted)), list(compress(rels, wanted))
    if exclude is not None:
        kept = list(map(not_, map(exclude.match, rels)))
        files, rels = list(compress(files, kept)), list(compress(rels, kept))
    matched: list[bool] | None = []  # no group: no name matches
    if tree.group:
        keys, matched = _group_keys(tree.group, rels)
    else:
        keys = rels
    root = snapshot.root
    template = tree.lock
    if len(set(keys)) == len(keys):
        return _single_units(files, keys, matched, root, template, touches)
    groups: dict[str, list[Entry]] = {}
    for key, e in zip(keys, files, strict=True):
        bucket = groups.get(key)
        if bucket is None:
            groups[key] = [e]
        else:
            bucket.append(e)
    locked_keys: set[str] | None = None  # None: every key has a lock file
    if not template:
        locked_keys = set()
    elif "{key}" in template and matched is not None:
        locked_keys = set(compress(keys, matched))
    # "{key}.wav.lock": the lock of key "sub/fp" is "<root>/sub/fp.wav.lock".
    tail = template[5:] if template and template.startswith("{key}") else None
    if tail is not None and "{key}" in tail:
        tail = None
    units: list[Unit] = []
    append = units.append
    for key, members in groups.items():
        if len(members) == 1:
            e = members[0]
            size = e.size
            last = e.mtime if e.mtime > e.atime else e.atime
            main = e
        else:
            size = 0
            last = 0.0
            for e in members:
                t = e.mtime if e.mtime > e.atime else e.atime
                if t > last:
                    last = t
                size += e.size
            main = min(members, key=_rel_order)
        if touches:
            for e in members:
                touched = touches.get(e.path)
                if touched is not None and touched > last:
                    last = touched
        lock = None
        if template and (locked_keys is None or key in locked_keys):
            lock = f"{root}/{key}{tail}" if tail is not None else _lock_path(root, template, key)
        append(_new_unit((key, "file", main.path, tuple(members), size, last, lock)))
    return tuple(units)


def _rel_order(e: Entry) -> tuple[int, str]:
    """A unit of several files is shown (and logged) as its shortest name: ``{fp}.wav``."""
    return len(e.rel), e.rel


def _single_units(
    files: Sequence[Entry],
    keys: list[str],
    matched: list[bool] | None,
    root: str,
    template: str | None,
    touches: Mapping[str, float],
) -> tuple[Unit, ...]:
    """Units of one file each (every key distinct), built column by column."""
    paths = list(map(_PATH, files))
    lasts = [m if m > a else a for m, a in zip(map(_MTIME, files), map(_ATIME, files), strict=True)]
    if touches:
        for i in [i for i, p in enumerate(paths) if p in touches]:
            touched = touches[paths[i]]
            if touched > lasts[i]:
                lasts[i] = touched
    locks: Iterable[str | None]
    if not template:
        locks = repeat(None)
    elif "{key}" not in template:
        locks = [_lock_path(root, template, k) for k in keys]
    elif template.startswith("{key}") and template.count("{key}") == 1:
        # "{key}.wav.lock": the lock of key "sub/fp" is "<root>/sub/fp.wav.lock".
        tail = template[5:]
        if matched is None:
            locks = [f"{root}/{k}{tail}" for k in keys]
        else:
            locks = [f"{root}/{k}{tail}" if m else None for k, m in zip(keys, matched, strict=True)]
    elif matched is None:
        locks = [_lock_path(root, template, k) for k in keys]
    else:
        locks = [
            _lock_path(root, template, k) if m else None for k, m in zip(keys, matched, strict=True)
        ]
    return tuple(
        map(
            _new_unit,
            zip(keys, repeat("file"), paths, zip(files), map(_SIZE, files), lasts, locks),
        )
    )


# -- folder units --------------------------------------------------------------------------------


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
