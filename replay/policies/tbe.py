"""`tbe`: FBGEMM's software cache of table-batched embeddings (TBE), set-associative, with
its LRU or LFU replacement, as fbgemm_gpu implements it.

Sources (pytorch/FBGEMM, fbgemm_gpu): `tbe/cache/cache_config.py` (DEFAULT_ASSOC = 32),
`split_table_batched_embeddings_ops_training.py` (`_apply_cache_state`: the number of
sets; `_prefetch`: one time step per batch), `src/split_embeddings_cache/`
(`linearize_cache_indices.cu`, `common.cuh` `cache_slot`, `lru_cache_find.cu`,
`lru_cache_populate.cu`, `lfu_cache_find.cu`, `lfu_cache_populate.cu`, `lxu_cache.cu`
`lxu_cache_lookup`), `include/fbgemm_gpu/utils/bitonic_sort.cuh`.

The model, step by step as FBGEMM runs it:

- **One cache for all tables.** A row's linear index is its table's offset plus the row
  (`cache_hash_size_cumsum[t] + row`): replay's flat key. The cache has
  `sets = ceil(int(Σ rows × cache_load_factor) / assoc)` sets (at least 1) of `assoc` ways
  (32, the CUDA warp; 64 on AMD CDNA). A row's set is the MurmurHash3 64-bit finalizer
  of its linear index modulo `sets`. Without a load factor the rows come from
  `capacity_rows`, rounded up to whole sets the same way, or from the byte budget over a
  row's bytes, rounded down to whole sets (so that the cache fits the budget).
- **Per batch (one prefetch, time step t = 2, 3, ...: FBGEMM's timestep starts at 1 and
  is increased before each prefetch)**: the batch's distinct rows, in ascending linear
  index, are looked up in their sets. LRU: a resident row's way takes time t. Rows not
  resident are the batch's *unique misses*.
- **Insertion.** The unique misses are grouped by set: LRU in ascending index within a
  set; LFU by descending count, then ascending index (CUB's stable radix sort of FBGEMM's
  keys). Each set's ways are sorted by cost (LRU: the way's time, 0 when never used; LFU:
  the count of the row it holds, -1 when empty) with FBGEMM's warp bitonic sort, whose
  order among equal costs is its network's, reproduced compare for compare here. The
  l-th miss goes to the l-th way, for l < min(misses of the set, assoc), until
  LRU: the way's time is t (used in this batch: never evicted); LFU: the way's count is
  above the miss's count. A miss that finds no way is a *conflict unique miss*: its
  row is served from host memory for this batch and not cached.
- **LFU counts** are kept for every row, cached or not, never decayed (8 bytes per row,
  FBGEMM's `lxu_state`), and increased by the row's lookups in each batch before the
  batch's misses are found. LFU does not protect the ways used in the current batch:
  a row that hit can be evicted by a more frequent one and is then read from host memory.
- **After the prefetch** every lookup whose row is not in the cache is a *conflict miss*
  (FBGEMM's `lxu_cache_lookup`, counted per lookup).
- Every eviction writes its row back (FBGEMM keeps no dirty bit: `warp_cache_evict`
  copies the way to the host row whatever happened to it).

Counters (`replay.policies.base`): FILLS are the inserted rows; BYPASS the conflict
misses (lookups served from the host); MISSES = FILLS + BYPASS (a filled row's first
lookup misses, its other lookups in the batch read the cache, as in every demand cache of
this tool); HITS = lookups - MISSES; WRITEBACKS = EVICTIONS; NEEDED_ROWS = FILLS. An
update is to the fast tier when its row is cached after the prefetch. FBGEMM's own
counters (calls, requested indices, unique indices, unique misses, conflict unique
misses, conflict misses; `UVMCacheStatsIndex`) are totalled by `fbgemm_counters()`.
FBGEMM gathers them only for LRU; this model counts them for both.

Simplifications: FBGEMM's prefetch pipelining and cache-line locking
(`prefetch_pipeline`, `lock_cache_line`) are off, as in a plain `forward`; ids pruned to
the sentinel do not occur; LFU counts above 2^40 - 1 (where FBGEMM's sort key overflows)
count as 2^40 - 1. Bytes are the engine's: a cached row moves with its optimizer state.

Kernel: per batch, a hash set of the batch's rows (counts, resident flag), a scan of each
distinct row's set (assoc compares), one sort of the misses as (set, index) in an int64,
and for each set with misses the bitonic network over its ways (15 rounds of 16
compare-exchanges at assoc 32, on one int64 per way: cost and way). On 100 Kaggle batches
of 2,048 (5.3 M lookups, 116,512 ways) it takes 44 ns per lookup with LRU and 63 with LFU,
against 12 for the `lru` policy (in-process CPU time, 2-core VM); a selection of the
oldest ways when untied, tried first, measured no faster than the network.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from replay._intrinsics import ix
from replay._jit import kernel
from replay._malloc import state_array
from replay._units import format_bytes
from replay.errors import ConfigError
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

if TYPE_CHECKING:
    from replay.system.spec import SystemSpec

FBGEMM_COUNTERS = (
    "calls",
    "requested_indices",
    "unique_indices",
    "unique_misses",
    "conflict_unique_misses",
    "conflict_misses",
)
_LFU_COUNT_BITS = 40  # FBGEMM's kLFUCounterBits: the sort key is set << 40 | ~count
_LFU_COUNT_CAP = (1 << _LFU_COUNT_BITS) - 1
_LFU_MAX_SETS = 1 << 23  # set << 40 stays a positive int64
_FIRST_TIMESTEP = 2  # TBE's timestep starts at 1, +1 before every prefetch
# tbe_kernel's record buffers when nothing is recorded (the same types: one compilation)
_NO_REC_BOUNDS = np.zeros((1, 3), dtype=np.int64)
_NO_REC = np.zeros(0, dtype=np.int64)
# meta slots: next time step, hash-set generation, resident ways, then FBGEMM's counters
_T, _GEN, _RES = 0, 1, 2
_TOTALS = 3
_META = _TOTALS + len(FBGEMM_COUNTERS)

_M1 = np.uint64(0xFF51AFD7ED558CCD)
_M2 = np.uint64(0xC4CEB9FE1A85EC53)
_S33 = np.uint64(33)
_FIB = np.uint64(0x9E3779B97F4A7C15)


@kernel(inline="always")
def cache_set(key: int, sets: int) -> np.int64:
    """FBGEMM's `cache_slot`: MurmurHash3's 64-bit finalizer of the linear index, mod sets."""
    h = np.uint64(key)
    h ^= h >> _S33
    h *= _M1
    h ^= h >> _S33
    h *= _M2
    h ^= h >> _S33
    return np.int64(h % np.uint64(sets))


# A lane during the sort: (cost + 1) << _SLOT_BITS | way, one int64 (cost + 1 >= 0: LFU's
# empty ways cost -1); compares look at the cost only, so equal costs never swap.
_SLOT_BITS = 13  # ways < 2^13 (associativity at most 4096)


def network_pairs(assoc: int) -> tuple[np.ndarray, np.ndarray]:
    """The compare-exchanges of FBGEMM's `BitonicSort<K, V, 1, Comparator>::sort` over
    `assoc` lanes, in order: (lower lane, upper lane); the lower keeps the smaller cost.
    Each merge of 2L lanes pairs lane i with i ^ (2L - 1) first, then with i ^ stride for
    stride = L/2 ... 1 (the lanes whose bit is clear are the lower ones)."""
    lo, hi = [], []
    half = 1
    while half < assoc:
        for i in range(assoc):
            if not i & half:
                lo.append(i)
                hi.append(i ^ (2 * half - 1))
        stride = half // 2
        while stride:
            for i in range(assoc):
                if not i & stride:
                    lo.append(i)
                    hi.append(i ^ stride)
            stride //= 2
        half *= 2
    return np.array(lo, dtype=np.int64), np.array(hi, dtype=np.int64)


@kernel
def _sort_lanes(lanes: np.ndarray, pair_lo: np.ndarray, pair_hi: np.ndarray) -> None:
    for p in range(len(pair_lo)):
        i = pair_lo[ix(p)]
        j = pair_hi[ix(p)]
        a = lanes[ix(i)]
        b = lanes[ix(j)]
        swap = (a >> _SLOT_BITS) > (b >> _SLOT_BITS)  # selects: which pairs swap is data
        lanes[ix(i)] = b if swap else a  # dependent, a branch would mispredict
        lanes[ix(j)] = a if swap else b


def warp_bitonic_sort(cost: np.ndarray, slot: np.ndarray, assoc: int) -> None:
    """The warp sort of `cost` (ascending) carrying `slot`, in place: the network the
    kernel runs, for the tests."""
    lanes = (cost[:assoc].astype(np.int64) + 1) << _SLOT_BITS | slot[:assoc]
    _sort_lanes(lanes, *network_pairs(assoc))
    cost[:assoc] = (lanes >> _SLOT_BITS) - 1
    slot[:assoc] = lanes & ((1 << _SLOT_BITS) - 1)


@kernel(inline="always")
def _way_lanes(
    way_key: np.ndarray,
    way_time: np.ndarray,
    lfu: np.ndarray,
    use_lfu: bool,
    base: int,
    assoc: int,
    lanes: np.ndarray,
) -> None:
    for w in range(assoc):
        if use_lfu:
            held = way_key[ix(base + w)] - 1
            cost = min(lfu[ix(held)], _LFU_COUNT_CAP) if held >= 0 else -1
        else:
            cost = way_time[ix(base + w)]
        lanes[ix(w)] = (cost + 1) << _SLOT_BITS | w


@kernel(inline="always")
def _hs_find(
    hs_key: np.ndarray, hs_gen: np.ndarray, gen: int, key: int, hbits: int
) -> np.int64 | int:
    mask = (1 << hbits) - 1
    j = np.int64((np.uint64(key) * _FIB) >> np.uint64(64 - hbits))
    while hs_gen[ix(j)] == gen:
        if hs_key[ix(j)] == key:
            return j
        j = (j + 1) & mask
    return -1


@kernel
def tbe_kernel(
    keys: np.ndarray,
    bounds: np.ndarray,
    ukeys: np.ndarray,
    ubounds: np.ndarray,
    way_key: np.ndarray,
    way_time: np.ndarray,
    lfu: np.ndarray,
    use_lfu: bool,
    sets: int,
    assoc: int,
    hs_key: np.ndarray,
    hs_cnt: np.ndarray,
    hs_gen: np.ndarray,
    hs_res: np.ndarray,
    hbits: int,
    key_bits: int,
    uniq: np.ndarray,
    mkey: np.ndarray,
    mset: np.ndarray,
    lanes: np.ndarray,
    pair_lo: np.ndarray,
    pair_hi: np.ndarray,
    meta: np.ndarray,
    out: np.ndarray,
    rec: bool,
    rec_bounds: np.ndarray,
    rec_read: np.ndarray,
    rec_evict: np.ndarray,
    rec_conflict: np.ndarray,
) -> None:
    # `rec`: also record, per batch b, the rows the cache exchanges with the memory
    # behind it (what SSD TBE's L2 sees, `replay.policies.ssd_tbe`): its unique misses in
    # FBGEMM's order (by set, then index: the rows `get` reads), the rows evicted, and
    # the conflict unique misses (written back after backward); rec_bounds[b] holds the
    # three streams' start offsets, rec_bounds[b + 1] their ends. Off for `tbe`.
    mask = (1 << hbits) - 1
    shift = np.uint64(64 - hbits)
    key_mask = (1 << key_bits) - 1
    slot_mask = (1 << _SLOT_BITS) - 1
    count_cap = _LFU_COUNT_CAP
    resident = meta[_RES]
    for b in range(len(bounds) - 1):
        t = meta[_T]
        meta[_T] = t + 1
        gen = meta[_GEN] + 1
        meta[_GEN] = gen
        # the batch's distinct rows and their lookups
        n = 0
        for i in range(bounds[b], bounds[b + 1]):
            k = keys[ix(i)]
            j = np.int64((np.uint64(k) * _FIB) >> shift)
            while True:
                if hs_gen[ix(j)] != gen:
                    hs_gen[ix(j)] = gen
                    hs_key[ix(j)] = k
                    hs_cnt[ix(j)] = 1
                    hs_res[ix(j)] = 0
                    uniq[ix(n)] = j
                    n += 1
                    break
                if hs_key[ix(j)] == k:
                    hs_cnt[ix(j)] += 1
                    break
                j = (j + 1) & mask
        requested = bounds[b + 1] - bounds[b]
        if use_lfu:
            for u in range(n):
                j = uniq[ix(u)]
                lfu[ix(hs_key[ix(j)])] += hs_cnt[ix(j)]
        # find: hits take time t (LRU); the rest are the unique misses
        nm = 0
        for u in range(n):
            j = uniq[ix(u)]
            k = hs_key[ix(j)]
            base = cache_set(k, sets) * assoc
            found = -1
            for w in range(assoc):
                if way_key[ix(base + w)] == k + 1:
                    found = w
                    break
            if found >= 0:
                hs_res[ix(j)] = 1
                if not use_lfu:
                    way_time[ix(base + found)] = t
            else:  # (set, index): one sort groups the misses by set, ascending index
                mkey[ix(nm)] = (base // assoc) << key_bits | k
                nm += 1
        mk = mkey[:nm]
        mk.sort()
        ev = 0
        co = 0
        if rec:
            r0 = rec_bounds[b, 0]
            for m in range(nm):
                rec_read[ix(r0 + m)] = mk[m] & key_mask
            rec_bounds[b + 1, 0] = r0 + nm
            ev = rec_bounds[b, 1]
            co = rec_bounds[b, 2]
        fills = 0
        evictions = 0
        conflict_unique = 0
        g = 0
        while g < nm:
            s = mk[g] >> key_bits
            e = g + 1
            while e < nm and mk[e] >> key_bits == s:
                e += 1
            for m in range(g, e):
                mset[ix(m - g)] = mk[m] & key_mask
            if use_lfu:  # most counted first; CUB's radix sort is stable: index order kept
                for m in range(1, e - g):
                    k = mset[ix(m)]
                    c = min(lfu[ix(k)], count_cap)
                    i = m
                    while i > 0 and min(lfu[ix(mset[ix(i - 1)])], count_cap) < c:
                        mset[ix(i)] = mset[ix(i - 1)]
                        i -= 1
                    mset[ix(i)] = k
            base = s * assoc
            _way_lanes(way_key, way_time, lfu, use_lfu, base, assoc, lanes)
            _sort_lanes(lanes, pair_lo, pair_hi)
            take = min(e - g, assoc)
            inserted = 0
            for lane in range(take):
                k = mset[ix(lane)]
                cost = (lanes[ix(lane)] >> _SLOT_BITS) - 1
                if use_lfu:
                    if cost > min(lfu[ix(k)], count_cap):
                        break
                elif cost == t:
                    break
                w = lanes[ix(lane)] & slot_mask
                old = way_key[ix(base + w)] - 1
                if old >= 0:
                    evictions += 1
                    if rec:
                        rec_evict[ix(ev)] = old
                        ev += 1
                    if use_lfu:  # a row that hit in this batch is read from the host
                        jo = _hs_find(hs_key, hs_gen, gen, old, hbits)
                        if jo >= 0:
                            hs_res[ix(jo)] = 0
                else:
                    resident += 1
                way_key[ix(base + w)] = k + 1
                if not use_lfu:
                    way_time[ix(base + w)] = t
                hs_res[ix(_hs_find(hs_key, hs_gen, gen, k, hbits))] = 1
                inserted += 1
            fills += inserted
            conflict_unique += e - g - inserted
            if rec:
                for m in range(inserted, e - g):
                    rec_conflict[ix(co)] = mset[ix(m)]
                    co += 1
            g = e
        if rec:
            rec_bounds[b + 1, 1] = ev
            rec_bounds[b + 1, 2] = co
        conflict = 0
        for u in range(n):
            j = uniq[ix(u)]
            if hs_res[ix(j)] == 0:
                conflict += hs_cnt[ix(j)]
        upd_fast = 0
        for i in range(ubounds[b], ubounds[b + 1]):
            k = ukeys[ix(i)]
            j = _hs_find(hs_key, hs_gen, gen, k, hbits)
            if j >= 0:
                upd_fast += hs_res[ix(j)]
            else:
                base = cache_set(k, sets) * assoc
                for w in range(assoc):
                    if way_key[ix(base + w)] == k + 1:
                        upd_fast += 1
                        break
        misses = fills + conflict
        out[b, HITS] = requested - misses
        out[b, MISSES] = misses
        out[b, BYPASS] = conflict
        out[b, FILLS] = fills
        out[b, EVICTIONS] = evictions
        out[b, WRITEBACKS] = evictions
        out[b, UPDATES_FAST] = upd_fast
        out[b, UPDATES_BACKING] = (ubounds[b + 1] - ubounds[b]) - upd_fast
        out[b, RESIDENT] = resident
        out[b, RESIDENT_MAX] = resident  # only grows within a batch
        out[b, NEEDED_ROWS] = fills
        meta[_TOTALS + 0] += 1
        meta[_TOTALS + 1] += requested
        meta[_TOTALS + 2] += n
        meta[_TOTALS + 3] += nm
        meta[_TOTALS + 4] += conflict_unique
        meta[_TOTALS + 5] += conflict
    meta[_RES] = resident


def tbe_sets(capacity_rows: int, assoc: int) -> int:
    """FBGEMM's rounding: whole sets holding at least `capacity_rows` rows, at least one."""
    return max(1, -(-int(capacity_rows) // assoc))


@register_policy("tbe")
class TBEPolicy(Policy):
    # LFU's count per row (FBGEMM's lxu_state, int64); LRU keeps nothing per row
    state_bytes_per_key = 8
    demand_fill = True

    @classmethod
    def capacity(
        cls, system: SystemSpec, unit_rows: int, row_state_bytes: int, total_keys: int
    ) -> int:
        """Ways in the cache: sets x assoc (see the module docstring for the rounding)."""
        p = system.policy
        assoc = p.associativity
        if p.capacity_rows > 0:
            sets = tbe_sets(p.capacity_rows, assoc)
        elif p.cache_load_factor > 0:
            sets = tbe_sets(int(total_keys * p.cache_load_factor), assoc)
        else:
            budget = p.capacity_bytes or system.tier(p.fast_tier).capacity_bytes
            sets = int(budget // (row_state_bytes * assoc))
            if sets < 1:
                raise ConfigError(
                    f"policy: a budget of {format_bytes(budget)} holds no set of {assoc} rows "
                    f"({row_state_bytes} bytes each)"
                )
        if p.cache_algorithm == "lfu" and sets >= _LFU_MAX_SETS:
            raise ConfigError(f"policy: tbe's LFU takes fewer than {_LFU_MAX_SETS:,} sets")
        nbytes = sets * assoc * row_state_bytes
        fast = system.tier(p.fast_tier)
        if nbytes > fast.capacity_bytes:
            raise ConfigError(
                f"policy: a cache of {sets:,} sets x {assoc} ways ({format_bytes(nbytes)}) does "
                f"not fit tier {fast.name!r} ({format_bytes(fast.capacity_bytes)})"
            )
        return sets * assoc

    def __init__(self, spec: PolicySpec, ctx: PolicyContext) -> None:
        super().__init__(spec, ctx)
        self.assoc = int(spec.associativity)
        if self.assoc < 1 or self.assoc & (self.assoc - 1):
            raise ConfigError("policy.associativity: a power of two (FBGEMM's warp sort)")
        self.sets = tbe_sets(ctx.capacity_units, self.assoc)
        self.use_lfu = spec.cache_algorithm == "lfu"
        # a miss sorts as set << key_bits | linear index, in one int64
        self.key_bits = max(1, int(ctx.total_keys - 1).bit_length())
        if self.key_bits + int(self.sets - 1).bit_length() > 63:
            raise ConfigError(
                f"policy: tbe takes sets x linear indices within 2^63 ({self.sets:,} sets, "
                f"{ctx.total_keys:,} rows)"
            )
        ways = self.sets * self.assoc
        # a way's row + 1 (0: empty) and its time step: zeroed memory is the empty cache,
        # and the pages of sets never used are never touched
        self.way_key = state_array(ways, np.int64)
        self.way_time = state_array(ways if not self.use_lfu else 1, np.int64)
        self.lfu = ctx.row_array(np.int64) if self.use_lfu else np.zeros(1, dtype=np.int64)
        self.lanes = np.zeros(self.assoc, dtype=np.int64)
        self.pair_lo, self.pair_hi = network_pairs(self.assoc)
        self.meta = np.zeros(_META, dtype=np.int64)
        self.meta[_T] = _FIRST_TIMESTEP
        self._scratch(16)

    def _scratch(self, lookups: int) -> None:
        """Per-batch buffers for batches of up to `lookups` lookups (a hash set at most
        half full)."""
        hbits = max(4, int(2 * lookups - 1).bit_length())
        self.hbits = hbits
        self.hs_key = np.zeros(1 << hbits, dtype=np.int64)
        self.hs_cnt = np.zeros(1 << hbits, dtype=np.int64)
        self.hs_gen = np.zeros(1 << hbits, dtype=np.int64)  # generation 0: never used
        self.hs_res = np.zeros(1 << hbits, dtype=np.uint8)
        self.uniq = np.zeros(lookups, dtype=np.int64)
        self.mkey = np.zeros(lookups, dtype=np.int64)
        self.mset = np.zeros(lookups, dtype=np.int64)
        self.meta[_GEN] = 0
        self.capacity_lookups = lookups

    def warm_up(self, empty: BatchRange) -> None:
        self.process(empty, np.zeros((0, NUM_COUNTERS), dtype=np.int64))

    def process(self, batch_range: BatchRange, out: np.ndarray) -> None:
        self._run(batch_range, out, False, _NO_REC_BOUNDS, _NO_REC, _NO_REC, _NO_REC)

    def _run(
        self,
        batch_range: BatchRange,
        out: np.ndarray,
        rec: bool,
        rec_bounds: np.ndarray,
        rec_read: np.ndarray,
        rec_evict: np.ndarray,
        rec_conflict: np.ndarray,
    ) -> None:
        """The kernel over one range; `rec` and the buffers as `tbe_kernel` takes them."""
        bounds = batch_range.bounds
        widest = int(np.diff(bounds).max()) if len(bounds) > 1 else 0
        if widest > self.capacity_lookups:
            self._scratch(widest)
        tbe_kernel(
            batch_range.keys,
            bounds,
            batch_range.update_keys,
            batch_range.update_bounds,
            self.way_key,
            self.way_time,
            self.lfu,
            self.use_lfu,
            self.sets,
            self.assoc,
            self.hs_key,
            self.hs_cnt,
            self.hs_gen,
            self.hs_res,
            self.hbits,
            self.key_bits,
            self.uniq,
            self.mkey,
            self.mset,
            self.lanes,
            self.pair_lo,
            self.pair_hi,
            self.meta,
            out,
            rec,
            rec_bounds,
            rec_read,
            rec_evict,
            rec_conflict,
        )

    def fbgemm_counters(self) -> dict[str, int]:
        """FBGEMM's cache statistics (`UVMCacheStatsIndex`) over the batches processed."""
        return {name: int(self.meta[_TOTALS + i]) for i, name in enumerate(FBGEMM_COUNTERS)}

    def summary_extra(self) -> dict[str, object]:
        return {
            "algorithm": self.spec.cache_algorithm,
            "sets": self.sets,
            "associativity": self.assoc,
            # FBGEMM's effective load factor: the ways over all rows of the cached tables
            "load_factor": self.sets * self.assoc / max(self.ctx.total_keys, 1),
            "fbgemm_counters": self.fbgemm_counters(),
        }


# -- the slow reference -------------------------------------------------------------------


def reference_cache_set(key: int, sets: int) -> int:
    """`cache_slot` of common.cuh with Python integers."""
    mask = (1 << 64) - 1
    h = key & mask
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & mask
    h ^= h >> 33
    h = (h * 0xC4CEB9FE1A85EC53) & mask
    h ^= h >> 33
    return h % sets


def reference_warp_sort(costs: Sequence[int]) -> list[int]:
    """The lanes' order after bitonic_sort.cuh's warp sort, lane-parallel as the GPU runs
    it: every lane reads its partner's value (shfl_xor), then the lower lane of each pair
    keeps the smaller, the upper the larger; equal values stay. Returns the lanes (ways)
    in sorted order."""
    k = list(costs)
    v = list(range(len(k)))
    merge = 1
    while merge < len(k):
        rounds = [(merge, 2 * merge - 1)]
        stride = merge // 2
        while stride:
            rounds.append((stride, stride))
            stride //= 2
        for bit, xor in rounds:
            other_k = [k[lane ^ xor] for lane in range(len(k))]
            other_v = [v[lane ^ xor] for lane in range(len(k))]
            for lane in range(len(k)):
                small = not lane & bit
                take = k[lane] > other_k[lane] if small else k[lane] < other_k[lane]
                if take:
                    k[lane], v[lane] = other_k[lane], other_v[lane]
        merge *= 2
    return v


def reference_tbe(
    batches: Sequence[tuple[Sequence[int], Sequence[int]]],
    sets: int,
    assoc: int,
    algorithm: str = "lru",
    record: list[tuple[list[int], list[int], list[int]]] | None = None,
) -> tuple[np.ndarray, dict[str, int]]:
    """Slow TBE cache on (lookup keys, update keys) per batch: the counter rows and
    FBGEMM's counters. Follows FBGEMM's kernels step by step, one Python object per way.
    `record`: appended per batch (unique misses by set then index, evicted rows,
    conflict unique misses), as `tbe_kernel` records them."""
    # the sets a batch touches, made on first use (a cache of millions of sets stays cheap)
    way_key: defaultdict[int, list[int]] = defaultdict(lambda: [-1] * assoc)
    way_time: defaultdict[int, list[int]] = defaultdict(lambda: [0] * assoc)
    lfu: Counter[int] = Counter()
    out = np.zeros((len(batches), NUM_COUNTERS), dtype=np.int64)
    totals = dict.fromkeys(FBGEMM_COUNTERS, 0)
    cap = (1 << _LFU_COUNT_BITS) - 1
    resident = 0  # ways holding a row
    for b, (lookups, updates) in enumerate(batches):
        t = _FIRST_TIMESTEP + b
        counts = Counter(lookups)
        unique = sorted(counts)
        if algorithm == "lfu":
            for key in unique:
                lfu[key] += counts[key]
        misses = []
        for key in unique:
            s = reference_cache_set(key, sets)
            if key in way_key[s]:
                if algorithm == "lru":
                    way_time[s][way_key[s].index(key)] = t
            else:
                misses.append(key)
        by_set: dict[int, list[int]] = {}
        for key in misses:  # ascending index
            by_set.setdefault(reference_cache_set(key, sets), []).append(key)
        fills = evictions = conflict_unique = 0
        evicted_hits = set()
        evicted: list[int] = []
        conflicts: list[int] = []
        for s in sorted(by_set):
            group = by_set[s]
            if algorithm == "lfu":
                group.sort(key=lambda key: -min(lfu[key], cap))  # stable: index order kept
                costs = [lfu[key] if key >= 0 else -1 for key in way_key[s]]
            else:
                costs = list(way_time[s])
            lanes = reference_warp_sort(costs)
            ranked = sorted(costs)  # what the sorted lanes hold
            inserted = 0
            for lane in range(min(len(group), assoc)):
                key = group[lane]
                if algorithm == "lfu" and ranked[lane] > lfu[key]:
                    break
                if algorithm == "lru" and ranked[lane] == t:
                    break
                w = lanes[lane]
                if way_key[s][w] >= 0:
                    evictions += 1
                    evicted_hits.add(way_key[s][w])
                    evicted.append(way_key[s][w])
                else:
                    resident += 1
                way_key[s][w] = key
                way_time[s][w] = t
                inserted += 1
            fills += inserted
            conflict_unique += len(group) - inserted
            conflicts.extend(group[inserted:])
        if record is not None:
            record.append(
                ([k for s in sorted(by_set) for k in sorted(by_set[s])], evicted, conflicts)
            )
        cached = {key for key in unique if key in way_key[reference_cache_set(key, sets)]}
        conflict = sum(counts[key] for key in unique if key not in cached)
        assert algorithm == "lfu" or not evicted_hits & set(unique)
        row = out[b]
        row[MISSES] = fills + conflict
        row[HITS] = len(lookups) - row[MISSES]
        row[BYPASS] = conflict
        row[FILLS] = row[NEEDED_ROWS] = fills
        row[EVICTIONS] = row[WRITEBACKS] = evictions
        fast = sum(1 for key in updates if key in way_key[reference_cache_set(key, sets)])
        row[UPDATES_FAST] = fast
        row[UPDATES_BACKING] = len(updates) - fast
        row[RESIDENT] = row[RESIDENT_MAX] = resident
        totals["calls"] += 1
        totals["requested_indices"] += len(lookups)
        totals["unique_indices"] += len(unique)
        totals["unique_misses"] += len(misses)
        totals["conflict_unique_misses"] += conflict_unique
        totals["conflict_misses"] += conflict
    return out, totals
