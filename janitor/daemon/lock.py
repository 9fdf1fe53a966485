"""One daemon per user: an exclusive ``flock`` on ``daemon.lock`` in the runtime dir.

The file holds the owner's pid, so a second daemon can say who runs. The lock dies with its
process, so a killed daemon leaves nothing that needs cleaning up before the next start.
"""

from __future__ import annotations

import os
from pathlib import Path

from janitor.errors import EXIT_BAD_INPUT, JanitorError
from janitor.host.flock import try_lock

__all__ = ["DaemonRunning", "PidLock"]


class DaemonRunning(JanitorError):
    """Another daemon of this user already holds the lock."""

    exit_code = EXIT_BAD_INPUT


class PidLock:
    """The daemon lock in ``runtime_dir``; ``socket_path`` is named when another one holds it."""

    def __init__(self, runtime_dir: Path, socket_path: Path) -> None:
        self.path = runtime_dir / "daemon.lock"
        self._socket_path = socket_path
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock and write our pid into it; :class:`DaemonRunning` if it is held."""
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            taken = try_lock(fd)
        except OSError:
            taken = False  # no lock to be had here (ENOLCK): as good as held
        if not taken:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise DaemonRunning(
                f"a janitor daemon already runs for this user (pid {holder}, socket "
                f"{self._socket_path}); stop it first or use its API"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd

    def release(self) -> None:
        """Let the next daemon start (the file stays: the next one truncates it)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
