"""torchrec.json per shard of a cluster plan (`replay.plan.torchrec_shards`).

On a 2 x 2 cluster of the `tiny` workload at R = 1, every sharding type: each shard's
histogram read at its edge sizes equals a slow OrderedDict LRU fed each batch's unique
ids of that shard's own keys, routed lookup by lookup (row blocks by
`owner_ranks_reference`, every column block, data-parallel by the same (batch, position)
hash as `rank_curves`), with the cold misses in the last bin; heights are the shards'
rows; lookups and unique ids per batch add up to the table's (row blocks), equal it
(column blocks, table-wise), or split it (data-parallel replicas); the per-GPU split stays
within the GPU's budget, and each shard's bins put an edge on its cache; two runs agree.
Through `replay plan`: a cluster plan's torchrec.json holds the shards and its tables are
the one-GPU plan's; a one-GPU plan's torchrec.json is its `torchrec` part with the setup
fields beside it. TorchRec's planner on these files: tests/test_torchrec_planner.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from replay.plan.plan import PlanRequest, make_plan
from replay.plan.rank_curves import DP_SALT
from replay.plan.torchrec import choose_bins, edge_sizes, torchrec_stats
from replay.plan.torchrec_shards import SHARDS_KEY, shard_stats, torchrec_document
from replay.plan.torchrec_unique import reference_unique_lru_misses
from replay.plan.write import plan_json, write_plan
from replay.system.sharding import (
    COLUMN_WISE,
    DATA_PARALLEL,
    GRID,
    SHARDING_TYPES,
    owner_ranks_reference,
    resolve_plan,
    table_shapes,
    uniform_plan,
)
from replay.trace.keys import table_offsets
from replay.trace.stream import iter_batch_ranges
from replay.workload.generator import resolve_workload
from replay.workload.onthefly import GeneratedTrace
from replay.workload.presets import get_preset

M64 = (1 << 64) - 1
BUDGET_ROWS = 3000.0


def _mix64(z: int) -> int:
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def _dp_rank(batch: int, pos: int, world: int) -> int:
    h = _mix64(((batch << 32) ^ pos ^ DP_SALT) & M64)
    return ((h >> 32) * world) >> 32


def _tiny(batches: int = 40) -> GeneratedTrace:
    return GeneratedTrace(resolve_workload("tiny").with_overrides(batches=batches))


def _placement(src, kind: str, nodes: int = 2, gpn: int = 2):
    shapes = table_shapes(list(src.table_names), [int(r) for r in src.table_rows], 8)
    plan = uniform_plan(kind, shapes, nodes=nodes, gpus_per_node=gpn)
    return resolve_plan(plan, shapes, nodes=nodes, gpus_per_node=gpn)


def _reference(src, placement) -> tuple[dict, dict]:
    """Per (table, rank, first row, first column): the shard's keys batch by batch in
    trace order, and the sum over batches of its distinct keys per batch, routed lookup
    by lookup."""
    offsets = table_offsets(np.asarray(src.table_rows, dtype=np.int64)).tolist()
    world = placement.world
    by_table: dict[int, list] = {}
    for s in placement.shards:
        if s.rows > 0:
            by_table.setdefault(s.table, []).append(s)
    keys_of: dict[tuple, list[int]] = {}
    distinct: dict[tuple, int] = {}

    def ident(s) -> tuple:
        return (s.table, s.rank, s.row_start, s.col_start)

    for r in iter_batch_ranges(src, with_updates=False):
        keys = np.asarray(r.keys, dtype=np.int64)
        owners = owner_ranks_reference(placement, keys.tolist())
        for b in range(r.batches):
            lo, hi = int(r.bounds[b]), int(r.bounds[b + 1])
            seen: dict[tuple, set] = {}
            for pos in range(hi - lo):
                key = int(keys[lo + pos])
                t = next(u for u in range(len(offsets) - 1) if offsets[u] <= key < offsets[u + 1])
                row = key - offsets[t]
                kind = placement.entry(t).type
                if kind == COLUMN_WISE:
                    dest = [(s, row) for s in by_table[t]]
                elif kind == GRID:  # the row's block in every column block
                    dest = [
                        (s, row - s.row_start)
                        for s in by_table[t]
                        if s.row_start <= row < s.row_stop
                    ]
                elif kind == DATA_PARALLEL:
                    rank = _dp_rank(r.batch_start + b, pos, world)
                    dest = [(next(s for s in by_table[t] if s.rank == rank), row)]
                else:
                    owner = int(owners[lo + pos])
                    s = next(
                        s for s in by_table[t]
                        if s.rank == owner and s.row_start <= row < s.row_stop
                    )  # fmt: skip
                    dest = [(s, row - s.row_start)]
                for s, local in dest:
                    mine = keys_of.setdefault(ident(s), [])
                    if len(mine) < r.batch_start + b + 1:
                        mine.extend([] for _ in range(r.batch_start + b + 1 - len(mine)))
                    mine[r.batch_start + b].append(local)
                    seen.setdefault(ident(s), set()).add(local)
            for k, v in seen.items():
                distinct[k] = distinct.get(k, 0) + len(v)
    return keys_of, distinct


def _ident(e: dict, names: list[str]) -> tuple:
    return (names.index(e["table"]), e["rank"], e["rows"][0], e["columns"][0])


@pytest.fixture(scope="module")
def tiny_tables() -> dict:
    return torchrec_stats(_tiny())["tables"]


@pytest.mark.parametrize("kind", [*SHARDING_TYPES, GRID])
def test_each_shard_equals_an_lru_over_its_own_unique_ids(kind: str) -> None:
    src = _tiny()
    placement = _placement(src, kind)
    got = shard_stats(src, placement, rate=1.0, spec=None, budget_rows=BUDGET_ROWS)
    names = [str(n) for n in src.table_names]
    keys_of, distinct = _reference(src, placement)
    shards = got["shards"]
    assert {_ident(e, names) for e in shards} == set(keys_of)
    assert got["world"] == 4
    batches = int(src.num_batches)
    for e in shards:
        per_batch = keys_of[_ident(e, names)]
        per_batch += [[] for _ in range(batches - len(per_batch))]
        unique = sum(len(set(b)) for b in per_batch)
        assert e["type"] == kind
        assert e["height"] == e["rows"][1] - e["rows"][0]
        assert e["lookups"] == sum(len(b) for b in per_batch)
        assert e["expected_lookups"] == pytest.approx(distinct[_ident(e, names)] / batches)
        assert e["expected_lookups"] == pytest.approx(unique / batches)
        hist = np.asarray(e["mrc_hist_counts"], dtype=np.int64)
        n = e["bins"]
        assert len(hist) == n and (hist >= 0).all() and hist.sum() == unique
        assert n == choose_bins(e["height"], e["cache_rows"] or None, 100)
        edges = edge_sizes(e["height"], n)
        for b in sorted({1, n // 4, n // 2, n - 1} - {0}):
            want = reference_unique_lru_misses(per_batch, int(edges[b]))
            assert unique - int(hist[:b].sum()) == want, (e["table"], e["rank"], b)
        distinct_rows = len({k for batch in per_batch for k in batch})
        assert e["cold_miss_ratio"] == pytest.approx(distinct_rows / unique, abs=1e-12)


@pytest.mark.parametrize("kind", SHARDING_TYPES)
def test_shards_add_up_to_their_tables(kind: str, tiny_tables: dict) -> None:
    src = _tiny()
    placement = _placement(src, kind)
    world = placement.world
    got = shard_stats(src, placement, rate=1.0, spec=None, budget_rows=BUDGET_ROWS)
    for name, table in tiny_tables.items():
        mine = [e for e in got["shards"] if e["table"] == name]
        assert mine
        unique = sum(table["mrc_hist_counts"])
        if kind in (COLUMN_WISE, "table-wise"):  # every block sees the table's stream
            assert len(mine) == (world if kind == COLUMN_WISE else 1)
            for e in mine:
                assert e["height"] == table["height"]
                assert sum(e["mrc_hist_counts"]) == unique
                assert e["lookups"] == table["lookups"]
                assert e["expected_lookups"] == pytest.approx(table["expected_lookups"])
                assert e["cold_miss_ratio"] == pytest.approx(table["cold_miss_ratio"])
                if e["bins"] == table["bins"]:
                    assert e["mrc_hist_counts"] == table["mrc_hist_counts"]
        elif kind == DATA_PARALLEL:  # each replica a share of the lookups, all the rows
            assert len(mine) == world
            n = table["lookups"]
            assert sum(e["lookups"] for e in mine) == n
            sd = np.sqrt(n * (1 / world) * (1 - 1 / world))
            for e in mine:
                assert e["height"] == table["height"]
                assert abs(e["lookups"] - n / world) <= 4 * sd
                assert e["expected_lookups"] <= table["expected_lookups"]
            # a row in several replicas' samples is a unique id of each
            assert sum(e["expected_lookups"] for e in mine) >= table["expected_lookups"]
        else:  # row blocks: a partition of the table's rows, lookups and unique ids
            assert sum(e["height"] for e in mine) == table["height"]
            assert sum(e["lookups"] for e in mine) == table["lookups"]
            assert sum(sum(e["mrc_hist_counts"]) for e in mine) == unique
            assert sum(e["expected_lookups"] for e in mine) == pytest.approx(
                table["expected_lookups"], rel=1e-12
            )
            cold = sum(e["cold_miss_ratio"] * sum(e["mrc_hist_counts"]) for e in mine)
            assert cold == pytest.approx(table["cold_miss_ratio"] * unique)


@pytest.mark.parametrize("kind", SHARDING_TYPES)
def test_the_gpu_budget_is_split_among_its_shards(kind: str) -> None:
    src = _tiny()
    placement = _placement(src, kind)
    got = shard_stats(src, placement, rate=1.0, spec=None, budget_rows=BUDGET_ROWS)
    assert "split_budget" in got["split"]
    for rank in range(placement.world):
        mine = [e for e in got["shards"] if e["rank"] == rank]
        assert sum(e["cache_rows"] for e in mine) <= BUDGET_ROWS
        for e in mine:
            assert 0.0 <= e["load_factor"] <= 1.0
            assert e["cache_rows"] <= e["height"]
            assert e["load_factor"] == e["cache_rows"] / e["height"]
    again = shard_stats(src, placement, rate=1.0, spec=None, budget_rows=BUDGET_ROWS)
    assert json.dumps(again) == json.dumps(got)


def test_a_pass_nothing_reads_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    """At R < 1 with a workload spec and the tables' one-GPU entries, a table-wise
    placement's shards all take their tables' curves and the spec's lookups: the pass
    over the horizon is not made, and the statistics are those the pass gives; a
    data-parallel table's replicas read it (their shares of the sampled lookups)."""
    from replay.plan import torchrec_shards
    from replay.workload.sampled import open_sampled_workload

    spec = resolve_workload("tiny").with_overrides(batches=400, reuse=0.0, drift=0.0)
    sampled = open_sampled_workload(spec, 0.25)
    tables = torchrec_stats(sampled)["tables"]
    kw = {"rate": sampled.sample_rate, "spec": spec, "budget_rows": BUDGET_ROWS,
          "table_stats": tables}  # fmt: skip
    real = torchrec_shards._pass_read
    asked: list[bool] = []
    force = [False]

    def recorded(*a: Any, **k: Any) -> bool:
        asked.append(real(*a, **k))
        return force[0] or asked[-1]

    monkeypatch.setattr(torchrec_shards, "_pass_read", recorded)
    for kind, read in (("table-wise", False), ("data-parallel", True)):
        placement = _placement(sampled, kind)
        force[0] = False
        made = shard_stats(sampled, placement, **kw)
        assert asked[-1] is read
        force[0] = True  # the pass made and fed whatever it feeds
        assert shard_stats(sampled, placement, **kw) == made


def _request(sets: tuple[str, ...]) -> PlanRequest:
    spec = get_preset("criteo-kaggle").with_overrides(batches=120, batch_size=256)
    return PlanRequest(
        source=spec, systems=("hbm-lru",), cache_budget_bytes=8 << 20, hit_targets=(0.5,),
        mtbf_s=6 * 3600, sample_rate=1.0, draws=50, sets=sets,
    )  # fmt: skip


def test_plan_torchrec_json_per_shard_and_one_gpu_unchanged(tmp_path: Path) -> None:
    one, curves_one = make_plan(_request(()))
    trec_one = torchrec_document(one)
    assert trec_one is not None
    assert {k: v for k, v in trec_one.items() if k in one["torchrec"]} == one["torchrec"]
    assert trec_one["row_bytes"] == one["row_bytes"]
    assert trec_one["cache_budget_bytes"] == one["cache"]["budget_bytes"]
    write_plan(one, tmp_path / "one", force=False, curves=curves_one)
    text = (tmp_path / "one" / "torchrec.json").read_text()
    assert json.loads(text) == trec_one
    assert "cluster" not in json.loads(text)

    sets = ("cluster.nodes=2", "cluster.gpus_per_node=2", "cluster.sharding=row-wise")
    doc, curves = make_plan(_request(sets))
    write_plan(doc, tmp_path / "c", force=False, curves=curves)
    trec = json.loads((tmp_path / "c" / "torchrec.json").read_text())
    plan = json.loads((tmp_path / "c" / "plan.json").read_text())
    assert SHARDS_KEY not in plan["cluster"] and plan == json.loads(json.dumps(plan_json(doc)))
    # the tables stay the one-GPU reference
    assert trec["tables"] == json.loads(text)["tables"]
    c = trec["cluster"]
    assert (c["world"], c["nodes"], c["gpus_per_node"]) == (4, 2, 2)
    # every entry says the global batch its expected lookups count
    assert trec["batch_size"] == 256
    for entry in [*trec["tables"].values(), *c["shards"]]:
        assert entry["batch_size"] == 256
    assert c["budget_rows_per_gpu"] == plan["cluster"]["budget_rows_per_gpu"]
    for name, table in trec["tables"].items():
        mine = [e for e in c["shards"] if e["table"] == name]
        assert sum(e["height"] for e in mine) == table["height"]
        assert sum(e["lookups"] for e in mine) == table["lookups"]


def test_many_streams_start_small_states_with_the_same_statistics(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each stream's stack state starts at its share of `STATE_WINDOWS` and `STATE_KEYS`
    (meta-2021's 109,568 row-wise streams: windows of 153 positions and 16 keys, where
    the defaults of 2^16 and 1,024 held 10.5 GiB); started at the smallest sizes, the
    states grow to the same statistics, shard by shard."""
    import replay.plan.torchrec_shards as shards_module

    assert shards_module._state_sizes(1) == (65_536, 1024)
    assert shards_module._state_sizes(109_568) == (153, 16)
    src = _tiny()
    placement = _placement(src, "row-wise")
    default = shard_stats(src, placement, rate=1.0, spec=None, budget_rows=BUDGET_ROWS)
    monkeypatch.setattr(shards_module, "STATE_WINDOWS", 1)
    monkeypatch.setattr(shards_module, "STATE_KEYS", 1)
    assert shards_module._state_sizes(8) == (64, 16)
    small = shard_stats(src, placement, rate=1.0, spec=None, budget_rows=BUDGET_ROWS)
    assert json.dumps(small, sort_keys=True) == json.dumps(default, sort_keys=True)
