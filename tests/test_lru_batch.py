"""The LRU on batches whose update rows are their distinct lookups (`derived` mode, as
`replay run` streams a Criteo trace: update counts only): its counters against
`reference_lru`, and the state it leaves behind (the cached keys in list order, their dirty
flags) against a replay of the same rules; on a generated criteo-kaggle slice, derived
mode against the full update pass over the update keys.

Every check runs twice: on the lookups (`lru_kernel`) and on each batch's distinct
lookups in order (`BatchRange.order`, `lru_order_kernel`, as `replay run` streams a trace
folder). The second is the per-batch kernel the tests were first written for (commit
febdac1, then slower and reverted: docs/performance.md); its order now comes from the
reader's thread."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from _lru_helpers import one_table_lru
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.policies.base import (
    EVICTIONS,
    FILLS,
    HITS,
    MISSES,
    NUM_COUNTERS,
    RESIDENT,
    UPDATES_BACKING,
    UPDATES_FAST,
    WRITEBACKS,
)
from replay.policies.lru import LRUPolicy, reference_lru
from replay.trace.stream import BatchRange, distinct_bitmap, distinct_order, iter_batch_ranges
from replay.workload.onthefly import GeneratedTrace
from replay.workload.presets import get_preset

Batches = list[list[int]]  # each batch's lookups; its update rows are its distinct ones


def _derived_range(
    batches: Batches, lo: int, hi: int, dtype: type = np.int64, ordered: bool = False
) -> BatchRange:
    """Batches [lo, hi) as `replay run` streams them: update rows from the lookups, their
    count per batch only (no keys); `ordered`: with each batch's `DistinctOrder`."""
    part = batches[lo:hi]
    keys: np.ndarray = np.array([k for lookups in part for k in lookups], dtype=dtype)
    bounds = np.zeros(len(part) + 1, dtype=np.int64)
    np.cumsum([len(lookups) for lookups in part], out=bounds[1:])
    ubounds = np.zeros(len(part) + 1, dtype=np.int64)
    np.cumsum([len(set(lookups)) for lookups in part], out=ubounds[1:])
    order = None
    if ordered:
        seen = distinct_bitmap(int(keys.max(initial=0)) + 1)
        order = distinct_order(keys, bounds, seen)
        assert not seen.any()  # left zeroed for the next range
    return BatchRange(
        lo, hi, keys, bounds, keys[:0], ubounds, updates_are_lookups=True, order=order
    )


def _listed(policy: LRUPolicy) -> list[tuple[int, int]]:
    """(key, dirty) of the cached rows, most recent first."""
    cap = int(policy.meta[1])
    got = []
    s = int(policy.links[2 * cap + 1])
    while s != cap:
        k = int(policy.slot_key[s])  # -1 - key where the row is dirty
        got.append((k, 0) if k >= 0 else (-1 - k, 1))
        s = int(policy.links[2 * s + 1])
    assert len(got) == int(policy.meta[0])
    return got


def _reference(batches: Batches, capacity: int) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """`reference_lru`'s counters, and its final list (most recent first) with dirty flags
    from a replay of the same rules."""
    out = reference_lru([(lookups, sorted(set(lookups))) for lookups in batches], capacity)
    cache: dict[int, int] = {}  # insertion order = recency, oldest first
    for lookups in batches:
        for k in lookups:
            if k in cache:
                cache[k] = cache.pop(k)
            else:
                if len(cache) == capacity:
                    del cache[next(iter(cache))]
                cache[k] = 0
        for k in set(lookups):
            cache[k] = 1
    return out, [(k, d) for k, d in reversed(cache.items())]


def _run_derived(
    batches: Batches, capacity: int, total: int, split: int, ordered: bool = False
) -> tuple[np.ndarray, LRUPolicy]:
    policy = one_table_lru(total, capacity)
    out = np.zeros((len(batches), NUM_COUNTERS), dtype=np.int64)
    for lo in range(0, len(batches), split):
        hi = min(lo + split, len(batches))
        policy.process(_derived_range(batches, lo, hi, ordered=ordered), out[lo:hi])
    return out, policy


@settings(max_examples=300, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    batch=st.integers(1, 40),
    spare=st.integers(0, 80),
    hot=st.integers(1, 120),
    num_batches=st.integers(1, 12),
    split=st.integers(1, 12),
    ordered=st.booleans(),
)
def test_matches_reference_lru(
    seed: int, batch: int, spare: int, hot: int, num_batches: int, split: int, ordered: bool
) -> None:
    # heavy repeats (batches drawn from a small hot set, Zipf-like), capacities from the
    # batch size to a few times it, cold starts that fill up and full caches that evict
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, hot + 1)
    keys = rng.permutation(10 * hot)[:hot]
    batches = [
        rng.choice(keys, size=int(rng.integers(0, batch + 1)), p=weights / weights.sum()).tolist()
        for _ in range(num_batches)
    ]
    capacity = batch + spare
    want, listed = _reference(batches, capacity)
    got, policy = _run_derived(batches, capacity, 10 * hot, split, ordered)
    np.testing.assert_array_equal(got, want)
    assert _listed(policy) == listed


@pytest.mark.parametrize("ordered", [False, True])
def test_golden_tiny_case(ordered: bool) -> None:
    # capacity 3. Batch 0: a b a c -> misses a b c, list c a b (most recent first), all
    # dirty. Batch 1: d a d b: d misses and evicts the tail b (written back, dirty) before
    # b's own lookup, which then misses and evicts c (dirty); list b d a.
    batches = [[1, 2, 1, 3], [4, 1, 4, 2]]
    got, policy = _run_derived(batches, 3, 8, 2, ordered)
    assert got[:, HITS].tolist() == [1, 2]
    assert got[:, MISSES].tolist() == [3, 2]
    assert got[:, FILLS].tolist() == [3, 2]
    assert got[:, EVICTIONS].tolist() == [0, 2]
    assert got[:, WRITEBACKS].tolist() == [0, 2]
    assert got[:, UPDATES_FAST].tolist() == [3, 3]
    assert got[:, UPDATES_BACKING].tolist() == [0, 0]
    assert got[:, RESIDENT].tolist() == [3, 3]
    assert _listed(policy) == [(2, 1), (4, 1), (1, 1)]
    np.testing.assert_array_equal(got, _reference(batches, 3)[0])


@pytest.mark.parametrize("ordered", [False, True])
def test_a_batch_larger_than_the_cache_takes_the_per_lookup_kernel(ordered: bool) -> None:
    # n > capacity: the update rows become keys (`updates_as_keys`), no derived mode, and
    # the order is not used
    batches = [[1, 2, 3, 1, 4, 5, 1], [2, 6, 2, 7]]
    got, _ = _run_derived(batches, 3, 8, 2, ordered)
    np.testing.assert_array_equal(got, _reference(batches, 3)[0])


@pytest.mark.parametrize("capacity", [4_000, 20_000])
def test_derived_mode_equals_the_update_pass_on_criteo_kaggle(capacity: int) -> None:
    """A generated criteo-kaggle slice (26 tables, Zipf rows): the counters and the list of
    derived mode (update counts only) equal those of the update pass over the update keys
    (`lru_kernel`'s second loop), range by range."""
    source = GeneratedTrace(get_preset("criteo-kaggle").with_overrides(batches=24, batch_size=128))
    total = int(np.sum(source.table_rows))
    derived = list(iter_batch_ranges(source, with_updates=True, updates_from_lookups=True))
    keyed = list(iter_batch_ranges(source, with_updates=True, updates_from_lookups=False))
    assert all(br.updates_are_lookups for br in derived)
    assert not any(br.updates_are_lookups for br in keyed)
    from_counts, from_keys = one_table_lru(total, capacity), one_table_lru(total, capacity)
    got = np.zeros((source.num_batches, NUM_COUNTERS), dtype=np.int64)
    want = np.zeros_like(got)
    for br, kr in zip(derived, keyed, strict=True):
        assert (br.batch_start, br.batch_stop) == (kr.batch_start, kr.batch_stop)
        assert int(np.diff(br.bounds).max()) <= capacity
        from_counts.process(br, got[br.batch_start : br.batch_stop])
        from_keys.process(kr, want[kr.batch_start : kr.batch_stop])
        assert _listed(from_counts) == _listed(from_keys)
    np.testing.assert_array_equal(got, want)
    assert got[:, HITS].sum() > got[:, MISSES].sum() > 0
    assert got[:, UPDATES_FAST].sum() == source.num_updates
    assert capacity == 20_000 or got[:, EVICTIONS].sum() > 0


def test_key_dtypes_and_range_splits_agree() -> None:
    rng = np.random.default_rng(7)
    batches = [rng.integers(0, 300, size=int(rng.integers(0, 64))).tolist() for _ in range(30)]
    want, listed = _reference(batches, 100)
    for dtype, split, ordered in itertools.product([np.uint32, np.int64], [1, 7, 30], [0, 1]):
        policy = one_table_lru(300, 100)
        out = np.zeros((len(batches), NUM_COUNTERS), dtype=np.int64)
        for lo in range(0, len(batches), split):
            hi = min(lo + split, len(batches))
            policy.process(_derived_range(batches, lo, hi, dtype, bool(ordered)), out[lo:hi])
        np.testing.assert_array_equal(out, want)
        assert _listed(policy) == listed


@settings(max_examples=200, deadline=None)
@given(
    batches=st.lists(st.lists(st.integers(0, 200), max_size=30), min_size=1, max_size=8),
    cut=st.integers(0, 8),
)
def test_distinct_order_against_sets(batches: Batches, cut: int) -> None:
    """Each batch's distinct keys in the order of their first lookups, and in the reverse
    order of their last ones; the bitmap left zeroed; a window of batches as its own."""
    keys = np.array([k for lookups in batches for k in lookups], dtype=np.int64)
    bounds = np.zeros(len(batches) + 1, dtype=np.int64)
    np.cumsum([len(lookups) for lookups in batches], out=bounds[1:])
    seen = distinct_bitmap(201)
    order = distinct_order(keys, bounds, seen)
    assert not seen.any()
    for b, lookups in enumerate(batches):
        first = list(dict.fromkeys(lookups))
        last = list(dict.fromkeys(reversed(lookups)))
        lo, hi = order.bounds[b], order.bounds[b + 1]
        assert order.first[lo:hi].tolist() == first
        assert order.last[lo:hi].tolist() == last
    a = min(cut, len(batches))
    part = order.window(a, len(batches))
    again = distinct_order(keys[bounds[a] :], bounds[a:] - bounds[a], seen)
    for name in ("first", "last", "bounds"):
        np.testing.assert_array_equal(getattr(part, name), getattr(again, name))
