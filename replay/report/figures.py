"""The shared part of the generic figures of `replay report` (DESIGN section 8), drawn from
loaded result folders (`replay.report.load.Results`); no model is re-run. This module holds
what every figure is made with: `FigureOut`, `new_figure`, `save`, the colours, limits and
the helpers for numbers, units, labels, legends and run data that the sections share. The
figures are drawn by one module per report section, and `figures_all.generic_figures`
draws them all:

- `figures_workload`: ``workload_skew.png``, ``workload_reuse.png``,
  ``workload_distinct.png``, ``workload_touched.png``;
- `figures_hierarchy`: ``hierarchy_hits.png``, ``hierarchy_traffic.png``, ``mrc.png``;
- `figures_time`: ``time_<group>.png``, ``energy_<group>.png``;
- `figures_checkpoints`: ``checkpoint_bytes.png``;
- `figures_sweeps`: ``sweep_<folder>.png``.

Every figure is a PNG of about 7 × 4 inches at 110 dpi, drawn with matplotlib's object
API on the Agg canvas (no pyplot, no global state), with constrained layout, a title,
axis labels with units and a legend where it has more than one series. The PNG carries
no "Software" text, so the same inputs give the same bytes. A figure whose data is absent
is skipped. The same run label has the same colour in every figure (`system_colors`, in
first-seen order over `Results.all_runs()`), and the time and energy components have
fixed colours.

Runs whose plotted data are identical are drawn once, under the first run's own name
with "(+N identical)" in the legend, and the caption says which runs it stands for
(`_merge_runs`, `_same_note`): a caption names every plotted series by its own run label.
A sweep point is named by its system and the grid values that vary (`display_names`).

Time, energy and traffic per batch are steady state: the mean over the second half of
each run's batches (`steady_batches`), and the figures say so; a figure over the whole
trace (the hit ratio per batch, the miss-ratio curve) says "whole trace".

Names from result folders (systems, tiers, links, tables, folders) are drawn as written:
`save`, which writes every figure, first makes each text plain (`_as_written`): no TeX,
whatever a matplotlibrc says, and no mathtext (`$...$`) but in the tick labels of
matplotlib's own number formatters; the labels of every other formatter (names as
categories) get their `$` escaped. Figures are drawn in DejaVu Sans (bundled with
matplotlib, so the PNG bytes do not depend on the fonts a machine has), and a character
that font has no glyph for, or that is not printable (control, format and private-use
characters such as a bell or a bidi override), is drawn as its escape (``\\x07``,
``\\u202e``, ``\\u8868``) rather than as an empty box with a warning. A legend entry
that starts with "_" (which matplotlib would leave out) gets a leading space; figure file
names take only `[A-Za-z0-9_-]` from a folder name, at most `MAX_STEM` characters of it.

`new_figure`, `save`, `system_colors` and `display_names` are shared with the other
report modules.
"""

from __future__ import annotations

import functools
import math
import re
import textwrap
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl
from matplotlib import colormaps, rc_context
from matplotlib.axes import Axes
from matplotlib.axis import Axis, Tick
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_hex
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties, findfont
from matplotlib.ft2font import FT2Font
from matplotlib.text import Text
from matplotlib.ticker import (
    Formatter,
    FuncFormatter,
    LogFormatter,
    LogFormatterMathtext,
    ScalarFormatter,
)

from replay._units import format_number
from replay.report.load import Results, RunData, SweepData

if TYPE_CHECKING:
    from matplotlib.typing import RcKeyType

SECTIONS = (
    "workload",
    "hierarchy",
    "cluster",
    "time",
    "energy",
    "checkpoints",
    "failures",
    "sweeps",
)
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
DRAW_RC: dict[RcKeyType, Any] = {
    "text.usetex": False,
    "text.parse_math": True,
    "font.family": "DejaVu Sans",
}
FONT = "DejaVu Sans"
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
    return _drawable(str(text)).replace("$", r"\$")


@functools.cache
def _glyphs() -> frozenset[int]:
    """The code points `FONT` has a glyph for."""
    return frozenset(FT2Font(findfont(FontProperties(family=FONT))).get_charmap())


def _escape(char: str) -> str:
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _drawable(text: str) -> str:
    """`text` with every character `FONT` cannot draw, or that is not printable, as its
    escape; line breaks stay."""
    glyphs = _glyphs()
    return "".join(
        c
        if c == "\n" or (ord(c) in glyphs and not unicodedata.category(c).startswith("C"))
        else _escape(c)
        for c in text
    )


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
        if id(text) not in ticks:
            text.set_text(_drawable(text.get_text()))


def new_figure(width: float = WIDTH, height: float = HEIGHT) -> Figure:
    """A figure on the Agg canvas with constrained layout (no pyplot state)."""
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


class PlainLogFormatter(LogFormatter):
    """A log axis's labels as numbers people write (`0.01`, `100`, `1,000`, `10 k`,
    `1 M`), not matplotlib's `10^-2`, `10^3` or `2^5`: the same ticks labelled
    (`LogFormatter` decides which), each written by `plain_number`."""

    def _num_to_string(self, x: float, vmin: float, vmax: float) -> str:
        return plain_number(x)


def plain_number(x: float) -> str:
    """`0.00002`, `0.5`, `3`, `1,000`, `10 k`, `2.5 M`: a tick's number, no exponent."""
    x = float(x)
    if abs(x) >= 1e4:
        return _count(x)
    if abs(x) >= 1 and x == int(x):
        return f"{x:,.0f}"
    return format_number(x)


def _plain_log_axes(fig: Figure) -> None:
    """matplotlib's default labels of every log axis (`LogFormatterSciNotation`, which
    writes powers) as `PlainLogFormatter`'s; a figure's own formatter stays."""
    for axis in fig.findobj(Axis):
        if axis.get_scale() != "log":
            continue
        base = float(getattr(axis.get_transform(), "base", 10.0))
        major, minor = axis.get_major_formatter(), axis.get_minor_formatter()
        if isinstance(major, LogFormatterMathtext):
            axis.set_major_formatter(PlainLogFormatter(base, labelOnlyBase=major.labelOnlyBase))
        if isinstance(minor, LogFormatterMathtext):
            axis.set_minor_formatter(PlainLogFormatter(base, labelOnlyBase=minor.labelOnlyBase))


def save(fig: Figure, path: Path) -> None:
    """Write `fig` as a PNG: the one place the PNG settings live (110 dpi, no
    "Software" text, so the bytes do not depend on the matplotlib version string), and
    where every text is made to draw as written (`_as_written`; tick labels made while
    drawing take `DRAW_RC`) and every log axis is labelled in plain numbers
    (`_plain_log_axes`)."""
    if not isinstance(fig.canvas, FigureCanvasAgg):
        FigureCanvasAgg(fig)
    with rc_context(DRAW_RC):
        _plain_log_axes(fig)
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
    # memory sizes in binary units, as `replay._units.format_bytes` writes them
    for scale, unit in ((2.0**40, "TiB"), (2.0**30, "GiB"), (2.0**20, "MiB"), (2.0**10, "KiB")):
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


# -- run names (used by several sections) -------------------------------------------------


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


def _varying(keys: Sequence[str], runs: Sequence[RunData]) -> list[str]:
    """The grid keys with more than one value among `runs`."""
    return [k for k in keys if len({repr(r.values.get(k)) for r in runs}) > 1]


def _merge_runs(
    runs: Sequence[RunData], key: Any, names: dict[Path, str]
) -> list[tuple[RunData, str, list[str]]]:
    """(run, name, same) for each run with new data (`key(run)`), in order: `name` is the
    run's own name (`names`, else its label) and `same` the names of the later runs with
    identical data, drawn once under it. A run with a label already seen is dropped (the
    first wins)."""
    labels: set[str] = set()
    order: list[Any] = []
    groups: dict[Any, tuple[RunData, str, list[str]]] = {}
    for run in runs:
        if run.label in labels:
            continue
        labels.add(run.label)
        data = key(run)
        own = names.get(run.path, run.label)
        if data in groups:
            groups[data][2].append(own)
            continue
        groups[data] = (run, own, [])
        order.append(data)
    return [groups[data] for data in order]


def _series_label(name: str, same: Sequence[str], width: int = 48) -> str:
    """A legend entry: the run's own name, and how many runs share its data."""
    label = _short(name, width)
    if same:
        label += f" (+{len(same)} identical)"
    return _legend_label(label)


def _same_note(merged: Sequence[tuple[RunData, str, list[str]]], limit: int = 4) -> str:
    """A caption sentence naming the runs drawn under another's name ("" when none)."""
    notes = []
    for _, name, same in merged:
        if not same:
            continue
        shown = ", ".join(same[:limit]) + (
            f" and {len(same) - limit} more" if len(same) > limit else ""
        )
        notes.append(f"{name} also stands for {shown}")
    if not notes:
        return ""
    return " Runs with identical data are drawn once: " + "; ".join(notes[:3]) + "."


# -- steady state -------------------------------------------------------------------------

STEADY = "steady state"
WHOLE = "whole trace"


def steady_batches(run: RunData) -> pl.DataFrame:
    """The second half of a run's batches (in batch order): the steady state every
    time, energy and traffic figure averages over (one batch: that batch)."""
    frame = run.batches
    if "batch" in frame.columns:
        frame = frame.sort("batch")
    return frame.slice(frame.height // 2)


def steady_mean(run: RunData, column: str) -> float:
    """The mean of `column` over the steady state (0.0 when absent)."""
    frame = steady_batches(run)
    if column not in frame.columns or frame.height == 0:
        return 0.0
    return float(frame[column].sum()) / frame.height


def steady_span(runs: Sequence[RunData]) -> str:
    """Which batches the steady state is, for a caption: "batches 20–39" when every run
    has the same, else "the second half of each run's batches"."""
    spans = set()
    for run in runs:
        frame = steady_batches(run)
        if frame.height == 0 or "batch" not in frame.columns:
            continue
        spans.add((int(frame["batch"].min()), int(frame["batch"].max())))  # type: ignore[arg-type]  # ints: not empty
    if len(spans) == 1:
        lo, hi = spans.pop()
        return f"batch {lo}" if lo == hi else f"batches {lo}–{hi}"
    return "the second half of each run's batches"


__all__ = [
    "ENERGY_PARTS",
    "SECTIONS",
    "TIME_PARTS",
    "FigureOut",
    "display_names",
    "new_figure",
    "save",
    "steady_batches",
    "steady_mean",
    "sweep_figure_names",
    "system_colors",
]
