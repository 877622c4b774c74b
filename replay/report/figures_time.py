"""The time and energy figures of `replay report` (sections "time" and "energy"): where
each system's time and energy per batch go, for every comparison and for the runs given
alone. `time_parts` and `energy_parts` split a run's mean time and energy per batch into
the components of `TIME_PARTS` and `ENERGY_PARTS` (fixed colours in every figure).

- ``time_<group>.png`` (time): for every comparison (group = its folder name) and for the
  runs given alone (group "runs"): stacked bars of the mean time per batch (ms; µs or s
  when the totals call for it) per
  system, split into compute, memory access, link transfers, read-after-write stall,
  checkpoint stall and other; totals on the bars. When the totals span more than 10× a
  second panel shows each system's split in %.
- ``energy_<group>.png`` (energy): the same groups, stacked bars of the energy per batch:
  memory and link dynamic energy, static power, compute device; totals on the bars (and
  the % panel when the totals span more than 10×).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import PercentFormatter

# `figures.save` is looked up when a figure is written, as in figures.py itself, so a
# patched `figures.save` (tests/test_untrusted.py records the texts drawn) sees it too
from replay.report import figures
from replay.report.analysis import TERMS, time_terms
from replay.report.figures import (
    ENERGY_PARTS,
    HEIGHT,
    MAX_TITLE_NAME,
    TIME_PARTS,
    WIDTH,
    FigureOut,
    _category_ticks,
    _col_sum,
    _cut,
    _energy_unit,
    _g,
    _pct,
    _spans,
    _time_unit,
    new_figure,
)
from replay.report.load import RunData


def time_parts(run: RunData) -> list[float]:
    """Mean seconds per batch of each `TIME_PARTS` component, over all batches (the
    split is `replay.report.analysis.time_terms`'s)."""
    terms = time_terms(run, steady=False)
    return [terms[term] for term in TERMS]


def energy_parts(run: RunData) -> list[float]:
    """Mean joules per batch of each `ENERGY_PARTS` component."""
    batches = max(run.batches.height, 1)
    return [_col_sum(run.batches, column) / batches for _, column, _ in ENERGY_PARTS]


def _stacked(
    runs: Sequence[RunData],
    parts: Sequence[tuple[str, str]],
    values: list[list[float]],
    *,
    scale: float,
    unit: str,
    ylabel: str,
    title: str,
) -> Figure:
    totals = [sum(v) for v in values]
    split = _spans(totals, 10.0)
    labels = [r.label for r in runs]
    width = max(WIDTH, min(12.0, 2.5 + 0.75 * len(runs)))
    fig = new_figure(width, 6.4 if split else HEIGHT)
    axes = fig.subplots(2, 1, sharex=True) if split else [fig.add_subplot()]
    x = np.arange(len(runs))
    used = [i for i in range(len(parts)) if any(v[i] > 0 for v in values)]
    ax = axes[0]
    bottom = np.zeros(len(runs))
    for i in used:
        heights = np.array([v[i] * scale for v in values])
        ax.bar(x, heights, bottom=bottom, color=parts[i][1], width=0.65, label=parts[i][0])
        bottom += heights
    for xi, total in zip(x, totals, strict=True):
        ax.annotate(
            f"{_g(total * scale)} {unit}",
            (xi, total * scale),
            xytext=(0, 2),
            textcoords="offset points",
            ha="center",
            va="bottom",
            fontsize=8,
        )
    ax.set_ylim(0, max(max(totals) * scale * 1.15, 1e-12))
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=8, frameon=False)
    if split:
        share_ax = axes[1]
        bottom = np.zeros(len(runs))
        for i in used:
            shares = np.array(
                [100 * v[i] / t if t > 0 else 0.0 for v, t in zip(values, totals, strict=True)]
            )
            share_ax.bar(x, shares, bottom=bottom, color=parts[i][1], width=0.65)
            bottom += shares
        share_ax.set_ylim(0, 100)
        share_ax.set_ylabel("share of each system's total (%)")
        share_ax.yaxis.set_major_formatter(PercentFormatter(100))
        share_ax.grid(True, axis="y", alpha=0.3)
    _category_ticks(axes[-1], labels, width=28)
    pad = max(0.0, (4 - len(runs)) / 2)  # a lone bar is not drawn page-wide
    axes[-1].set_xlim(-0.6 - pad, len(runs) - 0.4 + pad)
    axes[-1].set_xlabel("system")
    return fig


def _group_caption(
    runs: Sequence[RunData],
    parts: Sequence[tuple[str, str]],
    values: list[list[float]],
    scale: float,
    unit: str,
    what: str,
) -> str:
    totals = [sum(v) for v in values]
    lo = min(range(len(runs)), key=lambda i: totals[i])
    hi = max(range(len(runs)), key=lambda i: totals[i])
    top = max(range(len(parts)), key=lambda j: values[hi][j])
    share = values[hi][top] / totals[hi] if totals[hi] > 0 else 0.0
    largest = f"{parts[top][0]} is {_pct(share)} of {runs[hi].label}'s {what}"
    if len(runs) == 1:
        return f"{runs[0].label}: {_g(totals[0] * scale)} {unit} per batch; {largest}."
    ratio = totals[hi] / totals[lo] if totals[lo] > 0 else float("inf")
    return (
        f"{runs[lo].label} needs the least, {_g(totals[lo] * scale)} {unit} per batch, "
        f"{ratio:.3g}× less than {runs[hi].label} ({_g(totals[hi] * scale)} {unit}); "
        f"{largest}."
    )


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
    scale, unit = _time_unit(max(sum(v) for v in values))
    name = f"time_{group}.png"
    title = f"Time per batch by component — {_cut(group, MAX_TITLE_NAME)}"
    fig = _stacked(
        runs,
        TIME_PARTS,
        values,
        scale=scale,
        unit=unit,
        ylabel=f"mean time per batch ({unit})",
        title=title,
    )
    figures.save(fig, out / name)
    caption = _group_caption(runs, TIME_PARTS, values, scale, unit, "time")
    return FigureOut(name, title, caption, "time")


def _energy_figure(group: str, runs: Sequence[RunData], out: Path) -> FigureOut | None:
    runs = [r for r in _dedupe_labels(runs) if "energy_j" in r.batches.columns]
    if not runs:
        return None
    values = [energy_parts(r) for r in runs]
    scale, unit = _energy_unit(max(sum(v) for v in values))
    parts = [(label, color) for label, _, color in ENERGY_PARTS]
    name = f"energy_{group}.png"
    title = f"Energy per batch by component — {_cut(group, MAX_TITLE_NAME)}"
    fig = _stacked(
        runs,
        parts,
        values,
        scale=scale,
        unit=unit,
        ylabel=f"mean energy per batch ({unit})",
        title=title,
    )
    figures.save(fig, out / name)
    caption = _group_caption(runs, parts, values, scale, unit, "energy")
    return FigureOut(name, title, caption, "energy")
