"""Sharding plans: which GPU (rank) holds which rows and columns of each embedding table,
their JSON form, their validation, and the routing of flat keys to the rank that owns
them.

Placement. A plan is configuration data, like the rest of a system spec, so it lives in
`system/`; it needs flat keys' table offsets from `trace/keys.py` and nothing above.
The automatic sharder, which chooses a plan from costs the engine measures, is
`replay/engine/sharder.py`. Nothing here writes files: `ShardingPlan.to_json()` gives the
document and the run folder's writer (`runs/`) writes it atomically.

Semantics, as TorchRec's (torchrec/distributed/sharding_plan.py,
`calculate_shard_sizes_and_offsets` and its helpers; types.py `ParameterSharding`,
whose `ranks` list a table's shards in shard order):

- **table-wise**: the whole table on its one rank.
- **row-wise**: rows in contiguous blocks of ``ceil(rows / len(ranks))``, block ``i`` on
  ``ranks[i]``; the last block may be shorter and those after it empty (10 rows on 4
  ranks: 3, 3, 3, 1; 5 rows on 4 ranks: 2, 2, 1, 0 -- TorchRec's
  `_calculate_rw_shard_sizes_and_offsets`). TorchRec's own row-wise uses every rank in
  order; a plan here may name any distinct ranks.
- **column-wise**: the embedding dimension in ``len(ranks)`` equal column blocks, block
  ``i`` on ``ranks[i]``; TorchRec requires ``dim % len(ranks) == 0`` and lets a rank hold
  more than one block. Every block sees every lookup of its table.
- **table-row-wise**: row-wise over GPUs of one node (TorchRec's `table_row_wise(host)`
  uses all of the node's GPUs; here any distinct GPUs of one node).
- **data-parallel**: the table replicated on every rank (its gradient all-reduced);
  ``ranks`` must list every rank of the cluster once.
- **table-column-wise**: column-wise with every block on GPUs of one node (TorchRec's
  `table_column_wise`, `twcw_sharding.py`: executed as column-wise).
- **grid**: column blocks, each split row-wise over GPUs of one node (TorchRec's
  `grid_shard(host_indexes)`, `grid_sharding.py`): ``ranks`` lists each column block's
  GPUs, block after block; without ``shards`` a block is ``gpus_per_node`` consecutive
  ranks and the blocks split the columns equally; with them (one column range per rank)
  a block is a run of consecutive ranks with the same range. Rows split evenly
  (ceil(rows / GPUs of the block)) over a block's ranks in listed order.

A plan may give a row-wise, table-row-wise, column-wise or table-column-wise table
explicit blocks instead of the even rule, as TorchRec's `row_wise(sizes_placement=...)`
and `column_wise(size_per_rank=...)` do: ``"shards": [[start, stop], ...]``, one
half-open row (or column; grid: column) range per rank of ``ranks``; those are checked
for overlaps and gaps.

The plan as data and its JSON document: `replay.system.sharding_plan` (re-exported).

TorchRec's training path executes as planned (`executable_reason`; its sources in
`replay.system.sharding_rules`) row-wise over every rank in rank order in even blocks,
table-row-wise and each grid block over all GPUs of one node in order, and every other
type. A resolved plan (`sharding.json` of `replay run` and `replay plan`) says so
(``torchrec_executable``, else ``torchrec_executable_reason``: the first offending
table), and each table's ``rows`` and ``dim`` and the ``world_size``, which are checked
against the workload and the cluster when the plan is read back.

Bytes a rank holds: each shard's rows x its share of the row's bytes, where `row_bytes`
(per table, default fp32 values: 4 x dim) is one full row's values plus optimizer state.
A column block holds `row_bytes x cols / dim` per row (rounded up): exact for values and
for per-value optimizer state (Adagrad, Adam); TorchRec's row-wise Adagrad keeps one
fp32 per row in each column block, which this undercounts by 4 B per row per extra block.
A data-parallel table is counted whole on every rank.

Routing (`Placement.owner_ranks`: flat keys to their owner GPU for a caller that holds
a placement; the cluster replay, the per-GPU curves and the per-shard statistics route
with their own kernels over the same blocks, `replay/engine/cluster_route.py` and
`replay/plan/rank_curves.py`, which also emit each key's local row): a flat key
(``offsets[table] + row``, `replay/trace/keys.py`) is first mapped to its table (a bucket
index over the tables' first keys, then a binary search among the few tables a bucket
holds), then to its block: for the even rule by ``row // ceil(rows / len(ranks))``
(computed with the reciprocal and one correction), for explicit blocks by a binary search
of their first rows. Measured on criteo-terabyte's auto plans (2-core VM, one thread,
uint32 keys of 2,048 lookups per table per batch): about 200 M keys/s at 8, 64 and 1,024
GPUs (`np.searchsorted` over all blocks' first keys: 15-50 M/s). Keys of column-wise and
data-parallel tables have no single owner: `MANY_OWNERS` (-1); the engine sends those to
every block of the table, or to the rank of the lookup's sample.
`owner_ranks_reference` is the slow, per-key reference.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from replay._intrinsics import ix
from replay._jit import kernel
from replay._units import format_bytes
from replay.errors import ConfigError
from replay.system.sharding_plan import (
    CACHED_KERNELS,
    ShardingPlan,
    TableShape,
    TableSharding,
    plan_from_json,
    read_plan,
    table_shapes,
)
from replay.system.sharding_rules import (
    COLUMN_SPLIT,
    COLUMN_WISE,
    DATA_PARALLEL,
    EXPLICIT,
    GRID,
    ONE_NODE,
    PLAN_TYPES,
    REPEATS,
    ROW_SPLIT,
    ROW_WISE,
    SHARDING_TYPES,
    TABLE_COLUMN_WISE,
    TABLE_ROW_WISE,
    TABLE_WISE,
    column_blocks,
    coverage,
    executable_reason,
    grid_groups,
    one_node,
    row_blocks,
)
from replay.trace.keys import last_at_most, table_offsets

MANY_OWNERS = -1  # owner_ranks of a key of a column-wise or data-parallel table
BYTES_PER_VALUE = 4  # fp32 (replay.system.spec.BYTES_PER_VALUE)


@dataclass(frozen=True)
class Shard:
    """The rows [row_start, row_stop) and columns [col_start, col_stop) of table index
    `table` that `rank` holds (a data-parallel table has one whole-table shard per rank)."""

    table: int
    rank: int
    row_start: int
    row_stop: int
    col_start: int
    col_stop: int

    @property
    def rows(self) -> int:
        return self.row_stop - self.row_start

    @property
    def cols(self) -> int:
        return self.col_stop - self.col_start


# -- resolution and validation ----------------------------------------------------------


def check_cluster(nodes: int, gpus_per_node: int, gpu_memory_bytes: int | None = None) -> int:
    """The world size (nodes x gpus_per_node); a ConfigError for zero GPUs."""
    for what, value in (("nodes", nodes), ("gpus_per_node", gpus_per_node)):
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            raise ConfigError(f"cluster: {what} must be a whole number, got {value!r}")
    if nodes < 1 or gpus_per_node < 1:
        raise ConfigError(
            f"cluster: zero GPUs (nodes={nodes}, gpus_per_node={gpus_per_node}); "
            "a cluster needs at least one node of at least one GPU"
        )
    if gpu_memory_bytes is not None and gpu_memory_bytes <= 0:
        raise ConfigError(f"cluster: gpu_memory_bytes must be positive, got {gpu_memory_bytes}")
    return int(nodes) * int(gpus_per_node)


def _row_bytes(
    tables: Sequence[TableShape], row_bytes: int | Sequence[int] | None
) -> tuple[int, ...]:
    if row_bytes is None:
        return tuple(BYTES_PER_VALUE * t.dim for t in tables)
    if isinstance(row_bytes, int | np.integer):
        return (int(row_bytes),) * len(tables)
    out = tuple(int(b) for b in row_bytes)
    if len(out) != len(tables):
        raise ValueError(f"row_bytes: {len(out)} values for {len(tables)} tables")
    return out


def _entry_shards(
    entry: TableSharding, t: int, shape: TableShape, world: int, gpus_per_node: int, where: str
) -> list[Shard]:
    """The shards of one entry, after checking its ranks and blocks against the cluster."""
    ranks = entry.ranks
    if not ranks:
        raise ConfigError(f"{where}: no ranks")
    for r in ranks:
        if not 0 <= r < world:
            raise ConfigError(
                f"{where}: rank {r} is outside the cluster ({world} GPUs: ranks 0-{world - 1})"
            )
    if entry.type not in REPEATS and len(set(ranks)) != len(ranks):
        twice = next(r for r in ranks if ranks.count(r) > 1)
        raise ConfigError(f"{where}: rank {twice} is listed twice (its shards would overlap)")
    if entry.shards is not None and entry.type not in EXPLICIT:
        raise ConfigError(f"{where}: 'shards' applies to {', '.join(EXPLICIT)} only")
    if entry.shards is not None and len(entry.shards) != len(ranks):
        raise ConfigError(
            f"{where}: {len(entry.shards)} shards for {len(ranks)} ranks (one per rank)"
        )
    rows, dim = shape.rows, shape.dim
    if entry.type == TABLE_WISE:
        if len(ranks) != 1:
            raise ConfigError(f"{where}: table-wise puts the table on one rank, got {len(ranks)}")
        return [Shard(t, ranks[0], 0, rows, 0, dim)]
    if entry.type == DATA_PARALLEL:
        if sorted(ranks) != list(range(world)):
            raise ConfigError(
                f"{where}: data-parallel replicates the table on every rank: "
                f"ranks must be 0-{world - 1}"
            )
        return [Shard(t, r, 0, rows, 0, dim) for r in ranks]
    if entry.type == GRID:
        return [
            Shard(t, r, a, b, c0, c1)
            for granks, (c0, c1) in grid_groups(entry, dim, gpus_per_node, where)
            for r, (a, b) in zip(granks, row_blocks(rows, len(granks)), strict=True)
        ]
    if entry.type in ONE_NODE:
        one_node(ranks, gpus_per_node, entry.type, where)
    if entry.type in ROW_SPLIT:
        blocks = list(entry.shards) if entry.shards is not None else row_blocks(rows, len(ranks))
        if entry.shards is not None:
            coverage(blocks, rows, "rows", where)
        return [Shard(t, r, a, b, 0, dim) for r, (a, b) in zip(ranks, blocks, strict=True)]
    if entry.shards is None:
        if dim % len(ranks):
            raise ConfigError(
                f"{where}: {entry.type} splits the {dim} columns equally, which {len(ranks)} "
                "ranks do not divide (give 'shards' for uneven blocks)"
            )
        blocks = column_blocks(dim, len(ranks))
    else:
        blocks = list(entry.shards)
        coverage(blocks, dim, "columns", where)
    return [Shard(t, r, 0, rows, a, b) for r, (a, b) in zip(ranks, blocks, strict=True)]


def shard_bytes(shard: Shard, dim: int, row_bytes: int) -> int:
    """Bytes of a shard: its rows x the row's bytes prorated to its columns (rounded up)."""
    return shard.rows * (-(-row_bytes * shard.cols // dim) if dim else 0)


def resolve_plan(
    plan: ShardingPlan,
    tables: Sequence[TableShape],
    *,
    nodes: int,
    gpus_per_node: int,
    gpu_memory_bytes: int | None = None,
    row_bytes: int | Sequence[int] | None = None,
    where: str | Path = "sharding plan",
) -> Placement:
    """`plan` checked against the workload's `tables` and the cluster, as a `Placement`
    (entries in table order). One-line ConfigErrors: zero GPUs, a table not in the
    workload, a table listed twice or not at all, a rank outside the cluster, shards
    that overlap or leave rows (columns) uncovered, a table-row-wise table across nodes,
    a shard or a rank's shards that do not fit `gpu_memory_bytes` (None: not checked),
    a plan whose `world_size` or a table's `rows` or `dim` disagree with them. The
    placement's plan says the tables' shapes, the world size and whether TorchRec can
    execute it (`executable_reason`)."""
    world = check_cluster(nodes, gpus_per_node, gpu_memory_bytes)
    given = (plan.world_size or world, plan.gpus_per_node or gpus_per_node)
    if given != (world, gpus_per_node):
        raise ConfigError(
            f"{where}: the plan is for {given[0]} GPUs ({given[1]} per node), the cluster has "
            f"{world} ({nodes} nodes x {gpus_per_node})"
        )
    index = {t.name: i for i, t in enumerate(tables)}
    entries: list[TableSharding | None] = [None] * len(tables)
    for e in plan.tables:
        if e.table not in index:
            names = ", ".join(t.name for t in tables[:8]) + (", ..." if len(tables) > 8 else "")
            raise ConfigError(
                f"{where}: table {e.table!r} is not in the workload ({len(tables)} tables: {names})"
            )
        if entries[index[e.table]] is not None:
            raise ConfigError(
                f"{where}: table {e.table!r} is listed twice (its shards would overlap)"
            )
        shape = tables[index[e.table]]
        for what, said, real in (("rows", e.rows, shape.rows), ("dim", e.dim, shape.dim)):
            if said is not None and said != real:
                raise ConfigError(
                    f"{where}: table {e.table!r} has {what} {said} in the plan and {real} in "
                    "the workload"
                )
        entries[index[e.table]] = replace(e, rows=shape.rows, dim=shape.dim)
    missing = [t.name for t, e in zip(tables, entries, strict=True) if e is None]
    if missing:
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        raise ConfigError(
            f"{where}: table {missing[0]!r}{more} not in the plan: their rows would be left "
            "uncovered (every table needs an entry)"
        )
    shards: list[Shard] = []
    reasons: list[str] = []
    for t, (shape, entry) in enumerate(zip(tables, entries, strict=True)):
        assert entry is not None
        e = entry
        mine = _entry_shards(e, t, shape, world, gpus_per_node, f"{where}: table {shape.name!r}")
        shards += mine
        reason = executable_reason(e, shape.rows, world, gpus_per_node, [s.cols for s in mine])
        if reason is not None:
            reasons.append(reason)
    more = f" (and {len(reasons) - 1} more tables)" if len(reasons) > 1 else ""
    placement = Placement(
        tables=tuple(tables),
        plan=ShardingPlan(
            tuple(e for e in entries if e is not None),
            plan.source,
            world,
            int(gpus_per_node),
            not reasons,
            reasons[0] + more if reasons else "",
        ),
        nodes=int(nodes),
        gpus_per_node=int(gpus_per_node),
        shards=tuple(shards),
        row_bytes=_row_bytes(tables, row_bytes),
    )
    if gpu_memory_bytes is not None:
        _check_memory(placement, gpu_memory_bytes, str(where))
    return placement


def _check_memory(placement: Placement, capacity: int, where: str) -> None:
    tables = placement.tables
    for s in placement.shards:
        b = placement.shard_bytes(s)
        if b > capacity:
            raise ConfigError(
                f"{where}: table {tables[s.table].name!r} rows {s.row_start}-{s.row_stop - 1} on "
                f"rank {s.rank} take {format_bytes(b)}, more than a GPU's {format_bytes(capacity)}"
            )
    held = placement.rank_bytes()
    worst = int(np.argmax(held))
    if held[worst] > capacity:
        raise ConfigError(
            f"{where}: rank {worst} would hold {format_bytes(int(held[worst]))} of "
            f"{len(placement.rank_shards(worst))} shards, more than a GPU's "
            f"{format_bytes(capacity)}"
        )


# -- the resolved plan and routing -------------------------------------------------------


@kernel
def _route(
    keys: np.ndarray,
    tfirst: np.ndarray,
    tshift: int,
    toff: np.ndarray,
    size: np.ndarray,
    inv: np.ndarray,
    base: np.ndarray,
    count: np.ndarray,
    starts: np.ndarray,
    owners: np.ndarray,
    total: int,
    out: np.ndarray,
) -> int:
    """out[i] = the owner rank of flat key keys[i] (layout: `Placement._tables_index`).
    The table: the last t with toff[t] <= key, among the few the key's bucket
    (key >> tshift) can hold. Its even blocks: q = row // size[t] by the reciprocal
    (exact after one correction, rows < 2^52), owner owners[base[t] + q]; its explicit
    blocks: a binary search of their starts. Returns the number of keys outside
    [0, total) (out -2), which the caller reports."""
    bad = 0
    for i in range(len(keys)):
        k = np.int64(keys[ix(i)])
        if k < 0 or k >= total:
            bad += 1
            out[ix(i)] = -2
            continue
        b = k >> tshift
        t = last_at_most(toff, np.int64(tfirst[ix(b)]), np.int64(tfirst[ix(b + 1)]), k)
        row = k - toff[ix(t)]
        lo = base[ix(t)]
        sz = size[ix(t)]
        if sz > 0:
            q = np.int64(row * inv[ix(t)])
            if q * sz > row:
                q -= 1
            elif (q + 1) * sz <= row:
                q += 1
            out[ix(i)] = owners[ix(lo + q)]
        else:
            out[ix(i)] = owners[ix(last_at_most(starts, lo, lo + count[ix(t)] - 1, row))]
    return bad


@dataclass(frozen=True, eq=False)
class Placement:
    """A plan resolved against its tables and cluster (`resolve_plan` builds it)."""

    tables: tuple[TableShape, ...]
    plan: ShardingPlan
    nodes: int
    gpus_per_node: int
    shards: tuple[Shard, ...]
    row_bytes: tuple[int, ...]
    _routing: dict[str, Any] = field(default_factory=dict, init=False, repr=False)

    @property
    def world(self) -> int:
        return self.nodes * self.gpus_per_node

    def node_of(self, rank: int) -> int:
        return rank // self.gpus_per_node

    def entry(self, table: int) -> TableSharding:
        return self.plan.tables[table]

    def rank_shards(self, rank: int) -> list[Shard]:
        """The shards `rank` holds, in table order."""
        return [s for s in self.shards if s.rank == rank]

    def shard_bytes(self, shard: Shard) -> int:
        return shard_bytes(shard, self.tables[shard.table].dim, self.row_bytes[shard.table])

    def rank_bytes(self) -> np.ndarray:
        """int64 bytes each rank holds (values and optimizer state of its shards)."""
        out = np.zeros(self.world, dtype=np.int64)
        for s in self.shards:
            out[s.rank] += self.shard_bytes(s)
        return out

    def offsets(self) -> np.ndarray:
        """Flat-key offsets of the tables (`replay.trace.keys.table_offsets`)."""
        return table_offsets(np.array([t.rows for t in self.tables], dtype=np.int64))

    def routing(self) -> tuple[np.ndarray, np.ndarray]:
        """(starts, owners): the flat key each non-empty block starts at, ascending, and
        its owner rank (MANY_OWNERS for a column-wise or data-parallel table's one block)."""
        if "block_starts" not in self._routing:
            offsets = self.offsets()
            starts: list[int] = []
            owners: list[int] = []
            for t, shape in enumerate(self.tables):
                kind = self.plan.tables[t].type
                if kind in ROW_SPLIT:
                    blocks = sorted(
                        (s.row_start, s.rank) for s in self.shards if s.table == t and s.rows
                    )
                elif kind == TABLE_WISE:
                    blocks = [(0, self.plan.tables[t].ranks[0])]
                else:
                    blocks = [(0, MANY_OWNERS)]
                if shape.rows:
                    starts += [int(offsets[t]) + a for a, _ in blocks]
                    owners += [r for _, r in blocks]
            self._routing["block_starts"] = np.array(starts, dtype=np.int64)
            self._routing["block_owners"] = np.array(owners, dtype=np.int32)
        return self._routing["block_starts"], self._routing["block_owners"]

    def _tables_index(self) -> dict[str, Any]:
        """The kernel's layout. Per table t: toff[t] its first key; size[t] its even
        block size (ceil(rows / len(ranks)); the rows for a table-wise, column-wise or
        data-parallel table, whose one block has one owner or MANY_OWNERS) or 0 when
        its blocks are explicit; inv[t] = 1 / size[t]; owners[base[t]:base[t] + count[t]]
        its owners in block order (explicit: the non-empty blocks sorted by their first
        row, which starts[] holds). tfirst[b]: the table holding key b << tshift, with
        about 64 buckets per table (at least 65,536, at most one per key)."""
        if "tfirst" not in self._routing:
            offsets = self.offsets()
            total = int(offsets[-1])
            size: list[int] = []
            base: list[int] = []
            count: list[int] = []
            starts: list[int] = []
            owners: list[int] = []
            for t, shape in enumerate(self.tables):
                e = self.plan.tables[t]
                base.append(len(owners))
                if e.type in ROW_SPLIT and e.shards is not None:
                    blocks = sorted(
                        (a, r) for r, (a, b) in zip(e.ranks, e.shards, strict=True) if b > a
                    )
                    size.append(0)
                    starts += [a for a, _ in blocks]
                    owners += [r for _, r in blocks]
                elif e.type in ROW_SPLIT:
                    size.append(max(-(-shape.rows // len(e.ranks)), 1))
                    starts += [0] * len(e.ranks)
                    owners += list(e.ranks)
                else:
                    size.append(max(shape.rows, 1))
                    starts.append(0)
                    owners.append(e.ranks[0] if e.type == TABLE_WISE else MANY_OWNERS)
                count.append(len(owners) - base[-1])
            tshift = 0
            while (total >> tshift) > max(64 * len(self.tables), 1 << 16):
                tshift += 1
            edges = np.arange((total >> tshift) + 2, dtype=np.int64) << tshift
            toff = offsets[:-1]
            tfirst = np.searchsorted(toff, np.minimum(edges, max(total - 1, 0)), side="right") - 1
            size_a = np.array(size, dtype=np.int64)
            self._routing.update(
                tfirst=np.maximum(tfirst, 0).astype(np.int32),
                tshift=tshift,
                toff=np.ascontiguousarray(toff),
                size=size_a,
                inv=1.0 / np.maximum(size_a, 1),
                base=np.array(base, dtype=np.int64),
                count=np.array(count, dtype=np.int64),
                starts=np.array(starts, dtype=np.int64),
                owners=np.array(owners, dtype=np.int32),
                total=total,
            )
        return self._routing

    def owner_ranks(self, keys: np.ndarray) -> np.ndarray:
        """int32 owner rank of each flat key (any integer dtype); MANY_OWNERS for keys of
        column-wise and data-parallel tables. A key outside the tables is a ValueError
        (the engine's keys were checked where they were made)."""
        keys = np.asarray(keys)
        out = np.empty(len(keys), dtype=np.int32)
        if len(keys) == 0:
            return out
        x = self._tables_index()
        names = ("tfirst", "tshift", "toff", "size", "inv", "base", "count", "starts", "owners")
        bad = _route(keys, *(x[n] for n in names), x["total"], out)
        if bad:
            raise ValueError(f"owner_ranks: {bad} keys outside [0, {x['total']})")
        return out

    def owner_of(self, table: int, row: int) -> int:
        """The owner rank of one (table, row) (MANY_OWNERS: column-wise, data-parallel)."""
        return int(self.owner_ranks(np.array([int(self.offsets()[table]) + row]))[0])


def owner_ranks_reference(placement: Placement, keys: Iterable[int]) -> np.ndarray:
    """The slow, per-key reference of `Placement.owner_ranks`: find the key's table by
    its row offsets, then apply the table's type and its blocks as the plan states them."""
    offsets = [int(o) for o in placement.offsets()]
    out = []
    for key in keys:
        key = int(key)
        t = next(i for i in range(len(placement.tables)) if offsets[i] <= key < offsets[i + 1])
        row = key - offsets[t]
        e = placement.plan.tables[t]
        if e.type == TABLE_WISE:
            out.append(e.ranks[0])
        elif e.type in (*COLUMN_SPLIT, GRID, DATA_PARALLEL):
            out.append(MANY_OWNERS)
        elif e.shards is None:
            size = math.ceil(placement.tables[t].rows / len(e.ranks))
            out.append(e.ranks[row // size])
        else:
            out.append(next(r for r, (a, b) in zip(e.ranks, e.shards, strict=True) if a <= row < b))
    return np.array(out, dtype=np.int32)


def uniform_plan(
    kind: str, tables: Sequence[TableShape], *, nodes: int, gpus_per_node: int
) -> ShardingPlan:
    """Every table sharded the one way `kind` names (`cluster.sharding=KIND`):
    table-wise: table t on rank t mod world; row-wise: every rank in order; column-wise:
    n = the largest divisor of dim not above the world, ranks t*n, t*n+1, ... mod world;
    table-row-wise: every GPU of node t mod nodes; data-parallel: every rank;
    table-column-wise: n = the largest divisor of dim not above a node's GPUs, the first
    n GPUs of node t mod nodes; grid: n = the largest divisor of dim not above the nodes,
    column block c on every GPU of node (t + c) mod nodes."""
    world = check_cluster(nodes, gpus_per_node)
    if kind not in PLAN_TYPES:
        raise ConfigError(
            f"cluster.sharding: unknown type {kind!r} (types: {', '.join(PLAN_TYPES)})"
        )

    def divisor(dim: int, most: int) -> int:  # the largest divisor of dim up to most
        return max(d for d in range(1, min(most, max(dim, 1)) + 1) if max(dim, 1) % d == 0)

    out = []
    for t, shape in enumerate(tables):
        node = t % nodes
        gpus = tuple(range(node * gpus_per_node, (node + 1) * gpus_per_node))
        if kind == TABLE_WISE:
            ranks: tuple[int, ...] = (t % world,)
        elif kind in (ROW_WISE, DATA_PARALLEL):
            ranks = tuple(range(world))
        elif kind == TABLE_ROW_WISE:
            ranks = gpus
        elif kind == TABLE_COLUMN_WISE:
            ranks = gpus[: divisor(shape.dim, gpus_per_node)]
        elif kind == GRID:
            ranks = tuple(
                ((t + c) % nodes) * gpus_per_node + g
                for c in range(divisor(shape.dim, nodes))
                for g in range(gpus_per_node)
            )
        else:
            n = divisor(shape.dim, world)
            ranks = tuple((t * n + j) % world for j in range(n))
        out.append(TableSharding(shape.name, kind, ranks))
    return ShardingPlan(tuple(out), f"every table {kind}")


__all__ = [
    "CACHED_KERNELS",
    "COLUMN_SPLIT",
    "COLUMN_WISE",
    "DATA_PARALLEL",
    "GRID",
    "MANY_OWNERS",
    "PLAN_TYPES",
    "ROW_SPLIT",
    "ROW_WISE",
    "SHARDING_TYPES",
    "TABLE_COLUMN_WISE",
    "TABLE_ROW_WISE",
    "TABLE_WISE",
    "Placement",
    "Shard",
    "ShardingPlan",
    "TableShape",
    "TableSharding",
    "check_cluster",
    "column_blocks",
    "executable_reason",
    "grid_groups",
    "owner_ranks_reference",
    "plan_from_json",
    "read_plan",
    "resolve_plan",
    "row_blocks",
    "shard_bytes",
    "table_shapes",
    "uniform_plan",
]
