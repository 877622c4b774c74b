"""Steady-state time and energy per batch of each system, and the time/energy Pareto front.

Per-batch costs do not grow with the length of training, so the engine measures them
exactly on a short span: each system replays the first `batches` batches of the source
(for a workload, generated on the fly; for a trace, the trace) with checkpointing off
(it is planned over the whole run, `replay.plan.checkpoint`). The time per batch is the
system's: its tiers and links plus its compute model (`[compute]`: seconds per batch or
FLOPs per sample); a system without a compute model counts the embedding work only, and
the plan says so. The
steady state is the mean over the second half of the span, after the cache has warmed
(a cold cache's first batches would overstate the time of a run of days).

A system is on the Pareto front when no other system is at least as fast and at least
as frugal, and better in one of the two.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from replay.engine.replay import replay_trace
from replay.engine.systems import resolve_system_with_origin

STEADY_OVERRIDES = ["checkpoint.strategy=none"]  # failures do not change per-batch columns


@dataclass(frozen=True)
class SystemCost:
    name: str
    time_per_batch_s: float
    energy_per_batch_j: float
    hit_ratio: float | None  # of the system's cache over the span (None: no cache)
    batches: int  # the span measured (its second half averaged)
    pareto: bool = False
    never_evicts: bool = False  # a cache that held every row the span touched
    cache_rows: int | None = None  # the system's cache (None: no cache)


def steady_state(
    source: Any, systems: Sequence[str], *, sets: Sequence[str] = (), resolved: Sequence[Any] = ()
) -> list[SystemCost]:
    """Each system's steady-state cost per batch on `source` (Pareto flags set); `resolved`:
    the systems already resolved with `sets` (the plan resolves each once)."""
    costs = []
    for i, name in enumerate(systems):
        spec = resolved[i] if resolved else None
        if spec is None or spec.checkpoint.strategy != "none":
            # a variant of the plan's spec, resolved here with its sets and checkpointing
            # off last: a user's `checkpoint.strategy` must not put its stalls in the
            # per-batch time (the plan prices checkpoints over the whole run)
            spec, _ = resolve_system_with_origin(name, [*sets, *STEADY_OVERRIDES])
        result = replay_trace(source, spec)
        time_s = np.asarray(result.columns["time_s"], dtype=np.float64)
        energy_j = np.asarray(result.columns["energy_j"], dtype=np.float64)
        half = len(time_s) // 2
        policy = result.summary.get("policy", {})
        # a static placement serves every lookup where the rows live: no hit ratio
        hit = policy.get("hit_ratio") if spec.policy.name != "static" else None
        costs.append(
            SystemCost(
                name=spec.name,
                time_per_batch_s=float(time_s[half:].mean()),
                energy_per_batch_j=float(energy_j[half:].mean()),
                hit_ratio=None if hit is None else float(hit),
                batches=len(time_s),
                never_evicts=hit is not None and int(policy.get("evictions", 1)) == 0,
                cache_rows=None
                if hit is None
                else int(policy.get("capacity_units", 0)) * int(policy.get("unit_rows", 1)),
            )
        )
    return mark_pareto(costs)


def mark_pareto(costs: Sequence[SystemCost]) -> list[SystemCost]:
    marked = []
    for c in costs:
        dominated = any(
            o.time_per_batch_s <= c.time_per_batch_s
            and o.energy_per_batch_j <= c.energy_per_batch_j
            and (
                o.time_per_batch_s < c.time_per_batch_s
                or o.energy_per_batch_j < c.energy_per_batch_j
            )
            for o in costs
        )
        marked.append(dataclasses.replace(c, pareto=not dominated))
    return marked


__all__ = ["STEADY_OVERRIDES", "SystemCost", "mark_pareto", "steady_state"]
