"""``metrics_textfile``: the metrics as a ``.prom`` file for node_exporter's textfile collector,
for hosts where node_exporter is scraped already and no other port may open.

The file is replaced as node_exporter asks: written under a temporary name in the same folder
(``.NAME.PID.tmp``, which the collector skips: it reads only ``*.prom``), then renamed over
the old one, so a scrape never reads half a file. It is rewritten after each volume sample,
at most every ``sample_interval_s`` (not faster while a volume is low and sampled faster),
mode 0644 so node_exporter's user can read it. When the daemon stops it leaves ``janitor_up 0``
alone in the file; after a crash the file's age (``node_textfile_mtime_seconds``) tells.
A failed write is one WARNING line, and one INFO line when writing works again.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

from janitor.daemon.metrics import render_down
from janitor.daemon.metrics_app import MetricsSource

__all__ = ["Textfile"]

log = logging.getLogger("janitor.daemon")


class Textfile:
    """Keeps ``path`` holding ``source``'s metrics; a daemon service (its last write at join)."""

    def __init__(self, source: MetricsSource, path: Path, *, every_s: float) -> None:
        self.source = source
        self.path = path
        self.every_s = every_s
        self._lock = threading.Lock()
        self._closed = False
        self._written: float | None = None  # monotonic time of the last write
        self._failing = False

    def start(self) -> None:
        """Nothing to start: the first sample writes it."""

    def stop(self) -> None:
        """Nothing to ask: a sample in progress finishes its write."""

    def join(self) -> None:
        """Leave ``janitor_up 0`` in the file; no write after this one."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._replace(render_down())

    def write(self) -> None:
        """Rewrite the file with the metrics measured now, unless it was written less than
        ``every_s`` ago (a tenth of that is slack for the scheduler's jitter)."""
        with self._lock:
            now = time.monotonic()
            if self._closed or (
                self._written is not None and now - self._written < self.every_s * 0.9
            ):
                return
            self._written = now
            self._replace(self.source.metrics_text())

    def _replace(self, data: bytes) -> None:
        path = self.path
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
            try:
                os.fchmod(fd, 0o644)  # readable by node_exporter's user, whatever the umask
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except OSError as exc:
            try:
                tmp.unlink()
            except OSError:
                pass
            if not self._failing:
                self._failing = True
                log.warning(
                    "metrics_textfile %s: cannot write it: %s (retried at every sample)",
                    path,
                    exc.strerror or exc,
                )
            return
        if self._failing:
            self._failing = False
            log.info("metrics_textfile %s: written again", path)
