"""A tree at a glance: what its units hold and whether a sweep could take anything from it now,
from a size walk (``janitor.host.sizewalk``) instead of a scan.

``janitor space`` measures every folder with the light walk. A sweep's plan needs a scan (a full
record of every entry), the open-file list and the ledger: it is worth it only for a tree where
something could be taken. :func:`may_free` says False only when ``plan_tree`` and
``plan_pressure`` are sure to choose nothing there, by their own rules, from bounds on each
unit's last use that the walk gives:

- a cache: only when over its quota, past a ``max_age``, or on a volume below ``free_low``;
- a scratch tree: only a unit unchanged for ``orphan_age``, or a job folder the ledger holds
  whose every writer died;
- what the walk tells of a tree's units is its kind's to say (``UnitKind.glance``,
  :mod:`janitor.cleanup.kinds`): a ``dir`` unit's last use is the latest mtime in its folder
  (the folder's own included): exactly the walk's ``newest_mtime`` of that entry of the root;
  a file unit's is the latest of its files' ``max(mtime, atime)``, never before the earliest
  of them (``oldest_use``).
  A touch recorded in the ledger only makes a unit younger; pins, reservations, locks and open
  files only keep more. A folder holding a file linked more than once is not judged here (the
  scan counts such a file in one unit only).

Any doubt answers True, and the caller runs the dry-run sweep for that tree.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING

from janitor.cleanup.kinds import Glance, kind_named, kind_of
from janitor.host.sizewalk import SIZE, Measured

if TYPE_CHECKING:  # light to import: janitor.cli.early asks detail_for before pydantic loads
    from janitor.config.policy import TreePolicy
    from janitor.ledger.jobs import JobInfo

__all__ = [
    "Glance",
    "detail_for",
    "glance",
    "may_free",
    "orphaned_jobs",
    "still_there",
    "unit_bytes",
    "writing",
]


def detail_for(role: str, units: str, selects: bool, max_age: bool) -> int:
    """How much a size walk must tell of a tree's folder for :func:`unit_bytes` and
    :func:`may_free`: a report tree's size alone, else what its kind (``units``) asks;
    ``selects`` when it has include or exclude globs, ``max_age`` when set. Plain values, so
    the policy file's raw text can be asked before it is validated."""
    if role == "report":
        return SIZE
    return kind_named(units).walk_detail(role, selects, max_age)


def glance(tree: TreePolicy, m: Measured) -> Glance:
    """What the walk ``m`` of the tree's folder tells of its units, by their kind: work it out
    once and hand it to :func:`unit_bytes` and :func:`may_free`."""
    return kind_of(tree).glance(tree, m)


def unit_bytes(tree: TreePolicy, m: Measured, seen: Glance | None = None) -> int:
    """Allocated bytes the tree's units hold (a sweep's ``usage``): a report tree's whole
    folder, else what its kind tells (``seen``: from :func:`glance`, if worked out already)."""
    if tree.role == "report":
        return m.bytes
    return (seen or glance(tree, m)).bytes


def may_free(
    tree: TreePolicy,
    m: Measured,
    *,
    usage: int,
    quota: int | None,
    pressed: bool,
    orphans: Iterable[str],
    now: float,
    seen: Glance | None = None,
) -> bool:
    """False only when a dry-run sweep of ``tree`` is sure to plan nothing now (see the module
    docstring); ``usage`` from :func:`unit_bytes`, ``pressed``: its volume is below free_low,
    ``orphans``: the folders of the ledger's jobs whose writers all died; ``seen``: from
    :func:`glance`, if worked out already."""
    if tree.role == "report":
        return False
    if tree.role == "cache":
        pressed = pressed and tree.evicts_for_room  # a revision goes for its quota only
        if pressed or (quota is not None and usage > quota):
            return True
        if tree.max_age is None:
            return False
        return (seen or glance(tree, m)).older(now - tree.max_age)
    root = m.folder.path.rstrip("/") + "/"
    if any(o.startswith(root) for o in orphans):
        return True
    return (seen or glance(tree, m)).older(now - tree.orphan_age)


def writing(job: JobInfo) -> bool:
    """True while the job is live and one of its processes still runs (a writer, or what one
    forked that lives on)."""
    from janitor.admission.jobs import job_keepers

    return job.state == "live" and bool(job_keepers(job.writers))


def still_there(job: JobInfo) -> bool:
    """True while the job's folder is the one recorded (not one made anew with its name)."""
    try:
        st = os.lstat(job.folder)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == (job.device, job.ino)


def orphaned_jobs(jobs: Iterable[JobInfo]) -> list[str]:
    """The folders of the jobs a sweep removes at once, young or not: every writer gone."""
    return [j.folder for j in jobs if not writing(j) and still_there(j) and not j.foreign]
