"""Small pieces the report's sections share: numbers as the report writes them
(durations, multiples, shares, sizes), a section's images, and the list of rows that are
not results (what each would need)."""

from __future__ import annotations

import math

from replay._units import format_bytes, format_duration, format_rate
from replay.report.document import Block, Bullets, Image, Paragraph, fmt_multiple, fmt_ratio
from replay.report.figures import FigureOut


def ms(seconds: float | None) -> str:
    """A duration (`0.352 ms`, `2.16 s`): `replay._units.format_duration`."""
    return "n/a" if seconds is None or not math.isfinite(seconds) else format_duration(seconds)


def x(value: float | None) -> str:
    return fmt_multiple(value)


def pct(value: float | None, digits: int = 3) -> str:
    """A share: a percentage up to 100%, a multiple above (`fmt_ratio`)."""
    return fmt_ratio(value, digits)


def bytes_text(value: float | None) -> str:
    return "n/a" if value is None or not math.isfinite(value) else format_bytes(value)


def rate_text(bytes_per_s: float | None) -> str:
    """A write or transfer rate in decimal units (`1.16 GB/s`), as drives are rated."""
    ok = bytes_per_s is not None and math.isfinite(bytes_per_s)
    return format_rate(bytes_per_s) if ok and bytes_per_s is not None else "n/a"


def images(figures: list[FigureOut], section: str) -> list[Block]:
    return [Image(f.name, f.title, f.caption) for f in figures if f.section == section]


def not_shown(items: list[tuple[str, str]]) -> list[Block]:
    """Rows that are no result, grouped by what they need: (label, needs) pairs."""
    if not items:
        return []
    grouped: dict[str, list[str]] = {}
    for label, needs in items:
        grouped.setdefault(needs, []).append(label)
    return [
        Paragraph("Not shown (artifacts of the replayed span, not results):"),
        Bullets(
            tuple(
                f"{', '.join(labels[:8])}{f' (+{len(labels) - 8})' if len(labels) > 8 else ''}: "
                f"{needs}"
                for needs, labels in list(grouped.items())[:30]
            )
        ),
    ]


__all__ = ["bytes_text", "images", "ms", "not_shown", "pct", "rate_text", "x"]
