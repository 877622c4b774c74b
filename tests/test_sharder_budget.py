"""The sharder for every budget (issue 53): a split's collectives priced, tables under
1,000 rows never split, each table's HBM footprint, bytes balanced beside the step time,
the bounds it states (time: `time_floor`; bytes: `bytes_bound` for the chosen shards and
`bytes_floor` for every plan), the time / bytes front, and plan.json's spread and
trade-off. The acceptance on criteo-terabyte (8 and 64 GPUs) runs here; the 400-table,
2-billion-row model and meta-2021's speed under `-m bench`."""

from __future__ import annotations

import itertools
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replay.engine.placement import spec_loads, split_byte_seconds, system_cost_model
from replay.engine.shard_cost import (
    STEP_SLACK,
    TINY_ROWS,
    CostModel,
    TableLoad,
    bytes_floor_at_step,
    even_shares,
    time_floor,
)
from replay.engine.sharder import auto_shard, rank_costs, rank_hbm
from replay.engine.sharder_even import bytes_floor, granularity, pareto
from replay.errors import ConfigError
from replay.plan.cluster_spread import spread, spread_markdown, tradeoff
from replay.system.sharding import (
    DATA_PARALLEL,
    ROW_WISE,
    TABLE_ROW_WISE,
    resolve_plan,
    row_blocks,
    table_shapes,
    uniform_plan,
)
from replay.system.spec import SystemSpec, apply_overrides, build_system, load_system_data
from replay.workload.generator import resolve_workload

sys.path.insert(0, str(Path(__file__).parent))
from _big_model import big_model_spec, tiny_tables

FAST = settings(
    max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
GIB = 1 << 30


def _system(*sets: str) -> SystemSpec:
    data, _ = load_system_data("hbm-lru")
    return build_system(apply_overrides(data, ["cluster.preset=dgx-h100", *sets]))


def _split_tables(result) -> list[str]:
    return [e.table for e in result.plan.tables if e.type in (ROW_WISE, TABLE_ROW_WISE)]


# -- goldens on tiny cases -----------------------------------------------------------------


def test_split_prices_are_torchrecs_collectives_per_gpu() -> None:
    """Row-wise: every GPU's [batch, dim] partial sums reduce-scattered and all-gathered,
    2 (W - 1) / W over the slowest link of the ring (a GPU's NIC share across nodes);
    table-row-wise: 2 (G - 1) / G over NVLink plus 2 (N - 1) / W across nodes."""
    system = _system("cluster.nodes=8")
    rw, twrw = split_byte_seconds(system, 8, 8)
    assert rw == pytest.approx(2 * 63 / 64 / 50e9, rel=1e-12)
    assert twrw == pytest.approx(2 * 7 / 8 / 450e9 + 2 * 7 / 64 / 50e9, rel=1e-12)
    assert split_byte_seconds(system, 1, 1) == (0.0, 0.0)
    load = TableLoad("t", 10_000, 16, 500.0, bags=100.0)
    model = CostModel(row_wise_byte=2.0, table_row_wise_byte=0.5)
    assert model.row_wise(load) == 2.0 * 100 * 16 * 4
    assert model.table_row_wise(load) == 0.5 * 100 * 16 * 4
    # rank_costs adds the split's collective to every GPU holding a block, empty or not
    shapes = table_shapes(["t"], [3], 16)
    tiny_rw = resolve_plan(uniform_plan(ROW_WISE, shapes, nodes=1, gpus_per_node=4), shapes,
                           nodes=1, gpus_per_node=4)  # fmt: skip
    costs = rank_costs(tiny_rw, [TableLoad("t", 3, 16, 30.0, bags=10.0)], model)
    assert np.allclose(costs, [10 + 1280, 10 + 1280, 10 + 1280, 1280])


def test_the_bytes_floor_the_step_permits() -> None:
    """Two GPUs, a table of 1,000 rows x 16 B (16 kB) with 500 lookups and one of 10 rows
    with 100. Splitting the big one row-wise costs each GPU 400 (its collective): 1,400
    in all with the small one, so at a step of 600 (2 x 600 < 1,400) it stays whole and
    the fullest GPU holds at least its 16 kB; at 800 the split fits (its piece: the
    hottest row's 0.5 + 400), and the floor is the bytes over two GPUs, 8,080 B; at 400
    only a replica of it fits (250 a GPU: 32 kB over both, 16,080 B a GPU with the small
    table); under the time floor no plan: inf."""
    model = CostModel(row_wise_byte=400.0 / (10 * 4 * 4))
    loads = [TableLoad("big", 1000, 4, 500.0, bags=10.0), TableLoad("small", 10, 4, 100.0)]
    assert model.row_wise(loads[0]) == pytest.approx(400.0)
    whole = bytes_floor_at_step(loads, model, 2, 2, 600.0, even=False)
    assert whole == pytest.approx(16_000, rel=1e-9)
    split = bytes_floor_at_step(loads, model, 2, 2, 800.0, even=False)
    assert split == pytest.approx(8_080, rel=1e-9)
    replica = bytes_floor_at_step(loads, model, 2, 2, 400.0, even=False)
    assert replica == pytest.approx(16_080, rel=1e-9)
    assert bytes_floor_at_step(loads, model, 2, 2, 200.0, even=False) == float("inf")


def test_a_table_under_1000_rows_is_never_split() -> None:
    """999 rows with every lookup: replicated or whole, never split, whatever its cost;
    1,000 rows: split like any table."""
    assert TINY_ROWS == 1000
    for rows, splits in ((999, False), (1000, True)):
        loads = [TableLoad("hot", rows, 8, 1e6, bags=64.0)] + [
            TableLoad(f"r{i}", 5000, 8, 10.0) for i in range(3)
        ]
        for exe in (False, True):
            r = auto_shard(
                loads, nodes=1, gpus_per_node=4, gpu_memory_bytes=GIB,
                model=CostModel(replica_byte=1.0), torchrec_executable=exe,
            )  # fmt: skip
            kind = r.plan.tables[0].type
            assert (kind in (ROW_WISE, TABLE_ROW_WISE)) == splits, (rows, exe, kind)


def test_whole_tables_on_few_gpus_and_a_replica_that_fills_the_gap() -> None:
    """Three 2-row tables of 100 lookups on 2 GPUs: whole tables leave one GPU 200; the
    bound is 150 (W x T must carry the totals) and replicating one table reaches it."""
    loads = [TableLoad(f"t{i}", 2, 8, 100.0, bags=100.0) for i in range(3)]
    model = CostModel()
    assert time_floor(loads, model, 2, 2, even=True) == pytest.approx(150.0)
    for exe in (False, True):
        r = auto_shard(loads, nodes=1, gpus_per_node=2, gpu_memory_bytes=GIB,
                       torchrec_executable=exe)  # fmt: skip
        assert r.rank_cost.max() == pytest.approx(150.0)
        assert r.floor == pytest.approx(150.0) and r.max_over_floor == pytest.approx(1.0)
        assert [e.type for e in r.plan.tables].count(DATA_PARALLEL) == 1


def test_an_uneven_split_over_fewer_gpus_pays_fewer_collectives() -> None:
    """`auto-uneven` may split a table over 2 of 4 GPUs, each paying the row-wise
    price: two 1,000-row tables of 3 lookups, 1.024 a GPU holding a block, each over
    its own pair: 1.5 + 1.024 = 2.524 a GPU, under the 3.0 of a whole table; the time
    floor counts splits over k = 2 .. W GPUs, so it stays a bound (it was 3.0)."""
    loads = [TableLoad(f"t{i}", 1000, 4, 3.0, bags=64.0) for i in range(2)]
    model = CostModel(replica_byte=1e-3, row_wise_byte=1e-3, table_row_wise_byte=5e-4)
    r = auto_shard(loads, nodes=1, gpus_per_node=4, gpu_memory_bytes=GIB, model=model)
    assert [len(e.ranks) for e in r.plan.tables] == [2, 2]
    assert r.rank_cost.max() == pytest.approx(2.524)
    assert time_floor(loads, model, 4, 4, even=False) == pytest.approx(2.524)
    assert time_floor(loads, model, 4, 4, even=True) == pytest.approx(3.0)


def test_bytes_bounds_and_the_hbm_footprint() -> None:
    """bytes_floor = max(HBM / W, the largest unsplittable piece); a table whose kernel
    keeps a tenth of it in HBM (`hbm_bytes`) fits where the whole table would not, and
    rank_hbm counts the footprint prorated to each block's rows."""
    loads = [TableLoad("a", 500, 8, 10.0), TableLoad("b", 4000, 8, 10.0)]  # 16 KB, 128 KB
    assert bytes_floor(loads, [0, 1], 4) == pytest.approx(max(144_000 / 4, 16_000))
    assert bytes_floor([TableLoad("x", 999, 8, 1.0)], [0], 64) == 999 * 32  # never split
    big = TableLoad("big", 10_000, 8, 10.0)  # 320 KB
    with pytest.raises(ConfigError):
        auto_shard([big], nodes=1, gpus_per_node=2, gpu_memory_bytes=100_000)
    cached = TableLoad("big", 10_000, 8, 10.0, hbm_bytes=32_000)
    r = auto_shard([cached], nodes=1, gpus_per_node=2, gpu_memory_bytes=100_000)
    held = rank_hbm(r.placement, [cached])
    assert held.sum() == 32_000 and (held <= 100_000).all() and r.bytes_floor == 16_000
    assert r.placement.rank_bytes().sum() == 320_000  # the rows' bytes (checkpoints)


def test_bytes_balanced_beside_the_time() -> None:
    """Eight equal-cost tables on 4 GPUs, four of them 10x the bytes: any two per GPU
    balance the time; the sharder puts one large and one small on each GPU."""
    loads = [TableLoad(f"L{i}", 10_000, 8, 100.0) for i in range(4)] + [
        TableLoad(f"s{i}", 1_000, 8, 100.0) for i in range(4)
    ]
    r = auto_shard(loads, nodes=1, gpus_per_node=4, gpu_memory_bytes=GIB,
                   torchrec_executable=True)  # fmt: skip
    assert r.max_over_mean == pytest.approx(1.0)
    assert r.rank_hbm.max() == 320_000 + 32_000 and r.bytes_over_floor == pytest.approx(1.0)


def test_the_bytes_pass_trades_up_to_a_tenth_of_the_step_for_bytes() -> None:
    """Two nodes of 2 GPUs: an 80,000-row table (2.56 MB, 400 lookups) and 24 small ones
    of 100 lookups. Whole, the big table and three small ones balance the step at the
    floor (700) with 2.81 MB on its GPU; table-row-wise over a node (64 a GPU for the
    reduce-scatter) the step is 764, 9.1% over the floor, and the fullest GPU holds 1.68
    MB: the bytes pass takes it (within 10% of the floor, over 10% fewer bytes), and the
    front keeps both ends. At 96 a GPU the split costs 13.7%: the whole table stays."""
    loads = [TableLoad("big", 80_000, 8, 400.0, bags=100.0)] + [
        TableLoad(f"s{i:02d}", 1000 + 100 * i, 8, 100.0, bags=100.0) for i in range(24)
    ]
    for tw, kind, top, held in ((0.02, TABLE_ROW_WISE, 764.0, 1_680_000),
                                (0.03, "table-wise", 700.0, 2_809_600)):  # fmt: skip
        model = CostModel(table_row_wise_byte=tw, row_wise_byte=4 * tw)
        r = auto_shard(loads, nodes=2, gpus_per_node=2, gpu_memory_bytes=GIB, model=model,
                       torchrec_executable=True)  # fmt: skip
        assert r.plan.tables[0].type == kind
        assert r.floor == pytest.approx(700.0) and r.rank_cost.max() == pytest.approx(top)
        assert r.max_over_floor <= 1 + STEP_SLACK and r.rank_hbm.max() == held
        assert r.front[0][:2] == (700.0, 2_809_600)
    assert r.front[1][0] == pytest.approx(796.0)  # the split, 13.7% over the floor


def test_the_unit_whole_tables_cost() -> None:
    """`granularity`: the largest q every cost is a whole multiple of (a generated
    workload's lookups, batch x pooling), 0 when a cost is not a whole number."""
    assert granularity([8192.0, 16384.0, 65536.0]) == 8192.0
    assert granularity([24576.0, 40960.0]) == 8192.0
    assert granularity([8192.5, 8192.0]) == 0.0
    assert granularity([0.0]) == 0.0 and granularity([]) == 0.0


def test_pareto_front() -> None:
    pts = [(1.0, 50, 0), (1.0, 40, 1), (1.05, 45, 2), (1.1, 30, 3), (1.2, 30, 4)]
    assert pareto(pts) == [(1.0, 40, 1), (1.1, 30, 3)]


def test_spread_and_tradeoff_goldens() -> None:
    per_gpu = [
        {"shard_bytes": 100, "bytes_for_hit": {"0.9": 10.0, "0.95": 20.0}},
        {"shard_bytes": 300, "bytes_for_hit": {"0.9": 30.0, "0.95": None}},
        {"shard_bytes": 200, "bytes_for_hit": {"0.9": 20.0, "0.95": 40.0}},
        {"shard_bytes": 200, "bytes_for_hit": {"0.9": 20.0, "0.95": 40.0}},
    ]
    ckpt = {"sharded_per_rank": [100, 300, 200, 200], "replicated": 8}
    basis = {"hbm_bytes_floor": 200.0, "hbm_bytes_bound": 300.0, "modeled_max_over_floor": 1.0}
    sp = spread(per_gpu, ckpt, basis, [0.9, 0.95], 2)
    assert sp["per_gpu"]["shard_bytes"] == {"min": 100, "max": 300, "mean": 200,
                                            "max_over_mean": 1.5}  # fmt: skip
    assert sp["per_gpu"]["cache_bytes_for_hit"]["max"] == 40.0
    assert sp["cache_gpus_out_of_reach"] == 1 and sp["cache_target"] == 0.95
    assert (
        sp["per_gpu"]["checkpoint_bytes"]["max"] == 300
        and sp["per_gpu"]["checkpoint_bytes"]["min"] == 108
    )
    assert (
        sp["per_node"]["shard_bytes"]["min"] == 400 and sp["per_node"]["shard_bytes"]["max"] == 400
    )
    comparison = [
        {"sharding": "row-wise", "recommended": False, "fits": True,
         "hit_at_budget": [0.95, 0.96], "modeled_step_s": 3e-5, "shard_bytes_max": 100.0},
        {"sharding": "auto", "recommended": True, "fits": True,
         "hit_at_budget": [0.77, None], "modeled_step_s": 1e-5, "shard_bytes_max": 400.0},
        {"sharding": "table-wise", "recommended": False, "fits": False, "why": "no"},
    ]  # fmt: skip
    rows = tradeoff(comparison)
    rw = rows[0]
    assert rw["worst_hit_minus_recommended"] == pytest.approx(0.18)
    assert rw["step_over_recommended"] == pytest.approx(3.0)
    assert rw["shard_bytes_over_recommended"] == pytest.approx(0.25)
    text = "\n".join(spread_markdown({"spread": sp, "tradeoff": rows}))
    assert "row-wise: worst GPU hit 95% (+18.0 points)" in text
    assert "30 µs (3× the recommended)" in text and "| shard bytes per GPU |" in text


# -- the property ---------------------------------------------------------------------------


@given(
    st.lists(
        st.tuples(
            st.sampled_from([1, 2, 7, 300, 999, 1000, 1001, 4000, 20_000]),
            # whole multiples of a batch's lookups too (the bytes pass's granular search)
            st.one_of(st.floats(0, 1e4), st.integers(1, 8).map(lambda p: 64.0 * p)),
            st.sampled_from([4, 8]),
        ),
        min_size=1,
        max_size=10,
    ),
    st.integers(1, 3),
    st.integers(1, 4),
    st.booleans(),
    st.sampled_from([0.0, 1e-3]),
)
@FAST
def test_every_table_placed_none_tiny_split_within_memory(
    specs: list, nodes: int, gpus: int, exe: bool, price: float
) -> None:
    loads = [TableLoad(f"t{i}", r, d, c, bags=64.0) for i, (r, c, d) in enumerate(specs)]
    world = nodes * gpus
    memory = max(ld.bytes for ld in loads) + sum(ld.bytes for ld in loads) // world + 64
    model = CostModel(replica_byte=price, row_wise_byte=price, table_row_wise_byte=price / 2)
    try:
        r = auto_shard(loads, nodes=nodes, gpus_per_node=gpus, gpu_memory_bytes=memory,
                       model=model, torchrec_executable=exe)  # fmt: skip
    except ConfigError as exc:  # feasible in bytes, but no packing of the whole pieces
        assert "no placement fits" in str(exc)
        return
    assert [e.table for e in r.plan.tables] == [ld.name for ld in loads]
    assert not [t for t in _split_tables(r) if next(ld for ld in loads if ld.name == t).tiny]
    assert (r.placement.rank_bytes() <= memory).all() and (r.rank_hbm <= memory).all()
    covered = np.zeros(len(loads), dtype=np.int64)
    for s in r.placement.shards:
        if r.plan.tables[s.table].type != DATA_PARALLEL:
            covered[s.table] += s.rows
        else:
            covered[s.table] = loads[s.table].rows
    assert covered.tolist() == [ld.rows for ld in loads]
    top = r.rank_cost.max()
    assert r.floor <= r.lower_bound * (1 + 1e-9) and r.lower_bound <= top * (1 + 1e-9)
    assert time_floor(loads, model, world, gpus, even=exe) <= top * (1 + 1e-9)
    assert r.bytes_floor <= r.rank_hbm.max() + 1e-9 and r.bytes_bound <= r.rank_hbm.max() + 1e-9
    assert np.allclose(rank_costs(r.placement, loads, model), r.rank_cost)
    if exe:
        assert r.placement.plan.torchrec_executable


def _ways_per_gpu(ld: TableLoad, model: CostModel, nodes: int, gpus: int) -> list[tuple]:
    """Every way to place one table on `nodes` x `gpus` GPUs, as (cost, HBM bytes) per
    GPU, priced as `rank_costs` and `rank_hbm` price a plan: whole on each GPU,
    replicated, and (not tiny) row-wise over all and table-row-wise on each node."""
    world = nodes * gpus
    access = model.access(ld)
    out = []
    for r in range(world):
        cost, held = np.zeros(world), np.zeros(world)
        cost[r], held[r] = access, ld.hbm
        out.append((cost, held))
    out.append((np.full(world, access / world + model.allreduce(ld, world)),
                np.full(world, float(ld.hbm))))  # fmt: skip
    if ld.tiny or world == 1:
        return out
    blocks = [ld.hbm_of(a, b) for a, b in row_blocks(ld.rows, world)]
    out.append((np.array([access * f + model.row_wise(ld) for f in even_shares(ld, world)]),
                np.array(blocks, dtype=float)))  # fmt: skip
    if nodes > 1:
        local = [access * f + model.table_row_wise(ld) for f in even_shares(ld, gpus)]
        local_bytes = [ld.hbm_of(a, b) for a, b in row_blocks(ld.rows, gpus)]
        for n in range(nodes):
            cost, held = np.zeros(world), np.zeros(world)
            cost[n * gpus : (n + 1) * gpus] = local
            held[n * gpus : (n + 1) * gpus] = local_bytes
            out.append((cost, held))
    return out


@given(
    st.lists(
        st.tuples(
            st.sampled_from([2, 999, 1000, 3000, 20_000]),
            st.floats(1, 1e4),
            st.sampled_from([4, 8]),
        ),
        min_size=1,
        max_size=3,
    ),
    st.sampled_from([0.0, 1e-3, 1e-2]),
    st.floats(1.0, 1.6),
)
@FAST
def test_the_bounds_hold_against_every_plan_of_tiny_models(
    specs: list, price: float, slack: float
) -> None:
    """Brute force over every plan of up to 3 tables on 2 nodes of 2 GPUs (whole on any
    GPU, replicated, row-wise, table-row-wise on either node): no plan's busiest GPU
    beats `time_floor`, and no plan whose busiest GPU is within the step holds fewer
    bytes on its fullest GPU than `bytes_floor_at_step` (the bounds docs/cluster.md
    states)."""
    loads = [TableLoad(f"t{i}", r, d, c, bags=64.0) for i, (r, c, d) in enumerate(specs)]
    model = CostModel(replica_byte=price, row_wise_byte=price, table_row_wise_byte=price / 2)
    per_table = [_ways_per_gpu(ld, model, 2, 2) for ld in loads]
    tops, fullest = [], []
    for plan in itertools.product(*per_table):
        tops.append(float(sum(c for c, _ in plan).max()))
        fullest.append(float(sum(b for _, b in plan).max()))
    top, full = np.array(tops), np.array(fullest)
    floor = time_floor(loads, model, 4, 2, even=True)
    assert floor <= top.min() * (1 + 1e-9)
    step = slack * top.min()
    at_step = bytes_floor_at_step(loads, model, 4, 2, step, even=True)
    assert at_step <= full[top <= step * (1 + 1e-12)].min() * (1 + 1e-9)


# -- the acceptance ---------------------------------------------------------------------------


def _acceptance(spec, nodes: int, memory: float) -> tuple:
    system = _system(f"cluster.nodes={nodes}", f"cluster.gpu_memory_bytes={memory}")
    loads = spec_loads(spec, system)
    model, _ = system_cost_model(system, nodes, 8, loads[0].dim, loads)
    r = auto_shard(loads, nodes=nodes, gpus_per_node=8, gpu_memory_bytes=int(memory),
                   model=model, torchrec_executable=True)  # fmt: skip
    tiny = {ld.name for ld in loads if ld.tiny}
    assert not tiny & set(_split_tables(r))
    assert r.placement.plan.torchrec_executable
    return r, loads


@pytest.mark.parametrize(
    ("nodes", "hbm_max_gib", "front"),
    [(1, 19.78, [(1.001, 19.8), (2.535, 12.6)]), (8, 2.38, [(1.0, 2.4)])],
)
def test_criteo_terabyte_acceptance(nodes: int, hbm_max_gib: float, front: list) -> None:
    """criteo-terabyte, hbm-lru on DGX H100 nodes, 40 GB a GPU, TorchRec-executable:
    the busiest GPU's modeled step within 10% of the floor (no plan of the sharder's
    types does better) and the fullest GPU within 10% of the bound for its shards. At 8
    GPUs 24 tables whole and 2 of 3-4 rows replicated (max / mean 1.000); the bytes
    floor, 11.19 GiB, costs 2.5x the step (the front's second plan: every 40 M-row table
    split row-wise, each GPU paying its reduce-scatter). At 64 GPUs the five 25-40 M-row
    tables table-row-wise in a node (2.38 GiB a GPU, 19.06 GiB whole) at no cost in time:
    the floor is their hot row's block, 1.82x the mean."""
    spec = resolve_workload("criteo-terabyte").with_overrides(batches=30)
    r, loads = _acceptance(spec, nodes, 40e9)
    assert r.max_over_floor <= 1.10 and r.bytes_over_bound <= 1.10
    # the bytes floor the step permits: no plan whose busiest GPU is within 10% of the
    # time floor holds less on its fullest GPU (8 GPUs: the largest 40 M-row table whole,
    # 19.06 GiB; the sharder's 19.78 is 1.038x it; 64 GPUs: met exactly)
    model, _ = system_cost_model(_system(f"cluster.nodes={nodes}"), nodes, 8, 128, loads)
    at_step = bytes_floor_at_step(loads, model, nodes * 8, 8, 1.1 * r.floor, even=True)
    assert r.bytes_floor <= at_step <= r.rank_hbm.max() <= 1.10 * at_step
    assert r.rank_hbm.max() / GIB == pytest.approx(hbm_max_gib, abs=0.01)
    got = [(round(a / r.floor, 3), round(b / GIB, 1)) for a, b, _ in r.front]
    assert got == front


@pytest.mark.bench
def test_400_tables_2_billion_rows_on_64_gpus() -> None:
    """The 400-table model (tests/_big_model.py: 2 to 86 M rows, 954 GiB of fp32 and
    512 B a row) on 64 H100s of 80 GB: the bytes pass splits the 20 largest tables
    table-row-wise (their nodes drawn where the whole tables' batch-sized costs fit the
    step cap) and replicates 11 of 2-3 rows; the busiest GPU within 10% of its floor
    (1.100), the fullest GPU within 10% of the bytes floor the step permits (17.09 GiB
    against 15.59: 1.096x) and within 1% of its shards' bound (the 21st largest table,
    whole), none of the 142 tables under 1,000 rows split; the front from the step's
    best (1.031, 34.7 GiB) to the pass's.
    Seconds: the spec's pmfs 12-20 s, the sharder 5-15 s on the 2-core VM (loaded)."""
    spec = big_model_spec()
    assert sum(t.rows for t in spec.tables) == 2_000_000_000 and len(spec.tables) == 400
    assert len(tiny_tables(spec)) == 142
    r, loads = _acceptance(spec, 8, 80e9)
    assert r.max_over_floor <= 1 + STEP_SLACK and r.bytes_over_bound <= 1.01
    assert r.rank_hbm.max() / GIB == pytest.approx(17.09, abs=0.01)
    assert len(_split_tables(r)) == 20
    assert [e.type for e in r.plan.tables].count(DATA_PARALLEL) == 11
    steps = [(round(a / r.floor, 3), round(b / GIB, 1)) for a, b, _ in r.front]
    assert steps[0] == (1.031, 34.7) and steps[-1] == (1.1, 17.1)
    model, _ = system_cost_model(_system("cluster.nodes=8"), 8, 8, 128, loads)
    at_step = bytes_floor_at_step(loads, model, 64, 8, 1.1 * r.floor, even=True)
    assert at_step / GIB == pytest.approx(15.59, abs=0.01)
    assert r.rank_hbm.max() / at_step == pytest.approx(1.096, abs=0.001)
    assert r.rank_hbm.max() <= (1 + STEP_SLACK) * at_step


@pytest.mark.bench
def test_meta_2021_on_128_gpus_is_fast() -> None:
    """856 tables x 128 GPUs: the sharder in seconds (the plan of it takes minutes)."""
    system = _system("cluster.nodes=16")
    loads = spec_loads(resolve_workload("meta-2021"), system)
    model, _ = system_cost_model(system, 16, 8, loads[0].dim, loads)
    start = time.perf_counter()
    r = auto_shard(loads, nodes=16, gpus_per_node=8,
                   gpu_memory_bytes=int(system.cluster.gpu_memory_bytes), model=model,
                   torchrec_executable=True)  # fmt: skip
    assert time.perf_counter() - start < 30
    assert r.max_over_floor <= 1.10 and not {ld.name for ld in loads if ld.tiny} & set(
        _split_tables(r)
    )
