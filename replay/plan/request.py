"""What `replay plan` was asked, and the horizon it reads: the request, the curves'
sample rate, the source of the curves and of the systems' steady-state span.

The rate: 1 up to `SAMPLED_LOOKUPS_TARGET` lookups, else the power of two that keeps the
sample under it (SHARDS, `replay.workload.sampled`); the steady span: `STEADY_BATCHES`
batches, fewer where they hold more than `STEADY_MAX_LOOKUPS` lookups. Sizes: `row_bytes`
is a row's embedding values (fp32), `state_bytes_per_row` adds the optimizer state.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from replay.errors import ConfigError
from replay.workload.spec import WorkloadSpec

# a horizon of more lookups than this is sampled (when no rate is given): the curves then
# cost about this many lookups whatever the length of the run
SAMPLED_LOOKUPS_TARGET = 30_000_000
SAMPLED_ROWS_TARGET = 1 << 24  # ... and about as many sampled rows at most
STEADY_BATCHES = 200  # the span each system replays for its per-batch costs
# ... cut to about this many lookups (at least `STEADY_MIN_BATCHES`): 200 batches of a
# production batch (400 tables x 65,536 samples) are 5.2 G lookups, minutes of replay for a
# per-batch cost that a few batches give as well
STEADY_MAX_LOOKUPS = 1 << 27
STEADY_MIN_BATCHES = 4
MIN_SAMPLE_RATE = 2.0**-24  # SHARDS's resolution: one key in 2^24


@dataclass(frozen=True)
class PlanRequest:
    """What `replay plan` was asked. `source` is a trace folder or a workload spec (with
    its batches, batch size and seed applied)."""

    source: Path | WorkloadSpec
    systems: tuple[str, ...]
    cache_budget_bytes: int
    hit_targets: tuple[float, ...]
    mtbf_s: float
    sample_rate: float | None = None  # None: chosen from the horizon's size
    time_per_batch_s: float | None = None  # None: the first system's steady state
    sets: tuple[str, ...] = ()
    draws: int = 1000
    seed: int = 0
    notes: list[str] = field(default_factory=list)
    torchrec_bins: int = 100  # torchrec.json's histogram bins (`replay.plan.torchrec`)
    # the training length as the user gave it, {"duration_s" | "samples" | "epochs" |
    # "batches": value}, recorded in plan.json's horizon; None: the source's own batches
    given: dict[str, float | int] | None = None
    # the failure model as the user gave it (--nodes with --node-mtbf), recorded in
    # plan.json beside mtbf_s; None where --cluster-mtbf was given
    nodes: int | None = None
    node_mtbf_s: float | None = None


def choose_sample_rate(lookups: int, rows: int = 0) -> float:
    """1 up to `SAMPLED_LOOKUPS_TARGET` lookups, else the power of two that keeps the
    sample under it (a power of two is exact in SHARDS's 2^24 thresholds), and, where
    the tables have more than `SAMPLED_ROWS_TARGET` rows, that keeps the sampled rows
    under it too (their alias tables take ~54 B a row: 12 tables of 4 G rows at R = 2^-7
    asked for 19 GB)."""
    if lookups <= SAMPLED_LOOKUPS_TARGET:
        return 1.0
    rate = 2.0 ** math.floor(math.log2(SAMPLED_LOOKUPS_TARGET / lookups))
    if rows > SAMPLED_ROWS_TARGET:
        rate = min(rate, 2.0 ** math.floor(math.log2(SAMPLED_ROWS_TARGET / rows)))
    return max(rate, MIN_SAMPLE_RATE)


def request_sample_rate(request: PlanRequest, spec: WorkloadSpec) -> float:
    """The rate a workload's curves are sampled at: `--sample-rate`, else chosen from its
    lookups and rows (`choose_sample_rate`); what the plan and its estimate both use."""
    if request.sample_rate is not None:
        return request.sample_rate
    return choose_sample_rate(
        spec.batches * spec.lookups_per_batch, sum(t.rows for t in spec.tables)
    )


def open_horizon(request: PlanRequest) -> tuple[Any, float, WorkloadSpec | None]:
    """The source the curves read, its sample rate, and the spec (None for a trace)."""
    from replay.trace.reader import open_trace

    if isinstance(request.source, WorkloadSpec):
        spec = request.source
        rate = request_sample_rate(request, spec)
        if rate >= 1.0:
            from replay.workload.onthefly import GeneratedTrace

            return GeneratedTrace(spec), 1.0, spec
        from replay.workload.sampled import open_sampled_workload

        sampled = open_sampled_workload(spec, rate)
        return sampled, float(sampled.sample_rate), spec
    if request.sample_rate is not None and request.sample_rate < 1.0:
        raise ConfigError(
            "--sample-rate applies to a workload (--workload): a trace folder is read whole"
        )
    return open_trace(request.source), 1.0, None


def steady_source(request: PlanRequest, horizon: Any) -> Any:
    if isinstance(request.source, WorkloadSpec):
        from replay.workload.onthefly import GeneratedTrace

        spec = request.source
        return GeneratedTrace(spec.with_overrides(batches=steady_batches(spec)))
    return horizon


def steady_batches(spec: WorkloadSpec) -> int:
    """The span each system replays on a workload: `STEADY_BATCHES`, or fewer where that
    many batches hold more than `STEADY_MAX_LOOKUPS` lookups (at least
    `STEADY_MIN_BATCHES`), never more than the run."""
    fit = STEADY_MAX_LOOKUPS // max(int(spec.lookups_per_batch), 1)
    return max(1, min(int(spec.batches), STEADY_BATCHES, max(STEADY_MIN_BATCHES, fit)))


def row_sizes(workload: dict[str, Any], system: Any) -> tuple[int, int]:
    from replay.system.spec import BYTES_PER_VALUE, optimizer_bytes_per_row

    dim = int(system.model.embedding_dim or workload.get("embedding_dim") or 0)
    if dim <= 0:
        raise ConfigError("the embedding dimension is unknown: set model.embedding_dim")
    row_bytes = BYTES_PER_VALUE * dim
    return row_bytes, row_bytes + optimizer_bytes_per_row(system.model.optimizer, dim)


__all__ = [
    "MIN_SAMPLE_RATE",
    "SAMPLED_LOOKUPS_TARGET",
    "SAMPLED_ROWS_TARGET",
    "STEADY_BATCHES",
    "STEADY_MAX_LOOKUPS",
    "STEADY_MIN_BATCHES",
    "PlanRequest",
    "choose_sample_rate",
    "open_horizon",
    "request_sample_rate",
    "row_sizes",
    "steady_batches",
    "steady_source",
]
