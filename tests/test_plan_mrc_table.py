"""A plan's miss-ratio table (plan.md and the report's plan section) ends at the first
size that holds every row the run touches: beyond it the curve is flat at the cold
misses, so larger caches are no answer (a cache larger than all rows touched is left
out, and the sentence under the table says where the flat part starts)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from replay.cli import main
from replay.report.plan_section import MRC_TABLE_POINTS, mrc_table_points


def _doc(rows: list[int], distinct: int) -> dict:
    return {"distinct_rows": distinct, "mrc": {"rows": rows, "bytes": [64 * r for r in rows]}}


def test_the_table_ends_at_the_first_size_that_holds_every_row() -> None:
    rows = [1, 10, 100, 1_000, 10_000, 100_000]
    idx, said = mrc_table_points(_doc(rows, 500))
    assert idx == [0, 1, 2, 3]  # 1,000 rows hold the 500 touched; 10,000 and more are out
    assert said.startswith("From 500 rows (31.2 KiB) a cache holds every row the run touches")
    idx, said = mrc_table_points(_doc(rows, 1_000))  # a size exactly the rows touched
    assert idx == [0, 1, 2, 3] and said
    # a curve that ends before every row fits: all of it, nothing to say
    assert mrc_table_points(_doc(rows, 200_000)) == ([0, 1, 2, 3, 4, 5], "")
    assert mrc_table_points(_doc([], 10)) == ([], "")


def test_a_long_curve_is_spread_over_the_sizes_that_answer() -> None:
    rows = [2**i for i in range(40)]
    idx, said = mrc_table_points(_doc(rows, 2**20 - 5))
    assert len(idx) == MRC_TABLE_POINTS and idx[0] == 0 and idx[-1] == 20 and said


def test_plan_md_and_the_report_leave_out_the_flat_part(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, report = tmp_path / "plan", tmp_path / "report"
    assert main([
        "plan", "--workload", "tiny", "--batches", "40", "--system", "hbm-lru",
        "--cache-budget", "1MiB", "--cluster-mtbf", "1d", "--time-per-batch", "50ms",
        "--draws", "50", "--out", str(out),
    ]) == 0  # fmt: skip
    doc = json.loads((out / "plan.json").read_text())
    distinct = doc["distinct_rows"]
    assert max(doc["mrc"]["rows"]) > distinct  # the curve goes on to every row of the tables
    text = (out / "plan.md").read_text()
    table = text.split("| cache | rows | miss ratio |")[1].split("\n\n")[0]
    shown = [int(line.split("|")[2].replace(",", "")) for line in table.splitlines()[2:]]
    assert shown[-1] >= distinct > shown[-2]
    said = f"From {distinct:,} rows ("
    assert said in text
    assert main(["report", str(out), "--out", str(report)]) == 0
    assert said in (report / "report.md").read_text()
    capsys.readouterr()
