"""Files in use, from Linux's ``/proc`` (every process's fds, maps and working directory,
``/proc/locks``) and write leases (``F_SETLEASE``), which the kernel grants only to a file
nobody else has open."""

from __future__ import annotations

import errno
import fcntl
import os
import signal
import stat
import threading

from janitor.host.inuse.api import DELETER_FDS
from janitor.host.inuse.portable import PortableInUse

__all__ = ["LinuxInUse"]


class LinuxInUse(PortableInUse):
    """``/proc`` and leases; psutil's lists only where ``/proc`` has no fd folders."""

    #: The kernel's list of held file locks.
    proc_locks = "/proc/locks"

    def __init__(self) -> None:
        self.lease_ok = False
        self._lease_lock = threading.Lock()

    def prepare_leases(self) -> bool:
        """A broken lease notifies its holder with SIGIO, whose default action kills the
        process, so leases are used only once SIGIO is ignored (set here when called from the
        main thread; the daemon calls this at startup)."""
        if not hasattr(fcntl, "F_SETLEASE"):
            return False
        with self._lease_lock:
            if self.lease_ok:
                return True
            current = signal.getsignal(signal.SIGIO)
            if current == signal.SIG_IGN:
                self.lease_ok = True
            elif (
                current == signal.SIG_DFL and threading.current_thread() is threading.main_thread()
            ):
                signal.signal(signal.SIGIO, signal.SIG_IGN)
                self.lease_ok = True
            return self.lease_ok

    @property
    def leases_ready(self) -> bool:
        return self.lease_ok

    def lease(self, fd: int) -> bool | None:
        try:
            fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_WRLCK)
            return True
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EBUSY):
                return False
            return None

    def locked_inodes(self) -> frozenset[int] | None:
        # The device is left out (on btrfs a subvolume's st_dev is not the one the kernel
        # lists); waiters ("->") and every kind of lock are listed: a superset is safe.
        try:
            with open(self.proc_locks, "rb") as f:
                data = f.read()
        except OSError:
            return None
        found: set[int] = set()
        for line in data.splitlines():
            # b"1: FLOCK  ADVISORY  WRITE 1234 00:2f:5678 0 EOF", or b"1: -> FLOCK ..." (a waiter)
            parts = [p for p in line.split() if p != b"->"]
            if len(parts) < 6:
                continue
            try:
                found.add(int(parts[5].rsplit(b":", 1)[1]))
            except (IndexError, ValueError):
                continue
        return frozenset(found)

    def open_inodes(self, devices: set[int] | None = None) -> frozenset[tuple[int, int]]:
        if not os.path.isdir("/proc/self/fd"):
            return super().open_inodes(devices)
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
            for fd in [*(f"fd/{fd}" for fd in fds), "cwd"]:
                try:
                    st = os.stat(f"{base}/{fd}")
                except OSError:
                    continue
                if pid == me and fd != "cwd" and stat.S_ISDIR(st.st_mode):
                    continue  # the folders our own walks and deletes hold open
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
