"""Watching trees with watchdog: file events mark a tree dirty, debounced, so the daemon sweeps a
cache that grew past its quota within seconds instead of at the next periodic sweep.

Cache trees are watched recursively; scratch trees only at the root (a job folder appearing or
going away), since their rule is age and a busy job's writes need no reaction. When a watch
cannot be set (inotify limits, a missing root that cannot be created) or breaks (root deleted and
recreated), the tree falls back to polling, ``status()`` says why, and ``rearm()`` retries.

Single files (the policy) can be watched too, through a watch on their folder. Nothing here
polls: the debounce thread sleeps until the next deadline, and not at all while nothing is dirty.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver, ObservedWatch

from janitor.policy import TreePolicy

__all__ = ["TreeWatcher", "WatchState"]

log = logging.getLogger("janitor.watch")


@dataclass(frozen=True, slots=True)
class WatchState:
    """How one tree is being watched: ``watching``, or ``polling`` with the reason."""

    tree: str
    mode: str
    reason: str = ""


#: Debounce keys: ("tree", name) or ("file", path).
_Key = tuple[str, str]


class _Handler(FileSystemEventHandler):
    def __init__(self, tree: str, mark: Callable[[_Key], None]) -> None:
        self.key = ("tree", tree)
        self.mark = mark

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type in ("opened", "closed_no_write"):
            return  # reads change nothing we act on
        self.mark(self.key)


class _FileHandler(FileSystemEventHandler):
    """Events in a file's folder that name the file (written, replaced, moved in or away)."""

    def __init__(self, path: str, mark: Callable[[_Key], None]) -> None:
        self.path = path
        self.key = ("file", path)
        self.mark = mark

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type in ("opened", "closed_no_write"):
            return
        names = (event.src_path, getattr(event, "dest_path", "") or "")
        if any(os.fsdecode(n) == self.path for n in names):
            self.mark(self.key)


class TreeWatcher:
    """Watches trees and calls ``on_dirty(tree)`` once events settle.

    A tree is reported ``quiet_s`` after its last event, or ``max_delay_s`` after the first one
    if events keep coming, whichever is sooner. Each of ``files`` is watched through its folder
    (not recursively) and reported to ``on_file(path)`` the same way; a file whose folder cannot
    be watched is simply not reported (the caller keeps a slow check of its own).
    """

    def __init__(
        self,
        trees: Sequence[TreePolicy],
        on_dirty: Callable[[str], None],
        *,
        quiet_s: float = 0.5,
        max_delay_s: float = 2.0,
        observer_factory: Callable[[], BaseObserver] = Observer,
        files: Sequence[os.PathLike[str] | str] = (),
        on_file: Callable[[str], None] | None = None,
    ) -> None:
        self.trees = {t.name: t for t in trees}
        self.on_dirty = on_dirty
        self.quiet_s = quiet_s
        self.max_delay_s = max_delay_s
        self.files = [os.path.abspath(os.fspath(f)) for f in files]
        self.on_file = on_file
        self._factory = observer_factory
        self._observer: BaseObserver | None = None
        self._watches: dict[str, tuple[ObservedWatch, tuple[int, int]]] = {}
        self._states: dict[str, WatchState] = {}
        self._dirty: dict[_Key, tuple[float, float]] = {}  # key -> (first, last) event time
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)  # notified when a key turns dirty
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        """Start the observer and arm every tree's watch."""
        self._observer = self._factory()
        self._observer.daemon = True
        self._observer.start()
        for name in self.trees:
            self._arm(name)
        self._arm_files()
        self._ticker = threading.Thread(target=self._tick, name="janitor-debounce", daemon=True)
        self._ticker.start()

    def stop(self, timeout: float = 3.0) -> None:
        """Stop the observer and the debounce thread and wait for them."""
        with self._cond:
            self._stop.set()
            self._cond.notify_all()
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout)
        if self._ticker is not None:
            self._ticker.join(timeout)

    def status(self) -> list[WatchState]:
        """Each tree's watch mode, for `janitor status` and the API."""
        with self._lock:
            return [self._states.get(n, WatchState(n, "polling", "not armed")) for n in self.trees]

    def polling(self) -> list[str]:
        """Trees without a working watch (the daemon scans these periodically)."""
        return [s.tree for s in self.status() if s.mode != "watching"]

    # -- arming --------------------------------------------------------------------------------

    def _arm(self, name: str) -> None:
        tree = self.trees[name]
        observer = self._observer
        if observer is None:
            return
        try:
            tree.path.mkdir(parents=True, exist_ok=True, mode=0o700)
            st = os.lstat(tree.path)
            if not os.path.isdir(tree.path) or os.path.islink(tree.path):
                raise OSError(f"{tree.path} is not a folder")
            watch = observer.schedule(
                _Handler(name, self._mark), str(tree.path), recursive=tree.role == "cache"
            )
        except OSError as exc:
            reason = exc.strerror or str(exc)
            if getattr(exc, "errno", None) in (28, 24):  # ENOSPC/EMFILE from inotify
                reason = f"inotify limit reached ({reason}); raise fs.inotify.max_user_watches"
            self._set(name, WatchState(name, "polling", reason))
            log.warning("watch of tree %s failed, polling instead: %s", name, reason)
            return
        with self._lock:
            self._watches[name] = (watch, (st.st_dev, st.st_ino))
        self._set(name, WatchState(name, "watching"))

    def _arm_files(self) -> None:
        observer = self._observer
        if observer is None or self.on_file is None:
            return
        for path in self.files:
            try:
                observer.schedule(
                    _FileHandler(path, self._mark), os.path.dirname(path), recursive=False
                )
            except OSError as exc:
                log.info("cannot watch %s (%s); it is checked periodically instead", path, exc)

    def _set(self, name: str, state: WatchState) -> None:
        with self._lock:
            self._states[name] = state

    def rearm(self) -> None:
        """Re-arm watches that failed or whose root was replaced (deleted and recreated)."""
        observer = self._observer
        if observer is None or self._stop.is_set():
            return
        if not observer.is_alive():
            log.warning("the file observer died; restarting it")
            with self._lock:
                self._watches.clear()
            self._observer = observer = self._factory()
            observer.daemon = True
            observer.start()
            self._arm_files()
        for name, tree in self.trees.items():
            with self._lock:
                current = self._watches.get(name)
            if current is not None:
                watch, ident = current
                try:
                    st = os.lstat(tree.path)
                    if (st.st_dev, st.st_ino) == ident:
                        continue
                except OSError:
                    pass
                log.info("root of tree %s was replaced; re-arming its watch", name)
                try:
                    observer.unschedule(watch)
                except (KeyError, OSError):
                    pass
                with self._lock:
                    self._watches.pop(name, None)
                self._set(name, WatchState(name, "polling", "root was replaced; re-arming"))
                self._mark(("tree", name))
            self._arm(name)

    # -- debounce ------------------------------------------------------------------------------

    def _mark(self, key: _Key) -> None:
        """Called by the observer thread for every event: cheap, and wakes the debounce thread
        only when ``key`` turns dirty (later events only push its deadline back)."""
        now = time.monotonic()
        with self._cond:
            got = self._dirty.get(key)
            if got is None:
                self._dirty[key] = (now, now)
                self._cond.notify()
            else:
                self._dirty[key] = (got[0], now)

    def _tick(self) -> None:
        """The debounce thread: sleeps until the earliest deadline, or until woken."""
        while True:
            due: list[_Key] = []
            with self._cond:
                if self._stop.is_set():
                    return
                now = time.monotonic()
                wake: float | None = None
                for key, (first, last) in list(self._dirty.items()):
                    deadline = min(last + self.quiet_s, first + self.max_delay_s)
                    if now >= deadline:
                        due.append(key)
                        del self._dirty[key]
                    elif wake is None or deadline < wake:
                        wake = deadline
                if not due:
                    self._cond.wait(None if wake is None else wake - now)
                    continue
            for kind, name in due:
                try:
                    if kind == "tree":
                        self.on_dirty(name)
                    elif self.on_file is not None:
                        self.on_file(name)
                except Exception:  # the callback must not kill the debounce thread
                    log.exception("handling changes in %s %s failed", kind, name)
