"""A staging tree's jobs (``active_jobs``): which of its folders could be a live job's.

batchalign3 stages each server job in ``<state>/jobs/<job_id>`` and records the job in
``<state>/jobs.db``. The job store read is the one beside the tree (``host.batchalign3.
staging_state``), never one found from the janitor's own ``HOME`` or ``BATCHALIGN_STATE_DIR``:
the server that made the folders may run with others. A folder is kept as a live job's while
that store holds its job as anything but finished (queued, running, or a state we do not know).
When the store cannot be read, nothing tells a finished job's folder from a running one's, so
every folder of the tree is kept, and the sweep says so in one warning for the tree.

batchalign 0.10 and later (``active_jobs = "batchalign"``) keeps its jobs in a process's
memory (its API daemon's registry; ``morphotag``'s own run), so no store says which folder is
live; what does is time: a process makes a folder (or a file) after it started, and nothing of
a unit last changed before the start of every batchalign process still running can be one of
theirs (:func:`read_running`). A restarted daemon's predecessor's folders go, its own stay.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from janitor.config.policy import TreePolicy
from janitor.host.batchalign import Running, running
from janitor.host.batchalign3 import jobs_db, staging_state
from janitor.humanize import plural
from janitor.ledger.foreign import unfinished_jobs

if TYPE_CHECKING:
    from janitor.cleanup.units import UnitTable

__all__ = ["FIX", "StagingJobs", "read_active", "read_running", "read_staging"]

#: How much earlier than a process's start a unit's last change may read and still be taken as
#: possibly its: Linux reads a start as the boot time (whole seconds, rounded down) plus clock
#: ticks, so it reads early by up to a second, and file times are stamped by a coarse clock
#: that may lag by a tick; a second more covers a clock stepped back a little.
START_SLACK_S = 1.0

#: What to do when a staging tree's job store cannot be read.
FIX = (
    "batchalign3 keeps jobs.db in its state folder beside jobs/: point the tree at that jobs/ "
    "folder, or make jobs.db readable"
)


@dataclass(frozen=True, slots=True)
class StagingJobs:
    """What the job store of staging tree ``tree`` (root ``root``) said at one read: ``live``,
    the tree's folders kept as live jobs', and ``problem``, why the store (``db``) could not be
    read, when it could not (then ``live`` is every folder of the tree). For batchalign 0.10
    and later, ``db`` is "": its jobs live in its processes (:func:`read_running`)."""

    tree: str
    root: str
    db: str
    live: frozenset[str]
    problem: str | None = None

    @property
    def kept(self) -> str | None:
        """Why the tree's folders were all kept, when the store could not be read and the tree
        holds any; else None."""
        if self.problem is None or not self.live:
            return None
        return (
            f"{self.problem}; kept {plural(len(self.live), 'staging folder')}, as any could be "
            "a queued or running job's"
        )

    @property
    def warning(self) -> str | None:
        """The sweep's one warning line for this tree (see :attr:`kept`), with the fix."""
        kept = self.kept
        return None if kept is None else f"tree {self.tree!r}: {kept}; {FIX}"


def read_staging(tree: TreePolicy, root: str, folders: Iterable[str]) -> StagingJobs:
    """Read the job store beside staging tree ``tree`` (found at ``root``, its unit folders
    named ``folders``): which of those folders could be a live job's (see the module's doc)."""
    db = jobs_db(state=staging_state(Path(root)))
    read = unfinished_jobs(db)
    present = {os.path.join(root, name) for name in folders}
    if read.problem is not None:
        return StagingJobs(tree.name, root, str(db), frozenset(present), read.problem)
    base = root.rstrip("/") + "/"
    live = {os.path.join(root, i) for i in read.ids if i and "/" not in i}
    # Its staging_dir, as the server recorded it, where that lies in this tree.
    live.update(
        base + os.path.relpath(d, root).split("/", 1)[0]
        for d in map(os.path.normpath, read.staging)
        if d.startswith(base)
    )
    return StagingJobs(tree.name, root, str(db), frozenset(live & present))


def read_active(tree: TreePolicy, root: str, units: UnitTable) -> StagingJobs:
    """Which units of a tree with ``active_jobs`` (found at ``root``) could be a live job's,
    by the program it names."""
    if tree.active_jobs == "batchalign":
        return read_running(tree, root, units)
    return read_staging(tree, root, units.keys())


def read_running(
    tree: TreePolicy, root: str, units: UnitTable, procs: tuple[Running, ...] | None = None
) -> StagingJobs:
    """The units of a tree that a running batchalign (0.10 and later) process may use: those
    changed (mtime or ctime: a copy that kept its mtime still changed) at or after the start of
    the oldest one running (``procs``, else those running now); none while none runs."""
    procs = running() if procs is None else procs
    if not procs:
        return StagingJobs(tree.name, root, "", frozenset())
    since = min(p.start for p in procs) - START_SLACK_S
    live = {u.path for u in units if max(max(e.mtime, e.ctime) for e in u.entries) >= since}
    return StagingJobs(tree.name, root, "", frozenset(live))
