"""A report's checkpoint and failure numbers, computed from loaded result folders only
(pure, no I/O); `replay.report.analysis` puts them in the report's `summary.json`.

- `fastpersist`: write time per checkpoint (durable − start, from checkpoints.parquet)
  and its speedup over `torch-save`, and whether per-batch checkpointing is free: write
  time ≤ forward + backward (the compute time per batch).
- `check_n_run`: write bandwidth (bytes per checkpoint after the initial full one, at a
  common interval) and capacity (the most bytes retained) against `sync-full` at the
  same interval, per increment mode and bit width.
- `checkfreq`: CheckFreq at its own interval, its stall share against its rule's.
- `failures`: each run with a failure model, and whether its interval is near enough
  its Young/Daly optimum for its goodput to mean anything.

Artifacts of a short trace are not results: a figure derived from fewer than
`MIN_CHECKPOINTS` checkpoints, from a failure study whose interval lies outside
`YOUNG_DALY_BAND` times its Young/Daly interval, or from an intermittent increment that
never reaches its full refresh in the replayed span carries a `needs` text (what it
would take) instead of being reported; `None` where it is a result.
"""

from __future__ import annotations

import math
from typing import Any, cast

import polars as pl

from replay._study_bounds import MIN_CHECKPOINTS, YOUNG_DALY_BAND
from replay._units import format_duration, format_multiple
from replay.report.document import fmt_ratio
from replay.report.load import Results, RunData
from replay.report.run_terms import ratio as _ratio
from replay.report.run_terms import time_terms
from replay.report.run_terms import unique as _unique

FASTPERSIST_OVERHEAD = 0.01  # the overhead under which checkpointing counts as negligible


# -- checkpoints ----------------------------------------------------------------------------


def _checkpoint_spec(run: RunData) -> dict[str, Any]:
    return dict(run.spec.get("checkpoint", {}))


def write_times(run: RunData) -> pl.Series:
    """Seconds from start to durable of each checkpoint written during training."""
    ck = run.checkpoints
    if ck.is_empty():
        return pl.Series("write_s", [], dtype=pl.Float64)
    return (ck["durable_s"] - ck["start_s"]).alias("write_s")


def checkpoints_taken(run: RunData) -> int:
    """Checkpoints written during training (the initial full one, before batch 0, left
    out)."""
    ck = run.checkpoints
    if ck.is_empty() or "batch" not in ck.columns:
        return 0
    return int((ck["batch"] >= 0).sum())


def _interval_batches(run: RunData) -> int | None:
    """The run's checkpoint interval in batches: as used, as set, or CheckFreq's rule."""
    ck = run.summary.get("checkpoint") or {}
    for value in (
        ck.get("interval_batches_used"),
        _checkpoint_spec(run).get("interval_batches"),
        ck.get("rule_interval_batches"),
    ):
        if isinstance(value, int | float) and not isinstance(value, bool) and value >= 1:
            return math.ceil(value)
    return None


def needs_checkpoints(run: RunData) -> str | None:
    """None when the run took at least MIN_CHECKPOINTS checkpoints, else what it needs."""
    taken = checkpoints_taken(run)
    if taken >= MIN_CHECKPOINTS:
        return None
    text = f"needs ≥ {MIN_CHECKPOINTS} checkpoints (this run took {taken})"
    interval = _interval_batches(run)
    if interval:
        text += (
            f": a trace of ≥ {MIN_CHECKPOINTS * interval:,} batches at its interval of "
            f"{interval:,} batches"
        )
    return text + ", or see the plan section"


def _fastpersist_row(run: RunData, base_write_s: float | None) -> dict[str, Any]:
    spec = _checkpoint_spec(run)
    writes = write_times(run)
    # polars types a column's mean and max as any scalar (cast): these columns are numeric
    write_s = float(cast(float, writes.mean())) if len(writes) else math.nan
    terms = time_terms(run)
    compute_s = terms["compute"]
    # the training time of a batch, without the checkpoint stall: what an interval of k
    # batches spreads one checkpoint's write over
    train_s = terms["total"] - terms["checkpoint"]
    nbytes = float(cast(float, run.checkpoints["bytes"].mean())) if len(writes) else math.nan
    interval = (
        max(1, math.ceil(write_s / (FASTPERSIST_OVERHEAD * train_s)))
        if train_s > 0 and math.isfinite(write_s)
        else None
    )
    return {
        "label": run.label,
        "system": run.system,
        "strategy": run.strategy,
        "writers": int(spec.get("writers", 1)),
        "drives": int(spec.get("drives", 0)),
        "drive_write_bw_bytes_per_s": float(spec.get("drive_write_bw_bytes_per_s", 0.0)),
        "interval_batches": int(spec.get("interval_batches", 0)),
        "bytes_per_checkpoint": nbytes,
        "write_s": write_s,
        "write_bw_bytes_per_s": nbytes / write_s if write_s > 0 else None,
        "speedup": None if base_write_s is None else _ratio(base_write_s, write_s),
        "overhead": float(run.summary["checkpoint"].get("overhead", 0.0)),
        "compute_s": compute_s,
        "train_s": train_s,
        "write_over_compute": _ratio(write_s, compute_s),
        "free_per_batch": bool(write_s <= compute_s),
        # one checkpoint every this many batches keeps its write under 1% of the training
        # time (the write time bounds the stall from above)
        "interval_1pct_batches": interval,
        "interval_1pct_s": None if interval is None else interval * train_s,
        "checkpoints": checkpoints_taken(run),
        "needs": needs_checkpoints(run),
    }


def fastpersist(results: Results) -> dict[str, Any] | None:
    runs = _unique(results.all_runs())
    fast = [r for r in runs if r.strategy == "fastpersist" and not r.checkpoints.is_empty()]
    if not fast:
        return None
    named = [r for r in runs if r.system == "torch-save" and not r.checkpoints.is_empty()]
    sync = named or [
        r
        for r in runs
        if r.strategy == "sync-full"
        and _checkpoint_spec(r).get("writers", 1) == 1
        and not r.checkpoints.is_empty()
    ]
    base = _fastpersist_row(sync[0], None) if sync else None
    base_write = base["write_s"] if base and base["needs"] is None else None
    rows = [_fastpersist_row(r, base_write) for r in fast]
    shown = [r for r in rows if r["needs"] is None]
    speedups = [r["speedup"] for r in shown if r["speedup"] is not None]
    best = max(shown or rows, key=lambda r: r["speedup"] or 0.0)
    return {
        "baseline": base,
        "runs": rows,
        "max_speedup": max(speedups) if speedups else None,
        "best": best["label"],
        "per_batch_free": best["free_per_batch"],
        "per_batch_write_s": best["write_s"],
        "compute_s": best["compute_s"],
        "write_over_compute": best["write_over_compute"],
        "interval_1pct_batches": best["interval_1pct_batches"],
        "interval_1pct_s": best["interval_1pct_s"],
        # the aggregate write rate per-batch checkpoints would need to be free
        "needed_write_bw_bytes_per_s": _ratio(best["bytes_per_checkpoint"], best["compute_s"]),
    }


def _steady_bytes_per_checkpoint(run: RunData) -> float:
    ck = run.checkpoints
    after = ck.filter(pl.col("batch") >= 0) if not ck.is_empty() else ck
    return float(cast(float, after["bytes"].mean())) if after.height else math.nan


def needs_refresh(run: RunData) -> str | None:
    """None unless `run` is an intermittent increment that wrote no full checkpoint after
    the initial one in the replayed span (it then equals one-shot): what it would need."""
    spec = _checkpoint_spec(run)
    if spec.get("increment") != "intermittent":
        return None
    ck = run.checkpoints
    if ck.is_empty() or not {"kind", "batch", "rows"} <= set(ck.columns):
        return None
    if ck.filter((pl.col("kind") == "full") & (pl.col("batch") >= 0)).height:
        return None
    full = ck.filter(pl.col("kind") == "full")
    incr = ck.filter(pl.col("kind") == "incremental").sort("batch")
    threshold = float(spec.get("full_threshold_fraction", 0.5))
    text = (
        f"needs a span in which an increment exceeds {fmt_ratio(threshold)} of the rows "
        "(its full refresh; until then it is one-shot)"
    )
    if full.height and incr.height:
        total = float(cast(float, full["rows"].max()))
        last = incr.row(-1, named=True)
        share = last["rows"] / total if total else 0.0
        text += f": the largest increment here held {fmt_ratio(share)}"
        if share > 0:
            # increments grow more slowly than linearly: a lower bound
            want = math.ceil((int(last["batch"]) + 1) * threshold / share)
            text += f", so a trace of more than {want:,} batches"
    return text + ", or see the plan section"


def check_n_run(results: Results) -> dict[str, Any] | None:
    runs = _unique(results.all_runs())
    cnr = [
        r
        for r in runs
        if r.strategy == "check-n-run"
        and not _checkpoint_spec(r).get("synchronous", False)
        and not r.checkpoints.is_empty()
    ]
    bases = [r for r in runs if r.strategy == "sync-full" and not r.checkpoints.is_empty()]
    if not cnr or not bases:
        return None
    rows = []
    seen: set[tuple[Any, ...]] = set()
    for run in cnr:
        spec = _checkpoint_spec(run)
        interval = (spec.get("interval_batches", 0), spec.get("interval_s", 0.0))
        # one row per configuration (a sweep over something else repeats them)
        config = (spec.get("increment"), spec.get("quantize_bits"), *interval)
        if config in seen:
            continue
        seen.add(config)
        same = [
            b
            for b in bases
            if (
                _checkpoint_spec(b).get("interval_batches", 0),
                _checkpoint_spec(b).get("interval_s", 0.0),
            )
            == interval
        ]
        if not same:
            continue
        base = same[0]
        needs = needs_checkpoints(run) or needs_refresh(run)
        if needs is None and needs_checkpoints(base):
            needs = f"its baseline {base.label} {needs_checkpoints(base)}"
        base_bytes = _steady_bytes_per_checkpoint(base)
        own_bytes = _steady_bytes_per_checkpoint(run)
        base_kept = float(base.summary["checkpoint"]["max_bytes_retained"])
        own_kept = float(run.summary["checkpoint"]["max_bytes_retained"])
        rows.append(
            {
                "label": run.label,
                "increment": str(spec.get("increment", "")),
                "quantize_bits": int(spec.get("quantize_bits", 0)),
                "interval_batches": int(interval[0]),
                "baseline": base.label,
                "bytes_per_checkpoint": own_bytes,
                "baseline_bytes_per_checkpoint": base_bytes,
                "bandwidth_reduction": _ratio(base_bytes, own_bytes),
                "max_bytes_retained": own_kept,
                "baseline_max_bytes_retained": base_kept,
                "capacity_reduction": _ratio(base_kept, own_kept),
                "overhead": float(run.summary["checkpoint"].get("overhead", 0.0)),
                "quantization_error": (run.summary["checkpoint"].get("quantization") or {}).get(
                    "relative_error_mean"
                ),
                "checkpoints": checkpoints_taken(run),
                "batches": int(run.summary["batches"]),
                "needs": needs,
            }
        )
    if not rows:
        return None
    shown = [r for r in rows if r["needs"] is None]
    bw = [r["bandwidth_reduction"] for r in shown if r["bandwidth_reduction"] is not None]
    cap = [r["capacity_reduction"] for r in shown if r["capacity_reduction"] is not None]
    return {
        "runs": rows,
        "shown": len(shown),
        "bandwidth_reduction_range": [min(bw), max(bw)] if bw else None,
        "capacity_reduction_range": [min(cap), max(cap)] if cap else None,
        "interval_batches": sorted({r["interval_batches"] for r in shown}),
        "span_batches": sorted({r["batches"] for r in shown}),
    }


def check_n_run_basis(cnr: dict[str, Any]) -> str:
    """The interval and span the reductions come from (they grow as the interval shrinks)."""
    keys = ("interval_batches", "span_batches")
    spans = [", ".join(f"{v:,}" for v in cnr.get(k) or []) or "its own" for k in keys]
    return f"at an interval of {spans[0]} batches over a {spans[1]}-batch trace"


def checkfreq(results: Results) -> dict[str, Any] | None:
    """CheckFreq at its own interval (runs without interval_batches or interval_s).

    `rule_overhead` is the steady-state stall share the rule aims at, t_snapshot /
    (k · t_iter), from the run's own figures. A run of fewer than MIN_CHECKPOINTS
    checkpoints measures nothing: its `needs` says how long a trace would.
    """
    runs = [
        r
        for r in _unique(results.all_runs())
        if r.strategy == "checkfreq"
        and not _checkpoint_spec(r).get("interval_batches")
        and not _checkpoint_spec(r).get("interval_s")
    ]
    if not runs:
        return None
    rows = []
    for r in runs:
        ck = r.summary["checkpoint"]
        k = ck.get("rule_interval_batches")
        t_snap, t_iter = ck.get("t_snapshot_s"), ck.get("t_iter_s")
        rule = t_snap / (k * t_iter) if k and t_snap is not None and t_iter else None
        rows.append(
            {
                "label": r.label,
                "overhead": float(ck["overhead"]),
                "count": int(ck["count"]),
                "rule_interval_batches": k,
                "rule_overhead": rule,
                "batches": int(r.summary["batches"]),
                "needs": needs_checkpoints(r),
            }
        )
    known = [r["overhead"] for r in rows if r["needs"] is None]
    return {"runs": rows, "max_overhead": max(known) if known else None}


# -- failures ------------------------------------------------------------------------------


def failures(results: Results) -> list[dict[str, Any]]:
    """Every run with a failure model; `needs` is None when its goodput is a result: the
    interval it checkpointed at lies within YOUNG_DALY_BAND of its Young/Daly interval
    and it took MIN_CHECKPOINTS checkpoints (a run without checkpoints needs neither)."""
    rows = []
    low, high = YOUNG_DALY_BAND
    for run in _unique(results.all_runs()):
        f = run.summary.get("failures")
        if not isinstance(f, dict):
            continue
        yd = f.get("young_daly_interval_s")
        used = f.get("interval_s_used")
        ratio = _ratio(float(used), float(yd)) if used is not None and yd else None
        needs = None
        if run.strategy != "none":
            if ratio is None or not low <= ratio <= high:
                needs = (
                    f"its interval, {duration_text(used)}, is "
                    + ("not comparable to" if ratio is None else format_multiple(ratio))
                    + f" its Young/Daly interval ({duration_text(yd)}): needs an interval within "
                    f"{low:g}–{high:g}× that ({duration_text(low * yd if yd else None)} to "
                    f"{duration_text(high * yd if yd else None)}), or see the plan section"
                )
            else:
                needs = needs_checkpoints(run)
        rows.append(
            {
                "label": run.label,
                "strategy": run.strategy,
                "mtbf_s": float(f["mtbf_s"]),
                "goodput_mean": float(f["goodput_mean"]),
                "goodput_p5": float(f["goodput_p5"]),
                "lost_work_per_training_failure_s": float(f["lost_work_per_training_failure_s"]),
                "failures_during_restore_per_draw_mean": float(
                    f["failures_during_restore_per_draw_mean"]
                ),
                "young_daly_interval_s": yd,
                "interval_s_used": used,
                "interval_over_young_daly": ratio,
                "needs": needs,
            }
        )
    return rows


def duration_text(seconds: float | None) -> str:
    return "n/a" if seconds is None or not math.isfinite(seconds) else format_duration(seconds)


__all__ = [
    "FASTPERSIST_OVERHEAD",
    "MIN_CHECKPOINTS",
    "YOUNG_DALY_BAND",
    "check_n_run",
    "check_n_run_basis",
    "checkfreq",
    "checkpoints_taken",
    "duration_text",
    "failures",
    "fastpersist",
    "needs_checkpoints",
    "needs_refresh",
    "write_times",
]
