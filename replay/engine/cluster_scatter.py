"""The two loops that lay a routed range's keys out rank after rank, shared by the cluster
replay's routing of one range (`replay.engine.cluster_route.scatter`) and of a group of
ranges routed where they lie (`replay.engine.cluster_parts`, its cursor carried from
range to range): the first sets each rank's start and batch bounds from the per-batch
counts, the second puts each recorded key at its rank's cursor, so each rank's keys come
in trace order.
"""

from __future__ import annotations

import numpy as np

from replay._intrinsics import ix
from replay._jit import kernel


@kernel
def scatter_start(
    counts: np.ndarray, cursor: np.ndarray, starts: np.ndarray, bounds: np.ndarray
) -> None:
    """`cluster_route.scatter`'s first loop: rank r's keys from starts[r] (cursor[r] there too), its
    batch bounds (from 0) at bounds[r], from the counts (batches x world)."""
    n, world = counts.shape
    at = 0
    for r in range(world):
        starts[r] = at
        cursor[r] = at
        bounds[r, 0] = 0
        for b in range(n):
            bounds[r, b + 1] = bounds[r, b] + counts[b, r]
        at += bounds[r, n]
    starts[world] = at


@kernel
def scatter_part(
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
) -> None:
    """`cluster_route.scatter`'s second loop over one range's keys and records: each
    key to its block's rank (or every block of its table, or its row's block in every
    column block) at the rank's cursor, which moves on."""
    for i in range(len(kblk)):
        blk = np.int64(kblk[ix(i)])
        if blk >= 0:
            r = brank[ix(blk)]
            out[ix(cursor[ix(r)])] = np.int64(keys[ix(i)]) + gshift[ix(blk)]
            cursor[ix(r)] += 1
        else:
            t = -1 - blk
            row = np.int64(keys[ix(i)]) - offsets[ix(t)]
            if geven[ix(base[ix(t)])] > 0:  # grid
                rows = offsets[ix(t + 1)] - offsets[ix(t)]
                c0 = base[ix(t)]
                while c0 < base[ix(t)] + count[ix(t)]:
                    size = geven[ix(c0)]
                    b = c0 + row // size
                    rr = brank[ix(b)]
                    out[ix(cursor[ix(rr)])] = shift[ix(b)] + row
                    cursor[ix(rr)] += 1
                    c0 += (rows + size - 1) // size
                continue
            for c in range(count[ix(t)]):
                b = base[ix(t)] + c
                rr = brank[ix(b)]
                out[ix(cursor[ix(rr)])] = local[ix(b)] + row
                cursor[ix(rr)] += 1


__all__ = ["scatter_part", "scatter_start"]
