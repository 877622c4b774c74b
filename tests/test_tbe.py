"""The `tbe` policy (FBGEMM's set-associative TBE cache): its numba kernel against the slow
reference counter for counter, FBGEMM's counters, the warp sort's tie order, golden
values of a one-set cache, and the policy's sizing and presets."""

from __future__ import annotations

import itertools
import random
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_policies import Batches, assert_same, batch_range, make_policy  # the harness

from replay.engine.systems import resolve_system
from replay.errors import ConfigError
from replay.policies import POLICIES
from replay.policies.base import (
    BYPASS,
    EVICTIONS,
    FILLS,
    HITS,
    MISSES,
    NUM_COUNTERS,
    RESIDENT,
)
from replay.policies.tbe import (
    TBEPolicy,
    cache_set,
    reference_cache_set,
    reference_tbe,
    reference_warp_sort,
    tbe_sets,
    warp_bitonic_sort,
)
from replay.trace.stream import iter_batch_ranges
from replay.workload.onthefly import GeneratedTrace
from replay.workload.presets import get_preset
from replay.workload.spec import spec_from_dict

# -- the pieces ------------------------------------------------------------------------


def test_cache_set_is_fbgemms_murmur_finalizer() -> None:
    # golden values of MurmurHash3's fmix64 (pins the constants and shifts)
    assert reference_cache_set(1, 1 << 64) == 0xB456BCFC34C2CB2C
    assert reference_cache_set(0, 1 << 64) == 0
    rng = random.Random(3)
    for _ in range(2000):
        key = rng.randrange(1 << rng.choice((8, 24, 31, 40, 62)))
        sets = rng.choice((1, 7, 1000, 1 << 20, (1 << 31) - 1))
        assert cache_set(key, sets) == reference_cache_set(key, sets)


@pytest.mark.parametrize("assoc", [1, 2, 4, 8, 16, 32, 64])
def test_warp_sort_sorts_and_keeps_the_networks_tie_order(assoc: int) -> None:
    rng = random.Random(assoc)
    for _ in range(300):
        costs = [rng.randrange(4) for _ in range(assoc)]
        cost = np.array(costs, dtype=np.int64)
        slot = np.arange(assoc, dtype=np.int64)
        warp_bitonic_sort(cost, slot, assoc)
        assert cost.tolist() == sorted(costs)
        assert slot.tolist() == reference_warp_sort(costs)
        assert [costs[w] for w in slot] == sorted(costs)


def test_warp_sort_is_not_stable() -> None:
    """Equal costs leave the network in its own order, not the ways' (which is why the
    kernel runs the network rather than any sort): a stable sort of these eight ways
    would give [1, 2, 3, 4, 5, 6, 7, 0]."""
    assert reference_warp_sort([2, 1, 1, 1, 1, 1, 1, 1]) == [1, 2, 3, 4, 6, 5, 7, 0]
    assert reference_warp_sort([5, 3, 3, 5]) == [1, 2, 0, 3]
    assert reference_warp_sort([0, 0, 0, 0]) == [0, 1, 2, 3]


# -- the kernel against the reference -----------------------------------------------------


def run_tbe(
    batches: Batches, sets: int, assoc: int, algorithm: str, cuts: tuple[int, ...] = ()
) -> tuple[np.ndarray, dict[str, int]]:
    policy = make_policy(
        "tbe", batches, sets * assoc, associativity=assoc, cache_algorithm=algorithm
    )
    assert isinstance(policy, TBEPolicy)
    out = np.zeros((len(batches), NUM_COUNTERS), dtype=np.int64)
    edges = [0, *sorted(set(cuts)), len(batches)]
    for lo, hi in itertools.pairwise(edges):
        policy.process(batch_range(batches, lo, hi), out[lo:hi])
    return out, policy.fbgemm_counters()


@st.composite
def tbe_cases(draw: st.DrawFn) -> dict[str, Any]:
    keys = draw(st.integers(1, 40))
    lookups = st.lists(st.integers(0, keys - 1), max_size=30)
    batches = draw(st.lists(st.tuples(lookups, lookups), min_size=1, max_size=8))
    cuts = tuple(draw(st.lists(st.integers(1, len(batches)), max_size=3)))
    return {
        "batches": [(list(lk), list(up)) for lk, up in batches],
        "sets": draw(st.integers(1, 5)),
        "assoc": draw(st.sampled_from([1, 2, 4, 8])),
        "algorithm": draw(st.sampled_from(["lru", "lfu"])),
        "cuts": cuts,
    }


@settings(max_examples=150, deadline=None)
@given(case=tbe_cases())
def test_kernel_matches_reference(case: dict[str, Any]) -> None:
    got, got_totals = run_tbe(
        case["batches"], case["sets"], case["assoc"], case["algorithm"], case["cuts"]
    )
    want, totals = reference_tbe(case["batches"], case["sets"], case["assoc"], case["algorithm"])
    assert_same(got, want, str(case))
    assert got_totals == totals
    lookups = [len(lk) for lk, _ in case["batches"]]
    assert np.array_equal(got[:, HITS] + got[:, MISSES], lookups)
    assert np.all(got[:, BYPASS] <= got[:, MISSES])
    assert np.array_equal(np.cumsum(got[:, FILLS] - got[:, EVICTIONS]), got[:, RESIDENT])
    assert totals["conflict_misses"] == got[:, BYPASS].sum()
    assert totals["unique_misses"] >= totals["conflict_unique_misses"]


def _batches_of(trace: Any) -> Batches:
    return [
        (
            br.keys[br.bounds[i] : br.bounds[i + 1]].tolist(),
            br.update_keys[br.update_bounds[i] : br.update_bounds[i + 1]].tolist(),
        )
        for br in iter_batch_ranges(trace, 0, trace.num_batches, with_updates=True)
        for i in range(br.batches)
    ]


def _workload(preset: str, *, scale: float, pooling: int) -> GeneratedTrace:
    data = get_preset(preset).to_dict()
    data.update(batches=30, batch_size=48, seed=11)
    for i, table in enumerate(data["tables"]):
        table["rows"] = max(8, int(table["rows"] * scale))
        if pooling > 1 and i % 3 == 0:
            table["pooling"] = pooling  # multi-hot tables beside one-hot ones
    return GeneratedTrace(spec_from_dict(data, where="test"))


TOTALS_SEEN: dict[str, int] = {"evictions": 0, "conflicts": 0}


# Kaggle's key space (33.8 M linear indices) and Terabyte's (187.8 M, here multi-hot) at
# low and high load factors (a few batches rarely fill such caches), and the same table
# shapes scaled down, where every load factor evicts and conflicts.
CRITEO_CASES = [
    ("criteo-kaggle", 1.0, 1, 0.01, "lru"),
    ("criteo-kaggle", 1.0, 1, 0.5, "lfu"),
    ("criteo-terabyte", 1.0, 4, 0.05, "lru"),
    ("criteo-terabyte", 1.0, 4, 0.01, "lfu"),
    *(
        (preset, scale, pooling, load_factor, algorithm)
        for preset, scale, pooling in (("criteo-kaggle", 1e-3, 1), ("criteo-terabyte", 2e-4, 4))
        for load_factor in (0.01, 0.05, 0.2, 0.5)
        for algorithm in ("lru", "lfu")
    ),
]


@pytest.mark.parametrize(("preset", "scale", "pooling", "load_factor", "algorithm"), CRITEO_CASES)
def test_kernel_matches_reference_on_criteo_workloads(
    preset: str, scale: float, pooling: int, load_factor: float, algorithm: str
) -> None:
    trace = _workload(preset, scale=scale, pooling=pooling)
    total = int(np.sum(trace.table_rows))
    sets = tbe_sets(int(total * load_factor), 32)
    batches = _batches_of(trace)
    got, got_totals = run_tbe(batches, sets, 32, algorithm, cuts=(7, 19))
    want, totals = reference_tbe(batches, sets, 32, algorithm)
    assert_same(got, want, f"{preset} x{scale} clf {load_factor} {algorithm}")
    assert got_totals == totals
    TOTALS_SEEN["evictions"] += int(got[:, EVICTIONS].sum())
    TOTALS_SEEN["conflicts"] += int(got[:, BYPASS].sum())


def test_the_criteo_cases_exercise_evictions_and_conflicts() -> None:
    """Runs after the cases above (file order): they were not all cold misses."""
    if TOTALS_SEEN["evictions"] == 0:  # run alone: replay the smallest case here
        test_kernel_matches_reference_on_criteo_workloads("criteo-kaggle", 1e-3, 1, 0.01, "lru")
        test_kernel_matches_reference_on_criteo_workloads("criteo-kaggle", 1e-3, 1, 0.01, "lfu")
    assert TOTALS_SEEN["evictions"] > 0 and TOTALS_SEEN["conflicts"] > 0


# -- one set: an LRU over batch time stamps ------------------------------------------------


def test_one_set_is_an_lru_of_batch_time_stamps_golden() -> None:
    """A cache of one set of 4 ways: a row's recency is the batch it was last used in; a
    batch's misses go to the ways not used in it, least recent first; a miss that finds
    no such way is a conflict miss, read from the host and not cached."""
    batches: Batches = [
        ([1], []),  # miss 1: 1 row cached
        ([2, 2], [2]),  # miss 2 (its second lookup hits): 2 cached; the update is cached
        ([3], []),  # miss
        ([4, 1], []),  # 4 misses, 1 hits: full, times 1:b3 2:b1 3:b2 4:b3
        ([5, 6, 1], [6, 9]),  # 1 hits; 5 and 6 evict 2 (b1) and 3 (b2)
        ([2, 3, 7, 8, 4, 4], []),  # 4 hits; 3 ways free for 2, 3, 7, 8: 8 conflicts (x1)
        ([8, 8, 8], [8]),  # 8 misses and evicts one of the b5 rows
    ]
    out, totals = run_tbe(batches, sets=1, assoc=4, algorithm="lru")
    want = {
        HITS: [0, 1, 0, 1, 1, 2, 2],
        MISSES: [1, 1, 1, 1, 2, 4, 1],
        FILLS: [1, 1, 1, 1, 2, 3, 1],
        EVICTIONS: [0, 0, 0, 0, 2, 3, 1],
        BYPASS: [0, 0, 0, 0, 0, 1, 0],
        RESIDENT: [1, 2, 3, 4, 4, 4, 4],
    }
    for column, values in want.items():
        assert out[:, column].tolist() == values, column
    assert out[:, 6].tolist() == [0, 1, 0, 0, 1, 0, 1]  # updates_fast: 2, 6, 8 cached
    assert totals == {
        "calls": 7,
        "requested_indices": 18,
        "unique_indices": 14,
        "unique_misses": 11,
        "conflict_unique_misses": 1,
        "conflict_misses": 1,
    }
    assert_same(out, reference_tbe(batches, 1, 4)[0], "one set")


@settings(max_examples=150, deadline=None)
@given(
    batches=st.lists(st.lists(st.integers(0, 15), max_size=20), min_size=1, max_size=8),
    assoc=st.sampled_from([16, 32, 64]),
)
def test_one_set_holding_every_row_misses_only_first_lookups(
    batches: list[list[int]], assoc: int
) -> None:
    """One set of at least as many ways as rows: nothing is ever evicted or conflicts,
    and a batch misses exactly its rows never seen before, once each."""
    trace: Batches = [(lk, []) for lk in batches]
    out, _ = run_tbe(trace, sets=1, assoc=assoc, algorithm="lru")
    seen: set[int] = set()
    for b, lookups in enumerate(batches):
        new = set(lookups) - seen
        seen |= new
        assert out[b, MISSES] == out[b, FILLS] == len(new)
        assert out[b, HITS] == len(lookups) - len(new)
        assert out[b, EVICTIONS] == out[b, BYPASS] == 0


def test_lfu_keeps_the_frequent_row_and_can_evict_a_hit() -> None:
    """One set of 1 way: LFU replaces the resident only with a row counted at least as
    often (counts kept for every row, never decayed); a replaced row that hit in the
    same batch is read from the host (a conflict miss)."""
    batches: Batches = [
        ([1, 1, 1], []),  # 1 cached, count 3
        ([2], []),  # 2 (count 1) < 3: conflict
        ([2, 2, 2, 1], []),  # 1 hits (count 4); 2 reaches 4 >= 4: evicts 1 -> 1 conflicts
    ]
    out, totals = run_tbe(batches, sets=1, assoc=1, algorithm="lfu")
    assert out[:, FILLS].tolist() == [1, 0, 1]
    assert out[:, BYPASS].tolist() == [0, 1, 1]
    assert out[:, MISSES].tolist() == [1, 1, 2]
    assert out[:, HITS].tolist() == [2, 0, 2]
    assert totals["conflict_misses"] == 2 and totals["conflict_unique_misses"] == 1


# -- sizing and presets -------------------------------------------------------------------


def test_sets_follow_fbgemms_rounding() -> None:
    assert tbe_sets(0, 32) == 1
    assert tbe_sets(32, 32) == 1
    assert tbe_sets(33, 32) == 2
    system = resolve_system("hbm-tbe-lru", ["policy.cache_load_factor=0.2"])
    ways = TBEPolicy.capacity(system, 1, 576, 1_000_001)
    assert ways == 32 * ((200_000 + 31) // 32)
    system = resolve_system("hbm-tbe-lru", ["policy.associativity=64", "policy.capacity_rows=100"])
    assert TBEPolicy.capacity(system, 1, 576, 10_000) == 128
    # from the byte budget: whole sets that fit it
    system = resolve_system("hbm-tbe-lru", ["policy.capacity_bytes=100000"])
    assert TBEPolicy.capacity(system, 1, 576, 10_000) == 32 * (100_000 // (576 * 32))
    with pytest.raises(ConfigError, match="associativity"):
        resolve_system("hbm-tbe-lru", ["policy.associativity=24"])
    with pytest.raises(ConfigError, match="no set"):
        TBEPolicy.capacity(
            resolve_system("hbm-tbe-lru", ["policy.capacity_bytes=1000"]), 1, 576, 10_000
        )


@pytest.mark.parametrize(("preset", "algorithm"), [("hbm-tbe-lru", "lru"), ("hbm-tbe-lfu", "lfu")])
def test_presets_run_and_report_fbgemms_counters(preset: str, algorithm: str) -> None:
    from replay.engine.replay import replay_trace

    system = resolve_system(preset, ["policy.cache_load_factor=0.001"])
    assert system.policy.name == "tbe" and system.policy.cache_algorithm == algorithm
    trace = _workload("criteo-kaggle", scale=1e-3, pooling=1)
    result = replay_trace(trace, system)
    pol = result.summary["policy"]
    assert pol["algorithm"] == algorithm and pol["associativity"] == 32
    counters = pol["fbgemm_counters"]
    assert counters["calls"] == trace.num_batches
    assert counters["requested_indices"] == result.summary["lookups"]
    assert counters["conflict_misses"] == pol["bypass"]
    assert pol["misses"] == pol["fills"] + pol["bypass"]
    assert pol["writebacks"] == pol["evictions"]
    assert POLICIES["tbe"].demand_fill


def test_run_and_report_show_fbgemms_counters(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from replay.cli import main

    out = tmp_path / "run"
    code = main([
        "run", "--workload", "tiny", "--batches", "8", "--system", "hbm-tbe-lfu",
        "--set", "policy.cache_load_factor=0.01", "--out", str(out),
    ])  # fmt: skip
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "FBGEMM TBE cache: " in printed and " ways (load factor " in printed
    assert "conflict unique misses" in printed
    # and the report shows FBGEMM's counters of every tbe run
    assert main(["report", str(out), "--out", str(tmp_path / "report")]) == 0
    text = (tmp_path / "report" / "report.md").read_text()
    assert "| system | cache | load factor | unique misses | conflict unique misses |" in text
    assert " x 32, LFU | " in text


def test_conflicts_without_evictions_are_no_degenerate_cache() -> None:
    """The 'held everything, never evicted' warning is not for a cache that served misses
    uncached: one way, batch [1, 2]: 1 fills the empty way, 2 finds it used (a conflict)."""
    from replay.engine.account import study_warnings

    out, totals = run_tbe([([1, 2], [])], sets=1, assoc=1, algorithm="lru")
    assert out[0, EVICTIONS] == 0 and out[0, BYPASS] == 1 and totals["conflict_misses"] == 1
    policy = {
        "capacity_units": 1, "unit_rows": 1, "resident_max": 1, "hit_ratio": 0.0,
        "evictions": 0, "bypass": int(out[0, BYPASS]),
    }  # fmt: skip
    assert study_warnings({"policy": policy}, evicts=True) == []
    assert len(study_warnings({"policy": {**policy, "bypass": 0}}, evicts=True)) == 1
