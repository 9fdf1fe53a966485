"""``janitor space`` starts walking before the command line has loaded.

Loading the CLI, the settings and the policy takes a good part of what ``du`` needs for the
whole walk. So :func:`start`, called first thing by the ``janitor`` entry point, looks at the
command line: for ``janitor [--config F] [--policy F] space ...`` on Linux it reads the policy
file's raw text (``janitor.config.glimpse``), plans the folders as ``janitor.usage`` will, and
starts the size walk's processes, which run while this one imports the rest. ``space`` then
:func:`take`s the walk; ``janitor.usage`` uses it only if it measured exactly the folders the
loaded policy asks for (else it walks again, and says nothing). Any doubt here: no early walk.
"""

from __future__ import annotations

from collections.abc import Sequence

from janitor.host.sizewalk import SizeWalk

__all__ = ["root_options", "start", "take"]

_walk: SizeWalk | None = None
_GLOBAL = ("--config", "--policy")


def root_options(argv: Sequence[str]) -> tuple[dict[str, str], list[str]] | None:
    """For a ``space`` command line: its root options (``--config``, ``--policy``) and what
    follows ``space``; None for any other command line."""
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
        if token != "space":
            return None  # another command, or an option of the root (--help, --version)
        return opts, list(argv[i + 1 :])
    return None


def _space_options(argv: Sequence[str]) -> dict[str, str] | None:
    """The root options of a ``space`` command line that asks for a report (not for help)."""
    found = root_options(argv)
    if found is None or any(t in ("-h", "--help") for t in found[1]):
        return None
    return found[0]


def start(argv: Sequence[str]) -> None:
    """Start the walk of a ``space`` command line (see the module docstring)."""
    global _walk
    from janitor.host.fastpaths import LINUX

    if not LINUX or _walk is not None:
        return
    opts = _space_options(argv)
    if opts is None:
        return
    try:
        from janitor.cleanup.glance import detail_for
        from janitor.config.glimpse import raw_trees
        from janitor.host.batchalign3 import known_paths
        from janitor.usage import TreeSpec, plan_folders

        trees = raw_trees(opts.get("--config"), opts.get("--policy"))
        if not trees:
            return
        specs = [
            TreeSpec(t.name, t.path, detail_for(t.role, t.units, t.selects, t.max_age))
            for t in trees
        ]
        plan = plan_folders(specs, [(k.name, str(k.path)) for k in known_paths()])
        _walk = SizeWalk.start(plan.folders)
    except Exception:  # a guess gone wrong costs nothing: the command walks as it would have
        _walk = None


def take() -> SizeWalk | None:
    """The walk :func:`start` began, if any (once)."""
    global _walk
    walk, _walk = _walk, None
    return walk
