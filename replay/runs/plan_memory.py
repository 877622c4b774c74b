"""`replay plan`'s memory estimate: what a plan holds at its peak, from the shape of its
source and its systems alone, said (`replay plan --dry-run`) and checked against the
machine before any work (issue 39).

A plan runs its stages one after another (`replay.plan.plan.make_plan`), so its peak is
what stays for the whole plan plus the largest stage:

- **the process**: the interpreter, numpy, numba's code and the engine (`PROCESS_BYTES`);
- **kept**: the sampled rows' ids and alias tables (R x rows of them, `SAMPLED_ROW_BYTES`
  each while they are built) and the counts of the exact heads of a sampled curve
  (`replay.analysis.head`: the total one and one per table, their capacities from the
  same functions that make them, so the bound is theirs: int64 [blocks, C + 2] each),
  kept on the source for the per-table curves and torchrec.json;
- **the curves** (the largest of): at R = 1 the exact curve's state (a last position per
  row, or a map of the rows seen where the row space is large against the lookups as
  `replay.analysis.stack.dense_rows` decides, and a window per distinct row,
  `replay._memory.mrc_estimate`) or the rows-touched state (4 B per row up to
  `DENSE_MAX_ROWS` rows where the curves take an array, else a map of the distinct rows); at
  R < 1 the SHARDS state of the sampled rows, the sampled row groups in flight (their
  counts per batch and table, `replay.workload.sampled.MAX_GROUP_CELLS`), the
  full-stream batches the heads read
  (`HEAD_CHUNK_BYTES_PER_LOOKUP` per lookup: the generated columns, the flat keys and
  their split by table, one chunk of at least a batch at a time), and the heads' state
  while they read (a map and window per head, or at production scale two `RunsHead`
  states over the largest table's rows) with one head's counts stacked (`_heads`);
- **TorchRec's statistics per table** (`replay.plan.torchrec_unique`, at R < 1 below
  production scale): an exact head per table of each batch's unique ids, read as the
  plan's own heads are, the chunk of full batches it reads and each batch's first
  occurrences (`_unique_heads_bytes`);
- **the distinct rows per batch** (`replay.plan.torchrec`, at R < 1): a few full batches
  (`span_batches`), their keys in a map;
- **touched(k) for small k** (`replay.analysis.touched_plan`, at R < 1): the run's first
  P batches (`prefix_batches`, about 2^26 lookups) in full, counted per row or per key;
- **the cache policies' replays** (`replay.plan.policies`, `replay.plan.tbe`: LFU, TBE,
  ... caches, one replay of the horizon at a time): the policy's per-row state and the
  replay's per-batch columns (`REPLAY_BYTES_PER_BATCH`), which grow with the run;
- **the steady state**: each system's replay of the short span (`replay.plan.plan.
  steady_batches`): its per-row and per-slot state (`replay.runs.run_memory.run_state`, as
  `replay run` estimates it) and the generated row groups in flight (`threads + AHEAD`
  ahead of the one consumed, `IN_FLIGHT_BYTES_PER_LOOKUP` each lookup);
- **the cluster** (a first system with a `[cluster]`, `replay.plan.cluster`): the per-GPU
  curves (`replay.plan.rank_curves`: the ranks' stack states together hold what one curve
  over every routed row holds, `mrc_estimate` of the routed rows, plus the routed keys of
  a range, `CLUSTER_ROUTED_BYTES_PER_LOOKUP` each), or the steady cluster replay (its
  caches sized to the span's distinct rows per GPU, so at most a slot per routed lookup of
  the span, `_SLOT_BYTES`-class per slot, the per-key state of every GPU's rows, the
  routed keys, and each GPU's own state: its policy, its columns a batch and the range
  in hand, `replay.runs.run_memory.cluster_gpu_bytes`), whichever is larger. Measured:
  the 64-GPU Criteo Terabyte plan peaked at 0.62 GiB, its one-GPU stages the largest;
  tiny on 8,192 GPUs at 0.77 GiB, on 1,024 at 0.56 GiB (~29 KB a GPU: the steady
  replay's state of each GPU over its 200 batches);
- **TorchRec's statistics per shard** (`replay.plan.torchrec_shards`, a cluster plan), on
  top of the largest stage (its Python objects do not reuse what the stages before left
  in the heap), kept until the plan is written: `SHARD_STATS_BYTES` a shard of the
  recommended placement at 100 bins, `SHARD_BIN_BYTES` a bin more (`shard_count`: a
  sharding type's or file's shards; the sharder's one a table, its splits uncounted).

The per-lookup figures were measured (peak RSS, `/proc/self/status`, 2-core VM) on a
400-table workload of 2 G rows and batches of 65,536 (26.2 M lookups a batch): the
steady stage alone peaked at 2.37 GiB, the curves stage at 2.72 GiB; both are made of a
few whole batches, so the figures are per lookup; the sampled rows' tables at 54 B a row
kept, 63 B at the set-up's peak (12 tables of 4 G rows at R = 2^-12). Terms that depend
on the rows a run touches (the curves' per-key state, touched(k)'s map, the cluster's
caches) take the rows its batches are expected to touch (`expected_distinct`: the
generator's pmf, `replay.analysis.touched_model`, for i.i.d. batches), else every row it
could touch, min(rows, lookups), as `replay._memory` does. Measured against it
(`/usr/bin/time`'s maximum RSS): that 400-table plan over 7.2 M batches 2.67 GiB
(estimate 3.05; 3.34 GiB after issue 40, the estimate 9% low: touched(k)'s first batch
of 26 M lookups counted exactly, its keys in the counter's map while the heads are held,
is now the largest stage, above the estimate's 64 B a key), the README's Criteo Terabyte
epoch with hbm-lru 0.53 GiB (0.59) and with hbm-lru, hbm-lfu, hbm-tbe-lru and dram 2.83
GiB (2.76: low by 2%), 12 tables of 4 G rows 0.82 GiB (1.14: high by 39%, the heads' and
the sampled curves' bounds). At production scale (meta-2021, a day on 128 GPUs: batches
of 887 M lookups read in pieces, `docs/methods.md` "At production scale") the cluster
stage holds the sharder's loads (~1 GiB), a compiled workload (0.3 GiB), the pieces in
flight and each placement's router, beside the heads: measured 2.99 GiB, the estimate
3.6 GiB (high by 20%; the heads' bound is ~0.5 GiB above what they hold). Since the
routing counts each table's distinct rows from the draws where no sharding splits a table, it
reads the pieces only on a split, which the sharder decides in the plan (its loads, ~3 s
of CPU and 1 GiB, and its runs, ~3 s): the estimate counts them, as the case of a split,
and says so. `/usr/bin/time` on meta-2021's day on 128 GPUs (2-core VM): 2.54 GiB with no
table split (the plan's own sharding), 2.89 GiB with its largest table row-wise (a
sharding file; the pieces read); the estimate 3.01 GiB (3.51 before, with 37 B a lookup
of each piece in flight: the routers' buffers counted in it too); criteo-terabyte at
6,000,000 samples a batch on 16 GPUs, 200 batches (the pieces read) 1.36 GiB, the
estimate 1.68 (2.35 before). Later (issue
54, `/usr/bin/time -v`, loaded 2-core VM): the process alone is 229-245 MiB (a tiny plan
peaked at 245 MiB, estimate 243); the SSD TBE plan of docs/ssd_tbe_plan.md 1.55 GiB
(estimate 2.02, high by 31%: touched(k)'s map is bounded at 64 B for each of the 16.8 M
lookups of its first batches, most of them repeats; its L2 now counts its table and the
slots the span can fill, not 81 B for each of its 14.3 M rows). With the expected
distinct rows (`/usr/bin/time -v`, load average 12-18): docs/plan.md's TBE plan
(criteo-kaggle, 2,000 batches, R = 0.25) 1.64 GiB (estimate 1.59, was 2.53: 4.1 M
distinct rows of 106 M lookups), docs/cluster.md's 64 GPUs 0.88 GiB (0.83, was 2.51: the
cluster replay's slots are the span's 0.86 M distinct rows, not its 10.6 M lookups),
Criteo Terabyte's epoch with hbm-lru and dram 586 MiB (684), the SSD TBE plan 1.49 GiB
(1.79), docs/torchrec.md's 1.01 GiB (966 MiB). docs/cluster.md's 8 GPUs of 80 GiB with
TorchRec's default proposer at a 1.5 GiB budget peaked at 1.52 GiB while the estimate
said 0.82: its peak is TorchRec's own plan replayed beside ours (six tables cached, LRU
key tables of 640 MiB, made whole when the replay starts), with torch imported (295 MiB).
**TorchRec's plan beside ours** (`torchrec_beside_bytes`) now adds both to the cluster's
stage. The heads' counts kept and their reading state in the curves' stage, and
TorchRec's statistics per table and per shard counted (`/usr/bin/time`, idle VM,
2026-12-07; every plan of docs/plan.md's table): meta-2021's day 2.33 GiB (estimate 2.38;
3.01 with the heads' state kept), every table row-wise 3.11 GiB (3.00), the 400-table
plan 3.41 GiB (3.98; 3.13 before, its per-table statistics' stage uncounted).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

from replay._memory import (
    IN_FLIGHT_BYTES_PER_LOOKUP,
    MARGIN_BYTES,
    Estimate,
    available_memory,
    format_count,
    memory_available_now,
    mrc_estimate,
    row_space,
)
from replay._units import format_bytes
from replay.analysis.head_pieces import one_batch_heads_wanted
from replay.analysis.touched_model import closed_form_wanted, expected_touched
from replay.analysis.touched_plan import PREFIX_MAX_LOOKUPS, iid_batches, prefix_batches
from replay.plan.cluster import routed_steady
from replay.plan.plan import PlanRequest, request_sample_rate, steady_batches
from replay.plan.policies import MINIATURE_POLICIES
from replay.plan.systems_model import modelled_wanted
from replay.plan.torchrec import SPAN_MAX_LOOKUPS, span_batches
from replay.workload.sampled import MAX_GROUP_BATCHES, MAX_GROUP_CELLS, SETUP_CHUNK_ROWS
from replay.workload.spec import WorkloadSpec

PROCESS_BYTES = 240 << 20  # interpreter, numpy, numba's code, the engine: 229-245 MiB measured
TORCH_IMPORT_BYTES = 300 << 20  # torch and torchrec imported: +295 MiB of VmRSS measured

# a chunk of the full stream the heads read: its columns, flat keys and their split by
# table. Measured when the split was an argsort and its gathers (~56 B); the counting sort
# since (980dfb3) holds 12 B a key for it, so this figure now leans high
HEAD_CHUNK_BYTES_PER_LOOKUP = 56
# the first occurrences of a chunk's keys besides `FirstInBatch`'s slots: their mask
# (uint8, then bool), its running sum (int64) and the kept keys (int64, at most)
FIRST_IN_BATCH_BYTES_PER_LOOKUP = 18
# a replay's per-batch columns over the whole horizon, as the cache answers keep them
# (criteo-terabyte with hbm-tbe-lru: 2.31 GiB over 300,000 batches, 2.83 GiB over
# 2,135,484; about 300 B a batch, rounded up)
REPLAY_BYTES_PER_BATCH = 512
# a sampled row while the set-up builds its tables: its id and weight (8 + 8 B, twice
# while joined), then id, probability and alias (8 + 8 + 4 B)
SAMPLED_ROW_BYTES = 52
SETUP_TASK_BYTES = 200  # a set-up task's tuple and its two result arrays' headers
TOUCHED_DENSE_BYTES_PER_ROW = 4  # `replay.analysis.horizon`: int32 last batch per row
TOUCHED_MAP_BYTES_PER_KEY = 4 * 16  # else a map of (key, last batch), up to 4 slots a key
# a routed lookup of the cluster's passes: its local key and group (rank curves), or its
# local key twice and its batch's per-rank counts (the cluster replay's count and emit)
CLUSTER_ROUTED_BYTES_PER_LOOKUP = 24
CLUSTER_SLOT_BYTES = 96  # a cache slot of the cluster replay, its hash entries included
# a router's buffers (`replay.engine.cluster_route.Router`, one per placement, grow-only):
# int32 rank and int64 local key a lookup of a piece. A piece in flight holds
# `IN_FLIGHT_BYTES_PER_LOOKUP` (its columns, flat keys and update keys) besides; the
# routing of a split table writes into its placement's router, not into the pieces.
# Measured (meta-2021's batch routed in pieces at 5 placements, one of them every table
# row-wise, 2 cores): +0.38 GiB over the sharder's loads, where 6 pieces x 17 B and a
# router say 0.47 (20 B more a lookup of every piece in flight, the routers' rank and
# local key counted twice, said 0.97)
ROUTER_BYTES_PER_LOOKUP = 12
# a compiled workload's sampler tables while built: 29 B a head rank of a table with a law
# of its own (measured), of which the rank's permutation entry and its temporaries take
# 12 B (meta-2021, 856 tables of 4 laws: 125 MiB of RSS measured, 11.2 M head ranks);
# tables of one law share the rest (its alias table and tail guide)
COMPILED_BYTES_PER_TABLE_RANK = 12
COMPILED_BYTES_PER_LAW_RANK = 29 - COMPILED_BYTES_PER_TABLE_RANK
ROW_MASS_BYTES_PER_RANK = 24  # top row (int64), its mass and cumulative mass (float64)
# a SHARDS pass over a sampled workload's stream (`replay.analysis.horizon.horizon_mrc`)
# grows by this much per sampled row of the tables beside its per-key state: measured
# (VmRSS, criteo-kaggle at 2,048 a batch, R = 0.25) +603 MB over 500 batches and +708 MB
# over 2,000, 8.44 M sampled rows, 0.40 M and 1.03 M expected distinct sampled keys:
# ~167 B a key (`mrc_estimate`'s 210) and ~64 B a sampled row
SHARDS_PASS_BYTES_PER_SAMPLED_ROW = 64
# a shard of TorchRec's statistics per shard (`replay.plan.torchrec_shards`): its entry,
# its curve, its histogram's bins as Python numbers and its stream's small stack state.
# Measured: meta-2021 with every table row-wise on 128 GPUs (109,568 shards), +0.44 GiB
# of RSS over the cluster stage (4.3 KB a shard); tiny's 377 and 1,324 row-wise shards
# 6.4 and 4.9 KB a shard at the stage's peak (tracemalloc); at torchrec.json's default 100
# bins. A bin more a shard (`--torchrec-bins`): 23 B measured (tiny, 377 row-wise shards,
# 100 -> 20,000 bins: 563 -> 730 MiB peak RSS)
SHARD_STATS_BYTES = 6 << 10
SHARD_BIN_BYTES = 24
# the expected distinct rows (`expected_distinct`) rounded up: a run's count spreads about
# its expectation by far less than this (`replay.analysis.touched_plan`'s bound)
DISTINCT_SPARE = 1.02
DISTINCT_SPARE_ROWS = 4096


def _shape(source: Any) -> tuple[list[int], int, int]:
    """(rows per table, lookups per batch, batches) of a spec or an opened trace."""
    if isinstance(source, WorkloadSpec):
        return [int(t.rows) for t in source.tables], int(source.lookups_per_batch), source.batches
    batches = max(int(source.num_batches), 1)
    return (
        [int(r) for r in source.table_rows],
        -(-int(source.num_lookups) // batches),
        int(source.num_batches),
    )


def _in_flight(spec: WorkloadSpec, batches: int, ahead: int) -> int:
    """Bytes of the generated row groups of `batches` of `spec` in flight: `ahead` of
    them, or as many as the span has (the layout `replay generate` would write)."""
    from replay.workload.generator import plan_layout

    per_batch = int(spec.lookups_per_batch)
    per_group = int(plan_layout(per_batch, spec.update.accumulate_batches)["batches_per_row_group"])
    groups = -(-batches // per_group)
    return min(ahead, groups) * min(per_group, batches) * per_batch * IN_FLIGHT_BYTES_PER_LOOKUP


def expected_distinct(source: Any, batches: int) -> int:
    """Distinct rows the first `batches` batches of `source` look up, at most: for a spec
    with i.i.d. batches the generator's expectation from its pmf
    (`replay.analysis.touched_model.expected_touched`, every table counted), rounded up
    with 2% and 4,096 rows to spare; else (reuse, drift, a trace folder) every lookup a
    new row, min(rows, lookups)."""
    rows, per_batch, _ = _shape(source)
    bound = min(row_space(rows), max(int(batches), 0) * per_batch)
    if not isinstance(source, WorkloadSpec) or not iid_batches(source) or batches < 1:
        return bound
    expected = float(expected_touched(source, [int(batches)], kind="lookups").sum())
    return min(bound, math.ceil(expected * DISTINCT_SPARE) + DISTINCT_SPARE_ROWS)


def _head_capacities(rows: list[int], per_batch: int, rate: float) -> tuple[int, list[int]]:
    """(the total head's capacity, each table's) as `replay.analysis.head` sizes them, from
    the first batch's distinct rows at most: its lookups of each table, spread by rows."""
    from replay.analysis.head import head_capacity, shared_capacities
    from replay.analysis.shards import resolution_rows, shards_threshold

    resolution = resolution_rows(shards_threshold(rate))
    total = row_space(rows)
    share = [r / total for r in rows] if total else [0.0] * len(rows)
    first = [min(r, math.ceil(per_batch * s)) for r, s in zip(rows, share, strict=True)]
    whole = head_capacity(min(total, per_batch), resolution, total)
    tables = shared_capacities(
        [head_capacity(d, resolution, r) for r, d in zip(rows, first, strict=True)]
    )
    return whole, tables


def _heads(
    rows: list[int], per_batch: int, batches: int, rate: float, looks: list[int] | None
) -> tuple[int, int, str]:
    """(bytes the exact heads of a sampled plan keep, bytes more while they are read, how)
    for the total head and one per table. Kept: each head's counts (`HeadCurve.counts`).
    While read (the curves' stage): each head's state, the block in hand, and the stack of
    one head's blocks into its counts (`take_counts`: the largest head's). The state is a
    map and window of C keys per head (`head_bytes`), or where one batch is read in pieces
    of tables (`looks`: each table's lookups a batch) two `RunsHead` states over the
    largest table's rows, shared by every table's head (`replay.analysis.head_pieces`)."""
    from replay.analysis.head import HEAD_BLOCKS, head_blocks, head_bytes, head_counts_bytes
    from replay.analysis.head_pieces import RUNS_MAX_ROWS, runs_state_bytes

    whole, tables = _head_capacities(rows, per_batch, rate)
    every = [whole, *tables]
    blocks = len(head_blocks(batches, per_batch * batches, max(every)))
    kept = head_counts_bytes(every, blocks)
    stacked = head_counts_bytes([max(every)], blocks)
    if looks is not None and max(rows, default=0) <= RUNS_MAX_ROWS:
        state = 2 * runs_state_bytes(max(rows, default=1), max(looks, default=1))
        reading = state + head_counts_bytes(every, 1) + stacked
    else:
        reading = head_bytes(every, blocks) - kept + stacked
    how = (
        f"exact heads of {format_count(whole)} + {format_count(sum(tables))} rows over "
        f"{blocks} of {HEAD_BLOCKS} blocks"
    )
    return kept, reading, how


def _unique_heads_bytes(rows: list[int], per_batch: int, batches: int, rate: float) -> int:
    """TorchRec's statistics per table at R < 1 below production scale
    (`replay.plan.torchrec_unique._unique_heads`): an exact head per table of each batch's
    unique ids, read over the full stream's blocks as the plan's own heads are (their
    capacities at most those, `_head_capacities`), while the plan's heads are kept. Held:
    the heads' maps, windows and counts (`head_bytes`) and one head's stacked counts, the
    generated chunk of whole batches (`HEAD_CHUNK_BYTES_PER_LOOKUP` a lookup), and the
    first occurrences' table (`FirstInBatch`: two int64 slots for each of a power of two
    >= 2 x a batch's lookups) with its mask, sums and kept keys (18 B a lookup)."""
    from replay.analysis.head import head_blocks, head_bytes, head_counts_bytes

    _, tables = _head_capacities(rows, per_batch, rate)
    if not tables:
        return 0
    blocks = len(head_blocks(batches, per_batch * batches, max(tables)))
    heads = head_bytes(tables, blocks) + head_counts_bytes([max(tables)], blocks)
    chunk = _chunk_lookups(per_batch)
    slots = 1 << max(int(2 * per_batch - 1).bit_length(), 4)
    per_lookup = HEAD_CHUNK_BYTES_PER_LOOKUP + FIRST_IN_BATCH_BYTES_PER_LOOKUP
    return heads + chunk * per_lookup + 16 * slots


def plan_estimate(request: PlanRequest, source: Any, systems: list[Any]) -> Estimate:
    """The plan's peak memory by part. `source`: the request's spec, or its trace opened
    (`replay.trace.reader.open_trace`); `systems`: the resolved system specs."""
    from replay.analysis.horizon import DENSE_MAX_ROWS
    from replay.plan.cache import curve_sizes
    from replay.runs.run_memory import _cores, run_state
    from replay.workload.onthefly import AHEAD, GeneratedTrace

    rows, per_batch, batches = _shape(source)
    total = row_space(rows)
    curve_sizes(total)  # the curves' own limit on the rows, said in rows before any figure
    lookups = per_batch * batches
    threads = _cores()
    rate = request_sample_rate(request, source) if isinstance(source, WorkloadSpec) else 1.0
    parts: list[tuple[str, int]] = [("process", PROCESS_BYTES)]
    notes: list[str] = []
    in_pieces = False
    shard_bytes = 0
    if rate < 1.0:
        chunk = _chunk_lookups(per_batch)
        piece = _piece_lookups(source)
        in_pieces = bool(piece) and one_batch_heads_wanted(batches, per_batch, (piece,))
        looks = _table_lookups(source) if in_pieces else None
        kept, reading, how = _heads(rows, per_batch, batches, rate, looks)
        parts.append(("exact heads of the sampled curves", kept))
        notes.append(how)
        if in_pieces:
            # production scale: the heads read one batch piece by piece (`head_pieces`)
            chunk = piece + compiled_bytes(source) // HEAD_CHUNK_BYTES_PER_LOOKUP
            notes.append("production scale: the heads read one batch in pieces of tables")
        distinct = expected_distinct(source, batches)
        sampled = mrc_estimate(rows, distinct, rate).total
        # the sampled rows' ids, weights and alias tables (`replay.workload.sampled`),
        # built by set-up tasks that each test `SETUP_CHUNK_ROWS` rows, and kept
        setup = math.ceil(total * rate) * SAMPLED_ROW_BYTES
        setup += -(-total // SETUP_CHUNK_ROWS) * SETUP_TASK_BYTES
        parts.append(("the sampled rows' alias tables", setup))
        # the sampled row groups in flight: their (batch, table) counts, 8 B each
        groups = (threads + AHEAD + 1) * min(MAX_GROUP_CELLS, MAX_GROUP_BATCHES * len(rows)) * 8
        # a SHARDS pass over the sampled stream (the curves, and again for the TBE
        # comparison's LRU) also grows with the sampled rows of the tables
        passing = math.ceil(total * rate) * SHARDS_PASS_BYTES_PER_SAMPLED_ROW
        curves = sampled + passing + groups + chunk * HEAD_CHUNK_BYTES_PER_LOOKUP + reading
        notes.append(
            f"full-stream chunks of {format_count(chunk)} lookups x {HEAD_CHUNK_BYTES_PER_LOOKUP} B"
        )
    else:
        from replay.analysis.stack import dense_rows

        distinct = expected_distinct(source, batches)
        # a short stream in a large row space keeps its per-key state in a map of the
        # keys seen, not an array over every row (`dense_rows`, as the curves decide)
        dense = dense_rows(total, lookups)
        touched = (
            total * TOUCHED_DENSE_BYTES_PER_ROW
            if total <= DENSE_MAX_ROWS and dense
            else distinct * TOUCHED_MAP_BYTES_PER_KEY
        )
        curves = max(mrc_estimate(rows, distinct, None, dense=dense).total, touched)
        notes.append(
            f"exact curves over {format_count(total)} rows"
            + ("" if dense else ", their state in a map of the rows seen")
        )
    steady = 0
    modelled = isinstance(source, WorkloadSpec) and modelled_wanted(source)
    if modelled:
        notes.append("production scale: the systems' steady state modelled, not replayed")
    if isinstance(source, WorkloadSpec):
        span = source.with_overrides(batches=steady_batches(source))
        steady_source: Any = GeneratedTrace(span, threads=threads)
        in_flight = _in_flight(source, span.batches, threads + AHEAD + 1)
    else:
        steady_source = source
        in_flight = 0  # a trace's row groups: within the process margin, as for `replay run`
    steady_lookups = int(steady_source.num_lookups)
    policies = 0
    for system in systems:
        # the one-GPU sections replay each system without its cluster (`replay.plan.cluster`)
        state = run_state(steady_source, dataclasses.replace(system, cluster=None), threads=threads)
        if system.policy.name in MINIATURE_POLICIES or system.policy.name == "tbe":
            # the cache answers replay the horizon (sampled) at several sizes, one at a time
            policies = max(
                policies,
                math.ceil(total * state.bytes_per_key)
                + batches * REPLAY_BYTES_PER_BATCH
                + math.ceil(lookups * rate * state.bytes_per_lookup),
            )
        replay_bytes = (
            math.ceil(total * state.bytes_per_key)
            + math.ceil(state.slots * state.bytes_per_slot)
            + state.fixed_bytes
            + math.ceil(steady_lookups * state.bytes_per_lookup)
        )
        steady = max(steady, replay_bytes)
    steady += in_flight
    if modelled:
        steady = 0  # `replay.plan.systems_model`: arithmetic on the curve, nothing replayed
    stages = {"curves": curves, "systems' steady state": steady}
    if policies:
        stages["cache policies' replays"] = policies
    closed = isinstance(source, WorkloadSpec) and closed_form_wanted(source, SPAN_MAX_LOOKUPS)
    if closed:
        notes.append("production scale: distinct rows per batch and touched(k) in closed form")
    if isinstance(source, WorkloadSpec) and rate < 1.0 and not in_pieces:
        stages["TorchRec's statistics per table"] = _unique_heads_bytes(
            rows, per_batch, batches, rate
        )
    if isinstance(source, WorkloadSpec) and rate < 1.0 and not closed:
        # torchrec.json's distinct rows per batch: a few full batches, their keys in a map
        span_n = span_batches(source, batches)
        stages["distinct rows per batch"] = span_n * per_batch * TOUCHED_MAP_BYTES_PER_KEY // 4 + (
            _in_flight(source, span_n, threads + AHEAD + 1)
        )
    if (
        isinstance(source, WorkloadSpec)
        and rate < 1.0
        and iid_batches(source)
        and not closed_form_wanted(source, PREFIX_MAX_LOOKUPS)
    ):
        # touched(k) for small k: the run's first P batches generated in full and counted
        # (`replay.analysis.touched_plan`): a dense array over the rows, or their keys in a map
        prefix = prefix_batches(source, rate, batches)
        counted = (
            total * TOUCHED_DENSE_BYTES_PER_ROW
            if total <= DENSE_MAX_ROWS
            else expected_distinct(source, prefix) * TOUCHED_MAP_BYTES_PER_KEY
        )
        stages["rows touched in the first full batches"] = counted + _in_flight(
            source, prefix, threads + AHEAD + 1
        )
    if systems and systems[0].cluster is not None:
        from replay.runs.run_memory import cluster_gpu_bytes

        routed = isinstance(source, WorkloadSpec) and routed_steady(source, systems[0])
        world = systems[0].cluster.world_size
        stages["cluster: per-GPU curves and replay"] = _cluster_stage(
            systems[0], rows, per_batch, batches, rate, steady_lookups, in_flight,
            expected_distinct(source, batches),
            expected_distinct(source, int(steady_source.num_batches)),
            _piece_lookups(source) if routed else 0, cluster_gpu_bytes(steady_source, world),
        ) + (compiled_bytes(source) + loads_bytes(source) if routed else 0)  # fmt: skip
        if not routed:
            # the cluster sizes compared and the user's: where the tables leave HBM, each
            # GPU's L1 and L2 over its offloaded rows (`offload_cache_bytes`)
            offload, how = offload_cache_bytes(
                systems[0], rows, int(steady_source.num_lookups), _dim(source)
            )
            if offload:
                # that replay's caches in place of the rows' slots kept in HBM
                other = routed_span_bytes(steady_lookups) + in_flight + offload
                key = "cluster: per-GPU curves and replay"
                stages[key] = max(stages[key], other)
                notes.append(how)
        notes.append(
            f"cluster of {world:,} GPUs: per-GPU curves in one pass, "
            + (
                "one batch routed in pieces without caches (production scale)"
                if routed
                else "a steady replay with caches of the span's distinct rows per GPU"
            )
        )
        if routed:
            notes.append(_routed_pieces_note(source, batches, per_batch, rate))
        from replay.engine.placement import AUTO, embedding_dim, shard_count
        from replay.plan.torchrec import DEFAULT_BINS

        names, workload = _names(source)
        shards = shard_count(systems[0], names, rows, embedding_dim(systems[0], workload))
        bins = max(request.torchrec_bins - DEFAULT_BINS, 0)
        shard_bytes = shards * (SHARD_STATS_BYTES + bins * SHARD_BIN_BYTES)

        auto = not systems[0].cluster.sharding_file and systems[0].cluster.sharding in AUTO
        notes.append(
            f"TorchRec's statistics of {shards:,} shards"
            + (" (a table each: the sharder's splits uncounted)" if auto else "")
        )
        beside = 0 if routed else torchrec_beside_bytes(systems[0], rows, source, request)
        if beside and not routed:
            own, _ = offload_cache_bytes(
                systems[0], rows, int(steady_source.num_lookups), _dim(source),
                nodes=(int(systems[0].cluster.nodes),),
            )  # fmt: skip
            if own:
                # the user's tables leave HBM: TorchRec's plan keeps their kernels and load
                # factors, so its replay holds the caches this plan's own replay holds
                beside = TORCH_IMPORT_BYTES + own
        if beside:
            # TorchRec's own plan measured beside ours, torch imported (module docstring)
            stages["cluster: TorchRec's plan replayed beside ours"] = (
                stages["cluster: per-GPU curves and replay"] + beside
            )
            notes.append("TorchRec's plan beside ours: torch imported, its caches replayed")
    if shard_bytes:
        # TorchRec's statistics per shard (Python objects, in pymalloc's arenas) come on top
        # of what the stages before them left in the heap: the RSS stayed at the cluster's
        # stage (meta-2021 row-wise) or the curves' (tiny on 128 GPUs, row-wise)
        base = max(stages, key=lambda k: stages[k])
        stages[f"{base}, then TorchRec's statistics per shard"] = shard_bytes + stages[base]
    which = max(stages, key=lambda k: stages[k])
    parts.append((f"the largest stage ({which})", stages[which]))
    parts.sort(key=lambda p: -p[1])
    detail = (
        f"{len(rows)} tables, {format_count(total)} rows, {format_count(per_batch)} lookups a "
        f"batch, sample rate {rate:g}; largest part: {parts[0][0]}, {format_bytes(parts[0][1])}"
    )
    return Estimate("replay plan", tuple(parts), detail, tuple(notes))


def torchrec_beside_bytes(system: Any, rows: list[int], source: Any, request: Any) -> int:
    """What TorchRec's plan beside ours adds to the cluster's stage
    (`replay.plan.torchrec_planner`, run where its proposer is set, torchrec is installed
    and tables x GPUs is within `cluster.torchrec_max_table_gpus`): torch and torchrec
    imported (`TORCH_IMPORT_BYTES`), and the caches its plan is replayed with. TorchRec's
    default proposer keeps this plan's load factors, so it caches only where the tables do
    not fit the GPUs' budgets (rows x row bytes over GPUs x budget), and each table larger
    than a GPU's budget then holds a cache of up to one budget on a GPU of its own (the
    scale-up proposer: every GPU, its tables row-wise); a cache of C slots is an LRU's
    key table of 2^ceil(log2 4C) entries of 8 B, filled when made (`policies.lru.
    table_shape`), other policies `CLUSTER_SLOT_BYTES` a slot. The plan can place these
    only after TorchRec's planner runs; measured (docs/cluster.md's 8 GPUs of 80 GiB at a
    1.5 GiB budget): six caches of 1.1 M to 3.1 M rows, 640 MiB of key tables, against
    the five of one budget (640 MiB) counted here."""
    import contextlib
    import importlib.util

    from replay.errors import ConfigError
    from replay.plan.torchrec_planner import PROPOSERS
    from replay.policies.lru import table_shape
    from replay.system.spec import BYTES_PER_VALUE

    cluster = system.cluster
    world = int(cluster.world_size)
    proposer = str(cluster.torchrec_proposer)
    if proposer not in PROPOSERS or len(rows) * world > int(cluster.torchrec_max_table_gpus):
        return 0
    if importlib.util.find_spec("torchrec") is None:
        return 0
    dim = int(system.model.embedding_dim or getattr(source, "embedding_dim", 0) or 0)
    budget_rows = int(request.cache_budget_bytes) // max(BYTES_PER_VALUE * dim, 1)
    out = TORCH_IMPORT_BYTES
    if budget_rows < 1 or sum(rows) <= world * budget_rows:
        return out  # every table fits the GPUs' caches: TorchRec keeps them whole
    larger = sum(1 for r in rows if r > budget_rows)
    gpus = world if proposer == "scaleup" else min(world, larger)
    per_cache = budget_rows * CLUSTER_SLOT_BYTES
    if system.policy.name == "lru":
        # keys and slots past 63 bits: the replay refuses it anyway, the slot figure stands
        with contextlib.suppress(ConfigError):
            per_cache = table_shape(max(rows), budget_rows)[0] * 8
    return out + gpus * per_cache


# the cluster replay's routed ranges alive at once (the one in the policies and the one
# routed ahead, up to 16 M lookups each: `replay.engine.cluster`), 24 B a lookup; past
# them, the record pass's 4 B a lookup of the span
ROUTED_ALIVE_LOOKUPS = 1 << 25
RECORD_BYTES_PER_LOOKUP = 4


def routed_span_bytes(lookups: int) -> int:
    """The cluster replay's routed keys over a span of `lookups` (`ROUTED_ALIVE_LOOKUPS`):
    measured on the 400-table model's 64 GPUs (132.7 M lookups), the steady replay took
    1.4 GB above what the plan keeps, where 24 B a lookup of the span said 3 GiB."""
    alive = min(int(lookups), ROUTED_ALIVE_LOOKUPS)
    return alive * CLUSTER_ROUTED_BYTES_PER_LOOKUP + (int(lookups) - alive) * (
        RECORD_BYTES_PER_LOOKUP
    )


# ASSUMPTION: the load factor of an offloaded table's L1 (the kernels' choice is made
# only once the plan places them; measured 0.01 to 0.7 on the 400-table model's 8 GPUs)
OFFLOAD_LOAD_FACTOR = 0.05


def offload_cache_bytes(
    system: Any, rows: list[int], lookups: int, dim: int, *, nodes: tuple[int, ...] = ()
) -> tuple[int, str]:
    """The caches of the cluster replay with the most offloaded rows among the cluster
    sizes a plan replays (`replay.plan.cluster.SCALING_NODES` and the user's, the same
    GPUs per node): at W GPUs whose table budgets (`cluster.gpu_memory_bytes` x
    `replay.engine.kernels.HBM_FILL`) do not hold the tables, the rows beyond them leave
    HBM, spread evenly, and each GPU's cache over its share is made as
    `replay.runs.run_memory.cache_bytes` counts it (ssd-tbe: L1's ways and L2's table
    and the slots the span fills, `policy.l2_capacity_bytes` a GPU) at
    `OFFLOAD_LOAD_FACTOR`. Measured (`/usr/bin/time -v`, 2-core VM): the 400-table
    model's 64-GPU plan peaked at 9.9 GB while it replayed 8 GPUs (ssd-tbe, an 8 GiB
    L2 a GPU: 6.5 GiB of caches); its 8-GPU plan (256 MiB of L2 a GPU) 5.4 GiB, TorchRec's
    plan replayed with the same caches. `nodes`: these node counts only."""
    from replay.engine.kernels import HBM_FILL, offload_kernel
    from replay.engine.placement import row_state_bytes
    from replay.plan.cluster import SCALING_NODES
    from replay.runs.run_memory import cache_bytes

    cluster = system.cluster
    if cluster is None or offload_kernel(system) is None or cluster.kernel == "hbm":
        return 0, ""
    dim = int(system.model.embedding_dim or dim)
    state = row_state_bytes(system, dim) if dim else 0
    if state <= 0:
        return 0, ""
    total = sum(int(r) for r in rows)
    gpn = int(cluster.gpus_per_node)
    best, how = 0, ""
    for n in sorted(set(nodes) or {*SCALING_NODES, int(cluster.nodes)}):
        world = n * gpn
        held = int(HBM_FILL * world * float(cluster.gpu_memory_bytes)) // state
        left = total - held if cluster.kernel == "auto" else total
        if left <= 0:
            continue
        per_gpu = max(left // world, 1)
        policy = dataclasses.replace(
            system.policy,
            capacity_rows=max(int(per_gpu * OFFLOAD_LOAD_FACTOR), 1),
            capacity_bytes=0.0,
            cache_load_factor=0.0,
        )
        one = dataclasses.replace(system, policy=policy, cluster=None)
        size, _ = cache_bytes(one, [per_gpu], state, lookups // world)
        if size * world > best:
            best = size * world
            how = (
                f"{world} GPUs' caches over {format_count(left)} rows that leave HBM, "
                f"{format_bytes(best)}"
            )
    return best, how


def _names(source: Any) -> tuple[list[str], dict[str, Any]]:
    """(the source's table names, its workload as a trace's manifest gives it)."""
    if isinstance(source, WorkloadSpec):
        return [str(t.name) for t in source.tables], {"embedding_dim": _dim(source)}
    return [str(n) for n in source.table_names], dict(getattr(source, "workload", None) or {})


def _dim(source: Any) -> int:
    """The source's embedding dimension (0: unknown)."""
    if isinstance(source, WorkloadSpec):
        return int(source.embedding_dim or 0)
    return int(dict(getattr(source, "workload", None) or {}).get("embedding_dim") or 0)


def compiled_bytes(spec: WorkloadSpec) -> int:
    """A compiled workload's sampler tables (`replay.workload.generator.CompiledWorkload`:
    an alias table over each law's head ranks, shared by the tables of that law, and each
    table's permutation of its head positions, `replay.workload.sampler.
    build_sampler_tables`), as its RSS grows while built."""
    from replay.workload.sampler import FULL_ALIAS_ROWS, HEAD_RANKS

    laws: dict[tuple[object, ...], int] = {}
    table_ranks = 0
    for t in spec.tables:
        hot = tuple(t.hot_shares or ())
        head = t.rows if t.rows <= FULL_ALIAS_ROWS else HEAD_RANKS
        if float(t.alpha) == 0.0 and not hot:
            head = 0  # uniform: neither table is built
        laws[(t.rows, t.alpha, t.rank_offset, hot)] = head
        table_ranks += head
    return (
        sum(laws.values()) * COMPILED_BYTES_PER_LAW_RANK
        + table_ranks * COMPILED_BYTES_PER_TABLE_RANK
    )


def loads_bytes(spec: WorkloadSpec) -> int:
    """The sharder's loads of a spec (`replay.engine.placement.spec_loads`), kept through
    the cluster's stage: each table whose lookups draw from its pmf holds its head ranks'
    rows, masses and cumulative masses (`replay.workload.row_mass.RowMass`, 24 B a rank)."""
    from replay.workload.row_mass import SHARE_HEAD_RANKS

    return sum(
        min(int(t.rows), SHARE_HEAD_RANKS) * ROW_MASS_BYTES_PER_RANK
        for t in spec.tables
        if float(t.drift) == 0.0 and float(t.rank_offset) == 0.0
    )


def _chunk_lookups(per_batch: int) -> int:
    """The lookups of a chunk of whole batches the curves, heads and routing generate at a
    time: at least a batch, else whole batches up to `horizon.HEAD_CHUNK_LOOKUPS`."""
    from replay.analysis.horizon import HEAD_CHUNK_LOOKUPS

    return max(1, HEAD_CHUNK_LOOKUPS // max(per_batch, 1)) * per_batch


def _table_lookups(spec: WorkloadSpec) -> list[int]:
    """Each table's lookups a batch."""
    return [int(spec.batch_size) * int(t.pooling) for t in spec.tables]


def _piece_lookups(source: Any) -> int:
    """The largest piece's lookups where a spec's batches are cut into pieces, else 0."""
    if not isinstance(source, WorkloadSpec):
        return 0
    from replay.trace.format import plan_pieces

    looks = _table_lookups(source)
    pieces = plan_pieces(looks, source.update.accumulate_batches)
    return max((sum(looks[a:b]) for a, b in pieces), default=0)


def _routed_pieces_note(spec: WorkloadSpec, batches: int, per_batch: int, rate: float) -> str:
    """Which case the routed batch's pieces are counted for (`_cluster_stage`). The plan
    routes from each table's distinct rows in batch 0, counted from the generator's draws
    without the batch (`replay.workload.batch_distinct`: a bitmap over the largest
    table's rows), where each batch's update rows are its own (a step every batch) and no
    sharding splits a table; else it reads a batch in pieces. Whether a sharding splits
    a table is the sharder's answer at each GPU count, from its loads (meta-2021: ~3 s of
    CPU and 1 GiB) and runs (~3 s): the plan's own work, not the estimate's, so the
    pieces are counted there, as the case of a split (module docstring: an upper bound
    where none splits). `batches`, `per_batch` and `rate` do not change the case."""
    if spec.update.accumulate_batches != 1:
        return "the routing reads a batch in pieces (counted): its update rows span several batches"
    return (
        "a batch's pieces counted as if a sharding splits a table: the routing reads them "
        "only then (else it counts each table's distinct rows from the draws), which the "
        "plan's sharder decides"
    )


def _cluster_stage(
    system: Any, rows: list[int], per_batch: int, batches: int, rate: float,
    steady_lookups: int, in_flight: int, distinct: int, steady_distinct: int, piece: int = 0,
    gpu_bytes: int = 0,
) -> int:  # fmt: skip
    """Bytes of the cluster's largest part (module docstring): the per-GPU curves or the
    steady cluster replay (`piece` > 0: routed in pieces of that many lookups without
    caches, `replay.engine.cluster_routed`), with its state of each GPU (`gpu_bytes`:
    `replay.runs.run_memory.cluster_gpu_bytes`)."""
    from replay.policies import POLICIES

    total = row_space(rows)
    chunk = _chunk_lookups(per_batch)
    curves = mrc_estimate(rows, distinct, rate if rate < 1.0 else None).total
    curves += math.ceil(chunk * rate) * CLUSTER_ROUTED_BYTES_PER_LOOKUP
    if piece:
        # the pieces in flight (one per reader thread, `AHEAD` more, the routed one and the
        # next): their columns, flat keys and update keys; and each placement's router
        # (`ROUTER_BYTES_PER_LOOKUP`). Read only where a sharding splits a table (`plan_
        # estimate` says which case it counts)
        from replay.plan.cluster import SCALING_NODES
        from replay.runs.run_memory import _cores
        from replay.workload.onthefly import AHEAD

        routed = (_cores() + AHEAD + 2) * piece * IN_FLIGHT_BYTES_PER_LOOKUP
        routed += (len(SCALING_NODES) + 1) * piece * ROUTER_BYTES_PER_LOOKUP
        return max(curves, routed + gpu_bytes)
    cls = POLICIES[system.policy.name]
    replay = (
        math.ceil(total * cls.state_bytes_per_key)
        + steady_distinct * CLUSTER_SLOT_BYTES
        + routed_span_bytes(steady_lookups)
        + in_flight
        + gpu_bytes
    )
    return max(curves, replay)


def estimate_lines(estimate: Estimate) -> list[str]:
    """The estimate as `replay plan --dry-run` prints it."""
    lines = [f"memory: about {format_bytes(estimate.total)} at the peak ({estimate.detail})"]
    lines += [f"  {name}: {format_bytes(size)}" for name, size in estimate.parts]
    lines += [f"  ({note})" for note in estimate.notes]
    return [*lines, available_line(estimate.total)]


def available_line(total: float) -> str:
    """The estimate against what this machine has available now (MemAvailable, at most
    the figure `check_fits` uses: physical memory, a cgroup's or REPLAY_MEMORY_LIMIT)."""
    have, source = available_memory()
    now = memory_available_now()
    if now is None and have is None:
        return "this machine's memory could not be read: nothing to compare with"
    if now is None or (have is not None and have < now):
        figure, what = have, source
    else:
        figure, what = now, "available now: MemAvailable"
        if have is not None:
            what += f", of {format_bytes(have)} ({source})"
    assert figure is not None
    verdict = "fits in" if total + MARGIN_BYTES <= figure else "is MORE than"
    return (
        f"this estimate and a {format_bytes(MARGIN_BYTES)} margin {verdict} the "
        f"{format_bytes(figure)} this machine has ({what})"
    )


def source_for_estimate(source: Path | WorkloadSpec) -> Any:
    """A spec as it is; a trace folder opened (its manifest: the shape)."""
    if isinstance(source, WorkloadSpec):
        return source
    from replay.trace.reader import open_trace

    return open_trace(source)


__all__ = ["estimate_lines", "plan_estimate", "source_for_estimate"]
