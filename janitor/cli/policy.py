"""The ``policy`` group: ``show`` the policy in force, ``validate`` a policy file."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from janitor.cli.common import G, JsonOpt, open_janitor, print_json, say

if TYPE_CHECKING:
    from janitor.core import Janitor

__all__ = ["policy_show", "policy_validate"]


def _policy_dict(jan: Janitor) -> dict[str, Any]:
    """The JSON shape of `janitor policy show --json`: each volume's numbers, each tree's."""
    trees: dict[str, Any] = {}
    volumes: dict[int, dict[str, Any]] = {}
    for name, vol in jan.volumes().items():
        t = jan.policy.trees[name]
        volumes[vol.device] = {
            "mount": vol.mount,
            "total": vol.total,
            "floor": vol.floor,
            "free_low": vol.free_low,
            "free_target": vol.free_target,
        }
        trees[name] = {
            **t.model_dump(mode="json", exclude={"name"}),
            "quota_bytes": t.quota_bytes(vol.total),
            "low_watermark_bytes": t.low_bytes(vol.total),
            "device": vol.device,
        }
    return {"source": str(jan.policy.source), "volumes": list(volumes.values()), "trees": trees}


def policy_show(as_json: JsonOpt = False) -> None:
    """The policy in force, with paths expanded and sizes resolved for each volume."""
    from janitor.sizes import format_duration, format_size

    data = _policy_dict(open_janitor())
    if as_json:
        print_json(data)
        return
    print(f"policy {data['source']}")
    for v in data["volumes"]:
        print(
            f"volume {v['mount']}: floor {format_size(v['floor'])}, free_low "
            f"{format_size(v['free_low'])}, free_target {format_size(v['free_target'])}"
        )
    for name, t in data["trees"].items():
        quota = format_size(t["quota_bytes"]) if t["quota_bytes"] is not None else "none"
        print(
            f"tree {name}: {t['role']} at {t['path']}, quota {quota}, "
            f"min_age {format_duration(t['min_age'])}"
            + (f", orphan_age {format_duration(t['orphan_age'])}" if t["role"] == "scratch" else "")
        )


def policy_validate(
    file: Annotated[Path, typer.Argument(help="Policy file to check.")],
) -> None:
    """Check a policy file; exit 0 if it loads, 2 with every problem (key, value, wanted) if not."""
    from janitor.config.policy import load_policy
    from janitor.config.settings import Settings

    # The root --policy is not read: the file to check is the argument.
    s = Settings.load(G.config)
    pol = load_policy(file, state_dir=s.state_dir)
    from janitor.humanize import plural

    say(f"{file}: ok ({plural(len(pol.trees), 'tree')}: {', '.join(pol.trees) or 'none'})")
