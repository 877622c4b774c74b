"""The generic figures of `replay report` (DESIGN section 8), drawn from loaded result
folders (`replay.report.load.Results`); no model is re-run.

Every figure is a PNG of about 7 × 4 inches at 110 dpi, drawn with matplotlib's object
API on the Agg canvas (no pyplot, no global state), with constrained layout, a title,
axis labels with units and a legend where it has more than one series. The PNG carries
no "Software" text, so the same inputs give the same bytes. A figure whose data is absent
is skipped. The same run label has the same colour in every figure (`system_colors`, in
first-seen order over `Results.all_runs()`), and the time and energy components have
fixed colours.

Figures (file name, section):

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
- ``time_<group>.png`` (time): for every comparison (group = its folder name) and for the
  runs given alone (group "runs"): stacked bars of the mean time per batch (ms; µs or s
  when the totals call for it) per
  system, split into compute, memory access, link transfers, read-after-write stall,
  checkpoint stall and other; totals on the bars. When the totals span more than 10× a
  second panel shows each system's split in %.
- ``energy_<group>.png`` (energy): the same groups, stacked bars of the energy per batch:
  memory and link dynamic energy, static power, compute device; totals on the bars (and
  the % panel when the totals span more than 10×).
- ``checkpoint_bytes.png`` (checkpoints): bytes of each checkpoint or log write against
  its batch (MB; log y when the sizes span more than 10×), one series per run with a
  checkpoint strategy, at most 10.
- ``sweep_<folder>.png`` (sweeps, checkpoints, failures or hierarchy): for every sweep, a
  metric against its first numeric grid key with two or more values (log x past 20×),
  one line per value of the other keys that vary:
  `checkpoint.interval*` → checkpoint overhead (%) with the Young/Daly interval as a
  dashed vertical line (checkpoints); `failures.*` → mean goodput with its 5th percentile
  dashed (failures); `policy.capacity_*` → miss ratio (hierarchy); any other key → time
  per batch (ms). A sweep with no numeric key gets bars of time per batch per point.

Runs whose plotted data are identical are drawn once, under the joined labels ("hbm-lru =
hbm-belady"); sweep points that change nothing shown (same system, same data) are dropped.
A sweep point is named by its system and the grid values that vary (`display_names`).

Names from result folders (systems, tiers, links, tables, folders) are drawn as written:
`save`, which writes every figure, first makes each text plain (`_as_written`): no TeX,
whatever a matplotlibrc says, and no mathtext (`$...$`) but in the tick labels of
matplotlib's own number formatters; the labels of every other formatter (names as
categories) get their `$` escaped. A legend entry that starts with "_" (which matplotlib
would leave out) gets a leading space; figure file names take only `[A-Za-z0-9_-]` from a
folder name, at most `MAX_STEM` characters of it.

`generic_figures(results, out_dir)` draws them all and returns their `FigureOut`s (name,
title, caption with the computed facts to read, section). `new_figure`, `save`,
`system_colors`, `display_names`, `time_parts` and `energy_parts` are shared with the other
report modules.
"""

from __future__ import annotations

import math
import re
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
from matplotlib import colormaps, rc_context
from matplotlib.axes import Axes
from matplotlib.axis import Axis, Tick
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_hex
from matplotlib.figure import Figure
from matplotlib.text import Text
from matplotlib.ticker import (
    Formatter,
    FuncFormatter,
    LogFormatter,
    PercentFormatter,
    ScalarFormatter,
)

from replay.report.analysis import TERMS, time_terms
from replay.report.load import Results, RunData, SweepData

SECTIONS = ("workload", "hierarchy", "time", "energy", "checkpoints", "failures", "sweeps")
DPI = 110
WIDTH = 7.0
HEIGHT = 4.0
MAX_SERIES = 10  # lines per figure
MAX_MARKERS = 12  # single run markers in mrc.png
MAX_POINTS = 2000  # points drawn per line (longer series are thinned after smoothing)
TRAININGCXL_REUSE = 0.80

# (label, colour) of the time and energy components, fixed across figures
TIME_PARTS: tuple[tuple[str, str], ...] = (
    ("compute", "tab:blue"),
    ("memory access", "tab:orange"),
    ("link transfers", "tab:green"),
    ("read-after-write stall", "tab:red"),
    ("checkpoint stall", "tab:purple"),
    ("other", "tab:gray"),
)
ENERGY_PARTS: tuple[tuple[str, str, str], ...] = (
    ("memory and link dynamic", "energy_dynamic_j", "tab:orange"),
    ("static power", "energy_static_j", "tab:olive"),
    ("compute device", "energy_compute_j", "tab:blue"),
)
MARKERS = ("o", "s", "D", "^", "v", "P", "X", "*", "<", ">", "h", "p")
MAX_STEM = 80  # characters of a folder name in a figure's file name
MAX_TITLE_NAME = 48  # characters of a folder name in a figure's title
# while a figure is drawn, whatever a matplotlibrc says: no TeX, and the mathtext of the
# number formatters' tick labels ($10^{3}$) drawn as math
DRAW_RC = {"text.usetex": False, "text.parse_math": True}
# formatters whose labels are numbers matplotlib writes in mathtext; no name goes in them
MATH_FORMATTERS = (ScalarFormatter, LogFormatter)


@dataclass(frozen=True)
class FigureOut:
    name: str  # file name without folder, e.g. "workload_skew.png"
    title: str  # short human title (also the figure's title)
    caption: str  # one or two sentences saying what to read from it
    section: str  # one of SECTIONS


# -- shared helpers -----------------------------------------------------------------------


class _AsWritten(Formatter):
    """Another formatter's labels with `$` escaped: matplotlib draws them as written."""

    def __init__(self, inner: Formatter) -> None:
        self.inner = inner

    def set_axis(self, axis: Any) -> None:
        super().set_axis(axis)
        self.inner.set_axis(axis)

    def set_locs(self, locs: Any) -> None:
        self.inner.set_locs(locs)

    def __call__(self, x: float, pos: int | None = None) -> str:
        return _no_math(self.inner(x, pos))

    def format_ticks(self, values: Any) -> list[str]:
        return [_no_math(label) for label in self.inner.format_ticks(values)]

    def get_offset(self) -> str:
        return _no_math(self.inner.get_offset())


def _no_math(text: Any) -> str:
    # with no unescaped $ a text is not mathtext, and matplotlib draws each \$ as $
    return str(text).replace("$", r"\$")


def _as_written(fig: Figure) -> None:
    """Make every text of `fig` draw as written, so that a name from a result folder is
    never parsed as mathtext or TeX: TeX off everywhere; mathtext off in every text but
    the tick labels (and offsets) of the axes, whose formatters are matplotlib's number
    formatters or else wrapped to escape `$` (category labels are names)."""
    ticks: set[int] = set()
    for axis in fig.findobj(Axis):
        for which in ("major", "minor"):
            formatter = getattr(axis, which).formatter
            if not isinstance(formatter, (*MATH_FORMATTERS, _AsWritten)):
                if which == "major":
                    axis.set_major_formatter(_AsWritten(formatter))
                else:
                    axis.set_minor_formatter(_AsWritten(formatter))
        ticks.add(id(axis.offsetText))
    for tick in fig.findobj(Tick):
        ticks.update((id(tick.label1), id(tick.label2)))
    for text in fig.findobj(Text):
        text.set_usetex(False)
        text.set_parse_math(id(text) in ticks)


def new_figure(width: float = WIDTH, height: float = HEIGHT) -> Figure:
    """A figure on the Agg canvas with constrained layout (no pyplot state)."""
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def save(fig: Figure, path: Path) -> None:
    """Write `fig` as a PNG: the one place the PNG settings live (110 dpi, no
    "Software" text, so the bytes do not depend on the matplotlib version string), and
    where every text is made to draw as written (`_as_written`; tick labels made while
    drawing take `DRAW_RC`)."""
    if not isinstance(fig.canvas, FigureCanvasAgg):
        FigureCanvasAgg(fig)
    with rc_context(DRAW_RC):
        _as_written(fig)
        fig.savefig(Path(path), dpi=DPI, format="png", metadata={"Software": None})


def system_colors(labels: Sequence[str]) -> dict[str, str]:
    """A colour per distinct label in first-seen order: tab10's colours for up to ten
    labels; past ten, tab20's dark shades first (the same ten), then its light shades,
    so a label keeps its colour when more labels follow."""
    unique = list(dict.fromkeys(labels))
    if len(unique) <= 10:
        cmap = colormaps["tab10"]
        order = list(range(10))
    else:
        cmap = colormaps["tab20"]
        order = [*range(0, 20, 2), *range(1, 20, 2)]
    return {label: to_hex(cmap(order[i % len(order)])) for i, label in enumerate(unique)}


def _wrap(label: str, width: int = 24, lines: int = 3) -> str:
    """A long label on up to `lines` lines (sweep keys shortened first)."""
    parts = textwrap.wrap(_short(label, 10_000), width, break_on_hyphens=False)
    if len(parts) > lines:
        parts = [*parts[: lines - 1], _short(" ".join(parts[lines - 1 :]), width)]
    return "\n".join(parts) or label


def _sanitise(name: str) -> str:
    """A file-name stem from a folder name: `[A-Za-z0-9_-]` only, at most MAX_STEM."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", name)[:MAX_STEM].strip("_") or "group"


def sweep_figure_names(sweeps: Sequence[SweepData]) -> list[str]:
    """The file name of each sweep's figure (`sweep_<folder>.png`, made unique)."""
    used: set[str] = set()
    return [f"sweep_{_unique(_sanitise(sweep.path.name), used)}.png" for sweep in sweeps]


def _legend_label(label: str) -> str:
    """`label` as a legend shows it: matplotlib leaves out labels that start with "_"."""
    return f" {label}" if label.startswith("_") else label


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _unique(base: str, used: set[str]) -> str:
    name, k = base, 2
    while name in used:
        name, k = f"{base}-{k}", k + 1
    used.add(name)
    return name


def _short(label: str, width: int = 32) -> str:
    """A label for ticks and legends: `a.b.key=value` → `key=value`, cut at `width`."""
    text = re.sub(r"[A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)+=", lambda m: m.group(0).split(".")[-1], label)
    return _cut(text, width)


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return float(value) if math.isfinite(float(value)) else None
    try:
        number = float(str(value))
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def _pct(fraction: float) -> str:
    """0.4712 → "47%"; 0.0143 → "1.4%"; 0.00026 → "0.026%"."""
    value = 100.0 * fraction
    if value == 0.0 or abs(value) >= 10.0:
        return f"{value:,.0f}%"
    if abs(value) >= 1.0:
        return f"{value:.1f}%"
    return f"{value:.2g}%"


def _count(value: float) -> str:
    """1,234 → "1,234"; 1.5e6 → "1.5 M"."""
    value = float(value)
    if abs(value) >= 1e9:
        return f"{value / 1e9:.3g} G"
    if abs(value) >= 1e6:
        return f"{value / 1e6:.3g} M"
    if abs(value) >= 1e4:
        return f"{value / 1e3:.3g} k"
    if abs(value) >= 100 or value == int(value):
        return f"{value:,.0f}"
    return f"{value:.3g}"


def _value(value: Any) -> str:
    """A grid value as written on a command line: 1e13 not 10000000000000.0."""
    if isinstance(value, float) and not isinstance(value, bool):
        return f"{value:g}"
    return str(value)


def _rows(value: float) -> str:
    return f"{_count(value)} row{'' if value == 1 else 's'}"


def _axis_count(largest: float) -> FuncFormatter:
    """Tick labels for counts on one scale: 0, 5 k, 10 k ... or 0, 1 M, 2 M ..."""
    for threshold, div, suffix in ((1e9, 1e9, " G"), (1e6, 1e6, " M"), (1e4, 1e3, " k")):
        if largest >= threshold:
            return FuncFormatter(lambda v, _pos, d=div, s=suffix: f"{v / d:g}{s}" if v else "0")
    return FuncFormatter(lambda v, _pos: f"{v:,.0f}" if v == int(v) else f"{v:g}")


def _g(value: float) -> str:
    """A number with three significant digits, or whole with thousands separators."""
    if value == int(value) and abs(value) < 1e12:
        return f"{int(value):,}"
    if value != 0 and (abs(value) >= 1e5 or abs(value) < 1e-3):
        return f"{value:.3g}"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def _bytes_unit(largest: float) -> tuple[float, str]:
    for scale, unit in ((1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if largest >= scale:
            return scale, unit
    return 1.0, "B"


def _time_unit(largest_s: float) -> tuple[float, str]:
    if largest_s >= 10.0:
        return 1.0, "s"
    if largest_s >= 0.1e-3:
        return 1e3, "ms"
    return 1e6, "µs"


def _energy_unit(largest_j: float) -> tuple[float, str]:
    if largest_j >= 1.0 or largest_j == 0.0:
        return 1.0, "J"
    return 1e3, "mJ"


def _spans(values: Sequence[float], ratio: float) -> bool:
    positive = [v for v in values if v > 0]
    return len(positive) >= 2 and max(positive) > ratio * min(positive)


def _legend(ax: Axes, *, outside_from: int = 6) -> None:
    """A legend where it hides no data: none for one series; inside for a few short
    labels; right of the axes for many short ones; below the figure for long ones (the
    figure grows to make room)."""
    handles, labels = ax.get_legend_handles_labels()
    if len(labels) <= 1:
        return
    longest = max(len(label) for label in labels)
    fig = ax.get_figure()
    if longest > 30 and len(labels) >= 3 and isinstance(fig, Figure):
        ncols = 2 if longest <= 48 else 1
        rows = math.ceil(len(labels) / ncols)
        fig.set_figheight(fig.get_figheight() + 0.2 * rows + 0.1)
        fig.legend(
            handles, labels, loc="outside lower center", ncols=ncols, fontsize=8, frameon=False
        )
    elif len(labels) >= outside_from or longest > 30:
        ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=8, frameon=False)
    else:
        ax.legend(loc="best", fontsize=8)


def _category_ticks(ax: Axes, labels: Sequence[str], *, width: int = 24) -> None:
    """x tick labels for categories, rotated when long or many."""
    short = [_short(lab, width) for lab in labels]
    ax.set_xticks(range(len(short)))
    longest = max((len(s) for s in short), default=0)
    if len(short) > 12:
        ax.set_xticklabels(short, rotation=90, fontsize=8)
    elif longest * len(short) > 48 or longest > 10:
        ax.set_xticklabels(short, rotation=30, ha="right", rotation_mode="anchor", fontsize=8)
    else:
        ax.set_xticklabels(short, fontsize=9)


def _col_sum(frame: pl.DataFrame, column: str) -> float:
    if column not in frame.columns or frame.height == 0:
        return 0.0
    return float(frame[column].sum())


def _names(run: RunData, kind: str) -> list[str]:
    """The spec's tier or link names (`kind` = "tiers" or "links"), in spec order."""
    spec = run.spec.get(kind)
    if isinstance(spec, dict):
        names = [str(k) for k in spec]
    elif isinstance(spec, list):
        names = [str(t["name"]) for t in spec if isinstance(t, dict) and "name" in t]
    else:
        names = []
    for name in run.summary.get(kind) or {}:
        if name not in names:
            names.append(str(name))
    return names


def _policy(run: RunData) -> dict[str, Any]:
    policy = run.summary.get("policy")
    return policy if isinstance(policy, dict) else {}


def _is_cache(run: RunData) -> bool:
    name = _policy(run).get("name") or (run.spec.get("policy") or {}).get("name")
    return bool(name) and name != "static"


def _capacity_rows(run: RunData) -> float:
    policy = _policy(run)
    return float(policy.get("capacity_units", 0) or 0) * float(policy.get("unit_rows", 1) or 1)


def _run_batches(run: RunData) -> int:
    return int(run.summary.get("batches") or run.batches.height or 0)


def _smooth(values: np.ndarray, window: int) -> np.ndarray:
    """Trailing rolling mean (shorter windows at the start), same length."""
    if window <= 1 or len(values) == 0:
        return values.astype(float)
    csum = np.concatenate([[0.0], np.cumsum(values, dtype=float)])
    idx = np.arange(1, len(values) + 1)
    lo = np.maximum(idx - window, 0)
    return (csum[idx] - csum[lo]) / (idx - lo)


def _thin(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if len(x) <= MAX_POINTS:
        return x, y
    step = math.ceil(len(x) / MAX_POINTS)
    keep = np.arange(0, len(x), step)
    if keep[-1] != len(x) - 1:
        keep = np.append(keep, len(x) - 1)
    return x[keep], y[keep]


class _Styler:
    """Colour per run label from the report-wide palette; a colour already used in this
    figure gets the next line style, so two series never look alike."""

    STYLES = ("-", "--", ":", "-.")

    def __init__(self, colors: dict[str, str]) -> None:
        self.colors = colors
        self.used: dict[str, int] = {}

    def __call__(self, label: str) -> tuple[str, str]:
        color = self.colors.get(label) or system_colors([label])[label]
        k = self.used.get(color, 0)
        self.used[color] = k + 1
        return color, self.STYLES[k % len(self.STYLES)]


# -- workload -----------------------------------------------------------------------------


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
    save(fig, out / name)
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
    save(fig, out / name)
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
        right = ax.secondary_yaxis(
            "right", functions=(lambda v: 100 * v / mean_lookups, lambda p: p * mean_lookups / 100)
        )
        right.set_ylabel("% of the mean lookups per batch")
    ax.set_title(f"{title} ({_short(run.label, 40)})")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right", fontsize=8, framealpha=0.9)
    save(fig, out / name)
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
    save(fig, out / name)
    rows = _num(workload.get("rows"))
    of_rows = f" of the {_rows(rows)}" if rows else " of all rows"
    caption = (
        f"After {_count(x[-1])} batches {_pct(float(y[-1]))}{of_rows} have been looked up "
        f"({_pct(float(y[0]))} after the first batch)."
    )
    return FigureOut(name, title, caption, "workload")


# -- hierarchy ----------------------------------------------------------------------------


def display_names(results: Results) -> dict[Path, str]:
    """A short name per run folder for legends and ticks: a sweep point is its system and
    the grid values that vary in its sweep, with the keys' last parts
    (`hbm-lru interval_batches=5`); any other run is its label."""
    names = {run.path: run.label for run in results.all_runs()}
    for sweep in results.sweeps:
        varying = _varying(list(sweep.keys), sweep.runs) or list(sweep.keys)
        for run in sweep.runs:
            values = " ".join(f"{k.split('.')[-1]}={_value(run.values.get(k))}" for k in varying)
            names[run.path] = f"{run.system} {values}".strip()
    return names


def _merge_runs(
    runs: Sequence[RunData], key: Any, names: dict[Path, str]
) -> list[tuple[RunData, str]]:
    """(run, label) for each run with new data (`key(run)`), in order. A run with a label
    already seen is dropped (the first wins); one with the same data as an earlier run
    adds its label to that run's ("a = b"), unless a run of its system is already named
    there (the points of a sweep that change nothing shown)."""
    labels: set[str] = set()
    order: list[Any] = []
    groups: dict[Any, tuple[RunData, list[str], set[str]]] = {}
    for run in runs:
        if run.label in labels:
            continue
        labels.add(run.label)
        data = key(run)
        if data in groups:
            _, shown, systems = groups[data]
            if run.system not in systems:
                shown.append(names.get(run.path, run.label))
                systems.add(run.system)
            continue
        groups[data] = (run, [names.get(run.path, run.label)], {run.system})
        order.append(data)
    merged = []
    for data in order:
        first, shown, _ = groups[data]
        label = " = ".join(shown[:3]) + (f" (+{len(shown) - 3})" if len(shown) > 3 else "")
        merged.append((first, label))
    return merged


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
    for run, shown in chosen:
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
        label = _short(shown, 48)
        if policy and policy not in shown and " = " not in shown:
            label = f"{label} ({policy})"
        ax.plot(
            x, 100 * y, color=color, linestyle=linestyle, linewidth=1.3, label=_legend_label(label)
        )
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
    ax.set_title(f"{title} (rolling mean over {win} batches)" if win > 1 else title)
    ax.grid(True, alpha=0.3)
    _legend(ax, outside_from=5)
    save(fig, out / name)
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
    return FigureOut(name, title, caption, "hierarchy")


def _link_traffic(run: RunData) -> list[tuple[str, float]]:
    """(`link direction`, bytes per batch) for every link direction that carries bytes."""
    batches = max(_run_batches(run), 1)
    rows = []
    for link in _names(run, "links"):
        for direction in ("h2d", "d2h"):
            column = f"{link}_{direction}_bytes"
            if column in run.batches.columns:
                total = _col_sum(run.batches, column)
            else:
                total = float(
                    ((run.summary.get("links") or {}).get(link) or {}).get(
                        f"{direction}_bytes", 0.0
                    )
                    or 0.0
                )
            if total > 0:
                rows.append((f"{link} {direction}", total / batches))
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
    name, title = "hierarchy_traffic.png", "Link traffic per batch"
    traffic = [_link_traffic(r) for r, _ in chosen]
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
    ticks = [" =\n".join(_wrap(n) for n in shown.split(" = ")) for _, shown in chosen]
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
    ax.set_xlabel(f"{unit} per batch{' (log scale)' if log else ''}")
    ax.set_title(title)
    ax.grid(True, axis="x", alpha=0.3)
    ax.legend(  # even for one kind: it says which link and direction
        loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=8, frameon=False
    )
    save(fig, out / name)
    per_run = sorted(
        (
            (sum(v for _, v in rows), shown)
            for rows, (_, shown) in zip(traffic, chosen, strict=True)
        ),
        key=lambda t: t[0],
    )
    hi, lo = per_run[-1], per_run[0]
    s2, u2 = _bytes_unit(hi[0])
    if len(per_run) == 1:
        caption = f"{hi[1]} moves {_g(hi[0] / s2)} {u2} per batch over its links."
    else:
        s3, u3 = _bytes_unit(lo[0])
        caption = (
            f"{hi[1]} moves the most over its links, {_g(hi[0] / s2)} {u2} per batch; "
            f"{lo[1]} the least, {_g(lo[0] / s3)} {u3} per batch."
        )
    if total_runs > len(chosen):
        caption += f" The first {len(chosen)} of {total_runs} runs are shown."
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
    for m_i, (policy, label, rows, miss, key) in enumerate(singles[:MAX_MARKERS]):
        color, _ = style(key)
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
    ax.set_xscale("log")
    ax.set_xlabel("cache size (rows, log scale)")
    ax.set_ylabel("miss ratio")
    ax.set_ylim(0, min(1.02, max(ax.get_ylim()[1], 0.05)))
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    _legend(ax, outside_from=4)
    save(fig, out / name)
    return FigureOut(name, title, " ".join(facts[:3]), "hierarchy")


# -- time and energy ----------------------------------------------------------------------


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
    save(fig, out / name)
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
    save(fig, out / name)
    caption = _group_caption(runs, parts, values, scale, unit, "energy")
    return FigureOut(name, title, caption, "energy")


# -- checkpoints --------------------------------------------------------------------------


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
    save(fig, out / name)
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


# -- sweeps -------------------------------------------------------------------------------


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


def _varying(keys: Sequence[str], runs: Sequence[RunData]) -> list[str]:
    """The grid keys with more than one value among `runs`."""
    return [k for k in keys if len({repr(r.values.get(k)) for r in runs}) > 1]


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
    save(fig, out / name)
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
    save(fig, out / name)
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


# -- all ----------------------------------------------------------------------------------


def generic_figures(results: Results, out_dir: Path) -> list[FigureOut]:
    """Draw every figure the results support into out_dir (which exists); skip figures
    with no data. Returns them in report order (workload, hierarchy, time, energy,
    checkpoints, sweeps)."""
    out = Path(out_dir)
    runs = results.all_runs()
    colors = system_colors([r.label for r in runs])
    names = display_names(results)
    figures: list[FigureOut | None] = []
    workload = results.workload()
    if workload is not None:
        figures.append(_workload_skew(workload, out))
        figures.append(_workload_reuse(workload, out))
    first = next((r for r in runs if r.batches.height > 0), None)
    if first is not None:
        figures.append(_workload_distinct(first, out))
    if workload is not None:
        figures.append(_workload_touched(workload, out))
    figures.append(_hierarchy_hits(runs, colors, names, out))
    figures.append(_hierarchy_traffic(runs, names, out))
    figures.append(_mrc(results, colors, names, out))

    used: set[str] = set()
    groups: list[tuple[str, Sequence[RunData]]] = []
    if results.runs:
        groups.append((_unique("runs", used), results.runs))
    for compare in results.compares:
        groups.append((_unique(_sanitise(compare.path.name), used), compare.runs))
    figures.extend(_time_figure(group, members, out) for group, members in groups)
    figures.extend(_energy_figure(group, members, out) for group, members in groups)
    figures.append(_checkpoint_bytes(runs, colors, names, out))

    for sweep, name in zip(results.sweeps, sweep_figure_names(results.sweeps), strict=True):
        figures.append(_sweep_figure(sweep, name, out))
    return [f for f in figures if f is not None]


__all__ = [
    "ENERGY_PARTS",
    "SECTIONS",
    "TIME_PARTS",
    "FigureOut",
    "display_names",
    "energy_parts",
    "generic_figures",
    "new_figure",
    "save",
    "sweep_figure_names",
    "system_colors",
    "time_parts",
]
