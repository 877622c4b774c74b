"""`belady`: the optimal offline row cache (Belady's MIN), the lower bound of the
demand-fill caches.

Source: L. A. Belady, "A study of replacement algorithms for a virtual-storage
computer", IBM Systems Journal 5(2), 1966; the bypass variant (a miss may be served
without caching) is optimal when caching is optional (e.g. R. L. Mattson et al.,
"Evaluation techniques for storage hierarchies", IBM Systems Journal 9(2), 1970).

Model and assumptions:

- Requests are the lookups, in trace order; update rows are not uses (they only mark a
  resident row dirty, or are counted in the backing tier, as for every row cache). The
  next use of the lookup at global position g is the position of the next lookup of the
  same key in the whole trace, or infinity.
- `spec.bypass = True` (default): on a miss with the cache full, if the requested row's
  next use is at least as far as that of every resident row, the lookup is served from the
  backing tier without caching (counted in MISSES and BYPASS, not in FILLS); otherwise
  the resident row with the furthest next use is evicted and the row is filled. This is
  optimal for the miss count among all policies that may bypass.
- `spec.bypass = False`: demand Belady, every miss is filled (optimal among demand
  policies).
- What it bounds: caches of the same capacity in rows that bring a row in only when a
  lookup of it misses (`Policy.demand_fill`: `lru`, `lfu`, `belady` itself). Not `hot`,
  whose pinned set is copied in before its lookups (fills, not misses: a prefetch), nor
  `chunk`, which brings in a chunk's other rows and fills on backward-pass requests;
  either can miss less than Belady at the same capacity (`hot` misses at least Belady's
  count minus its fills).
- Ties: finite next uses are distinct positions, so only rows never used again tie; among
  them the least recently used one (smallest last-lookup position) is evicted first, so
  that the write-back counts are deterministic.
- NEEDED_ROWS = FILLS (a row unit is needed in full).

Kernel: an indexed binary max-heap over `capacity` slots keyed by the slots' next use
(never-reused rows get priority 2N - last position, above every finite next use < N) plus
a direct-indexed key -> slot map. A hit raises the slot's priority (sift up), a fill
replaces the root (sift down): O(log C) per lookup.

Memory: `prepare` streams the trace's lookup keys into one int64 array (8 B per lookup)
and turns it in place into next-use positions with a backward pass over an int64
"next position" array (8 B per key, freed afterwards); the 8 B per lookup is kept for
`process`. Per-key state during `process`: 4 bytes (int32 slot + 1, 0 when not
resident: zeroed memory is the empty cache; int64 for 2^31 - 1 slots or more); per slot:
25 bytes, no more slots than rows (`replay.policies.base.usable_units`). Peak: 8 B per lookup +
12 B per key, besides the batches in flight (keeping the keys beside their next uses, as a
plain implementation would, costs 16 B per lookup).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

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
from replay.trace.stream import BatchRange, iter_batch_ranges

if TYPE_CHECKING:
    from replay.workload.source import Source

# meta slots
_SIZE, _CAP, _CURSOR, _TOTAL, _BYPASS = 0, 1, 2, 3, 4


# -- an indexed binary max-heap: hp[i] priority and hs[i] slot at heap index i,
# -- pos[slot] = heap index of the slot (shared with `chunk`). Inlined into each kernel that
# -- calls them (IR inlining, typed in the caller): belady and chunk call them with different
# -- array types, and a nested compile of one dispatcher for two modules' kernels, one of
# -- them loaded from another process's disk cache, is what CI saw fail to type (the chunk
# -- kernel's call "Invalid use of type(CPUDispatcher(heap_sift_down))", never reproduced
# -- here); inlined, no kernel depends on another's overloads


@kernel(inline="always")
def heap_sift_up(hp: np.ndarray, hs: np.ndarray, pos: np.ndarray, i: int) -> None:
    p = hp[i]
    s = hs[i]
    while i > 0:
        parent = (i - 1) >> 1
        q = hp[parent]
        if q >= p:
            break
        hp[i] = q
        t = hs[parent]
        hs[i] = t
        pos[t] = i
        i = parent
    hp[i] = p
    hs[i] = s
    pos[s] = i


@kernel(inline="always")
def heap_sift_down(hp: np.ndarray, hs: np.ndarray, pos: np.ndarray, i: int, n: int) -> None:
    p = hp[i]
    s = hs[i]
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        q = hp[c]
        if c + 1 < n:
            q2 = hp[c + 1]
            if q2 > q:
                c += 1
                q = q2
        if q <= p:
            break
        hp[i] = q
        t = hs[c]
        hs[i] = t
        pos[t] = i
        i = c
    hp[i] = p
    hs[i] = s
    pos[s] = i


@kernel
def next_use_inplace(seq: np.ndarray, last: np.ndarray) -> None:
    """Replace seq[i] (an id) by the position of the next occurrence of that id, or by
    len(seq) if none; `last` (one int64 per id) must be filled with len(seq)."""
    for i in range(len(seq) - 1, -1, -1):
        k = seq[i]
        seq[i] = last[k]
        last[k] = i


def next_use(seq: np.ndarray, num_ids: int) -> np.ndarray:
    """A new int64 array: next position of each element's id in `seq` (len(seq) if none)."""
    out = np.array(seq, dtype=np.int64, copy=True)
    last = np.full(num_ids, len(out), dtype=np.int64)
    if len(out):
        next_use_inplace(out, last)
    return out


@kernel
def belady_kernel(
    keys: np.ndarray,
    bounds: np.ndarray,
    ukeys: np.ndarray,
    ubounds: np.ndarray,
    nxt: np.ndarray,
    slot_of: np.ndarray,
    slot_key: np.ndarray,
    hp: np.ndarray,
    hs: np.ndarray,
    pos: np.ndarray,
    dirty: np.ndarray,
    meta: np.ndarray,
    out: np.ndarray,
) -> None:
    size = meta[_SIZE]
    cap = meta[_CAP]
    g = meta[_CURSOR]  # global position of the next lookup
    total = meta[_TOTAL]  # next use == total: never used again
    bypass = meta[_BYPASS] != 0
    dead_base = 2 * total
    for b in range(len(bounds) - 1):
        hits = 0
        misses = 0
        bypassed = 0
        evictions = 0
        writebacks = 0
        for i in range(bounds[b], bounds[b + 1]):
            k = keys[i]
            nu = nxt[g]
            prio = nu if nu < total else dead_base - g
            g += 1
            s = slot_of[k] - 1
            if s >= 0:
                hits += 1
                h = pos[s]
                hp[h] = prio  # larger than before (the old one was this position)
                heap_sift_up(hp, hs, pos, h)
                continue
            misses += 1
            if size < cap:
                s = size
                h = size
                size += 1
                slot_key[s] = k
                slot_of[k] = s + 1
                dirty[s] = 0
                hp[h] = prio
                hs[h] = s
                heap_sift_up(hp, hs, pos, h)
                continue
            if bypass and (nu >= total or nu > hp[0]):
                bypassed += 1
                continue
            s = hs[0]  # evict the furthest next use
            evictions += 1
            if dirty[s]:
                writebacks += 1
            slot_of[slot_key[s]] = 0
            slot_key[s] = k
            slot_of[k] = s + 1
            dirty[s] = 0
            hp[0] = prio
            heap_sift_down(hp, hs, pos, 0, size)
        upd_fast = 0
        for j in range(ubounds[b], ubounds[b + 1]):
            s = slot_of[ukeys[j]] - 1
            if s >= 0:
                dirty[s] = 1
                upd_fast += 1
        fills = misses - bypassed
        out[b, HITS] = hits
        out[b, MISSES] = misses
        out[b, BYPASS] = bypassed
        out[b, FILLS] = fills
        out[b, EVICTIONS] = evictions
        out[b, WRITEBACKS] = writebacks
        out[b, UPDATES_FAST] = upd_fast
        out[b, UPDATES_BACKING] = (ubounds[b + 1] - ubounds[b]) - upd_fast
        out[b, RESIDENT] = size
        out[b, RESIDENT_MAX] = size  # size only grows within a batch
        out[b, NEEDED_ROWS] = fills
    meta[_SIZE] = size
    meta[_CURSOR] = g


@register_policy("belady")
class BeladyPolicy(Policy):
    sized_to_rows = True
    state_bytes_per_key = 12  # 4 (slot map) + 8 (next-position array, during prepare)
    demand_fill = True
    #: kept from `prepare` to the end of the run: the next use of every lookup
    state_bytes_per_lookup: ClassVar[int] = 8

    def __init__(self, spec: PolicySpec, ctx: PolicyContext) -> None:
        super().__init__(spec, ctx)
        if ctx.capacity_units < 1:
            raise ValueError("belady: capacity_units must be at least 1")
        cap = ctx.slots  # no more slots than rows: a larger cache never evicts either
        index = index_dtype(cap)
        self.slot_of = ctx.row_array(index)  # slot + 1; 0: not resident
        self.slot_key = np.zeros(cap, dtype=np.int64)
        self.hp = np.zeros(cap, dtype=np.int64)
        self.hs = np.zeros(cap, dtype=index)
        self.pos = np.zeros(cap, dtype=index)
        self.dirty = np.zeros(cap, dtype=np.uint8)
        self.meta = np.array([0, cap, 0, 0, int(bool(spec.bypass))], dtype=np.int64)
        self.nxt: np.ndarray | None = None

    def needs_prepare(self) -> bool:
        return True

    def prepare(self, trace: Source | None) -> None:
        assert trace is not None
        seq = np.empty(trace.num_lookups, dtype=np.int64)
        n = 0
        for br in iter_batch_ranges(trace, with_updates=False):
            m = len(br.keys)
            if n + m > len(seq):
                raise ValueError("belady: the trace has more lookups than its manifest says")
            seq[n : n + m] = br.keys
            n += m
        if n != len(seq):
            raise ValueError("belady: the trace has fewer lookups than its manifest says")
        self._set_next(seq)

    def prepare_arrays(self, keys: np.ndarray) -> None:
        """`prepare` from the whole trace's lookup keys (int64, trace order)."""
        self._set_next(np.array(keys, dtype=np.int64, copy=True))

    def _set_next(self, seq: np.ndarray) -> None:
        from replay.analysis.stack import dense_rows  # here: every run imports the policies

        if not dense_rows(self.ctx.total_keys, len(seq)):
            # a short trace in a large row space: the next uses over the keys' ranks among
            # the distinct keys (a sort of the trace) instead of an array over every row
            # (1.5 GB filled for Criteo Terabyte's quickstart trace of 168,064 lookups:
            # 21-25 s where the VM backs each fresh huge page again, against 0.02 s)
            distinct, ids = np.unique(seq, return_inverse=True)
            seq[:] = ids
            last = np.full(len(distinct), len(seq), dtype=np.int64)
        else:
            last = self.ctx.row_array(np.int64, len(seq))
        if len(seq):
            next_use_inplace(seq, last)
        del last
        self.nxt = seq
        self.meta[_TOTAL] = len(seq)
        self.meta[_CURSOR] = 0

    def process(self, batch_range: BatchRange, out: np.ndarray) -> None:
        if self.nxt is None:
            raise RuntimeError("belady: process() before prepare()")
        br = batch_range
        n = int(br.bounds[-1] - br.bounds[0])
        if self.meta[_CURSOR] + n > self.meta[_TOTAL]:
            raise ValueError("belady: more lookups than the prepared trace holds")
        belady_kernel(
            br.keys,
            br.bounds,
            br.update_keys,
            br.update_bounds,
            self.nxt,
            self.slot_of,
            self.slot_key,
            self.hp,
            self.hs,
            self.pos,
            self.dirty,
            self.meta,
            out,
        )


def reference_belady(
    batches: Sequence[tuple[Sequence[int], Sequence[int]]], capacity: int, bypass: bool = True
) -> np.ndarray:
    """Slow Belady on (lookup keys, update keys) per batch; returns the counter rows.

    Every eviction scans all residents for the furthest next use (never-reused rows are
    furthest; among them the least recently used goes first)."""
    seq = [k for lookups, _ in batches for k in lookups]
    inf = float("inf")
    following: dict[int, float] = {}
    nxt: list[float] = [inf] * len(seq)
    for g in range(len(seq) - 1, -1, -1):
        nxt[g] = following.get(seq[g], inf)
        following[seq[g]] = g
    cache: dict[int, list] = {}  # key -> [next use, last position, dirty]
    out = np.zeros((len(batches), NUM_COUNTERS), dtype=np.int64)
    g = 0
    for b, (lookups, updates) in enumerate(batches):
        row = out[b]
        for key in lookups:
            nu = nxt[g]
            if key in cache:
                row[HITS] += 1
                cache[key][0] = nu
                cache[key][1] = g
                g += 1
                continue
            row[MISSES] += 1
            if len(cache) == capacity:
                victim = max(cache, key=lambda k: (cache[k][0], -cache[k][1]))
                if bypass and nu >= cache[victim][0]:
                    row[BYPASS] += 1
                    g += 1
                    continue
                row[EVICTIONS] += 1
                row[WRITEBACKS] += int(cache.pop(victim)[2])
            row[FILLS] += 1
            cache[key] = [nu, g, False]
            g += 1
        for key in updates:
            if key in cache:
                cache[key][2] = True
                row[UPDATES_FAST] += 1
            else:
                row[UPDATES_BACKING] += 1
        row[RESIDENT] = row[RESIDENT_MAX] = len(cache)
        row[NEEDED_ROWS] = row[FILLS]
    return out
