"""Units: the groups of files a tree judges and deletes together, and the table they are read in.

A tree's ``units`` names its kind (:mod:`janitor.cleanup.kinds`), which groups a scan into
units: ``file`` (each file, unless the tree's ``group`` regex puts several in one: in the
default policy ``{fp}.wav``, ``{fp}.tmp.wav`` and ``{fp}.wav.lock`` share the key ``fp``),
``dir`` (each folder directly under the root that is a job's, with everything inside it) and
``hf_revision`` (each revision of a Hugging Face hub cache). This module is what every kind
fills and the planner reads: a ``Unit``, and the ``UnitTable`` of a tree's units as columns.

Trees hold up to millions of files, so a table built from files (the file kind's) keeps them
column by column, and a unit is made an object only when it is read.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from itertools import chain, repeat
from operator import eq, itemgetter
from typing import Any, NamedTuple, TypeVar, overload

import numpy as np
import numpy.typing as npt

from janitor.cleanup.scan import Entry

__all__ = ["Bools", "Floats", "Ints", "LazySequence", "Unit", "UnitTable", "column", "positions"]

_T = TypeVar("_T")


class Unit(NamedTuple):
    """Files that live and die together; ``last_use`` decides LRU order and orphan age.

    A NamedTuple rather than a dataclass: trees of a million files make a million of these, and
    a tuple is built several times faster while being just as immutable.
    """

    key: str
    kind: str  # its kind's name, as the tree's ``units`` gives it
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


# Column getters of Entry and Unit: C-level, unlike attribute access in a lambda.
_REL = column(Entry, "rel")
_INO = column(Entry, "ino")
_U_KEY = column(Unit, "key")
_U_ENTRIES = column(Unit, "entries")
_U_SIZE = column(Unit, "size")
_U_LAST = column(Unit, "last_use")
_U_LOCK = column(Unit, "lock")


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
        kind: str,
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
    def of(cls, units: Iterable[Unit], root: str = "", kind: str = "") -> UnitTable:
        """A table over Units already built (folder units, tests, callers with a list), of
        their kind (``kind``, the name of the kind that built them, when there are none)."""
        if isinstance(units, UnitTable):
            return units
        built = tuple(units)
        files = list(chain.from_iterable(map(_U_ENTRIES, built)))
        counts = np.fromiter(map(len, map(_U_ENTRIES, built)), np.int64, len(built))
        starts = np.zeros(len(built) + 1, np.int64)
        np.cumsum(counts, out=starts[1:])
        return cls(
            kind=built[0].kind if built else kind,
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
        hits = positions(list(map(str.endswith, names, repeat(tail))))
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
            hits = positions(list(map(names.__contains__, self._rels_column())))
            return [i for i in self._units_of_files(hits) if self.key(i) in wanted]
        return positions(list(map(set(wanted).__contains__, self.keys())))

    def under(self, prefixes: tuple[str, ...]) -> list[int]:
        """Positions of the units whose key starts with one of ``prefixes`` (folder paths
        relative to the root, each ending with "/")."""
        if not prefixes:
            return []
        if self._units is None:
            # A table built from files, not from Units: each unit's key is one of its files'
            # names through the group, in that file's folder (``match_key``).
            rels = self._rels_column()
            # Most pins name a file, and no file is also a folder: one cheap pass (a set lookup
            # per name) rules those out before the costlier prefix test of every name.
            named = {p[:-1] for p in prefixes}
            files = {rels[f] for f in positions(list(map(named.__contains__, rels)))}
            prefixes = tuple(p for p in prefixes if p[:-1] not in files)
            if not prefixes:
                return []
            # So a unit's key and its files' names share their folder part.
            hits = positions(list(map(str.startswith, rels, repeat(prefixes))))
            return [i for i in self._units_of_files(hits) if self.key(i).startswith(prefixes)]
        return positions(list(map(str.startswith, self.keys(), repeat(prefixes))))

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
            return positions(list(map(locked.__contains__, map(_U_LOCK, self._units))))
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


def positions(flags: list[bool]) -> list[int]:
    """Where the true values are (few, as a rule: each is found by a scan in C)."""
    out: list[int] = []
    i = -1
    try:
        while True:
            i = flags.index(True, i + 1)
            out.append(i)
    except ValueError:
        return out


# -- what a unit is shown and locked by ----------------------------------------------------------


def _lock_path(root: str, template: str, key: str) -> str:
    folder, _, key_name = key.rpartition("/")
    name = template.replace("{key}", key_name)
    return f"{root}/{folder}/{name}" if folder else f"{root}/{name}"


def _rel_order(e: Entry) -> tuple[int, str]:
    """A unit of several files is shown (and logged) as its shortest name: ``{fp}.wav``."""
    return len(e.rel), e.rel
