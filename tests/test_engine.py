"""The replay engine: system specs, closed-form time and energy, run folders, the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from replay.cli import main
from replay.engine.replay import replay_trace
from replay.engine.systems import resolve_system, system_from_dict
from replay.errors import ConfigError
from replay.system.presets import SYSTEM_PRESETS
from replay.system.spec import apply_overrides
from replay.trace.reader import open_trace
from replay.trace.writer import write_trace_from_arrays

CLOSED_FORM = """
name = "closed"
[tiers.mem]
capacity_bytes = 1e9
read_bw_bytes_per_s = 1e9
write_bw_bytes_per_s = 5e8
read_latency_ns = 100.0
write_latency_ns = 200.0
access_bytes = 64
parallelism = 2
energy_read_pj_per_byte = 10.0
energy_write_pj_per_byte = 20.0
static_power_w = 3.0
[tiers.far]
capacity_bytes = 1e12
read_bw_bytes_per_s = 2e9
write_bw_bytes_per_s = 1e9
access_bytes = 256
energy_read_pj_per_byte = 100.0
energy_write_pj_per_byte = 200.0
[links.bus]
h2d_bw_bytes_per_s = 1e9
d2h_bw_bytes_per_s = 1e9
latency_ns = 1000.0
transfer_cost_ns = 9000.0
energy_pj_per_byte = 5.0
[lookup]
location = "gpu"
[policy]
name = "static"
tier = "mem"
[compute]
seconds_per_batch = 0.001
active_power_w = 100.0
idle_power_w = 10.0
[model]
embedding_dim = 16
"""


@pytest.fixture(scope="module")
def small_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Batch 0 looks up rows 1, 2, 1 and batch 1 row 3 of one table (SGD updates)."""
    out = tmp_path_factory.mktemp("engine") / "small"
    return write_trace_from_arrays(
        out,
        tables=[("t0", 10)],
        batch=np.array([0, 0, 0, 1], dtype=np.uint32),
        table=np.zeros(4, dtype=np.uint16),
        row=np.array([1, 2, 1, 3], dtype=np.uint32),
        batch_size=3,
        workload={"embedding_dim": 16},
    )


@pytest.fixture()
def closed_file(tmp_path: Path) -> Path:
    path = tmp_path / "closed.toml"
    path.write_text(CLOSED_FORM)
    return path


def test_static_tier_closed_form(small_trace: Path, closed_file: Path) -> None:
    system = resolve_system(str(closed_file))
    res = replay_trace(open_trace(small_trace), system)
    cols = res.columns
    # batch 0: 3 row reads + 2 updates (read and write 64 B each)
    assert cols["mem_read_bytes"].tolist() == [5 * 64, 2 * 64]
    assert cols["mem_write_bytes"].tolist() == [2 * 64, 1 * 64]
    t0 = 320 / 1e9 + 128 / 5e8 + (5 * 100 + 2 * 200) * 1e-9 / 2
    assert cols["mem_time_s"][0] == pytest.approx(t0, rel=1e-12)
    assert cols["time_s"][0] == pytest.approx(0.001 + t0, rel=1e-12)
    e0 = (320 * 10 + 128 * 20) * 1e-12 + 3.0 * (0.001 + t0) + 100 * 0.001 + 10 * t0
    assert cols["energy_j"][0] == pytest.approx(e0, rel=1e-12)
    assert cols["distinct_rows"].tolist() == [2, 1]
    assert cols["updates"].tolist() == [2, 1]
    s = res.summary
    assert s["lookups"] == 4 and s["batches"] == 2
    assert s["tiers"]["mem"]["hits"] == 4 and s["tiers"]["mem"]["misses"] == 0
    assert s["time_s"] == pytest.approx(float(cols["time_s"].sum()), rel=1e-12)
    assert s["links"]["bus"] == {"h2d_bytes": 0, "d2h_bytes": 0, "time_s": 0.0}


def test_static_over_link_and_host_pooling(small_trace: Path, closed_file: Path) -> None:
    system = resolve_system(str(closed_file), ["lookup.link=bus"])
    cols = replay_trace(open_trace(small_trace), system).columns
    assert cols["bus_h2d_bytes"].tolist() == [3 * 64, 64]  # GPU gathers rows over the link
    assert cols["bus_d2h_bytes"].tolist() == [2 * 64, 64]  # and sends gradients back
    h2d = 192 / 1e9 + 10e-6
    assert cols["bus_time_s"][0] == pytest.approx(h2d, rel=1e-12)
    assert cols["time_embedding_s"][0] == pytest.approx(max(h2d, cols["mem_time_s"][0]))
    host = resolve_system(str(closed_file), ["lookup.link=bus", "lookup.location=host"])
    cols = replay_trace(open_trace(small_trace), host).columns
    # pooled vectors: batch_size 3 × 1 table × 64 B each way; gather then copy
    assert cols["bus_h2d_bytes"].tolist() == [192, 192]
    assert cols["time_embedding_s"][0] == pytest.approx(
        cols["mem_time_s"][0] + cols["bus_time_s"][0], rel=1e-12
    )


def test_lru_cache_traffic(tmp_path: Path, closed_file: Path) -> None:
    trace = write_trace_from_arrays(
        tmp_path / "t",
        tables=[("t0", 10)],
        batch=np.array([0, 0, 0, 1], dtype=np.uint32),
        table=np.zeros(4, dtype=np.uint16),
        row=np.array([1, 2, 3, 1], dtype=np.uint32),
        batch_size=3,
        workload={"embedding_dim": 16},
    )
    sets = [
        "lookup.link=bus",
        "policy.name=lru",
        "policy.fast_tier=mem",
        "policy.backing_tier=far",
        "policy.capacity_rows=2",
    ]
    res = replay_trace(open_trace(trace), resolve_system(str(closed_file), sets))
    c = res.columns
    # batch 0: 3 misses (row 1 evicted clean); updates {1,2,3}: 2 and 3 resident (dirty),
    # 1 updated in far. batch 1: row 1 misses, evicts dirty row 2 (a write-back).
    assert c["misses"].tolist() == [3, 1]
    assert c["evictions"].tolist() == [1, 1]
    assert c["writebacks"].tolist() == [0, 1]
    assert c["updates_fast"].tolist() == [2, 1]
    assert c["updates_backing"].tolist() == [1, 0]
    assert c["bus_h2d_bytes"].tolist() == [3 * 64, 64]
    assert c["bus_d2h_bytes"].tolist() == [64, 64]
    assert c["far_read_bytes"].tolist() == [3 * 256 + 256, 256]  # 256 B access granularity
    assert c["far_write_bytes"].tolist() == [256, 256]
    assert c["mem_read_bytes"].tolist() == [3 * 64 + 2 * 64, 64 + 64 + 64]
    assert c["mem_hits"].tolist() == [0, 0] and c["far_hits"].tolist() == [3, 1]
    p = res.summary["policy"]
    assert (p["hits"], p["misses"], p["evictions"], p["writebacks"]) == (0, 4, 2, 1)
    assert p["resident_max"] <= 2


def test_every_preset_resolves() -> None:
    assert {"hbm-lru", "hbm-lfu", "hbm-hot", "hbm-belady", "dram", "pmem-host", "chunk"} <= set(
        SYSTEM_PRESETS
    )
    for name in SYSTEM_PRESETS:
        spec = resolve_system(name)
        assert spec.name == name
        for tier in spec.tiers:
            assert tier.source, f"{name}: tier {tier.name} cites no source"


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (["policy.nope=1"], "unknown key 'nope'"),
        (["tiers.hbm.capacity_bytes=-1"], "out of range"),
        (["tiers.hbm.read_bw_bytes_per_s=nan"], "finite"),
        (["policy.name=fifo"], "unknown policy 'fifo'"),
        (["policy.fast_tier=ssd"], "no tier named 'ssd'"),
        (["lookup.location=moon"], "not one of"),
        (["policy.capacity_rows=1.5"], "expected an integer"),
        (["policy.capacity_bytes=1e15"], None),  # fits nothing: checked when sized
        (["model.optimizer=lion"], "not one of"),
        (["compute.seconds_per_batch=0.1"], "both"),
        (["lookup.link=nowhere"], "no link named"),
    ],
)
def test_bad_overrides(sets: list[str], message: str | None) -> None:
    if message is None:
        resolve_system("hbm-lru", sets)
        return
    with pytest.raises(ConfigError, match=message):
        resolve_system("hbm-lru", sets)


def test_overrides_and_extends() -> None:
    spec = resolve_system("hbm-lfu", ["policy.capacity_rows=1000", "model.optimizer=adam"])
    assert spec.policy.name == "lfu" and spec.policy.capacity_rows == 1000
    assert spec.tier("hbm").capacity_bytes == 80e9  # from the device table
    assert apply_overrides({"a": {"b": 1}}, ["a.c=x y"]) == {"a": {"b": 1, "c": "x y"}}
    with pytest.raises(ConfigError, match="unknown key"):
        system_from_dict({"tiers": {"m": {"capacity_bytes": 1, "colour": 2}}})
    with pytest.raises(ConfigError, match="unknown system"):
        resolve_system("no-such-system")


def _stderr_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    return err


def test_cli_run_writes_a_run_folder(
    small_trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    args = ["run", str(small_trace), "--system", "hbm-lru", "--set", "policy.capacity_rows=1"]
    assert main([*args, "--out", str(out), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert sorted(p.name for p in out.iterdir()) == [
        "batches.parquet",
        "checkpoints.parquet",
        "config.json",
        "meta.json",
        "summary.json",
        "workload.json",
    ]
    summary = json.loads((out / "summary.json").read_text())
    assert summary == printed
    for key in ("lookups", "batches", "time_s", "energy_j", "tiers", "links", "policy"):
        assert key in summary
    assert set(summary["policy"]) >= {"name", "hits", "misses", "evictions", "writebacks"}
    assert summary["policy"]["hits"] + summary["policy"]["misses"] == 4
    config = json.loads((out / "config.json").read_text())
    assert config["system"]["policy"]["capacity_rows"] == 1
    assert config["overrides"] == ["policy.capacity_rows=1"]
    meta = json.loads((out / "meta.json").read_text())
    assert len(meta["trace"]["manifest_sha256"]) == 64
    table = pq.read_table(out / "batches.parquet")
    assert table.num_rows == 2 and "hbm_hits" in table.column_names
    # an existing folder is kept unless --force
    assert main([*args, "--out", str(out)]) == 2
    assert "already holds" in _stderr_line(capsys)
    assert main([*args, "--out", str(out), "--force"]) == 0


@pytest.mark.parametrize(
    "case",
    ["missing-trace", "unknown-system", "bad-key", "nan", "bad-toml", "out-is-file", "future"],
)
def test_cli_run_bad_input(
    case: str, small_trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace, system, sets = str(small_trace), "hbm-lru", []
    out = tmp_path / "out"
    if case == "missing-trace":
        trace = str(tmp_path / "nope")
    elif case == "unknown-system":
        system = "hbm-fifo"
    elif case == "bad-key":
        sets = ["policy.colour=red"]
    elif case == "nan":
        sets = ["tiers.dram.read_latency_ns=nan"]
    elif case == "bad-toml":
        bad = tmp_path / "bad.toml"
        bad.write_text("name = [unclosed\n")
        system = str(bad)
    elif case == "out-is-file":
        out.write_text("x")
    elif case == "future":
        copy = tmp_path / "future"
        copy.mkdir()
        for item in small_trace.rglob("*"):
            target = copy / item.relative_to(small_trace)
            if item.is_dir():
                target.mkdir(exist_ok=True)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(item.read_bytes())
        manifest = json.loads((copy / "manifest.json").read_text())
        manifest["format_version"] = 99
        (copy / "manifest.json").write_text(json.dumps(manifest))
        trace = str(copy)
    args = ["run", trace, "--system", system, "--out", str(out)]
    for item in sets:
        args += ["--set", item]
    assert main(args) == 2
    assert _stderr_line(capsys).startswith("replay: error:")
    if case != "out-is-file":
        assert not out.exists()
    assert not list(tmp_path.glob(".out.partial*"))


def test_run_is_deterministic(small_trace: Path, tmp_path: Path) -> None:
    for name in ("a", "b"):
        assert main(["run", str(small_trace), "-s", "hbm-hot", "-o", str(tmp_path / name)]) == 0
    for file in ("summary.json", "config.json", "batches.parquet"):
        assert (tmp_path / "a" / file).read_bytes() == (tmp_path / "b" / file).read_bytes()


def test_mrc_matches_lru_runs_on_a_generated_trace(tmp_path: Path) -> None:
    import replay
    from replay.analysis.mrc import mrc_trace

    path = replay.generate("tiny", tmp_path / "tiny", batches=40)
    trace = open_trace(path)
    sizes = [10, 300, 3000]
    curve = mrc_trace(trace, sizes=sizes)
    for size, ratio in zip(sizes, curve.miss_ratios, strict=True):
        system = resolve_system("hbm-lru", [f"policy.capacity_rows={size}"])
        misses = replay_trace(trace, system).summary["policy"]["misses"]
        assert misses == round(float(ratio) * trace.num_lookups)
    belady = resolve_system("hbm-belady", ["policy.capacity_rows=300"])
    lfu = resolve_system("hbm-lfu", ["policy.capacity_rows=300"])
    best = replay_trace(trace, belady).summary["policy"]["misses"]
    assert best <= replay_trace(trace, lfu).summary["policy"]["misses"]
    assert best <= round(float(curve.miss_ratios[1]) * trace.num_lookups)


def _many_range_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """40 batches over two tables, batches 7 and 8 without lookups, in row groups of
    about 3 batches, so the replay streams it in many ranges."""
    import replay.trace.format as trace_format

    monkeypatch.setattr(trace_format, "ROW_GROUP_TARGET_LOOKUPS", 50)
    rng = np.random.default_rng(5)
    batches, tables = [], []
    for b in range(40):
        if b in (7, 8):
            continue
        for t, n in ((0, 12), (1, 5)):
            batches.append(np.full(n, b))
            tables.append(np.full(n, t))
    batch = np.concatenate(batches).astype(np.uint32)
    table = np.concatenate(tables).astype(np.uint16)
    cards = np.array([60, 9])[table]
    row = (rng.random(len(batch)) ** 2 * cards).astype(np.uint32)
    return write_trace_from_arrays(
        tmp_path / "ranges",
        tables=[("a", 60), ("b", 9)],
        batch=batch,
        table=table,
        row=row,
        batch_size=17,
        workload={"embedding_dim": 16},
    )


@pytest.mark.parametrize(
    ("system", "sets"),
    [
        ("hbm-lru", ["policy.capacity_rows=20"]),
        # check-n-run observes every range: it waits for the range's distinct counts
        ("pmem-host", []),
    ],
)
def test_statistics_in_the_replay_pass_change_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, system: str, sets: list[str]
) -> None:
    from replay.analysis.stats import inspect_trace
    from replay.trace.stream import iter_batch_ranges

    path = _many_range_trace(tmp_path, monkeypatch)
    assert len(list(iter_batch_ranges(open_trace(path)))) > 5
    spec = resolve_system(system, sets)
    plain = replay_trace(open_trace(path), spec)
    fused = replay_trace(open_trace(path), spec, inspect=True)
    assert plain.workload is None
    assert fused.workload == inspect_trace(path)
    assert plain.columns.keys() == fused.columns.keys()
    for name, column in plain.columns.items():
        np.testing.assert_array_equal(column, fused.columns[name], err_msg=name)
    assert json.dumps(plain.summary, sort_keys=True) == json.dumps(fused.summary, sort_keys=True)
    assert int(fused.columns["distinct_rows"][7]) == 0


@pytest.mark.parametrize("capacity", [200, 1_000, 30_000])
@pytest.mark.parametrize("inspect", [False, True])
def test_the_lru_order_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capacity: int, inspect: bool
) -> None:
    """The LRU on each batch's distinct lookups in order (`lru_order_kernel`, the ranges'
    `DistinctOrder` made by the reader) gives the run the per-lookup kernel gives, over
    40 ranges of a batch each: at 1,000 rows it evicts, at 200 (< 384 lookups a batch)
    every range takes the per-lookup kernel, at 30,000 (more than the 25,324 rows)
    nothing is evicted."""
    import replay
    import replay.policies.lru as lru
    import replay.trace.format as trace_format

    monkeypatch.setattr(trace_format, "ROW_GROUP_TARGET_LOOKUPS", 300)
    path = replay.generate("tiny", tmp_path / "tiny", batches=40)
    spec = resolve_system("hbm-lru", [f"policy.capacity_rows={capacity}"])
    calls = []
    kernel = lru.lru_order_kernel
    monkeypatch.setattr(lru, "lru_order_kernel", lambda *a: calls.append(1) or kernel(*a))
    ordered = replay_trace(open_trace(path), spec, inspect=inspect)
    assert len(calls) == (41 if capacity > 384 else 1)  # the warm-up's call, then ranges
    monkeypatch.setattr(lru.LRUPolicy, "takes_order", False)
    plain = replay_trace(open_trace(path), spec, inspect=inspect)
    assert len(calls) == (41 if capacity > 384 else 1)
    assert ordered.workload == plain.workload
    for name, column in plain.columns.items():
        np.testing.assert_array_equal(column, ordered.columns[name], err_msg=name)
    assert json.dumps(plain.summary, sort_keys=True) == json.dumps(ordered.summary, sort_keys=True)
    assert (ordered.summary["policy"]["evictions"] > 0) == (capacity < 30_000)


def test_cli_run_workload_json_is_inspect_output(tmp_path: Path, small_trace: Path) -> None:
    from replay.analysis.stats import inspect_trace

    out = tmp_path / "run"
    assert main(["run", str(small_trace), "--system", "hbm-lru", "--out", str(out)]) == 0
    want = json.loads(json.dumps(inspect_trace(small_trace)))
    written = json.loads((out / "workload.json").read_text())
    assert written.pop("schema_version") == 1 and written == want
