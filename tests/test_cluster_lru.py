"""The cluster replay's LRU by a map a row (`replay.engine.cluster_lru.DirectLRU`): every
counter equal to `LRUPolicy`'s (and `reference_lru`'s) on random traces, ranges and
caches, the update rows given or taken from the lookups; built only where its map is no
larger than the hash table; and a cluster replay builds it where it fits."""

from __future__ import annotations

import itertools

import numpy as np
from _lru_helpers import one_table_ctx
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.engine.cluster import make_rank_policy, replay_cluster
from replay.engine.cluster_lru import DirectLRU, rank_class
from replay.policies import POLICIES
from replay.policies.base import NUM_COUNTERS
from replay.policies.lru import LRUPolicy, reference_lru
from replay.system.sharding import resolve_plan, table_shapes, uniform_plan
from replay.system.spec import PolicySpec, apply_overrides, build_system, load_system_data
from replay.trace.stream import BatchRange
from replay.workload.onthefly import GeneratedTrace
from replay.workload.presets import get_preset


def _ranges(
    trace: list[tuple[list[int], list[int]]], cuts: list[int], derived: bool, dtype: type
) -> list[BatchRange]:
    """The trace's batches in ranges cut at `cuts`; `derived`: each batch's update rows
    its distinct lookups, counted (no keys), as an on-the-fly source gives them."""
    out = []
    edges = [0, *sorted({c for c in cuts if 0 < c < len(trace)}), len(trace)]
    for lo, hi in itertools.pairwise(edges):
        part = trace[lo:hi]
        keys = np.array([k for ks, _ in part for k in ks], dtype=dtype)
        bounds = np.cumsum([0] + [len(ks) for ks, _ in part]).astype(np.int64)
        ups = [sorted(set(ks)) if derived else us for ks, us in part]
        ukeys = np.array([k for us in ups for k in us], dtype=dtype)
        ubounds = np.cumsum([0] + [len(us) for us in ups]).astype(np.int64)
        if derived:
            ukeys = keys[:0]
        out.append(BatchRange(lo, hi, keys, bounds, ukeys, ubounds, updates_are_lookups=derived))
    return out


@settings(max_examples=80, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    capacity=st.integers(1, 40),
    total=st.integers(1, 200),
    derived=st.booleans(),
    cuts=st.lists(st.integers(0, 8), max_size=3),
)
def test_direct_lru_counts_as_the_lru(
    seed: int, capacity: int, total: int, derived: bool, cuts: list[int]
) -> None:
    rng = np.random.default_rng(seed)
    trace = []
    for _ in range(8):
        lookups = rng.integers(0, total, size=int(rng.integers(0, 60))).tolist()
        updates = sorted(set(rng.integers(0, total, size=int(rng.integers(0, 20))).tolist()))
        trace.append((lookups, updates))
    ctx = one_table_ctx(total, capacity, len(trace))
    direct = DirectLRU(PolicySpec(name="lru"), ctx)
    hashed = POLICIES["lru"](PolicySpec(name="lru"), ctx)
    got = np.zeros((len(trace), NUM_COUNTERS), dtype=np.int64)
    want = np.zeros_like(got)
    for br in _ranges(trace, cuts, derived, np.uint32):
        direct.process(br, got[br.batch_start : br.batch_stop])
        hashed.process(br, want[br.batch_start : br.batch_stop])
    np.testing.assert_array_equal(got, want)
    if not derived:
        np.testing.assert_array_equal(got, reference_lru(trace, capacity))


def test_the_map_only_where_it_is_no_larger_than_the_table() -> None:
    # 100,000 slots: a table of 2^19 entries (4 MiB), a map of 4 B a row
    assert rank_class(LRUPolicy, one_table_ctx(1 << 20, 100_000, 1)) is DirectLRU
    assert rank_class(LRUPolicy, one_table_ctx((1 << 20) + 1, 100_000, 1)) is LRUPolicy
    assert rank_class(POLICIES["lfu"], one_table_ctx(1000, 100, 1)) is POLICIES["lfu"]


def test_a_cluster_builds_it_where_it_fits() -> None:
    source = GeneratedTrace(get_preset("criteo-kaggle").with_overrides(batches=3, batch_size=64))
    data, origin = load_system_data("hbm-lru")
    sets = ["cluster.nodes=2", "cluster.gpus_per_node=2", "policy.capacity_rows=2000000"]
    system = build_system(apply_overrides(data, sets), origin)
    tables = table_shapes(source.table_names, source.table_rows, 16)
    placement = resolve_plan(
        uniform_plan("row-wise", tables, nodes=2, gpus_per_node=2), tables, nodes=2,
        gpus_per_node=2,
    )  # fmt: skip
    rows = [s.rows for s in placement.shards if s.rank == 0]
    assert type(make_rank_policy(system, rows, 3, 16)) is LRUPolicy
    assert type(make_rank_policy(system, rows, 3, 16, direct=True)) is DirectLRU
    result = replay_cluster(source, system, placement)
    assert result.totals["lookups"] == source.num_lookups
