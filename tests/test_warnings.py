"""Degenerate studies say so: a cache that holds every row the trace touched (LRU = LFU),
a checkpoint interval longer than the replayed span (no checkpoint), a failure study at an
interval far from its Young/Daly interval or on fewer than 3 checkpoints, and a system
with no cache has no hit ratio (n/a, JSON null), never 1.0. Each warning is one line on
stderr, is recorded in the run's summary.json and is shown by reports."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from replay._study_bounds import MIN_CHECKPOINTS, YOUNG_DALY_BAND, failure_study_warning
from replay.cli import main

CACHE = "holds everything the trace touched"
NO_CHECKPOINT = "no checkpoint was taken during the replayed batches"


@pytest.fixture
def trace(tiny_trace_40: Path) -> Path:
    return tiny_trace_40


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


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("checkpoint.interval_s=90min", "checkpoint.interval_s is 1.5 h"),
        ("checkpoint.interval_batches=10", "checkpoint.interval_batches is 10"),
    ],
)
def test_an_interval_without_a_strategy_warns(
    trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], given: str, said: str
) -> None:
    """hbm-lru checkpoints nothing (`none`): an interval given to it is ignored, and the
    run says so instead of reporting a checkpoint-free run as if it had checkpointed."""
    capsys.readouterr()
    out = tmp_path / "r"
    args = ["run", str(trace), "-s", "hbm-lru", "-o", str(out), "--set", given]
    assert main([*args, "--set", "policy.capacity_rows=200"]) == 0
    (line,) = _warnings(capsys.readouterr().err)
    assert line == (
        f"replay: warning: {said}, but checkpoint.strategy is none: no checkpoint was "
        "written; choose one with --set checkpoint.strategy=NAME (replay presets lists them)"
    )
    summary = _summary(out)
    assert summary["checkpoint"]["count"] == 0 and summary["warnings"] == [line.split(": ", 2)[2]]


def test_a_cache_size_on_a_system_without_a_cache_warns(
    trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """dram keeps every table in host DRAM (`static`): a cache size given to it replays
    the same bytes as none, and the run says so instead of passing for that cache's."""
    capsys.readouterr()
    plain, sized = tmp_path / "plain", tmp_path / "sized"
    assert main(["run", str(trace), "-s", "dram", "-o", str(plain)]) == 0
    assert _warnings(capsys.readouterr().err) == [] and _summary(plain)["warnings"] == []
    args = ["run", str(trace), "-s", "dram", "-o", str(sized)]
    assert main([*args, "--set", "policy.capacity_bytes=8GiB"]) == 0
    (line,) = _warnings(capsys.readouterr().err)
    assert line == (
        "replay: warning: policy.capacity_bytes (8 GiB) changes nothing here: policy "
        "'static' keeps every table in tier 'dram' and caches nothing; a system with a cache "
        "(hbm-lru, hbm-tbe-lru, ssd-tbe, ...) sizes one"
    )
    a, b = _summary(plain), _summary(sized)
    assert b["warnings"] == [line.split(": ", 2)[2]]
    assert (a["time_s"], a["tiers"], a["links"]) == (b["time_s"], b["tiers"], b["links"])


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


def _failure_study(trace: Path, out: Path, interval_batches: int, horizon: str = "1d") -> list[str]:
    sets = [
        "policy.capacity_rows=200",
        "checkpoint.strategy=sync-full",
        f"checkpoint.interval_batches={interval_batches}",
        "failures.mtbf_s=4h",
        f"failures.horizon_s={horizon}",
    ]
    args = ["run", str(trace), "-s", "hbm-lru", "-o", str(out)]
    assert main([*args, *[x for s in sets for x in ("--set", s)]]) == 0
    return _summary(out)["warnings"]


def test_a_failure_study_far_from_its_young_daly_interval_warns(
    trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """40 tiny batches, a full checkpoint every 2: 20 checkpoints ~0.7 ms apart, against
    a Young/Daly interval of seconds at a 4-hour MTBF (over a day: failures strike). The
    goodput measures the interval, as the report's failure table says by leaving it out;
    the run says it too."""
    capsys.readouterr()
    out = tmp_path / "r"
    recorded = _failure_study(trace, out, 2)
    (line,) = _warnings(capsys.readouterr().err)
    assert recorded == [line.removeprefix("replay: warning: ")]
    summary = _summary(out)
    used = summary["failures"]["interval_s_used"]
    optimum = summary["failures"]["young_daly_interval_s"]
    assert summary["checkpoint"]["count"] >= MIN_CHECKPOINTS
    assert used / optimum < YOUNG_DALY_BAND[0]
    assert f"is {used / optimum:.3g}× its Young/Daly interval" in line
    assert "the goodput measures the interval, not the strategy" in line


def test_a_failure_study_on_two_checkpoints_warns(
    trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    out = tmp_path / "r"
    (recorded,) = _failure_study(trace, out, 15)
    assert _summary(out)["checkpoint"]["count"] == 2
    assert recorded.startswith("the failure study rests on 2 checkpoints, fewer than 3")
    assert _warnings(capsys.readouterr().err) == [f"replay: warning: {recorded}"]


def test_a_failure_study_that_no_failure_struck_warns(
    trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The default horizon is the replayed span, ~15 ms here, against a 4-hour MTBF: no
    draw sees a failure, so the run shows no lost work or restore (zeros over none) and
    says why; over a day failures strike and neither the line nor the warning appears."""
    capsys.readouterr()
    out = tmp_path / "r"
    recorded = _failure_study(trace, out, 2, horizon="0")
    captured = capsys.readouterr()
    failures = _summary(out)["failures"]
    assert failures["failures_per_draw_mean"] == 0
    assert recorded[0].startswith("no failure struck any of the 1,000 draws over the ")
    assert "at an MTBF of 4 h" in recorded[0] and "set failures.horizon_s" in recorded[0]
    assert _warnings(captured.err)[0] == f"replay: warning: {recorded[0]}"
    assert "no failure struck in " in captured.out and "lost work" not in captured.out
    longer = tmp_path / "day"
    assert not [w for w in _failure_study(trace, longer, 2) if "no failure" in w]
    assert _summary(longer)["failures"]["failures_per_draw_mean"] > 0
    assert "lost work" in capsys.readouterr().out


def test_the_failure_study_warning_at_the_band() -> None:
    """Inside YOUNG_DALY_BAND (ends included) a goodput is a result; outside it, or from
    1-2 checkpoints, it is not; without checkpoints the checkpoint model warns instead."""
    low, high = YOUNG_DALY_BAND
    ck = {"strategy": "sync-full", "count": 10}

    def at(ratio: float) -> str | None:
        failures = {"interval_s_used": ratio * 600.0, "young_daly_interval_s": 600.0}
        return failure_study_warning(ck, failures)

    for ratio in (low, 1.0, high):
        assert at(ratio) is None
    for ratio in (low * 0.99, high * 1.01, 0.001, 50.0):
        text = at(ratio)
        assert text is not None and f"is {ratio:.3g}× its Young/Daly interval (10 min)" in text
    study = {"interval_s_used": 600.0, "young_daly_interval_s": 600.0}
    assert failure_study_warning({"strategy": "sync-full", "count": 0}, study) is None
    assert failure_study_warning({"strategy": "none", "count": 0}, study) is None
    few = failure_study_warning({"strategy": "sync-full", "count": 1}, study)
    assert few is not None and "rests on 1 checkpoint, fewer than 3" in few
    # no Young/Daly interval to hold the interval against: no claim either way
    unknown = {"interval_s_used": 1.0, "young_daly_interval_s": None}
    assert failure_study_warning(ck, unknown) is None
