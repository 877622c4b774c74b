"""A run's time and energy per batch, from its batches.parquet (pure, no I/O): the mean
seconds of each term (compute, memory access, link transfers, read-after-write stall,
checkpoint stall, other) over the steady state or every batch, and the small helpers the
report's analysis shares. The exposed embedding time is memory + link + RAW stall
(`replay.engine.account`); the link part is min(sum of link times, exposed - RAW stall).
"Steady state" is the second half of the batches in batch order, as `replay.plan.systems`
averages.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import polars as pl

from replay.report.load import RunData


def fraction(value: Any) -> float | None:
    """A hit ratio as a float; None (a system with no cache has none) stays None."""
    return None if value is None else float(value)


def link_names(run: RunData) -> list[str]:
    return [name for name in run.spec.get("links", {}) if f"{name}_time_s" in run.batches.columns]


def col(frame: pl.DataFrame, name: str) -> pl.Series:
    if name in frame.columns:
        return frame[name].cast(pl.Float64)
    return pl.Series(name, [0.0] * frame.height, dtype=pl.Float64)


def steady_batches(frame: pl.DataFrame) -> pl.DataFrame:
    """The steady state of a run's batches: the second half in batch order (all of them
    for a one-batch run), as `replay.plan.systems` averages."""
    if frame.height <= 1:
        return frame
    if "batch" in frame.columns:
        frame = frame.sort("batch")
    return frame.slice(frame.height // 2)


def time_terms(run: RunData, *, steady: bool = True) -> dict[str, float]:
    """Mean seconds per batch of each term (TERMS) and `total`, over all batches or the
    steady state (the second half of the batches, `steady_batches`)."""
    frame = steady_batches(run.batches) if steady else run.batches
    n = max(frame.height, 1)
    raw = col(frame, "time_raw_stall_s")
    exposed = col(frame, "time_embedding_exposed_s")
    link_total = sum((col(frame, f"{name}_time_s") for name in link_names(run)), start=raw * 0)
    access = (exposed - raw).clip(lower_bound=0)
    link = pl.select(pl.min_horizontal(link_total, access)).to_series()
    terms = {
        "compute": col(frame, "time_compute_s").sum() / n,
        "memory": (access - link).sum() / n,
        "link": link.sum() / n,
        "raw_stall": raw.sum() / n,
        "checkpoint": col(frame, "time_checkpoint_s").sum() / n,
        "other": col(frame, "time_other_s").sum() / n,
    }
    terms["total"] = col(frame, "time_s").sum() / n
    return {k: float(v) for k, v in terms.items()}


def energy_per_batch(run: RunData, *, steady: bool = True) -> float:
    frame = steady_batches(run.batches) if steady else run.batches
    return float(col(frame, "energy_j").sum() / max(frame.height, 1))


def ratio(num: float, den: float) -> float | None:
    if den <= 0 or not math.isfinite(num) or not math.isfinite(den):
        return None
    return num / den


def unique(runs: Iterable[RunData]) -> list[RunData]:
    seen: set[str] = set()
    out = []
    for run in runs:
        key = str(run.path)
        if key not in seen:
            seen.add(key)
            out.append(run)
    return out


__all__ = [
    "col",
    "energy_per_batch",
    "fraction",
    "link_names",
    "ratio",
    "steady_batches",
    "time_terms",
    "unique",
]
