"""The workload figures of `replay report` (section "workload"): how skewed the trace's
lookups are, how much each batch reuses of the previous one, how many distinct rows a
batch looks up and how fast the rows are touched.

- ``workload_skew.png`` (workload): per table, the share of the lookups taken by its
  hottest 1% of rows (bars), and the overall share (line). From the trace statistics
  (`Results.workload()`, the `replay inspect --json` document).
- ``workload_reuse.png`` (workload): per table, the mean share of a batch's distinct rows
  that the previous batch also looked up (bars), the overall value (line), and a dashed
  reference at the 80% cited by TrainingCXL.
- ``workload_distinct.png`` (workload): distinct rows per batch against the batch number,
  with the lookups per batch for scale and a right axis in % of the mean lookups; from the
  first run's `batches.parquet`.
- ``workload_touched.png`` (workload): the fraction of all rows touched after x batches
  (log x), from the statistics' `touched_curve`; it sizes incremental checkpoints.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import PercentFormatter

# `figures.save` is looked up when a figure is written, as in figures.py itself, so a
# patched `figures.save` (tests/test_untrusted.py records the texts drawn) sees it too
from replay.report import figures
from replay.report.figures import (
    TRAININGCXL_REUSE,
    FigureOut,
    _axis_count,
    _category_ticks,
    _count,
    _num,
    _pct,
    _rows,
    _short,
    _thin,
    new_figure,
)
from replay.report.load import RunData


def _per_table_bars(
    workload: dict[str, Any], key: str, title: str, ylabel: str
) -> tuple[Figure, Axes, list[float], float] | None:
    tables = [t for t in workload.get("tables") or [] if _num(t.get(key)) is not None]
    overall = _num(workload.get(key))
    if not tables or overall is None:
        return None
    names = [str(t.get("name", i)) for i, t in enumerate(tables)]
    values = [float(t[key]) for t in tables]
    fig = new_figure()
    ax = fig.add_subplot()
    x = np.arange(len(values))
    ax.bar(x, [100 * v for v in values], color="tab:blue", width=0.75, label="per table")
    ax.axhline(100 * overall, color="black", linewidth=1.5, label=f"overall: {_pct(overall)}")
    _category_ticks(ax, names, width=14)
    ax.set_xlim(-0.6, len(values) - 0.4)
    ax.set_xlabel("embedding table")
    ax.set_ylabel(ylabel)
    ax.yaxis.set_major_formatter(PercentFormatter(100))
    ax.set_title(title)
    ax.grid(True, axis="y", alpha=0.3)
    return fig, ax, values, overall


def _top_legend(ax: Axes) -> None:
    """A legend in a band above 100% so it covers no bar."""
    ax.set_ylim(0, 122)
    ax.set_yticks(range(0, 101, 20))
    ax.legend(loc="upper center", ncols=3, fontsize=8, frameon=False)


def _workload_skew(workload: dict[str, Any], out: Path) -> FigureOut | None:
    name, title = "workload_skew.png", "Skew: lookups taken by the hottest 1% of rows"
    drawn = _per_table_bars(
        workload, "top1pct_share", title, "lookups to the hottest 1% of rows (%)"
    )
    if drawn is None:
        return None
    fig, ax, values, overall = drawn
    _top_legend(ax)
    figures.save(fig, out / name)
    caption = (
        f"The hottest 1% of rows take {_pct(overall)} of the lookups overall "
        f"(range {_pct(min(values))}–{_pct(max(values))} across {len(values)} tables)."
    )
    return FigureOut(name, title, caption, "workload")


def _workload_reuse(workload: dict[str, Any], out: Path) -> FigureOut | None:
    name, title = "workload_reuse.png", "Consecutive-batch reuse per table"
    drawn = _per_table_bars(
        workload,
        "consecutive_reuse_mean",
        title,
        "distinct rows also in the previous batch (%)",
    )
    if drawn is None:
        return None
    fig, ax, values, overall = drawn
    ax.axhline(
        100 * TRAININGCXL_REUSE,
        color="tab:red",
        linestyle="--",
        linewidth=1.2,
        label="80% cited by TrainingCXL",
    )
    _top_legend(ax)
    figures.save(fig, out / name)
    compare = "below" if overall < TRAININGCXL_REUSE else "at or above"
    caption = (
        f"On average {_pct(overall)} of a batch's distinct rows were also looked up by the "
        f"previous batch (range {_pct(min(values))}–{_pct(max(values))} across "
        f"{len(values)} tables), {compare} the 80% TrainingCXL cites."
    )
    return FigureOut(name, title, caption, "workload")


def _workload_distinct(run: RunData, out: Path) -> FigureOut | None:
    frame = run.batches
    if frame.height == 0 or not {"distinct_rows", "lookups"} <= set(frame.columns):
        return None
    name, title = "workload_distinct.png", "Distinct rows per batch"
    batch = frame["batch"] if "batch" in frame.columns else pl.Series(range(frame.height))
    x = batch.to_numpy().astype(float)
    distinct = frame["distinct_rows"].to_numpy().astype(float)
    lookups = frame["lookups"].to_numpy().astype(float)
    mean_lookups = float(lookups.mean()) if len(lookups) else 0.0
    fig = new_figure()
    ax = fig.add_subplot()
    xs, ls = _thin(x, lookups)
    ax.plot(xs, ls, color="tab:gray", linewidth=1.2, label="lookups per batch")
    xs, ds = _thin(x, distinct)
    ax.plot(xs, ds, color="tab:blue", linewidth=1.2, label="distinct rows per batch")
    ax.set_ylim(0, max(float(lookups.max(initial=0.0)), float(distinct.max(initial=0.0))) * 1.08)
    ax.set_xlabel("batch")
    ax.set_ylabel("rows or lookups per batch")
    ax.yaxis.set_major_formatter(_axis_count(float(lookups.max(initial=0.0))))
    if mean_lookups > 0:

        def to_pct(v: Any) -> Any:
            return 100 * v / mean_lookups

        def from_pct(p: Any) -> Any:
            return p * mean_lookups / 100

        right = ax.secondary_yaxis("right", functions=(to_pct, from_pct))
        right.set_ylabel("% of the mean lookups per batch")
    ax.set_title(f"{title} ({_short(run.label, 40)})")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right", fontsize=8, framealpha=0.9)
    figures.save(fig, out / name)
    total_lookups = float(lookups.sum())
    fraction = float(distinct.sum()) / total_lookups if total_lookups else 0.0
    caption = (
        f"A batch of {_count(mean_lookups)} lookups touches {_count(float(distinct.mean()))} "
        f"distinct rows on average ({_pct(fraction)} of its lookups; "
        f"range {_count(float(distinct.min()))}–{_count(float(distinct.max()))})."
    )
    return FigureOut(name, title, caption, "workload")


def _workload_touched(workload: dict[str, Any], out: Path) -> FigureOut | None:
    curve = [p for p in workload.get("touched_curve") or [] if len(p) == 2 and p[0] > 0]
    if not curve:
        return None
    name, title = "workload_touched.png", "Rows touched as training proceeds"
    x = np.array([float(p[0]) for p in curve])
    y = np.array([float(p[1]) for p in curve])
    fig = new_figure()
    ax = fig.add_subplot()
    ax.plot(x, 100 * y, color="tab:blue", marker="." if len(x) <= 80 else None)
    ax.set_xscale("log")
    ax.set_xlabel("batches trained (log scale)")
    ax.set_ylabel("rows ever looked up (% of all rows)")
    ax.yaxis.set_major_formatter(PercentFormatter(100, decimals=None))
    ax.set_ylim(0, max(float(100 * y.max()) * 1.1, 1e-9))
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    figures.save(fig, out / name)
    rows = _num(workload.get("rows"))
    of_rows = f" of the {_rows(rows)}" if rows else " of all rows"
    caption = (
        f"After {_count(x[-1])} batches {_pct(float(y[-1]))}{of_rows} have been looked up "
        f"({_pct(float(y[0]))} after the first batch)."
    )
    return FigureOut(name, title, caption, "workload")
