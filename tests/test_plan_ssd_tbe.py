"""`replay plan` with FBGEMM's SSD TBE: the L2 curve against a slow LRU fed the same
stream, each candidate's curve against L1's own stream replayed apart, TorchRec's
settings, and the acceptance: the L1 + L2 the plan recommends, replayed by the `ssd-tbe`
policy, reach the target, and 10% smaller ones do not."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.plan.ssd_tbe import paste_load_factor, two_level_curves
from replay.plan.ssd_tbe_l2 import DIRECT_MAX_KEYS, L2Curve, reference_l2
from replay.policies.ssd_tbe import l1_miss_stream
from replay.policies.tbe import tbe_sets
from replay.trace.stream import iter_batch_ranges
from replay.workload.onthefly import GeneratedTrace
from replay.workload.presets import get_preset


@st.composite
def streams(draw: st.DrawFn) -> tuple[int, list[tuple[list[int], list[int]]]]:
    keys = draw(st.integers(1, 40))
    row = st.integers(0, keys - 1)
    batches = draw(
        st.lists(
            st.tuples(st.lists(row, max_size=12, unique=True), st.lists(row, max_size=6)),
            max_size=12,
        )
    )
    return keys, batches


@settings(max_examples=300, deadline=None)
@given(case=streams())
def test_l2_curve_matches_a_slow_lru_at_every_size(
    case: tuple[int, list[tuple[list[int], list[int]]]],
) -> None:
    """SSD reads and writes of every L2 size (0 = no L2) from one pass equal an explicit
    LRU's, whose batch reads are looked up before any is put."""
    keys, batches = case
    sizes = list(range(0, keys + 3))
    curve = L2Curve(keys, sizes)
    for reads, writes in batches:
        curve.feed(np.array(reads, dtype=np.int64), np.array(writes, dtype=np.int64))
    got = curve.counts()
    for i, c in enumerate(got.sizes):
        assert (got.ssd_read_rows[i], got.ssd_write_rows[i]) == reference_l2(batches, int(c))
    assert got.reads == sum(len(r) for r, _ in batches)
    assert got.writes == sum(len(w) for _, w in batches)


def test_l2_curve_in_map_mode_is_the_direct_one() -> None:
    """A row space too large for a direct array keeps per-row state in a hash map: the
    same counts (the read order comes from the map's last positions)."""
    rng = np.random.default_rng(7)
    batches = [(np.unique(rng.zipf(1.4, 40) % 500), rng.integers(0, 500, 10)) for _ in range(80)]
    sizes = [0, 1, 10, 50, 100, 300, 600]
    direct = L2Curve(500, sizes)
    mapped = L2Curve(DIRECT_MAX_KEYS + 1, sizes)
    assert direct._state.direct and not mapped._state.direct
    fed = []
    for r, w in batches:
        r = r[rng.permutation(len(r))]
        fed.append((r.tolist(), w.tolist()))
        direct.feed(r, w)
        mapped.feed(r, w)
    a, b = direct.counts(), mapped.counts()
    np.testing.assert_array_equal(a.ssd_read_rows, b.ssd_read_rows)
    np.testing.assert_array_equal(a.ssd_write_rows, b.ssd_write_rows)
    for i, c in enumerate(sizes):
        assert (a.ssd_read_rows[i], a.ssd_write_rows[i]) == reference_l2(fed, c)


@pytest.fixture(scope="module")
def tiny() -> GeneratedTrace:
    return GeneratedTrace(get_preset("tiny").with_overrides(batches=30))


def test_each_candidate_is_its_own_l1_stream_through_a_slow_l2(tiny: GeneratedTrace) -> None:
    """One read of the source for every L1 candidate gives, at each L2 size, what L1's
    stream replayed apart (`l1_miss_stream`) through the slow LRU gives."""
    total = int(np.sum(tiny.table_rows))
    cands, warm_from = two_level_curves(
        tiny, total_rows=total, distinct_rows=2000, associativity=32,
        load_factors=(0.002, 0.01, 0.05),
    )  # fmt: skip
    assert [c.ways for c in cands] == [
        tbe_sets(int(total * f), 32) * 32 for f in (0.002, 0.01, 0.05)
    ]
    assert warm_from == 15
    lookups = tiny.num_batches * tiny.spec.lookups_per_batch
    for c in cands:
        per_batch = []
        for ex in l1_miss_stream(iter_batch_ranges(tiny), total, cache_rows=c.ways):
            for i in range(ex.batches):
                reads, evictions, conflicts = ex.batch(i)
                per_batch.append((reads.tolist(), [*evictions.tolist(), *conflicts.tolist()]))
        for i in np.linspace(0, len(c.l2_rows) - 1, 7).astype(int):
            size = int(c.l2_rows[i])
            reads, writes = reference_l2(per_batch, size)
            assert c.ssd_read_rows[i] == reads and c.ssd_write_rows[i] == writes
            assert c.hit[i] == pytest.approx(1 - reads / lookups, abs=1e-15)
            warm = reference_l2(per_batch[:warm_from], size)
            assert c.warm_read_rows[i] == reads - warm[0]
            assert c.warm_write_rows[i] == writes - warm[1]
        assert np.all(np.diff(c.hit) >= 0)  # a larger L2 never reads the SSD more


@pytest.mark.parametrize("total", [1, 31, 1000, 26_000_000, 882_774_592])
def test_the_pasted_load_factor_gives_torchrecs_sets(total: int) -> None:
    """TorchRec's `cache_sets = max(int(cache_load_factor x rows / 32), 1)` turns the
    pasted factor back into the L1's sets."""
    for sets in {1, 2, 3, 7, max(1, total // 320), max(1, total // 32 - 1)}:
        f = paste_load_factor(sets, total, 32)
        assert max(int(f * total / 32), 1) == sets
