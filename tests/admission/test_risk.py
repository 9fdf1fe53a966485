"""janitor.admission.risk: the forecast from free-space samples, the level assessment, the damping.

Pure functions and a small state machine, so every input here is explicit: sample times and
free-space values are made up, and ``LevelTracker`` is fed ``now`` values by hand (no clock).
"""

from __future__ import annotations

import math

import pytest

from janitor.admission.risk import LevelTracker, fastest_fill, finite, forecast
from janitor.admission.volume import Forecast, Reading, assess
from tests._fixtures.space import MiB


def steady(
    rate: float, *, n: int = 31, step: float = 2.0, start: int = 1000 * MiB, t0: float = 0.0
):
    """``n`` samples ``step`` seconds apart of a volume losing ``rate`` bytes per second."""
    return [(t0 + i * step, int(start - rate * i * step)) for i in range(n)]


# -- fastest_fill ---------------------------------------------------------------------------------


def test_fastest_fill_is_the_steepest_fall_between_two_samples_which_a_fit_smooths_away() -> None:
    # Ten minutes of a calm volume, with one burst of 40 MiB between two samples 2 s apart.
    samples = steady(0.0, n=300)
    samples[151:] = [(tt, ff - 40 * MiB) for tt, ff in samples[151:]]
    assert fastest_fill(samples) == pytest.approx(20 * MiB)
    assert forecast(samples, 0).fill_rate < 1 * MiB  # the fit hardly sees it


def test_fastest_fill_is_zero_for_a_volume_that_never_fell() -> None:
    assert fastest_fill([]) == 0.0
    assert fastest_fill([(0.0, 5 * MiB)]) == 0.0
    assert fastest_fill([(0.0, 5 * MiB), (2.0, 9 * MiB), (4.0, 9 * MiB)]) == 0.0  # it only rose
    assert fastest_fill([(0.0, 9 * MiB), (0.0, 1 * MiB)]) == 0.0  # two samples at one instant


# -- forecast -------------------------------------------------------------------------------------


def test_steady_fill_gives_its_rate_and_the_eta_to_floor_and_full() -> None:
    rate = 1 * MiB  # 1 MiB/s, sampled every 2 s for a minute
    samples = steady(rate)
    floor = 100 * MiB
    fc = forecast(samples, floor)
    free_now = samples[-1][1]
    assert fc.samples == len(samples)
    assert fc.fill_rate == pytest.approx(rate, rel=1e-6)
    assert fc.eta_full == pytest.approx(free_now / rate, rel=1e-6)
    assert fc.eta_floor == pytest.approx((free_now - floor) / rate, rel=1e-6)
    assert fc.confidence == 1.0  # many samples over a long span on a perfect line


def test_the_rate_follows_the_recent_samples_more_than_old_ones() -> None:
    # 10 minutes at 1 MiB/s, then the last minute at 4 MiB/s: the weighted fit (half-life 60 s)
    # leans further towards 4 than an (almost) unweighted fit of the same samples.
    old = steady(1 * MiB, n=300, step=2.0)
    t_last, free_last = old[-1]
    new = [(t_last + 2.0 * i, int(free_last - 4 * MiB * 2.0 * i)) for i in range(1, 31)]
    weighted = forecast(old + new, 0)
    flat = forecast(old + new, 0, half_life=1e12)
    shorter = forecast(old + new, 0, half_life=10.0)
    assert 1 * MiB < flat.fill_rate < weighted.fill_rate < shorter.fill_rate <= 4 * MiB


@pytest.mark.parametrize("samples", [[], [(0.0, 100 * MiB)]], ids=["none", "one"])
def test_too_few_samples_give_zero_confidence_and_no_eta(samples) -> None:
    fc = forecast(samples, 10 * MiB)
    assert fc == Forecast(0.0, None, None, 0.0, len(samples))


def test_samples_at_one_instant_give_zero_confidence() -> None:
    fc = forecast([(5.0, 100 * MiB), (5.0, 90 * MiB), (5.0, 80 * MiB)], 10 * MiB)
    assert fc.confidence == 0.0
    assert fc.eta_floor is None and fc.eta_full is None


def test_confidence_grows_with_samples_and_span() -> None:
    floor = 0
    two = forecast(steady(MiB, n=2, step=2.0), floor)
    four = forecast(steady(MiB, n=4, step=2.0), floor)
    many = forecast(steady(MiB, n=20, step=2.0), floor)
    assert 0 < two.confidence < four.confidence < many.confidence == 1.0
    # A short span lowers confidence even with many samples: 20 samples over 1.9 s.
    short = forecast(steady(MiB, n=20, step=0.1), floor)
    assert short.confidence < many.confidence


def test_a_noisy_series_has_lower_confidence_than_a_clean_one() -> None:
    clean = steady(MiB, n=31)
    noisy = [(t, f + (40 * MiB if i % 2 else -40 * MiB)) for i, (t, f) in enumerate(clean)]
    assert forecast(noisy, 0).confidence < forecast(clean, 0).confidence


def test_freeing_space_has_a_negative_rate_and_no_eta() -> None:
    fc = forecast(steady(-2 * MiB), 10 * MiB)
    assert fc.fill_rate == pytest.approx(-2 * MiB, rel=1e-6)
    assert fc.eta_floor is None and fc.eta_full is None


def test_a_flat_series_has_no_rate_and_no_eta() -> None:
    fc = forecast([(float(t), 500 * MiB) for t in range(0, 60, 2)], 10 * MiB)
    assert fc.fill_rate == 0.0
    assert fc.eta_floor is None and fc.eta_full is None


def test_already_below_the_floor_the_eta_is_zero_not_negative() -> None:
    samples = steady(MiB, start=130 * MiB)  # ends at 70 MiB, under a 100 MiB floor
    fc = forecast(samples, 100 * MiB)
    assert fc.eta_floor == 0.0
    assert fc.eta_full == pytest.approx(samples[-1][1] / MiB, rel=1e-6)


# -- assess ---------------------------------------------------------------------------------------


FLOOR, LOW = 100 * MiB, 200 * MiB


def _fc(eta_floor: float | None, confidence: float) -> Forecast:
    return Forecast(MiB, eta_floor, None if eta_floor is None else eta_floor * 2, confidence, 30)


def test_below_the_floor_is_critical() -> None:
    r = assess(FLOOR - 1, FLOOR, LOW, None, horizon=1800)
    assert r.level == "critical" and "floor" in r.reason


def test_at_the_floor_is_not_yet_critical() -> None:
    assert assess(FLOOR, FLOOR, LOW, None, horizon=1800).level == "warn"


def test_below_free_low_is_warn() -> None:
    r = assess(LOW - 1, FLOOR, LOW, None, horizon=1800)
    assert r.level == "warn" and "free_low" in r.reason


def test_at_free_low_without_a_forecast_is_ok() -> None:
    assert assess(LOW, FLOOR, LOW, None, horizon=1800) == Reading("ok", "")


def test_a_confident_forecast_reaching_the_floor_within_the_horizon_is_warn() -> None:
    r = assess(10 * LOW, FLOOR, LOW, _fc(600.0, 0.9), horizon=1800)
    assert r.level == "warn" and r.reason == "forecast reaches the floor in 10 min"


@pytest.mark.parametrize(
    ("fc", "why"),
    [
        (_fc(600.0, 0.2), "low confidence"),
        (_fc(3600.0, 0.9), "beyond the horizon"),
        (_fc(None, 1.0), "not falling"),
        (None, "no forecast"),
    ],
)
def test_forecasts_that_do_not_warn(fc: Forecast | None, why: str) -> None:
    assert assess(10 * LOW, FLOOR, LOW, fc, horizon=1800).level == "ok", why


def test_the_minimum_confidence_is_a_parameter() -> None:
    fc = _fc(600.0, 0.3)
    assert assess(10 * LOW, FLOOR, LOW, fc, horizon=1800, min_confidence=0.25).level == "warn"


def test_a_forecast_from_real_samples_feeds_assess() -> None:
    # 1 MiB/s with 300 MiB above a 100 MiB floor: the floor is 200 s away, inside 30 min.
    samples = steady(MiB, start=330 * MiB, n=16)
    fc = forecast(samples, FLOOR)
    assert fc.eta_floor is not None and fc.eta_floor < 1800
    assert assess(samples[-1][1], FLOOR, LOW, fc, horizon=1800).level == "warn"
    assert assess(samples[-1][1], FLOOR, LOW, fc, horizon=60).level == "ok"


# -- LevelTracker ---------------------------------------------------------------------------------

OK = Reading("ok", "")
WARN = Reading("warn", "free space is below free_low")
CRIT = Reading("critical", "free space is below the floor")


def test_starts_ok_and_an_equal_reading_changes_nothing() -> None:
    t = LevelTracker(settle_s=10)
    assert t.level == "ok"
    assert t.update(OK, 0.0) is False
    assert t.level == "ok"


def test_worse_takes_effect_at_once() -> None:
    t = LevelTracker(settle_s=10)
    assert t.update(WARN, 0.0) is True
    assert (t.level, t.reason) == ("warn", WARN.reason)
    assert t.update(CRIT, 0.1) is True
    assert (t.level, t.reason) == ("critical", CRIT.reason)
    assert t.update(CRIT, 0.2) is False


def test_ok_to_critical_skips_warn() -> None:
    t = LevelTracker(settle_s=10)
    assert t.update(CRIT, 5.0) is True
    assert t.level == "critical"


def test_better_only_after_settle_s() -> None:
    t = LevelTracker(settle_s=10)
    t.update(CRIT, 0.0)
    assert t.update(OK, 100.0) is False  # the first better reading starts the clock
    assert t.update(OK, 105.0) is False
    assert t.update(OK, 109.999) is False
    assert t.level == "critical"
    assert t.update(OK, 110.0) is True
    assert (t.level, t.reason) == ("ok", "")
    assert t.update(OK, 111.0) is False


def test_a_worse_or_equal_reading_restarts_the_settle_clock() -> None:
    t = LevelTracker(settle_s=10)
    t.update(CRIT, 0.0)
    t.update(OK, 1.0)
    t.update(CRIT, 8.0)  # flaps back: the calm so far does not count
    assert t.update(OK, 12.0) is False  # 11 s after the first calm reading, but only 0 since 8
    assert t.update(OK, 21.0) is False
    assert t.level == "critical"
    assert t.update(OK, 22.0) is True
    assert t.level == "ok"


def test_a_hovering_volume_does_not_flap() -> None:
    t = LevelTracker(settle_s=10)
    changes = 0
    for i in range(100):  # warn and ok alternate every second for 100 s
        changes += t.update(WARN if i % 2 == 0 else OK, float(i))
    assert changes == 1  # only the first turn to warn
    assert t.level == "warn"


def test_better_by_one_step_is_damped_too() -> None:
    t = LevelTracker(settle_s=5)
    t.update(CRIT, 0.0)
    assert t.update(WARN, 1.0) is False
    assert t.update(WARN, 6.0) is True
    assert t.level == "warn"
    assert t.update(OK, 7.0) is False
    assert t.update(OK, 12.0) is True
    assert t.level == "ok"


def test_improvement_takes_the_latest_reading() -> None:
    # critical, then warn for a while, then ok: the level published after settle is the
    # reading at that moment, not the first better one.
    t = LevelTracker(settle_s=5)
    t.update(CRIT, 0.0)
    t.update(WARN, 1.0)
    assert t.update(OK, 6.0) is True
    assert t.level == "ok"


def test_zero_settle_means_no_damping() -> None:
    t = LevelTracker(settle_s=0)
    t.update(CRIT, 0.0)
    assert t.update(OK, 0.0) is True
    assert t.level == "ok"


# -- finite ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("x", "out"),
    [(None, None), (math.inf, None), (-math.inf, None), (math.nan, None), (1.5, 1.5), (0.0, 0.0)],
)
def test_finite(x, out) -> None:
    assert finite(x) == out
