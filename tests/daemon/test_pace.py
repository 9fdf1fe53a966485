"""janitor.daemon.pace: the sampling interval, closer at once and calmer only after settle_s.

A pure state machine: every ``now`` is given by hand (no clock).
"""

from __future__ import annotations

from janitor.daemon.pace import SamplePace


def test_closer_at_once_and_calm_again_only_after_settle_s_with_no_reason() -> None:
    pace = SamplePace(calm_s=2.0, close_s=0.25, settle_s=10.0)
    assert pace.every == 2.0
    assert pace.update(None, 0.0) is None  # calm stays calm
    assert pace.update("a volume is low", 1.0) == 0.25  # at once
    assert pace.update("a volume is low", 1.25) is None
    assert pace.update(None, 1.5) is None  # the reason went: not yet calm
    assert pace.update(None, 11.0) is None  # 9.5 s calm
    assert pace.every == 0.25
    assert pace.update(None, 11.5) == 2.0  # 10 s calm
    assert pace.every == 2.0


def test_a_volume_that_hovers_at_the_edge_keeps_one_pace() -> None:
    pace = SamplePace(calm_s=2.0, close_s=0.25, settle_s=10.0)
    changes = [pace.update("a volume is low" if i % 2 else None, i * 0.25) for i in range(1, 200)]
    assert [c for c in changes if c is not None] == [0.25]  # one switch, not a hundred


def test_the_close_interval_is_never_longer_than_the_calm_one() -> None:
    pace = SamplePace(calm_s=1.0, close_s=5.0, settle_s=0.0)
    assert pace.update("a volume is low", 0.0) is None  # 1 s is already as close as it gets
    assert pace.every == 1.0
