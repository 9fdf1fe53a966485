"""What the policy layer knows of each kind of unit (``units = "file"``, ``"dir"``,
``"hf_revision"``, ``"lmdb"``), as data: the key of a path, and the facts the policy's
validation and admission ask of a kind.

The kinds themselves (grouping a scan into units, what a size walk tells of them, the rechecks
before a delete, the delete) are :mod:`janitor.cleanup.kinds`, one object per kind, each built
on its rules here. The key of a path lives here, at the config layer, because admission
(:mod:`janitor.admission.awaiting`: which cache entry a probed WAV is part of) sits above
cleanup and reaches it through ``TreePolicy.unit_key`` without importing cleanup; the
planner's keys are the same function's (one rule, one place).

Pure: no pydantic, no I/O (``janitor space``'s early start reads these before pydantic loads).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Protocol

__all__ = [
    "HF_MISSING",
    "UNIT_RULES",
    "PolicyTree",
    "Problem",
    "UnitRules",
    "file_key",
    "folder_key",
    "hf_hub_installed",
    "match_key",
    "revision_key",
]

#: Why a policy with ``units = "hf_revision"`` is refused where huggingface_hub is missing.
HF_MISSING = (
    "needs the huggingface_hub package, which is not installed for this Python; install "
    "space-janitor's hf extra (pip install 'space-janitor[hf]', or '.[hf]' in its clone), "
    'or keep role = "report"'
)


def hf_hub_installed() -> bool:
    """Whether huggingface_hub can be imported here (looked up, not imported: it is slow)."""
    import importlib.util

    try:
        return importlib.util.find_spec("huggingface_hub") is not None
    except (ImportError, ValueError):
        return False


class PolicyTree(Protocol):
    """What a kind's own checks read of a tree's table (a ``TreePolicy``)."""

    @property
    def role(self) -> str: ...
    @property
    def group(self) -> str | None: ...
    @property
    def lock(self) -> str | None: ...


@dataclass(frozen=True, slots=True)
class Problem:
    """One problem of a tree's table that a kind finds: the key, why, the value written."""

    key: str
    why: str
    value: str


def match_key(rx: re.Pattern[str], rel: str) -> tuple[str, bool]:
    """A file's unit key through a tree's ``group`` regex, and whether it matched: the regex
    is matched on the file's name, and the key keeps the file's folder (``sub/{fp}.wav`` is
    ``sub/{fp}``); a name it does not match is its own key."""
    folder, _, name = rel.rpartition("/")
    m = rx.match(name)
    if m is None:
        return rel, False
    key_name: str = m.group("key")
    return (f"{folder}/{key_name}" if folder else key_name), True


def file_key(group: str | None, rel: str) -> str:
    """``units = "file"``: a path (relative to the root) is its own unit, unless ``group``
    names a key in its file name (``{fp}.tmp.wav``, ``{fp}.wav`` and ``{fp}.wav.lock`` are one
    unit, ``{fp}``)."""
    return match_key(re.compile(group), rel)[0] if group else rel


def folder_key(group: str | None, rel: str) -> str:
    """``units = "dir"``: the folder right under the root that a path lies in (``group`` does
    not apply)."""
    return rel.split("/", 1)[0]


def revision_key(group: str | None, rel: str) -> str:
    """``units = "hf_revision"``: the revision a path is part of,
    ``models--org--name/snapshots/<commit>``; the path itself when it lies outside every
    snapshot folder (a blob's revisions are known only from a scan). ``group`` does not
    apply."""
    parts = rel.split("/", 3)
    if len(parts) >= 3 and parts[1] == "snapshots" and parts[2]:
        return "/".join(parts[:3])
    return rel


def _no_problems(tree: PolicyTree) -> list[Problem]:
    return []


def _lmdb_problems(tree: PolicyTree) -> list[Problem]:
    """An LMDB environment goes whole, and only by its tree's own quota or max_age: the user
    opts in with a cache tree (a report tree shows each environment as one unit); group and
    lock name files, which an environment is not."""
    problems: list[Problem] = []
    if tree.role == "scratch":
        why = 'applies to role = "cache" (under a quota or max_age) or "report" only'
        problems.append(Problem("units", why, "lmdb"))
    return problems + _whole_unit_problems(tree, "lmdb", "a whole LMDB environment")


def _revision_problems(tree: PolicyTree) -> list[Problem]:
    """A cache of Hugging Face hub revisions is deleted through huggingface_hub's own cache
    API, so that package must be there (the ``hf`` extra); a unit is a whole revision."""
    problems: list[Problem] = []
    if tree.role != "cache":
        why = 'applies to role = "cache" only (with a quota: whole revisions are evicted)'
        problems.append(Problem("units", why, "hf_revision"))
    elif not hf_hub_installed():
        problems.append(Problem("units", HF_MISSING, "hf_revision"))
    return problems + _whole_unit_problems(tree, "hf_revision", "a whole revision")


def _whole_unit_problems(tree: PolicyTree, units: str, unit: str) -> list[Problem]:
    """``group`` and ``lock`` name files of a unit; a kind whose unit is whole (``unit``)
    has neither."""
    why = f'does not apply to units = "{units}" (a unit is {unit})'
    return [
        Problem(key, why, value)
        for key, value in (("group", tree.group), ("lock", tree.lock))
        if value is not None
    ]


@dataclass(frozen=True, slots=True)
class UnitRules:
    """One kind of unit, as the policy layer sees it."""

    #: As a policy names it: ``units = "file"``.
    name: str
    #: The key of the unit a path (relative to the root) belongs or would belong to, given the
    #: tree's ``group`` regex.
    key: Callable[[str | None, str], str]
    #: Each unit is one folder right under the root with all it holds: in a scratch tree, a
    #: job's folder (what the guard records a job by).
    folders: bool = False
    #: Volume pressure and make-room may evict its units (in a cache); else only the tree's
    #: own quota or max_age does.
    evicted_for_room: bool = True
    #: Keys of a tree's table that apply to this kind alone.
    own_keys: tuple[str, ...] = ()
    #: The kind's own checks of a tree's table.
    problems: Callable[[PolicyTree], list[Problem]] = _no_problems
    #: For a kind of folders that says itself which folders are units (an LMDB environment is
    #: one holding ``data.mdb``): each (folder glob, names of which one must be inside it), in
    #: place of the tree's ``unit_glob``/``unit_requires``.
    folder_rules: tuple[tuple[str, tuple[str, ...]], ...] = ()


#: Each kind's rules by the name a policy gives it. ``janitor.cleanup.kinds.KINDS`` holds the
#: kinds themselves, each built on its rules here.
UNIT_RULES: Mapping[str, UnitRules] = MappingProxyType(
    {
        "file": UnitRules("file", file_key),
        "dir": UnitRules(
            "dir",
            folder_key,
            folders=True,
            own_keys=("unit_requires", "unit_files", "active_jobs"),
        ),
        # Only its quota evicts a revision: an offline machine cannot download a model again.
        "hf_revision": UnitRules(
            "hf_revision", revision_key, evicted_for_room=False, problems=_revision_problems
        ),
        # A folder holding data.mdb, removed whole or not at all, by its quota or max_age only:
        # a result cache the user opted into trimming, never volume pressure's to take.
        "lmdb": UnitRules(
            "lmdb",
            folder_key,
            folders=True,
            evicted_for_room=False,
            problems=_lmdb_problems,
            folder_rules=(("*", ("data.mdb",)),),
        ),
    }
)
