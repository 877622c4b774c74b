"""What a table costs the sharder (`replay.engine.sharder`): its measured load, the cost
model's weights, and what splitting a table costs every GPU that holds a block of it.

Placement. Engine arithmetic below the sharder (`sharder.py`, its TorchRec-executable
search `sharder_even.py`) and above the plan's data (`replay/system/sharding.py`); the
system's prices are set by `replay.engine.placement.system_cost_model`. Pure.

The unit is one lookup (a cache hit on the system's GPU plus its pooled embedding's
share of the all-to-all, `placement.system_cost_model`). What a split adds, per GPU that
holds a block (TorchRec's collectives, `replay.engine.collectives` cites the files):

- **row-wise**: every rank reduce-scatters its whole ``[global batch, dim]`` partial sums
  forward and all-gathers their gradients backward, whether or not it holds a row of a
  bag: ``row_wise_byte x batch x dim x 4`` per GPU, ``row_wise_byte`` = 2 (W - 1) / W x
  seconds per byte of the ring's slowest link / seconds per lookup;
- **table-row-wise**: the reduce-scatter inside the node ((G - 1) / G of the tensor over
  NVLink), then each GPU's all-to-all across nodes ((N - 1) / W of it over its share of
  the NICs), and both reversed backward: ``table_row_wise_byte x batch x dim x 4``.

ASSUMPTIONS: the collectives' latencies are not priced (paid per sharding group, not per
table); a split table's lookups keep the unit's all-to-all part (they no longer send
their pooled embedding, the reduce-scatter does: conservative against splitting, by
about 1 / W of the table's own all-to-all per GPU).

**Tiny tables are never split** (`TINY_ROWS`): a table of fewer than 1,000 rows is one
unit, whole on one GPU or replicated (data-parallel). Its bytes are negligible, and
splitting it would cost every GPU the split's collective for a handful of rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from replay.system.sharding import BYTES_PER_VALUE, row_blocks
from replay.workload.row_mass import RowMass

TINY_ROWS = 1000  # a table of fewer rows is never split (module docstring)


@dataclass(frozen=True)
class TableLoad:
    """What one table costs per batch, as measured from the workload."""

    name: str
    rows: int
    dim: int
    lookups: float  # row lookups per batch
    misses: float = 0.0  # cache misses per batch
    bags: float | None = None  # pooled embeddings (samples) per batch; None: lookups
    row_bytes: int | None = None  # one full row's values + optimizer state; None: 4 x dim
    # how the lookups fall on the rows (None: uniformly); not part of equality
    mass: RowMass | None = field(default=None, compare=False, repr=False)
    # what the table holds in a GPU's HBM under its kernel (None: every row, `bytes`)
    hbm_bytes: int | None = None

    def share(self, start: int, stop: int) -> float:
        """The share of the table's lookups on rows [start, stop)."""
        if self.mass is None or self.mass.total <= 0:
            return (stop - start) / self.rows if self.rows else 1.0
        return float(self.mass.mass(start, stop)[0]) / self.mass.total

    def hottest_share(self) -> float:
        """The share of the table's lookups on its most looked-up row."""
        if self.mass is None or self.mass.total <= 0:
            return 1.0 / self.rows if self.rows else 0.0
        return self.mass.max_row_mass() / self.mass.total

    @property
    def bytes_per_row(self) -> int:
        return BYTES_PER_VALUE * self.dim if self.row_bytes is None else int(self.row_bytes)

    @property
    def bytes(self) -> int:
        return self.rows * self.bytes_per_row

    @property
    def hbm(self) -> int:
        """Bytes the table holds in HBM (its kernel's footprint; every row by default)."""
        return self.bytes if self.hbm_bytes is None else int(self.hbm_bytes)

    def hbm_of(self, start: int, stop: int) -> int:
        """HBM bytes of rows [start, stop): the footprint prorated to the rows (rounded up)."""
        if self.hbm_bytes is None or not self.rows:
            return (stop - start) * self.bytes_per_row
        return -(-int(self.hbm_bytes) * (stop - start) // self.rows)

    @property
    def tiny(self) -> bool:
        """Never split (`TINY_ROWS`)."""
        return self.rows < TINY_ROWS

    @property
    def batch(self) -> float:
        """Pooled embeddings (samples) per batch: the rows of its [batch, dim] outputs."""
        return self.lookups if self.bags is None else self.bags


@dataclass(frozen=True)
class CostModel:
    """Weights of a table's cost: per lookup, per miss, per byte the GPU holds, per byte
    each GPU sends in the ring all-reduce of a replica's gradient (`replica_byte`; 0:
    replication's network cost not priced, the lookups-only model), and per byte of a
    split table's [batch, dim] outputs each GPU holding a block of it sends row-wise
    (`row_wise_byte`) or table-row-wise (`table_row_wise_byte`; module docstring)."""

    lookup: float = 1.0
    miss: float = 0.0
    byte: float = 0.0
    replica_byte: float = 0.0
    row_wise_byte: float = 0.0
    table_row_wise_byte: float = 0.0

    def access(self, load: TableLoad) -> float:
        return self.lookup * load.lookups + self.miss * load.misses

    def memory(self, load: TableLoad) -> float:
        return self.byte * load.bytes

    def allreduce(self, load: TableLoad, world: int) -> float:
        """What replicating `load` costs every GPU on the network: ``replica_byte x
        2 (W - 1) / W x 4 x dim x rows`` (a ring all-reduce of its fp32 gradient; 0 on
        one GPU)."""
        if world <= 1 or self.replica_byte == 0:
            return 0.0
        grad = BYTES_PER_VALUE * load.dim * load.rows
        return self.replica_byte * 2.0 * (world - 1) / world * grad

    def replica(self, load: TableLoad, world: int) -> float:
        """What a data-parallel copy costs each of the `world` GPUs: 1 / world of the
        access, the memory of the whole table, the all-reduce."""
        return self.access(load) / world + self.memory(load) + self.allreduce(load, world)

    def row_wise(self, load: TableLoad) -> float:
        """What a row-wise split adds to every GPU: its [batch, dim] partial sums' reduce-
        scatter and their gradients' all-gather."""
        return self.row_wise_byte * load.batch * load.dim * BYTES_PER_VALUE

    def table_row_wise(self, load: TableLoad) -> float:
        """What a table-row-wise split adds to each GPU of its node."""
        return self.table_row_wise_byte * load.batch * load.dim * BYTES_PER_VALUE


def even_shares(load: TableLoad, k: int) -> list[float]:
    """The share of a table's lookups on each of TorchRec's k even row blocks
    (ceil(rows / k) rows each, in order; trailing blocks may be empty)."""
    blocks = row_blocks(load.rows, k)
    if load.mass is None or load.mass.total <= 0 or load.rows == 0:
        return [(b - a) / load.rows if load.rows else 1.0 / k for a, b in blocks]
    full = [i for i, (a, b) in enumerate(blocks) if b > a]
    got = load.mass.block_shares(np.array([blocks[i][0] for i in full], dtype=np.int64))
    shares = [0.0] * k
    for i, g in zip(full, got.tolist(), strict=True):
        shares[i] = float(g)
    return shares


def hot_costs(
    loads: Sequence[TableLoad],
    model: CostModel | None = None,
    *,
    world: int = 1,
    gpus_per_node: int = 1,
    even: bool = False,
) -> list[float]:
    """Each table's unsplittable unit, the least any GPU holding part of it pays: a tiny
    table's whole access cost; else the least of the whole table, its hottest row (its
    costliest even block over the W GPUs with `even`, TorchRec's finest split) plus the
    row-wise split's collective, and (across nodes) its costliest even block over a
    node's G GPUs plus table-row-wise's. Without split prices (`CostModel()`) and
    `even`, the hottest row's cost, as before splits were priced."""
    model = model or CostModel()
    out = []
    multi = world > gpus_per_node >= 1
    for ld in loads:
        access = model.access(ld)
        if ld.tiny or world <= 1:
            out.append(access)
            continue
        rw = access * (max(even_shares(ld, world)) if even else ld.hottest_share())
        best = min(access, rw + model.row_wise(ld))
        if multi:
            local = access * (max(even_shares(ld, gpus_per_node)) if even else ld.hottest_share())
            best = min(best, local + model.table_row_wise(ld))
        out.append(best)
    return out


def options(
    load: TableLoad, model: CostModel, world: int, gpus_per_node: int, *, even: bool
) -> list[tuple[float, float]]:
    """(the largest piece a GPU pays, the total over the GPUs) of each way the table can
    be placed (`_options`)."""
    return [(piece, total) for piece, total, _ in _options(load, model, world, gpus_per_node,
                                                           even=even)]  # fmt: skip


def _options(
    load: TableLoad, model: CostModel, world: int, gpus_per_node: int, *, even: bool
) -> list[tuple[float, float, int]]:
    """(the largest piece a GPU pays, the total over the GPUs, blocks) of each way the
    table can be placed: whole (1 block), replicated (0), and (not tiny) split. With
    `even` (TorchRec's executable splits): row-wise in W even blocks and, across nodes,
    table-row-wise in a node's G, the piece its costliest even block plus its
    collective. Without (`auto-uneven`: any k >= 2 blocks of any sizes on k GPUs,
    row-wise or, k within a node, table-row-wise, the collective paid by the k GPUs
    that hold one): `_uneven`'s relaxations of the k-block ways."""
    access = model.access(load) + model.memory(load)
    rep = model.replica(load, world)
    out = [(access, access, 1), (rep, rep * world, 0)]
    if load.tiny or world <= 1:
        return out
    rw = model.row_wise(load)
    multi = world > gpus_per_node >= 1
    if even:
        out.append((access * max(even_shares(load, world)) + rw, access + world * rw, world))
        if multi:
            g = gpus_per_node
            tw = model.table_row_wise(load)
            out.append((access * max(even_shares(load, g)) + tw, access + g * tw, g))
        return out
    out.extend(_uneven(load, access, rw, world))
    if multi:
        out.extend(_uneven(load, access, model.table_row_wise(load), gpus_per_node))
    return out


def _uneven(
    load: TableLoad, access: float, price: float, most: int
) -> list[tuple[float, float, int]]:
    """Splits into k = 2 .. `most` blocks of any sizes, each GPU holding one paying
    `price`: the largest block holds at least 1 / k of the lookups, its hottest row's,
    and ceil(rows / k) rows, and the k GPUs pay k x `price`. One way per range of k
    (2-3, 4-7, 8-15, ...): the range's least piece, access x max(hottest share, 1 / its
    largest k) + `price`, with its least total, access + its least k x `price`, and
    its largest k's blocks -- no k of the range does better in any, so the bounds stay
    bounds with log2(W) ways a table."""
    out = []
    lo = 2
    while lo <= most:
        hi = min(2 * lo - 1, most)
        piece = access * max(load.hottest_share(), 1.0 / hi) + price
        out.append((piece, access + lo * price, hi))
        lo = hi + 1
    return out


def time_floor(
    loads: Sequence[TableLoad], model: CostModel, world: int, gpus_per_node: int, *, even: bool
) -> float:
    """A lower bound on the largest per-GPU cost of every plan of the sharder's types
    (whole, replicated, row-wise, table-row-wise; even blocks with `even`): the least T
    with T >= each table's smallest piece and W x T >= the sum over tables of the least
    total among the ways whose piece is at most T (a plan whose largest cost is T places
    each table some such way, and its GPUs together carry the totals). Bisection on T
    (the sum falls as T grows)."""
    opts = [options(ld, model, world, gpus_per_node, even=even) for ld in loads]
    if not opts or world <= 0:
        return 0.0

    def need(t: float) -> float:
        return sum(min(tot for piece, tot in o if piece <= t) for o in opts) / world

    lo = max(min(piece for piece, _ in o) for o in opts)
    hi = max(lo, need(lo))
    if need(lo) <= lo:
        return float(lo)
    for _ in range(60):  # need(lo) > lo, need(hi) <= hi
        mid = (lo + hi) / 2
        if need(mid) <= mid:
            hi = mid
        else:
            lo = mid
    return float(lo)


STEP_SLACK = 0.1  # the bytes floor at a step: plans whose busiest GPU is within 10% of its floor


def _ways(
    load: TableLoad, model: CostModel, world: int, gpus_per_node: int, *, even: bool
) -> list[tuple[float, float, float, float]]:
    """`options` with bytes: (piece cost, total cost, the largest piece's HBM bytes, the
    HBM bytes over every GPU) of each way: whole, replicated (every GPU a copy), row-wise
    over the W GPUs and table-row-wise over a node's G (an even block of rows; the
    costliest block's cost, as `options`)."""
    hbm = float(load.hbm)
    out = []
    for piece, total, blocks in _options(load, model, world, gpus_per_node, even=even):
        if blocks == 0:  # a replica: the whole table on every GPU
            out.append((piece, total, hbm, hbm * world))
        else:  # the largest of `blocks` blocks holds at least ceil(rows / blocks) rows
            out.append((piece, total, float(load.hbm_of(0, -(-load.rows // blocks))), hbm))
    return out


def bytes_floor_at_step(
    loads: Sequence[TableLoad],
    model: CostModel,
    world: int,
    gpus_per_node: int,
    step: float,
    *,
    even: bool,
) -> float:
    """A lower bound on the fullest GPU's HBM bytes of every plan (of the sharder's
    types) whose busiest GPU costs at most `step`: the least B such that every table has
    a way whose piece costs at most `step` and holds at most B bytes, the least totals
    of costs among those ways fit W x `step`, and the least totals of bytes fit W x B
    (a plan of largest cost `step` and fullest GPU B places each table some such way;
    its GPUs carry both totals). Each condition is necessary, so the least B meeting
    both is a bound (bisection: B only adds ways). inf when no B does (`step` under the
    time floor)."""
    ways = [_ways(ld, model, world, gpus_per_node, even=even) for ld in loads]
    ways = [[w for w in o if w[0] <= step] for o in ways]
    if any(not o for o in ways) or world <= 0:
        return float("inf")

    def ok(b: float) -> bool:
        cost = byte = 0.0
        for o in ways:
            fit = [w for w in o if w[2] <= b]
            if not fit:
                return False
            cost += min(w[1] for w in fit)
            byte += min(w[3] for w in fit)
        return cost <= world * step * (1 + 1e-12) and byte <= world * b

    hi = max(max(w[2] for w in o) for o in ways)
    hi = max(hi, sum(min(w[3] for w in o) for o in ways) / world)
    hi = max(hi, sum(max(w[3] for w in o) for o in ways) / world)
    if not ok(hi):
        return float("inf")
    lo = 0.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return float(hi)


__all__ = [
    "STEP_SLACK",
    "TINY_ROWS",
    "CostModel",
    "TableLoad",
    "bytes_floor_at_step",
    "even_shares",
    "hot_costs",
    "time_floor",
]
