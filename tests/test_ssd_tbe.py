"""The `ssd-tbe` policy (FBGEMM's SSD TBE): L1's miss stream against the `tbe` reference,
L1's counters against `tbe`'s, L2 against a slow LRU fed with that stream, the SSD
store's bytes against hand goldens, the preset and the CLI."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from test_policies import Batches, batch_range  # the policy tests' trace-to-range harness

from replay.policies.ssd_tbe import l1_miss_stream
from replay.policies.tbe import reference_tbe


@st.composite
def l1_cases(draw: st.DrawFn) -> dict[str, Any]:
    keys = draw(st.integers(1, 60))
    lookups = st.lists(st.integers(0, keys - 1), max_size=30)
    batches = draw(st.lists(st.tuples(lookups, lookups), min_size=1, max_size=8))
    cuts = tuple(draw(st.lists(st.integers(1, len(batches)), max_size=3)))
    return {
        "batches": [(list(lk), list(up)) for lk, up in batches],
        "total": keys,
        "sets": draw(st.integers(1, 5)),
        "assoc": draw(st.sampled_from([1, 2, 4, 8])),
        "cuts": cuts,
    }


def ranges(batches: Batches, cuts: tuple[int, ...]) -> list[Any]:
    edges = [0, *sorted(set(cuts)), len(batches)]
    return [batch_range(batches, lo, hi) for lo, hi in itertools.pairwise(edges) if hi > lo]


@settings(max_examples=150, deadline=None)
@given(case=l1_cases())
def test_l1_miss_stream_matches_the_tbe_reference(case: dict[str, Any]) -> None:
    """Per batch: the unique misses (by set, then index), the evicted rows and the
    conflict unique misses, as the slow TBE reference records them; and L1's counters
    are the `tbe` reference's (cut into ranges anywhere)."""
    batches, sets, assoc = case["batches"], case["sets"], case["assoc"]
    record: list[tuple[list[int], list[int], list[int]]] = []
    want, _ = reference_tbe(batches, sets, assoc, "lru", record=record)
    got = []
    counters = []
    for ex in l1_miss_stream(
        ranges(batches, case["cuts"]), case["total"], cache_rows=sets * assoc, associativity=assoc
    ):
        counters.append(ex.counters)
        for i in range(ex.batches):
            reads, evictions, conflicts = ex.batch(i)
            got.append((reads.tolist(), evictions.tolist(), conflicts.tolist()))
    assert got == record
    np.testing.assert_array_equal(np.concatenate(counters), want)


def test_l1_miss_stream_golden_one_set() -> None:
    """One set of 2 ways. Batch 0: rows 3, 1 miss (read 1, 3), fill both. Batch 1: rows
    5, 7, 1: 1 hits; 5 and 7 miss; only the way of 3 is free of this time step: 5 takes
    it (3 evicted), 7 is a conflict. Batch 2: 7 misses; both ways were last used in
    batch 1, and the warp sort's tie order gives it the way of 1."""
    batches = [([3, 1, 3], []), ([5, 7, 1], []), ([7], [])]
    (ex,) = l1_miss_stream([batch_range(batches, 0, 3)], 8, cache_rows=2, associativity=2)
    assert [tuple(a.tolist() for a in ex.batch(i)) for i in range(3)] == [
        ([1, 3], [], []),
        ([5, 7], [3], [7]),
        ([7], [1], []),
    ]
