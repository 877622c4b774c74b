"""The cluster replay's one-pass routing (`replay.engine.cluster_direct.DirectRouter`):
equal, array for array, to the two-pass routing of the same group (`route_parts`) for
every sharding type it takes (row-wise, table-wise, table-row-wise, data-parallel,
explicit uneven blocks beside replicas), both all-to-all models, the update rows laid
out or only counted; where a rank's lookups overrun its region, or a table's kind or a
sample's several lookups are not its, it hands the group back (None), and a whole
replay gives the same columns with it and without it."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

import replay.engine.cluster as cluster_module
from replay.engine.cluster import cluster_link, collective_model, replay_cluster
from replay.engine.cluster_direct import DirectRouter
from replay.engine.cluster_parts import route_parts
from replay.engine.cluster_route import Router
from replay.system.sharding import (
    DATA_PARALLEL,
    ROW_WISE,
    TABLE_ROW_WISE,
    Placement,
    ShardingPlan,
    TableSharding,
    resolve_plan,
    table_shapes,
    uniform_plan,
)
from replay.system.spec import (
    ClusterSpec,
    SystemSpec,
    apply_overrides,
    build_system,
    load_system_data,
)
from replay.trace.keys import table_offsets
from replay.trace.stream import BatchRange, iter_batch_ranges, split_ranges
from replay.workload.onthefly import GeneratedTrace
from replay.workload.presets import get_preset

NODES, GPN, BATCH = 2, 2, 128


@pytest.fixture(scope="module")
def small() -> GeneratedTrace:
    return GeneratedTrace(get_preset("criteo-kaggle").with_overrides(batches=9, batch_size=BATCH))


def _uniform(source: Any, kind: str, nodes: int = NODES, gpn: int = GPN) -> Placement:
    tables = table_shapes(source.table_names, source.table_rows, 16)
    plan = uniform_plan(kind, tables, nodes=nodes, gpus_per_node=gpn)
    return resolve_plan(plan, tables, nodes=nodes, gpus_per_node=gpn)


def _explicit(source: Any, kind: str, nodes: int = NODES, gpn: int = GPN) -> Placement:
    """Uneven explicit row blocks (random cuts, empty ones, ranks shuffled) beside
    data-parallel small tables."""
    tables = table_shapes(source.table_names, source.table_rows, 16)
    rng = np.random.default_rng(57)
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
        edges = [0, *cuts, shape.rows]
        shards = tuple((edges[i], edges[i + 1]) for i in range(len(ranks)))
        entries.append(TableSharding(shape.name, kind, tuple(ranks), shards))
    return resolve_plan(ShardingPlan(tuple(entries)), tables, nodes=nodes, gpus_per_node=gpn)


def _parts(source: GeneratedTrace) -> list[BatchRange]:
    whole = iter_batch_ranges(source, with_updates=True, with_distinct=True)
    return list(split_ranges(whole, 2))  # 2 batches a part: 5 parts


def _routers(source: Any, placement: Placement) -> tuple[Router, Router]:
    offsets = table_offsets(np.asarray(source.table_rows, dtype=np.int64))
    return tuple(  # type: ignore[return-value]
        Router(placement, offsets, BATCH, ring=2, narrow=True) for _ in range(2)
    )


def _assert_same(got: tuple, expected: tuple, world: int) -> None:
    """The two routings' arrays: counts and bounds equal, each rank's keys equal (the
    one pass leaves gaps between ranks' regions), the update rows' arrays equal."""
    counts, keys, starts, bounds = got[:4]
    e_counts, e_keys, e_starts, e_bounds = expected[:4]
    np.testing.assert_array_equal(counts, e_counts)
    np.testing.assert_array_equal(bounds, e_bounds)
    assert keys.dtype == e_keys.dtype
    for r in range(world):
        mine = keys[starts[r] : starts[r] + bounds[r, -1]]
        np.testing.assert_array_equal(mine, e_keys[e_starts[r] : e_starts[r + 1]], err_msg=str(r))
    for name, a, b in zip(("ucounts", "ukeys", "ustarts", "ubounds"), got[4:], expected[4:],
                          strict=True):  # fmt: skip
        np.testing.assert_array_equal(a, b, err_msg=name)
        assert a.dtype == b.dtype, name


@pytest.mark.parametrize(
    "kind",
    ["row-wise", "table-wise", "table-row-wise", "data-parallel", "explicit", "explicit-twrw"],
)
@pytest.mark.parametrize("update_keys", [True, False])
@pytest.mark.parametrize("model", ["torchrec", "lower-bound"])
def test_one_pass_routes_as_two(
    small: GeneratedTrace, kind: str, update_keys: bool, model: str
) -> None:
    if kind.startswith("explicit"):
        placement = _explicit(small, TABLE_ROW_WISE if kind.endswith("twrw") else ROW_WISE)
    else:
        placement = _uniform(small, kind)
    spec = ClusterSpec(nodes=NODES, gpus_per_node=GPN, all_to_all_model=model)
    collectives = collective_model(spec, placement, BATCH, cluster_link(spec, GPN))
    parts = _parts(small)
    n = sum(p.batches for p in parts)
    two, one = _routers(small, placement)
    expected_traffic = collectives.buffers(n)
    expected = route_parts(two, parts, expected_traffic, update_keys)
    direct = DirectRouter(one)
    assert direct.on
    traffic = collectives.buffers(n)
    got = direct.route(parts, traffic, update_keys)
    assert got is not None  # an even share of the regions fits these plans
    _assert_same(got, expected, placement.world)
    for a, b in zip(traffic, expected_traffic, strict=True):
        np.testing.assert_array_equal(a, b)
    # the next group in the ring's other turn, the regions from this group's shares
    again = direct.route(parts, collectives.buffers(n), update_keys)
    assert again is not None and again[1] is not got[1]
    _assert_same(again, expected, placement.world)


def test_an_overrun_or_a_table_it_cannot_take_hands_the_group_back(
    small: GeneratedTrace,
) -> None:
    placement = _uniform(small, "row-wise")
    spec = ClusterSpec(nodes=NODES, gpus_per_node=GPN)
    collectives = collective_model(spec, placement, BATCH, cluster_link(spec, GPN))
    parts = _parts(small)
    n = sum(p.batches for p in parts)
    _, router = _routers(small, placement)
    direct = DirectRouter(router)
    direct.share = np.array([1.0, 0.0, 0.0, 0.0])  # ranks 1-3: regions of PAD keys
    turn = router.turn
    assert direct.route(parts, collectives.buffers(n), False) is None
    assert direct.on and router.turn == turn  # the two-pass routing takes the turn
    expected = route_parts(router, parts, collectives.buffers(n), False)
    direct.learn(expected[0])
    got = direct.route(parts, collectives.buffers(n), False)
    assert got is not None
    _assert_same(got, expected, placement.world)
    assert not DirectRouter(_routers(small, _uniform(small, "column-wise"))[0]).on
    assert not DirectRouter(_routers(small, _uniform(small, "grid"))[0]).on
    offsets = table_offsets(np.asarray(small.table_rows, dtype=np.int64))
    assert not DirectRouter(Router(placement, offsets, 2, ring=2)).on  # 4 GPUs, 2 samples
    # a sample with two lookups of a table: the pass stops and stays off
    spec2 = small.spec
    pooled = GeneratedTrace(
        dataclasses.replace(spec2, tables=tuple(dataclasses.replace(t, pooling=2)
                                                for t in spec2.tables))
    )  # fmt: skip
    placement = _uniform(pooled, "row-wise")
    collectives = collective_model(spec, placement, BATCH, cluster_link(spec, GPN))
    parts = _parts(pooled)
    direct = DirectRouter(_routers(pooled, placement)[0])
    assert direct.route(parts, collectives.buffers(9), False) is None
    assert not direct.on


def _system(*sets: str) -> SystemSpec:
    data, origin = load_system_data("hbm-lru")
    return build_system(apply_overrides(data, list(sets)), f"{origin} with --set")


class _Off(DirectRouter):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.on = False


@pytest.mark.parametrize("kind", ["row-wise", "explicit", "explicit-twrw"])
def test_a_replay_is_the_same_with_the_one_pass_and_without(
    small: GeneratedTrace, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if kind.startswith("explicit"):
        placement = _explicit(small, TABLE_ROW_WISE if kind.endswith("twrw") else ROW_WISE)
    else:
        placement = _uniform(small, kind)
    system = _system(f"cluster.nodes={NODES}", f"cluster.gpus_per_node={GPN}",
                     "policy.capacity_rows=3000")  # fmt: skip
    used = []
    route = DirectRouter.route

    def counted(self: DirectRouter, *args: Any) -> tuple | None:
        out = route(self, *args)
        used.append(out is not None)
        return out

    monkeypatch.setattr(DirectRouter, "route", counted)
    with_it = replay_cluster(small, system, placement)
    assert any(used)
    monkeypatch.setattr(cluster_module, "DirectRouter", _Off)
    without = replay_cluster(small, system, placement)
    for name, values in without.columns.items():
        np.testing.assert_array_equal(with_it.columns[name], values, err_msg=name)
    for name, values in without.batch_columns.items():
        np.testing.assert_array_equal(with_it.batch_columns[name], values, err_msg=name)
    assert with_it.ranks == without.ranks
    assert with_it.totals == without.totals
