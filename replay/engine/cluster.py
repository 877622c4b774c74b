"""The cluster replay: one pass over a trace (or an on-the-fly workload) feeding one cache
per GPU, with the all-to-all and all-reduce traffic each batch costs (the all-to-all
as `cluster.all_to_all_model` names it: TorchRec's collectives, the default, or the
lower bound; `replay.engine.collectives`).

Placement. This is the engine's loop for a sharded cluster, beside `replay.py` (one GPU);
it reads a `Placement` (`replay/system/sharding.py`) and the system's policy registry. It
is pure: a `ClusterResult` out, nothing written. Not yet reachable from the CLI (the
engine still refuses a `[cluster]` in `systems.py`).

One pass. Each batch range is routed once (`replay.engine.cluster_direct`: one numba
pass straight into each rank's region where every table is row-split, table-wise or
data-parallel at pooling 1; else `replay.engine.cluster_route`'s two passes: record each
key's block, then lay the keys out rank after rank), giving every rank its lookups in
trace order as a `BatchRange` of *rank-local* keys, which that rank's policy processes
(an LRU over few rows by a map a row: `replay.engine.cluster_lru`). Never one pass over
the trace per GPU. The routing runs in a thread of its own a range ahead of the policies
(`_routed_ahead`; its kernels release the GIL), at the caller's priority: on two cores
it overlaps the policies as the one-GPU replay's reader overlaps its policy. That thread
also takes the source's ranges and groups consecutive ones until each rank's policy gets
about `RANK_LOOKUPS` lookups a call (`grouped_ranges`; see `RANK_LOOKUPS`), routing a
group's ranges where they lie (no copy of their keys). Taking the ranges in the caller's
thread, as before, let the source make them only while the caller waited (it makes
`threads + AHEAD` row groups ahead of the thread that takes them), so the source and the
policies hardly overlapped once the groups grew. docs/performance.md has the figures.

Rank-local keys. Each rank's cache sees only the rows of its shards, renumbered: its
shards in table order (`Placement.shards`' order) are laid end to end, a shard of rows
[a, b) of table t taking local keys [o, o + b - a) (a column block counts its table's
rows; a data-parallel replica the whole table). So a policy's per-key state
(`state_bytes_per_key`: LFU 4 B, TBE's LFU 8 B, ...) and its hash tables are sized by the
rows on the rank, not by all rows: each rank's `PolicyContext` has the shards as its
tables. This is what FBGEMM's TBE does per rank: TorchRec builds each rank's TBE over the
rank's local shards (`cache_hash_size_cumsum` over their local rows), so the TBE's set
hash of a local index is the hash a real rank computes. With one GPU (one table-wise
rank) the local keys are the global keys and the replay equals `replay_trace`.

Kernels (`replay.engine.kernels`). Where every table is `hbm` (the default whenever the
tables fit the GPUs' HBM), each rank's policy serves all its rows, as above (but
`ssd-tbe`'s, which serves only `ssd` tables: a table in HBM never reaches the drives).
Where a table left HBM, each rank's policy serves only its cached shards (`uvm-caching`, or
`ssd` under ssd-tbe: their keys renumbered end to end, a cache of sum ceil(clf x rows)
rows, TorchRec's one cache a TBE group with the rows' weighted load factor), and the
other shards' lookups are counted per batch, vectorized (`RankSplit.split`): an `hbm`
shard's as hits of the fast tier and its update rows updated there, a `uvm` shard's as
misses served from the backing tier over the lookup link without a fill (`BYPASS`) and
its update rows written there. ssd-tbe's L2 and store rows (`Policy.store_rows`) go to
each rank's account, so its drives' reads and writes are priced per GPU. Per GPU the
HBM, PCIe and drive bytes (`replay.engine.cluster_time.rank_traffic`) are columns
(`rank_hbm_bytes`, ...) and totals of each rank.

Policies that need a pass over the future (`prepare`: belady, hot without warm-up,
chunk's furthest-next-use) are refused for now (they would need the per-rank future).
`policy.capacity_rows` / `capacity_bytes` are per GPU; a row's state bytes are the full
row's (a column block's rows hold fewer bytes: a byte budget then holds fewer of them
than it could -- ASSUMPTION).

Which sample a lookup belongs to. The trace format records no sample (bag) column
(`replay/trace/format.py`: `batch, table, row`), but it orders the lookups by (batch,
table) and, within a (batch, table) group, in sample order: the generator writes sample
i's `pooling` lookups at positions i x pooling ... i x pooling + pooling - 1
(`replay/workload/sampler.py` `generate_lookups`; on-the-fly workloads use the same
kernel, `replay/workload/onthefly.py`). So the lookup at position p of a group of n
lookups belongs to sample ``s = p x B // n`` (B the batch size): ``p // pooling`` when
n = B x pooling, and an even spread when a group's length is not a multiple (ingested
traces with missing values -- ASSUMPTION, the format cannot say better).

Which rank owns a sample. The global batch is split evenly across the world, as
TorchRec's data-parallel input split (each rank reads its own local batch of B / W
samples; `torchrec.distributed` `KJTAllToAll` sends each feature's ids to the shards and
the pooled embeddings come back to the sample's rank): rank r owns samples
``[ceil(r B / W), ceil((r + 1) B / W))``, i.e. sample s is owned by ``s W // B``.

Routing (TorchRec's semantics, `replay/system/sharding.py`):

- table-wise, row-wise, table-row-wise: each lookup to the rank owning its row's block;
- column-wise: each lookup to every column block of its table (every block's rank looks
  the row up for its columns; a rank holding two blocks looks it up twice);
- data-parallel: each lookup to the rank that owns its sample (every rank holds the
  table, TorchRec's `DataParallel` sharding); its lookups go through that rank's cache
  like any shard's (ASSUMPTION: TorchRec keeps a data-parallel table dense in HBM, with
  no cache; a cache large enough for the small tables the sharder replicates holds them
  after their first misses).
- update rows (the optimizer step): to the rank owning the row; a column-wise row to
  every block; a data-parallel row to every rank (the all-reduced gradient updates every
  replica).

The all-to-all (per batch). TorchRec's collectives (the default): the input
distribution of ids and lengths, the forward embeddings (an all-to-all for table-wise
and column-wise, a reduce-scatter of whole [batch, dim] partial sums for row-wise, in
the node then across nodes for table-row-wise) and the backward gradients, per sharding
group, as `replay.engine.collectives` says with its sources; the routing kernels count
the ids each rank sends to and receives from the others, the rest follows from the
placement and the batch size. The lower bound (`lower-bound`; bytes as fp32, 4 B a
value):

- forward, for each (table, sample) bag: every rank that holds lookups of the bag sends
  the bag's pooled embedding (row-wise/table-wise: dim x 4 B; column-wise: its block's
  cols x 4 B) to the rank that owns the sample; nothing when they are the same rank, and
  nothing from a rank holding no lookup of the bag. A lower bound: TorchRec's row-wise
  sharding reduce-scatters the whole [B, dim] partial sums from every shard
  (`RwPooledEmbeddingDist`, `PooledEmbeddingsReduceScatter`), including the samples a
  shard holds no row of, and sends the ids first.
- table-row-wise (TorchRec's `twrw_sharding.py`, groups from `comm.py`
  `intra_and_cross_node_pg`): the partial sums are first reduce-scattered inside the
  table's node, to the GPU with the same local index as the sample's owner (NVLink;
  nothing from that GPU itself), which sends one pooled embedding (dim x 4 B) to the
  owner across nodes (nothing when the owner is that GPU).
- backward: the same bytes in the other direction (the gradients of the pooled
  embeddings), so a batch's all-to-all bytes are 2 x the forward bytes, split into
  intra-node (same node) and inter-node bytes.
- time (both models' all-to-alls): per rank and direction, intra-node ``max(sent,
  received) / intra_node_bw`` (per GPU, full duplex) plus the inter-node ``max(sent,
  received) / (nics_per_node x nic_bw / gpus_per_node)`` (the node's NICs shared evenly
  by its GPUs), plus each fabric's
  latency once when the rank moves bytes over it. Intra- and inter-node parts add (no
  overlap -- ASSUMPTION, conservative); the all-to-all takes the slowest rank's time
  (a collective ends when its last rank does); forward and backward each take it.
- data-parallel tables send nothing in the all-to-all; their gradients and the dense
  model's (`model.dense_params`) are all-reduced every batch by a ring (NCCL's ring
  all-reduce; Patarasuk & Yuan 2009): each rank sends and receives 2 (W - 1) / W x S
  bytes, S = 4 x (dense params + the data-parallel tables' rows x dim) -- the whole
  dense gradient, not only the rows touched (ASSUMPTION: DDP all-reduces the dense
  gradient tensor). Its time is 2 (W - 1) / W x S over the slowest link the ring crosses
  (the inter-node per-GPU bandwidth when there is more than one node) plus the
  latencies of that link: a ring's 2 (W - 1) steps, or NCCL's double binary trees'
  2 ceil(log2 W) (NVIDIA, "Massively Scale Your Deep Learning Training with NCCL 2.4",
  2019: trees keep the ring's bandwidth at a latency logarithmic in W; Sanders, Speck
  and Traeff 2009), whichever is faster: NCCL's tuner picks the algorithm per message
  size (ASSUMPTION: it picks the faster one of this model; at 64 GPUs a ring's 126
  latencies of 5 us alone would be 0.63 ms). Of the ring's W links per step, `nodes`
  cross nodes (when nodes > 1): those are the inter-node bytes.

Load imbalance per batch: max / mean of the per-rank lookups (1.0 for a batch with no
lookups).

Memory: per rank, its policy's state over its own rows (`state_bytes_per_key` x rows on
the rank + the cache's slots); per range (ranges grouped up to `range_lookups`: 8 M
lookups at 64 GPUs and more), its keys (and those of the next group, gathered while the
routing thread waits for a buffer), the routed keys (4 B a routed lookup where every
rank's keys fit in 32 bits, else 8, in a ring of `RING` buffers: the range in the
policies and the one routed ahead) and 4 B a lookup for the record pass (kept across
ranges); per
batch, 3 x W int64 per-rank columns (lookups, hits, misses) and 2 x W float64 (the
all-to-all bytes each rank sends and receives) -- 2.5 KB a batch at 64 GPUs; per range,
the kernels' all-to-all counts, (1 + groups) x 4 x W int64 a batch. A range is cut to
at most `RANGE_CELLS` (batch, GPU) cells (`split_ranges`): 65,536 GPUs on a range of 200
batches took 5.1 GB in the accounting's columns at once. `replay.runs.run_memory`
estimates it all before a run starts.
"""

from __future__ import annotations

import dataclasses
import math
import queue
import threading
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from replay import _signals
from replay._threads import WAIT_SLICE_S
from replay.engine.cluster_direct import DirectRouter
from replay.engine.cluster_lru import rank_class
from replay.engine.cluster_parts import route_parts
from replay.engine.cluster_route import DP, Router
from replay.engine.cluster_time import RankAccount, local_batch
from replay.engine.collectives import CollectiveModel
from replay.engine.kernels import rank_splits
from replay.engine.placement import row_state_bytes
from replay.engine.replay import workload_shape
from replay.errors import ConfigError
from replay.policies import POLICIES
from replay.policies.base import (
    BYPASS,
    HITS,
    MISSES,
    NUM_COUNTERS,
    UPDATES_BACKING,
    UPDATES_FAST,
    Policy,
    PolicyContext,
)
from replay.system.sharding import (
    DATA_PARALLEL,
    Placement,
)
from replay.system.spec import BYTES_PER_VALUE, SystemSpec
from replay.trace.keys import table_offsets
from replay.trace.stream import (
    BatchRange,
    distinct_bitmap,
    distinct_kernel,
    iter_batch_ranges,
    split_ranges,
)
from replay.workload.source import Source

# (batch, GPU) cells of a batch range at most: what a range's per-GPU arrays hold (the
# counters, the routed counts, the accounting's ~50 columns: ~0.1 GiB at this size), so
# many GPUs take fewer batches a range; one batch at least
RANGE_CELLS = 1 << 18
# Lookups a rank's policy takes in one call, at least where the source's ranges allow: the
# routing thread groups consecutive ranges until their lookups reach RANK_LOOKUPS x world
# (at most RANGE_LOOKUPS, and RANGE_CELLS cells). A policy's state comes into the CPU's
# caches anew at every call, and over 64 GPUs the state of all of them (~6 MB each at
# 100,000 rows) is far larger than the last-level cache: criteo-kaggle, 64 GPUs
# row-wise, the policies took 12.0 ns a lookup in ranges of 20 batches (16,000 lookups a
# rank), 10.3 at 40, 9.0 at 80 and 8.8 at 100 (one GPU's LRU: 9 ns); on a VM loaded to
# 13-17, thread CPU time, 11.2-12.0 ns at 65,536 lookups a rank, 8.7-9.5 at 131,072,
# 7.6-8.1 at 262,144 (one GPU's LRU 10.6-12.1 in the same runs). The larger groups cost
# memory made afresh every run (the block records and the ring of routed keys: 3 x 4 B a
# lookup of a group), whose page faults on the VM took 1.4-2.8 s of system time a run at
# 262,144 against 0.1-0.7 at 131,072 (3 pairs, load 11-13): 131,072 it is, 8 M lookups
# a group at 64 GPUs, ~180 MB (its parts' keys, the records, the ring, the next group
# gathered while it waits); peak RSS 660 -> 782 MB (row-wise), 634 -> 700 MB (auto).
RANK_LOOKUPS = 1 << 17
RANGE_LOOKUPS = 1 << 23
# the routed ranges alive at once: the caller's and the one routed ahead
RING = 2
# the first group of ranges at 1 / 2^RAMP of the others (`grouped_ranges`): the policies
# start once it is routed, not after a whole group of 8 M lookups
RAMP = 2


@dataclass(frozen=True, eq=False)
class ClusterResult:
    """A cluster replay's counters. `columns`: per batch (length batches) and per batch
    per rank (shape batches x world), int64 counts and float64 bytes and seconds; `ranks`:
    one dict per rank (`rank`, `node`, `lookups`, `hits`, `misses`, `rows`, `shards`,
    `capacity_units`, `state_bytes`); `totals`: the whole run."""

    placement: Placement
    columns: dict[str, np.ndarray]
    ranks: list[dict[str, Any]]
    totals: dict[str, Any]
    timings: dict[str, float]
    # per batch, the columns of a one-GPU run's batches.parquet for the whole cluster
    # (`replay.engine.cluster_time`: counts summed over the GPUs, times the slowest's,
    # `time_s` the step time), then the network's
    batch_columns: dict[str, np.ndarray] = field(default_factory=dict)
    rank_updates: np.ndarray | None = None  # batches x world: update rows per rank
    capacity_units: int = 0  # every GPU's cache, summed
    unit_rows: int = 1
    summary_extra: dict[str, Any] = field(default_factory=dict)  # rank 0's policy's


class _Distinct:
    """The ranges' distinct rows per batch: the reader's, or counted here for a source
    that does not count them, over one bitmap kept across ranges (`distinct_kernel`
    leaves it clear)."""

    def __init__(self, total_keys: int) -> None:
        self.total_keys = total_keys
        self.seen: np.ndarray | None = None

    def __call__(self, br: BatchRange) -> np.ndarray:
        if br.distinct is not None:
            return br.distinct
        if self.seen is None:
            self.seen = distinct_bitmap(self.total_keys)
        out = np.zeros(br.batches, dtype=np.int64)
        distinct_kernel(br.keys, br.bounds, self.seen, out)
        return out


def make_rank_policy(
    system: SystemSpec,
    shard_rows: list[int],
    num_batches: int,
    embedding_dim: int,
    cache_rows: int | None = None,
    direct: bool = False,
) -> Policy:
    """Rank r's policy over its own rows: its shards (`shard_rows`, local order) are its
    tables, `policy.capacity_*` its own capacity (per GPU); `cache_rows`: a cache of
    that many rows instead (a mixed placement's cached shards, `replay.engine.kernels`);
    `direct`: an LRU found by a map a row where that is smaller (`cluster_lru`)."""
    if cache_rows is not None:
        policy_spec = dataclasses.replace(
            system.policy, capacity_rows=max(int(cache_rows), 1), capacity_bytes=0.0,
            cache_load_factor=0.0,
        )  # fmt: skip
        system = dataclasses.replace(system, policy=policy_spec)
        shard_rows = shard_rows or [1]  # no cached shard: an idle one-row table
    cls = POLICIES[system.policy.name]
    state = row_state_bytes(system, embedding_dim)
    unit_rows = cls.unit_rows(system.policy)
    rows = np.array(shard_rows, dtype=np.int64)
    offsets = table_offsets(rows)
    total = int(offsets[-1])
    cap = cls.capacity(system, unit_rows, state, total) if cls.cached else 0
    ctx = PolicyContext(
        total_keys=total,
        table_rows=rows,
        offsets=offsets,
        num_batches=num_batches,
        row_state_bytes=state,
        capacity_units=cap,
        unit_rows=unit_rows,
    )
    policy = (rank_class(cls, ctx) if direct else cls)(system.policy, ctx)
    if policy.needs_prepare():
        raise ConfigError(
            f"policy.name: {system.policy.name!r} with these knobs needs a pass over the "
            "future, which the cluster replay does not make yet; use lru, lfu, tbe or a "
            "warmed-up hot policy"
        )
    return policy


def allreduce_model(
    placement: Placement, dense_params: int, link: tuple[float, float, float, float]
) -> tuple[float, float, float, float]:
    """(bytes each rank sends, intra-node bytes in all, inter-node bytes in all, seconds)
    of one ring all-reduce of the dense gradient and the data-parallel tables'
    (module docstring: the ring's bytes, the faster of the ring's and the tree's
    latencies)."""
    world = placement.world
    size = BYTES_PER_VALUE * dense_params
    for t, shape in enumerate(placement.tables):
        if placement.entry(t).type == DATA_PARALLEL:
            size += BYTES_PER_VALUE * shape.rows * shape.dim
    if world == 1 or size == 0:
        return 0.0, 0.0, 0.0, 0.0
    per_rank = 2.0 * (world - 1) / world * size
    total = per_rank * world
    inter_links = placement.nodes if placement.nodes > 1 else 0
    inter = total * inter_links / world
    bw, lat = (link[2], link[3]) if placement.nodes > 1 else (link[0], link[1])
    steps = min(world - 1, math.ceil(math.log2(world)))  # ring or tree (docstring)
    seconds = per_rank / bw + 2 * steps * lat
    return per_rank, total - inter, inter, seconds


def range_lookups(world: int) -> int:
    """The lookups the cluster replay merges consecutive ranges up to (`RANK_LOOKUPS`)."""
    return min(RANGE_LOOKUPS, RANK_LOOKUPS * max(int(world), 1))


def grouped_ranges(
    ranges: Iterator[BatchRange],
    lookups: int,
    batches: int,
    *,
    ramp: int = 0,
    stop: int | None = None,
) -> Iterator[list[BatchRange]]:
    """Consecutive ranges in groups of at most `lookups` lookups and `batches` batches (a
    range larger alone is a group of its own), each to be merged (`merge_ranges`); a
    piece of a batch, or a range unlike the one before, starts a group of its own.
    `ramp`: the first group takes at most lookups >> ramp, each next one twice as many
    as the one before, up to `lookups`; `stop` (the last batch + 1): a group takes at most
    half the batches left, rounded up. So a pipeline over the groups fills and drains in
    small groups: its first stage's first group and its last stage's last group run alone."""
    group: list[BatchRange] = []
    n = nb = 0
    limit = max(lookups >> ramp, 1)
    for br in ranges:
        alike = (
            group
            and br.tables is None
            and group[-1].tables is None
            and br.updates_are_lookups == group[-1].updates_are_lookups
            and (br.distinct is None) == (group[-1].distinct is None)
            and br.runs is None
        )
        half = batches if stop is None or not group else -(-(stop - group[0].batch_start) // 2)
        if group and (
            not alike or n + len(br.keys) > limit or nb + br.batches > min(batches, half)
        ):
            yield group
            group, n, nb = [], 0, 0
            limit = min(2 * limit, lookups)
        group.append(br)
        n += len(br.keys)
        nb += br.batches
    if group:
        yield group


def _joined_bounds(parts: list[np.ndarray]) -> np.ndarray:
    """Consecutive ranges' batch bounds end to end, from 0."""
    out = np.zeros(sum(len(p) - 1 for p in parts) + 1, dtype=np.int64)
    at = base = 0
    for p in parts:
        out[at + 1 : at + len(p)] = p[1:] - p[0] + base
        at += len(p) - 1
        base = out[at]
    return out


def merge_ranges(group: list[BatchRange]) -> BatchRange:
    """One range of a group of consecutive, alike ranges (`grouped_ranges`)."""
    if len(group) == 1:
        return group[0]
    first = group[0]
    with_ukeys = all(len(br.update_keys) == br.update_bounds[-1] for br in group)
    return dataclasses.replace(
        joined_counts(group),
        keys=np.concatenate([br.keys for br in group]),
        update_keys=(
            np.concatenate([br.update_keys for br in group]) if with_ukeys else first.keys[:0]
        ),
    )


def joined_counts(group: list[BatchRange]) -> BatchRange:
    """The range a group of consecutive, alike ranges makes, without its keys (empty):
    its batches, bounds, update bounds and distinct counts."""
    first = group[0]
    return dataclasses.replace(
        first,
        batch_stop=group[-1].batch_stop,
        keys=first.keys[:0],
        bounds=_joined_bounds([br.bounds for br in group]),
        update_keys=first.keys[:0],
        update_bounds=_joined_bounds([br.update_bounds for br in group]),
        distinct=(
            None if first.distinct is None else np.concatenate([br.distinct for br in group])
        ),
    )


def _routed_ahead(
    groups: Iterator[list[BatchRange]],
    route: Callable[[BatchRange, list[BatchRange]], tuple],
) -> Generator[tuple[BatchRange, tuple] | None, None, None]:
    """None once the thread has started (the caller sets up meanwhile), then (range,
    route(range, parts)) of each group of ranges, routed one range ahead in a thread of
    its own at the caller's priority (it is the critical path; `read_ahead`'s helper at a
    lower priority measured no faster), which also takes the source's ranges (so the
    source makes them while the caller works, not only while it waits): while the
    caller works on range k, range k + 1 is routed, and range k + 2 only once the caller
    has asked for k + 1 (`Router`'s ring of `RING` holds k and k + 1). Where the caller
    needs no keys (the source counts the distinct rows: `_Distinct`), a group's parts
    are routed where they lie (`replay.engine.cluster_parts`) and the range handed on
    holds no keys; else the group is merged (`merge_ranges`) and routed as one range."""

    def work(group: list[BatchRange]) -> tuple[BatchRange, tuple]:
        if len(group) > 1 and all(br.distinct is not None for br in group):
            br = joined_counts(group)
            routes = route(br, group)
            group.clear()  # the parts' keys go now, not when the next group comes
            return br, routes
        br = merge_ranges(group)
        group.clear()
        routes = route(br, [br])
        if br.distinct is not None:  # the caller needs no keys (`_Distinct`): they go too
            none = br.keys[:0]
            br = dataclasses.replace(br, keys=none, update_keys=none)
        return br, routes

    done = object()
    slots: queue.Queue[Any] = queue.Queue()
    # a routed range holds one of the router's `RING` buffers until the caller asks for
    # the next: the thread routes a range only with a buffer free
    free = threading.Semaphore(RING)
    cancel = threading.Event()

    def produce() -> None:
        try:
            for group in groups:  # the source's ranges are made while the caller works
                while not free.acquire(timeout=WAIT_SLICE_S):
                    if cancel.is_set():
                        return
                if cancel.is_set():
                    return
                slots.put(work(group))
        except BaseException as exc:  # handed to the caller
            slots.put(exc)
            return
        finally:
            close = getattr(groups, "close", None)
            if close is not None:
                close()
        slots.put(done)

    worker = threading.Thread(target=produce, name="cluster-route", daemon=True)
    worker.start()
    try:
        yield None  # started: the caller does its own set-up meanwhile
        held = False
        while True:
            if held:  # the caller is done with the range it had
                free.release()
            try:
                item = slots.get(timeout=WAIT_SLICE_S)  # in slices: `wait_for`
            except queue.Empty:
                held = False
                continue
            held = True
            if item is done:
                break
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        cancel.set()
        free.release()
        # interrupted: the range in flight is abandoned (a daemon thread), not waited for
        while worker.is_alive() and _signals.received() is None:
            worker.join(timeout=0.05)


def cluster_link(cluster: Any, gpus_per_node: int) -> np.ndarray:
    """The routing kernels' link array of `cluster` (`route_lookups`'s `link`): intra bw,
    intra latency, inter bw per GPU (1.0 without NICs), inter latency."""
    inter_bw = cluster.nics_per_node * cluster.nic_bw_bytes_per_s / gpus_per_node
    return np.array(
        [
            cluster.intra_node_bw_bytes_per_s,
            cluster.intra_node_latency_s,
            inter_bw if inter_bw > 0 else 1.0,
            cluster.inter_node_latency_s,
        ],
        dtype=np.float64,
    )


def collective_model(
    cluster: Any, placement: Placement, batch_size: int, link: np.ndarray
) -> CollectiveModel:
    """The all-to-all model `cluster` names (`all_to_all_model`: TorchRec's collectives
    or the lower bound; `replay.engine.collectives`)."""
    return CollectiveModel(
        placement, batch_size, link, model=cluster.all_to_all_model,
        index_bytes=cluster.index_bytes, length_bytes=cluster.length_bytes,
    )  # fmt: skip


def replay_cluster(
    source: Source,
    system: SystemSpec,
    placement: Placement,
    on_progress: Callable[[int, int], None] | None = None,
) -> ClusterResult:
    """Replay every batch of `source` on the cluster `placement` lays out: one cache per
    GPU of `system`'s policy (`policy.capacity_rows` per GPU), one pass over the source.
    `system.cluster` gives the links (the defaults of `ClusterSpec` when None).
    on_progress(batches_done, batches) after each batch range."""
    from replay.system.spec import ClusterSpec

    started = time.perf_counter()
    cluster = system.cluster or ClusterSpec(
        nodes=placement.nodes, gpus_per_node=placement.gpus_per_node
    )
    if (cluster.nodes, cluster.gpus_per_node) != (placement.nodes, placement.gpus_per_node):
        raise ConfigError(
            f"cluster: the plan is for {placement.nodes} x {placement.gpus_per_node} GPUs, "
            f"the system has {cluster.nodes} x {cluster.gpus_per_node}"
        )
    rows = np.asarray(source.table_rows, dtype=np.int64)
    if [t.rows for t in placement.tables] != rows.tolist():
        raise ConfigError("cluster: the placement's tables are not the source's tables")
    shape = workload_shape(source, system)
    batch = shape.batch_size
    if batch <= 0:
        raise ConfigError("cluster: the source names no batch size (samples per batch)")
    world, gpn = placement.world, placement.gpus_per_node
    if placement.nodes > 1 and cluster.nics_per_node * cluster.nic_bw_bytes_per_s <= 0:
        raise ConfigError("cluster: more than one node needs NICs (nics_per_node, nic_bw)")
    link = cluster_link(cluster, gpn)
    offsets = table_offsets(rows)
    # None: every table in HBM, the policy over every row (not ssd-tbe's: kernels.py)
    splits = rank_splits(placement, always=system.policy.name == "ssd-tbe")
    router = Router(placement, offsets, batch, ring=RING, narrow=splits is None)
    lay = router.lay
    most_lookups = int(getattr(source, "num_lookups", 0)) or range_lookups(world)
    direct = DirectRouter(router, min(range_lookups(world), most_lookups))
    collectives = collective_model(cluster, placement, batch, link)
    nb = source.num_batches
    net: dict[str, np.ndarray] = {}  # the all-to-all's columns (`CollectiveModel.columns`)
    wait_s = 0.0
    policy_s = 0.0
    account_s = 0.0
    # Where each batch's update rows are its distinct lookups (an on-the-fly source that
    # steps every batch, which still makes the update keys) and no table is replicated
    # (a data-parallel row's update goes to every replica, its lookup to one), a rank's
    # update rows are its own distinct lookups: a policy that can take them so
    # (`updates_from_lookups`, as `replay_trace` gives them) gets their count per batch
    # and no keys, and the update keys are only counted per rank, not laid out.
    derive = (
        POLICIES[system.policy.name].updates_from_lookups
        and bool(getattr(source, "updates_are_lookups", False))
        and getattr(source, "generated_ranges", None) is not None
        and not bool((lay.kind == DP).any())
        and splits is None
    )
    replay_start = time.perf_counter()
    most = max(RANGE_CELLS // world, 1)
    ranges = grouped_ranges(
        split_ranges(
            iter_batch_ranges(
                source, with_updates=True, with_distinct=True, updates_from_lookups=derive
            ),
            most,
        ),
        range_lookups(world),
        most,
        ramp=RAMP,
        stop=source.num_batches,
    )
    route_took = [0.0]

    def route_one(br: BatchRange, parts: list[BatchRange]) -> tuple:
        t0 = time.perf_counter()
        # the update keys are there to count (an on-the-fly source makes them)
        derived = br.updates_are_lookups
        assert not derived or all(len(p.update_keys) == p.update_bounds[-1] for p in parts)
        traffic = collectives.buffers(br.batches)
        routes = None
        if direct.on and all(p.tables is None for p in parts):
            routes = direct.route(parts, traffic, not derived)  # one pass (None: it could not)
        if routes is None:
            if len(parts) == 1:
                routes = router.route(parts[0], traffic, not derived)
            else:
                routes = route_parts(router, parts, traffic, not derived)
            direct.learn(routes[0])  # the next group's regions
        for name, values in collectives.columns(*traffic).items():
            if name not in net:
                net[name] = np.zeros((nb, *values.shape[1:]), dtype=np.float64)
            net[name][br.batch_start : br.batch_stop] = values
        route_took[0] += time.perf_counter() - t0
        return routes

    # the routing thread starts taking the source's ranges now, while this thread builds
    # the policies (64 caches of 100,000 rows: 365 MB allocated and partly filled)
    routed = _routed_ahead(ranges, route_one)
    next(routed)
    try:
        policies = [
            make_rank_policy(system, lay.rank_rows[r], nb, shape.embedding_dim, direct=True)
            if splits is None
            else make_rank_policy(
                system, splits[r].cached_rows, nb, shape.embedding_dim, splits[r].cache_rows
            )
            for r in range(world)
        ]
        has_store = policies[0].store_rows() is not None if policies else False
        rank_lookups = np.zeros((nb, world), dtype=np.int64)
        rank_hits = np.zeros((nb, world), dtype=np.int64)
        rank_misses = np.zeros((nb, world), dtype=np.int64)
        rank_updates = np.zeros((nb, world), dtype=np.int64)
        unit_rows = policies[0].ctx.unit_rows
        acc = RankAccount(system, shape, world, nb, unit_rows)
        lookups = np.zeros(nb, dtype=np.int64)
    except BaseException:
        routed.close()
        raise
    t_wait = time.perf_counter()
    distinct = _Distinct(int(offsets[-1]))
    for item in routed:
        assert item is not None
        br, routes = item
        t1 = time.perf_counter()
        wait_s += t1 - t_wait
        n = br.batches
        window = slice(br.batch_start, br.batch_stop)
        derived = br.updates_are_lookups
        counts, keys, kstarts, kbounds, ucounts, ukeys, ustarts, ubounds = routes
        rank_lookups[window] = counts
        lookups[window] = np.diff(br.bounds)
        rank_updates[window] = ucounts
        out = np.zeros((world, n, NUM_COUNTERS), dtype=np.int64)
        for r, policy in enumerate(policies):
            # a rank's keys from its start (the one-pass routing leaves gaps between ranks)
            k, kb = keys[kstarts[r] : kstarts[r] + kbounds[r, -1]], kbounds[r]
            uk, ub = ukeys[ustarts[r] : ustarts[r] + ubounds[r, -1]], ubounds[r]
            if splits is not None:  # `hbm` and `uvm` shards' lookups counted, not cached
                k, kb, hbm_n, uvm_n = splits[r].split(k, kb)
                uk, ub, hbm_u, uvm_u = splits[r].split(uk, ub)
            rb = BatchRange(
                br.batch_start, br.batch_stop, k, kb, uk, ub, updates_are_lookups=derived
            )
            policy.process(rb, out[r])
            if splits is not None:
                o = out[r]
                o[:, HITS] += hbm_n  # whole in HBM: every lookup a hit, updated there
                o[:, UPDATES_FAST] += hbm_u
                o[:, MISSES] += uvm_n  # host memory without a cache: read over PCIe
                o[:, BYPASS] += uvm_n
                o[:, UPDATES_BACKING] += uvm_u
        t2 = time.perf_counter()
        rank_hits[window] = out[:, :, HITS].T
        rank_misses[window] = out[:, :, MISSES].T
        store = (
            np.stack([np.asarray(p.store_rows())[window] for p in policies]) if has_store else None
        )
        acc.add(window, out, counts.T, ucounts.T, distinct(br), store)
        t_wait = time.perf_counter()
        policy_s += t2 - t1
        account_s += t_wait - t2
        if on_progress is not None:
            on_progress(br.batch_stop, source.num_batches)
    replay_s = time.perf_counter() - replay_start
    ar_rank, ar_intra, ar_inter, ar_s = allreduce_model(
        placement, system.model.dense_params, tuple(link)
    )
    if not net:  # no batch
        net = {k: v[:0] for k, v in collectives.columns(*collectives.buffers(0)).items()}
    routed = rank_lookups.sum(axis=1)
    mean = routed / world
    imbalance = np.where(routed > 0, rank_lookups.max(axis=1) / np.maximum(mean, 1e-300), 1.0)
    columns: dict[str, np.ndarray] = {
        "lookups": lookups,  # the trace's
        "routed_lookups": routed,  # served by the ranks (a column-wise lookup once a block)
        "rank_lookups": rank_lookups,
        "rank_hits": rank_hits,
        "rank_misses": rank_misses,
        **net,  # all_to_all_bytes (every phase), its parts, all_to_all_s, per rank
        "allreduce_bytes_per_rank": np.full(nb, ar_rank),
        "allreduce_s": np.full(nb, ar_s),
        "imbalance": imbalance,
    }
    batch_columns = acc.finish(columns["all_to_all_s"], columns["allreduce_s"])
    columns["rank_time_s"] = acc.rank_time_s
    for name, values in acc.rank_traffic.items():
        columns[f"rank_{name}"] = values
    columns["step_time_s"] = batch_columns["time_s"]
    ranks = []
    for r, policy in enumerate(policies):
        ranks.append(
            {
                "rank": r,
                "node": placement.node_of(r),
                "lookups": int(rank_lookups[:, r].sum()),
                "hits": int(rank_hits[:, r].sum()),
                "misses": int(rank_misses[:, r].sum()),
                "rows": int(sum(lay.rank_rows[r])),
                "shards": len(lay.rank_rows[r]),
                "capacity_units": int(policy.ctx.capacity_units),
                "state_bytes": int(type(policy).state_bytes_per_key * policy.ctx.total_keys),
                "updates": int(rank_updates[:, r].sum()),
                "time_s": float(acc.rank_time_s[:, r].sum()),
                "all_to_all_sent_bytes": float(net["rank_all_to_all_sent_bytes"][:, r].sum()),
                "all_to_all_received_bytes": float(
                    net["rank_all_to_all_received_bytes"][:, r].sum()
                ),
                # what its kernels moved (replay.engine.cluster_time.rank_traffic)
                **{name: float(v[:, r].sum()) for name, v in acc.rank_traffic.items()},
            }
        )
    totals = {
        "world": world,
        "lookups": int(lookups.sum()),
        "routed_lookups": int(rank_lookups.sum()),
        "all_to_all_model": collectives.model,
        "all_to_all_bytes": float(columns["all_to_all_bytes"].sum()),
        "all_to_all_s": float(columns["all_to_all_s"].sum()),
        "allreduce_intra_bytes_per_batch": ar_intra,
        "allreduce_inter_bytes_per_batch": ar_inter,
        "imbalance_mean": float(imbalance.mean()) if nb else 1.0,
        "imbalance_max": float(imbalance.max()) if nb else 1.0,
        "local_batch": local_batch(batch, world),
        "step_time_s": float(columns["step_time_s"].sum()),
        "step_time_s_mean": float(columns["step_time_s"].mean()) if nb else 0.0,
        "rank_time_s_max_mean": float(acc.rank_time_s.max(axis=1).mean()) if nb else 0.0,
    }
    total_s = time.perf_counter() - started
    timings = {
        "replay_s": replay_s,
        "route_s": route_took[0],  # in the routing thread
        "route_wait_s": wait_s,  # the policies' thread waiting for a routed range
        "policy_s": policy_s,
        "account_s": account_s,
        "total_s": total_s,
        "lookups_per_s": int(lookups.sum()) / total_s if total_s > 0 else 0.0,
    }
    return ClusterResult(
        placement, columns, ranks, totals, timings, batch_columns, rank_updates,
        sum(int(p.ctx.capacity_units) for p in policies), unit_rows,
        policies[0].summary_extra() if policies else {},
    )  # fmt: skip


__all__ = [
    "ClusterResult",
    "allreduce_model",
    "cluster_link",
    "collective_model",
    "make_rank_policy",
    "replay_cluster",
]
