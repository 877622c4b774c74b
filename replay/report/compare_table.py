"""The time section's table of a comparison: each run's time, speedup, energy and hit
ratio per batch and its checkpoint stall against the training between checkpoints, all
steady state (`replay.report.run_terms`: the second half of the batches)."""

from __future__ import annotations

from replay._units import format_hit_ratio, format_number
from replay.report.analysis import MIN_CHECKPOINTS, energy_per_batch, needs_checkpoints, time_terms
from replay.report.blocks import ms as _ms
from replay.report.blocks import pct as _pct
from replay.report.blocks import x as _x
from replay.report.document import Table
from replay.report.load import RunData


def compare_table(runs: tuple[RunData, ...]) -> Table:
    """A comparison's (or the runs given alone) table: time, speedup against the first,
    energy and hit ratio per batch, and the checkpoint stall's share, all steady state."""
    base = time_terms(runs[0])["total"]
    rows = []
    for run in runs:
        terms = time_terms(run)
        s = run.summary
        ck = s.get("checkpoint") or {}
        strategy = str(ck.get("strategy", "none"))
        if strategy == "none":
            overhead = "-"
        else:
            overhead = (
                f"needs ≥ {MIN_CHECKPOINTS} checkpoints"
                if needs_checkpoints(run)
                else _stall_share(run, terms)
            )
        rows.append(
            (
                run.label,
                _ms(terms["total"]),
                _x(base / terms["total"] if terms["total"] > 0 else None),
                f"{format_number(energy_per_batch(run), 4)} J",
                format_hit_ratio(s["policy"]["hit_ratio"]),
                strategy,
                overhead,
            )
        )
    return Table(
        (
            "system",
            "time per batch",
            "speedup",
            "energy per batch",
            "hit ratio",
            "checkpoint",
            "checkpoint stall / training time (steady state, at the run's interval)",
        ),
        tuple(rows),
    )


def _stall_share(run: RunData, terms: dict[str, float]) -> str:
    """The checkpoint stall over the training time between checkpoints, steady state (the
    run's own `overhead` is whole-run: its initial full checkpoint included), with the
    interval it holds at. Above 1x the interval is the system's, not one to train at: a
    whole-state write every batch or so (FastPersist's per-iteration checkpoint) of a
    model of tens of GB against a batch of milliseconds; the plan answers the interval."""
    training = terms["total"] - terms["checkpoint"]
    if training <= 0:
        return _pct(None)
    share = terms["checkpoint"] / training
    ck = run.summary.get("checkpoint") or {}
    k = ck.get("interval_batches_used")
    if not isinstance(k, int | float) or k < 1:
        return _pct(share)
    every = "every batch" if k == 1 else f"every {k:,.0f} batches"
    if share <= 1:
        return f"{_pct(share)} ({every})"
    # the steady state's stall per checkpoint (the run's mean holds the initial full one)
    stall = terms["checkpoint"] * float(k)
    return (
        f"{_pct(share)} ({_ms(stall)} of stall {every} against {_ms(training * float(k))} of "
        "training: an interval to plan, not to train at)"
    )


__all__ = ["compare_table"]
