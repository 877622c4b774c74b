"""A report keeps every plan's answers (issue 54): two plans in one report each have their
summary lines, their own figures only (once each), the SSD TBE answer in the summary and a
section, one unit per quantity, <code> in the HTML; and the checks that say so can fail."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from _report_checks import check_report, mixed_units

from replay.plan.plan import PlanRequest, make_plan
from replay.plan.write import write_plan
from replay.report.build import build_report
from replay.report.document import Paragraph, to_html
from replay.workload.presets import get_preset

TARGETS = (0.75, 0.9)


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A report of two plans of a tiny workload: one on ssd-tbe, one on hbm-lru."""
    spec = get_preset("tiny").with_overrides(batches=30, batch_size=256)
    root = tmp_path_factory.mktemp("plans")
    for name, system in (("ssd", "ssd-tbe"), ("lru", "hbm-lru")):
        request = PlanRequest(
            source=spec, systems=(system,), cache_budget_bytes=1 << 20, hit_targets=TARGETS,
            mtbf_s=6 * 3600.0, time_per_batch_s=0.2, draws=20,
        )  # fmt: skip
        document, curves = make_plan(request)
        write_plan(document, root / name, force=False, curves=curves)
    out = root / "report"
    build_report([root / "ssd", root / "lru"], out)
    return out


def _summary(out: Path) -> list[str]:
    return json.loads((out / "summary.json").read_text())["summary"]


def test_every_plan_has_its_lines_and_its_own_figures(report: Path) -> None:
    check_report(report)  # units, figures once, every plan linked from the summary
    lines = _summary(report)
    assert any(line.startswith("Plan 1 (ssd): Cache (") for line in lines), lines
    assert any(line.startswith("Plan 2 (lru): Cache (") for line in lines), lines
    md = (report / "report.md").read_text()
    first, second = md.split("\n## Plan 2 (lru)\n", 1)
    # each plan's section shows its own curve, not the other's
    assert "](figures/plan_mrc.png)" in first and "plan_mrc_2.png" not in first
    assert "](figures/plan_mrc_2.png)" in second.split("\n## ", 1)[0]


def test_the_ssd_tbe_answer_is_in_the_summary_and_a_section(report: Path) -> None:
    (line,) = [line for line in _summary(report) if "SSD TBE (" in line]
    plan = json.loads((report.parent / "ssd" / "plan.json").read_text())
    for target in TARGETS:
        a = plan["cache"]["ssd_tbe"]["targets"][f"{target:g}"]
        if a is not None:
            assert f"hit {100 * target:g}% needs L1 " in line, line
    assert "### Plan 1 (ssd): SSD TBE" not in (report / "report.md").read_text()
    assert "### Plan: SSD TBE" in (report / "report.md").read_text()
    assert "SSD TBE" not in (report / "report.md").read_text().split("## Plan 2 (lru)")[1]


def test_html_shows_backticks_as_written(report: Path, tmp_path: Path) -> None:
    """A name may hold backticks of its own, so HTML keeps every backtick of plain text as
    written rather than guess which are code (the report's own spans are `Code` parts:
    tests/test_report_code.py)."""
    made = to_html([Paragraph("run `replay a<b` on `name`")], tmp_path, title="t")
    assert "<p>run `replay a&lt;b` on `name`</p>" in made


@pytest.mark.parametrize(
    ("text", "bad"),
    [
        ("every 36.1 s; every 0.601 min", ["0.601 min"]),
        ("10.9 h of training, 651 min", ["651 min"]),
        ("77,680 ms against 1.29 min", ["77,680 ms"]),
        ("1,202 ms", ["1,202 ms"]),
        ("1024 MiB and 1 GiB", ["1024 MiB"]),
        ("36.1 s, 1.29 min, 10.9 h, 0.392 ms, 1 GiB, 512 B, 23.6 MiB", []),
    ],
)
def test_mixed_units_finds_a_quantity_in_another_unit(text: str, bad: list[str]) -> None:
    found = [re.sub(r" \(as written.*", "", b) for b in mixed_units(text)]
    assert found == bad


def test_the_committed_example_report_passes_the_checks() -> None:
    """reports/example (the quickstart's report, committed without its report.html)."""
    check_report(Path(__file__).resolve().parent.parent / "reports" / "example", html_page=False)
