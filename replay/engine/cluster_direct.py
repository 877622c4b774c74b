"""The cluster replay's one-pass routing (`replay.engine.cluster`): where every table is
row-split or table-wise (`ROWS`), table-row-wise (`TWRW`) or data-parallel (`DP`), a
sample has at most one lookup of a table (pooling 1, the Criteo presets) and the GPUs
are no more than a batch's samples (the pass counts a few numbers a GPU per table and
batch), each lookup goes straight to its rank's region of the output, as its rank-local
key, in the same pass that counts the all-to-all's ids (and the lower bound's bytes): no
per-lookup block record and no second pass over the keys (`route_lookups` then
`scatter` in `replay.engine.cluster_route`).

The regions. A rank's keys must lie together and in trace order, so the pass needs each
rank's share of the group before it starts. Rank r's region holds ``1.25 x share_r x
lookups + 1,024`` keys (a smaller pad where the GPUs are many), the share from the last
group routed (the first group: an even share); where a rank's lookups overrun its
region, or a table is of another kind or has a sample with several lookups, the pass
stops and the group is routed the two-pass way (`cluster_parts.route_parts`), which
gives the same arrays and the shares for the next group. So the result never depends on
the path: rank r's keys are ``keys[starts[r] : starts[r] + bounds[r, -1]]`` either way,
with the same values, in the same order, and the same counts and all-to-all counts
(`tests/test_cluster_direct.py`).

Why. The two passes wrote and read back 4 B of block record a lookup and touched every
key twice, with a per-lookup memory update for every count: criteo-kaggle 64 GPUs, 160 x
2,048 in one group, thread CPU on the loaded 2-core VM, row-wise 8.5-9.0 ns a lookup two
passes against 4.6-5.0 here, the auto plan (table-wise and table-row-wise) 11.1-11.5
against 3.4-3.5 (the update rows' count included, 0.7-0.9). What makes it cheap: a
table-wise table's lookups are copied to their one rank's region in a loop of their own;
a row-split table's are taken owner by owner, node by node, and its all-to-all counts
follow from the cursors' moves (what each rank got from a node's owners, what an owner
left on its own rank and node) instead of a count per lookup; table-row-wise counts its
three sends a lookup without a branch.
"""

from __future__ import annotations

import numpy as np

from replay._intrinsics import ix
from replay._jit import kernel
from replay.engine.cluster_parts import _from_zero, _scatter
from replay.engine.cluster_route import (
    DP,
    ROWS,
    TWRW,
    Router,
    _block_of,
    route_updates,
)
from replay.trace.keys import table_of
from replay.trace.stream import BatchRange

# a region's keys beyond the last group's share: the share x SLACK, plus PAD
SLACK = 1.25
PAD = 1024
# what the kernel returns where it stopped
UNSUPPORTED = -1  # a table of another kind, or a sample with several lookups of a table
OVERRUN = -2  # a rank's lookups overran its region


@kernel
def route_direct(
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
    bshift: np.ndarray,
    bbase: np.ndarray,
    bfirst: np.ndarray,
    bend: np.ndarray,
    brank: np.ndarray,
    gshift: np.ndarray,
    pooled: np.ndarray,
    full: np.ndarray,
    group: np.ndarray,
    own: np.ndarray,
    ofirst: np.ndarray,
    count: np.ndarray,
    snap: np.ndarray,
    bnode: np.ndarray,
    counts: np.ndarray,
    cursor: np.ndarray,
    cend: np.ndarray,
    rstart: np.ndarray,
    rbounds: np.ndarray,
    b0: int,
    out: np.ndarray,
    scratch: np.ndarray,
    iscratch: np.ndarray,
    lower: np.ndarray,
    ids: np.ndarray,
) -> int:
    """One part of a group (`bounds` from 0, its batches from the group's batch b0): each
    lookup to out[cursor[r]] as key + gshift[blk], cursor[r] on by one, rank r's batch
    bounds (from its region's start rstart[r]) at rbounds[r, b0 + b], counts[b, r] its
    lookups of batch b; lower[b] and ids[b] as `cluster_route.route_lookups` counts them
    (the lean loops of pooling 1, the same sums). 0, or UNSUPPORTED / OVERRUN where it
    stopped (the caller then routes the group the two-pass way)."""
    world = len(cursor)
    for b in range(len(bounds) - 1):
        lo = bounds[b]
        hi = bounds[b + 1]
        scratch[:, :] = 0
        iscratch[:, :, :] = 0
        for r in range(world):
            rbounds[r, b0 + b] = cursor[r] - rstart[r]
        i = lo
        while i < hi:
            t = table_of(offsets, np.int64(keys[ix(i)]))
            toff = offsets[ix(t)]
            tend = offsets[ix(t + 1)]
            a = i
            z = hi
            while a < z:  # the group's end: the first lookup of a later table
                m = (a + z) >> 1
                if np.int64(keys[ix(m)]) >= tend:
                    z = m
                else:
                    a = m + 1
            n = a - i
            k_t = kind[ix(t)]
            if n > batch_size or (k_t != ROWS and k_t != DP and k_t != TWRW):
                return UNSUPPORTED
            g = group[ix(t)]
            tb = base[ix(t)]
            # lookup p is sample s = p x batch_size // n (`route_lookups`)
            dq = n // batch_size
            dr = n - dq * batch_size
            q0 = n + batch_size - 1
            nxt = q0 // batch_size
            rem = q0 - nxt * batch_size
            s = 0
            owner = own[0]
            if k_t == DP:  # each lookup to its sample's own replica, no bytes sent
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
                    c = cursor[ix(r)]
                    if c >= cend[ix(r)]:
                        return OVERRUN
                    out[ix(c)] = np.int64(keys[ix(j)]) + gshift[ix(blk)]
                    cursor[ix(r)] = c + 1
                i += n
                continue
            if k_t == TWRW:  # partial sums in the block's node, then once to the owner
                # `route_lookups`' three sends a lookup without a branch: the block's rank
                # to the owner's local index in the rank's node (intra), that GPU to the
                # owner where the nodes differ (inter), the owner's id to the rank
                full_t = full[ix(t)]
                isc = iscratch[g]
                for o in range(world):
                    p0 = (ofirst[o] * n + batch_size - 1) // batch_size
                    p1 = (ofirst[o + 1] * n + batch_size - 1) // batch_size
                    fo = (o // gpn) * gpn
                    lo_ = o - fo
                    got3 = 0  # the owner's received inter-node bytes
                    near = 0  # its ids sent intra- and inter-node
                    far = 0
                    for p in range(p0, p1):
                        key = np.int64(keys[ix(i + p)])
                        blk = _block_of(
                            t, key - toff, mul, mshift, even, base, bshift, bbase, bfirst, bend
                        )
                        r = brank[ix(blk)]
                        c = cursor[ix(r)]
                        if c >= cend[ix(r)]:
                            return OVERRUN
                        out[ix(c)] = key + gshift[ix(blk)]
                        cursor[ix(r)] = c + 1
                        fr = bnode[ix(blk)]
                        agg = fr + lo_
                        x = int(r != agg) * pooled[ix(blk)]
                        scratch[ix(r), 0] += x
                        scratch[ix(agg), 2] += x
                        y = int(fr != fo)
                        scratch[ix(agg), 1] += y * full_t
                        got3 += y * full_t
                        z = int(r != o)
                        isc[ix(r), 2 + y] += z
                        far += z * y
                        near += z - z * y
                    scratch[o, 3] += got3
                    iscratch[g, o, 0] += near
                    iscratch[g, o, 1] += far
                i += n
                continue
            # ROWS: owner by owner (owner o's lookups are the positions of its samples,
            # [ceil(ofirst[o] n / B), ceil(ofirst[o + 1] n / B)): `route_lookups`' sample
            # of a position), node by node. A lookup only moves to its rank's region; the
            # all-to-all's counts follow from the cursors: what a rank got from the
            # node's owners, what an owner's lookups left on its own rank and node.
            full_t = full[ix(t)]  # a ROWS block's pooled bytes (`DirectRouter`)
            one = count[ix(t)] == 1  # table-wise: every lookup to the one block's rank
            r1 = brank[ix(tb)]
            sh1 = gshift[ix(tb)]
            m_t = mul[ix(t)]
            sh_t = mshift[ix(t)]
            e_t = even[ix(t)]
            bs_t = bshift[ix(t)]
            bb_t = bbase[ix(t)]
            isc = iscratch[g]
            # snap[0]: each rank's cursor at the table's start, moved on by what its own
            # node's owners sent it; snap[1]: its node's cursors before the node's owners;
            # snap[2]: what each owner's lookups left on its own rank
            for r in range(world):
                snap[0, r] = cursor[r]
            for q in range(world // gpn):
                f = q * gpn
                for u in range(f, f + gpn):
                    snap[1, u] = cursor[u]
                    snap[2, u] = 0
                for o in range(f, f + gpn):
                    p0 = (ofirst[o] * n + batch_size - 1) // batch_size
                    p1 = (ofirst[o + 1] * n + batch_size - 1) // batch_size
                    if p0 >= p1:
                        continue
                    own0 = cursor[o]
                    node0 = 0
                    for u in range(f, f + gpn):
                        node0 += cursor[u]
                    if one:
                        c = cursor[ix(r1)]
                        if c + (p1 - p0) > cend[ix(r1)]:
                            return OVERRUN
                        for p in range(p0, p1):
                            out[ix(c + p - p0)] = np.int64(keys[ix(i + p)]) + sh1
                        cursor[ix(r1)] = c + (p1 - p0)
                    else:
                        for p in range(p0, p1):
                            key = np.int64(keys[ix(i + p)])
                            row = key - toff
                            if m_t > 0:  # `cluster_route._block_of`, its loads hoisted
                                blk = tb + ((row * m_t) >> sh_t)
                            elif e_t == 0:
                                blk = int(bfirst[ix(bb_t + (row >> bs_t))])
                                while row >= bend[ix(blk)]:
                                    blk += 1
                            else:
                                blk = tb + row // e_t
                            r = brank[ix(blk)]
                            c = cursor[ix(r)]
                            if c >= cend[ix(r)]:
                                return OVERRUN
                            out[ix(c)] = key + gshift[ix(blk)]
                            cursor[ix(r)] = c + 1
                    home = cursor[o] - own0  # lookups on the owner's own rank: nothing sent
                    node = -node0
                    for u in range(f, f + gpn):
                        node += cursor[u]
                    near = node - home  # to the owner's node's other ranks
                    far = (p1 - p0) - node  # to other nodes
                    isc[o, 0] += near
                    isc[o, 1] += far
                    scratch[o, 2] += near * full_t
                    scratch[o, 3] += far * full_t
                    snap[2, o] = home
                for u in range(f, f + gpn):  # received from the node's other owners
                    moved = cursor[u] - snap[1, u]
                    got = moved - snap[2, u]
                    isc[u, 2] += got
                    scratch[u, 0] += got * full_t
                    snap[0, u] += moved
            for r in range(world):  # received from other nodes' owners
                got = cursor[r] - snap[0, r]
                isc[r, 3] += got
                scratch[r, 1] += got * full_t
            i += n
        lower[b] = scratch
        ids[b] = iscratch
        for r in range(world):
            counts[b, r] = cursor[r] - rstart[r] - rbounds[r, b0 + b]
    for r in range(world):
        rbounds[r, b0 + len(bounds) - 1] = cursor[r] - rstart[r]
    return 0


class DirectRouter:
    """The one-pass routing of a `Router`'s groups (module docstring): the regions' shares
    from the last group, its output buffers (a ring as the router's, grown only), and
    whether the pass still applies (off after a table or sample it cannot take)."""

    def __init__(self, router: Router, lookups_hint: int = 0) -> None:
        self.router = router
        world = router.world
        self.share = np.full(world, 1.0 / max(world, 1))
        lay = router.lay
        # the pass's kinds; a ROWS block's pooled embedding the whole row's (the ROWS
        # loop counts bytes per table)
        table = np.repeat(np.arange(len(lay.kind)), lay.count)
        # and a few counts a GPU per table and batch (`route_direct`'s O(world) loops)
        # against a sample a GPU at least
        self.on = (
            bool(np.isin(lay.kind, (ROWS, DP, TWRW)).all())
            and bool(((lay.kind[table] != ROWS) | (lay.pooled == lay.full[table])).all())
            and world <= router.batch_size
        )
        # owner o's first sample (`Router.own`: sample s's owner s x world // batch size)
        b = router.batch_size
        self.ofirst = (np.arange(world + 1, dtype=np.int64) * b + world - 1) // world
        self.snap = np.zeros((3, world), dtype=np.int64)
        self.bnode = (lay.rank // router.gpn) * router.gpn  # a block's node's first rank
        self.hint = int(lookups_hint)
        self.rstart = np.zeros(world + 1, dtype=np.int64)
        self.cend = np.zeros(world, dtype=np.int64)
        self.fallbacks = 0
        # the ring's output buffers made now, in the caller's thread: its heap keeps them
        # for the next run where the allocator is told to (`_malloc.retain_freed_memory`,
        # as every command does), where the routing thread's arena gave them back
        for turn in range(router.ring if self.on and self.hint > 0 else 0):
            router._take(f"dout{turn}", self._least(), router.key_dtype)

    def _least(self) -> int:
        """An output buffer's keys at least: a group of the hinted size's regions."""
        return int(SLACK * self.hint) + self._pad(self.hint) * self.router.world

    def _pad(self, lookups: int) -> int:
        """A region's keys beyond its share: PAD, fewer where the GPUs are many (their
        pads would otherwise outgrow the group's keys)."""
        return max(min(PAD, lookups // max(self.router.world, 1)), 16)

    def learn(self, counts: np.ndarray) -> None:
        """The shares of the next group's regions: the lookups of `counts` (batches x
        world) per rank."""
        per = counts.sum(axis=0, dtype=np.int64)
        total = int(per.sum())
        if total > 0:
            self.share = per / total

    def _regions(self, nk: int) -> int:
        caps = np.ceil(self.share * (SLACK * nk)).astype(np.int64) + self._pad(nk)
        self.rstart[0] = 0
        np.cumsum(caps, out=self.rstart[1:])
        self.cend[:] = self.rstart[1:]
        return int(self.rstart[-1])

    def route(
        self,
        parts: list[BatchRange],
        traffic: tuple[np.ndarray, np.ndarray],
        update_keys: bool = True,
    ) -> tuple | None:
        """`route_parts` of the group `parts` make, its lookups in one pass (its update
        rows, fewer, the two-pass way where they are laid out); None where the pass
        stopped (module docstring: the caller routes the group the two-pass way)."""
        router = self.router
        world = router.world
        n = sum(p.batches for p in parts)
        nk = sum(int(p.bounds[-1] - p.bounds[0]) for p in parts)
        size = self._regions(nk)
        # the ring's next turn, taken only where the pass succeeds (else the two-pass
        # routing takes it)
        turn = (router.turn + 1) % router.ring
        out = router._take(
            f"dout{turn}", max(size, self._least()),
            router.key_dtype,
        )  # fmt: skip
        cursor = self.rstart[:world].copy()
        counts = np.zeros((n, world), dtype=np.int64)
        ucounts = np.zeros((n, world), dtype=np.int64)
        rbounds = np.empty((world, n + 1), dtype=np.int64)
        lay = router.lay
        tables = router.tables  # offsets, kind, mul, mshift, even, base, count, bucket index
        offsets, kind, mul, mshift, even, base, _, bshift, bbase, bfirst, bend = tables
        b0 = 0
        for p in parts:
            lo = int(p.bounds[0])
            keys = p.keys[lo : int(p.bounds[-1])]
            bounds = p.bounds - lo if lo else p.bounds
            b1 = b0 + p.batches
            status = route_direct(
                keys, bounds, router.batch_size, router.gpn, offsets, kind, mul, mshift,
                even, base, bshift, bbase, bfirst, bend, lay.rank, router.gshift,
                lay.pooled, lay.full, router.group, router.own, self.ofirst, lay.count, self.snap,
                self.bnode, counts[b0:b1], cursor, self.cend,
                self.rstart, rbounds, b0, out, router.scratch, router.iscratch,
                traffic[0][b0:b1], traffic[1][b0:b1],
            )  # fmt: skip
            if status != 0:
                self.fallbacks += 1
                if status == UNSUPPORTED:
                    self.on = False
                return None
            b0 = b1
        router.turn = turn
        self.learn(counts)
        ukeys = [_from_zero(p.update_keys, p.update_bounds) for p in parts]
        nu = sum(len(k) for k, _ in ukeys) if update_keys else 0
        ublk = router._take("ublk", nu, np.int32)
        b0 = u0 = 0
        for p, (uk, ub) in zip(parts, ukeys, strict=True):
            b1 = b0 + p.batches
            u1 = u0 + len(uk) if update_keys else 0
            route_updates(
                uk, ub, *tables, *router.blocks, ucounts[b0:b1], router.tcount, update_keys,
                ublk[u0:u1],
            )  # fmt: skip
            b0, u0 = b1, u1
        if update_keys:
            return (counts, out, self.rstart.copy(), rbounds, ucounts,
                    *_scatter(router, "u", ucounts, ukeys, ublk))  # fmt: skip
        ubounds = np.zeros((world, n + 1), dtype=np.int64)
        np.cumsum(ucounts.T, axis=1, out=ubounds[:, 1:])
        none = np.empty(0, dtype=np.int64)
        return (counts, out, self.rstart.copy(), rbounds, ucounts, none,
                np.zeros(world + 1, dtype=np.int64), ubounds)  # fmt: skip


__all__ = ["OVERRUN", "UNSUPPORTED", "DirectRouter", "route_direct"]
