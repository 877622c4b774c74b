"""The checkpoint figure of `replay report` (section "checkpoints"), from the checkpoint
and log writes the runs with a checkpoint strategy record.

- ``checkpoint_bytes.png`` (checkpoints): bytes of each checkpoint or log write against
  its batch (MB; log y when the sizes span more than 10×), one series per run with a
  checkpoint strategy, at most 10.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl

# `figures.save` is looked up when a figure is written, as in figures.py itself, so a
# patched `figures.save` (tests/test_untrusted.py records the texts drawn) sees it too
from replay.report import figures
from replay.report.figures import (
    MARKERS,
    MAX_SERIES,
    FigureOut,
    _g,
    _legend,
    _legend_label,
    _merge_runs,
    _short,
    _spans,
    _Styler,
    new_figure,
)
from replay.report.load import RunData


def _writes(count: int) -> str:
    return f"{count:,} write{'' if count == 1 else 's'}"


def _checkpoint_key(run: RunData) -> Any:
    frame = run.checkpoints
    return (run.strategy, frame["batch"].to_numpy().tobytes(), frame["bytes"].to_numpy().tobytes())


def _checkpoint_bytes(
    runs: Sequence[RunData], colors: dict[str, str], names: dict[Path, str], out: Path
) -> FigureOut | None:
    usable = [
        r
        for r in runs
        if r.strategy != "none"
        and r.checkpoints.height > 0
        and {"batch", "bytes"} <= set(r.checkpoints.columns)
        and float(r.checkpoints["bytes"].max() or 0) > 0
    ]
    merged = _merge_runs(usable, _checkpoint_key, names)
    if not merged:
        return None
    total = len(merged)
    chosen = merged[:MAX_SERIES]
    name, title = "checkpoint_bytes.png", "Bytes written per checkpoint"
    fig = new_figure()
    ax = fig.add_subplot()
    style = _Styler(colors)
    means: list[tuple[float, str, int]] = []
    levels: list[float] = []
    for i, (run, shown) in enumerate(chosen):
        frame = run.checkpoints.filter(pl.col("bytes") > 0).sort("batch")
        x = frame["batch"].to_numpy().astype(float)
        y = frame["bytes"].to_numpy().astype(float) / 1e6
        color, linestyle = style(run.label)
        few = len(x) <= 60
        label = _short(shown, 48)
        if run.strategy not in shown:
            label = f"{label} [{run.strategy}]"
        ax.plot(
            x,
            y,
            color=color,
            linestyle=linestyle if not few or len(x) > 1 else "none",
            linewidth=1.0,
            marker=MARKERS[i % len(MARKERS)] if few else None,
            markersize=4,
            label=_legend_label(label),
        )
        means.append((float(y.mean()), shown, len(x)))
        levels.extend((float(y.min()), float(y.max())))
    if _spans(levels, 10.0):
        ax.set_yscale("log")
        ax.set_ylabel("bytes per checkpoint (MB, log scale)")
    else:  # within one decade a log axis has no labelled tick to read
        ax.set_ylim(0, max(levels) * 1.15)
        ax.set_ylabel("bytes per checkpoint (MB)")
    ax.set_xlabel("batch (−1: baseline before training)")
    ax.set_title(title)
    ax.grid(True, which="major", alpha=0.3)
    _legend(ax, outside_from=4)
    figures.save(fig, out / name)
    lo, hi = min(means), max(means)
    if len(means) == 1:
        caption = f"{hi[1]} writes {_writes(hi[2])} of {_g(hi[0])} MB on average."
    elif _g(lo[0]) == _g(hi[0]):
        counts = sorted(m[2] for m in means)
        caption = (
            f"Every run writes {_g(hi[0])} MB per checkpoint on average; they differ in how "
            f"often ({_writes(counts[0])} to {_writes(counts[-1])})."
        )
    else:
        caption = (
            f"Mean bytes per checkpoint range from {_g(lo[0])} MB ({lo[1]}, {_writes(lo[2])}) "
            f"to {_g(hi[0])} MB ({hi[1]}, {_writes(hi[2])})."
        )
    if total > len(chosen):
        caption += f" The first {len(chosen)} of {total} runs are shown."
    return FigureOut(name, title, caption, "checkpoints")
