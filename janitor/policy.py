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

import os
import re
import tempfile
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from janitor.errors import ConfigError, PolicyError, UnknownTree
from janitor.sizes import format_size, parse_duration, parse_size

__all__ = [
    "FORBIDDEN_ROOTS",
    "Policy",
    "SizeSpec",
    "TreePolicy",
    "VolumePolicy",
    "expand_path",
    "load_policy",
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

_PLACEHOLDER_RE = re.compile(r"(?<!\$)\{([a-z_]+)\}")
_ENV_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
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
        """``"5%"`` or anything :func:`janitor.sizes.parse_size` takes (zero allowed)."""
        if isinstance(value, SizeSpec):
            return value
        if isinstance(value, str) and value.strip().endswith("%"):
            try:
                pct = float(value.strip()[:-1])
            except ValueError:
                raise ValueError(f"{value!r} is not a percentage") from None
            if not 0 <= pct <= 100:
                raise ValueError(f"{value!r} must be between 0% and 100%")
            return cls(percent=pct)
        try:
            return cls(nbytes=parse_size(value, allow_zero=True))
        except ConfigError as exc:
            raise ValueError(str(exc)) from None


def _duration(value: Any) -> float:
    try:
        return parse_duration(value)
    except ConfigError as exc:
        raise ValueError(str(exc)) from None


Size = Annotated[SizeSpec, BeforeValidator(SizeSpec.parse)]
Duration = Annotated[float, BeforeValidator(_duration)]


def expand_path(raw: str) -> Path:
    """Expand ``${VAR:-fallback}``, ``{user_data_dir}``-style placeholders and ``~``; absolute.

    ``"${BATCHALIGN_MEDIA_CACHE_DIR:-{user_data_dir}/batchalign3/media_cache}"`` is
    ``~/.local/share/batchalign3/media_cache`` on Linux when the variable is unset, and
    ``~/Library/Application Support/batchalign3/media_cache`` on macOS.
    """

    def env(m: re.Match[str]) -> str:
        name, fallback = m.group(1), m.group(2)
        value = os.environ.get(name)
        if value:
            return value
        if fallback is None:
            raise ValueError(f"environment variable {name} is not set (write ${{{name}:-...}})")
        return fallback

    # Placeholders first, so a fallback may use them; a variable's value is taken verbatim.
    text = _PLACEHOLDER_RE.sub(_placeholder, raw)
    text = _ENV_RE.sub(env, text)
    path = Path(os.path.expanduser(text))
    if not path.is_absolute():
        raise ValueError(f"path {raw!r} must be absolute (or start with ~ or a placeholder)")
    return Path(os.path.normpath(path))


def _placeholder(m: re.Match[str]) -> str:
    import platformdirs

    name = m.group(1)
    table: dict[str, Callable[[], str]] = {
        "user_data_dir": platformdirs.user_data_dir,
        "user_cache_dir": platformdirs.user_cache_dir,
        "user_config_dir": platformdirs.user_config_dir,
        "tmp": tempfile.gettempdir,
        "home": lambda: str(Path.home()),
    }
    if name not in table:
        raise ValueError(f"unknown placeholder {{{name}}}; use one of {', '.join(sorted(table))}")
    return str(table[name]())


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class VolumePolicy(_Model):
    """Numbers shared by every tree on one filesystem.

    Defaults: floor = min(10 GiB, 10 % of the volume); free_low = 2 x floor;
    free_target = 3 x floor (each capped at the volume's size).
    """

    path: Path | None = Field(default=None, description="Any path on the volume (in [volumes.X]).")
    floor: Size | None = None
    free_low: Size | None = None
    free_target: Size | None = None
    ballast: Size | None = None
    horizon: Duration = 1800.0

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


class TreePolicy(_Model):
    """One managed folder and the rules for what in it may be deleted, and when."""

    name: str = ""
    role: Literal["cache", "scratch"]
    path: Path
    quota: Size | None = None
    low_watermark: Size = SizeSpec(percent=90.0)
    min_age: Duration = 300.0
    max_age: Duration | None = None
    orphan_age: Duration = 86400.0
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    units: Literal["file", "dir"] = "file"
    unit_glob: str = "*"
    unit_requires: tuple[str, ...] = ()
    group: str | None = Field(
        default=None, description="Regex with a named group 'key': matching files form one unit."
    )
    lock: str | None = Field(
        default=None, description="Lock file of a unit, e.g. '{key}.wav.lock'; held = in use."
    )

    @field_validator("path", mode="before")
    @classmethod
    def _expand(cls, value: Any) -> Any:
        return expand_path(value) if isinstance(value, str) else value

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

    @model_validator(mode="after")
    def _consistent(self) -> TreePolicy:
        if self.quota is not None and self.quota.percent is None and self.quota.nbytes == 0:
            raise ValueError("quota must be positive (leave it out for no quota)")
        low, quota = self.low_watermark.nbytes, self.quota.nbytes if self.quota else None
        if low is not None and quota is not None and low > quota:
            raise ValueError("low_watermark must not exceed quota")
        if self.lock and "{key}" in self.lock and not self.group:
            raise ValueError("lock uses {key} but the tree has no group pattern")
        return self

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

    @model_validator(mode="after")
    def _check(self) -> Policy:
        for name in self.trees:
            if not _NAME_RE.match(name):
                raise ValueError(f"tree name {name!r} may hold only letters, digits, _ . -")
        for name, vol in self.volumes.items():
            if vol.path is None:
                raise ValueError(f"volumes.{name} needs a path on the volume it applies to")
        roots = sorted((t.path, n) for n, t in self.trees.items())
        for (a, an), (b, bn) in pairwise(roots):
            if a == b or b.is_relative_to(a):
                raise ValueError(f"trees {an!r} and {bn!r} overlap ({a} holds {b})")
        return self

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
    from janitor.space import device_of

    return device_of(path)


def load_policy(path: Path, *, state_dir: Path | None = None) -> Policy:
    """Read and validate a policy file; PolicyError names the file, the key and the reason.

    ``state_dir``: a tree that holds it is refused, so a sweep can never delete the ledger.
    """
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError:
        raise PolicyError(
            f"policy file {path} does not exist; pass --policy FILE or set JANITOR_POLICY"
        ) from None
    except IsADirectoryError:
        raise PolicyError(f"policy file {path} is a folder; name a .toml file") from None
    except tomllib.TOMLDecodeError as exc:
        raise PolicyError(f"policy file {path} is not valid TOML: {exc}") from None
    except OSError as exc:
        raise PolicyError(f"policy file {path} cannot be read: {exc.strerror}") from None
    try:
        policy = Policy.model_validate({**data, "source": path})
    except ValidationError as exc:
        raise PolicyError(describe_error(path, exc)) from None
    if state_dir is not None:
        state = Path(os.path.normpath(os.path.abspath(state_dir)))
        for name, tree in policy.trees.items():
            if state == tree.path or state.is_relative_to(tree.path):
                raise PolicyError(
                    f"policy file {path}: key 'trees.{name}.path': {tree.path} holds the "
                    f"janitor's state dir {state}; choose another root or move JANITOR_STATE_DIR"
                )
    return policy


def describe_error(path: Path, exc: ValidationError) -> str:
    """One line: the file, the dotted key and pydantic's reason."""
    err = exc.errors(include_url=False)[0]
    loc = [str(p) for p in err["loc"] if not str(p).startswith("function-")]
    key = ".".join(loc) or "(top level)"
    msg = str(err["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
    if err["type"] == "extra_forbidden":
        msg = "unknown key (check its spelling against the README)"
    elif err["type"] == "missing":
        msg = "required key is missing"
    more = f" (and {len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
    return f"policy file {path}: key {key!r}: {msg}{more}"
