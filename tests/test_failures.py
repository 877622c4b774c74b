"""Failure draws: the kernel against the reference, closed forms, properties, errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replay.checkpoint.failures import (
    DrawResult,
    FailureStats,
    RecoveryPoints,
    _draw_key,
    _gap_uniform,
    _ref_gap_uniform,
    evaluate_failures,
    reference_evaluate_failures,
    simulate_draws,
    young_daly_interval_s,
)
from replay.checkpoint.failures import _recovery_point as kernel_recovery_point
from replay.checkpoint.failures import _reference_recovery_point as reference_recovery_point
from replay.errors import ConfigError

FAST = settings(
    max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)

P = 100.0
TWO = RecoveryPoints(np.array([30.0, 70.0]), np.array([20.0, 60.0]), np.array([5.0, 7.0]))


def _points(durable: list[float], resume: list[float], cost: list[float]) -> RecoveryPoints:
    return RecoveryPoints(np.array(durable), np.array(resume), np.array(cost))


def _draws(*args: object, **kwargs: object) -> list[DrawResult]:
    """The kernel's per-draw outcomes, as the reference gives them."""
    r = simulate_draws(*args, **kwargs)  # type: ignore[arg-type]
    return [
        DrawResult(float(w), int(n), float(lo), float(re), bool(c), int(nr))
        for w, n, lo, re, c, nr in zip(
            r.wall_s,
            r.failures,
            r.lost_s,
            r.restore_s,
            r.capped,
            r.failures_during_restore,
            strict=True,
        )
    ]


def _same(got: list[DrawResult], want: list[DrawResult]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert (g.failures, g.failures_during_restore, g.capped) == (
            w.failures,
            w.failures_during_restore,
            w.capped,
        ), (g, w)
        for a, b in ((g.wall_s, w.wall_s), (g.lost_s, w.lost_s), (g.restore_s, w.restore_s)):
            assert math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-12), (g, w)


def test_the_random_stream_equals_the_reference() -> None:
    for seed in (0, 1, 12345, 2**64 - 1):
        for d in (0, 1, 999):
            key = np.uint64(_draw_key(np.uint64(seed), np.int64(d)))  # numba returns an int
            for k in (0, 1, 7, 10**6):
                u = _gap_uniform(key, np.int64(k))
                assert u == _ref_gap_uniform(seed, d, k) and 0 < u < 1
    us = [_ref_gap_uniform(5, 0, k) for k in range(4000)]
    assert abs(np.mean(us) - 0.5) < 0.02 and len(set(us)) == 4000


# -- random small timelines ------------------------------------------------------------------

# values on a coarse grid make ties and exact boundary hits (a failure at a durable
# time, at the end of a restore, at the finish) likely; some off-grid values too
grid = st.one_of(st.integers(0, 60).map(lambda v: v / 4), st.floats(0, 15))


@st.composite
def timelines(draw: st.DrawFn) -> dict[str, object]:
    period = draw(st.sampled_from([5.0, 10.0, 7.3]))
    n = draw(st.integers(0, 5))
    durable = sorted(draw(st.lists(grid, min_size=n, max_size=n)))
    gaps = draw(st.lists(grid, min_size=n, max_size=n))
    lagged = np.maximum(np.array(durable) - np.array(gaps), 0.0)
    resume = np.minimum(np.maximum.accumulate(lagged), durable).tolist()
    cost = draw(st.lists(st.integers(0, 16).map(lambda v: v / 4), min_size=n, max_size=n))
    return {
        "period_s": period,
        "useful_s": period * draw(st.sampled_from([1.0, 0.5, 0.9])),
        "points": _points(durable, resume, cost),
        "scratch_restore_s": draw(st.integers(0, 16).map(lambda v: v / 4)),
        "horizon_s": period * draw(st.sampled_from([0, 1, 2.5, 6])),
        "max_wall_factor": draw(st.sampled_from([2.0, 20.0])),
    }


@st.composite
def lookups(draw: st.DrawFn) -> tuple[RecoveryPoints, float, float]:
    """Points whose durable and resume positions span several periods (so later copies
    can be durable before earlier ones, and an earlier copy can hold the latest state)."""
    period = draw(st.sampled_from([1.0, 2.0, 2.5]))
    n = draw(st.integers(0, 8))
    span = st.integers(0, 40).map(lambda v: v / 4)
    durable = np.sort(np.array(draw(st.lists(span, min_size=n, max_size=n)), dtype=float))
    lag = np.array(draw(st.lists(span, min_size=n, max_size=n)), dtype=float)
    resume = np.minimum(np.maximum.accumulate(np.maximum(durable - lag, 0.0)), durable)
    pts = RecoveryPoints(durable, resume, np.arange(float(n)))
    return pts, period, draw(st.one_of(span.map(lambda v: 2 * v), st.floats(0, 20)))


@settings(FAST, max_examples=500)
@given(lookups())
def test_recovery_point_lookup_equals_the_linear_scan(
    case: tuple[RecoveryPoints, float, float],
) -> None:
    pts, period, f = case
    q, i = kernel_recovery_point(pts.durable_s, pts.resume_s, period, f)
    want = reference_recovery_point(list(pts.durable_s), list(pts.resume_s), period, f + 1.0, f)
    assert (None if q < 0 else (int(q), int(i))) == want


@FAST
@given(timelines(), st.sampled_from([0.5, 2.0, 9.0, 40.0]), st.integers(0, 2**64 - 1))
def test_kernel_equals_reference_with_random_failures(
    tl: dict[str, object], mtbf: float, seed: int
) -> None:
    kw = dict(tl, mtbf_s=mtbf, draws=4, seed=seed)
    _same(_draws(**kw), reference_evaluate_failures(**kw))  # type: ignore[arg-type]


@FAST
@given(timelines(), st.lists(grid, max_size=12))
def test_kernel_equals_reference_with_explicit_failures(
    tl: dict[str, object], times: list[float]
) -> None:
    kw = dict(tl, times_s=times, mtbf_s=1.0, draws=2)  # no times: two random draws
    _same(_draws(**kw), reference_evaluate_failures(**kw))  # type: ignore[arg-type]


@FAST
@given(timelines(), st.sampled_from([0.5, 3.0, 40.0]), st.integers(0, 1000))
def test_accounting_and_goodput_range(tl: dict[str, object], mtbf: float, seed: int) -> None:
    r = simulate_draws(**tl, mtbf_s=mtbf, draws=8, seed=seed)  # type: ignore[arg-type]
    assert np.all(r.goodput > 0) and np.all(r.goodput <= 1)
    assert np.all(r.lost_s >= 0) and np.all(r.restore_s >= 0)
    done = ~r.capped
    # a finished draw's wall time is the horizon, the lost work and the restores
    np.testing.assert_allclose(
        r.wall_s[done], (r.horizon_s + r.lost_s + r.restore_s)[done], rtol=1e-9
    )
    assert np.all(r.wall_s[r.capped] > tl["max_wall_factor"] * r.horizon_s)  # type: ignore[operator]


# -- closed forms ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "extra",
    [{"mtbf_s": 1e300}, {"mtbf_s": math.inf}, {"times_s": [100.0]}, {"times_s": [1e9]}],
)
def test_no_failure_gives_the_failure_free_goodput(extra: dict[str, object]) -> None:
    s = evaluate_failures(P, 87.5, TWO, scratch_restore_s=9.0, draws=5, **extra)  # type: ignore[arg-type]
    assert s.goodput_mean == s.goodput_min == s.goodput_p5 == 87.5 / P
    assert (s.wall_s_mean, s.failures_per_draw_mean, s.lost_work_per_training_failure_s) == (
        P,
        0.0,
        0.0,
    )
    assert (s.restore_s_mean, s.draws_capped) == (0.0, 0)


def test_one_failure_rolls_back_to_the_latest_durable_point() -> None:
    # failure at 50: point 0 (durable 30) holds; back to 20, 30 lost, 5 to restore,
    # then 80 more: wall 50 + 5 + 80
    s = evaluate_failures(P, 90.0, TWO, scratch_restore_s=9.0, times_s=[50.0])
    assert (s.failures_per_draw_mean, s.lost_work_per_training_failure_s, s.restore_s_mean) == (
        1.0,
        30.0,
        5.0,
    )
    assert s.wall_s_mean == 135.0 and s.goodput_mean == 0.9 * 100.0 / 135.0
    assert (s.draws, s.mtbf_s, s.horizon_s) == (1, 0.0, P)
    # at 75 point 1 (durable 70) holds: back to 60, 15 lost, 7 to restore
    s = evaluate_failures(P, 90.0, TWO, scratch_restore_s=9.0, times_s=[75.0])
    assert (s.lost_work_per_training_failure_s, s.restore_s_mean, s.wall_s_mean) == (
        15.0,
        7.0,
        122.0,
    )


def test_failure_before_any_durable_point_restarts_from_scratch() -> None:
    s = evaluate_failures(P, 90.0, TWO, scratch_restore_s=9.0, times_s=[10.0])
    assert (s.lost_work_per_training_failure_s, s.restore_s_mean, s.wall_s_mean) == (
        10.0,
        9.0,
        119.0,
    )
    # no recovery point at all
    s = evaluate_failures(P, 90.0, RecoveryPoints.empty(), scratch_restore_s=9.0, times_s=[80.0])
    assert (s.lost_work_per_training_failure_s, s.restore_s_mean, s.wall_s_mean) == (
        80.0,
        9.0,
        189.0,
    )


def test_failure_during_a_restore_restarts_it() -> None:
    # restore of point 0 over [50, 55); a failure at 52 restarts it: [52, 57)
    s = evaluate_failures(P, 90.0, TWO, scratch_restore_s=9.0, times_s=[52.0, 50.0])
    assert s.failures_per_draw_mean == 2.0
    # one failure struck training (30 lost), one the restore (none lost): 30 per
    # training failure, not 30 / 2 over both
    assert (s.failures_during_restore, s.failures_during_restore_per_draw_mean) == (1, 1.0)
    assert s.lost_work_per_training_failure_s == 30.0
    assert s.restore_s_mean == (2.0 + 5.0) / 2  # 2 s interrupted, then 5
    assert s.wall_s_mean == 57.0 + 80.0
    # a failure right at the end of the restore window hits training at position 20: no
    # point is durable there, but the one just restored is in storage: nothing lost
    s = evaluate_failures(P, 90.0, TWO, scratch_restore_s=9.0, times_s=[50.0, 55.0])
    assert (s.lost_work_per_training_failure_s, s.restore_s_mean, s.wall_s_mean) == (
        15.0,
        5.0,
        140.0,
    )


def test_lost_work_is_per_training_failure_and_restore_failures_are_counted_apart() -> None:
    # 50: training at position 50, back to point 0 (resume 20): 30 lost; its restore
    #     [50, 55) is struck at 52 (no work lost) and runs again [52, 57).
    # 75: training at 20 + (75 - 57) = 38, back to 20: 18 lost; the restore [75, 80) is
    #     struck at 76 and runs again [76, 81); then 80 more: wall 161.
    # 4 failures, 2 of them during restores; 48 lost over the 2 that struck training:
    # 24 each (the old average over all 4 gave 12); restores 2 + 5 + 1 + 5 = 13
    times = [50.0, 52.0, 75.0, 76.0]
    d = simulate_draws(P, 90.0, TWO, scratch_restore_s=9.0, times_s=times)
    assert (d.failures[0], d.failures_during_restore[0], d.lost_s[0]) == (4, 2, 48.0)
    assert (d.restore_s[0], d.wall_s[0]) == (13.0, 161.0)
    s = evaluate_failures(P, 90.0, TWO, scratch_restore_s=9.0, times_s=times)
    assert (s.failures_per_draw_mean, s.failures_during_restore) == (4.0, 2)
    assert s.failures_during_restore_per_draw_mean == 2.0
    assert s.lost_work_per_training_failure_s == 48.0 / 2
    assert s.restore_s_mean == 13.0 / 4
    assert s.goodput_mean == 0.9 * 100.0 / 161.0
    ref = reference_evaluate_failures(P, 90.0, TWO, scratch_restore_s=9.0, times_s=times)
    assert ref == [DrawResult(161.0, 4, 48.0, 13.0, False, 2)]


def test_the_restored_point_stays_durable() -> None:
    # back to 20 at 50 (resumes at 55); at 60 the position is 25, before point 0's durable
    # time 30 on this pass, but point 0 was just restored: back to 20, not to scratch
    s = evaluate_failures(P, 90.0, TWO, scratch_restore_s=9.0, times_s=[50.0, 60.0])
    assert (s.failures_per_draw_mean, s.lost_work_per_training_failure_s, s.restore_s_mean) == (
        2.0,
        17.5,
        5.0,
    )
    assert s.wall_s_mean == 100.0 + 35.0 + 10.0


def test_tiling_and_a_persist_past_the_period_end() -> None:
    # copy 1 of point 0 is durable at 130 and resumes at 120
    s = evaluate_failures(P, 90.0, TWO, scratch_restore_s=9.0, horizon_s=250.0, times_s=[140.0])
    assert (s.lost_work_per_training_failure_s, s.wall_s_mean, s.horizon_s) == (20.0, 275.0, 250.0)
    assert s.goodput_mean == (90.0 / P) * (250.0 / 275.0)
    # one point durable after the period ends (110, resumes at 90): at 205 copy 1's (210)
    # is not yet durable but copy 0's is
    late = _points([110.0], [90.0], [4.0])
    s = evaluate_failures(P, 90.0, late, scratch_restore_s=9.0, horizon_s=300.0, times_s=[205.0])
    assert (s.lost_work_per_training_failure_s, s.restore_s_mean, s.wall_s_mean) == (
        115.0,
        4.0,
        419.0,
    )


def test_the_most_recent_state_wins_over_the_latest_durable_time() -> None:
    # point 1 persists past the period end (durable 160, state at 95); at 170 copy 0's
    # point 1 (durable 160) is durable later than copy 1's point 0 (durable 120), but
    # copy 1's point 0 holds the newer state (110)
    pts = _points([20.0, 160.0], [10.0, 95.0], [1.0, 2.0])
    s = evaluate_failures(P, 90.0, pts, scratch_restore_s=9.0, horizon_s=300.0, times_s=[170.0])
    assert (s.lost_work_per_training_failure_s, s.restore_s_mean) == (60.0, 1.0)


def test_ties_go_to_the_later_point() -> None:
    pts = _points([30.0, 30.0], [20.0, 20.0], [5.0, 8.0])
    s = evaluate_failures(P, 90.0, pts, scratch_restore_s=9.0, times_s=[40.0])
    assert s.restore_s_mean == 8.0
    # across copies: copy 0's point 1 and copy 1's point 0 both hold the state at 120
    pts = _points([25.0, 125.0], [20.0, 120.0], [5.0, 8.0])
    s = evaluate_failures(P, 90.0, pts, scratch_restore_s=9.0, horizon_s=300.0, times_s=[130.0])
    assert (s.lost_work_per_training_failure_s, s.restore_s_mean) == (10.0, 5.0)


def test_capped_draws() -> None:
    # every failure restarts the 5 s scratch restore: no progress until the cap (20 s)
    times = [float(t) for t in range(1, 100)]
    d = simulate_draws(10.0, 10.0, RecoveryPoints.empty(), scratch_restore_s=5.0, times_s=times,
                       max_wall_factor=2.0)  # fmt: skip
    assert bool(d.capped[0]) and d.wall_s[0] == 21.0 and d.failures[0] == 20
    s = evaluate_failures(10.0, 10.0, RecoveryPoints.empty(), scratch_restore_s=5.0,
                          mtbf_s=0.1, draws=20, max_wall_factor=3.0)  # fmt: skip
    assert s.draws_capped == 20 and s.goodput_mean < 1 / 3


def test_the_cap_is_checked_at_each_failure() -> None:
    # cap = 1 x horizon = 10: a failure at 10 still counts, one after it stops the draw
    kw = dict(scratch_restore_s=1.0, max_wall_factor=1.0)
    d = simulate_draws(10.0, 10.0, RecoveryPoints.empty(), times_s=[5.0, 10.0], **kw)  # type: ignore[arg-type]
    assert (d.wall_s[0], d.failures[0], d.lost_s[0], bool(d.capped[0])) == (21.0, 2, 9.0, False)
    d = simulate_draws(10.0, 10.0, RecoveryPoints.empty(), times_s=[5.0, 10.5], **kw)  # type: ignore[arg-type]
    assert (d.wall_s[0], d.failures[0], d.lost_s[0], bool(d.capped[0])) == (10.5, 1, 5.0, True)


def test_young_daly() -> None:
    assert young_daly_interval_s(50.0, 7200.0) == math.sqrt(2 * 50.0 * 7200.0)
    assert young_daly_interval_s(0.0, 10.0) == 0.0
    with pytest.raises(ConfigError, match=r"failures\.mtbf_s"):
        young_daly_interval_s(1.0, 0.0)
    with pytest.raises(ConfigError):
        young_daly_interval_s(-1.0, 10.0)


# -- properties ------------------------------------------------------------------------------


def _periodic(every: float, lag: float, cost: float, period: float) -> RecoveryPoints:
    durable = np.arange(every, period + every / 2, every)
    return RecoveryPoints(durable, durable - lag, np.full(len(durable), cost))


def test_goodput_rises_with_mtbf() -> None:
    pts = _periodic(10.0, 2.0, 3.0, P)
    kw = dict(scratch_restore_s=5.0, horizon_s=1000.0, draws=2000, seed=3)
    low = evaluate_failures(P, 95.0, pts, mtbf_s=40.0, **kw)  # type: ignore[arg-type]
    high = evaluate_failures(P, 95.0, pts, mtbf_s=320.0, **kw)  # type: ignore[arg-type]
    assert high.goodput_mean > low.goodput_mean + 0.05
    assert high.failures_per_draw_mean < low.failures_per_draw_mean / 4


quarters = st.integers(0, 400).map(lambda v: v / 4)  # exact arithmetic


@st.composite
def exact_timelines(draw: st.DrawFn) -> tuple[float, RecoveryPoints, float]:
    period = draw(st.sampled_from([10.0, 25.0]))
    n = draw(st.integers(0, 6))
    durable = sorted(draw(st.lists(quarters, min_size=n, max_size=n)))
    lag = draw(st.lists(quarters, min_size=n, max_size=n))
    resume = np.minimum(np.maximum.accumulate(np.maximum(np.array(durable) - lag, 0.0)), durable)
    horizon = period * draw(st.sampled_from([1, 3]))
    return period, RecoveryPoints(np.array(durable), resume, np.zeros(n)), horizon


@FAST
@given(
    exact_timelines(),
    st.integers(0, 12).map(lambda v: v / 4),
    st.integers(0, 12).map(lambda v: v / 4),
    st.lists(st.integers(1, 40), min_size=1, max_size=10),
)
def test_a_larger_restore_cost_never_raises_the_goodput(
    tl: tuple[float, RecoveryPoints, float], cost: float, extra: float, gaps: list[int]
) -> None:
    period, pts, horizon = tl
    # failures farther apart than the largest restore: none falls in a restore window
    times = np.cumsum([g + 2 * (cost + extra) + 1 for g in gaps]).tolist()

    def goodput(c: float) -> float:
        costed = RecoveryPoints(pts.durable_s, pts.resume_s, np.full(len(pts), c))
        s = evaluate_failures(
            period, period, costed, scratch_restore_s=2 * c, horizon_s=horizon, times_s=times
        )
        return s.goodput_mean

    assert goodput(cost + extra) <= goodput(cost)


@FAST
@given(
    exact_timelines(),
    st.data(),
    st.integers(0, 12).map(lambda v: v / 4),
    st.lists(quarters, min_size=1, max_size=10),
)
def test_more_recovery_points_never_lower_the_goodput(
    tl: tuple[float, RecoveryPoints, float], data: st.DataObject, cost: float, times: list[float]
) -> None:
    period, pts, horizon = tl
    keep = np.array(data.draw(st.lists(st.booleans(), min_size=len(pts), max_size=len(pts))))
    full = RecoveryPoints(pts.durable_s, pts.resume_s, np.full(len(pts), cost))
    subset = RecoveryPoints(
        pts.durable_s[keep] if len(pts) else pts.durable_s,
        pts.resume_s[keep] if len(pts) else pts.resume_s,
        full.restore_s[keep] if len(pts) else full.restore_s,
    )
    kw = dict(scratch_restore_s=cost + 1.0, horizon_s=horizon, times_s=times)
    more = evaluate_failures(period, period, full, **kw)  # type: ignore[arg-type]
    fewer = evaluate_failures(period, period, subset, **kw)  # type: ignore[arg-type]
    assert more.goodput_mean >= fewer.goodput_mean


def test_determinism_and_draw_independence() -> None:
    pts = _periodic(10.0, 2.0, 3.0, P)
    kw = dict(scratch_restore_s=5.0, horizon_s=500.0, mtbf_s=60.0, seed=11)
    a = evaluate_failures(P, 95.0, pts, draws=100, **kw)  # type: ignore[arg-type]
    b = evaluate_failures(P, 95.0, pts, draws=100, **kw)  # type: ignore[arg-type]
    assert a == b
    few = simulate_draws(P, 95.0, pts, draws=10, **kw)  # type: ignore[arg-type]
    many = simulate_draws(P, 95.0, pts, draws=100, **kw)  # type: ignore[arg-type]
    assert few.goodput.tolist() == many.goodput[:10].tolist()
    assert few.failures.tolist() == many.failures[:10].tolist()
    # a split across workers gives the same draws
    tail = simulate_draws(P, 95.0, pts, draws=90, first_draw=10, **kw)  # type: ignore[arg-type]
    assert tail.goodput.tolist() == many.goodput[10:].tolist()
    other = simulate_draws(P, 95.0, pts, draws=10, **{**kw, "seed": 12})  # type: ignore[arg-type]
    assert other.goodput.tolist() != few.goodput.tolist()
    assert len(set(many.goodput.tolist())) > 50  # the draws differ


def test_to_json_is_plain() -> None:
    s = evaluate_failures(P, 90.0, TWO, scratch_restore_s=9.0, mtbf_s=50.0, draws=20)
    js = s.to_json()
    assert list(js) == [f for f in FailureStats.__dataclass_fields__]
    assert all(type(v) in (int, float) for v in js.values())
    assert type(js["draws"]) is int and type(js["draws_capped"]) is int


# -- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"period_s": 0.0}, "period_s"),
        ({"period_s": math.nan}, "period_s"),
        ({"useful_s": 0.0}, "useful_s"),
        ({"useful_s": 101.0}, "useful_s"),
        ({"mtbf_s": 0.0}, r"failures\.mtbf_s: must be > 0, got 0"),
        ({"mtbf_s": -1}, r"failures\.mtbf_s: must be > 0, got -1$"),
        ({"mtbf_s": math.nan}, r"failures\.mtbf_s"),
        ({"mtbf_s": 1e-6}, r"failures\.mtbf_s: .* failures per draw"),
        ({"draws": 0}, r"failures\.draws"),
        ({"draws": 2.5}, r"failures\.draws"),
        ({"seed": -1}, r"failures\.seed"),
        ({"seed": 2**64}, r"failures\.seed"),
        ({"times_s": [5.0, -1.0]}, r"failures\.times_s: .* got -1"),
        ({"times_s": [math.nan]}, r"failures\.times_s"),
        ({"times_s": [math.inf]}, r"failures\.times_s"),
        ({"horizon_s": -5.0}, r"failures\.horizon_s"),
        ({"max_wall_factor": 0.5}, r"failures\.max_wall_factor"),
        ({"scratch_restore_s": -1.0}, "scratch_restore_s"),
    ],
)
def test_bad_arguments(kwargs: dict[str, object], match: str) -> None:
    args: dict[str, object] = {
        "period_s": P,
        "useful_s": 90.0,
        "points": TWO,
        "scratch_restore_s": 9.0,
        "mtbf_s": 50.0,
        "draws": 10,
    }
    args.update(kwargs)
    with pytest.raises(ConfigError, match=match):
        evaluate_failures(**args)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("durable", "resume", "cost", "match"),
    [
        ([1.0, 2.0], [0.0], [1.0, 1.0], "same length"),
        ([2.0, 1.0], [0.0, 0.0], [1.0, 1.0], "durable_s must be non-decreasing"),
        ([1.0, 2.0], [1.0, 0.5], [1.0, 1.0], "resume_s must be non-decreasing"),
        ([1.0, 2.0], [0.0, 3.0], [1.0, 1.0], "resume_s <= durable_s"),
        ([1.0], [-0.5], [1.0], "0 <= resume_s"),
        ([1.0], [0.0], [-1.0], "restore_s must be >= 0"),
        ([math.nan], [0.0], [1.0], "finite"),
    ],
)
def test_bad_recovery_points(
    durable: list[float], resume: list[float], cost: list[float], match: str
) -> None:
    with pytest.raises(ConfigError, match=match):
        _points(durable, resume, cost)


# -- rare failures: the chance of one and the runs that see one -------------------------------


@settings(FAST, max_examples=60)
@given(timelines(), st.sampled_from([0.5, 9.0, 400.0]), st.integers(0, 2**64 - 1))
def test_kernel_equals_reference_given_a_failure(
    tl: dict[str, object], mtbf: float, seed: int
) -> None:
    kw = dict(tl, mtbf_s=mtbf, draws=4, seed=seed, given_failure=True)
    got = _draws(**kw)
    _same(got, reference_evaluate_failures(**kw))  # type: ignore[arg-type]
    assert all(d.failures >= 1 for d in got)  # every conditioned draw sees one


def test_p_any_failure_is_the_share_of_runs_with_one_and_the_mean_splits_on_it() -> None:
    from replay.checkpoint.failures import goodput_given_failure, p_any_failure

    # a run of 100 s failure-free at an MTBF of 14,286 s: 0.007 expected failures
    horizon, mtbf, n = 2 * P, 2 * P / 0.007, 200_000
    kw = dict(scratch_restore_s=9.0, horizon_s=horizon, mtbf_s=mtbf, draws=n, seed=11)
    free = simulate_draws(P, 90.0, TWO, **kw)  # type: ignore[arg-type]
    p = p_any_failure(horizon, mtbf)
    assert p == pytest.approx(-math.expm1(-0.007), rel=1e-12)
    share = float(np.mean(free.failures >= 1))
    noise = math.sqrt(p * (1 - p) / n)
    assert abs(share - p) < 4 * noise, (share, p, noise)
    # ... and 1 - exp(-the simulated failures per run), within the same noise
    assert abs(-math.expm1(-float(free.failures.mean())) - p) < 4 * noise
    # the conditioned draws are the runs that see one: E = (1 - p) g0 + p E[. | failure]
    given = simulate_draws(P, 90.0, TWO, given_failure=True, **kw)  # type: ignore[arg-type]
    assert int(given.failures.min()) >= 1
    g0 = 0.9
    with_one = free.goodput[free.failures >= 1]
    spread = float(np.std(with_one)) / math.sqrt(len(with_one))
    assert abs(float(given.goodput.mean()) - float(with_one.mean())) < 4 * spread + 1e-12
    split = (1 - p) * g0 + p * float(given.goodput.mean())
    assert split == pytest.approx(float(free.goodput.mean()), abs=4 * p * spread + 1e-9)
    # the helper: conditioned draws when failures are rare, the algebra when they are not
    calls: list[int] = []
    out = goodput_given_failure(0.8, g0, p, lambda: calls.append(1) or 0.7)
    assert out == 0.7 and calls == [1]
    assert goodput_given_failure(0.8, g0, 0.75, lambda: 1 / 0) == pytest.approx(
        (0.8 - 0.25 * g0) / 0.75
    )
    assert goodput_given_failure(0.9, g0, 0.0, None) is None
    with pytest.raises(ConfigError, match="explicit times"):
        simulate_draws(P, 90.0, TWO, scratch_restore_s=1.0, times_s=[5.0], given_failure=True)
