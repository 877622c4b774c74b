"""The time and energy figures of `replay report` (sections "time" and "energy"): where
each system's time and energy per batch go, tier by tier and link by link, for every
comparison and for the runs given alone. Every value is steady state: the mean over the
second half of each run's batches (`figures.steady_batches`).

- ``time_<group>.png`` (time): for every comparison (group = its folder name) and for the
  runs given alone (group "runs"): one stacked bar per system of the time per batch each
  part is busy: compute, each tier's `TIER_time_s`, each link's `LINK_time_s`, the
  read-after-write stall, the checkpoint stall and other. Tiers, links and compute
  overlap (a GPU-side fetch streams from the backing tier over the link; with
  `lookup.overlap_with_compute` the fetch hides behind compute), so a black mark shows
  each system's batch time (`time_s`), which the stack may exceed. When the batch times
  span more than 10× a second panel shows each part as a share of its system's batch
  time.
- ``energy_<group>.png`` (energy): the same groups, stacked bars of the energy per batch:
  each tier's and link's dynamic energy (its bytes × pJ/byte from the run's spec) plus
  its static power over the batch time, and the compute device (`energy_compute_j`); the
  parts add up to `energy_j` (an unattributed remainder is drawn when the spec does not
  account for all of it). Totals on the bars, and the % panel past 10×.

`time_parts` and `energy_parts` give the parts of one run (name -> mean per batch).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import PercentFormatter

from replay._units import format_duration, format_multiple

# `figures.save` is looked up when a figure is written, as in figures.py itself, so a
# patched `figures.save` (tests/test_untrusted.py records the texts drawn) sees it too
from replay.report import figures
from replay.report.figures import (
    HEIGHT,
    MAX_TITLE_NAME,
    STEADY,
    WIDTH,
    FigureOut,
    _category_ticks,
    _cut,
    _energy_unit,
    _g,
    _names,
    _num,
    _pct,
    _spans,
    _time_unit,
    new_figure,
    steady_batches,
    steady_span,
)
from replay.report.load import RunData

COMPUTE = "compute"
# fixed colours of the parts that are not a tier or a link
FIXED_COLORS = {
    COMPUTE: "tab:blue",
    "read-after-write stall": "tab:red",
    "checkpoint stall": "tab:purple",
    "other": "tab:gray",
    "compute device": "tab:blue",
    "dynamic, unattributed": "lightgray",
}
TIER_COLORS = ("tab:orange", "tab:brown", "gold", "tab:pink", "peru", "khaki")
LINK_COLORS = ("tab:green", "tab:cyan", "tab:olive", "mediumseagreen", "teal", "yellowgreen")
MAX_CAPTION_SYSTEMS = 6


def _tier(name: str) -> str:
    return f"tier {name}"


def _link(name: str) -> str:
    return f"link {name}"


def _mean(frame: Any, column: str) -> float:
    if column not in frame.columns or frame.height == 0:
        return 0.0
    return float(frame[column].sum()) / frame.height


def batch_time(run: RunData) -> float:
    """Steady-state mean seconds per batch (`time_s`)."""
    return _mean(steady_batches(run), "time_s")


def time_parts(run: RunData) -> dict[str, float]:
    """Steady-state mean seconds per batch each part is busy: compute, every tier's and
    link's time column, the read-after-write and checkpoint stalls, other. Tiers, links
    and compute overlap, so the parts may add up to more than the batch time."""
    frame = steady_batches(run)
    parts = {COMPUTE: _mean(frame, "time_compute_s")}
    for tier in _names(run, "tiers"):
        parts[_tier(tier)] = _mean(frame, f"{tier}_time_s")
    for link in _names(run, "links"):
        parts[_link(link)] = _mean(frame, f"{link}_time_s")
    parts["read-after-write stall"] = _mean(frame, "time_raw_stall_s")
    parts["checkpoint stall"] = _mean(frame, "time_checkpoint_s")
    parts["other"] = _mean(frame, "time_other_s")
    return parts


def _spec_of(run: RunData, kind: str, name: str) -> dict[str, Any]:
    spec = run.spec.get(kind)
    if isinstance(spec, dict):
        value = spec.get(name)
        return value if isinstance(value, dict) else {}
    if isinstance(spec, list):
        return next((t for t in spec if isinstance(t, dict) and t.get("name") == name), {})
    return {}


def _number(spec: dict[str, Any], key: str) -> float:
    return _num(spec.get(key)) or 0.0


def energy_parts(run: RunData) -> dict[str, float]:
    """Steady-state mean joules per batch of every tier and link (dynamic: bytes × the
    spec's pJ/byte; static: its static power × the batch time) and of the compute device
    (`energy_compute_j`); a remainder the spec does not account for is "dynamic,
    unattributed". The parts add up to the mean `energy_j`."""
    frame = steady_batches(run)
    seconds = _mean(frame, "time_s")
    parts: dict[str, float] = {}
    for tier in _names(run, "tiers"):
        spec = _spec_of(run, "tiers", tier)
        dynamic = 1e-12 * (
            _mean(frame, f"{tier}_read_bytes") * _number(spec, "energy_read_pj_per_byte")
            + _mean(frame, f"{tier}_write_bytes") * _number(spec, "energy_write_pj_per_byte")
        )
        parts[_tier(tier)] = dynamic + _number(spec, "static_power_w") * seconds
    for link in _names(run, "links"):
        spec = _spec_of(run, "links", link)
        moved = _mean(frame, f"{link}_h2d_bytes") + _mean(frame, f"{link}_d2h_bytes")
        dynamic = 1e-12 * moved * _number(spec, "energy_pj_per_byte")
        parts[_link(link)] = dynamic + _number(spec, "static_power_w") * seconds
    parts["compute device"] = _mean(frame, "energy_compute_j")
    total = _mean(frame, "energy_j")
    rest = total - sum(parts.values())
    if abs(rest) > 1e-9 * max(abs(total), 1e-30):
        parts["dynamic, unattributed"] = rest
    return parts


def _colors(keys: Sequence[str]) -> dict[str, str]:
    colors: dict[str, str] = {}
    tiers = links = 0
    for key in keys:
        if key in FIXED_COLORS:
            colors[key] = FIXED_COLORS[key]
        elif key.startswith("tier "):
            colors[key] = TIER_COLORS[tiers % len(TIER_COLORS)]
            tiers += 1
        else:
            colors[key] = LINK_COLORS[links % len(LINK_COLORS)]
            links += 1
    return colors


def _stacked(
    runs: Sequence[RunData],
    values: list[dict[str, float]],
    totals: list[float],
    *,
    unit: str,
    scale: float,
    ylabel: str,
    title: str,
    overlap: bool,
) -> Figure:
    keys = [
        k
        for k in dict.fromkeys(k for v in values for k in v)
        if any(v.get(k, 0) > 0 for v in values)
    ]
    colors = _colors(keys)
    stacks = [sum(max(v.get(k, 0.0), 0.0) for k in keys) for v in values]
    split = _spans(totals, 10.0)
    width = max(WIDTH, min(12.0, 2.5 + 0.75 * len(runs)))
    fig = new_figure(width, 6.4 if split else HEIGHT)
    axes = fig.subplots(2, 1, sharex=True) if split else [fig.add_subplot()]
    x = np.arange(len(runs))
    ax = axes[0]
    bottom = np.zeros(len(runs))
    for key in keys:
        heights = np.array([max(v.get(key, 0.0), 0.0) * scale for v in values])
        ax.bar(x, heights, bottom=bottom, color=colors[key], width=0.65, label=key)
        bottom += heights
    if overlap:
        ax.hlines(
            [t * scale for t in totals],
            x - 0.4,
            x + 0.4,
            colors="black",
            linewidth=2.0,
            label="batch time (parts overlap)",
        )
    for xi, total, stack in zip(x, totals, stacks, strict=True):
        ax.annotate(
            f"{_g(total * scale)} {unit}",
            (xi, max(total, stack) * scale),
            xytext=(0, 2),
            textcoords="offset points",
            ha="center",
            va="bottom",
            fontsize=8,
        )
    ax.set_ylim(0, max(max(max(totals), max(stacks)) * scale * 1.15, 1e-12))
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=8, frameon=False)
    if split:
        share_ax = axes[1]
        bottom = np.zeros(len(runs))
        for key in keys:
            shares = np.array(
                [
                    100 * max(v.get(key, 0.0), 0.0) / t if t > 0 else 0.0
                    for v, t in zip(values, totals, strict=True)
                ]
            )
            share_ax.bar(x, shares, bottom=bottom, color=colors[key], width=0.65)
            bottom += shares
        if overlap:
            share_ax.axhline(100, color="black", linewidth=1.0)
        share_ax.set_ylim(0, max(100.0, float(bottom.max()) * 1.05))
        share_ax.set_ylabel("share of the system's batch time" if overlap else "share of total")
        share_ax.yaxis.set_major_formatter(PercentFormatter(100))
        share_ax.grid(True, axis="y", alpha=0.3)
    _category_ticks(axes[-1], [r.label for r in runs], width=28)
    pad = max(0.0, (4 - len(runs)) / 2)  # a lone bar is not drawn page-wide
    axes[-1].set_xlim(-0.6 - pad, len(runs) - 0.4 + pad)
    axes[-1].set_xlabel("system")
    return fig


def _caption(
    runs: Sequence[RunData],
    values: list[dict[str, float]],
    totals: list[float],
    scale: float,
    unit: str,
    what: str,
) -> str:
    """Steady state, each system's total and its largest part, computed from the data."""
    items = []
    for run, parts, total in list(zip(runs, values, totals, strict=True))[:MAX_CAPTION_SYSTEMS]:
        top = max(parts, key=lambda k: parts[k])
        share = parts[top] / total if total > 0 else 0.0
        # a time as every duration of the report is written (the axis keeps one unit)
        value = format_duration(total) if what == "time" else f"{_g(total * scale)} {unit}"
        items.append(f"{run.label} {value} (largest part: {top}, {_pct(share)})")
    text = f"Steady state ({steady_span(runs)}), {what} per batch: " + "; ".join(items)
    if len(runs) > MAX_CAPTION_SYSTEMS:
        text += f"; and {len(runs) - MAX_CAPTION_SYSTEMS} more"
    text += "."
    if len(runs) > 1:
        lo = min(range(len(runs)), key=lambda i: totals[i])
        hi = max(range(len(runs)), key=lambda i: totals[i])
        if totals[lo] > 0 and hi != lo:
            text += (
                f" {runs[lo].label} needs {format_multiple(totals[hi] / totals[lo])} less than "
                f"{runs[hi].label}."
            )
    return text


def _dedupe_labels(runs: Sequence[RunData]) -> list[RunData]:
    seen: set[str] = set()
    kept = []
    for run in runs:
        if run.label not in seen and run.batches.height > 0:
            seen.add(run.label)
            kept.append(run)
    return kept


def _time_figure(group: str, runs: Sequence[RunData], out: Path) -> FigureOut | None:
    runs = _dedupe_labels(runs)
    if not runs:
        return None
    values = [time_parts(r) for r in runs]
    totals = [batch_time(r) for r in runs]
    stacks = [sum(v.values()) for v in values]
    scale, unit = _time_unit(max(max(totals), max(stacks)))
    name = f"time_{group}.png"
    title = f"Time per batch by tier and link, {STEADY} — {_cut(group, MAX_TITLE_NAME)}"
    fig = _stacked(
        runs,
        values,
        totals,
        unit=unit,
        scale=scale,
        ylabel=f"busy time per batch ({unit}), {STEADY}",
        title=title,
        overlap=True,
    )
    figures.save(fig, out / name)
    caption = _caption(runs, values, totals, scale, unit, "time")
    if any(s > t * 1.001 for s, t in zip(stacks, totals, strict=True)):
        caption += (
            " Tiers, links and compute work at the same time, so a stack can exceed the "
            "batch time (black mark); a part's share is of the batch time."
        )
    return FigureOut(name, title, caption, "time")


def _energy_figure(group: str, runs: Sequence[RunData], out: Path) -> FigureOut | None:
    runs = [r for r in _dedupe_labels(runs) if "energy_j" in r.batches.columns]
    if not runs:
        return None
    values = [energy_parts(r) for r in runs]
    totals = [sum(v.values()) for v in values]
    scale, unit = _energy_unit(max(totals))
    name = f"energy_{group}.png"
    title = f"Energy per batch by tier and link, {STEADY} — {_cut(group, MAX_TITLE_NAME)}"
    fig = _stacked(
        runs,
        values,
        totals,
        unit=unit,
        scale=scale,
        ylabel=f"energy per batch ({unit}), {STEADY}",
        title=title,
        overlap=False,
    )
    figures.save(fig, out / name)
    caption = _caption(runs, values, totals, scale, unit, "energy")
    caption += " A tier's or link's part is its dynamic energy and its static power."
    return FigureOut(name, title, caption, "energy")
