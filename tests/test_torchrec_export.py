"""`torchrec.json` (`replay.plan.torchrec`): TorchRec's reading of the exported histogram,
with the cold-miss ratio, reproduces replay's exact per-table LRU curve within one bin at
every load factor and exactly at the bins' edge sizes; the counts are the stack distances'
histogram; expected lookups are the exact distinct rows per batch; the file round-trips;
`parameter_constraints` builds TorchRec's objects, or says `pip install torchrec`.

TorchRec is not installed here: its reading is transcribed in numpy from
`EmbeddingOffloadStats.estimate_cache_miss_rate` (torchrec/distributed/planner/
shard_estimators.py), float32 where torch computes in float32."""

from __future__ import annotations

import enum
import json
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from replay.analysis.horizon import per_table_mrc
from replay.analysis.stack import reference_stack_distances
from replay.cli import main
from replay.errors import ConfigError, InputError
from replay.plan.torchrec import (
    SPAN_BATCHES,
    edge_sizes,
    parameter_constraints,
    read_torchrec_stats,
    torchrec_cacheability,
    torchrec_stats,
)
from replay.trace.keys import table_offsets
from replay.trace.stream import iter_batch_ranges
from replay.workload.onthefly import GeneratedTrace
from replay.workload.spec import TableSpec, WorkloadSpec

# rows: below the default 100 bins, a multiple of them, not a multiple, larger
SPEC = WorkloadSpec(
    name="torchrec-export",
    tables=(
        TableSpec("small", 37, alpha=0.8),
        TableSpec("even", 1000, alpha=1.0, reuse=0.2),
        TableSpec("odd", 1237, alpha=1.1, pooling=2, drift=0.001),
        TableSpec("big", 4321, alpha=0.9),
    ),
    batch_size=64,
    batches=150,
    embedding_dim=8,
)


def torchrec_miss(hist: Any, height: int, clf: Any) -> np.ndarray:
    """`EmbeddingOffloadStats.expected_miss_rate` in numpy: `torch.tensor(clf * height)`
    and `torch.linspace(0, height, n + 1)` are float32; `torch.bucketize(x, bins,
    right=True)` is `np.searchsorted(bins, x, side="right")`."""
    h = np.asarray(hist, dtype=np.float64)
    ys = np.cumsum(h)
    clf = np.atleast_1d(np.asarray(clf, dtype=np.float64))
    if ys[-1] == 0:
        return np.zeros(len(clf))
    ys = 1.0 - ys / ys[-1]
    ys = np.concatenate([ys, [0.0, 1.0]])
    bins = np.linspace(0.0, height, len(h) + 1).astype(np.float32)
    x = (clf * height).astype(np.float32) - np.float32(1.0)
    idx = np.searchsorted(bins, x, side="right")
    return ys[idx - 1]


@pytest.fixture(scope="module")
def exact_curves() -> dict[str, np.ndarray]:
    """Replay's exact per-table miss ratio at every cache size 0..rows (1 at size 0)."""
    src = GeneratedTrace(SPEC)
    curves = per_table_mrc(src, [np.arange(1, t.rows + 1) for t in SPEC.tables])
    return {
        t.name: np.concatenate([[1.0], c.miss_ratios])
        for t, c in zip(SPEC.tables, curves, strict=True)
    }


@pytest.fixture(scope="module", params=[100, 7])
def export(request: pytest.FixtureRequest) -> dict[str, Any]:
    return torchrec_stats(GeneratedTrace(SPEC), bins=request.param, load_factors={"even": 0.25})


def _reproduced(table: dict[str, Any], clf: np.ndarray) -> np.ndarray:
    cold = table["cold_miss_ratio"]
    return cold + (1.0 - cold) * torchrec_miss(table["mrc_hist_counts"], table["height"], clf)


def _miss_at(curve: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Our miss ratio at real cache sizes: a cache of s rows holds floor(s) rows."""
    k = np.floor(np.asarray(sizes, dtype=np.float64) + 1e-9).astype(np.int64)
    return curve[np.clip(k, 0, len(curve) - 1)]


def test_the_histogram_is_the_stack_distances_binned_over_the_rows(
    export: dict[str, Any],
) -> None:
    """Bin b holds the finite LRU stack distances d with b H / n <= d < (b + 1) H / n
    (an explicit LRU stack, table by table), and the cold misses are the first lookups."""
    offsets = table_offsets(np.array([t.rows for t in SPEC.tables]))
    keys = np.concatenate(
        [r.keys for r in iter_batch_ranges(GeneratedTrace(SPEC), with_updates=False)]
    ).astype(np.int64)
    for t, spec in enumerate(SPEC.tables):
        table = export["tables"][spec.name]
        mine = keys[(keys >= offsets[t]) & (keys < offsets[t + 1])] - offsets[t]
        distances = reference_stack_distances(mine.tolist())
        finite = np.array([d for d in distances if d is not None], dtype=np.int64)
        n, height = table["bins"], table["height"]
        expected = np.bincount(finite * n // height, minlength=n)  # b <= d n / H < b + 1
        assert table["mrc_hist_counts"] == expected.tolist()
        assert all(isinstance(c, int) for c in table["mrc_hist_counts"])  # R = 1: counts
        cold = sum(d is None for d in distances)
        assert table["cold_miss_ratio"] == pytest.approx(cold / len(mine), abs=1e-15)
        assert table["lookups"] == len(mine) == len(finite) + cold


def test_edge_sizes_are_the_edges_rounded_up() -> None:
    assert edge_sizes(1000, 100).tolist() == list(range(0, 1001, 10))
    assert edge_sizes(1237, 100)[:4].tolist() == [0, 13, 25, 38]  # 12.37, 24.74, 37.11
    assert edge_sizes(37, 100)[-1] == 37 and set(edge_sizes(37, 100)) == set(range(38))
    assert edge_sizes(5, 1).tolist() == [0, 5]


def test_torchrec_reads_our_curve_within_one_bin_at_every_load_factor(
    export: dict[str, Any], exact_curves: dict[str, np.ndarray]
) -> None:
    for spec in SPEC.tables:
        table = export["tables"][spec.name]
        height, n = table["height"], table["bins"]
        curve = exact_curves[spec.name]
        edges = np.arange(n + 1) * height / n
        clf = np.unique(
            np.concatenate([
                np.linspace(0.0, 1.0, 20_001)[1:],
                edge_sizes(height, n)[1:] / height,  # every edge size
                np.clip((edges + 1) / height, 0, 1),  # TorchRec's steps ...
                np.clip((edges + 1) / height * (1 - 1e-9), 0, 1),  # ... either side
                np.clip(edges / height, 0, 1)[1:],
            ])
        )  # fmt: skip
        clf = clf[clf > 0]
        got = _reproduced(table, clf)
        low = _miss_at(curve, (clf + 1.0 / n) * height)  # a bin larger misses no more
        high = _miss_at(curve, (clf - 1.0 / n) * height)  # a bin smaller misses no less
        assert np.all(got >= low - 1e-12), spec.name
        assert np.all(got <= high + 1e-12), spec.name
        # at f = 1 TorchRec reads no misses: what is left are the cold misses, our curve's end
        assert _reproduced(table, np.array([1.0]))[0] == pytest.approx(curve[-1], abs=1e-12)


def test_torchrec_reads_our_curve_exactly_at_the_edge_sizes(
    export: dict[str, Any], exact_curves: dict[str, np.ndarray]
) -> None:
    for spec in SPEC.tables:
        table = export["tables"][spec.name]
        height, n = table["height"], table["bins"]
        curve = exact_curves[spec.name]
        sizes = edge_sizes(height, n)[1:]  # ceil(b H / n): a cache of that many rows
        got = _reproduced(table, sizes / height)
        np.testing.assert_allclose(got, curve[sizes], rtol=0, atol=1e-12, err_msg=spec.name)
        if height < n:  # edges less than a row apart: every size is an edge size
            every = np.arange(1, height + 1)
            got = _reproduced(table, every / height)
            np.testing.assert_allclose(got, curve[every], rtol=0, atol=1e-12)
        # below one row TorchRec reads a miss ratio of 1, as an empty cache has
        assert _reproduced(table, np.array([0.5 / height]))[0] == 1.0


def test_cacheability_is_the_area_under_torchrecs_reading(export: dict[str, Any]) -> None:
    grid = (np.arange(400_000) + 0.5) / 400_000  # midpoints
    for name, table in export["tables"].items():
        area = float(torchrec_miss(table["mrc_hist_counts"], table["height"], grid).mean())
        assert table["cacheability"] == pytest.approx(area, abs=2e-5), name
    assert torchrec_cacheability([0, 0], 10) == 0.0  # no counts: TorchRec reads no misses
    # one bin, one row: a miss below a load factor of 1
    assert torchrec_cacheability([3], 1) == pytest.approx(1.0)
    # two rows, two bins, all hits at distance 0: miss 1 below f = 1/2, then 0
    assert torchrec_cacheability([5, 0], 2) == pytest.approx(0.5)


def _distinct_per_batch(source: Any) -> np.ndarray:
    """Sum over batches of each table's distinct rows, batch by batch with np.unique."""
    offsets = table_offsets(np.asarray(source.table_rows, dtype=np.int64))
    per_table = np.zeros(len(offsets) - 1)
    for r in iter_batch_ranges(source, with_updates=False):
        for b in range(r.batches):
            keys = np.unique(np.asarray(r.keys[r.bounds[b] : r.bounds[b + 1]], dtype=np.int64))
            per_table += np.diff(np.searchsorted(keys, offsets))
    return per_table


def test_expected_lookups_are_the_distinct_rows_per_batch(export: dict[str, Any]) -> None:
    per_table = _distinct_per_batch(GeneratedTrace(SPEC)) / SPEC.batches
    for t, spec in enumerate(SPEC.tables):
        got = export["tables"][spec.name]["expected_lookups"]
        assert got == pytest.approx(per_table[t], rel=1e-12), spec.name


def test_the_document_names_its_format_and_method(export: dict[str, Any]) -> None:
    assert export["format"] == "replay-torchrec-cache-stats" and export["version"] == 1
    assert export["batches"] == SPEC.batches and export["sample_rate"] == 1.0
    assert export["method"] == "exact stack distances"
    assert list(export["tables"]) == [t.name for t in SPEC.tables]
    for spec in SPEC.tables:
        table = export["tables"][spec.name]
        assert table["height"] == spec.rows and len(table["mrc_hist_counts"]) == table["bins"]
        assert table["load_factor"] == (0.25 if spec.name == "even" else None)


def test_the_file_round_trips_and_bad_files_are_refused(
    export: dict[str, Any], tmp_path: Path
) -> None:
    path = tmp_path / "torchrec.json"
    path.write_text(json.dumps(export, indent=2) + "\n")
    assert read_torchrec_stats(path) == export
    assert read_torchrec_stats(tmp_path) == export  # a plan folder
    assert json.loads(json.dumps(export)) == export  # plain JSON types only
    bad = json.loads(json.dumps(export))
    bad["tables"]["odd"]["mrc_hist_counts"].pop()
    path.write_text(json.dumps(bad))
    with pytest.raises(InputError, match="mrc_hist_counts must hold"):
        read_torchrec_stats(path)
    path.write_text(json.dumps({**export, "version": 2}))
    with pytest.raises(InputError, match="version 2"):
        read_torchrec_stats(path)
    path.write_text(json.dumps({"format": "something else"}))
    with pytest.raises(InputError, match="not a replay-torchrec-cache-stats"):
        read_torchrec_stats(path)
    with pytest.raises(InputError, match="no such file"):
        read_torchrec_stats(tmp_path / "missing.json")
    with pytest.raises(ConfigError, match="bins"):
        torchrec_stats(GeneratedTrace(SPEC), bins=0)


def test_without_torchrec_parameter_constraints_says_how_to_get_it(
    export: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "torchrec.json"
    path.write_text(json.dumps(export))
    for name in ("torch", "torchrec"):
        monkeypatch.setitem(sys.modules, name, None)  # `import torchrec` raises ImportError
    with pytest.raises(ConfigError) as info:
        parameter_constraints(path)
    message = str(info.value)
    assert "pip install torchrec" in message and "\n" not in message


def _fake_torchrec(monkeypatch: pytest.MonkeyPatch) -> types.SimpleNamespace:
    """Stand-ins for the four names parameter_constraints imports, recording their
    arguments (TorchRec's own classes are checked in the session, not here)."""

    class CacheAlgorithm(enum.Enum):
        LRU = 0
        LFU = 1

    class Record:
        def __init__(self, **kwargs: Any) -> None:
            self.__dict__.update(kwargs)

    torch = types.ModuleType("torch")
    torch.float64 = np.float64  # type: ignore[attr-defined]
    torch.tensor = lambda data, dtype=None: np.asarray(data, dtype=dtype)  # type: ignore[attr-defined]
    modules = {
        "torch": torch,
        "torchrec": types.ModuleType("torchrec"),
        "torchrec.distributed": types.ModuleType("torchrec.distributed"),
        "torchrec.distributed.planner": types.ModuleType("torchrec.distributed.planner"),
        "torchrec.distributed.planner.shard_estimators": types.ModuleType("se"),
        "torchrec.distributed.planner.types": types.ModuleType("pt"),
        "torchrec.distributed.types": types.ModuleType("dt"),
    }
    modules["torchrec.distributed.planner.shard_estimators"].EmbeddingOffloadStats = type(  # type: ignore[attr-defined]
        "EmbeddingOffloadStats", (Record,), {}
    )
    modules["torchrec.distributed.planner.types"].ParameterConstraints = type(  # type: ignore[attr-defined]
        "ParameterConstraints", (Record,), {}
    )
    modules["torchrec.distributed.types"].CacheParams = type("CacheParams", (Record,), {})  # type: ignore[attr-defined]
    modules["torchrec.distributed.types"].CacheAlgorithm = CacheAlgorithm  # type: ignore[attr-defined]
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    return types.SimpleNamespace(CacheAlgorithm=CacheAlgorithm)


def test_parameter_constraints_hand_torchrec_the_file(
    export: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import replay

    fake = _fake_torchrec(monkeypatch)
    (tmp_path / "torchrec.json").write_text(json.dumps(export))
    got = replay.parameter_constraints(
        tmp_path, algorithm="lfu", load_factors={"odd": 0.5}, compute_kernels=["x"]
    )
    assert list(got) == [t.name for t in SPEC.tables]
    for name, constraint in got.items():
        table = export["tables"][name]
        cache = constraint.cache_params
        assert constraint.compute_kernels == ["x"]
        assert cache.algorithm is fake.CacheAlgorithm.LFU
        assert cache.load_factor == {"even": 0.25, "odd": 0.5}.get(name)
        stats = cache.stats
        assert stats.height == table["height"] and stats.cacheability == table["cacheability"]
        assert stats.expected_lookups == table["expected_lookups"]
        assert stats.mrc_hist_counts.dtype == np.float64
        assert stats.mrc_hist_counts.tolist() == table["mrc_hist_counts"]
    with pytest.raises(ConfigError, match="algorithm 'fifo'"):
        parameter_constraints(tmp_path, algorithm="fifo")


def test_a_sampled_horizon_gives_shards_scaled_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    """At R < 1 the counts are the SHARDS-scaled curve at the edge sizes and the distinct
    rows per batch come from full batches; where the full stream's head is not usable, the
    sizes below the sample's resolution are read linearly (and the table says so)."""
    import replay.analysis.horizon as horizon
    from replay.workload.sampled import open_sampled_workload

    spec = SPEC.with_overrides(batches=400, reuse=0.0, drift=0.0)  # neither can be sampled
    rate = 0.5
    doc = torchrec_stats(open_sampled_workload(spec, rate), bins=50)
    assert doc["sample_rate"] == rate and doc["method"].startswith("SHARDS at R = 0.5")
    # every table has its rows in the sample or its whole curve from the exact head
    assert doc["few_sampled_rows"] == []
    assert doc["tables"]["small"]["exact_below_rows"] == 37
    curves = per_table_mrc(
        open_sampled_workload(spec, rate), [edge_sizes(t.rows, 50)[1:] for t in spec.tables]
    )
    exact = torchrec_stats(GeneratedTrace(spec), bins=50)
    # expected lookups from the full stream's first SPAN_BATCHES batches (i.i.d. batches)
    span = spec.with_overrides(batches=SPAN_BATCHES)
    first = _distinct_per_batch(GeneratedTrace(span)) / SPAN_BATCHES
    for i, (t, curve) in enumerate(zip(spec.tables, curves, strict=True)):
        table = doc["tables"][t.name]
        assert "interpolated_below_rows" not in table  # the exact head covers small sizes
        counts = np.asarray(table["mrc_hist_counts"])
        assert np.all(counts >= 0) and table["lookups"] == curve.lookups
        ours = np.minimum.accumulate(np.clip(curve.miss_ratios, 0, 1))
        sizes = edge_sizes(t.rows, 50)[1:]
        ours = ours[np.searchsorted(curve.sizes, sizes)]  # the curve holds each size once
        got = _reproduced(table, sizes / t.rows)
        np.testing.assert_allclose(got, ours, rtol=0, atol=1e-9, err_msg=t.name)
        # near the whole run's (the batches are independent and identically distributed)
        full = exact["tables"][t.name]["expected_lookups"]
        assert table["expected_lookups"] == pytest.approx(first[i], rel=1e-12)
        assert table["expected_lookups"] == pytest.approx(full, rel=0.03), t.name
        assert 0 < table["sampled_rows"] <= t.rows

    monkeypatch.setattr(horizon, "_full_stream_heads", lambda src, resolution: None)
    doc = torchrec_stats(open_sampled_workload(spec, rate), bins=50)
    floor = doc["tables"]["small"]["interpolated_below_rows"]
    assert doc["few_sampled_rows"] == ["small"]  # 37 rows at R = 1/2, without a head
    assert floor == 16  # resolution_rows at R = 1/2: 16 (1 - R) / R
    for t in spec.tables:
        table = doc["tables"][t.name]
        counts = np.asarray(table["mrc_hist_counts"])
        assert np.all(counts >= 0)
        edges = edge_sizes(t.rows, 50)
        if edges[1] < floor:
            assert table["interpolated_below_rows"] == floor
            # hits(k) = hits(floor) k / floor at the edge sizes k <= floor
            hits = np.concatenate([[0.0], np.cumsum(counts)])
            at = (edges > 0) & (edges <= floor)
            slope = hits[at] / edges[at]
            np.testing.assert_allclose(slope, slope[-1], rtol=1e-9, err_msg=t.name)


def test_cli_plan_writes_torchrec_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "plan"
    code = main([
        "plan", "--workload", "tiny", "--batches", "60", "--system", "hbm-lru",
        "--cache-budget", "256KiB", "--cluster-mtbf", "6h", "--time-per-batch", "200ms",
        "--draws", "50", "--torchrec-bins", "20", "--out", str(out),
    ])  # fmt: skip
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "torchrec.json" in printed
    doc = read_torchrec_stats(out / "torchrec.json")
    plan = json.loads((out / "plan.json").read_text())
    assert "torchrec" not in plan  # its own file
    assert doc["batches"] == 60 and doc["sample_rate"] == 1.0
    split = {t["table"]: t["load_factor"] for t in plan["cache"]["per_table"]}
    assert {n: t["load_factor"] for n, t in doc["tables"].items()} == split
    assert all(t["bins"] == 20 for t in doc["tables"].values())
    assert "`torchrec.json`" in (out / "plan.md").read_text()
