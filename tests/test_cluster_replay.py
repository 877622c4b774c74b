"""The cluster replay core (`replay/engine/cluster.py`): per-GPU hits and misses against
a slow reference that routes every key itself and keeps one cache per GPU, the
all-to-all bytes of a tiny trace against hand-computed goldens for each sharding type
(TorchRec's collectives, the default, and the lower bound), and one GPU equal to
`replay_trace`."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from replay.engine.cluster import allreduce_model, replay_cluster
from replay.engine.replay import replay_trace
from replay.errors import ConfigError
from replay.policies.base import HITS, MISSES
from replay.policies.tbe import reference_tbe, tbe_sets
from replay.system.sharding import (
    COLUMN_WISE,
    DATA_PARALLEL,
    GRID,
    ROW_WISE,
    TABLE_ROW_WISE,
    TABLE_WISE,
    Placement,
    ShardingPlan,
    TableShape,
    TableSharding,
    owner_ranks_reference,
    resolve_plan,
    table_shapes,
    uniform_plan,
)
from replay.system.spec import SystemSpec, apply_overrides, build_system, load_system_data
from replay.trace.keys import table_offsets
from replay.trace.stream import BatchRange
from replay.workload.onthefly import GeneratedTrace
from replay.workload.presets import get_preset


def _system(*sets: str, base: str = "hbm-lru") -> SystemSpec:
    data, origin = load_system_data(base)
    return build_system(apply_overrides(data, list(sets)), f"{origin} with --set")


def _placement(source: Any, kind: str, nodes: int, gpn: int, dim: int = 16) -> Placement:
    tables = table_shapes(source.table_names, source.table_rows, dim)
    plan = uniform_plan(kind, tables, nodes=nodes, gpus_per_node=gpn)
    return resolve_plan(plan, tables, nodes=nodes, gpus_per_node=gpn)


@pytest.fixture(scope="module")
def kaggle() -> GeneratedTrace:
    return GeneratedTrace(get_preset("criteo-kaggle").with_overrides(batches=24, batch_size=256))


@pytest.fixture(scope="module")
def small() -> GeneratedTrace:
    return GeneratedTrace(get_preset("criteo-kaggle").with_overrides(batches=10, batch_size=128))


# -- the slow reference ------------------------------------------------------------------


def reference_route(
    source: Any, placement: Placement, batch_size: int
) -> list[list[list[tuple[int, int, int]]]]:
    """Per rank, per batch, the (table, shard's first row, row) of each lookup it serves,
    in trace order: every key routed by itself. A lookup's sample is its position in its
    (batch, table) group times the batch size over the group's length; sample s belongs
    to rank s x world // batch size."""
    world = placement.world
    offsets = [int(o) for o in table_offsets(np.asarray(source.table_rows, dtype=np.int64))]
    out: list[list[list[tuple[int, int, int]]]] = [[] for _ in range(world)]
    for br in _ranges(source):
        for b in range(br.batches):
            per_rank: list[list[tuple[int, int, int]]] = [[] for _ in range(world)]
            keys = [int(k) for k in br.keys[br.bounds[b] : br.bounds[b + 1]]]
            tables = [next(t for t in range(len(offsets) - 1) if k < offsets[t + 1]) for k in keys]
            owners = owner_ranks_reference(placement, keys)
            groups: dict[int, list[int]] = {}
            for i, t in enumerate(tables):
                groups.setdefault(t, []).append(i)
            position = {i: p for group in groups.values() for p, i in enumerate(group)}
            for i, (key, t) in enumerate(zip(keys, tables, strict=True)):
                sample = (position[i] * batch_size) // len(groups[t])
                row = key - offsets[t]
                kind = placement.entry(t).type
                shards = [s for s in placement.shards if s.table == t]
                if kind == DATA_PARALLEL:
                    r = sample * world // batch_size
                    per_rank[r].append((t, 0, row))
                elif kind == COLUMN_WISE:
                    for s in shards:
                        per_rank[s.rank].append((t, s.col_start, row))
                elif kind == GRID:  # the row's block in every column block
                    for s in shards:
                        if s.row_start <= row < s.row_stop:
                            per_rank[s.rank].append((t, s.col_start * 1_000_000 + s.row_start, row))
                else:
                    r = int(owners[i])
                    s = next(s for s in shards if s.rank == r)
                    assert s.row_start <= row < s.row_stop
                    per_rank[r].append((t, s.row_start, row))
            for r in range(world):
                out[r].append(per_rank[r])
    return out


def _ranges(source: Any) -> Iterator[BatchRange]:
    from replay.trace.stream import iter_batch_ranges

    yield from iter_batch_ranges(source, with_updates=False)


def reference_lru(batches: list[list[Any]], capacity: int) -> tuple[list[int], list[int]]:
    """Hits and misses per batch of an ordered-dict LRU (as
    `replay.analysis.stack.reference_lru_misses`)."""
    cache: OrderedDict[Any, None] = OrderedDict()
    hits, misses = [], []
    for batch in batches:
        h = m = 0
        for key in batch:
            if key in cache:
                cache.move_to_end(key)
                h += 1
                continue
            m += 1
            cache[key] = None
            if len(cache) > capacity:
                cache.popitem(last=False)
        hits.append(h)
        misses.append(m)
    return hits, misses


def local_keys(placement: Placement, rank: int, batches: list[list[tuple[int, int, int]]]):
    """The rank's lookups as local keys: its shards in plan order laid end to end."""
    base, at = {}, 0
    for s in placement.shards:
        if s.rank == rank:
            base[(s.table, s.col_start if s.cols != placement.tables[s.table].dim else 0,
                  s.row_start)] = at  # fmt: skip
            at += s.rows
    out = []
    for batch in batches:
        keys = []
        for t, first, row in batch:
            if placement.entry(t).type == COLUMN_WISE:
                keys.append(base[(t, first, 0)] + row)
            else:
                keys.append(base[(t, 0, first)] + row - first)
        out.append(keys)
    return out


@pytest.mark.parametrize("kind", [ROW_WISE, TABLE_WISE])
def test_lru_per_gpu_equals_the_reference(kaggle: GeneratedTrace, kind: str) -> None:
    placement = _placement(kaggle, kind, 2, 4)
    cap = 3000
    result = replay_cluster(
        kaggle, _system("cluster.nodes=2", "cluster.gpus_per_node=4",
                        f"policy.capacity_rows={cap}"), placement,
    )  # fmt: skip
    routed = reference_route(kaggle, placement, 256)
    for r in range(8):
        hits, misses = reference_lru(routed[r], cap)
        assert result.columns["rank_hits"][:, r].tolist() == hits, r
        assert result.columns["rank_misses"][:, r].tolist() == misses, r
        assert result.ranks[r]["hits"] == sum(hits)
        assert result.ranks[r]["lookups"] == sum(len(b) for b in routed[r])
    assert result.columns["rank_lookups"].sum() == kaggle.num_lookups
    assert result.columns["lookups"].sum() == kaggle.num_lookups


def test_tbe_per_gpu_equals_the_reference(small: GeneratedTrace) -> None:
    source = small
    for kind in (ROW_WISE, TABLE_WISE):
        placement = _placement(source, kind, 2, 4)
        system = _system("cluster.nodes=2", "cluster.gpus_per_node=4",
                         "policy.capacity_rows=1024", base="hbm-tbe-lru")  # fmt: skip
        result = replay_cluster(source, system, placement)
        routed = reference_route(source, placement, 128)
        assoc = system.policy.associativity
        for r in range(8):
            batches = [(k, []) for k in local_keys(placement, r, routed[r])]
            counters, _ = reference_tbe(batches, tbe_sets(1024, assoc), assoc)
            assert result.columns["rank_hits"][:, r].tolist() == counters[:, HITS].tolist()
            assert result.columns["rank_misses"][:, r].tolist() == counters[:, MISSES].tolist()


@pytest.mark.parametrize("kind", [COLUMN_WISE, DATA_PARALLEL, TABLE_ROW_WISE])
def test_other_shardings_route_as_the_reference(small: GeneratedTrace, kind: str) -> None:
    placement = _placement(small, kind, 2, 4)
    result = replay_cluster(
        small, _system("cluster.nodes=2", "cluster.gpus_per_node=4",
                        "policy.capacity_rows=2000"), placement,
    )  # fmt: skip
    routed = reference_route(small, placement, 128)
    for r in (0, 5):
        hits, misses = reference_lru(routed[r], 2000)
        assert result.columns["rank_hits"][:, r].tolist() == hits
        assert result.columns["rank_misses"][:, r].tolist() == misses


@pytest.mark.parametrize("kind", [ROW_WISE, TABLE_ROW_WISE])
def test_explicit_blocks_and_replicas_route_as_the_reference(
    small: GeneratedTrace, kind: str
) -> None:
    """Uneven explicit row blocks (random cuts, empty ones, ranks shuffled: the routing's
    bucket index) beside data-parallel small tables (its pooling-1 replica loop and its
    update rows, every replica's): per-rank LRU hits and misses and update rows equal
    the per-key reference's."""
    tables = table_shapes(small.table_names, small.table_rows, 16)
    nodes, gpn = 2, 4
    rng = np.random.default_rng(41)
    entries = []
    for t, shape in enumerate(tables):
        if shape.rows < 30:
            entries.append(TableSharding(shape.name, DATA_PARALLEL, tuple(range(nodes * gpn))))
            continue
        ranks = list(
            range(nodes * gpn) if kind == ROW_WISE else range(t % 2 * gpn, t % 2 * gpn + gpn)
        )
        rng.shuffle(ranks)
        cuts = sorted(rng.integers(0, shape.rows + 1, size=len(ranks) - 1).tolist())
        if t % 3 == 0:  # many tiny blocks at the start, one large block
            cuts = [min(i, shape.rows) for i in range(1, len(ranks))]
        edges = [0, *cuts, shape.rows]
        shards = tuple((edges[i], edges[i + 1]) for i in range(len(ranks)))
        entries.append(TableSharding(shape.name, kind, tuple(ranks), shards))
    placement = resolve_plan(ShardingPlan(tuple(entries)), tables, nodes=nodes, gpus_per_node=gpn)
    system = _system("cluster.nodes=2", "cluster.gpus_per_node=4", "policy.capacity_rows=2000")
    result = replay_cluster(small, system, placement)
    routed = reference_route(small, placement, 128)
    for r in range(nodes * gpn):
        hits, misses = reference_lru(routed[r], 2000)
        assert result.columns["rank_hits"][:, r].tolist() == hits
        assert result.columns["rank_misses"][:, r].tolist() == misses
    # update rows: a batch's distinct rows, each to its owner, a replicated one to all
    from replay.trace.stream import iter_batch_ranges

    updates = np.zeros_like(result.rank_updates)
    for br in iter_batch_ranges(small, with_updates=True):
        for b in range(br.batches):
            keys = np.unique(br.keys[br.bounds[b] : br.bounds[b + 1]])
            owners = owner_ranks_reference(placement, keys)
            row = updates[br.batch_start + b]
            np.add.at(row, owners[owners >= 0], 1)
            row += int((owners < 0).sum())
    assert result.rank_updates.tolist() == updates.tolist()


def test_grid_routes_as_the_reference(small: GeneratedTrace) -> None:
    """Grid beside row-wise and data-parallel tables: column blocks over whole nodes in
    another node order, two column blocks on one node (a rank holds two shards of the
    table), and uneven column blocks over part of a node (explicit shards): per-rank LRU
    hits and misses equal the per-key reference's (a lookup to its row's block in every
    column block), and so do the update rows (a distinct row to each of those blocks)."""
    tables = table_shapes(small.table_names, small.table_rows, 16)
    nodes, gpn = 2, 4
    entries = []
    for t, shape in enumerate(tables):
        if shape.rows < 30:
            entries.append(TableSharding(shape.name, DATA_PARALLEL, tuple(range(nodes * gpn))))
        elif t % 3 == 0:
            entries.append(TableSharding(shape.name, GRID, (4, 5, 6, 7, 0, 1, 2, 3)))
        elif t % 3 == 1:
            entries.append(TableSharding(shape.name, GRID, (1, 0, 3, 2, 0, 1, 2, 3)))
        else:
            shards = ((0, 4), (0, 4), (0, 4), (4, 16), (4, 16))
            entries.append(TableSharding(shape.name, GRID, (6, 5, 4, 0, 3), shards))
    placement = resolve_plan(ShardingPlan(tuple(entries)), tables, nodes=nodes, gpus_per_node=gpn)
    system = _system("cluster.nodes=2", "cluster.gpus_per_node=4", "policy.capacity_rows=2000")
    result = replay_cluster(small, system, placement)
    routed = reference_route(small, placement, 128)
    for r in range(nodes * gpn):
        hits, misses = reference_lru(routed[r], 2000)
        assert result.columns["rank_hits"][:, r].tolist() == hits
        assert result.columns["rank_misses"][:, r].tolist() == misses
    from replay.trace.stream import iter_batch_ranges

    offsets = table_offsets(np.asarray(small.table_rows, dtype=np.int64))
    updates = np.zeros_like(result.rank_updates)
    for br in iter_batch_ranges(small, with_updates=True):
        for b in range(br.batches):
            row = updates[br.batch_start + b]
            for key in np.unique(br.keys[br.bounds[b] : br.bounds[b + 1]]).tolist():
                t = int(np.searchsorted(offsets, key, side="right")) - 1
                for s in placement.shards:
                    if s.table == t and s.row_start <= key - offsets[t] < s.row_stop:
                        row[s.rank] += 1
    assert result.rank_updates.tolist() == updates.tolist()


def test_one_gpu_equals_replay_trace(kaggle: GeneratedTrace) -> None:
    for base in ("hbm-lru", "hbm-tbe-lru"):
        one = _system("policy.capacity_rows=5000", base=base)
        placement = _placement(kaggle, TABLE_WISE, 1, 1)
        result = replay_cluster(kaggle, one, placement)
        single = replay_trace(kaggle, one)
        assert result.columns["rank_hits"][:, 0].tolist() == single.columns["hits"].tolist()
        assert result.columns["rank_misses"][:, 0].tolist() == single.columns["misses"].tolist()
        assert result.columns["all_to_all_bytes"].sum() == 0


# -- the all-to-all on a tiny trace -------------------------------------------------------


class TinySource:
    """Two tables (A: 4 rows, pooling 1; B: 6 rows, pooling 2), 4 samples, one batch."""

    def __init__(self, a: list[int], b: list[int]) -> None:
        self.a, self.b = a, b
        self.table_names = ["A", "B"]
        self.table_rows = np.array([4, 6], dtype=np.int64)
        self.num_batches = 1
        self.workload = {"name": "tiny", "batch_size": 4, "embedding_dim": 8}
        self.manifest: dict[str, Any] = {"batch_size": 4}
        self.path = Path("tiny")

    def generated_ranges(self, start: int, stop: int, **_: Any) -> Iterator[BatchRange]:
        keys = np.array(self.a + [4 + r for r in self.b], dtype=np.int64)
        empty = np.empty(0, dtype=np.int64)
        yield BatchRange(0, 1, keys, np.array([0, len(keys)]), empty, np.zeros(2, np.int64))


# A rows per sample 0..3; B rows, two per sample
TINY_A = [0, 3, 1, 2]
TINY_B = [0, 5, 1, 3, 3, 4, 0, 4]
# forward bytes by hand (dim 8: a pooled embedding is 32 B; samples 0, 1 on rank 0 and 2,
# 3 on rank 1 of two; on four ranks sample s on rank s):
# table-wise (A on rank 0, B on rank 1): A's samples 2, 3 and B's 0, 1 cross: 4 x 32
# row-wise (A rows 0-1 | 2-3, B rows 0-2 | 3-5): A s1 (row 3, r1 -> r0), A s2 (row 1,
#   r0 -> r1), B s0 (row 5, r1 -> r0), B s1 (row 3, r1 -> r0), B s3 (row 0, r0 -> r1):
#   5 x 32
# column-wise (4 columns, 16 B, on each rank): each of 8 bags sends the non-owner's
#   block: 8 x 16
# data-parallel: nothing
# table-row-wise, 2 nodes x 2 GPUs (A on ranks 0, 1; B on ranks 2, 3): A s2 (r0 -> r2)
#   and s3 (r1 -> r3) cross nodes; B s0: r3 -> r2 intra, r2 -> r0 inter; s1: r2 -> r3,
#   r3 -> r1; s2: r3 -> r2 intra only; s3: r2 -> r3 intra only: 4 x 32 intra, 4 x 32 inter
TINY_GOLDEN = {
    # kind: (nodes, gpus per node, forward intra bytes, forward inter bytes)
    TABLE_WISE: (1, 2, 128, 0),
    ROW_WISE: (1, 2, 160, 0),
    COLUMN_WISE: (1, 2, 128, 0),
    DATA_PARALLEL: (1, 2, 0, 0),
    TABLE_ROW_WISE: (2, 2, 128, 128),
}
# TorchRec's collectives by hand (`replay/engine/collectives.py`; ids 8 B, lengths 4 B,
# embeddings 4 B a value, dim 8; b = 2 samples a rank on two, 1 on four):
# table-wise: splits 2 x 24; lengths 2 x (2 samples x 1 feature x 4 B); ids A s2, s3 and
#   B s0, s1 (2 each) cross: 6 x 8; forward 2 x (2 x 32), backward the same:
#   48 + 16 + 48 + 128 + 128 = 368
# row-wise: splits 48; lengths 2 x (2 x 2 features x 4); ids of other ranks' rows: A s1,
#   s2, B s0 (row 5), s1 (row 3), s3 (row 0): 5 x 8; the reduce-scatter of [4, 2 x 32 B]
#   sends each rank's other chunk (2 x 64 B), the all-gather the same:
#   48 + 32 + 40 + 256 + 256 = 632
# column-wise (4 columns on each rank): splits 48; lengths 2 x (2 x 2 blocks x 4); every
#   lookup's id to the other rank's block: 12 x 8; forward 2 x (2 x 2 x 16), backward:
#   48 + 32 + 96 + 128 + 128 = 432
# data-parallel: nothing
# table-row-wise, 2 nodes x 2 (A on node 0, B on node 1; sample s on rank s): splits
#   4 x 24 intra, 4 x 48 inter; lengths 4 x 4 intra, 4 x 8 inter; ids: A s2, s3 and B
#   s0 (2), s1 (2) cross nodes (6 x 8), B s2 (2), s3 (row 0) inside node 1 (3 x 8); each
#   node's reduce-scatter of [4, 32 B] sends each GPU's other chunk (2 x 32 B) and the
#   cross-node all-to-all 1 x 32 B a GPU; backward the same:
#   intra 96 + 16 + 24 + 256 + 256 = 648, inter 192 + 32 + 48 + 128 + 128 = 528
TINY_TORCHREC = {
    # kind: (all-to-all intra bytes, inter bytes, input distribution bytes)
    TABLE_WISE: (368, 0, 112),
    ROW_WISE: (632, 0, 120),
    COLUMN_WISE: (432, 0, 176),
    DATA_PARALLEL: (0, 0, 0),
    TABLE_ROW_WISE: (648, 528, 408),
}


@pytest.mark.parametrize("kind", sorted(TINY_GOLDEN))
def test_all_to_all_bytes_of_a_tiny_trace(kind: str) -> None:
    nodes, gpn, intra, inter = TINY_GOLDEN[kind]
    source = TinySource(TINY_A, TINY_B)
    tables = (TableShape("A", 4, 8), TableShape("B", 6, 8))
    placement = resolve_plan(
        uniform_plan(kind, tables, nodes=nodes, gpus_per_node=gpn), tables,
        nodes=nodes, gpus_per_node=gpn,
    )  # fmt: skip
    sets = (f"cluster.nodes={nodes}", f"cluster.gpus_per_node={gpn}",
            "policy.capacity_rows=4", "model.dense_params=0")  # fmt: skip
    ours = replay_cluster(source, _system(*sets), placement).columns
    t_intra, t_inter, t_input = TINY_TORCHREC[kind]
    assert ours["all_to_all_intra_bytes"].tolist() == [t_intra]
    assert ours["all_to_all_inter_bytes"].tolist() == [t_inter]
    assert ours["all_to_all_input_bytes"].tolist() == [t_input]
    assert ours["all_to_all_forward_bytes"].tolist() == ours["all_to_all_backward_bytes"].tolist()
    assert ours["rank_all_to_all_sent_bytes"].sum() == t_intra + t_inter
    assert ours["rank_all_to_all_received_bytes"].sum() == t_intra + t_inter
    system = _system(*sets, "cluster.all_to_all_model=lower-bound")
    result = replay_cluster(source, system, placement)
    c = result.columns
    assert c["all_to_all_intra_bytes"].tolist() == [2 * intra]  # forward + backward
    assert c["all_to_all_inter_bytes"].tolist() == [2 * inter]
    assert c["all_to_all_bytes"].tolist() == [2 * (intra + inter)]
    assert c["all_to_all_input_bytes"].tolist() == [0]
    assert result.totals["all_to_all_model"] == "lower-bound"
    # TorchRec's collectives move at least the bags the lower bound counts
    assert ours["all_to_all_bytes"][0] >= c["all_to_all_bytes"][0]
    assert c["lookups"].tolist() == [12]
    assert c["routed_lookups"].tolist() == [24 if kind == COLUMN_WISE else 12]
    if kind == DATA_PARALLEL:
        # each rank serves its own samples: 2 A + 4 B lookups; ring of 2: (4 + 6) x 8 x 4 B
        assert c["rank_lookups"].tolist() == [[6, 6]]
        assert c["allreduce_bytes_per_rank"].tolist() == [320.0]
    if kind == TABLE_WISE:
        assert c["rank_lookups"].tolist() == [[4, 8]]
        assert c["imbalance"].tolist() == [8 / 6]
        # 64 B each way per rank over NVLink, plus its latency, forward and backward
        cl = system.cluster
        assert cl is not None
        one = 64 / cl.intra_node_bw_bytes_per_s + cl.intra_node_latency_s
        assert c["all_to_all_s"][0] == pytest.approx(2 * one)
        # TorchRec's: five all-to-alls a step (splits 24 B, lengths 8 B, ids 32 B the
        # most a rank moves, the embeddings 64 B and their gradients 64 B), a latency each
        bw, lat = cl.intra_node_bw_bytes_per_s, cl.intra_node_latency_s
        want = sum(n / bw + lat for n in (24, 8, 32, 64, 64))
        assert ours["all_to_all_s"][0] == pytest.approx(want, rel=1e-12)


def test_table_wise_across_nodes_is_inter_node() -> None:
    tables = (TableShape("A", 4, 8), TableShape("B", 6, 8))
    placement = resolve_plan(
        uniform_plan(TABLE_WISE, tables, nodes=2, gpus_per_node=1), tables,
        nodes=2, gpus_per_node=1,
    )  # fmt: skip
    for model in ("lower-bound", "torchrec"):
        system = _system("cluster.nodes=2", "cluster.gpus_per_node=1", "policy.capacity_rows=4",
                         f"cluster.all_to_all_model={model}")  # fmt: skip
        c = replay_cluster(TinySource(TINY_A, TINY_B), system, placement).columns
        assert c["all_to_all_inter_bytes"].tolist() == [256 if model == "lower-bound" else 368]
        assert c["all_to_all_intra_bytes"].tolist() == [0]


def test_allreduce_ring_model() -> None:
    tables = (TableShape("A", 4, 8), TableShape("B", 6, 8))
    placement = resolve_plan(
        uniform_plan(DATA_PARALLEL, tables, nodes=2, gpus_per_node=4), tables,
        nodes=2, gpus_per_node=4,
    )  # fmt: skip
    per_rank, intra, inter, seconds = allreduce_model(placement, 100, (8.0, 0.0, 2.0, 1.0))
    size = 4 * (100 + 80)
    assert per_rank == pytest.approx(2 * 7 / 8 * size)
    assert inter == pytest.approx(per_rank * 8 * 2 / 8)  # 2 of the ring's 8 links
    assert intra + inter == pytest.approx(per_rank * 8)
    # 8 GPUs: NCCL's trees' 2 x 3 latency steps, not the ring's 2 x 7
    assert seconds == pytest.approx(per_rank / 2.0 + 2 * 3 * 1.0)
    two = resolve_plan(
        uniform_plan(DATA_PARALLEL, tables, nodes=1, gpus_per_node=2), tables,
        nodes=1, gpus_per_node=2,
    )  # fmt: skip
    per_two, _, _, seconds_two = allreduce_model(two, 100, (8.0, 1.0, 2.0, 1.0))
    assert seconds_two == pytest.approx(per_two / 8.0 + 2 * 1 * 1.0)  # ring = tree at 2


def test_refuses_a_policy_that_needs_the_future(kaggle: GeneratedTrace) -> None:
    placement = _placement(kaggle, ROW_WISE, 1, 2)
    system = _system("cluster.nodes=1", "cluster.gpus_per_node=2", "policy.capacity_rows=100",
                     base="hbm-belady")  # fmt: skip
    with pytest.raises(ConfigError, match="future"):
        replay_cluster(kaggle, system, placement)


def test_refuses_a_plan_for_another_cluster(kaggle: GeneratedTrace) -> None:
    placement = _placement(kaggle, ROW_WISE, 1, 2)
    with pytest.raises(ConfigError, match="plan is for"):
        replay_cluster(kaggle, _system("cluster.nodes=1", "cluster.gpus_per_node=4"), placement)


# -- speed and the acceptance (bench) ----------------------------------------------


@pytest.mark.bench
def test_64_gpus_at_half_the_rate_of_one() -> None:
    source = GeneratedTrace(get_preset("criteo-kaggle").with_overrides(batches=2000))
    one = _system("policy.capacity_rows=100000")
    start = time.perf_counter()
    replay_trace(source, one)
    one_s = time.perf_counter() - start
    system = _system("cluster.nodes=8", "cluster.gpus_per_node=8", "policy.capacity_rows=100000")
    placement = _placement(source, ROW_WISE, 8, 8)
    start = time.perf_counter()
    result = replay_cluster(source, system, placement)
    many_s = time.perf_counter() - start
    assert result.columns["lookups"].sum() == source.num_lookups
    assert one_s / many_s >= 0.5, (one_s, many_s)


@pytest.mark.bench
@pytest.mark.parametrize("kind", [ROW_WISE, TABLE_WISE])
def test_acceptance_2000_batches_of_2048_against_the_reference(kind: str) -> None:
    source = GeneratedTrace(get_preset("criteo-kaggle").with_overrides(batches=2000))
    placement = _placement(source, kind, 2, 4)
    system = _system("cluster.nodes=2", "cluster.gpus_per_node=4", "policy.capacity_rows=50000")
    result = replay_cluster(source, system, placement)
    routed = reference_route(source, placement, 2048)
    for r in range(8):
        hits, _ = reference_lru(routed[r], 50000)
        assert result.columns["rank_hits"][:, r].tolist() == hits
