"""`lru`: a row cache in the fast tier that evicts the least recently used row.

Every missed lookup fetches its row into the cache (demand fill); when the cache is full
the least recently used row is evicted first, and written back if dirty. The cache is a
doubly linked list over `capacity` slots plus a direct-indexed key -> slot map, so a
request costs O(1) with one random access into the per-key map.

Per-key state: 4 bytes (int32 slot + 1, 0 when not resident: fresh zeroed memory is the
empty cache, so nothing fills 4 bytes x keys before the first batch; `warm_up` faults the
map in on a helper thread while the first range is read); per slot: 17 bytes.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from replay._intrinsics import PREFETCH_AHEAD, prefetch
from replay._jit import kernel
from replay._malloc import populate, state_array
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
    register_policy,
)
from replay.system.spec import PolicySpec
from replay.trace.stream import BatchRange

# meta slots
_HEAD, _TAIL, _SIZE, _CAP = 0, 1, 2, 3


@kernel
def lru_kernel(
    keys: np.ndarray,
    bounds: np.ndarray,
    ukeys: np.ndarray,
    ubounds: np.ndarray,
    slot_of: np.ndarray,
    slot_key: np.ndarray,
    prev: np.ndarray,
    nxt: np.ndarray,
    dirty: np.ndarray,
    meta: np.ndarray,
    out: np.ndarray,
) -> None:
    head = meta[_HEAD]
    tail = meta[_TAIL]
    size = meta[_SIZE]
    cap = meta[_CAP]
    n_keys = len(keys)
    n_updates = len(ukeys)
    for b in range(len(bounds) - 1):
        hits = 0
        misses = 0
        evictions = 0
        writebacks = 0
        for i in range(bounds[b], bounds[b + 1]):
            if i + PREFETCH_AHEAD < n_keys:
                prefetch(slot_of, keys[i + PREFETCH_AHEAD])
            k = keys[i]
            s = slot_of[k] - 1
            if s >= 0:
                hits += 1
                if s != head:  # unlink, then push to the front
                    p = prev[s]
                    n = nxt[s]
                    nxt[p] = n
                    if n >= 0:
                        prev[n] = p
                    else:
                        tail = p
                    prev[s] = -1
                    nxt[s] = head
                    prev[head] = s
                    head = s
                continue
            misses += 1
            if size < cap:
                s = size
                size += 1
            else:  # evict the tail
                s = tail
                evictions += 1
                if dirty[s]:
                    writebacks += 1
                slot_of[slot_key[s]] = 0
                tail = prev[s]
                if tail >= 0:
                    nxt[tail] = -1
                    # the next eviction clears the new tail's key: start loading it now
                    prefetch(slot_of, slot_key[tail])
                else:
                    head = -1
            slot_key[s] = k
            slot_of[k] = s + 1
            dirty[s] = 0
            prev[s] = -1
            nxt[s] = head
            if head >= 0:
                prev[head] = s
            else:
                tail = s
            head = s
        upd_fast = 0
        for j in range(ubounds[b], ubounds[b + 1]):
            if j + PREFETCH_AHEAD < n_updates:
                prefetch(slot_of, ukeys[j + PREFETCH_AHEAD])
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
    meta[_HEAD] = head
    meta[_TAIL] = tail
    meta[_SIZE] = size


@register_policy("lru")
class LRUPolicy(Policy):
    state_bytes_per_key = 4
    demand_fill = True

    def __init__(self, spec: PolicySpec, ctx: PolicyContext) -> None:
        super().__init__(spec, ctx)
        cap = ctx.capacity_units
        self.slot_of = state_array(ctx.total_keys, np.int32)
        # The kernel writes a slot's links, key and dirty flag when the slot first enters
        # the list and reads them only for slots in it: no fill (33 MB at the preset's
        # 4,194,304 rows, before the first batch), and pages of slots never used are
        # never touched.
        self.slot_key = np.empty(cap, dtype=np.int64)
        self.prev = np.empty(cap, dtype=np.int32)
        self.nxt = np.empty(cap, dtype=np.int32)
        self.dirty = np.empty(cap, dtype=np.uint8)
        self.meta = np.array([-1, -1, 0, cap], dtype=np.int64)

    def warm_up(self, empty: BatchRange) -> None:
        self.process(empty, np.zeros((0, NUM_COUNTERS), dtype=np.int64))
        # the key map's pages, which the first range would otherwise fault in one by
        # one on the caller's thread (135 MB for criteo-kaggle's 33.8 M rows)
        populate(self.slot_of)

    def process(self, batch_range: BatchRange, out: np.ndarray) -> None:
        lru_kernel(
            batch_range.keys,
            batch_range.bounds,
            batch_range.update_keys,
            batch_range.update_bounds,
            self.slot_of,
            self.slot_key,
            self.prev,
            self.nxt,
            self.dirty,
            self.meta,
            out,
        )


def reference_lru(
    batches: Sequence[tuple[Sequence[int], Sequence[int]]], capacity: int
) -> np.ndarray:
    """Slow LRU on (lookup keys, update keys) per batch; returns the counter rows."""
    cache: OrderedDict[int, bool] = OrderedDict()  # key -> dirty, oldest first
    out = np.zeros((len(batches), NUM_COUNTERS), dtype=np.int64)
    for b, (lookups, updates) in enumerate(batches):
        row = out[b]
        for key in lookups:
            if key in cache:
                row[HITS] += 1
                cache.move_to_end(key)
                continue
            row[MISSES] += 1
            row[FILLS] += 1
            if len(cache) == capacity:
                _, was_dirty = cache.popitem(last=False)
                row[EVICTIONS] += 1
                row[WRITEBACKS] += int(was_dirty)
            cache[key] = False
        for key in updates:
            if key in cache:
                cache[key] = True
                row[UPDATES_FAST] += 1
            else:
                row[UPDATES_BACKING] += 1
        row[RESIDENT] = row[RESIDENT_MAX] = len(cache)
        row[NEEDED_ROWS] = row[MISSES]
    return out
