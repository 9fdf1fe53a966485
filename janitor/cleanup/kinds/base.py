"""A kind of unit as a value: what a tree's ``units`` names, one object per kind.

Every kind answers the same questions for the trees of its kind, so no code outside the kinds
asks which kind a tree is:

- **key**: the unit a path (relative to the root) belongs or would belong to: its rules' key
  (:mod:`janitor.config.unit_rules`, where admission reaches it too);
- **group**: a scan's entries as the tree's units, a :class:`~janitor.cleanup.units.UnitTable`;
- **glance**: how much a size walk must tell of the tree (``walk_detail``), and what it then
  tells of its units (``glance``: a :class:`Glance`); ``usage``: what they hold, measured now;
- **recheck**: what is checked of a unit right before anything of it goes (its pins);
- **delete**: how a unit goes, each file with the deleter's checks
  (:class:`~janitor.cleanup.recheck.Rechecks`), relative to the tree root the deleter opened.

A kind holds no state: one object serves every tree of its kind, in every thread. Its module
is light to import (``janitor space`` asks a kind's ``walk_detail`` before pydantic or numpy
load); what only grouping needs is loaded when a tree is grouped.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Protocol

from janitor.cleanup.scan import gc_paused
from janitor.host.sizewalk import CHILDREN, FILES, SIZE

if TYPE_CHECKING:
    from janitor.cleanup.plan import TreePlan
    from janitor.cleanup.recheck import Rechecks
    from janitor.cleanup.scan import Snapshot
    from janitor.cleanup.units import Unit, UnitTable
    from janitor.config.policy import TreePolicy
    from janitor.config.unit_rules import UnitRules
    from janitor.host.sizewalk import Measured

__all__ = ["Glance", "Grouping", "Site", "UnitKind", "children_older"]


@dataclass(frozen=True, slots=True)
class Grouping:
    """What a kind groups into units: a tree's scan and policy, the last recorded touch of a
    path (a use), and the tree's include and exclude globs as one regex each (None: none)."""

    snapshot: Snapshot
    tree: TreePolicy
    touches: Mapping[str, float]
    include: re.Pattern[str] | None
    exclude: re.Pattern[str] | None


@dataclass(frozen=True, slots=True)
class Glance:
    """What a size walk tells of one tree's units, by their kind."""

    #: Allocated bytes the units hold (a sweep's ``usage``; for a kind the walk cannot tell
    #: exactly, at least that).
    bytes: int
    #: The units are the whole folder, its folders too (nothing of it is someone else's).
    whole: bool
    #: Whether some unit's last use may be at or before a time (True when in doubt).
    older: Callable[[float], bool]


class Site(Protocol):
    """Where a kind deletes a tree's units from: the deleter's tree root, opened once and
    verified, its folders opened from there, and the checks of every file."""

    plan: TreePlan
    root_fd: int
    checks: Rechecks

    def folder(self, folder: str) -> int:
        """A kept fd of a folder below the root ("" is the root itself)."""
        ...


class UnitKind(ABC):
    """One kind of unit (see the module docstring); ``rules``: its rules at the config layer."""

    __slots__ = ()

    rules: ClassVar[UnitRules]

    @property
    def name(self) -> str:
        """As a policy names the kind: ``units = "file"``."""
        return self.rules.name

    def __repr__(self) -> str:
        return f"<unit kind {self.name!r}>"

    # -- key -----------------------------------------------------------------------------------

    def key(self, tree: TreePolicy, rel: str) -> str:
        """The key of the unit a path (relative to the root) belongs or would belong to."""
        return self.rules.key(tree.group, rel)

    # -- group ---------------------------------------------------------------------------------

    def group(
        self, snapshot: Snapshot, tree: TreePolicy, touches: Mapping[str, float] | None = None
    ) -> UnitTable:
        """A snapshot's entries as the tree's units (unmanaged entries left out); ``touches``:
        the last recorded touch of a path, which counts as a use."""
        from janitor.config.policy import glob_regex  # loaded already: ``tree`` is one

        include = glob_regex(tuple(tree.include))
        exclude = glob_regex(tuple(tree.exclude))
        with gc_paused():
            return self._group(Grouping(snapshot, tree, touches or {}, include, exclude))

    @abstractmethod
    def _group(self, g: Grouping) -> UnitTable:
        """The units of what ``g`` holds."""

    # -- glance --------------------------------------------------------------------------------

    def walk_detail(self, role: str, selects: bool, max_age: bool) -> int:
        """How much a size walk must tell of a tree of this kind for :meth:`glance` (a report
        tree's size alone is asked of it, whatever its kind): ``selects`` when the tree has
        include or exclude globs, ``max_age`` when it has one. Plain values: the policy
        file's raw text is asked before it is validated."""
        if selects:
            return FILES
        return CHILDREN if role == "scratch" or max_age else SIZE

    @abstractmethod
    def glance(self, tree: TreePolicy, m: Measured) -> Glance:
        """What the walk ``m`` of the tree's folder tells of its units."""

    @abstractmethod
    def usage(self, tree: TreePolicy) -> int:
        """Allocated bytes the tree's units hold now, measured on their own (``janitor
        status``: what the planner weighs against the quota)."""

    # -- recheck -------------------------------------------------------------------------------

    def recheck(self, checks: Rechecks, unit: Unit) -> None:
        """Right before anything of ``unit`` goes: Skip when a pin covers it."""
        checks.check_pins(unit)

    # -- delete --------------------------------------------------------------------------------

    @abstractmethod
    def delete(self, site: Site, unit: Unit) -> tuple[int, int]:
        """Remove one unit (after :meth:`recheck`); (files removed, bytes), Skip before anything
        is removed, or Partial once something was."""


def children_older(m: Measured, cutoff: float) -> bool:
    """Whether some entry right under the walked folder may have been last used at or before
    ``cutoff``: no file in it is younger than its ``oldest_use`` (True when the walk told too
    little to say, or an entry holds a file linked more than once: the scan counts such a file
    in one unit only)."""
    if m.folder.detail < CHILDREN:
        return True
    return any(c.linked or c.oldest_use <= cutoff for c in m.children)
