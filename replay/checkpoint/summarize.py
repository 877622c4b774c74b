"""summary.json's `checkpoint` and `failures` objects, from a strategy's result."""

from __future__ import annotations

from typing import Any

import numpy as np

from replay._units import format_duration
from replay.checkpoint.base import CheckpointContext, CheckpointResult, Timing


def checkpoint_summary(
    ctx: CheckpointContext, timing: Timing, result: CheckpointResult
) -> dict[str, Any]:
    cols = result.log.columns()
    count = len(cols["index"])
    useful = float(timing.base_s.sum())
    stall = float(result.stall_s.sum())
    starts = cols["start_s"]
    batches = cols["batch"]
    warnings = []
    if ctx.spec.strategy == "none" and (ctx.spec.interval_batches or ctx.spec.interval_s):
        warnings.append(none_with_interval(ctx.spec.interval_batches, ctx.spec.interval_s))
    if ctx.spec.strategy != "none" and not (batches >= 0).any():
        warnings.append(
            "no checkpoint was taken during the replayed batches (the interval is longer than "
            "the trace): failures roll back to the start; replay a longer trace"
        )
    return {
        "warnings": warnings,
        "strategy": ctx.spec.strategy,
        "count": count,
        "full": int((cols["kind"] == "full").sum()) if count else 0,
        "incremental": int((cols["kind"] == "incremental").sum()) if count else 0,
        "logs": int((cols["kind"] == "log").sum()) if count else 0,
        "state_bytes": ctx.state_bytes,
        "rows_written": int(cols["rows"].sum()) if count else 0,
        "bytes_written": int(cols["bytes"].sum()) if count else 0,
        "max_bytes_retained": int(cols["retained_bytes"].max()) if count else 0,
        "stall_s": stall,
        # as a fraction of failure-free training time without checkpoints
        "overhead": stall / useful if useful > 0 else 0.0,
        "cost_s_mean": stall / count if count else 0.0,
        "interval_batches_used": float(np.diff(batches).mean()) if count > 1 else None,
        "interval_s_used": float(np.diff(starts).mean()) if count > 1 else None,
        "target": ctx.target().name if ctx.spec.strategy != "none" else None,
        **result.summary,
    }


def none_with_interval(interval_batches: int, interval_s: float) -> str:
    """The warning for an interval given to the `none` strategy, which ignores it (a user
    who sets an interval expects checkpoints)."""
    given = (
        f"checkpoint.interval_batches is {interval_batches:,}"
        if interval_batches
        else f"checkpoint.interval_s is {format_duration(interval_s)}"
    )
    return (
        f"{given}, but checkpoint.strategy is none: no checkpoint was written; choose one with "
        "--set checkpoint.strategy=NAME (replay presets lists them)"
    )


def failures_summary(
    ctx: CheckpointContext,
    timing: Timing,
    result: CheckpointResult,
    checkpoint: dict[str, Any],
) -> dict[str, Any] | None:
    spec = ctx.system.failures
    if not spec.enabled:
        return None
    # the failure model (its kernels, the workload sampler's mixer) for a study of failures
    from replay.checkpoint.failures import evaluate_failures, young_daly_interval_s

    period = float((timing.base_s + result.stall_s).sum())
    useful = float(timing.base_s.sum())
    stats = evaluate_failures(
        period,
        useful,
        result.points,
        scratch_restore_s=result.scratch_restore_s,
        horizon_s=spec.horizon_s,
        mtbf_s=spec.mtbf_s,
        draws=spec.draws,
        seed=spec.seed,
        times_s=spec.times_s,
    )
    out = stats.to_json()
    cost = checkpoint["cost_s_mean"]
    mtbf = spec.mtbf_s
    out["restart_s"] = spec.restart_s
    out["checkpoint_cost_s"] = cost
    out["young_daly_interval_s"] = (
        young_daly_interval_s(cost, mtbf) if mtbf > 0 and checkpoint["count"] else None
    )
    out["interval_s_used"] = checkpoint["interval_s_used"]
    return out
