"""The memory-hierarchy figures of `replay report` (section "hierarchy"): how well each
cache hits, what crosses each link, and the miss-ratio curves with the cached runs on
them; from the runs' `batches.parquet` and summaries and the `replay mrc` folders.

- ``hierarchy_hits.png`` (hierarchy): the hit ratio of each cached run (policy not
  `static`) per batch, smoothed by a rolling mean over ~2% of the batches; one line per
  run label (runs of one system with identical counters are drawn once), at most 10.
- ``hierarchy_traffic.png`` (hierarchy): bytes per batch over each link and direction
  (h2d, d2h) per run, horizontal grouped bars with their values, for the runs that move
  bytes over a link (at most 12; log x when the values span more than 100×).
- ``mrc.png`` (hierarchy): each miss-ratio curve given (`replay mrc --out`; exact or
  SHARDS-sampled) against cache rows (log x), with a marker per cached run at its
  capacity in rows and its miss ratio; the runs of one policy at two or more capacities
  are joined by a line (so a sweep over `policy.capacity_rows` alone draws it too).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
from matplotlib import colormaps
from matplotlib.colors import to_hex
from matplotlib.ticker import FuncFormatter, NullFormatter, PercentFormatter

# `figures.save` is looked up when a figure is written, as in figures.py itself, so a
# patched `figures.save` (tests/test_untrusted.py records the texts drawn) sees it too
from replay.report import figures
from replay.report.figures import (
    HEIGHT,
    MARKERS,
    MAX_MARKERS,
    MAX_SERIES,
    MAX_TITLE_NAME,
    STEADY,
    WHOLE,
    WIDTH,
    FigureOut,
    _bytes_unit,
    _capacity_rows,
    _cut,
    _g,
    _is_cache,
    _legend,
    _legend_label,
    _merge_runs,
    _names,
    _num,
    _pct,
    _policy,
    _rows,
    _same_note,
    _series_label,
    _short,
    _smooth,
    _spans,
    _Styler,
    _thin,
    _varying,
    _wrap,
    new_figure,
    steady_mean,
    steady_span,
)
from replay.report.load import Results, RunData


def _hits_key(run: RunData) -> Any:
    frame = run.batches
    if not {"hits", "misses"} <= set(frame.columns):
        return None
    return (frame["hits"].to_numpy().tobytes(), frame["misses"].to_numpy().tobytes())


def _hierarchy_hits(
    runs: Sequence[RunData], colors: dict[str, str], names: dict[Path, str], out: Path
) -> FigureOut | None:
    cached = [
        r
        for r in runs
        if _is_cache(r) and r.batches.height > 0 and {"hits", "misses"} <= set(r.batches.columns)
    ]
    merged = _merge_runs(cached, _hits_key, names)
    if not merged:
        return None
    total = len(merged)
    chosen = merged[:MAX_SERIES]
    name, title = "hierarchy_hits.png", "Cache hit ratio per batch"
    fig = new_figure()
    ax = fig.add_subplot()
    style = _Styler(colors)
    windows = []
    ratios: list[tuple[float, str]] = []
    for run, shown, same in chosen:
        frame = run.batches
        hits = frame["hits"].to_numpy().astype(float)
        misses = frame["misses"].to_numpy().astype(float)
        total_req = hits + misses
        ratio = np.divide(hits, total_req, out=np.full_like(hits, np.nan), where=total_req > 0)
        valid = ~np.isnan(ratio)
        x = (frame["batch"].to_numpy() if "batch" in frame.columns else np.arange(len(hits)))[valid]
        window = max(1, round(0.02 * int(valid.sum())))
        windows.append(window)
        y = _smooth(ratio[valid], window)
        x, y = _thin(x.astype(float), y)
        color, linestyle = style(run.label)
        policy = str(_policy(run).get("name", ""))
        label = _series_label(_with_policy(shown, policy), same)
        ax.plot(x, 100 * y, color=color, linestyle=linestyle, linewidth=1.3, label=label)
        overall = _num(_policy(run).get("hit_ratio"))
        if overall is None:
            sums = float(hits.sum() + misses.sum())
            overall = float(hits.sum()) / sums if sums else 0.0
        ratios.append((overall, shown))
    ax.set_xlabel("batch")
    win = max(windows)
    ax.set_ylabel("hit ratio (%)" + (", rolling mean" if win > 1 else ""))
    ax.yaxis.set_major_formatter(PercentFormatter(100, decimals=0))
    top = ax.get_ylim()[1]
    ax.set_ylim(max(0.0, ax.get_ylim()[0]), min(100.5, max(top, 1.0)))
    ax.set_title(
        f"{title}, {WHOLE} (rolling mean over {win} batches)" if win > 1 else f"{title}, {WHOLE}"
    )
    ax.grid(True, alpha=0.3)
    _legend(ax, outside_from=5)
    figures.save(fig, out / name)
    lo, hi = min(ratios), max(ratios)
    if len(ratios) == 1:
        caption = f"{hi[1]} hits {_pct(hi[0])} of its lookups over the whole trace."
    else:
        caption = (
            f"Over the whole trace the hit ratio ranges from {_pct(lo[0])} ({lo[1]}) to "
            f"{_pct(hi[0])} ({hi[1]}) across {len(ratios)} cached runs."
        )
    if total > len(chosen):
        caption += f" The first {len(chosen)} of {total} are shown."
    caption += _same_note(chosen)
    return FigureOut(name, title, caption, "hierarchy")


def _link_traffic(run: RunData) -> list[tuple[str, float]]:
    """(`link direction`, bytes per batch) for every link direction that carries bytes,
    steady state (the mean over the second half of the batches)."""
    rows = []
    for link in _names(run, "links"):
        for direction in ("h2d", "d2h"):
            value = steady_mean(run, f"{link}_{direction}_bytes")
            if value > 0:
                rows.append((f"{link} {direction}", value))
    return rows


def _hierarchy_traffic(
    runs: Sequence[RunData], names: dict[Path, str], out: Path
) -> FigureOut | None:
    moving = [r for r in runs if _link_traffic(r)]
    merged = _merge_runs(moving, lambda r: tuple(_link_traffic(r)), names)
    if not merged:
        return None
    total_runs = len(merged)
    chosen = merged[:12]
    name, title = "hierarchy_traffic.png", f"Link traffic per batch, {STEADY}"
    traffic = [_link_traffic(r) for r, _, _ in chosen]
    kinds = list(dict.fromkeys(kind for rows in traffic for kind, _ in rows))
    link_of = {kind: kind.rsplit(" ", 1)[0] for kind in kinds}  # a link name may hold spaces
    links = list(dict.fromkeys(link_of.values()))
    tab20 = colormaps["tab20"]
    color = {
        kind: to_hex(tab20((2 * links.index(link_of[kind]) + kind.endswith("d2h")) % 20))
        for kind in kinds
    }
    largest = max(v for rows in traffic for _, v in rows)
    scale, unit = _bytes_unit(largest)
    bars = sum(len(rows) for rows in traffic)
    ticks = [
        _wrap(shown) + (f"\n(+{len(same)} identical)" if same else "") for _, shown, same in chosen
    ]
    lines = sum(t.count("\n") + 1 for t in ticks)
    fig = new_figure(WIDTH, min(9.0, max(HEIGHT, 0.9 + 0.2 * bars + 0.15 * lines)))
    ax = fig.add_subplot()
    values = [v / scale for rows in traffic for _, v in rows]
    log = _spans(values, 100.0)
    labelled: set[str] = set()
    for g, rows in enumerate(traffic):
        height = min(0.8 / len(rows), 0.4)
        for i, (kind, value) in enumerate(rows):
            y = g + height * (i + 0.5 - len(rows) / 2)
            ax.barh(
                y,
                value / scale,
                height=height * 0.92,
                color=color[kind],
                label=_legend_label(kind) if kind not in labelled else None,
            )
            labelled.add(kind)
            ax.annotate(
                _g(value / scale),
                (value / scale, y),
                xytext=(3, 0),
                textcoords="offset points",
                va="center",
                fontsize=7,
            )
    ax.set_yticks(range(len(chosen)))
    ax.set_yticklabels(ticks, fontsize=8)
    ax.invert_yaxis()
    if log:
        ax.set_xscale("log")
        ax.set_xlim(min(values) / 2, max(values) * 6)
    else:
        ax.set_xlim(0, max(values) * 1.18)
    ax.set_xlabel(f"{unit} per batch, {STEADY}{' (log scale)' if log else ''}")
    ax.set_title(title)
    ax.grid(True, axis="x", alpha=0.3)
    ax.legend(  # even for one kind: it says which link and direction
        loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=8, frameon=False
    )
    figures.save(fig, out / name)
    per_run = sorted(
        (
            (sum(v for _, v in rows), shown)
            for rows, (_, shown, _) in zip(traffic, chosen, strict=True)
        ),
        key=lambda t: t[0],
    )
    hi, lo = per_run[-1], per_run[0]
    s2, u2 = _bytes_unit(hi[0])
    steady = f"In steady state ({steady_span([r for r, _, _ in chosen])}) "
    if len(per_run) == 1:
        caption = f"{steady}{hi[1]} moves {_g(hi[0] / s2)} {u2} per batch over its links."
    else:
        s3, u3 = _bytes_unit(lo[0])
        caption = (
            f"{steady}{hi[1]} moves the most over its links, {_g(hi[0] / s2)} {u2} per "
            f"batch; {lo[1]} the least, {_g(lo[0] / s3)} {u3} per batch."
        )
    if total_runs > len(chosen):
        caption += f" The first {len(chosen)} of {total_runs} runs are shown."
    caption += _same_note(chosen)
    return FigureOut(name, title, caption, "hierarchy")


def _with_policy(label: str, policy: str) -> str:
    """`label (policy)` unless the label names the policy already."""
    return label if not policy or policy in label else f"{label} ({policy})"


def _mrc_label(document: dict[str, Any]) -> str:
    if document.get("exact", True) or not document.get("sample_rate"):
        return "LRU miss-ratio curve (exact)"
    return f"LRU, SHARDS sampled at {float(document['sample_rate']):.3g}"


def _mrc(
    results: Results, colors: dict[str, str], names: dict[Path, str], out: Path
) -> FigureOut | None:
    points: list[tuple[str, str, float, float, str]] = []  # policy, label, rows, miss, color key
    seen: set[tuple[str, float, float]] = set()
    for run in results.all_runs():
        if not _is_cache(run):
            continue
        rows = _capacity_rows(run)
        miss = _num(_policy(run).get("miss_ratio"))
        policy = str(_policy(run).get("name", ""))
        if rows <= 0 or miss is None:
            continue
        key = (policy, rows, round(miss, 12))
        if key in seen:
            continue
        seen.add(key)
        points.append((policy, names.get(run.path, run.label), rows, miss, run.label))
    by_policy: dict[str, list[tuple[float, float]]] = {}
    for policy, _label, rows, miss, _ in points:
        by_policy.setdefault(policy, []).append((rows, miss))
    swept = {p: sorted(v) for p, v in by_policy.items() if len({r for r, _ in v}) >= 2}
    curves = [m for m in results.mrcs if m.curve.height > 0]
    if not curves and not swept:
        return None
    name, title = "mrc.png", "Miss ratio against cache size"
    fig = new_figure()
    ax = fig.add_subplot()
    entries = 0
    facts = []
    for i, mrc in enumerate(curves):
        frame = mrc.curve.filter(pl.col("cache_rows") > 0).sort("cache_rows")
        x = frame["cache_rows"].to_numpy().astype(float)
        y = frame["miss_ratio"].to_numpy().astype(float)
        label = _mrc_label(mrc.document)
        if len(curves) > 1:
            label += f" — {_cut(mrc.path.name, MAX_TITLE_NAME)}"
        ax.plot(x, y, color="black" if i == 0 else f"C{i}", linewidth=1.6, label=label)
        entries += 1
        if len(x):
            half = x[y <= 0.5]
            fact = (
                f"The LRU miss ratio falls from {_pct(y[0])} at {_rows(x[0])} to "
                f"{_pct(y[-1])} at {_rows(x[-1])}"
            )
            if len(half) and y[0] > 0.5:
                fact += f"; a cache of {_rows(half[0])} hits half the lookups"
            facts.append(fact + ".")
    style = _Styler(colors)
    for p_i, (policy, values) in enumerate(swept.items()):
        xs = [r for r, _ in values]
        ys = [m for _, m in values]
        ax.plot(
            xs,
            ys,
            color=f"C{(p_i + len(curves)) % 10}",
            marker=MARKERS[p_i % len(MARKERS)],
            linestyle="--",
            linewidth=1.2,
            label=f"{policy} runs at {len(values)} capacities",
        )
        entries += 1
        facts.append(
            f"The {policy} runs miss {_pct(ys[0])} at {_rows(xs[0])} and "
            f"{_pct(ys[-1])} at {_rows(xs[-1])}."
        )
    singles = [p for p in points if p[0] not in swept]
    for m_i, (policy, label, rows, miss, color_key) in enumerate(singles[:MAX_MARKERS]):
        color, _ = style(color_key)
        text = _short(_with_policy(label, policy), 36)
        ax.plot(
            [rows],
            [miss],
            linestyle="none",
            marker=MARKERS[m_i % len(MARKERS)],
            markersize=max(4.0, 10.0 - 1.5 * m_i),  # later ones smaller: overlaps stay visible
            markeredgecolor="black",
            color=color,
            label=_legend_label(f"{text}: {_pct(miss)} at {_rows(rows)}"),
        )
        entries += 1
    if singles:
        first = singles[0]
        who = _with_policy(first[1], first[0])
        facts.append(f"{who} misses {_pct(first[3])} with {_rows(first[2])}.")
    budgets = _budgets(results)
    row_bytes = _row_bytes(results)
    for b_i, budget in enumerate(budgets[:MAX_BUDGETS]):
        text = f"budget {_rows(budget)}"
        if row_bytes:
            text += f" ({_bytes(budget * row_bytes)})"
        ax.axvline(
            budget,
            color="dimgray",
            linestyle=":",
            linewidth=1.2,
            label=text if b_i < 3 else None,
        )
        entries += 1
    if budgets and curves:
        frame = curves[0].curve.filter(pl.col("cache_rows") > 0).sort("cache_rows")
        x = frame["cache_rows"].to_numpy().astype(float)
        y = frame["miss_ratio"].to_numpy().astype(float)
        budget = budgets[0]
        if len(x) and x[0] <= budget <= x[-1]:
            at = float(np.interp(np.log(budget), np.log(x), y))
            size = f" ({_bytes(budget * row_bytes)})" if row_bytes else ""
            facts.insert(
                1,
                f"At the cached runs' budget of {_rows(budget)}{size} the LRU curve "
                f"misses {_pct(at)}.",
            )
    ax.set_xscale("log")
    ax.set_xlabel("cache size (rows, log scale)")
    ax.set_ylabel(f"miss ratio ({WHOLE})")
    ax.set_ylim(0, min(1.02, max(ax.get_ylim()[1], 0.05)))
    if row_bytes:

        def to_bytes(r: Any) -> Any:
            return r * row_bytes

        def to_rows(b: Any) -> Any:
            return b / row_bytes

        top = ax.secondary_xaxis("top", functions=(to_bytes, to_rows))
        top.set_xscale("log")
        top.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: _bytes(v) if v > 0 else ""))
        top.xaxis.set_minor_formatter(NullFormatter())
        top.set_xlabel(f"cache size (bytes, {_g(row_bytes)} B per row)", fontsize=9)
        top.tick_params(labelsize=8)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    _legend(ax, outside_from=4)
    figures.save(fig, out / name)
    return FigureOut(name, title, " ".join(facts[:4]), "hierarchy")


MAX_BUDGETS = 3


def _bytes(value: float) -> str:
    scale, unit = _bytes_unit(value)
    return f"{_g(round(value / scale, 3 if value / scale < 10 else 1))} {unit}"


def _row_bytes(results: Results) -> float | None:
    """Bytes of a cached row: the runs' `row_bytes` (the most common when they differ),
    else a miss-ratio curve's document's, else None."""
    counts: dict[float, int] = {}
    for run in results.all_runs():
        value = _num(run.summary.get("row_bytes"))
        if value and value > 0:
            counts[value] = counts.get(value, 0) + 1
    if counts:
        return max(counts, key=lambda v: counts[v])
    for mrc in results.mrcs:
        value = _num(mrc.document.get("row_bytes"))
        if value and value > 0:
            return value
    return None


def _budgets(results: Results) -> list[float]:
    """The cached runs' capacities in rows, most common first (ties: first seen); the
    points of a sweep over the capacity are not budgets but the curve's own points."""
    runs = [*results.runs, *(r for c in results.compares for r in c.runs)]
    for sweep in results.sweeps:
        if not any(k.startswith("policy.capacity") for k in _varying(sweep.keys, sweep.runs)):
            runs.extend(sweep.runs)
    counts: dict[float, int] = {}
    for run in runs:
        rows = _capacity_rows(run) if _is_cache(run) else 0.0
        if rows > 0:
            counts[rows] = counts.get(rows, 0) + 1
    kept: list[float] = []
    for rows in sorted(counts, key=lambda v: -counts[v]):
        if all(abs(rows - k) > 0.05 * k for k in kept):  # 99,328 rows of chunks ≈ 100 k
            kept.append(rows)
    return kept
