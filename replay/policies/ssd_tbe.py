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
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from replay.errors import ConfigError
from replay.policies.base import NUM_COUNTERS, PolicyContext
from replay.policies.tbe import TBEPolicy, tbe_sets
from replay.system.spec import PolicySpec
from replay.trace.stream import BatchRange, updates_as_keys

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
