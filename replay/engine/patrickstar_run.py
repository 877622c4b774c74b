"""A `chunk` (PatrickStar) system on a cluster: what `replay run` and `replay compare`
answer for it.

Placement. Called by `replay.engine.cluster_run.replay_system` when a system with a
`[cluster]` has the `chunk` policy; beside `cluster_run.py` (TorchRec-style sharded
tables), because PatrickStar does not shard tables: it trains data-parallel, every rank
running its own B / W samples of every batch, and partitions the *chunks* over the ranks
(ZeRO-style: chunk c stored on rank c mod W, a group of W chunks all-gathered when a
rank uses one of them: `replay.engine.patrickstar`'s docstring has the model and its
sources). Pure: nothing written here.

What a run says:

- per batch, the one-GPU columns of the chunk policy's replay of the whole batch
  (`replay_trace` of the system without its cluster): each rank's chunk movement between
  CPU and GPU is modelled as one GPU holding and training the whole model (ASSUMPTION, an
  upper bound: a rank of PatrickStar's data parallelism stores 1 / W of the chunks and
  runs B / W samples; the movement of its own chunks is not modelled apart), plus the
  collectives of `patrickstar_cluster` (`patrickstar_*` columns: groups gathered,
  all-gather and reduce-scatter bytes per rank, intra- and inter-node bytes, their time
  on the cluster's links), added to the batch's time: ``time_s = one GPU's time +
  comm_s`` (no overlap: PatrickStar's collectives are blocking, `async_op=False`);
- `summary.json`: the one-GPU summary of that time, `patrickstar` (the model's block,
  with the paper's claim beside the volume), `cluster` (the cluster and the step time)
  and `ranks` (per GPU: its samples' lookups, and the groups its own samples use per
  batch is not split per rank: see `rank_groups_*` in `patrickstar`);
- `sharding.json`: every table `data-parallel` over all ranks (each rank trains every
  table), its `source` saying that the storage is PatrickStar's chunk partition, which
  TorchRec's format cannot express.

Checkpoints and failures of a cluster are not modelled (issue 42): refused, as for any
cluster (`refuse_cluster_checkpoint`).
"""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from replay.engine.patrickstar import PatrickStarResult, patrickstar_cluster
from replay.engine.replay import ClusterRunResult, RunResult, replay_trace
from replay.engine.systems import refuse_cluster_checkpoint
from replay.system.sharding import DATA_PARALLEL, ShardingPlan, TableSharding
from replay.system.spec import SystemSpec
from replay.workload.source import Source

PATRICKSTAR_POLICY = "chunk"

# patrickstar_cluster's per-batch columns copied to batches.parquet (prefixed)
_COLUMNS = (
    "groups",
    "chunks",
    "all_gather_bytes",
    "reduce_scatter_bytes",
    "intra_node_bytes",
    "inter_node_bytes",
    "comm_s",
    "data_parallel_bytes",
)


def sharding_of(source: Source, world: int) -> dict[str, Any]:
    """sharding.json of a PatrickStar run: every table data-parallel on every rank."""
    ranks = tuple(range(world))
    plan = ShardingPlan(
        tuple(TableSharding(str(n), DATA_PARALLEL, ranks) for n in source.table_names),
        "PatrickStar: data-parallel training; chunk c of chunk_rows rows stored on rank "
        "c mod world, its group of world chunks all-gathered when used",
    )
    return plan.to_json()


def _rank_lookups(lookups: np.ndarray, batch: int, world: int) -> np.ndarray:
    """Each rank's share of the lookups: its samples [ceil(rB/W), ceil((r+1)B/W)) of B, so
    a rank's lookups are the batch's x its samples / B (whole tables of equal pooling)."""
    edges = -(-np.arange(world + 1, dtype=np.int64) * batch // world)
    share = np.diff(edges) / max(batch, 1)
    return np.rint(np.outer(lookups, share)).astype(np.int64)


def replay_patrickstar_run(
    source: Source,
    system: SystemSpec,
    *,
    inspect: bool = False,
    on_progress: Callable[[int, int], None] | None = None,
) -> RunResult:
    """A chunk system on its cluster (module docstring)."""
    refuse_cluster_checkpoint(system, "system")
    cluster = system.cluster
    assert cluster is not None
    started = time.perf_counter()
    one = dataclasses.replace(system, cluster=None)
    base = replay_trace(source, one, inspect=inspect, on_progress=on_progress)
    ps: PatrickStarResult = patrickstar_cluster(source, system)
    columns = dict(base.columns)
    for name in _COLUMNS:
        columns[f"patrickstar_{name}"] = ps.columns[name]
    columns["time_s"] = base.columns["time_s"] + ps.columns["comm_s"]
    columns["step_time_s"] = columns["time_s"]
    summary = copy.deepcopy(base.summary)
    summary["time_s"] = float(columns["time_s"].sum())
    summary["time"]["patrickstar_comm_s"] = float(ps.columns["comm_s"].sum())
    summary["patrickstar"] = ps.summary["patrickstar"]
    world = ps.world
    batch = int(source.manifest.get("batch_size", (source.workload or {}).get("batch_size", 0)))
    per_rank = _rank_lookups(ps.columns["lookups"], batch, world)
    summary["ranks"] = [
        {"rank": r, "node": r // ps.gpus_per_node, "lookups": int(per_rank[:, r].sum())}
        for r in range(world)
    ]
    nb = len(columns["time_s"])
    summary["cluster"] = {
        "nodes": cluster.nodes,
        "gpus_per_node": cluster.gpus_per_node,
        "world": world,
        "sharding": {"sharding": "patrickstar", "chunk_rows": ps.chunk_rows},
        "step_time_s": float(columns["time_s"].mean()) if nb else 0.0,
        "collectives_s_per_batch": float(ps.columns["comm_s"].mean()) if nb else 0.0,
        "per_gpu_movement": "one GPU's chunk replay of the whole batch (an upper bound)",
        "overlap": "none (PatrickStar's collectives are blocking)",
    }
    meta = dict(base.meta)
    meta["cluster"] = True
    timings = dict(meta.get("timings", {}))
    timings["patrickstar_s"] = ps.elapsed_s
    timings["total_s"] = time.perf_counter() - started
    meta["timings"] = timings
    rank_cols = {
        "batch": np.repeat(np.arange(nb, dtype=np.int64), world),
        "rank": np.tile(np.arange(world, dtype=np.int64), nb),
        "lookups": per_rank.reshape(-1),
    }
    return ClusterRunResult(
        system,
        columns,
        base.checkpoints,
        summary,
        meta,
        base.workload,
        sharding=sharding_of(source, world),
        rank_columns=rank_cols,
    )


__all__ = ["PATRICKSTAR_POLICY", "replay_patrickstar_run", "sharding_of"]
