"""The cluster replay's LRU cache of one GPU over its own rows, found by a map indexed by
the rank-local key instead of `lru`'s hash table (`replay.policies.lru`): the same cache,
the same counters, a cheaper search.

Why. A GPU's policy sees only its rank's rows, renumbered from 0
(`replay.engine.cluster`), so a map of one slot number a row (4 B) is small where the
rank holds few rows: criteo-kaggle's 33.8 M rows over 64 GPUs row-wise are ~530,000 a
GPU, a 2.1 MB map, against the 4 MB hash table of a 100,000-slot cache. A lookup then
reads one map entry (no hashing, no probe, no backward-shift deletion on eviction), and
the 64 caches' state is smaller. `DirectLRU.fits` takes the map only where it is no
larger than the hash table it replaces, so the memory `replay.runs.run_memory`
estimates for the LRU stays an upper bound.

Exactness. The cache is `lru`'s: a doubly linked list over `capacity` slots (a circle
through a sentinel slot), filled in slot order while it is not full, then the least
recent slot evicted (written back if dirty) for each miss; the update rows mark their
cached slots dirty, or (`updates_are_lookups`, where a batch's rows all stay cached
until it ends) each looked-up slot is marked as it is used; every counter is set as
`lru_kernel` sets it. `tests/test_cluster_lru.py` checks the counters against
`LRUPolicy`'s on random traces (Hypothesis) and the cluster bench's 8-GPU reference
against `LRUPolicy` per rank.
"""

from __future__ import annotations

import numpy as np

from replay._intrinsics import PREFETCH_AHEAD, ix, prefetch
from replay._jit import kernel
from replay.errors import ConfigError
from replay.policies.base import (
    BYPASS,
    EVICTIONS,
    FILLS,
    HITS,
    MISSES,
    NEEDED_ROWS,
    RESIDENT,
    RESIDENT_MAX,
    UPDATES_BACKING,
    UPDATES_FAST,
    WRITEBACKS,
    Policy,
    PolicyContext,
    index_dtype,
)
from replay.policies.lru import LRUPolicy, table_shape
from replay.system.spec import PolicySpec
from replay.trace.stream import BatchRange, updates_as_keys


@kernel
def direct_lru_kernel(
    keys: np.ndarray,
    bounds: np.ndarray,
    ukeys: np.ndarray,
    ubounds: np.ndarray,
    where: np.ndarray,
    slot_key: np.ndarray,
    links: np.ndarray,
    dirty: np.ndarray,
    meta: np.ndarray,
    out: np.ndarray,
    derived: bool,
) -> None:
    """`replay.policies.lru.lru_kernel` with where[key] = slot + 1 (0: not cached) in
    place of its hash table; meta = (size, capacity)."""
    size = meta[0]
    cap = meta[1]
    last = len(keys) - 1
    ulast = len(ukeys) - 1
    for b in range(len(bounds) - 1):
        misses = 0
        writebacks = 0
        size_before = size
        for i in range(bounds[b], bounds[b + 1]):
            # the last key stands in for those past the end: a prefetch, not a test
            prefetch(where, keys[ix(min(i + PREFETCH_AHEAD, last))])
            k = keys[ix(i)]
            s = np.int64(where[ix(k)]) - 1
            if s >= 0:  # unlink; the move to the front is below
                if s == links[ix(2 * cap + 1)]:  # the most recent slot already
                    if derived:
                        dirty[ix(s)] = 1
                    continue
                p = links[ix(2 * s)]
                n = links[ix(2 * s + 1)]
                links[ix(2 * p + 1)] = n
                links[ix(2 * n)] = p
            else:
                misses += 1
                if size < cap:
                    s = size
                    size += 1
                else:  # evict the least recent slot
                    s = np.int64(links[ix(2 * cap)])
                    writebacks += dirty[ix(s)]
                    where[ix(slot_key[ix(s)])] = 0
                    p = links[ix(2 * s)]
                    links[ix(2 * p + 1)] = cap
                    links[ix(2 * cap)] = p
                    # the next eviction clears the new last slot's entry: load it now
                    prefetch(where, slot_key[ix(p)])
                where[ix(k)] = s + 1
                slot_key[ix(s)] = k
                dirty[ix(s)] = 0
            if derived:
                dirty[ix(s)] = 1
            first = links[ix(2 * cap + 1)]
            links[ix(2 * s)] = cap
            links[ix(2 * s + 1)] = first
            links[ix(2 * first)] = s
            links[ix(2 * cap + 1)] = s
        upd_fast = 0
        for j in range(ubounds[b], ubounds[b] if derived else ubounds[b + 1]):
            prefetch(where, ukeys[ix(min(j + PREFETCH_AHEAD, ulast))])
            s = np.int64(where[ix(ukeys[ix(j)])]) - 1
            if s >= 0:
                dirty[ix(s)] = 1
                upd_fast += 1
        if derived:
            upd_fast = ubounds[b + 1] - ubounds[b]
        out[b, HITS] = (bounds[b + 1] - bounds[b]) - misses
        out[b, MISSES] = misses
        out[b, BYPASS] = 0
        out[b, FILLS] = misses
        out[b, EVICTIONS] = misses - (size - size_before)
        out[b, WRITEBACKS] = writebacks
        out[b, UPDATES_FAST] = upd_fast
        out[b, UPDATES_BACKING] = (ubounds[b + 1] - ubounds[b]) - upd_fast
        out[b, RESIDENT] = size
        out[b, RESIDENT_MAX] = size  # size only grows within a batch
        out[b, NEEDED_ROWS] = misses
    meta[0] = size


class DirectLRU(LRUPolicy):
    """`lru` over a rank's rows with a map a row (module docstring); registered under no
    name (the cluster replay builds it in place of an `LRUPolicy` that `fits`)."""

    @staticmethod
    def fits(ctx: PolicyContext) -> bool:
        """Whether the map (4 B a row) is no larger than `LRUPolicy`'s hash table."""
        entries, _, _ = table_shape(ctx.total_keys, ctx.slots)
        return ctx.slots + 1 < 2**31 and ctx.total_keys * 4 <= entries * 8

    def __init__(self, spec: PolicySpec, ctx: PolicyContext) -> None:
        Policy.__init__(self, spec, ctx)  # not LRUPolicy's: no hash table
        cap = ctx.slots
        # slot numbers + 1 in 4 B (`fits`); fresh memory is zero (nothing cached), so
        # only the pages of rows looked up are touched
        self.where = np.zeros(ctx.total_keys, dtype=np.int32)
        self.slot_key = np.empty(cap, dtype=index_dtype(ctx.total_keys))
        self.links = np.empty(2 * cap + 2, dtype=index_dtype(cap))
        self.links[2 * cap :] = cap
        self.dirty = np.empty(cap, dtype=np.uint8)
        self.meta = np.array([0, cap], dtype=np.int64)

    def prefault(self) -> None:
        pass

    def process(self, batch_range: BatchRange, out: np.ndarray) -> None:
        if batch_range.tables is not None:  # the cluster replay streams whole batches
            raise ConfigError("cluster: a GPU's LRU takes whole batches")
        br = updates_as_keys(batch_range, self.ctx.capacity_units)
        direct_lru_kernel(
            br.keys, br.bounds, br.update_keys, br.update_bounds, self.where, self.slot_key,
            self.links, self.dirty, self.meta, out, br.updates_are_lookups,
        )  # fmt: skip


def rank_class(cls: type[Policy], ctx: PolicyContext) -> type[Policy]:
    """The class a GPU's cache of policy class `cls` over `ctx` is built as: `DirectLRU`
    for an `LRUPolicy` whose map `fits`, else `cls`."""
    return DirectLRU if cls is LRUPolicy and DirectLRU.fits(ctx) else cls


__all__ = ["DirectLRU", "direct_lru_kernel", "rank_class"]
