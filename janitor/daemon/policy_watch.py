"""The watch over the policy's trees and the policy file: one :class:`TreeWatcher` at a time.

A reload replaces it (its trees changed); the ``rearm`` job re-arms broken watches and has the
trees that are polled instead of watched swept.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from janitor.config.settings import Settings
from janitor.core import Janitor
from janitor.daemon.tree_watcher import TreeWatcher, WatchState

__all__ = ["Watching"]

log = logging.getLogger("janitor.daemon")


class Watching:
    """Calls ``on_dirty(tree)`` when a tree's events settle, ``on_policy_file()`` when the
    policy file changed."""

    def __init__(
        self,
        janitor: Janitor,
        settings: Settings,
        *,
        on_dirty: Callable[[str], None],
        on_policy_file: Callable[[], None],
    ) -> None:
        self.janitor = janitor
        self.settings = settings
        self.on_dirty = on_dirty
        self.on_policy_file = on_policy_file
        self._watcher: TreeWatcher | None = None

    def start(self) -> None:
        """Watch the current policy's trees and its file."""
        self._watcher = TreeWatcher(
            # A report tree is measured, never swept: nothing to watch (and no root to make).
            [t for t in self.janitor.policy.trees.values() if t.role != "report"],
            self.on_dirty,
            quiet_s=self.settings.debounce_s,
            max_delay_s=self.settings.debounce_max_s,
            files=[self.settings.policy_path],
            on_file=lambda _path: self.on_policy_file(),
        )
        self._watcher.start()
        for w in self._watcher.status():
            if w.mode != "watching":
                log.warning("tree %s is polled, not watched: %s", w.tree, w.reason)

    def stop(self) -> None:
        """Stop the observer and the debounce thread (waits up to 2 s: they stop at once)."""
        if self._watcher is not None:
            self._watcher.stop(timeout=2.0)

    def join(self) -> None:
        """Nothing more to wait for (``stop()`` joined the threads)."""

    def restart(self) -> None:
        """Watch the trees of a reloaded policy (from the main thread only: the debounce
        thread cannot stop itself)."""
        self.stop()
        self.start()

    def status(self) -> list[WatchState]:
        """Each tree's watch mode (empty before the start)."""
        return self._watcher.status() if self._watcher is not None else []

    def rearm(self) -> None:
        """Re-arm broken watches; report the trees that are polled as changed."""
        watcher = self._watcher
        if watcher is None:
            return
        watcher.rearm()
        for tree in watcher.polling():
            self.on_dirty(tree)
