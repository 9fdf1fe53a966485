"""What the daemon sets for its whole process as it starts, before any of its parts runs: its
soft open-file limit raised, as servers raise theirs (:mod:`janitor.host.fdlimit`), and write
leases made safe to take (SIGIO ignored: :func:`janitor.host.inuse.prepare_leases`).

Both are process-wide and set from the main thread, once; nothing is undone at the stop.
"""

from __future__ import annotations

import logging

from janitor.host.fdlimit import OpenFiles, raise_open_files
from janitor.host.inuse import prepare_leases

__all__ = ["ProcessSetup"]

log = logging.getLogger("janitor.daemon")


class ProcessSetup:
    """A :class:`~janitor.daemon.lifecycle.DaemonPart` that only acts as the daemon starts."""

    def __init__(self) -> None:
        #: The open-file limit once raised (None before ``start()``).
        self.open_files: OpenFiles | None = None

    def start(self) -> None:
        """Raise the soft open-file limit (one log line says how), make leases safe."""
        files = self.open_files = raise_open_files()
        hard = "unlimited" if files.hard is None else str(files.hard)
        if files.raised:
            log.info("open files: soft limit raised from %d to %d (hard limit %s)", files.was,
                     files.soft, hard)  # fmt: skip
        elif files.error is not None:
            log.warning("open files: cannot raise the soft limit %d (hard limit %s): %s",
                        files.soft, hard, files.error)  # fmt: skip
        prepare_leases()

    def stop(self) -> None:
        """Nothing to ask."""

    def join(self) -> None:
        """Nothing to undo."""
