"""Ranges on sampled byte answers (issue 54): Che's curve as a control variate, each
answer's ~95% range from the curve's error where it crosses the target, `--tolerance`.

Normal suite: a small workload whose exact curve takes a moment, a few seeds' answers
inside their ranges, the control variate closer to the exact curve than the plain sample,
`range_for_hit` on a hand-made curve, the tolerance loop with a stand-in plan. Bench
(`pytest -m bench tests/test_plan_ranges.py`): 20 seeds of criteo-terabyte (20,000 x
2,048) at R = 2^-12 against the exact LRU of the same run, as docs/methods.md reports.
"""

from __future__ import annotations

import math
import subprocess
import sys
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.analysis.horizon import horizon_mrc
from replay.analysis.shards import resolution_rows, shards_threshold
from replay.plan.cache import curve_sizes, range_for_hit, rows_for_hit
from replay.plan.tolerance import headline_ranges, needed_rate, parse_tolerance, plan_within
from replay.workload.onthefly import GeneratedTrace
from replay.workload.sampled import open_sampled_workload
from replay.workload.spec import TableSpec, WorkloadSpec

RATE = 2.0**-5
TARGETS = (0.5, 0.6)


def _spec(seed: int) -> WorkloadSpec:
    tables = (
        TableSpec("big", 400_000, alpha=1.05),
        TableSpec("mid", 60_000, alpha=1.1),
        TableSpec("small", 2_000, alpha=1.0),
    )
    return WorkloadSpec("ranges", tables, batch_size=256, batches=600, seed=seed)


def _truth(sizes: np.ndarray, miss: np.ndarray, target: float) -> float:
    """The exact smallest size reaching `target`, linear in log size between sizes."""
    hit = np.maximum.accumulate(1.0 - miss)
    i = int(np.nonzero(hit >= target)[0][0])
    f = (target - hit[i - 1]) / (hit[i] - hit[i - 1])
    return float(np.exp(np.log(sizes[i - 1]) + f * np.log(sizes[i] / sizes[i - 1])))


def test_range_for_hit_reads_the_band_where_the_curve_crosses() -> None:
    sizes = np.array([10.0, 20.0, 40.0, 80.0, 160.0])
    hits = np.array([0.2, 0.5, 0.7, 0.8, 0.9])
    # the error is large only at 10 rows: the range about 0.7 (40 rows) does not see it
    errors = np.array([0.3, 0.05, 0.05, 0.05, 0.05])
    assert range_for_hit(sizes, hits, errors, 0.7) == (20.0, 80.0)
    assert range_for_hit(sizes, hits, 0.3, 0.7) == (10.0, None)  # its largest, everywhere
    # at 0.2 the curve's first size already reaches it with its error: no low end
    assert range_for_hit(sizes, hits, errors, 0.2) == (None, 20.0)
    # beyond the curve's hit less its error: no high end
    assert range_for_hit(sizes, hits, errors, 0.88) == (80.0, None)
    assert range_for_hit(sizes, hits, 0.0, 0.7) == (20.0, 40.0)  # exact: one step


def test_sampled_answers_lie_in_their_ranges_and_the_control_variate_helps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from replay.analysis import shards_model

    exact_spec = _spec(0)
    total = sum(t.rows for t in exact_spec.tables)
    grid = np.unique(np.rint(np.geomspace(1, total, 2000)).astype(np.int64))
    exact = horizon_mrc(GeneratedTrace(exact_spec), grid)
    truths = {t: _truth(grid, exact.miss_ratios, t) for t in TARGETS}
    sizes = curve_sizes(total, resolution_rows(shards_threshold(RATE)))
    want = np.interp(np.log(sizes), np.log(grid), exact.miss_ratios)
    inside, ratios, corrected, plain = 0, [], [], []
    for seed in range(3):
        m = horizon_mrc(open_sampled_workload(_spec(seed), RATE), sizes)
        assert m.extra["model"].startswith("SHARDS with Che's approximation")
        hits = 1.0 - m.miss_ratios
        for t in TARGETS:
            low, high = range_for_hit(sizes, hits, m.point_errors, t)
            answer = rows_for_hit(sizes, hits, t)
            assert low is not None and high is not None and answer is not None
            assert low < answer <= high
            inside += low <= truths[t] <= high
            ratios.append(high / low)
        corrected.append(float(np.abs(m.miss_ratios - want).max()))
        with monkeypatch.context() as patch:
            patch.setattr(shards_model, "applicable", lambda source: False)
            bare = horizon_mrc(open_sampled_workload(_spec(seed), RATE), sizes)
        assert "model" not in bare.extra
        plain.append(float(np.abs(bare.miss_ratios - want).max()))
    assert inside >= 5, (inside, ratios)
    assert max(ratios) < 1.6, ratios
    assert np.mean(corrected) < np.mean(plain), (corrected, plain)


def _placement(spec: WorkloadSpec, world: int, sharding: str = "table-wise") -> Any:
    from replay.engine.placement import resolve_placement
    from replay.system.spec import apply_overrides, build_system, load_system_data

    sets = ["cluster.nodes=1", f"cluster.gpus_per_node={world}", f"cluster.sharding={sharding}"]
    system = build_system(apply_overrides(load_system_data("hbm-lru")[0], sets))
    return resolve_placement(system, GeneratedTrace(spec)).placement


def _rank_truths(spec: WorkloadSpec, placement: Any, target: float) -> list[float | None]:
    from replay.plan.rank_curves import rank_curves

    total = sum(t.rows for t in spec.tables)
    grid = np.unique(np.rint(np.geomspace(1, total, 2000)).astype(np.int64))
    exact = rank_curves(GeneratedTrace(spec), placement, grid, rate=1.0, spec=spec)
    return [
        _truth(grid, m, target) if (1.0 - m).max() >= target else None for m in exact.miss_ratio
    ]


def test_each_gpus_answer_lies_in_its_range() -> None:
    from replay.plan.rank_curves import cluster_ranges, rank_curves

    spec = _spec(0)
    placement = _placement(spec, 3)
    truths = _rank_truths(spec, placement, 0.5)
    total = sum(t.rows for t in spec.tables)
    sizes = curve_sizes(total, 1)
    inside = judged = 0
    for seed in range(2):
        one = _spec(seed)
        got = rank_curves(open_sampled_workload(one, RATE), placement, sizes, rate=RATE, spec=one)
        per, spans = cluster_ranges(got, [0.5], list(range(got.world)), 1.0)
        for r, truth in enumerate(truths):
            low, high = per[r]["0.5"]
            if truth is None or high is None:
                continue
            judged += 1
            inside += (low or 0.0) <= truth <= high
        low, high = spans["worst_gpu"]["0.5"]
        assert low is not None and high is not None and low <= high
    assert judged >= 3 and inside >= judged - 1, (inside, judged)


def _doc(rate: float, width: float, answer: float = 1e6) -> dict[str, Any]:
    pair = [answer * (1 - width), answer * (1 + width)]
    return {
        "horizon": {"sample_rate": rate, "lookups": 1e9},
        "row_bytes": 512,
        "cache": {"bytes_for_hit": {"lru": {"0.9": answer}}, "range_bytes": {"lru": {"0.9": pair}}},
        "notes": [],
    }


class _Request:
    def __init__(self, sample_rate: float | None) -> None:
        self.sample_rate = sample_rate


def test_the_tolerance_raises_the_rate_or_says_what_it_needs(monkeypatch) -> None:
    import replay.plan.tolerance as tol

    monkeypatch.setattr(tol, "replace", lambda r, sample_rate: _Request(sample_rate))
    assert parse_tolerance("10%") == pytest.approx(0.1) and parse_tolerance("0.25") == 0.25
    # a range of ±40% at R = 2^-12 wants 2^-12 x (0.4 / 0.1)^2 = 2^-8
    assert needed_rate(2**-12, 0.4, 0.1, 1000.0) == 2**-8
    assert needed_rate(2**-12, math.inf, 0.1, 1000.0) == 2**-4  # a bound: >= 32 / 1,000 rows
    made: list[float | None] = []

    def make(request: _Request) -> tuple[dict[str, Any], dict[str, Any]]:
        made.append(request.sample_rate)
        rate = request.sample_rate or 2**-12
        return _doc(rate, 0.4 * math.sqrt(2**-12 / rate)), {}

    doc, _ = plan_within(_Request(None), 0.1, make, lambda r: True)
    assert made == [None, 2**-8] and doc["tolerance"]["met"]
    assert [t["sample_rate"] for t in doc["tolerance"]["tried"]] == [2**-12, 2**-8]
    assert headline_ranges(doc)[0][2] == pytest.approx(0.1)
    # a rate the user gave is kept: the note says what rate would do
    made.clear()
    doc, _ = plan_within(_Request(2**-12), 0.1, make, lambda r: True)
    assert made == [2**-12] and not doc["tolerance"]["met"]
    assert "R = 0.00390625 would resolve it" in doc["notes"][-1]
    assert "--sample-rate was given" in doc["notes"][-1]
    # the default tolerance (no --tolerance) is checked and said, the rate left alone
    made.clear()
    doc, _ = plan_within(_Request(None), 0.1, make, lambda r: True, may_raise=False)
    assert made == [None] and "--tolerance was not given" in doc["notes"][-1]
    # ... and so is a plan that would not fit
    doc, _ = plan_within(_Request(None), 0.1, make, lambda r: False)
    assert "does not fit this machine's memory" in doc["notes"][-1]


def test_a_bad_tolerance_is_a_one_line_error(tmp_path) -> None:
    from replay.errors import ConfigError

    for wrong in ("0%", "150%", "-3", "1"):
        with pytest.raises(ConfigError, match="--tolerance"):
            parse_tolerance(wrong)
    bad = "abc"
    run = subprocess.run(
        [sys.executable, "-m", "replay", "plan", "--workload", "criteo-kaggle", "--batches", "2",
         "--system", "hbm-lru", "--cache-budget", "1MiB", "--cluster-mtbf", "6h",
         "--tolerance", bad, "--out", str(tmp_path / "p")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 2, run.stderr
    assert run.stderr.startswith("replay: error: --tolerance") and "Traceback" not in run.stderr
    assert not (tmp_path / "p").exists()


# -- bench --------------------------------------------------------------------------------


@pytest.mark.bench
def test_criteo_terabyte_twenty_seeds_at_r_2_minus_12() -> None:
    """The 0.9 and 0.95 answers of 20 seeds' plans lie in their ranges (>= 19 of 20) and
    the ranges are tight (high / low), against the exact LRU of 20,000 batches of 2,048
    (one seed: the popularity law, not the seed, sets it; two seeds gave the same)."""
    from replay.workload.presets import get_preset

    base = get_preset("criteo-terabyte").with_overrides(batches=20_000, batch_size=2048)
    total = sum(t.rows for t in base.tables)
    grid = np.unique(np.rint(np.geomspace(1, total, 4000)).astype(np.int64))
    exact = horizon_mrc(GeneratedTrace(base), grid)
    rate = 2.0**-12
    sizes = curve_sizes(total, resolution_rows(shards_threshold(rate)))
    inside = {0.9: 0, 0.95: 0}
    ratios: dict[float, list[float]] = {0.9: [], 0.95: []}
    for seed in range(20):
        m = horizon_mrc(open_sampled_workload(base.with_overrides(seed=seed), rate), sizes)
        for t in inside:
            low, high = range_for_hit(sizes, 1.0 - m.miss_ratios, m.point_errors, t)
            assert low is not None and high is not None
            inside[t] += low <= _truth(grid, exact.miss_ratios, t) <= high
            ratios[t].append(high / low)
    print({t: (inside[t], float(np.median(r)), max(r)) for t, r in ratios.items()})
    for t in inside:
        assert inside[t] >= 19, (t, inside[t], ratios[t])
        assert float(np.median(ratios[t])) <= 1.5, (t, ratios[t])


@pytest.mark.bench
def test_criteo_terabyte_eight_gpus_twenty_seeds() -> None:
    """Each GPU's answers of an 8-GPU plan (auto sharding: table-wise and data-parallel,
    so every GPU has the control variate) over 20 seeds at R = 2^-12 against each GPU's
    exact LRU (one exact pass for both targets): the worst GPU's need lies in its range on
    >= 19 of 20 seeds with high / low <= 1.5 at the median, and each GPU's need in its own
    range on >= 95% of (GPU, seed) pairs. Measured (docs/methods.md): the worst GPU 20 of
    20 for both 0.9 and 0.95, high / low median 1.28 and 1.22 (largest 1.48 and 1.34);
    each GPU 157 and 158 of 160 (before the cold misses' expected count: 0.95's median
    1.71 with five ranges open above)."""
    from replay.plan.rank_curves import cluster_ranges, rank_curves
    from replay.workload.presets import get_preset

    base = get_preset("criteo-terabyte").with_overrides(batches=20_000, batch_size=2048)
    placement = _placement(base, 8, "auto")
    rate = 2.0**-12
    total = sum(t.rows for t in base.tables)
    sizes = curve_sizes(total, 1)
    grid = np.unique(np.rint(np.geomspace(1, total, 2000)).astype(np.int64))
    exact = rank_curves(GeneratedTrace(base), placement, grid, rate=1.0, spec=base)
    runs = []
    for seed in range(20):
        one = base.with_overrides(seed=seed)
        runs.append(
            rank_curves(open_sampled_workload(one, rate), placement, sizes, rate=rate, spec=one)
        )
    for target in (0.9, 0.95):
        truths = [
            _truth(grid, m, target) if (1.0 - m).max() >= target else None for m in exact.miss_ratio
        ]
        worst = max(t for t in truths if t is not None)
        busy = [r for r, t in enumerate(truths) if t is not None]
        inside, ratios, each, pairs = 0, [], 0, 0
        for got in runs:
            per, spans = cluster_ranges(got, [target], busy, 1.0)
            low, high = spans["worst_gpu"][f"{target:g}"]
            # an open high end: a GPU whose curve ends near the target (its exact one
            # reaches it, the sample's less its error does not): the range is open above
            high = math.inf if high is None else high
            inside += (low or 0.0) <= worst <= high
            ratios.append(high / low if low else math.inf)
            for r in busy:
                lo, hi = per[r][f"{target:g}"]
                pairs += 1
                each += (lo or 0.0) <= truths[r] <= (math.inf if hi is None else hi)
        print(target, inside, float(np.median(ratios)), max(ratios), each, pairs)
        assert inside >= 19, (target, inside, ratios)
        assert float(np.median(ratios)) <= 1.5, (target, ratios)
        assert each >= 0.95 * pairs, (target, each, pairs)


@given(
    exponents=st.lists(st.floats(-60.0, 0.0, allow_nan=False), min_size=1, max_size=300),
    repeats=st.integers(1, 3),
)
@settings(max_examples=100, deadline=None)
def test_the_che_correction_groups_as_a_sort_would(exponents: list[float], repeats: int) -> None:
    """`_buckets` counts the probability groups in one pass: the same groups, counts and
    float sums (each group summed in the rows' order) as np.unique's sort and np.bincount,
    which it replaced; a probability of 0 takes the sort."""
    from replay.analysis.shards_model import BUCKET_LOG_WIDTH, _buckets

    pi = np.repeat(np.exp(np.array(exponents)), repeats)
    for rows in (pi, np.append(pi, 0.0)):
        with np.errstate(divide="ignore"):
            counts, sums = _buckets(rows)
            bucket = np.floor(np.log(rows) / BUCKET_LOG_WIDTH)
        _, which, want = np.unique(bucket, return_inverse=True, return_counts=True)
        assert counts.tolist() == want.tolist()
        assert sums.tobytes() == np.bincount(which, weights=rows).tobytes()
