"""`replay report` on cluster runs: the Cluster section (a table row per cluster run whose
numbers are its summary.json's, a figure per run embedded in the HTML), ranks.parquet
checked as it is read (one error line on a malformed or edited one), a PatrickStar
cluster run, and a one-GPU report without any of it (its golden is tests/test_report.py)."""

from __future__ import annotations

import json
import shutil
from html import escape
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from replay._units import format_bytes, format_duration, format_hit_ratio
from replay.cli import main
from replay.report.document import fmt_multiple

TINY = ["--workload", "tiny", "--batches", "12"]
CLUSTER = ["--set", "cluster.nodes=2", "--set", "cluster.gpus_per_node=2"]
SMALL = ["--set", "policy.capacity_rows=100"]  # per GPU: the caches evict


def _run(tmp: Path, name: str, *extra: str, system: str = "hbm-lru") -> Path:
    out = tmp / name
    assert main(["run", *TINY, "-s", system, *extra, "-o", str(out)]) == 0
    return out


def _report(tmp: Path, *runs: Path, name: str = "report") -> Path:
    out = tmp / name
    assert main(["report", *map(str, runs), "--out", str(out)]) == 0
    return out


def _json(path: Path) -> Any:
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("cluster")
    run = _run(tmp, "run", *CLUSTER, *SMALL)
    return run, _report(tmp, run)


def test_the_cluster_section(cluster: tuple[Path, Path]) -> None:
    run, report = cluster
    summary = _json(run / "summary.json")
    c, ranks = summary["cluster"], summary["ranks"]
    rows = _json(report / "summary.json")["cluster"]
    assert len(rows) == 1
    row = rows[0]
    assert (row["nodes"], row["gpus_per_node"], row["world"]) == (2, 2, 4)
    assert row["sharding"] == c["sharding"]["sharding"]
    for key in (
        "step_time_s",
        "all_to_all_bytes_per_batch",
        "all_to_all_s_per_batch",
        "allreduce_s_per_batch",
        "imbalance_mean",
        "imbalance_max",
    ):
        assert row[key] == c[key], key
    ratios = [r["hits"] / r["lookups"] for r in ranks]
    assert row["hit_ratio_worst"] == min(ratios)
    assert row["worst_rank"] == ratios.index(min(ratios))
    assert row["hit_ratio_mean"] == pytest.approx(sum(ratios) / len(ratios), rel=1e-12)
    # ranks.parquet sums to the summary's ranks (what the report checked)
    frame = pl.read_parquet(run / "ranks.parquet")
    sums = frame.group_by("rank").agg(pl.col("hits").sum()).sort("rank")
    assert sums["hits"].to_list() == [r["hits"] for r in ranks]

    md = (report / "report.md").read_text()
    assert "## Cluster" in md
    line = next(x for x in md.splitlines() if x.startswith("| hbm-lru"))
    cells = [x.strip() for x in line.strip("|").split("|")]
    assert cells[1:] == [
        "4 (2 x 2)",
        c["sharding"]["sharding"],
        format_duration(c["step_time_s"]),
        format_bytes(c["all_to_all_bytes_per_batch"]),
        format_duration(c["all_to_all_s_per_batch"]),
        format_duration(c["allreduce_s_per_batch"]),
        f"{fmt_multiple(c['imbalance_mean'])} / {fmt_multiple(c['imbalance_max'])}",
        f"{format_hit_ratio(min(ratios))} (GPU {row['worst_rank']})",
        format_hit_ratio(row["hit_ratio_mean"]),
    ]
    # the section sits between the hierarchy and the time sections
    assert md.index("## Memory hierarchy") < md.index("## Cluster") < md.index("## Time")
    assert row["all_to_all_model"] == "torchrec"
    assert "TorchRec's collectives per sharding type" in md and "lower bound" not in md


def test_a_lower_bound_run_says_so(tmp_path: Path) -> None:
    run = _run(tmp_path, "lower", *CLUSTER, *SMALL, "--set", "cluster.all_to_all_model=lower-bound")
    md = (_report(tmp_path, run) / "report.md").read_text()
    assert "): the all-to-all is a lower bound (only the pooled embeddings" in md


def test_the_cluster_figure(cluster: tuple[Path, Path]) -> None:
    _, report = cluster
    figures = _json(report / "summary.json")["figures"]
    drawn = [f for f in figures if f["section"] == "cluster"]
    assert len(drawn) == 1
    name = drawn[0]["name"]
    assert name.startswith("cluster_") and (report / "figures" / name).is_file()
    assert "on 4 GPUs" in drawn[0]["title"] and "worst: GPU" in drawn[0]["caption"]
    html = (report / "report.html").read_text()
    assert "Cluster</h2>" in html
    embedded = f'<img alt="{escape(drawn[0]["title"])}" src="data:image/png;base64,'
    assert html.count(embedded) == 1
    assert f"figures/{name}" in (report / "report.md").read_text()


def test_a_report_is_the_same_twice(cluster: tuple[Path, Path], tmp_path: Path) -> None:
    run, report = cluster
    again = _report(tmp_path, run)
    for name in ("report.md", "report.html", "summary.json"):
        assert (again / name).read_bytes() == (report / name).read_bytes(), name


def test_one_gpu_has_no_cluster_section(tmp_path: Path) -> None:
    report = _report(tmp_path, _run(tmp_path, "one", *SMALL))
    assert "Cluster" not in (report / "report.md").read_text()
    summary = _json(report / "summary.json")
    assert "cluster" not in summary
    assert all(f["section"] != "cluster" for f in summary["figures"])


def test_a_patrickstar_cluster(tmp_path: Path) -> None:
    run = _run(tmp_path, "ps", *CLUSTER, system="chunk")
    report = _report(tmp_path, run)
    (row,) = _json(report / "summary.json")["cluster"]
    c = _json(run / "summary.json")["cluster"]
    assert row["sharding"].startswith("patrickstar")
    assert row["allreduce_s_per_batch"] == c["collectives_s_per_batch"]
    assert row["hit_ratio_worst"] is None and row["all_to_all_bytes_per_batch"] is None
    md = (report / "report.md").read_text()
    assert "## Cluster" in md and "PatrickStar (chunk policy) run" in md


def _refused(tmp: Path, run: Path, capsys: pytest.CaptureFixture[str]) -> str:
    out = tmp / "refused"
    capsys.readouterr()
    assert main(["report", str(run), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert not out.exists()
    return err


def test_a_bad_ranks_parquet(
    cluster: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    shutil.copytree(cluster[0], run)
    ranks = run / "ranks.parquet"
    frame = pl.read_parquet(ranks)

    ranks.write_bytes(b"not parquet")
    assert "ranks.parquet: not a readable Parquet file" in _refused(tmp_path, run, capsys)

    frame.with_columns(pl.col("hits") + (pl.col("batch") == 0).cast(pl.Int64)).write_parquet(ranks)
    assert "does not match ranks.parquet" in _refused(tmp_path, run, capsys)

    frame.slice(1).write_parquet(ranks)
    assert "not one per batch and GPU" in _refused(tmp_path, run, capsys)

    frame.with_columns(pl.col("lookups").cast(pl.Float64)).write_parquet(ranks)
    assert "column 'lookups' must hold integers" in _refused(tmp_path, run, capsys)

    frame.drop("rank").write_parquet(ranks)
    assert "no 'rank' column" in _refused(tmp_path, run, capsys)

    # a batch's time that is no number: every figure and mean made from it would be too
    assert "time_s" in frame.columns
    for bad in (float("nan"), float("inf"), float("-inf")):
        first = pl.when(pl.int_range(pl.len()) == 0).then(bad).otherwise(pl.col("time_s"))
        frame.with_columns(first.alias("time_s")).write_parquet(ranks)
        refused = _refused(tmp_path, run, capsys)
        assert "ranks.parquet: column 'time_s' holds a NaN or infinite value" in refused
