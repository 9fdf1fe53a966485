"""The kinds of unit, as values: one object per kind, each in its own module, chosen once from a
tree's ``units`` by :func:`kind_of` (``KINDS``, a table, as python-diskcache keeps its eviction
policies as data).

- ``units = "file"``: ``FILE``, :mod:`~janitor.cleanup.kinds.file` (its grouping:
  ``file_grouping``);
- ``units = "dir"``: ``FOLDER``, :mod:`~janitor.cleanup.kinds.folder` (its removal:
  ``folder_removal``);
- ``units = "hf_revision"``: ``HF_REVISION``, :mod:`~janitor.cleanup.kinds.hf_revision` (the
  revisions of a scanned hub cache: ``hf_cache``; their removal: ``hf_delete``);
- ``units = "lmdb"``: ``LMDB``, :mod:`~janitor.cleanup.kinds.lmdb` (an LMDB environment's
  folder, whole or not at all).

Each answers the same questions (:class:`~janitor.cleanup.kinds.base.UnitKind`): a path's key,
a scan grouped into units, what a size walk tells of them, the rechecks before a delete, the
delete. No module outside this package asks which kind a tree is. A new kind is a module here
with its rules in :mod:`janitor.config.unit_rules` (the key admission asks, the facts the
policy's validation asks) and a name in ``TreePolicy.units``.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING

from janitor.cleanup.kinds.base import Glance, Site, UnitKind
from janitor.cleanup.kinds.file import FILE
from janitor.cleanup.kinds.folder import FOLDER
from janitor.cleanup.kinds.hf_revision import HF_REVISION
from janitor.cleanup.kinds.lmdb import LMDB

if TYPE_CHECKING:
    from janitor.cleanup.scan import Snapshot
    from janitor.cleanup.units import UnitTable
    from janitor.config.policy import TreePolicy

__all__ = ["KINDS", "Glance", "Site", "UnitKind", "group_units", "kind_named", "kind_of"]

#: Each kind by the name a policy gives it: the one place a tree's ``units`` is looked up.
KINDS: Mapping[str, UnitKind] = MappingProxyType(
    {k.name: k for k in (FILE, FOLDER, HF_REVISION, LMDB)}
)


def kind_of(tree: TreePolicy) -> UnitKind:
    """The kind of a (validated) tree's units."""
    return KINDS[tree.units]


def kind_named(name: str) -> UnitKind:
    """The kind a policy file's raw ``units`` names, before it is validated: the file kind,
    the default, for a name no policy validates (that policy is then refused on loading)."""
    return KINDS.get(name, FILE)


def group_units(
    snapshot: Snapshot, tree: TreePolicy, touches: Mapping[str, float] | None = None
) -> UnitTable:
    """Group a snapshot's entries into the tree's units, by its kind (unmanaged entries are
    left out); ``touches``: the last recorded touch of a path, which counts as a use."""
    return kind_of(tree).group(snapshot, tree, touches)
