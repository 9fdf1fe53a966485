"""The checks right before a delete: the deleter's safety rules, in one place.

Every file the deleter removes, whatever its unit, passes :meth:`Rechecks.hold` (a regular
file, opened and held) or :meth:`Rechecks.verify` (a symlink, a fifo ...) right before it
goes: the same inode, size and mtime as the scan saw, owned by us, and open in no other process
(a write lease where the kernel gives one, else the open-file list taken again). Folders are
opened one component at a time, never through a symlink and never onto another filesystem
(:meth:`Rechecks.open_sub`); a unit under a pin is never touched (:meth:`Rechecks.check_pins`).
A check that fails raises :class:`Skip` before anything of the unit is removed.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Generic, TypeVar

from janitor.host import inuse
from janitor.host.fdwalk import DIR_FLAGS

if TYPE_CHECKING:  # light to import: every kind of unit deletes with these checks
    from janitor.cleanup.scan import Entry
    from janitor.cleanup.units import Unit
    from janitor.host.mounts import Boundary

__all__ = [
    "FILE_FLAGS",
    "Fresh",
    "Partial",
    "Rechecks",
    "Skip",
    "close_held",
    "open_held",
    "why",
]

T = TypeVar("T")

#: Opening a file to check it: never follow a symlink, never block (fifos), never a tty.
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY


class Skip(Exception):
    """A unit that must be left alone; the message says why."""


class Partial(Exception):
    """A unit whose removal stopped part way (something came alive); what went is counted."""

    def __init__(self, files: int, size: int, why: str) -> None:
        super().__init__(why)
        self.files = files
        self.size = size


class Fresh(Generic[T]):
    """What ``read()`` gives, read at the first call and again once older than ``max_age``
    seconds: the pins and the open-file list the checks ask, each read far less often than
    once per file during a long sweep (one open-file list costs tens of ms).

    Safe enough across threads: the value and its time are replaced as one, so a race at worst
    reads twice. Its time is taken before the read: a value is never older than it says.
    """

    __slots__ = ("_last", "max_age", "read")

    def __init__(self, read: Callable[[], T], max_age: float) -> None:
        self.read = read
        self.max_age = max_age
        self._last: tuple[float, T] | None = None

    def __call__(self) -> T:
        now = time.monotonic()
        last = self._last
        if last is not None and now - last[0] < self.max_age:
            return last[1]
        value = self.read()
        self._last = (now, value)
        return value


class Rechecks:
    """The checks of one tree's deletes, on its filesystem (``device``) below ``edge``'s root.

    ``open_set``: files open when the sweep planned; ``pinned``: the pinned paths now;
    ``opened``: the open-file list now, where the kernel cannot be asked per file (no write
    leases: macOS, JANITOR_PORTABLE; or a filesystem that grants none, such as NFS or FUSE).
    """

    def __init__(
        self,
        root: str,
        device: int,
        edge: Boundary,
        open_set: frozenset[tuple[int, int]],
        pinned: Callable[[], frozenset[str]],
        opened: Callable[[], frozenset[tuple[int, int]]] | None = None,
    ) -> None:
        self.root = root
        self.device = device
        self.edge = edge
        self.open_set = open_set
        self.pinned = pinned
        self.uid = os.geteuid()
        self.leases = inuse.leases_ready()
        # Without write leases the kernel cannot be asked per file: the open-file list is
        # taken again while deleting, not only at planning.
        self.opened = None if self.leases else opened
        self._fallback = opened  # where a lease is not possible on this filesystem

    def check_pins(self, unit: Unit, folder: str | None = None) -> None:
        """Skip a unit that holds a pinned path, or lies below one; ``folder``: the unit's own
        folder, when the unit is a whole folder (then a pin anywhere below it covers it)."""
        pins = self.pinned()
        if not pins:
            return
        base = self.root.rstrip("/") + "/"
        for p in pins:
            if not (p.startswith(base) or base.startswith(p.rstrip("/") + "/")):
                continue
            for e in unit.entries:
                if e.path == p or e.path.startswith(p.rstrip("/") + "/"):
                    raise Skip("pinned")
            if folder is not None and p.startswith(folder + "/"):
                raise Skip("pinned")

    def open_sub(self, parent_fd: int, name: str) -> int:
        """Open a folder in a folder: no symlink, no other filesystem, no mount point."""
        if name in ("", ".", ".."):
            raise Skip("bad path component")
        try:
            fd = os.open(name, DIR_FLAGS, dir_fd=parent_fd)
        except OSError as exc:
            raise Skip(why(exc, "folder")) from None
        st = os.fstat(fd)
        if st.st_dev != self.device:
            os.close(fd)
            raise Skip("folder is on another filesystem")
        if self.edge.crosses(fd, st):
            os.close(fd)
            raise Skip("folder is a mount point (another filesystem mounted there)")
        return fd

    def same(self, st: os.stat_result, e: Entry) -> None:
        """The scanned entry, unchanged and ours (st: lstat or fstat of it now)."""
        if st.st_ino != e.ino or st.st_dev != e.dev:
            raise Skip("replaced since the scan")
        if not stat.S_ISDIR(st.st_mode) and (st.st_size != e.length or st.st_mtime != e.mtime):
            raise Skip("changed since the scan")
        if st.st_uid != self.uid:
            raise Skip("owned by another user")

    def verify(self, dir_fd: int, name: str, e: Entry) -> os.stat_result:
        """The entry ``name`` of folder ``dir_fd``, unchanged since the scan and ours."""
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            raise Skip("gone since the scan") from None
        self.same(st, e)
        return st

    def hold(self, dir_fd: int, name: str, e: Entry) -> int:
        """Open a scanned regular file and check it, for unlinking while the fd is held: the
        same inode, size and mtime, ours, and open in no other process (a write lease, held
        until the fd is closed; where leases do not work, the open-file list from before)."""
        try:
            fd = open_held(name, dir_fd)
        except FileNotFoundError:
            raise Skip("gone since the scan") from None
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR):  # a symlink, socket ...
                raise Skip("replaced since the scan") from None
            raise
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise Skip("replaced since the scan")
            self.same(st, e)
            self.alone(fd, st)
        except BaseException:
            close_held(fd)
            raise
        return fd

    def hold_entry(self, dir_fd: int, name: str, e: Entry) -> int | None:
        """Check a scanned file that is not a folder, right before it goes: a regular file is
        held (:meth:`hold`: its fd, to close once it is unlinked); anything else (a symlink,
        a fifo) verified, and None. A folder in its place now is a replacement."""
        if stat.S_ISREG(e.mode):
            return self.hold(dir_fd, name, e)
        st = self.verify(dir_fd, name, e)
        if stat.S_ISDIR(st.st_mode):
            raise Skip("replaced since the scan")
        return None

    def alone(self, fd: int, st: os.stat_result) -> None:
        """Skip unless no other process has the open file (fd: ours, of a regular file)."""
        if self.leases:
            granted = inuse.lease(fd)
            if granted:
                return  # nobody else has it open, and closing fd ends the lease
            if granted is False:
                raise Skip("open in another process")
            # no lease here: what the open-file list says now, not only at planning
            if self._fallback is not None and (st.st_dev, st.st_ino) in self._fallback():
                raise Skip("open in another process")
        if self.is_open((st.st_dev, st.st_ino)):
            raise Skip("open in another process")

    def is_open(self, key: tuple[int, int]) -> bool:
        """Whether the file ``(dev, ino)`` was open at planning, or is by the list taken now."""
        return key in self.open_set or (self.opened is not None and key in self.opened())

    def unlink_file(self, dir_fd: int, name: str, e: Entry) -> None:
        """Remove one entry that is not a folder, after the checks of :meth:`hold_entry`; a
        regular file is unlinked while held (under its lease a late opener waits, then finds
        it gone), and the name is removed, never followed."""
        fd = self.hold_entry(dir_fd, name, e)
        try:
            os.unlink(name, dir_fd=dir_fd)
        finally:
            if fd is not None:
                close_held(fd)  # ends the lease


def open_held(name: str, dir_fd: int) -> int:
    """Open a file to check and unlink it; its fd is not counted as "open in another process"."""
    fd = os.open(name, FILE_FLAGS, dir_fd=dir_fd)
    inuse.DELETER_FDS.add(fd)
    return fd


def close_held(fd: int) -> None:
    """Close a file :func:`open_held` opened (ending its lease)."""
    inuse.DELETER_FDS.discard(fd)
    os.close(fd)


def why(exc: OSError, what: str) -> str:
    """A failed open of ``what`` (a folder, a lock file, the tree root), in the skip's words."""
    if exc.errno == errno.ELOOP or exc.errno == errno.ENOTDIR:
        return f"{what} is now a symlink or not a folder"
    if exc.errno == errno.ENOENT:
        return f"{what} gone since the scan"
    return f"{what}: {exc.strerror}"
