"""A managed volume: a tmpfs with one cache tree ``t`` and a policy that names it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests._fixtures.space import free_of, total_of

__all__ = ["Volume", "managed_volume"]


@dataclass
class Volume:
    """A tmpfs with one managed cache tree ``t`` (``mount/t``) and a policy that names it."""

    mount: Path
    tree: Path
    policy: Path
    floor_spec: str
    tree_name: str = "t"
    _janitors: list[Any] = field(default_factory=list)

    def janitor(self) -> Any:
        """A ``Janitor`` on this volume's policy and the isolated state dir."""
        from janitor import Janitor

        jan = Janitor.from_settings(policy=self.policy)
        self._janitors.append(jan)
        return jan

    def free(self) -> int:
        """``f_bavail * f_frsize`` of the tmpfs, read now."""
        return free_of(self.mount)

    def total(self) -> int:
        """``f_blocks * f_frsize`` of the tmpfs."""
        return total_of(self.mount)


@pytest.fixture
def managed_volume(
    tmpfs: Callable[..., Path], write_policy: Callable[..., Path]
) -> Iterator[Callable[..., Volume]]:
    """``managed_volume(size="64m", floor="8MiB", quota="32MiB") -> Volume``.

    Mounts a tmpfs, makes the tree folder ``t`` on it, and writes (and activates) a policy with
    that floor and one cache tree ``t``. The ledger stays in the isolated state dir, off the
    tmpfs, so the tmpfs's free space only changes when the test writes to it.
    """
    made: list[Volume] = []

    def make(size: str = "64m", floor: str = "8MiB", quota: str = "32MiB") -> Volume:
        mount = tmpfs(size)
        tree = mount / "t"
        tree.mkdir()
        policy = write_policy(
            {"t": {"role": "cache", "path": str(tree), "quota": quota}}, floor=floor
        )
        vol = Volume(mount=mount, tree=tree, policy=policy, floor_spec=floor)
        made.append(vol)
        return vol

    yield make
    for vol in made:
        for jan in vol._janitors:
            jan.ledger.close()
