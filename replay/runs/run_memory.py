"""What one replay holds, for `replay run`, `compare` and `sweep`'s memory estimate
(`replay._memory.run_estimate` adds it up and checks it against the machine), from the
classes that allocate it and the sizes the settings give, before anything is allocated.

Every setting that sizes a structure is in it:

- **per row** (R, the rows of the tables): the policy's and the checkpoint strategy's
  `state_bytes_per_key`, the distinct-row bitmaps (the LRU's order's one besides the
  statistics), the statistics' byte;
- **per cache slot**: a cache is allocated at most one slot per unit of its rows
  (`replay.policies.base.usable_units`: a larger one never evicts, and nor does one of
  exactly those rows), so a capacity beyond the rows costs nothing; its slots at the
  bytes each policy's constructor allocates (`_SLOT_BYTES`). FBGEMM's set-associative
  caches (`tbe`, `ssd-tbe`'s L1) are the exception: a row's set is its hash modulo the
  sets, so their ways are allocated as many as the capacity gives, 16 B each (a way's
  row and time; LFU: 8, and its 8 B count per row); ssd-tbe's L2 is an LRU of rows,
  at most R of them;
- **per lookup**: the oracles' next-use arrays; per lookup in flight, the LRU's two
  orders of each batch's distinct rows (`replay.trace.stream.DistinctOrder`, a key each);
- **per batch**: the run's per-batch columns (`RUN_BYTES_PER_BATCH`);
- **a cluster** (`[cluster]`, one cache per GPU, `replay.engine.cluster`): each GPU's
  cache is sized by the capacity per GPU and the rows on it, and each GPU holds state
  of its own whatever its rows: its policy object and its `summary.json` entry
  (`CLUSTER_BYTES_PER_GPU`), and per batch its columns (lookups, hits, misses, updates,
  times, the all-to-all's per-GPU bytes, `ranks.parquet`'s rows:
  `CLUSTER_BYTES_PER_GPU_BATCH`). The routing buffers and the accounting of a batch range
  are bounded by cutting ranges to at most `replay.engine.cluster.RANGE_CELLS` (batch,
  GPU) cells, `CLUSTER_BYTES_PER_RANGE_CELL` each. Before the placement is known the
  caches' slots are bounded by R + W (a slot on every GPU, one per row: `run_state`);
  once it is (`check_run_memory(placements=...)`), they are those of the rows each GPU
  holds, replicas and column blocks counted on every GPU that holds them. A mixed
  placement (some tables left HBM, `replay.engine.kernels`) gives each GPU one cache over
  its cached shards' rows alone, of sum ceil(load factor x rows) rows
  (`replay.engine.cluster.make_rank_policy`): those caches are sized so (`gpu_caches`).

Measured (peak RSS, `/usr/bin/time`, 2-core VM): `replay run --workload tiny --system
hbm-lru` on dgx-h100 nodes: 0.19 GiB on 8 GPUs (200 batches), 0.40 GiB on 2,048, 0.53 on
8,192; on 16,384 0.49 GiB at 50 batches and 0.86 at 400; on 65,536 0.86 GiB at 50:
~70 B a (batch, GPU), ~4.6 KB a GPU, and ~0.17 GiB for a range of 2^18 cells. The
figures below are those rounded up: the estimate's growth over 8 GPUs is 1.15-1.46
times the measured one at these points (`tests/test_sizes_before_alloc.py` checks
8,192 GPUs).
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Sequence
from typing import Any

from replay._memory import (
    IN_FLIGHT_BYTES_PER_LOOKUP,
    INSPECT_BYTES_PER_ROW,
    Estimate,
    RunState,
    check_fits,
    check_row_space,
    format_count,
    row_space,
    run_estimate,
)
from replay._units import format_bytes
from replay.engine.replay import counts_read_after_write, streams_pieces, workload_shape
from replay.policies import POLICIES
from replay.policies.base import usable_units
from replay.policies.lru import table_shape
from replay.system import cachelib
from replay.system.optimizer import with_workload_rule
from replay.system.spec import BYTES_PER_VALUE, SystemSpec, optimizer_bytes_per_row
from replay.trace.keys import key_dtype
from replay.workload.source import Source, is_generated

# Bytes per cache slot that each policy allocates beside its per-key map (the policies'
# constructors): lru slot_key 4-8 (its dirty flag in its sign since 53cd68e) + prev 4 +
# next 4, still counted as the 17 B it took with a dirty byte (an upper bound, so the
# estimates stay as they were); lfu slot_key, frequency,
# time 8 each + heap slot and position 4 each + dirty 1; belady slot_key 8 + heap
# priority 8 + heap slot and position 4 each + dirty 1; chunk heap priority and slot 8 each
# lru: <= 17 B per slot + its hash table, 4-8 entries of 8 B (replay.policies.lru)
_SLOT_BYTES = {"lru": 81, "lfu": 33, "belady": 25, "chunk": 16}
# FBGEMM's TBE (replay.policies.tbe): per way its row (int64) and, for LRU, its time step
_TBE_WAY_BYTES = {"lru": 16, "lfu": 8}
# ssd-tbe's L2 (replay.policies.ssd_tbe.L2Cache), per slot: its key (8), its two links (4 +
# 4 at most) and its dirty flag (1); its table's entries are counted apart (8 B each)
_L2_SLOT_BYTES = 17
# hot's selection of the hottest rows: per looked-up row, its flat id (8), its count and
# the partition's copy (4 + 4), two masks (2) and the selected ids (8), rounded up
_HOT_SELECT_BYTES = 32
# chunk, per chunk: position 4 + dirty 1 + stamp 4, and 8 for the next use while prepared
_CHUNK_BYTES = 17
# a cluster's per-GPU state (module docstring): each GPU's policy and summary entry, and
# its columns per batch
CLUSTER_BYTES_PER_GPU = 8192
# 96 measured before each GPU's traffic columns (`cluster_time.RANK_TRAFFIC`: HBM, PCIe,
# drive reads and writes, 8 B each per batch) were kept: 32 more
CLUSTER_BYTES_PER_GPU_BATCH = 128
# a (batch, GPU) cell of the range in hand: its counters, routed counts, all-to-all
# buffers and the accounting's ~50 columns and their temporaries
CLUSTER_BYTES_PER_RANGE_CELL = 768


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1


def _row_state(system: SystemSpec, source: Source) -> int:
    dim = workload_shape(source, system).embedding_dim
    optimizer = with_workload_rule(system, source.workload).model.optimizer  # as the run
    return BYTES_PER_VALUE * dim + optimizer_bytes_per_row(optimizer, dim)


def _even(total: int, gpus: int) -> list[int]:
    """`total` rows split as evenly as they go over `gpus`."""
    q, m = divmod(int(total), max(int(gpus), 1))
    return [q + 1] * m + [q] * (max(int(gpus), 1) - m)


def _range_cells(source: Source, gpus: int) -> int:
    """(batch, GPU) cells of the largest range the cluster replay holds: a row group's
    batches (`ROW_GROUP_TARGET_LOOKUPS` lookups, one batch at least), cut to
    `RANGE_CELLS` cells (`replay.trace.stream.split_ranges`)."""
    from replay.engine.cluster import RANGE_CELLS
    from replay.trace.format import ROW_GROUP_TARGET_LOOKUPS

    batches = max(int(source.num_batches), 1)
    per_batch = max(-(-int(source.num_lookups) // batches), 1)
    group = min(batches, max(ROW_GROUP_TARGET_LOOKUPS // per_batch, 1))
    return gpus * min(group, max(RANGE_CELLS // gpus, 1))


def cluster_gpu_bytes(source: Source, gpus: int) -> int:
    """What a cluster replay of `source` holds for its `gpus` GPUs besides their caches
    and per-row state: each GPU's policy and summary entry, its columns over the batches,
    and the range in hand (module docstring)."""
    return (
        gpus * CLUSTER_BYTES_PER_GPU
        + _range_cells(source, gpus) * CLUSTER_BYTES_PER_RANGE_CELL
        + gpus * max(int(source.num_batches), 0) * CLUSTER_BYTES_PER_GPU_BATCH
    )


def sharded(system: SystemSpec) -> bool:
    """Whether `system` replays one cache per GPU (`replay.engine.cluster`): a cluster,
    not PatrickStar's data-parallel chunks (`replay.engine.patrickstar_run`)."""
    if system.cluster is None:  # one GPU: the cluster's modules stay unimported
        return False
    from replay.engine.patrickstar_run import PATRICKSTAR_POLICY

    return system.policy.name != PATRICKSTAR_POLICY


def cache_bytes(
    system: SystemSpec,
    gpu_rows: Sequence[int],
    row_state: int,
    lookups: int | None = None,
    *,
    one_gpu: bool = False,
) -> tuple[int, str]:
    """(bytes, how) of the caches of `system`'s policy, one per entry of `gpu_rows` (the
    rows each cache sees: [R] for one GPU), as their constructors allocate them.
    `lookups`: the source's, which bound the L2 slots ssd-tbe ever fills and, for
    `one_gpu` (a one-GPU replay, whose policy knows its source's lookups), the slots
    every cache allocates (`PolicyContext.slots`)."""
    cls = POLICIES[system.policy.name]
    p = system.policy
    if not cls.cached:
        return 0, ""
    unit_rows = cls.unit_rows(p)
    total = sum(int(r) for r in gpu_rows)
    cap = cls.capacity(system, unit_rows, row_state, max(total, 1))
    gpus = len(gpu_rows)
    seen = int(lookups or 0) if one_gpu else 0
    if cls.name in ("tbe", "ssd-tbe"):
        # whole sets, as the capacity gives them on each GPU (a set is a hash modulo them)
        per_way = _TBE_WAY_BYTES.get(p.cache_algorithm, 16)
        if p.cache_load_factor > 0:  # each GPU's sets from its own rows
            ways = sum(cls.capacity(system, unit_rows, row_state, max(int(r), 1)) for r in gpu_rows)
        else:  # the same sets on every GPU
            ways = gpus * cls.capacity(system, unit_rows, row_state, max(total, 1))
        size, how = ways * per_way, f"{format_count(ways)} cache ways x {per_way} B"
        if cls.name == "ssd-tbe":
            l2 = cachelib.capacity_rows(p.l2_capacity_bytes, row_state)
            slots = sum(usable_units(l2, int(r), 1, seen) for r in gpu_rows) if l2 else 0
            if lookups is None:
                size += slots * _SLOT_BYTES["lru"]
                how += f", L2 {format_count(slots)} rows x {_SLOT_BYTES['lru']} B"
            elif slots:
                # its key -> slot table (huge pages, touched throughout), and its slots'
                # arrays, filled in order: at most a slot per lookup is ever touched
                table = sum(
                    8 * table_shape(int(r), usable_units(l2, int(r), 1, seen))[0] for r in gpu_rows
                )
                filled = min(slots, max(int(lookups), 0))
                size += table + filled * _L2_SLOT_BYTES
                how += (
                    f", L2 table {format_bytes(table)} and {format_count(filled)} of its "
                    f"{format_count(slots)} rows filled x {_L2_SLOT_BYTES} B"
                )
        return size, how
    if cls.name == "hot":
        return 0, ""  # its selection is per looked-up row (`run_state`)
    if cls.name not in _SLOT_BYTES:
        return 0, ""
    slots = sum(usable_units(cap, int(r), unit_rows, seen) for r in gpu_rows)
    unit = "chunk" if unit_rows > 1 else "row"
    what = f"{gpus:,} caches, " if gpus > 1 else ""
    return slots * _SLOT_BYTES[cls.name], (
        f"{what}{format_count(slots)} {unit} slots x {_SLOT_BYTES[cls.name]} B"
    )


def gpu_caches(placement: Any, system: SystemSpec) -> list[tuple[int, int]] | None:
    """Each GPU's (cached shards' rows, cache rows) of a mixed placement, as the cluster
    replay makes its policies (`replay.engine.kernels.rank_splits`); None where every
    table is in HBM and the policy serves every row (or no placement)."""
    if placement is None:
        return None
    from replay.engine.kernels import rank_splits

    splits = rank_splits(placement, always=system.policy.name == "ssd-tbe")
    if splits is None:
        return None
    return [(max(sum(sp.cached_rows), 1), max(int(sp.cache_rows), 1)) for sp in splits]


def _mixed_cache_bytes(
    system: SystemSpec, caches: Sequence[tuple[int, int]], row_state: int, lookups: int
) -> tuple[int, str]:
    """`cache_bytes` of each GPU's cache of a mixed placement (`gpu_caches`): a cache of
    its cache rows over its cached shards' rows, as `make_rank_policy` sets it."""
    total = 0
    for rows, slots in caches:
        policy = dataclasses.replace(
            system.policy, capacity_rows=slots, capacity_bytes=0.0, cache_load_factor=0.0
        )
        one = dataclasses.replace(system, policy=policy)
        size, _ = cache_bytes(one, [rows], row_state, lookups)
        total += size
    cached = sum(r for r, _ in caches)
    return total, (
        f"{len(caches):,} GPUs' caches of their load factors over {format_count(cached)} "
        f"cached rows, {format_bytes(total)}"
    )


def run_state(
    source: Source,
    system: SystemSpec,
    *,
    inspect: bool = False,
    threads: int = 1,
    gpu_rows: Sequence[int] | None = None,
    caches: Sequence[tuple[int, int]] | None = None,
) -> RunState:
    """What `replay_trace(source, system, inspect=inspect)` (or a cluster's replay)
    allocates per key, per cache slot, per lookup and per batch, from the classes that
    allocate it (`replay._memory`'s input). `threads`: the generating threads of an
    on-the-fly workload (a distinct-row bitmap each). `gpu_rows`: a cluster's rows on
    each GPU, once placed (else a bound for any placement without replicas: R + W rows
    split evenly). `caches`: a mixed placement's caches per GPU (`gpu_caches`), which
    then size the caches. ConfigError where the system does not fit the source (as a
    run would say)."""
    from replay.checkpoint import STRATEGIES

    cls = POLICIES[system.policy.name]
    state = _row_state(system, source)
    total = row_space(source.table_rows)
    lookups = int(source.num_lookups)
    parts: list[tuple[str, float]] = [(f"policy {cls.name}", float(cls.state_bytes_per_key))]
    strategy = STRATEGIES[system.checkpoint.strategy]
    if strategy.state_bytes_per_key:
        parts.append((f"checkpoint {system.checkpoint.strategy}", strategy.state_bytes_per_key))
    generated = is_generated(source)
    if inspect and not generated:
        parts.append(("statistics", INSPECT_BYTES_PER_ROW))  # instead of the bitmap
    else:
        # else counted from the updates
        if not (is_generated(source) and source.steps_every_batch):
            bitmaps = "distinct-row bitmaps" if threads > 1 and generated else "distinct-row bitmap"
            parts.append((bitmaps, (threads if generated else 1) / 8))
        if inspect:  # a second generation pass, beside the run's state
            parts.append(("statistics", INSPECT_BYTES_PER_ROW))
    p = system.policy
    if counts_read_after_write(system):
        parts.append(("read-after-write bitmap", 1 / 8))
    cluster = sharded(system)
    # a policy that takes each batch's distinct lookups in order (`Policy.takes_order`)
    # gets them from a trace folder's reader: its bitmap (the distinct-row bitmap's,
    # besides the statistics), and two keys a lookup in flight
    ordered = cls.takes_order and not generated and not cluster
    if ordered and inspect:
        parts.append(("distinct-order bitmap", 1 / 8))
    gpus = system.cluster.world_size if system.cluster is not None else 1
    rows = [total]
    if cluster:
        # before the placement: R + W rows split evenly, so that the caches' slots (each
        # GPU's min(capacity, its rows), one at least) are at most those of any placement
        # without replicas, which then have at most R + W
        rows = list(gpu_rows) if gpu_rows is not None else _even(total + gpus, gpus)
    if cluster and caches:
        fixed, how = _mixed_cache_bytes(system, caches, state, lookups)
    else:
        fixed, how = cache_bytes(system, rows, state, lookups, one_gpu=not cluster)
    per_batch = 0
    notes: list[str] = []
    if cluster:
        fixed += gpus * CLUSTER_BYTES_PER_GPU + _range_cells(source, gpus) * (
            CLUSTER_BYTES_PER_RANGE_CELL
        )
        per_batch = gpus * CLUSTER_BYTES_PER_GPU_BATCH
        notes.append(
            f"{gpus:,} GPUs x ({CLUSTER_BYTES_PER_GPU // 1024} KiB + "
            f"{CLUSTER_BYTES_PER_GPU_BATCH} B a batch x {format_count(source.num_batches)} "
            "batches)"
        )
        extra = sum(int(r) for r in gpu_rows or ()) - total  # replicas and column blocks
        if extra > 0:  # the policy's per-key state of each GPU's copy
            fixed += math.ceil(extra * cls.state_bytes_per_key)
    if ordered:
        piece = int(getattr(source, "piece_lookups", 0))
        held = in_flight_bytes(lookups, source.num_batches, piece) // IN_FLIGHT_BYTES_PER_LOOKUP
        fixed += held * 2 * key_dtype(total).itemsize
    if how:
        notes.insert(0, how)
    slots, per_slot, per_lookup = 0, 0.0, 0.0
    if cls.name == "hot":
        slots, per_slot = min(total, lookups), _HOT_SELECT_BYTES
    if cls.name == "chunk":
        parts.append(("chunks", _CHUNK_BYTES / cls.unit_rows(p)))
        if p.chunk_eviction != "lru":  # the next use of every lookup and update row
            per_lookup = 2 * getattr(cls, "state_bytes_per_request", 8)
    if cls.name == "belady":
        per_lookup = getattr(cls, "state_bytes_per_lookup", 8)
    label = ", ".join(f"{name} {value:.3g} B" for name, value in parts)
    return RunState(
        sum(v for _, v in parts), slots, per_slot, per_lookup, label,
        fixed_bytes=fixed, bytes_per_batch=per_batch, notes=tuple(notes),
    )  # fmt: skip


def in_flight_bytes(lookups: int, batches: int, piece_lookups: int = 0) -> int:
    """Bytes of the batch ranges a replay (or `inspect`) holds at once over `lookups` in
    `batches`: the reader's `READ_AHEAD` ranges and the one consumed, each a row group of
    about `ROW_GROUP_TARGET_LOOKUPS` lookups or one whole batch when a batch is larger,
    or, where the reader takes a large batch in pieces of tables (`piece_lookups`: the
    largest piece's lookups, `replay.trace.format.plan_pieces`), one piece."""
    from replay.trace.format import ROW_GROUP_TARGET_LOOKUPS
    from replay.trace.stream import READ_AHEAD

    lookups = max(int(lookups), 0)
    per_batch = -(-lookups // max(int(batches), 1))
    per_group = max(ROW_GROUP_TARGET_LOOKUPS, per_batch)
    if piece_lookups > 0:
        per_group = max(int(piece_lookups), 1)
    groups = max(-(-lookups // per_group), 1)
    return min(READ_AHEAD + 1, groups) * per_group * IN_FLIGHT_BYTES_PER_LOOKUP


def check_run_memory(
    source: Source,
    systems: Sequence[SystemSpec],
    *,
    inspect: bool = False,
    parallel: int = 1,
    statistics: bool = False,
    threads: int | None = None,
    what: str = "replay run",
    placements: Sequence[Any] | None = None,
) -> Estimate:
    """ConfigError, with the figure, when replaying `systems` over `source` (`parallel`
    at once) needs more memory than this machine has; else the estimate. `placements`:
    each system's placement where it is a cluster already placed (None elsewhere)."""
    check_row_space([int(r) for r in source.table_rows])
    if threads is None:
        threads = max(1, _cores() // max(1, min(parallel, len(systems))))
    placed = list(placements) if placements is not None else [None] * len(systems)
    states = [
        run_state(
            source,
            system,
            inspect=inspect,
            threads=threads,
            gpu_rows=gpu_rows(place),
            caches=gpu_caches(place, system) if sharded(system) else None,
        )
        for system, place in zip(systems, placed, strict=True)
    ]
    # whole batches in flight unless every replay takes them in pieces
    pieced = all(streams_pieces(source, system) for system in systems)
    piece = int(getattr(source, "piece_lookups", 0)) if pieced and systems else 0
    held = in_flight_bytes(source.num_lookups, source.num_batches, piece)
    estimate = run_estimate(
        source.table_rows, int(source.num_lookups), int(source.num_batches), states,
        parallel=parallel, statistics=statistics, what=what, in_flight=held,
    )  # fmt: skip
    check_fits(estimate)
    return estimate


def gpu_rows(placement: Any) -> list[int] | None:
    """The rows each GPU of a placement holds (a replica or a column block counts its
    rows on its GPU); None for no placement."""
    if placement is None:
        return None
    rows = [0] * placement.world
    for shard in placement.shards:
        rows[shard.rank] += int(shard.rows)
    return rows


__all__ = [
    "CLUSTER_BYTES_PER_GPU",
    "CLUSTER_BYTES_PER_GPU_BATCH",
    "CLUSTER_BYTES_PER_RANGE_CELL",
    "cache_bytes",
    "check_run_memory",
    "cluster_gpu_bytes",
    "gpu_caches",
    "gpu_rows",
    "in_flight_bytes",
    "run_state",
    "sharded",
]
