"""``janitor space`` starts walking before the rest of the janitor has loaded.

Loading the settings and the policy (pydantic) takes a good part of what ``du`` needs for the
whole walk. So for a ``janitor [--config F] [--policy F] space ...`` command line
(:func:`root_options`), ``janitor.cli.quick`` calls :func:`start` first thing: it
reads the policy file's raw text (``janitor.config.glimpse``), plans the folders as
``janitor.usage`` will (:func:`glimpsed_plan`), and starts the size walk (the compiled walker,
built first the very first time, or the Python walk's processes), which runs while this one
imports the rest. The command then :func:`take`s the walk; ``janitor.usage``
uses it only if it measured exactly the folders the loaded policy asks for (else it walks
again). Any doubt here: no early walk.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from janitor.host.sizewalk import SizeWalk

if TYPE_CHECKING:
    from janitor.usage import FolderPlan

__all__ = ["glimpsed_plan", "root_options", "start", "take"]

_walk: SizeWalk | None = None
_GLOBAL = ("--config", "--policy")


def root_options(
    argv: Sequence[str], command: str = "space"
) -> tuple[dict[str, str], list[str]] | None:
    """For a ``command`` command line (``space``, ``daemon``): its root options (``--config``,
    ``--policy``) and what follows the command's name; None for any other command line."""
    opts: dict[str, str] = {}
    i = 0
    while i < len(argv):
        token = argv[i]
        name, eq, value = token.partition("=")
        if name in _GLOBAL:
            if not eq:
                if i + 1 >= len(argv):
                    return None
                value = argv[i + 1]
                i += 1
            opts[name] = value
            i += 1
            continue
        if token != command:
            return None  # another command, or an option of the root (--help, --version)
        return opts, list(argv[i + 1 :])
    return None


def glimpsed_plan(config: str | None, policy: str | None) -> FolderPlan | None:
    """The folders ``janitor space`` will measure, from the policy file's raw text (None when
    it cannot be read plainly: the loaded policy will say why)."""
    from janitor.cleanup.glance import detail_for
    from janitor.config.glimpse import raw_trees
    from janitor.host.batchalign3 import known_paths
    from janitor.usage import TreeSpec, plan_folders

    trees = raw_trees(config, policy)
    if not trees:
        return None
    specs = [
        TreeSpec(t.name, t.path, detail_for(t.role, t.units, t.selects, t.max_age)) for t in trees
    ]
    return plan_folders(specs, [(k.name, str(k.path)) for k in known_paths()])


def start(plan: FolderPlan | None) -> None:
    """Start walking ``plan``'s folders (see the module docstring)."""
    global _walk
    from janitor.host.fastpaths import LINUX
    from janitor.usage import size_walker

    if _walk is not None or plan is None:
        return
    native = size_walker()  # built here the first time: then it walks
    if native is None and not LINUX:
        return  # the Python walk would run in this process: no gain in starting it early
    try:
        _walk = SizeWalk.start(plan.folders, native=native)
    except OSError:  # no processes to be had: the command walks as it would have
        _walk = None


def take() -> SizeWalk | None:
    """The walk :func:`start` began, if any (once)."""
    global _walk
    walk, _walk = _walk, None
    return walk
