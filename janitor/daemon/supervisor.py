"""`janitor daemon`: keeps every policy true without anyone calling it.

It watches the trees (watchdog) and sweeps a cache the moment it passes its quota; samples each
volume's free space, forecasts when it will reach the floor, and publishes a damped level; evicts
caches under pressure; puts live reservations at risk and releases ballast when a volume turns
critical; reaps what dead owners left; and serves the HTTP API on a Unix socket. One daemon per
user: a lock in the runtime dir says who runs.

Idle, it does not poll: the main thread sleeps on a wake-up pipe (signals, stop, reload), the
debounce and eviction threads on their conditions, the API's event loop in epoll, and the
scheduler until the next periodic job (the volume sample, every ``sample_interval_s``).
"""

from __future__ import annotations

import fcntl
import json
import logging
import logging.handlers
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from janitor.admission.risk import LevelTracker, assess, finite, forecast
from janitor.daemon.events import EventBus
from janitor.daemon.metrics import DaemonState, TreeState, VolumeState, registry_for
from janitor.errors import EXIT_BAD_INPUT, JanitorError
from janitor.host.ballast import Ballast, ballast_path

if TYPE_CHECKING:
    from apscheduler.schedulers.background import BackgroundScheduler

    from janitor.config.settings import Settings
    from janitor.core import Janitor
    from janitor.daemon.api import Offload
    from janitor.daemon.watch import TreeWatcher
    from janitor.status import Status

__all__ = ["Daemon", "DaemonRunning"]

log = logging.getLogger("janitor.daemon")

#: How often broken watches are re-armed, polled trees swept and the policy's mtime compared.
REARM_INTERVAL_S = 5.0
#: How often the daemon drops what the ledger no longer needs (Ledger.prune).
PRUNE_INTERVAL_S = 3600.0


class DaemonRunning(JanitorError):
    """Another daemon of this user already holds the lock."""

    exit_code = EXIT_BAD_INPUT


class Daemon:
    """The background service. ``run()`` blocks until SIGTERM/SIGINT (or ``stop()``)."""

    def __init__(self, settings: Settings, *, log_to_stderr: bool = True) -> None:
        from janitor import __version__

        self.settings = settings
        self.log_to_stderr = log_to_stderr
        self.bus = EventBus()
        self.state = DaemonState(pid=os.getpid(), started=time.time(), version=__version__)
        self.registry = registry_for(self.state)
        self.janitor: Janitor
        self._stop = threading.Event()
        self._reload = threading.Event()
        # The main thread sleeps in os.read() on this pipe: signals (set_wakeup_fd and the
        # handlers), stop() and reload requests write a byte to it.
        self._wake_r, self._wake_w = os.pipe()  # not inherited (PEP 446)
        os.set_blocking(self._wake_w, False)  # set_wakeup_fd needs it; a full pipe wakes anyway
        self._stop_requested = False  # set by the signal handlers (no locks in a handler)
        self._hup_requested = False
        self._server_failed = False
        self._dirty_cond = threading.Condition()
        self._dirty_thread: threading.Thread | None = None
        self._server_loop: Any = None
        self._server_exit: Any = None
        self._offload: Offload | None = None
        self._lock_fd: int | None = None
        self._scheduler: BackgroundScheduler | None = None
        self._watcher: TreeWatcher | None = None
        self._server: Any = None
        self._server_thread: threading.Thread | None = None
        self._trackers: dict[int, LevelTracker] = {}
        self._evicted_at: dict[int, float] = {}  # monotonic time of the last relief eviction
        self._pressed_at: dict[int, float] = {}  # ... and of the last pressure sweep asked for
        self._sample_every = settings.sample_interval_s
        self._ballast: dict[int, Ballast] = {}
        self._dirty: set[str] = set()
        self._pressure: set[int] = set()
        self._log_cursor = 0
        self._pruned: float | None = None  # monotonic time of the last Ledger.prune
        self._policy_mtime = 0.0
        self._sockets: list[socket.socket] = []

    # -- lifecycle -----------------------------------------------------------------------------

    def run(self) -> int:
        """Start everything, wait for a stop signal, stop everything; returns the exit code."""
        from janitor.core import Janitor
        from janitor.host.inuse import prepare_leases

        self._acquire_lock()
        try:
            self._setup_logging()
            self.janitor = Janitor.from_settings(self.settings)
            self._policy_mtime = _mtime(self.settings.policy_path)
            prepare_leases()
            self._install_signals()
            with self.janitor.ledger.read() as conn:
                row = conn.execute("SELECT coalesce(max(id), 0) FROM log").fetchone()
                self._log_cursor = int(row[0])
            self._init_volumes()
            self._start_watcher()
            self._start_dirty_worker()
            self._start_scheduler()
            self._start_server()
            log.info(
                "janitor daemon %s started (pid %d, socket %s, policy %s)",
                self.state.version,
                os.getpid(),
                self.settings.socket_path,
                self.settings.policy_path,
            )
            self.bus.publish("started", pid=os.getpid())
            self._control_loop()
            return 0
        finally:
            self._shutdown()

    def _control_loop(self) -> None:
        """The main thread: sleep until something writes to the wake-up pipe, then act.

        No timeout, so no wake-ups while idle. A signal ends the read at once: the C-level
        handler writes to the pipe (``set_wakeup_fd``) whichever thread the kernel picked, and
        the Python handler runs in this thread as soon as the read returns.
        """
        while True:
            try:
                data = os.read(self._wake_r, 512)
            except InterruptedError:  # pragma: no cover - PEP 475 retries for us
                data = b"?"
            if self._stop_requested or self._stop.is_set() or not data:
                return
            if self._server_failed:
                log.error("the API server stopped unexpectedly; shutting down")
                return
            if self._hup_requested:
                self._hup_requested = False
                self._reload.set()
            # A reload request, a policy file event or the periodic check saw a new mtime;
            # reloads run here only, one at a time (they replace the watcher).
            self._guard(self.check_policy)()

    def _wake(self, why: bytes) -> None:
        try:
            os.write(self._wake_w, why)
        except OSError:  # full (the main thread will wake anyway) or closed (stopped)
            pass

    def stop(self) -> None:
        """Ask ``run()`` to return (thread-safe; also what SIGTERM and SIGINT do)."""
        self._stop_requested = True
        self._stop.set()
        self._wake(b"s")

    def request_reload(self) -> None:
        """Re-read the policy now, even if its file did not change (what SIGHUP does)."""
        self._reload.set()
        self._wake(b"h")

    def _acquire_lock(self) -> None:
        runtime = self.settings.runtime_dir
        runtime.mkdir(parents=True, exist_ok=True, mode=0o700)
        path = runtime / "daemon.lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise DaemonRunning(
                f"a janitor daemon already runs for this user (pid {holder}, socket "
                f"{self.settings.socket_path}); stop it first or use its API"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._lock_fd = fd

    def _setup_logging(self) -> None:
        root = logging.getLogger("janitor")
        root.setLevel(logging.INFO)
        fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
        try:
            self.settings.log_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            fh = logging.handlers.RotatingFileHandler(
                self.settings.log_dir / "daemon.log", maxBytes=5 * 1024 * 1024, backupCount=3
            )
            fh.setFormatter(fmt)
            root.addHandler(fh)
        except OSError as exc:
            print(
                f"janitor: warning: cannot write logs to {self.settings.log_dir}: {exc}",
                file=sys.stderr,
            )
        if self.log_to_stderr:
            sh = logging.StreamHandler(sys.stderr)
            sh.setFormatter(fmt)
            root.addHandler(sh)
        # "skipped: maximum number of running instances" is coalescing working, not news.
        logging.getLogger("apscheduler").setLevel(logging.ERROR)

    def _install_signals(self) -> None:
        # Handlers take no lock (they run between two bytecodes of the main thread, which may
        # hold one): they set a flag and write to the pipe.
        def on_stop(*_: Any) -> None:
            self._stop_requested = True
            self._wake(b"s")

        def on_hup(*_: Any) -> None:
            self._hup_requested = True
            self._wake(b"h")

        signal.signal(signal.SIGTERM, on_stop)
        signal.signal(signal.SIGINT, on_stop)
        signal.signal(signal.SIGHUP, on_hup)
        signal.set_wakeup_fd(self._wake_w, warn_on_full_buffer=False)

    def _shutdown(self) -> None:
        self._stop.set()
        self.bus.publish("stopping", pid=os.getpid())
        self.bus.close()
        if self._server is not None:
            self._server.should_exit = True
            if self._server_loop is not None and self._server_exit is not None:
                try:
                    self._server_loop.call_soon_threadsafe(self._server_exit.set)
                except RuntimeError:  # the loop already ended
                    pass
        with self._dirty_cond:
            self._dirty_cond.notify_all()
        if self._scheduler is not None:
            try:
                self._scheduler.shutdown(wait=False)
            except Exception:  # already stopped
                pass
        if self._watcher is not None:
            self._watcher.stop(timeout=2.0)
        if self._server_thread is not None:
            self._server_thread.join(timeout=3.0)
        if self._dirty_thread is not None:
            self._dirty_thread.join(timeout=1.0)
        if self._offload is not None:
            self._offload.close()
        jan = getattr(self, "janitor", None)
        if jan is not None:
            jan.ledger.close()  # this thread's connection: the last one folds the WAL back
        for sock in self._sockets:
            try:
                sock.close()
            except OSError:
                pass
        for path in (self.settings.socket_path,):
            try:
                path.unlink()
            except OSError:
                pass
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        log.info("janitor daemon stopped")
        for handler in list(logging.getLogger("janitor").handlers):
            handler.close()
            logging.getLogger("janitor").removeHandler(handler)
        if threading.current_thread() is threading.main_thread():
            signal.set_wakeup_fd(-1)
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass

    # -- volumes, ballast ----------------------------------------------------------------------

    def _volume_trees(self) -> dict[int, list[Path]]:
        from janitor.host.space import device_of

        out: dict[int, list[Path]] = {}
        for tree in self.janitor.policy.trees.values():
            try:
                out.setdefault(device_of(tree.path), []).append(tree.path)
            except OSError:
                continue
        return out

    def _init_volumes(self) -> None:
        from janitor.host.space import volume_stats
        from janitor.sizes import format_size

        self._ballast.clear()
        for device, roots in self._volume_trees().items():
            vp = self.janitor.policy.volume_policy(device)
            self._trackers.setdefault(device, LevelTracker(self.settings.settle_s))
            if vp.ballast is None:
                continue
            vs = volume_stats(roots[0])
            size = vp.ballast.resolve(vs.total)
            where = ballast_path(self.settings.state_dir, roots, device)
            if where is None or size <= 0:
                log.warning("no place for ballast on %s; ballast disabled there", vs.mount)
                continue
            self._ballast[device] = Ballast(where, size)
            log.info("ballast of %s on %s at %s", format_size(size), vs.mount, where)

    def _manage_ballast(self, device: int, vs: VolumeState, level: str, settled: str) -> None:
        """Release the ballast the moment the volume reads critical; recreate it only once the
        damped level is ``ok`` and there is room for it above free_target."""
        ballast = self._ballast.get(device)
        if ballast is None:
            return
        present = ballast.present()
        if level == "critical" and present:
            freed = ballast.release()
            log.warning("volume %s critical: released %d B of ballast", vs.mount, freed)
            self.bus.publish("ballast-released", volume=vs.mount, bytes=freed)
        elif (
            not present
            and settled == "ok"
            and vs.free - ballast.size >= vs.free_target
            and ballast.create()
        ):
            log.info("ballast of %d B recreated on %s", ballast.size, vs.mount)
            self.bus.publish("ballast-created", volume=vs.mount, bytes=ballast.size)
        vs.ballast = ballast.size if ballast.present() else 0

    # -- scheduled jobs ------------------------------------------------------------------------

    def _start_scheduler(self) -> None:
        from apscheduler.schedulers.background import BackgroundScheduler

        s = self.settings
        sched = BackgroundScheduler(
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": 30},
            timezone="UTC",
        )
        now = time.time()
        sched.add_job(
            self._guard(self.sample),
            "interval",
            seconds=s.sample_interval_s,
            id="sample",
            next_run_time=_dt(now),
        )
        sched.add_job(
            self._guard(self.sweep_all),
            "interval",
            seconds=s.sweep_interval_s,
            id="sweep",
            next_run_time=_dt(now + 1),
        )
        sched.add_job(
            self._guard(self.reap),
            "interval",
            seconds=s.reap_interval_s,
            id="reap",
            next_run_time=_dt(now + 0.5),
        )
        # Changed trees are swept when the watcher reports them (on_dirty), not by a poll; the
        # policy file is watched too, and also compared here (a symlinked or unwatchable file).
        sched.add_job(self._guard(self.rearm), "interval", seconds=REARM_INTERVAL_S, id="rearm")
        sched.start()
        self._scheduler = sched

    def _guard(self, fn: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            if self._stop.is_set():
                return
            try:
                fn()
            except Exception:
                log.exception("%s failed", fn.__name__)

        run.__name__ = fn.__name__
        return run

    def sample(self) -> None:
        """Sample every volume, forecast, update levels, act on changes, publish."""
        from janitor.admission.reserve import live_reservations
        from janitor.host.space import volume_stats

        now = time.time()
        policy = self.janitor.policy
        ledger = self.janitor.ledger
        readings: dict[int, VolumeState] = {}
        for device, roots in self._volume_trees().items():
            vs_raw = volume_stats(roots[0])
            vp = policy.volume_policy(device)
            floor, free_low, free_target = vp.numbers(vs_raw.total)
            readings[device] = VolumeState(
                device=device,
                mount=vs_raw.mount,
                total=vs_raw.total,
                free=vs_raw.free,
                floor=floor,
                free_low=free_low,
                free_target=free_target,
                horizon=vp.horizon,
                updated=now,
            )
        cutoff = now - self.settings.forecast_window_s

        def record(conn: Any) -> dict[int, list[tuple[float, int]]]:
            series: dict[int, list[tuple[float, int]]] = {}
            for device, vs in readings.items():
                conn.execute(
                    "INSERT INTO samples (device, ts, free, total) VALUES (?, ?, ?, ?)",
                    (device, now, vs.free, vs.total),
                )
                rows = conn.execute(
                    "SELECT ts, free FROM samples WHERE device = ? AND ts >= ? ORDER BY ts",
                    (device, cutoff),
                ).fetchall()
                series[device] = [(float(t), int(f)) for t, f in rows]
            return series

        series = ledger.call(record)
        with ledger.read() as conn:
            live = live_reservations(conn, now=now)
        changes: list[tuple[int, str, str, str]] = []
        for device, vs in readings.items():
            fc = forecast(series.get(device, []), vs.floor)
            vs.fill_rate = round(fc.fill_rate, 3)
            vs.eta_floor = finite(fc.eta_floor)
            vs.eta_full = finite(fc.eta_full)
            vs.confidence = fc.confidence
            mine = [r for r in live if r.device == device]
            vs.reserved = sum(r.outstanding for r in mine)
            vs.live = len(mine)
            tracker = self._trackers.setdefault(device, LevelTracker(self.settings.settle_s))
            before = tracker.level
            reading = assess(vs.free, vs.floor, vs.free_low, fc, horizon=vs.horizon)
            if tracker.update(reading, now):
                changes.append((device, before, tracker.level, tracker.reason))
            # The level shown and acted on is this reading's; the damped one (worse at once,
            # better after settle_s) is for alerts: level events, log lines, the ballast's
            # return. Stopping jobs never waits for a level to catch up.
            vs.level, vs.reason = reading.level, reading.reason
            vs.alert_level = tracker.level
            if reading.level != "ok" and vs.free < vs.free_low and self._due(device):
                with self._dirty_cond:
                    self._pressure.add(device)
                    self._dirty_cond.notify()
            self._manage_ballast(device, vs, reading.level, tracker.level)
            if reading.level == "critical" or any(r.at_risk for r in mine):
                self._decide_risk(device, vs)
        self._publish_levels(readings, changes, now)
        self._pace_sampling(any(vs.free < vs.free_low for vs in readings.values()))
        with self.state.lock:
            self.state.volumes = readings
        self.tail_log()
        self.write_status()

    def _due(self, device: int) -> bool:
        """True at most every ``sample_interval_s`` per volume: a pressure sweep walks the caches
        under their locks, which a refused reservation's make-room needs too, so sampling a low
        volume more often must not sweep it more often."""
        now = time.monotonic()
        if now - self._pressed_at.get(device, -1e9) < self.settings.sample_interval_s * 0.9:
            return False
        self._pressed_at[device] = now
        return True

    def _pace_sampling(self, low: bool) -> None:
        """Sample every ``sample_interval_low_s`` while some volume is below free_low, else every
        ``sample_interval_s``: jobs must hear they are at risk before an outside writer fills
        the rest (the soak: 12 MiB/s against a 25.6 MiB floor)."""
        s = self.settings
        want = min(s.sample_interval_low_s, s.sample_interval_s) if low else s.sample_interval_s
        sched = getattr(self, "_scheduler", None)
        if sched is None or want == self._sample_every:
            return
        self._sample_every = want
        sched.reschedule_job("sample", trigger="interval", seconds=want)
        log.info("sampling every %gs (%s)", want, "a volume is low" if low else "all volumes ok")

    def _decide_risk(self, device: int, vs: VolumeState) -> None:
        """Below the floor: evict caches, then mark the fewest reservations that must stop;
        above it: clear the marks. Janitor.relieve decides, as a worker's check() would.

        Eviction runs at most every ``sample_interval_s`` per volume (it walks the caches under
        their locks, which a refused reservation's make-room also needs); the marks follow
        every sample, so a job hears it is at risk within ``sample_interval_low_s``."""
        now = time.monotonic()
        evicted = self._evicted_at.get(device, 0.0)
        evict = now - evicted >= self.settings.sample_interval_s * 0.9
        if evict:
            self._evicted_at[device] = now
        decision = self.janitor.relieve(device, evict=evict)
        if decision is None:
            return
        vs.free = decision.free
        vs.at_risk = len(decision.at_risk)
        for rid in decision.marked:
            job = decision.jobs.get(rid) or ""
            log.warning(
                "reservation %s (%s) put at risk on %s: %d B missing below the floor",
                rid,
                job,
                vs.mount,
                decision.deficit,
            )
            self.bus.publish(
                "at-risk",
                reservation=rid,
                job=job,
                volume=vs.mount,
                free=decision.free,
                floor=decision.floor,
                deficit=decision.deficit,
            )
        for rid in decision.cleared:
            log.info("reservation %s no longer at risk on %s", rid, vs.mount)
            self.bus.publish("risk-cleared", reservation=rid, volume=vs.mount)

    def _publish_levels(
        self,
        readings: dict[int, VolumeState],
        changes: list[tuple[int, str, str, str]],
        now: float,
    ) -> None:
        def write(conn: Any) -> None:
            for device, vs in readings.items():
                conn.execute(
                    "INSERT INTO volumes (device, mount, level, reason, fill_rate, eta_floor, "
                    "eta_full, confidence, updated) VALUES (?,?,?,?,?,?,?,?,?) "
                    "ON CONFLICT(device) DO UPDATE SET mount=excluded.mount, "
                    "level=excluded.level, reason=excluded.reason, "
                    "fill_rate=excluded.fill_rate, eta_floor=excluded.eta_floor, "
                    "eta_full=excluded.eta_full, confidence=excluded.confidence, "
                    "updated=excluded.updated",
                    (
                        device,
                        vs.mount,
                        vs.level,
                        vs.reason,
                        vs.fill_rate,
                        vs.eta_floor,
                        vs.eta_full,
                        vs.confidence,
                        now,
                    ),
                )

        self.janitor.ledger.call(write)
        for device, before, after, why in changes:
            vs = readings[device]
            log.warning("volume %s: level %s -> %s (%s)", vs.mount, before, after, why)
            self.bus.publish(
                "level",
                volume=vs.mount,
                level=after,
                previous=before,
                reason=why,
                free=vs.free,
                floor=vs.floor,
                eta_floor=vs.eta_floor,
            )

    def tail_log(self) -> None:
        """Turn new ledger log lines into counters and events (refusals, evictions)."""
        ledger = self.janitor.ledger
        with ledger.read() as conn:
            rows = conn.execute(
                "SELECT id, event, tree, bytes, path, detail, reservation FROM log "
                "WHERE id > ? ORDER BY id LIMIT 5000",
                (self._log_cursor,),
            ).fetchall()
        if not rows:
            return
        self._log_cursor = int(rows[-1][0])
        evicted: dict[tuple[str, str], list[int]] = {}
        with self.state.lock:
            for _, event, tree, nbytes, _path, detail, _rid in rows:
                tree = tree or ""
                if event == "grant":
                    self.state.granted[tree] = self.state.granted.get(tree, 0) + 1
                elif event == "refuse":
                    self.state.refused[tree] = self.state.refused.get(tree, 0) + 1
                elif event == "delete":
                    reason = json.loads(detail or "{}").get("reason", "")
                    key = (tree, reason)
                    self.state.evicted_bytes[key] = self.state.evicted_bytes.get(key, 0) + (
                        nbytes or 0
                    )
                    self.state.evicted_units[key] = self.state.evicted_units.get(key, 0) + 1
                    agg = evicted.setdefault(key, [0, 0])
                    agg[0] += 1
                    agg[1] += nbytes or 0
        for _, event, tree, nbytes, path, detail, _rid in rows:
            if event == "refuse":
                d = json.loads(detail or "{}")
                self.bus.publish(
                    "refused",
                    tree=tree,
                    bytes=nbytes,
                    path=path,
                    job=d.get("job"),
                    free=d.get("free"),
                    floor=d.get("floor"),
                    reserved=d.get("reserved"),
                )
        for (tree, reason), (units, nbytes) in evicted.items():
            self.bus.publish("evicted", tree=tree, reason=reason, units=units, bytes=nbytes)

    def write_status(self) -> None:
        """Replace status.json in the runtime dir atomically."""
        data = self.snapshot()
        path = self.settings.status_path
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            with os.fdopen(fd, "w") as fh:
                json.dump(data, fh, indent=1)
            os.replace(tmp, path)
        except OSError as exc:
            log.warning("cannot write %s: %s", path, exc)

    def refresh(self) -> Status:
        """Measure every volume now and bring the published numbers up to date with it.

        Called before ``/metrics`` and ``/v1/status`` answer, so they show what
        ``janitor status`` and ``check --reservation`` would say at that moment, not what the
        last sample saw.
        """
        status = self.janitor.status(with_usage=False)
        at_risk: dict[int, int] = {}
        for r in status.reservations:
            if r.at_risk is not None:
                at_risk[r.device] = at_risk.get(r.device, 0) + 1
        with self.state.lock:
            for v in status.volumes:
                vs = self.state.volumes.get(v.device)
                if vs is None:
                    continue
                vs.free, vs.reserved, vs.level, vs.reason = v.free, v.reserved, v.level, v.reason
                vs.live = sum(1 for r in status.reservations if r.device == v.device)
                vs.at_risk = at_risk.get(v.device, 0)
        return status

    def metrics_text(self) -> bytes:
        """The Prometheus exposition, measured now (see refresh)."""
        from janitor.daemon.metrics import render

        self.refresh()
        return render(self.registry)

    def snapshot(self, status: Status | None = None) -> dict[str, Any]:
        """The daemon's published view (status.json and part of ``GET /v1/status``)."""
        if status is None:
            status = self.janitor.status(with_usage=False)
        data = self.state.snapshot()
        data["reservations"] = [r.as_dict() for r in status.reservations]
        data["time"] = time.time()
        data["policy"] = str(self.settings.policy_path)
        data["socket"] = str(self.settings.socket_path)
        return data

    def sweep_all(self) -> None:
        """The periodic full sweep (quotas, ages, orphans, pressure)."""
        result = self.janitor.sweep()
        self._record_sweep(result)

    def _record_sweep(self, result: Any) -> None:
        from janitor.host.space import mount_point

        now = time.time()
        watch = {w.tree: w for w in (self._watcher.status() if self._watcher else [])}
        with self.state.lock:
            for t in result.plan.trees:
                if t.quota is None and t.role == "cache" and t.tree in self.state.trees:
                    continue  # a pressure-only summary: keep the sweep's numbers
                left = t.usage - sum(
                    o.bytes for o in result.report.outcomes if o.deleted and o.item.tree == t.tree
                )
                w = watch.get(t.tree)
                self.state.trees[t.tree] = TreeState(
                    name=t.tree,
                    role=t.role,
                    mount=mount_point(t.root),
                    usage=left,
                    quota=t.quota,
                    units=t.units,
                    last_sweep=now,
                    watch=w.mode if w else "polling",
                    watch_reason=w.reason if w else "",
                )
        if result.report.deleted_units:
            log.info(
                "swept %d units, %d B (free space +%d B)",
                result.report.deleted_units,
                result.report.deleted_bytes,
                result.report.reclaimed_bytes,
            )
        for warning in result.report.warnings:
            log.warning("%s", warning)

    def reap(self) -> None:
        """End reservations and pins whose owners died or whose TTL passed; hourly, prune."""
        from janitor.admission.reserve import reap
        from janitor.ledger.pins import reap_pins

        now = time.time()
        ledger = self.janitor.ledger
        ended = ledger.call(lambda conn: (reap(conn, now), reap_pins(conn, now)))
        for info in ended[0]:
            log.info("reservation %s ended: %s", info.id, info.state)
        if self._pruned is None or time.monotonic() - self._pruned >= PRUNE_INTERVAL_S:
            # Ended reservations, old log lines and samples: a few thousand rows per
            # transaction, so reservations queued behind it wait milliseconds, not seconds.
            while ledger.call(ledger.prune) and not self._stop.is_set():
                pass
            self._pruned = time.monotonic()

    def on_dirty(self, tree: str) -> None:
        """Called by the watcher once a tree's events settled: wakes the eviction thread."""
        with self._dirty_cond:
            self._dirty.add(tree)
            self._dirty_cond.notify()

    def _start_dirty_worker(self) -> None:
        self._dirty_thread = threading.Thread(
            target=self._dirty_worker, name="janitor-evict", daemon=True
        )
        self._dirty_thread.start()

    def _dirty_worker(self) -> None:
        """Runs ``process_dirty`` whenever a tree changed or a volume is under pressure, one
        pass at a time (what piles up meanwhile is handled by the next pass)."""
        run = self._guard(self.process_dirty)
        while True:
            with self._dirty_cond:
                while not (self._dirty or self._pressure or self._stop.is_set()):
                    self._dirty_cond.wait()
            if self._stop.is_set():
                return
            run()

    def process_dirty(self) -> None:
        """Sweep trees that changed, and evict under pressure where volumes are low."""
        with self._dirty_cond:
            dirty, self._dirty = self._dirty, set()
            pressure, self._pressure = self._pressure, set()
        for tree in sorted(dirty):
            if (
                tree in self.janitor.policy.trees
                and self.janitor.policy.trees[tree].role == "cache"
            ):
                self._record_sweep(self.janitor.sweep(tree, pressure=False))
        for device in pressure:
            self.relieve(device)

    def relieve(self, device: int) -> None:
        """Pressure eviction: caches on the volume until free >= free_target (Nix-style)."""
        from janitor.cleanup.sweep import make_room
        from janitor.host.space import volume_stats

        roots = self._volume_trees().get(device)
        if not roots:
            return
        vp = self.janitor.policy.volume_policy(device)

        def need() -> int:
            vs = volume_stats(roots[0])
            _, free_low, free_target = vp.numbers(vs.total)
            return free_target - vs.free if vs.free < free_low else 0

        report = make_room(
            self.janitor.policy,
            self.janitor.ledger,
            self.settings.state_dir,
            device,
            need,
            reason="pressure",
        )
        if report is not None and report.deleted_units:
            log.warning(
                "pressure eviction on device %d freed %d B in %d units",
                device,
                report.deleted_bytes,
                report.deleted_units,
            )

    def on_policy_file(self, path: str) -> None:
        """The watcher saw the policy file change: the main thread checks it."""
        self._wake(b"p")

    def check_policy(self) -> None:
        """Reload the policy on SIGHUP or when its file changes; keep the old one if bad.

        Runs in the main thread only (``run()``), woken by SIGHUP, by the watcher or by
        ``rearm``: it replaces the watcher, whose debounce thread cannot stop itself.
        """
        mtime = _mtime(self.settings.policy_path)
        if not self._reload.is_set() and mtime == self._policy_mtime:
            return
        self._reload.clear()
        self._policy_mtime = mtime
        from janitor.config.policy import load_policy

        try:
            policy = load_policy(self.settings.policy_path, state_dir=self.settings.state_dir)
        except JanitorError as exc:
            log.error("rejected the new policy, keeping the old one: %s", exc)
            self.bus.publish("policy-rejected", reason=str(exc))
            return
        self.janitor.policy = policy
        log.info("policy reloaded from %s (%d trees)", self.settings.policy_path, len(policy.trees))
        self._init_volumes()
        if self._watcher is not None:
            self._watcher.stop(timeout=2.0)
        self._start_watcher()
        self.bus.publish("policy-reloaded", trees=sorted(policy.trees))

    def rearm(self) -> None:
        """Re-arm broken watches; sweep trees that are polled instead of watched; notice a
        changed policy file that no watch reported."""
        if _mtime(self.settings.policy_path) != self._policy_mtime:
            self._wake(b"p")
        watcher = self._watcher
        if watcher is None:
            return
        watcher.rearm()
        for tree in watcher.polling():
            self.on_dirty(tree)

    def _start_watcher(self) -> None:
        from janitor.daemon.watch import TreeWatcher

        self._watcher = TreeWatcher(
            list(self.janitor.policy.trees.values()),
            self.on_dirty,
            quiet_s=self.settings.debounce_s,
            max_delay_s=self.settings.debounce_max_s,
            files=[self.settings.policy_path],
            on_file=self.on_policy_file,
        )
        self._watcher.start()
        for w in self._watcher.status():
            if w.mode != "watching":
                log.warning("tree %s is polled, not watched: %s", w.tree, w.reason)

    # -- the API server ------------------------------------------------------------------------

    def _bind(self) -> list[socket.socket]:
        path = self.settings.socket_path
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        # We hold the daemon lock, so a socket file left here is a dead daemon's.
        try:
            path.unlink()
        except FileNotFoundError:
            pass
        uds = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)  # created 0600: only this user may connect
        try:
            uds.bind(str(path))
        finally:
            os.umask(old)
        os.chmod(path, 0o600)
        uds.listen(128)
        socks = [uds]
        if self.settings.http_port is not None:
            tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            tcp.bind(("127.0.0.1", self.settings.http_port))  # loopback only, by design
            tcp.listen(128)
            socks.append(tcp)
        for s in socks:
            s.set_inheritable(False)
        return socks

    def _start_server(self) -> None:
        """Serve the API from its own thread and event loop.

        uvicorn is driven through ``startup()`` and ``shutdown()`` rather than ``serve()``,
        whose main loop wakes ten times a second to refresh the ``Date`` header and look at
        ``should_exit``: here the loop sleeps until a request or the stop comes, and the
        ``Date`` header is computed when a response is sent (:class:`_DateHeaders`). httptools
        and uvloop are used where installed, else h11 and asyncio.
        """
        import asyncio

        import uvicorn

        from janitor.daemon.api import Offload, serve_app

        self._sockets = self._bind()
        self._offload = Offload()
        app = serve_app(self, self._offload)
        config = uvicorn.Config(
            app,
            log_config=None,
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=1,
            timeout_keep_alive=30,
            http="auto",  # httptools if installed, else h11
            proxy_headers=False,  # local sockets only: no proxy to trust
            loop="none",  # the loop is made below
        )
        config.load()
        server = uvicorn.Server(config)
        self._server = server
        started = threading.Event()

        async def main() -> None:
            self._server_loop = asyncio.get_running_loop()
            self._server_exit = asyncio.Event()
            server.lifespan = config.lifespan_class(config)
            extra = config.encoded_headers
            try:
                await server.startup(sockets=self._sockets)
                server.server_state.default_headers = _DateHeaders(extra, config.date_header)
            finally:
                started.set()
            if self._stop.is_set():
                self._server_exit.set()
            await self._server_exit.wait()
            await server.shutdown(sockets=self._sockets)

        def serve() -> None:
            try:
                with asyncio.Runner(loop_factory=_loop_factory()) as runner:
                    runner.run(main())
            except BaseException:
                log.exception("the API server failed")
            finally:
                started.set()
                if not self._stop.is_set():
                    self._server_failed = True
                    self._wake(b"x")

        self._server_thread = threading.Thread(target=serve, name="janitor-api", daemon=True)
        self._server_thread.start()
        started.wait(10)


class _DateHeaders(list[tuple[bytes, bytes]]):
    """uvicorn's default response headers with a ``Date`` that is current when it is read.

    uvicorn's protocols read ``ServerState.default_headers`` only by iterating it or adding it
    to a list; both refresh the date here (at most once a second), so nothing needs a timer.
    """

    def __init__(self, extra: list[tuple[bytes, bytes]], date: bool = True) -> None:
        super().__init__(extra)
        self._extra = list(extra)
        self._date = date
        self._second = -1
        self._refresh()

    def _refresh(self) -> None:
        if not self._date:
            return
        now = int(time.time())
        if now != self._second:
            from email.utils import formatdate

            self._second = now
            self[:] = [(b"date", formatdate(now, usegmt=True).encode()), *self._extra]

    def __iter__(self) -> Iterator[tuple[bytes, bytes]]:
        self._refresh()
        return super().__iter__()

    def __add__(self, other: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:  # type: ignore[override]
        self._refresh()
        return list(super().__iter__()) + other


def _loop_factory() -> Callable[[], Any] | None:
    """uvloop's loop where it is installed (not on Windows), else asyncio's default."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def _dt(ts: float) -> Any:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ts, tz=UTC)


def _mtime(path: Path) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0.0
