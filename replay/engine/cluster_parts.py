"""The cluster replay's routing of a group of consecutive batch ranges without joining
their keys first (`replay.engine.cluster`: the routing thread groups the source's ranges
until each GPU's policy gets ~`RANK_LOOKUPS` lookups a call).

Why. Joining the ranges (`cluster.merge_ranges`) copied every key once more into a fresh
array of the group's size (16 MB a group of 4 M lookups), which numpy maps anew each
time: criteo-kaggle, 64 GPUs, 2,000 x 2,048, 2.6 ns a lookup of the routing thread's CPU
and the kernel's page clearing on top. Here each range is routed where it lies, by the
same kernels (`route_lookups`, `route_updates` of `replay.engine.cluster_route`), into
its rows of the group's per-batch counts and its part of the block records; the keys
are then laid out rank after rank (`scatter_start`, then `scatter_part` per range: the
two loops of `cluster_route.scatter`, its cursor carried from range to range), so each
rank's keys come in trace order, exactly as the joined range's would.
"""

from __future__ import annotations

import numpy as np

from replay.engine.cluster_route import Router, route_lookups, route_updates
from replay.engine.cluster_scatter import scatter_part, scatter_start
from replay.trace.stream import BatchRange


def _from_zero(keys: np.ndarray, bounds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A range's keys and bounds with its first batch at key 0."""
    lo = int(bounds[0])
    if lo == 0:
        return keys[: int(bounds[-1])], bounds
    return keys[lo : int(bounds[-1])], bounds - lo


def route_parts(
    router: Router,
    parts: list[BatchRange],
    traffic: tuple[np.ndarray, np.ndarray],
    update_keys: bool = True,
) -> tuple:
    """`router.route` of the range the consecutive whole-batch `parts` make together,
    without joining their keys: the same (counts, keys, starts, bounds, ucounts, ukeys,
    ustarts, ubounds), in the same buffers (valid for the router's next ring - 1
    calls). `traffic`: the group's rows of the all-to-all counts."""
    world = router.world
    n = sum(p.batches for p in parts)
    router.turn = (router.turn + 1) % router.ring
    lay = router.lay
    lkeys = [_from_zero(p.keys, p.bounds) for p in parts]
    ukeys = [_from_zero(p.update_keys, p.update_bounds) for p in parts]
    nk = sum(len(k) for k, _ in lkeys)
    nu = sum(len(k) for k, _ in ukeys) if update_keys else 0
    counts = np.zeros((n, world), dtype=np.int64)
    ucounts = np.zeros((n, world), dtype=np.int64)
    kblk = router._take("kblk", nk, np.int32)
    ublk = router._take("ublk", nu, np.int32)
    b0 = k0 = u0 = 0
    for j, p in enumerate(parts):
        b1 = b0 + p.batches
        keys, bounds = lkeys[j]
        k1 = k0 + len(keys)
        route_lookups(
            keys, bounds, router.batch_size, router.gpn, *router.tables, *router.blocks,
            lay.pooled, lay.full, router.group, router.own, counts[b0:b1], kblk[k0:k1],
            router.stamp, router.held, router.scratch, router.iscratch, traffic[0][b0:b1],
            traffic[1][b0:b1], False,
        )  # fmt: skip
        # the update rows are counted always, their blocks recorded where they are laid out
        uk, ub = ukeys[j]
        u1 = u0 + len(uk) if update_keys else 0
        route_updates(
            uk, ub, *router.tables, *router.blocks, ucounts[b0:b1], router.tcount,
            update_keys, ublk[u0:u1],
        )  # fmt: skip
        b0, k0, u0 = b1, k1, u1
    routed = _scatter(router, "k", counts, lkeys, kblk)
    if update_keys:
        return (counts, *routed, ucounts, *_scatter(router, "u", ucounts, ukeys, ublk))
    ubounds = np.zeros((world, n + 1), dtype=np.int64)
    np.cumsum(ucounts.T, axis=1, out=ubounds[:, 1:])
    none = np.empty(0, dtype=np.int64)
    return (counts, *routed, ucounts, none, np.zeros(world + 1, dtype=np.int64), ubounds)


def _scatter(
    router: Router,
    tag: str,
    counts: np.ndarray,
    parts: list[tuple[np.ndarray, np.ndarray]],
    blk: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(keys, starts, bounds) of the parts' recorded keys, as `Router._scatter` lays
    them out."""
    lay = router.lay
    n = counts.shape[0]
    starts = np.empty(router.world + 1, dtype=np.int64)
    bounds = np.empty((router.world, n + 1), dtype=np.int64)
    out = router._take(f"{tag}out{router.turn}", int(counts.sum()), router.key_dtype)
    scatter_start(counts, router.cursor, starts, bounds)
    at = 0
    for keys, _ in parts:
        scatter_part(
            blk[at : at + len(keys)], keys, lay.base, lay.count, lay.rank, lay.local,
            router.offsets, router.geven, router.shift, router.gshift, router.cursor, out,
        )  # fmt: skip
        at += len(keys)
    return out, starts, bounds
