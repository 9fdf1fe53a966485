"""Processes: when one started, whether it still runs, what it is; one interface (``api``), one
module per platform: ``linux`` reads ``/proc``, ``portable`` asks psutil (what macOS runs).

>>> from janitor.host.processes import processes
>>> processes.alive(1, None)
True
"""

from __future__ import annotations

import os

from janitor.host.fastpaths import LINUX
from janitor.host.processes.api import Processes, ProcessInfo

__all__ = ["ProcessInfo", "Processes", "processes"]


def _for_this_host() -> Processes:
    if LINUX and os.path.isdir("/proc/self"):
        from janitor.host.processes.linux import LinuxProcesses

        return LinuxProcesses()
    from janitor.host.processes.portable import PortableProcesses

    return PortableProcesses()


#: This host's process table.
processes: Processes = _for_this_host()
