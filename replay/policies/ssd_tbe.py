"""`ssd-tbe`: FBGEMM's SSD TBE (`fbgemm_gpu/tbe/ssd/`, TorchRec's `KEY_VALUE` kernel): an L1
cache of `sets x 32` ways beside the GPU, an L2 LRU of rows in host DRAM (CacheLib), and
the RocksDB store on NVMe behind it.

Sources (pytorch/FBGEMM, fbgemm_gpu): `fbgemm_gpu/tbe/ssd/training.py`
(`SSDTableBatchedEmbeddingBags._prefetch`, `evict`, `_evict_from_scratch_pad`, `flush`),
`src/ssd_split_embeddings_cache/ssd_split_embeddings_cache_cuda.cu`
(`ssd_cache_populate_actions_cuda`, `ssd_cache_actions_insert_kernel`),
`src/ssd_split_embeddings_cache/kv_db_table_batched_embeddings.cpp` (`EmbeddingKVDB::get`,
`set`, `get_cache`, `set_cache`, `update_cache_and_storage`, `flush`),
`src/split_embeddings_cache/cachelib_cache.cpp` (`CacheLibCache`: an `LruAllocator`,
promotion on every read and write, the eviction callback). docs/ssd_tbe.md has the model.

**L1** is the `tbe` policy's LRU cache, unchanged (`replay.policies.tbe`):
`ssd_cache_actions_insert_kernel` finds ways exactly as `lru_cache_populate` does (ways
used in this time step are unavailable, the rest sorted by time with the same warp
bitonic sort), so L1's counters are `tbe`'s on the same settings. Per batch it sends
to L2, in this order (`_prefetch`):

1. `get` of every unique miss, inserted or conflict (`inserted_indices`, sorted by set,
   then index: `lru_cache_find_uncached`'s radix sort of the sorted unique indices);
2. `set` of the rows L1 evicted for them (`evict`, FWD_L1_EVICTION): FBGEMM keeps no
   dirty bit, every evicted row is written;
3. after backward, `set` of the conflict unique misses (`_evict_from_scratch_pad`,
   BWD_L1_CNFLCT_MISS_WRITE_BACK): the scratch pad's rows, updated, go back.

`l1_miss_stream` yields exactly these three streams per batch (what the L2 model below
consumes, and what `replay plan` sizes L2 with).

**L2** (`EmbeddingKVDB`, `CacheLibCache`) is an LRU of the rows CacheLib allocates in
`l2_capacity_bytes` (`replay.system.cachelib`: an item is a 32 B header, the 8 B key and
the row with its optimizer state, in a chunk of its slab class; a 64 B row takes 120 B).
Per batch:
every `get` row is looked up (a hit moves to the front; FBGEMM's L2 lookups and misses),
then the misses are read from the store and put into L2 clean (`FWD_ROCKSDB_READ`), then
the `set` rows are put, marked written. A put into a full L2 evicts the least recent row,
which goes to the store whatever it holds (CacheLib's eviction callback; no dirty bit);
`clean_evictions` counts the victims not written since the store gave them (a dirty bit's
saving). No L2 (0 bytes): every `get` reads the store, every `set` writes it.

**The store** (RocksDB, `EmbeddingRocksDB`) reads one row per L2 miss and writes one per
L2 victim; the drive writes `ssd_write_amplification` times the bytes given (an
ASSUMPTION, 4 in the preset: FBGEMM configures universal compaction with the WAL off,
which the RocksDB wiki's "Universal Compaction" gives as the low-write-amplification
style; about one write at the memtable flush plus one per merge of sorted runs; see
docs/ssd_tbe.md). The engine prices the bytes (`replay.engine.account`).

Simplifications: one LRU for L2 (CacheLib splits it into equal pools per shard, each an
LRU); L1 sized as `tbe` sizes it (TorchRec rounds a load factor's
sets down, `tbe` up); prefetch pipelining, cache-line locking, KV-ZCH eviction and the
RocksDB block cache off.

Kernel: L2 is `lru`'s structure (a key -> slot hash table sized to L2, a circular doubly
linked list of slots), with the table entries of the rows 16 ahead prefetched: on 2,000
batches of criteo-terabyte (106 M lookups, an 8 GiB L2) ssd-tbe replays at 0.73x the
rate of hbm-tbe-lru (2-core VM shared with other jobs).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from replay._intrinsics import PREFETCH_AHEAD, ix, prefetch
from replay._jit import kernel
from replay._malloc import state_array
from replay._units import format_bytes
from replay.errors import ConfigError
from replay.policies.base import (
    NUM_COUNTERS,
    PolicyContext,
    index_dtype,
    register_policy,
    usable_units,
)
from replay.policies.lru import _find, _home, _remove, _to_front, _unlink, table_shape
from replay.policies.tbe import TBEPolicy, tbe_sets
from replay.system import cachelib
from replay.system.spec import PolicySpec
from replay.trace.stream import BatchRange, updates_as_keys

if TYPE_CHECKING:
    from replay.system.spec import SystemSpec

READS, EVICTS, CONFLICTS = 0, 1, 2  # columns of L1Exchange.bounds


@dataclass(frozen=True)
class L1Exchange:
    """What L1 exchanged with L2 in batches [batch_start, batch_start + batches).

    Flat keys (`replay.trace.keys`, FBGEMM's linear indices). `bounds[i]` holds batch
    i's start offsets into `reads`, `evictions` and `conflicts`, `bounds[i + 1]` their
    ends. Per batch, in FBGEMM's order: `reads` are L1's unique misses (L2 `get`s),
    `evictions` the rows L1 evicted to take them (L2 `set`s in the prefetch),
    `conflicts` the unique misses L1 could not take (served from the scratch pad and
    written back to L2 after backward; a subset of `reads`). `counters` are L1's
    counter rows (`replay.policies.base`), as the `tbe` policy fills them."""

    batch_start: int
    bounds: np.ndarray  # (batches + 1, 3) int64
    reads: np.ndarray
    evictions: np.ndarray
    conflicts: np.ndarray
    counters: np.ndarray  # (batches, NUM_COUNTERS) int64

    @property
    def batches(self) -> int:
        return len(self.bounds) - 1

    def batch(self, i: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Batch `batch_start + i`'s (reads, evictions, conflicts)."""
        lo, hi = self.bounds[i], self.bounds[i + 1]
        return (
            self.reads[lo[READS] : hi[READS]],
            self.evictions[lo[EVICTS] : hi[EVICTS]],
            self.conflicts[lo[CONFLICTS] : hi[CONFLICTS]],
        )


class L1Recorder(TBEPolicy):
    """The `tbe` policy's LRU cache that also records what it sends to L2 (not
    registered: `ssd-tbe` and `l1_miss_stream` use it)."""

    def exchange(self, batch_range: BatchRange, out: np.ndarray) -> L1Exchange:
        """Process one range (counters into `out`) and return its L1 -> L2 streams."""
        n = len(batch_range.keys)  # each stream holds at most a batch's distinct rows
        bounds = np.zeros((len(batch_range.bounds), 3), dtype=np.int64)
        reads = np.empty(n, dtype=np.int64)
        evictions = np.empty(n, dtype=np.int64)
        conflicts = np.empty(n, dtype=np.int64)
        self._run(batch_range, out, True, bounds, reads, evictions, conflicts)
        end = bounds[-1]
        return L1Exchange(
            batch_range.batch_start,
            bounds,
            reads[: end[READS]],
            evictions[: end[EVICTS]],
            conflicts[: end[CONFLICTS]],
            out,
        )


def l1_sets(
    total_rows: int, *, cache_rows: int = 0, load_factor: float = 0.0, associativity: int = 32
) -> int:
    """L1's sets as `tbe` sizes them: whole sets of `associativity` ways holding at least
    `cache_rows` rows, or int(total_rows x load_factor) when `cache_rows` is 0."""
    if cache_rows < 0 or not 0 <= load_factor <= 1:
        raise ConfigError("L1: cache_rows >= 0 and a load factor in [0, 1]")
    rows = cache_rows if cache_rows > 0 else int(total_rows * load_factor)
    if rows <= 0:
        raise ConfigError("L1: give cache_rows > 0 or a load factor > 0")
    return tbe_sets(rows, associativity)


def l1_recorder(total_rows: int, sets: int, associativity: int = 32) -> L1Recorder:
    """An empty L1 of `sets` x `associativity` ways over flat keys [0, total_rows)."""
    if total_rows < 1:
        raise ConfigError("L1: the tables hold no rows")
    spec = PolicySpec(name="tbe", associativity=associativity, cache_algorithm="lru")
    ctx = PolicyContext(
        total_keys=int(total_rows),
        table_rows=np.array([total_rows], dtype=np.int64),
        offsets=np.array([0, total_rows], dtype=np.int64),
        num_batches=0,
        row_state_bytes=1,
        capacity_units=sets * associativity,
    )
    return L1Recorder(spec, ctx)


def l1_miss_stream(
    ranges: Iterable[BatchRange],
    total_rows: int,
    *,
    cache_rows: int = 0,
    load_factor: float = 0.0,
    associativity: int = 32,
) -> Iterator[L1Exchange]:
    """FBGEMM SSD TBE's L1 over consecutive batch ranges: per range, the rows it reads
    from L2, evicts to L2 and writes back to L2 after backward (`L1Exchange`).

    `ranges`: the `BatchRange`s the policies get (`replay.trace.stream`), over flat keys
    in [0, total_rows) (Σ rows of the tables sharing the cache). L1 holds whole sets of
    `associativity` ways: at least `cache_rows` rows, or int(total_rows x load_factor)
    (TorchRec's `cache_load_factor`) when `cache_rows` is 0; LRU by batch time step
    (`replay.policies.tbe`). Ranges are consumed one at a time; each yielded exchange
    owns its arrays."""
    sets = l1_sets(
        total_rows, cache_rows=cache_rows, load_factor=load_factor, associativity=associativity
    )
    l1 = l1_recorder(total_rows, sets, associativity)
    for br in ranges:
        br = updates_as_keys(br, 0)  # the kernel reads update keys (L1's update counters)
        out = np.zeros((br.batch_stop - br.batch_start, NUM_COUNTERS), dtype=np.int64)
        yield l1.exchange(br, out)


# -- L2 and the store ---------------------------------------------------------------------

# per-batch columns of SSDTBEPolicy.store (rows)
L2_HITS = 0  # L2 `get`s that found their row
L2_MISSES = 1  # L2 `get`s that did not: read from the store, then put into L2
L2_EVICTIONS = 2  # rows CacheLib evicted (each written to the store)
L2_CLEAN_EVICTIONS = 3  # of those, rows not `set` since the store gave them (a dirty bit's saving)
L2_SETS = 4  # L2 `set`s: L1 evictions and conflict write-backs
SSD_READS = 5  # rows read from the store (L2 misses)
SSD_WRITES = 6  # rows written to the store (L2 evictions; every `set` without an L2)
L2_RESIDENT = 7  # rows in L2 at the end of the batch
NUM_STORE = 8
STORE_NAMES = (
    "l2_hits",
    "l2_misses",
    "l2_evictions",
    "l2_clean_evictions",
    "l2_sets",
    "ssd_read_rows",
    "ssd_write_rows",
    "l2_resident",
)
# L2 meta slots
_SIZE, _CAP, _SLOT_BITS, _SHIFT = 0, 1, 2, 3


@kernel(inline="always")
def _l2_put(
    table: np.ndarray,
    slot_key: np.ndarray,
    links: np.ndarray,
    dirty: np.ndarray,
    meta: np.ndarray,
    k: int,
    written: int,
    row: np.ndarray,
) -> None:
    """CacheLib's `put` (findToWrite, else allocate + insertOrReplace): the row moves to
    the front; a new row may evict the least recent one, which goes to the store."""
    cap = meta[_CAP]
    slot_bits = meta[_SLOT_BITS]
    shift = meta[_SHIFT]
    s = _find(table, k, slot_bits, shift)
    if s >= 0:
        _unlink(links, s)
        dirty[ix(s)] |= written
    else:
        size = meta[_SIZE]
        if size < cap:
            table[ix(-1 - s)] = ((k + 1) << slot_bits) | size
            s = size
            meta[_SIZE] = size + 1
        else:
            v = links[ix(2 * cap)]
            table[ix(-1 - s)] = ((k + 1) << slot_bits) | v
            s = v
            row[L2_EVICTIONS] += 1
            row[L2_CLEAN_EVICTIONS] += 1 - dirty[ix(s)]
            row[SSD_WRITES] += 1
            _remove(table, slot_key[ix(s)], slot_bits, shift)
            _unlink(links, s)
        slot_key[ix(s)] = k
        dirty[ix(s)] = written
    _to_front(links, cap, s)


@kernel
def l2_kernel(
    bounds: np.ndarray,
    reads: np.ndarray,
    evictions: np.ndarray,
    conflicts: np.ndarray,
    table: np.ndarray,
    slot_key: np.ndarray,
    links: np.ndarray,
    dirty: np.ndarray,
    missed: np.ndarray,
    meta: np.ndarray,
    out: np.ndarray,
) -> None:
    """L2 and the store over one range of L1's exchange (`L1Exchange`): per batch, the
    `get` of the reads (all looked up first, then the misses read from the store and put
    into L2), the `set` of L1's evictions, then of the conflict write-backs."""
    cap = meta[_CAP]
    slot_bits = meta[_SLOT_BITS]
    shift = meta[_SHIFT]
    for b in range(len(bounds) - 1):
        row = out[b]
        if cap == 0:  # no L2: `get` reads the store, `set` writes it
            row[SSD_READS] = bounds[b + 1, READS] - bounds[b, READS]
            row[SSD_WRITES] = (bounds[b + 1, EVICTS] - bounds[b, EVICTS]) + (
                bounds[b + 1, CONFLICTS] - bounds[b, CONFLICTS]
            )
            continue
        nm = 0
        r1 = bounds[b + 1, READS]
        for i in range(bounds[b, READS], r1):
            # the rows AHEAD lookups on: a prefetch, not a test (the table is random)
            prefetch(table, _home(reads[ix(min(i + PREFETCH_AHEAD, r1 - 1))], shift))
            k = reads[ix(i)]
            s = _find(table, k, slot_bits, shift)
            if s >= 0:  # CacheLib's find promotes on every read
                row[L2_HITS] += 1
                _unlink(links, s)
                _to_front(links, cap, s)
            else:
                missed[ix(nm)] = k
                nm += 1
        row[L2_MISSES] = nm
        row[SSD_READS] = nm
        for m in range(nm):  # FWD_ROCKSDB_READ: the rows read go into L2, as read
            prefetch(table, _home(missed[ix(min(m + PREFETCH_AHEAD, nm - 1))], shift))
            _l2_put(table, slot_key, links, dirty, meta, missed[ix(m)], 0, row)
        e1 = bounds[b + 1, EVICTS]
        for i in range(bounds[b, EVICTS], e1):  # FWD_L1_EVICTION
            prefetch(table, _home(evictions[ix(min(i + PREFETCH_AHEAD, e1 - 1))], shift))
            _l2_put(table, slot_key, links, dirty, meta, evictions[ix(i)], 1, row)
            row[L2_SETS] += 1
        c1 = bounds[b + 1, CONFLICTS]
        for i in range(bounds[b, CONFLICTS], c1):  # BWD write-back
            prefetch(table, _home(conflicts[ix(min(i + PREFETCH_AHEAD, c1 - 1))], shift))
            _l2_put(table, slot_key, links, dirty, meta, conflicts[ix(i)], 1, row)
            row[L2_SETS] += 1
        row[L2_RESIDENT] = meta[_SIZE]


class L2Cache:
    """FBGEMM SSD TBE's L2 (CacheLib's LRU of whole rows in host DRAM) and the store's row
    counts, fed with L1's exchange range by range."""

    def __init__(self, total_rows: int, capacity_rows: int, lookups: int = 0) -> None:
        self.capacity_rows = max(0, int(capacity_rows))
        # An L2 of more rows than the tables hold never evicts, and neither does one of
        # exactly those rows, nor one of as many rows as the `lookups` (where known: every
        # row that enters the L2 was looked up): its slots beyond them would never be
        # filled, so it gets no more (`usable_units`); the counters are the same, the
        # capacity is as given.
        self.bound = usable_units(self.capacity_rows, total_rows) if self.capacity_rows else 0
        cap = usable_units(self.capacity_rows, total_rows, 1, lookups) if self.capacity_rows else 0
        self.slots = cap
        entries, slot_bits, shift = table_shape(total_rows, max(cap, 1))
        self.table = state_array(entries if cap else 16, np.int64)
        self.slot_key = np.empty(cap, dtype=np.int64)
        self.links = np.empty(2 * cap + 2, dtype=index_dtype(cap))
        self.links[2 * cap :] = cap
        self.dirty = np.empty(cap, dtype=np.uint8)
        self.meta = np.array([0, cap, slot_bits, shift], dtype=np.int64)
        self.missed = np.empty(16, dtype=np.int64)

    def feed(self, ex: L1Exchange, out: np.ndarray) -> None:
        """Add one range's store counters (`STORE_NAMES` columns) into `out`."""
        widest = int(np.diff(ex.bounds[:, READS]).max()) if ex.batches else 0
        if widest > len(self.missed):
            self.missed = np.empty(widest, dtype=np.int64)
        l2_kernel(
            ex.bounds,
            ex.reads,
            ex.evictions,
            ex.conflicts,
            self.table,
            self.slot_key,
            self.links,
            self.dirty,
            self.missed,
            self.meta,
            out,
        )


@register_policy("ssd-tbe")
class SSDTBEPolicy(L1Recorder):
    """L1 (`tbe`'s LRU cache in `fast_tier`), L2 (an LRU of `l2_capacity_bytes` of whole
    rows in `backing_tier`) and the RocksDB store in `store_tier`."""

    state_bytes_per_key = 0  # LRU: nothing per row; L2's table is sized to L2

    @classmethod
    def check_spec(cls, system: SystemSpec, tier_names: set[str], where: str) -> None:
        super().check_spec(system, tier_names, where)
        p = system.policy
        if p.cache_algorithm != "lru":
            raise ConfigError(f"{where}.cache_algorithm: ssd-tbe's L1 is LRU (FBGEMM's SSD TBE)")
        if p.store_tier not in tier_names:
            raise ConfigError(f"{where}.store_tier: no tier named {p.store_tier!r}")
        if p.store_tier in (p.fast_tier, p.backing_tier):
            raise ConfigError(f"{where}.store_tier: the store is neither L1's nor L2's tier")
        back = system.tier(p.backing_tier)
        if p.l2_capacity_bytes > back.capacity_bytes:
            raise ConfigError(
                f"{where}.l2_capacity_bytes: {format_bytes(p.l2_capacity_bytes)} do not fit tier "
                f"{back.name!r} ({format_bytes(back.capacity_bytes)})"
            )

    def __init__(self, spec: PolicySpec, ctx: PolicyContext) -> None:
        super().__init__(spec, ctx)
        if spec.cache_algorithm != "lru":
            raise ConfigError("policy.cache_algorithm: ssd-tbe's L1 is LRU (FBGEMM's SSD TBE)")
        # CacheLib's items are a row with its optimizer state (kv_db_table_batched_
        # embeddings.cpp: max_D x element size, max_D the row's width incl. the state),
        # a header and the key, in chunks of their slab class (`replay.system.cachelib`)
        self.l2 = L2Cache(
            ctx.total_keys,
            cachelib.capacity_rows(spec.l2_capacity_bytes, ctx.row_state_bytes),
            ctx.num_lookups,
        )
        self.store = np.zeros((ctx.num_batches, NUM_STORE), dtype=np.int64)

    def process(self, batch_range: BatchRange, out: np.ndarray) -> None:
        ex = self.exchange(batch_range, out)
        self.l2.feed(ex, self.store[batch_range.batch_start : batch_range.batch_stop])

    def store_rows(self) -> np.ndarray:
        return self.store

    def sizing_notes(self) -> list[str]:
        l2 = self.l2
        if l2.slots >= l2.capacity_rows:
            return super().sizing_notes()
        bound = "the rows of the tables" if l2.slots == l2.bound else "the trace's lookups"
        return [
            *super().sizing_notes(),
            f"policy: an L2 of {l2.capacity_rows:,} rows allocated as {l2.slots:,} slots, "
            f"{bound}: it can hold no more, and its counters are those of the capacity given",
        ]

    def summary_extra(self) -> dict[str, object]:
        tot = self.store.sum(axis=0)
        state = self.ctx.row_state_bytes
        wa = float(self.spec.ssd_write_amplification)
        lookups = int(tot[L2_HITS] + tot[L2_MISSES])
        extra = super().summary_extra()
        return {
            **extra,
            "l1": {
                "sets": self.sets,
                "associativity": self.assoc,
                "load_factor": extra["load_factor"],
                **self.fbgemm_counters(),
            },
            "l2": {
                "hits": int(tot[L2_HITS]),
                "misses": int(tot[L2_MISSES]),
                "evictions": int(tot[L2_EVICTIONS]),
                "clean_evictions": int(tot[L2_CLEAN_EVICTIONS]),
                "sets": int(tot[L2_SETS]),
                # FBGEMM's get_l2_cache_hit_rate (1 - misses / lookups)
                "hit_rate": int(tot[L2_HITS]) / lookups if lookups else 0.0,
                "capacity_rows": self.l2.capacity_rows,
                "capacity_bytes": float(self.spec.l2_capacity_bytes),
                "resident_max": int(self.store[:, L2_RESIDENT].max()) if len(self.store) else 0,
            },
            "ssd": {
                "read_rows": int(tot[SSD_READS]),
                "write_rows": int(tot[SSD_WRITES]),
                "read_bytes": int(tot[SSD_READS]) * state,
                "logical_write_bytes": int(tot[SSD_WRITES]) * state,
                "write_bytes": round(int(tot[SSD_WRITES]) * state * wa),
                "write_amplification": wa,
            },
        }


# -- the slow reference -------------------------------------------------------------------


def reference_l2(
    streams: Iterable[tuple[Sequence[int], Sequence[int], Sequence[int]]], capacity_rows: int
) -> np.ndarray:
    """Slow L2 and store on L1's per-batch (reads, evictions, conflicts): the
    `STORE_NAMES` columns per batch. An OrderedDict of row -> written since the store
    gave it, most recent last."""
    cache: OrderedDict[int, bool] = OrderedDict()
    rows = []

    def put(row: list[int], key: int, written: bool) -> None:
        if key in cache:
            cache[key] = cache[key] or written
            cache.move_to_end(key)
            return
        if len(cache) == capacity_rows:
            _, was_written = cache.popitem(last=False)
            row[L2_EVICTIONS] += 1
            row[L2_CLEAN_EVICTIONS] += int(not was_written)
            row[SSD_WRITES] += 1
        cache[key] = written

    for reads, evictions, conflicts in streams:
        row = [0] * NUM_STORE
        if capacity_rows == 0:
            row[SSD_READS] = len(reads)
            row[SSD_WRITES] = len(evictions) + len(conflicts)
            rows.append(row)
            continue
        missed = []
        for key in reads:
            if key in cache:
                row[L2_HITS] += 1
                cache.move_to_end(key)
            else:
                missed.append(key)
        row[L2_MISSES] = row[SSD_READS] = len(missed)
        for key in missed:
            put(row, key, False)
        for key in [*evictions, *conflicts]:
            put(row, key, True)
            row[L2_SETS] += 1
        row[L2_RESIDENT] = len(cache)
        rows.append(row)
    return np.array(rows, dtype=np.int64).reshape(-1, NUM_STORE)
