"""`janitor daemon`: keeps every policy true without anyone calling it.

It wires and runs the services: watches (:mod:`.policy_watch`) and sweeps (:mod:`.sweeper`) the
trees; samples, forecasts and levels each volume (:mod:`.sampler`), releasing ballast and
putting jobs at risk when critical (:mod:`.ballast`, :mod:`.at_risk`); reaps (:mod:`.reaper`);
reloads the policy (:mod:`.policy_reload`); serves the API on a Unix socket (:mod:`.server`)
and the metrics to other machines (:mod:`.exporters`). One daemon per user (:mod:`.lock`).
Idle, no thread polls. A run's own daemon (``admission_only``) never deletes anything.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from functools import partial

from janitor import __version__
from janitor.config.settings import Settings
from janitor.core import Janitor
from janitor.daemon.at_risk import RiskMarker
from janitor.daemon.ballast import BallastKeeper
from janitor.daemon.counters import LogCounters, StatusFile
from janitor.daemon.events import EventBus
from janitor.daemon.exporters import Exporters
from janitor.daemon.lifecycle import DaemonPart, OnStop, guarded
from janitor.daemon.lock import DaemonRunning, PidLock
from janitor.daemon.logs import DaemonLogging
from janitor.daemon.metrics import DaemonState, registry_for
from janitor.daemon.policy_reload import PolicyReloader
from janitor.daemon.policy_watch import Watching
from janitor.daemon.process import ProcessSetup
from janitor.daemon.reaper import Reaper
from janitor.daemon.sampler import Sampler
from janitor.daemon.schedule import Scheduler
from janitor.daemon.server import ApiServer
from janitor.daemon.signals import SignalHandlers, Wakeup
from janitor.daemon.sweeper import Pending, Sweeper
from janitor.daemon.view import LiveView

__all__ = ["REARM_INTERVAL_S", "Daemon", "DaemonRunning"]

log = logging.getLogger("janitor.daemon")

#: How often broken watches are re-armed, polled trees swept and the policy's mtime compared.
REARM_INTERVAL_S = 5.0


class Daemon:
    """The background service. ``run()`` blocks until SIGTERM/SIGINT (or ``stop()``)."""

    def __init__(
        self, settings: Settings, *, log_to_stderr: bool = True, admission_only: bool = False
    ) -> None:
        self.settings = settings.for_a_run() if admission_only else settings
        self.admission_only = admission_only  # no sweeps, watches, ballast or orphan removal
        self.log_to_stderr = log_to_stderr
        self.bus = EventBus()
        self.state = DaemonState(pid=os.getpid(), started=time.time(), version=__version__)
        self.registry = registry_for(self.state)
        self.janitor: Janitor
        self._stop = threading.Event()
        self._reload = threading.Event()
        self._wakeup = Wakeup()  # made now: stop() may come before run() gets far
        self._lock = PidLock(settings.runtime_dir, settings.socket_path)
        self._logs = DaemonLogging(settings.log_dir, to_stderr=log_to_stderr)
        self._started: list[DaemonPart] = []
        self._server: ApiServer | None = None

    def run(self) -> int:
        """Start everything, wait for a stop signal, stop everything; returns the exit code."""
        self._lock.acquire()  # DaemonRunning: nothing was started, nothing to undo
        try:
            self._logs.start()
            try:
                self.janitor = Janitor.from_settings(self.settings)
                reloader = self._start(self.janitor)
                log.info(
                    "janitor daemon %s started (pid %d, socket %s, policy %s%s)",
                    self.state.version,
                    os.getpid(),
                    self.settings.socket_path,
                    self.settings.policy_path,
                    ", admission only: for a run" if self.admission_only else "",
                )
                self.bus.publish("started", pid=os.getpid())
                check = reloader.check_policy if not self.admission_only else lambda: None
                self._control_loop(guarded(check, self._stop))
                return 0
            finally:
                self._shutdown()
                log.info("janitor daemon stopped")
                self._logs.stop()
        finally:
            self._lock.release()
            self._wakeup.close()

    def _start(self, jan: Janitor) -> PolicyReloader:
        """Wire the services and start them in order (each is stopped, even half-started)."""
        s, bus, state, stop = self.settings, self.bus, self.state, self._stop
        policy_changed = partial(self._wakeup.wake, b"p")
        view = LiveView(jan, s, bus, state, self.registry)
        pending = Pending()
        scheduler = Scheduler(stop)
        counters = LogCounters(jan.ledger, state, bus)
        ballast = BallastKeeper(jan, s, bus)
        watching = Watching(jan, s, on_dirty=pending.tree, on_policy_file=policy_changed)
        reloader = PolicyReloader(
            jan,
            s,
            bus,
            requested=self._reload,
            watching=watching,
            ballast=ballast,
            wake=policy_changed,
        )
        sweeper = Sweeper(jan, s, state, stop, pending=pending, watching=watching)
        exporters = Exporters(view, s, stop, version=state.version)
        sampler = Sampler(
            jan,
            s,
            bus,
            state,
            scheduler=scheduler,
            pending=pending,
            ballast=ballast,
            risk=RiskMarker(jan, s, bus),
            counters=counters,
            status_file=StatusFile(view, s.status_path),
            textfile=exporters.textfile,
        )
        keeps = not self.admission_only  # sweeps, watches, ballast and orphan removal
        scheduler.every(s.sample_interval_s, sampler.sample, name="sample", delay=0.0)
        reaper = Reaper(jan, stop, state, keeps)
        scheduler.every(s.reap_interval_s, reaper.reap, name="reap", delay=0.5)
        if keeps:
            scheduler.every(s.sweep_interval_s, sweeper.sweep_all, name="sweep", delay=1.0)
            scheduler.every(s.sweep_interval_s, view.space.refresh, name="space", delay=2.0)
            # Changed trees are swept when the watcher reports them, not by a poll; the policy
            # file is watched too, and also compared here (a symlinked or unwatchable file).
            scheduler.every(REARM_INTERVAL_S, reloader.rearm, name="rearm")
        self._server = ApiServer(view, s, stop, on_failure=partial(self._wakeup.wake, b"x"))
        for service in (
            ProcessSetup(),  # first: the open-file limit, write leases
            OnStop(jan.ledger.close),  # this thread's connection: the last one folds the WAL
            SignalHandlers(self._wakeup),
            counters,
            *((ballast, watching, sweeper) if keeps else ()),
            scheduler,
            exporters,  # before the socket: one that answers means every port listens
            self._server,
        ):
            self._started.append(service)
            service.start()
        return reloader

    def _control_loop(self, check_policy: Callable[[], None]) -> None:
        """The main thread: sleep until something writes to the wake-up pipe, then act.

        No timeout, so no wake-ups while idle. A signal ends the read at once: the C-level
        handler writes to the pipe (``set_wakeup_fd``) whichever thread the kernel picked, and
        the Python handler runs in this thread as soon as the read returns.
        """
        wakeup = self._wakeup
        while True:
            data = wakeup.wait()
            if wakeup.stop_requested or self._stop.is_set() or not data:
                return
            if self._server is not None and self._server.failed:
                log.error("the API server stopped unexpectedly; shutting down")
                return
            if wakeup.hup_requested:
                wakeup.hup_requested = False
                self._reload.set()
            # A reload request, a file event or rearm saw a new mtime: reloads run here only.
            check_policy()

    def stop(self) -> None:
        """Ask ``run()`` to return (thread-safe; also what SIGTERM and SIGINT do)."""
        self._wakeup.stop_requested = True
        self._stop.set()
        self._wakeup.wake(b"s")

    def request_reload(self) -> None:
        """Re-read the policy now, even if its file did not change (what SIGHUP does)."""
        self._reload.set()
        self._wakeup.wake(b"h")

    def _shutdown(self) -> None:
        """Tell the SSE clients; ask each service to stop, then wait, in reverse start order."""
        self._stop.set()
        self.bus.publish("stopping", pid=os.getpid())
        self.bus.close()
        for service in reversed(self._started):
            service.stop()
        for service in reversed(self._started):
            service.join()
        self._started.clear()
