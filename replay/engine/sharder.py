"""The automatic sharder (`cluster.sharding=auto`): a sharding plan that balances the
per-GPU cost the workload's tables impose, under each GPU's memory.

Placement. The sharder turns costs the engine measures from the workload into a plan, so
it lives in `engine/`, beside the replay that measures them and above the plan's data
and validation (`replay/system/sharding.py`). It is pure: loads in, a `ShardingResult`
out.

Cost model (the assumptions, each stated so a user can hold a plan of their own against
it with `rank_costs`):

- A table's cost per batch is ``lookup x lookups + miss x misses + byte x bytes_held``
  (`CostModel`; default: lookups only, one unit per full-row lookup). A block of columns
  costs its share of the columns (bytes read). A block of rows costs its share of the
  table's lookups: with the load's `mass` (`replay.workload.row_mass.RowMass`: the
  generator's own pmf and row permutation for a workload spec, or the rows counted from
  a trace's first batches, `replay.engine.placement`) the lookup mass of its rows;
  without one, its share of the rows (lookups spread uniformly). Generated and real
  workloads are power laws, so a block holding a table's hottest rows gets far more than
  its share of the rows: on `criteo-terabyte` at 64 GPUs the uniform model's plan (even
  blocks) is 1.04 modeled and 2.80 measured (max / mean per-GPU lookups); the mass
  model's is 1.151 modeled and 1.157 measured (below).
- Data-parallel: every GPU looks up the rows of its own samples, so the access part is
  divided by the number of GPUs, and every GPU holds (and pays the memory term of) the
  whole table, and sends its share of the ring all-reduce of the table's gradient every
  batch: ``AR = replica_byte x 2 (W - 1) / W x 4 x dim x rows`` per GPU (issue 41;
  `replay.engine.cluster.allreduce_model`'s bytes, fp32, the whole gradient).
  `replica_byte` converts bytes to the lookup unit; 0 (`CostModel()`'s default) is the
  lookups-only model, replication's network free. `replay.engine.placement` builds it
  from the system: seconds per byte of the slowest link the ring crosses over seconds per
  lookup (the GPU's cache hit as the one-GPU account prices it, plus the lookup's pooled
  embedding in the all-to-all; that module states the assumptions). Not priced: the
  all-to-all a replica's lookups no longer send (conservative against replication) and
  the ring's latency (paid by the dense gradient anyway).
- A row is never split: the GPU that holds a row does all its lookups; a table of fewer
  than 1,000 rows (`shard_cost.TINY_ROWS`) is never split at all: whole on one GPU or
  replicated.
- A split costs every GPU holding a block its collective (`CostModel.row_wise`,
  `table_row_wise`: TorchRec's reduce-scatter of whole [batch, dim] partial sums, in the
  node for table-row-wise; `shard_cost` states the prices and assumptions), and a miss
  costs `miss` over a hit (a cached table's row over the link): with the system's prices
  (`replay.engine.placement.system_cost_model`) each GPU's cost is its modeled step time
  (embedding work and collectives) in lookups.
- Memory is each GPU's HBM: a table's footprint under its kernel (`TableLoad.hbm_bytes`;
  every row by default) within `gpu_memory_bytes`.
- Column-wise is never chosen: its blocks balance like row blocks, but each block still
  sees every lookup of its table (its hottest row's too), so it does not shrink the keys
  a GPU's cache sees (it stays available for users' plans).

The rule, deterministic (ties by table order, then by lower rank):

1. **Data-parallel** for the tables too hot to split. With H a table's hottest row's
   cost, D(S) the per-GPU access and memory cost of a set S of replicas, AR(S) their
   all-reduce and ``mean`` the per-GPU mean of the access and memory costs, no plan
   with the replicas S does better than

       F(S) = max(mean, D(S) + H(S)) + AR(S),   H(S) = the largest H outside S

   (some GPU holds that row, every GPU carries D and AR). For a given largest H the
   cheapest S replicates exactly the tables hotter than H (any other replica only adds
   to D and AR), so the sharder tries each table's H (and 0) as the threshold and keeps
   the set of the lowest F that fits memory (the replicas plus every GPU's share of the
   rest within a GPU's memory; ties: the fewest replicas). A table is replicated when
   its hot row costs more than its all-reduce saves: a 3-row table's 3 KB of gradient,
   not C23's 300 MB. With AR = 0 (`replica_byte = 0`) this replicates a table whose one
   row's cost (lookups / rows, no mass) exceeds the mean, and then each **tiny** table
   (``rows x world <= bags``: its all-reduce, 2 (W-1) x rows x dim x 4 B in all, sends
   less than the all-to-all of its pooled embeddings, 2 x bags x dim x 4 x (W-1)/W) is
   replicated too, in table order, while that keeps the floor and fits -- the network
   rule of the unpriced model; with AR > 0 the network is in F and the rule is F's own
   (a tiny table only raises F). If no placement of the rest fits, the largest replica
   is sharded instead, and the search runs again.
2. The rest, per granularity ``j = 1, 2, 3, ...``: with ``R`` the per-GPU mean of their
   cost and target ``s = R / j``, a table costing at most ``s`` stays whole (table-wise);
   the tables above it share ``round(sum of their costs / s)`` row blocks, apportioned by
   D'Hondt (Jefferson: the next block to the table of the largest cost per block), at
   most one block per row and per GPU and at least as many as its bytes need GPUs
   (doubled after each granularity whose blocks found no room). A table of k blocks is
   cut where its lookups balance: with a mass, `RowMass.split`'s contiguous blocks of
   about equal mass (the smallest largest block; a row heavier than the rest's share is
   a block of its own, so a hot block stands alone), none over the rows of an even
   block at the memory's count; without one, TorchRec's rule (ceil(rows / k) rows each).
   UNEVEN BLOCKS ARE OURS, and only replay replays them: TorchRec's training path
   routes row-wise ids in even blocks over every rank in rank order whatever the shard
   metadata says (`replay.system.sharding_rules`), so these plans say
   `torchrec_executable: false` (`auto-uneven`; the default `auto` is the executable
   mode below). The plan writes them as explicit `shards` (half-open row ranges). A
   user's `cluster.sharding = "row-wise"` or ``"table-row-wise"`` keeps even blocks. A
   split table whose k blocks fit one node's GPUs is table-row-wise (its partial sums
   stay on the node's NVLink), else row-wise.
3. Greedy longest-processing-time assignment: tables in decreasing order of their
   largest block; a table's blocks, largest first, go to the least-loaded distinct GPUs
   with memory free for them (a table-row-wise table to the node where that leaves the
   lowest maximum).
4. The first granularity whose max per-GPU cost is within `tolerance` of max(mean, the
   floor F of step 1) wins (the fewest blocks: every extra row block sends another
   partial sum per sample); if none is, the granularity of the lowest maximum (the
   search stops `PATIENCE` granularities past it: with splits priced, finer blocks only
   add collectives).
5. Whole tables are indivisible (26 tables on 8 GPUs leave one GPU 4): where the plan
   has more whole tables than GPUs, the cheapest replicas (their all-reduce under 1 / 8
   of their cost; without the all-reduce priced, step 1's tiny tables) are added 1, 2,
   3, 4, 6, 8, 12, 16 at a time and the plan of the lowest maximum wins
   (`_more_replicas`).

Bytes beside the time: the result reports each GPU's HBM bytes (`rank_hbm`) against
`bytes_bound` (no assignment of the chosen shards holds fewer on its fullest GPU:
max(mean, replicas + the largest shard)) and `bytes_floor` (no plan does:
max(HBM / W, the largest unsplittable piece)); the executable mode balances them within
2% of the best time (or 5% of the floor), then its bytes pass trades up to 10% of the
time floor (`shard_cost.STEP_SLACK`) for a tenth or more of the fullest GPU's bytes, and
it returns its time / bytes front (`sharder_even`). The floor of the time is also at
least `shard_cost.time_floor` (the least T with W x T covering each table's cheapest
total among its ways whose piece is at most T), so the module's bounds hold with priced
splits.

Bounds (returned with the plan). Every GPU's cost (`rank_cost`, `rank_costs`) includes
the replicas' all-reduce, AR (`ShardingResult.allreduce`), and so do ``mean`` here and
D, the data-parallel cost every GPU carries:

    LB    = max(mean, D + the largest unsplit shard's cost)                 (`lower_bound`)
    floor = min over replica sets S of max(mean(S), D(S) + H(S))  (`floor`, step 1's F)

``mean`` bounds the maximum of every plan; LB's second term bounds every assignment of the
chosen shards (some GPU holds the largest); the floor bounds every plan of the types the
sharder chooses (table-wise, row-wise, table-row-wise, data-parallel) whose replicas fit
(a row is the unsplittable unit: some GPU holds the hottest row of a table not
replicated; column-wise, priced by its share of the columns, splits a row's cost here,
though not its lookups). floor <= LB <= max. The result gives max / mean, max / LB and
max / floor. Measured on `criteo-terabyte` (26 tables of 3 to 40 M rows, 2,048 lookups and
bags each per batch, dim 128, fp32 + state 512 B a row, 40 GiB per GPU;
tests/test_sharding.py, tests/test_sharder_mass.py):

    uniform loads (no mass: the cost of a block is its share of the rows), LB = mean:
    GPUs (nodes x 8)  max/mean = max/LB  j  plan
    8 (1)             1.026              5  8 data-parallel, 18 row-wise in 2-3 blocks
    64 (8)            1.043              3  4 data-parallel, 6 table-row-wise in 8 blocks,
                                            16 row-wise in 9
    1,024 (128)       1.041              8  5 data-parallel, 21 row-wise in 63-437 blocks

    the generator's mass (`placement.spec_loads`), max/LB = max/floor:
    8 (1)             1.019  floor = mean     5  8 data-parallel, 18 row-wise in 2-3
    64 (8)            1.151  floor = 1.151    3  6 data-parallel, 20 row-wise in 9-10
    1,024 (128)       14.96  floor = 14.96    1  6 data-parallel, 20 row-wise in 10-55

    the system's cost model (`placement.system_cost_model`, hbm-lru on dgx-h100 nodes:
    replica_byte = 1.02e-3 in one node, 1.09e-3 at 64 GPUs, 9.7e-4 at 1,024), max/floor:
    8 (1)             1.032  floor = mean     7  26 row-wise in 2-3 (no replica)
    64 (8)            1.000  floor = 1.204    4  C6 data-parallel (AR 3.3), 24 row-wise
                                                 in 10-11, 1 table-row-wise in 4
    1,024 (128)       1.000  floor = 17.74    1  C6 data-parallel, 24 row-wise in 10-46,
                                                 1 table-row-wise in 4

The 24-day `criteo-terabyte` plan at 64 GPUs (`replay plan --workload criteo-terabyte
--batches 2135484 --system hbm-lru --set cluster.preset=dgx-h100 --set cluster.nodes=8
--set cluster.gpu_memory_bytes=40e9 ... --cache-budget 8GiB`; measured over 200 replayed
batches), per step:

    model                       replicas                       imbalance  all-reduce  step
    uniform loads (even blocks) 4 tiny                         2.8        0.7 ms      0.78 ms
    mass, lookups only          C6 C14 C16 C17 C19 C23         1.19       12.57 ms    12.61 ms
    mass + all-reduce priced    C6                             1.22       0.705 ms    0.758 ms
    (price = a hit only)        none                           1.45       0.705 ms    0.759 ms

The all-reduce of the dense gradient (475,985 parameters: 1.9 MB and 2 x 63 latencies of
5 us) is 0.70 ms of every plan's step; the all-to-all is 28-35 us, the embeddings ~11 us.

Lookups only, at 64 GPUs four 40 M-row tables have a value of 37.4% of their lookups (766 of 2,048 a
batch, Criteo 1TB's measured hot shares); no plan splits a row and their replicas (20 GB
each) do not fit, so a GPU does at least 766 + D = 958 lookups against a mean of 832: the
floor, 1.151, is the workload's, not the sharder's. Replayed (`GeneratedTrace`, 100
batches, `Placement.owner_ranks`), the plan's per-GPU lookups are 1.157 max / mean over
the run and 1.19 as the mean of each batch's max / mean (a GPU's lookups per batch are
binomial: the busiest of 64 is above its mean).

With `tolerance=0.02` the uniform 64-GPU plan reaches 1.012 (j = 7, 444 blocks instead of
192).

The TorchRec-executable mode (`torchrec_executable=True`, `cluster.sharding = "auto"`)
keeps step 1 with the finest executable split as a table's unsplittable unit (its
costliest even block over all W GPUs, or over a node's G, plus the split's collective)
and replaces steps 2-4 by `replay.engine.sharder_even.search_executable`: whole tables,
table-row-wise over one node's GPUs in order or row-wise over every rank in order,
always in TorchRec's even blocks.

The numbers above are issue 41's (lookups priced, splits free, every table splittable).
With issue 53's model (splits and misses priced, tables under 1,000 rows never split;
hbm-lru on DGX H100 nodes, 40 GB a GPU, the generator's mass; tests/test_sharder_budget.py):
criteo-terabyte at 8 GPUs, 24 tables whole and the 3- and 4-row C6 and C17 replicated,
1.000 max / mean, the fullest GPU 19.8 GiB against a bound of 19.1 (C1 whole); at 64
GPUs the five 25-40 M-row tables table-row-wise in a node and the rest whole, at the
floor (1.82x the mean: the even block holding a 40 M-row table's hot value), 2.38 GiB
on the fullest GPU where every table whole held 19.1. A 400-table, 2-billion-row model
on 64 GPUs: the 20 largest tables table-row-wise and 11 of 2-3 rows replicated (the bytes
pass), 1.100 of the floor, 17.1 GiB on the fullest GPU (34.7 at 1.031 with the four
largest split, 42.8 with every table whole at 1.000; the bytes floor 14.9 GiB, 15.6 at
1.1x the time floor: 1.096x).
meta-2021 (856 tables) on 128 GPUs: 2 s, 1.05x the floor, 3.1 GiB on the fullest GPU
(bound 2.4).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from replay._units import format_bytes
from replay.engine.shard_cost import (
    STEP_SLACK,
    TINY_ROWS,
    CostModel,
    TableLoad,
    even_shares,
    hot_costs,
    time_floor,
)
from replay.engine.sharder_even import Best, bytes_floor, bytes_pass, search_executable
from replay.errors import ConfigError
from replay.system.sharding import (
    DATA_PARALLEL,
    ROW_WISE,
    TABLE_ROW_WISE,
    TABLE_WISE,
    Placement,
    ShardingPlan,
    TableShape,
    TableSharding,
    check_cluster,
    resolve_plan,
    row_blocks,
)


@dataclass(frozen=True, eq=False)
class ShardingResult:
    """The plan the sharder chose, its placement, each GPU's modeled cost and the bounds."""

    plan: ShardingPlan
    placement: Placement
    rank_cost: np.ndarray  # float64 per rank
    mean: float
    lower_bound: float
    granularity: int  # j of the winning target s = R / j
    floor: float = 0.0  # the lowest max a plan of the sharder's types can have (docstring)
    allreduce: float = 0.0  # what the replicas' all-reduce costs every GPU (in rank_cost)
    # HBM bytes per rank, and their bounds: every assignment of the chosen shards holds
    # at least `bytes_bound` on its fullest GPU, every plan at least `bytes_floor`
    rank_hbm: np.ndarray | None = None
    bytes_bound: float = 0.0
    bytes_floor: float = 0.0
    # (max cost, max HBM bytes, tables split) of the executable fills no other beats in
    # both: what balancing bytes costs in time, and the reverse
    front: tuple[tuple[float, int, int], ...] = ()

    @property
    def max_over_mean(self) -> float:
        return float(self.rank_cost.max() / self.mean) if self.mean > 0 else 1.0

    @property
    def max_over_bound(self) -> float:
        return float(self.rank_cost.max() / self.lower_bound) if self.lower_bound > 0 else 1.0

    @property
    def max_over_floor(self) -> float:
        return float(self.rank_cost.max() / self.floor) if self.floor > 0 else 1.0

    @property
    def bytes_over_bound(self) -> float:
        top = float(self.rank_hbm.max()) if self.rank_hbm is not None else 0.0
        return top / self.bytes_bound if self.bytes_bound > 0 else 1.0

    @property
    def bytes_over_floor(self) -> float:
        top = float(self.rank_hbm.max()) if self.rank_hbm is not None else 0.0
        return top / self.bytes_floor if self.bytes_floor > 0 else 1.0


def _floor_of(
    dp: set[int],
    access: list[float],
    memory: list[float],
    rep: list[float],
    hot: list[float],
    world: int,
) -> float:
    """max(mean, D + H) of the replicas `dp`, D (`rep`: each replica's cost to every
    GPU, its all-reduce included) and the mean with their all-reduce: no plan with these
    replicas does better (the module docstring's floor)."""
    d = sum(rep[t] for t in dp)
    rest = [t for t in range(len(access)) if t not in dp]
    mean = d + sum(access[t] + memory[t] for t in rest) / world
    return max(mean, d + max((hot[t] for t in rest), default=0.0))


def _replicas(
    loads: Sequence[TableLoad],
    access: list[float],
    memory: list[float],
    rep: list[float],
    world: int,
    gpu_memory_bytes: int,
    price_network: bool,
    hot: list[float] | None = None,
) -> tuple[list[int], float]:
    """Step 1 of the rule: (the data-parallel tables, the floor). Among the sets
    {t : hottest row of t costs more than H} that fit memory, the one of the lowest
    max(mean, D + H) + AR (`rep` holds each replica's all-reduce; ties: the fewest
    replicas); then, when the network is not priced (`price_network` False), each tiny
    table, in table order, while the floor stays and the replicas fit."""
    need = sum(ld.hbm for ld in loads)
    if hot is None:
        hot = [
            a * (1.0 if ld.tiny else ld.hottest_share())
            for a, ld in zip(access, loads, strict=True)
        ]

    def fits(dp: set[int]) -> bool:
        held = sum(loads[t].hbm for t in dp)
        return held + (need - held) / world <= gpu_memory_bytes

    def floor_of(dp: set[int]) -> float:
        return _floor_of(dp, access, memory, rep, hot or [], world)

    if world <= 1:
        return [], floor_of(set())
    best: set[int] = set()
    floor = floor_of(best)
    for h in sorted(set(hot) | {0.0}, reverse=True):  # H: each table's hottest row, or 0
        dp = {t for t in range(len(loads)) if hot[t] > h}
        if not dp or not fits(dp):
            continue  # a superset of a set that does not fit does not fit either
        f = floor_of(dp)
        if f < floor * (1 - 1e-12):
            best, floor = dp, f
    if price_network:
        return sorted(best), floor
    for t, ld in enumerate(loads):
        bags = ld.lookups if ld.bags is None else ld.bags
        if t in best or ld.rows * world > bags:
            continue
        more = best | {t}
        if fits(more) and floor_of(more) <= floor * (1 + 1e-12):
            best = more
    return sorted(best), floor


def rank_costs(
    placement: Placement, loads: Sequence[TableLoad], model: CostModel | None = None
) -> np.ndarray:
    """Each GPU's modeled cost under any resolved plan (the sharder's or a user's): a
    shard costs its rows' share of the table's lookups (`TableLoad.share`: their mass, or
    their share of the rows without one) x its share of the columns of the table's access
    cost (a data-parallel copy 1 / world of it) plus the memory term of the bytes it
    holds; a row-wise or table-row-wise shard adds its split's collective
    (`CostModel.row_wise`, `table_row_wise`), empty blocks included (they take part)."""
    model = model or CostModel()
    out = np.zeros(placement.world, dtype=np.float64)
    for s in placement.shards:
        load = loads[s.table]
        access = model.access(load)
        kind = placement.entry(s.table).type
        if kind == DATA_PARALLEL:
            out[s.rank] += access / placement.world + model.allreduce(load, placement.world)
        elif load.rows and load.dim and s.rows:
            out[s.rank] += access * load.share(s.row_start, s.row_stop) * (s.cols / load.dim)
        if kind == ROW_WISE:
            out[s.rank] += model.row_wise(load)
        elif kind == TABLE_ROW_WISE:
            out[s.rank] += model.table_row_wise(load)
        out[s.rank] += model.byte * placement.shard_bytes(s)
    return out


def rank_hbm(placement: Placement, loads: Sequence[TableLoad]) -> np.ndarray:
    """int64 HBM bytes each rank holds under its tables' kernels (`TableLoad.hbm_of`;
    every row of its shards by default), columns prorated as `Placement.shard_bytes`."""
    out = np.zeros(placement.world, dtype=np.int64)
    for s in placement.shards:
        load = loads[s.table]
        part = load.hbm_of(s.row_start, s.row_stop)
        out[s.rank] += -(-part * s.cols // load.dim) if load.dim else 0
    return out


def _dhondt(costs: Sequence[float], total: int, lo: Sequence[int], hi: Sequence[int]) -> list[int]:
    """Blocks per table: start at `lo`, then give each next block to the table of the
    largest cost per block still under its cap `hi` (ties: table order), up to `total`."""
    counts = list(lo)
    heap = [(-c / k, i) for i, (c, k) in enumerate(zip(costs, counts, strict=True)) if k < hi[i]]
    heapq.heapify(heap)
    left = total - sum(counts)
    while left > 0 and heap:
        _, i = heapq.heappop(heap)
        counts[i] += 1
        left -= 1
        if counts[i] < hi[i]:
            heapq.heappush(heap, (-costs[i] / counts[i], i))
    return counts


@dataclass
class _Table:
    """A table the LPT step places: its index, type and blocks (rows, cost, bytes)."""

    index: int
    type: str
    blocks: list[tuple[int, int]]
    cost: list[float]
    bytes: list[int]


def _assign(
    tables: list[_Table],
    world: int,
    gpus_per_node: int,
    load: np.ndarray,
    free: np.ndarray,
) -> dict[int, list[int]] | None:
    """LPT: each table's blocks on distinct GPUs (ranks in block order), or None when a
    block finds no GPU with memory free for it. `load` and `free` are updated."""
    ranks_of: dict[int, list[int]] = {}
    order = sorted(tables, key=lambda t: (-max(t.cost), t.index))
    for tab in order:
        by_size = sorted(range(len(tab.blocks)), key=lambda b: (-tab.cost[b], b))
        if tab.type == TABLE_ROW_WISE:
            best: tuple[float, int, list[int]] | None = None
            for node in range(world // gpus_per_node):
                gpus = np.arange(node * gpus_per_node, (node + 1) * gpus_per_node)
                picked = _pick(tab, by_size, gpus, load, free)
                if picked is None:
                    continue
                after = load[gpus].copy()
                for b, r in zip(by_size, picked, strict=True):
                    after[r - gpus[0]] += tab.cost[b]
                if best is None or after.max() < best[0]:
                    best = (float(after.max()), node, picked)
            chosen = best[2] if best is not None else None
        else:
            chosen = _pick(tab, by_size, np.arange(world), load, free)
        if chosen is None:
            return None
        ranks = [0] * len(tab.blocks)
        for b, r in zip(by_size, chosen, strict=True):
            ranks[b] = r
            load[r] += tab.cost[b]
            free[r] -= tab.bytes[b]
        ranks_of[tab.index] = ranks
    return ranks_of


def _pick(
    tab: _Table, by_size: list[int], gpus: np.ndarray, load: np.ndarray, free: np.ndarray
) -> list[int] | None:
    """Distinct GPUs of `gpus` for the blocks in `by_size` order: the least loaded with
    room for the block (ties: lower rank), or None."""
    order = gpus[np.argsort(load[gpus], kind="stable")]
    if len(by_size) > len(order):
        return None
    head = order[: len(by_size)]
    if np.all(free[head] >= np.array([tab.bytes[b] for b in by_size])):
        return [int(r) for r in head]  # the common case: the least loaded all have room
    taken: list[int] = []
    open_ = np.ones(len(order), dtype=bool)
    for b in by_size:
        fits = np.flatnonzero(open_ & (free[order] >= tab.bytes[b]))
        if len(fits) == 0:
            return None
        open_[fits[0]] = False
        taken.append(int(order[fits[0]]))
    return taken


def _blocks(
    t: int,
    load: TableLoad,
    k: int,
    mem_k: int,
    cache: dict[tuple[int, int, int], tuple[list[tuple[int, int]], list[float]]],
) -> tuple[list[tuple[int, int]], list[float]]:
    """A table's row blocks for `k` blocks (at least `mem_k` for memory) and each one's
    share of its lookups: without a mass TorchRec's even blocks (ceil(rows / k) rows,
    none empty); with one, `RowMass.split`'s blocks of about equal mass, none over the
    rows an even block at `mem_k` blocks holds. Cached by (table t, k, mem_k)."""
    rows = load.rows
    key = (t, k, mem_k)
    if key in cache:
        return cache[key]
    if load.mass is None or load.mass.total <= 0 or k <= 1 or rows <= 1:
        size = -(-rows // k) if rows else 0
        n = -(-rows // size) if size else 1  # no empty blocks
        blocks = row_blocks(rows, n)
        shares = [(b - a) / rows if rows else 1.0 for a, b in blocks]
    else:
        blocks = load.mass.split(k, max_rows=-(-rows // max(mem_k, 1)))
        starts = np.array([a for a, _ in blocks], dtype=np.int64)
        shares = load.mass.block_shares(starts).tolist()
    cache[key] = (blocks, shares)
    return blocks, shares


def _search(
    loads: Sequence[TableLoad],
    dp: list[int],
    cost_of: list[float],
    dp_cost: float,
    room: int,
    world: int,
    gpus_per_node: int,
    tolerance: float,
    max_granularity: int,
    floor: float,
    model: CostModel,
) -> Best | None:
    """Steps 2-4 of the rule for the tables not in `dp`: (max cost, j, table -> (type,
    ranks), largest shard cost) of the winning granularity, or None when no granularity
    fits memory. A granularity whose blocks find no room doubles the split that memory
    asks of every later one."""
    rest = [t for t in range(len(loads)) if t not in dp]
    cost = {t: cost_of[t] for t in rest}
    mean_rest = sum(cost.values()) / world
    caps = {t: 1 if loads[t].tiny else max(1, min(loads[t].rows, world)) for t in rest}
    best: Best | None = None
    stale = 0  # granularities since the best improved
    squeeze = 1
    cache: dict[tuple[int, int, int], tuple[list[tuple[int, int]], list[float]]] = {}
    for j in range(1, max_granularity + 1):
        s = mean_rest / j if mean_rest > 0 else math.inf
        mem_k = {
            t: min(caps[t], -(-loads[t].hbm * squeeze // room) if room > 0 else caps[t])
            for t in rest
        }
        big = [t for t in rest if cost[t] > s or mem_k[t] > 1]
        k = dict.fromkeys(rest, 1)
        if big:
            total = max(len(big), round(sum(cost[t] for t in big) / s)) if s < math.inf else 0
            lo = [min(max(2 if cost[t] > s else 1, mem_k[t]), caps[t]) for t in big]
            got = _dhondt([cost[t] for t in big], total, lo, [caps[t] for t in big])
            k.update(zip(big, got, strict=True))
        tables = []
        for t in rest:
            blocks, shares = _blocks(t, loads[t], k[t], mem_k[t], cache)
            n = len(blocks)
            kind = (
                TABLE_WISE if n == 1 else TABLE_ROW_WISE if n <= gpus_per_node < world else ROW_WISE
            )
            fixed = (
                model.row_wise(loads[t])
                if kind == ROW_WISE
                else model.table_row_wise(loads[t])
                if kind == TABLE_ROW_WISE
                else 0.0
            )
            tables.append(
                _Table(
                    t,
                    kind,
                    blocks,
                    [cost[t] * f + fixed for f in shares],
                    [loads[t].hbm_of(a, b) for a, b in blocks],
                )
            )
        load = np.full(world, dp_cost, dtype=np.float64)
        free = np.full(world, room, dtype=np.int64)
        ranks_of = _assign(tables, world, gpus_per_node, load, free)
        if ranks_of is None:
            squeeze *= 2
            continue
        top = float(load.max())
        if best is None or top < best[0]:
            chosen = {tab.index: (tab.type, ranks_of[tab.index], tab.blocks) for tab in tables}
            best = (top, j, chosen, max((max(tab.cost) for tab in tables), default=0.0))
            stale = 0
        else:
            stale += 1
        mean = dp_cost + mean_rest
        if mean <= 0 or top <= (1 + tolerance) * max(mean, floor):
            break
        if len(big) == len(rest) and all(k[t] >= caps[t] for t in big):
            break  # nothing left to split
        if stale >= PATIENCE:
            break  # finer splits only add collectives
    return best


def auto_shard(
    loads: Sequence[TableLoad],
    *,
    nodes: int,
    gpus_per_node: int,
    gpu_memory_bytes: int,
    model: CostModel | None = None,
    tolerance: float = 0.05,
    max_granularity: int = 64,
    torchrec_executable: bool = False,
) -> ShardingResult:
    """The plan of the module docstring's rule for `loads` (one per table, in table
    order) on `nodes` x `gpus_per_node` GPUs of `gpu_memory_bytes` each; with
    `torchrec_executable`, the plan TorchRec's training path executes (even blocks over
    every rank or a node's GPUs in order: module docstring). A ConfigError when the
    tables cannot fit the cluster's memory."""
    model = model or CostModel()
    world = check_cluster(nodes, gpus_per_node, gpu_memory_bytes)
    names = [ld.name for ld in loads]
    if len(set(names)) != len(names):
        raise ConfigError("auto sharding: two tables share a name")
    access = [model.access(ld) for ld in loads]
    memory = [model.memory(ld) for ld in loads]
    need = sum(ld.hbm for ld in loads)
    if need > world * gpu_memory_bytes:
        raise ConfigError(
            f"auto sharding: the tables take {format_bytes(need)} of HBM, more than the "
            f"cluster's {world} GPUs x {format_bytes(gpu_memory_bytes)}"
        )

    rep = [model.replica(ld, world) for ld in loads]
    # each table's unsplittable unit (with `torchrec_executable` its finest split is an
    # even block over every rank or a node's GPUs)
    hot = hot_costs(
        loads, model, world=world, gpus_per_node=gpus_per_node, even=torchrec_executable
    )

    # 1. data-parallel: the replicas of the lowest floor (then, with the network unpriced,
    # the tiny tables that leave it)
    dp, floor = _replicas(
        loads, access, memory, rep, world, gpu_memory_bytes, model.replica_byte > 0, hot
    )
    cost_of = [access[t] + memory[t] for t in range(len(loads))]

    fronts: dict[tuple[int, ...], list[tuple[float, int, int]]] = {}
    fills: dict[tuple[int, ...], list[tuple[float, int, Best]]] = {}

    def search(dp: list[int]) -> Best | None:
        if sum(loads[t].hbm for t in dp) > gpu_memory_bytes:
            return None  # the replicas alone fill a GPU
        args = (
            loads,
            dp,
            cost_of,
            sum(rep[t] for t in dp),
            gpu_memory_bytes - sum(loads[t].hbm for t in dp),
            world,
            gpus_per_node,
            tolerance,
        )
        floor_dp = _floor_of(set(dp), access, memory, rep, hot, world)
        front = fronts.setdefault(tuple(dp), [])
        return (
            search_executable(*args, floor_dp, model, front, fills.setdefault(tuple(dp), []))
            if torchrec_executable
            else _search(*args, max_granularity, floor_dp, model)
        )

    while True:
        best = search(dp)
        if best is not None or not dp:
            break
        # the replicas leave too little room: shard the largest one instead
        dp.remove(max(reversed(dp), key=lambda t: loads[t].hbm))
    whole = sum(kind == TABLE_WISE for kind, _, _ in best[2].values()) if best else 0
    if best is not None and whole > world:  # step 5: more whole tables than GPUs
        dp, best = _more_replicas(loads, dp, best, rep, cost_of, search, world)
    floor = max(floor, time_floor(loads, model, world, gpus_per_node, even=torchrec_executable))
    if best is not None and torchrec_executable:  # the bytes pass, for the replicas chosen
        held = sum(loads[t].hbm for t in dp)
        front0 = fronts.setdefault(tuple(dp), [])
        best, extra = bytes_pass(loads, dp, cost_of, sum(rep[t] for t in dp),
                                 gpu_memory_bytes - held, world, gpus_per_node, model,
                                 (1 + STEP_SLACK) * floor, best, front0,
                                 fills.get(tuple(dp), []))  # fmt: skip
        if extra:  # replicas the pass added: the front's bytes stay those of dp's
            dp = sorted([*dp, *extra])
            more = sum(loads[t].hbm for t in extra)
            fronts[tuple(dp)] = [(top, b - more, k) for top, b, k in front0]
    if best is None:
        raise ConfigError(
            f"auto sharding: no placement fits {world} GPUs of {format_bytes(gpu_memory_bytes)} "
            f"(the tables take {format_bytes(need)}; a block finds no GPU with room)"
        )
    dp_cost = sum(rep[t] for t in dp)
    _, j, chosen, largest = best
    entries = []
    for t, ld in enumerate(loads):
        if t in dp:
            entries.append(TableSharding(ld.name, DATA_PARALLEL, tuple(range(world))))
        else:
            kind, ranks, blocks = chosen[t]
            even = kind == TABLE_WISE or blocks == row_blocks(ld.rows, len(blocks))
            explicit = None if even else tuple(blocks)
            entries.append(TableSharding(ld.name, kind, tuple(ranks), explicit))
    mode = (
        f"TorchRec-executable, {j} tables split"
        if torchrec_executable
        else f"uneven blocks, granularity {j}"
    )
    plan = ShardingPlan(tuple(entries), f"replay auto sharder ({mode})")
    shapes = [TableShape(ld.name, ld.rows, ld.dim) for ld in loads]
    check = None if any(ld.hbm_bytes is not None for ld in loads) else gpu_memory_bytes
    placement = resolve_plan(
        plan,
        shapes,
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        # the search kept each GPU's HBM within its memory; a kernel's footprint is not
        # the shards' bytes, which resolve_plan would check
        gpu_memory_bytes=check,
        row_bytes=[ld.bytes_per_row for ld in loads],
        where="auto sharding",
    )
    costs = rank_costs(placement, loads, model)
    mean = float(costs.sum() / world)
    bound = max(mean, dp_cost + largest)
    allreduce = sum(model.allreduce(loads[t], world) for t in dp)
    hbm = rank_hbm(placement, loads)
    dp_hbm = sum(loads[t].hbm for t in dp)
    # the fills of the chosen replicas no other beats in both cost and bytes
    front = [(top, held + dp_hbm, k) for top, held, k in fronts.get(tuple(dp), [])]
    return ShardingResult(
        plan, placement, costs, mean, bound, j, min(floor, bound), allreduce,
        rank_hbm=hbm,
        bytes_bound=max(float(hbm.sum()) / world, dp_hbm + _largest_piece(placement, loads, dp)),
        bytes_floor=bytes_floor(loads, range(len(loads)), world),
        front=tuple(front),
    )  # fmt: skip


MORE_REPLICAS = (1, 2, 3, 4, 6, 8, 12, 16)  # extra replicas tried (step 5)
PATIENCE = 4  # granularities tried past the best before the uneven search stops


def _more_replicas(
    loads: Sequence[TableLoad],
    dp: list[int],
    best: Best,
    rep: list[float],
    cost_of: list[float],
    search: Callable[[list[int]], Best | None],
    world: int,
) -> tuple[list[int], Best]:
    """Step 5: whole tables are indivisible, so 26 tables on 8 GPUs leave some GPU 4 of
    them; replicating the m tables that cost each GPU least as replicas (those whose
    all-reduce costs every GPU less than 1 / 8 of the table's cost, m in
    `MORE_REPLICAS`) can fill that gap. The plan of the lowest maximum wins (ties: the
    fewer replicas)."""
    extra = [rep[t] - cost_of[t] / world for t in range(len(loads))]  # the all-reduce
    priced = any(e > 0 for e in extra)

    def cheap(t: int) -> bool:
        if not priced:  # the network unpriced: step 1's tiny tables only
            return loads[t].rows * world <= loads[t].batch
        return extra[t] < cost_of[t] / 8

    cands = sorted(
        (t for t in range(len(loads)) if t not in dp and cheap(t)), key=lambda t: (extra[t], t)
    )
    chosen = (dp, best)
    for m in MORE_REPLICAS:
        if m > len(cands):
            break
        more = sorted([*dp, *cands[:m]])
        got = search(more)
        if got is not None and got[0] < chosen[1][0] * (1 - 1e-9):
            chosen = (more, got)
    return chosen


def _largest_piece(placement: Placement, loads: Sequence[TableLoad], dp: list[int]) -> int:
    """The HBM bytes of the largest shard that is not a replica."""
    out = 0
    for s in placement.shards:
        if s.table in dp:
            continue
        ld = loads[s.table]
        part = ld.hbm_of(s.row_start, s.row_stop)
        out = max(out, -(-part * s.cols // ld.dim) if ld.dim else 0)
    return out


__all__ = [
    "TINY_ROWS",
    "CostModel",
    "ShardingResult",
    "TableLoad",
    "auto_shard",
    "even_shares",
    "hot_costs",
    "rank_costs",
    "rank_hbm",
]
