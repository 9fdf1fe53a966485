"""The metrics for a Prometheus elsewhere, as the settings ask: the listener
(``metrics_listen``, :mod:`.metrics_listener`) and the textfile (``metrics_textfile``,
:mod:`.textfile`), each only when configured, as one daemon service."""

from __future__ import annotations

import threading

from janitor.config.settings import Settings
from janitor.daemon.lifecycle import DaemonPart
from janitor.daemon.metrics_app import MetricsSource
from janitor.daemon.metrics_listener import MetricsListener
from janitor.daemon.textfile import Textfile

__all__ = ["Exporters"]


class Exporters:
    """Starts the configured exporters in order, stops and joins them in reverse."""

    def __init__(
        self, source: MetricsSource, settings: Settings, stop: threading.Event, *, version: str
    ) -> None:
        address = settings.metrics_address
        self.listener = (
            None if address is None else MetricsListener(source, address, stop, version=version)
        )
        path = settings.metrics_textfile
        #: Rewritten by the sampler after each sample (None when not configured).
        self.textfile = (
            None if path is None else Textfile(source, path, every_s=settings.sample_interval_s)
        )
        self._services: list[DaemonPart] = [s for s in (self.listener, self.textfile) if s]

    def start(self) -> None:
        """Start each (a listener that cannot bind logs why; the daemon runs on)."""
        for service in self._services:
            service.start()

    def stop(self) -> None:
        """Ask each to stop."""
        for service in reversed(self._services):
            service.stop()

    def join(self) -> None:
        """Wait for each; the textfile's last write says the daemon stopped."""
        for service in reversed(self._services):
            service.join()
