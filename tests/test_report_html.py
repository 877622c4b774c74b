"""`replay report` answers first (issue 26): a report of a run, a comparison and a plan
opens with a Summary whose numbers are plan.json's, then contents whose links all land on
a heading; every image is embedded; no percentage above 100% anywhere in report.md; the
figures the text names exist."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from replay._units import format_bytes, format_duration, format_percent, format_target
from replay.cli import main
from replay.report.build import as_multiples, percents_over_100
from replay.report.document import fmt_ratio


def _ok(*args: object) -> None:
    argv = [str(a) for a in args]
    assert main(argv) == 0, argv


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    base = tmp_path_factory.mktemp("report_html")
    trace = base / "tiny"
    _ok("generate", "--preset", "tiny", "--batches", "20", "--seed", "0", "--workers", "1",
        "--out", trace)  # fmt: skip
    res = base / "results"
    _ok("run", trace, "--system", "hbm-lru", "--out", res / "run")
    _ok("compare", trace, "--systems", "hbm-lru,dram", "--workers", "1", "--out", res / "cmp")
    _ok("plan", "--workload", "tiny", "--batches", "60", "--system", "hbm-lru",
        "--cache-budget", "1MiB", "--hit-target", "0.5", "--cluster-mtbf", "6h",
        "--time-per-batch", "200ms", "--draws", "50", "--out", res / "plan")  # fmt: skip
    out = base / "report"
    _ok("report", res, "--out", out)
    return out, json.loads((res / "plan" / "plan.json").read_text())


def _sections(md: str) -> list[tuple[str, str]]:
    parts = re.split(r"^## (.+)$", md, flags=re.MULTILINE)
    return list(zip(parts[1::2], parts[2::2], strict=True))


def test_the_summary_comes_first_with_the_plans_numbers(report: tuple[Path, dict]) -> None:
    out, plan = report
    md = (out / "report.md").read_text()
    sections = _sections(md)
    assert sections[0][0] == "Summary"
    assert sections[1][0] == "Contents"
    lines = [line for line in sections[0][1].splitlines() if line.startswith("- ")]
    assert 3 <= len(lines) <= 10
    assert all(re.search(r"\]\(#[a-z0-9_-]+\)\)?$", line) for line in lines), lines
    text = "\n".join(lines).replace("\\", "")
    cache = plan["cache"]
    assert f"the {format_bytes(cache['budget_bytes'])} budget as one shared LRU hits" in text
    assert f"hits {format_percent(cache['baseline']['hit'])}" in text
    assert cache["baseline"]["hit"] == cache["hit_at_budget"]["lru"]
    for target, size in cache["bytes_for_hit"]["lru"].items():
        want = f"hit {format_target(target)} needs {format_bytes(size)}" if size else "out of reach"
        assert want in text
    assert f"split per table it hits {format_percent(cache['split_hit'])}" in text
    assert (
        f"per-table caches at one load factor ({cache['uniform_load_factor']:.3g}) hit "
        f"{format_percent(cache['uniform_hit'])}"
    ) in text
    best = plan["checkpoint"]["strategies"][0]
    ck = next(line for line in lines if line.startswith("- Checkpoint (")).replace("\\", "")
    goodput = next(line for line in lines if line.startswith("- Goodput (")).replace("\\", "")
    assert format_percent(best["goodput"]) in goodput
    from replay.report.plan_section import goodput_spread

    assert goodput_spread(best) in goodput
    assert format_duration(plan["checkpoint"]["cluster_mtbf_s"]) in ck
    if best["name"] != "none":
        assert f"{best['label']} every {format_duration(best['interval_s'])}" in ck
        assert f"{format_bytes(best['bytes'])} written per checkpoint" in ck
        assert f"{format_bytes(best['storage_bytes'])} of storage" in ck
        assert f"a restore of {format_duration(best['restore_s'])}" in ck
    fastest = min(plan["systems"], key=lambda s: s["time_per_batch_s"])
    assert f"{fastest['name']} is fastest at {format_duration(fastest['time_per_batch_s'])}" in (
        text
    )
    summary = json.loads((out / "summary.json").read_text())
    assert len(summary["summary"]) == len(lines)
    assert summary["plans"] == ["plan"]


def test_contents_and_summary_links_land_on_headings(report: tuple[Path, dict]) -> None:
    out, _ = report
    page = (out / "report.html").read_text()
    ids = re.findall(r'<h[1-6] id="([^"]+)"', page)
    assert len(ids) == len(set(ids)) == len(re.findall(r"<h[1-6]\b", page))
    hrefs = re.findall(r'href="([^"]*)"', page)
    assert hrefs and all(h.startswith("#") and h[1:] in ids for h in hrefs), hrefs
    md = (out / "report.md").read_text()
    slugs = {f"#{i}" for i in ids}
    for target in re.findall(r"\]\((#[^)]*)\)", md):
        assert target in slugs, target
    # the first heading after the title is the summary, in both files
    assert ids[1] == "summary" and ids[2] == "contents"


def test_every_image_is_embedded_and_every_named_figure_exists(
    report: tuple[Path, dict],
) -> None:
    out, _ = report
    page = (out / "report.html").read_text()
    images = re.findall(r"<img\b[^>]*>", page)
    assert images
    for tag in images:
        assert re.search(r'src="data:image/png;base64,[A-Za-z0-9+/=]+"', tag), tag[:120]
    md = (out / "report.md").read_text()
    for name in re.findall(r"\((figures/[^)]+)\)", md) + re.findall(r"(plan_\w+\.png)", md):
        path = out / (name if name.startswith("figures/") else f"figures/{name}")
        assert path.is_file(), name
    for name in ("plan_mrc.png", "plan_goodput.png"):
        assert (out / "figures" / name).is_file()
        assert f"figures/{name}" in md


def test_no_percentage_above_100(report: tuple[Path, dict]) -> None:
    out, _ = report
    md = (out / "report.md").read_text()
    found = [
        m for m in re.findall(r"(\d[\d,]*(?:\.\d+)?)\s?%", md) if float(m.replace(",", "")) > 100
    ]
    assert not found, found


def test_html_tables_do_not_break_words(report: tuple[Path, dict]) -> None:
    out, _ = report
    page = (out / "report.html").read_text()
    style = re.search(r"<style>(.*?)</style>", page, re.DOTALL)[1]
    assert "overflow-wrap:anywhere" not in style and "word-break:break-all" not in style
    assert "word-break:normal" in style and "overflow-wrap:normal" in style
    assert re.search(r"td\.num\{[^}]*white-space:nowrap", style)
    assert re.search(r"table\{[^}]*overflow-x:auto", style)
    assert '<td class="num">' in page


def test_ratio_formatting() -> None:
    assert fmt_ratio(0.973) == "97.3%"
    assert fmt_ratio(6211.674) == "6,212×"
    assert fmt_ratio(1.5) == "1.5×"
    assert fmt_ratio(3e-7) == "0.00003%" and fmt_ratio(0.8, 1) == "80%"  # never an exponent
    assert percents_over_100("a 621,167% b 99.5% c 100%") == ["621,167%"]
    assert as_multiples("from 77,648% to 50%") == "from 776× to 50%"
