"""Fixtures of the cleanup layer's tests: a ``Janitor`` on a fresh policy (``jan_for``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from janitor.core import Janitor

#: ``jan_for({"name": tree_table, ...}, floor=..., volume=...) -> Janitor``.
JanFor = Callable[..., Janitor]


@pytest.fixture
def jan_for(write_policy: Callable[..., Path]) -> Iterator[JanFor]:
    """``jan_for({"name": tree_table, ...}, floor=..., volume=...) -> Janitor`` on a fresh
    policy (isolated state; floor 1 MiB unless given); each ledger closed at the end."""
    made: list[Janitor] = []

    def make(trees: dict[str, Any], **kwargs: Any) -> Janitor:
        kwargs.setdefault("floor", "1MiB")
        jan = Janitor.from_settings(policy=write_policy(trees, **kwargs))
        made.append(jan)
        return jan

    yield make
    for jan in made:
        jan.ledger.close()
