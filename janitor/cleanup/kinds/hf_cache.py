"""Hugging Face hub cache revisions as units (a tree with ``units = "hf_revision"``).

The hub cache (``~/.cache/huggingface/hub``) holds a folder per repository,
``models--org--name`` (or ``datasets--``, ``spaces--``), with ``blobs/`` (the files, named by
their hash), ``refs/`` (``main``: the commit a branch points at) and ``snapshots/<commit>/``:
one folder per revision, a tree of relative symlinks into ``blobs/``. Newer huggingface_hub
versions (2.x) may keep one copy of a file that several repositories share in
``blobs/<2 hex>/<hash>`` at the cache's top, reached through a repository blob that is itself
a symlink.

A unit is one revision: its snapshot folder with everything in it, every file its symlinks
lead to (each hop), the refs that name it, and, for the last revision of a repository to go
(the most recently used), the rest of the repository folder (``refs/``, ``.no_exist/``, blobs
no revision uses), which huggingface_hub removes with that revision. A file that several
revisions use is in each of their units (so none of them is deleted while it is open) but
counts in the size of one only: the most recently used (ties: the greatest key), the one that
goes last when revisions go least recently used first. So the units' sizes add up to what the
cache holds, and each is what deleting it frees when the older revisions went before it.
A revision's last use is the latest read (atime) or change (mtime) of its own files, and the
latest change of its snapshot folder (see ``_last_use``).

Links are resolved here the way the kernel would, one component at a time, on the scan's own
entries: a link that leaves the tree, goes through a symlinked folder, ends nowhere or takes
more than a few hops makes its revision no unit (never deleted). The scan never follows a
link; this reads the links (``readlink``) and the refs files (a few dozen bytes each).
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping
from typing import NamedTuple

from janitor.cleanup.scan import Entry, Snapshot

__all__ = ["Revision", "revisions"]

#: Symlink hops followed from a snapshot file (huggingface_hub makes one or two).
_HOPS = 8


class Revision(NamedTuple):
    """One revision of one repository, as a unit: what units.Unit is built from."""

    key: str  # "models--org--name/snapshots/<commit>" (unit_rules.revision_key of its paths)
    path: str  # the snapshot folder
    entries: tuple[Entry, ...]
    size: int  # allocated bytes of the entries it owns (see the module docstring)
    last_use: float


def revisions(
    snapshot: Snapshot,
    touches: Mapping[str, float],
    include: re.Pattern[str] | None = None,
    exclude: re.Pattern[str] | None = None,
) -> list[Revision]:
    """Every revision of the repositories in a scanned hub cache; ``include`` and ``exclude``
    match repository folder names (``models--openai--whisper-large-v3``)."""
    by_rel = {e.rel: e for e in snapshot.entries}
    repos: dict[str, list[Entry]] = {}
    for e in snapshot.entries:
        repos.setdefault(e.rel.partition("/")[0], []).append(e)
    found: list[tuple[list[_Draft], list[Entry]]] = []
    for head, members in repos.items():
        top = by_rel.get(head)
        if top is None or not top.is_dir or "--" not in head or f"{head}/snapshots" not in by_rel:
            continue
        if include is not None and not include.match(head):
            continue
        if exclude is not None and exclude.match(head):
            continue
        found.append(_repo(snapshot.root, head, members, by_rel))
    drafts = [d for ds, _ in found for d in ds]
    users: dict[str, int] = {}
    for d in drafts:
        for e in d.reached:
            users[e.rel] = users.get(e.rel, 0) + 1
    for d in drafts:
        d.last_use = _last_use(d, users, touches)
    for ds, leftovers in found:
        if ds:  # the rest of the folder goes when its last revision does
            max(ds, key=_Draft.rank).extra.extend(leftovers)
    # Who owns each file used by several revisions (of one repository, or, through the shared
    # store, of several): the most recently used of them.
    owner: dict[str, _Draft] = {}
    for d in drafts:
        for e in d.reached:
            o = owner.get(e.rel)
            if o is None or d.rank() > o.rank():
                owner[e.rel] = d
    out = []
    for d in drafts:
        entries = {e.rel: e for e in (*d.own, *d.extra, *d.reached)}
        size = sum(e.size for e in (*d.own, *d.extra))
        size += sum(e.size for e in d.reached if owner[e.rel] is d)
        out.append(Revision(d.key, d.own[0].path, tuple(entries.values()), size, d.last_use))
    return out


class _Draft:
    """A revision while its repository is read: what it holds itself, what its links reach."""

    __slots__ = ("extra", "key", "last_use", "own", "reached")

    def __init__(self, key: str, own: list[Entry], reached: list[Entry]):
        self.key = key
        self.own = own  # its snapshot folder (first) and everything in it
        self.reached = reached  # every hop of its links, deduplicated
        self.extra: list[Entry] = []  # its refs; the rest of the repository for the last one
        self.last_use = 0.0

    def rank(self) -> tuple[float, str]:
        """The order revisions go in: least recently used first, ties by key."""
        return self.last_use, self.key


def _last_use(d: _Draft, users: Mapping[str, int], touches: Mapping[str, float]) -> float:
    """When a revision was last used: the latest change of its snapshot, and the latest read
    or change of its files; of the files other revisions use too, only when it has no file of
    its own (reading a shared tokenizer through a new revision says nothing of an old one).

    Reading a file sets its atime; listing a folder (any scan, ours too) or reading a link sets
    theirs, so only files' atimes tell a use. A recorded touch of any of them counts too.
    """
    mine = [e for e in d.reached if users[e.rel] == 1] or d.reached
    seen = [*d.own, *mine]
    last = max(max(e.mtime, e.atime) if stat.S_ISREG(e.mode) else e.mtime for e in seen)
    if touches:
        last = max(last, *(touches.get(e.path, 0.0) for e in seen))
    return last


def _repo(
    root: str, head: str, members: list[Entry], by_rel: Mapping[str, Entry]
) -> tuple[list[_Draft], list[Entry]]:
    """The revisions of one repository folder, and the rest of it (none when a revision is
    broken: huggingface_hub never removes the folder while one is left)."""
    snaps = f"{head}/snapshots/"
    held: dict[str, list[Entry]] = {}
    rest: list[Entry] = []
    for e in members:
        if e.rel.startswith(snaps):
            held.setdefault(e.rel[len(snaps) :].partition("/")[0], []).append(e)
        else:
            rest.append(e)
    drafts: dict[str, _Draft] = {}
    broken = False
    for name, inside in held.items():
        folder = by_rel.get(snaps + name)
        if folder is None or not folder.is_dir:
            broken = True  # a file among the snapshots: huggingface_hub calls it corrupted
            continue
        reached: dict[str, Entry] = {}
        for e in inside:
            if stat.S_ISLNK(e.mode):
                hops = _follow(root, e, by_rel)
                if hops is None:
                    broken = True
                    break
                reached.update((h.rel, h) for h in hops)
        else:
            own = [folder, *(e for e in inside if e is not folder)]
            drafts[name] = _Draft(snaps + name, own, list(reached.values()))
    used = {e.rel for d in drafts.values() for e in d.reached}
    leftovers = []
    for e in rest:
        if e.rel in used:
            continue
        if e.rel.startswith(f"{head}/refs/") and stat.S_ISREG(e.mode):
            named = drafts.get(_read_ref(e.path))
            if named is not None:
                named.extra.append(e)  # huggingface_hub removes a revision's refs with it
                continue
        leftovers.append(e)
    return list(drafts.values()), [] if broken else leftovers


def _follow(root: str, link: Entry, by_rel: Mapping[str, Entry]) -> list[Entry] | None:
    """Every entry a symlink leads to, hop by hop, to a regular file in the tree; None when it
    leaves the tree, passes a symlinked folder, ends nowhere or takes too many hops."""
    hops: list[Entry] = []
    cur = link
    for _ in range(_HOPS):
        try:
            target = os.readlink(cur.path)
        except OSError:
            return None
        rel = _resolve(root, cur.rel, target, by_rel)
        nxt = by_rel.get(rel) if rel is not None else None
        if nxt is None:
            return None
        hops.append(nxt)
        if stat.S_ISREG(nxt.mode):
            return hops
        if not stat.S_ISLNK(nxt.mode):
            return None
        cur = nxt
    return None


def _resolve(root: str, source: str, target: str, by_rel: Mapping[str, Entry]) -> str | None:
    """Where link ``source`` (relative to the root) pointing at ``target`` leads, relative to
    the root; None outside it or through anything but the scan's real folders."""
    if target.startswith("/"):
        if not target.startswith(root + "/"):
            return None
        parts: list[str] = []
        names = target[len(root) + 1 :].split("/")
    else:
        parts = source.split("/")[:-1]
        names = target.split("/")
    names = [n for n in names if n not in ("", ".")]
    for i, name in enumerate(names):
        if name == "..":
            if not parts:
                return None  # above the root
            parts.pop()
            continue
        parts.append(name)
        if i < len(names) - 1:
            folder = by_rel.get("/".join(parts))
            if folder is None or not folder.is_dir:
                return None  # a symlinked folder (or none): the kernel would go elsewhere
    return "/".join(parts) if parts else None


def _read_ref(path: str) -> str:
    """The commit a refs file names ("" if it cannot be read as one)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return ""
    try:
        data = os.read(fd, 256)
    except OSError:
        return ""
    finally:
        os.close(fd)
    return data.decode("ascii", "replace").strip()
