"""The plan's cache baselines (issue 40): the budget's split is compared with one cache of
the budget shared by every table (what TorchRec runs for the tables of a TBE) and with
per-table caches at one load factor, and both baselines equal slow references: an LRU
cache in an ordered dict over the run's keys (all tables together, then each table on
its own at floor(load factor x rows) rows). A sampled plan reads small tables' caches
from the full stream's head or Che's approximation, never as 0 below the sample's
resolution.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from replay._units import format_percent
from replay.analysis.stack import reference_lru_misses
from replay.plan.plan import PlanRequest, make_plan
from replay.report.plan_section import cache_line, split_verdict
from replay.trace.keys import table_offsets
from replay.trace.stream import iter_batch_ranges
from replay.workload.onthefly import GeneratedTrace
from replay.workload.presets import get_preset


def _request(spec, budget_bytes: int, rate: float | None = None) -> PlanRequest:
    return PlanRequest(
        source=spec, systems=("hbm-lru",), cache_budget_bytes=budget_bytes, hit_targets=(0.9,),
        mtbf_s=6 * 3600.0, sample_rate=rate, time_per_batch_s=0.05, draws=50,
    )  # fmt: skip


def _keys(spec) -> np.ndarray:
    return np.concatenate([r.keys for r in iter_batch_ranges(GeneratedTrace(spec))])


def _reference_baselines(spec, budget_rows: int, f: float) -> tuple[float, float]:
    """(shared LRU hit, per-table LRU hit at load factor f), by ordered-dict LRU caches."""
    keys = _keys(spec)
    shared = 1.0 - reference_lru_misses(keys, budget_rows) / len(keys)
    rows = np.array([t.rows for t in spec.tables], dtype=np.int64)
    table = np.searchsorted(table_offsets(rows), keys, side="right") - 1
    hits = 0
    for t, r in enumerate(rows):
        mine = keys[table == t]
        capacity = math.floor(f * int(r) * (1 + 1e-12))
        if capacity >= 1:
            hits += len(mine) - reference_lru_misses(mine, capacity)
    return shared, hits / len(keys)


def _check_against_references(spec, budget_bytes: int, rate: float | None) -> dict:
    doc, _ = make_plan(_request(spec, budget_bytes, rate))
    cache = doc["cache"]
    shared, uniform = _reference_baselines(
        spec, budget_bytes // doc["row_bytes"], cache["uniform_load_factor"]
    )
    assert cache["baseline"]["policy"] == "lru"
    assert abs(cache["baseline"]["hit"] - shared) < 0.01, (cache["baseline"]["hit"], shared)
    assert abs(cache["uniform_hit"] - uniform) < 0.01, (cache["uniform_hit"], uniform)
    gain = cache["split_hit"] - cache["baseline"]["hit"]
    assert cache["baseline"]["split_gain_points"] == pytest.approx(gain * 100)
    return doc


def test_exact_plan_baselines_equal_ordered_dict_lru_caches() -> None:
    # 300 batches of 256 Criteo Kaggle samples (2 M lookups, exact); 16 MiB holds 3% of
    # the rows: the per-table caches at one load factor hit well below the shared one
    spec = get_preset("criteo-kaggle").with_overrides(batches=300, batch_size=256)
    doc = _check_against_references(spec, 16 << 20, None)
    cache = doc["cache"]
    assert doc["horizon"]["sample_rate"] == 1.0
    assert cache["uniform_hit"] < cache["baseline"]["hit"] - 0.05  # the reference says so too
    assert "exact" in cache["uniform_method"]


@pytest.mark.parametrize("head", [True, False])
def test_a_sampled_plan_reads_small_tables_below_the_resolution(
    head: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # R = 2^-6: the sample resolves caches of about 1,000 rows up; the uniform load
    # factor gives most Kaggle tables fewer rows than that, which the plan read as 0.
    # Here every table's head is usable; without it (as for most of the quickstart's
    # tables) Che's approximation answers below the resolution
    import replay.plan.table_curves as table_curves

    if not head:
        from replay.analysis.shards import resolution_rows, shards_threshold

        floor = resolution_rows(shards_threshold(2.0**-6))
        monkeypatch.setattr(
            table_curves, "per_table_sizes", lambda src, spec, rate, res, rows: [floor] * len(rows)
        )
    spec = get_preset("criteo-kaggle").with_overrides(batches=200, batch_size=512)
    doc, _ = make_plan(_request(spec, 16 << 20, 2.0**-6))
    cache = doc["cache"]
    exact = _EXACT.get(spec) or _EXACT.setdefault(spec, make_plan(_request(spec, 16 << 20, 1.0))[0])
    assert abs(cache["uniform_hit"] - exact["cache"]["uniform_hit"]) < 0.01
    assert abs(cache["baseline"]["hit"] - exact["cache"]["baseline"]["hit"]) < 0.01
    small = [t for t in cache["per_table"] if t["table_rows"] < floor_rows(2.0**-6)]
    assert small and all(t["hit"] > 0 for t in small)
    expected = "exact head" if head else "Che's approximation below the sample's resolution"
    assert expected in cache["uniform_method"]


_EXACT: dict = {}


def floor_rows(rate: float) -> int:
    from replay.analysis.shards import resolution_rows, shards_threshold

    return int(resolution_rows(shards_threshold(rate)))


def test_the_summary_names_the_baseline_and_says_when_the_split_gains_nothing() -> None:
    doc = {
        "cache": {
            "budget_bytes": 8 << 30,
            "bytes_for_hit": {},
            "hit_at_budget": {"lru": 0.98},
            "split_hit": 0.9803,
            "uniform_hit": 0.645,
            "uniform_load_factor": 0.0894,
            "baseline": {
                "policy": "lru",
                "cache": "one LRU cache",
                "hit": 0.98,
                "split_gain_points": 0.03,
            },
        }
    }
    line = cache_line(doc)
    assert "as one shared LRU hits 98%" in line
    assert "the split gains nothing over the shared cache" in line
    assert "per-table caches at one load factor (0.0894) hit 64.5%" in line
    assert split_verdict(3.2) == "+3.2 points over the shared cache"
    assert "shared cache does better" in split_verdict(-1.5)


@pytest.mark.bench
def test_kaggle_2000_batch_exact_plan_against_references() -> None:
    spec = get_preset("criteo-kaggle").with_overrides(batches=2000)
    _check_against_references(spec, 64 << 20, None)


@pytest.mark.bench
def test_terabyte_sampled_like_the_quickstart_against_exact_replays() -> None:
    # the quickstart's workload, budget and rate (R = 2^-12) over 20,000 batches of 2,048
    # (1.06 G lookups), against the exact curves of the full stream (stack distances,
    # themselves held against ordered-dict LRU caches above)
    from replay.analysis.horizon import horizon_mrc, per_table_mrc

    spec = get_preset("criteo-terabyte").with_overrides(batches=20_000, batch_size=2048)
    doc, _ = make_plan(_request(spec, 8 << 30, 2.0**-12))
    cache = doc["cache"]
    budget_rows = (8 << 30) // doc["row_bytes"]
    shared = 1.0 - horizon_mrc(GeneratedTrace(spec), np.array([budget_rows])).miss_ratios[0]
    f = cache["uniform_load_factor"]
    rows = [t.rows for t in spec.tables]
    caps = [math.floor(f * r * (1 + 1e-12)) for r in rows]
    per = per_table_mrc(GeneratedTrace(spec), [np.array([max(c, 1)]) for c in caps])
    n = np.array([p.lookups for p in per], dtype=np.float64)
    hit = np.array(
        [1.0 - p.miss_ratios[0] if c >= 1 else 0.0 for p, c in zip(per, caps, strict=True)]
    )
    uniform = float((n * hit).sum() / n.sum())
    assert abs(cache["baseline"]["hit"] - shared) < 0.01, (cache["baseline"]["hit"], shared)
    assert abs(cache["uniform_hit"] - uniform) < 0.01, (cache["uniform_hit"], uniform)


def test_the_checkpoint_line_names_the_mode_and_warns_of_few_failures_and_lossy_rows() -> None:
    from replay.report.plan_section import checkpoint_line, goodput_spread, lossy

    eight = {"papers_method": True, "mode": {"quantize_bits": 8}, "interval_s": 90.0,
             "goodput": 0.9964}  # fmt: skip
    best = {
        "name": "check-n-run", "label": "check-n-run (intermittent, 2-bit)",
        "mode": {"increment": "intermittent", "quantize_bits": 2}, "interval_s": 36.0,
        "goodput": 0.9993, "goodput_p5": 0.9982, "bytes": 2**30, "failures_per_run": 0.69,
        "caveat": "2-bit rows are lossy ...", "modes": [eight],
    }  # fmt: skip
    doc = {"checkpoint": {"cluster_mtbf_s": 45 * 3600.0, "strategies": [best]}}
    line = checkpoint_line(doc)
    assert line.startswith("Checkpoint: check-n-run (intermittent, 2-bit) every 36 s")
    # rare failures: the chance of one and the goodput of a run that sees one, no percentile
    p = format_percent(-math.expm1(-0.69))
    assert f"the run expects 0.69 failures: {p} of runs see one; the mean is" in line
    assert "percentile" not in line
    given = {**best, "p_any_failure": 0.007, "goodput_given_failure": 0.992}
    assert f"{format_percent(0.007)} of runs see one, and such a run's goodput is 99.200%" in (
        checkpoint_line({**doc, "checkpoint": {**doc["checkpoint"], "strategies": [given]}})
    )
    assert "each of the run's 0.69 expected restores" in line
    assert "at 8 bits, the paper's fallback, every 1.5 min for 99.640% against 99.930%" in line
    assert goodput_spread({**best, "failures_per_run": 1.0}) == "5th percentile 99.8%"
    assert lossy({**best, "caveat": None}) == "" and lossy({**best, "mode": None}) == ""
    plain = {**best, "label": None, "name": "checkfreq", "caveat": None, "modes": []}
    assert "Checkpoint: checkfreq every" in checkpoint_line({**doc, "checkpoint": {
        **doc["checkpoint"], "strategies": [plain]}})  # fmt: skip


def test_a_tbe_system_is_compared_with_one_shared_tbe_cache() -> None:
    # the first system is FBGEMM's TBE: its user runs one TBE cache of the budget, so the
    # split is held against that replay, not against an ideal LRU
    spec = get_preset("criteo-kaggle").with_overrides(batches=30, batch_size=256)
    request = PlanRequest(
        source=spec, systems=("hbm-tbe-lru",), cache_budget_bytes=4 << 20,
        hit_targets=(0.9,), mtbf_s=6 * 3600.0, time_per_batch_s=0.05, draws=50,
    )  # fmt: skip
    doc, _ = make_plan(request)
    cache = doc["cache"]
    base = cache["baseline"]
    assert base["policy"] == "tbe-lru" and "FBGEMM TBE cache (LRU)" in base["cache"]
    assert base["hit"] == cache["hit_at_budget"]["tbe-lru"] == cache["shared_hit"]["tbe-lru"]
    assert cache["shared_hit"]["lru"] == cache["hit_at_budget"]["lru"]
    assert "as one shared TBE cache hits" in cache_line(doc)
