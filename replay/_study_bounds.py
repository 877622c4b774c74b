"""Where a checkpoint or failure figure from a replayed span stops being a result.

A replayed trace covers seconds to hours of training. What it says about checkpoints
holds only where the span held enough of them, at an interval near the one a run would
use. The engine names a degenerate study in summary.json's `warnings` (`replay run`
prints them, reports list them), and the reports leave out the figures these bounds
refuse. Both read them from here.

- `MIN_CHECKPOINTS`: a stall share, a write rate or a goodput from fewer checkpoints
  describes the first writes, not a steady state.
- a failure study in which no draw saw a failure measured nothing about failures.
- `YOUNG_DALY_BAND`: a failure study's interval over its Young/Daly interval,
  sqrt(2 × checkpoint cost × MTBF) (Young 1974; Daly, FGCS 2006). Goodput falls off
  slowly near that optimum: at a quarter or four times it, the expected loss is about
  twice the optimum's (the first-order model, `(cost / T + T / (2 M))`, gives
  `(x + 1 / x) / 2` times the optimum's loss at `x` times the interval: 2.1 at 0.25 and
  at 4). Outside the band the goodput measures the interval chosen, not the strategy.
"""

from __future__ import annotations

from typing import Any

from replay._units import format_duration, format_multiple

MIN_CHECKPOINTS = 3  # a stall share, a bandwidth or a goodput from fewer is no result
YOUNG_DALY_BAND = (0.25, 4.0)  # a failure study's interval / its Young/Daly interval


def failure_study_warning(checkpoint: dict[str, Any], failures: dict[str, Any]) -> str | None:
    """summary.json's warning for a failure study whose goodput is no result: its
    checkpoints' mean interval outside `YOUNG_DALY_BAND` times its Young/Daly interval, or
    fewer than `MIN_CHECKPOINTS` checkpoints (none at all has its own warning, from the
    checkpoint model). None when the goodput stands, or without checkpoints."""
    count = int(checkpoint.get("count", 0))
    if checkpoint.get("strategy", "none") == "none" or count == 0:
        return None
    if count < MIN_CHECKPOINTS:
        return (
            f"the failure study rests on {count} checkpoint{'s' * (count > 1)}, fewer than "
            f"{MIN_CHECKPOINTS}: its goodput describes the first writes, not the strategy; "
            "replay a longer trace or use replay plan for each strategy's goodput"
        )
    used = failures.get("interval_s_used")
    optimum = failures.get("young_daly_interval_s")
    if used is None or not optimum:
        return None
    ratio = float(used) / float(optimum)
    low, high = YOUNG_DALY_BAND
    if low <= ratio <= high:
        return None
    near = format_duration(float(optimum))
    return (
        f"the checkpoint interval ({format_duration(float(used))}) is {format_multiple(ratio)} its "
        f"Young/Daly interval ({near}): outside {low:g}–{high:g}×, "
        f"the goodput measures the interval, not the strategy; checkpoint every {near}, or "
        "use replay plan for each strategy's goodput at its best interval"
    )


def failures_struck(failures: dict[str, Any]) -> bool:
    """Whether any draw of a failure study saw a failure (else its lost work and restore
    figures are zeros over no failures)."""
    return float(failures.get("failures_per_draw_mean", 0.0)) > 0


def no_failure_warning(failures: dict[str, Any]) -> str | None:
    """summary.json's warning for a failure study in which no draw saw a failure: its
    goodput is the checkpoints' stalls alone, and its lost work and restores are zeros
    over no failures, not measurements. The usual cause is a horizon of the replayed span
    (the default) far shorter than the MTBF."""
    if failures_struck(failures):
        return None
    draws = int(failures.get("draws", 0))
    horizon = float(failures.get("horizon_s", 0.0))
    mtbf = float(failures.get("mtbf_s", 0.0))
    at = f" at an MTBF of {format_duration(mtbf)}" if mtbf > 0 else ""
    return (
        f"no failure struck any of the {draws:,} draws over the {format_duration(horizon)} "
        f"simulated{at}: the goodput is the checkpoints' stalls alone, with no lost work or "
        "restore to measure; set failures.horizon_s to the training run's length (the "
        "replayed timeline repeats to fill it)"
    )


__all__ = [
    "MIN_CHECKPOINTS",
    "YOUNG_DALY_BAND",
    "failure_study_warning",
    "failures_struck",
    "no_failure_warning",
]
