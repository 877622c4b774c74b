"""A short trace in a large row space: the per-row state is laid out for the rows the trace
can touch (a map of the keys seen, the keys' ranks, 4 KiB pages), never at the cost of
the whole row space, and every answer equals the one over a whole-row-space array."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.analysis.mrc import mrc_keys
from replay.policies import POLICIES
from replay.policies.base import NUM_COUNTERS, PolicyContext
from replay.policies.belady import next_use, reference_belady
from replay.system.spec import PolicySpec
from replay.trace.stream import BatchRange

SPREAD = 10_007  # keys of a few dozen lookups spread over ~400,000 rows


def _ctx(total: int, capacity: int, lookups: int) -> PolicyContext:
    return PolicyContext(
        total_keys=total,
        table_rows=np.array([total], dtype=np.int64),
        offsets=np.array([0, total], dtype=np.int64),
        num_batches=1,
        row_state_bytes=64,
        capacity_units=capacity,
        num_lookups=lookups,
    )


def _whole(batches: list[tuple[list[int], list[int]]]) -> BatchRange:
    keys = np.array([k for lookups, _ in batches for k in lookups], dtype=np.int64)
    ukeys = np.array([k for _, updates in batches for k in updates], dtype=np.int64)
    bounds = np.cumsum([0, *(len(lookups) for lookups, _ in batches)]).astype(np.int64)
    ubounds = np.cumsum([0, *(len(updates) for _, updates in batches)]).astype(np.int64)
    return BatchRange(0, len(batches), keys, bounds, ukeys, ubounds)


@settings(max_examples=40, deadline=None)
@given(
    batches=st.lists(
        st.tuples(
            st.lists(st.integers(0, 40), min_size=1, max_size=12),
            st.lists(st.integers(0, 40), max_size=6),
        ),
        min_size=1,
        max_size=8,
    ),
    capacity=st.integers(1, 8),
    bypass=st.booleans(),
)
def test_belady_on_a_sparse_row_space_equals_the_reference(
    batches: list[tuple[list[int], list[int]]], capacity: int, bypass: bool
) -> None:
    spread = [([k * SPREAD for k in lk], [k * SPREAD for k in uk]) for lk, uk in batches]
    whole = _whole(spread)
    total = 41 * SPREAD  # far over 8 rows a lookup: prepare ranks the keys
    policy = POLICIES["belady"](
        PolicySpec(name="belady", bypass=bypass), _ctx(total, capacity, len(whole.keys))
    )
    policy.prepare_arrays(whole.keys)
    assert policy.nxt is not None
    # the next uses are positions in the trace, whatever the keys' layout
    assert np.array_equal(policy.nxt, next_use(whole.keys, total))
    out = np.zeros((len(spread), NUM_COUNTERS), dtype=np.int64)
    policy.process(whole, out)
    assert np.array_equal(out, reference_belady(spread, capacity, bypass))


@pytest.mark.parametrize("lookups", [1, 10**9])
def test_row_array_in_either_page_size_is_the_row_space_filled(lookups: int) -> None:
    ctx = _ctx(40 << 20, 1, lookups)  # 40 M rows: 160 MB of uint32, 1 or 10^9 lookups
    rows = ctx.row_array(np.uint32)
    assert rows.shape == (40 << 20,) and rows.dtype == np.uint32
    assert not rows[:: 1 << 16].any() and rows[-1] == 0
    filled = _ctx(5 << 20, 1, lookups).row_array(np.int64, 7)
    assert filled.shape == (5 << 20,) and (filled == 7).all()


@settings(max_examples=30, deadline=None)
@given(
    keys=st.lists(st.integers(0, 60), min_size=0, max_size=300),
    sizes=st.lists(st.integers(1, 70), min_size=1, max_size=5, unique=True),
)
def test_an_exact_curve_in_a_map_equals_the_one_over_every_row(
    keys: list[int], sizes: list[int]
) -> None:
    flat = np.array(keys, dtype=np.int64) * SPREAD
    total = 61 * SPREAD
    chosen = sorted(sizes)
    mapped = mrc_keys(flat, total, chosen, min_window=4)  # sparse: the map of keys seen
    direct = mrc_keys(flat, total, chosen, min_window=4, lookups=total)  # an array a row
    assert np.array_equal(mapped.miss_ratios, direct.miss_ratios)
    assert (mapped.lookups, mapped.distinct_keys) == (direct.lookups, direct.distinct_keys)
    # the chunks of an iterable (length unknown: an array a row) give the same curve
    halves = mrc_keys([flat[: len(flat) // 2], flat[len(flat) // 2 :]], total, chosen)
    assert np.array_equal(halves.miss_ratios, direct.miss_ratios)
