"""The background service: a short supervisor and the services it starts and stops."""

from __future__ import annotations

from janitor.daemon.lock import DaemonRunning
from janitor.daemon.supervisor import Daemon

__all__ = ["Daemon", "DaemonRunning"]
