"""The executor: the only code in the janitor that removes files, carrying out a ``Plan``.

``apply`` re-checks every file right before removing it (same inode, size and mtime; owned by
us; not pinned, locked or open now), removes it relative to an opened parent folder without
following symlinks, never leaves the tree's filesystem, never removes the tree root, and logs
every unit it removed with its reason. A Hugging Face hub revision (``units = "hf_revision"``)
is removed by huggingface_hub's own cache API, once the same checks passed on every path it
would remove (``janitor.cleanup.hf_delete``).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import stat
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from janitor.cleanup.plan import Plan, PlanItem, TreePlan
from janitor.cleanup.scan import Entry
from janitor.cleanup.units import Unit
from janitor.errors import LedgerError, LedgerFull
from janitor.host import inuse
from janitor.host.fdwalk import DIR_FLAGS, FolderChain, FolderChanged
from janitor.host.mounts import boundary
from janitor.host.space import volume_stats
from janitor.humanize import format_size, plural
from janitor.ledger.db import Ledger
from janitor.ledger.log import LogRow

__all__ = ["Outcome", "Report", "VolumeDelta", "apply"]


class Outcome(NamedTuple):
    """What happened to one planned unit."""

    item: PlanItem
    deleted: bool
    files: int
    bytes: int
    skipped: str | None = None


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
    """The executor's account: each unit's outcome and each volume's reclaimed space."""

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


class _Skip(Exception):
    """A unit that must be left alone; the message says why."""


class _Partial(Exception):
    """A unit whose removal stopped part way (something came alive); what went is counted."""

    def __init__(self, files: int, size: int, why: str) -> None:
        super().__init__(why)
        self.files = files
        self.size = size


#: Opening a file to check it: never follow a symlink, never block (fifos), never a tty.
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
#: Folder fds kept open per tree while its units go (LRU beyond this; fds are a finite resource).
_FOLDER_FDS = 64
#: Of the folders opened on the way down to a unit's folder, the deepest this many are kept.
_KEEP_ON_THE_WAY = 8


class _Deleter:
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
    """

    def __init__(
        self,
        plan: TreePlan,
        open_set: frozenset[tuple[int, int]],
        pinned: Callable[[], frozenset[str]],
        opened: Callable[[], frozenset[tuple[int, int]]] | None = None,
    ) -> None:
        self.plan = plan
        self.root = plan.root
        self.device = plan.device
        self.open_set = open_set
        self.pinned = pinned
        self.uid = os.geteuid()
        self.leases = inuse.leases_ready()
        # Without write leases (macOS, JANITOR_PORTABLE) the kernel cannot be asked per file:
        # the open-file list is taken again while deleting (see _open_now), not only at planning.
        self.opened = None if self.leases else opened
        self._fallback = opened  # where a lease is not possible on this filesystem (NFS, FUSE)
        self.root_fd = os.open(plan.root, DIR_FLAGS)
        st = os.fstat(self.root_fd)
        if (st.st_dev, st.st_ino) != (plan.device, plan.root_ino):
            os.close(self.root_fd)
            raise _Skip("tree root was replaced since the scan")
        # Every mount point below the root is a boundary, a bind mount of this filesystem too.
        self.edge = boundary(self.root_fd, plan.root)
        self.folders: dict[str, int] = {}

    def close(self) -> None:
        for fd in [*self.folders.values(), self.root_fd]:
            try:
                os.close(fd)
            except OSError:
                pass
        self.folders.clear()

    # -- folders -------------------------------------------------------------------------------

    def _folder(self, folder: str) -> int:
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
                nxt = self._open_sub(cur, name)
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

    def _open_sub(self, parent_fd: int, name: str) -> int:
        """Open a folder in a folder: no symlink, no other filesystem."""
        if name in ("", ".", ".."):
            raise _Skip("bad path component")
        try:
            fd = os.open(name, DIR_FLAGS, dir_fd=parent_fd)
        except OSError as exc:
            raise _Skip(_why(exc, "folder")) from None
        st = os.fstat(fd)
        if st.st_dev != self.device:
            os.close(fd)
            raise _Skip("folder is on another filesystem")
        if self.edge.crosses(fd, st):
            os.close(fd)
            raise _Skip("folder is a mount point (another filesystem mounted there)")
        return fd

    # -- checks --------------------------------------------------------------------------------

    def _check_pins(self, unit: Unit) -> None:
        pins = self.pinned()
        if not pins:
            return
        base = self.root.rstrip("/") + "/"
        unit_path = unit.path if unit.kind in ("dir", "hf_revision") else None
        for p in pins:
            if not (p.startswith(base) or base.startswith(p.rstrip("/") + "/")):
                continue
            for e in unit.entries:
                if e.path == p or e.path.startswith(p.rstrip("/") + "/"):
                    raise _Skip("pinned")
            if unit_path is not None and p.startswith(unit_path + "/"):
                raise _Skip("pinned")

    def _same(self, st: os.stat_result, e: Entry) -> None:
        """The scanned entry, unchanged and ours (st: lstat or fstat of it now)."""
        if st.st_ino != e.ino or st.st_dev != e.dev:
            raise _Skip("replaced since the scan")
        if not stat.S_ISDIR(st.st_mode) and (st.st_size != e.length or st.st_mtime != e.mtime):
            raise _Skip("changed since the scan")
        if st.st_uid != self.uid:
            raise _Skip("owned by another user")

    def _verify(self, dir_fd: int, name: str, e: Entry) -> os.stat_result:
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            raise _Skip("gone since the scan") from None
        self._same(st, e)
        return st

    def _hold(self, dir_fd: int, name: str, e: Entry) -> int:
        """Open a scanned regular file and check it, for unlinking while the fd is held: the
        same inode, size and mtime, ours, and open in no other process (a write lease, held
        until the fd is closed; where leases do not work, the open-file list from before)."""
        try:
            fd = _open_held(name, dir_fd)
        except FileNotFoundError:
            raise _Skip("gone since the scan") from None
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR):  # a symlink, socket ...
                raise _Skip("replaced since the scan") from None
            raise
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise _Skip("replaced since the scan")
            self._same(st, e)
            self._alone(fd, st)
        except BaseException:
            _close_held(fd)
            raise
        return fd

    def _alone(self, fd: int, st: os.stat_result) -> None:
        """Skip unless no other process has the open file (fd: ours, of a regular file)."""
        if self.leases:
            granted = inuse.lease(fd)
            if granted:
                return  # nobody else has it open, and closing fd ends the lease
            if granted is False:
                raise _Skip("open in another process")
            # no lease here: what the open-file list says now, not only at planning
            if self._fallback is not None and (st.st_dev, st.st_ino) in self._fallback():
                raise _Skip("open in another process")
        if self._is_open((st.st_dev, st.st_ino)):
            raise _Skip("open in another process")

    def _is_open(self, key: tuple[int, int]) -> bool:
        return key in self.open_set or (self.opened is not None and key in self.opened())

    def _unlink_file(self, dir_fd: int, name: str, e: Entry) -> None:
        """Remove one non-folder entry after the last checks."""
        if not stat.S_ISREG(e.mode):
            st = self._verify(dir_fd, name, e)
            if stat.S_ISDIR(st.st_mode):
                raise _Skip("replaced since the scan")
            os.unlink(name, dir_fd=dir_fd)  # symlinks, fifos ...: remove the name, never follow
            return
        # _hold, then unlink, in one: the common case of a sweep, once per file.
        try:
            fd = _open_held(name, dir_fd)
        except FileNotFoundError:
            raise _Skip("gone since the scan") from None
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR):
                raise _Skip("replaced since the scan") from None
            raise
        try:
            st = os.fstat(fd)
            if st.st_ino != e.ino or st.st_dev != e.dev or not stat.S_ISREG(st.st_mode):
                raise _Skip("replaced since the scan")
            if st.st_size != e.length or st.st_mtime != e.mtime:
                raise _Skip("changed since the scan")
            if st.st_uid != self.uid:
                raise _Skip("owned by another user")
            self._alone(fd, st)
            os.unlink(name, dir_fd=dir_fd)  # under the lease: a late opener waits, then misses
        finally:
            _close_held(fd)  # ends the lease

    # -- units ---------------------------------------------------------------------------------

    def delete(self, unit: Unit) -> tuple[int, int]:
        """Delete one unit; (files removed, bytes) or _Skip before anything is removed."""
        self._check_pins(unit)
        if unit.kind == "dir":
            return self._delete_dir_unit(unit)
        if unit.kind == "hf_revision":
            return self._delete_revision(unit)
        entries = unit.entries
        if len(entries) == 1 and unit.lock is None:
            e = entries[0]
            folder, _, name = e.rel.rpartition("/")
            if name in ("", ".", ".."):
                raise _Skip("bad path component")
            self._unlink_file(self._folder(folder), name, e)
            return 1, e.size
        return self._delete_file_unit(unit)

    def _delete_file_unit(self, unit: Unit) -> tuple[int, int]:
        """Remove a unit of files in one folder while holding its lock file's flock.

        The lock file itself is never removed (see ``_Deleter``): only the files it guards.
        """
        folders = {e.rel.rpartition("/")[0] for e in unit.entries}
        if len(folders) != 1:
            raise _Skip("unit spans folders")
        lock_name = unit.lock.rpartition("/")[2] if unit.lock is not None else None
        victims = [e for e in unit.entries if e.rel.rpartition("/")[2] != lock_name]
        if not victims:
            raise _Skip("nothing but its lock file, which is never removed")
        dir_fd = self._folder(folders.pop())
        lock_fd = None
        held: list[tuple[str, Entry, int | None]] = []  # (name, entry, fd of a regular file)
        try:
            if lock_name is not None:
                try:
                    lock_fd = os.open(lock_name, _FILE_FLAGS, dir_fd=dir_fd)
                except FileNotFoundError:
                    lock_fd = None  # `cache clear` removed it, or no converter made one yet
                except OSError as exc:
                    raise _Skip(_why(exc, "lock file")) from None
                if lock_fd is not None:
                    try:
                        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except OSError:
                        raise _Skip("locked") from None
            # Every file is checked (and held) before any is removed, all under the lock: a
            # converter that comes meanwhile waits on it, then finds the WAV gone and converts.
            for e in victims:
                name = e.rel.rpartition("/")[2]
                if name in ("", ".", ".."):
                    raise _Skip("bad path component")
                if stat.S_ISREG(e.mode):
                    held.append((name, e, self._hold(dir_fd, name, e)))
                else:
                    st = self._verify(dir_fd, name, e)
                    if stat.S_ISDIR(st.st_mode):
                        raise _Skip("replaced since the scan")
                    held.append((name, e, None))
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
                    _close_held(fd)
            if lock_fd is not None:
                os.close(lock_fd)  # drops our flock: a waiting converter goes on

    def _delete_revision(self, unit: Unit) -> tuple[int, int]:
        """A Hugging Face hub revision: removed by huggingface_hub's cache API once every check
        here passed on every path it names (``janitor.cleanup.hf_delete``)."""
        from janitor.cleanup import hf_delete

        checks = hf_delete.Checks(
            self.root,
            self.root_fd,
            self.device,
            self.plan.root_ino,
            self._folder,
            self._hold,
            self._verify,
            _close_held,
        )
        try:
            return hf_delete.remove_revision(unit, checks)
        except hf_delete.Partial as exc:
            raise _Partial(exc.files, exc.size, str(exc)) from None
        except hf_delete.Refused as exc:
            raise _Skip(str(exc)) from None

    def _delete_dir_unit(self, unit: Unit) -> tuple[int, int]:
        if "/" in unit.key or unit.key in ("", ".", ".."):
            raise _Skip("not a folder directly under the root")
        head = unit.entries[0]
        known = _Known(unit.entries)
        unit_fd = self._open_sub(self.root_fd, unit.key)
        try:
            st = os.fstat(unit_fd)
            if st.st_ino != head.ino:
                raise _Skip("replaced since the scan")
            if st.st_uid != self.uid:
                raise _Skip("owned by another user")
            # Verify the whole folder first: anything new or changed means a job is alive.
            self._walk_verify(unit_fd, unit.key, known)
            done = [0, 0]
            try:
                self._remove_tree(unit_fd, unit.key, known, done)
            except _Skip as exc:
                if done[0] or done[1]:
                    raise _Partial(done[0], done[1], str(exc)) from None
                raise
            removed, size = done
        finally:
            os.close(unit_fd)
        try:
            os.rmdir(unit.key, dir_fd=self.root_fd)
            size += head.size
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT):
                raise
        return removed, size

    def _enter(self, chain: FolderChain, name: str, e: Entry) -> int:
        """Go into a scanned folder of the unit: the same inode, on the tree's filesystem."""
        try:
            return chain.enter(name, e.ino)
        except FolderChanged as exc:
            raise _Skip(str(exc)) from None
        except OSError as exc:
            raise _Skip(_why(exc, "folder")) from None

    def _walk_verify(self, unit_fd: int, rel: str, known: _Known) -> None:
        """Check every entry of a folder unit, at any depth, before anything of it is removed:
        anything new or changed means a job is still alive."""
        chain = FolderChain(unit_fd, boundary=self.edge)
        where = rel  # the folder the walk is in, relative to the root
        todo = [_names(unit_fd)]
        try:
            while True:
                names = todo[-1]
                if not names:
                    todo.pop()
                    if not todo:
                        return
                    where = where.rpartition("/")[0]
                    if not chain.leave():
                        raise _Skip("moved since the scan")
                    continue
                name = names.pop()
                fd = chain.fd
                crel = f"{where}/{name}"
                e = known.find(fd, name, crel)
                if e is None:
                    raise _Skip("new files since the scan: a job is still writing")
                if stat.S_ISDIR(e.mode):
                    st = self._verify(fd, name, e)
                    if not stat.S_ISDIR(st.st_mode):
                        raise _Skip("replaced since the scan")
                    todo.append(_names(self._enter(chain, name, e)))
                    where = crel
                elif self._is_open((e.dev, e.ino)):
                    raise _Skip("open in another process")
                elif stat.S_ISREG(e.mode):
                    # Ask the kernel now, before anything of the unit is removed.
                    _close_held(self._hold(fd, name, e))
                else:
                    self._verify(fd, name, e)
        finally:
            chain.close()

    def _remove_tree(self, unit_fd: int, rel: str, known: _Known, done: list[int]) -> None:
        """Remove a folder's contents bottom-up, at any depth; ``done`` counts [files, bytes]
        as it goes."""
        chain = FolderChain(unit_fd, boundary=self.edge)
        where = rel
        todo = [_names(unit_fd)]
        inside: list[tuple[str, Entry]] = []  # the folder entered at each level below the unit
        try:
            while True:
                names = todo[-1]
                if not names:
                    todo.pop()
                    if not todo:
                        return
                    where = where.rpartition("/")[0]
                    name, folder = inside.pop()
                    if not chain.leave():
                        raise _Skip("moved since the scan")
                    os.rmdir(name, dir_fd=chain.fd)
                    done[1] += folder.size
                    continue
                name = names.pop()
                crel = f"{where}/{name}"
                e = known.find(chain.fd, name, crel)
                if e is None:
                    raise _Skip("new files since the scan: a job is still writing")
                if stat.S_ISDIR(e.mode):
                    todo.append(_names(self._enter(chain, name, e)))
                    inside.append((name, e))
                    where = crel
                else:
                    self._unlink_file(chain.fd, name, e)
                    done[0] += 1
                    done[1] += e.size
        finally:
            chain.close()


def _names(fd: int) -> list[str]:
    """A folder's names, last listed first (``pop()`` takes them in listing order)."""
    with os.scandir(fd) as it:
        names = [d.name for d in it]
    names.reverse()
    return names


class _Known:
    """A folder unit's scanned entries by path relative to the root, and by inode for another
    name of a hard-linked file (that index made only when first needed)."""

    __slots__ = ("_by_ino", "by_rel")

    def __init__(self, entries: Iterable[Entry]) -> None:
        self.by_rel = {e.rel: e for e in entries}
        self._by_ino: dict[tuple[int, int], Entry] | None = None

    def find(self, fd: int, name: str, crel: str) -> Entry | None:
        """The scanned entry of ``name`` in folder ``fd`` (whose path is ``crel``), if any."""
        e = self.by_rel.get(crel)
        if e is not None:
            return e
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except OSError:
            return None
        if stat.S_ISDIR(st.st_mode):
            return None
        if self._by_ino is None:
            self._by_ino = {
                (k.dev, k.ino): k for k in self.by_rel.values() if not stat.S_ISDIR(k.mode)
            }
        return self._by_ino.get((st.st_dev, st.st_ino))


def _why(exc: OSError, what: str) -> str:
    if exc.errno == errno.ELOOP or exc.errno == errno.ENOTDIR:
        return f"{what} is now a symlink or not a folder"
    if exc.errno == errno.ENOENT:
        return f"{what} gone since the scan"
    return f"{what}: {exc.strerror}"


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


def _outcome(deleter: _Deleter, item: PlanItem) -> Outcome:
    try:
        files, size = deleter.delete(item.unit)
        return Outcome(item, files > 0, files, size)
    except _Partial as exc:
        return Outcome(item, True, exc.files, exc.size, f"partly removed: {exc}")
    except _Skip as exc:
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
        """A batch done: a ``delete`` line per unit removed, its ``deleting`` lines out."""
        if self.ledger is None or intents is None:
            return
        rows: list[LogRow] = [
            (time.time(), "delete", o.item.tree, device, None, o.bytes,
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


class _Pool:
    """The deleters of one tree: the calling thread's, and, once the deletes show that they
    mostly wait on the disk, those of a few helper threads (the syscalls of one overlap the
    disk waits of another). Each does every check; only the order of the removals mixes."""

    def __init__(
        self,
        tree: TreePlan,
        open_set: frozenset[tuple[int, int]],
        pinned: Callable[[], frozenset[str]],
        total: int,
    ) -> None:
        self.tree = tree
        self.open_set = open_set
        self.pinned = pinned
        self.opened = _open_now(tree.device)
        self.main = _Deleter(tree, open_set, pinned, self.opened)
        self.helpers: list[_Deleter] = []
        self.left = total  # units not yet handed to run()
        self.alone = 0  # units the calling thread deleted before threads were judged worth it
        self.mark = (time.perf_counter(), time.thread_time())
        self.pins = [pinned()]  # what the helpers read: refreshed by the calling thread

    def close(self) -> None:
        for d in [self.main, *self.helpers]:
            d.close()

    def run(self, batch: list[PlanItem]) -> list[Outcome]:
        """Delete a batch; its outcomes in the batch's order."""
        n = len(batch)
        self.left -= n
        results: list[Outcome | None] = [None] * n
        i = 0
        while not self.helpers and i < n:
            results[i] = _outcome(self.main, batch[i])
            i += 1
            self.alone += 1
            if self.alone % _PROBE == 0 and _THREADS > 1 and (n - i) + self.left >= _THREADS_MIN:
                # Disk waits may begin only once the journal fills: judge each window anew.
                wall, cpu = time.perf_counter(), time.thread_time()
                if wall - self.mark[0] > _WAIT_RATIO * (cpu - self.mark[1]):
                    self._start_helpers()
                self.mark = (wall, cpu)
        if i < n:
            self._threaded(batch, results, i)
        return [o for o in results if o is not None]

    def _start_helpers(self) -> None:
        for _ in range(1, _THREADS):
            try:
                self.helpers.append(
                    _Deleter(self.tree, self.open_set, lambda: self.pins[0], self.opened)
                )
            except (_Skip, OSError):
                break  # the root went meanwhile: the calling thread finds out itself

    def _threaded(self, batch: list[PlanItem], results: list[Outcome | None], i: int) -> None:
        n = len(batch)
        chunks = iter(range(i, n, _CHUNK))  # next() is atomic: a chunk goes to one thread
        stop = threading.Event()
        errors: list[BaseException] = []

        def work(deleter: _Deleter) -> None:
            try:
                while not stop.is_set() and (start := next(chunks, None)) is not None:
                    for k in range(start, min(start + _CHUNK, n)):
                        results[k] = _outcome(deleter, batch[k])
            except BaseException as exc:  # a bug, not a file: stop, and raise it below
                errors.append(exc)
                stop.set()

        threads = [
            threading.Thread(target=work, args=(d,), name=f"janitor-delete-{k}", daemon=True)
            for k, d in enumerate(self.helpers, 1)
        ]
        for t in threads:
            t.start()
        try:
            # This thread takes chunks too, and between them reads the pins for all.
            while not stop.is_set() and (start := next(chunks, None)) is not None:
                for k in range(start, min(start + _CHUNK, n)):
                    results[k] = _outcome(self.main, batch[k])
                self.pins[0] = self.pinned()
        finally:
            stop.set()  # after an error here: the helpers finish their unit and stop
            for t in threads:
                t.join()
        if errors:
            raise errors[0]


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
        pool = _Pool(tree, open_set, pinned, len(items))
    except (_Skip, OSError) as exc:
        why = str(exc) if isinstance(exc, _Skip) else _why(exc, "tree root")
        return [Outcome(i, False, 0, 0, why) for i in items]
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
        pool.close()
    return outcomes


def _open_held(name: str, dir_fd: int) -> int:
    """Open a file to check and unlink it; its fd is not counted as "open in another process"."""
    fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
    inuse.DELETER_FDS.add(fd)
    return fd


def _close_held(fd: int) -> None:
    inuse.DELETER_FDS.discard(fd)
    os.close(fd)


#: Where the kernel cannot be asked per file, how old the open-file list checked right before a
#: delete may be: one list costs tens of ms (every process's open files), so a long sweep
#: takes it again at most this often, and a short one takes it once, after planning.
_OPEN_REFRESH_S = 0.5


def _open_now(device: int) -> Callable[[], frozenset[tuple[int, int]]]:
    """The files open on ``device`` now, taken at the first call and again when older than
    ``_OPEN_REFRESH_S`` (thread-safe enough: a race only takes the list twice)."""
    cache: list[tuple[float, frozenset[tuple[int, int]]]] = []

    def opened() -> frozenset[tuple[int, int]]:
        now = time.monotonic()
        if cache and now - cache[0][0] < _OPEN_REFRESH_S:
            return cache[0][1]
        found = inuse.open_inodes({device})
        cache[:] = [(time.monotonic(), found)]
        return found

    return opened


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

    pin_cache: list[tuple[float, frozenset[str]]] = []

    def pinned() -> frozenset[str]:
        # Re-read at most every 50 ms: a pin taken during a long sweep is seen within that.
        now = time.monotonic()
        if pin_cache and now - pin_cache[0][0] < 0.05:
            return pin_cache[0][1]
        paths: frozenset[str] = frozenset()
        if ledger is not None:
            with ledger.read() as tx:
                paths = frozenset(tx.pins.live_paths())
        pin_cache[:] = [(now, paths)]
        return paths

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
