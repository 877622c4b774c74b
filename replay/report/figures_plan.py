"""A plan's LRU miss-ratio curve, drawn by the report from plan.json (`mrc`, `cache`):
the curve against cache bytes on a log axis, its ~95% error band (plan.json
`mrc.point_errors`, the sampled curve's error at each size; a plan written before them
uses its one `error_bound` at every size; an exact curve has none), the budget as a
labelled line and each hit target's answer as a labelled point. The y axis spans the
curve and its band, not 0-1, so a curve under 0.15 is readable.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

from replay._units import format_bytes, format_percent, format_target
from replay.report import figures

BAND_COLOR = "tab:blue"
BUDGET_COLOR = "tab:red"
TARGET_COLORS = ("tab:green", "tab:purple", "tab:orange", "tab:brown", "tab:pink", "tab:olive")


def _band(mrc: dict[str, Any], n: int) -> np.ndarray:
    """The curve's error at each size: `point_errors`, else its one bound."""
    errors = mrc.get("point_errors")
    if isinstance(errors, list) and len(errors) == n:
        return np.asarray([float(e or 0.0) for e in errors], dtype=np.float64)
    return np.full(n, float(mrc.get("error_bound") or 0.0))


def draw_plan_mrc(doc: dict[str, Any], path: Path, title: str) -> bool:
    """Draws the plan's curve into `path`; False (nothing written) when plan.json holds
    no curve."""
    mrc = doc.get("mrc") or {}
    sizes = np.asarray(mrc.get("bytes") or [], dtype=np.float64)
    miss = np.asarray(mrc.get("miss_ratio") or [], dtype=np.float64)
    if len(sizes) < 2 or len(sizes) != len(miss):
        return False
    keep = sizes > 0
    sizes, miss = sizes[keep], miss[keep]
    err = _band(mrc, len(keep))[keep]
    cache = doc["cache"]
    fig = figures.new_figure()
    ax = fig.add_subplot()
    ax.plot(sizes, miss, color=BAND_COLOR, lw=1.6, label="LRU miss ratio over the run")
    if err.max() > 0:
        ax.fill_between(
            sizes,
            np.clip(miss - err, 0.0, 1.0),
            np.clip(miss + err, 0.0, 1.0),
            color=BAND_COLOR,
            alpha=0.2,
            lw=0,
            label="~95% error band of the sampled curve",
        )
    budget = float(cache["budget_bytes"])
    hit = cache["hit_at_budget"].get("lru")
    ax.axvline(
        budget,
        color=BUDGET_COLOR,
        ls="--",
        lw=1.2,
        label=f"budget {format_bytes(budget)}"
        + (f": hit {format_percent(hit)}" if hit is not None else ""),
    )
    needs = [(t, b) for t, b in (cache["bytes_for_hit"].get("lru") or {}).items() if b]
    for (target, b), color in zip(needs, TARGET_COLORS, strict=False):
        ax.plot(
            [b],
            [1.0 - float(target)],
            "o",
            color=color,
            ms=6,
            label=f"hit {format_target(target)} needs {format_bytes(b)}",
        )
    # binary sizes: ticks at powers of 8 (512 B, 4 KiB, 32 KiB, ...), never 9.77 KiB
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(LogLocator(base=8.0, subs=(1.0,)))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: format_bytes(v)))
    top = float(np.max(np.minimum(miss + err, 1.0)))
    targets = [1.0 - float(t) for t in cache["bytes_for_hit"].get("lru") or {}]
    top = max([top, *targets])
    ax.set_ylim(max(0.0, float(np.min(miss - err))) * 0.9, min(1.0, top * 1.08) or 1.0)
    ax.set_xlabel(f"cache size (bytes of {int(doc.get('row_bytes') or 0)} B rows)")
    ax.set_ylabel("miss ratio")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="upper right", fontsize=8)
    figures.save(fig, path)
    return True


__all__ = ["draw_plan_mrc"]
