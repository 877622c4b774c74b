"""The routed pass's counts with whole tables in closed form
(`replay.engine.cluster_routed.WholeTables`) against the routing kernels
(`replay.engine.cluster_route.Router.count`) on the same ranges: every sharding type,
tables of no lookups, fewer lookups than samples, one a sample and several, batch sizes
that do not divide among the GPUs, ranks within and across nodes."""

from __future__ import annotations

import numpy as np
import pytest

from replay.engine.cluster import cluster_link, collective_model
from replay.engine.cluster_route import Router
from replay.engine.cluster_routed import WholeTables, table_counts
from replay.engine.placement import resolve_placement
from replay.engine.systems import resolve_system
from replay.trace.keys import table_offsets
from replay.trace.stream import BatchRange
from replay.workload.onthefly import GeneratedTrace
from replay.workload.spec import WorkloadSpec, spec_from_dict

ROWS = (50, 3000, 200, 10_000, 7, 400, 1, 90)


def _spec(batch_size: int) -> WorkloadSpec:
    return spec_from_dict(
        {
            "name": "counts",
            "batch_size": batch_size,
            "batches": 2,
            "seed": 3,
            "embedding_dim": 8,
            "tables": [
                {"name": f"t{i}", "rows": r, "alpha": 1.0, "pooling": 1 + i % 3}
                for i, r in enumerate(ROWS)
            ],
        }
    )


def _range(
    rng: np.random.Generator, offsets: np.ndarray, batch_size: int, batches: int
) -> BatchRange:
    """Batches of random lookups, table by table, each table's count drawn from 0, fewer
    than the samples, as many and more (not a multiple of them); its update rows its
    distinct rows, table by table, in no order within a table."""
    rows = np.diff(offsets)
    keys, ukeys, bounds, ubounds = [], [], [0], [0]
    for _ in range(batches):
        for t, r in enumerate(rows.tolist()):
            n = int(rng.choice([0, 1, batch_size // 3, batch_size - 1, batch_size,
                                batch_size + 1, 3 * batch_size + 5]))  # fmt: skip
            k = offsets[t] + rng.integers(0, r, n)
            keys.append(k)
            ukeys.append(rng.permutation(np.unique(k)))
        bounds.append(sum(len(k) for k in keys))
        ubounds.append(sum(len(k) for k in ukeys))
    return BatchRange(
        0, batches, np.concatenate(keys).astype(np.int64), np.array(bounds, np.int64),
        np.concatenate(ukeys).astype(np.int64), np.array(ubounds, np.int64),
    )  # fmt: skip


SHARDINGS = ["table-wise", "row-wise", "table-row-wise", "column-wise", "table-column-wise",
             "data-parallel", "auto", "auto-uneven"]  # fmt: skip


@pytest.mark.parametrize("sharding", SHARDINGS)
@pytest.mark.parametrize(("nodes", "gpn", "batch_size"), [(2, 2, 30), (1, 3, 16), (3, 2, 7)])
def test_whole_tables_count_as_the_router(
    sharding: str, nodes: int, gpn: int, batch_size: int
) -> None:
    spec = _spec(batch_size)
    sets = [f"cluster.nodes={nodes}", f"cluster.gpus_per_node={gpn}",
            f"cluster.sharding={sharding}", "policy.capacity_rows=100"]  # fmt: skip
    system = resolve_system("hbm-lru", sets)
    placement = resolve_placement(system, GeneratedTrace(spec)).placement
    offsets = table_offsets(np.array(ROWS, dtype=np.int64))
    model = collective_model(system.cluster, placement, batch_size,
                             cluster_link(system.cluster, placement.gpus_per_node))  # fmt: skip
    router = Router(placement, offsets, batch_size)
    whole = WholeTables(Router(placement, offsets, batch_size), batch_size)
    rng = np.random.default_rng(nodes * 100 + gpn * 10 + batch_size)
    for _ in range(2):
        br = _range(rng, offsets, batch_size, 3)
        want_traffic = model.buffers(br.batches)
        want = router.count(br, want_traffic)
        looks = np.zeros((br.batches, len(ROWS)), dtype=np.int64)
        upds = np.zeros_like(looks)
        table_counts(br.keys, br.bounds, br.update_keys, br.update_bounds, offsets, looks, upds)
        got_traffic = model.buffers(br.batches)
        got = whole.count(br, looks, upds, got_traffic)
        np.testing.assert_array_equal(got[0], want[0], err_msg="lookups")
        np.testing.assert_array_equal(got[1], want[1], err_msg="update rows")
        # the update rows laid out (each row's block recorded) count as counted alone
        laid = router._route(br, model.buffers(br.batches), True)
        np.testing.assert_array_equal(laid[2], want[1], err_msg="laid-out update rows")
        np.testing.assert_array_equal(got_traffic[0], want_traffic[0], err_msg="bytes")
        np.testing.assert_array_equal(got_traffic[1], want_traffic[1], err_msg="ids")
        assert want_traffic[0].any() or sharding == "data-parallel"


def test_table_counts_are_each_tables_lookups_and_update_rows() -> None:
    offsets = table_offsets(np.array(ROWS, dtype=np.int64))
    br = _range(np.random.default_rng(1), offsets, 10, 4)
    looks = np.zeros((4, len(ROWS)), dtype=np.int64)
    upds = np.zeros_like(looks)
    table_counts(br.keys, br.bounds, br.update_keys, br.update_bounds, offsets, looks, upds)
    for b in range(4):
        keys = br.keys[br.bounds[b] : br.bounds[b + 1]]
        ukeys = br.update_keys[br.update_bounds[b] : br.update_bounds[b + 1]]
        of = np.searchsorted(offsets, keys, side="right") - 1
        uof = np.searchsorted(offsets, ukeys, side="right") - 1
        assert looks[b].tolist() == np.bincount(of, minlength=len(ROWS)).tolist()
        assert upds[b].tolist() == np.bincount(uof, minlength=len(ROWS)).tolist()


@pytest.mark.parametrize("sharding", ["table-wise", "data-parallel", "row-wise"])
def test_route_clusters_from_counted_tables_is_the_read_in_pieces(
    monkeypatch: pytest.MonkeyPatch, sharding: str
) -> None:
    """`route_clusters` given the source's per-table counts (`source_table_counts`) gives
    every column it gives reading the source in pieces (a placement that splits tables
    reads the source all the same)."""
    import replay.trace.format as fmt
    from replay.engine.cluster_routed import route_clusters, source_table_counts

    monkeypatch.setattr(fmt, "ROW_GROUP_TARGET_LOOKUPS", 60)
    monkeypatch.setattr(fmt, "PIECE_MIN_LOOKUPS", 120)
    spec = _spec(30)
    sets = ["cluster.nodes=2", "cluster.gpus_per_node=2", f"cluster.sharding={sharding}",
            "policy.capacity_rows=100"]  # fmt: skip
    system = resolve_system("hbm-lru", sets)
    src = GeneratedTrace(spec)
    assert src.pieces
    placement = resolve_placement(system, src).placement
    jobs = [(system, placement, np.full(placement.world, 0.5))]
    want = route_clusters(GeneratedTrace(spec), jobs)[0]
    counts = source_table_counts(GeneratedTrace(spec))
    assert counts[0].sum() == int(spec.lookups_per_batch) * spec.batches
    got = route_clusters(GeneratedTrace(spec), jobs, counts=counts)[0]
    assert sorted(got) == sorted(want)
    for name, values in want.items():
        assert got[name].dtype == values.dtype, name
        assert got[name].tobytes() == values.tobytes(), name


def test_routed_counts_are_batch_0s_where_no_table_is_split(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`routed_counts` gives batch 0's lookups and update rows per table as reading it
    counts them (`source_table_counts`), made ahead by `count_ahead` where the plan will
    route (and nowhere else) or counted there; `route_clusters` from them gives what it
    gives reading the batch; a placement that splits a table or accumulated steps: None."""
    import dataclasses

    from replay.engine.cluster_routed import route_clusters, source_table_counts
    from replay.plan import cluster_scaling as cs

    spec = _spec(30)
    system = resolve_system("hbm-lru", ["cluster.nodes=2", "cluster.gpus_per_node=2",
                                        "cluster.sharding=table-wise"])  # fmt: skip
    rows_wise = resolve_system("hbm-lru", ["cluster.nodes=2", "cluster.gpus_per_node=2",
                                           "cluster.sharding=row-wise"])  # fmt: skip
    one = GeneratedTrace(spec.with_overrides(batches=cs.ROUTED_BATCHES))
    whole = resolve_placement(system, one).placement
    split = resolve_placement(rows_wise, one).placement
    want = source_table_counts(one)
    monkeypatch.setattr(cs, "_ahead", [])
    cs.count_ahead(spec, system)  # not production scale: nothing started
    assert cs._ahead == []
    monkeypatch.setattr(cs, "ROUTED_MIN_LOOKUPS", 10)
    cs.count_ahead(spec, resolve_system("hbm-lru", []))  # one GPU: nothing
    assert cs._ahead == []
    cs.count_ahead(spec, system)
    assert len(cs._ahead) == 1
    for _ in range(2):  # made ahead, and taken as often as asked
        looks, upds = cs.routed_counts(spec, [whole])
        assert looks.tolist() == want[0].tolist() and upds.tolist() == want[1].tolist()
    monkeypatch.setattr(cs, "_ahead", [])
    looks, upds = cs.routed_counts(spec, [whole])  # counted here
    assert looks.tolist() == want[0].tolist() and upds.tolist() == want[1].tolist()
    assert cs.routed_counts(spec, [whole, split]) is None
    accumulating = dataclasses.replace(
        spec, update=dataclasses.replace(spec.update, accumulate_batches=2)
    )
    assert cs.routed_counts(accumulating, [whole]) is None
    jobs = [(system, whole, np.full(whole.world, 0.5))]
    got = route_clusters(one, jobs, counts=(looks, upds))[0]
    read = route_clusters(one, jobs)[0]
    for name, values in read.items():
        assert got[name].tobytes() == values.tobytes(), name


def test_block_shares_from_the_sharders_loads_are_the_specs() -> None:
    """The comparison's block shares taken from the sharder's loads (`spec_loads`'s pmf)
    are those built from the spec anew, to the bit."""
    from replay.engine.placement import spec_loads
    from replay.plan.rank_curves import row_split_starts, spec_block_shares

    spec = _spec(30)
    system = resolve_system("hbm-lru", ["cluster.nodes=2", "cluster.gpus_per_node=2",
                                        "cluster.sharding=row-wise"])  # fmt: skip
    starts = [row_split_starts(resolve_placement(system, GeneratedTrace(spec)).placement)]
    masses = [load.mass for load in spec_loads(spec, system)]
    assert all(m is not None for m in masses) and starts[0]
    (got,) = spec_block_shares(spec, starts, masses)
    (want,) = spec_block_shares(spec, starts)
    assert set(got) == set(want)
    for t, shares in want.items():
        assert got[t].tobytes() == shares.tobytes()
