"""A cluster system's run: what `replay run` and `replay compare` write for a `[cluster]`.

Placement. The engine's entry for a run of any system (`replay_system`): one GPU is
`replay.engine.replay.replay_trace`, a cluster is this module's `replay_cluster_run`,
which places the tables (`replay.engine.placement.resolve_placement`: the sharding file,
a uniform type or the sharder), replays them (`replay.engine.cluster.replay_cluster`, one
pass) and shapes the result as a one-GPU `RunResult`, so the run folder writer
(`replay/runs/results.py`) and the reports read it as they read any run. Pure: nothing
written here.

What a cluster's run folder says (`ClusterRunResult`):

- `batches.parquet`: the one-GPU columns for the whole cluster
  (`replay.engine.cluster_time`: counts and bytes summed over the GPUs, times the slowest
  GPU's, `time_s` the step time), then the network's per batch: `trace_lookups`,
  `all_to_all_bytes` (every collective of the embeddings, as `cluster.all_to_all_model`
  counts them: TorchRec's collectives, the default, or the lower bound;
  `replay.engine.collectives`), its intra- and inter-node parts, its input
  distribution, forward and backward parts, `all_to_all_s`, `allreduce_bytes_per_rank`,
  `allreduce_s`, `imbalance` (max / mean per-rank lookups) and `step_time_s` (=
  `time_s`);
- `ranks.parquet`: one row per (batch, rank): lookups, hits, misses, updates, the
  rank's embedding time and the all-to-all bytes it sends and receives;
- `sharding.json`: the placement's plan, `ShardingPlan.to_json()`, the format
  `cluster.sharding_file` reads back;
- `summary.json`: the usual totals, where `lookups` counts the lookups the GPUs' caches
  served (`routed_lookups`: a column-wise lookup once per column block, any other once;
  the trace's own count is `cluster.trace_lookups`), so `policy.hit_ratio` is hits over
  the caches' lookups; plus `ranks` (one object per GPU) and `cluster` (the cluster, the
  sharding's basis, imbalance, all-to-all -- which model, in words, its bytes by phase --,
  all-reduce and step time per batch).

Checkpoints and failures of a cluster are not modelled yet (issue 42): such a system is
refused (`refuse_cluster_checkpoint`), and the summary's `checkpoint` is strategy
`none`'s. The trace statistics (`inspect`) take a second pass over the source.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from replay.checkpoint import Timing
from replay.checkpoint.summarize import checkpoint_summary, failures_summary
from replay.engine.account import idle_cache_warnings, study_warnings, summarize
from replay.engine.replay import (
    ClusterRunResult,
    RunResult,
    make_strategy,
    replay_trace,
    trace_meta,
    workload_shape,
)
from replay.engine.systems import refuse_cluster_checkpoint
from replay.policies import POLICIES
from replay.system.optimizer import with_workload_rule
from replay.system.spec import BYTES_PER_VALUE, SystemSpec
from replay.workload.source import Source

if TYPE_CHECKING:  # a cluster's modules load with a cluster: one GPU's run imports none
    from replay.engine.cluster import ClusterResult
    from replay.engine.placement import PlacementResult

# ClusterResult columns (one per batch) that batches.parquet holds beside the account's
_NETWORK_COLUMNS = (
    "all_to_all_bytes",
    "all_to_all_intra_bytes",
    "all_to_all_inter_bytes",
    "all_to_all_input_bytes",
    "all_to_all_forward_bytes",
    "all_to_all_backward_bytes",
    "all_to_all_s",
    "allreduce_bytes_per_rank",
    "allreduce_s",
    "imbalance",
    "step_time_s",
)


def replay_system(
    source: Source,
    system: SystemSpec,
    *,
    inspect: bool = False,
    on_progress: Callable[[int, int], None] | None = None,
    placed: PlacementResult | None = None,
) -> RunResult:
    """A run of `system` on `source`: one GPU's (`replay_trace`) or a cluster's
    (`placed`: its placement, if resolved already)."""
    system = with_workload_rule(system, source.workload)  # replay.system.optimizer
    if system.cluster is None:
        return replay_trace(source, system, inspect=inspect, on_progress=on_progress)
    from replay.engine.patrickstar_run import PATRICKSTAR_POLICY, replay_patrickstar_run

    if system.policy.name == PATRICKSTAR_POLICY:  # data-parallel chunks, not sharded tables
        return replay_patrickstar_run(source, system, inspect=inspect, on_progress=on_progress)
    return replay_cluster_run(
        source, system, inspect=inspect, on_progress=on_progress, placed=placed
    )


def rank_columns(result: ClusterResult) -> dict[str, np.ndarray]:
    """ranks.parquet: one row per (batch, rank), batch-major."""
    cols = result.columns
    nb, world = cols["rank_lookups"].shape
    updates = result.rank_updates
    if updates is None:
        updates = np.zeros((nb, world), dtype=np.int64)
    return {
        "batch": np.repeat(np.arange(nb, dtype=np.int64), world),
        "rank": np.tile(np.arange(world, dtype=np.int64), nb),
        "lookups": cols["rank_lookups"].reshape(-1),
        "hits": cols["rank_hits"].reshape(-1),
        "misses": cols["rank_misses"].reshape(-1),
        "updates": updates.reshape(-1),
        "time_s": cols["rank_time_s"].reshape(-1),
        "all_to_all_sent_bytes": cols["rank_all_to_all_sent_bytes"].reshape(-1),
        "all_to_all_received_bytes": cols["rank_all_to_all_received_bytes"].reshape(-1),
    }


def cluster_block(system: SystemSpec, placed: PlacementResult, result: ClusterResult) -> dict:
    """summary.json's `cluster`: the cluster, how it was sharded, and per batch (mean
    over the batches) the network's bytes and times and the step time."""
    from replay.engine.collectives import DESCRIPTIONS

    cluster = system.cluster
    assert cluster is not None
    cols, totals = result.columns, result.totals
    nb = len(cols["lookups"])

    def mean(name: str) -> float:
        return float(cols[name].mean()) if nb else 0.0

    return {
        "nodes": cluster.nodes,
        "gpus_per_node": cluster.gpus_per_node,
        "world": placed.placement.world,
        "sharding": placed.basis,
        "tables": len(placed.placement.tables),
        "shards": len(placed.placement.shards),
        "trace_lookups": int(totals["lookups"]),
        "routed_lookups": int(totals["routed_lookups"]),
        "local_batch": int(totals["local_batch"]),
        "imbalance_mean": float(totals["imbalance_mean"]),
        "imbalance_max": float(totals["imbalance_max"]),
        "all_to_all_model": totals["all_to_all_model"],
        "all_to_all": DESCRIPTIONS[totals["all_to_all_model"]],
        "all_to_all_bytes_per_batch": mean("all_to_all_bytes"),
        "all_to_all_intra_bytes_per_batch": mean("all_to_all_intra_bytes"),
        "all_to_all_inter_bytes_per_batch": mean("all_to_all_inter_bytes"),
        "all_to_all_input_bytes_per_batch": mean("all_to_all_input_bytes"),
        "all_to_all_forward_bytes_per_batch": mean("all_to_all_forward_bytes"),
        "all_to_all_backward_bytes_per_batch": mean("all_to_all_backward_bytes"),
        "all_to_all_s_per_batch": mean("all_to_all_s"),
        "allreduce_bytes_per_rank_per_batch": mean("allreduce_bytes_per_rank"),
        "allreduce_s_per_batch": mean("allreduce_s"),
        "rank_embedding_s_max_per_batch": float(totals["rank_time_s_max_mean"]),
        "step_time_s": float(totals["step_time_s_mean"]),
        "overlap": "none (embedding, all-to-all, compute and all-reduce in sequence)",
    }


def replay_cluster_run(
    source: Source,
    system: SystemSpec,
    *,
    inspect: bool = False,
    on_progress: Callable[[int, int], None] | None = None,
    placed: PlacementResult | None = None,
) -> ClusterRunResult:
    """Place, replay and summarize a cluster system (module docstring). `placed`: a
    placement already resolved (else `resolve_placement`)."""
    from replay.analysis.stats import inspect_trace
    from replay.engine.cluster import replay_cluster
    from replay.engine.placement import resolve_placement, row_state_bytes

    refuse_cluster_checkpoint(system, "system")
    started = time.perf_counter()
    if placed is None:
        placed = resolve_placement(system, source)
    place_s = time.perf_counter() - started
    result = replay_cluster(source, system, placed.placement, on_progress)
    account_start = time.perf_counter()
    shape = workload_shape(source, system)
    columns = dict(result.batch_columns)
    columns["trace_lookups"] = result.columns["lookups"]
    for name in _NETWORK_COLUMNS:
        columns[name] = result.columns[name]
    cls = POLICIES[system.policy.name]
    cached = cls.cached
    summary = summarize(system, columns, result.unit_rows, result.capacity_units, cached=cached)
    strategy = make_strategy(system, source, shape)  # strategy `none` (refused otherwise)
    timing = Timing(
        base_s=columns["time_s"],
        compute_s=columns["time_compute_s"],
        forward_backward_s=columns["time_s"]
        - system.compute.optimizer_fraction * columns["time_compute_s"],
    )
    checkpointed = strategy.run(timing)
    summary["checkpoint"] = checkpoint_summary(strategy.ctx, timing, checkpointed)
    summary["failures"] = failures_summary(
        strategy.ctx, timing, checkpointed, summary["checkpoint"]
    )
    summary["time"]["all_to_all_s"] = float(columns["all_to_all_s"].sum())
    summary["time"]["allreduce_s"] = float(columns["allreduce_s"].sum())
    summary["warnings"] = study_warnings(summary, evicts=cls.evicts) + idle_cache_warnings(
        system, cached=cls.cached
    )
    dim = shape.embedding_dim
    summary["row_bytes"] = BYTES_PER_VALUE * dim
    summary["row_state_bytes"] = row_state_bytes(system, dim)
    summary["ranks"] = result.ranks
    summary["cluster"] = cluster_block(system, placed, result)
    ranks = rank_columns(result)
    account_s = time.perf_counter() - account_start
    workload = inspect_trace(source) if inspect else None
    inspect_s = time.perf_counter() - account_start - account_s
    total_s = time.perf_counter() - started
    trace_lookups = int(result.totals["lookups"])
    timings = result.timings
    meta = {
        "trace": trace_meta(source, trace_lookups),
        "system": system.name,
        "cluster": True,
        "policy_state_bytes_per_key": int(cls.state_bytes_per_key),
        "timings": {
            "prepare_s": place_s,
            "replay_s": float(timings["replay_s"]),
            "route_s": float(timings["route_s"]),
            "policy_s": float(timings["policy_s"]),
            "inspect_s": inspect_s,
            "account_s": account_s + float(timings.get("account_s", 0.0)),
            "checkpoint_s": 0.0,
            "total_s": total_s,
            "lookups_per_s": trace_lookups / total_s if total_s > 0 else 0.0,
        },
    }
    return ClusterRunResult(
        system,
        columns,
        checkpointed.log.columns(),
        summary,
        meta,
        workload,
        sharding=placed.plan.to_json(),
        rank_columns=ranks,
    )


__all__ = [
    "ClusterRunResult",
    "cluster_block",
    "rank_columns",
    "replay_cluster_run",
    "replay_system",
]
