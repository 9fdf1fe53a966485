"""Sweeps: the periodic full sweep, and the eviction thread for changed trees and low volumes.

The watcher reports a cache tree once its events settle, the sampler a volume below free_low;
both land in :class:`Pending`, and the eviction thread (``janitor-evict``) handles what piled
up, one pass at a time. Each sweep's numbers go to the daemon state (metrics, status.json).
"""

from __future__ import annotations

import logging
import threading
import time

from janitor.admission.volume import Volume
from janitor.config.settings import Settings
from janitor.core import Janitor
from janitor.daemon.lifecycle import guarded
from janitor.daemon.metrics import DaemonState, TreeState
from janitor.daemon.policy_watch import Watching
from janitor.daemon.volumes import volume_trees
from janitor.host.space import mount_point, volume_stats
from janitor.sizes import format_size

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

    from janitor.cleanup.apply import Report
    from janitor.cleanup.staging import StagingJobs
    from janitor.cleanup.sweep import SweepResult

__all__ = ["Pending", "Sweeper", "deleted_summary"]

log = logging.getLogger("janitor.daemon")


#: Why a unit went, as the log says it: "3 over quota in media_cache".
_WHY = {
    "quota": "over quota",
    "age": "unused past max_age",
    "orphan": "orphaned",
    "pressure": "for free space",
    "make-room": "to make room",
}


def deleted_summary(report: Report) -> str:
    """What a sweep removed, in one line a person reads: ``4 units, 35 MiB (free space +35
    MiB): 3 over quota in media_cache (30 MiB), 1 orphaned in job_tmp (5 MiB)``; the reasons
    by tree, most bytes first."""
    groups: dict[tuple[str, str], list[int]] = {}
    for o in report.outcomes:
        if o.deleted:
            counted = groups.setdefault((o.item.reason, o.item.tree), [0, 0])
            counted[0] += 1
            counted[1] += o.bytes
    n = report.deleted_units
    reasons = ", ".join(
        f"{count} {_WHY.get(reason, reason)} in {tree} ({format_size(size)})"
        for (reason, tree), (count, size) in sorted(groups.items(), key=lambda g: -g[1][1])
    )
    return (
        f"{n} unit{'s' if n != 1 else ''}, {format_size(report.deleted_bytes)} "
        f"(free space +{format_size(report.reclaimed_bytes)}): {reasons}"
    )


class Pending:
    """Trees that changed and volumes under pressure, waiting for the eviction thread; and
    whether its last pressure pass on each volume freed something (the sampler's pace of
    passes reads it)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._trees: set[str] = set()
        self._volumes: set[int] = set()
        self._freed: dict[int, bool] = {}  # each volume's last pressure pass freed something

    def tree(self, name: str) -> None:
        """Tree ``name`` changed (its events settled): sweep it."""
        with self._cond:
            self._trees.add(name)
            self._cond.notify()

    def volume(self, device: int) -> None:
        """Volume ``device`` is below free_low: evict until free_target."""
        with self._cond:
            self._volumes.add(device)
            self._cond.notify()

    def relieved(self, device: int, *, freed: bool) -> None:
        """The eviction thread's pressure pass on volume ``device`` ended, having freed
        something or not."""
        with self._cond:
            self._freed[device] = freed

    def last_freed(self, device: int) -> bool:
        """Whether the last pressure pass on volume ``device`` freed something (so the next
        may find more)."""
        with self._cond:
            return self._freed.get(device, False)

    def wait(self, stop: threading.Event) -> None:
        """Sleep until something is pending or ``stop`` is set (and ``wake_all`` called)."""
        with self._cond:
            while not (self._trees or self._volumes or stop.is_set()):
                self._cond.wait()

    def take(self) -> tuple[set[str], set[int]]:
        """What is pending, emptied."""
        with self._cond:
            trees, self._trees = self._trees, set()
            volumes, self._volumes = self._volumes, set()
        return trees, volumes

    def wake_all(self) -> None:
        """Wake the waiters (to see the stop event)."""
        with self._cond:
            self._cond.notify_all()


class Sweeper:
    """Runs the sweeps and the pressure evictions, and records what each sweep measured."""

    def __init__(
        self,
        janitor: Janitor,
        settings: Settings,
        state: DaemonState,
        stop: threading.Event,
        *,
        pending: Pending,
        watching: Watching,
    ) -> None:
        self.janitor = janitor
        self.settings = settings
        self.state = state
        self.pending = pending
        self.watching = watching
        self._stop = stop
        self._thread: threading.Thread | None = None
        # Each staging tree's job store that could not be read, as last logged: (db, problem).
        self._stores_said: dict[str, tuple[str, str]] = {}
        self._stores_lock = threading.Lock()

    # -- the eviction thread -------------------------------------------------------------------

    def start(self) -> None:
        """Start the eviction thread."""
        self._thread = threading.Thread(target=self._work, name="janitor-evict", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Wake the eviction thread to see the stop event."""
        self.pending.wake_all()

    def join(self) -> None:
        """Wait a moment for a pass in progress (a sweep is not waited for to its end)."""
        if self._thread is not None:
            self._thread.join(timeout=1.0)

    def _work(self) -> None:
        """Runs ``process_dirty`` whenever a tree changed or a volume is under pressure, one
        pass at a time (what piles up meanwhile is handled by the next pass)."""
        run = guarded(self.process_dirty, self._stop)
        while True:
            self.pending.wait(self._stop)
            if self._stop.is_set():
                return
            run()

    def process_dirty(self) -> None:
        """Sweep trees that changed, and evict under pressure where volumes are low."""
        dirty, pressure = self.pending.take()
        trees = self.janitor.policy.trees
        if any(t in trees and trees[t].role == "scratch" for t in dirty):
            # A job folder made or removed: a call waiting for room tries again now.
            self.janitor.space.notify()
        for tree in sorted(dirty):
            if tree in trees and trees[tree].role == "cache":
                self.record_sweep(self.janitor.sweep(tree, pressure=False))
        for device in pressure:
            self.relieve(device)

    # -- sweeps --------------------------------------------------------------------------------

    def sweep_all(self) -> None:
        """The periodic full sweep (quotas, ages, orphans, pressure)."""
        self.record_sweep(self.janitor.sweep())

    def record_sweep(self, result: SweepResult) -> None:
        """Publish what a sweep measured of each tree; log what it deleted and its warnings."""
        now = time.time()
        watch = {w.tree: w for w in self.watching.status()}
        stuck: dict[str, set[str]] = {}  # orphans chosen and still there
        for o in result.report.outcomes:
            if o.item.reason == "orphan" and not o.deleted:
                stuck.setdefault(o.item.tree, set()).add(o.item.unit.path)
        with self.state.lock:
            for t in result.plan.trees:
                if t.quota is None and t.role == "cache" and t.tree in self.state.trees:
                    continue  # a pressure-only summary: keep the sweep's numbers
                left = t.usage - sum(
                    o.bytes for o in result.report.outcomes if o.deleted and o.item.tree == t.tree
                )
                w = watch.get(t.tree)
                self.state.trees[t.tree] = TreeState(
                    name=t.tree,
                    role=t.role,
                    mount=mount_point(t.root),
                    usage=left,
                    quota=t.quota,
                    units=t.units,
                    last_sweep=now,
                    watch=w.mode if w else "polling",
                    watch_reason=w.reason if w else "",
                    orphans_left=frozenset(stuck.get(t.tree, ())),
                )
        if result.report.deleted_units:
            self.janitor.space.notify()
            log.info("swept %s", deleted_summary(result.report))
        for warning in result.unswept + result.report.warnings:
            log.warning("%s", warning)
        self.say_stores(result.staging)

    def say_stores(self, stores: Iterable[StagingJobs]) -> None:
        """Log a staging tree's job store that cannot be read once, when that starts (or its
        reason or file changes), and once more when it can be read again: it is a condition
        that lasts, not an event of each sweep (`janitor doctor` shows it at any time)."""
        with self._stores_lock:
            for store in stores:
                said = self._stores_said.get(store.tree)
                if store.warning is not None and store.problem is not None:
                    if said != (store.db, store.problem):
                        log.warning("%s", store.warning)
                        self._stores_said[store.tree] = (store.db, store.problem)
                elif store.problem is None and said is not None:
                    log.info(
                        "tree %r: %s can be read again; its staging folders are judged by it",
                        store.tree,
                        store.db,
                    )
                    del self._stores_said[store.tree]

    def relieve(self, device: int) -> None:
        """Pressure eviction: caches on the volume until free >= free_target (Nix-style)."""
        policy = self.janitor.policy
        roots = volume_trees(policy).get(device)
        if not roots:
            return

        def need() -> int:
            v = Volume.of(policy, volume_stats(roots[0]))
            return v.free_target - v.free if v.free < v.free_low else 0

        # numpy and the planner load with the first sweep, not before the socket is up.
        from janitor.cleanup.sweep import make_room

        report: Report | None = None
        try:
            report = make_room(
                policy,
                self.janitor.ledger,
                self.settings.state_dir,
                device,
                need,
                reason="pressure",
            )
        finally:
            # A pass that failed freed nothing: the next waits its turn (see Sampler._due).
            self.pending.relieved(device, freed=report is not None and report.deleted_units > 0)
        if report is not None and report.deleted_units:
            log.warning(
                "volume %s below free_low: evicted %s",
                mount_point(roots[0]),
                deleted_summary(report),
            )
