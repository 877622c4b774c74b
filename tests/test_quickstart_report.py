"""The quickstart's report reads as one workload with every number's basis (issue 44):
the first line names the plan's workload with its size, step time and cluster; every
summary line names its workload and basis; a quantity given twice (hit ratio, time per
batch, fastest system) differs only where the bases differ and the lines say so; oracles
are bounds, never fastest; byte answers carry their range; every figure written is
shown; no warning concerns a run the quickstart made. Plus the error-bound range of a
byte answer on a hand-made curve (golden values)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from _quickstart_once import Quick, quickstart_once
from _report_checks import check_report

from replay.report.build import percents_over_100
from replay.report.load import PlanData
from replay.report.plan_section import planned_checkfreq, range_text, target_range

QUANTITIES = ("hit_ratio", "time_per_batch", "fastest")


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> Quick:
    return quickstart_once(tmp_path_factory)


def _summary_md(md: str) -> list[str]:
    """The Markdown summary's bullet lines, links and escapes removed."""
    section = md.split("## Summary\n", 1)[1].split("\n## ", 1)[0]
    lines = [line[2:] for line in section.splitlines() if line.startswith("- ")]
    return [re.sub(r"\]\(#[^)]*\)", "", line).replace("[", "").replace("\\", "") for line in lines]


def _load(quick: Quick) -> tuple[dict[str, Any], str, list[str]]:
    summary = json.loads((quick.out / "summary.json").read_text())
    md = (quick.out / "report.md").read_text()
    return summary, md, _summary_md(md)


def test_first_line_names_the_plans_workload_size_step_and_cluster(quick: Quick) -> None:
    summary, md, lines = _load(quick)
    plan = json.loads((quick.out / "results" / "plan" / "plan.json").read_text())
    first = summary["summary"][0]
    assert first == lines[0]
    assert plan["horizon"]["workload"] == "criteo-terabyte"
    assert first.startswith("Workload: criteo-terabyte, planned for 2,135,484 batches of 2,048")
    assert f"{plan['distinct_rows']:,} distinct rows of 512 B" in first
    assert "the assumed step (--time-per-batch) of 50 ms" in first
    assert "16 nodes each failing once in 30 d on average: a cluster MTBF of 1.88 d" in first
    # the replayed studies are the same workload's first batches, said so
    assert "the replayed studies run its first 101 batches" in first
    # the intro names it too: the word of the workload before anything else
    assert "criteo-terabyte" in md.split("## Summary", 1)[0]


def test_every_summary_line_names_its_workload_and_basis(quick: Quick) -> None:
    summary, _, lines = _load(quick)
    assert len(summary["summary"]) == len(lines) >= 6
    for line in summary["summary"]:
        assert "criteo-terabyte" in line, line
    for line in summary["summary"][1:]:
        assert re.search(r"whole run|steady state", line), line
    heads = [line.split(" (", 1)[0].split(":", 1)[0] for line in summary["summary"]]
    assert heads[:6] == ["Workload", "Cache", "Checkpoint", "Goodput", "Systems", "The plan"]


def test_answers_agree_between_summary_json_and_markdown(quick: Quick) -> None:
    summary, _, lines = _load(quick)
    answers = summary["answers"]
    assert {a["quantity"] for a in answers} == set(QUANTITIES)
    for a in answers:
        line = lines[a["line"]]
        assert a["text"] in line, (a, line)
        assert a["basis"] in line, (a, line)  # the basis is said where the value is
    for quantity in QUANTITIES:
        given = [a for a in answers if a["quantity"] == quantity]
        for i, a in enumerate(given):
            for b in given[i + 1 :]:
                if a["value"] != b["value"]:  # two values: two bases, each in its line
                    assert a["basis"] != b["basis"], (a, b)
    # every "fastest" in the summary is an answer (none unlabelled), and no oracle is one
    fastest_lines = [i for i, line in enumerate(lines) if "fastest" in line]
    assert fastest_lines == sorted(a["line"] for a in answers if a["quantity"] == "fastest")
    assert all("belady" not in a["value"] for a in answers if a["quantity"] == "fastest")
    for line in lines:
        if "belady" in line:
            assert "a bound, not a system" in line
    # the hit ratio at the budget is plan.json's, as the summary line quotes it
    plan = json.loads((quick.out / "results" / "plan" / "plan.json").read_text())
    (hit,) = [a for a in answers if a["quantity"] == "hit_ratio"]
    assert hit["value"] == plan["cache"]["hit_at_budget"]["lru"]
    (step,) = [a for a in answers if a["line"] == 0]
    assert step["value"] == plan["horizon"]["time_per_batch_s"] == 0.05


def test_one_time_per_batch_per_system(quick: Quick) -> None:
    """A system the plan's Systems line times gets no second time in the replayed runs'
    line: that line names the fastest run and points to the one time given."""
    summary, _, lines = _load(quick)
    timed = [a for a in summary["answers"] if a["quantity"] == "time_per_batch"]
    systems = [a["system"] for a in timed if a.get("system")]
    assert systems and len(systems) == len(set(systems)), timed
    runs = next(line for line in lines if line.startswith("Replayed runs"))
    fastest = next(a for a in summary["answers"] if a["quantity"] == "fastest" and a["line"]
                   == lines.index(runs))  # fmt: skip
    if fastest["value"].split(" (")[0] in systems:
        assert "its time per batch is given once: the Systems line" in runs, runs


def test_byte_answers_carry_their_range_and_checkpoint_its_terms(quick: Quick) -> None:
    summary, _, _ = _load(quick)
    cache = next(line for line in summary["summary"] if line.startswith("Cache ("))
    needs = re.findall(r"hit 9[05]% needs ([^,;]+?\([^)]*\))", cache)
    assert len(needs) == 2, cache
    for text in needs:
        # `788 MiB (271 MiB – 4.87 GiB)`, or a bound at the curve's first point
        assert re.match(r"(≤ )?[\d.]+ [KMGT]?i?B \(", text), text
    assert "~95% ranges from the sampled curve's error where it crosses each target" in cache
    checkpoint = next(line for line in summary["summary"] if line.startswith("Checkpoint ("))
    for term in ("every", "stall of", "written per checkpoint", "of storage", "a restore of"):
        assert term in checkpoint, (term, checkpoint)
    goodput = next(line for line in summary["summary"] if line.startswith("Goodput ("))
    # the mean's spread: its 5th percentile, or, when most runs see no failure, the chance
    # of one and a failed run's goodput (never a percentile then)
    assert ("5th percentile" in goodput) != ("of runs see one" in goodput), goodput
    plan_md = (quick.out / "results" / "plan" / "plan.md").read_text()
    assert "~95% ranges from the sampled curve's error" in plan_md


def test_the_report_keeps_one_unit_per_quantity_and_every_plan(quick: Quick) -> None:
    check_report(quick.out)


def test_every_figure_written_is_shown_and_no_warning_concerns_a_quickstart_run(
    quick: Quick,
) -> None:
    summary, md, _ = _load(quick)
    written = sorted(p.name for p in (quick.out / "figures").iterdir())
    assert written
    for name in written:
        assert f"](figures/{name})" in md, name
    assert all(not run["warnings"] for run in summary["runs"])
    assert "## Warnings" not in md and "carries a warning" not in md
    # the text bugs the issue lists
    for wrong in (" to 84%", "1 miss-ratio curves", "DESIGN section", "the seeds",
                  "quantize_bits=0 to", " GB per batch", "GiB/s"):  # fmt: skip
        assert wrong not in md, wrong


# -- the range of a byte answer on a hand-made curve ---------------------------------------

CURVE = {"bytes": [100.0, 200.0, 400.0, 800.0], "miss_ratio": [0.3, 0.2, 0.1, 0.05],
         "error_bound": 0.05}  # fmt: skip


@pytest.mark.parametrize(
    ("target", "expected", "text"),
    [
        # miss <= 0.15 first at 400; with the bound: miss <= 0.20 at 200, <= 0.10 at 400
        (0.85, (400.0, 200.0, 400.0, None), "400 B (200 B – 400 B)"),
        # the low end is the curve's first point: a bound
        (0.75, (200.0, 100.0, 200.0, "first"), "200 B (≤ 100 B – 200 B)"),
        # the answer itself is the first point: an upper bound, not a size
        (0.6, (100.0, 100.0, 100.0, "first"), "≤ 100 B (the curve's first point"),
        # the high end lies beyond the curve
        (0.93, (800.0, 400.0, None, "last"), "800 B (400 B – more than the curve's 800 B)"),
        (0.97, (None, 800.0, None, "last"), "out of reach over the run"),
    ],
)
def test_target_range_golden(
    target: float, expected: tuple[float | None, float | None, float | None, str | None], text: str
) -> None:
    r = target_range(CURVE, target)
    assert (r["bytes"], r["low"], r["high"], r["edge"]) == expected
    assert range_text(r).startswith(text)


def test_target_range_without_bound_is_the_answer() -> None:
    r = target_range({**CURVE, "error_bound": 0.0}, 0.85)
    assert r["low"] == r["bytes"] == r["high"] == 400.0


def test_a_snapshot_longer_than_its_interval_is_a_multiple() -> None:
    # a short plan's CheckFreq: 5.06 s of snapshot every 0.8 s is 6.32x, never "632%"
    # (the report refuses its own text with a percentage above 100%)
    doc = {
        "horizon": {"workload": "my-model", "batches": 20},
        "checkpoint": {"strategies": [{"name": "checkfreq", "interval_s": 0.8, "cost_s": 5.06}]},
    }
    text = planned_checkfreq([PlanData(Path("p"), doc, {})])
    assert text is not None and text.startswith("6.32× stall overhead")
    assert not percents_over_100(text)


def test_a_bound_wider_than_the_curve_says_the_answer_is_unresolved() -> None:
    # a coarse sample (meta-2021 at R = 2^-23: a bound of 0.14): the bound's range runs off
    # both ends of the curve, so the size is written as one the sample does not pin down
    r = target_range({**CURVE, "error_bound": 0.3}, 0.85)
    assert (r["bytes"], r["low"], r["high"], r["edge"]) == (400.0, 100.0, None, "first")
    assert range_text(r) == (
        "400 B (unresolved: anywhere from ≤ 100 B to more than the curve's 800 B, the whole curve)"
    )
