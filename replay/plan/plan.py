"""`replay plan`: answers for a whole training run, each with how it was reached.

A replayed trace covers seconds of training; users decide for days. The plan takes the
per-batch costs from the engine (steady state, `replay.plan.systems`) and everything that
grows with time from long-horizon curves over the whole run (`replay.analysis.horizon`):

1. the horizon: a trace folder as it is, or a workload over any number of batches,
   generated on the fly and, beyond a few tens of millions of lookups, spatially sampled
   (`replay.workload.sampled`: only the rows SHARDS keeps at rate R are generated, exact
   in distribution, so a month of training costs R x its lookups);
2. the curves: the LRU miss-ratio curve in rows and bytes (exact at R = 1, SHARDS-scaled
   with its 95% error bound below), per table, Che's analytic curve beside it for a
   workload without reuse or drift (over the run's lookups from an empty cache, so with
   its cold misses), and `touched(k)`, the distinct rows updated within k
   consecutive batches (what an incremental checkpoint at interval k writes);
3. the answers: cache bytes for each hit target and the hit at the budget, the budget's
   split across tables (`replay.plan.cache`), FBGEMM's TBE cache against an ideal LRU of
   the same bytes per load factor (`replay.plan.tbe`), each table's statistics for TorchRec's
   planner (`replay.plan.torchrec`), each checkpoint strategy's best interval at
   the cluster's MTBF with its goodput over the run (`replay.plan.checkpoint`), and each
   system's steady-state time and energy per batch with the Pareto front.

The stages (`replay.plan.plan_stages`) each return a typed result; one function assembles
plan.json from them (`replay.plan.plan_document`); the request and the horizon it reads
are in `replay.plan.request`. Sizes: `row_bytes` is what a cache holds per row (the
embedding values, fp32); `state_bytes_per_row` adds the optimizer state, what a checkpoint
writes per row.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from replay._schema_plan import PlanDocument
from replay.plan.request import (
    MIN_SAMPLE_RATE,
    SAMPLED_LOOKUPS_TARGET,
    SAMPLED_ROWS_TARGET,
    STEADY_BATCHES,
    STEADY_MAX_LOOKUPS,
    STEADY_MIN_BATCHES,
    PlanRequest,
    choose_sample_rate,
    request_sample_rate,
    steady_batches,
)


def make_plan(
    request: PlanRequest,
    progress: Callable[[str], None] | None = None,
    resolved: Sequence[Any] = (),
) -> tuple[PlanDocument, dict[str, Any]]:
    """The plan as the JSON document `plan.json` holds (see docs/plan.md; its `torchrec`
    part is written as `torchrec.json`), and the curves its goodput figure draws (goodput
    against interval, per strategy). `resolved`: the request's systems already resolved
    with its sets (the CLI resolves them before any work), else the first stage does."""
    from replay._malloc import trim_freed_memory
    from replay.plan.plan_document import assemble_plan
    from replay.plan.plan_stages import (
        begin_cluster_stage,
        cache_answers,
        checkpoint_answers,
        prepare,
        run_curves,
        system_answers,
    )

    told = progress or (lambda _: None)

    def say(stage: str) -> None:
        trim_freed_memory()  # the last stage's freed batches, kept by the heap for reuse
        told(stage)

    # every system is resolved once, in the first stage, and travels through the others
    setup = prepare(request, resolved)
    curves = run_curves(setup, say)
    # a cluster's sharding, per-GPU curves and comparison need nothing of the cache
    # answers: begun on helper threads beside them (`replay.plan.cluster.begin_cluster`)
    begun = begin_cluster_stage(setup, curves)
    cache = cache_answers(setup, curves, say)
    systems = system_answers(setup, curves, cache, say, begun=begun)
    checkpoints = checkpoint_answers(setup, curves, systems, say)
    notes = [
        *setup.notes,
        *curves.notes,
        *cache.notes,
        *systems.notes,
        *checkpoints.notes,
    ]
    document = assemble_plan(setup, curves, cache, systems, checkpoints, notes)
    return document, checkpoints.curves


__all__ = [
    "MIN_SAMPLE_RATE",
    "SAMPLED_LOOKUPS_TARGET",
    "SAMPLED_ROWS_TARGET",
    "STEADY_BATCHES",
    "STEADY_MAX_LOOKUPS",
    "STEADY_MIN_BATCHES",
    "PlanRequest",
    "choose_sample_rate",
    "make_plan",
    "request_sample_rate",
    "steady_batches",
]
