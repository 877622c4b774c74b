"""`cpr`: CPR's partial recovery (Maeng et al., "CPR: Understanding and Improving Failure
Tolerant Training for Deep Learning Recommendation with Partial Recovery", MLSys 2021).

Checkpoints are written as `sync-full`'s (the full state every k batches, training stalls
for the write). What differs is the recovery: on a node's failure only that node's
embedding shards roll back to the last checkpoint; every other node keeps its state and
the job goes on from where it was, so a failure loses updates instead of time (the failed
node's updates since its last checkpoint). CPR reports the checkpoint-related overhead
falling from 8.2-8.5% to 0.53-0.68% on Criteo Terabyte against full recovery.

In `replay run` (one GPU) the only node is the failed one, so partial recovery is full
recovery: the run models `sync-full`'s writes and rollback. A cluster's partial recovery is
planned by `replay plan` (`replay.plan.cluster_checkpoint`, the failure draws of
`replay.checkpoint.partial`), which reports the lost updates beside goodput.

**The interval** (this module's pure functions). CPR trades the checkpoint's cost, which
falls with the interval τ, against the samples whose updates a failure loses, which rise
with it (the paper's portion of lost samples, PLS, its proxy for the accuracy lost). With
N nodes, each failing at 1 / (M N) (M the cluster's MTBF), a write of W seconds and a
stall of δ per checkpoint, a failure at a uniform position of the period rolls the failed
node back τ/2 + W of training on average, so over the run

    PLS(τ) = (τ / 2 + W) / (M N)          stall share(τ) = δ / (τ + δ).

CPR's objective puts both in the same unit: the overhead O(τ) = δ / (τ + δ) + c PLS(τ),
where c prices a lost sample in training time (`CPR_LOST_SAMPLE_COST`, ASSUMPTION 1: a
lost sample is worth the time it took to train, what full recovery would pay to train it
again). dO/dτ = 0 at

    τ* = sqrt(2 δ M N / c) − δ

(Young's first-order interval at the node's MTBF M N, not the cluster's: partial recovery
loses one node's work, not the job's). CPR also keeps PLS under a target
(`CPR_PLS_TARGET`, ASSUMPTION 2%): τ ≤ τ_PLS = 2 (target M N − W). The plan takes
min(τ*, τ_PLS) in whole batches (at least one), and flags an interval that reaches the
run's end: then no checkpoint falls inside the run and the figures are those of a run
without checkpoints, not an answer.

**Which node fails** matters to the updates lost: nodes fail alike, so the mean over the
failed node is touched(τ) / N, but one failure of the node that holds the most touched
rows loses its share s_max of them, s_max N times the mean. A node's share is its GPUs'
distinct rows over the run (plan.json `cluster.per_gpu[].distinct_rows`) over all GPUs'
(ASSUMPTION: the share of the rows touched in a rollback window is the share of the run's
distinct rows).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from replay.checkpoint.base import FullStateStrategy, register_strategy

CPR_PLS_TARGET = 0.02  # ASSUMPTION: the bound on the portion of lost samples
CPR_LOST_SAMPLE_COST = 1.0  # ASSUMPTION: a lost sample costs its training time
OBJECTIVE = (
    "stall / (interval + stall) + lost_sample_cost x (interval / 2 + write) "
    "/ (cluster MTBF x nodes)"
)


@register_strategy("cpr")
class Cpr(FullStateStrategy):
    overlap = False


def cpr_pls(tau_s: float, write_s: float, mtbf_s: float, nodes: int) -> float:
    """The portion of lost samples at interval τ: (τ/2 + W) / (M N)."""
    return (tau_s / 2.0 + write_s) / (mtbf_s * nodes)


def cpr_overhead(
    tau_s: float, stall_s: float, write_s: float, mtbf_s: float, nodes: int,
    cost: float = CPR_LOST_SAMPLE_COST,
) -> float:  # fmt: skip
    """CPR's objective: the stall share plus the priced portion of lost samples."""
    return stall_s / (tau_s + stall_s) + cost * cpr_pls(tau_s, write_s, mtbf_s, nodes)


def cpr_optimum_s(
    stall_s: float, mtbf_s: float, nodes: int, cost: float = CPR_LOST_SAMPLE_COST
) -> float:
    """τ* = sqrt(2 δ M N / c) − δ, the objective's minimum (0 for a free checkpoint)."""
    return max(0.0, math.sqrt(2.0 * stall_s * mtbf_s * nodes / cost) - stall_s)


def cpr_pls_bound_s(write_s: float, mtbf_s: float, nodes: int, target: float) -> float:
    """The longest interval whose PLS stays at the target: 2 (target M N − W)."""
    return 2.0 * (target * mtbf_s * nodes - write_s)


def node_touched_shares(per_gpu: Sequence[dict[str, Any]] | None, nodes: int) -> list[float] | None:
    """Each node's share of the run's distinct rows (its GPUs' `distinct_rows`), or None
    when the GPUs' distinct rows are not known."""
    if not per_gpu or any(g.get("distinct_rows") is None for g in per_gpu):
        return None
    by_node = [0.0] * nodes
    for g in per_gpu:
        node = int(g["node"])
        if not 0 <= node < nodes:
            return None
        by_node[node] += float(g["distinct_rows"])
    total = sum(by_node)
    return None if total <= 0 else [b / total for b in by_node]


__all__ = [
    "CPR_LOST_SAMPLE_COST",
    "CPR_PLS_TARGET",
    "OBJECTIVE",
    "Cpr",
    "cpr_optimum_s",
    "cpr_overhead",
    "cpr_pls",
    "cpr_pls_bound_s",
    "node_touched_shares",
]
