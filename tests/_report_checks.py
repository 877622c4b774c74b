"""What every report must hold, whatever it reports (issue 54): one unit per quantity
(each duration and size written as `replay._units` writes it, so one value never reads
`36.1 s` here and `0.601 min` there), every figure written shown once, every plan in the
summary, a cluster's column labels saying whose each figure is (`unscoped_labels`), and
none of the phrases that said nothing (`n/a ns`, `1 tables`). The docs' examples
(tests/test_readme.py) and the report tests call `check_report` on each report they
write."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

from replay._units import format_bytes, format_duration

_SECONDS = {"ms": 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
_BYTES = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40, "PiB": 1 << 50}
_NUMBER = r"(?<![\w.,/-])(\d[\d,]*(?:\.\d+)?) "
DURATION = re.compile(_NUMBER + r"(ms|s|min|h|d)(?![\w/])")
SIZE = re.compile(_NUMBER + r"(B|KiB|MiB|GiB|TiB|PiB)(?![\w/])")
_HEADING = re.compile(r"^## (Plan(?: \d+ \(.+\))?)$", re.M)


def _canonical(value: float, text: str, fmt: object) -> bool:
    """Whether `text` is how `fmt` writes `value` (within the 3 digits it was read from)."""
    return any(fmt(value * k) == text for k in (1 - 5e-4, 1.0, 1 + 5e-4))  # type: ignore[operator]


def mixed_units(text: str) -> list[str]:
    """Each duration or size in `text` that is not written as `format_duration` or
    `format_bytes` writes its value: the same value would read in another unit elsewhere."""
    text = text.replace("\\", "")  # Markdown's escapes
    bad = []
    for m in DURATION.finditer(text):
        value = float(m[1].replace(",", "")) * _SECONDS[m[2]]
        if not _canonical(value, m[0], format_duration):
            bad.append(f"{m[0]} (as written elsewhere: {format_duration(value)})")
    for m in SIZE.finditer(text):
        value = float(m[1].replace(",", "")) * _BYTES[m[2]]
        if not _canonical(value, m[0], format_bytes):
            bad.append(f"{m[0]} (as written elsewhere: {format_bytes(value)})")
    return bad


# a column of bytes or time; on a cluster it names whose: one GPU's, a node's, the job's,
# the total over all GPUs or nodes (a table of one row per GPU or node needs no more)
QUANTITY = re.compile(
    r"bytes|written|storage|memory|\bwrite\b|\brestore\b|stall|all-to-all|all-reduce|"
    r"step time|time per batch|energy per batch|lookups",
    re.I,
)
SCOPE = re.compile(r"GPU|node|total|the job|busiest|slowest|worst|mean", re.I)
OWN_CODE = re.compile(r"[A-Za-z0-9_./=+ -]+")  # what a code span the report writes holds
_PER_ROW = re.compile(r"^(GPU|node|rank|part \(GPU \d+\))$", re.I)


def _headers(md: str) -> list[list[str]]:
    lines = md.splitlines()
    return [
        [c.strip() for c in line.strip().strip("|").split("|")]
        for line, below in itertools.pairwise(lines)
        if line.startswith("| ") and below.startswith("|---")
    ]


def unscoped_labels(md: str) -> list[str]:
    """The column labels of a cluster's tables that give a byte or time figure without
    saying whose it is. A plan.md of a cluster (its `Cluster:` answer line) is held to it
    whole; a report, section by section: a plan's that answers a cluster and the cluster
    runs' section. One GPU's are not (everything there is that GPU's)."""
    whole = md.startswith("# Plan") and "\n- Cluster: " in md
    parts = [md] if whole else re.split(r"\n(?=## )", md)
    bad = []
    for part in parts:
        if not (whole or "\n- Cluster: " in part or part.startswith("## Cluster\n")):
            continue
        for header in _headers(part):
            if _PER_ROW.match(header[0]):
                continue
            bad += [c for c in header if QUANTITY.search(c) and not SCOPE.search(c)]
    return bad


def _summary_section(md: str) -> str:
    return md.split("## Summary", 1)[1].split("\n## ", 1)[0]


def check_report(out: Path, *, html_page: bool = True) -> None:
    """Every check above on the report folder `out` (`html_page=False`: a folder kept
    without its report.html, as the committed example is)."""
    md = (out / "report.md").read_text()
    summary = json.loads((out / "summary.json").read_text())
    # one unit per quantity, across the text and the figures' captions
    bad = mixed_units(md)
    assert not bad, f"{out}: durations or sizes not written in their one unit: {bad[:8]}"
    # every figure written is shown, once; every figure shown was written
    written = sorted(p.name for p in (out / "figures").iterdir())
    for name in written:
        assert md.count(f"](figures/{name})") == 1, (out, name, md.count(f"](figures/{name})"))
    shown = re.findall(r"\]\(figures/([^)]+)\)", md)
    assert sorted(shown) == written, (out, sorted(set(shown) ^ set(written)))
    # every plan's section is linked from the summary
    top = _summary_section(md)
    for plan in _HEADING.findall(md):
        anchor = re.sub(r"[^a-z0-9]+", "-", plan.lower()).strip("-")
        assert f"](#{anchor}" in top, f"{out}: {plan} has no line in the summary"
    assert len(summary["summary"]) <= 10
    # phrases that said nothing
    for phrase in ("n/a ns", " 1 tables", "runs made with --no-inspect"):
        assert phrase not in md, (out, phrase)
    assert not re.search(r"\| none \|[^\n]*\| 0 ms \| 0 ms \|", md), "Young/Daly of none"
    # a cluster's labels say whose figure each is
    unscoped = unscoped_labels(md)
    assert not unscoped, f"{out}: a cluster's labels without their scope: {unscoped[:8]}"
    if not html_page:
        return
    page = (out / "report.html").read_text()
    # code spans are the report's own (a command, an option), never a name's backticks
    spans = re.findall(r"<code>(.*?)</code>", page, re.S)
    assert all(OWN_CODE.fullmatch(s) for s in spans), (out, spans)
    assert len(spans) == len(re.findall(r"(?<!\\)`[^`]+`", md)), (out, spans)


__all__ = ["check_report", "mixed_units", "unscoped_labels"]
