"""What the ledger's log says, as counters and events; the daemon's view in ``status.json``.

Grants, refusals and deletions are written to the ledger's log by whichever process made them
(the CLI, a worker's Python API, this daemon); the daemon follows the log by id, so its counters
and ``refused``/``evicted`` events cover them all.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from janitor.daemon.events import EventBus
from janitor.daemon.metrics import DaemonState
from janitor.daemon.view import LiveView
from janitor.ledger.db import Ledger

__all__ = ["LogCounters", "StatusFile"]

log = logging.getLogger("janitor.daemon")


class LogCounters:
    """Follows the ledger's log from where it stood when the daemon started."""

    def __init__(self, ledger: Ledger, state: DaemonState, bus: EventBus) -> None:
        self.ledger = ledger
        self.state = state
        self.bus = bus
        self._cursor = 0

    def start(self) -> None:
        """Count from the log's end: what happened before the daemon ran is not news."""
        self._cursor = self.ledger.last_log_id()

    def stop(self) -> None:
        """Nothing to ask."""

    def join(self) -> None:
        """Nothing to wait for."""

    def tail_log(self) -> None:
        """Turn new ledger log lines into counters and events (refusals, evictions)."""
        with self.ledger.read() as tx:
            rows = tx.log.after(self._cursor, limit=5000)
        if not rows:
            return
        self._cursor = int(rows[-1][0])
        state = self.state
        evicted: dict[tuple[str, str], list[int]] = {}
        with state.lock:
            for _, event, tree, nbytes, _path, detail, _rid in rows:
                tree = tree or ""
                if event == "grant":
                    state.granted[tree] = state.granted.get(tree, 0) + 1
                elif event == "refuse":
                    state.refused[tree] = state.refused.get(tree, 0) + 1
                elif event == "delete":
                    reason = json.loads(detail or "{}").get("reason", "")
                    key = (tree, reason)
                    state.evicted_bytes[key] = state.evicted_bytes.get(key, 0) + (nbytes or 0)
                    state.evicted_units[key] = state.evicted_units.get(key, 0) + 1
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


class StatusFile:
    """``status.json`` in the runtime dir: the daemon's view for readers without a socket."""

    def __init__(self, view: LiveView, path: Path) -> None:
        self.view = view
        self.path = path

    def write(self) -> None:
        """Replace the file atomically (a reader sees the old one or the new one)."""
        data = self.view.snapshot()
        path = self.path
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            with os.fdopen(fd, "w") as fh:
                json.dump(data, fh, indent=1)
            os.replace(tmp, path)
        except OSError as exc:
            log.warning("cannot write %s: %s", path, exc)
