"""`janitor space`: why is my disk full. What takes each volume's space, largest first.

For each volume the policy covers, one row per tree (what it manages, and what a sweep would
free there now), one per folder of the pipeline's disk that no tree manages (the models, a
media cache elsewhere: ``janitor.host.batchalign3.known_paths``), the part of a tree's folder
that is not the tree's to judge (TMPDIR's other programs' files, the state folder's databases),
and the rest of the volume as one row: everything else the volume's used bytes hold.

One walk of each folder: the trees are measured by the dry-run sweep that also says what would
be freed (its scan), the unmanaged folders in parallel; no walk crosses into another
filesystem or a mount point. Nothing is changed.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from janitor.core import Janitor

__all__ = ["SpaceRow", "VolumeSpace", "space_report"]


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


def _inside(path: Path, root: Path) -> bool:
    return path == root or path.is_relative_to(root)


def space_report(jan: Janitor, *, workers: int = 4) -> tuple[VolumeSpace, ...]:
    """Where each covered volume's space goes, measured now (see the module docstring)."""
    from janitor.admission.volume import Volume
    from janitor.cleanup.sweep import run_sweep
    from janitor.host.batchalign3 import known_paths
    from janitor.host.fdwalk import tree_size
    from janitor.host.space import volume_stats

    policy = jan.policy
    # A tree that no sweep could take anything from now (a report tree; a cache under its
    # quota, with no max_age, on a volume above free_low) only needs its size: the light walk.
    # The others go through a dry-run sweep, whose one scan gives both size and plan.
    sizes: dict[str, int] = {}
    usage: dict[str, int] = {}
    plannable: list[str] = []
    for name, tree in policy.trees.items():
        top = str(tree.path)
        if not os.path.isdir(top) or os.path.islink(top):
            continue
        if tree.role == "report" or (tree.role == "cache" and tree.max_age is None):
            vol = Volume.at(policy, top)
            size = tree_size(top) - os.lstat(top).st_blocks * 512
            quota = tree.quota_bytes(vol.total)
            calm = vol.free >= vol.free_low
            if tree.role == "report" or (calm and (quota is None or size <= quota)):
                sizes[name] = usage[name] = size
                continue
        plannable.append(name)
    frees: dict[str, int] = {}
    if plannable:
        result = run_sweep(
            policy, jan.ledger, jan.settings.state_dir, dry_run=True, names=plannable
        )
        sizes.update(result.sizes)
        usage.update({tp.tree: tp.usage for tp in result.plan.trees})
        for item in result.plan.items:
            frees[item.tree] = frees.get(item.tree, 0) + item.size
    trees = {name: t for name, t in policy.trees.items() if name in sizes}
    roots = {name: Path(t.path) for name, t in trees.items()}

    # The pipeline's folders that no tree holds, each walked once, in parallel.
    loose = [
        k
        for k in known_paths()
        if k.path.is_dir() and not any(_inside(k.path, r) for r in roots.values())
    ]
    loose = [k for i, k in enumerate(loose) if not any(_inside(k.path, o.path) for o in loose[:i])]
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        loose_sizes = list(pool.map(lambda k: tree_size(k.path), loose))

    rows: dict[int, list[SpaceRow]] = {}

    def add(path: Path, row: SpaceRow) -> None:
        try:
            device = os.stat(path).st_dev
        except OSError:
            return
        rows.setdefault(device, []).append(row)

    for name, tree in trees.items():
        root = roots[name]
        nested = sum(sizes[o] for o, r in roots.items() if r != root and _inside(r, root))
        whole = max(0, sizes[name] - nested)
        # A tree of files with no include/exclude manages its whole folder (its folders too);
        # otherwise only its units, and the rest of its folder is a row of its own.
        every_file = tree.units == "file" and not tree.include and not tree.exclude
        managed = whole if every_file else min(usage.get(name, whole), whole)
        add(root, SpaceRow(name, str(root), managed, name, tree.role, frees.get(name, 0)))
        rest = whole - managed
        if rest > 0:
            tmp = os.path.realpath(root) == os.path.realpath(tempfile.gettempdir())
            what = "TMPDIR: other programs' files" if tmp else f"{name}: the rest of its folder"
            add(root, SpaceRow(what, str(root), rest))
    covered = set(rows)
    for known, size in zip(loose, loose_sizes, strict=True):
        try:
            on_covered = os.stat(known.path).st_dev in covered  # only the policy's volumes
        except OSError:
            continue
        if on_covered:
            add(known.path, SpaceRow(f"{known.name} (not managed)", str(known.path), size))

    out = []
    for device, found in rows.items():
        any_root = next(p for p in _paths(found) if p is not None)
        vs = volume_stats(any_root)
        listed = sum(r.bytes for r in found)
        found.sort(key=lambda r: -r.bytes)
        other = SpaceRow("everything else on the volume", None, max(0, vs.total - vs.free - listed))
        out.append(VolumeSpace(vs.mount, device, vs.total, vs.free, (*found, other)))
    return tuple(sorted(out, key=lambda v: v.mount))


def _paths(rows: Iterable[SpaceRow]) -> Iterable[str | None]:
    return (r.path for r in rows)
