"""`replay compare` and `replay sweep`: golden tables, worker independence, bad input."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import replay
from replay.cli import main
from replay.errors import ConfigError, TraceError
from replay.runs.compare import (
    COMPARE_COLUMNS,
    METRIC_COLUMNS,
    iter_runs,
    parse_grid,
    point_folder,
    resolve_sweep,
    resolve_systems,
    split_list,
    value_label,
)

SYSTEMS = ["hbm-lru", "dram", "pmem-host"]
RUN_FILES = [
    "batches.parquet",
    "checkpoints.parquet",
    "config.json",
    "meta.json",
    "summary.json",
    "workload.json",
]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return replay.generate("tiny", tmp_path_factory.mktemp("trace") / "tiny", batches=20)


def _summary(folder: Path) -> dict:
    return json.loads((folder / "summary.json").read_text())


def _stderr_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("replay: error: ")
    return err


def test_compare_golden_and_independent_of_workers(
    tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outs = {}
    for workers in (1, 2):
        out = tmp_path / f"w{workers}"
        args = ["compare", str(tiny), "--systems", ",".join(SYSTEMS), "--out", str(out)]
        assert main([*args, "--workers", str(workers), "--json"]) == 0
        printed = json.loads(capsys.readouterr().out)
        outs[workers] = out
    a, b = outs[1], outs[2]
    assert sorted(p.name for p in a.iterdir()) == sorted(
        ["comparison.parquet", "compare.json", *SYSTEMS]
    )
    assert not list(tmp_path.glob(".*"))  # no temporary folder left behind
    # byte-identical whatever the number of workers
    for name in ("comparison.parquet", "compare.json"):
        assert (a / name).read_bytes() == (b / name).read_bytes()
    for system in SYSTEMS:
        assert sorted(p.name for p in (a / system).iterdir()) == RUN_FILES
        for name in ("summary.json", "config.json", "batches.parquet", "checkpoints.parquet"):
            assert (a / system / name).read_bytes() == (b / system / name).read_bytes()

    table = pq.read_table(a / "comparison.parquet")
    assert table.column_names == [name for name, _ in COMPARE_COLUMNS]
    rows = table.to_pylist()
    assert rows == printed
    # golden values of the tiny trace (20 batches of 64 samples, 6 lookups per sample)
    assert [r["system"] for r in rows] == SYSTEMS
    assert [r["lookups"] for r in rows] == [7680, 7680, 7680]
    assert [r["batches"] for r in rows] == [20, 20, 20]
    assert [r["misses"] for r in rows] == [1496, 0, 0]
    assert rows[0]["hit_ratio"] == 1 - 1496 / 7680
    assert [r["hit_ratio"] for r in rows[1:]] == [None, None]  # no cache: no hit ratio
    assert [r["checkpoint_strategy"] for r in rows[:2]] == ["none", "none"]
    assert [r["goodput_mean"] for r in rows] == [None, None, None]
    assert rows[0]["speedup"] == 1.0 and rows[0]["energy_saving"] == 0.0
    summaries = [_summary(a / s) for s in SYSTEMS]
    for row, summary in zip(rows, summaries, strict=True):
        assert row["time_s"] == summary["time_s"]
        assert row["energy_j"] == summary["energy_j"]
        assert row["speedup"] == summaries[0]["time_s"] / summary["time_s"]
        assert row["energy_saving"] == 1 - summary["energy_j"] / summaries[0]["energy_j"]
        for part in ("compute_s", "embedding_exposed_s", "checkpoint_s", "other_s"):
            assert row[f"time_{part}"] == summary["time"][part]
        assert row["checkpoint_strategy"] == summary["checkpoint"]["strategy"]
        assert row["checkpoint_overhead"] == summary["checkpoint"]["overhead"]
        assert row["checkpoint_bytes_written"] == summary["checkpoint"]["bytes_written"]
    assert rows[1]["speedup"] < 1.0  # host DDR4 pooling is slower than the HBM cache here

    document = json.loads((a / "compare.json").read_text())
    assert document["kind"] == "compare" and document["trace"] == str(tiny)
    assert [s["name"] for s in document["systems"]] == SYSTEMS
    assert document["overrides"] == []

    # each run folder is exactly what `replay run` writes
    single = tmp_path / "single"
    assert main(["run", str(tiny), "--system", "dram", "--out", str(single)]) == 0
    for name in ("summary.json", "config.json", "batches.parquet"):
        assert (single / name).read_bytes() == (a / "dram" / name).read_bytes()


def test_sweep_cross_product(
    tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "sweep"
    sets = ["failures.mtbf_s=3600", "failures.horizon_s=86400"]
    args = ["sweep", str(tiny), "--system", "hbm-lru", "--out", str(out), "--workers", "2"]
    args += ["--grid", "policy.capacity_rows=100,1000,10000", "--grid", "policy.name=lru,lfu"]
    for item in sets:
        args += ["--set", item]
    assert main(args) == 0
    assert "sweep of hbm-lru" in capsys.readouterr().out
    points = [(r, p) for r in (100, 1000, 10000) for p in ("lru", "lfu")]
    names = [f"{i}-policy.capacity_rows-{r}+policy.name-{p}" for i, (r, p) in enumerate(points)]
    assert sorted(p.name for p in out.iterdir()) == sorted(["sweep.json", "sweep.parquet", *names])
    table = pq.read_table(out / "sweep.parquet")
    grid_columns = ["policy.capacity_rows", "policy.name"]
    assert table.column_names == ["point", *grid_columns, *(n for n, _ in METRIC_COLUMNS)]
    rows = table.to_pylist()
    assert [r["point"] for r in rows] == names
    capacities = [r["policy.capacity_rows"] for r in rows]
    assert capacities == [c for c in ("100", "1000", "10000") for _ in range(2)]
    assert [r["policy.name"] for r in rows] == ["lru", "lfu"] * 3
    for row, name in zip(rows, names, strict=True):
        summary = _summary(out / name)
        assert row["misses"] == summary["policy"]["misses"]
        assert row["goodput_mean"] == summary["failures"]["goodput_mean"] is not None
        config = json.loads((out / name / "config.json").read_text())
        assert config["system"]["policy"]["capacity_rows"] == int(row["policy.capacity_rows"])
        assert config["system"]["policy"]["name"] == row["policy.name"]
        assert config["overrides"] == [
            *sets,
            f"policy.capacity_rows={row['policy.capacity_rows']}",
            f"policy.name={row['policy.name']}",
        ]
    misses = [r["misses"] for r in rows]
    assert misses[0] > misses[2] > misses[4]  # a bigger cache misses less
    document = json.loads((out / "sweep.json").read_text())
    assert document["kind"] == "sweep" and document["system"]["name"] == "hbm-lru"
    assert document["grid"] == {
        "policy.capacity_rows": [100, 1000, 10000],
        "policy.name": ["lru", "lfu"],
    }
    assert [p["folder"] for p in document["points"]] == names
    assert document["points"][3]["values"] == {
        "policy.capacity_rows": 1000,
        "policy.name": "lfu",
    }


def test_force_replaces_only_an_earlier_output(
    tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cmp"
    args = ["compare", str(tiny), "--systems", "dram", "--workers", "1", "--out", str(out)]
    assert main(args) == 0
    assert main(args) == 2
    assert "already holds" in _stderr_line(capsys)
    assert main([*args, "--force"]) == 0
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    sweep = ["sweep", str(tiny), "-s", "dram", "--grid", "model.optimizer=sgd", "-j", "1"]
    assert main([*sweep, "--out", str(other), "--force"]) == 2
    assert "holds other files" in _stderr_line(capsys)
    assert (other / "notes.txt").read_text() == "keep me"
    # a sweep may replace an earlier compare output
    assert main([*sweep, "--out", str(out), "--force"]) == 0
    assert (out / "sweep.json").is_file() and not (out / "compare.json").exists()


@pytest.mark.parametrize(
    "case",
    [
        "unknown-system",
        "duplicate-system",
        "duplicate-name",
        "unsafe-name",
        "empty-system",
        "bad-set",
        "workers-0",
        "missing-trace",
        "out-is-file",
        "grid-bad-key",
        "grid-bad-value",
        "grid-cache-too-big",
        "grid-no-equals",
        "grid-empty-value",
        "grid-repeated-value",
        "grid-key-twice",
        "grid-and-set",
    ],
)
def test_bad_input(
    case: str, tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    trace = str(tiny)
    systems = "hbm-lru,dram"
    grid = ["policy.capacity_rows=100,1000"]
    extra: list[str] = []
    if case == "unknown-system":
        systems = "hbm-lru,hbm-fifo"
    elif case == "duplicate-system":
        systems = "dram,hbm-lru,dram"
    elif case == "duplicate-name":
        file = tmp_path / "mine.toml"
        file.write_text('name = "dram"\nextends = "dram"\n')
        systems = f"dram,{file}"
    elif case == "unsafe-name":
        file = tmp_path / "mine.toml"
        file.write_text('name = "../escape"\nextends = "dram"\n')
        systems = str(file)
    elif case == "empty-system":
        systems = "dram,,hbm-lru"
    elif case == "bad-set":
        extra = ["--set", "policy.colour=red"]
    elif case == "workers-0":
        extra = ["--workers", "0"]
    elif case == "missing-trace":
        trace = str(tmp_path / "nope")
    elif case == "out-is-file":
        out.write_text("x")
    elif case == "grid-bad-key":
        grid = ["policy.capacity_rows=100", "policy.colour=red,blue"]
    elif case == "grid-bad-value":
        grid = ["policy.capacity_rows=100,-5"]
    elif case == "grid-cache-too-big":  # checked against the trace's rows before running
        grid = ["policy.capacity_rows=100,10000000000"]
    elif case == "grid-no-equals":
        grid = ["policy.capacity_rows"]
    elif case == "grid-empty-value":
        grid = ["policy.capacity_rows=100,,1000"]
    elif case == "grid-repeated-value":
        grid = ["policy.capacity_rows=100,100"]
    elif case == "grid-key-twice":
        grid = ["policy.capacity_rows=100", "policy.capacity_rows=1000"]
    elif case == "grid-and-set":
        extra = ["--set", "policy.capacity_rows=5"]
    if case.startswith("grid-"):
        args = ["sweep", trace, "--system", "hbm-lru", "--out", str(out), *extra]
        for item in grid:
            args += ["--grid", item]
        commands = [args]
    else:
        compare = ["compare", trace, "--systems", systems, "--out", str(out), *extra]
        sweep = ["sweep", trace, "-s", "hbm-lru", "--grid", grid[0], "--out", str(out), *extra]
        commands = [compare] if "system" in case or "name" in case else [compare, sweep]
    for args in commands:
        assert main(args) == 2, args
        _stderr_line(capsys)
        if case == "out-is-file":
            assert out.read_text() == "x"
        else:
            assert not out.exists()
        assert not list(tmp_path.glob(".out.*"))


def test_grid_parsing() -> None:
    grid = parse_grid(["failures.times_s=[1.0, 2.0],[3.0]", 'policy.name="lru",lfu', "x.y=1,2.5"])
    assert grid["failures.times_s"] == [("[1.0, 2.0]", [1.0, 2.0]), ("[3.0]", [3.0])]
    assert grid["policy.name"] == [('"lru"', "lru"), ("lfu", "lfu")]
    assert grid["x.y"] == [("1", 1), ("2.5", 2.5)]
    assert [value_label(v) for v in (True, 1, 2.5, 1e-5, "a b", [1, 2])] == [
        "true",
        "1",
        "2.5",
        "1e-05",
        "a b",
        "[1,2]",
    ]
    assert split_list("a, b ,c", "--systems") == ["a", "b", "c"]
    with pytest.raises(ConfigError, match="empty item"):
        split_list("a,", "--systems")
    with pytest.raises(ConfigError, match="column"):
        parse_grid(["lookups=1,2"])
    name = point_folder(7, 3, {"tiers.dram.device": "a/b c", "model.optimizer": "sgd"})
    assert name == "007-tiers.dram.device-a_b_c+model.optimizer-sgd"
    assert re.fullmatch(r"[A-Za-z0-9._+-]+", point_folder(1, 1, {"a=b": "1,2 3;4"}))
    assert len(point_folder(0, 1, {"k": "v" * 1000})) <= 120


def test_a_worker_error_reaches_the_caller(tmp_path: Path) -> None:
    jobs = resolve_systems(["hbm-lru", "dram"], [])
    with pytest.raises(TraceError, match="no such trace"):
        list(iter_runs(tmp_path / "nope", jobs, workers=2))


def test_sweep_grid_may_supply_what_set_leaves_invalid() -> None:
    # sync-full needs an interval: given by the grid, not by --set
    grid = parse_grid(["checkpoint.interval_batches=10,50"])
    points = resolve_sweep("hbm-lru", grid, ["checkpoint.strategy=sync-full"])
    assert [p.job.system.checkpoint.interval_batches for p in points] == [10, 50]
    # a grid that does not supply it leaves the --set error
    with pytest.raises(ConfigError, match="needs interval_batches"):
        resolve_sweep("hbm-lru", parse_grid(["policy.capacity_rows=10,50"]),
                      ["checkpoint.strategy=sync-full"])  # fmt: skip
