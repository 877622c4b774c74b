"""The one-GPU systems' steady state at production scale: the engine's accounting of a
batch whose cache counters come from the plan's LRU curve, not from a replay.

Why. `replay.plan.systems.steady_state` replays each system over the first batches of
the workload. For meta-2021 one batch is 887 M lookups over 5.16 G rows: an LRU's per-row
state alone over those rows is tens of GiB, and the batch's keys 7 GiB. So above
`MODELLED_MIN_LOOKUPS` lookups a batch (and for LRU caches, the policy whose counters
the curve gives) each system's per-batch figures come from one batch's counters built
from what the plan has already measured:

- lookups: the batch's, from the spec (batch size x pooling, summed over the tables);
- hits: lookups x the LRU curve's hit ratio (`replay.analysis.horizon`, over the whole
  run, SHARDS with its exact head) at the system's own cache (its `capacity_*`);
- updates: the batch's distinct rows, E D(1) from the spec in closed form
  (`replay.analysis.touched_model`; each looked-up row is updated, `accumulate_batches`
  = 1);
- the other counters: a full LRU cache in its steady state (`replay.engine.
  cluster_routed.steady_counters`: every miss fills and evicts a dirty row, a batch's
  updated rows resident at its end).

Those counters go through `replay.engine.account.account`, the accounting every replay
uses (tiers, links, compute model, energy), checkpointing off. ASSUMPTIONS: the hit
ratio of a batch in the steady state is the run's (the curve counts the run's cold
misses too: over a day, a small part); a cache smaller than a batch's distinct rows would
evict rows before their update and is not what `steady_counters` models, so such a
system's figures are approximate (said in the note). Other policies are not modelled:
such a system is left out, and the plan says so.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from replay.engine.account import Shape, account
from replay.engine.cluster_routed import routed_policy_ok, steady_counters
from replay.engine.placement import row_state_bytes
from replay.engine.systems import resolve_system_with_origin
from replay.plan.systems import STEADY_OVERRIDES, SystemCost, mark_pareto
from replay.policies import POLICIES

MODELLED_MIN_LOOKUPS = 1 << 27  # a batch above this: the steady state is modelled


def modelled_wanted(spec: Any) -> bool:
    """Whether the systems' steady state is modelled (module docstring)."""
    return spec is not None and int(spec.lookups_per_batch) > MODELLED_MIN_LOOKUPS


def modelled_steady_state(
    spec: Any,
    systems: Sequence[str],
    *,
    sets: Sequence[str],
    lru_hit_at: Callable[[float], float],
    distinct_per_batch: float,
) -> tuple[list[SystemCost], list[str]]:
    """Each LRU system's cost per batch (Pareto flags set), and the systems left out."""
    costs: list[SystemCost] = []
    left: list[str] = []
    lookups = int(spec.lookups_per_batch)
    total_rows = int(sum(t.rows for t in spec.tables))
    for name in systems:
        # a variant of the plan's spec, checkpointing off after its sets (as steady_state)
        system, _ = resolve_system_with_origin(name, [*sets, *STEADY_OVERRIDES])
        if not routed_policy_ok(system):
            left.append(system.name)
            continue
        dim = int(system.model.embedding_dim or spec.embedding_dim)
        cls = POLICIES[system.policy.name]
        unit_rows = cls.unit_rows(system.policy)
        units = cls.capacity(system, unit_rows, row_state_bytes(system, dim), total_rows)
        capacity = int(units) * int(unit_rows)
        hit = float(lru_hit_at(float(capacity)))
        n = np.array([[lookups]], dtype=np.int64)
        u = np.array([[round(min(distinct_per_batch, lookups))]], dtype=np.int64)
        counters = steady_counters(n, u, np.array([hit]), capacity)[0]
        shape = Shape(int(spec.batch_size), len(spec.tables), dim)
        cols = account(system, shape, counters, n[0], u[0], u[0], int(unit_rows))
        costs.append(
            SystemCost(
                name=system.name,
                time_per_batch_s=float(cols["time_s"][0]),
                energy_per_batch_j=float(cols["energy_j"][0]),
                hit_ratio=hit,
                batches=1,
                never_evicts=capacity >= total_rows,
                cache_rows=capacity,
            )
        )
    return mark_pareto(costs), left


def modelled_note(left: list[str], distinct_per_batch: float, lookups: int) -> str:
    """plan.md's note on the basis (module docstring)."""
    text = (
        f"basis: the systems' steady state is modelled, not replayed (a batch is {lookups:,} "
        "lookups; replay.plan.systems_model): one batch's counters from the LRU curve's hit "
        "at each system's cache, its updates the batch's distinct rows "
        f"({distinct_per_batch:,.0f}, the spec in closed form), a full LRU cache's fills, "
        "evictions and write-backs, through the engine's accounting"
    )
    if left:
        text += f"; left out (not an LRU cache): {', '.join(left)}"
    return text


__all__ = ["MODELLED_MIN_LOOKUPS", "modelled_note", "modelled_steady_state", "modelled_wanted"]
