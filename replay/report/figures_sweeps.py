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
from replay._units import format_bytes, format_duration
from replay.report import figures
from replay.report.figures import (
    MARKERS,
    MAX_TITLE_NAME,
    STEADY,
    WIDTH,
    FigureOut,
    _bytes_unit,
    _category_ticks,
    _cut,
    _g,
    _is_cache,
    _legend,
    _names,
    _num,
    _pct,
    _policy,
    _spans,
    _time_unit,
    _value,
    _varying,
    new_figure,
    steady_mean,
    steady_span,
)
from replay.report.load import Results, RunData, SweepData


def _time_per_batch_ms(run: RunData) -> float | None:
    """Steady-state time per batch (the second half of the batches), in ms."""
    if run.batches.height == 0 or "time_s" not in run.batches.columns:
        return None
    return 1e3 * steady_mean(run, "time_s")


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
    "time": (_time_per_batch_ms, f"time per batch (ms), {STEADY}", "sweeps"),
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
    return format_duration(value / 1e3)  # as every duration of the report is written


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
    points = [(r, v) for r in sweep.runs if (v := _time_per_batch_ms(r)) is not None]
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
    ax.set_ylabel(f"time per batch (ms), {STEADY}")
    ax.set_title(title)
    ax.grid(True, axis="y", alpha=0.3)
    figures.save(fig, out / name)
    lo = min(range(len(values)), key=lambda i: values[i])
    hi = max(range(len(values)), key=lambda i: values[i])
    caption = (
        f"Steady-state time per batch ranges from {format_duration(values[lo] / 1e3)} "
        f"({labels[lo]}) to {format_duration(values[hi] / 1e3)} ({labels[hi]})."
    )
    return FigureOut(name, title, caption, "sweeps")


def _sweep_figure(sweep: SweepData, name: str, out: Path) -> FigureOut | None:
    from replay.report.analysis import needs_checkpoints, needs_refresh

    # points the replayed span cannot support are not drawn as results: too few
    # checkpoints, or an intermittent increment that never reached its full refresh
    # (it is then one-shot under another name)
    def unsupported(run: RunData) -> bool:
        strategy = (run.spec.get("checkpoint") or {}).get("strategy", "none")
        return strategy != "none" and bool(needs_checkpoints(run) or needs_refresh(run))

    left_out = [r for r in sweep.runs if unsupported(r)]
    runs = [r for r in sweep.runs if r not in left_out]
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
                f"{_setting(short_key, x0)} to {_fmt_metric(metric, y1)} at "
                f"{_setting(short_key, x1)}{where}."
            )
        else:
            trends.append(f"For {label}: {_fmt_metric(metric, y0)} to {_fmt_metric(metric, y1)}.")
    if left_out:
        why = needs_refresh(left_out[0]) or needs_checkpoints(left_out[0])
        facts.append(
            f"Not drawn: {len(left_out)} point{'s' if len(left_out) > 1 else ''} the replayed "
            f"span cannot support ({why})."
        )
    return FigureOut(name, title, " ".join([*trends, *facts]), section)


# -- PatrickStar: the chunk-size trade-off --------------------------------------------------

CHUNK_KEY = "policy.chunk_rows"


def is_chunk_sweep(sweep: SweepData) -> bool:
    """A sweep over `policy.chunk_rows` (its only varying key) of the `chunk` policy."""
    runs = list(sweep.runs)
    return (
        bool(runs)
        and _varying(list(sweep.keys), runs) == [CHUNK_KEY]
        and all(str(_policy(r).get("name", "")) == "chunk" for r in runs)
        and all(_num(r.values.get(CHUNK_KEY)) for r in runs)
    )


def _steady_hit_ratio(run: RunData) -> float | None:
    hits, misses = steady_mean(run, "hits"), steady_mean(run, "misses")
    return hits / (hits + misses) if hits + misses > 0 else None


def _steady_link_bytes(run: RunData) -> float:
    return sum(
        steady_mean(run, f"{link}_{d}_bytes")
        for link in _names(run, "links")
        for d in ("h2d", "d2h")
    )


def _budget_rows(run: RunData) -> float | None:
    """The configured cache budget in rows (the spec's `policy.capacity_rows`)."""
    policy = run.spec.get("policy")
    return _num(policy.get("capacity_rows")) if isinstance(policy, dict) else None


def _trace_digest(run: RunData) -> Any:
    return (run.summary.get("digests") or {}).get("trace_sha256")


def _setting(key: str, value: float) -> str:
    """`quantize_bits=4`; 0 bits is fp32, Check-N-Run's unquantized rows, said in words."""
    if key.endswith("quantize_bits") and value == 0:
        return f"{key}=0 (fp32, no quantization)"
    return f"{key}={_g(value)}"


def _pct_pair(a: float, b: float) -> str:
    """`84% to 87%`; two shares that round alike get two more digits (`84.12% to 84.47%`),
    and equal ones are said once (`84% at every size`)."""
    if _pct(a) != _pct(b):
        return f"{_pct(a)} to {_pct(b)}"
    if f"{a:.2%}" != f"{b:.2%}":
        return f"{a:.2%} to {b:.2%}"
    return f"{_pct(a)} at every size"


def _row_caches(sweep: SweepData, results: Results) -> list[RunData]:
    """Row caches (a cache policy other than `chunk`) on the same trace with the same
    budget in rows as the sweep's runs, checkpointing off as in the sweep (a run's
    checkpoint stalls are another basis of time per batch), one per label."""
    budgets = {_budget_rows(r) for r in sweep.runs}
    traces = {_trace_digest(r) for r in sweep.runs}
    kept: dict[str, RunData] = {}
    for run in results.all_runs():
        if run in sweep.runs or run.batches.height == 0:
            continue
        policy = str(_policy(run).get("name", ""))
        if policy in ("", "static", "chunk") or not _is_cache(run):
            continue
        if run.strategy not in ("", "none"):
            continue
        if _budget_rows(run) in budgets and _trace_digest(run) in traces:
            kept.setdefault(run.label, run)
    return list(kept.values())


def _chunk_figure(
    sweep: SweepData, name: str, results: Results, colors: dict[str, str], out: Path
) -> FigureOut | None:
    points = sorted(
        (float(_num(r.values[CHUNK_KEY]) or 0.0), r) for r in sweep.runs if r.batches.height > 0
    )
    points = [(x, r) for x, r in points if x > 0]
    if len(points) < 2:
        return None
    caches = _row_caches(sweep, results)
    xs = [x for x, _ in points]
    hit = [_steady_hit_ratio(r) for _, r in points]
    moved = [_steady_link_bytes(r) for _, r in points]
    times = [steady_mean(r, "time_s") for _, r in points]
    metrics = (
        (
            "hit ratio",
            [h if h is not None else np.nan for h in hit],
            lambda r: _steady_hit_ratio(r),
        ),
        ("link bytes per batch (h2d + d2h)", moved, _steady_link_bytes),
        ("time per batch", times, lambda r: steady_mean(r, "time_s")),
    )
    b_scale, b_unit = _bytes_unit(max([*moved, *(_steady_link_bytes(c) for c in caches), 1.0]))
    t_all = [*times, *(steady_mean(c, "time_s") for c in caches)]
    t_scale, t_unit = _time_unit(max(t_all))
    scales = (100.0, 1.0 / b_scale, t_scale)
    ylabels = ("hit ratio (%)", f"link {b_unit} per batch", f"time per batch ({t_unit})")
    budget = _budget_rows(points[0][1])
    title = f"PatrickStar chunk size, {STEADY} — {_cut(sweep.path.name, MAX_TITLE_NAME)}"
    fig = new_figure(WIDTH + 3.0, 3.8)
    axes = fig.subplots(1, 3)
    for ax, (label, values, func), scale, ylabel in zip(
        axes, metrics, scales, ylabels, strict=True
    ):
        ys = np.array(values, dtype=float) * scale
        ax.plot(xs, ys, color="black", marker="o", linewidth=1.4, label="chunk")
        for c_i, cache in enumerate(caches[:6]):
            value = func(cache)
            if value is None:
                continue
            color = colors.get(cache.label) or f"C{c_i + 1}"
            ax.axhline(
                value * scale,
                color=color,
                linestyle=("--", ":", "-.")[c_i % 3],
                linewidth=1.2,
                label=f"{cache.label} (rows)",
            )
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:,.0f}"))
        ax.set_xlabel("chunk size (rows, log scale)")
        ax.set_ylabel(ylabel)
        top = max([*ys[np.isfinite(ys)], *(ln.get_ydata()[0] for ln in ax.get_lines()[1:])])
        if label == "hit ratio":
            ax.set_ylim(0, 100.5)
            ax.yaxis.set_major_formatter(PercentFormatter(100, decimals=0))
        elif _spans([v for v in ys if v > 0], 20.0):
            ax.set_yscale("log")
            ax.set_ylabel(ylabel + ", log scale")
        else:
            ax.set_ylim(0, top * 1.15 or 1.0)
        ax.grid(True, which="major", alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    if len(labels) > 1:
        fig.legend(handles, labels, loc="outside lower center", ncols=min(4, len(labels)),
                   fontsize=8, frameon=False)  # fmt: skip
    budget_text = f" at a budget of {_g(budget)} rows" if budget else ""
    fig.suptitle(f"{title}{budget_text}", fontsize=11)
    figures.save(fig, out / name)
    i_best = max(range(len(points)), key=lambda i: h if (h := hit[i]) is not None else -1.0)
    i_fast = min(range(len(points)), key=lambda i: times[i])
    facts = [
        f"Steady state ({steady_span([r for _, r in points])}), chunk policy{budget_text}: "
        f"from {_g(xs[0])} to {_g(xs[-1])} rows per chunk the hit ratio goes from "
        f"{_pct_pair(hit[0] or 0.0, hit[-1] or 0.0)}, the link moves "
        f"{format_bytes(moved[0])} to {format_bytes(moved[-1])} per batch and a "
        f"batch takes {format_duration(times[0])} to {format_duration(times[-1])}.",
        f"The fastest chunk size is {_g(xs[i_fast])} rows ({format_duration(times[i_fast])}"
        f"); the best hit ratio is at {_g(xs[i_best])} rows "
        f"({_pct(hit[i_best] or 0.0)}).",
    ]
    for cache in caches[:3]:
        h = _steady_hit_ratio(cache)
        facts.append(
            f"{cache.label} caches rows{budget_text} (no checkpointing): hit ratio "
            f"{_pct(h or 0.0)}, {format_bytes(_steady_link_bytes(cache))} over its links and "
            f"{format_duration(steady_mean(cache, 'time_s'))} per batch."
        )
    return FigureOut(name, title, " ".join(facts), "hierarchy")
