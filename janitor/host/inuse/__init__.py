"""Is a file in use? Held lock files, and files open or mapped in any process; one interface
(``api``), one module per platform: ``linux`` (``/proc``, ``/proc/locks``, write leases) and
``portable`` (psutil's lists: what macOS runs).

>>> from janitor.host import inuse
>>> inuse.lock_held("/tmp/no-such.lock")
False
"""

from __future__ import annotations

from janitor.host.fastpaths import LINUX
from janitor.host.inuse.api import DELETER_FDS, InUse, lock_held

__all__ = [
    "DELETER_FDS",
    "InUse",
    "lease",
    "leases_ready",
    "lock_held",
    "locked_inodes",
    "open_inodes",
    "prepare_leases",
    "probe",
]


def _for_this_host() -> InUse:
    if LINUX:
        from janitor.host.inuse.linux import LinuxInUse

        return LinuxInUse()
    from janitor.host.inuse.portable import PortableInUse

    return PortableInUse()


#: This host's way of telling.
probe: InUse = _for_this_host()


def open_inodes(devices: set[int] | None = None) -> frozenset[tuple[int, int]]:
    """``(dev, ino)`` of every file some process has open or mapped, on ``devices`` if given."""
    return probe.open_inodes(devices)


def locked_inodes() -> frozenset[int] | None:
    """Inodes some process holds a lock on (a filter: confirm with :func:`lock_held`); None
    where the system keeps no such list."""
    return probe.locked_inodes()


def prepare_leases() -> bool:
    """Make write leases safe in this process (SIGIO ignored); whether they can be used."""
    return probe.prepare_leases()


def leases_ready() -> bool:
    """True once :func:`prepare_leases` made write leases usable in this process."""
    return probe.leases_ready


def lease(fd: int) -> bool | None:
    """A write lease on ``fd``: True granted, False open elsewhere, None none to be had here."""
    return probe.lease(fd)
