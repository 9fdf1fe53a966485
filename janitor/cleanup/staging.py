"""A staging tree's jobs (``active_jobs``): which of its folders could be a live job's.

batchalign3 stages each server job in ``<state>/jobs/<job_id>`` and records the job in
``<state>/jobs.db``. The job store read is the one beside the tree (``host.batchalign3.
staging_state``), never one found from the janitor's own ``HOME`` or ``BATCHALIGN_STATE_DIR``:
the server that made the folders may run with others. A folder is kept as a live job's while
that store holds its job as anything but finished (queued, running, or a state we do not know).
When the store cannot be read, nothing tells a finished job's folder from a running one's, so
every folder of the tree is kept, and the sweep says so in one warning for the tree.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from janitor.config.policy import TreePolicy
from janitor.host.batchalign3 import jobs_db, staging_state
from janitor.humanize import plural
from janitor.ledger.foreign import unfinished_jobs

__all__ = ["FIX", "StagingJobs", "read_staging"]

#: What to do when a staging tree's job store cannot be read.
FIX = (
    "batchalign3 keeps jobs.db in its state folder beside jobs/: point the tree at that jobs/ "
    "folder, or make jobs.db readable"
)


@dataclass(frozen=True, slots=True)
class StagingJobs:
    """What the job store of staging tree ``tree`` (root ``root``) said at one read: ``live``,
    the tree's folders kept as live jobs', and ``problem``, why the store (``db``) could not be
    read, when it could not (then ``live`` is every folder of the tree)."""

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
