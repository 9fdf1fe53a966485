"""The volumes the daemon looks after: those holding a tree of the policy."""

from __future__ import annotations

from pathlib import Path

from janitor.config.policy import Policy
from janitor.host.space import device_of

__all__ = ["volume_trees"]


def volume_trees(policy: Policy) -> dict[int, list[Path]]:
    """Each managed volume's device and the roots of its trees, in policy order (a root that
    cannot be stat'ed is left out until it can)."""
    out: dict[int, list[Path]] = {}
    for tree in policy.trees.values():
        try:
            out.setdefault(device_of(tree.path), []).append(tree.path)
        except OSError:
            continue
    return out
