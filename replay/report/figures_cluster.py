"""The cluster figures of `replay report` (section "cluster"), one per cluster run (a run
folder whose summary.json has a `cluster`; see `replay.report.cluster`).

- ``cluster_<name>.png`` (cluster; name = the run's display name, made a file name and
  unique): left, per GPU, its lookups (bars, from summary.json `ranks`, which
  ranks.parquet sums to) and its cache's hit ratio (markers on the right axis; a
  PatrickStar run's ranks have no hits: lookups only), the worst GPU's marked; right, per
  batch (the whole run, in bins of equal batches when it has more than `MAX_BINS`), the
  step time stacked: the slowest GPU's embedding (`time_embedding_exposed_s`, the max
  over the GPUs), the all-to-all (`all_to_all_s`), the all-reduce (`allreduce_s`), and
  compute and the rest (the step time less those three); a PatrickStar run stacks one
  GPU's chunk replay and its collectives (`patrickstar_comm_s`).

A run without batches gets no figure.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import polars as pl

from replay._units import format_duration

# `figures.save` is looked up when a figure is written, as in figures.py itself, so a
# patched `figures.save` (tests/test_untrusted.py records the texts drawn) sees it too
from replay.report import figures
from replay.report.cluster import SECTION, cluster_row, rank_hit_ratios
from replay.report.figures import (
    HEIGHT,
    MAX_TITLE_NAME,
    WHOLE,
    FigureOut,
    _axis_count,
    _cut,
    _sanitise,
    _time_unit,
    _unique,
    new_figure,
)
from replay.report.load import RunData

MAX_BINS = 400  # points of the per-batch panel
# (label, colour) of the step's parts, bottom to top
STEP_PARTS = (
    ("slowest GPU's embedding", "tab:orange"),
    ("all-to-all", "tab:green"),
    ("all-reduce", "tab:purple"),
    ("compute and other", "tab:blue"),
)
PATRICKSTAR_PARTS = (("one GPU's chunk replay", "tab:orange"), ("collectives", "tab:purple"))


def _column(frame: pl.DataFrame, name: str) -> np.ndarray:
    if name not in frame.columns:
        return np.zeros(frame.height)
    return frame[name].cast(pl.Float64).fill_null(0.0).to_numpy()


def step_parts(run: RunData) -> tuple[np.ndarray, list[tuple[str, str, np.ndarray]]]:
    """The batches and, per batch, the step time's parts (label, colour, seconds) in
    stacking order; they add up to `step_time_s` (`time_s` when absent)."""
    frame = run.batches.sort("batch") if "batch" in run.batches.columns else run.batches
    batch = _column(frame, "batch") if "batch" in frame.columns else np.arange(frame.height)
    step = _column(frame, "step_time_s" if "step_time_s" in frame.columns else "time_s")
    if "patrickstar_comm_s" in frame.columns:
        comm = _column(frame, "patrickstar_comm_s")
        values = [step - comm, comm]
        parts: tuple[tuple[str, str], ...] = PATRICKSTAR_PARTS
    else:
        known = [
            _column(frame, name)
            for name in ("time_embedding_exposed_s", "all_to_all_s", "allreduce_s")
        ]
        values = [*known, step - sum(known)]
        parts = STEP_PARTS
    return batch, [
        (label, color, np.maximum(v, 0.0)) for (label, color), v in zip(parts, values, strict=True)
    ]


def _binned(x: np.ndarray, values: list[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray], int]:
    """Means over bins of equal batches, at most MAX_BINS of them (the bin's width)."""
    width = max(1, -(-len(x) // MAX_BINS))
    if width == 1:
        return x, values, 1
    edges = np.arange(0, len(x), width)

    def mean(v: np.ndarray) -> np.ndarray:
        return np.add.reduceat(v, edges) / np.diff(np.append(edges, len(v)))

    return mean(x), [mean(v) for v in values], width


def _cluster_figure(run: RunData, name: str, shown: str, out: Path) -> FigureOut | None:
    ranks = run.summary.get("ranks") or []
    if run.batches.height == 0 or not ranks:
        return None
    row = cluster_row(run)
    fig = new_figure(11.0, HEIGHT)
    left, right = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, 1.4]})
    gpus = np.arange(len(ranks))
    lookups = np.array([float(r.get("lookups", 0)) for r in ranks])
    left.bar(gpus, lookups, color="tab:gray", alpha=0.6, label="lookups")
    left.set_xlabel("GPU (rank)")
    left.set_ylabel("lookups over the run")
    left.yaxis.set_major_formatter(_axis_count(float(lookups.max()) if len(lookups) else 0.0))
    if len(gpus) <= 16:
        left.set_xticks(gpus)
    ratios = rank_hit_ratios(run)
    if ratios is not None:
        twin = left.twinx()
        twin.plot(gpus, ratios, "o", color="tab:blue", label="hit ratio")
        worst = row["worst_rank"]
        twin.plot([worst], [ratios[worst]], "o", color="tab:red", label="worst GPU")
        twin.set_ylim(0.0, 1.05)
        twin.set_ylabel("hit ratio of the GPU's cache")
    left.set_title("per GPU", fontsize="medium")

    batch, parts = step_parts(run)
    x, values, width = _binned(batch, [v for _, _, v in parts])
    scale, unit = _time_unit(float(sum(values).max()) if len(x) else 0.0)  # type: ignore[union-attr]  # a sum of arrays
    right.stackplot(
        x,
        *[v * scale for v in values],
        labels=[label for label, _, _ in parts],
        colors=[color for _, color, _ in parts],
    )
    right.set_xlabel("batch" if width == 1 else f"batch (means of {width} batches)")
    right.set_ylabel(f"step time, the slowest GPU's ({unit})")
    right.set_ylim(bottom=0.0)
    right.set_title(f"per batch ({WHOLE})", fontsize="medium")
    handles = [h for ax in fig.axes for h in ax.get_legend_handles_labels()[0]]
    fig.legend(handles=handles, loc="outside lower center", ncols=4, fontsize="small")
    title = f"{_cut(shown, MAX_TITLE_NAME)} on {row['world']} GPUs"
    fig.suptitle(title)
    figures.save(fig, out / name)

    means = ", ".join(
        f"{label} {format_duration(float(np.mean(v)))}" for label, _, v in parts if len(v)
    )
    caption = (
        f"{shown} on {row['world']} GPUs ({row['nodes']} x {row['gpus_per_node']}), "
        f"{row['sharding']} sharding. Left: each GPU's lookups"
    )
    if ratios is not None:
        caption += (
            f" and its cache's hit ratio (worst: GPU {row['worst_rank']}, "
            f"{row['hit_ratio_worst']:.4f}; mean over the GPUs {row['hit_ratio_mean']:.4f})"
        )
    caption += f". Right: the step time per batch by part (means over the run: {means})."
    return FigureOut(name, title, caption, SECTION)


def cluster_figures(runs: Sequence[RunData], names: dict[Path, str], out: Path) -> list[FigureOut]:
    """A figure per cluster run among `runs` (module docstring), in their order."""
    used: set[str] = set()
    drawn: list[FigureOut] = []
    for run in runs:
        if not isinstance(run.summary.get("cluster"), dict):
            continue
        shown = names.get(run.path, run.label)
        name = f"cluster_{_unique(_sanitise(shown), used)}.png"
        figure = _cluster_figure(run, name, shown, out)
        if figure is not None:
            drawn.append(figure)
    return drawn


__all__ = ["MAX_BINS", "cluster_figures", "step_parts"]
