"""The volumes the daemon looks after: those holding a tree of the policy."""

from __future__ import annotations

from pathlib import Path

from janitor.config.policy import Policy, trees_by_device

__all__ = ["volume_trees"]


def volume_trees(policy: Policy) -> dict[int, list[Path]]:
    """Each managed volume's device and the roots of its trees, in policy order (a root that
    cannot be stat'ed is left out until it can)."""
    return {
        device: [t.path for t in trees]
        for device, trees in trees_by_device(policy.trees.values()).items()
    }
