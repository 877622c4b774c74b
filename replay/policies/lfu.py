"""`lfu`: a row cache in the fast tier that evicts the least frequently used row.

Model and assumptions (in-cache LFU, as in e.g. the LFU policy of libCacheSim and the
survey by Podlipnig and Böszörményi, "A survey of Web cache replacement strategies",
ACM Computing Surveys 35(4), 2003):

- Every missed lookup fetches its row into the cache (demand fill); when the cache is full
  the resident row with the lowest use count is evicted first, and written back if dirty.
- The count is kept only while the row is resident: it is set to 1 when the row is filled
  and grows by 1 on every hit (no history survives an eviction, no aging).
- Ties between equal counts go to the least recently accessed row (LRU among equals), so
  the victim is the resident with the smallest (count, time of last access): unique, hence
  deterministic.
- Update rows are not uses: they mark a resident row dirty, or count in UPDATES_BACKING.
- NEEDED_ROWS = FILLS (a row unit is needed in full).

Kernel: an indexed binary min-heap over `capacity` slots keyed by (count, last access),
stored in heap order (hf, ht, hs) with pos[slot] = heap index, plus a direct-indexed
key -> slot map. A hit raises the key (sift down), a fill replaces the root: O(log C)
per lookup with one random access into the per-key map.

Per-key state: 4 bytes (int32 slot + 1, 0 when not resident: zeroed memory is the empty
cache, nothing to fill before the first batch; int64, 8 bytes, for a cache of 2^31 - 1
slots or more); per slot: 33 bytes. Slots: the capacity, at most the rows
(`replay.policies.base.usable_units`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from replay._jit import kernel
from replay.policies.base import (
    BYPASS,
    EVICTIONS,
    FILLS,
    HITS,
    MISSES,
    NEEDED_ROWS,
    NUM_COUNTERS,
    RESIDENT,
    RESIDENT_MAX,
    UPDATES_BACKING,
    UPDATES_FAST,
    WRITEBACKS,
    Policy,
    PolicyContext,
    index_dtype,
    register_policy,
)
from replay.system.spec import PolicySpec
from replay.trace.stream import BatchRange

# meta slots
_SIZE, _CAP, _NOW = 0, 1, 2


@kernel
def _sift_up(hf: np.ndarray, ht: np.ndarray, hs: np.ndarray, pos: np.ndarray, i: int) -> None:
    f = hf[i]
    t = ht[i]
    s = hs[i]
    while i > 0:
        parent = (i - 1) >> 1
        pf = hf[parent]
        if pf < f or (pf == f and ht[parent] < t):
            break
        hf[i] = pf
        ht[i] = ht[parent]
        u = hs[parent]
        hs[i] = u
        pos[u] = i
        i = parent
    hf[i] = f
    ht[i] = t
    hs[i] = s
    pos[s] = i


@kernel
def _sift_down(
    hf: np.ndarray, ht: np.ndarray, hs: np.ndarray, pos: np.ndarray, i: int, n: int
) -> None:
    f = hf[i]
    t = ht[i]
    s = hs[i]
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        cf = hf[c]
        ct = ht[c]
        if c + 1 < n:
            df = hf[c + 1]
            if df < cf or (df == cf and ht[c + 1] < ct):
                c += 1
                cf = df
                ct = ht[c]
        if f < cf or (f == cf and t < ct):
            break
        hf[i] = cf
        ht[i] = ct
        u = hs[c]
        hs[i] = u
        pos[u] = i
        i = c
    hf[i] = f
    ht[i] = t
    hs[i] = s
    pos[s] = i


@kernel
def lfu_kernel(
    keys: np.ndarray,
    bounds: np.ndarray,
    ukeys: np.ndarray,
    ubounds: np.ndarray,
    slot_of: np.ndarray,
    slot_key: np.ndarray,
    hf: np.ndarray,
    ht: np.ndarray,
    hs: np.ndarray,
    pos: np.ndarray,
    dirty: np.ndarray,
    meta: np.ndarray,
    out: np.ndarray,
) -> None:
    size = meta[_SIZE]
    cap = meta[_CAP]
    now = meta[_NOW]  # global lookup position: the access time
    for b in range(len(bounds) - 1):
        hits = 0
        misses = 0
        evictions = 0
        writebacks = 0
        for i in range(bounds[b], bounds[b + 1]):
            k = keys[i]
            s = slot_of[k] - 1
            if s >= 0:
                hits += 1
                h = pos[s]
                hf[h] += 1
                ht[h] = now
                _sift_down(hf, ht, hs, pos, h, size)
                now += 1
                continue
            misses += 1
            if size < cap:
                s = size
                h = size
                size += 1
                hf[h] = 1
                ht[h] = now
                hs[h] = s
                _sift_up(hf, ht, hs, pos, h)
            else:  # evict the root: fewest uses, then least recent
                s = hs[0]
                evictions += 1
                if dirty[s]:
                    writebacks += 1
                slot_of[slot_key[s]] = 0
                hf[0] = 1
                ht[0] = now
                _sift_down(hf, ht, hs, pos, 0, size)
            slot_key[s] = k
            slot_of[k] = s + 1
            dirty[s] = 0
            now += 1
        upd_fast = 0
        for j in range(ubounds[b], ubounds[b + 1]):
            s = slot_of[ukeys[j]] - 1
            if s >= 0:
                dirty[s] = 1
                upd_fast += 1
        out[b, HITS] = hits
        out[b, MISSES] = misses
        out[b, BYPASS] = 0
        out[b, FILLS] = misses
        out[b, EVICTIONS] = evictions
        out[b, WRITEBACKS] = writebacks
        out[b, UPDATES_FAST] = upd_fast
        out[b, UPDATES_BACKING] = (ubounds[b + 1] - ubounds[b]) - upd_fast
        out[b, RESIDENT] = size
        out[b, RESIDENT_MAX] = size  # size only grows within a batch
        out[b, NEEDED_ROWS] = misses
    meta[_SIZE] = size
    meta[_NOW] = now


@register_policy("lfu")
class LFUPolicy(Policy):
    sized_to_rows = True
    state_bytes_per_key = 4
    demand_fill = True

    def __init__(self, spec: PolicySpec, ctx: PolicyContext) -> None:
        super().__init__(spec, ctx)
        if ctx.capacity_units < 1:
            raise ValueError("lfu: capacity_units must be at least 1")
        cap = ctx.slots  # no more slots than rows: a larger cache never evicts either
        index = index_dtype(cap)
        self.slot_of = ctx.row_array(index)  # slot + 1; 0: not resident
        self.slot_key = np.zeros(cap, dtype=np.int64)
        self.hf = np.zeros(cap, dtype=np.int64)
        self.ht = np.zeros(cap, dtype=np.int64)
        self.hs = np.zeros(cap, dtype=index)
        self.pos = np.zeros(cap, dtype=index)
        self.dirty = np.zeros(cap, dtype=np.uint8)
        self.meta = np.array([0, cap, 0], dtype=np.int64)

    def process(self, batch_range: BatchRange, out: np.ndarray) -> None:
        lfu_kernel(
            batch_range.keys,
            batch_range.bounds,
            batch_range.update_keys,
            batch_range.update_bounds,
            self.slot_of,
            self.slot_key,
            self.hf,
            self.ht,
            self.hs,
            self.pos,
            self.dirty,
            self.meta,
            out,
        )


def reference_lfu(
    batches: Sequence[tuple[Sequence[int], Sequence[int]]], capacity: int
) -> np.ndarray:
    """Slow LFU on (lookup keys, update keys) per batch; returns the counter rows.

    Every eviction scans all residents for the smallest (count, last access)."""
    cache: dict[int, list] = {}  # key -> [count, last access, dirty]
    out = np.zeros((len(batches), NUM_COUNTERS), dtype=np.int64)
    now = 0
    for b, (lookups, updates) in enumerate(batches):
        row = out[b]
        for key in lookups:
            if key in cache:
                row[HITS] += 1
                cache[key][0] += 1
                cache[key][1] = now
            else:
                row[MISSES] += 1
                row[FILLS] += 1
                if len(cache) == capacity:
                    victim = min(cache, key=lambda k: (cache[k][0], cache[k][1]))
                    row[EVICTIONS] += 1
                    row[WRITEBACKS] += int(cache.pop(victim)[2])
                cache[key] = [1, now, False]
            now += 1
        for key in updates:
            if key in cache:
                cache[key][2] = True
                row[UPDATES_FAST] += 1
            else:
                row[UPDATES_BACKING] += 1
        row[RESIDENT] = row[RESIDENT_MAX] = len(cache)
        row[NEEDED_ROWS] = row[FILLS]
    return out
