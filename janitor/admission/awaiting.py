"""Cache entries awaiting use: what the pipeline has probed or just converted and will cut from.

batchalign3 finds a WAV in its media cache (or converts one), probes it with ffprobe, may then
run UTR for as long as UTR takes, and only then makes its first cut, the moment the guard
records the job and pins its source. Between the two, nothing is open and no lock is held: the
entry is protected by use only if someone says it will be used. The guard says so: a probe of
a cache entry (the guarded ffprobe) and a conversion into the cache (the guarded ffmpeg) mark
the entry **awaiting use** for the caller (the prober, found as the guard finds a job's writer:
a pid and its start time). The mark is an ``await`` pin (:mod:`janitor.ledger.pins`) on the
entry's unit, so nothing evicts it, and a rename within the unit (``{fp}.tmp.wav`` to
``{fp}.wav``) keeps it.

It ends at the first of: a job of the prober starting to cut from the entry (that job's source
pin covers it from then until the job ends: :func:`take_over`), the prober's death, and the
tree's ``await_ttl`` (the reaper ends both, as for any pin). One mark is kept per prober and
entry: probing it again only pushes its end back.

Everything here runs inside the caller's write transaction.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from janitor.config.policy import tree_holding
from janitor.host.owner import same_owner
from janitor.host.space import allocated_size
from janitor.ledger.pins import AWAIT

if TYPE_CHECKING:
    from janitor.config.policy import Policy
    from janitor.ledger.pins import PinInfo
    from janitor.ledger.tx import Tx

__all__ = ["Awaiting", "CacheEntry", "awaiting_now", "cache_entry", "mark_awaiting", "take_over"]


@dataclass(frozen=True, slots=True)
class CacheEntry:
    """A path inside a cache tree, as that tree sees it: the tree, the path as it records it
    (e.g. ``/Users/ana/Library/Application Support/batchalign3/media_cache/ab12.wav``) and the
    key of the unit it belongs to (``ab12``)."""

    tree: str
    path: str
    unit: str


def cache_entry(policy: Policy, path: str) -> CacheEntry | None:
    """The cache entry ``path`` is (or would be) part of, or None outside every cache tree
    whose entries can be evicted for room (a Hugging Face hub cache has revisions, not
    entries: only its quota evicts them)."""
    caches = [t for t in policy.trees.values() if t.evicts_for_room]
    inside = tree_holding(caches, path)
    if inside is None:
        return None
    tree = policy.tree(inside.name)
    root = os.path.normpath(os.path.abspath(tree.path))
    rel = os.path.relpath(inside.path, root)
    if rel.startswith(".."):
        return None
    return CacheEntry(inside.name, inside.path, tree.unit_key(rel))


def mark_awaiting(
    tx: Tx,
    policy: Policy,
    entry: CacheEntry,
    *,
    owner_pid: int,
    owner_start: float | None,
    now: float,
) -> PinInfo:
    """Mark ``entry`` awaiting use by process ``owner_pid`` (started at ``owner_start``) for
    its tree's ``await_ttl``; a live mark of the same owner on the same entry is pushed back
    instead of a second one made. A probe or a conversion is a use: it is recorded as a touch
    too, so once the mark ends the entry is not the first that least recently used order
    takes."""
    ttl = policy.tree(entry.tree).await_ttl
    tx.touches.record([entry.path], now=now)
    for mark in tx.pins.awaiting_on(entry.tree, entry.unit):
        if mark.owner_pid == owner_pid and same_owner(mark.owner_start, owner_start):
            tx.pins.extend(mark.id, now + ttl)
            return mark
    return tx.pins.add(
        entry.tree, entry.path, owner_pid=owner_pid, owner_start=owner_start, ttl=ttl, now=now,
        kind=AWAIT, unit=entry.unit,
    )  # fmt: skip


def take_over(
    tx: Tx,
    entry: CacheEntry,
    *,
    writer_pid: int,
    writer_start: float | None,
    job: str,
    now: float,
) -> int:
    """A job of ``writer_pid`` cuts from ``entry`` now: its own marks on the entry end (the
    job's source pin covers the entry from here until the job ends). How many ended."""
    return tx.pins.take_over(
        entry.tree, entry.unit, owner_pid=writer_pid, owner_start=writer_start, job=job, now=now
    )


@dataclass(frozen=True, slots=True)
class Awaiting:
    """An entry awaiting use now, as ``janitor status`` shows it: the mark, and the bytes its
    unit holds (what the mark keeps from eviction)."""

    mark: PinInfo
    bytes: int

    def as_dict(self) -> dict[str, object]:
        """One entry of ``janitor status --json``'s ``awaiting``."""
        m = self.mark
        return {
            "id": m.id,
            "tree": m.tree,
            "path": m.path,
            "unit": m.unit,
            "bytes": self.bytes,
            "prober_pid": m.owner_pid,
            "since": m.created,
            "until": m.expires,
        }


def awaiting_now(tx: Tx, policy: Policy, *, now: float | None = None) -> list[Awaiting]:
    """The entries awaiting use now (marks whose prober lives and whose TTL has not passed),
    each with what its unit holds; a read, no writes."""
    return [Awaiting(m, _unit_bytes(policy, m)) for m in tx.pins.awaiting(now=now)]


def _unit_bytes(policy: Policy, mark: PinInfo) -> int:
    """What the unit a mark covers holds: the marked file, or (renamed within its unit since,
    ``{fp}.tmp.wav`` to ``{fp}.wav``) the files of its folder with the same key."""
    if os.path.lexists(mark.path) or mark.unit is None or mark.tree not in policy.trees:
        return allocated_size(mark.path)
    tree = policy.tree(mark.tree)
    folder = os.path.dirname(mark.path)
    root = os.path.normpath(os.path.abspath(tree.path))
    total = 0
    try:
        names = os.listdir(folder)
    except OSError:
        return 0
    for name in names:
        rel = os.path.relpath(os.path.join(folder, name), root)
        if tree.unit_key(rel) == mark.unit:
            total += allocated_size(os.path.join(folder, name))
    return total
