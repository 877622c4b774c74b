"""The sweep figures of `replay report`, one per sweep folder: the metric its grid is
about against the grid values, in the section of what the grid varies.

- ``sweep_<folder>.png`` (sweeps, checkpoints, failures or hierarchy): for every sweep, a
  metric against its first numeric grid key with two or more values (log x past 20×),
  one line per value of the other keys that vary:
  `checkpoint.interval*` → checkpoint overhead (%) with the Young/Daly interval as a
  dashed vertical line (checkpoints); `failures.*` → mean goodput with its 5th percentile
  dashed (failures); `policy.capacity_*` → miss ratio (hierarchy); any other key → time
  per batch (ms). A sweep with no numeric key gets bars of time per batch per point.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.ticker import FuncFormatter, PercentFormatter

# `figures.save` is looked up when a figure is written, as in figures.py itself, so a
# patched `figures.save` (tests/test_untrusted.py records the texts drawn) sees it too
from replay.report import figures
from replay.report.figures import (
    MARKERS,
    MAX_TITLE_NAME,
    FigureOut,
    _category_ticks,
    _cut,
    _g,
    _legend,
    _num,
    _pct,
    _policy,
    _run_batches,
    _spans,
    _value,
    _varying,
    new_figure,
)
from replay.report.load import RunData, SweepData


def _time_per_batch_ms(run: RunData) -> float | None:
    batches = _run_batches(run)
    time_s = _num(run.summary.get("time_s"))
    return None if not batches or time_s is None else 1e3 * time_s / batches


def _overhead_pct(run: RunData) -> float | None:
    if run.strategy == "none":
        return None
    value = _num((run.summary.get("checkpoint") or {}).get("overhead"))
    return None if value is None else 100.0 * value


def _goodput(run: RunData) -> float | None:
    return _num((run.summary.get("failures") or {}).get("goodput_mean"))


def _goodput_p5(run: RunData) -> float | None:
    return _num((run.summary.get("failures") or {}).get("goodput_p5"))


def _miss_ratio(run: RunData) -> float | None:
    return _num(_policy(run).get("miss_ratio"))


_METRICS: dict[str, tuple[Any, str, str]] = {
    "overhead": (_overhead_pct, "checkpoint overhead (% of failure-free time)", "checkpoints"),
    "goodput": (_goodput, "goodput (useful time / wall time)", "failures"),
    "miss": (_miss_ratio, "miss ratio", "hierarchy"),
    "time": (_time_per_batch_ms, "time per batch (ms)", "sweeps"),
}


def _metric_for(key: str) -> str:
    if key.startswith("checkpoint.interval"):
        return "overhead"
    if key.startswith("failures."):
        return "goodput"
    if key.startswith("policy.capacity"):
        return "miss"
    return "time"


def _fmt_metric(metric: str, value: float) -> str:
    if metric == "overhead":
        return f"{_g(value)}%"
    if metric in ("goodput", "miss"):
        return _pct(value)
    return f"{_g(value)} ms"


def _young_daly(runs: Sequence[RunData], x_key: str) -> float | None:
    """The Young/Daly interval in the x key's unit (seconds or batches), or None."""
    values = []
    for run in runs:
        failures = run.summary.get("failures") or {}
        checkpoint = run.summary.get("checkpoint") or {}
        yd = _num(failures.get("young_daly_interval_s"))
        if yd is None or yd <= 0:
            continue
        if x_key == "checkpoint.interval_s":
            values.append(yd)
        elif x_key == "checkpoint.interval_batches":
            batches = _num(checkpoint.get("interval_batches_used"))
            seconds = _num(checkpoint.get("interval_s_used"))
            if batches and seconds:
                values.append(yd * batches / seconds)
    return float(np.median(values)) if values else None


KEY_UNITS = (
    ("_bytes_per_s", "bytes/s"),
    ("_per_s", "per s"),
    ("_pj_per_byte", "pJ/byte"),
    ("_ns", "ns"),
    ("_s", "s"),
    ("_rows", "rows"),
    ("_bytes", "bytes"),
    ("_batches", "batches"),
    ("_w", "W"),
)


def _key_unit(key: str) -> str:
    """The unit a system key's name ends with ("" when none)."""
    return next((unit for suffix, unit in KEY_UNITS if key.endswith(suffix)), "")


def _sweep_bars(sweep: SweepData, name: str, out: Path) -> FigureOut | None:
    points = [(r, _time_per_batch_ms(r)) for r in sweep.runs]
    points = [(r, v) for r, v in points if v is not None]
    if not points:
        return None
    title = f"Sweep {_cut(sweep.path.name, MAX_TITLE_NAME)}: time per batch"
    varying = _varying(list(sweep.keys), [r for r, _ in points])
    labels = [
        ", ".join(f"{k.split('.')[-1]}={_value(r.values.get(k))}" for k in varying) or r.label
        for r, _ in points
    ]
    fig = new_figure()
    ax = fig.add_subplot()
    values = [v for _, v in points]
    ax.bar(range(len(values)), values, color="tab:blue", width=0.65)
    for i, v in enumerate(values):
        ax.annotate(
            _g(v), (i, v), xytext=(0, 2), textcoords="offset points", ha="center", fontsize=8
        )
    ax.set_ylim(0, max(values) * 1.15 or 1.0)
    _category_ticks(ax, labels, width=30)
    ax.set_xlabel("sweep point")
    ax.set_ylabel("time per batch (ms)")
    ax.set_title(title)
    ax.grid(True, axis="y", alpha=0.3)
    figures.save(fig, out / name)
    lo = min(range(len(values)), key=lambda i: values[i])
    hi = max(range(len(values)), key=lambda i: values[i])
    caption = (
        f"Time per batch ranges from {_g(values[lo])} ms ({labels[lo]}) to "
        f"{_g(values[hi])} ms ({labels[hi]})."
    )
    return FigureOut(name, title, caption, "sweeps")


def _sweep_figure(sweep: SweepData, name: str, out: Path) -> FigureOut | None:
    runs = list(sweep.runs)
    if not runs:
        return None
    keys = list(sweep.keys) or list(dict.fromkeys(k for r in runs for k in r.values))
    numeric = [
        k
        for k in keys
        if all(_num(r.values.get(k)) is not None for r in runs)
        and len({_num(r.values.get(k)) for r in runs}) >= 2
    ]
    if not numeric:
        return _sweep_bars(sweep, name, out)
    x_key = numeric[0]
    others = [k for k in _varying(keys, runs) if k != x_key]
    metric = _metric_for(x_key)
    if all(_METRICS[metric][0](r) is None for r in runs):
        metric = "time"
    func, ylabel, section = _METRICS[metric]
    series: dict[str, list[tuple[float, float, float | None]]] = {}
    for run in runs:
        y = func(run)
        if y is None:
            continue
        label = ", ".join(f"{k.split('.')[-1]}={_value(run.values.get(k))}" for k in others)
        p5 = _goodput_p5(run) if metric == "goodput" else None
        series.setdefault(label, []).append((float(_num(run.values[x_key]) or 0.0), y, p5))
    if not series:
        return None
    short_key = x_key.split(".")[-1]
    titles = {
        "overhead": "checkpoint overhead",
        "goodput": "goodput",
        "miss": "miss ratio",
        "time": "time per batch",
    }
    title = f"Sweep {_cut(sweep.path.name, MAX_TITLE_NAME)}: {titles[metric]} against {short_key}"
    fig = new_figure()
    ax = fig.add_subplot()
    xs_all = [x for pts in series.values() for x, _, _ in pts]
    ys_all = [y for pts in series.values() for _, y, _ in pts]
    log_x = min(xs_all) > 0 and (
        _spans(xs_all, 20.0) or (metric in ("goodput", "miss") and _spans(xs_all, 1.0))
    )
    entries = 0
    for i, (label, pts) in enumerate(series.items()):
        pts.sort(key=lambda p: p[0])
        x = [p[0] for p in pts]
        y = [p[1] for p in pts]
        color = f"C{i % 10}"
        shown = label or ("mean goodput" if metric == "goodput" else ylabel.split(" (")[0])
        if metric == "goodput" and label:
            shown = f"{label}: mean"
        ax.plot(x, y, color=color, marker=MARKERS[i % len(MARKERS)], label=shown)
        entries += 1
        if metric == "goodput" and any(p[2] is not None for p in pts):
            ax.plot(
                [p[0] for p in pts if p[2] is not None],
                [p[2] for p in pts if p[2] is not None],
                color=color,
                alpha=0.5,
                linestyle="--",
                marker=MARKERS[i % len(MARKERS)],
                markersize=4,
                label=f"{label + ': ' if label else ''}5th percentile",
            )
            entries += 1
    if log_x:
        ax.set_xscale("log")
    log_y = metric in ("overhead", "time") and min(ys_all) > 0 and _spans(ys_all, 20.0)
    if log_y:
        ax.set_yscale("log")
    elif metric in ("goodput", "miss"):
        ax.set_ylim(0, min(1.02, max(max(ys_all) * 1.15, 1e-3)))
        ax.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=None))
    else:
        ax.set_ylim(0, max(ys_all) * 1.15 or 1.0)
        ax.yaxis.set_major_formatter(
            FuncFormatter(lambda v, _pos: f"{v:,.0f}" if abs(v) >= 100 else f"{v:g}")
        )
    unit = _key_unit(x_key)
    notes = ", ".join(n for n in (unit, "log scale" if log_x else "") if n)
    ax.set_xlabel(f"{x_key} ({notes})" if notes else x_key)
    ax.set_ylabel(ylabel + (" (log scale)" if log_y else ""))
    ax.set_title(title, fontsize=11)
    ax.grid(True, which="both" if log_x or log_y else "major", alpha=0.3)
    facts = []
    if metric == "overhead":
        yd = _young_daly(runs, x_key)
        if yd is not None:
            lo, hi = min(xs_all), max(xs_all)
            unit_word = "s" if x_key == "checkpoint.interval_s" else "batches"
            if lo / 4 <= yd <= hi * 4:
                ax.axvline(
                    yd,
                    color="black",
                    linestyle="--",
                    linewidth=1.2,
                    label=f"Young/Daly: {_g(yd)} {unit_word}",
                )
                entries += 1
                facts.append(f"The Young/Daly interval is {_g(yd)} {unit_word}.")
            else:
                facts.append(f"The Young/Daly interval, {_g(yd)} {unit_word}, lies off this axis.")
    _legend(ax, outside_from=5)
    figures.save(fig, out / name)
    trends = []
    for i, (label, pts) in enumerate(list(series.items())[:3]):
        (x0, y0, _), (x1, y1, _) = pts[0], pts[-1]
        where = f" for {label}" if label else ""
        if i == 0:
            trends.append(
                f"{titles[metric].capitalize()} goes from {_fmt_metric(metric, y0)} at "
                f"{short_key}={_g(x0)} to {_fmt_metric(metric, y1)} at "
                f"{short_key}={_g(x1)}{where}."
            )
        else:
            trends.append(f"For {label}: {_fmt_metric(metric, y0)} to {_fmt_metric(metric, y1)}.")
    return FigureOut(name, title, " ".join([*trends, *facts]), section)
