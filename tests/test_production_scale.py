"""The plan's bases at production scale (meta-2021 over 128 GPUs): each on a small
workload, against the computation it replaces.

- the cluster's routing in pieces without caches (`replay.engine.cluster_routed`): its
  per-GPU lookups, update rows and all-to-all equal the full cluster replay's, batch by
  batch, with pieces forced (a tiny row-group target), for every sharding type;
- the exact heads from one batch in pieces (`replay.analysis.head_pieces`): each block
  is exactly what a head fed that excerpt of the stream counts;
- touched(k) in closed form (`replay.analysis.touched_model`): against the mean count
  over many generated windows;
- the plan's switch to these bases only above their sizes, and what plan.json says.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import replay.trace.format as fmt
from replay.engine.cluster import replay_cluster
from replay.engine.cluster_routed import route_clusters, steady_counters
from replay.engine.placement import resolve_placement
from replay.engine.systems import resolve_system
from replay.policies.base import HITS, MISSES
from replay.workload.onthefly import GeneratedTrace
from replay.workload.spec import WorkloadSpec, spec_from_dict

_ROWS = (50, 3000, 200, 10_000, 7, 400)


def small_spec(tables: int = 10, batches: int = 4, batch_size: int = 32) -> WorkloadSpec:
    return spec_from_dict(
        {
            "name": "scale",
            "batch_size": batch_size,
            "batches": batches,
            "seed": 5,
            "embedding_dim": 8,
            "tables": [
                {"name": f"t{i}", "rows": _ROWS[i % 6], "alpha": 1.0, "pooling": 1 + i % 3}
                for i in range(tables)
            ],
        }
    )


@pytest.fixture
def tiny_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    """Row groups of ~60 lookups; batches of more than 120 are cut into pieces."""
    monkeypatch.setattr(fmt, "ROW_GROUP_TARGET_LOOKUPS", 60)
    monkeypatch.setattr(fmt, "PIECE_MIN_LOOKUPS", 120)


@pytest.mark.parametrize(
    "sharding", ["table-wise", "row-wise", "table-row-wise", "column-wise", "data-parallel", "auto"]
)
def test_routed_pieces_equal_the_cluster_replay(tiny_pieces: None, sharding: str) -> None:
    spec = small_spec()
    sets = ["cluster.nodes=2", "cluster.gpus_per_node=2", f"cluster.sharding={sharding}",
            "policy.capacity_rows=100"]  # fmt: skip
    system = resolve_system("hbm-lru", sets)
    src = GeneratedTrace(spec)
    assert src.pieces, "the fixture cuts these batches into pieces"
    placement = resolve_placement(system, src).placement
    full = replay_cluster(GeneratedTrace(spec), system, placement)
    (routed,) = route_clusters(GeneratedTrace(spec), [(system, placement, None)])
    for name in ("rank_lookups", "lookups", "routed_lookups", "imbalance"):
        np.testing.assert_array_equal(routed[name], full.columns[name], err_msg=name)
    assert full.rank_updates is not None
    np.testing.assert_array_equal(routed["rank_updates"], full.rank_updates)
    for name in ("all_to_all_bytes", "all_to_all_intra_bytes", "all_to_all_inter_bytes",
                 "all_to_all_s", "allreduce_s", "all_to_all_input_bytes",
                 "rank_all_to_all_sent_bytes", "rank_all_to_all_received_bytes"):  # fmt: skip
        np.testing.assert_allclose(routed[name], full.columns[name], rtol=1e-12, err_msg=name)
    assert routed["all_to_all_bytes"].sum() > 0 or sharding == "data-parallel"
    # the lower bound's per-rank bytes, kept across a batch's pieces as TorchRec's ids are
    lower = resolve_system("hbm-lru", [*sets, "cluster.all_to_all_model=lower-bound"])
    full = replay_cluster(GeneratedTrace(spec), lower, placement)
    (routed,) = route_clusters(GeneratedTrace(spec), [(lower, placement, None)])
    for name in ("all_to_all_bytes", "all_to_all_s", "rank_all_to_all_sent_bytes"):
        np.testing.assert_allclose(routed[name], full.columns[name], rtol=1e-12, err_msg=name)


def test_steady_counters_model_a_full_lru() -> None:
    lookups = np.array([[10, 20], [0, 7]])
    updates = np.array([[4, 5], [0, 3]])
    out = steady_counters(lookups, updates, np.array([0.5, 1.0]), 1000)
    assert out[0, :, HITS].tolist() == [5, 10]
    assert out[0, :, MISSES].tolist() == [5, 10]
    assert out[1, :, HITS].tolist() == [0, 7] and out[1, :, MISSES].tolist() == [0, 0]


def test_routed_step_time_at_full_hits_is_the_replays_when_nothing_misses(
    tiny_pieces: None,
) -> None:
    """A cache holding every row (hit 1 after warm-up): the replay's last batch, with no
    miss, against the routed pass at hit ratio 1."""
    spec = small_spec(batches=3)
    sets = ["cluster.nodes=1", "cluster.gpus_per_node=2", "cluster.sharding=table-wise",
            "policy.capacity_rows=100000"]  # fmt: skip
    system = resolve_system("hbm-lru", sets)
    placement = resolve_placement(system, GeneratedTrace(spec)).placement
    # the same rows every batch: a workload whose batches repeat is not generated, so
    # compare the batch whose replay had no misses, if any; else the timing with hits
    full = replay_cluster(GeneratedTrace(spec), system, placement)
    (routed,) = route_clusters(
        GeneratedTrace(spec), [(system, placement, np.ones(placement.world))]
    )
    assert routed["step_time_s"].shape == full.columns["step_time_s"].shape
    # with every lookup a hit the routed step is at most the replay's (which has misses)
    assert (routed["step_time_s"] <= full.columns["step_time_s"] + 1e-15).all()
    assert (routed["rank_hits"] == routed["rank_lookups"]).all()


# -- the exact heads from one batch in pieces -------------------------------------------


def _batch_keys(spec: WorkloadSpec, batch: int) -> tuple[np.ndarray, np.ndarray]:
    """(flat keys of one whole batch, table offsets), generated at once."""
    from replay.trace.keys import table_offsets
    from replay.workload.generator import CompiledWorkload

    compiled = CompiledWorkload.from_spec(spec)
    offsets = table_offsets(np.array([t.rows for t in spec.tables], dtype=np.int64))
    _, table, row = compiled.lookups(batch, batch + 1)
    return offsets[table.astype(np.int64)] + row.astype(np.int64), offsets


def _pieces_of(spec: WorkloadSpec, batch: int):  # type: ignore[no-untyped-def]
    from replay.trace.keys import table_offsets
    from replay.workload.generator import CompiledWorkload

    compiled = CompiledWorkload.from_spec(spec)
    offsets = table_offsets(np.array([t.rows for t in spec.tables], dtype=np.int64))

    def pieces_of():  # type: ignore[no-untyped-def]
        for piece in compiled.pieces:
            _, table, row = compiled.lookups(batch, batch + 1, piece)
            yield piece, offsets[table.astype(np.int64)] + row.astype(np.int64)

    return pieces_of, compiled


def _distinct(spec: WorkloadSpec) -> np.ndarray:
    from replay.analysis.touched_model import expected_touched

    return expected_touched(spec, [1], kind="lookups")[:, 0]


def _heads_spec() -> WorkloadSpec:
    return spec_from_dict(
        {
            "name": "heads",
            "batch_size": 512,
            "batches": 8,
            "seed": 2,
            "tables": [
                {
                    "name": f"t{i}",
                    "rows": (20_000, 3_000, 60_000)[i % 3],
                    "alpha": 0.9,
                    "pooling": 1 + i % 4,
                }
                for i in range(12)
            ],
        }
    )


def test_one_batch_heads_blocks_are_the_heads_of_their_excerpts(
    tiny_pieces: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Per table: each block is an ExactHead fed that slice of the table's lookups in
    the batch. In total: with a target no block reaches, the 16 blocks tile the batch
    and each is an ExactHead fed its tile. Both from a batch generated whole."""
    import replay.analysis.head_pieces as hp
    from replay.analysis.head import ExactHead

    monkeypatch.setattr(hp, "HEAD_LOOKUPS", 1 << 40)  # total blocks: whole tiles
    # heads small enough to fill within a block of this small batch (a real one's are
    # 2^20 keys against ~128 M distinct rows a batch)
    monkeypatch.setattr(hp, "head_capacity", lambda d, res, rows: min(128, int(rows)))
    monkeypatch.setattr(hp, "HEAD_MIN_BLOCK_LOOKUPS", 64)
    spec = _heads_spec()
    pieces_of, compiled = _pieces_of(spec, 3)
    assert len(compiled.pieces) > 3
    keys, offsets = _batch_keys(spec, 3)
    looks = compiled.table_lookups
    resolution = 1 << 10
    heads = hp.one_batch_heads(pieces_of, offsets, looks, resolution, _distinct(spec))
    assert len(heads) == 1 + len(spec.tables)
    total = heads[0]
    edges = [j * len(keys) // 16 for j in range(17)]
    ref = ExactHead(int(offsets[-1]), total.capacity)
    for j in range(16):
        ref.start_block(warm=True)
        ref.feed(keys[edges[j] : edges[j + 1]])
    np.testing.assert_array_equal(total.counts, ref.block_counts())
    assert total.counted > 0
    starts = np.concatenate([[0], np.cumsum(looks)])
    for t, head in enumerate(heads[1:]):
        sub = keys[starts[t] : starts[t + 1]] - offsets[t]
        ref = ExactHead(int(offsets[t + 1] - offsets[t]), head.capacity)
        for a, b in hp.table_blocks(len(sub), head.capacity):
            ref.start_block(warm=True)
            ref.feed(sub[a:b])
        np.testing.assert_array_equal(head.counts, ref.block_counts(), err_msg=f"table {t}")
    assert any(h.usable for h in heads[1:])


def test_one_batch_heads_the_same_however_far_the_total_head_lags(
    tiny_pieces: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import replay.analysis.head_pieces as hp
    from replay.trace.keys import table_offsets

    monkeypatch.setattr(hp, "head_capacity", lambda d, res, rows: min(128, int(rows)))
    monkeypatch.setattr(hp, "HEAD_MIN_BLOCK_LOOKUPS", 64)
    monkeypatch.setattr(hp, "HEAD_LOOKUPS", 1 << 12)
    spec = _heads_spec()
    got = []
    for lag in (1, 3, 1000):
        monkeypatch.setattr(hp, "TOTAL_LAG_PIECES", lag)
        pieces_of, compiled = _pieces_of(spec, 3)
        offsets = table_offsets(np.array([t.rows for t in spec.tables], dtype=np.int64))
        heads = hp.one_batch_heads(
            pieces_of, offsets, compiled.table_lookups, 1 << 10, _distinct(spec)
        )
        got.append([h.counts.tobytes() for h in heads])
    assert got[0] == got[1] == got[2]
    assert np.frombuffer(got[0][0], dtype=np.int64).sum() > 0


def test_one_batch_total_blocks_stop_at_their_target(
    tiny_pieces: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import replay.analysis.head_pieces as hp

    monkeypatch.setattr(hp, "head_capacity", lambda d, res, rows: min(64, int(rows)))
    monkeypatch.setattr(hp, "HEAD_LOOKUPS", 16 * 600)  # a target below a tile's lookups

    spec = _heads_spec()
    pieces_of, compiled = _pieces_of(spec, 0)
    _, offsets = _batch_keys(spec, 0)
    total = hp.one_batch_heads(
        pieces_of, offsets, compiled.table_lookups, 1 << 10, _distinct(spec)
    )[0]
    counted = total.counts[:, -1]
    target = max(hp.HEAD_LOOKUPS // hp.HEAD_BLOCKS, 8 * total.capacity)
    # every block counted, none more than its target plus one piece
    assert len(counted) == 16 and (counted > 0).all()
    assert counted.max() <= target + max(compiled.table_lookups)


def test_one_batch_heads_from_the_generators_rows_are_the_same(
    tiny_pieces: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plan's pieces (`replay.analysis.horizon`): each piece's rows generated without
    its batch and table ids, its keys made from the runs of tables, the tables' heads
    fed the rows: the same heads as from the flat keys alone."""
    import replay.analysis.head_pieces as hp
    from replay.trace.keys import flat_keys_of_tables

    monkeypatch.setattr(hp, "head_capacity", lambda d, res, rows: min(128, int(rows)))
    monkeypatch.setattr(hp, "HEAD_MIN_BLOCK_LOOKUPS", 64)
    monkeypatch.setattr(hp, "HEAD_LOOKUPS", 1 << 12)
    spec = _heads_spec()
    pieces_of, compiled = _pieces_of(spec, 3)
    _, offsets = _batch_keys(spec, 3)
    looks = compiled.table_lookups

    def with_rows():  # type: ignore[no-untyped-def]
        for t0, t1 in compiled.pieces:
            rows = compiled.batch_rows(3, (t0, t1))
            assert rows.dtype == compiled.row_dtype
            keys = flat_keys_of_tables(rows, offsets, looks[t0:t1], t0, where="w")
            yield (t0, t1), keys, rows

    got = []
    for source in (pieces_of, with_rows):
        heads = hp.one_batch_heads(source, offsets, looks, 1 << 10, _distinct(spec))
        got.append([h.counts.tobytes() for h in heads])
    assert got[0] == got[1]


def test_flat_keys_of_tables_is_flat_keys_of_the_runs() -> None:
    from replay.errors import TraceError
    from replay.trace.keys import flat_keys, flat_keys_of_tables, table_offsets

    offsets = table_offsets(np.array([5, 1, 300, 2**32], dtype=np.int64))
    counts = np.array([0, 4, 3], dtype=np.int64)  # tables 1, 2, 3 of one piece
    # the generator's row type (uint32 up to 2^32 rows a table)
    rows = np.array([0, 0, 0, 0, 299, 0, 2**32 - 1], dtype=np.uint32)
    table = np.repeat(np.arange(1, 4), counts).astype(np.uint16)
    want = flat_keys(table, rows, offsets)
    np.testing.assert_array_equal(flat_keys_of_tables(rows, offsets, counts, 1, where="w"), want)
    with pytest.raises(TraceError, match=r"^w: lookup 4 \(table 2, row 300\): row id 300"):
        bad = rows[:4] + np.array([0, 0, 0, 300], dtype=np.uint32)
        flat_keys_of_tables(bad, offsets, [1, 3], 1, where="w")
    with pytest.raises(TraceError, match="not runs of tables"):
        flat_keys_of_tables(rows, offsets, counts, 2, where="w")  # past the last table
    with pytest.raises(TraceError, match="not runs of tables"):
        flat_keys_of_tables(rows[:3], offsets, counts, 1, where="w")


def test_spread_blocks() -> None:
    from replay.analysis.head_pieces import spread_blocks

    assert spread_blocks(100, 10, 4) == [(0, 10), (30, 40), (60, 70), (90, 100)]
    assert spread_blocks(100, 40, 4) == [(0, 50), (50, 100)]
    assert spread_blocks(0, 10, 4) == []


def test_one_batch_heads_only_above_their_size() -> None:
    from replay.analysis.head_pieces import HEAD_FULL_MAX_LOOKUPS, one_batch_heads_wanted

    assert not one_batch_heads_wanted(1000, 26_214_400, ((0, 1), (1, 2)))  # 400 tables
    assert one_batch_heads_wanted(216_000, 887_029_760, ((0, 1), (1, 2)))  # meta-2021
    assert not one_batch_heads_wanted(216_000, 887_029_760, ())  # whole batches
    assert one_batch_heads_wanted(16, HEAD_FULL_MAX_LOOKUPS // 16 + 1, ((0, 1),))


# -- touched(k) in closed form ------------------------------------------------------------


def test_expected_touched_against_the_count_of_generated_windows() -> None:
    from replay.analysis.horizon import TouchedCounter
    from replay.analysis.touched_model import expected_touched

    spec = spec_from_dict(
        {
            "name": "iid",
            "batch_size": 256,
            "batches": 300,
            "seed": 9,
            "tables": [
                {"name": "a", "rows": 5000, "alpha": 1.1, "pooling": 4},
                {"name": "b", "rows": 20_000, "alpha": 0.8, "pooling": 2,
                 "hot_shares": [0.05, 0.02]},
                {"name": "c", "rows": 300, "alpha": 0.5, "pooling": 1, "rank_offset": 3.0},
                {"name": "d", "rows": 1000, "alpha": 1.0, "pooling": 1, "frozen": True},
            ],
        }
    )  # fmt: skip
    ks = [1, 2, 5, 20]
    src = GeneratedTrace(spec)
    counter = TouchedCounter(src.table_rows, spec.batches, batches=ks)
    counter.feed_source(src, "lookups")
    measured = counter.curve(1.0, "lookups", tuple(src.table_names)).per_table
    model = expected_touched(spec, ks, kind="lookups")
    # mean over ~300 windows: within 1% (the Poisson model within 1e-3 of the binomial)
    np.testing.assert_allclose(model, measured, rtol=0.01)
    updates = expected_touched(spec, ks, kind="updates")
    assert (updates[3] == 0).all() and (updates[:3] == model[:3]).all()


def test_plan_touched_takes_the_closed_form_only_for_large_batches(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import replay.analysis.touched_plan as tp
    from replay.workload.sampled import open_sampled_workload

    spec = small_spec(batches=64, batch_size=64)
    horizon = open_sampled_workload(spec, 0.5)
    _, info = tp.plan_touched(horizon, spec)
    assert "closed form" not in str(info.get("exact_from"))
    monkeypatch.setattr(tp, "PREFIX_MAX_LOOKUPS", 10)
    curve, info = tp.plan_touched(horizon, spec)
    assert "closed form" in info["exact_from"]
    from replay.analysis.touched_model import expected_touched

    np.testing.assert_allclose(curve.rows, expected_touched(spec, curve.batches).sum(axis=0))


def test_ahead_keeps_order_and_results() -> None:
    from replay.analysis.head_pieces import ahead

    items = list(range(23))
    got = list(ahead(lambda i: np.full(3, i * i), items, 2))
    assert [i for i, _ in got] == items
    assert all((a == i * i).all() for i, a in got)
    assert list(ahead(lambda i: np.zeros(1), [], 2)) == []


# -- the plan with every production-scale switch forced on a small workload ---------------


def test_plan_at_production_scale_says_its_bases(
    tiny_pieces: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import replay.analysis.head_pieces as hp
    import replay.analysis.touched_plan as tp
    import replay.plan.cluster_scaling as pc
    import replay.plan.systems_model as sm
    import replay.plan.torchrec as trc
    from replay.plan.plan import PlanRequest, make_plan

    monkeypatch.setattr(hp, "HEAD_FULL_MAX_LOOKUPS", 0)
    monkeypatch.setattr(hp, "HEAD_MIN_BLOCK_LOOKUPS", 64)
    monkeypatch.setattr(tp, "PREFIX_MAX_LOOKUPS", 10)
    monkeypatch.setattr(trc, "SPAN_MAX_LOOKUPS", 10)
    monkeypatch.setattr(pc, "ROUTED_MIN_LOOKUPS", 10)
    monkeypatch.setattr(sm, "MODELLED_MIN_LOOKUPS", 10)
    spec = _heads_spec().with_overrides(batches=40)
    sets = ("cluster.nodes=2", "cluster.gpus_per_node=2")
    request = PlanRequest(
        source=spec, systems=("hbm-lru",), cache_budget_bytes=1 << 20, hit_targets=(0.9,),
        mtbf_s=3600.0, sample_rate=0.25, time_per_batch_s=0.1, sets=sets,
    )  # fmt: skip
    document, curves = make_plan(request)
    from replay.plan.write import write_plan

    write_plan(document, tmp_path / "plan", force=False, curves=curves)
    assert (tmp_path / "plan" / "plan.md").read_text().count("basis:") >= 3
    bases = [n for n in document["notes"] if "basis:" in n]
    assert any("exact heads" in n and "pieces of tables" in n for n in bases), bases
    assert any("modelled, not replayed" in n for n in bases), bases
    assert any("routed in pieces" in n for n in bases), bases
    assert "closed form" in document["touched"]["basis"]["exact_from"]
    assert document["distinct_rows"] <= sum(t.rows for t in spec.tables)  # never past the rows
    cluster = document["cluster"]
    assert "production scale" in cluster["methods"]["steady"]
    # the routed span is one batch: every GPU's steady lookups add up to it
    total = sum(g["steady_lookups"] for g in cluster["per_gpu"])
    assert total >= spec.lookups_per_batch  # a column-wise lookup counts once a block
    assert cluster["scaling"]["batches"] == 1
    system = document["systems"][0]
    assert system["batches"] == 1
    # its hit is the plan's own LRU curve read at the system's cache (nothing replayed)
    from replay.plan.cache import hit_at

    mrc = document["mrc"]
    curve_hits = 1.0 - np.asarray(mrc["miss_ratio"])
    expected = hit_at(np.asarray(mrc["rows"], dtype=np.float64), curve_hits, system["cache_rows"])
    assert system["hit_ratio"] == pytest.approx(expected, rel=1e-9, abs=1e-12)
    # the answers' lines say the same bases: routed without caches, modelled not replayed
    assert cluster["steady"]["routed"] and system["modelled"]
    md = (tmp_path / "plan" / "plan.md").read_text()
    assert "1 batch routed without caches, each GPU's hits from its curve" in md
    assert "batches replayed" not in md
    assert "over one batch, its counters from the LRU curve (not replayed)" in md
    # the report's summary: the cluster in the first line, its per-GPU answers before the
    # one-GPU reference's cache line, which says it is one
    from replay.report.build import build_report

    build_report([tmp_path / "plan"], tmp_path / "report")
    summary = (tmp_path / "report" / "report.md").read_text().split("## Contents")[0]
    lines = [line for line in summary.splitlines() if line.startswith("- ")]
    assert "on 4 GPUs (2 nodes x 2)" in lines[0]
    assert lines[1].startswith("- Cluster: 4 GPUs") and lines[2].startswith("- Cluster network")
    assert "one GPU holding every table, beside the cluster" in lines[3]


def test_che_merges_alike_tables_without_changing_the_curve() -> None:
    """`spec_popularity` computes alike tables once (meta-2021: 856 tables of 4 kinds,
    83 s -> 1 s of CPU): the curve is the one of every table on its own."""
    from replay.analysis.che import che_hit_ratios, che_miss_ratios, table_popularity

    spec = spec_from_dict(
        {
            "name": "alike",
            "batch_size": 64,
            "batches": 10,
            "tables": [
                {"name": f"t{i}", "rows": (1000, 50_000)[i % 2], "alpha": (0.9, 1.2)[i % 2],
                 "pooling": 1 + i % 2, "hot_shares": [0.1] if i % 2 else []}
                for i in range(6)
            ],
        }
    )  # fmt: skip
    sizes = np.array([10, 100, 1000, 10_000, 40_000])
    pooling = sum(t.pooling for t in spec.tables)
    parts = [
        table_popularity(t.rows, float(t.alpha), t.pooling / pooling, hot_shares=t.hot_shares)
        for t in spec.tables
    ]
    hits, _ = che_hit_ratios(
        np.concatenate([p.counts for p in parts]),
        np.concatenate([p.probabilities for p in parts]),
        sizes,
    )
    np.testing.assert_allclose(che_miss_ratios(spec, sizes), 1.0 - hits, rtol=0, atol=1e-12)


def test_a_gpu_whose_budget_holds_its_rows_below_the_resolution() -> None:
    """Per-GPU curves sampled so thinly that no size up to the budget is resolved (meta-2021
    at R = 2^-23: 2^27 rows, each GPU ~40 M): a GPU whose budget holds all its shards' rows
    misses only first lookups; one whose budget does not keeps the curve's 0."""
    from types import SimpleNamespace

    from replay.plan.cluster import _per_gpu

    nan = float("nan")
    curves = SimpleNamespace(
        sizes=np.array([100, 1000]),
        resolution_rows=10_000,
        miss_ratio=np.array([[nan, nan], [nan, nan], [nan, nan]]),
        lookups=np.array([1e6, 2e6, 0.0]),
        distinct=np.array([500, 900, 0]),
        hit_at=lambda rows: np.zeros(3),
        rows_for_hit=lambda t: [None, None, None],
    )
    hits, rows = _per_gpu(curves, (0.9,), 1000.0, np.array([800, 5000, 10]))
    assert hits[0] == pytest.approx(1 - 500 / 1e6)
    assert hits[1] == 0.0  # 5,000 rows do not fit 1,000: the curve's answer stays
    assert hits[2] is None  # no lookups
    assert rows[0]["0.9"] == 800.0 and rows[1]["0.9"] is None


def test_jobs_on_one_placement_are_routed_once_with_their_own_hits(tiny_pieces: None) -> None:
    spec = small_spec()
    system = resolve_system("hbm-lru", ["cluster.nodes=1", "cluster.gpus_per_node=2",
                                        "policy.capacity_rows=100"])  # fmt: skip
    placement = resolve_placement(system, GeneratedTrace(spec)).placement
    a, b = route_clusters(
        GeneratedTrace(spec),
        [(system, placement, np.zeros(2)), (system, placement, np.ones(2))],
    )
    np.testing.assert_array_equal(a["rank_lookups"], b["rank_lookups"])
    np.testing.assert_array_equal(a["all_to_all_s"], b["all_to_all_s"])
    assert (a["rank_hits"] == 0).all() and (b["rank_hits"] == b["rank_lookups"]).all()
    assert (b["step_time_s"] <= a["step_time_s"]).all()


def test_spec_block_shares_are_block_shares_for_every_placement() -> None:
    """Each table's pmf built once for several placements gives each placement's shares
    as `block_shares` computes them one by one."""
    from replay.plan.rank_curves import row_split_starts, spec_block_shares
    from replay.workload.row_mass import block_shares

    spec = _heads_spec()
    src = GeneratedTrace(spec)
    starts = []
    for kind in ("row-wise", "table-row-wise"):
        system = resolve_system("hbm-lru", ["cluster.nodes=2", "cluster.gpus_per_node=2",
                                            f"cluster.sharding={kind}"])  # fmt: skip
        starts.append(row_split_starts(resolve_placement(system, src).placement))
    assert all(starts)
    got = spec_block_shares(spec, starts)
    for one, shares in zip(starts, got, strict=True):
        assert set(shares) == set(one)
        for t, first in one.items():
            np.testing.assert_array_equal(shares[t], block_shares(spec, t, first))
