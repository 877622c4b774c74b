"""PatrickStar's chunks across data-parallel GPUs (`replay/engine/patrickstar.py`): hand
goldens on a tiny trace, a per-lookup reference on a generated one, one GPU, properties."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.engine.patrickstar import DENSE_RATIO, PAPER_CLAIM, patrickstar_cluster, ring_link
from replay.errors import ConfigError
from replay.system.spec import SystemSpec, apply_overrides, build_system, load_system_data
from replay.trace.keys import table_offsets
from replay.trace.stream import BatchRange, iter_batch_ranges
from replay.workload.onthefly import GeneratedTrace
from replay.workload.presets import get_preset


def _system(*sets: str, base: str = "chunk") -> SystemSpec:
    data, origin = load_system_data(base)
    return build_system(apply_overrides(data, list(sets)), f"{origin} with --set")


def _cluster(nodes: int, gpn: int, *sets: str) -> SystemSpec:
    return _system(f"cluster.nodes={nodes}", f"cluster.gpus_per_node={gpn}", *sets)


class ListSource:
    """Batches given as lists of (table, row) lookups in (table, sample) order."""

    def __init__(
        self, table_rows: list[int], batches: list[list[tuple[int, int]]], batch_size: int, dim: int
    ) -> None:
        self.table_names = [f"t{i}" for i in range(len(table_rows))]
        self.table_rows = np.array(table_rows, dtype=np.int64)
        self.batches = batches
        self.num_batches = len(batches)
        self.workload = {"name": "list", "batch_size": batch_size, "embedding_dim": dim}
        self.manifest: dict[str, Any] = {"batch_size": batch_size}
        self.path = Path("list")

    def generated_ranges(self, start: int, stop: int, **_: Any) -> Iterator[BatchRange]:
        offsets = table_offsets(self.table_rows)
        keys = [int(offsets[t]) + r for b in self.batches[start:stop] for t, r in b]
        bounds = np.cumsum([0] + [len(b) for b in self.batches[start:stop]], dtype=np.int64)
        empty = np.empty(0, dtype=np.int64)
        yield BatchRange(
            start, stop, np.array(keys, dtype=np.int64), bounds, empty,
            np.zeros(stop - start + 1, np.int64),
        )  # fmt: skip


# -- hand goldens ---------------------------------------------------------------------------
# Table 0: 6 rows, table 1: 4 rows; chunk_rows 2: chunks c0 {t0 r0-1}, c1 {t0 r2-3},
# c2 {t0 r4-5}, c3 {t1 r0-1}, c4 {t1 r2-3}. Batch size 4, dim 8, fp16: a chunk is
# 2 x 8 x 2 = 32 B.
# Batch 0: table 0 pooling 1, samples 0-3 rows 0, 5, 1, 4 (chunks 0, 2, 0, 2); table 1
# pooling 2, rows (0, 1), (3, 3), (0, 2), (1, 1) (chunks (3, 3), (4, 4), (3, 4), (3, 3)).
# Batch 1: table 0 rows 5 x 4 (chunk 2); table 1 row 3 x 8 (chunk 4).
TINY = [
    [(0, 0), (0, 5), (0, 1), (0, 4), *[(1, r) for r in (0, 1, 3, 3, 0, 2, 1, 1)]],
    [*[(0, 5)] * 4, *[(1, 3)] * 8],
]
CB = 32


def _tiny() -> ListSource:
    return ListSource([6, 4], TINY, batch_size=4, dim=8)


def test_two_gpus_by_hand() -> None:
    # W = 2: groups {c0, c1}, {c2, c3}, {c4, dummy}: 3 groups. Batch 0 uses chunks
    # {0, 2, 3, 4}, groups {0, 1, 2}; rank 0 (samples 0, 1): t0 c0 g0, c2 g1; t1 c3 g1,
    # c4 g2 -> 3 groups; rank 1 (samples 2, 3): c0 g0, c2 g1, c3 g1, c4 g2 -> 3.
    # Batch 1: chunks {2, 4}, groups {1, 2}, both on both ranks.
    r = patrickstar_cluster(_tiny(), _cluster(1, 2, "policy.chunk_rows=2"))
    c = r.columns
    assert (r.world, r.num_chunks, r.num_groups, r.chunk_bytes) == (2, 5, 3, CB)
    assert c["groups"].tolist() == [3, 2]
    assert c["chunks"].tolist() == [4, 2]
    assert c["rank_groups_max"].tolist() == [3, 2]
    assert c["rank_groups_sum"].tolist() == [6, 4]
    # per rank: forward and backward gathers of (W - 1) = 1 chunk per group; one RS
    assert c["all_gather_bytes"].tolist() == [2 * 3 * CB, 2 * 2 * CB]
    assert c["reduce_scatter_bytes"].tolist() == [3 * CB, 2 * CB]
    assert c["intra_node_bytes"].tolist() == [2 * 9 * CB, 2 * 6 * CB]
    assert c["inter_node_bytes"].tolist() == [0, 0]
    # data parallelism: all-reduce of the used chunks, 2 (W - 1) / W x 4 chunks
    assert c["data_parallel_bytes"].tolist() == [4 * CB, 2 * CB]
    s = r.summary["patrickstar"]
    assert s["all_gather_bytes_per_step"] == (6 + 4) * CB / 2
    assert s["reduce_scatter_bytes_per_step"] == (3 + 2) * CB / 2
    assert s["vs_data_parallel"] == pytest.approx(((9 + 6) / 2) / ((4 + 2) / 2))
    assert s["chunk_bytes_own"] == 3 * CB
    assert s["gathered_bytes_max"] == 3 * CB
    assert s["chunk_bytes_per_gpu"] == 6 * CB
    assert s["chunk_bytes_one_gpu"] == 5 * CB
    assert s["claim"]["text"] == PAPER_CLAIM


def test_four_gpus_by_hand() -> None:
    # W = 4: groups {c0..c3}, {c4, 3 dummies}. Sample s on rank s. Batch 0: groups
    # {0, 1}; rank 0: t0 c0, t1 c3 -> {g0}; rank 1: c2, c4 -> {g0, g1}; rank 2: c0, c3,
    # c4 -> {g0, g1}; rank 3: c2, c3 -> {g0}. Batch 1: c2 g0, c4 g1 on every rank.
    r = patrickstar_cluster(_tiny(), _cluster(1, 4, "policy.chunk_rows=2"))
    c = r.columns
    assert (r.num_chunks, r.num_groups) == (5, 2)
    assert c["groups"].tolist() == [2, 2]
    assert c["rank_groups_max"].tolist() == [2, 2]
    assert c["rank_groups_sum"].tolist() == [6, 8]
    assert c["all_gather_bytes"].tolist() == [2 * 2 * 3 * CB] * 2
    assert c["reduce_scatter_bytes"].tolist() == [2 * 3 * CB] * 2
    assert c["data_parallel_bytes"].tolist() == [1.5 * 4 * CB, 1.5 * 2 * CB]
    sys1 = _cluster(1, 4, "policy.chunk_rows=2")
    assert sys1.cluster is not None
    bw, lat = sys1.cluster.intra_node_bw_bytes_per_s, sys1.cluster.intra_node_latency_s
    # 3 collectives per group (2 gathers, 1 reduce-scatter), each 3 chunks and 3 steps
    assert c["comm_s"][0] == pytest.approx(18 * CB / bw + 3 * 2 * 3 * lat)
    assert c["comm_latency_s"][0] == pytest.approx(3 * 2 * 3 * lat)
    # two nodes of two: 2 of the ring's 4 links cross nodes
    r2 = patrickstar_cluster(_tiny(), _cluster(2, 2, "policy.chunk_rows=2"))
    c2 = r2.columns
    assert c2["groups"].tolist() == [2, 2]
    assert c2["inter_node_bytes"].tolist() == [4 * 18 * CB / 2] * 2
    assert c2["intra_node_bytes"].tolist() == [4 * 18 * CB / 2] * 2
    cl = _cluster(2, 2).cluster
    assert cl is not None
    bw2, lat2 = ring_link(cl)
    assert bw2 == min(cl.intra_node_bw_bytes_per_s, cl.nics_per_node * cl.nic_bw_bytes_per_s / 2)
    assert c2["comm_s"][0] == pytest.approx(18 * CB / bw2 + 18 * lat2)


def test_one_gather_per_step_and_fp32() -> None:
    r = patrickstar_cluster(
        _tiny(), _cluster(1, 2, "policy.chunk_rows=2"), bytes_per_value=4, regather_backward=False
    )
    assert r.chunk_bytes == 2 * CB
    assert r.columns["all_gather_bytes"].tolist() == [3 * 2 * CB, 2 * 2 * CB]
    assert r.columns["reduce_scatter_bytes"].tolist() == [3 * 2 * CB, 2 * 2 * CB]
    assert r.summary["patrickstar"]["gathers_per_step"] == 1


def test_one_gpu_communicates_nothing() -> None:
    for system in (_system("policy.chunk_rows=2"), _cluster(1, 1, "policy.chunk_rows=2")):
        r = patrickstar_cluster(_tiny(), system)
        assert r.world == 1
        c = r.columns
        assert c["groups"].tolist() == c["chunks"].tolist() == [4, 2]
        for key in ("all_gather_bytes", "reduce_scatter_bytes", "comm_s", "data_parallel_bytes"):
            assert c[key].sum() == 0
        s = r.summary["patrickstar"]
        assert s["vs_data_parallel"] is None
        assert s["gathered_bytes_max"] == 0
        assert s["chunk_bytes_per_gpu"] == s["chunk_bytes_one_gpu"] == 5 * CB


def test_refuses_a_source_without_a_batch_size() -> None:
    src = _tiny()
    src.manifest = {"batch_size": 0}
    src.workload = {"name": "x", "batch_size": 0, "embedding_dim": 8}
    with pytest.raises(ConfigError, match="batch size"):
        patrickstar_cluster(src, _cluster(1, 2))


# -- the slow reference ---------------------------------------------------------------------


def reference(
    source: Any, world: int, chunk_rows: int, batch_size: int
) -> tuple[list[int], list[int], list[int], list[int]]:
    """Per lookup: its table, its position in its (batch, table) group, sample, rank,
    chunk and group, in Python sets."""
    offsets = table_offsets(source.table_rows)
    groups, chunks, rmax, rsum = [], [], [], []
    for br in iter_batch_ranges(source, with_updates=False):
        for b in range(br.batches):
            keys = [int(k) for k in br.keys[br.bounds[b] : br.bounds[b + 1]]]
            tables = [int(np.searchsorted(offsets, k, side="right") - 1) for k in keys]
            per_table: dict[int, list[int]] = {}
            for k, t in zip(keys, tables, strict=True):
                per_table.setdefault(t, []).append(k)
            g_used: set[int] = set()
            c_used: set[int] = set()
            by_rank: list[set[int]] = [set() for _ in range(world)]
            for ks in per_table.values():
                n = len(ks)
                for p, k in enumerate(ks):
                    c = k // chunk_rows
                    sample = p * batch_size // n
                    rank = sample * world // batch_size
                    c_used.add(c)
                    g_used.add(c // world)
                    by_rank[rank].add(c // world)
            groups.append(len(g_used))
            chunks.append(len(c_used))
            rmax.append(max(len(s) for s in by_rank))
            rsum.append(sum(len(s) for s in by_rank))
    return groups, chunks, rmax, rsum


@pytest.mark.parametrize(("nodes", "gpn", "chunk_rows"), [(1, 8, 1024), (2, 4, 256), (3, 5, 64)])
def test_equals_the_per_lookup_reference(nodes: int, gpn: int, chunk_rows: int) -> None:
    source = GeneratedTrace(get_preset("criteo-kaggle").with_overrides(batches=6, batch_size=96))
    system = _cluster(nodes, gpn, f"policy.chunk_rows={chunk_rows}")
    r = patrickstar_cluster(source, system)
    groups, chunks, rmax, rsum = reference(source, nodes * gpn, chunk_rows, 96)
    c = r.columns
    assert c["groups"].tolist() == groups
    assert c["chunks"].tolist() == chunks
    assert c["rank_groups_max"].tolist() == rmax
    assert c["rank_groups_sum"].tolist() == rsum
    w, cb = nodes * gpn, r.chunk_bytes
    assert c["all_gather_bytes"].tolist() == [2.0 * g * (w - 1) * cb for g in groups]
    assert r.summary["patrickstar"]["lookups"] == int(c["lookups"].sum()) == 6 * 96 * 26


def test_dense_model_is_one_and_a_half_data_parallelism() -> None:
    # every chunk used every batch: PatrickStar's 3 (W - 1) / W against 2 (W - 1) / W
    rows = 64
    batches = [[(0, r) for r in range(rows)]] * 3
    r = patrickstar_cluster(
        ListSource([rows], batches, batch_size=rows, dim=4), _cluster(1, 4, "policy.chunk_rows=4")
    )
    s = r.summary["patrickstar"]
    assert r.num_chunks == 16 and r.num_groups == 4
    assert s["vs_data_parallel"] == pytest.approx(DENSE_RATIO)
    assert s["vs_data_parallel_dense"] == pytest.approx(DENSE_RATIO)
    assert s["dense_model_ratio"] == pytest.approx(DENSE_RATIO)
    # rank r's 16 samples look up rows 16 r .. 16 r + 15: chunks 4 r .. 4 r + 3, group r
    # only, so each rank needs a quarter of what it gathers
    assert s["rank_group_share"] == pytest.approx(0.25)


# -- properties -----------------------------------------------------------------------------


@st.composite
def traces(draw: Any) -> ListSource:
    tables = draw(st.lists(st.integers(1, 40), min_size=1, max_size=4))
    batch_size = draw(st.integers(1, 6))
    pooling = [draw(st.integers(1, 3)) for _ in tables]
    batches = []
    for _ in range(draw(st.integers(1, 4))):
        lookups = []
        for t, rows in enumerate(tables):
            n = batch_size * pooling[t] - draw(st.integers(0, batch_size * pooling[t] - 1))
            lookups += [(t, draw(st.integers(0, rows - 1))) for _ in range(n)]
        batches.append(lookups)
    return ListSource(tables, batches, batch_size=batch_size, dim=draw(st.integers(1, 8)))


@settings(max_examples=60, deadline=None)
@given(traces(), st.integers(1, 4), st.integers(1, 3), st.integers(1, 3), st.integers(1, 9))
def test_properties(source: ListSource, chunk_rows: int, gpn: int, k: int, nodes: int) -> None:
    system = _cluster(nodes, gpn, f"policy.chunk_rows={chunk_rows}")
    r = patrickstar_cluster(source, system)
    c, w = r.columns, r.world
    ref = reference(source, w, chunk_rows, int(source.manifest["batch_size"]))
    assert c["groups"].tolist() == ref[0]
    assert c["rank_groups_max"].tolist() == ref[2]
    for key in ("all_gather_bytes", "reduce_scatter_bytes", "comm_s", "data_parallel_bytes"):
        assert (c[key] >= 0).all()
    # a gather receives at most (W - 1) / W of the (padded) chunks' bytes
    assert (c["all_gather_bytes"] <= 2 * (w - 1) * r.num_groups * r.chunk_bytes).all()
    # a group holds at most W of the used chunks and at least one
    assert (c["groups"] <= c["chunks"]).all() and (c["chunks"] <= w * c["groups"]).all()
    assert (c["rank_groups_max"] <= c["groups"]).all()
    assert (c["groups"] <= c["rank_groups_sum"]).all()
    assert (c["rank_groups_sum"] <= w * c["groups"]).all()
    if w > 1:  # 3 gathered chunks per group against 2 (W - 1) / W per used chunk
        assert (
            c["all_gather_bytes"] + c["reduce_scatter_bytes"] >= 1.5 * c["data_parallel_bytes"]
        ).all()
    # k times the GPUs: fewer (or as many) groups, never fewer chunks gathered in all
    big = patrickstar_cluster(source, _cluster(nodes * k, gpn, f"policy.chunk_rows={chunk_rows}"))
    assert (big.columns["chunks"] == c["chunks"]).all()
    assert (big.columns["groups"] <= c["groups"]).all()
    assert (big.columns["groups"] * big.world >= c["groups"] * w).all()
