"""The cluster replay's routing kernels (`replay.engine.cluster` says what they compute):
each lookup and update row of a batch range to the rank that owns it, as a rank-local key,
and each batch's all-to-all counts per rank (the lower bound's pooled bytes and the ids of
TorchRec's input all-to-all, which `replay.engine.collectives` turns into bytes and time).

Two passes per stream, both numba: `route_lookups` (or `route_updates`) records every
key's block and counts the keys per batch and rank; `scatter` lays the keys out rank
after rank as local keys (key + `gshift` of its block), in trace order within a rank. The
record arrays are buffers that `Router` keeps across ranges; the routed keys a ring of
them (`ring`), so that a routing thread can run a range ahead of the ranks' policies
(`replay.engine.cluster`).

Cost. A row-wise or table-wise table with at most one lookup per sample (pooling 1, the
Criteo presets) takes a lean loop: each lookup is its own bag (no per-bag set of blocks),
the owner's received bytes are summed in registers while the owner stays the same, the
owner's node is the range [first, first + gpus per node) so no division tells a send
intra- from inter-node, the sample comes from an incremental quotient and remainder, the
sample's owner from a per-sample table, the row's block from a multiply and a shift
(`magic`; the division it replaces was a quarter of this loop's time, and a float
reciprocal with its correction measured no faster than the division on the VM's EPYC).
criteo-kaggle, 400 x 2,048, 64 GPUs row-wise, interleaved on the loaded 2-core VM:
`route_lookups` 0.30-0.41 s against 0.76-0.95 s for the general loop it replaces (bag
sets, five divisions a lookup); with `magic`, 0.70-0.80 s against 1.65-2.15 s under a
heavier load. Explicit (uneven) row blocks, as the automatic sharder cuts them, find a
row's block from a bucket index (`buckets`: one load, and a step past a block's end in
~1 bucket of 30) instead of a binary search of the blocks' first rows; a data-parallel
table at pooling 1 takes a loop of its own (each lookup to its sample's replica, no
bytes); an update row searches for its table only where it leaves the previous row's,
and a replicated table's update rows are counted once a batch, not once a rank. The
auto plan of criteo-kaggle at 64 GPUs (20 tables in 12-13 uneven blocks, 6 replicated),
200 x 2,048: `route_lookups` 0.18 s against 0.46 s, `route_updates` 0.03 s against
0.17 s (the loaded VM, same process).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from replay._intrinsics import ix
from replay._jit import kernel
from replay.engine.cluster_scatter import scatter_part, scatter_start
from replay.engine.collectives import sharding_groups, table_groups
from replay.system.sharding import (
    COLUMN_SPLIT,
    DATA_PARALLEL,
    GRID,
    TABLE_ROW_WISE,
    TABLE_WISE,
    Placement,
)
from replay.system.spec import BYTES_PER_VALUE
from replay.trace.keys import table_of
from replay.trace.stream import BatchRange

# table kinds in the routing kernel
ROWS, CW, DP, TWRW, GRIDS = 0, 1, 2, 3, 4


@dataclass(frozen=True, eq=False)
class Layout:
    """The routing kernel's arrays (see `layout`)."""

    kind: np.ndarray  # int64 per table: ROWS, CW, DP, TWRW, GRIDS
    even: np.ndarray  # int64 per table: even block size (row-split), 0 for explicit blocks
    base: np.ndarray  # int64 per table: its first block
    count: np.ndarray  # int64 per table: its blocks
    start: np.ndarray  # int64 per block: first row (row-split: sorted within its table)
    rank: np.ndarray  # int64 per block: the rank holding it
    local: np.ndarray  # int64 per block: the local key of its first row on its rank
    pooled: np.ndarray  # int64 per block: bytes of its pooled embedding (cols x 4)
    full: np.ndarray  # int64 per table: dim x 4
    geven: np.ndarray  # int64 per block: a grid block's column block's row block size, else 0
    rank_rows: list[list[int]]  # per rank: rows of each of its shards, in local order
    max_blocks: int


def layout(placement: Placement) -> Layout:
    """Blocks per table: row-split tables their non-empty row blocks sorted by first row
    (even rule: in rank order, so block = row // size), table-wise one, column-wise one per
    column block (shard order), data-parallel one per rank (rank order), grid its column
    blocks in shard order, each its non-empty row blocks in row order (the even rule over
    the column block's ranks: a row's block in column block c is c's first block + row //
    geven). Local keys: each rank's shards in `placement.shards` order, end to end."""
    world = placement.world
    rank_rows: list[list[int]] = [[] for _ in range(world)]
    local_of: dict[int, int] = {}  # shard index -> local key of its first row
    next_local = [0] * world
    for i, s in enumerate(placement.shards):
        local_of[i] = next_local[s.rank]
        next_local[s.rank] += s.rows
        rank_rows[s.rank].append(s.rows)
    nt = len(placement.tables)
    kind = np.zeros(nt, np.int64)
    even = np.zeros(nt, np.int64)
    base = np.zeros(nt, np.int64)
    count = np.zeros(nt, np.int64)
    full = np.zeros(nt, np.int64)
    start: list[int] = []
    rank: list[int] = []
    local: list[int] = []
    pooled: list[int] = []
    geven: list[int] = []
    by_table: dict[int, list[int]] = {}
    for i, s in enumerate(placement.shards):
        by_table.setdefault(s.table, []).append(i)
    for t, shape in enumerate(placement.tables):
        e = placement.entry(t)
        idx = by_table.get(t, [])
        full[t] = BYTES_PER_VALUE * shape.dim
        if e.type in COLUMN_SPLIT:  # column-wise, table-column-wise
            kind[t] = CW
        elif e.type == DATA_PARALLEL:
            kind[t] = DP
            idx = sorted(idx, key=lambda i: placement.shards[i].rank)
        elif e.type == GRID:
            kind[t] = GRIDS
            # shards come column block by column block, each's row blocks in order
            # (`replay.system.sharding._entry_shards`); a column block's size from its ranks
            per_col: dict[int, int] = {}
            for i in idx:
                c0 = placement.shards[i].col_start
                per_col[c0] = per_col.get(c0, 0) + 1
            idx = [i for i in idx if placement.shards[i].rows > 0]
            idx.sort(key=lambda i: (placement.shards[i].col_start, placement.shards[i].row_start))
        else:
            kind[t] = TWRW if e.type == TABLE_ROW_WISE else ROWS
            idx = [i for i in idx if placement.shards[i].rows > 0]
            idx.sort(key=lambda i: placement.shards[i].row_start)
            if e.type != TABLE_WISE and e.shards is None:
                even[t] = max(-(-shape.rows // len(e.ranks)), 1)
                # the even rule's blocks are in rank order and only trailing ones empty
            elif e.type == TABLE_WISE:
                even[t] = max(shape.rows, 1)
        base[t] = len(start)
        for i in idx:
            s = placement.shards[i]
            start.append(s.row_start)
            rank.append(s.rank)
            local.append(local_of[i])
            pooled.append(BYTES_PER_VALUE * s.cols)
            geven.append(max(-(-shape.rows // per_col[s.col_start]), 1) if e.type == GRID else 0)
        count[t] = len(start) - base[t]
    arr = lambda v: np.array(v, dtype=np.int64)  # noqa: E731
    return Layout(
        kind, even, base, count, arr(start), arr(rank), arr(local), arr(pooled), full,
        arr(geven), rank_rows, int(count.max()) if nt else 1,
    )  # fmt: skip


def magic(rows: np.ndarray, even: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per table (mul, shift) with row // even == (row * mul) >> shift for every row of
    the table (mul 0 where there is no even block size, or 2^30 rows or more). With
    L = bit length of rows and S = L + bit length of even, mul = ceil(2^S / even): the
    error row x (mul x even - 2^S) / (even x 2^S) < rows / 2^S < 1 / even leaves the
    floor exact, and row x mul < 2^(2L + 1) + 2^L fits an int64 for L <= 30."""
    mul = np.zeros(len(even), dtype=np.int64)
    shift = np.zeros(len(even), dtype=np.int64)
    for t, (n, d) in enumerate(zip(rows.tolist(), even.tolist(), strict=True)):
        if d > 0 and 0 < n < 1 << 30:
            shift[t] = n.bit_length() + d.bit_length()
            mul[t] = ((1 << int(shift[t])) + d - 1) // d
    return mul, shift


def buckets(lay: Layout, rows: np.ndarray) -> tuple[np.ndarray, ...]:
    """(bshift, bbase per table; bfirst per bucket; bend per block): the bucket index of
    the row-split tables with explicit blocks (`even` 0). Table t's rows fall in buckets
    of 2^bshift[t] rows, about 32 a block (at most 4,096, at least one a row up to 2^12
    rows); bfirst[bbase[t] + row >> bshift[t]] is the block holding the bucket's first
    row, and a row lies in that block or a later one: the first whose end bend[blk] (the
    next block's first row, the table's rows for its last) exceeds it. With ~13 blocks a
    table, 1 bucket in ~30 holds a block's end."""
    nt = len(lay.kind)
    bshift = np.zeros(nt, dtype=np.int64)
    bbase = np.zeros(nt, dtype=np.int64)
    bend = np.zeros(len(lay.start), dtype=np.int64)
    first: list[np.ndarray] = []
    at = 0
    for t in range(nt):
        lo, c = int(lay.base[t]), int(lay.count[t])
        if lay.kind[t] in (CW, DP, GRIDS) or c == 0:
            continue
        n = int(rows[t])
        bend[lo : lo + c] = np.append(lay.start[lo + 1 : lo + c], n)
        if lay.even[t] > 0:
            continue
        bits = min(max((32 * c - 1).bit_length(), 4), 12)
        bshift[t] = max((n - 1).bit_length() - bits, 0)
        starts = np.arange(((n - 1) >> bshift[t]) + 1, dtype=np.int64) << bshift[t]
        bbase[t] = at
        first.append(lo + np.searchsorted(lay.start[lo : lo + c], starts, side="right") - 1)
        at += len(starts)
    bfirst = np.concatenate(first).astype(np.int32) if first else np.zeros(1, np.int32)
    return bshift, bbase, bfirst, bend


@kernel(inline="always")
def _block_of(t: int, row: int, mul: np.ndarray, mshift: np.ndarray, even: np.ndarray,
              base: np.ndarray, bshift: np.ndarray, bbase: np.ndarray, bfirst: np.ndarray,
              bend: np.ndarray) -> int | np.int64:  # fmt: skip
    """The block of a row-split or table-wise table holding `row`: base + row // size for
    even blocks (a multiply and a shift, `magic`: a division costs a quarter of the lean
    loop's time), else its bucket's first block, moved on past the blocks that end at or
    before the row (`buckets`: a binary search of the blocks' first rows took 2.3x the
    lean loop's time of even blocks)."""
    m = mul[ix(t)]
    if m > 0:
        return base[ix(t)] + ((row * m) >> mshift[ix(t)])
    size = even[ix(t)]
    if size > 0:
        return base[ix(t)] + row // size
    blk = int(bfirst[ix(bbase[ix(t)] + (row >> bshift[ix(t)]))])
    while row >= bend[ix(blk)]:
        blk += 1
    return blk


@kernel(inline="always")
def _send(src: int, dst: int, nbytes: int, gpn: int, scratch: np.ndarray) -> None:
    if src == dst:
        return
    if src // gpn == dst // gpn:
        scratch[ix(src), 0] += nbytes
        scratch[ix(dst), 2] += nbytes
    else:
        scratch[ix(src), 1] += nbytes
        scratch[ix(dst), 3] += nbytes


@kernel(inline="always")
def _send_id(src: int, dst: int, g: int, gpn: int, iscratch: np.ndarray) -> None:
    """One id from the sample's rank `src` to the rank serving it, in group g's input
    all-to-all (nothing to itself)."""
    if src == dst:
        return
    if src // gpn == dst // gpn:
        iscratch[g, ix(src), 0] += 1
        iscratch[g, ix(dst), 2] += 1
    else:
        iscratch[g, ix(src), 1] += 1
        iscratch[g, ix(dst), 3] += 1


@kernel(inline="always")
def _flush(held: np.ndarray, nheld: int, owner: int, k_t: int, brank: np.ndarray,
           pooled: np.ndarray, full: int, gpn: int, scratch: np.ndarray) -> None:  # fmt: skip
    """A bag's forward bytes: each holding block's pooled embedding to the sample's owner
    (table-row-wise: to the owner's local index in the table's node, then once across)."""
    if k_t == TWRW:
        agg = (brank[ix(held[0])] // gpn) * gpn + owner % gpn
        for h in range(nheld):
            _send(brank[ix(held[h])], agg, pooled[ix(held[h])], gpn, scratch)
        _send(agg, owner, full, gpn, scratch)
    else:
        for h in range(nheld):
            _send(brank[ix(held[h])], owner, pooled[ix(held[h])], gpn, scratch)


@kernel(inline="always")
def _flush_grid(held: np.ndarray, nheld: int, owner: int, brank: np.ndarray,
                pooled: np.ndarray, geven: np.ndarray, rows: int, tb: int, gpn: int,
                scratch: np.ndarray) -> None:  # fmt: skip
    """A grid bag's forward bytes: table-row-wise per column block, each holding block's
    pooled columns to the owner's local index on the block's node, then, once per column
    block held, those columns on to the owner."""
    for h in range(nheld):
        blk = held[h]
        agg = (brank[ix(blk)] // gpn) * gpn + owner % gpn
        _send(brank[ix(blk)], agg, pooled[ix(blk)], gpn, scratch)
        # the column block's first block: this block's and every earlier held one's
        c0 = tb
        while c0 + (rows + geven[ix(c0)] - 1) // geven[ix(c0)] <= blk:
            c0 += (rows + geven[ix(c0)] - 1) // geven[ix(c0)]
        first = True
        for k in range(h):
            if c0 <= held[k] < c0 + (rows + geven[ix(c0)] - 1) // geven[ix(c0)]:
                first = False
                break
        if first:
            _send(agg, owner, pooled[ix(blk)], gpn, scratch)


@kernel
def route_lookups(
    keys: np.ndarray,
    bounds: np.ndarray,
    batch_size: int,
    gpn: int,
    offsets: np.ndarray,
    kind: np.ndarray,
    mul: np.ndarray,
    mshift: np.ndarray,
    even: np.ndarray,
    base: np.ndarray,
    count: np.ndarray,
    bshift: np.ndarray,
    bbase: np.ndarray,
    bfirst: np.ndarray,
    bend: np.ndarray,
    brank: np.ndarray,
    local: np.ndarray,
    shift: np.ndarray,
    geven: np.ndarray,
    pooled: np.ndarray,
    full: np.ndarray,
    group: np.ndarray,
    own: np.ndarray,
    counts: np.ndarray,
    kblk: np.ndarray,
    stamp: np.ndarray,
    held: np.ndarray,
    scratch: np.ndarray,
    iscratch: np.ndarray,
    lower: np.ndarray,
    ids: np.ndarray,
    goes_on: bool = False,
) -> None:
    """Route the lookups of a range's batches: counts[b, r] = lookups of batch b routed to rank r;
    kblk[i] = lookup i's block (-1 - t for a column-wise or grid lookup of table t, which
    goes to every block, or to its row's block in every column block: `geven[blk]`, a grid
    block's row block size), which `scatter` turns into its rank and local key; lower[b] (world x
    4) = the lower bound's forward bytes per rank (sent intra-node, sent inter-node,
    received intra-node, received inter-node: `replay.engine.collectives`); ids[b] (groups x
    world x 4) = the ids each rank sends to and receives from other ranks in TorchRec's
    input all-to-all of each sharding group (`group[t]`: table t's, -1 data-parallel, which
    sends none), counted as the bytes are. `own[s]`: sample s's rank; `shift[blk]` =
    local[blk] - start[blk]. `stamp` (per block) and `held` mark a bag's blocks; `scratch`
    (world x 4) and `iscratch` (groups x world x 4) hold the current batch's. `goes_on`: the
    range is a later piece of the batch the last call routed (`BatchRange.tables`): the
    scratches keep that batch's counts, so lower[0] and ids[0] are the whole batch's so far
    (tables never share a bag)."""
    bag = 0
    stamp[:] = -1  # bag ids restart with every call
    for b in range(len(bounds) - 1):
        lo = bounds[b]
        hi = bounds[b + 1]
        if b > 0 or not goes_on:
            scratch[:, :] = 0
            iscratch[:, :, :] = 0
        i = lo
        while i < hi:
            t = table_of(offsets, np.int64(keys[ix(i)]))
            toff = offsets[ix(t)]
            tend = offsets[ix(t + 1)]
            # the group's end: the first lookup of a later table (tables ascend in a batch)
            a = i
            z = hi
            while a < z:
                m = (a + z) >> 1
                if np.int64(keys[ix(m)]) >= tend:
                    z = m
                else:
                    a = m + 1
            n = a - i
            k_t = kind[ix(t)]
            g = group[ix(t)]
            tb = base[ix(t)]
            nblk = count[ix(t)]
            full_t = full[ix(t)]
            # lookup p is sample s = p x batch_size // n: nxt = ceil((s + 1) n / batch_size),
            # the first position of sample s + 1, kept as quotient and remainder
            dq = n // batch_size
            dr = n - dq * batch_size
            q0 = n + batch_size - 1
            nxt = q0 // batch_size
            rem = q0 - nxt * batch_size
            s = 0
            owner = own[0]
            nheld = 0
            bag += 1
            if n <= batch_size and k_t == ROWS:
                # pooling 1 (a sample has at most one lookup): each lookup its own bag, its
                # block's rank sends to the owner; what the owner receives is summed here
                # (`rin`, `rout`: intra-, inter-node) while the owner stays the same
                first = (owner // gpn) * gpn  # the owner's node's first rank
                rin = 0
                rout = 0
                # ids the owner sends, intra- and inter-node (numba unifies int and int64)
                iin: np.int64 | int = 0
                iout: np.int64 | int = 0
                # the table's even blocks' multiplier, loaded once (the stores below may
                # alias the arrays, so the compiler reloads what is read in the loop), and
                # no branch on intra- or inter-node: 7 of 64 ranks share the owner's node
                m_t = mul[ix(t)]
                sh_t = mshift[ix(t)]
                b_t = base[ix(t)]
                e_t = even[ix(t)]
                bs_t = bshift[ix(t)]
                bb_t = bbase[ix(t)]
                crow = counts[b]
                isc = iscratch[g]
                for p in range(n):
                    j = i + p
                    row = np.int64(keys[ix(j)]) - toff
                    if p >= nxt:
                        while p >= nxt:
                            s += 1
                            nxt += dq
                            rem += dr
                            if rem >= batch_size:
                                rem -= batch_size
                                nxt += 1
                        if own[ix(s)] != owner:
                            scratch[ix(owner), 2] += rin
                            scratch[ix(owner), 3] += rout
                            isc[ix(owner), 0] += iin
                            isc[ix(owner), 1] += iout
                            rin = 0
                            rout = 0
                            iin = 0
                            iout = 0
                            owner = own[ix(s)]
                            first = (owner // gpn) * gpn
                    if m_t > 0:  # `_block_of`, its loads hoisted
                        blk = b_t + ((row * m_t) >> sh_t)
                    elif e_t == 0:
                        blk = int(bfirst[ix(bb_t + (row >> bs_t))])
                        while row >= bend[ix(blk)]:
                            blk += 1
                    else:
                        blk = b_t + row // e_t
                    r = brank[ix(blk)]
                    crow[ix(r)] += 1
                    kblk[ix(j)] = blk
                    sent = int(r != owner)  # a lookup on the owner's rank sends nothing
                    out = int(np.uint64(r - first) >= np.uint64(gpn))  # inter-node
                    nbytes = pooled[ix(blk)] * sent
                    scratch[ix(r), out] += nbytes
                    isc[ix(r), 2 + out] += sent
                    rout += nbytes * out
                    rin += nbytes - nbytes * out
                    iout += sent * out
                    iin += sent - sent * out
                scratch[ix(owner), 2] += rin
                scratch[ix(owner), 3] += rout
                isc[ix(owner), 0] += iin
                isc[ix(owner), 1] += iout
                i += n
                continue
            if n <= batch_size and k_t == DP:
                # pooling 1, data-parallel: each lookup to its sample's own replica, no
                # bytes sent
                for p in range(n):
                    j = i + p
                    if p >= nxt:
                        while p >= nxt:
                            s += 1
                            nxt += dq
                            rem += dr
                            if rem >= batch_size:
                                rem -= batch_size
                                nxt += 1
                        owner = own[ix(s)]
                    blk = tb + owner
                    r = brank[ix(blk)]
                    counts[b, r] += 1
                    kblk[ix(j)] = blk
                i += n
                continue
            if n <= batch_size and k_t == TWRW:  # pooling 1, table-row-wise
                for p in range(n):
                    j = i + p
                    row = np.int64(keys[ix(j)]) - toff
                    if p >= nxt:
                        while p >= nxt:
                            s += 1
                            nxt += dq
                            rem += dr
                            if rem >= batch_size:
                                rem -= batch_size
                                nxt += 1
                        owner = own[ix(s)]
                    blk = _block_of(t, row, mul, mshift, even, base, bshift, bbase, bfirst, bend)
                    r = brank[ix(blk)]
                    counts[b, r] += 1
                    kblk[ix(j)] = blk
                    agg = (r // gpn) * gpn + owner % gpn
                    _send(r, agg, pooled[ix(blk)], gpn, scratch)
                    _send(agg, owner, full_t, gpn, scratch)
                    _send_id(owner, r, g, gpn, iscratch)
                i += n
                continue
            for p in range(n):
                j = i + p
                row = np.int64(keys[ix(j)]) - toff
                if p >= nxt:  # a new bag
                    if nheld > 0 and k_t == GRIDS:
                        _flush_grid(held, nheld, owner, brank, pooled, geven, tend - toff, tb,
                                    gpn, scratch)  # fmt: skip
                    elif nheld > 0:
                        _flush(held, nheld, owner, k_t, brank, pooled, full_t, gpn, scratch)
                    nheld = 0
                    bag += 1
                    while p >= nxt:
                        s += 1
                        nxt += dq
                        rem += dr
                        if rem >= batch_size:
                            rem -= batch_size
                            nxt += 1
                    owner = own[ix(s)]
                if k_t == DP:
                    blk = tb + owner
                    r = brank[ix(blk)]
                    counts[b, r] += 1
                    kblk[ix(j)] = blk
                elif k_t == CW:
                    kblk[ix(j)] = -1 - t
                    for c in range(nblk):
                        blk = tb + c
                        counts[b, brank[ix(blk)]] += 1
                        _send_id(owner, brank[ix(blk)], g, gpn, iscratch)
                        if stamp[ix(blk)] != bag:
                            stamp[ix(blk)] = bag
                            held[nheld] = blk
                            nheld += 1
                elif k_t == GRIDS:
                    kblk[ix(j)] = -1 - t
                    c0 = tb
                    while c0 < tb + nblk:  # each column block, its row's block there
                        size = geven[ix(c0)]
                        blk = c0 + row // size
                        r = brank[ix(blk)]
                        counts[b, r] += 1
                        _send_id(owner, r, g, gpn, iscratch)
                        if stamp[ix(blk)] != bag:
                            stamp[ix(blk)] = bag
                            held[nheld] = blk
                            nheld += 1
                        c0 += (tend - toff + size - 1) // size
                else:
                    blk = _block_of(t, row, mul, mshift, even, base, bshift, bbase, bfirst, bend)
                    r = brank[ix(blk)]
                    counts[b, r] += 1
                    kblk[ix(j)] = blk
                    _send_id(owner, r, g, gpn, iscratch)
                    if stamp[ix(blk)] != bag:
                        stamp[ix(blk)] = bag
                        held[nheld] = blk
                        nheld += 1
            if nheld > 0 and k_t == GRIDS:
                _flush_grid(held, nheld, owner, brank, pooled, geven, tend - toff, tb, gpn,
                            scratch)  # fmt: skip
            elif nheld > 0:
                _flush(held, nheld, owner, k_t, brank, pooled, full_t, gpn, scratch)
            i += n
        lower[b] = scratch
        ids[b] = iscratch


@kernel
def route_updates(
    keys: np.ndarray,
    bounds: np.ndarray,
    offsets: np.ndarray,
    kind: np.ndarray,
    mul: np.ndarray,
    mshift: np.ndarray,
    even: np.ndarray,
    base: np.ndarray,
    count: np.ndarray,
    bshift: np.ndarray,
    bbase: np.ndarray,
    bfirst: np.ndarray,
    bend: np.ndarray,
    brank: np.ndarray,
    local: np.ndarray,
    shift: np.ndarray,
    geven: np.ndarray,
    counts: np.ndarray,
    tcount: np.ndarray,
    record: bool,
    kblk: np.ndarray,
) -> None:
    """Update rows to their ranks: the owner of the row's block; every column block; every
    data-parallel replica; the row's block in every grid column block (all three recorded as
    -1 - t, as `route_lookups` records a column-wise lookup). Counts, and records (`record`)
    as `route_lookups`. A row's table is searched only where the row leaves the previous
    row's table (a batch's update rows come table by table: `replay.trace.updates`); a
    replicated table's rows are counted per batch (`tcount`, per table, zero between calls)
    and added to its blocks' ranks once a batch. Counted only (not `record`), a row-split or
    table-wise table of even blocks takes its run of rows in a loop of its own, a table of
    one block the run's length at once (criteo-kaggle, 64 GPUs row-wise: 2.7-3.3 -> 1.6-2.1 ns a
    row)."""
    nt = len(kind)
    for b in range(len(bounds) - 1):
        t = 0
        toff = np.int64(0)
        tend = np.int64(-1)
        k_t = ROWS
        many = False
        i = bounds[b]
        end = bounds[b + 1]
        while i < end:
            key = np.int64(keys[ix(i)])
            if key >= tend or key < toff:
                t = table_of(offsets, key)
                toff = offsets[ix(t)]
                tend = offsets[ix(t + 1)]
                k_t = kind[ix(t)]
            row = key - toff
            if k_t == DP or k_t == CW:  # noqa: SIM109 - numba
                if record:
                    kblk[ix(i)] = -1 - t
                tcount[ix(t)] += 1
                many = True
            elif k_t == GRIDS:
                if record:
                    kblk[ix(i)] = -1 - t
                c0 = base[ix(t)]
                while c0 < base[ix(t)] + count[ix(t)]:
                    size = geven[ix(c0)]
                    counts[b, brank[ix(c0 + row // size)]] += 1
                    c0 += (tend - toff + size - 1) // size
            elif not record and mul[ix(t)] > 0:  # the table's run of rows, loads hoisted
                m = mul[ix(t)]
                sh = mshift[ix(t)]
                bt = base[ix(t)]
                j = i + 1
                if count[ix(t)] == 1:
                    while j < end and toff <= np.int64(keys[ix(j)]) < tend:
                        j += 1
                    counts[b, brank[ix(bt)]] += j - i
                else:
                    counts[b, brank[ix(bt + ((row * m) >> sh))]] += 1
                    while j < end:
                        key = np.int64(keys[ix(j)])
                        if key >= tend or key < toff:
                            break
                        counts[b, brank[ix(bt + (((key - toff) * m) >> sh))]] += 1
                        j += 1
                i = j
                continue
            else:
                blk = _block_of(t, row, mul, mshift, even, base, bshift, bbase, bfirst, bend)
                r = brank[ix(blk)]
                counts[b, r] += 1
                if record:
                    kblk[ix(i)] = blk
            i += 1
        if many:
            for u in range(nt):
                m = tcount[u]
                if m > 0:
                    for c in range(count[u]):
                        counts[b, brank[ix(base[u] + c)]] += m
                    tcount[u] = 0


@kernel
def scatter(
    counts: np.ndarray,
    kblk: np.ndarray,
    keys: np.ndarray,
    base: np.ndarray,
    count: np.ndarray,
    brank: np.ndarray,
    local: np.ndarray,
    offsets: np.ndarray,
    geven: np.ndarray,
    shift: np.ndarray,
    gshift: np.ndarray,
    cursor: np.ndarray,
    out: np.ndarray,
    starts: np.ndarray,
    bounds: np.ndarray,
) -> None:
    """The recorded keys to their ranks (counts: batches x world, from the record pass):
    rank r's keys, in trace order, at out[starts[r]:starts[r + 1]], its batch bounds (from
    0) at bounds[r] (world x (batches + 1)); key i of block kblk[i] to that block's rank
    as keys[i] + gshift[blk] (its local key there), a record -1 - t (a column-wise or
    data-parallel row of table t) to every block of t, a grid row to its block in each
    column block (`geven`). `cursor`: world scratch."""
    scatter_start(counts, cursor, starts, bounds)
    scatter_part(kblk, keys, base, count, brank, local, offsets, geven, shift, gshift, cursor, out)


class Router:
    """Routes a source's batch ranges for one placement: the layout's kernel arrays, and
    scratch buffers kept across ranges (`route` returns views into them, valid for the
    next `ring` - 1 calls). `traffic` (`route`, `count`): the range's rows of the
    kernel's per-batch `lower` and `ids` arrays (`CollectiveModel.buffers`)."""

    def __init__(self, placement: Placement, offsets: np.ndarray, batch_size: int,
                 ring: int = 1, narrow: bool = False) -> None:  # fmt: skip
        lay = self.lay = layout(placement)
        # `narrow`: the routed keys as uint32 where every rank's local keys fit (half the
        # bytes written here and read by the policies), else int64
        fits = max((sum(r) for r in lay.rank_rows), default=0) < np.iinfo(np.uint32).max
        self.key_dtype = np.uint32 if narrow and fits else np.int64
        # the routed keys' buffers: `ring` sets in turn, so a caller may hold the last
        # ring - 1 results while it asks for the next (a routing thread ahead of the
        # policies); the record buffers live within a call
        self.ring = ring
        self.turn = 0
        world = self.world = placement.world
        self.gpn = placement.gpus_per_node
        self.batch_size = batch_size
        self.offsets = offsets
        self.group = table_groups(placement)
        self.geven = lay.geven if len(lay.geven) else np.zeros(1, dtype=np.int64)
        groups = max(len(sharding_groups(placement)), 1)
        shift = lay.local - lay.start
        mul, mshift = magic(np.diff(offsets), lay.even)
        index = buckets(lay, np.diff(offsets))
        self.tables = (offsets, lay.kind, mul, mshift, lay.even, lay.base, lay.count, *index)
        self.shift = shift
        # a block's local key of a flat key: key + gshift (`scatter`)
        table = np.repeat(np.arange(len(lay.kind)), lay.count)
        self.gshift = np.where(lay.kind[table] == DP, lay.local, shift) - offsets[table]
        self.blocks = (lay.rank, lay.local, shift, lay.geven)
        self.own = (np.arange(batch_size, dtype=np.int64) * world) // batch_size
        self.stamp = np.full(max(len(lay.start), 1), -1, dtype=np.int64)
        self.held = np.zeros(max(lay.max_blocks, 1), dtype=np.int64)
        self.scratch = np.zeros((world, 4), dtype=np.int64)
        self.iscratch = np.zeros((groups, world, 4), dtype=np.int64)
        self.cursor = np.zeros(world, dtype=np.int64)
        self.tcount = np.zeros(len(lay.kind), dtype=np.int64)
        self._buf: dict[str, np.ndarray] = {}

    def _take(self, name: str, n: int, dtype: type) -> np.ndarray:
        """The first n of a grow-only scratch buffer."""
        buf = self._buf.get(name)
        if buf is None or len(buf) < n:
            buf = self._buf[name] = np.empty(max(n, 1 << 16), dtype=dtype)
        return buf[:n]

    def _scatter(self, tag: str, counts: np.ndarray, keys: np.ndarray) -> tuple:
        """(keys, starts, bounds) of the recorded keys, as `scatter` lays them out."""
        lay = self.lay
        n = counts.shape[0]
        starts = np.empty(self.world + 1, dtype=np.int64)
        bounds = np.empty((self.world, n + 1), dtype=np.int64)
        out = self._take(f"{tag}out{self.turn}", int(counts.sum()), self.key_dtype)
        scatter(
            counts, self._buf[tag + "blk"][: len(keys)], keys, lay.base, lay.count, lay.rank,
            lay.local, self.offsets, self.geven, self.shift, self.gshift, self.cursor, out,
            starts, bounds,
        )  # fmt: skip
        return out, starts, bounds

    def _route(
        self, br: BatchRange, traffic: tuple[np.ndarray, np.ndarray], update_keys: bool
    ) -> tuple[np.ndarray, int, np.ndarray, int]:
        """The routing kernels over the range: (counts, lookups recorded, ucounts, update
        rows recorded); the recorded blocks stay in the scratch buffers."""
        n, world = br.batches, self.world
        nk = len(br.keys)
        counts = np.zeros((n, world), dtype=np.int64)
        route_lookups(
            br.keys, br.bounds, self.batch_size, self.gpn, *self.tables, *self.blocks,
            self.lay.pooled, self.lay.full, self.group, self.own, counts,
            self._take("kblk", nk, np.int32),
            self.stamp, self.held, self.scratch, self.iscratch, traffic[0], traffic[1],
            br.tables is not None and br.tables[0] > 0,
        )  # fmt: skip
        nu = len(br.update_keys) if update_keys else 0
        ucounts = np.zeros((n, world), dtype=np.int64)
        route_updates(
            br.update_keys, br.update_bounds, *self.tables, *self.blocks, ucounts, self.tcount,
            update_keys,
            self._take("ublk", nu, np.int32),
        )  # fmt: skip
        return counts, nk, ucounts, nu

    def count(
        self, br: BatchRange, traffic: tuple[np.ndarray, np.ndarray]
    ) -> tuple[np.ndarray, np.ndarray]:
        """(counts, ucounts) of the range's lookups and update rows per batch and rank, and
        its all-to-all counts in `traffic`, as `route` gives them, without laying the keys
        out (the routing alone: `replay.engine.cluster_routed`)."""
        counts, _, ucounts, _ = self._route(br, traffic, False)
        return counts, ucounts

    def route(
        self, br: BatchRange, traffic: tuple[np.ndarray, np.ndarray], update_keys: bool = True
    ) -> tuple:
        """(counts, keys, starts, bounds) of the range's lookups, then of its update rows
        (counts: batches x world; rank r's keys keys[starts[r]:starts[r + 1]] with batch
        bounds bounds[r]); `traffic`: the range's rows of the all-to-all counts (class
        docstring). `update_keys` False: the update rows are counted, not laid out (no
        keys, starts all 0)."""
        n, world = br.batches, self.world
        self.turn = (self.turn + 1) % self.ring
        counts, nk, ucounts, nu = self._route(br, traffic, update_keys)
        keys = self._scatter("k", counts, br.keys[:nk])
        if update_keys:
            return (counts, *keys, ucounts, *self._scatter("u", ucounts, br.update_keys[:nu]))
        ubounds = np.zeros((world, n + 1), dtype=np.int64)
        np.cumsum(ucounts.T, axis=1, out=ubounds[:, 1:])
        none = np.empty(0, dtype=np.int64)
        return (counts, *keys, ucounts, none, np.zeros(world + 1, dtype=np.int64), ubounds)
