"""The step model's inputs from a cluster replay: each GPU's kernel loads and stages per
batch, means over the steady span's second half, and plan.json's `cluster.step`.

Placement. Engine arithmetic beside `replay.engine.step_model` (the parts and the
pipelines' overlap) and `replay.engine.cluster` (whose columns it reads); pure.

Per GPU, from the replay's columns (`rank_lookups`, `rank_hits`, `rank_misses`,
`rank_updates` where present, `all_to_all_s` and its bytes by phase, `allreduce_s`):

- the kernel: each table's `kernel` in the sharding plan where it names one, else the
  system's placement as a kernel (`system_kernel`): a static placement on the GPU's own
  memory is `hbm`, on host memory `uvm`; `ssd-tbe` is `ssd`; any other cached policy
  (its fast tier on the GPU) is `uvm-caching`. A GPU whose shards mix kernels takes the
  kernel most of its rows have (ASSUMPTION: the replay counts a GPU's lookups, not its
  lookups per kernel).
- `uvm-caching` and `ssd`: the misses are the rows fetched into the cache, and as many
  dirty rows are evicted (ASSUMPTION: a full cache whose every row was updated). Under
  `prefetch-sparse-dist` a `uvm-caching` GPU's prefetch cannot insert into locked slots
  (`replay.engine.step_model.locked_inserts`, with the batch's update rows as its unique
  rows and the GPU's cache slots: the plan's ceil(clf x rows) per cached shard, else
  `policy.capacity_rows`): the misses it leaves are read from host memory in the forward
  and updated there in the backward. A mixed GPU's `uvm` shards
  count as misses in the replay (served from host memory without a fill) and its `hbm`
  shards as hits, so their rows cross PCIe once as a fill would. `ssd`: the replay's
  drive bytes per GPU (`rank_drive_read_bytes`, `rank_drive_write_bytes`) where it
  counts them, else every miss read from the drives and every eviction written there
  (an upper bound: SSD TBE's L2 in host DRAM serves some).
- `uvm`: every lookup read over PCIe, the rows the batch updates (its update rows, or its
  lookups where the replay did not count them) read and written back.
- pooled outputs: per shard the batch's samples x the shard's columns (a data-parallel
  table's local batch), as TorchRec's sharded lookups write them.
- the input copy: the local batch's ids (the trace's lookups per batch / GPUs x
  `cluster.index_bytes`) and one length per (table, local sample) (`cluster.length_bytes`).
- input, forward and backward all-to-all: the replay's `all_to_all_s` (the slowest GPU's)
  split in proportion to the phases' bytes (ASSUMPTION: one bandwidth and latency for the
  three phases).
- dense: `[compute]` per GPU (`seconds_per_batch`, or `flops_per_sample` x the local batch
  / `flops_per_s`); its `optimizer_fraction` counted in the backward; the rest split 1 : 2
  between forward and backward (`replay.engine.step_model`). `other_seconds_per_batch` as
  given.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from replay.engine.cluster_time import local_batch
from replay.engine.step_model import (
    BACKWARD_TO_FORWARD_FLOPS,
    GpuLoad,
    KernelLoad,
    constants_from_system,
    locked_inserts,
    step_document,
)

BASIS = (
    "per GPU: the steady span's lookups, hits and misses (the cluster replay, means over its "
    "second half) as TBE work by kernel (TorchRec's estimator's HBM bytes, backward 2×; UVM "
    "and cache fills over PCIe; drives), the input copy, TorchRec's collectives by phase, "
    "[compute] and the all-reduce, overlapped as compute.pipeline's TorchRec class runs its "
    "streams (replay.engine.step_model); the step is the slowest GPU's"
)


def system_kernel(system: Any) -> str:
    """The kernel a system's placement amounts to (module docstring)."""
    policy = system.policy
    if policy.name == "ssd-tbe":
        return "ssd"
    tiers = {t.name: t for t in system.tiers}
    if policy.name == "static":
        tier = tiers.get(policy.tier) or system.tiers[0]
        return "hbm" if getattr(tier, "on_device", False) else "uvm"
    return "uvm-caching"


def _per_rank(placement: Any, batch_size: int, b_local: int, default: str) -> list[dict]:
    """Per GPU in one pass over the shards (`Placement.rank_shards` is a scan a call):
    its pooled outputs (`bags`, `values`), rows, row bytes and rows of each kernel."""
    out: list[dict] = [
        {"bags": 0.0, "values": 0.0, "rows": 0.0, "row_bytes": 0.0, "kernels": {}, "slots": 0.0}
        for _ in range(placement.world)
    ]
    for s in placement.shards:
        entry = placement.entry(s.table)
        g = out[s.rank]
        samples = b_local if entry.type == "data-parallel" else batch_size
        g["bags"] += samples
        g["values"] += samples * s.cols
        g["rows"] += s.rows
        g["row_bytes"] += s.rows * placement.row_bytes[s.table]
        kernel = getattr(entry, "kernel", None) or default
        g["kernels"][kernel] = g["kernels"].get(kernel, 0) + s.rows
        clf = getattr(entry, "cache_load_factor", None)
        if kernel == "uvm-caching" and clf:
            g["slots"] += math.ceil(clf * s.rows)  # FBGEMM's cache: ceil(clf x rows)
    for g in out:
        g["kernels"] = dict(sorted(g["kernels"].items()))
    return out


def _second_half(values: Any) -> np.ndarray:
    a = np.asarray(values, dtype=np.float64)
    n = a.shape[0]
    return a[n // 2 :] if n > 1 else a


def _mean(columns: dict[str, Any], name: str, default: float = 0.0) -> float:
    if name not in columns:
        return default
    half = _second_half(columns[name])
    return float(half.mean()) if half.size else default


def _rank_means(columns: dict[str, Any], name: str, world: int) -> np.ndarray | None:
    if columns.get(name) is None:
        return None
    half = _second_half(columns[name])
    return half.mean(axis=0) if half.size else np.zeros(world)


def dense_seconds(system: Any, batch_size: int, world: int) -> tuple[float, float]:
    """(forward, backward with the optimizer) seconds of `[compute]` on one GPU."""
    comp = system.compute
    if comp.flops_per_sample > 0:
        total = comp.flops_per_sample * local_batch(batch_size, world) / comp.flops_per_s
    else:
        total = float(comp.seconds_per_batch)
    optimizer = total * comp.optimizer_fraction
    forward = (total - optimizer) / (1.0 + BACKWARD_TO_FORWARD_FLOPS)
    return forward, total - forward


def gpu_loads(
    columns: dict[str, Any], system: Any, placement: Any, batch_size: int
) -> list[GpuLoad]:
    """Every GPU's `GpuLoad` from a cluster replay's columns (module docstring)."""
    world = placement.world
    cluster = system.cluster
    lookups = _rank_means(columns, "rank_lookups", world)
    lookups = np.zeros(world) if lookups is None else lookups
    hits = _rank_means(columns, "rank_hits", world)
    hits = np.zeros(world) if hits is None else hits
    misses = _rank_means(columns, "rank_misses", world)
    misses = np.maximum(lookups - hits, 0.0) if misses is None else misses
    updates = _rank_means(columns, "rank_updates", world)
    drive_read = _rank_means(columns, "rank_drive_read_bytes", world)
    drive_write = _rank_means(columns, "rank_drive_write_bytes", world)
    a2a = _mean(columns, "all_to_all_s")
    phase = {p: _mean(columns, f"all_to_all_{p}_bytes") for p in ("input", "forward", "backward")}
    total = sum(phase.values())
    share = {
        p: (v / total if total > 0 else (0.0 if p == "input" else 0.5)) for p, v in phase.items()
    }
    allreduce = _mean(columns, "allreduce_s")
    fwd, bwd = dense_seconds(system, batch_size, world)
    other = float(system.compute.other_seconds_per_batch)
    b_local = local_batch(batch_size, world)
    trace_lookups = _mean(columns, "lookups")
    tables = len(placement.tables)
    copy = trace_lookups / max(world, 1) * cluster.index_bytes
    copy += tables * b_local * cluster.length_bytes
    default = system_kernel(system)
    locked = str(getattr(system.compute, "pipeline", "sparse-dist")) == "prefetch-sparse-dist"
    out = []
    for r, g in enumerate(_per_rank(placement, batch_size, b_local, default)):
        bags, values = g["bags"], g["values"]
        mean_row = g["row_bytes"] / g["rows"] if g["rows"] else 0.0
        kinds = g["kernels"]
        kernel = max(kinds, key=lambda k: kinds[k]) if kinds else default
        n = float(lookups[r])
        miss = float(misses[r])
        kw: dict[str, Any] = {}
        if kernel == "uvm":
            kw = {"host_lookups": n, "host_rows": float(updates[r]) if updates is not None else n}
        elif kernel in ("uvm-caching", "ssd"):
            kw = {"fetched_rows": miss, "evicted_rows": miss}
            slots = g["slots"] or float(system.policy.capacity_rows)
            if kernel == "uvm-caching" and locked and updates is not None and slots > 0:
                # the prefetch pipeline's locked rows leave some misses in host memory
                uniq = max(float(updates[r]), miss)
                got = locked_inserts(uniq, miss, slots)
                left = miss - got
                kw = {"fetched_rows": got, "evicted_rows": got, "host_rows": left,
                      "host_lookups": left * n / uniq if uniq > 0 else 0.0}  # fmt: skip
            if kernel == "ssd":
                kw |= {"drive_read_rows": miss, "drive_write_rows": miss}
                if drive_read is not None and drive_write is not None and mean_row > 0:
                    # the replay's own drive bytes (ssd-tbe's L2 and store), where counted
                    kw |= {"drive_read_rows": float(drive_read[r]) / mean_row,
                           "drive_write_rows": float(drive_write[r]) / mean_row}  # fmt: skip
        load = KernelLoad(kernel, n, bags, values / bags if bags else 0.0, mean_row, **kw)
        out.append(
            GpuLoad(
                kernels=(load,),
                input_copy_bytes=copy,
                input_dist_s=a2a * share["input"],
                output_dist_forward_s=a2a * share["forward"],
                output_dist_backward_s=a2a * share["backward"],
                dense_forward_s=fwd,
                dense_backward_s=bwd,
                allreduce_s=allreduce,
                other_s=other,
                extra={"kernel": kernel, "kernel_rows": kinds, "node": placement.node_of(r)},
            )
        )
    return out


def source_batch_size(source: Any) -> int:
    """A trace's or workload's global batch size (its manifest's, else its workload's)."""
    manifest = getattr(source, "manifest", {}) or {}
    workload = getattr(source, "workload", {}) or {}
    return int(manifest.get("batch_size", workload.get("batch_size", 0)))


def cluster_step(
    columns: dict[str, Any], system: Any, placement: Any, batch_size: int
) -> dict[str, Any]:
    """plan.json's `cluster.step` (`replay.engine.step_model.step_document`), each GPU's
    kernel beside its parts."""
    loads = gpu_loads(columns, system, placement, batch_size)
    pipeline = str(getattr(system.compute, "pipeline", "sparse-dist"))
    doc = step_document(loads, constants_from_system(system), pipeline, BASIS)
    for entry, load in zip(doc["per_gpu"], loads, strict=True):
        entry.update(load.extra)
    return doc


__all__ = [
    "BASIS",
    "cluster_step",
    "dense_seconds",
    "gpu_loads",
    "source_batch_size",
    "system_kernel",
]
