"""One tree's deleter: its units removed relative to the tree root, opened once at the start.

Each unit is removed by the tree's kind (:mod:`janitor.cleanup.kinds`, chosen once per tree: a
file alone or files under their lock file's flock, a folder unit, a Hugging Face hub revision),
after the kind's rechecks; every file with the checks of :class:`janitor.cleanup.recheck.Rechecks`
right before it goes.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from janitor.cleanup.kinds import KINDS
from janitor.cleanup.plan import TreePlan
from janitor.cleanup.recheck import Rechecks, Skip
from janitor.cleanup.units import Unit
from janitor.host.fdwalk import DIR_FLAGS
from janitor.host.mounts import boundary

__all__ = ["Deleter"]

#: Folder fds kept open per tree while its units go (LRU beyond this; fds are a finite resource).
_FOLDER_FDS = 64
#: Of the folders opened on the way down to a unit's folder, the deepest this many are kept.
_KEEP_ON_THE_WAY = 8


class Deleter:
    """Deletes the units of one tree, relative to the tree root opened at the start.

    Every folder is opened once, one component at a time from the verified root, never
    following a symlink and never leaving the tree's filesystem; its fd is then kept for the
    following units in it (at most ``_FOLDER_FDS`` at a time). An fd stays on the folder it was
    opened on, so a path swapped for a symlink later cannot redirect a delete.

    A unit's lock file (``{fp}.wav.lock``) is never removed, even long after its entry is gone
    and while nobody holds it. A converter may sit between its ``open()`` of the lock and its
    ``flock()`` for any time (waiting on our write lease, preempted, suspended), and batchalign3
    does not check after locking that the inode it locked is still the one the name points at:
    if the name were unlinked meanwhile, it would lock a dead inode while the next converter
    creates a new one, and both would write ``{fp}.tmp.wav`` at once. No order of checks (flock,
    lease, rename aside first) can see a process that has resolved the name but not yet opened
    it, so no removal is provably safe. Lock files are empty: leaving them costs an inode each,
    and the planner never counts or chooses a unit that holds nothing else.

    ``open_set``, ``pinned`` and ``opened``: see :class:`~janitor.cleanup.recheck.Rechecks`.
    Skip (the root replaced since the scan) or OSError when the root cannot be opened.
    """

    def __init__(
        self,
        plan: TreePlan,
        open_set: frozenset[tuple[int, int]],
        pinned: Callable[[], frozenset[str]],
        opened: Callable[[], frozenset[tuple[int, int]]] | None = None,
    ) -> None:
        self.plan = plan
        self.kind = KINDS[plan.kind]  # chosen once: how this tree's units go
        self.root_fd = os.open(plan.root, DIR_FLAGS)
        st = os.fstat(self.root_fd)
        if (st.st_dev, st.st_ino) != (plan.device, plan.root_ino):
            os.close(self.root_fd)
            raise Skip("tree root was replaced since the scan")
        # Every mount point below the root is a boundary, a bind mount of this filesystem too.
        edge = boundary(self.root_fd, plan.root)
        self.checks = Rechecks(plan.root, plan.device, edge, open_set, pinned, opened)
        self.folders: dict[str, int] = {}

    def close(self) -> None:
        """Close the root's fd and every folder's kept."""
        for fd in [*self.folders.values(), self.root_fd]:
            try:
                os.close(fd)
            except OSError:
                pass
        self.folders.clear()

    def folder(self, folder: str) -> int:
        """A kept fd of a folder below the root ("" is the root itself).

        Opened one component at a time from the deepest folder already open on the way (no
        recursion, any depth); the last few opened on the way are kept too, for the units of
        sibling folders, the others closed again.
        """
        if not folder:
            return self.root_fd
        fd = self.folders.get(folder)
        if fd is not None:
            return fd
        # The deepest folder already open on the way down: the parent, as a rule, else the root.
        base = max((k for k in self.folders if folder.startswith(k + "/")), key=len, default="")
        cur = self.folders[base] if base else self.root_fd
        start = len(base) + 1 if base else 0
        names = folder[start:].split("/")
        keep_from = len(names) - _KEEP_ON_THE_WAY
        temp = False  # cur is ours to close: opened on the way and not kept
        end = start - 1
        try:
            for i, name in enumerate(names):
                nxt = self.checks.open_sub(cur, name)
                if temp:
                    os.close(cur)
                cur, temp = nxt, True
                end += len(name) + 1
                if i >= keep_from:
                    if len(self.folders) >= _FOLDER_FDS:
                        oldest = next(iter(self.folders))
                        os.close(self.folders.pop(oldest))
                    self.folders[folder[:end]] = cur
                    temp = False
        except BaseException:
            if temp:
                os.close(cur)
            raise
        return cur

    def delete(self, unit: Unit) -> tuple[int, int]:
        """Delete one unit by its kind; (files removed, bytes), Skip before anything is
        removed, or Partial once something was."""
        self.kind.recheck(self.checks, unit)
        return self.kind.delete(self, unit)
