"""What every report must hold, whatever it reports (issue 54): one unit per quantity
(each duration and size written as `replay._units` writes it, so one value never reads
`36.1 s` here and `0.601 min` there), every figure written shown once, every plan in the
summary, and none of the phrases that said nothing
(`n/a ns`, `1 tables`). The docs' examples (tests/test_readme.py) and the report tests call
`check_report` on each report they write."""

from __future__ import annotations

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
    if not html_page:
        return
    page = (out / "report.html").read_text()
    assert "<code>" not in page, f"{out}: a <code> span in report.html (names hold backticks)"


__all__ = ["check_report", "mixed_units"]
