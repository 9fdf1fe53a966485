"""The main thread's wake-up pipe and the signal handlers that write to it.

Idle, the main thread sleeps in ``os.read()`` on the pipe, with no timeout: SIGTERM, SIGINT and
SIGHUP (through ``set_wakeup_fd`` and the handlers), ``Daemon.stop()``, reload requests, the
policy file's watch and a failed API server write a byte to it.
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

__all__ = ["SignalHandlers", "Wakeup"]


class Wakeup:
    """A pipe to sleep on, and the requests that came with the bytes written to it.

    The flags are plain attributes: signal handlers set them, and a handler may take no lock
    (it runs between two bytecodes of the main thread, which may hold one).
    """

    def __init__(self) -> None:
        self._r, self._w = os.pipe()  # not inherited (PEP 446)
        os.set_blocking(self._w, False)  # set_wakeup_fd needs it; a full pipe wakes anyway
        self.stop_requested = False
        self.hup_requested = False

    @property
    def write_fd(self) -> int:
        """The end signals write to (``signal.set_wakeup_fd``)."""
        return self._w

    def wake(self, why: bytes) -> None:
        """Wake the main thread (thread- and signal-safe)."""
        try:
            os.write(self._w, why)
        except OSError:  # full (the main thread will wake anyway) or closed (stopped)
            pass

    def wait(self) -> bytes:
        """Sleep until something is written; what was (empty once the pipe is closed)."""
        try:
            return os.read(self._r, 512)
        except InterruptedError:  # pragma: no cover - PEP 475 retries for us
            return b"?"

    def close(self) -> None:
        """Close both ends (later ``wake()`` calls do nothing)."""
        for fd in (self._r, self._w):
            try:
                os.close(fd)
            except OSError:
                pass


class SignalHandlers:
    """SIGTERM and SIGINT ask the daemon to stop, SIGHUP to re-read its policy."""

    def __init__(self, wakeup: Wakeup) -> None:
        self.wakeup = wakeup

    def start(self) -> None:
        """Install the handlers (the main thread only, as ``signal.signal`` requires)."""
        wakeup = self.wakeup

        def on_stop(*_: Any) -> None:
            wakeup.stop_requested = True
            wakeup.wake(b"s")

        def on_hup(*_: Any) -> None:
            wakeup.hup_requested = True
            wakeup.wake(b"h")

        signal.signal(signal.SIGTERM, on_stop)
        signal.signal(signal.SIGINT, on_stop)
        signal.signal(signal.SIGHUP, on_hup)
        signal.set_wakeup_fd(wakeup.write_fd, warn_on_full_buffer=False)

    def stop(self) -> None:
        """Nothing to ask: the handlers stay until ``join()``."""

    def join(self) -> None:
        """Stop writing signals to the pipe, which is about to close."""
        if threading.current_thread() is threading.main_thread():
            signal.set_wakeup_fd(-1)
