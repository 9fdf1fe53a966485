"""Watching trees with watchdog: file events mark a tree dirty, debounced, so the daemon sweeps a
cache that grew past its quota within seconds instead of at the next periodic sweep.

Cache trees are watched recursively; scratch trees only at the root (a job folder appearing or
going away), since their rule is age and a busy job's writes need no reaction. When a watch
cannot be set (inotify limits, a missing root that cannot be created) or breaks (root deleted and
recreated), the tree falls back to polling, ``status()`` says why, and ``rearm()`` retries.

A cache tree that holds a folder too deep to watch is polled too, with the reason: watchdog
watches each folder by its full path (inotify cannot take one longer than PATH_MAX) and walks the
tree with ``os.walk``, which recurses in Python 3.11 and raises RecursionError a thousand levels
down. Such a folder present when the watch is armed is found first (``fdwalk.tree_shape``), one
that grows past PATH_MAX is noticed from its events, and one moved in whole, which kills a
watchdog thread with that RecursionError, is noticed through ``threading.excepthook``: every
tree then polls until ``rearm()`` restarts the observer, and the others are watched again.

Single files (the policy) can be watched too, through a watch on their folder. Nothing here
polls: the debounce thread sleeps until the next deadline, and not at all while nothing is dirty.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    DirModifiedEvent,
    DirMovedEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver, ObservedWatch
from watchdog.utils import BaseThread

from janitor.config.policy import TreePolicy
from janitor.host.fdwalk import tree_shape
from janitor.host.mounts import mounts_under

__all__ = ["CHANGES", "TreeWatcher", "WatchState"]

log = logging.getLogger("janitor.watch")


@dataclass(frozen=True, slots=True)
class WatchState:
    """How one tree is being watched: ``watching``, or ``polling`` with the reason."""

    tree: str
    mode: str
    reason: str = ""


#: Debounce keys: ("tree", name) or ("file", path).
_Key = tuple[str, str]


#: What a watch asks for: changes, not reads. Every guarded cut and probe opens a cached WAV,
#: and a read changes nothing we act on; left out of the watch (watchdog turns this list into
#: the inotify mask), the kernel queues no IN_OPEN or IN_CLOSE_NOWRITE for them and no watchdog
#: thread wakes to parse one while the API answers the call that made it.
CHANGES: list[type[FileSystemEvent]] = [
    FileCreatedEvent, DirCreatedEvent, FileDeletedEvent, DirDeletedEvent, FileMovedEvent,
    DirMovedEvent, FileModifiedEvent, DirModifiedEvent, FileClosedEvent,
]  # fmt: skip

#: A tree polled because a folder is too deep to watch is measured again at most this often.
DEEP_RECHECK_S = 60.0


def _path_max(path: Path | str) -> int:
    """The longest path the kernel takes for ``path``'s filesystem (4096 on Linux)."""
    try:
        return os.pathconf(path, "PC_PATH_MAX")
    except (OSError, ValueError):
        return 4096


def _walk_depth_limit() -> int | None:
    """Folder levels watchdog's ``os.walk`` gets through, None for any: before Python 3.12 it
    recurses once per level, and the thread arming a watch already has frames of its own."""
    if sys.version_info >= (3, 12):
        return None
    return max(sys.getrecursionlimit() - 200, 50)


def too_deep_to_watch(path: Path | str) -> str | None:
    """Why a recursive watch of ``path`` cannot work, or None: a folder whose full path is
    longer than PATH_MAX, or deeper than watchdog's walk gets (the walk stops at the first)."""
    root_len = len(os.fsencode(os.path.abspath(path)))
    limit = _path_max(path)
    depth_limit = _walk_depth_limit()
    # A folder's full path is root/rel: the walk stops at the first one inotify cannot take.
    shape = tree_shape(path, max_depth=depth_limit, max_length=max(limit - 2 - root_len, 0))
    if shape.complete:
        return None
    length = root_len + 1 + shape.longest
    if length >= limit:
        return (
            f"a folder in it has a path of {length} bytes or more, over PATH_MAX ({limit}): "
            "inotify cannot watch it"
        )
    return f"a folder in it is {shape.depth} levels deep or more: too deep for watchdog to walk"


class _Handler(FileSystemEventHandler):
    def __init__(
        self,
        tree: str,
        mark: Callable[[_Key], None],
        too_deep: Callable[[str, str], None],
        path_max: int,
        mounts: frozenset[str] = frozenset(),
    ) -> None:
        #: Mount points below the tree's root (a bind mount of another folder, even one of the
        #: same filesystem): what happens below them is another tree's, never ours.
        self.mounts = tuple(m.rstrip("/") + "/" for m in mounts)
        self.tree = tree
        self.key = ("tree", tree)
        self.mark = mark
        self.too_deep = too_deep
        self.path_max = path_max

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type in ("opened", "closed_no_write"):
            return  # reads change nothing we act on
        if self.mounts and (os.fsdecode(event.src_path) + "/").startswith(self.mounts):
            return  # below a mount point inside the tree: not the tree's
        self.mark(self.key)
        if event.is_directory and event.event_type in ("created", "moved"):
            # watchdog watches a new folder by its full path: past PATH_MAX it silently cannot,
            # and nothing below it would ever be reported.
            where = getattr(event, "dest_path", "") or event.src_path
            length = len(os.fsencode(where))
            if length >= self.path_max:
                self.too_deep(
                    self.tree,
                    f"a folder in it has a path of {length} bytes, over PATH_MAX "
                    f"({self.path_max}): inotify cannot watch it",
                )


#: Live watchers, told when a watchdog thread dies (``threading.excepthook`` is per process).
_WATCHERS: weakref.WeakSet[TreeWatcher] = weakref.WeakSet()
_hook_lock = threading.Lock()
_hooked = False


def _install_thread_hook() -> None:
    """Chain a ``threading.excepthook`` that tells every watcher when a watchdog thread dies
    (its observer then delivers nothing, though it looks alive)."""
    global _hooked
    with _hook_lock:
        if _hooked:
            return
        previous = threading.excepthook

        def hook(args: threading.ExceptHookArgs) -> None:
            if not isinstance(args.thread, BaseThread) or not _WATCHERS:
                previous(args)
                return
            # One line, not the default dump (a RecursionError's is a thousand frames deep).
            why = f"{args.exc_type.__name__}: {args.exc_value}"
            log.debug("watchdog thread %s died", args.thread.name, exc_info=args.exc_value)
            for watcher in list(_WATCHERS):
                watcher._observer_failed(why)

        threading.excepthook = hook
        _hooked = True


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
        self._deep: dict[str, float] = {}  # tree -> when to measure it again (monotonic)
        self._too_deep: dict[str, str] = {}  # trees found too deep from their events: why
        self._broken: str | None = None  # why the observer stopped delivering events

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        """Start the observer and arm every tree's watch."""
        _install_thread_hook()
        _WATCHERS.add(self)
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
        _WATCHERS.discard(self)
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
        recursive = tree.role == "cache"
        if recursive and time.monotonic() < self._deep.get(name, 0.0):
            return  # found too deep a moment ago: measured again later, not every re-arm
        try:
            tree.path.mkdir(parents=True, exist_ok=True, mode=0o700)
            st = os.lstat(tree.path)
            if not os.path.isdir(tree.path) or os.path.islink(tree.path):
                raise OSError(f"{tree.path} is not a folder")
            deep = too_deep_to_watch(tree.path) if recursive else None
            if deep is not None:
                self._deep[name] = time.monotonic() + DEEP_RECHECK_S
                self._set(name, WatchState(name, "polling", deep))
                log.warning("tree %s is not watched, polling instead: %s", name, deep)
                return
            self._deep.pop(name, None)
            with self._lock:
                self._too_deep.pop(name, None)
            handler = _Handler(
                name,
                self._mark,
                self._found_too_deep,
                _path_max(tree.path),
                mounts_under(str(tree.path)),
            )
            watch = observer.schedule(
                handler, str(tree.path), recursive=recursive, event_filter=CHANGES
            )
        except Exception as exc:  # watchdog may raise more than OSError (RecursionError)
            if isinstance(exc, OSError):
                reason = exc.strerror or str(exc)
                if exc.errno in (28, 24):  # ENOSPC/EMFILE from inotify
                    reason = f"inotify limit reached ({reason}); raise fs.inotify.max_user_watches"
            else:
                reason = f"watchdog failed: {type(exc).__name__}: {exc}"
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
                    _FileHandler(path, self._mark),
                    os.path.dirname(path),
                    recursive=False,
                    event_filter=CHANGES,
                )
            except OSError as exc:
                log.info("cannot watch %s (%s); it is checked periodically instead", path, exc)

    def _set(self, name: str, state: WatchState) -> None:
        with self._lock:
            self._states[name] = state

    def _found_too_deep(self, name: str, reason: str) -> None:
        """Called from an observer thread: the tree polls from now on (``rearm`` drops its
        watch, which cannot be done from inside watchdog's own dispatch)."""
        with self._lock:
            first = name not in self._too_deep
            self._too_deep[name] = reason
            self._states[name] = WatchState(name, "polling", reason)
        if first:
            log.warning("tree %s is no longer watched, polling instead: %s", name, reason)

    def _observer_failed(self, why: str) -> None:
        """Called when a watchdog thread died: no tree's events can be trusted until ``rearm``
        restarts the observer, so every tree polls, and each is marked changed."""
        with self._lock:
            if self._stop.is_set() or self._observer is None:
                return
            self._broken = why
            reason = f"the file observer failed ({why}); restarting it"
            for name in self.trees:
                if name in self._watches:  # the others already poll, and say why
                    self._states[name] = WatchState(name, "polling", reason)
        log.error("a watchdog thread died (%s): trees are polled until it restarts", why)
        for name in self.trees:
            self._mark(("tree", name))

    def rearm(self) -> None:
        """Re-arm watches that failed or whose root was replaced (deleted and recreated);
        restart the observer if one of its threads died."""
        observer = self._observer
        if observer is None or self._stop.is_set():
            return
        with self._lock:
            broken, self._broken = self._broken, None
        if broken is not None or not observer.is_alive():
            log.warning("the file observer died; restarting it")
            if observer.is_alive():
                try:
                    observer.stop()
                    observer.join(3.0)
                except Exception:  # a half-dead observer must not keep us from a new one
                    log.exception("stopping the failed file observer")
            with self._lock:
                self._watches.clear()
            self._observer = observer = self._factory()
            observer.daemon = True
            observer.start()
            self._arm_files()
        with self._lock:
            deep = dict(self._too_deep)
        for name, reason in deep.items():
            with self._lock:
                current = self._watches.pop(name, None)
            if current is not None:
                try:
                    observer.unschedule(current[0])
                except Exception:
                    pass
            self._deep[name] = time.monotonic() + DEEP_RECHECK_S
            self._set(name, WatchState(name, "polling", reason))
            with self._lock:
                self._too_deep.pop(name, None)
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
