"""A cluster system's placement: which GPU holds which rows, from the system's `[cluster]`.

Placement. Between the sharding plans as data (`replay/system/sharding.py`), the sharder
(`replay/engine/sharder.py`) and what consumes a placement (the cluster replay
`replay/engine/cluster.py`, `replay run`, `replay plan`): one function turns a system and
the tables of a source into the `Placement` every consumer uses, so a run and a plan of
the same system shard the same way. Pure: no files written.

Where the plan comes from, in order:

1. `cluster.sharding_file`: a user's plan, ours or TorchRec's in its JSON form
   (`replay.system.torchrec_plan.read_sharding_file`), checked against the tables and
   the cluster (`resolve_plan`: missing tables, ranks outside the cluster, overlaps,
   uncovered rows, a shard over a GPU's memory, a world size or a table's shape that
   disagrees are one-line errors);
2. `cluster.sharding` a type: every table that way (`uniform_plan`);
3. `cluster.sharding = "auto"` (or `"auto-uneven"`): the automatic sharder over the
   tables' measured loads:
   lookups per batch of each table and how they fall on its rows (a `RowMass`,
   `replay.workload.row_mass`), counted over the source's first `LOAD_BATCHES` batches
   (`table_loads`: each table's most looked-up rows exactly, the rest per 1 / 4,096 of
   its rows), or the caller's own, e.g. a workload spec's (`spec_loads`: pooling x batch
   size lookups, the generator's pmf over the rows).

The sharder's cost model (`system_cost_model`, issue 41): a lookup is the unit, and a
replica costs every GPU ``replica_byte`` units per byte it sends in the ring all-reduce
of the replicas' gradients, ``replica_byte = seconds per all-reduced byte / seconds per
lookup``:

- seconds per all-reduced byte (`allreduce_byte_seconds`): 1 / the slowest link the
  ring crosses, as `replay.engine.cluster.allreduce_model` times it: a GPU's NVLink in
  one node, its share of the node's NICs across nodes (`ClusterSpec`);
- seconds per lookup: its cache hit on the system's GPU (`seconds_per_hit`: `account`
  over lookups that all hit -- for hbm-lru 512 B from H100 HBM, 0.18 ns; ASSUMPTION:
  every lookup hits, the cheapest lookup), plus what it adds to the busiest GPU's
  all-to-all (`all_to_all_seconds_per_lookup`: its bag's pooled embedding out and its
  gradient back, to a sample owner uniformly on any GPU, over the NICs or NVLink as the
  cluster replay times them -- 18 ns at 64 H100s; ASSUMPTION: the busiest GPU's
  all-to-all is set by what it sends). On criteo-terabyte's 64-GPU plan the all-to-all
  is 28-35 us a step and the lookups' HBM time ~11 us, so a lookup's network part is
  what the imbalance costs. `all_to_all=False` prices the hit alone (the plan then
  replicates nothing at 64 GPUs: imbalance 1.45 measured against 1.22, same step time).

`auto` is the sharder's TorchRec-executable mode (`auto_shard(torchrec_executable=True)`:
even row blocks over every rank or all GPUs of a node, in order), the default of
`replay run` and `replay plan` on a cluster: a plan is what users take to TorchRec
(`replay export torchrec-plan`), and one TorchRec cannot execute as planned would read
the wrong rows there, silently. `auto-uneven` is the mode of uneven blocks of equal
lookup mass on any GPUs, better balanced, which only `replay` can replay: its
`sharding.json` says `torchrec_executable: false` and why, and the export refuses it.

Memory of the counting: the first batches' keys, 8 B a lookup (twice while sorting).

Memory: a shard's bytes are its rows x (values + optimizer state) (`row_state_bytes`).
Each table's kernel (`replay.engine.kernels`): where the tables fit the GPUs' HBM and
`cluster.kernel` is `auto`, every table is `hbm` and each shard is checked whole against
`cluster.gpu_memory_bytes`, as before kernels existed (a cached system's cache then
replays in front of rows that live in HBM). Otherwise `choose_kernels` (or the sharding
file's own kernels) decides which tables leave HBM; the sharder then fits and balances
each table's HBM bytes (its cache's, none for `uvm`) and its expected misses, and
`check_budgets` checks each GPU's HBM and each node's host memory and drives (one-line
errors). The placement's `row_bytes` stay the whole rows' (checkpoints read them).

One budget for the tables: a GPU does not give its tables its whole memory. It also holds
the batches' ids in flight, the all-to-all buffers, the TBE backward's workspace, the dense
model with its gradients and optimizer state, the activations and the caching allocator's
slack (`replay.system.gpu_memory`, each part from FBGEMM's or TorchRec's source). The
kernels' choice and the sharder both get each GPU's memory less those parts
(`first_budget`: the batch's ids spread evenly), and every GPU of the placement is then
counted exactly as plan.json's `memory` counts it (`cluster_memory`); while one is over its
capacity (its ids or pooled columns above the even share) the budget shrinks by the worst
excess and the tables are placed again, so no accepted placement has a GPU that
`memory.per_gpu[].fits` refuses. A given placement (a sharding file, or a type with every
table in HBM) that does not fit is one line naming the GPU and its largest part.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from replay._units import format_bytes
from replay.engine.kernels import (
    KernelChoice,
    check_budgets,
    check_plan_kernels,
    choose_kernels,
    with_kernels,
)
from replay.engine.shard_cost import STEP_SLACK, bytes_floor_at_step
from replay.engine.sharder import CostModel, TableLoad, auto_shard, rank_costs
from replay.errors import ConfigError
from replay.system.gpu_memory import (
    GpuMemory,
    cluster_memory,
    table_budget_bytes,
    table_pooling,
)
from replay.system.sharding import (
    DATA_PARALLEL,
    Placement,
    ShardingPlan,
    resolve_plan,
    table_shapes,
    uniform_plan,
)
from replay.system.spec import (
    BYTES_PER_VALUE,
    SystemSpec,
    embedding_dim,
    optimizer_bytes_per_row,
)
from replay.system.torchrec_plan import read_sharding_file
from replay.trace.keys import table_offsets
from replay.workload.row_mass import RowMass, spec_mass

LOAD_BATCHES = 64  # batches counted for the sharder's loads when the caller gives none
AUTO = ("auto", "auto-uneven")  # the sharder: TorchRec-executable, or uneven blocks
ALL_TO_ALL_IN_LOOKUP = True  # a lookup's price includes its pooled embedding's all-to-all


@dataclass(frozen=True, eq=False)
class PlacementResult:
    """A resolved placement, the loads it was balanced for, and how it was chosen."""

    placement: Placement
    loads: tuple[TableLoad, ...]
    basis: dict[str, Any]
    # each table's kernel and why (`replay.engine.kernels`; None: a sharding file's own)
    kernels: KernelChoice | None = None
    budgets: dict[str, Any] | None = None  # HBM, host and drive bytes per GPU and node

    @property
    def plan(self) -> ShardingPlan:
        return self.placement.plan


def row_state_bytes(system: SystemSpec, dim: int) -> int:
    """One row's values and optimizer state (what a shard holds per row)."""
    return BYTES_PER_VALUE * dim + optimizer_bytes_per_row(system.model.optimizer, dim)


def table_loads(
    source: Any, system: SystemSpec, *, batches: int = LOAD_BATCHES
) -> tuple[TableLoad, ...]:
    """Each table's lookups per batch, counted over the source's first `batches` batches
    (every batch of a shorter source), and how they fall on its rows
    (`RowMass.from_lookups`: its most looked-up rows exactly, the rest per 1 / 4,096 of
    the table); bags per batch = the batch size (one pooled embedding per sample and
    table)."""
    from replay.trace.stream import iter_batch_ranges

    names = [str(n) for n in source.table_names]
    rows = np.asarray(source.table_rows, dtype=np.int64)
    workload = dict(source.workload or {})
    dim = embedding_dim(system, workload)
    state = row_state_bytes(system, dim)
    offsets = table_offsets(rows)
    parts: list[np.ndarray] = []
    seen = 0
    want = max(1, min(int(batches), int(source.num_batches)))
    for br in iter_batch_ranges(source, with_updates=False):
        take = min(br.batches, want - seen)
        parts.append(np.asarray(br.keys[: int(br.bounds[take])], dtype=np.int64))
        seen += take
        if seen >= want:
            break
    keys = np.sort(np.concatenate(parts) if parts else np.empty(0, np.int64), kind="stable")
    cuts = np.searchsorted(keys, offsets)  # keys sorted: each table's keys contiguous
    counts = np.diff(cuts)
    per_batch = counts / max(seen, 1)
    batch = int(source.manifest.get("batch_size", workload.get("batch_size", 0)) or 0)
    return tuple(
        TableLoad(
            name=n,
            rows=int(r),
            dim=dim,
            lookups=float(lk),
            bags=float(min(batch, lk)) if batch > 0 else None,
            row_bytes=state,
            mass=RowMass.from_lookups(keys[cuts[t] : cuts[t + 1]] - offsets[t], int(r))
            if counts[t] > 0
            else None,
        )
        for t, (n, r, lk) in enumerate(zip(names, rows.tolist(), per_batch.tolist(), strict=True))
    )


def spec_loads(spec: Any, system: SystemSpec) -> tuple[TableLoad, ...]:
    """A workload spec's loads without reading it: pooling x batch size lookups per batch
    and table (what the generator draws), one bag per sample, and how they fall on the
    rows from the generator's own pmf and row permutation (`spec_mass`; None, i.e.
    uniform, for a table with drift or a Zipf-Mandelbrot offset). The tables' pmfs on
    the cores side by side (their kernel releases the GIL: meta-2021's 164 of ~3.5 ms
    each)."""
    from replay._machine import usable_cores
    from replay._threads import worker_pool

    dim = system.model.embedding_dim or int(spec.embedding_dim)
    state = row_state_bytes(system, dim)
    with worker_pool(max(1, min(usable_cores(), len(spec.tables))), "spec-loads") as pool:
        masses = list(pool.map(lambda i: spec_mass(spec, i), range(len(spec.tables))))
    return tuple(
        TableLoad(
            name=t.name,
            rows=int(t.rows),
            dim=dim,
            lookups=float(spec.batch_size * t.pooling),
            bags=float(spec.batch_size),
            row_bytes=state,
            mass=masses[i],
        )
        for i, t in enumerate(spec.tables)
    )


def seconds_per_lookup(system: SystemSpec, dim: int, *, miss: bool = False) -> float:
    """One lookup's embedding time on `system`'s GPU, as the one-GPU account prices a
    hit: `account.account` over 2^20 lookups that all hit (the fast tier's row read --
    ceil(4 x dim / access_bytes) access bytes over its read bandwidth plus its latency
    over its parallelism -- for a cache; the home tier's, and its link's, for `static`),
    per lookup. ASSUMPTION: every lookup hits, no update counted: the cheapest lookup,
    so the case where replicating a hot table removes the least time. With `miss`, a
    lookup that misses and fills its row (the backing tier's read over the link), the
    price of a cached table's misses."""
    from replay.engine.account import Shape, account
    from replay.policies.base import FILLS, HITS, MISSES, NUM_COUNTERS

    n = 1 << 20
    counters = np.zeros((1, NUM_COUNTERS), dtype=np.int64)
    if miss:
        counters[0, MISSES] = counters[0, FILLS] = n
    else:
        counters[0, HITS] = n
    one = np.array([n], dtype=np.int64)
    zero = np.zeros(1, dtype=np.int64)
    cols = account(system, Shape(n, 1, dim), counters, one, zero, zero, 1)
    return float(cols["time_embedding_s"][0]) / n


def allreduce_byte_seconds(system: SystemSpec, nodes: int, gpus_per_node: int) -> float:
    """Seconds per byte a rank sends in the ring all-reduce: 1 / the slowest link the
    ring crosses, as `replay.engine.cluster.allreduce_model` times it: one GPU's NVLink
    (`intra_node_bw_bytes_per_s`) in one node; across nodes a GPU's share of its node's
    NICs (``nics_per_node x nic_bw / gpus_per_node``). Latency is not per byte: the
    dense gradient is all-reduced every step anyway, so its 2 (W - 1) latencies are paid
    with or without replicas."""
    cluster = system.cluster
    assert cluster is not None
    if nodes > 1:
        bw = cluster.nics_per_node * cluster.nic_bw_bytes_per_s / gpus_per_node
        if bw <= 0:
            raise ConfigError("cluster: more than one node needs NICs (nics_per_node, nic_bw)")
    else:
        bw = cluster.intra_node_bw_bytes_per_s
    return 1.0 / bw


def all_to_all_seconds_per_lookup(
    system: SystemSpec, nodes: int, gpus_per_node: int, dim: int, bags_per_lookup: float
) -> float:
    """What one more lookup on the busiest GPU adds to the all-to-all, as
    `replay.engine.cluster` times it: its bag's pooled embedding (4 x dim B, per lookup
    `bags_per_lookup` of them) sent forward and its gradient back, to the sample's owner,
    uniformly any of the W GPUs: (W - G) / W of them over the GPU's share of its node's
    NICs, (G - 1) / W over NVLink, 1 / W nothing (the intra and inter parts add, as there).
    ASSUMPTION: the busiest GPU's all-to-all is set by what it sends (it holds more bags
    than its samples' share), so each extra lookup costs its bytes' time; latency is paid
    anyway."""
    cluster = system.cluster
    assert cluster is not None
    world = nodes * gpus_per_node
    if world <= 1:
        return 0.0
    vec = 2.0 * BYTES_PER_VALUE * dim * bags_per_lookup  # forward + backward
    seconds = vec * (gpus_per_node - 1) / world / cluster.intra_node_bw_bytes_per_s
    if nodes > 1:
        seconds += (
            vec
            * (world - gpus_per_node)
            / world
            * allreduce_byte_seconds(system, nodes, gpus_per_node)
        )
    return seconds


def system_cost_model(
    system: SystemSpec,
    nodes: int,
    gpus_per_node: int,
    dim: int,
    loads: tuple[TableLoad, ...] = (),
    *,
    all_to_all: bool = ALL_TO_ALL_IN_LOOKUP,
) -> tuple[CostModel, dict[str, float]]:
    """The sharder's cost model for `system` (module docstring): one unit per lookup,
    ``replica_byte = allreduce_byte_seconds / seconds_per_lookup`` lookups per byte a
    rank sends in the all-reduce of the replicas' gradients, a miss's extra time over a
    hit (`seconds_per_miss`) and what a split's collectives cost each GPU holding a
    block (`split_byte_seconds`), all in lookups; and those numbers."""
    hit_s = seconds_per_lookup(system, dim)
    lookups = sum(ld.lookups for ld in loads)
    bags = sum(ld.lookups if ld.bags is None else ld.bags for ld in loads)
    per = bags / lookups if lookups > 0 else 1.0
    a2a_s = (
        all_to_all_seconds_per_lookup(system, nodes, gpus_per_node, dim, per) if all_to_all else 0.0
    )
    lookup_s = hit_s + a2a_s
    byte_s = allreduce_byte_seconds(system, nodes, gpus_per_node)
    weight = byte_s / lookup_s if lookup_s > 0 else 0.0
    miss_s = max(seconds_per_lookup(system, dim, miss=True) - hit_s, 0.0)
    rw_s, twrw_s = split_byte_seconds(system, nodes, gpus_per_node)
    unit = 1.0 / lookup_s if lookup_s > 0 else 0.0
    model = CostModel(
        miss=miss_s * unit,
        replica_byte=weight,
        row_wise_byte=rw_s * unit,
        table_row_wise_byte=twrw_s * unit,
    )
    return model, {
        "seconds_per_hit": hit_s,
        "seconds_per_lookup_all_to_all": a2a_s,
        "seconds_per_lookup": lookup_s,
        "seconds_per_allreduce_byte": byte_s,
        "replica_byte": weight,
        "seconds_per_miss": miss_s,
        "seconds_per_row_wise_byte": rw_s,
        "seconds_per_table_row_wise_byte": twrw_s,
    }


def split_byte_seconds(system: SystemSpec, nodes: int, gpus_per_node: int) -> tuple[float, float]:
    """Seconds each GPU holding a block of a split table spends per byte of its [batch,
    dim] outputs, forward and backward (`replay.engine.shard_cost`; TorchRec's
    collectives as `replay.engine.collectives` times them, latencies left out):
    row-wise, the ring's reduce-scatter and all-gather, 2 (W - 1) / W over the slowest
    link the ring crosses; table-row-wise, the reduce-scatter in the node, 2 (G - 1) / G
    over NVLink, plus the all-to-all across nodes, 2 (N - 1) / W over the GPU's share of
    its node's NICs."""
    cluster = system.cluster
    assert cluster is not None
    world = nodes * gpus_per_node
    if world <= 1:
        return 0.0, 0.0
    rw = 2.0 * (world - 1) / world * allreduce_byte_seconds(system, nodes, gpus_per_node)
    g = gpus_per_node
    twrw = 2.0 * (g - 1) / g / cluster.intra_node_bw_bytes_per_s
    if nodes > 1:
        twrw += 2.0 * (nodes - 1) / world * allreduce_byte_seconds(system, nodes, g)
    return rw, twrw


BUDGET_TRIES = 4  # placements tried, each budget less the worst GPU's excess of the last
BUDGET_MARGIN = 0.005  # and this share of the budget more (a new placement moves the ids)
NO_ROOM_STEP = 0.1  # the budget's cut when the sharder finds no room for the kernels' pieces


class _NoRoom(ConfigError):
    """The sharder found no GPU with room for a piece of a mixed placement."""


def source_batch_size(source: Any) -> int:
    """A trace's or workload's global batch size (its manifest's, else its workload's)."""
    manifest = getattr(source, "manifest", {}) or {}
    workload = getattr(source, "workload", {}) or {}
    return int(manifest.get("batch_size", workload.get("batch_size", 0)) or 0)


def _memory_check(
    system: SystemSpec, source: Any, placement: Placement
) -> tuple[list[GpuMemory], int]:
    """Every GPU's memory as plan.json's `memory` counts it (`cluster_memory`, the
    source's workload and global batch) and the worst GPU's bytes over its capacity."""
    gpus = cluster_memory(system, dict(source.workload or {}), placement, source_batch_size(source))
    return gpus, max((g.over_bytes for g in gpus), default=0)


def first_budget(system: SystemSpec, source: Any, world: int) -> int:
    """The table budget before any placement: a GPU's memory less what it holds besides
    its tables with the batch's ids spread evenly (`table_budget_bytes`)."""
    workload = dict(source.workload or {})
    n = len(source.table_names)
    pooling = table_pooling(workload, n)
    dim = embedding_dim(system, workload)
    return table_budget_bytes(
        system, source_batch_size(source), sum(pooling), n, n * dim, world=world
    )


def _over_line(gpus: list[GpuMemory], budget: int) -> str:
    worst = max(gpus, key=lambda g: (g.over_bytes, -g.rank))
    tables = sum(worst.parts[k] for k in ("weights_bytes", "optimizer_bytes", "cache_bytes"))
    return (
        f"GPU {worst.rank} would reserve {format_bytes(worst.reserved_peak_bytes)}, more than "
        f"its {format_bytes(worst.capacity_bytes)} ({format_bytes(tables)} of tables and "
        f"caches, {format_bytes(worst.reserved_peak_bytes - tables)} besides them; the "
        f"largest part: {worst.largest_part()}; table budget {format_bytes(max(budget, 0))})"
    )


def resolve_placement(
    system: SystemSpec,
    source: Any,
    *,
    loads: tuple[TableLoad, ...] | None = None,
    sharding: str | None = None,
    nodes: int | None = None,
    gpus_per_node: int | None = None,
) -> PlacementResult:
    """The placement of `source`'s tables on `system`'s cluster (module docstring).
    `sharding`, `nodes`, `gpus_per_node` override the system's (a plan comparing
    shardings or cluster sizes); `loads` replace the counted ones.

    One table budget per GPU for the kernels and the sharder alike: its memory less what
    it holds besides the tables (`first_budget`); every GPU of the placement is then
    counted as plan.json's `memory` counts it (`cluster_memory`), and while one is over
    its capacity the budget shrinks by the worst excess and the tables are placed again
    (`BUDGET_TRIES` in all), so an accepted placement fits every GPU; else one line."""
    cluster = system.cluster
    if cluster is None:
        raise ConfigError("cluster: the system has no [cluster] (one GPU: nothing to place)")
    nodes = int(cluster.nodes if nodes is None else nodes)
    gpn = int(cluster.gpus_per_node if gpus_per_node is None else gpus_per_node)
    capacity = int(cluster.gpu_memory_bytes)
    budget = first_budget(system, source, nodes * gpn)
    first = budget
    counted = [loads]
    from_file = bool(cluster.sharding_file and sharding is None)
    kind = cluster.sharding if sharding is None else sharding
    # a smaller budget can change the placement: the sharder's, or the kernels' choice
    adjustable = not from_file and (kind in AUTO or cluster.kernel == "auto")
    if first <= 0 and not from_file:  # a file's own shards are checked as they are
        raise ConfigError(
            f"cluster: a GPU's {format_bytes(capacity)} leave nothing for the tables: "
            f"it holds {format_bytes(capacity - first)} besides them (inputs in flight, "
            "all-to-all buffers, the dense model, activations, the allocator's slack; "
            "docs/memory.md)"
        )
    gpus: list[GpuMemory] = []
    for attempt in range(BUDGET_TRIES):
        try:
            result = _place(system, source, counted, sharding, nodes, gpn, budget)
        except _NoRoom:
            if attempt == BUDGET_TRIES - 1:
                raise
            # the kernels filled the budgets too full for the sharder's pieces: leave
            # more of the tables out of HBM
            budget = int(budget * (1.0 - NO_ROOM_STEP))
            continue
        gpus, over = _memory_check(system, source, result.placement)
        if over <= 0:
            result.basis["table_budget_bytes"] = budget
            result.basis["table_budget_first_bytes"] = first
            result.basis["table_budget_tries"] = attempt + 1
            return result
        budget -= over + int(BUDGET_MARGIN * budget) + 1
        if not adjustable or budget <= 0:
            break
    where = cluster.sharding_file if from_file else "cluster"
    raise ConfigError(f"{where}: {_over_line(gpus, budget)}")


def _place(
    system: SystemSpec,
    source: Any,
    counted: list[tuple[TableLoad, ...] | None],
    sharding: str | None,
    nodes: int,
    gpn: int,
    memory: int,
) -> PlacementResult:
    """`resolve_placement` at one table budget (`memory` bytes per GPU); `counted[0]`
    the loads, counted here once when needed."""
    cluster = system.cluster
    assert cluster is not None
    loads = counted[0]
    names = [str(n) for n in source.table_names]
    rows = [int(r) for r in source.table_rows]
    dim = embedding_dim(system, dict(source.workload or {}))
    state = row_state_bytes(system, dim)
    shapes = table_shapes(names, rows, dim)
    kind = cluster.sharding if sharding is None else sharding
    from_file = bool(cluster.sharding_file and sharding is None)
    # the tables take more than the GPUs' table budgets, or a kernel is asked for: each
    # table's kernel from its loads (replay.engine.kernels); else every table whole in HBM
    offload = cluster.kernel != "auto" or sum(rows) * state > nodes * gpn * memory
    if loads is None and not from_file and (kind in AUTO or offload):
        loads = table_loads(source, system)  # the sharder's input (a uniform type needs none)
        counted[0] = loads
    choice = None
    if not from_file:
        assert loads is not None or not offload
        choice = choose_kernels(
            system, loads or (), nodes=nodes, gpus_per_node=gpn, hbm_bytes_per_gpu=memory
        )
        if not loads:  # every table in HBM, decided on bytes alone
            choice = None
    mixed = choice is not None and not choice.all_hbm
    basis: dict[str, Any] = {"nodes": nodes, "gpus_per_node": gpn, "world": nodes * gpn}
    if from_file:
        plan = read_sharding_file(cluster.sharding_file)
        said = any(e.kernel not in (None, "hbm") for e in plan.tables)
        placement = resolve_plan(
            plan, shapes, nodes=nodes, gpus_per_node=gpn,
            gpu_memory_bytes=None if said else int(cluster.gpu_memory_bytes), row_bytes=state,
            where=cluster.sharding_file,
        )  # fmt: skip
        mixed = said
        basis["sharding"] = "file"
        basis["sharding_file"] = cluster.sharding_file
    elif kind in AUTO:
        assert loads is not None
        model, prices = system_cost_model(system, nodes, gpn, dim, loads)
        shard_loads = loads
        if mixed:  # the sharder fits each table's HBM bytes and balances its misses too
            assert choice is not None
            per_row = choice.hbm_row_bytes(state)
            shard_loads = tuple(
                dataclasses.replace(ld, row_bytes=b, misses=ld.lookups * (1.0 - k.hit))
                for ld, b, k in zip(loads, per_row, choice.tables, strict=True)
            )
        try:
            result = auto_shard(
                shard_loads, nodes=nodes, gpus_per_node=gpn, gpu_memory_bytes=memory,
                model=model, torchrec_executable=kind == "auto",
            )  # fmt: skip
        except ConfigError as exc:
            if mixed:
                raise _NoRoom(str(exc)) from None
            raise
        placement = result.placement
        if mixed:  # the placement's bytes are the whole rows' (checkpoints read them)
            placement = resolve_plan(
                placement.plan, shapes, nodes=nodes, gpus_per_node=gpn,
                gpu_memory_bytes=None, row_bytes=state, where="auto sharding",
            )  # fmt: skip
        basis["sharding"] = kind
        basis["cost_model"] = (
            "a lookup (a cache hit on the system's GPU) is the unit; a replica costs every "
            "GPU replica_byte per byte it sends in the ring all-reduce of its gradient"
        )
        basis.update(prices)
        basis["modeled_allreduce_per_gpu"] = result.allreduce
        basis["replicas"] = [e.table for e in result.plan.tables if e.type == DATA_PARALLEL]
        basis["modeled_max_over_mean"] = result.max_over_mean
        basis["modeled_max_over_bound"] = result.max_over_bound
        basis["modeled_max_over_floor"] = result.max_over_floor
        basis["modeled_floor_over_mean"] = result.floor / result.mean if result.mean else 1.0
        basis["granularity"] = result.granularity
        # bytes beside the time: each GPU's HBM bytes against the bounds, and the fills
        # that trade one for the other (`ShardingResult.front`)
        basis["modeled_hbm_bytes_max"] = (
            float(result.rank_hbm.max()) if result.rank_hbm is not None else 0.0
        )
        basis["hbm_bytes_bound"] = result.bytes_bound
        basis["hbm_bytes_floor"] = result.bytes_floor
        # the floor the step permits: the least fullest GPU of any plan whose busiest GPU
        # is within STEP_SLACK of the time floor (shard_cost.bytes_floor_at_step)
        at_step = bytes_floor_at_step(
            shard_loads, model, nodes * gpn, gpn, (1.0 + STEP_SLACK) * result.floor,
            even=kind == "auto",
        )  # fmt: skip
        basis["hbm_bytes_floor_at_step"] = at_step if math.isfinite(at_step) else None
        basis["hbm_bytes_floor_step_slack"] = STEP_SLACK
        basis["tables_never_split"] = sum(ld.tiny for ld in shard_loads)
        unit = prices["seconds_per_lookup"]
        basis["tradeoff"] = [
            {"step_s": top * unit, "max_over_floor": top / result.floor if result.floor else 1.0,
             "hbm_bytes_max": float(held), "tables_split": int(k)}
            for top, held, k in result.front
        ]  # fmt: skip
    else:
        plan = uniform_plan(kind, shapes, nodes=nodes, gpus_per_node=gpn)
        placement = resolve_plan(
            plan, shapes, nodes=nodes, gpus_per_node=gpn,
            gpu_memory_bytes=None if mixed else int(cluster.gpu_memory_bytes), row_bytes=state,
            where=f"cluster.sharding={kind}",
        )  # fmt: skip
        basis["sharding"] = kind
    placement = with_kernels(placement, choice)
    budgets = None
    if mixed:  # each GPU's HBM, each node's host memory and drives under the kernels
        where = cluster.sharding_file if from_file else "cluster"
        check_plan_kernels(placement, system, where)
        budgets = check_budgets(placement, system, where)
        if choice is not None:
            basis["kernels"] = choice.line
    if loads is not None:
        costs = rank_costs(placement, loads, CostModel())
        mean = float(costs.mean()) if len(costs) else 0.0
        basis["modeled_imbalance"] = float(costs.max() / mean) if mean > 0 else 1.0
        # the busiest GPU's lookups and its splits' collectives under the system's
        # prices, in seconds (the sharder's step-time model), whatever the sharding
        step_model, step_prices = system_cost_model(system, nodes, gpn, dim, loads)
        step = rank_costs(placement, loads, step_model) * step_prices["seconds_per_lookup"]
        basis["modeled_step_s_max"] = float(step.max()) if len(step) else 0.0
        basis["modeled_step_imbalance"] = (
            float(step.max() / step.mean()) if step.mean() > 0 else 1.0
        )
        massed = sum(ld.mass is not None for ld in loads)
        basis["loads"] = (
            f"lookups per batch and table; their mass over the rows for {massed} of "
            f"{len(loads)} tables (the rest uniform)"
        )
    basis["torchrec_executable"] = placement.plan.torchrec_executable
    if not placement.plan.torchrec_executable:
        basis["torchrec_executable_reason"] = placement.plan.torchrec_executable_reason
    return PlacementResult(placement, tuple(loads or ()), basis, choice, budgets)


def shard_count(system: SystemSpec, names: list[str], rows: list[int], dim: int) -> int:
    """The shards holding rows of the placement `resolve_placement` would make, without
    the loads (`replay plan`'s memory estimate: TorchRec's statistics per shard): a
    sharding type's or a sharding file's, from the tables' shapes; the sharder's (`AUTO`)
    one a table, as it places most tables whole (meta-2021's day on 128 GPUs: none
    split), its splits uncounted."""
    cluster = system.cluster
    if cluster is None or (not cluster.sharding_file and cluster.sharding in AUTO):
        return len(rows)
    shapes = table_shapes(names, rows, dim)
    nodes, gpn = int(cluster.nodes), int(cluster.gpus_per_node)
    if cluster.sharding_file:
        plan = read_sharding_file(cluster.sharding_file)
        where = cluster.sharding_file
    else:
        plan = uniform_plan(cluster.sharding, shapes, nodes=nodes, gpus_per_node=gpn)
        where = f"cluster.sharding={cluster.sharding}"
    placement = resolve_plan(plan, shapes, nodes=nodes, gpus_per_node=gpn, where=where)
    return sum(1 for shard in placement.shards if shard.rows > 0)


__all__ = [
    "AUTO",
    "LOAD_BATCHES",
    "PlacementResult",
    "allreduce_byte_seconds",
    "embedding_dim",
    "first_budget",
    "resolve_placement",
    "row_state_bytes",
    "seconds_per_lookup",
    "shard_count",
    "source_batch_size",
    "spec_loads",
    "system_cost_model",
    "table_loads",
]
