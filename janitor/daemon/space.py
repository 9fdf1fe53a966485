"""The daemon's last ``janitor space`` report, kept so that ``janitor space`` answers at once.

A fresh report walks every folder of the pipeline's disk: with start-up, about what ``du`` over
them costs. The daemon has everything loaded already; it measures the report in the background
every ``sweep_interval_s`` (in its own process: no fork of a threaded process) and keeps the
last one. ``janitor space`` asks for it over the socket (``GET /v1/space``) and shows its age;
``--fresh`` walks instead. A report older than the caller allows is measured again first.

Each report says what it was measured for: the policy file (and which version of it), the state
folder and the folders walked; the command uses it only if they are the ones it would measure
itself (another environment, another policy: it walks).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from janitor.config.settings import Settings
from janitor.core import Janitor

__all__ = ["SpaceKeeper"]

log = logging.getLogger("janitor.daemon")


class SpaceKeeper:
    """The last report, measured by :meth:`measure`, handed out by :meth:`report`."""

    def __init__(self, janitor: Janitor, settings: Settings) -> None:
        self.janitor = janitor
        self.settings = settings
        self._last: dict[str, Any] | None = None
        self._lock = threading.Lock()  # one measure at a time
        self._mutex = threading.Lock()  # guards _last

    def measure(self) -> dict[str, Any]:
        """Measure a report now (or wait for the one being measured) and keep it."""
        started = time.time()
        with self._lock:
            with self._mutex:
                last = self._last
            if last is not None and last["measured_at"] >= started:
                return last  # measured while this call waited
            data = self._measure()
            with self._mutex:
                self._last = data
            return data

    def _measure(self) -> dict[str, Any]:
        from janitor.config.policy import load_policy
        from janitor.usage import file_stamp, folders_key, report_plan, space_report

        # The policy file as it is now, not the one in force (a reload may be pending): the
        # report is what `janitor space` would measure, stamped with the file's version.
        path, state_dir = self.settings.policy_path, self.settings.state_dir
        stamp = file_stamp(path)
        policy = load_policy(path, state_dir=state_dir)
        if file_stamp(path) != stamp:
            stamp = None  # changed while read: no command will take this report
        at = time.time()
        volumes = space_report(policy, self.janitor.ledger, state_dir, workers=1)
        return {
            "measured_at": at,
            "took_s": round(time.time() - at, 3),
            "policy": str(path),
            "policy_stamp": stamp,
            "state_dir": str(state_dir),
            "folders": folders_key(report_plan(policy).folders),
            "volumes": [v.as_dict() for v in volumes],
        }

    def refresh(self) -> None:
        """The scheduled job: measure, and log (not raise) what goes wrong."""
        try:
            self.measure()
        except Exception:
            log.exception("could not measure the space report")

    def report(self, max_age: float) -> dict[str, Any]:
        """The last report if it is at most ``max_age`` seconds old, else one measured now."""
        with self._mutex:
            last = self._last
        if last is not None and time.time() - last["measured_at"] <= max_age:
            return last
        return self.measure()
