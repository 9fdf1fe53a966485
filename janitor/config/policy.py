"""Policies: which trees the janitor manages, and the numbers it keeps each volume and tree within.

A policy is a TOML file. The smallest useful one::

    [volume]
    floor = "4MiB"

    [trees.t]
    role = "cache"
    path = "/some/dir"
    quota = "10MiB"

Sizes are 1024-based (``10MiB``, ``2G``, ``1.5GiB``, bytes) or a percentage (``"5%"``: of the
volume for floor, free_low, free_target, ballast and quota; of the quota for low_watermark).
Paths expand ``${VAR}``, ``${VAR:-fallback}``, ``~`` and the placeholders ``{user_data_dir}``,
``{user_cache_dir}``, ``{tmp}`` and ``{home}``.
"""

from __future__ import annotations

import fnmatch
import functools
import os
import re
import tomllib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from janitor.config.paths import expand_path
from janitor.config.policy_errors import (
    DURATION_EXAMPLES,
    MAX_PROBLEMS_SHOWN,
    SIZE_EXAMPLES,
    WANTED,
    Fields,
    again,
    invalid,
    key_part,
    problem,
    raise_all,
    read_error,
)
from janitor.config.unit_rules import HF_MISSING, UNIT_RULES, hf_hub_installed
from janitor.errors import ConfigError, UnknownTree
from janitor.sizes import format_size, parse_duration, parse_size

__all__ = [
    "DEFAULT_AWAIT_TTL_S",
    "FORBIDDEN_ROOTS",
    "HF_MISSING",
    "MAX_PROBLEMS_SHOWN",
    "InTree",
    "Policy",
    "SizeSpec",
    "TreePolicy",
    "VolumePolicy",
    "expand_path",
    "glob_regex",
    "hf_hub_installed",
    "load_policy",
    "tree_holding",
    "trees_by_device",
]

#: Folders that are never a tree root themselves: the system and the places that hold homes.
FORBIDDEN_ROOTS = frozenset(
    {
        "/",
        "/bin",
        "/boot",
        "/dev",
        "/etc",
        "/home",
        "/lib",
        "/lib32",
        "/lib64",
        "/opt",
        "/private",
        "/private/var",
        "/private/etc",
        "/proc",
        "/root",
        "/run",
        "/sbin",
        "/srv",
        "/sys",
        "/usr",
        "/var",
        "/Applications",
        "/Library",
        "/System",
        "/Users",
        "/Volumes",
        "/cores",
        "/mnt",
        "/media",
    }
)
#: Folders whose whole subtree is off limits (their contents belong to the OS).
FORBIDDEN_SUBTREES = (
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/lib",
    "/proc",
    "/sbin",
    "/sys",
    "/usr",
    "/System",
    "/private/etc",
)

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass(frozen=True, slots=True)
class SizeSpec:
    """A size as written in a policy: absolute bytes, or a percentage of some whole."""

    nbytes: int | None = None
    percent: float | None = None

    def resolve(self, whole: int) -> int:
        """Bytes, taking a percentage of ``whole`` (the volume's size, or a tree's quota)."""
        if self.percent is not None:
            return int(whole * self.percent / 100)
        assert self.nbytes is not None
        return self.nbytes

    def __str__(self) -> str:
        return f"{self.percent:g}%" if self.percent is not None else format_size(self.nbytes or 0)

    @classmethod
    def parse(cls, value: Any) -> SizeSpec:
        """``"5%"`` or anything :func:`janitor.sizes.parse_size` takes (zero allowed).

        The ValueError's reason leaves the value out: a policy's report shows it by the key.
        """
        if isinstance(value, SizeSpec):
            return value
        if isinstance(value, str) and value.strip().endswith("%"):
            try:
                pct = float(value.strip()[:-1])
            except ValueError:
                raise ValueError(f"not a percentage; use e.g. {SIZE_EXAMPLES}") from None
            if not 0 <= pct <= 100:
                raise ValueError("a percentage must be between 0% and 100%")
            return cls(percent=pct)
        try:
            return cls(nbytes=parse_size(value, allow_zero=True))
        except ConfigError as exc:
            if isinstance(value, str) and value.strip().startswith("-"):
                try:  # "-4MiB" is a size with a sign, which is more use to say than "not a size"
                    parse_size(value.strip()[1:])
                    raise ValueError("must be zero or positive") from None
                except ConfigError:
                    pass
            # parse_size says "size <value> <why>"; only the why is wanted here.
            why = str(exc).removeprefix(f"size {value!r} ")
            if why.startswith("is not a size"):
                why = f"not a size; use e.g. {SIZE_EXAMPLES}"
            raise ValueError(why) from None


def _duration(value: Any) -> float:
    try:
        return parse_duration(value)
    except ConfigError as exc:
        why = str(exc).removeprefix(f"duration {value!r} ")
        if why.startswith("is not a duration"):
            why = f"not a duration; use e.g. {DURATION_EXAMPLES}"
        raise ValueError(why) from None


Size = Annotated[SizeSpec, BeforeValidator(SizeSpec.parse)]
Duration = Annotated[float, BeforeValidator(_duration)]


@functools.lru_cache(maxsize=256)
def glob_regex(patterns: tuple[str, ...]) -> re.Pattern[str] | None:
    """One regex matching what any of the globs matches (``*`` crosses ``/``, as
    ``fnmatch``'s does); None for no globs."""
    if not patterns:
        return None
    return re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in patterns))


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class VolumePolicy(_Model):
    """Numbers shared by every tree on one filesystem.

    Defaults: floor = min(10 GiB, 10 % of the volume); free_low = 2 x floor;
    free_target = 3 x floor (each capped at the volume's size).
    """

    path: Path | None = Field(default=None, description="Any path on the volume (in [volumes.X]).")
    floor: Size | None = Field(
        default=None,
        description="Free space reservations must leave; a reservation that would take the "
        "volume below it is refused. Unset: min(10 GiB, 10 % of the volume).",
    )
    free_low: Size | None = Field(
        default=None,
        description="Below this much free space, caches on the volume are evicted (level warn). "
        "Unset: 2 x floor.",
    )
    free_target: Size | None = Field(
        default=None,
        description="Eviction for free space stops once this much is free. Unset: 3 x floor.",
    )
    ballast: Size | None = Field(
        default=None,
        description="A preallocated file of this size, given back when the volume goes below "
        "its floor and made again once free space is above free_target plus its size.",
    )
    horizon: Duration = Field(
        default=1800.0,
        description="Forecast window: the level is warn when the floor is forecast within it.",
    )

    @field_validator("path", mode="before")
    @classmethod
    def _expand(cls, value: Any) -> Any:
        return expand_path(value) if isinstance(value, str) else value

    def numbers(self, total: int) -> tuple[int, int, int]:
        """(floor, free_low, free_target) in bytes for a volume of ``total`` bytes."""
        floor = self.floor.resolve(total) if self.floor else min(10 * 1024**3, total // 10)
        free_low = self.free_low.resolve(total) if self.free_low else min(total, 2 * floor)
        free_target = self.free_target.resolve(total) if self.free_target else min(total, 3 * floor)
        return floor, max(free_low, floor), max(free_target, free_low, floor)

    def merged(self, override: VolumePolicy) -> VolumePolicy:
        """These defaults with the fields ``override`` sets."""
        data = self.model_dump()
        data.update(override.model_dump(exclude_unset=True))
        return VolumePolicy.model_validate(data)


#: A cache entry awaiting use stays so at most this long (``await_ttl``): batchalign3 runs UTR
#: between its probe of a cached WAV and the first cut, and Whisper's UTR over a two-hour
#: recording on a laptop's CPU takes about as long as the recording, Rev.AI's less; 4 h covers
#: either with room to spare. What it costs at worst is the WAVs probed in the last 4 hours
#: (about 115 MB per hour of audio) kept from pressure eviction.
DEFAULT_AWAIT_TTL_S = 4 * 3600.0


class TreePolicy(_Model):
    """One managed folder and the rules for what in it may be deleted, and when."""

    name: str = ""  # the table's name, [trees.NAME]: not a key
    role: Literal["cache", "scratch", "report"] = Field(
        description="cache: rebuildable files, least recently used evicted to keep the quota; "
        "scratch: running jobs' files, only orphans removed; report: measured and shown, "
        "never deleted from (models, live databases)."
    )
    path: Path = Field(description="The tree's root.")
    quota: Size | None = Field(
        default=None,
        description="A cache's limit: over it, the least recently used units are evicted down "
        "to low_watermark.",
    )
    low_watermark: Size = Field(
        default=SizeSpec(percent=90.0),
        description="Where eviction for the quota stops (a percentage is of the quota).",
    )
    min_age: Duration = Field(
        default=300.0,
        description="Units used more recently than this are kept from quota and age sweeps "
        "(not from volume pressure or make-room, which evict what nothing uses).",
    )
    await_ttl: Duration = Field(
        default=DEFAULT_AWAIT_TTL_S,
        description="How long a cache entry the pipeline probed or converted stays awaiting "
        "use (never evicted) when no job of its prober cuts from it and the prober lives: 4 h "
        "covers Whisper's UTR over a two-hour recording on a laptop's CPU (Rev.AI's takes "
        "less); at worst it keeps the WAVs probed in the last 4 h (115 MB per hour of audio) "
        "from pressure eviction.",
    )
    max_age: Duration | None = Field(
        default=None,
        description="Cache units unused this long are deleted, whatever the quota.",
    )
    orphan_age: Duration = Field(
        default=86400.0,
        description="A scratch unit unchanged this long, with nothing live in it, is an orphan "
        "(a job folder the guard recorded is one as soon as every process of its job is gone).",
    )
    include: tuple[str, ...] = Field(
        default=(),
        description="Globs on paths relative to the root (on unit folder names for dir units, "
        "on repository folder names for hf_revision); empty: everything.",
    )
    exclude: tuple[str, ...] = Field(
        default=(), description="Globs, as include, of what the tree leaves alone."
    )
    units: Literal["file", "dir", "hf_revision", "lmdb"] = Field(
        default="file",
        description="file: each file is a unit (see group); dir: each folder right under the "
        "root matching unit_glob; hf_revision: each revision of a Hugging Face hub cache (a "
        "cache tree; needs the hf extra); lmdb: each LMDB environment (a folder holding "
        "data.mdb), whole or not at all, for a cache (by its own quota or max_age only) or a "
        "report tree.",
    )
    unit_glob: str = Field(default="*", description="For dir units: the folder name glob.")
    unit_requires: tuple[str, ...] | dict[str, tuple[str, ...]] = Field(
        default=(),
        description="For dir units: globs of which one must name an entry right inside the "
        "folder, so other programs' folders are left alone; or a table of such lists by "
        'folder glob ("tmp*" = ["mono_file.wav"]), and then no unit_glob.',
    )
    unit_files: tuple[str, ...] = Field(
        default=(),
        description="For dir units: globs of files right under the root that are units on "
        "their own, judged as a folder is (a Python tempfile's loose tmpXXXXXXXX.wav).",
    )
    active_jobs: Literal["batchalign3", "batchalign"] | None = Field(
        default=None,
        description="For a scratch tree of dir units, never a unit a queued or running job of "
        "this program may use. batchalign3 (its <state>/jobs): never a folder of a job the "
        "jobs.db beside the tree holds as unfinished, and no folder at all while that jobs.db "
        "cannot be read; an unset orphan_age is server.yaml's job_ttl_days. batchalign (0.10 "
        "and later): never a unit changed (mtime or ctime) since the start of one of its "
        "processes still running.",
    )
    group: str | None = Field(
        default=None,
        description="Regex with a named group 'key': files with the same key (in one folder) "
        "form one unit.",
    )
    lock: str | None = Field(
        default=None,
        description="Lock file of a unit, e.g. '{key}.wav.lock': while another process holds a "
        "flock on it, the unit is in use.",
    )

    @field_validator("path", mode="before")
    @classmethod
    def _expand(cls, value: Any) -> Any:
        return expand_path(value) if isinstance(value, str) else value

    @field_validator("unit_requires", mode="before")
    @classmethod
    def _requires(cls, value: Any) -> Any:
        """A list of globs, or a table of them by folder glob; one problem line otherwise
        (not one per member of the type's union)."""

        def globs(v: Any) -> bool:
            return isinstance(v, list | tuple) and all(isinstance(g, str) for g in v)

        if globs(value):
            return tuple(value)
        if isinstance(value, dict) and value and all(globs(v) for v in value.values()):
            return {str(k): tuple(v) for k, v in value.items()}
        raise PydanticCustomError(
            "policy", "{reason}", {"reason": f"wanted {WANTED['unit_requires']}"}
        )

    @field_validator("group")
    @classmethod
    def _regex(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            rx = re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a valid regular expression: {exc}") from None
        if "key" not in rx.groupindex:
            raise ValueError("needs a named group (?P<key>...) that names the unit")
        return value

    @field_validator("path")
    @classmethod
    def _safe_root(cls, value: Path) -> Path:
        text = str(value)
        home = os.path.normpath(str(Path.home()))
        if text in FORBIDDEN_ROOTS or text == home:
            raise ValueError(f"{text} cannot be a tree root: it is a system or home folder")
        for sub in FORBIDDEN_SUBTREES:
            if text.startswith(sub + "/") and not text.startswith("/usr/local/var/"):
                raise ValueError(f"{text} cannot be a tree root: it is inside {sub}")
        return value

    @field_validator("quota")
    @classmethod
    def _positive(cls, value: SizeSpec | None) -> SizeSpec | None:
        if value is not None and value.percent is None and value.nbytes == 0:
            raise ValueError("must be positive (leave quota out for no quota)")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> TreePolicy:
        problems = []
        if self.role == "report":
            for key in ("quota", "max_age"):
                if getattr(self, key) is not None:
                    why = 'a report tree is measured, never deleted from; use role = "cache"'
                    problems.append(problem((key,), why, str(getattr(self, key))))
        if isinstance(self.unit_requires, dict) and "unit_glob" in self.model_fields_set:
            why = "with a table of unit_requires, its keys are the folder globs; drop unit_glob"
            problems.append(problem(("unit_glob",), why, self.unit_glob))
        for kind in UNIT_RULES.values():
            for key in kind.own_keys:
                if key in self.model_fields_set and self.units != kind.name:
                    why = f'applies to units = "{kind.name}" only'
                    problems.append(problem((key,), why, str(getattr(self, key))))
        if self.active_jobs is not None and self.role != "scratch":
            why = 'applies to role = "scratch" only'
            problems.append(problem(("active_jobs",), why, self.active_jobs))
        problems += [
            problem((p.key,), p.why, p.value) for p in UNIT_RULES[self.units].problems(self)
        ]
        low, quota = self.low_watermark.nbytes, self.quota.nbytes if self.quota else None
        if low is not None and quota is not None and low > quota:
            why = f"must not exceed quota ({self.quota})"
            problems.append(problem(("low_watermark",), why, str(self.low_watermark)))
        if self.lock and "{key}" in self.lock and not self.group:
            why = "uses {key} but the tree has no group pattern"
            problems.append(problem(("lock",), why, self.lock))
        if problems:
            raise_all("TreePolicy", problems)
        return self

    @property
    def evicts_for_room(self) -> bool:
        """Whether volume pressure and make-room may evict this tree's units: any cache but
        one of Hugging Face revisions, which only its own quota (or max_age) evicts: an
        offline machine cannot download a model again."""
        return self.role == "cache" and UNIT_RULES[self.units].evicted_for_room

    @property
    def holds_jobs(self) -> bool:
        """Whether the tree's units are job folders: a scratch tree whose every unit is a folder
        right under its root (``units = "dir"``, like the default policy's ``job_tmp``)."""
        return self.role == "scratch" and UNIT_RULES[self.units].folders

    @model_validator(mode="before")
    @classmethod
    def _ttl_of_active_jobs(cls, data: Any) -> Any:
        """A staging tree of batchalign3's jobs keeps them as long as batchalign3 does:
        orphan_age, when not written, is the ``job_ttl_days`` of the ``server.yaml`` beside the
        tree (in the state folder that holds it), not of the one our environment would name."""
        batchalign = isinstance(data, dict) and data.get("active_jobs") == "batchalign3"
        if batchalign and "orphan_age" not in data:
            from janitor.host.batchalign3 import server_config, staging_state

            raw = data.get("path")
            try:
                root = Path(raw) if isinstance(raw, os.PathLike) else expand_path(raw)
            except (TypeError, ValueError):
                return data  # no usable path: reported as such, and no server.yaml to read
            ttl = server_config(state=staging_state(root)).job_ttl_days
            data = {**data, "orphan_age": ttl * 86400.0}
        return data

    def unit_rules(self) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """For ``units = "dir"``: each (folder glob, globs of which one must name an entry
        directly inside it; empty: any folder). A table of unit_requires gives one per key; a
        kind that says which folders are its units (``lmdb``) gives its own."""
        fixed = UNIT_RULES[self.units].folder_rules
        if fixed:
            return fixed
        if isinstance(self.unit_requires, dict):
            return tuple((glob, tuple(req)) for glob, req in self.unit_requires.items())
        return ((self.unit_glob, tuple(self.unit_requires)),)

    def unit_key(self, rel: str) -> str:
        """The key of the unit that a path (relative to the root) belongs or would belong to:
        its folder right under the root (``dir`` units), its revision (``hf_revision``), else
        its file name through ``group`` (``{fp}.tmp.wav``, ``{fp}.wav`` and ``{fp}.wav.lock``
        are one unit, ``{fp}``), in its folder (:mod:`janitor.config.unit_rules`)."""
        return UNIT_RULES[self.units].key(self.group, rel)

    def is_unit_folder(self, name: str, entries: Callable[[], Iterable[str]]) -> bool:
        """Whether a folder ``name`` right under the root is one of this tree's units;
        ``entries`` lists the names inside it (asked only when a rule needs them)."""
        inside: list[str] | None = None
        for glob, requires in self.unit_rules():
            if not fnmatch.fnmatchcase(name, glob):
                continue
            if not requires:
                return True
            if inside is None:
                inside = list(entries())
            if any(fnmatch.fnmatchcase(n, pat) for n in inside for pat in requires):
                return True
        return False

    def is_unit_file(self, name: str) -> bool:
        """Whether a file ``name`` right under the root is a unit on its own (``unit_files``)."""
        return any(fnmatch.fnmatchcase(name, glob) for glob in self.unit_files)

    def manages(self, rel: str) -> bool:
        """Whether ``include`` and ``exclude`` leave path ``rel`` (relative to the root; for
        ``units = "dir"``, a unit folder's name) to this tree."""
        include, exclude = glob_regex(self.include), glob_regex(self.exclude)
        if include is not None and not include.match(rel):
            return False
        return exclude is None or not exclude.match(rel)

    def quota_bytes(self, volume_total: int) -> int | None:
        """The quota in bytes (a percentage is of the volume), or None."""
        return None if self.quota is None else self.quota.resolve(volume_total)

    def low_bytes(self, volume_total: int) -> int | None:
        """The low watermark in bytes (a percentage is of the quota), or None without a quota."""
        quota = self.quota_bytes(volume_total)
        return None if quota is None else self.low_watermark.resolve(quota)


class Policy(_Model):
    """A whole policy file: volume defaults, per-volume overrides and the trees."""

    volume: VolumePolicy = VolumePolicy()
    volumes: dict[str, VolumePolicy] = Field(default_factory=dict)
    trees: dict[str, TreePolicy] = Field(default_factory=dict)
    source: Path | None = None

    @model_validator(mode="before")
    @classmethod
    def _name_trees(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("trees"), dict):
            trees = {}
            for name, body in data["trees"].items():
                if isinstance(body, dict):
                    body = {**body, "name": name}
                trees[name] = body
            data = {**data, "trees": trees}
        return data

    @field_validator("volumes")
    @classmethod
    def _volume_paths(cls, value: dict[str, VolumePolicy]) -> dict[str, VolumePolicy]:
        missing = [name for name, vol in value.items() if vol.path is None]
        if missing:
            why = f"missing; wanted {WANTED['volumes.path']}"
            raise_all("volumes", [problem((name, "path"), why) for name in missing])
        return value

    @field_validator("trees", mode="wrap")
    @classmethod
    def _check_trees(
        cls, value: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo
    ) -> dict[str, TreePolicy]:
        """Each tree's problems, and those between the trees that are valid, all at once.

        A tree with a bad key still has its name checked and the other trees their overlaps,
        so one run of ``janitor policy validate`` lists everything there is to fix.
        """
        if not isinstance(value, dict):
            return handler(value)  # type: ignore[no-any-return]  # pydantic says: not a table
        problems = [
            problem((name,), "a tree's name may hold only letters, digits, _ . -")
            for name in value
            if not _NAME_RE.match(name)
        ]
        trees: dict[str, TreePolicy] = {}
        try:
            trees = handler(value)
            roots = {name: tree.path for name, tree in trees.items()}
        except ValidationError as exc:
            errors = exc.errors(include_url=False)
            problems += [again(err) for err in errors]
            # Overlaps are checked among the trees whose path is good (their table may not be).
            bad_paths = {err["loc"][0] for err in errors if err["loc"][1:2] in (("path",), ())}
            roots = _roots({n: b for n, b in value.items() if n not in bad_paths})
        excludes = {n: _excludes(b) for n, b in value.items() if isinstance(b, dict)}
        problems += _overlaps(roots, excludes)
        problems += _holding_state(roots, (info.context or {}).get("state_dir"))
        if problems:
            # In the file's order, each tree's problems together (a stable sort).
            order = {name: i for i, name in enumerate(value)}
            problems.sort(key=lambda p: order.get(p["loc"][0], -1) if p["loc"] else -1)
            raise_all("trees", problems)
        return trees

    def tree(self, name: str) -> TreePolicy:
        """The named tree; UnknownTree with the list of valid names otherwise."""
        try:
            return self.trees[name]
        except KeyError:
            known = ", ".join(sorted(self.trees)) or "none"
            raise UnknownTree(
                f"unknown tree {name!r}; the policy {self.source or ''} defines: {known}"
            ) from None

    def volume_policy(self, device: int) -> VolumePolicy:
        """The [volume] defaults with the [volumes.X] override whose path is on ``device``."""
        for vol in self.volumes.values():
            assert vol.path is not None
            try:
                if _device_of(vol.path) == device:
                    return self.volume.merged(vol)
            except OSError:
                continue
        return self.volume


def _device_of(path: Path) -> int:
    from janitor.host.space import device_of

    return device_of(path)


def trees_by_device(trees: Iterable[TreePolicy]) -> dict[int, list[TreePolicy]]:
    """The trees grouped by the volume their root is on (its ``st_dev``), each group in the
    order given. A root not created yet is on the volume of its nearest existing folder; one
    that cannot be stat'ed at all is left out, until it can be."""
    out: dict[int, list[TreePolicy]] = {}
    for tree in trees:
        try:
            out.setdefault(_device_of(tree.path), []).append(tree)
        except OSError:
            continue
    return out


@dataclass(frozen=True, slots=True)
class InTree:
    """A path inside a tree: the tree, and the path as it records it (under the root as the
    policy spells it, whatever symlinks led there: what a scan of the tree sees)."""

    tree: TreePolicy
    path: str

    @property
    def name(self) -> str:
        """The tree's name."""
        return self.tree.name


def tree_holding(trees: Iterable[TreePolicy], path: str | os.PathLike[str]) -> InTree | None:
    """The tree whose root holds ``path`` (below it: a root is no path of its tree), or None.

    Symlinks are resolved for the test only (``/tmp`` and ``/private/tmp`` on macOS are one
    folder), so a symlink inside a tree pointing out of it leads out of it. Where roots nest
    (a tree inside a folder another one leaves out with ``exclude``), the innermost holds it.
    A path with a NUL byte is in no tree.
    """
    text = os.fsdecode(path)
    if "\0" in text:
        return None
    # Joined, not normalised, before symlinks are resolved: ``link/..`` is where the kernel
    # goes (the parent of link's target), not the folder ``link`` is in.
    real = os.path.realpath(os.path.join(os.getcwd(), text))
    best: tuple[TreePolicy, str] | None = None
    for tree in trees:
        root = os.path.realpath(tree.path)
        if real.startswith(root.rstrip("/") + "/") and (best is None or len(root) > len(best[1])):
            best = (tree, root)
    if best is None:
        return None
    tree, root = best
    base = os.path.normpath(os.path.abspath(tree.path))
    return InTree(tree, os.path.join(base, os.path.relpath(real, root)))


def _roots(bodies: dict[str, Any]) -> dict[str, Path]:
    """The roots of trees whose path validated, though another key of theirs may not have."""
    roots = {}
    for name, body in bodies.items():
        try:
            roots[name] = expand_path(body["path"])
        except (KeyError, TypeError, ValueError):
            continue  # not a table, or no path: reported already, and nothing to compare
    return roots


def _excludes(body: dict[str, Any]) -> tuple[str, ...]:
    raw = body.get("exclude", ())
    return tuple(p for p in raw if isinstance(p, str)) if isinstance(raw, list | tuple) else ()


def _overlaps(
    roots: dict[str, Path], excludes: dict[str, tuple[str, ...]] | None = None
) -> list[InitErrorDetails]:
    """A problem for each tree whose root is another's, or inside another's, unless that
    other tree leaves it out with an ``exclude`` glob (``"jobs/*"``: the state folder's logs
    beside its staging folder): then no file is judged by both."""
    ordered = sorted((path, name) for name, path in roots.items())
    excludes = excludes or {}
    problems = []
    for j, (b, bn) in enumerate(ordered):
        # Sorted, so the roots that could hold b come before it; the nearest one is named.
        for a, an in reversed(ordered[:j]):
            if a != b and b.is_relative_to(a) and _left_out(b.relative_to(a), excludes.get(an)):
                continue
            if a == b or b.is_relative_to(a):
                where = "the same folder as" if a == b else "inside"
                why = f"{where} the root of trees.{key_part(an)} ({a}); trees must not overlap"
                problems.append(problem((bn, "path"), why, str(b)))
                break
    return problems


def _left_out(rel: Path, patterns: tuple[str, ...] | None) -> bool:
    """True when an exclude glob of the outer tree covers everything below ``rel``."""
    probe = f"{rel.as_posix()}/x"
    return any(fnmatch.fnmatchcase(probe, p) for p in patterns or ())


def _holding_state(roots: dict[str, Path], state_dir: Path | None) -> list[InitErrorDetails]:
    """A problem for each tree that holds the janitor's state dir: a sweep could delete it."""
    if state_dir is None:
        return []
    return [
        problem(
            (name, "path"),
            f"holds the janitor's state dir {state_dir}; "
            "choose another root or move JANITOR_STATE_DIR",
            str(root),
        )
        for name, root in roots.items()
        if state_dir == root or state_dir.is_relative_to(root)
    ]


#: The keys each table takes, for the words of an unknown one.
_FIELDS = Fields(
    tree=tuple(k for k in TreePolicy.model_fields if k != "name"),
    volume=tuple(VolumePolicy.model_fields),
)


def load_policy(path: Path, *, state_dir: Path | None = None, origin: str | None = None) -> Policy:
    """Read and validate a policy file; PolicyError names the file and lists every problem.

    ``state_dir``: a tree that holds it is refused, so a sweep can never delete the ledger.
    ``origin``: what named the file when it was not named directly (``JANITOR_POLICY``, a
    config file: :attr:`janitor.config.settings.Settings.policy_origin`), so a missing file's
    error says what to change there, and only there.
    """
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise read_error(path, exc, origin) from None
    state = None if state_dir is None else Path(os.path.normpath(os.path.abspath(state_dir)))
    try:
        return Policy.model_validate({**data, "source": path}, context={"state_dir": state})
    except ValidationError as exc:
        raise invalid(path, exc, data, _FIELDS) from None
