"""A glimpse of the policy in force before it is loaded: its trees' roots, from the raw file.

``janitor space`` starts measuring folders while it is still importing the rest of the janitor
(``janitor.cli.early``); it needs the trees' paths for that, before pydantic is even imported.
This finds the policy file as ``Settings`` does (``--policy``, ``JANITOR_POLICY``, the config
file's ``policy``, ``policy.toml`` in the config dir, the shipped one; the state and runtime
folders likewise, for the daemon's report: ``janitor.cli.quick``) and reads each tree's
path, role, units and whether it has include/exclude globs or a max_age. Nothing is validated:
whatever this says is only a guess, used if it matches what the loaded policy says. Any
problem gives None.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from janitor.config.paths import (
    default_config_path,
    default_runtime_dir,
    default_state_dir,
    expand_path,
    shipped_policy_path,
)

__all__ = ["RawTree", "folder_setting", "policy_file", "raw_trees"]


@dataclass(frozen=True, slots=True)
class RawTree:
    """A tree as the policy file writes it (unvalidated)."""

    name: str
    path: str
    role: str
    units: str
    selects: bool  # include or exclude globs
    max_age: bool


def _expanded(value: str) -> Path:
    return Path(os.path.expandvars(os.path.expanduser(value)))


def _config(config: str | None) -> dict[str, Any]:
    """The config file's values (none without one), found as ``Settings.load`` finds it."""
    explicit = config or os.environ.get("JANITOR_CONFIG") or None
    path = Path(os.path.expanduser(explicit)) if explicit else default_config_path()
    if not path.is_file():
        return {}
    with open(path, "rb") as fh:
        return tomllib.load(fh)


def policy_file(config: str | None = None, policy: str | None = None) -> Path:
    """The policy file ``Settings.load(config, policy=policy).policy_path`` names, found
    without loading the settings."""
    chosen = policy or os.environ.get("JANITOR_POLICY")
    if chosen:
        return _expanded(chosen)
    named = _config(config).get("policy")
    if isinstance(named, str) and named:
        return _expanded(named)
    user = default_config_path().parent / "policy.toml"
    return user if user.is_file() else shipped_policy_path()


def folder_setting(name: str, config: str | None = None) -> Path:
    """``state_dir`` or ``runtime_dir`` as ``Settings`` resolves it: ``JANITOR_STATE_DIR``,
    the config file's key, the default."""
    value = os.environ.get(f"JANITOR_{name.upper()}") or _config(config).get(name)
    if isinstance(value, str) and value:
        return _expanded(value)
    return default_state_dir() if name == "state_dir" else default_runtime_dir()


def raw_trees(config: str | None = None, policy: str | None = None) -> list[RawTree] | None:
    """The trees of the policy in force, in the file's order, unvalidated; None when the
    file cannot be read or a tree is not plain (Settings and the policy will say why)."""
    try:
        with open(policy_file(config, policy), "rb") as fh:
            data = tomllib.load(fh)
        trees = data.get("trees", {})
        if not isinstance(trees, dict):
            return None
        return [_tree(name, body) for name, body in trees.items()]
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None


def _tree(name: str, body: Any) -> RawTree:
    path = body["path"]
    if not isinstance(path, str):
        raise TypeError("path")
    return RawTree(
        name,
        os.path.normpath(str(expand_path(path))),
        str(body.get("role", "")),
        str(body.get("units", "file")),
        bool(body.get("include") or body.get("exclude")),
        body.get("max_age") is not None,
    )
