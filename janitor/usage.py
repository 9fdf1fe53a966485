"""`janitor space`: why is my disk full. What takes each volume's space, largest first.

For each volume the policy covers, one row per tree (what it manages, and what a sweep would
free there now), one per folder of the pipeline's disk that no tree manages (the models, a
media cache elsewhere: ``janitor.host.batchalign3.known_paths``), the part of a tree's folder
that is not the tree's to judge (TMPDIR's other programs' files, the state folder's databases),
and the rest of the volume as one row: everything else the volume's used bytes hold.

Every folder is walked once, all of them together in parallel, by the size walk
(``janitor.host.sizewalk``, compiled when it can be: ``janitor.host.nativewalk``; ``st_blocks``
of each entry, as ``du -sx`` counts; never into
another filesystem or a mount point). A folder nested in another (``~/.batchalign3/jobs`` in
``~/.batchalign3``) is walked on its own and left out of the outer one. What a sweep would free
is the dry-run sweep's plan, run only for the trees where the walk cannot rule it out
(``janitor.cleanup.glance``): a cache over its quota or on a volume below free_low, a unit old
enough. ``janitor space`` starts the walk before it has even loaded its policy (from the policy
file's raw paths: ``janitor.cli.early``); what it measured is used only if it is exactly what
the validated policy asks for. Nothing is changed.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from janitor.host.sizewalk import Folder, Measured, SizeWalk

if TYPE_CHECKING:
    from janitor.config.policy import Policy
    from janitor.ledger.db import Ledger

__all__ = [
    "SPACE_MAX_AGE_S",
    "FolderPlan",
    "SpaceRow",
    "TreeSpec",
    "VolumeSpace",
    "file_stamp",
    "folders_key",
    "plan_folders",
    "report_plan",
    "size_walker",
    "space_report",
    "tree_specs",
]


#: How old a report of the daemon's ``janitor space`` shows (the daemon measures one every
#: sweep_interval_s, and again when asked for one older than this).
SPACE_MAX_AGE_S = 600.0


@dataclass(frozen=True, slots=True)
class TreeSpec:
    """What the walk needs of a tree: its name, its root, how much to tell of it (a size walk's
    ``detail``)."""

    name: str
    path: str
    detail: int


@dataclass(frozen=True, slots=True)
class FolderPlan:
    """The folders to measure, in order (trees first, then the pipeline's other folders), with
    the folder of each tree and the known folders that no tree holds."""

    folders: tuple[Folder, ...]
    trees: dict[str, Folder]
    loose: tuple[tuple[str, Folder], ...]


@dataclass(frozen=True, slots=True)
class SpaceRow:
    """One thing that takes space on a volume: a tree, a folder no tree manages, or the rest.

    ``tree`` names the tree that manages it (None: nothing does); ``frees`` is what a sweep
    would delete there now.
    """

    name: str
    path: str | None
    bytes: int
    tree: str | None = None
    role: str | None = None
    frees: int = 0

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SpaceRow:
        """The row ``as_dict`` gave."""
        return cls(
            data["name"], data["path"], data["bytes"], data["tree"], data["role"], data["frees"]
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "path": self.path,
            "bytes": self.bytes,
            "managed": self.tree is not None,
            "tree": self.tree,
            "role": self.role,
            "frees": self.frees,
        }


@dataclass(frozen=True, slots=True)
class VolumeSpace:
    """A volume's used bytes, split into rows (largest first), the last one the rest."""

    mount: str
    device: int
    total: int
    free: int
    rows: tuple[SpaceRow, ...]

    @property
    def used(self) -> int:
        return self.total - self.free

    @property
    def frees(self) -> int:
        """What a sweep would free on this volume now."""
        return sum(r.frees for r in self.rows)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> VolumeSpace:
        """The volume ``as_dict`` gave."""
        rows = tuple(SpaceRow.from_dict(r) for r in data["rows"])
        return cls(data["volume"], data["device"], data["total"], data["free"], rows)

    def as_dict(self) -> dict[str, Any]:
        return {
            "volume": self.mount,
            "device": self.device,
            "total": self.total,
            "free": self.free,
            "used": self.used,
            "frees": self.frees,
            "rows": [r.as_dict() for r in self.rows],
        }


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def tree_specs(policy: Policy) -> list[TreeSpec]:
    """The policy's trees as the walk needs them."""
    from janitor.cleanup.glance import detail_for

    return [
        TreeSpec(
            name,
            os.path.normpath(str(t.path)),
            detail_for(t.role, t.units, bool(t.include or t.exclude), t.max_age is not None),
        )
        for name, t in policy.trees.items()
    ]


def plan_folders(trees: Sequence[TreeSpec], known: Sequence[tuple[str, str]]) -> FolderPlan:
    """Which folders to measure: each tree's root, then each ``known`` (name, path) that no
    tree root holds and no earlier one does. Each folder leaves out the others below it (they
    are measured on their own). Pure: the same input, the same folders (what lets a walk
    started from the policy's raw text be used for the validated policy)."""
    roots = {t.name: t.path for t in trees}
    loose: list[tuple[str, str]] = []
    for name, raw in known:
        path = os.path.normpath(raw)
        if any(_inside(path, r) for r in roots.values()):
            continue
        if any(_inside(path, p) for _, p in loose):
            continue
        loose.append((name, path))
    detail: dict[str, int] = {}
    for t in trees:
        detail[t.path] = max(detail.get(t.path, 0), t.detail)
    for _, p in loose:
        detail.setdefault(p, 0)
    paths = list(detail)
    made = {
        p: Folder(p, tuple(sorted(q for q in paths if q != p and _inside(q, p))), detail[p])
        for p in paths
    }
    return FolderPlan(
        tuple(made.values()),
        {t.name: made[t.path] for t in trees},
        tuple((name, made[p]) for name, p in loose),
    )


def _measure(
    folders: Sequence[Folder], early: SizeWalk | None, workers: int | None
) -> dict[Folder, Measured]:
    """Each folder's measure: the early walk's when it measured exactly these folders (in
    this order: a file linked in two of them counts in the first), else a walk now."""
    walk = early
    if walk is None or walk.folders != tuple(folders):
        if walk is not None:
            walk.close()
        walk = SizeWalk.start(folders, count=workers, native=size_walker())
    got = walk.results()
    if walk.native_failure is not None:
        import logging

        logging.getLogger("janitor").debug(
            "the compiled size walker did not measure (%s): measured in Python",
            walk.native_failure,
        )
    return got


def size_walker() -> Path | None:
    """The compiled size walker (``janitor.host.nativewalk``), built now if this version has
    none yet (once; a failure is remembered), or None: the walk is in Python."""
    from janitor.config.paths import native_dir
    from janitor.host.nativewalk import walker

    return walker(native_dir())


def report_plan(policy: Policy) -> FolderPlan:
    """The folders ``space_report`` measures for ``policy`` in this process's environment."""
    from janitor.host.batchalign3 import known_paths

    return plan_folders(tree_specs(policy), [(k.name, str(k.path)) for k in known_paths()])


def folders_key(folders: Sequence[Folder]) -> list[list[Any]]:
    """The folders as JSON: what a report measured, compared by whoever reuses it."""
    return [[f.path, list(f.prune), f.detail] for f in folders]


def file_stamp(path: Path | str) -> list[int] | None:
    """Which version of a file this is (device, inode, size, mtime in ns); None if missing."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns]


def _orphans(ledger: Ledger) -> list[str]:
    from janitor.cleanup.glance import orphaned_jobs

    with ledger.read() as tx:
        return orphaned_jobs(tx.jobs.active())


def space_report(
    policy: Policy,
    ledger: Ledger,
    state_dir: Path,
    *,
    early: SizeWalk | None = None,
    workers: int | None = None,
) -> tuple[VolumeSpace, ...]:
    """Where each covered volume's space goes, measured now (see the module docstring);
    ``early``: a walk already under way (``janitor.cli.early``); ``workers``: threads of the
    compiled walker, else processes of the Python walk (1: in this one). The ledger is read
    for the jobs whose writers died, and by a dry-run sweep (``state_dir``: its tree locks)."""
    from janitor.admission.volume import Volume
    from janitor.cleanup.glance import glance, may_free, unit_bytes
    from janitor.config.policy import trees_by_device
    from janitor.host.space import volume_stats

    plan = report_plan(policy)
    # What the walk does not tell, read while it runs: the jobs whose writers died, each
    # volume's numbers.
    scratch = any(t.role == "scratch" for t in policy.trees.values())
    orphans = _orphans(ledger) if scratch else []
    volumes = {
        device: Volume.at(policy, trees[0].path)
        for device, trees in trees_by_device(policy.trees.values()).items()
    }
    measured = _measure(plan.folders, early, workers)
    now = time.time()
    sizes: dict[str, int] = {}
    usage: dict[str, int] = {}
    all_units: dict[str, bool] = {}  # its units are its whole folder (its folders too)
    doubt: list[str] = []
    for name, tree in policy.trees.items():
        m = measured.get(plan.trees[name])
        if m is None:
            continue  # no folder there (or a symlink, or a file: a sweep says which)
        if m.device not in volumes:
            volumes[m.device] = Volume.at(policy, m.folder.path)
        vol = volumes[m.device]
        sizes[name] = m.bytes
        seen = glance(tree, m)
        all_units[name] = seen.whole
        usage[name] = unit_bytes(tree, m, seen)
        if may_free(
            tree,
            m,
            usage=usage[name],
            quota=tree.quota_bytes(vol.total),
            pressed=vol.free < vol.free_low,
            orphans=orphans,
            now=now,
            seen=seen,
        ):
            doubt.append(name)
    frees: dict[str, int] = {}
    if doubt:
        from janitor.cleanup.sweep import run_sweep

        result = run_sweep(policy, ledger, state_dir, dry_run=True, names=doubt)
        usage.update({tp.tree: tp.usage for tp in result.plan.trees})
        for item in result.plan.items:
            frees[item.tree] = frees.get(item.tree, 0) + item.size

    rows: dict[int, list[SpaceRow]] = {}
    gettemp = os.path.realpath(tempfile.gettempdir())
    for name, whole in sizes.items():
        tree = policy.trees[name]
        m = measured[plan.trees[name]]
        root = m.folder.path
        # A tree whose units are its whole folder (files, with no include/exclude) manages it
        # all, its folders too; otherwise only its units, and the rest is a row of its own.
        managed = whole if all_units[name] else min(usage.get(name, whole), whole)
        found = rows.setdefault(m.device, [])
        found.append(SpaceRow(name, root, managed, name, tree.role, frees.get(name, 0)))
        rest = whole - managed
        if rest > 0:
            tmp = os.path.realpath(root) == gettemp
            what = "TMPDIR: other programs' files" if tmp else f"{name}: the rest of its folder"
            found.append(SpaceRow(what, root, rest))
    for known, folder in plan.loose:
        m = measured.get(folder)
        if m is not None and m.device in rows:  # only the policy's volumes
            size = m.bytes + m.own  # the whole folder, as du -s counts it
            rows[m.device].append(SpaceRow(f"{known} (not managed)", folder.path, size))

    out = []
    for device, found in rows.items():
        vs = volume_stats(found[0].path or "/")
        listed = sum(r.bytes for r in found)
        found.sort(key=lambda r: -r.bytes)
        other = SpaceRow("everything else on the volume", None, max(0, vs.total - vs.free - listed))
        out.append(VolumeSpace(vs.mount, device, vs.total, vs.free, (*found, other)))
    return tuple(sorted(out, key=lambda v: v.mount))
