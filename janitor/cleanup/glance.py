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
- a ``dir`` unit's last use is the latest mtime in its folder (the folder's own included):
  exactly the walk's ``newest_mtime`` of that entry of the root; a file unit's is the latest
  of its files' ``max(mtime, atime)``, never before the earliest of them (``oldest_use``).
  A touch recorded in the ledger only makes a unit younger; pins, reservations, locks and open
  files only keep more. A folder holding a file linked more than once is not judged here (the
  scan counts such a file in one unit only).

Any doubt answers True, and the caller runs the dry-run sweep for that tree.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from janitor.host.sizewalk import CHILDREN, FILES, SIZE, Measured

if TYPE_CHECKING:  # light to import: janitor.cli.early asks detail_for before pydantic loads
    from janitor.config.policy import TreePolicy
    from janitor.ledger.jobs import JobInfo

__all__ = [
    "UnitFolder",
    "detail_for",
    "may_free",
    "orphaned_jobs",
    "still_there",
    "unit_bytes",
    "unit_folders",
    "writing",
]


def detail_for(role: str, units: str, selects: bool, max_age: bool) -> int:
    """How much a size walk must tell of a tree's folder for :func:`unit_bytes` and
    :func:`may_free`: ``selects`` when it has include or exclude globs, ``max_age`` when set.
    Plain values, so the policy file's raw text can be asked before it is validated."""
    if role == "report":
        return SIZE
    if units == "dir":
        return CHILDREN
    if selects:
        return FILES
    return CHILDREN if role == "scratch" or max_age else SIZE


def _every_file(tree: TreePolicy) -> bool:
    return tree.units == "file" and not tree.include and not tree.exclude


UnitFolder = tuple[str, int, float, bool]


def unit_folders(tree: TreePolicy, m: Measured) -> list[UnitFolder]:
    """For ``units = "dir"``: the unit folders right under the root, as (name, bytes, newest
    mtime, linked). A rule's required names are listed from the disk: work it out once and
    hand it to :func:`unit_bytes` and :func:`may_free`."""
    if tree.units != "dir":
        return []
    root = m.folder.path
    return [
        (c.name, c.bytes, c.newest_mtime, c.linked)
        for c in m.children
        if c.is_dir
        and tree.manages(c.name)
        and tree.is_unit_folder(c.name, _lister(os.path.join(root, c.name)))
    ]


def _lister(path: str) -> Callable[[], Iterable[str]]:
    def names() -> list[str]:
        try:
            st = os.lstat(path)
            if not stat.S_ISDIR(st.st_mode):
                return []
            return os.listdir(path)
        except OSError:
            return []

    return names


def unit_bytes(tree: TreePolicy, m: Measured, units: list[UnitFolder] | None = None) -> int:
    """Allocated bytes the tree's units hold (a sweep's ``usage``): every file of a tree that
    selects none; its unit folders' trees; or the files its include/exclude leave to it."""
    if tree.role == "report" or _every_file(tree) or tree.units == "hf_revision":
        # A Hugging Face cache's revisions add up to the whole cache, less its lock files and
        # refs: at most this, so a quota it is over is one a dry run is asked about.
        return m.bytes
    if tree.units == "dir":
        found = unit_folders(tree, m) if units is None else units
        return sum(size for _, size, _, _ in found)
    return sum(size for rel, size, _ in m.files if tree.manages(rel))


def may_free(
    tree: TreePolicy,
    m: Measured,
    *,
    usage: int,
    quota: int | None,
    pressed: bool,
    orphans: Iterable[str],
    now: float,
    units: list[UnitFolder] | None = None,
) -> bool:
    """False only when a dry-run sweep of ``tree`` is sure to plan nothing now (see the module
    docstring); ``usage`` from :func:`unit_bytes`, ``pressed``: its volume is below free_low,
    ``orphans``: the folders of the ledger's jobs whose writers all died; ``units``: from
    :func:`unit_folders`, if worked out already."""
    if tree.role == "report":
        return False
    if tree.role == "cache":
        pressed = pressed and tree.units != "hf_revision"  # revisions go for their quota only
        if pressed or (quota is not None and usage > quota):
            return True
        if tree.max_age is None:
            return False
        return _older(tree, m, now - tree.max_age, units)
    root = m.folder.path.rstrip("/") + "/"
    if any(o.startswith(root) for o in orphans):
        return True
    return _older(tree, m, now - tree.orphan_age, units)


def _older(tree: TreePolicy, m: Measured, cutoff: float, units: list[UnitFolder] | None) -> bool:
    """Whether some unit's last use may be at or before ``cutoff``."""
    need = FILES if tree.units == "file" and not _every_file(tree) else CHILDREN
    if m.folder.detail < need:
        return True  # measured with too little detail to tell
    if tree.units == "dir":
        found = unit_folders(tree, m) if units is None else units
        return any(linked or newest <= cutoff for _, _, newest, linked in found)
    if need == FILES:
        return any(use <= cutoff for rel, _, use in m.files if tree.manages(rel))
    return any(c.linked or c.oldest_use <= cutoff for c in m.children)


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
