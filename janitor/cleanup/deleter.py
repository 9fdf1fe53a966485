"""One tree's deleter: its units removed relative to the tree root, opened once at the start.

Each unit is removed by its kind: a file alone, files in one folder under their lock file's
flock, a folder unit (``janitor.cleanup.folder_unit``), or a Hugging Face hub revision
(``janitor.cleanup.hf_delete``); every file with the checks of
:class:`janitor.cleanup.recheck.Rechecks` right before it goes.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable

from janitor.cleanup.folder_unit import remove_folder_unit
from janitor.cleanup.plan import TreePlan
from janitor.cleanup.recheck import FILE_FLAGS, Partial, Rechecks, Skip, close_held, why
from janitor.cleanup.scan import Entry
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
        """Delete one unit; (files removed, bytes) or Skip before anything is removed."""
        self.checks.check_pins(unit)
        if unit.kind == "dir":
            return remove_folder_unit(self.checks, self.root_fd, unit)
        if unit.kind == "hf_revision":
            return self._delete_revision(unit)
        entries = unit.entries
        if len(entries) == 1 and unit.lock is None:
            e = entries[0]
            folder, _, name = e.rel.rpartition("/")
            if name in ("", ".", ".."):
                raise Skip("bad path component")
            self.checks.unlink_file(self.folder(folder), name, e)
            return 1, e.size
        return self._delete_file_unit(unit)

    def _delete_file_unit(self, unit: Unit) -> tuple[int, int]:
        """Remove a unit of files in one folder while holding its lock file's flock.

        The lock file itself is never removed (see ``Deleter``): only the files it guards.
        """
        folders = {e.rel.rpartition("/")[0] for e in unit.entries}
        if len(folders) != 1:
            raise Skip("unit spans folders")
        lock_name = unit.lock.rpartition("/")[2] if unit.lock is not None else None
        victims = [e for e in unit.entries if e.rel.rpartition("/")[2] != lock_name]
        if not victims:
            raise Skip("nothing but its lock file, which is never removed")
        dir_fd = self.folder(folders.pop())
        lock_fd = None
        held: list[tuple[str, Entry, int | None]] = []  # (name, entry, fd of a regular file)
        try:
            if lock_name is not None:
                try:
                    lock_fd = os.open(lock_name, FILE_FLAGS, dir_fd=dir_fd)
                except FileNotFoundError:
                    lock_fd = None  # `cache clear` removed it, or no converter made one yet
                except OSError as exc:
                    raise Skip(why(exc, "lock file")) from None
                if lock_fd is not None:
                    try:
                        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except OSError:
                        raise Skip("locked") from None
            # Every file is checked (and held) before any is removed, all under the lock: a
            # converter that comes meanwhile waits on it, then finds the WAV gone and converts.
            for e in victims:
                name = e.rel.rpartition("/")[2]
                if name in ("", ".", ".."):
                    raise Skip("bad path component")
                held.append((name, e, self.checks.hold_entry(dir_fd, name, e)))
            removed = 0
            size = 0
            for name, e, _fd in held:
                try:
                    os.unlink(name, dir_fd=dir_fd)
                except OSError:
                    if removed:
                        break  # partly removed: what is left is judged again next sweep
                    raise
                removed += 1
                size += e.size
            return removed, size
        finally:
            for _name, _e, fd in held:
                if fd is not None:
                    close_held(fd)
            if lock_fd is not None:
                os.close(lock_fd)  # drops our flock: a waiting converter goes on

    def _delete_revision(self, unit: Unit) -> tuple[int, int]:
        """A Hugging Face hub revision: removed by huggingface_hub's cache API once every check
        here passed on every path it names (``janitor.cleanup.hf_delete``)."""
        from janitor.cleanup import hf_delete

        checks = hf_delete.Checks(
            self.plan.root,
            self.root_fd,
            self.plan.device,
            self.plan.root_ino,
            self.folder,
            self.checks.hold,
            self.checks.verify,
            close_held,
        )
        try:
            return hf_delete.remove_revision(unit, checks)
        except hf_delete.Partial as exc:
            raise Partial(exc.files, exc.size, str(exc)) from None
        except hf_delete.Refused as exc:
            raise Skip(str(exc)) from None
