"""`replay fit`: the statistics kernel against a reference, the power law's moments and
MLE, Chao1, and the fit itself on synthetic traces whose parameters are known."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replay.analysis.stats import inspect_arrays, inspect_trace
from replay.errors import ConfigError
from replay.trace.reader import Trace, open_trace
from replay.workload.fit import MIN_FIT_LOOKUPS, FitResult, fit_trace
from replay.workload.fit_check import CHECKED, check_fit
from replay.workload.fit_stats import (
    _table_stats,
    chao1,
    hot_values_test,
    mean_log_rank,
    power_law_mle,
    table_statistics,
)
from replay.workload.generator import CompiledWorkload, generate
from replay.workload.spec import TableSpec, WorkloadSpec

FAST = settings(
    max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)


# -- the statistics kernel against sets and dicts -------------------------------------------


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def reference_table_stats(
    batch: Sequence[int],
    ids: Sequence[int],
    num_batches: int,
    curve_x: Sequence[int],
    window_batches: int,
    lags: Sequence[int],
) -> tuple[float, float, float, list[int], list[float]]:
    """What `_table_stats` computes, the slow and obvious way. Batches without lookups
    are skipped by every mean, but count as batches (for windows, lags and the curve)."""
    looked_up: list[list[int]] = [[] for _ in range(num_batches)]
    for b, x in zip(batch, ids, strict=True):
        looked_up[b].append(x)
    sets = [set(xs) for xs in looked_up]
    busy = [n for n in range(num_batches) if looked_up[n]]
    # mean log-rank: windows of whole batches [0, w), [w, 2w), ...; rank 1 = most looked up
    weighted, total = 0.0, 0
    for first in range(0, num_batches, window_batches):
        counts = Counter(x for xs in looked_up[first : first + window_batches] for x in xs)
        for rank, c in enumerate(sorted(counts.values(), reverse=True), start=1):
            weighted += c * math.log(rank)
            total += c
    logrank = weighted / total if total else 0.0
    reuse = _mean([len(sets[n] & sets[n - 1]) / len(sets[n]) for n in busy if n >= 1])
    dpb = _mean([len(sets[n]) / len(looked_up[n]) for n in busy])
    curve = [len(set().union(*sets[:x])) for x in curve_x]
    overlap = [
        _mean(
            [
                sum(x in sets[n - lag] for x in looked_up[n]) / len(looked_up[n])
                for n in busy
                if n >= lag
            ]
        )
        for lag in lags
    ]
    return logrank, reuse, dpb, curve, overlap


def _kernel(
    batch: Sequence[int],
    ids: Sequence[int],
    num_ids: int,
    num_batches: int,
    curve_x: Sequence[int],
    window_batches: int,
    lags: Sequence[int],
) -> tuple[float, float, float, list[int], list[float]]:
    logrank, reuse, dpb, curve, overlap = _table_stats(
        np.array(batch, dtype=np.int64),
        np.array(ids, dtype=np.int64),
        num_ids,
        num_batches,
        np.array(curve_x, dtype=np.int64),
        window_batches,
        np.array(lags, dtype=np.int64),
    )
    return float(logrank), float(reuse), float(dpb), curve.tolist(), overlap.tolist()


def test_kernel_on_a_worked_example() -> None:
    # batch 0: rows 0 0 1; batch 1: rows 1 2; batch 2: nothing; batch 3: rows 2 0 0
    batch = [0, 0, 0, 1, 1, 3, 3, 3]
    ids = [0, 0, 1, 1, 2, 2, 0, 0]
    got = _kernel(batch, ids, 4, 4, [1, 2, 4], 2, [1, 2])
    # windows {0, 1}: counts 2, 2, 1 -> ranks 1, 2, 3; {2, 3}: counts 2, 1 -> ranks 1, 2
    logrank = (2 * math.log(2) + math.log(3) + math.log(2)) / 8
    want = (
        logrank,
        (1 / 2 + 0) / 2,  # batch 1 shares row 1 of {1, 2}; batch 3 follows an empty batch
        (2 / 3 + 2 / 2 + 2 / 3) / 3,  # distinct per lookup, over the batches with lookups
        [2, 3, 3],  # rows touched by batches 0..x-1
        [(1 / 2 + 0 / 3) / 2, 1 / 3],  # lag 1: batches 1 and 3; lag 2: batch 3 (2 in {1, 2})
    )
    assert got[3] == want[3]
    for g, w in zip([*got[:3], *got[4]], [*want[:3], *want[4]], strict=True):
        assert math.isclose(g, w, rel_tol=1e-12), (got, want)
    assert got == reference_table_stats(batch, ids, 4, [1, 2, 4], 2, [1, 2])


def test_kernel_without_lookups_gives_zeros() -> None:
    assert _kernel([], [], 3, 5, [1, 5], 2, [1, 4]) == (0.0, 0.0, 0.0, [0, 0], [0.0, 0.0])


@st.composite
def table_lookups(draw: st.DrawFn) -> dict[str, Any]:
    num_batches = draw(st.integers(1, 10))
    num_ids = draw(st.integers(1, 8))  # few ids: repeats, reuse and overlaps are likely
    per_batch = draw(
        st.lists(
            st.lists(st.integers(0, num_ids - 1), max_size=9),
            min_size=num_batches,
            max_size=num_batches,
        )
    )
    return {
        "batch": [b for b, xs in enumerate(per_batch) for _ in xs],
        "ids": [x for xs in per_batch for x in xs],
        "num_ids": num_ids,
        "num_batches": num_batches,
        "curve_x": sorted(draw(st.sets(st.integers(1, num_batches)))),
        "window_batches": draw(st.integers(1, num_batches + 1)),
        "lags": draw(st.lists(st.integers(1, num_batches + 1), max_size=4)),
    }


@FAST
@given(table_lookups())
def test_kernel_equals_the_reference(case: dict[str, Any]) -> None:
    got = _kernel(**case)
    want = reference_table_stats(**{k: v for k, v in case.items() if k != "num_ids"})
    assert got[3] == want[3]
    assert len(got[4]) == len(want[4])
    for g, w in zip([*got[:3], *got[4]], [*want[:3], *want[4]], strict=True):
        assert math.isclose(g, w, rel_tol=1e-12, abs_tol=1e-15), (got, want)


@FAST
@given(table_lookups())
def test_table_statistics_do_not_depend_on_row_labels(case: dict[str, Any]) -> None:
    """A huge sparse table goes through dense ids: the statistics are the same."""
    batch = np.array(case["batch"], dtype=np.int64)
    ids = np.array(case["ids"], dtype=np.int64)
    num_batches, window = case["num_batches"], case["window_batches"]
    small = table_statistics(batch, ids, case["num_ids"], num_batches, window)
    huge_rows = 1 << 40  # far above 4 x lookups and 2^22: the dense-id path
    scattered = ids * 1_000_003_001 + 12_345  # injective, < 2^40
    huge = table_statistics(batch, scattered, huge_rows, num_batches, window)
    np.testing.assert_allclose(huge, small, rtol=1e-12, atol=1e-15)


# -- the bounded power law ------------------------------------------------------------------


def _brute_moments(alpha: float, rows: int) -> tuple[float, float]:
    k = np.arange(1, rows + 1, dtype=np.float64)
    logk = np.log(k)
    w = k**-alpha
    mean = float((w * logk).sum() / w.sum())
    return mean, float((w * logk * logk).sum() / w.sum()) - mean * mean


@pytest.mark.parametrize("rows", [2, 10, 1000, 1 << 16, (1 << 16) + 1, 300_000])
@pytest.mark.parametrize("alpha", [0.0, 0.5, 1.0, 1.4, 2.0, 3.5])
def test_mean_log_rank_equals_the_sums(alpha: float, rows: int) -> None:
    mean, var = mean_log_rank(alpha, rows)
    want_mean, want_var = _brute_moments(alpha, rows)
    assert math.isclose(mean, want_mean, rel_tol=1e-10)
    assert math.isclose(var, want_var, rel_tol=1e-9)


def test_mean_log_rank_of_one_row() -> None:
    assert mean_log_rank(1.0, 1) == (0.0, 0.0)


@pytest.mark.parametrize("rows", [50, 1000, 100_000])
@pytest.mark.parametrize("alpha", [0.3, 0.8, 1.0, 1.4, 2.5])
def test_power_law_mle_recovers_alpha_from_expected_counts(alpha: float, rows: int) -> None:
    k = np.arange(1, rows + 1, dtype=np.float64)
    counts = np.rint(1e12 * k**-alpha)
    rng = np.random.default_rng(0)
    got, se = power_law_mle(rng.permutation(counts), rows)  # it ranks the counts itself
    assert got is not None and abs(got - alpha) < 1e-6
    assert se is not None
    assert math.isclose(se, 1 / math.sqrt(counts.sum() * mean_log_rank(got, rows)[1]), rel_tol=1e-9)


def test_power_law_mle_edge_cases() -> None:
    assert power_law_mle(np.array([7]), 1) == (None, None)  # a table of one row
    assert power_law_mle(np.array([7]), 10) == (None, None)  # one row touched: no maximum
    assert power_law_mle(np.array([0, 7, 0]), 10) == (None, None)  # zeros are not rows
    assert power_law_mle(np.array([], dtype=np.int64), 10) == (None, None)
    # all rows equally often: as flat as the uniform law; the estimate is 0 with no error
    assert power_law_mle(np.full(10, 3), 10) == (0.0, None)
    assert power_law_mle(np.full(1000, 1), 1000) == (0.0, None)
    # equal counts on 10 of 1000 rows: steeper than uniform over the 1000
    alpha, se = power_law_mle(np.full(10, 3), 1000)
    assert alpha is not None and alpha > 0.5 and se is not None


@FAST
@given(
    st.lists(st.integers(0, 50), min_size=1, max_size=30),
    st.integers(0, 100),
)
def test_power_law_mle_matches_the_mean_log_rank(counts: list[int], extra_rows: int) -> None:
    """The MLE's defining equation: E_alpha[log k] equals the counts' mean log-rank."""
    arr = np.array(counts)
    rows = len(counts) + extra_rows
    alpha, se = power_law_mle(arr, rows)
    ranked = np.sort(arr[arr > 0])[::-1].astype(np.float64)
    if rows < 2 or len(ranked) == 0:
        assert (alpha, se) == (None, None)
        return
    target = float((ranked * np.log(np.arange(1, len(ranked) + 1))).sum() / ranked.sum())
    if alpha is None:  # steeper than alpha = 16 allows (a single touched row)
        assert target <= mean_log_rank(16.0, rows)[0]
    elif alpha == 0.0 and se is None:
        assert target >= mean_log_rank(0.0, rows)[0]
    else:
        assert 0.0 < alpha < 16.0
        assert math.isclose(mean_log_rank(alpha, rows)[0], target, rel_tol=1e-9, abs_tol=1e-12)


@pytest.mark.parametrize(
    ("counts", "want"),
    [
        ([], 0),
        ([0, 0], 0),
        ([1], 1),
        ([5, 9], 2),  # no singletons: what was seen
        ([1, 1, 1, 2, 3], 6),  # 5 + 3 * 2 // (2 * (1 + 1))
        ([1, 1, 1, 1], 10),  # 4 + 4 * 3 // (2 * 1)
        ([0, 0, 1, 1, 2], 3),  # 3 + 2 * 1 // (2 * 2) (rounded down)
        ([1] * 10 + [2] * 4 + [7], 24),  # 15 + 10 * 9 // (2 * 5)
    ],
)
def test_chao1_golden(counts: list[int], want: int) -> None:
    assert chao1(np.array(counts, dtype=np.int64)) == want


@FAST
@given(st.lists(st.integers(0, 6), max_size=40))
def test_chao1_is_at_least_what_was_seen(counts: list[int]) -> None:
    arr = np.array(counts, dtype=np.int64)
    seen = int((arr > 0).sum())
    assert seen <= chao1(arr) <= seen + seen * seen // 2


# -- the fit on synthetic traces -----------------------------------------------------------

# (name, rows, alpha, pooling): batch size 256, so >= 25,600 lookups per table
TABLES = (
    ("a", 50_000, 0.8, 1),
    ("b", 20_000, 1.0, 1),
    ("c", 5_000, 1.2, 1),
    ("d", 200_000, 1.4, 1),
    ("e", 1_000_000, 1.1, 2),
)
BATCH_SIZE, BATCHES = 256, 100
# per case: (reuse, drift) of each table. Every case uses seed 1: a survey over seeds
# 1-10 of each case recovered every table (see the issue 8 note), so no seed is picked
CASES: dict[str, tuple[tuple[float, float], ...]] = {
    "plain": ((0.0, 0.0),) * 5,
    "reuse": ((0.3, 0.0),) * 5,
    "drift": ((0.0, 1e-4),) * 5,
    "reuse_and_drift": ((0.4, 2e-4),) * 5,
    "mixed": ((0.0, 0.0), (0.3, 1e-4), (0.15, 0.0), (0.4, 2e-4), (0.1, 5e-5)),
}
SEED = 1


def _spec(case: str, batches: int = BATCHES) -> WorkloadSpec:
    tables = tuple(
        TableSpec(name, rows, alpha=alpha, pooling=pooling, reuse=reuse, drift=drift)
        for (name, rows, alpha, pooling), (reuse, drift) in zip(TABLES, CASES[case], strict=True)
    )
    return WorkloadSpec(case, tables, batch_size=BATCH_SIZE, batches=batches, seed=SEED)


class _Lab:
    """Traces generated once per module, and their fits (default options) once each."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._traces: dict[str, Trace] = {}
        self._fits: dict[str, FitResult] = {}

    def trace(self, name: str, spec: WorkloadSpec | None = None) -> Trace:
        if name not in self._traces:
            path = generate(spec or _spec(name), self.folder / name)
            self._traces[name] = open_trace(path)
        return self._traces[name]

    def fit(self, name: str) -> FitResult:
        if name not in self._fits:
            self._fits[name] = fit_trace(self.trace(name))
        return self._fits[name]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> _Lab:
    return _Lab(tmp_path_factory.mktemp("fit"))


@pytest.mark.parametrize("case", list(CASES))
def test_fit_recovers_known_parameters(lab: _Lab, case: str) -> None:
    result = lab.fit(case)
    spec = _spec(case)
    assert [t.name for t in result.tables] == [t.name for t in spec.tables]
    assert result.batches == BATCHES and result.first_batch == 0
    assert result.lookups == spec.lookups
    for fitted, true in zip(result.tables, spec.tables, strict=True):
        assert fitted.lookups == BATCH_SIZE * BATCHES * true.pooling
        assert fitted.pooling == true.pooling
        assert fitted.rows == fitted.declared_rows == true.rows
        assert fitted.rows_source == "declared"
        assert fitted.lookups >= 10_000
        assert fitted.alpha is not None, fitted.alpha_note
        assert fitted.alpha_note == "fitted"
        assert abs(fitted.alpha - true.alpha) <= 0.05, (fitted.name, fitted.alpha, true.alpha)
        assert fitted.alpha_spec == fitted.alpha
        assert fitted.alpha_ci is not None
        assert fitted.alpha_ci[0] <= fitted.alpha <= fitted.alpha_ci[1]
        assert abs(fitted.reuse - true.reuse) <= 0.05, (fitted.name, fitted.reuse, true.reuse)
        assert fitted.drift >= 0.0
    # the spec generates what was fitted, with the trace's shape
    assert result.spec.batch_size == BATCH_SIZE and result.spec.batches == BATCHES
    for table, fitted in zip(result.spec.tables, result.tables, strict=True):
        assert (table.name, table.rows, table.pooling) == (fitted.name, fitted.rows, fitted.pooling)
        assert (table.alpha, table.reuse, table.drift) == (
            fitted.alpha_spec,
            fitted.reuse,
            fitted.drift,
        )
    weights = [t.lookups for t in result.tables]
    assert math.isclose(
        result.reuse, np.average([t.reuse for t in result.tables], weights=weights), rel_tol=1e-12
    )
    assert math.isclose(
        result.drift,
        np.average([t.drift for t in result.tables], weights=weights),
        rel_tol=1e-12,
        abs_tol=1e-18,
    )


# 200 batches a half: on 50-batch halves a table of 256 lookups per batch whose few hot
# rows drift (table d) differs from itself by about 7% in consecutive reuse between the
# two halves, so 10% would be a coin toss there, not a test of the fit
HELD_OUT_BATCHES = 400


@pytest.mark.parametrize("case", ["drift", "mixed"])
def test_fit_on_one_half_predicts_the_other(lab: _Lab, case: str) -> None:
    trace = lab.trace(f"{case}_long", _spec(case, HELD_OUT_BATCHES))
    half = HELD_OUT_BATCHES // 2
    result = fit_trace(trace, batch_range=(0, half))
    assert result.batches == half and result.first_batch == 0
    assert any(f"fitted on batches [0, {half})" in note for note in result.notes)
    check = check_fit(trace, result, against=(half, HELD_OUT_BATCHES))
    assert check["sample"] == {"first_batch": half, "batches": half}
    assert check["synthetic"]["batches"] == half
    assert [e["name"] for e in check["tables"]] == [name for name, *_ in TABLES]
    assert check["overall"]["name"] == "overall"
    for entry in [*check["tables"], check["overall"]]:
        assert set(entry["stats"]) == set(CHECKED)
        for stat, value in entry["stats"].items():
            assert value["rel_diff"] is not None
            assert abs(value["rel_diff"]) <= 0.10, (entry["name"], stat, value)
            # the noise: what a perfect fit would still show, here well below 10%
            assert value["noise"] is not None and 0.0 <= value["noise"] < 0.05, (stat, value)
        # the curve from 10 batches on: its first points are single batches, whose noise
        # the distinct-per-batch mean above averages away (table d's first held-out batch
        # touches 89 rows where its batches average 72)
        curve = entry["curve"]
        for x, want, got in zip(curve["batches"], curve["sample"], curve["synthetic"], strict=True):
            if x >= 10:
                assert abs(got - want) <= 0.10 * want, (entry["name"], x, want, got)


def _inspected(stats: dict[str, Any]) -> dict[str, float]:
    return {
        "distinct_per_batch": stats["distinct_per_batch_mean"],
        "consecutive_reuse": stats["consecutive_reuse_mean"],
        "top1pct_share": stats["top1pct_share"],
        "touched_rows": stats["distinct_rows"],
    }


def _same_stats(got: dict[str, dict[str, float]], want: dict[str, float], side: str) -> None:
    for stat in CHECKED:
        assert math.isclose(got[stat][side], want[stat], rel_tol=1e-12), (stat, side)


def test_check_measures_both_sides_as_inspect_does(lab: _Lab) -> None:
    """The check's statistics are `replay inspect`'s: on the sample, and on the synthetic
    trace of the fitted spec (regenerated here from the spec and its seed)."""
    trace = lab.trace("mixed")
    result = lab.fit("mixed")
    check = check_fit(trace, result)
    assert check["sample"] == {"first_batch": 0, "batches": BATCHES}
    sample = inspect_trace(trace)
    batch, table, row = CompiledWorkload.from_spec(result.spec).lookups(0, BATCHES)
    synthetic = inspect_arrays(batch, table, row, [t.rows for t in result.spec.tables])
    assert check["synthetic"]["seed"] == result.spec.seed
    assert check["synthetic"]["lookups"] == len(row)
    for entry, want_sample, want_synthetic in zip(
        [*check["tables"], check["overall"]],
        [*sample["tables"], sample],
        [*synthetic["tables"], synthetic],
        strict=True,
    ):
        _same_stats(entry["stats"], _inspected(want_sample), "sample")
        _same_stats(entry["stats"], _inspected(want_synthetic), "synthetic")
        for value in entry["stats"].values():
            want_rel = (value["synthetic"] - value["sample"]) / value["sample"]
            assert math.isclose(value["rel_diff"], want_rel, rel_tol=1e-12, abs_tol=1e-15)
        curve = entry["curve"]
        assert curve["batches"][0] == 1 and curve["batches"][-1] == BATCHES
        assert curve["sample"][-1] == entry["stats"]["touched_rows"]["sample"]
        assert curve["synthetic"][-1] == entry["stats"]["touched_rows"]["synthetic"]
        assert curve["sample"] == sorted(curve["sample"])  # rows touched only accumulate


def test_the_same_trace_and_seed_give_the_same_fit(lab: _Lab) -> None:
    first = lab.fit("reuse_and_drift").to_dict()
    said: list[str] = []
    again = fit_trace(lab.trace("reuse_and_drift"), seed=0, progress=said.append).to_dict()
    assert again == first
    assert said and all(isinstance(line, str) and line for line in said)


# -- small, flat and row counts -----------------------------------------------------------------


def test_a_table_of_few_lookups_is_too_small(lab: _Lab) -> None:
    spec = WorkloadSpec(
        "small",
        (TableSpec("tiny", 1000, alpha=1.0), TableSpec("big", 5000, alpha=1.0, pooling=40)),
        batch_size=2,
        batches=40,
        seed=1,
    )
    tiny, big = fit_trace(lab.trace("small", spec)).tables
    assert tiny.lookups == 80 < MIN_FIT_LOOKUPS
    assert tiny.alpha is None and tiny.alpha_ci is None
    assert tiny.alpha_note == f"too small to fit: 80 lookups (< {MIN_FIT_LOOKUPS})"
    assert tiny.alpha_note.startswith("too small")
    assert 0.0 < tiny.alpha_spec <= 4.0  # the spec still generates with the estimate
    assert big.lookups == 3200 and big.alpha is not None and big.alpha_note == "fitted"


@pytest.mark.parametrize(("rows", "seed"), [(50_000, 1), (50_000, 2), (5_000, 1), (1_000, 3)])
def test_a_uniform_table_is_too_flat(lab: _Lab, rows: int, seed: int) -> None:
    """(50,000, 2) came out at alpha 0.23 with drift at its ceiling, "fitted", before the
    uniform law was tried against the fit: a small alpha and the fastest drift look
    uniform too, and the delta-method interval did not see it."""
    spec = WorkloadSpec(
        "flat",
        (TableSpec("u", rows, alpha=0.0), TableSpec("s", 20_000, alpha=1.0)),
        batch_size=256,
        batches=100,
        seed=seed,
    )
    flat, skewed = fit_trace(lab.trace(f"flat_{rows}_{seed}", spec)).tables
    assert flat.alpha is None and flat.alpha_ci is None
    assert flat.alpha_note.startswith(
        "too flat to fit: the uniform law (alpha 0) matches the statistics as well"
    ), flat.alpha_note
    # the spec generates the uniform law (drift means nothing there)
    assert flat.alpha_spec == 0.0 and flat.drift == 0.0 and flat.reuse < 0.01
    # the plain MLE is biased up (rows seen once or never are ranked as if sparse)
    assert flat.alpha_mle is not None and flat.alpha_mle > 0.1
    assert skewed.alpha_note == "fitted" and skewed.alpha is not None
    assert abs(skewed.alpha - 1.0) <= 0.05


def _row_counts(trace: Trace) -> list[np.ndarray]:
    chunk = trace.lookups()
    return [
        np.unique(chunk.row[chunk.table == t], return_counts=True)[1]
        for t in range(len(trace.table_names))
    ]


def _rows_spec() -> WorkloadSpec:
    tables = (
        TableSpec("r1", 20_000, alpha=1.0, reuse=0.2),
        TableSpec("r2", 300_000, alpha=0.9),
    )
    return WorkloadSpec("rows", tables, batch_size=128, batches=40, seed=3)


def test_observed_rows_are_the_rows_touched(lab: _Lab) -> None:
    trace = lab.trace("rows", _rows_spec())
    result = fit_trace(trace, rows_mode="observed")
    for t, (table, counts) in enumerate(zip(result.tables, _row_counts(trace), strict=True)):
        assert table.rows == table.distinct_rows == len(counts)
        assert table.rows_source == "observed"
        assert table.declared_rows == trace.table_rows[t]
    assert [t.rows for t in result.spec.tables] == [t.distinct_rows for t in result.tables]


def test_extrapolated_rows_are_fitted_from_chao1_up_to_the_declared_rows(lab: _Lab) -> None:
    trace = lab.trace("rows", _rows_spec())
    result = fit_trace(trace, rows_mode="extrapolate")
    for t, (table, counts) in enumerate(zip(result.tables, _row_counts(trace), strict=True)):
        assert table.distinct_rows == len(counts)
        # the declared rows (above Chao1 here) are the bracket's top
        assert chao1(counts) <= table.rows <= trace.table_rows[t]
        assert chao1(counts) >= table.distinct_rows
        assert table.rows_source == f"extrapolated (fitted, at least chao1 {chao1(counts):,})"
    # r2 sees most of its rows once: the extrapolation goes well beyond them
    assert result.tables[1].rows > 2 * result.tables[1].distinct_rows
    assert [t.rows for t in result.spec.tables] == [t.rows for t in result.tables]


def test_max_lookups_fits_a_prefix_of_whole_batches(lab: _Lab) -> None:
    trace = lab.trace("rows", _rows_spec())
    result = fit_trace(trace, max_lookups=trace.num_lookups // 4)
    assert result.batches == 10 and result.lookups == trace.num_lookups // 4
    assert any("--max-lookups" in note for note in result.notes)
    assert result.max_lookups == trace.num_lookups // 4


def test_bad_options_are_config_errors(lab: _Lab) -> None:
    trace = lab.trace("rows", _rows_spec())
    with pytest.raises(ConfigError, match="--rows"):
        fit_trace(trace, rows_mode="guess")
    with pytest.raises(ConfigError, match="--max-lookups"):
        fit_trace(trace, max_lookups=0)
    for bad in ((5, 5), (-1, 10), (0, 41), (30, 20)):
        with pytest.raises(ConfigError, match="batch range"):
            fit_trace(trace, batch_range=bad)


# -- the hot values (issue 28) ---------------------------------------------------------------


def _hot_pmf(rows: int, alpha: float, hot: tuple[float, ...]) -> np.ndarray:
    """The spec's law: s_i on the hot ranks, k^-alpha scaled to 1 - sum s above them."""
    k = np.arange(1, rows + 1, dtype=np.float64)
    pmf = k**-alpha
    j = len(hot)
    pmf[j:] *= (1.0 - sum(hot)) / pmf[j:].sum()
    pmf[:j] = hot
    return pmf


def test_hot_values_test_on_expected_counts() -> None:
    """Expected counts of the plain power law: no rank stands out (the rest's exponent is
    the whole law's, so every LR is 0); of one hot value of 0.3: rank 1 stands out, the
    rest's exponent is the truth and the kept share is 0.3; of two alike hot values
    (0.46, 0.37), as Criteo's C19 and C23: rank 1 alone does not stand out against a law
    fitted to ranks >= 2 (LR_1 = 0), the step-down keeps both."""
    rows, alpha = 5_000, 1.1
    plain = hot_values_test(np.rint(1e9 * _hot_pmf(rows, alpha, ())), rows)
    assert plain.count == 0 and not plain.stands_out and plain.shares == ()
    assert all(r.lr < 1e-3 for r in plain.ranks) and len(plain.ranks) == 3
    assert plain.alpha_rest is not None and abs(plain.alpha_rest - alpha) < 1e-5
    one = _hot_pmf(rows, alpha, (0.3,))
    hot = hot_values_test(np.rint(1e9 * one), rows)
    assert hot.count == 1 and hot.ranks[0].lr > 1e6 and hot.ranks[1].lr < 1e-3
    assert hot.alpha_rest is not None and abs(hot.alpha_rest - alpha) < 1e-5
    assert hot.top_share == pytest.approx(0.3, rel=1e-6)
    assert hot.shares == pytest.approx((0.3,), rel=1e-6)
    two = hot_values_test(np.rint(1e9 * _hot_pmf(rows, alpha, (0.46, 0.37))), rows)
    assert two.ranks[0].lr == 0.0 and two.ranks[1].stands_out and not two.ranks[2].stands_out
    assert two.count == 2 and two.shares == pytest.approx((0.46, 0.37), rel=1e-6)
    assert two.alpha_rest is not None and abs(two.alpha_rest - alpha) < 1e-5
    # too few rows or no rest: no test
    assert not hot_values_test(np.array([90, 10]), 2).stands_out
    assert not hot_values_test(np.array([90, 10]), 50).stands_out  # the rest on one row


HOT_TABLES = (
    # (name, rows, alpha, hot_shares): batch size 256, 100 batches
    ("h37", 20_000, 1.0, (0.37,)),
    ("h46", 200_000, 0.9, (0.46, 0.2)),
    ("plain", 5_000, 1.2, ()),
)


def test_fit_finds_the_hot_values_first(lab: _Lab) -> None:
    """The hot tables' top rows stand out, the fitted hot ranks take their observed
    shares (the MLE), and the rest's alpha is recovered; the plain table gets none."""
    spec = WorkloadSpec(
        "hot",
        tuple(TableSpec(n, r, alpha=a, hot_shares=h) for n, r, a, h in HOT_TABLES),
        batch_size=BATCH_SIZE,
        batches=BATCHES,
        seed=SEED,
    )
    trace = lab.trace("hot", spec)
    result = fit_trace(trace)
    for fitted, (name, _, alpha, hot), counts in zip(
        result.tables, HOT_TABLES, _row_counts(trace), strict=True
    ):
        observed = np.sort(counts)[::-1] / counts.sum()
        assert fitted.top_share == pytest.approx(observed[0], rel=1e-12)
        assert len(fitted.hot_shares) == len(hot), (name, fitted.hot_tests)
        assert fitted.hot_shares == pytest.approx(tuple(observed[: len(hot)]), rel=1e-12)
        assert np.abs(np.array(fitted.hot_shares) - hot).max(initial=0.0) <= 0.02, name
        assert fitted.misfit <= 25.0 and fitted.alpha_note == "fitted", (name, fitted.alpha_note)
        assert abs(fitted.alpha_spec - alpha) <= 0.05, (name, fitted.alpha_spec)
    for table, fitted in zip(result.spec.tables, result.tables, strict=True):
        assert table.hot_shares == fitted.hot_shares
    document = result.to_dict()["tables"][1]
    assert document["hot_shares"] == list(result.tables[1].hot_shares)
    assert document["hot_values"]["kept"] == 2
    assert [r["stands_out"] for r in document["hot_values"]["ranks"]][1] is True


def test_plain_tables_get_no_hot_value(lab: _Lab) -> None:
    """No false alarm on the power-law tables of every case (25 tables, level 0.001 per
    rank tested)."""
    for case in CASES:
        for fitted in lab.fit(case).tables:
            assert not fitted.hot_stands_out and fitted.hot_shares == (), (case, fitted.name)


CRITEO_ROWS = Path(__file__).resolve().parents[2] / "shared/data/criteo/criteo1tb_head1000.tsv"


@pytest.mark.skipif(not CRITEO_ROWS.exists(), reason="the real Criteo rows are not here")
def test_fit_on_the_real_criteo_rows(tmp_path: Path) -> None:
    """The 1,000 real rows (Criteo 1TB day 0, ../shared): ingested with a dictionary in
    batches of 50, fitted with Chao1 rows. The value that takes 37.4% of C1, C10, C20
    and C22 stands out (with ranks 2 and 3 kept by the step-down: rank 3's LR is 11),
    the two values of C14, C16, C17, C19 and C23 (the empty value and another, 37-47%
    each) stand out together though rank 1 alone does not, and every hot rank keeps its
    observed share. Fitted on the first half, the look-alike matches the held-out half's
    top-1% share and distinct rows per batch, overall, within 10%, in the default
    `--rows auto` (on all rows 26 of 26 tables converge, seeds 0-2; at the declared
    rows alone 9: a dictionary's rows are only the values the sample saw). Measured
    convergence with the rows fitted (from Chao1 up, `fit.py`): 26 of 26 tables on all
    rows (seeds 0, 1, 2) and on the half. At Chao1's rows it was 23 and 25: C1, C20 (one
    column twice) and C11 stayed out, the fitted trace touching 15-20% fewer rows than
    the sample, whose tail below the hot values is flatter than one power law (issue 28
    notes)."""
    from replay.trace.criteo import ingest

    out = tmp_path / "criteo"
    ingest(CRITEO_ROWS, out, batch_size=50, dictionary=True)
    trace = open_trace(out)
    result = fit_trace(trace, rows_mode="extrapolate")
    tables = {t.name: t for t in result.tables}
    kept = {n: len(t.hot_shares) for n, t in tables.items() if t.hot_stands_out}
    assert {n: kept.get(n) for n in ("C1", "C10", "C20", "C22")} == dict.fromkeys(
        ("C1", "C10", "C20", "C22"), 3
    )
    assert {n: kept.get(n) for n in ("C14", "C16", "C17", "C19", "C23")} == dict.fromkeys(
        ("C14", "C16", "C17", "C19", "C23"), 2
    )
    assert tables["C14"].hot_tests[0][1] == 0.0  # rank 1 alone is masked by rank 2
    assert tables["C1"].hot_shares == pytest.approx((0.374, 0.077, 0.074), abs=1e-12)
    assert tables["C23"].hot_shares == pytest.approx((0.461, 0.374), abs=1e-12)
    for t, counts in zip(result.tables, _row_counts(trace), strict=True):
        observed = np.sort(counts)[::-1] / counts.sum()
        assert t.hot_shares == pytest.approx(tuple(observed[: len(t.hot_shares)]), abs=1e-12)
    for spec_table, t in zip(result.spec.tables, result.tables, strict=True):
        assert spec_table.hot_shares == t.hot_shares  # the generated law keeps them exactly
    assert sum(t.misfit <= 25.0 for t in result.tables) >= 23
    half = trace.num_batches // 2
    # the default (--rows auto): the declared rows (a dictionary's: only what the sample
    # saw) where they converge, else the fitted ones, and each table says which
    fitted = fit_trace(trace, batch_range=(0, half))
    assert sum(t.misfit <= 25.0 for t in fitted.tables) >= 24
    sources = [t.rows_source for t in fitted.tables]
    assert all(s.startswith("auto: ") for s in sources), sources
    assert any("extrapolated" in s for s in sources) and "auto: declared" in sources
    check = check_fit(trace, fitted, against=(half, trace.num_batches))
    for stat in ("top1pct_share", "distinct_per_batch"):
        assert abs(check["overall"]["stats"][stat]["rel_diff"]) <= 0.10, stat
