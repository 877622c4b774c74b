"""Per-table SHARDS curves: the one-pass split of a sampled stream (`shards.split_sampled`,
`TableSamplers`), the per-table samplers fed by the total curve's pass, and the vectorised
reads of the curves (`ShardsSampler.group_curves` over a head, `HeadCurve.miss_ratios`),
each against the state-by-state version it replaced, bit for bit."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.analysis.head import BLOCK_T_QUANTILE, HEAD_BLOCKS, ExactHead, HeadCurve, _t95
from replay.analysis.horizon import _full_stream_heads, full_lookups, horizon_mrc, per_table_mrc
from replay.analysis.mrc import _sampled_result
from replay.analysis.shards import (
    BLEND_RESOLUTIONS,
    SPLIT_DONE,
    SPLIT_OUTSIDE,
    SPLIT_UNSAMPLED,
    SUBSAMPLES,
    ShardsSampler,
    TableSamplers,
    _shards_filter,
    resolution_rows,
    split_sampled,
)
from replay.trace.keys import table_offsets
from replay.workload.sampled import open_sampled_workload
from replay.workload.sampler import SHARDS_SALT, shards_threshold
from replay.workload.spec import TableSpec, WorkloadSpec

SPEC = WorkloadSpec(
    name="tables",
    tables=(
        TableSpec("a", 30_000, alpha=0.9),
        TableSpec("b", 8_000, alpha=1.1, pooling=2),
        TableSpec("c", 500, alpha=0.5),
    ),
    batch_size=128,
    batches=120,
)


def _sampled_keys(rng: np.random.Generator, total: int, n: int, threshold: int) -> np.ndarray:
    """n keys of [0, total) that SHARDS keeps at `threshold` (drawn with repeats)."""
    keys = np.arange(total, dtype=np.int64)
    out = np.empty(total, dtype=np.int64)
    group = np.empty(total, dtype=np.uint8)
    kept, _ = _shards_filter(keys, threshold, np.uint64(SHARDS_SALT), total, out, group)
    return rng.choice(out[:kept], size=n) if kept else np.empty(0, dtype=np.int64)


@settings(max_examples=15, deadline=None)
@given(
    rows=st.lists(st.integers(0, 400), min_size=1, max_size=6),
    n=st.integers(0, 300),
    seed=st.integers(0, 2**32 - 1),
)
def test_split_sampled_is_the_filter_and_a_stable_split(rows: list[int], n: int, seed: int) -> None:
    offsets = table_offsets(np.array(rows, dtype=np.int64))
    total = int(offsets[-1])
    threshold = shards_threshold(0.25)
    keys = _sampled_keys(np.random.default_rng(seed), total, n if total else 0, threshold)
    tables = len(rows)
    cuts = np.zeros(tables * SUBSAMPLES + 1, dtype=np.int64)
    tid = np.empty(len(keys), dtype=np.int32)
    local = np.empty(len(keys), dtype=np.int64)
    grouped = np.empty(len(keys), dtype=np.int64)
    i, code = split_sampled(
        keys, offsets, threshold, np.uint64(SHARDS_SALT), tid, cuts, local, grouped
    )
    assert (i, code) == (len(keys), SPLIT_DONE)
    kept = np.empty(len(keys), dtype=np.int64)
    group = np.empty(len(keys), dtype=np.uint8)
    _shards_filter(keys, threshold, np.uint64(SHARDS_SALT), total, kept, group)
    table = np.searchsorted(offsets, keys, side="right") - 1
    for t in range(tables):
        mine = keys[table == t] - offsets[t]
        at = cuts[t * SUBSAMPLES : (t + 1) * SUBSAMPLES + 1]
        assert np.array_equal(local[at[0] : at[-1]], mine)  # stream order
        order = np.argsort(group[table == t], kind="stable")
        assert np.array_equal(grouped[at[0] : at[-1]], mine[order])
        for g in range(SUBSAMPLES):
            assert at[g + 1] - at[g] == int((group[table == t] == g).sum())
    # refusals: where the first bad key is, and why
    if len(keys) and total:
        bad = keys.copy()
        bad[len(bad) // 2] = total
        assert split_sampled(
            bad, offsets, threshold, np.uint64(SHARDS_SALT), tid, cuts, local, grouped
        ) == (len(bad) // 2, SPLIT_OUTSIDE)
        every = np.arange(total, dtype=np.int64)
        out = np.empty(total, dtype=np.int64)
        m, _ = _shards_filter(
            every, threshold, np.uint64(SHARDS_SALT), total, out, np.empty(total, np.uint8)
        )
        unsampled = np.setdiff1d(every, out[:m])
        if len(unsampled):
            bad = keys.copy()
            bad[-1] = unsampled[0]
            assert split_sampled(
                bad, offsets, threshold, np.uint64(SHARDS_SALT), tid, cuts, local, grouped
            ) == (len(bad) - 1, SPLIT_UNSAMPLED)


def _fields(result: Any) -> tuple[Any, ...]:
    return (
        result.sizes.tolist(),
        result.miss_ratios.tobytes(),
        result.point_errors.tobytes(),
        result.expected_error,
        result.lookups,
        result.sampled_lookups,
        result.distinct_keys,
        sorted(result.extra.items(), key=str),
    )


def _row_group_samplers(source: Any, rate: float) -> list[ShardsSampler]:
    """The per-table samplers as fed before: each row group filtered, split by table,
    and folded into every table's sampler through `feed_sampled` (groups by argsort)."""
    rows = np.asarray(source.table_rows, dtype=np.int64)
    offsets = table_offsets(rows)
    samplers = [ShardsSampler(int(r), rate) for r in rows]
    threshold = shards_threshold(rate)
    from replay.trace.stream import iter_batch_ranges

    for r in iter_batch_ranges(source, with_updates=False):
        keys = np.ascontiguousarray(r.keys, dtype=np.int64)
        kept = np.empty(len(keys), dtype=np.int64)
        group = np.empty(len(keys), dtype=np.uint8)
        n, _ = _shards_filter(
            keys, threshold, np.uint64(SHARDS_SALT), int(offsets[-1]), kept, group
        )
        assert n == len(keys)
        table = np.searchsorted(offsets, keys, side="right") - 1
        for t in range(len(rows)):
            mine = table == t
            if mine.any():
                samplers[t].feed_sampled(0, keys[mine] - offsets[t], group[mine])
    return samplers


def test_per_table_samplers_fed_any_way_are_the_row_groups_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rate = 0.25
    source = open_sampled_workload(SPEC, rate, threads=1)
    reference = _row_group_samplers(source, rate)
    # split a few keys at a time (many splits) and in one go: the same states
    for split in (97, 1 << 22):
        monkeypatch.setattr(TableSamplers, "SPLIT_KEYS", split)
        fed = TableSamplers(source.table_rows, rate, lambda keys: None)
        from replay.trace.stream import iter_batch_ranges

        for r in iter_batch_ranges(source, with_updates=False):
            fed.add(np.ascontiguousarray(r.keys, dtype=np.int64))
        fed.close()
        for t, ref in enumerate(reference):
            mine = fed.samplers.get(t) or ShardsSampler(int(source.table_rows[t]), rate)
            for a, b in zip([mine.full, *mine.groups], [ref.full, *ref.groups], strict=True):
                assert (a.requests, a.cold, a.distinct) == (b.requests, b.cold, b.distinct)
                assert np.array_equal(a.histogram(), b.histogram())


def test_per_table_mrc_fed_by_the_horizon_pass_is_the_same() -> None:
    rate = 0.25
    alone = open_sampled_workload(SPEC, rate, threads=1)
    sizes = [np.array([1, 7, 100, 1000, 5000]), np.array([3, 50, 800]), np.array([1, 2, 499])]
    expected = per_table_mrc(alone, sizes)
    shared = open_sampled_workload(SPEC, rate, threads=1)
    total = horizon_mrc(shared, tables=True)  # the total curve is the same either way
    assert _fields(total) == _fields(horizon_mrc(open_sampled_workload(SPEC, rate, threads=1)))
    assert "_replay_table_samplers" in shared.__dict__
    got = per_table_mrc(shared, sizes)
    assert "_replay_table_samplers" not in shared.__dict__  # taken once: a second call reads
    assert [_fields(r) for r in got] == [_fields(r) for r in expected]
    again = per_table_mrc(shared, sizes)
    assert [_fields(r) for r in again] == [_fields(r) for r in expected]


def test_per_table_mrc_is_the_row_groups_samplers_results() -> None:
    """Against the samplers fed row group by row group, each given its N_t and read with
    its head; tables the sample holds no row of among them (one empty sampler each)."""
    rate = 2.0**-10
    spec = SPEC.with_overrides(batches=60)
    spec = WorkloadSpec(
        name="tables",
        tables=(*spec.tables, TableSpec("d", 300), TableSpec("e", 200, alpha=0.7)),
        batch_size=spec.batch_size,
        batches=spec.batches,
    )
    source = open_sampled_workload(spec, rate, threads=1)
    sizes = np.array([16_368, 20_000, 40_000])
    got = per_table_mrc(source, sizes)
    reference = _row_group_samplers(source, rate)
    sampled = np.array([s.full.requests for s in reference])
    assert (sampled == 0).sum() >= 2  # the premise: tables without a sampled lookup
    requests = full_lookups(source, sampled, rate)
    heads = _full_stream_heads(source, resolution_rows(shards_threshold(rate)))
    assert heads is not None
    for t, sampler in enumerate(reference):
        sampler.feed_sampled(int(requests[t]), np.empty(0, np.int64), np.empty(0, np.uint8))
        want = _sampled_result(sampler, sizes, heads[1 + t])
        want.extra["table"] = spec.tables[t].name
        assert _fields(got[t]) == _fields(want)


def _old_miss_ratios(head: HeadCurve, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    at = np.minimum(np.asarray(sizes, dtype=np.int64), head.capacity)
    pooled = ExactHead.miss_fractions(head.counts.sum(axis=0), at)
    per = np.array([ExactHead.miss_fractions(c, at) for c in head.counts if c[-1] > 0])
    if len(per) < 2:
        return pooled, np.ones(len(at))
    t = BLOCK_T_QUANTILE if len(per) == HEAD_BLOCKS else _t95(len(per) - 1)
    return pooled, t * per.std(axis=0, ddof=1) / np.sqrt(len(per))


@settings(max_examples=30, deadline=None)
@given(
    capacity=st.integers(1, 300),
    blocks=st.integers(2, 16),
    seed=st.integers(0, 2**32 - 1),
    sizes=st.lists(st.integers(0, 400), min_size=1, max_size=40),
)
def test_head_miss_ratios_are_the_blocks_one_by_one(
    capacity: int, blocks: int, seed: int, sizes: list[int]
) -> None:
    rng = np.random.default_rng(seed)
    counts = rng.integers(0, 50, size=(blocks, capacity + 2)).astype(np.int64)
    counts[:, -1] = counts[:, :-1].sum(axis=1) + rng.integers(0, 3, size=blocks)
    counts[rng.integers(0, blocks), -1] *= rng.integers(0, 2)  # a block that counted none
    head = HeadCurve(capacity, counts, exact=False)
    got = head.miss_ratios(np.array(sizes))
    want = _old_miss_ratios(head, np.array(sizes))
    for a, b in zip(got, want, strict=True):
        assert np.array_equal(a, b, equal_nan=True)


def _old_group_curves(
    s: ShardsSampler, sizes: np.ndarray, head: HeadCurve
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`group_curves` over a usable head as it was: each state's curve on its own."""
    k = len(s.groups)
    cx = head.capacity
    low, low_err = head.miss_ratios(sizes)
    at_cx, cx_err = head.miss_ratios(np.array([cx]))
    up = sizes > cx
    top = max(BLEND_RESOLUTIONS * s.resolution, 4 * cx)
    weight = np.clip(np.log(top / np.maximum(sizes, 1)) / math.log(top / cx), 0.0, 1.0)
    whole, parts = s._corrections(np.append(sizes, cx))

    def curve(state: Any, at: np.ndarray, groups: int) -> np.ndarray:
        den = 2**24 * groups
        expected = s.requests * s.threshold / den
        if expected <= 0:
            return np.zeros(len(at))
        cuts = [-(-int(c) * s.threshold // den) for c in at.tolist()]
        return np.clip(state.misses_at(np.array(cuts, dtype=np.int64)) / expected, 0.0, 1.0)

    def joined(state: Any, groups: int, corr: np.ndarray) -> np.ndarray:
        tail = np.clip(curve(state, sizes, groups) + corr[:-1], 0.0, 1.0)
        pivot = curve(state, np.array([cx]), groups)[0] + corr[-1]
        share = tail / pivot if pivot > 0 else np.zeros(len(sizes))
        anchored = at_cx[0] * np.minimum(share, 1.0)
        mixed = weight * anchored + (1.0 - weight) * np.minimum(tail, at_cx[0])
        return np.where(up, mixed, low)

    c = joined(s.full, 1, whole)
    per = [joined(g, k, parts[i]) for i, g in enumerate(s.groups)]
    base = np.where(up, c / max(at_cx[0], 1e-300) * cx_err[0], low_err)
    return c, np.array(per, dtype=np.float64).reshape(k, len(sizes)), base


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 3000))
def test_group_curves_over_a_head_are_each_states_own(seed: int, n: int) -> None:
    rng = np.random.default_rng(seed)
    rate = 0.25
    total = 4000
    s = ShardsSampler(total, rate)
    keys = _sampled_keys(rng, total, n, shards_threshold(rate))
    s.feed(keys)
    s.requests = n * 4 + int(rng.integers(0, 10))
    counts = rng.integers(0, 30, size=(16, 66)).astype(np.int64)
    counts[:, -1] = counts[:, :-1].sum(axis=1) + 1
    head = HeadCurve(64, counts, exact=False)
    sizes = np.unique(rng.integers(1, 6000, size=30))
    got = s.group_curves(sizes, head)
    want = _old_group_curves(s, sizes, head)
    for a, b in zip(got, want, strict=True):
        assert np.array_equal(a, b)
