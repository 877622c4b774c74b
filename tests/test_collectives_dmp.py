"""TorchRec's collectives as `replay.engine.collectives` models them, held against the real
`DistributedModelParallel`: a CPU run over gloo of 2 processes (one node of 2) and of 4
(2 nodes of 2), every sharding type in one `EmbeddingBagCollection` (table-wise,
row-wise, column-wise, table-row-wise on each node, data-parallel, table-column-wise,
grid: two column blocks of 128, `grid_shard`'s, a node each or both on the one node;
pooling 1 and 2), two batches. For every rank, batch and phase (input distribution,
forward embeddings, backward gradients) the bytes each collective call sends and
receives, intra- and inter-node, equal the model's (grid's ids included), framing
included (the splits all-to-all, 24 B a peer a sharding group, is modelled; nothing else
is sent); the data-parallel all-reduce's payload is `allreduce_model`'s. One DMP run per
world size (`tests/_dmp_harness.py`): ~10 s and ~20 s on the 2-core VM. Under `-m
bench`: each sharding type alone (every table the same type, `uniform_plan`) on 2 and 2
x 2 processes, the same equality, and the bytes per batch of the lower bound, the model
and DMP printed side by side."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _dmp_harness import DmpResult, DmpTable, run_dmp

from replay.engine.cluster import allreduce_model, cluster_link, replay_cluster
from replay.engine.cluster_route import Router
from replay.engine.collectives import (
    ALL_GATHER,
    ALL_TO_ALL,
    REDUCE_SCATTER,
    CollectiveModel,
)
from replay.system.sharding import (
    COLUMN_WISE,
    DATA_PARALLEL,
    GRID,
    ROW_WISE,
    TABLE_COLUMN_WISE,
    TABLE_ROW_WISE,
    TABLE_WISE,
    ShardingPlan,
    TableShape,
    TableSharding,
    resolve_plan,
)
from replay.system.spec import ClusterSpec, apply_overrides, build_system, load_system_data
from replay.trace.keys import table_offsets
from replay.trace.stream import BatchRange

BATCH = 8
BATCHES = 2
# name, rows, dim, pooling
TABLES = [("tw", 10, 4, 1), ("rw", 13, 8, 2), ("cw", 7, 8, 1), ("tr0", 11, 4, 1),
          ("tr1", 9, 8, 2), ("dp", 5, 4, 1), ("tc", 6, 8, 2), ("gd", 12, 256, 2)]  # fmt: skip
OPS = {
    "all_to_all_single": ALL_TO_ALL,
    "reduce_scatter_tensor": REDUCE_SCATTER,
    "all_gather_into_tensor": ALL_GATHER,
}


def _batches() -> list[list[np.ndarray]]:
    rng = np.random.default_rng(52)
    return [
        [rng.integers(0, rows, size=(BATCH, pooling)) for _, rows, _, pooling in TABLES]
        for _ in range(BATCHES)
    ]


def _ours(world: int, gpn: int) -> ShardingPlan:
    """Our plan of the same sharding: table-wise on rank 1, column-wise on ranks 0 and
    the last, table-row-wise tr0 on node 0 and tr1 on the last node, table-column-wise
    on the last node's GPUs, grid's column blocks on every node in order (both on the
    one node of a world of one node)."""
    nodes = world // gpn
    every = tuple(range(world))
    entries = {
        "tw": (TABLE_WISE, (1,)),
        "rw": (ROW_WISE, every),
        "cw": (COLUMN_WISE, (0, world - 1)),
        "tr0": (TABLE_ROW_WISE, tuple(range(gpn))),
        "tr1": (TABLE_ROW_WISE, tuple(range((nodes - 1) * gpn, world))),
        "dp": (DATA_PARALLEL, every),
        "tc": (TABLE_COLUMN_WISE, tuple(range((nodes - 1) * gpn, world))),
        "gd": (GRID, every if nodes > 1 else every + every),
    }
    return ShardingPlan(tuple(TableSharding(n, *entries[n]) for n, *_ in TABLES))


def _theirs(world: int, gpn: int) -> list[DmpTable]:
    nodes = world // gpn
    kinds = {
        "tw": ("table_wise", (1,), 0),
        "rw": ("row_wise", (), 0),
        "cw": ("column_wise", (0, world - 1), 0),
        "tr0": ("table_row_wise", (), 0),
        "tr1": ("table_row_wise", (), nodes - 1),
        "dp": ("data_parallel", (), 0),
        "tc": ("table_column_wise", tuple(range((nodes - 1) * gpn, world)), 0),
        "gd": ("grid", tuple(range(nodes)) if nodes > 1 else (0, 0), 0),
    }
    return [
        DmpTable(name, rows, dim, kinds[name][0], ranks=kinds[name][1], host=kinds[name][2])
        for name, rows, dim, _ in TABLES
    ]


class _Batches:
    """The batches as a trace: per batch, table by table, samples in order."""

    def __init__(self, batches: list[list[np.ndarray]]) -> None:
        self.batches = batches
        self.table_names = [n for n, *_ in TABLES]
        self.table_rows = np.array([r for _, r, _, _ in TABLES], dtype=np.int64)
        self.num_batches = len(batches)
        self.workload = {"name": "dmp", "batch_size": BATCH, "embedding_dim": 8}
        self.manifest: dict[str, Any] = {"batch_size": BATCH}
        self.path = Path("dmp")

    def keys(self) -> tuple[np.ndarray, np.ndarray]:
        offsets = table_offsets(self.table_rows)
        keys = [np.concatenate([offsets[t] + ids.reshape(-1) for t, ids in enumerate(b)])
                for b in self.batches]  # fmt: skip
        bounds = np.concatenate([[0], np.cumsum([len(k) for k in keys])])
        return np.concatenate(keys).astype(np.int64), bounds.astype(np.int64)

    def generated_ranges(self, start: int, stop: int, **_: Any) -> Any:
        keys, bounds = self.keys()
        empty = np.empty(0, dtype=np.int64)
        yield BatchRange(0, self.num_batches, keys, bounds, empty,
                         np.zeros(self.num_batches + 1, np.int64))  # fmt: skip


@pytest.fixture(scope="module", params=[(2, 2), (4, 2)], ids=["2 ranks", "2 x 2 ranks"])
def dmp(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple:
    world, gpn = request.param
    batches = _batches()
    folder = tmp_path_factory.mktemp(f"dmp{world}")
    result = run_dmp(_theirs(world, gpn), batches, world=world, gpus_per_node=gpn,
                     folder=folder)  # fmt: skip
    return world, gpn, batches, result


def _placement(world: int, gpn: int) -> Any:
    tables = tuple(TableShape(n, r, d) for n, r, d, _ in TABLES)
    return resolve_plan(_ours(world, gpn), tables, nodes=world // gpn, gpus_per_node=gpn)


def _model(
    world: int, gpn: int, batches: list, placement: Any = None, kind: str = "torchrec"
) -> tuple[CollectiveModel, np.ndarray, np.ndarray]:
    """The model of the batches on `placement` (default: every type at once): the model,
    and the routing kernels' counts (lower bound, ids) per batch."""
    placement = placement or _placement(world, gpn)
    cluster = ClusterSpec(nodes=world // gpn, gpus_per_node=gpn)
    model = CollectiveModel(placement, BATCH, cluster_link(cluster, gpn), model=kind)
    source = _Batches(batches)
    router = Router(placement, table_offsets(source.table_rows), BATCH)
    traffic = model.buffers(BATCHES)
    router.count(next(source.generated_ranges(0, BATCHES)), traffic)
    return model, traffic[0], traffic[1]


def _measured(result: DmpResult, rank: int, batch: int, gpn: int) -> Counter:
    """(phase, what, op, sent intra, sent inter, received intra, received inter) of each
    embedding collective the rank called in the batch (the DDP all-reduce apart)."""
    out: Counter = Counter()
    node = rank // gpn
    for c in result.calls(rank, batch=batch):
        if c["op"] not in OPS:
            continue
        ranks = c["ranks"]
        n = len(ranks)
        me = ranks.index(rank)
        traffic = [0, 0, 0, 0]
        if c["op"] == "all_to_all_single":
            for peer, sent, got in zip(ranks, c["sent_to"], c["received_from"], strict=True):
                if peer != rank:
                    inter = peer // gpn != node
                    traffic[inter] += sent
                    traffic[2 + inter] += got
        else:  # a ring in group order, even chunks (`replay.engine.collectives._ring`)
            full = c["input_bytes"] if c["op"] == "reduce_scatter_tensor" else c["output_bytes"]
            moved = full - full // n
            succ, pred = ranks[(me + 1) % n], ranks[(me - 1) % n]
            traffic[succ // gpn != node] += moved
            traffic[2 + (pred // gpn != node)] += moved
        what = c.get("what") or ("embeddings" if c["phase"] == "forward" else "gradients")
        out[(c["phase"], what, OPS[c["op"]], *traffic)] += 1
    return out


def _modelled(model: CollectiveModel, ids: np.ndarray, rank: int) -> Counter:
    out: Counter = Counter()
    for c in model.batch_calls(ids):
        out[(c.phase, c.what, c.op, *(int(v) for v in c.traffic[rank]))] += 1
    return out


def test_every_collective_equals_dmps(dmp: tuple) -> None:
    world, gpn, batches, result = dmp
    model, _, ids = _model(world, gpn, batches)
    for b in range(BATCHES):
        for r in range(world):
            assert _modelled(model, ids[b], r) == _measured(result, r, b, gpn), (b, r)
    # each phase's bytes, summed over the ranks, as the results report them
    columns = model.columns(*model.buffers(BATCHES)[:1], ids)
    for b in range(BATCHES):
        sent = {p: 0 for p in ("input", "forward", "backward")}
        for r in range(world):
            for key, count in _measured(result, r, b, gpn).items():
                sent[key[0]] += count * (key[3] + key[4])
        for phase, total in sent.items():
            assert columns[f"all_to_all_{phase}_bytes"][b] == total


def test_the_data_parallel_all_reduce_equals_ddps(dmp: tuple) -> None:
    """DDP all-reduces the dense layer's and the replicated table's gradients: S bytes a
    step, of which a ring moves 2 (W - 1) / W per rank (`allreduce_model`)."""
    world, gpn, _, result = dmp
    dense = sum(d for _, _, d, _ in TABLES) + 1  # Linear(sum of dims, 1)
    per_rank, _, _, _ = allreduce_model(_placement(world, gpn), dense, (1.0, 0.0, 1.0, 0.0))
    for r in range(world):
        for b in range(BATCHES):
            payload = sum(c["input_bytes"] for c in result.calls(r, batch=b)
                          if c["op"] == "all_reduce")  # fmt: skip
            assert per_rank == pytest.approx(2 * (world - 1) / world * payload)


def test_the_replay_reports_the_same_bytes(dmp: tuple) -> None:
    """`replay_cluster` (the default, TorchRec's model) gives each batch the bytes DMP
    moved, and each rank what it sent and received."""
    world, gpn, batches, result = dmp
    data, origin = load_system_data("hbm-lru")
    system = build_system(apply_overrides(data, [
        f"cluster.nodes={world // gpn}", f"cluster.gpus_per_node={gpn}",
        "policy.capacity_rows=8"]), origin)  # fmt: skip
    c = replay_cluster(_Batches(batches), system, _placement(world, gpn)).columns
    for b in range(BATCHES):
        sent = np.zeros(world)
        received = np.zeros(world)
        for r in range(world):
            for key, count in _measured(result, r, b, gpn).items():
                sent[r] += count * (key[3] + key[4])
                received[r] += count * (key[5] + key[6])
        assert c["all_to_all_bytes"][b] == sent.sum()
        np.testing.assert_array_equal(c["rank_all_to_all_sent_bytes"][b], sent)
        np.testing.assert_array_equal(c["rank_all_to_all_received_bytes"][b], received)


# -- each sharding type alone (bench) --------------------------------------------------

_TORCHREC_NAMES = {
    TABLE_WISE: "table_wise",
    ROW_WISE: "row_wise",
    COLUMN_WISE: "column_wise",
    TABLE_ROW_WISE: "table_row_wise",
    DATA_PARALLEL: "data_parallel",
    TABLE_COLUMN_WISE: "table_column_wise",
    GRID: "grid",
}


def _dmp_tables(placement: Any) -> list[DmpTable]:
    """TorchRec's generators for a uniform plan of ours (even blocks, every rank in
    order; a node's GPUs for table-row-wise)."""
    out = []
    for t, shape in enumerate(placement.tables):
        e = placement.entry(t)
        host = placement.node_of(e.ranks[0])
        ranks = tuple(e.ranks)
        if e.type == GRID:  # TorchRec's grid_shard names each column block's node
            blocks = sorted({(s.col_start, s.rank // placement.gpus_per_node)
                             for s in placement.shards if s.table == t})  # fmt: skip
            ranks = tuple(node for _, node in blocks)
        out.append(DmpTable(shape.name, shape.rows, shape.dim, _TORCHREC_NAMES[e.type],
                            ranks=ranks, host=host))  # fmt: skip
    return out


@pytest.mark.bench
@pytest.mark.parametrize("world, gpn", [(2, 2), (4, 2)], ids=["2 ranks", "2 x 2 ranks"])
@pytest.mark.parametrize("kind", sorted(_TORCHREC_NAMES))
def test_each_sharding_type_alone(kind: str, world: int, gpn: int, tmp_path: Path) -> None:
    from replay.system.sharding import uniform_plan

    # dims x 4: column blocks of a multiple of 4 columns, as TorchRec's kernels need
    # (`column_wise(ranks)` makes a table whose blocks would not be one block instead);
    # grid: 128 columns a node, `grid_shard`'s block (planner/constants.py MIN_CW_DIM)
    dims = [128 * (world // gpn) if kind == GRID else 4 * d for _, _, d, _ in TABLES]
    tables = tuple(TableShape(n, r, d) for (n, r, _, _), d in zip(TABLES, dims, strict=True))
    placement = resolve_plan(
        uniform_plan(kind, tables, nodes=world // gpn, gpus_per_node=gpn), tables,
        nodes=world // gpn, gpus_per_node=gpn,
    )  # fmt: skip
    batches = _batches()
    result = run_dmp(_dmp_tables(placement), batches, world=world, gpus_per_node=gpn,
                     folder=tmp_path)  # fmt: skip
    model, lower, ids = _model(world, gpn, batches, placement)
    bound, _, _ = _model(world, gpn, batches, placement, kind="lower-bound")
    ours = model.columns(lower, ids)["all_to_all_bytes"]
    low = bound.columns(lower, ids)["all_to_all_bytes"]
    for b in range(BATCHES):
        measured = 0
        for r in range(world):
            got = _measured(result, r, b, gpn)
            assert _modelled(model, ids[b], r) == got, (b, r)
            measured += sum(count * (key[3] + key[4]) for key, count in got.items())
        assert ours[b] == measured >= low[b]
        where = f"{kind} on {world} ({world // gpn} x {gpn}), batch {b}"
        print(f"{where}: lower bound {low[b]:.0f} B, TorchRec's collectives {ours[b]:.0f} B, "
              f"DMP {measured} B")  # fmt: skip
