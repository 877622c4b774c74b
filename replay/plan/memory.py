"""plan.json's `memory`: what each GPU holds, part by part, its peaks allocated and
reserved against its capacity, and each node's host and drive bytes
(`replay.system.gpu_memory`, where every part's source is cited); and the workload's
`[update] rule` carried into the plan's systems (`replay.system.optimizer`).

A cluster's GPUs hold their shards as the placement gives them, each with its table's
kernel (sharding.json's `kernel` and `cache_load_factor`; `cluster.kernel` when the file
says none; `hbm` otherwise). The batch each GPU sees per step:

- raw: its local batch (ceil(B / W) samples) of every feature: ids = local batch x the
  table's pooling, one length per sample and feature;
- distributed: what the input all-to-all delivers to its shards. A table-wise or
  column-wise shard gets the table's ids of the global batch (TorchRec sends a column
  shard every id of its table); a row-wise or table-row-wise shard its rows' share of
  them (ids spread over rows in proportion: the even blocks of hashed ids); lengths, one
  per sample of the global batch and shard (row-wise bucketizes the lengths of every
  sample); a data-parallel table its local batch's;
- pooled: the TBE output it sends (the batch each shard serves x its columns: the global
  batch for model-parallel shards, the partial sums of row-wise ones) and the local batch
  x every table's dim it receives.

One GPU holds every table. Its kernel follows the system: FBGEMM's TBE cache (policy `tbe`
with a load factor) is `uvm-caching`, `ssd-tbe` is `ssd`, `static` is `hbm` in an `hbm`
tier and `uvm` elsewhere; under another cache policy the tables stay whole in HBM when
their weights and optimizer state fit the GPU ("no cache needed") and otherwise live in
host memory under FBGEMM's UVM cache of the plan's budget (load factor = budget / the
tables' bytes).
It has no input or output all-to-all: the pooled output is one of the dense model's
activations (given).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from replay._units import format_bytes
from replay.errors import ConfigError
from replay.system.gpu_memory import (
    BatchShape,
    GpuMemory,
    ShardMemory,
    cluster_memory,
    dense_bytes,
    dense_fits,
    gpu_memory,
    node_totals,
)
from replay.system.gpu_memory import memory_settings as _settings
from replay.system.gpu_memory import table_pooling as _pooling
from replay.system.optimizer import combine, optimizer_bytes_per_row, workload_rule


def rule_sets(workload: dict[str, Any] | None, systems: Sequence[Any]) -> tuple[str, ...]:
    """The `--set` that carries a stateful `[update] rule` into every system the plan
    resolves (none for `sgd`: the plan as before); a system naming another stateful
    optimizer is refused (`replay.system.optimizer.combine`)."""
    rule = workload_rule(workload)
    if rule == "sgd":
        return ()
    for system in systems:
        combine(system.model.optimizer, rule, f"{system.name}: model.optimizer")
    return (f"model.optimizer={rule}",)


def one_gpu_kernel(
    system: Any, table_bytes: float = 0.0, budget_bytes: float = 0.0
) -> tuple[str, float, int]:
    """(kernel, load factor, L2 bytes) of every table on one GPU (module docstring):
    `table_bytes` the tables' weights and optimizer state, `budget_bytes` the plan's cache."""
    policy = system.policy
    if policy.name == "ssd-tbe":
        return "ssd", policy.cache_load_factor, int(policy.l2_capacity_bytes)
    if policy.name == "tbe" and 0 < policy.cache_load_factor < 1:
        return "uvm-caching", policy.cache_load_factor, 0
    if policy.name == "static":
        return ("hbm" if policy.tier == "hbm" else "uvm"), 0.0, 0
    if table_bytes > one_gpu_capacity(system) and budget_bytes > 0:
        # a cache over host memory, of the plan's budget: the tables do not fit in HBM
        return "uvm-caching", min(budget_bytes / table_bytes, 0.999), 0
    return "hbm", 0.0, 0  # fits in HBM: no cache needed


def one_gpu_capacity(system: Any) -> float:
    """One GPU's memory: its `hbm` tier, else its first tier."""
    for tier in system.tiers:
        if tier.name == "hbm":
            return float(tier.capacity_bytes)
    return float(system.tiers[0].capacity_bytes)


def one_gpu_memory(
    system: Any,
    workload: dict[str, Any] | None,
    rows: Sequence[int],
    dim: int,
    batch: int,
    budget_bytes: float = 0.0,
) -> GpuMemory:
    """One GPU holding every table (module docstring)."""
    kernel, clf, l2 = one_gpu_kernel(system, _table_bytes(system, rows, dim), budget_bytes)
    names = [str(t.get("name", i)) for i, t in enumerate((workload or {}).get("tables") or [])]
    shards = [
        ShardMemory(
            table=names[t] if t < len(names) else str(t),
            rows=int(r), dim=dim, kernel=kernel, cache_load_factor=clf, l2_bytes=l2,
        )
        for t, r in enumerate(rows)
    ]  # fmt: skip
    pooling = _pooling(workload, len(rows))
    ids = batch * sum(pooling)
    cached = ids if kernel in ("uvm-caching", "ssd") else 0
    shape = BatchShape(
        raw_ids=ids, raw_lengths=batch * len(rows), dist_ids=0, dist_lengths=0,
        pooled_sent_values=0, pooled_received_values=0, cached_ids=cached,
    )  # fmt: skip
    return gpu_memory(0, shards, shape, _settings(system, one_gpu_capacity(system), False))


def memory_block(gpus: Sequence[GpuMemory], gpus_per_node: int, basis: str) -> dict[str, Any]:
    """plan.json's `memory` from every GPU's memory."""
    per_gpu = []
    for g in gpus:
        entry: dict[str, Any] = {
            "rank": g.rank,
            "allocated_peak_bytes": int(g.allocated_peak_bytes),
            "reserved_peak_bytes": int(g.reserved_peak_bytes),
            "capacity_bytes": int(g.capacity_bytes),
            "fits": bool(g.fits),
            "over_bytes": int(g.over_bytes),
            "parts": {k: int(v) for k, v in g.parts.items()},
            "kernels": dict(sorted(g.kernels.items())),
        }
        if not g.fits:
            entry["cut"] = g.largest_part()
        per_gpu.append(entry)
    worst = max(gpus, key=lambda g: (g.reserved_peak_bytes - g.capacity_bytes, -g.rank))
    return {
        "per_gpu": per_gpu,
        "per_node": node_totals(gpus, gpus_per_node),
        "worst_rank": int(worst.rank),
        "fits": all(g.fits for g in gpus),
        "basis": basis,
    }


def basis_text(system: Any, gpus: Sequence[GpuMemory], lead: str = "Per GPU") -> str:
    """How the figures were made, in words."""
    parts = [
        f"{lead} as FBGEMM and TorchRec allocate it (replay.system.gpu_memory): "
        f"optimizer {system.model.optimizer}, pipeline {system.compute.pipeline}",
        "reserved = allocated + the caching allocator's slack (ASSUMPTION, fitted to "
        "TorchRec's EMO benchmark: docs/memory.md)",
    ]
    if system.compute.activations_bytes <= 0:
        parts.append("activations not given (compute.activations_bytes): the peaks are low")
    if system.model.dense_params <= 0:
        parts.append("no dense model given (model.dense_params)")
    return "; ".join(parts)


def with_sets(request: Any, extra: Sequence[str]) -> Any:
    """`request` with `extra` --sets appended (the same object when there are none)."""
    if not extra:
        return request
    return dataclasses.replace(request, sets=(*request.sets, *extra))


def cluster_block(system: Any, workload: dict[str, Any] | None, placement: Any, batch: int) -> dict:
    """plan.json's `memory` for a placed cluster."""
    gpus = cluster_memory(system, workload, placement, batch)
    block = memory_block(gpus, placement.gpus_per_node, basis_text(system, gpus))
    c = system.cluster
    drives = int(c.drives_per_node * c.drive_capacity_bytes)
    for node in block["per_node"]:  # the node's drives against what its ssd shards store
        node["drive_capacity_bytes"] = drives
        node["drive_fits"] = node["drive_bytes"] <= drives
    return block


def _table_bytes(system: Any, rows: Sequence[int], dim: int) -> float:
    per_row = 4 * dim + optimizer_bytes_per_row(system.model.optimizer, dim)
    return float(sum(int(r) for r in rows)) * per_row


def one_gpu_block(
    system: Any, workload: dict[str, Any] | None, rows: Sequence[int], budget_bytes: float = 0.0
) -> dict:
    """plan.json's `memory` for one GPU holding every table (`budget_bytes`: the plan's
    cache budget, the cache of tables that do not fit in HBM)."""
    workload = dict(workload or {})
    dim = int(system.model.embedding_dim or workload.get("embedding_dim") or 0)
    batch = int(workload.get("batch_size") or 0)
    gpu = one_gpu_memory(system, workload, rows, dim, batch, budget_bytes)
    kernel, clf, _ = one_gpu_kernel(system, _table_bytes(system, rows, dim), budget_bytes)
    how = {
        "hbm": "every table whole in HBM (they fit: no cache needed)",
        "uvm-caching": f"every table in host memory under FBGEMM's UVM cache at load factor "
        f"{clf:.3g}",
        "uvm": "every table in host memory without a cache",
        "ssd": "every table on the drives under an L1 cache in HBM (kernel ssd)",
    }[kernel]
    return memory_block([gpu], 1, basis_text(system, [gpu], f"One GPU, {how}; its memory"))


def check_dense(system: Any) -> None:
    """ConfigError when the dense model alone (parameters, gradients, optimizer state)
    is larger than one GPU's memory: no placement of the tables can fit it."""
    capacity = (
        system.cluster.gpu_memory_bytes if system.cluster is not None else one_gpu_capacity(system)
    )
    settings = _settings(system, capacity, data_parallel=system.cluster is not None)
    if not dense_fits(settings):
        raise ConfigError(
            f"{system.name}: model.dense_params = {system.model.dense_params:,} takes "
            f"{format_bytes(dense_bytes(settings))} with its gradients and "
            f"{system.model.optimizer} state, more than one GPU's "
            f"{format_bytes(capacity)}; no placement of the tables fits it"
        )


def rule_request(
    request: Any, workload: dict[str, Any] | None, base: Any, resolved: Sequence[Any] = ()
) -> tuple[Any, Any]:
    """(request, base) with a stateful `[update] rule` carried into every system the plan
    resolves (`rule_sets`; the same objects for `sgd`), and the workload's own dense model
    where every system keeps the presets' (`replay.system.dense.dense_sets`); a dense
    model larger than a GPU refused before any work (`check_dense`). `resolved`: the
    request's systems already resolved with its sets (the plan resolves each once)."""
    from replay.engine.systems import resolve_system
    from replay.system.dense import dense_sets

    systems = list(resolved) or [
        resolve_system(name, list(request.sets)) for name in request.systems
    ]
    extra = [*rule_sets(workload, systems), *dense_sets(workload, systems)]
    if extra:
        request = with_sets(request, extra)
        # another spec: the first system with the rule's and the model's sets
        base = resolve_system(request.systems[0], list(request.sets))
    check_dense(base)
    return request, base


__all__ = [
    "basis_text",
    "check_dense",
    "cluster_block",
    "cluster_memory",
    "memory_block",
    "one_gpu_block",
    "one_gpu_memory",
    "rule_request",
    "rule_sets",
    "with_sets",
]
