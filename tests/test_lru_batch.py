"""The LRU's per-batch kernel (`replay.policies.lru.lru_batch_kernel`): one probe of the
big table per distinct row of a batch whose update rows are its distinct lookups. Its
counters against `reference_lru` and against the per-lookup `lru_kernel` (derived mode),
and the state both leave behind: the same keys in the same list order, the same dirty
flags, whatever slot numbers each gave them."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.policies import POLICIES, PolicyContext
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
from replay.policies.lru import LRUPolicy, lru_kernel, reference_lru
from replay.system.spec import PolicySpec
from replay.trace.stream import BatchRange, iter_batch_ranges
from replay.workload.onthefly import GeneratedTrace
from replay.workload.presets import get_preset

Batches = list[list[int]]  # each batch's lookups; its update rows are its distinct ones


def _policy(total: int, capacity: int) -> LRUPolicy:
    ctx = PolicyContext(
        total_keys=total,
        table_rows=np.array([total], dtype=np.int64),
        offsets=np.array([0, total], dtype=np.int64),
        num_batches=1,
        row_state_bytes=64,
        capacity_units=capacity,
        unit_rows=1,
    )
    policy = POLICIES["lru"](PolicySpec(name="lru"), ctx)
    assert isinstance(policy, LRUPolicy)
    return policy


def _derived_range(batches: Batches, lo: int, hi: int, dtype: type = np.int64) -> BatchRange:
    """Batches [lo, hi) as `replay run` streams them: update rows from the lookups, their
    count per batch only (no keys)."""
    part = batches[lo:hi]
    keys: np.ndarray = np.array([k for lookups in part for k in lookups], dtype=dtype)
    bounds = np.zeros(len(part) + 1, dtype=np.int64)
    np.cumsum([len(lookups) for lookups in part], out=bounds[1:])
    ubounds = np.zeros(len(part) + 1, dtype=np.int64)
    np.cumsum([len(set(lookups)) for lookups in part], out=ubounds[1:])
    return BatchRange(lo, hi, keys, bounds, keys[:0], ubounds, updates_are_lookups=True)


def _listed(policy: LRUPolicy) -> list[tuple[int, int]]:
    """(key, dirty) of the cached rows, most recent first."""
    cap = int(policy.meta[1])
    got = []
    s = int(policy.links[2 * cap + 1])
    while s != cap:
        got.append((int(policy.slot_key[s]), int(policy.dirty[s])))
        s = int(policy.links[2 * s + 1])
    assert len(got) == int(policy.meta[0])
    return got


def _old(policy: LRUPolicy, br: BatchRange, out: np.ndarray) -> None:
    """The per-lookup kernel in derived mode, on the policy's state."""
    lru_kernel(
        br.keys, br.bounds, br.update_keys, br.update_bounds, policy.table, policy.slot_key,
        policy.links, policy.dirty, policy.meta, out, True,
    )  # fmt: skip


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


def _run_new(
    batches: Batches, capacity: int, total: int, split: int
) -> tuple[np.ndarray, LRUPolicy]:
    policy = _policy(total, capacity)
    out = np.zeros((len(batches), NUM_COUNTERS), dtype=np.int64)
    for lo in range(0, len(batches), split):
        hi = min(lo + split, len(batches))
        policy.process(_derived_range(batches, lo, hi), out[lo:hi])
    return out, policy


@settings(max_examples=300, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    batch=st.integers(1, 40),
    spare=st.integers(0, 80),
    hot=st.integers(1, 120),
    num_batches=st.integers(1, 12),
    split=st.integers(1, 12),
)
def test_matches_reference_lru(
    seed: int, batch: int, spare: int, hot: int, num_batches: int, split: int
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
    got, policy = _run_new(batches, capacity, 10 * hot, split)
    np.testing.assert_array_equal(got, want)
    assert _listed(policy) == listed


def test_golden_tiny_case() -> None:
    # capacity 3. Batch 0: a b a c -> misses a b c, list c a b (most recent first), all
    # dirty. Batch 1: d a d b: d misses and evicts the tail b (written back, dirty) before
    # b's own lookup, which then misses and evicts c (dirty); list b d a.
    batches = [[1, 2, 1, 3], [4, 1, 4, 2]]
    got, policy = _run_new(batches, 3, 8, 2)
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


def test_a_batch_larger_than_the_cache_takes_the_per_lookup_kernel() -> None:
    # n > capacity: the update rows become keys (`updates_as_keys`), no derived mode
    batches = [[1, 2, 3, 1, 4, 5, 1], [2, 6, 2, 7]]
    got, _ = _run_new(batches, 3, 8, 2)
    np.testing.assert_array_equal(got, _reference(batches, 3)[0])


def test_refuses_more_distinct_lookups_than_update_rows() -> None:
    policy = _policy(8, 4)
    br = _derived_range([[1, 2, 3]], 0, 1)
    br = BatchRange(
        0, 1, br.keys, br.bounds, br.keys[:0], np.array([0, 2]), updates_are_lookups=True
    )
    with pytest.raises(ValueError, match="more distinct lookups than update rows"):
        policy.process(br, np.zeros((1, NUM_COUNTERS), dtype=np.int64))


@pytest.mark.parametrize("capacity", [4_000, 20_000])
def test_equals_the_per_lookup_kernel_on_criteo_kaggle(capacity: int) -> None:
    """A generated criteo-kaggle slice (26 tables, Zipf rows, update rows from the
    lookups): the same counters and the same list as `lru_kernel`, range by range."""
    source = GeneratedTrace(get_preset("criteo-kaggle").with_overrides(batches=24, batch_size=128))
    ranges = list(iter_batch_ranges(source, with_updates=True, updates_from_lookups=True))
    assert all(br.updates_are_lookups for br in ranges)
    total = int(np.sum(source.table_rows))
    new, old = _policy(total, capacity), _policy(total, capacity)
    got = np.zeros((source.num_batches, NUM_COUNTERS), dtype=np.int64)
    want = np.zeros_like(got)
    for br in ranges:
        assert int(np.diff(br.bounds).max()) <= capacity
        new.process(br, got[br.batch_start : br.batch_stop])
        _old(old, br, want[br.batch_start : br.batch_stop])
        assert _listed(new) == _listed(old)
    np.testing.assert_array_equal(got, want)
    assert got[:, HITS].sum() > got[:, MISSES].sum() > 0
    assert int(want[:, EVICTIONS].sum()) > 0 or capacity == 20_000


def test_key_dtypes_and_range_splits_agree() -> None:
    rng = np.random.default_rng(7)
    batches = [rng.integers(0, 300, size=int(rng.integers(0, 64))).tolist() for _ in range(30)]
    want, listed = _reference(batches, 100)
    for dtype, split in itertools.product([np.uint32, np.int64], [1, 7, 30]):
        policy = _policy(300, 100)
        out = np.zeros((len(batches), NUM_COUNTERS), dtype=np.int64)
        for lo in range(0, len(batches), split):
            hi = min(lo + split, len(batches))
            policy.process(_derived_range(batches, lo, hi, dtype), out[lo:hi])
        np.testing.assert_array_equal(out, want)
        assert _listed(policy) == listed
