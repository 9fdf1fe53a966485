"""Where the daemon's log lines go: a rotating file in the log dir, and stderr in the foreground."""

from __future__ import annotations

import logging
import logging.handlers
import sys
from pathlib import Path

__all__ = ["DaemonLogging"]

#: 5 MiB per file, three old ones kept: weeks of a busy daemon, never a full disk.
_MAX_BYTES = 5 * 1024 * 1024
_BACKUPS = 3


class DaemonLogging:
    """The ``janitor`` loggers' handlers for the daemon's lifetime."""

    def __init__(self, log_dir: Path, *, to_stderr: bool = True) -> None:
        self.log_dir = log_dir
        self.to_stderr = to_stderr

    def start(self) -> None:
        """Log INFO and above to ``log_dir/daemon.log`` (a warning on stderr if impossible)."""
        root = logging.getLogger("janitor")
        root.setLevel(logging.INFO)
        fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
        try:
            self.log_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            fh = logging.handlers.RotatingFileHandler(
                self.log_dir / "daemon.log", maxBytes=_MAX_BYTES, backupCount=_BACKUPS
            )
            fh.setFormatter(fmt)
            root.addHandler(fh)
        except OSError as exc:
            print(f"janitor: warning: cannot write logs to {self.log_dir}: {exc}", file=sys.stderr)
        if self.to_stderr:
            sh = logging.StreamHandler(sys.stderr)
            sh.setFormatter(fmt)
            root.addHandler(sh)
        # "skipped: maximum number of running instances" is coalescing working, not news.
        logging.getLogger("apscheduler").setLevel(logging.ERROR)

    def stop(self) -> None:
        """Close and remove every handler of the ``janitor`` loggers (the file is flushed)."""
        root = logging.getLogger("janitor")
        for handler in list(root.handlers):
            handler.close()
            root.removeHandler(handler)
