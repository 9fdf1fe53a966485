"""Is a file in use? Held lock files and files open (or mapped) in any process.

Two answers, for two moments. Before planning, :func:`open_inodes` lists every ``(dev, ino)``
open or memory-mapped by any process we can see (``/proc`` on Linux, psutil elsewhere; best
effort where the OS hides other users' processes). Right before a delete, :func:`exclusive`
asks the kernel itself on Linux: a write lease is granted only when no other process has the
file open, and holding it makes a late opener wait until the file is gone.
"""

from __future__ import annotations

import errno
import fcntl
import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from janitor.host.fastpaths import LINUX

__all__ = ["exclusive", "lock_held", "locked_inodes", "open_inodes", "prepare_leases"]

_LEASES = LINUX and hasattr(fcntl, "F_SETLEASE")
_lease_ok = False
_lease_lock = threading.Lock()


def prepare_leases() -> bool:
    """Make write leases safe in this process; returns whether they can be used.

    A broken lease notifies its holder with SIGIO, whose default action kills the process, so
    leases are used only once SIGIO is ignored (set here when called from the main thread; the
    daemon calls this at startup). Elsewhere the deleter falls back to :func:`open_inodes`.
    """
    global _lease_ok
    if not _LEASES:
        return False
    with _lease_lock:
        if _lease_ok:
            return True
        current = signal.getsignal(signal.SIGIO)
        if current == signal.SIG_IGN:
            _lease_ok = True
        elif current == signal.SIG_DFL and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGIO, signal.SIG_IGN)
            _lease_ok = True
        return _lease_ok


@contextmanager
def exclusive(fd: int) -> Iterator[bool | None]:
    """Hold a write lease on open file ``fd`` if possible.

    Yields True when no other process has the file open (and none can open it until the block
    ends), False when another process has it open, None when leases are unavailable here (other
    filesystems, other systems, SIGIO not ignored): then the caller relies on open_inodes().
    """
    if not _lease_ok:
        yield None
        return
    try:
        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_WRLCK)
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EBUSY):
            yield False
        else:
            yield None
        return
    try:
        yield True
    finally:
        try:
            fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
        except OSError:
            pass


def lock_held(name: str, dir_fd: int | None = None) -> bool:
    """True if another process holds a flock on the lock file (False if it does not exist)."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # closing drops our probe lock
    return False


_PROC_LOCKS = "/proc/locks"


def locked_inodes() -> frozenset[int] | None:
    """Inode numbers of the files some process holds a lock on, from Linux's /proc/locks; None
    where there is no such list to read.

    Only a filter: the device is left out (on btrfs a subvolume's st_dev is not the one the
    kernel lists), so a hit is then confirmed with :func:`lock_held`. Waiters ("->") and every
    kind of lock are listed; a superset is safe.
    """
    if not LINUX:
        return None
    try:
        with open(_PROC_LOCKS, "rb") as f:
            data = f.read()
    except OSError:
        return None
    found: set[int] = set()
    for line in data.splitlines():
        # b"1: FLOCK  ADVISORY  WRITE 1234 00:2f:5678 0 EOF", or b"1: -> FLOCK ..." for a waiter
        parts = [p for p in line.split() if p != b"->"]
        if len(parts) < 6:
            continue
        try:
            found.add(int(parts[5].rsplit(b":", 1)[1]))
        except (IndexError, ValueError):
            continue
    return frozenset(found)


#: Descriptors the deleter itself holds open right now (to check and unlink a file): they are
#: left out of this process's open files, or every file would look in use while it is checked.
DELETER_FDS: set[int] = set()


def open_inodes(devices: set[int] | None = None) -> frozenset[tuple[int, int]]:
    """``(dev, ino)`` of every file some process has open or mapped, on ``devices`` if given."""
    if LINUX and os.path.isdir("/proc/self/fd"):
        return _proc_inodes(devices)
    return _psutil_inodes(devices)


def _proc_inodes(devices: set[int] | None) -> frozenset[tuple[int, int]]:
    found: set[tuple[int, int]] = set()
    # Our own process counts too: a worker that reads a cached file and then asks for room
    # must not have that file evicted under it.
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return frozenset()
    me = str(os.getpid())
    for pid in pids:
        base = f"/proc/{pid}"
        try:
            fds = os.listdir(f"{base}/fd")
        except OSError:
            fds = []
        if pid == me:
            fds = [fd for fd in fds if int(fd) not in DELETER_FDS]
        for fd in fds:
            try:
                st = os.stat(f"{base}/fd/{fd}")
            except OSError:
                continue
            if devices is None or st.st_dev in devices:
                found.add((st.st_dev, st.st_ino))
        try:
            with open(f"{base}/maps", encoding="ascii", errors="replace") as fh:
                maps = fh.read()
        except OSError:
            continue
        for line in maps.splitlines():
            parts = line.split(None, 5)
            if len(parts) < 6 or parts[4] == "0":
                continue
            major, _, minor = parts[3].partition(":")
            try:
                dev = os.makedev(int(major, 16), int(minor, 16))
                ino = int(parts[4])
            except ValueError:
                continue
            if devices is None or dev in devices:
                found.add((dev, ino))
    return frozenset(found)


def _psutil_inodes(devices: set[int] | None) -> frozenset[tuple[int, int]]:
    import psutil

    found: set[tuple[int, int]] = set()
    me = os.getpid()
    for proc in psutil.process_iter():
        try:
            files = proc.open_files()
            if proc.pid == me:
                files = [f for f in files if f.fd not in DELETER_FDS]
            paths = [f.path for f in files]
            paths += [m.path for m in proc.memory_maps(grouped=True) if m.path.startswith("/")]
        except (psutil.Error, OSError):
            continue
        for path in paths:
            try:
                st = os.stat(path)
            except OSError:
                continue
            if devices is None or st.st_dev in devices:
                found.add((st.st_dev, st.st_ino))
    return frozenset(found)
