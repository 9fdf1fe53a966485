"""Small TOML policies written for a test (``write_policy``), and the shipped policy's trees."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

__all__ = ["SHIPPED_TREES", "policy_text", "write_policy"]


#: The trees of the shipped policy (policies/batchalign3.toml), by name.
SHIPPED_TREES = frozenset(
    {
        "media_cache",
        "job_tmp",
        "batchalign3_logs",
        "batchalign3_jobs",
        "batchalign_api_jobs",
        "batchalign_cache",
        "hf_hub",
        "stanza",
        "analysis_cache",
    }
)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str | os.PathLike):
        text = os.fspath(value)
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r} as TOML")


def _toml_table(name: str, body: Mapping[str, Any]) -> str:
    lines = [f"[{name}]"]
    lines += [f"{key} = {_toml_value(value)}" for key, value in body.items()]
    return "\n".join(lines) + "\n"


def policy_text(
    trees: Mapping[str, Mapping[str, Any] | str | os.PathLike[str]],
    *,
    floor: str | int | None = "4MiB",
    volume: Mapping[str, Any] | None = None,
) -> str:
    """TOML text of a policy: a ``[volume]`` table and one ``[trees.NAME]`` table per tree.

    A tree given as a plain path is ``role = "cache"`` with ``quota = "10MiB"``, as in the
    issue's minimal example. ``volume`` adds keys to ``[volume]`` (``free_low`` ...).
    """
    vol: dict[str, Any] = {} if floor is None else {"floor": floor}
    vol.update(volume or {})
    parts = [_toml_table("volume", vol)] if vol else []
    for name, spec in trees.items():
        if isinstance(spec, str | os.PathLike):
            body: Mapping[str, Any] = {"role": "cache", "path": os.fspath(spec), "quota": "10MiB"}
        else:
            body = spec
        parts.append(_toml_table(f"trees.{name}", body))
    return "\n".join(parts)


@pytest.fixture
def write_policy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Path]:
    """``write_policy(trees={...}, floor="4MiB", volume=None, name="policy.toml", activate=True)``.

    Writes a small TOML policy under ``tmp_path/policies`` and returns its path. ``trees`` maps a
    tree name to a table (``{"role": "scratch", "path": ..., ...}``) or just a path (a cache with
    a 10MiB quota). With ``activate`` (default) ``JANITOR_POLICY`` points at it, so the CLI and
    ``Janitor.from_settings()`` use it without flags.
    """
    folder = tmp_path / "policies"

    def write(
        trees: Mapping[str, Mapping[str, Any] | str | os.PathLike[str]] | None = None,
        *,
        floor: str | int | None = "4MiB",
        volume: Mapping[str, Any] | None = None,
        name: str = "policy.toml",
        activate: bool = True,
    ) -> Path:
        folder.mkdir(exist_ok=True)
        path = folder / name
        path.write_text(policy_text(trees or {}, floor=floor, volume=volume))
        if activate:
            monkeypatch.setenv("JANITOR_POLICY", str(path))
        return path

    return write
