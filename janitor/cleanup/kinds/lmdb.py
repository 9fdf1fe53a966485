"""``units = "lmdb"``: each LMDB environment right under the root (a folder holding
``data.mdb``, batchalign's ``cache.lmdb``) is one unit, removed whole or not at all.

An environment's files only work together: LMDB keeps ``data.mdb`` and ``lock.mdb`` open and
mapped while an environment is open, with a lock on ``lock.mdb``, and a ``data.mdb`` without
its pages, or a ``lock.mdb`` pulled from under a reader, is a broken cache. So a unit goes only
when no file of it is open or mapped by any process, by a rename aside first
(:func:`janitor.cleanup.kinds.folder_removal.remove_folder_whole`), and only by its tree's own
quota or ``max_age`` (a cache tree the user opted into): never for volume pressure, to make
room for a job, or by ``janitor emergency``. Everything else is the folder kind's: a unit's
last use is the latest change of anything in it (a reader's slot in ``lock.mdb`` is a write).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from janitor.cleanup.kinds.folder import FolderKind
from janitor.cleanup.kinds.folder_removal import remove_folder_whole
from janitor.config.unit_rules import UNIT_RULES

if TYPE_CHECKING:
    from janitor.cleanup.kinds.base import Site
    from janitor.cleanup.units import Unit

__all__ = ["LMDB", "LmdbKind"]


class LmdbKind(FolderKind):
    """LMDB environments right under the root, each whole (see the module docstring)."""

    __slots__ = ()

    rules = UNIT_RULES["lmdb"]

    def delete(self, site: Site, unit: Unit) -> tuple[int, int]:
        """The environment's folder, whole or not at all."""
        return remove_folder_whole(site.checks, site.root_fd, unit)


#: The one LMDB kind.
LMDB = LmdbKind()
