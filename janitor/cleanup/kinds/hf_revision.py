"""``units = "hf_revision"``: each revision of a Hugging Face hub cache is a unit (its snapshot,
the blobs its links reach, its refs; see :mod:`janitor.cleanup.kinds.hf_cache`), deleted by
huggingface_hub's own cache API once the deleter's checks passed on every path it would
remove (:mod:`janitor.cleanup.kinds.hf_delete`). Only the tree's quota (or max_age) evicts
one, never volume pressure (``UNIT_RULES``: an offline machine cannot download a model again).
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from janitor.cleanup.kinds import hf_delete
from janitor.cleanup.kinds.base import Glance, Grouping, Site, UnitKind, children_older
from janitor.cleanup.kinds.hf_cache import revisions
from janitor.cleanup.recheck import Partial, Skip, close_held
from janitor.cleanup.scan import scan
from janitor.config.unit_rules import UNIT_RULES

if TYPE_CHECKING:
    from janitor.cleanup.recheck import Rechecks
    from janitor.cleanup.units import Unit, UnitTable
    from janitor.config.policy import TreePolicy
    from janitor.host.sizewalk import Measured

__all__ = ["HF_REVISION", "RevisionKind"]


class RevisionKind(UnitKind):
    """Revisions of a Hugging Face hub cache (see the module docstring)."""

    __slots__ = ()

    rules = UNIT_RULES["hf_revision"]

    def _group(self, g: Grouping) -> UnitTable:
        """One unit per revision; ``include`` and ``exclude`` match repository folder names."""
        from janitor.cleanup.units import Unit, UnitTable  # numpy: once per tree

        units = [
            Unit(r.key, self.name, r.path, r.entries, r.size, r.last_use)
            for r in revisions(g.snapshot, g.touches, g.include, g.exclude)
        ]
        return UnitTable.of(units, g.snapshot.root, self.name)

    def glance(self, tree: TreePolicy, m: Measured) -> Glance:
        """The revisions add up to the whole cache, less its lock files and refs: at most the
        walk's bytes, so a quota it is over is one a dry run is asked about."""
        return Glance(m.bytes, False, partial(children_older, m))

    def usage(self, tree: TreePolicy) -> int:
        """Its revisions, each as it counts against the quota (a scan and its grouping)."""
        return int(self.group(scan(tree.path), tree).size.sum())

    def recheck(self, checks: Rechecks, unit: Unit) -> None:
        """Skip when a pin covers anything in the revision's snapshot folder."""
        checks.check_pins(unit, unit.path)

    def delete(self, site: Site, unit: Unit) -> tuple[int, int]:
        """Removed by huggingface_hub's cache API once every check here passed on every path
        it names."""
        plan = site.plan
        checks = site.checks
        lent = hf_delete.Checks(
            plan.root,
            site.root_fd,
            plan.device,
            plan.root_ino,
            site.folder,
            checks.hold,
            checks.verify,
            close_held,
        )
        try:
            return hf_delete.remove_revision(unit, lent)
        except hf_delete.Partial as exc:
            raise Partial(exc.files, exc.size, str(exc)) from None
        except hf_delete.Refused as exc:
            raise Skip(str(exc)) from None


#: The one revision kind.
HF_REVISION = RevisionKind()
