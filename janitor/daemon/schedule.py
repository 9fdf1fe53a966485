"""The daemon's periodic jobs on APScheduler's background thread.

Jobs coalesce and never overlap themselves ("skipped: maximum number of running instances" is
that working); each runs guarded (skipped once stopping, its exception logged). Idle, the thread
sleeps until the next job is due.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from apscheduler.schedulers.background import BackgroundScheduler

from janitor.daemon.lifecycle import guarded

__all__ = ["Scheduler"]


class Scheduler:
    """Runs each added job every so many seconds, from ``start()`` until ``stop()``."""

    def __init__(self, stop: threading.Event) -> None:
        self._stop = stop
        self._jobs: list[tuple[Callable[[], None], float, str, float | None]] = []
        self._sched = BackgroundScheduler(
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": 30},
            timezone="UTC",
        )

    def every(
        self, seconds: float, fn: Callable[[], None], *, name: str, delay: float | None = None
    ) -> None:
        """Run ``fn`` every ``seconds``; first ``delay`` s after ``start()`` (None: after one
        interval). Added before ``start()``, so every first run is timed from the start."""
        self._jobs.append((fn, seconds, name, delay))

    def reschedule(self, name: str, seconds: float) -> None:
        """Run job ``name`` every ``seconds`` from now on."""
        self._sched.reschedule_job(name, trigger="interval", seconds=seconds)

    def start(self) -> None:
        """Add the jobs and start the scheduler's thread."""
        now = time.time()
        for fn, seconds, name, delay in self._jobs:
            first: dict[str, Any] = {}
            if delay is not None:
                first["next_run_time"] = datetime.fromtimestamp(now + delay, tz=UTC)
            self._sched.add_job(
                guarded(fn, self._stop), "interval", seconds=seconds, id=name, **first
            )
        self._sched.start()

    def stop(self) -> None:
        """Run no more jobs (one running now finishes on its own)."""
        try:
            self._sched.shutdown(wait=False)
        except Exception:  # never started, or already stopped
            pass

    def join(self) -> None:
        """Nothing to wait for: a job in progress sees the stop event."""
