"""Units: the groups of files a tree judges and deletes together, as the policy describes them.

``units = "file"``: each file is a unit, unless the tree's ``group`` regex puts several in one:
in the default policy ``{fp}.wav``, ``{fp}.tmp.wav`` and ``{fp}.wav.lock`` share the key ``fp``.
``units = "dir"``: each folder directly under the root that matches ``unit_glob`` (and holds an
entry matching one of ``unit_requires``) is a unit with everything inside it, like a job's
``.tmpXXXXXX`` folder. ``units = "hf_revision"``: each revision of a Hugging Face hub cache
(``janitor.cleanup.hf_units``). Grouping is pure: a snapshot and a policy in, units out (the
revisions' links and refs files are read, a few bytes each).

Trees hold up to millions of files, so the file grouping works column by column: each step is
one pass that runs in C (``map``, ``zip``, ``compress``, one regex substitution over all names
joined) rather than a Python statement per file.
"""

from __future__ import annotations

import fnmatch
import re
import stat
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from functools import partial
from itertools import chain, compress, repeat
from operator import eq, itemgetter, not_
from typing import Any, Literal, NamedTuple, TypeVar, overload

import numpy as np
import numpy.typing as npt

from janitor.cleanup.group_keys import group_keys, match_key, suffix_form
from janitor.cleanup.hf_units import revision_key, revisions
from janitor.cleanup.scan import Entry, Snapshot, gc_paused
from janitor.config.policy import TreePolicy, glob_regex

__all__ = ["LazySequence", "Unit", "UnitTable", "column", "group_units", "unit_key_for"]

_T = TypeVar("_T")


class Unit(NamedTuple):
    """Files that live and die together; ``last_use`` decides LRU order and orphan age.

    A NamedTuple rather than a dataclass: trees of a million files make a million of these, and
    a tuple is built several times faster while being just as immutable.
    """

    key: str
    kind: Literal["file", "dir", "hf_revision"]
    path: str  # the folder of a dir unit; the first file of a file unit; a snapshot folder
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
_INO = column(Entry, "ino")
_U_KEY = column(Unit, "key")
_U_ENTRIES = column(Unit, "entries")
_U_SIZE = column(Unit, "size")
_U_LAST = column(Unit, "last_use")
_U_LOCK = column(Unit, "lock")
_IFMT = 0o170000  # the file-type bits of st_mode


def _globs(patterns: tuple[str, ...]) -> re.Pattern[str] | None:
    return glob_regex(tuple(patterns))


def unit_key_for(tree: TreePolicy, rel: str) -> str:
    """The key of the unit that a path (relative to the root) belongs or would belong to."""
    if tree.units == "hf_revision":
        return revision_key(rel)
    return tree.unit_key(rel)


def group_units(
    snapshot: Snapshot, tree: TreePolicy, touches: Mapping[str, float] | None = None
) -> UnitTable:
    """Group a snapshot's entries into the tree's units (unmanaged entries are left out)."""
    touches = touches or {}
    include = _globs(tree.include)
    exclude = _globs(tree.exclude)
    with gc_paused():
        if tree.units == "dir":
            return _dir_units(snapshot, tree, touches, include, exclude)
        if tree.units == "hf_revision":
            return _revision_units(snapshot, touches, include, exclude)
        return _file_units(snapshot, tree, touches, include, exclude)


# -- the table -----------------------------------------------------------------------------------


Ints = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float64]
Bools = npt.NDArray[np.bool_]


class LazySequence(Sequence[_T]):
    """A read-only sequence whose items are built by ``_item(i)`` only when read.

    Equal to any sequence of the same items, a tuple or a list included; a slice is a tuple.
    """

    __slots__ = ()

    def _item(self, i: int) -> _T:
        raise NotImplementedError

    @overload
    def __getitem__(self, i: int) -> _T: ...
    @overload
    def __getitem__(self, i: slice) -> tuple[_T, ...]: ...
    def __getitem__(self, i: int | slice) -> _T | tuple[_T, ...]:
        if isinstance(i, slice):
            return tuple(map(self._item, range(*i.indices(len(self)))))
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"{type(self).__name__} index out of range")
        return self._item(i)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, str):
            return len(self) == len(other) and all(map(eq, self, other))
        return NotImplemented

    # Defining __eq__ leaves __hash__ None: unhashable, like a list, unless a subclass says.


class UnitTable(LazySequence[Unit]):
    """A tree's units as columns: member files, sizes and last uses; a Unit is built when read.

    A tree may hold a million files. The planner judges units column by column (numpy), and
    only the units a plan chooses are ever built as objects; keys and lock paths, strings made
    per unit, are derived only for those and for the few units some protection points at.
    Read-only: its columns never change; only the keys and names it derives are kept once made.
    """

    __slots__ = (
        "_idle",
        "_key_of",
        "_keys",
        "_matched",
        "_rels",
        "_suffixes",
        "_template",
        "_units",
        "files",
        "kind",
        "last_use",
        "root",
        "size",
        "starts",
    )

    def __init__(
        self,
        *,
        kind: Literal["file", "dir", "hf_revision"],
        root: str,
        files: Sequence[Entry],
        starts: Ints | None,
        size: Ints,
        last_use: Floats,
        rels: Sequence[str] | None = None,
        keys: Sequence[str] | None = None,
        key_of: Callable[[str], tuple[str, bool]] | None = None,
        matched: Bools | None = None,
        suffixes: tuple[str, ...] | None = None,
        template: str | None = None,
        units: tuple[Unit, ...] | None = None,
        idle: Ints | None = None,
    ) -> None:
        self.kind = kind
        self.root = root
        #: Every unit's member entries, unit after unit (unit i: files[starts[i]:starts[i + 1]],
        #: or files[i] alone when ``starts`` is None).
        self.files = files
        self.starts = starts
        self.size = size
        self.last_use = last_use
        self._rels = rels  # files' paths relative to the root
        self._keys = keys  # None: derived from a member's rel by ``_key_of``
        self._key_of = key_of
        self._matched = matched  # per unit: did the group regex match (None: Units given)
        # Key k's files are named k + one of these (or k itself): lets a few keys be found
        # among a million files by their names, without deriving every key. None: unknown.
        self._suffixes = suffixes
        self._template = template
        self._units = units
        self._idle = idle  # positions of the units that are only their lock file; None: unknown

    @classmethod
    def of(cls, units: Iterable[Unit], root: str = "") -> UnitTable:
        """A table over Units already built (folder units, tests, callers with a list)."""
        if isinstance(units, UnitTable):
            return units
        built = tuple(units)
        files = list(chain.from_iterable(map(_U_ENTRIES, built)))
        counts = np.fromiter(map(len, map(_U_ENTRIES, built)), np.int64, len(built))
        starts = np.zeros(len(built) + 1, np.int64)
        np.cumsum(counts, out=starts[1:])
        return cls(
            kind=built[0].kind if built else "file",
            root=root,
            files=files,
            starts=starts,
            size=np.fromiter(map(_U_SIZE, built), np.int64, len(built)),
            last_use=np.fromiter(map(_U_LAST, built), np.float64, len(built)),
            keys=list(map(_U_KEY, built)),
            units=built,
        )

    # -- the Sequence --------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.size)

    def _item(self, i: int) -> Unit:
        return self._unit(i)

    def __iter__(self) -> Iterator[Unit]:
        if self._units is not None:
            return iter(self._units)
        return map(self._unit, range(len(self)))

    def __repr__(self) -> str:
        return f"<UnitTable of {len(self)} {self.kind} units under {self.root!r}>"

    # -- per unit ------------------------------------------------------------------------------

    def members(self, i: int) -> tuple[Entry, ...]:
        """The entries of unit ``i``."""
        if self.starts is None:
            return (self.files[i],)
        return tuple(self.files[int(self.starts[i]) : int(self.starts[i + 1])])

    def _first(self, i: int) -> int:
        return i if self.starts is None else int(self.starts[i])

    def _rel(self, f: int) -> str:
        return self._rels[f] if self._rels is not None else self.files[f].rel

    def key(self, i: int) -> str:
        """Unit ``i``'s key."""
        if self._keys is not None:
            return self._keys[i]
        assert self._key_of is not None
        return self._key_of(self._rel(self._first(i)))[0]

    def keys(self) -> Sequence[str]:
        """Every unit's key, in order (derived for all of them on the first call)."""
        if self._keys is None:
            self._keys = list(map(self.key, range(len(self))))
        return self._keys

    def lock(self, i: int) -> str | None:
        """The absolute path of unit ``i``'s lock file, if its policy gives it one."""
        if self._units is not None:
            return self._units[i].lock
        template = self._template
        if not template:
            return None
        key = self.key(i)
        assert self._matched is not None  # every table built from files has the column
        if "{key}" in template and not self._matched[i]:
            return None
        return _lock_path(self.root, template, key)

    def lock_only(self) -> Ints:
        """Positions of the units that hold nothing but their own lock file: what an evicted
        cache entry leaves behind (lock files are never removed), which frees nothing."""
        if self._idle is None:
            self._idle = self._find_lock_only()
        return self._idle

    def _find_lock_only(self) -> Ints:
        if self._units is not None:
            return np.array(
                [
                    i
                    for i, u in enumerate(self._units)
                    if u.lock is not None and u.entries and all(e.path == u.lock for e in u.entries)
                ],
                np.int64,
            )
        template = self._template
        if not template or not len(self):
            return np.zeros(0, np.int64)
        # Only a unit of one file can be its own lock file, and its name ends as every lock
        # file's name does (the template's text after its last {key}): one pass in C over the
        # names of the one-file units finds the few candidates, each then confirmed.
        rels = self._rels_column()
        if self.starts is None:
            singles: list[int] | None = None
            names: Sequence[str] = rels
        else:
            ones = np.flatnonzero(np.diff(self.starts) == 1)
            singles = ones.tolist()
            names = list(map(rels.__getitem__, self.starts[ones].tolist()))
        tail = template.rpartition("{key}")[2]
        hits = _positions(list(map(str.endswith, names, repeat(tail))))
        base = self.root + "/"
        units = hits if singles is None else list(map(singles.__getitem__, hits))
        found = [i for i, h in zip(units, hits, strict=True) if self.lock(i) == base + names[h]]
        return np.array(found, np.int64)

    def _unit(self, i: int) -> Unit:
        if self._units is not None:
            return self._units[i]
        members = self.members(i)
        main = members[0] if len(members) == 1 else min(members, key=_rel_order)
        return Unit(
            self.key(i),
            self.kind,
            main.path,
            members,
            int(self.size[i]),
            float(self.last_use[i]),
            self.lock(i),
        )

    # -- finding the few units a protection points at -------------------------------------------

    def _units_of_files(self, where: Iterable[int]) -> list[int]:
        if self.starts is None:
            return sorted(set(where))
        at = np.searchsorted(self.starts, np.fromiter(where, np.int64), side="right") - 1
        return sorted(set(at.tolist()))

    def _rels_column(self) -> Sequence[str]:
        if self._rels is None:
            self._rels = list(map(_REL, self.files))
        return self._rels

    def with_keys(self, wanted: Collection[str]) -> list[int]:
        """Positions of the units whose key is one of ``wanted``."""
        if not wanted:
            return []
        if self._keys is None and self._suffixes is not None:
            # Key k's files are named k or k + a suffix: look for those names, then confirm.
            names = set(wanted)
            names.update(k + s for k in wanted for s in self._suffixes)
            hits = _positions(list(map(names.__contains__, self._rels_column())))
            return [i for i in self._units_of_files(hits) if self.key(i) in wanted]
        return _positions(list(map(set(wanted).__contains__, self.keys())))

    def under(self, prefixes: tuple[str, ...]) -> list[int]:
        """Positions of the units whose key starts with one of ``prefixes`` (folder paths
        relative to the root, each ending with "/")."""
        if not prefixes:
            return []
        if self.kind == "file" and self._units is None:
            rels = self._rels_column()
            # Most pins name a file, and no file is also a folder: one cheap pass (a set lookup
            # per name) rules those out before the costlier prefix test of every name.
            named = {p[:-1] for p in prefixes}
            files = {rels[f] for f in _positions(list(map(named.__contains__, rels)))}
            prefixes = tuple(p for p in prefixes if p[:-1] not in files)
            if not prefixes:
                return []
            # A file unit's key and its files' names share their folder part.
            hits = _positions(list(map(str.startswith, rels, repeat(prefixes))))
            return [i for i in self._units_of_files(hits) if self.key(i).startswith(prefixes)]
        return _positions(list(map(str.startswith, self.keys(), repeat(prefixes))))

    def locked_by(self, locked: Collection[str]) -> list[int]:
        """Positions of the units whose lock file is one of ``locked`` (absolute paths)."""
        if not locked or (self._units is None and not self._template):
            return []
        template = self._template
        if self._units is None and template and template.startswith("{key}"):
            tail = template[5:]
            if "{key}" not in tail:
                base = self.root + "/"
                keys = {
                    p[len(base) : len(p) - len(tail)]
                    for p in locked
                    if p.startswith(base) and p.endswith(tail) and len(p) >= len(base) + len(tail)
                }
                return [i for i in self.with_keys(keys) if self.lock(i) in locked]
        if self._units is not None:
            return _positions(list(map(locked.__contains__, map(_U_LOCK, self._units))))
        return [i for i in range(len(self)) if self.lock(i) in locked]

    def holding(self, inodes: Collection[tuple[int, int]]) -> list[int]:
        """Positions of the units with a file whose (dev, ino) is one of ``inodes``."""
        if not inodes or not self.files:
            return []
        # Inode numbers first (one pass over every file); the rare hit is checked with its dev.
        inos = np.fromiter(map(_INO, self.files), np.uint64, len(self.files))  # 64-bit inodes
        hits = np.flatnonzero(np.isin(inos, np.fromiter({i for _, i in inodes}, np.uint64)))
        return [
            i
            for i in self._units_of_files(hits.tolist())
            if any((e.dev, e.ino) in inodes for e in self.members(i))
        ]


def _positions(flags: list[bool]) -> list[int]:
    """Where the true values are (few, as a rule: each is found by a scan in C)."""
    out: list[int] = []
    i = -1
    try:
        while True:
            i = flags.index(True, i + 1)
            out.append(i)
    except ValueError:
        return out


# -- file units ----------------------------------------------------------------------------------


def _lock_path(root: str, template: str, key: str) -> str:
    folder, _, key_name = key.rpartition("/")
    name = template.replace("{key}", key_name)
    return f"{root}/{folder}/{name}" if folder else f"{root}/{name}"


def _one_suffix(rels: list[str], suffixes: frozenset[str], least: int) -> str | None:
    """The suffix the group strips from every name, when it is one and the same for all ("":
    no name ends with any); None when names differ, or one needs the regex to judge it.

    Then no two files share a key (each is its name minus the same suffix), so the keys need
    not even be made: a handful of passes in C over the names decide it.
    """
    if not rels or any(map(str.__contains__, rels, repeat("\n"))):
        return None
    first = rels[0]
    ends = [s for s in suffixes if first.endswith(s)]
    if not ends:
        return None if any(map(str.endswith, rels, repeat(tuple(suffixes)))) else ""
    s0 = max(ends, key=len)
    if not all(map(str.endswith, rels, repeat(s0))):
        return None
    # A longer suffix ending with s0 would win for some names; a name that is s0 alone leaves
    # no key (when one is required) and the regex falls back to a shorter suffix or none.
    odd = tuple(s for s in suffixes if len(s) > len(s0) and s.endswith(s0))
    if least:
        odd += ("/" + s0,)
        if s0 in rels:
            return None
    if odd and any(map(str.endswith, rels, repeat(odd))):
        return None
    return s0


def _file_units(
    snapshot: Snapshot,
    tree: TreePolicy,
    touches: Mapping[str, float],
    include: re.Pattern[str] | None,
    exclude: re.Pattern[str] | None,
) -> UnitTable:
    entries = snapshot.entries
    kinds = np.fromiter(map(_MODE, entries), np.int64, len(entries)) & _IFMT
    keep = kinds != stat.S_IFDIR
    files: list[Entry] = list(entries) if keep.all() else list(compress(entries, keep.tolist()))
    rels: list[str] = list(map(_REL, files))
    if include is not None:
        wanted = list(map(include.match, rels))
        files, rels = list(compress(files, wanted)), list(compress(rels, wanted))
    if exclude is not None:
        kept = list(map(not_, map(exclude.match, rels)))
        files, rels = list(compress(files, kept)), list(compress(rels, kept))
    m = len(files)
    root = snapshot.root
    sizes = np.fromiter(map(_SIZE, files), np.int64, m)
    lasts = np.maximum(
        np.fromiter(map(_MTIME, files), np.float64, m),
        np.fromiter(map(_ATIME, files), np.float64, m),
    )
    if touches:
        for i in _positions(list(map(touches.__contains__, map(_PATH, files)))):
            lasts[i] = max(lasts[i], touches[files[i].path])
    common: dict[str, Any] = {"kind": "file", "root": root, "template": tree.lock or None}
    # A table of one file to a unit, in walk order.
    singles = partial(
        UnitTable, files=files, starts=None, size=sizes, last_use=lasts, rels=rels, **common
    )
    # With a lock file named {key} + tail, a file is its unit's lock only if the group matched
    # its name and stripped exactly that tail: known at once below where keys are not made.
    lock = tree.lock or ""
    keyed_lock = lock.startswith("{key}") and lock.count("{key}") == 1
    none = np.zeros(0, np.int64)
    if not tree.group:
        # Every file its own unit, keyed by its path; no name matches a group.
        idle = none if keyed_lock or not tree.lock else None
        return singles(keys=rels, matched=np.zeros(m, np.bool_), idle=idle)
    rx = re.compile(tree.group)
    form = suffix_form(tree.group)
    if form is not None:
        least, _strip, ends = form
        s0 = _one_suffix(rels, ends, least)
        if s0 is not None:
            idle = None
            if keyed_lock:  # every name is its key + s0: all lock files, or none
                idle = np.arange(m) if s0 and s0 == lock[5:] else none
            return singles(
                keys=rels if s0 == "" else None,
                key_of=partial(match_key, rx),
                matched=np.full(m, s0 != "", np.bool_),
                suffixes=tuple(sorted(ends)),
                idle=idle,
            )
    keys, matched = group_keys(tree.group, rels)
    hits = np.ones(m, np.bool_) if matched is None else np.array(matched, np.bool_)
    first: dict[str, int] = {}
    ids = np.fromiter(map(first.setdefault, keys, range(m)), np.int64, m)
    if len(first) == m:  # every key its own unit
        return singles(keys=keys, matched=hits)
    # Units in the order of their first file, each unit's files in walk order.
    order = np.argsort(ids, kind="stable")
    heads, counts = np.unique(ids, return_counts=True)
    starts = np.zeros(len(heads) + 1, np.int64)
    np.cumsum(counts, out=starts[1:])
    cuts = starts[:-1]
    where = order.tolist()
    return UnitTable(
        files=list(map(files.__getitem__, where)),
        starts=starts,
        size=np.add.reduceat(sizes[order], cuts),
        last_use=np.maximum.reduceat(lasts[order], cuts),
        rels=list(map(rels.__getitem__, where)),
        keys=list(map(keys.__getitem__, heads.tolist())),
        matched=np.logical_or.reduceat(hits[order], cuts),
        **common,
    )


def _rel_order(e: Entry) -> tuple[int, str]:
    """A unit of several files is shown (and logged) as its shortest name: ``{fp}.wav``."""
    return len(e.rel), e.rel


# -- folder units --------------------------------------------------------------------------------


def _dir_units(
    snapshot: Snapshot,
    tree: TreePolicy,
    touches: Mapping[str, float],
    include: re.Pattern[str] | None,
    exclude: re.Pattern[str] | None,
) -> UnitTable:
    # Each rule: a folder glob and what one of its entries must be named (TreePolicy.unit_rules).
    rules = [(re.compile(fnmatch.translate(g)), _globs(req)) for g, req in tree.unit_rules()]
    heads: dict[str, Entry] = {}
    members: dict[str, list[Entry]] = {}
    for e in snapshot.entries:
        head, sep, _ = e.rel.partition("/")
        if not sep:
            if stat.S_ISDIR(e.mode) and any(g.match(head) for g, _ in rules):
                heads[head] = e
            continue
        members.setdefault(head, []).append(e)
    units = []
    for head, folder in heads.items():
        names = [e.rel[len(head) + 1 :] for e in members.get(head, ())]
        names = [n for n in names if "/" not in n]
        if not any(
            g.match(head) and (req is None or any(map(req.match, names))) for g, req in rules
        ):
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
    return UnitTable.of(units, snapshot.root)


# -- Hugging Face hub revisions ------------------------------------------------------------------


def _revision_units(
    snapshot: Snapshot,
    touches: Mapping[str, float],
    include: re.Pattern[str] | None,
    exclude: re.Pattern[str] | None,
) -> UnitTable:
    """One unit per revision of a hub cache (``janitor.cleanup.hf_units``); ``include`` and
    ``exclude`` match repository folder names."""
    units = [
        Unit(r.key, "hf_revision", r.path, r.entries, r.size, r.last_use)
        for r in revisions(snapshot, touches, include, exclude)
    ]
    return UnitTable.of(units, snapshot.root)
