"""The checkpoint figure of `replay report` (section "checkpoints"), from the checkpoint
and log writes the runs with a checkpoint strategy record.

- ``checkpoint_bytes.png`` (checkpoints): one horizontal bar per run with a checkpoint
  strategy and at least `MIN_CHECKPOINTS` writes during training: the mean bytes per
  write (batch ≥ 0), a whisker from the smallest to the largest write and a diamond at
  the baseline written before training (batch −1) when there is one; bars grouped and
  coloured by strategy, one label per bar (log x when the sizes span more than 10×), at
  most `MAX_BARS`. Runs with identical writes are drawn once (the caption says which),
  and runs with fewer writes are left out (the caption names them); with none left, no
  figure.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl

from replay._study_bounds import MIN_CHECKPOINTS
from replay._units import format_bytes

# `figures.save` is looked up when a figure is written, as in figures.py itself, so a
# patched `figures.save` (tests/test_untrusted.py records the texts drawn) sees it too
from replay.report import figures
from replay.report.figures import (
    WIDTH,
    FigureOut,
    _bytes_unit,
    _g,
    _merge_runs,
    _same_note,
    _spans,
    _wrap,
    new_figure,
    system_colors,
)
from replay.report.load import RunData

MAX_BARS = 12
MAX_NAMED = 4  # runs named in a caption's list


def _writes(count: int) -> str:
    return f"{count:,} write{'' if count == 1 else 's'}"


def _checkpoint_key(run: RunData) -> Any:
    frame = run.checkpoints
    return (run.strategy, frame["batch"].to_numpy().tobytes(), frame["bytes"].to_numpy().tobytes())


def training_writes(run: RunData) -> pl.DataFrame:
    """The checkpoint and log writes made during training (batch ≥ 0, bytes > 0)."""
    frame = run.checkpoints
    if frame.height == 0 or not {"batch", "bytes"} <= set(frame.columns):
        return pl.DataFrame({"batch": [], "bytes": []})
    return frame.filter((pl.col("batch") >= 0) & (pl.col("bytes") > 0)).sort("batch")


def _baseline(run: RunData) -> float | None:
    frame = run.checkpoints
    if frame.height == 0 or not {"batch", "bytes"} <= set(frame.columns):
        return None
    base = frame.filter((pl.col("batch") < 0) & (pl.col("bytes") > 0))
    return float(base["bytes"].sum()) if base.height else None


def _names_list(names: Sequence[str]) -> str:
    shown = ", ".join(names[:MAX_NAMED])
    return shown + (f" and {len(names) - MAX_NAMED} more" if len(names) > MAX_NAMED else "")


def _checkpoint_bytes(
    runs: Sequence[RunData], colors: dict[str, str], names: dict[Path, str], out: Path
) -> FigureOut | None:
    with_strategy = [
        r
        for r in runs
        if r.strategy != "none"
        and r.checkpoints.height > 0
        and {"batch", "bytes"} <= set(r.checkpoints.columns)
        and float(r.checkpoints["bytes"].max() or 0) > 0  # type: ignore[arg-type]  # an int column
    ]
    usable = [r for r in with_strategy if training_writes(r).height >= MIN_CHECKPOINTS]
    few = list(
        dict.fromkeys(
            names.get(r.path, r.label)
            for r in with_strategy
            if training_writes(r).height < MIN_CHECKPOINTS
        )
    )
    merged = _merge_runs(usable, _checkpoint_key, names)
    if not merged:
        return None
    # grouped by strategy (first-seen order), then by mean size within a strategy
    strategies = list(dict.fromkeys(run.strategy for run, _, _ in merged))
    rows = []
    for run, shown, same in merged:
        sizes = training_writes(run)["bytes"].to_numpy().astype(float)
        rows.append(
            (
                strategies.index(run.strategy),
                float(sizes.mean()),
                run,
                shown,
                same,
                sizes,
                _baseline(run),
            )
        )
    rows.sort(key=lambda t: (t[0], t[1]))
    total = len(rows)
    chosen = rows[:MAX_BARS]
    levels = [v for t in chosen for v in (t[5].min(), t[5].max(), t[6] or t[5].max())]
    scale, unit = _bytes_unit(max(levels))
    log = _spans(levels, 10.0)
    palette = system_colors(strategies)
    ticks = [
        _wrap(shown, 30, 2) + (f" (+{len(same)})" if same else "")
        for *_, shown, same, _, _ in chosen
    ]
    lines = sum(t.count("\n") + 1 for t in ticks)
    name, title = "checkpoint_bytes.png", "Bytes per checkpoint write, by strategy"
    fig = new_figure(WIDTH, min(9.0, max(3.2, 1.1 + 0.28 * lines + 0.1 * len(chosen))))
    ax = fig.add_subplot()
    labelled: set[str] = set()
    baseline_labelled = False
    for y, (_, mean, run, _, _, sizes, base) in enumerate(chosen):
        strategy = run.strategy
        ax.barh(
            y,
            mean / scale,
            height=0.6,
            color=palette[strategy],
            label=strategy if strategy not in labelled else None,
        )
        labelled.add(strategy)
        lo, hi = float(sizes.min()) / scale, float(sizes.max()) / scale
        if hi > lo * 1.001:
            ax.plot([lo, hi], [y, y], color="black", linewidth=1.0)
            ax.plot([lo, hi], [y, y], linestyle="none", marker="|", color="black", markersize=7)
        if base is not None:
            ax.plot(
                [base / scale],
                [y],
                linestyle="none",
                marker="D",
                markersize=5,
                markerfacecolor="white",
                markeredgecolor="black",
                label="baseline before training" if not baseline_labelled else None,
            )
            baseline_labelled = True
        own_scale, own_unit = _bytes_unit(mean)
        ax.annotate(
            f"{_g(mean / own_scale)} {own_unit} × {len(sizes):,}",
            (max(hi, mean / scale), y),
            xytext=(4, 0),
            textcoords="offset points",
            va="center",
            fontsize=7,
        )
    ax.set_yticks(range(len(chosen)))
    ax.set_yticklabels(ticks, fontsize=8)
    ax.invert_yaxis()
    if log:
        ax.set_xscale("log")
        ax.set_xlim(min(levels) / scale / 2, max(levels) / scale * 8)
    else:
        ax.set_xlim(0, max(levels) / scale * 1.3)
    ax.set_xlabel(
        f"{unit} per write (bar: mean during training; whisker: smallest to largest)"
        + (", log scale" if log else "")
    )
    ax.set_title(title)
    ax.grid(True, axis="x", which="major", alpha=0.3)
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=8, frameon=False)
    figures.save(fig, out / name)
    lo_row = min(chosen, key=lambda t: t[1])
    hi_row = max(chosen, key=lambda t: t[1])
    if len(chosen) == 1:
        caption = (
            f"{hi_row[3]} writes {_writes(len(hi_row[5]))} during training, "
            f"{format_bytes(hi_row[1])} on average."
        )
    elif format_bytes(lo_row[1]) == format_bytes(hi_row[1]):
        counts = sorted(len(t[5]) for t in chosen)
        caption = (
            f"Every run shown writes {format_bytes(hi_row[1])} per checkpoint on average; "
            f"they differ in how often ({_writes(counts[0])} to {_writes(counts[-1])})."
        )
    else:
        caption = (
            f"Mean bytes per write during training range from {format_bytes(lo_row[1])} "
            f"({lo_row[3]}, {_writes(len(lo_row[5]))}) to {format_bytes(hi_row[1])} "
            f"({hi_row[3]}, {_writes(len(hi_row[5]))})."
        )
    if total > len(chosen):
        caption += f" The first {len(chosen)} of {total} runs are shown."
    caption += _same_note([(t[2], t[3], t[4]) for t in chosen])
    if few:
        caption += (
            f" Left out with fewer than {MIN_CHECKPOINTS} writes during training: "
            f"{_names_list(few)}."
        )
    return FigureOut(name, title, caption, "checkpoints")
