"""`torchrec.json` (`replay.plan.torchrec`) read by the real TorchRec (torchrec 1.8.0,
torch 2.13.0 CPU: the `torchrec` extra, installed by CI): its histogram is the LRU stack
distances of each batch's unique ids with the cold misses in the last bin; TorchRec's own
`EmbeddingOffloadStats.expected_miss_rate(load_factor) x expected_lookups` is the exact
LRU's fetches per batch at the plan's load factor and within one bin elsewhere;
`choose_bins` puts an edge on the cache whatever float32 does; the file round-trips;
`parameter_constraints` builds TorchRec's own objects, or says how to install it when
torch is missing (its absence simulated)."""

from __future__ import annotations

import json
import math
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.analysis.stack import reference_stack_distances
from replay.cli import main
from replay.errors import ConfigError, InputError
from replay.plan.torchrec import (
    MAX_BINS,
    SPAN_BATCHES,
    VERSION,
    TorchRecArgumentError,
    TorchRecFileError,
    choose_bins,
    edge_sizes,
    parameter_constraints,
    read_torchrec_stats,
    torchrec_cacheability,
    torchrec_stats,
)
from replay.plan.torchrec_unique import reference_unique_lru_misses
from replay.trace.keys import table_offsets
from replay.trace.stream import iter_batch_ranges
from replay.workload.onthefly import GeneratedTrace
from replay.workload.spec import TableSpec, WorkloadSpec

with warnings.catch_warnings():  # fbgemm-gpu's imports warn about its own module names
    warnings.simplefilter("ignore", DeprecationWarning)
    import torch
    from torchrec.distributed.planner.shard_estimators import EmbeddingOffloadStats
    from torchrec.distributed.planner.types import ParameterConstraints
    from torchrec.distributed.types import CacheAlgorithm, CacheParams

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
FACTORS = {"small": 0.5, "even": 0.25, "odd": 0.013, "big": 0.1234}


def stats_of(table: dict[str, Any]) -> EmbeddingOffloadStats:
    return EmbeddingOffloadStats(
        cacheability=table["cacheability"],
        expected_lookups=table["expected_lookups"],
        mrc_hist_counts=torch.tensor(table["mrc_hist_counts"], dtype=torch.float64),
        height=table["height"],
    )


def torchrec_miss(table: dict[str, Any], clf: np.ndarray) -> np.ndarray:
    """TorchRec's own reading at each load factor (`estimate_cache_miss_rate`, as
    `expected_miss_rate` calls it: cache sizes float32)."""
    stats = stats_of(table)
    sizes = torch.tensor(np.asarray(clf, dtype=np.float64) * table["height"], dtype=torch.float32)
    return EmbeddingOffloadStats.estimate_cache_miss_rate(sizes, stats.hist, stats.bins).numpy()


def per_table_batches(spec: WorkloadSpec) -> dict[str, list[list[int]]]:
    """Each table's table-local keys, batch by batch, in trace order."""
    offsets = table_offsets(np.array([t.rows for t in spec.tables]))
    out: dict[str, list[list[int]]] = {t.name: [] for t in spec.tables}
    for r in iter_batch_ranges(GeneratedTrace(spec), with_updates=False):
        for b in range(r.batches):
            keys = np.asarray(r.keys[r.bounds[b] : r.bounds[b + 1]], dtype=np.int64)
            for i, t in enumerate(spec.tables):
                mine = keys[(keys >= offsets[i]) & (keys < offsets[i + 1])] - offsets[i]
                out[t.name].append(mine.tolist())
    return out


def unique_stream(batches: list[list[int]]) -> list[int]:
    return [k for batch in batches for k in dict.fromkeys(batch)]


@pytest.fixture(scope="module")
def batches() -> dict[str, list[list[int]]]:
    return per_table_batches(SPEC)


@pytest.fixture(scope="module")
def exact_misses(batches: dict[str, list[list[int]]]) -> dict[str, np.ndarray]:
    """Each table's misses of an LRU of k rows fed each batch's unique ids, k = 0..rows
    (from its stack distances: a cache of k rows misses every distance >= k)."""
    out = {}
    for t in SPEC.tables:
        d = reference_stack_distances(unique_stream(batches[t.name]))
        finite = np.array([x for x in d if x is not None], dtype=np.int64)
        cold = sum(x is None for x in d)
        counts = np.bincount(finite, minlength=t.rows)
        at_least = np.concatenate([np.cumsum(counts[::-1])[::-1], [0]])  # #{d >= k}
        out[t.name] = cold + at_least
    return out


@pytest.fixture(scope="module", params=[100, 7])
def export(request: pytest.FixtureRequest) -> dict[str, Any]:
    return torchrec_stats(GeneratedTrace(SPEC), bins=request.param, load_factors=FACTORS)


def test_the_histogram_is_the_unique_ids_stack_distances_with_cold_misses_last(
    export: dict[str, Any], batches: dict[str, list[list[int]]]
) -> None:
    """Bin b < n - 1 holds the reuses of each batch's unique ids with b H / n <= d < (b + 1)
    H / n (an explicit LRU stack); the last bin the rest, cold misses included."""
    for t in SPEC.tables:
        table = export["tables"][t.name]
        stream = unique_stream(batches[t.name])
        distances = reference_stack_distances(stream)
        finite = np.array([d for d in distances if d is not None], dtype=np.int64)
        n, height = table["bins"], table["height"]
        expected = np.bincount(finite * n // height, minlength=n)  # b <= d n / H < b + 1
        expected[-1] += sum(d is None for d in distances)
        assert table["mrc_hist_counts"] == expected.tolist(), t.name
        assert all(isinstance(c, int) for c in table["mrc_hist_counts"])
        assert sum(table["mrc_hist_counts"]) == len(stream)
        cold = sum(d is None for d in distances) / len(stream)
        assert table["cold_miss_ratio"] == pytest.approx(cold, abs=1e-15)
        assert table["lookups"] == sum(len(b) for b in batches[t.name])
        assert table["pooling_factor"] == table["lookups"] / (SPEC.batches * SPEC.batch_size)
        assert table["expected_lookups"] == pytest.approx(len(stream) / SPEC.batches, rel=1e-12)


def test_torchrec_reads_the_exact_lrus_fetches_at_the_plans_load_factor(
    export: dict[str, Any], batches: dict[str, list[list[int]]]
) -> None:
    """TorchRec's estimate of cache fetches per batch, computed by TorchRec, equals an
    OrderedDict LRU of floor(load factor x rows) rows fed each batch's unique ids."""
    for t in SPEC.tables:
        table = export["tables"][t.name]
        factor = table["load_factor"]
        rows = math.floor(factor * table["height"] + 1e-9)
        want = reference_unique_lru_misses(batches[t.name], rows) / SPEC.batches
        stats = stats_of(table)
        got = stats.expected_miss_rate(factor) * stats.expected_lookups
        assert got == pytest.approx(want, rel=1e-9), t.name


def _ratio(misses: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Our miss ratio at real cache sizes (a cache of s rows holds floor(s) rows)."""
    k = np.clip(np.floor(sizes + 1e-9).astype(np.int64), 0, len(misses) - 1)
    return misses[k] / misses[0]


def test_torchrec_reads_our_curve_within_one_bin_at_every_load_factor(
    export: dict[str, Any], exact_misses: dict[str, np.ndarray]
) -> None:
    """At f below the last edge TorchRec reads our miss ratio at a size between (f - 1/n) H
    and (f + 1/n) H (a cache of s rows holds floor(s)); 1 below one row."""
    for t in SPEC.tables:
        table = export["tables"][t.name]
        height, n = table["height"], table["bins"]
        misses = exact_misses[t.name]
        edges = np.arange(n + 1) * height / n
        clf = np.unique(
            np.concatenate([
                np.linspace(0.0, 1.0, 20_001)[1:],
                edge_sizes(height, n)[1:] / height,
                np.clip((edges + 1) / height, 0, 1),  # TorchRec's steps ...
                np.clip((edges + 1) / height * (1 - 1e-9), 0, 1),  # ... either side
            ])
        )  # fmt: skip
        inside = clf[(clf > 0) & (clf * height - 1 < edges[n - 1] - 1e-6 * height)]
        got = torchrec_miss(table, inside)
        low = _ratio(misses, (inside + 1.0 / n) * height)  # a bin larger misses no more
        high = _ratio(misses, (inside - 1.0 / n) * height)  # a bin smaller misses no less
        assert np.all(got >= low - 1e-6) and np.all(got <= high + 1e-6), t.name
        assert torchrec_miss(table, np.array([0.5 / height]))[0] == 1.0
        # f = 1 (a whole table is `fused`): 0 when e_(n-1) <= H - 1, else the cold misses
        at_one = 0.0 if n <= height else table["cold_miss_ratio"]
        assert torchrec_miss(table, np.array([1.0]))[0] == pytest.approx(at_one, abs=1e-7)


@settings(max_examples=300, deadline=None)
@given(
    height=st.integers(2, 60_000_000),
    share=st.floats(1e-6, 0.999),
    at_least=st.sampled_from([1, 100, 1000]),
)
def test_choose_bins_puts_an_edge_on_the_cache_as_torchrec_computes_it(
    height: int, share: float, at_least: int
) -> None:
    """Where `choose_bins` found an edge on the cache (always for tables of up to 10^6
    rows and caches of up to 2^20 rows), TorchRec (float32) reads the edge size k_j = k at
    f = k / H; else the first edge above, within one bin (two past 2^21 rows, where float32
    moves f H - 1 by a row or more); a bin is at most 5% of the cache; the last edge lies
    above it."""
    from replay.plan.torchrec import _edge_at

    rows = max(1, min(height - 1, round(share * height)))
    n = choose_bins(height, float(rows), at_least)
    assert at_least <= n <= MAX_BINS
    if n == MAX_BINS:
        return
    assert height / n <= 0.05 * rows + 1e-9
    bins = torch.linspace(0, height, n + 1)
    j = int(torch.bucketize(torch.tensor(rows / height * height) - 1, bins, right=True))
    assert 1 <= j <= n - 1  # the cold misses in the last bin are read
    found = bool(_edge_at(height, float(rows), np.array([n]))[0])
    if height <= MAX_BINS and rows <= 1 << 20:
        assert found, (height, rows, n)
    read = int(edge_sizes(height, n)[j])
    if found:
        assert read == rows, (height, rows, n, j)
    else:  # the first edge above; past 2^21 rows float32 may step over one more
        slack = height / n if rows > 1 << 21 else 0.0
        assert rows <= read <= rows + height / n + 1 + slack, (height, rows, n, j)


def test_choose_bins_without_a_cache_keeps_the_asked_bins() -> None:
    assert choose_bins(1000, None, 100) == 100
    assert choose_bins(1000, 1000.0, 7) == 7  # fits whole: `fused`, no statistics read
    assert choose_bins(1000, 0.0, 7) == 7
    assert choose_bins(40_000_000, 1.0, 100) == MAX_BINS  # a bin of 40 rows at most


def test_edge_sizes_are_the_edges_rounded_up() -> None:
    assert edge_sizes(1000, 100).tolist() == list(range(0, 1001, 10))
    assert edge_sizes(1237, 100)[:4].tolist() == [0, 13, 25, 38]  # 12.37, 24.74, 37.11
    assert edge_sizes(37, 100)[-1] == 37 and set(edge_sizes(37, 100)) == set(range(38))
    assert edge_sizes(5, 1).tolist() == [0, 5]


def test_cacheability_is_the_area_under_torchrecs_reading(export: dict[str, Any]) -> None:
    grid = (np.arange(200_000) + 0.5) / 200_000  # midpoints
    for name, table in export["tables"].items():
        area = float(torchrec_miss(table, grid).astype(np.float64).mean())
        assert table["cacheability"] == pytest.approx(area, abs=5e-5), name
    assert torchrec_cacheability([0, 0], 10) == 0.0  # no counts: TorchRec reads no misses
    assert torchrec_cacheability([3], 1) == pytest.approx(1.0)
    assert torchrec_cacheability([5, 0], 2) == pytest.approx(0.5)


def test_the_document_names_its_format_and_method(export: dict[str, Any]) -> None:
    assert export["format"] == "replay-torchrec-cache-stats" and export["version"] == VERSION
    assert export["batches"] == SPEC.batches and export["sample_rate"] == 1.0
    assert export["batch_size"] == SPEC.batch_size
    assert export["method"] == "exact stack distances of each batch's unique ids"
    assert list(export["tables"]) == [t.name for t in SPEC.tables]
    for t in SPEC.tables:
        table = export["tables"][t.name]
        assert table["height"] == t.rows and len(table["mrc_hist_counts"]) == table["bins"]
        assert table["load_factor"] == FACTORS[t.name]


def test_the_file_round_trips_and_bad_files_are_refused(
    export: dict[str, Any], tmp_path: Path
) -> None:
    path = tmp_path / "torchrec.json"
    path.write_text(json.dumps(export, indent=2) + "\n")
    assert read_torchrec_stats(path) == export
    assert read_torchrec_stats(tmp_path) == export  # a plan folder
    bad = json.loads(json.dumps(export))
    bad["tables"]["odd"]["mrc_hist_counts"].pop()
    path.write_text(json.dumps(bad))
    with pytest.raises(InputError, match="mrc_hist_counts must hold"):
        read_torchrec_stats(path)
    path.write_text(json.dumps({**export, "version": 1}))
    with pytest.raises(InputError, match="version 1; this replay reads 2"):
        read_torchrec_stats(path)
    path.write_text(json.dumps({"format": "something else"}))
    with pytest.raises(InputError, match="not a replay-torchrec-cache-stats"):
        read_torchrec_stats(path)
    with pytest.raises(InputError, match="no such file"):
        read_torchrec_stats(tmp_path / "missing.json")
    with pytest.raises(ConfigError, match="bins"):
        torchrec_stats(GeneratedTrace(SPEC), bins=0)


def test_bad_input_is_one_line_and_a_value_error(export: dict[str, Any], tmp_path: Path) -> None:
    """A plan folder without torchrec.json, and a kernel TorchRec lacks: one line, a
    ReplayError (exit 2 on the command line) that is also a ValueError."""
    (tmp_path / "plan").mkdir()
    with pytest.raises(ValueError) as info:
        parameter_constraints(tmp_path / "plan")
    assert isinstance(info.value, TorchRecFileError) and isinstance(info.value, InputError)
    message = str(info.value)
    assert "no such file" in message and "torchrec.json" in message and "\n" not in message
    (tmp_path / "torchrec.json").write_text(json.dumps(export))
    for kernels, why in [
        (["fused_uvm_cache"], "'fused_uvm_cache' is not one of TorchRec's kernels"),
        ("fused", "give a non-empty list"),
        ([], "give a non-empty list"),
    ]:
        with pytest.raises(ValueError) as info:
            parameter_constraints(tmp_path, compute_kernels=kernels)
        assert isinstance(info.value, TorchRecArgumentError), kernels
        assert why in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(TorchRecArgumentError, match="algorithm 'fifo'"):
        parameter_constraints(tmp_path, algorithm="fifo")
    with pytest.raises(TorchRecArgumentError, match=r"load_factors\['odd'\] = 1.5"):
        parameter_constraints(tmp_path, load_factors={"odd": 1.5})


def test_without_torchrec_parameter_constraints_says_how_to_get_it(
    export: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch is installed here: its absence is simulated (an import of it raises)."""
    path = tmp_path / "torchrec.json"
    path.write_text(json.dumps(export))
    for name in [m for m in sys.modules if m.split(".")[0] in ("torch", "torchrec")]:
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(ConfigError) as info:
        parameter_constraints(path)
    message = str(info.value)
    assert "pip install --no-deps torchrec==1.8.0" in message and "\n" not in message


def test_parameter_constraints_are_torchrecs_own_objects(
    export: dict[str, Any], tmp_path: Path
) -> None:
    import replay

    doc = json.loads(json.dumps(export))
    doc["tables"]["small"]["load_factor"] = 1.0  # fits whole
    doc["tables"]["big"]["load_factor"] = 0.0  # no cache rows
    (tmp_path / "torchrec.json").write_text(json.dumps(doc))
    got = replay.parameter_constraints(
        tmp_path, algorithm="lfu", load_factors={"odd": 0.5}, sharding_types=["table_wise"]
    )
    assert list(got) == [t.name for t in SPEC.tables]
    assert all(type(c) is ParameterConstraints for c in got.values())
    assert got["small"].compute_kernels == ["fused"] and got["small"].cache_params is None
    assert got["big"].compute_kernels == ["fused_uvm"] and got["big"].cache_params is None
    for name in ("even", "odd"):
        table, c = doc["tables"][name], got[name]
        assert c.compute_kernels == ["fused_uvm_caching"] and c.sharding_types == ["table_wise"]
        assert c.pooling_factors == [table["pooling_factor"]]
        cache = c.cache_params
        assert type(cache) is CacheParams and cache.algorithm is CacheAlgorithm.LFU
        assert cache.load_factor == {"even": 0.25, "odd": 0.5}[name]
        stats = cache.stats
        assert type(stats) is EmbeddingOffloadStats
        assert stats.height == table["height"] and stats.cacheability == table["cacheability"]
        assert stats.expected_lookups == table["expected_lookups"]
        assert stats.hist.dtype == torch.float64
        assert stats.hist.tolist() == table["mrc_hist_counts"]
    quant = replay.parameter_constraints(tmp_path, compute_kernels=["quant_uvm_caching"])
    assert quant["small"].compute_kernels == ["quant"] and quant["big"].compute_kernels == [
        "quant_uvm"
    ]
    assert quant["odd"].compute_kernels == ["quant_uvm_caching"]


def _distinct_per_batch(source: Any) -> np.ndarray:
    """Sum over batches of each table's distinct rows, batch by batch with np.unique."""
    offsets = table_offsets(np.asarray(source.table_rows, dtype=np.int64))
    per_table = np.zeros(len(offsets) - 1)
    for r in iter_batch_ranges(source, with_updates=False):
        for b in range(r.batches):
            keys = np.unique(np.asarray(r.keys[r.bounds[b] : r.bounds[b + 1]], dtype=np.int64))
            per_table += np.diff(np.searchsorted(keys, offsets))
    return per_table


class _NoSpec:
    """A sampled source without its workload spec (the SHARDS path)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.table_rows = inner.table_rows
        self.table_names = inner.table_names
        self.num_batches = inner.num_batches
        self.sample_rate = inner.sample_rate

    def generated_ranges(self, *args: Any, **kwargs: Any) -> Any:
        return self._inner.generated_ranges(*args, **kwargs)


def test_a_sampled_workload_reads_che_above_the_exact_head() -> None:
    """At R < 1 (a sampled workload: independent references) the curve is the full
    stream's exact head below its capacity and Che's approximation at batch granularity
    above it; TorchRec reads the exact LRU's fetches within 3% at each load factor; the
    unique ids per batch come from the full stream's first SPAN_BATCHES batches."""
    from replay.workload.sampled import open_sampled_workload

    spec = SPEC.with_overrides(batches=400, reuse=0.0, drift=0.0)  # neither can be sampled
    factors = {"small": 0.5, "even": 0.4, "odd": 0.8, "big": 0.9}
    doc = torchrec_stats(open_sampled_workload(spec, 0.25), bins=50, load_factors=factors)
    assert doc["sample_rate"] == 0.25 and "Che's approximation" in doc["method"]
    assert doc["few_sampled_rows"] == []
    first = _distinct_per_batch(GeneratedTrace(spec.with_overrides(batches=SPAN_BATCHES)))
    batches = per_table_batches(spec)
    for i, t in enumerate(spec.tables):
        table = doc["tables"][t.name]
        assert table["expected_lookups"] == pytest.approx(first[i] / SPAN_BATCHES, rel=1e-12)
        assert "sampled_rows" not in table and table["exact_below_rows"] > 0
        rows = math.floor(factors[t.name] * t.rows + 1e-9)
        want = reference_unique_lru_misses(batches[t.name], rows) / spec.batches
        stats = stats_of(table)
        got = stats.expected_miss_rate(table["load_factor"]) * stats.expected_lookups
        assert got == pytest.approx(want, rel=0.03), t.name


def test_a_sampled_source_without_a_spec_reads_shards() -> None:
    from replay.workload.sampled import open_sampled_workload

    spec = SPEC.with_overrides(batches=200, reuse=0.0, drift=0.0)
    doc = torchrec_stats(_NoSpec(open_sampled_workload(spec, 0.5)), bins=50)
    assert doc["method"].startswith("SHARDS at R = 0.5") and doc["batch_size"] is None
    for t in spec.tables:
        table = doc["tables"][t.name]
        assert 0 < table["sampled_rows"] <= t.rows
        assert table["interpolated_below_rows"] == 16  # 16 (1 - R) / R
        assert sum(table["mrc_hist_counts"]) == round(table["expected_lookups"] * 200)


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
    assert doc["row_bytes"] == plan["row_bytes"]
    assert doc["cache_budget_bytes"] == plan["cache"]["budget_bytes"]
    split = {t["table"]: t["load_factor"] for t in plan["cache"]["per_table"]}
    assert {n: t["load_factor"] for n, t in doc["tables"].items()} == split
    for t in doc["tables"].values():
        assert t["bins"] == choose_bins(t["height"], t["load_factor"] * t["height"], 20)
    assert "`torchrec.json`" in (out / "plan.md").read_text()


def test_replay_imports_no_torch_at_module_level() -> None:
    """torch is an extra: no module of replay imports torch, torchrec or fbgemm_gpu at
    module level (TYPE_CHECKING blocks aside); those that use them import them inside
    functions."""
    import ast

    heavy = {"torch", "torchrec", "fbgemm_gpu"}
    root = Path(__file__).resolve().parent.parent / "replay"
    bad = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                continue
            for sub in ast.walk(node):
                if isinstance(sub, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                    break
                names = []
                if isinstance(sub, ast.Import):
                    names = [a.name for a in sub.names]
                elif isinstance(sub, ast.ImportFrom) and sub.module and not sub.level:
                    names = [sub.module]
                bad += [f"{path.relative_to(root)}: {n}" for n in names if n.split(".")[0] in heavy]
    assert not bad, bad
