"""What each GPU holds during training, part by part, as FBGEMM and TorchRec allocate it;
the host memory and drive bytes of each node beside it. Pure functions: shards and batch
shapes in, bytes out.

Parts of one GPU (HBM), each following the source named:

- **weights** (`weights_bytes`): rows x dim x bytes per value of every shard whose kernel
  is `hbm` (TorchRec `fused`, FBGEMM `EmbeddingLocation.DEVICE`: `weights_dev`,
  `split_table_batched_embeddings_ops_training.py` `construct_split_state`). A `uvm`,
  `uvm-caching` or `ssd` shard keeps no weights in HBM (`weights_uvm`, the SSD store).
- **optimizer** (`optimizer_bytes`): `replay.system.optimizer` (FBGEMM's `momentum1` /
  `momentum2`: none for SGD, one fp32 per row for row-wise Adagrad, two fp32 per value
  for Adam). In HBM beside an `hbm` table; beside a `uvm` / `uvm-caching` table only
  row-wise state (`construct_split_state`: `location == DEVICE or rowwise`); for `ssd`,
  FBGEMM's SSD TBE keeps it on the device unless optimizer offloading is on
  (`split_embedding_configs.py` `EmbOptimType.ssd_state_splits`: `dev_size` unless
  `enable_optimizer_offloading`, off by default).
- **cache** (`cache_bytes`): for `uvm-caching`, `_apply_cache_state`: `cache_sets =
  (int(rows x clf) + 31) // 32` (`DEFAULT_ASSOC` = 32 on CUDA), `lxu_cache_weights` sets x 32
  x dim x bytes per value (the cache precision defaults to the weights'), `lxu_cache_state`
  and `lxu_state` (LRU) int64 per slot, `cache_index_table_map` int32 per row of the
  cached tables, and with the prefetch pipeline `lxu_cache_locking_counter` int32 per slot
  (`_init_uvm_cache_counter`). For `ssd`, the L1 of `tbe/ssd/training.py`: `cache_sets =
  max(int(clf x rows / 32), 1)` (clf 0.2 when not given), `lxu_cache_weights`,
  `lxu_cache_state`, `lxu_state` and the locking counter alike. Per cached id of a batch
  in flight, `lxu_cache_locations` int32 (`prefetch` / `_update_cache_counter_and_locations`).
  Optimizer state is never cached (it is split with `cacheable=False`).
- **inputs** (`inputs_bytes`): ids (int64) and lengths of the batches in flight. TorchRec's
  pipelines (`torchrec/distributed/train_pipeline/train_pipelines.py`) hold different
  numbers: `TrainPipelineBase.progress` the batch in forward and the next, copied after
  backward (2 on the device; its input all-to-all runs inside forward: 1 distributed);
  `TrainPipelineSparseDist.progress` "max pipelined batches == 3": batches[0] in
  forward/backward, batches[1] in input_dist, batches[2] copied to the device (3 raw, and
  the distributed ids of batches[0] and [1]: 2); `PrefetchTrainPipelineSparseDist` "maintains
  3 batches in flight", batch i in forward, i+1 distributed and prefetched (3 raw, 2
  distributed). Raw ids are the local batch's; distributed ids are those the input
  all-to-all delivers to this GPU (its shards' ids from every GPU).
- **all-to-all** (`all_to_all_bytes`): the pooled embeddings' all-to-all of the output dist
  (`torchrec/distributed/dist_data.py` `PooledEmbeddingsAllToAll`,
  `PooledEmbeddingsReduceScatter`): the send buffer (this GPU's TBE output: the batch each
  shard serves x its columns, fp32) or the receive buffer (the local batch x every
  table's dim, fp32, what the dense arch reads), the larger: the send buffer is freed once
  the all-to-all has delivered it, before the dense arch runs (ASSUMPTION: the two are
  not live at once at the peak); the backward's gradients have the same two sizes.
- **dense** (`dense_bytes`): `model.dense_params` fp32 parameters, their gradients and
  the dense optimizer's state (ASSUMPTION: the embedding optimizer's kind, per parameter:
  0 SGD, 1 Adagrad for either Adagrad, 2 Adam);
  on a cluster plus DistributedDataParallel's gradient buckets (`torch/nn/parallel/
  distributed.py`, `gradient_as_bucket_view=False` by default: one more copy of the grads).
- **TBE backward workspace** (`tbe_workspace_bytes`): FBGEMM's backward sorts the batch's
  ids (`fbgemm_gpu/src/split_embeddings_utils/transpose_embedding_input.cu`,
  `transpose_embedding_input`): `infos` and `infos_sorted` (int32), `linear_indices`,
  `linear_indices_sorted` and `sorted_linear_indices_run` (int64),
  `sorted_linear_indices_run_lengths` and their cumulative sum (int32): 40 bytes per id
  of the batch in backward (the ids its shards receive). CUB's radix-sort scratch is not
  counted.
- **activations** (`activations_bytes`): `compute.activations_bytes`, given (the dense
  arch's tensors at the peak; for TorchRec's EMO model, the tensors autograd saves for
  backward, counted by `benchmarks/emo/activations.py`).
- **allocator slack** (`allocator_slack_bytes`): reserved minus allocated of PyTorch's
  caching allocator (`c10/cuda/CUDACachingAllocator.cpp`). Blocks freed on one stream are
  reused only by that stream's later allocations, and the pipelines allocate on up to four
  (the default, memcpy, data_dist and prefetch streams), so the tensors made and freed every
  step leave their blocks cached. ASSUMPTION (fitted): slack = `SLACK_SHARE` x the bytes
  made and freed every step (inputs, all-to-all, TBE workspace, activations);
  `SLACK_SHARE` was fitted to TorchRec's EMO benchmark (docs/memory.md), where reserved
  minus allocated stays between 9.07e9 and 9.65e9 bytes across four placements.

Peak allocated = the sum of the parts but the slack; peak reserved = that plus the slack.
A GPU fits when its peak reserved is at most its capacity.

Host memory of a node: the weights (and non-row-wise optimizer state) of its GPUs' `uvm`
and `uvm-caching` shards (FBGEMM `weights_uvm`, `momentum1_uvm`), and each `ssd` shard's
L2 (TorchRec's `l2_cache_size`, given). Drive bytes of a node: its `ssd` shards' weights.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from replay.system.optimizer import (
    BYTES_PER_STATE,
    optimizer_bytes_per_row,
    state_in_hbm_beside_uvm,
)
from replay.system.spec import COMPUTE_DEFAULTS, PIPELINES

KERNELS = ("hbm", "uvm-caching", "uvm", "ssd")
CACHED_KERNELS = ("uvm-caching", "ssd")
# per pipeline: (raw batches on the GPU, batches whose distributed ids are on the GPU)
PIPELINE_BATCHES = {"base": (2, 1), "sparse-dist": (3, 2), "prefetch-sparse-dist": (3, 2)}
ASSOC = 32  # fbgemm DEFAULT_ASSOC on CUDA (64 on ROCm)
SSD_DEFAULT_LOAD_FACTOR = 0.2  # TorchRec's KeyValueParams / the SSD TBE's default
PART_NAMES = (
    "weights_bytes", "optimizer_bytes", "cache_bytes", "inputs_bytes", "all_to_all_bytes",
    "tbe_workspace_bytes", "dense_bytes", "activations_bytes", "allocator_slack_bytes",
)  # fmt: skip
TRANSIENT_PARTS = ("inputs_bytes", "all_to_all_bytes", "tbe_workspace_bytes", "activations_bytes")
# transpose_embedding_input: infos, infos_sorted (int32), linear_indices, linear_indices_sorted,
# sorted_linear_indices_run (int64), run lengths and their cumulative sum (int32)
TBE_WORKSPACE_BYTES_PER_ID = 4 + 4 + 8 + 8 + 8 + 4 + 4
# ASSUMPTION, fitted (module docstring): the cached share of the per-step tensors' bytes
SLACK_SHARE = 0.71
DENSE_STATE_PER_PARAM = {"sgd": 0, "rowwise-adagrad": 1, "adagrad": 1, "adam": 2}
ONE_GPU_INDEX_BYTES = 8  # int64 ids (ClusterSpec.index_bytes' default)
ONE_GPU_LENGTH_BYTES = 4  # int32 lengths (ClusterSpec.length_bytes' default)
UVM_CACHING_DEFAULT_LOAD_FACTOR = 0.2  # fbgemm's cache_load_factor default
ROW_SPLIT = ("row-wise", "table-row-wise")


@dataclass(frozen=True)
class ShardMemory:
    """One shard on one GPU: its rows and columns, kernel and (cached kernels) load factor."""

    table: str
    rows: int
    dim: int
    kernel: str = "hbm"
    cache_load_factor: float = 0.0
    bytes_per_value: int = 4
    l2_bytes: int = 0  # ssd: the L2's host DRAM


@dataclass(frozen=True)
class BatchShape:
    """Per batch on one GPU: ids and lengths of its local batch (raw), ids and lengths
    the input all-to-all delivers to it, the pooled values it sends and receives, and
    the delivered ids that go to cached shards."""

    raw_ids: int
    raw_lengths: int
    dist_ids: int
    dist_lengths: int
    pooled_sent_values: int
    pooled_received_values: int
    cached_ids: int = 0


@dataclass(frozen=True)
class MemorySettings:
    optimizer: str = "sgd"
    pipeline: str = "sparse-dist"
    activations_bytes: int = 0
    dense_params: int = 0
    data_parallel: bool = False  # DDP's buckets (a cluster)
    index_bytes: int = 8
    length_bytes: int = 4
    capacity_bytes: int = 0
    cache_algorithm: str = "lru"


@dataclass(frozen=True)
class GpuMemory:
    rank: int
    parts: dict[str, int]
    allocated_peak_bytes: int
    reserved_peak_bytes: int
    capacity_bytes: int
    host_bytes: int
    drive_bytes: int
    shards: int = 0
    kernels: dict[str, int] = field(default_factory=dict)

    @property
    def fits(self) -> bool:
        return self.reserved_peak_bytes <= self.capacity_bytes

    @property
    def over_bytes(self) -> int:
        """Bytes over the capacity (negative: room left)."""
        return self.reserved_peak_bytes - self.capacity_bytes

    def largest_part(self) -> str:
        """The part to cut first: the largest but the slack (which follows the rest)."""
        parts = {k: v for k, v in self.parts.items() if k != "allocator_slack_bytes"}
        return max(parts, key=lambda k: (parts[k], k))


def cache_slots(shard: ShardMemory) -> int:
    """Cache rows FBGEMM allocates for a cached shard (module docstring)."""
    if shard.kernel == "uvm-caching":
        sets = (int(shard.rows * shard.cache_load_factor) + ASSOC - 1) // ASSOC
        return max(sets, 1) * ASSOC
    if shard.kernel == "ssd":
        clf = shard.cache_load_factor or SSD_DEFAULT_LOAD_FACTOR
        return max(int(clf * shard.rows / ASSOC), 1) * ASSOC
    return 0


def shard_hbm(shard: ShardMemory, optimizer: str, prefetch: bool, lfu: bool = False) -> dict:
    """HBM of one shard: weights, optimizer state and cache (with metadata)."""
    values = shard.rows * shard.dim * shard.bytes_per_value
    state = shard.rows * optimizer_bytes_per_row(optimizer, shard.dim)
    weights = values if shard.kernel == "hbm" else 0
    # uvm, uvm-caching: row-wise state in HBM, per-value state in UVM beside the weights
    in_hbm = shard.kernel in ("hbm", "ssd") or state_in_hbm_beside_uvm(optimizer)
    opt = state if in_hbm else 0
    cache = 0
    slots = cache_slots(shard)
    if slots:
        cache = slots * shard.dim * shard.bytes_per_value  # lxu_cache_weights
        cache += 8 * slots  # lxu_cache_state
        cache += 8 * (shard.rows + 1 if lfu else slots)  # lxu_state
        cache += 4 * slots if prefetch else 0  # lxu_cache_locking_counter
        if shard.kernel == "uvm-caching":
            cache += 4 * shard.rows  # cache_index_table_map
    return {"weights_bytes": weights, "optimizer_bytes": opt, "cache_bytes": cache}


def shard_host(shard: ShardMemory, optimizer: str) -> tuple[int, int]:
    """(host bytes, drive bytes) of one shard."""
    values = shard.rows * shard.dim * shard.bytes_per_value
    state = shard.rows * optimizer_bytes_per_row(optimizer, shard.dim)
    if shard.kernel in ("uvm", "uvm-caching"):
        return values + (0 if state_in_hbm_beside_uvm(optimizer) else state), 0
    if shard.kernel == "ssd":
        return shard.l2_bytes, values
    return 0, 0


def inputs_bytes(batch: BatchShape, settings: MemorySettings) -> int:
    """Ids and lengths of the batches in flight (module docstring)."""
    raw_n, dist_n = PIPELINE_BATCHES[settings.pipeline]
    ib, lb = settings.index_bytes, settings.length_bytes
    raw = batch.raw_ids * ib + batch.raw_lengths * lb
    dist = batch.dist_ids * ib + batch.dist_lengths * lb
    return raw_n * raw + dist_n * dist


def dense_bytes(settings: MemorySettings) -> int:
    copies = 2 + DENSE_STATE_PER_PARAM[settings.optimizer] + (1 if settings.data_parallel else 0)
    return copies * BYTES_PER_STATE * settings.dense_params


def allocator_slack(transient_bytes: int) -> int:
    """Reserved minus allocated (module docstring; ASSUMPTION, fitted)."""
    return int(SLACK_SHARE * transient_bytes)


def gpu_memory(
    rank: int, shards: Sequence[ShardMemory], batch: BatchShape, settings: MemorySettings
) -> GpuMemory:
    """One GPU's memory, part by part (module docstring)."""
    if settings.pipeline not in PIPELINES:
        raise ValueError(f"unknown pipeline {settings.pipeline!r}")
    prefetch = settings.pipeline == "prefetch-sparse-dist"
    lfu = settings.cache_algorithm == "lfu"
    parts = dict.fromkeys(PART_NAMES, 0)
    host = drive = 0
    kernels: dict[str, int] = {}
    for shard in shards:
        if shard.kernel not in KERNELS:
            raise ValueError(f"unknown kernel {shard.kernel!r}")
        for key, value in shard_hbm(shard, settings.optimizer, prefetch, lfu).items():
            parts[key] += value
        h, d = shard_host(shard, settings.optimizer)
        host, drive = host + h, drive + d
        kernels[shard.kernel] = kernels.get(shard.kernel, 0) + 1
    in_flight = 2 if prefetch else 1
    parts["cache_bytes"] += 4 * batch.cached_ids * in_flight  # lxu_cache_locations
    parts["inputs_bytes"] = inputs_bytes(batch, settings)
    # one direction's buffer at the peak: the forward's send buffer is freed once its
    # all-to-all completes, the backward's gradients reuse the sizes (module docstring)
    parts["all_to_all_bytes"] = 4 * max(batch.pooled_sent_values, batch.pooled_received_values)
    # the ids in backward: those its shards receive (one GPU: its own batch's)
    parts["tbe_workspace_bytes"] = TBE_WORKSPACE_BYTES_PER_ID * (batch.dist_ids or batch.raw_ids)
    parts["dense_bytes"] = dense_bytes(settings)
    parts["activations_bytes"] = int(settings.activations_bytes)
    transient = sum(parts[k] for k in TRANSIENT_PARTS)
    parts["allocator_slack_bytes"] = allocator_slack(transient)
    allocated = sum(v for k, v in parts.items() if k != "allocator_slack_bytes")
    return GpuMemory(
        rank=rank,
        parts=parts,
        allocated_peak_bytes=allocated,
        reserved_peak_bytes=allocated + parts["allocator_slack_bytes"],
        capacity_bytes=int(settings.capacity_bytes),
        host_bytes=host,
        drive_bytes=drive,
        shards=len(shards),
        kernels=kernels,
    )


def besides_tables(batch: BatchShape, settings: MemorySettings) -> int:
    """Peak reserved bytes of all but the tables' weights, optimizer state and caches."""
    return gpu_memory(0, [], batch, settings).reserved_peak_bytes


def table_budget_bytes(
    system: Any,
    batch_size: int,
    lookups_per_sample: int,
    tables: int,
    dims_sum: int,
    world: int | None = None,
) -> int:
    """What one GPU of `system`'s cluster (of `world` GPUs; None: the cluster's) has left
    for its tables' weights, optimizer state and caches: its memory minus `besides_tables`
    with the ids spread evenly over the GPUs (an estimate before any placement, the
    placement's first budget: `replay.engine.placement` then checks every GPU with
    `cluster_memory`, as `plan.json`'s `memory` counts the placed shards)."""
    cluster = system.cluster
    if world is None:
        world = cluster.world_size if cluster is not None else 1
    local = -(-batch_size // world)
    batch = BatchShape(
        raw_ids=local * lookups_per_sample,
        raw_lengths=local * tables,
        dist_ids=-(-batch_size * lookups_per_sample // world) if world > 1 else 0,
        dist_lengths=-(-batch_size * tables // world) if world > 1 else 0,
        pooled_sent_values=-(-batch_size * dims_sum // world) if world > 1 else 0,
        pooled_received_values=local * dims_sum if world > 1 else 0,
    )
    settings = MemorySettings(
        optimizer=system.model.optimizer,
        pipeline=system.compute.pipeline,
        activations_bytes=int(system.compute.activations_bytes),
        dense_params=int(system.model.dense_params),
        data_parallel=world > 1,
        index_bytes=cluster.index_bytes if cluster is not None else 8,
        length_bytes=cluster.length_bytes if cluster is not None else 4,
    )
    if cluster is not None:
        capacity = cluster.gpu_memory_bytes
    else:  # one GPU: its `hbm` tier, else its first
        tiers = {t.name: t for t in system.tiers}
        capacity = tiers.get("hbm", system.tiers[0]).capacity_bytes
    return int(capacity) - besides_tables(batch, settings)


def table_pooling(workload: dict[str, Any] | None, tables: int) -> list[int]:
    """Lookups per sample of each table (the spec's pooling; 1 where unsaid)."""
    entries = list((workload or {}).get("tables") or [])
    out = []
    for t in range(tables):
        entry = entries[t] if t < len(entries) and isinstance(entries[t], dict) else {}
        out.append(max(1, int(entry.get("pooling", 1) or 1)))
    return out


def memory_settings(system: Any, capacity: float, data_parallel: bool) -> MemorySettings:
    cluster = system.cluster
    return MemorySettings(
        optimizer=system.model.optimizer,
        pipeline=system.compute.pipeline,
        activations_bytes=int(system.compute.activations_bytes),
        dense_params=int(system.model.dense_params),
        data_parallel=data_parallel,
        index_bytes=cluster.index_bytes if cluster is not None else ONE_GPU_INDEX_BYTES,
        length_bytes=cluster.length_bytes if cluster is not None else ONE_GPU_LENGTH_BYTES,
        capacity_bytes=int(capacity),
        cache_algorithm=system.policy.cache_algorithm,
    )


def shard_kernel(entry: Any, cluster: Any) -> tuple[str, float]:
    kernel = getattr(entry, "kernel", None)
    clf = getattr(entry, "cache_load_factor", None)
    if kernel is None:
        chosen = getattr(cluster, "kernel", "auto")
        kernel = chosen if chosen != "auto" else "hbm"
    if clf is None or clf <= 0:
        clf = getattr(cluster, "cache_load_factor", 0.0) or 0.0
    if kernel == "uvm-caching" and clf <= 0:
        clf = UVM_CACHING_DEFAULT_LOAD_FACTOR
    return str(kernel), float(clf)


def cluster_memory(
    system: Any, workload: dict[str, Any] | None, placement: Any, batch: int
) -> list[GpuMemory]:
    """Every GPU of a placed cluster: each GPU's shards under their tables' kernels
    (`shard_kernel`) and the batch it sees per step. Raw: its local batch (ceil(B / W)
    samples) of every feature, ids = local batch x the table's pooling, one length per
    sample and feature. Distributed: what the input all-to-all delivers to its shards, a
    table-wise or column-wise shard the table's ids of the global batch, a row-wise or
    table-row-wise one its rows' share of them (the even blocks of hashed ids), a
    data-parallel table its local batch's; lengths one per sample served and shard.
    Pooled: the batch each shard serves x its columns sent, the local batch x every
    table's dim received."""
    cluster = system.cluster
    world = placement.world
    local = -(-batch // world)
    tables = placement.tables
    pooling = table_pooling(workload, len(tables))
    dims = [int(t.dim) for t in tables]
    per_rank: list[list[Any]] = [[] for _ in range(world)]
    for shard in placement.shards:
        per_rank[shard.rank].append(shard)
    settings = memory_settings(system, cluster.gpu_memory_bytes, data_parallel=True)
    out = []
    for rank in range(world):
        shards, ids, lengths, sent, cached = [], 0.0, 0, 0, 0.0
        for s in per_rank[rank]:
            entry = placement.entry(s.table)
            kernel, clf = shard_kernel(entry, cluster)
            table = tables[s.table]
            shards.append(
                ShardMemory(
                    table=table.name, rows=s.rows, dim=s.cols, kernel=kernel,
                    cache_load_factor=clf,
                )
            )  # fmt: skip
            served = local if entry.type == "data-parallel" else batch
            share = s.rows / table.rows if entry.type in ROW_SPLIT and table.rows else 1.0
            shard_ids = served * pooling[s.table] * share
            ids += shard_ids
            lengths += served
            sent += served * s.cols
            if kernel in ("uvm-caching", "ssd"):
                cached += shard_ids
        shards = _with_l2(shards, system)
        raw_ids = local * sum(pooling)
        shape = BatchShape(
            raw_ids=raw_ids, raw_lengths=local * len(tables), dist_ids=round(ids),
            dist_lengths=lengths,
            # the pooled values of one direction: the larger buffer (module gpu_memory)
            pooled_sent_values=sent, pooled_received_values=local * sum(dims),
            cached_ids=round(cached),
        )  # fmt: skip
        out.append(gpu_memory(rank, shards, shape, settings))
    return out


def _with_l2(shards: list[ShardMemory], system: Any) -> list[ShardMemory]:
    """The GPU's `ssd` shards with `policy.l2_capacity_bytes` (its SSD TBE's L2 in host
    DRAM, TorchRec's `l2_cache_size`) shared in proportion to their rows."""
    ssd_rows = sum(s.rows for s in shards if s.kernel == "ssd")
    l2 = int(system.policy.l2_capacity_bytes) if system.policy.name == "ssd-tbe" else 0
    if not ssd_rows or not l2:
        return shards
    return [
        dataclasses.replace(s, l2_bytes=l2 * s.rows // ssd_rows) if s.kernel == "ssd" else s
        for s in shards
    ]


def node_totals(gpus: Iterable[GpuMemory], gpus_per_node: int) -> list[dict[str, int]]:
    """Host and drive bytes per node (ranks node-major)."""
    nodes: dict[int, dict[str, int]] = {}
    for g in gpus:
        n = g.rank // gpus_per_node
        entry = nodes.setdefault(n, {"node": n, "host_bytes": 0, "drive_bytes": 0})
        entry["host_bytes"] += g.host_bytes
        entry["drive_bytes"] += g.drive_bytes
    return [nodes[n] for n in sorted(nodes)]


def dense_fits(settings: MemorySettings) -> bool:
    """Whether the dense model alone (parameters, gradients, optimizer state) fits."""
    return dense_bytes(settings) <= settings.capacity_bytes


__all__ = [
    "CACHED_KERNELS",
    "COMPUTE_DEFAULTS",
    "KERNELS",
    "PART_NAMES",
    "PIPELINES",
    "PIPELINE_BATCHES",
    "BatchShape",
    "GpuMemory",
    "MemorySettings",
    "ShardMemory",
    "besides_tables",
    "cache_slots",
    "cluster_memory",
    "dense_bytes",
    "dense_fits",
    "gpu_memory",
    "inputs_bytes",
    "memory_settings",
    "node_totals",
    "shard_kernel",
    "table_budget_bytes",
    "table_pooling",
]
