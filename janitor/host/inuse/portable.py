"""Files in use, through psutil's open-file and memory-map lists: what macOS (and
``JANITOR_PORTABLE=1``) uses. There are no leases and no list of held locks, so the deleter
checks the open-file list again right before each unlink."""

from __future__ import annotations

import os

from janitor.host.inuse.api import DELETER_FDS, InUse

__all__ = ["PortableInUse"]


class PortableInUse(InUse):
    """psutil's answers; no leases."""

    def open_inodes(self, devices: set[int] | None = None) -> frozenset[tuple[int, int]]:
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
            try:
                paths.append(proc.cwd())
            except (psutil.Error, OSError):
                pass  # its working directory unseen; its files still count
            for path in paths:
                try:
                    st = os.stat(path)
                except OSError:
                    continue
                if devices is None or st.st_dev in devices:
                    found.add((st.st_dev, st.st_ino))
        return frozenset(found)

    def locked_inodes(self) -> frozenset[int] | None:
        return None

    def prepare_leases(self) -> bool:
        return False

    @property
    def leases_ready(self) -> bool:
        return False

    def lease(self, fd: int) -> bool | None:
        return None
