"""The file kind's grouping (``units = "file"``), column by column: a scan's files into the
tree's units, each file its own unit unless the tree's ``group`` regex gives several one key.

Trees hold up to millions of files, so each step is one pass that runs in C (``map``, ``zip``,
``compress``, one regex substitution over all names joined: ``janitor.cleanup.group_keys``)
rather than a Python statement per file, and the table keeps the files as columns
(:class:`janitor.cleanup.units.UnitTable`). Loaded when a tree of files is grouped (it needs
numpy), not when its kind is looked up.
"""

from __future__ import annotations

import re
import stat
from functools import partial
from itertools import compress, repeat
from operator import not_
from typing import TYPE_CHECKING, Any

import numpy as np

from janitor.cleanup.group_keys import group_keys, match_key, suffix_form
from janitor.cleanup.scan import Entry
from janitor.cleanup.units import UnitTable, column, positions

if TYPE_CHECKING:
    from janitor.cleanup.kinds.base import Grouping

__all__ = ["file_units"]

# Column getters of Entry: C-level, unlike attribute access in a lambda.
_PATH, _REL, _SIZE, _MTIME, _ATIME, _MODE = (
    column(Entry, f) for f in ("path", "rel", "size", "mtime", "atime", "mode")
)
_IFMT = 0o170000  # the file-type bits of st_mode


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


def file_units(g: Grouping, kind: str) -> UnitTable:
    """The units of a tree of files (``kind``: the kind's name, for its units)."""
    snapshot, tree, touches, include, exclude = g.snapshot, g.tree, g.touches, g.include, g.exclude
    entries = snapshot.entries
    types = np.fromiter(map(_MODE, entries), np.int64, len(entries)) & _IFMT
    keep = types != stat.S_IFDIR
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
        for i in positions(list(map(touches.__contains__, map(_PATH, files)))):
            lasts[i] = max(lasts[i], touches[files[i].path])
    common: dict[str, Any] = {"kind": kind, "root": root, "template": tree.lock or None}
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
