"""The exact head of sampled curves (`replay.analysis.head`) against the slow references."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.analysis.head import (
    HEAD_BLOCKS,
    HEAD_LOOKUPS,
    HEAD_MAX_ROWS,
    HEAD_MIN_ROWS,
    ExactHead,
    HeadCurve,
    head_blocks,
    head_capacity,
    head_curves,
    reference_head,
)
from replay.analysis.stack import reference_stack_distances


@settings(max_examples=150, deadline=None)
@given(
    keys=st.lists(st.integers(0, 40), max_size=300),
    capacity=st.integers(1, 50),
    cuts=st.lists(st.integers(0, 300), max_size=3),
)
def test_head_equals_the_reference(keys: list[int], capacity: int, cuts: list[int]) -> None:
    """Histogram of distances < capacity and far requests, fed in any chunks."""
    head = ExactHead(41, capacity)
    arr = np.array(keys, dtype=np.int64)
    for part in np.split(arr, sorted(c for c in cuts if c <= len(arr))):
        head.feed(part)
    counts = head.block_counts()
    hist, far = reference_head(keys, capacity)
    assert counts.shape == (1, capacity + 2)
    assert np.array_equal(counts[0, :-2], hist)
    assert counts[0, -2] == far and counts[0, -1] == len(keys)


def test_head_compacts_and_evicts_many_times() -> None:
    """A long stream over a small window: every compaction and eviction path runs."""
    rng = np.random.default_rng(4)
    keys = (rng.zipf(1.2, 20_000) % 3_000).astype(np.int64)
    head = ExactHead(3_000, 64)
    head.feed(keys)
    hist, far = reference_head(keys.tolist(), 64)
    counts = head.block_counts()[0]
    assert np.array_equal(counts[:-2], hist) and counts[-2] == far


def test_warm_block_counts_only_exact_classifications() -> None:
    """A block from the middle of a stream counts a request once the stack is full; from
    then on its distances are the whole stream's (below capacity) or far (at or above)."""
    rng = np.random.default_rng(9)
    keys = (rng.zipf(1.1, 6_000) % 500).astype(np.int64)
    cap = 32
    head = ExactHead(500, cap)
    head.start_block(warm=True)
    head.feed(keys[2_000:4_000])
    counts = head.block_counts()[0]
    truth = reference_stack_distances(keys.tolist())[2_000:4_000]
    # the stack fills once 32 distinct keys were seen in the block
    seen: set[int] = set()
    start = 0
    for i, k in enumerate(keys[2_000:4_000].tolist()):
        if len(seen) >= cap:
            start = i
            break
        seen.add(k)
    counted = truth[start:]
    assert counts[-1] == len(counted)
    assert counts[-2] == sum(d is None or d >= cap for d in counted)
    expect = np.bincount([d for d in counted if d is not None and d < cap], minlength=cap)
    assert np.array_equal(counts[:-2], expect)


def test_capacity_and_blocks() -> None:
    assert head_capacity(5_000, 1_585, 10**8) == 32_768  # 4 x 5,000 -> 2^15
    assert head_capacity(1, 1, 10**8) == HEAD_MIN_ROWS
    assert head_capacity(10**7, 1, 10**9) == HEAD_MAX_ROWS
    assert head_capacity(100, 65_520, 10**8) == 65_536  # at least the resolution
    assert head_capacity(5_000, 1_585, 300) == 300  # never more keys than there are
    assert head_blocks(100, HEAD_LOOKUPS, 1_000) == [(0, 100)]
    blocks = head_blocks(10_000, 100 * HEAD_LOOKUPS, 1_000)
    assert len(blocks) == HEAD_BLOCKS and blocks[0][0] == 0 and blocks[-1][1] == 10_000
    assert all(b0 < a1 for (_, b0), (a1, _) in itertools.pairwise(blocks))
    assert sum(b - a for a, b in blocks) * 100 * HEAD_LOOKUPS / 10_000 >= HEAD_LOOKUPS


def test_head_curves_total_and_per_table() -> None:
    """One read of the stream gives the total head and each table's (table-local keys)."""
    rng = np.random.default_rng(2)
    offsets = np.array([0, 50, 250], dtype=np.int64)
    batches = [
        np.concatenate([rng.integers(0, 50, 8), 50 + rng.integers(0, 200, 8)]) for _ in range(40)
    ]

    def keys_of(a: int, b: int) -> Iterator[np.ndarray]:
        yield from batches[a:b]

    total, t0, t1 = head_curves(keys_of, 40, 640, offsets, 1, total=True, per_table=True)
    flat = np.concatenate(batches)
    for curve, keys, space in (
        (total, flat, 250),
        (t0, flat[flat < 50], 50),
        (t1, flat[flat >= 50] - 50, 200),
    ):
        assert curve.exact and curve.capacity == min(HEAD_MIN_ROWS, space)
        hist, far = reference_head(keys.tolist(), curve.capacity)
        assert np.array_equal(curve.counts[0, :-2], hist) and curve.counts[0, -2] == far
        ratios, errors = curve.miss_ratios(np.array([1, 10, 10**6]))
        assert not errors.any()
        assert ratios[-1] == pytest.approx(far / len(keys))


def test_block_error_is_the_spread_of_the_blocks() -> None:
    counts = np.array([[3, 1, 6, 10], [1, 1, 8, 10]], dtype=np.int64)  # hist(2), far, counted
    curve = HeadCurve(2, counts, exact=False)
    ratios, errors = curve.miss_ratios(np.array([1]))
    assert ratios[0] == pytest.approx((7 + 9) / 20)
    per = np.array([0.7, 0.9])
    assert errors[0] == pytest.approx(12.706 * per.std(ddof=1) / np.sqrt(2))


def test_blocks_count_after_filling_and_unfilled_stacks_are_not_used() -> None:
    """Past HEAD_LOOKUPS the head reads 16 blocks, each (the first too) counting only once
    its stack is full; a stack that cannot fill in a block (C_x near all the rows) makes
    the head unusable, so the curve falls back to the sample."""
    offsets = np.array([0, 10, 1_000_010], dtype=np.int64)
    per = 200

    def keys_of(a: int, b: int) -> Iterator[np.ndarray]:
        for batch in range(a, b):
            rng = np.random.default_rng(batch)
            small = rng.integers(0, 10, per // 2)
            big = 10 + rng.integers(0, 1_000_000, per // 2)
            yield np.stack([small, big], axis=1).ravel()

    batches = 3_200
    total, small, big = head_curves(
        keys_of, batches, 100 * HEAD_LOOKUPS, offsets, 1, total=True, per_table=True
    )
    assert not small.exact and small.counts.shape[0] == HEAD_BLOCKS
    assert small.capacity == 10 and small.usable
    # every block, the first too, skipped the lookups before its stack held 10 rows
    assert (small.counts[:, -1] < per // 2 * 2).all()  # blocks of 2 batches here
    assert (small.counts[:, -1] > 0).all()
    # its miss ratio at 10 rows: no row is ever far once all 10 are in the stack
    assert small.miss_ratios(np.array([10]))[0][0] == 0.0
    assert big.capacity == HEAD_MIN_ROWS and not big.usable
    assert not total.usable


def _warm_block_reference(keys: list[int], capacity: int) -> np.ndarray:
    """A warm block's counts by the explicit LRU stack: requests count once `capacity`
    distinct keys were seen in the block; distances below it are kept, the rest far."""
    hist = np.zeros(capacity + 2, dtype=np.int64)
    seen: set[int] = set()
    for key, d in zip(keys, reference_stack_distances(keys), strict=True):
        if len(seen) >= capacity:
            if d is None or d >= capacity:
                hist[-2] += 1
            else:
                hist[d] += 1
            hist[-1] += 1
        seen.add(key)
    return hist


@settings(max_examples=25, deadline=None)
@given(
    blocks=st.lists(
        st.lists(  # a block: runs of (table, rows), tables in order
            st.tuples(st.integers(0, 3), st.lists(st.integers(0, 29), max_size=90)),
            max_size=4,
        ),
        min_size=1,
        max_size=3,
    ),
    capacity=st.integers(1, 40),
    shared=st.booleans(),
)
def test_runs_head_equals_the_reference(
    blocks: list[list[tuple[int, list[int]]]], capacity: int, shared: bool
) -> None:
    """`RunsHead` (each table's lookups one run in a block, a table's rows its own keys)
    counts what the explicit LRU stack over the block's flat keys does, and `ExactHead`'s
    warm blocks; a head sharing another's state, fed in turn, counts the same."""
    from replay.analysis.head_pieces import RunsHead

    table_rows = [30, 7, 30, 1]
    offsets = np.concatenate([[0], np.cumsum(table_rows)])
    head = RunsHead(capacity, max(table_rows), 100)
    other = RunsHead(3, 0, 0, share=head) if shared else None
    exact = ExactHead(int(offsets[-1]), capacity)
    expect = []
    for runs in blocks:
        runs = sorted(runs, key=lambda r: r[0])
        runs = [(t, [r % table_rows[t] for r in rows]) for t, rows in runs]
        head.start_block()
        exact.start_block(warm=True)
        flat: list[int] = []
        for t, rows in runs:  # a table fed twice in a row is one run
            head.feed(t, np.array(rows, dtype=np.int64), table_rows[t])
            exact.feed(np.array(rows, dtype=np.int64) + offsets[t])
            flat += [int(offsets[t]) + r for r in rows]
        expect.append(_warm_block_reference(flat, capacity))
        if other is not None:  # the other head's block between two of this one's
            with pytest.raises(ValueError, match="block open"):
                other.start_block()
            head.end_block()
            other.start_block()
            other.feed(0, np.arange(30, dtype=np.int64) % 5, 30)
            other.end_block()
    counts = head.block_counts()
    assert np.array_equal(counts, np.stack(expect))
    assert np.array_equal(counts, exact.block_counts())


def test_runs_head_refuses_what_is_not_runs_of_its_tables() -> None:
    from replay.analysis.head_pieces import RunsHead

    head = RunsHead(4, 10, 64)
    head.start_block()
    head.feed(2, np.arange(5), 10)
    with pytest.raises(ValueError, match="not table-major"):
        head.feed(1, np.arange(5), 10)
    with pytest.raises(ValueError, match="outside"):
        head.feed(3, np.array([1, 10]), 10)
    with pytest.raises(ValueError, match="longer than"):
        head.feed(4, np.zeros(200, dtype=np.int64), 10)
    with pytest.raises(ValueError, match="rows"):
        head.feed(5, np.zeros(2, dtype=np.int64), 11)


def test_one_batch_heads_the_same_by_runs_or_by_maps(monkeypatch: pytest.MonkeyPatch) -> None:
    """The one-batch heads by `RunsHead` and, where the largest table has more rows than
    its position arrays may hold, by `ExactHead`s: the same counts, from rows or keys."""
    import replay.analysis.head_pieces as hp

    monkeypatch.setattr(hp, "head_capacity", lambda d, res, rows: min(48, int(rows)))
    monkeypatch.setattr(hp, "HEAD_MIN_BLOCK_LOOKUPS", 64)
    monkeypatch.setattr(hp, "HEAD_LOOKUPS", 16 * 300)
    rng = np.random.default_rng(3)
    table_rows = np.array([500, 90, 2_000, 40, 700], dtype=np.int64)
    looks = np.array([3_000, 800, 5_000, 600, 2_600], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(table_rows)])
    rows = [
        (rng.zipf(1.3, n) % r).astype(np.uint32) for n, r in zip(looks, table_rows, strict=True)
    ]
    pieces = [(0, 2), (2, 3), (3, 5)]

    def pieces_of(with_keys: bool, with_rows: bool) -> hp.Pieces:
        def gen() -> Iterator[tuple[object, ...]]:
            for t0, t1 in pieces:
                local = np.concatenate(rows[t0:t1])
                keys = np.concatenate([r + offsets[t] for t, r in enumerate(rows)][t0:t1])
                yield ((t0, t1), keys if with_keys else None, *([local] if with_rows else []))

        return gen

    got = []
    for limit, with_keys, with_rows in [(1 << 25, False, True), (0, False, True), (0, True, False)]:
        monkeypatch.setattr(hp, "RUNS_MAX_ROWS", limit)
        heads = hp.one_batch_heads(
            pieces_of(with_keys, with_rows), offsets, looks, 1, table_rows / 2
        )
        got.append([h.counts.tobytes() for h in heads])
    assert got[0] == got[1] == got[2]
    counts = np.frombuffer(got[0][0], dtype=np.int64).reshape(16, -1)
    assert (counts[:, -1] > 0).all()  # every block of the total head counted
