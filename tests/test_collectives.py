"""TorchRec's collectives as `replay.engine.collectives` models them, without torch:
properties over random placements (every sharding type, uneven blocks, rank subsets,
1-3 nodes) and random batches. Every call conserves bytes (what the ranks send is what
they receive, intra- and inter-node apart); the routing kernels' ids per sharding group
equal a per-lookup reference; the results' per-rank bytes add up to the batch's; and a
world of one sends nothing. The bytes against the real `DistributedModelParallel` are
`tests/test_collectives_dmp.py`'s."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from test_sharding import FAST, placements

from replay.engine.cluster import cluster_link
from replay.engine.cluster_route import Router
from replay.engine.collectives import (
    LOWER_BOUND,
    CollectiveModel,
    local_batches,
    sharding_groups,
    torchrec_calls,
)
from replay.system.sharding import COLUMN_SPLIT, DATA_PARALLEL, GRID, Placement
from replay.system.spec import ClusterSpec
from replay.trace.keys import table_offsets
from replay.trace.stream import BatchRange


def _batches(draw: st.DrawFn, placement: Placement, batch: int, n: int) -> list[list[np.ndarray]]:
    """Per batch, per table: the rows of a (batch, table) group, in sample order (any
    length: a sample's lookups are positions p with p x batch // length)."""
    out = []
    for _ in range(n):
        groups = []
        for shape in placement.tables:
            size = draw(st.integers(0, 3 * batch))
            groups.append(np.array(draw(st.lists(st.integers(0, shape.rows - 1), min_size=size,
                                                 max_size=size)), dtype=np.int64))  # fmt: skip
        out.append(groups)
    return out


def _reference_ids(placement: Placement, batch: int, groups: list[np.ndarray]) -> np.ndarray:
    """(groups, world, 4) ids each rank sends and receives in one batch, lookup by lookup:
    from the sample's rank to each rank serving the row (every column block's; grid's
    row block in every column block)."""
    names = sharding_groups(placement)
    world, gpn = placement.world, placement.gpus_per_node
    out = np.zeros((max(len(names), 1), world, 4), dtype=np.int64)
    for t, rows in enumerate(groups):
        e = placement.entry(t)
        if e.type == DATA_PARALLEL:
            continue
        g = names.index(e.type)
        n = len(rows)
        for p, row in enumerate(rows.tolist()):
            owner = (p * batch // n) * world // batch
            if e.type in COLUMN_SPLIT:
                dests = [s.rank for s in placement.shards if s.table == t]
            elif e.type == GRID:  # the row's block in each column block
                dests = [
                    s.rank
                    for s in placement.shards
                    if s.table == t and s.row_start <= row < s.row_start + s.rows
                ]
            else:
                dests = [placement.owner_of(t, row)]
            for d in dests:
                if d != owner:
                    inter = int(d // gpn != owner // gpn)
                    out[g, owner, inter] += 1
                    out[g, d, 2 + inter] += 1
    return out


def _model(placement: Placement, batch: int, kind: str = "torchrec") -> CollectiveModel:
    cluster = ClusterSpec(nodes=placement.nodes, gpus_per_node=placement.gpus_per_node)
    return CollectiveModel(
        placement, batch, cluster_link(cluster, placement.gpus_per_node), model=kind
    )


@given(placements(), st.integers(1, 40))
@FAST
def test_every_call_conserves_its_bytes(placement: Placement, batch: int) -> None:
    calls = torchrec_calls(placement, batch)
    if placement.world == 1:
        assert calls == []
    for c in calls:
        t = c.traffic
        assert (t >= 0).all()
        assert t[:, 0].sum() == t[:, 2].sum()  # intra-node: sent = received
        assert t[:, 1].sum() == t[:, 3].sum()  # inter-node
        if not c.spans_nodes:
            assert t[:, 1].sum() == 0
    assert local_batches(batch, placement.world).sum() == batch


@st.composite
def routed(draw: st.DrawFn) -> tuple:
    placement = draw(placements())
    batch = draw(st.integers(1, 12))
    return placement, batch, _batches(draw, placement, batch, draw(st.integers(1, 3)))


@given(routed())
@FAST
def test_the_kernels_ids_are_the_references(case: tuple) -> None:
    placement, batch, batches = case
    offsets = table_offsets(np.array([t.rows for t in placement.tables], dtype=np.int64))
    keys = [np.concatenate([offsets[t] + g for t, g in enumerate(b)]) for b in batches]
    bounds = np.concatenate([[0], np.cumsum([len(k) for k in keys])]).astype(np.int64)
    br = BatchRange(0, len(batches), np.concatenate(keys).astype(np.int64), bounds,
                    np.empty(0, np.int64), np.zeros(len(batches) + 1, np.int64))  # fmt: skip
    model = _model(placement, batch)
    lower, ids = model.buffers(len(batches))
    Router(placement, offsets, batch).count(br, (lower, ids))
    for b, groups in enumerate(batches):
        np.testing.assert_array_equal(ids[b], _reference_ids(placement, batch, groups))
    for kind in ("torchrec", LOWER_BOUND):
        c = _model(placement, batch, kind).columns(lower, ids)
        total = c["all_to_all_bytes"]
        np.testing.assert_allclose(c["rank_all_to_all_sent_bytes"].sum(axis=1), total)
        np.testing.assert_allclose(c["rank_all_to_all_received_bytes"].sum(axis=1), total)
        parts = c["all_to_all_input_bytes"] + c["all_to_all_forward_bytes"]
        np.testing.assert_allclose(parts + c["all_to_all_backward_bytes"], total)
        np.testing.assert_allclose(c["all_to_all_intra_bytes"] + c["all_to_all_inter_bytes"], total)
        assert (c["all_to_all_s"] >= 0).all()
        if placement.world == 1:
            assert not total.any() and not c["all_to_all_s"].any()
