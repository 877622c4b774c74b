"""Placement policies: numba kernels against the pure-Python references on random traces,
counter invariants, independence from how the trace is split into ranges, Belady's
optimality bounds, chunk = lru for one-row chunks, and hand-computed golden values."""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import replay
from replay.policies import POLICIES, Policy, PolicyContext
from replay.policies.base import (
    BYPASS,
    COUNTER_NAMES,
    EVICTIONS,
    FILLS,
    HITS,
    MISSES,
    NEEDED_ROWS,
    NUM_COUNTERS,
    RESIDENT,
    RESIDENT_MAX,
    UPDATES_BACKING,
    UPDATES_FAST,
    WRITEBACKS,
)
from replay.policies.belady import reference_belady
from replay.policies.chunk import phase_budget, reference_chunk
from replay.policies.hot import reference_hot
from replay.policies.lfu import reference_lfu
from replay.policies.lru import reference_lru
from replay.policies.static import reference_static
from replay.system.spec import PolicySpec
from replay.trace.stream import BatchRange, iter_batch_ranges

Batches = list[tuple[list[int], list[int]]]  # per batch: (lookup keys, update keys)

# -- harness --------------------------------------------------------------------------


def batch_range(batches: Batches, lo: int, hi: int) -> BatchRange:
    """The BatchRange of batches [lo, hi) of a trace given as Python lists."""

    def flat(parts: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
        keys = np.array([k for p in parts for k in p], dtype=np.int64)
        bounds = np.zeros(len(parts) + 1, dtype=np.int64)
        np.cumsum([len(p) for p in parts], out=bounds[1:])
        return keys, bounds

    keys, bounds = flat([lookups for lookups, _ in batches[lo:hi]])
    ukeys, ubounds = flat([updates for _, updates in batches[lo:hi]])
    return BatchRange(lo, hi, keys, bounds, ukeys, ubounds)


def make_policy(
    name: str, batches: Batches, capacity: int, num_lookups: int = 0, **knobs: Any
) -> Policy:
    """A registered policy on a one-table key space [0, max key], prepared if it needs it
    (`num_lookups`: the lookups it is told it will see; 0, not known)."""
    total = 1 + max((k for lookups, updates in batches for k in (*lookups, *updates)), default=0)
    spec = PolicySpec(name=name, **knobs)
    cls = POLICIES[name]
    ctx = PolicyContext(
        total_keys=total,
        table_rows=np.array([total], dtype=np.int64),
        offsets=np.array([0, total], dtype=np.int64),
        num_batches=len(batches),
        row_state_bytes=64,
        capacity_units=capacity,
        unit_rows=cls.unit_rows(spec),
        num_lookups=num_lookups,
    )
    policy = cls(spec, ctx)
    if policy.needs_prepare():
        whole = batch_range(batches, 0, len(batches))
        if name == "chunk":
            policy.prepare_arrays(whole.keys, whole.bounds, whole.update_keys, whole.update_bounds)
        else:
            policy.prepare_arrays(whole.keys)
    return policy


def run_policy(
    name: str,
    batches: Batches,
    capacity: int,
    cuts: tuple[int, ...] = (),
    num_lookups: int = 0,
    **knobs: Any,
) -> np.ndarray:
    """Counters of `name` on the trace, processed as ranges split at the batches `cuts`."""
    policy = make_policy(name, batches, capacity, num_lookups, **knobs)
    out = np.zeros((len(batches), NUM_COUNTERS), dtype=np.int64)
    edges = [0, *sorted(set(cuts)), len(batches)]
    for lo, hi in itertools.pairwise(edges):
        policy.process(batch_range(batches, lo, hi), out[lo:hi])
    return out


def assert_same(got: np.ndarray, want: np.ndarray, what: str = "") -> None:
    if not np.array_equal(got, want):
        rows = [
            f"batch {b} {COUNTER_NAMES[c]}: got {got[b, c]}, want {want[b, c]}"
            for b, c in zip(*np.nonzero(got != want), strict=True)
        ]
        raise AssertionError(f"{what}: " + "; ".join(rows[:8]))


# -- random traces ----------------------------------------------------------------------


@st.composite
def traces(draw: st.DrawFn, max_keys: int = 12, max_batches: int = 6) -> Batches:
    keys = draw(st.integers(1, max_keys))
    batches: Batches = []
    for _ in range(draw(st.integers(1, max_batches))):
        lookups = draw(st.lists(st.integers(0, keys - 1), max_size=10))
        if draw(st.booleans()):  # as in a trace: the batch's distinct rows, any order
            updates = draw(st.permutations(list(dict.fromkeys(lookups))))
        else:  # any distinct rows
            updates = draw(st.lists(st.integers(0, keys - 1), unique=True, max_size=keys))
        batches.append((lookups, list(updates)))
    return batches


@st.composite
def split_traces(draw: st.DrawFn) -> tuple[Batches, tuple[int, ...]]:
    batches = draw(traces())
    n = len(batches)
    cuts = draw(st.lists(st.integers(1, n - 1), unique=True)) if n > 1 else []
    return batches, tuple(sorted(cuts))


Reference = Callable[[Batches, int], np.ndarray]
ROW_POLICIES: dict[str, tuple[str, dict[str, Any], Reference]] = {
    "lru": ("lru", {}, reference_lru),
    "lfu": ("lfu", {}, reference_lfu),
    "belady": ("belady", {"bypass": True}, lambda b, c: reference_belady(b, c, True)),
    "belady-demand": ("belady", {"bypass": False}, lambda b, c: reference_belady(b, c, False)),
    "hot-oracle": ("hot", {"warmup_batches": 0}, lambda b, c: reference_hot(b, c, 0)),
    "hot-warmup-1": ("hot", {"warmup_batches": 1}, lambda b, c: reference_hot(b, c, 1)),
    "hot-warmup-3": ("hot", {"warmup_batches": 3}, lambda b, c: reference_hot(b, c, 3)),
    "static": ("static", {}, lambda b, c: reference_static(b)),
}
capacities = st.integers(1, 8)
EXAMPLES = settings(max_examples=150, deadline=None)


def _row_capacity(config: str, capacity: int) -> int:
    return 0 if config == "static" else capacity


@pytest.mark.parametrize("config", ROW_POLICIES)
@EXAMPLES
@given(trace=traces(), capacity=capacities)
def test_row_policy_kernel_matches_reference(config: str, trace: Batches, capacity: int) -> None:
    name, knobs, reference = ROW_POLICIES[config]
    capacity = _row_capacity(config, capacity)
    got = run_policy(name, trace, capacity, **knobs)
    assert_same(got, reference(trace, capacity), config)


@pytest.mark.parametrize("config", ["lru", "lfu", "belady", "belady-demand"])
@EXAMPLES
@given(trace=traces(max_keys=40), capacity=st.integers(1, 60))
def test_a_cache_allocated_for_its_lookups_matches_reference(
    config: str, trace: Batches, capacity: int
) -> None:
    """Told the lookups it will see, a cache allocates no more slots than them (a short
    trace on a cache of gigabytes) and counts as the reference cache of the capacity
    given: it can never hold more rows than it was asked for."""
    name, knobs, reference = ROW_POLICIES[config]
    lookups = sum(len(keys) for keys, _ in trace)
    policy = make_policy(name, trace, capacity, lookups, **knobs)
    rows = policy.ctx.total_keys
    told = min(capacity, rows, lookups) if lookups else min(capacity, rows)
    assert policy.ctx.slots == max(1, told)
    got = run_policy(name, trace, capacity, num_lookups=lookups, **knobs)
    assert_same(got, reference(trace, capacity), config)


@pytest.mark.parametrize("config", ROW_POLICIES)
@EXAMPLES
@given(split=split_traces(), capacity=capacities)
def test_row_policy_split_into_ranges_changes_nothing(
    config: str, split: tuple[Batches, tuple[int, ...]], capacity: int
) -> None:
    name, knobs, _ = ROW_POLICIES[config]
    trace, cuts = split
    capacity = _row_capacity(config, capacity)
    whole = run_policy(name, trace, capacity, **knobs)
    assert_same(run_policy(name, trace, capacity, cuts, **knobs), whole, f"{config} {cuts}")


def check_invariants(out: np.ndarray, trace: Batches, capacity: int, cached: bool) -> None:
    lookups = np.array([len(lk) for lk, _ in trace])
    updates = np.array([len(up) for _, up in trace])
    assert np.array_equal(out[:, HITS] + out[:, MISSES], lookups)
    assert np.array_equal(out[:, UPDATES_FAST] + out[:, UPDATES_BACKING], updates)
    assert np.all(out >= 0)
    assert np.all(out[:, BYPASS] <= out[:, MISSES])
    assert np.all(out[:, WRITEBACKS] <= out[:, EVICTIONS])
    assert np.all(out[:, RESIDENT] <= out[:, RESIDENT_MAX])
    if cached:
        assert np.all(out[:, RESIDENT_MAX] <= capacity)
        # everything filled is resident until evicted
        assert np.array_equal(np.cumsum(out[:, FILLS] - out[:, EVICTIONS]), out[:, RESIDENT])
    else:
        assert not out[:, [MISSES, FILLS, EVICTIONS, RESIDENT, RESIDENT_MAX]].any()


@pytest.mark.parametrize("config", ROW_POLICIES)
@EXAMPLES
@given(split=split_traces(), capacity=capacities)
def test_row_policy_counter_invariants(
    config: str, split: tuple[Batches, tuple[int, ...]], capacity: int
) -> None:
    name, knobs, _ = ROW_POLICIES[config]
    trace, cuts = split
    capacity = _row_capacity(config, capacity)
    out = run_policy(name, trace, capacity, cuts, **knobs)
    check_invariants(out, trace, capacity, POLICIES[name].cached)
    if name != "hot":  # a row cache fills exactly what it does not serve from backing
        assert np.array_equal(out[:, FILLS], out[:, MISSES] - out[:, BYPASS])
    assert np.array_equal(out[:, NEEDED_ROWS], out[:, FILLS])


# -- chunk --------------------------------------------------------------------------------

fractions = st.sampled_from([0.01, 0.2, 0.25, 0.5, 0.6, 0.75, 0.99, 1.0])


@st.composite
def chunk_setups(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "chunk_rows": draw(st.integers(1, 4)),
        "forward_budget_fraction": draw(fractions),
        "backward_budget_fraction": draw(fractions),
        "optimizer_budget_fraction": draw(fractions),
    }


def _chunk_reference(trace: Batches, capacity: int, eviction: str, knobs: dict) -> np.ndarray:
    return reference_chunk(
        trace,
        capacity,
        knobs["chunk_rows"],
        eviction,
        knobs["forward_budget_fraction"],
        knobs["backward_budget_fraction"],
        knobs["optimizer_budget_fraction"],
    )


@pytest.mark.parametrize("eviction", ["furthest", "lru"])
@settings(max_examples=400, deadline=None)
@given(split=split_traces(), capacity=st.integers(1, 5), knobs=chunk_setups())
def test_chunk_kernel_matches_reference_in_any_ranges(
    eviction: str, split: tuple[Batches, tuple[int, ...]], capacity: int, knobs: dict
) -> None:
    trace, cuts = split
    want = _chunk_reference(trace, capacity, eviction, knobs)
    got = run_policy("chunk", trace, capacity, chunk_eviction=eviction, **knobs)
    assert_same(got, want, f"chunk {eviction} {knobs}")
    split_got = run_policy("chunk", trace, capacity, cuts, chunk_eviction=eviction, **knobs)
    assert_same(split_got, want, f"chunk {eviction} {knobs} split at {cuts}")
    check_invariants(split_got, trace, capacity, cached=True)
    budgets = [
        phase_budget(capacity, knobs[f"{phase}_budget_fraction"])
        for phase in ("forward", "backward", "optimizer")
    ]
    assert np.all(split_got[:, RESIDENT_MAX] <= max(budgets))
    assert np.all(split_got[:, RESIDENT] <= budgets[2])
    assert split_got[:, BYPASS].sum() == 0
    # every residency needs at least its first row and at most all of its rows
    fills, needed = split_got[:, FILLS].sum(), split_got[:, NEEDED_ROWS].sum()
    assert fills <= needed <= fills * knobs["chunk_rows"]


@st.composite
def lru_compatible_traces(draw: st.DrawFn) -> tuple[Batches, int]:
    """Traces whose update rows are the batch's distinct lookups in order of last lookup,
    with a capacity that holds every batch's rows: then the backward requests of `chunk`
    find every row resident and leave the recency order as the lookups left it."""
    batches = []
    for lookups, _ in draw(traces()):
        last_order = list(dict.fromkeys(reversed(lookups)))[::-1]
        batches.append((lookups, last_order))
    widest = max(len(updates) for _, updates in batches)
    return batches, draw(st.integers(max(widest, 1), max(widest, 1) + 4))


SAME_AS_LRU = [HITS, MISSES, FILLS, EVICTIONS, WRITEBACKS, RESIDENT]


@settings(max_examples=200, deadline=None)
@given(setup=lru_compatible_traces(), bare=traces(), capacity=capacities)
def test_chunk_of_one_row_with_lru_eviction_is_lru(
    setup: tuple[Batches, int], bare: Batches, capacity: int
) -> None:
    ones = {f"{p}_budget_fraction": 1.0 for p in ("forward", "backward", "optimizer")}
    knobs = {"chunk_rows": 1, "chunk_eviction": "lru", **ones}
    trace, cap = setup
    lru = run_policy("lru", trace, cap)
    chunk = run_policy("chunk", trace, cap, **knobs)
    assert_same(chunk[:, SAME_AS_LRU], lru[:, SAME_AS_LRU], "chunk vs lru")
    # without update rows (no backward requests) at any capacity
    no_updates = [(lookups, []) for lookups, _ in bare]
    lru = run_policy("lru", no_updates, capacity)
    chunk = run_policy("chunk", no_updates, capacity, **knobs)
    assert_same(chunk[:, SAME_AS_LRU], lru[:, SAME_AS_LRU], "chunk vs lru, no updates")


# -- Belady's bounds ------------------------------------------------------------------------

DEMAND_FILL = sorted(name for name, cls in POLICIES.items() if cls.demand_fill)


def test_the_demand_fill_policies() -> None:
    # the caches Belady bounds: rows enter only when their own lookup misses. Not hot (its
    # pinned set is copied in ahead of use), chunk (a chunk's other rows, backward-pass
    # fills) or static (no cache): a new policy must say which it is. tbe fills a batch's
    # misses at its start, before their lookups, but only rows the batch looks up: a cache
    # that fetched each of them at its first lookup instead keeps the same rows
    assert DEMAND_FILL == ["belady", "lfu", "lru", "ssd-tbe", "tbe"]  # ssd-tbe: tbe's L1


@settings(max_examples=500, deadline=None)
@given(trace=traces(max_keys=16, max_batches=8), capacity=st.integers(1, 6))
def test_belady_bounds_every_demand_fill_policy(trace: Batches, capacity: int) -> None:
    def counters(name: str, **knobs: Any) -> np.ndarray:
        return run_policy(name, trace, capacity, **knobs).sum(axis=0)

    optimal = counters("belady", bypass=True)[MISSES]
    demand = counters("belady", bypass=False)[MISSES]
    assert optimal <= demand
    for name in DEMAND_FILL:  # each at its default knobs, from the registry
        # (tbe with sets of one way: 32-way sets would round the capacity up)
        got = counters(name, **({"associativity": 1} if name in ("tbe", "ssd-tbe") else {}))
        assert optimal <= got[MISSES], name
        if got[BYPASS] == 0:  # fills every miss: demand Belady bounds it too
            assert demand <= got[MISSES], name
    tbe_lfu = counters("tbe", associativity=1, cache_algorithm="lfu")
    assert optimal <= tbe_lfu[MISSES]
    for warmup in (0, 1, 2):
        hot = counters("hot", warmup_batches=warmup)
        # hot copies its set in ahead of use (a prefetch): not bounded by Belady, but a
        # demand cache that keeps the same rows misses at most once more per row copied in
        assert optimal <= hot[MISSES] + hot[FILLS]


def test_hot_can_miss_less_than_belady() -> None:
    # rows 0 and 1 alternate, one row of cache. hot (oracle frequencies, tie to the lower
    # key) pins row 0 before batch 0: 0 hits twice, 1 misses twice (bypass), 1 fill.
    # Belady must miss 0's first lookup to bring it in: 0 miss (filled); 1 miss (next use
    # 3, after 0's at 2: bypassed); 0 hit; 1 miss: 3 misses. Demand Belady and LRU refill
    # every time: 4. hot beats the "optimum" by copying in ahead of use, which is why
    # Belady bounds only the demand-fill policies.
    trace: Batches = [([0, 1, 0, 1], [])]
    hot = run_policy("hot", trace, 1, warmup_batches=0).sum(axis=0)
    assert (hot[HITS], hot[MISSES], hot[BYPASS], hot[FILLS]) == (2, 2, 2, 1)
    assert run_policy("belady", trace, 1, bypass=True)[:, MISSES].sum() == 3
    assert run_policy("belady", trace, 1, bypass=False)[:, MISSES].sum() == 4
    assert run_policy("lru", trace, 1)[:, MISSES].sum() == 4
    assert not POLICIES["hot"].demand_fill


# -- golden values ----------------------------------------------------------------------------

# batch 0 looks up 1, 2, 1, 3 and updates 1, 2, 3; batch 1 looks up 2, 4, 1 and updates
# 2, 4, 1; two rows of cache
GOLDEN: Batches = [([1, 2, 1, 3], [1, 2, 3]), ([2, 4, 1], [2, 4, 1])]


def _row(values: str) -> list[int]:
    """A counter row from "name=value ..." (the other counters are 0)."""
    row = [0] * NUM_COUNTERS
    for item in values.split():
        name, value = item.split("=")
        row[COUNTER_NAMES.index(name)] = int(value)
    return row


def test_lru_golden() -> None:
    # b0: 1 miss [1]; 2 miss [1 2]; 1 hit [2 1]; 3 miss, evict 2 (clean) [1 3];
    #     updates: 1 and 3 resident (dirty), 2 in backing.
    # b1: 2 miss, evict 1 (dirty: write-back) [3 2]; 4 miss, evict 3 (dirty) [2 4];
    #     1 miss, evict 2 (clean) [4 1]; updates: 4 and 1 resident, 2 in backing.
    want = [
        _row(
            "hits=1 misses=3 fills=3 evictions=1 updates_fast=2 updates_backing=1 "
            "resident=2 resident_max=2 needed_rows=3"
        ),
        _row(
            "misses=3 fills=3 evictions=3 writebacks=2 updates_fast=2 "
            "updates_backing=1 resident=2 resident_max=2 needed_rows=3"
        ),
    ]
    assert run_policy("lru", GOLDEN, 2).tolist() == want
    assert reference_lru(GOLDEN, 2).tolist() == want


def test_belady_golden() -> None:
    # lookup positions g0..g6 = 1 2 1 3 | 2 4 1; next use: g0 -> 2, g1 -> 4, g2 -> 6,
    # g3..g6 -> never.
    # bypass: b0: 1 fill, 2 fill, 1 hit, 3 misses with the cache full and is never used
    #   again: bypass. updates: 1, 2 dirty, 3 backing.
    #   b1: 2 hit, 4 bypass (never used again), 1 hit; updates 2, 1 dirty, 4 backing.
    bypass = [
        _row(
            "hits=1 misses=3 bypass=1 fills=2 updates_fast=2 updates_backing=1 "
            "resident=2 resident_max=2 needed_rows=2"
        ),
        _row("hits=2 misses=1 bypass=1 updates_fast=2 updates_backing=1 resident=2 resident_max=2"),
    ]
    # demand: b0: 1, 2 filled, 1 hit; 3 evicts the furthest, 1 (next use g6; 2's is g4);
    #   updates: 2, 3 dirty, 1 backing.
    #   b1: 2 hit; 4 misses, residents 3 and 2 are never used again: the least recently
    #   used, 3 (g3; 2 was used at g4), goes (dirty: write-back); 1 misses, evicts 2
    #   (dirty); updates: 4, 1 dirty, 2 backing.
    demand = [
        _row(
            "hits=1 misses=3 fills=3 evictions=1 updates_fast=2 updates_backing=1 "
            "resident=2 resident_max=2 needed_rows=3"
        ),
        _row(
            "hits=1 misses=2 fills=2 evictions=2 writebacks=2 updates_fast=2 "
            "updates_backing=1 resident=2 resident_max=2 needed_rows=2"
        ),
    ]
    for cuts in ((), (1,)):
        assert run_policy("belady", GOLDEN, 2, cuts, bypass=True).tolist() == bypass
        assert run_policy("belady", GOLDEN, 2, cuts, bypass=False).tolist() == demand
    assert reference_belady(GOLDEN, 2, True).tolist() == bypass
    assert reference_belady(GOLDEN, 2, False).tolist() == demand


def test_chunk_golden() -> None:
    # two rows per chunk (chunk = key // 2), 2 chunks of cache; budgets forward 2,
    # backward max(1, floor(2 × 0.5)) = 1, optimizer 2; furthest eviction.
    # requests r0..r6 (chunks): b0 forward 0→c0, 2→c1, 1→c0; backward 0→c0, 2→c1;
    # b1 forward 3→c1; backward 3→c1. Next request: r1 (c1) -> r4, r2 (c0) -> r3,
    # r3 (c0) -> never.
    # b0: c0 fill (row 0 needed), c1 fill (row 2), c0 hit (row 1): 2 resident.
    #   backward: shrink to 1, evict c1 (next r4, c0's is r3); r3 c0 hit; r4 c1 misses
    #   with the budget full: evict c0 (never again), fill c1, row 2 needed anew.
    #   optimizer: row 2 in c1 (dirty), row 0 backing. 1 resident, at most 2.
    # b1: c1 hit (row 3 needed), backward c1 hit; optimizer: row 3 dirty.
    trace: Batches = [([0, 2, 1], [0, 2]), ([3], [3])]
    knobs = {"chunk_rows": 2, "backward_budget_fraction": 0.5}
    want = [
        _row(
            "hits=1 misses=2 fills=3 evictions=2 updates_fast=1 updates_backing=1 "
            "resident=1 resident_max=2 needed_rows=4"
        ),
        _row("hits=1 updates_fast=1 resident=1 resident_max=1 needed_rows=1"),
    ]
    assert run_policy("chunk", trace, 2, **knobs).tolist() == want
    assert reference_chunk(trace, 2, 2, "furthest", 1.0, 0.5, 1.0).tolist() == want


# -- on a real trace, through `prepare(trace)` and the streaming reader ------------------------


@pytest.fixture(scope="module")
def tiny_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return replay.generate("tiny", tmp_path_factory.mktemp("policies") / "t", batches=6, workers=1)


def _trace_policy(trace: replay.Trace, spec: PolicySpec, capacity: int) -> Policy:
    """Policy `spec` on `trace`'s keys (64-byte rows, `capacity` units), prepared."""
    cls = POLICIES[spec.name]
    ctx = PolicyContext(
        total_keys=int(trace.table_rows.sum()),
        table_rows=trace.table_rows,
        offsets=np.concatenate([[0], np.cumsum(trace.table_rows)]),
        num_batches=trace.num_batches,
        row_state_bytes=64,
        capacity_units=capacity,
        unit_rows=cls.unit_rows(spec),
    )
    policy = cls(spec, ctx)
    if policy.needs_prepare():
        policy.prepare(trace)
    return policy


@pytest.mark.parametrize(
    ("name", "knobs", "capacity"),
    [
        ("lfu", {}, 300),
        ("belady", {"bypass": True}, 300),
        ("belady", {"bypass": False}, 300),
        ("chunk", {"chunk_rows": 64, "forward_budget_fraction": 0.5}, 20),
        ("chunk", {"chunk_rows": 16, "chunk_eviction": "lru"}, 40),
    ],
)
def test_policies_on_a_generated_trace(
    tiny_trace: Path, name: str, knobs: dict[str, Any], capacity: int
) -> None:
    trace = replay.open_trace(tiny_trace)
    # three ranges, so the policy carries its state across range boundaries
    edges = [0, 2, 5, trace.num_batches]
    ranges = [r for lo, hi in itertools.pairwise(edges) for r in iter_batch_ranges(trace, lo, hi)]
    assert len(ranges) > 1
    batches: Batches = [
        (
            br.keys[br.bounds[i] : br.bounds[i + 1]].tolist(),
            br.update_keys[br.update_bounds[i] : br.update_bounds[i + 1]].tolist(),
        )
        for br in ranges
        for i in range(br.batches)
    ]
    policy = _trace_policy(trace, PolicySpec(name=name, **knobs), capacity)
    out = np.zeros((trace.num_batches, NUM_COUNTERS), dtype=np.int64)
    for br in ranges:
        policy.process(br, out[br.batch_start : br.batch_stop])
    if name == "lfu":
        want = reference_lfu(batches, capacity)
    elif name == "belady":
        want = reference_belady(batches, capacity, knobs["bypass"])
    else:
        want = reference_chunk(
            batches,
            capacity,
            knobs["chunk_rows"],
            knobs.get("chunk_eviction", "furthest"),
            knobs.get("forward_budget_fraction", 1.0),
        )
    assert_same(out, want, name)
    assert out[:, HITS].sum() > 0 and out[:, EVICTIONS].sum() > 0


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_warm_up_changes_nothing(tiny_trace: Path, name: str) -> None:
    """`replay_trace` calls `warm_up` on a helper thread before the first range: the
    results must be the same with it and without it."""
    from replay.trace.stream import empty_range

    trace = replay.open_trace(tiny_trace)
    ranges = list(iter_batch_ranges(trace, 0, trace.num_batches, min_lookups=1))
    spec = PolicySpec(name=name, tier="hbm") if name == "static" else PolicySpec(name=name)

    def counters(warm: bool) -> np.ndarray:
        policy = _trace_policy(trace, spec, 40 if POLICIES[name].cached else 0)
        if warm:
            policy.warm_up(empty_range(policy.ctx.total_keys))
        out = np.zeros((trace.num_batches, NUM_COUNTERS), dtype=np.int64)
        for br in ranges:
            policy.process(br, out[br.batch_start : br.batch_stop])
        return out

    np.testing.assert_array_equal(counters(warm=True), counters(warm=False))


@pytest.mark.parametrize("total_keys", [1000, 2**32 + 1])
def test_the_warm_up_range_has_the_types_of_the_streams_ranges(
    tiny_trace: Path, total_keys: int
) -> None:
    """A kernel called on `empty_range` must load the compiled version that the stream's
    ranges use (a different type would compile another one, seconds, on the warm-up)."""
    from numba import typeof

    from replay.trace.stream import build_range, empty_range

    trace = replay.open_trace(tiny_trace)
    look = trace.lookups(0, 2)
    upd = trace.updates(0, 2)
    offsets = np.array([0, total_keys // 2, total_keys], dtype=np.int64)
    table = np.minimum(look.table, 1).astype(np.uint16)
    utable = np.minimum(upd.table, 1).astype(np.uint16)
    row = (look.row % (total_keys // 2)).astype(look.row.dtype)
    urow = (upd.row % (total_keys // 2)).astype(upd.row.dtype)
    real = build_range(0, 2, offsets, look.batch, table, row, upd.batch, utable, urow, None)
    empty = empty_range(total_keys)
    for field in ("keys", "bounds", "update_keys", "update_bounds"):
        assert typeof(getattr(empty, field)) == typeof(getattr(real, field)), field


def test_populate_faults_in_and_keeps_the_contents() -> None:
    from replay._malloc import populate, state_array

    array = state_array(1 << 23, np.uint32)  # 32 MiB: huge pages where the OS has them
    array[::4096] = np.arange(len(array[::4096]), dtype=np.uint32)
    before = array.copy()
    assert populate(array) is sys.platform.startswith("linux")
    np.testing.assert_array_equal(array, before)


def test_chunk_residency_numbers_wrap_exactly() -> None:
    # uint32 residency numbers one step from wrapping, and stale row stamps equal to the
    # number a wrapped counter restarts at: NEEDED_ROWS must still match the reference.
    # Chunks of 3 rows, one chunk of cache. b0: rows 0, 3, 6 fill c0, c1, c2 (numbers
    # reach 0xFFFFFFFF), the backward request of row 0 refills c0 (wraps to 1): 4 rows.
    # b1: row 1 (stale stamp 1) hits c0, row 4 refills c1 (wraps): 2 rows. b2: rows 2
    # and 0 in c0's third residency, row 7 refills c2 (wraps): 3 rows.
    trace: Batches = [([0, 3, 6], [0]), ([1, 4], [4]), ([2, 0, 7], [])]
    policy = make_policy("chunk", trace, 1, chunk_rows=3, chunk_eviction="lru")
    policy.rn[:] = 0xFFFFFFFE
    policy.stamp[:] = 1
    out = np.zeros((len(trace), NUM_COUNTERS), dtype=np.int64)
    policy.process(batch_range(trace, 0, len(trace)), out)
    assert_same(out, reference_chunk(trace, 1, 3, "lru"), "wrapped residency numbers")
    assert out[:, NEEDED_ROWS].tolist() == [4, 2, 3]


def test_documented_state_and_unit() -> None:
    assert POLICIES["lfu"].state_bytes_per_key == 4
    assert POLICIES["belady"].state_bytes_per_key == 12
    assert POLICIES["chunk"].state_bytes_per_key == 4
    assert POLICIES["chunk"].unit_rows(PolicySpec(name="chunk", chunk_rows=512)) == 512
    assert POLICIES["belady"].unit_rows(PolicySpec(name="belady")) == 1
    assert phase_budget(100, 0.29) == 29 and phase_budget(3, 0.1) == 1


def test_oracles_refuse_to_run_unprepared() -> None:
    trace: Batches = [([1, 2], [1])]
    for name, knobs in (("belady", {}), ("chunk", {"chunk_eviction": "furthest"})):
        spec = PolicySpec(name=name, **knobs)
        ctx = PolicyContext(3, np.array([3]), np.array([0, 3]), 1, 64, 1, 1)
        policy = POLICIES[name](spec, ctx)
        assert policy.needs_prepare()
        with pytest.raises(RuntimeError):
            policy.process(batch_range(trace, 0, 1), np.zeros((1, NUM_COUNTERS), np.int64))


# -- the miss-ratio curve and the LRU kernel agree ------------------------------------------


@settings(max_examples=60, deadline=None)
@given(trace=traces(max_keys=30, max_batches=8), capacity=st.integers(1, 35))
def test_mrc_at_size_c_equals_lru_at_capacity_c(trace: Batches, capacity: int) -> None:
    from replay.analysis.mrc import mrc_keys

    keys = batch_range(trace, 0, len(trace)).keys
    if len(keys) == 0:
        return
    total = int(keys.max()) + 1
    curve = mrc_keys(keys, total, sizes=[capacity], min_window=4)
    lru_misses = int(run_policy("lru", trace, capacity)[:, MISSES].sum())
    assert round(float(curve.miss_ratios[0]) * len(keys)) == lru_misses
