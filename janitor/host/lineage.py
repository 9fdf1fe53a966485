"""Whether a job's processes still run: those recorded with it and what they forked.

Each guarded cut records the processes it came through (:func:`janitor.host.owner.writer_chain`:
the one that ran ffmpeg, the go-betweens, the writer), each a pid and its exact start time, with
its process group. A job lives while any of them runs. Once one exits, the kernel re-parents its
children (to init or a subreaper), and the parent links that tied a background subshell or a
``nohup``'ed loop to its script are gone; its **process group** is not: a fork stays in its
parent's group whoever its parent becomes, and the group's number is never handed to a new
process while a process is in it. So, once every recorded process has exited, a process still
counts for the job when:

- it is in the group of a recorded process, the same group (the process that held the
  group's number when it was recorded still does, or it has exited and no new one holds it);
- it started no earlier than the earliest recorded process of that group (a descendant never
  starts before its ancestor; one recorded as gone before it could be read may be as old as
  any, and then the whole group counts);
- and no process between it and the top of its group started earlier than that (an
  **elder**: the long-running parent of a group its job shares, a test runner or a pipeline
  master that runs scripts without job control, whose other children are not the job's).
  What that parent's other scripts left running after they exited is not told apart from the
  job's own (younger, in the group, parent gone): it keeps the job until it ends, never less.

That is the narrowest lineage POSIX keeps on Linux and macOS alike: a script run from a
terminal is a job of its own (job control gives it its own group), a batchalign3 server its own
session and group (setsid), the command of ``janitor run`` a group of its own (its supervisor
puts it there). A login session (a shell's session id) is never the lineage: a job is never
kept because the terminal it came from is open. A process that leaves its group (``setsid``, a
daemon's double fork) before it cuts is not followed; it is recorded at its first cut.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterable
from typing import Protocol

from janitor.host.owner import still_alive
from janitor.host.processes import ProcessInfo, processes

__all__ = ["Recorded", "keepers"]

#: How long a group found to hold a job's process is taken as holding it, unasked (admission
#: asks for every working set under the ledger's writer lock). Only a living answer is
#: remembered: a group found with none of the job's processes can never gain one.
_REMEMBER_S = 1.0


class Recorded(Protocol):
    """A process recorded with a job (``janitor.ledger.jobs.Writer``)."""

    @property
    def pid(self) -> int: ...
    @property
    def start(self) -> float | None: ...
    @property
    def pgid(self) -> int | None: ...
    @property
    def leader_start(self) -> float | None: ...


def keepers(recorded: Iterable[Recorded]) -> tuple[int, ...]:
    """The pids that keep a job alive: its recorded processes that run (the same processes:
    exact start times), else the processes of their groups that descend from them (see the
    module's rule); () when none does: the job is an orphan."""
    members = list(recorded)
    alive = tuple(m.pid for m in members if m.pid > 0 and still_alive(m.pid, m.start))
    if alive:
        return alive
    bounds: dict[int, float] = {}
    leaders: dict[int, float | None] = {}
    for m in members:
        if m.pgid is None or m.pgid <= 1:
            continue  # not known, or init's: never followed
        # One gone before it was read (0.0), or unreadable: it may be as old as any.
        start = m.start if m.start is not None and m.start > 0 else -math.inf
        bounds[m.pgid] = min(bounds.get(m.pgid, math.inf), start)
        leaders.setdefault(m.pgid, m.leader_start)
    for pgid, bound in bounds.items():
        found = _in_group(pgid, bound, leaders[pgid])
        if found:
            return found
    return ()


_remembered: dict[tuple[int, float, float | None], tuple[float, tuple[int, ...]]] = {}
_lock = threading.Lock()


def _in_group(pgid: int, bound: float, leader: float | None) -> tuple[int, ...]:
    """The processes of group ``pgid`` that may descend from the job's processes in it."""
    key = (pgid, bound, leader)
    now = time.monotonic()
    with _lock:
        seen = _remembered.get(key)
        if seen is not None and now - seen[0] < _REMEMBER_S:
            return seen[1]
    found = _descendants(pgid, bound, leader)
    with _lock:
        if found:
            _remembered[key] = (now, found)
        else:
            _remembered.pop(key, None)
        if len(_remembered) > 256:
            _remembered.clear()
    return found


def _descendants(pgid: int, bound: float, leader: float | None) -> tuple[int, ...]:
    if not processes.group_exists(pgid):
        return ()  # the fast answer for a job whose every process is gone
    holder = processes.start(pgid)
    if leader is None and holder is not None:
        return ()  # its number was given to a new process: the group was made anew
    if (
        leader is not None
        and holder is not None
        and min(leader, holder) >= 0
        and not processes.same_start(leader, holder)
    ):
        return ()  # likewise: another process holds that number now
    members = processes.group(pgid)
    if members is None:
        return (pgid,)  # the process table cannot be read: kept, as if it held one
    return tuple(sorted(p.pid for p in members.values() if _descends(p, members, bound)))


def _descends(proc: ProcessInfo, group: dict[int, ProcessInfo], bound: float) -> bool:
    """True unless ``proc`` or a process between it and the top of its group is an elder."""
    step: ProcessInfo | None = proc
    hops = 0
    while step is not None and hops < 64:
        start = step.start
        if start is not None and start >= 0 and processes.started_before(start, bound):
            return False  # an elder: older than anything the job recorded in this group
        step, hops = group.get(step.ppid), hops + 1
    return True
