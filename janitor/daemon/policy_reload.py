"""Policy reloads: on SIGHUP, or when the policy file changed; a bad new policy is rejected and
the old one kept (``policy-rejected``), a good one replaces it (``policy-reloaded``)."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path

from janitor.admission.jobs import job_tree
from janitor.config.policy import Policy, load_policy
from janitor.config.settings import Settings
from janitor.core import Janitor
from janitor.daemon.ballast import BallastKeeper
from janitor.daemon.events import EventBus
from janitor.daemon.policy_watch import Watching
from janitor.errors import JanitorError

__all__ = ["PolicyReloader"]

log = logging.getLogger("janitor.daemon")


class PolicyReloader:
    """Keeps the janitor's policy, the ballast and the watches in step with the policy file.

    ``requested`` is set to reload even an unchanged file (SIGHUP); ``wake()`` asks the main
    thread to call :meth:`check_policy`, the only place a reload happens.
    """

    def __init__(
        self,
        janitor: Janitor,
        settings: Settings,
        bus: EventBus,
        *,
        requested: threading.Event,
        watching: Watching,
        ballast: BallastKeeper,
        wake: Callable[[], None],
    ) -> None:
        self.janitor = janitor
        self.settings = settings
        self.bus = bus
        self.requested = requested
        self.watching = watching
        self.ballast = ballast
        self.wake = wake
        self._mtime = _mtime(settings.policy_path)  # of the policy the janitor was made with

    def check_policy(self) -> None:
        """Reload the policy on SIGHUP or when its file changes; keep the old one if bad.

        Runs in the main thread only (``Daemon.run()``), woken by SIGHUP, by the watcher or by
        ``rearm``: it replaces the watcher, whose debounce thread cannot stop itself.
        """
        mtime = _mtime(self.settings.policy_path)
        if not self.requested.is_set() and mtime == self._mtime:
            return
        self.requested.clear()
        self._mtime = mtime
        try:
            policy = load_policy(
                self.settings.policy_path,
                state_dir=self.settings.state_dir,
                origin=self.settings.policy_origin,
            )
        except JanitorError as exc:
            log.error("rejected the new policy, keeping the old one: %s", exc)
            self.bus.publish("policy-rejected", reason=str(exc))
            return
        self.janitor.policy = policy
        log.info("policy reloaded from %s (%d trees)", self.settings.policy_path, len(policy.trees))
        self._say_kept_jobs(policy)
        self.ballast.arm()
        self.watching.restart()
        self.bus.publish("policy-reloaded", trees=sorted(policy.trees))

    def _say_kept_jobs(self, policy: Policy) -> None:
        """Name the running jobs whose folder the new policy no longer puts in their tree (the
        tree dropped, renamed, or its root moved): each stays its job until it ends, its later
        cuts drawing on its working set (janitor.guarding.grant), whatever the policy now says."""
        try:
            jobs = self.janitor.jobs()
        except (JanitorError, OSError):
            return  # a ledger it cannot read now: the jobs go on all the same
        kept = [j for j in jobs if j.state == "live" and job_tree(policy, j) is not
                policy.trees.get(j.tree)]  # fmt: skip
        if kept:
            log.info(
                "%d running job%s whose folder the new policy no longer puts in its tree as "
                "recorded (%s): each stays its job until it ends, drawing on its working set",
                len(kept), "" if len(kept) == 1 else "s", ", ".join(j.folder for j in kept),
            )  # fmt: skip

    def rearm(self) -> None:
        """Re-arm broken watches; sweep trees that are polled instead of watched; notice a
        changed policy file that no watch reported."""
        if _mtime(self.settings.policy_path) != self._mtime:
            self.wake()
        self.watching.rearm()


def _mtime(path: Path) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0.0
