"""A ``Plan`` carried out: the only way the janitor removes files.

``apply`` records each batch in the ledger's log, before and after it goes (``_Log``: every
unit removed, with its reason), and hands it to its tree's deleter (``janitor.cleanup.deleter``),
which removes it relative to an opened parent folder without following symlinks, never leaves
the tree's filesystem and never removes the tree root. Every file is re-checked right before it
goes (same inode, size and mtime; owned by us; not pinned, locked or open now:
``janitor.cleanup.recheck``). Each unit goes as its kind removes it (``janitor.cleanup.kinds``):
a Hugging Face hub revision (``units = "hf_revision"``) by huggingface_hub's own cache API, once
the same checks passed on every path it would remove. A tree whose deletes mostly wait on the
disk is finished by a few threads (``janitor.cleanup.pool``), each with every check.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from janitor.cleanup.deleter import Deleter
from janitor.cleanup.plan import Plan, PlanItem, TreePlan
from janitor.cleanup.pool import AdaptivePool, Tuning
from janitor.cleanup.recheck import Fresh, Partial, Skip, why
from janitor.errors import LedgerError, LedgerFull
from janitor.host import inuse
from janitor.host.space import volume_stats
from janitor.humanize import format_size, plural
from janitor.ledger.db import Ledger
from janitor.ledger.log import LogRow

__all__ = ["Outcome", "Report", "VolumeDelta", "apply"]


class Outcome(NamedTuple):
    """What happened to one planned unit; ``at``: when it was removed (epoch seconds; 0.0
    when it was not), the time its ``delete`` line carries."""

    item: PlanItem
    deleted: bool
    files: int
    bytes: int
    skipped: str | None = None
    at: float = 0.0


@dataclass(frozen=True, slots=True)
class VolumeDelta:
    """Free space of a volume before and after the deletes."""

    device: int
    mount: str
    free_before: int
    free_after: int

    @property
    def reclaimed(self) -> int:
        """Free space gained (other writers may make this smaller or larger)."""
        return self.free_after - self.free_before


@dataclass(frozen=True, slots=True)
class Report:
    """What ``apply`` did: each unit's outcome and each volume's reclaimed space."""

    outcomes: tuple[Outcome, ...]
    volumes: tuple[VolumeDelta, ...] = ()
    dry_run: bool = False
    warnings: tuple[str, ...] = field(default=())
    #: None, or why the deletes stopped part way: True when the ledger's disk was full (the
    #: record of the next batch could not be written), False for another ledger error.
    stopped: bool | None = None

    @property
    def deleted_bytes(self) -> int:
        """Allocated bytes of the files removed."""
        return sum(o.bytes for o in self.outcomes if o.deleted)

    @property
    def reclaimed_bytes(self) -> int:
        """Free space actually gained, summed over volumes."""
        return sum(v.reclaimed for v in self.volumes)

    @property
    def deleted_units(self) -> int:
        """Units removed."""
        return sum(1 for o in self.outcomes if o.deleted)


#: json.dumps(..., sort_keys=True) without building an encoder for every removed unit.
_encode = json.JSONEncoder(sort_keys=True).encode


def _log_detail(files: int, last_use: float, reason: str) -> str:
    """The log row's detail: what was removed and why, as the other log events spell theirs."""
    return _encode({"files": files, "last_use": last_use, "reason": reason})


def _log_path(path: str) -> str:
    """A path as the ledger stores it (undecodable bytes spelled out, as ``Ledger.log`` does)."""
    if path.isascii():
        return path
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


#: A tree whose deletes wait on the disk more than they compute is finished by this many threads
#: (the calling one included): the syscalls of one overlap the disk waits of another. Each
#: thread does every check; only the order of the removals mixes (the log keeps plan order).
_THREADS = 2
#: Units the calling thread deletes alone before judging (again) how long they waited.
_PROBE = 512
#: Threads when such a window's wall time exceeds its CPU time by this factor.
_WAIT_RATIO = 1.5
#: Units left after the probe below which one thread does it all.
_THREADS_MIN = 1024
#: Consecutive units (of the LRU order) a thread takes at a time.
_CHUNK = 64


def _outcome(deleter: Deleter, item: PlanItem) -> Outcome:
    try:
        files, size = deleter.delete(item.unit)
        return Outcome(item, files > 0, files, size, at=time.time())
    except Partial as exc:
        return Outcome(item, True, exc.files, exc.size, f"partly removed: {exc}", time.time())
    except Skip as exc:
        return Outcome(item, False, 0, 0, str(exc))
    except OSError as exc:
        return Outcome(item, False, 0, 0, f"error: {exc.strerror}")


class NoRecord(Exception):
    """The ledger could not record what a batch was about to delete: nothing of it was.
    ``done``: the outcomes of the tree's units before it; ``left``: the units not deleted."""

    def __init__(
        self,
        error: LedgerError,
        done: list[Outcome] | None = None,
        left: list[PlanItem] | None = None,
    ) -> None:
        super().__init__(str(error))
        self.error = error
        self.done = done or []
        self.left = left or []


class _Log:
    """The record of the removals, written ahead of them (the calling thread only).

    Each batch of units is first recorded as ``deleting`` (what, where, why) in one committed
    transaction, and only then removed; once it is done, one more transaction confirms it: a
    ``delete`` line for each unit removed, and the batch's ``deleting`` lines taken out. So no
    file goes without a line in the ledger: after a crash, the ``deleting`` lines left say what
    was being deleted; when the record cannot be written (a full disk, a read-only ledger),
    nothing of the batch is deleted (NoRecord).
    """

    def __init__(self, ledger: Ledger | None, batch: int) -> None:
        self.ledger = ledger
        self.batch = batch
        #: Confirmations that could not be written (the intent stays the record).
        self.unconfirmed = 0

    def intend(self, items: list[PlanItem], device: int) -> range | None:
        """Record the batch about to go; the ids of its lines (None without a ledger)."""
        if self.ledger is None:
            return None
        now = time.time()
        rows: list[LogRow] = [
            (now, "deleting", i.tree, device, None, i.size, _log_path(i.unit.path),
             _log_detail(len(i.unit.entries), i.unit.last_use, i.reason))
            for i in items
        ]  # fmt: skip
        try:
            with self.ledger.write() as tx:
                return tx.log.append(rows)
        except LedgerError as exc:
            raise NoRecord(exc) from None

    def confirm(self, intents: range | None, outcomes: list[Outcome], device: int) -> None:
        """A batch done: a ``delete`` line per unit removed, at the time it was removed (not
        this confirmation's, which may wait for the writer lock behind a pin taken since),
        its ``deleting`` lines out."""
        if self.ledger is None or intents is None:
            return
        now = time.time()
        rows: list[LogRow] = [
            (o.at or now, "delete", o.item.tree, device, None, o.bytes,
             _log_path(o.item.unit.path), _log_detail(o.files, o.item.unit.last_use,
                                                      o.item.reason))
            for o in outcomes
            if o.deleted
        ]  # fmt: skip
        try:
            with self.ledger.write() as tx:
                tx.log.add_rows(rows)
                tx.log.remove_intents(intents)
        except LedgerError:
            self.unconfirmed += sum(1 for o in outcomes if o.deleted)


#: Where the kernel cannot be asked per file, how old the open-file list checked right before a
#: delete may be: one list costs tens of ms (every process's open files), so a long sweep
#: takes it again at most this often, and a short one takes it once, after planning.
_OPEN_REFRESH_S = 0.5
#: How old the pins the deleter checks may be: a pin taken during a long sweep is seen within it.
_PINS_REFRESH_S = 0.05


def _tuning() -> Tuning:
    """The pool's numbers as they are now (tests and the benchmark set them on this module)."""
    return Tuning(_THREADS, _PROBE, _WAIT_RATIO, _THREADS_MIN, _CHUNK)


def _pool(
    tree: TreePlan,
    open_set: frozenset[tuple[int, int]],
    pinned: Callable[[], frozenset[str]],
    total: int,
) -> AdaptivePool[Deleter, PlanItem, Outcome]:
    """The deleters of one tree: the calling thread's, and those of the helper threads once the
    deletes show that they mostly wait on the disk. Each does every check; the helpers read the
    pins the calling thread last read (it reads them again between its chunks)."""
    pins = [pinned()]
    opened = Fresh(lambda: inuse.open_inodes({tree.device}), _OPEN_REFRESH_S)
    main = Deleter(tree, open_set, pinned, opened)

    def spawn() -> Deleter | None:
        try:
            return Deleter(tree, open_set, lambda: pins[0], opened)
        except (Skip, OSError):
            return None  # the root went meanwhile: the calling thread finds out itself

    def refresh() -> None:
        pins[0] = pinned()

    return AdaptivePool(
        main, spawn, _outcome, total, _tuning(), between=refresh, name="janitor-delete"
    )


def _apply_tree(
    tree: TreePlan,
    items: list[PlanItem],
    open_set: frozenset[tuple[int, int]],
    pinned: Callable[[], frozenset[str]],
    log: _Log,
    progress: Callable[[int], None],
) -> list[Outcome]:
    """Delete one tree's units batch by batch, each recorded before it goes and confirmed
    after (_Log); NoRecord, with the outcomes so far, when a batch could not be recorded."""
    try:
        pool = _pool(tree, open_set, pinned, len(items))
    except (Skip, OSError) as exc:
        why_not = str(exc) if isinstance(exc, Skip) else why(exc, "tree root")
        return [Outcome(i, False, 0, 0, why_not) for i in items]
    outcomes: list[Outcome] = []
    try:
        for start in range(0, len(items), log.batch):
            batch = items[start : start + log.batch]
            try:
                intents = log.intend(batch, tree.device)
            except NoRecord as stop:
                raise NoRecord(stop.error, outcomes, items[start:]) from None
            done = pool.run(batch)
            log.confirm(intents, done, tree.device)
            outcomes += done
            progress(len(batch))
    finally:
        for deleter in pool.workers:
            deleter.close()
    return outcomes


def apply(
    plan: Plan,
    *,
    ledger: Ledger | None,
    dry_run: bool = False,
    open_set: frozenset[tuple[int, int]] = frozenset(),
    on_progress: Callable[[int], None] | None = None,
    batch: int = 256,
) -> Report:
    """Delete the plan's units (or, with ``dry_run``, only say what would go).

    Every removal is recorded in the ledger before it happens and confirmed after (_Log): a
    batch at a time, in plan order, event ``deleting`` then ``delete`` with its tree, path,
    bytes and reason. When a batch cannot be recorded, nothing of it or after it is deleted,
    and the report says so (``stopped``, a warning); the units before it stay recorded.
    """
    if dry_run or not plan.items:
        return Report(
            tuple(Outcome(i, False, 0, 0, "dry run" if dry_run else None) for i in plan.items),
            dry_run=dry_run,
        )
    trees = {t.tree: t for t in plan.trees}
    by_tree: dict[str, list[PlanItem]] = {}
    for item in plan.items:
        by_tree.setdefault(item.tree, []).append(item)
    volumes: dict[int, tuple[str, int]] = {}
    for name in by_tree:
        vs = volume_stats(trees[name].root)
        volumes.setdefault(vs.device, (vs.mount, vs.free))

    def read_pins() -> frozenset[str]:
        if ledger is None:
            return frozenset()
        with ledger.read() as tx:
            return frozenset(tx.pins.live_paths())

    pinned = Fresh(read_pins, _PINS_REFRESH_S)

    count = [0]

    def progress(k: int) -> None:
        count[0] += k
        if on_progress is not None:
            on_progress(count[0])

    log = _Log(ledger, batch)
    outcomes: list[Outcome] = []
    stopped: str | None = None
    stop_error: LedgerError | None = None
    full = False
    for name, items in by_tree.items():
        if stopped is not None:
            outcomes += [Outcome(i, False, 0, 0, stopped) for i in items]
            continue
        try:
            outcomes += _apply_tree(trees[name], items, open_set, pinned, log, progress)
        except NoRecord as exc:
            stopped = f"not deleted: the ledger could not record it ({exc.error})"
            outcomes += exc.done
            outcomes += [Outcome(i, False, 0, 0, stopped) for i in exc.left]
            full = isinstance(exc.error, LedgerFull)
            stop_error = exc.error
    deltas = []
    warnings = []
    deleted_on: dict[int, int] = {}
    for o in outcomes:
        if o.deleted:
            dev = trees[o.item.tree].device
            deleted_on[dev] = deleted_on.get(dev, 0) + o.bytes
    for device, (mount, before) in volumes.items():
        after = volume_stats(mount).free
        delta = VolumeDelta(device, mount, before, after)
        deltas.append(delta)
        deleted = deleted_on.get(device, 0)
        if deleted >= 1024 * 1024 and delta.reclaimed < deleted // 2:
            warnings.append(
                f"{mount}: deleted {format_size(deleted)} but free space grew by only "
                f"{format_size(delta.reclaimed)}; "
                "files may still be held open, or snapshots (Time Machine local snapshots, "
                "btrfs/ZFS) may keep the blocks"
            )
    if log.unconfirmed:
        warnings.append(
            f"{plural(log.unconfirmed, 'removal')} "
            f"{'is' if log.unconfirmed == 1 else 'are'} recorded only as `deleting` in the log: "
            f"the ledger could not confirm {'it' if log.unconfirmed == 1 else 'them'}"
        )
    if stopped is not None:
        done = sum(1 for o in outcomes if o.deleted)
        left = sum(1 for o in outcomes if o.skipped == stopped)
        went = (
            f"deleted {plural(done, 'unit')} before, each recorded in the ledger"
            if done
            else "nothing was deleted"
        )
        why = (
            f"the ledger's disk is full ({ledger.path.parent if ledger else '?'})"
            if full
            else f"the ledger could not record the next deletions ({stop_error})"
        )
        warnings.insert(
            0,
            f"stopped: {why}: {went}; {left} more {'was' if left == 1 else 'were'} not deleted "
            "(no record, no deletion); "
            "free some space there and sweep again",
        )
        return Report(tuple(outcomes), tuple(deltas), False, tuple(warnings), stopped=full)
    return Report(tuple(outcomes), tuple(deltas), False, tuple(warnings))
