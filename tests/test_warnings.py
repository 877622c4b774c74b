"""Degenerate studies say so: a cache that holds every row the trace touched (LRU = LFU),
a checkpoint interval longer than the replayed span (no checkpoint), and a system with no
cache has no hit ratio (n/a, JSON null), never 1.0. Each warning is one line on stderr,
is recorded in the run's summary.json and is shown by reports."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from replay.cli import main

CACHE = "holds everything the trace touched"
NO_CHECKPOINT = "no checkpoint was taken during the replayed batches"


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("warn") / "t"
    args = ["generate", "--preset", "tiny", "--batches", "40", "-j", "1", "-o", str(path)]
    assert main(args) == 0
    return path


def _summary(folder: Path) -> dict:
    return json.loads((folder / "summary.json").read_text())


def _warnings(err: str) -> list[str]:
    lines = err.splitlines()
    return [line for line in lines if line.startswith("replay: warning: ")]


def test_a_cache_larger_than_the_rows_touched_warns(
    trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    runs = {}
    for system in ("hbm-lru", "hbm-lfu"):
        out = tmp_path / system
        assert main(["run", str(trace), "-s", system, "-o", str(out)]) == 0
        err = capsys.readouterr().err
        (line,) = _warnings(err)
        assert CACHE in line and "LRU, LFU" in line
        runs[system] = _summary(out)
        (recorded,) = runs[system]["warnings"]
        assert line == f"replay: warning: {recorded}"
        touched = runs[system]["policy"]["resident_max"]
        assert f"({touched:,} rows)" in recorded
    # the warning is true: both policies missed exactly the first touches
    lru, lfu = runs["hbm-lru"]["policy"], runs["hbm-lfu"]["policy"]
    assert lru["hit_ratio"] == lfu["hit_ratio"] and lru["misses"] == lru["resident_max"]


def test_a_cache_that_had_to_choose_does_not_warn(
    trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    for system in ("hbm-lru", "hbm-hot"):
        out = tmp_path / system
        args = ["run", str(trace), "-s", system, "-o", str(out), "--json"]
        assert main([*args, "--set", "policy.capacity_rows=200"]) == 0
        assert _warnings(capsys.readouterr().err) == []
        summary = _summary(out)
        assert summary["warnings"] == [] and summary["policy"]["resident_max"] == 200


def test_an_interval_longer_than_the_span_warns(
    trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    out = tmp_path / "r"
    sets = ["checkpoint.strategy=checkfreq", "checkpoint.interval_s=30min"]
    args = ["run", str(trace), "-s", "hbm-lru", "-o", str(out)]
    assert (
        main([*args, *[x for s in sets for x in ("--set", s)], "--set", "policy.capacity_rows=200"])
        == 0
    )
    (line,) = _warnings(capsys.readouterr().err)
    assert NO_CHECKPOINT in line
    summary = _summary(out)
    assert summary["checkpoint"]["count"] == 0 and summary["warnings"] == [line.split(": ", 2)[2]]


def test_compare_warns_per_run_and_the_report_shows_it(
    trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    out = tmp_path / "c"
    assert main(["compare", str(trace), "-s", "hbm-lru,dram", "-o", str(out)]) == 0
    captured = capsys.readouterr()
    (line,) = _warnings(captured.err)
    assert line.startswith("replay: warning: hbm-lru: ") and CACHE in line
    # dram caches nothing: no hit ratio (n/a; null in every file), and no warning
    row = [r for r in captured.out.splitlines() if "│ dram" in r]
    assert row and "n/a" in row[0] and "1.0000" not in row[0]
    assert _summary(out / "dram")["policy"]["hit_ratio"] is None
    table = pl.read_parquet(out / "comparison.parquet")
    assert table.filter(pl.col("system") == "dram")["hit_ratio"].to_list() == [None]
    assert table.filter(pl.col("system") == "hbm-lru")["hit_ratio"].to_list()[0] > 0
    report = tmp_path / "rep"
    assert main(["report", str(out), "-o", str(report)]) == 0
    text = (report / "report.md").read_text()
    assert "## Warnings" in text and "- hbm-lru: the cache (" in text
    assert "carries a warning about the replayed span" in text
    runs = {r["system"]: r["warnings"] for r in _summary(report)["runs"]}
    assert runs["dram"] == [] and len(runs["hbm-lru"]) == 1 and CACHE in runs["hbm-lru"][0]
    assert "| dram |" in text and "| n/a |" in text.split("| dram |")[1].splitlines()[0]
