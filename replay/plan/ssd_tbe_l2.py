"""The L2 curve of FBGEMM's SSD TBE: an LRU over the rows its L1 cache reads and writes,
at every L2 size in one pass.

What the L2 sees (fbgemm_gpu `src/ssd_split_embeddings_cache/kv_db_table_batched_embeddings.cpp`,
`EmbeddingKVDB::get`, `set`, `update_cache_and_storage`; the L2 is a CacheLib LRU of
`l2_cache_size` GiB whose items are `max_D x element size` bytes; the `ssd-tbe` policy's
`L2Cache` is the model replayed), per batch:

- **reads**: the rows L1 misses (its prefetch's unique misses) are all looked up in L2
  first (`get_cache`: a `find` per row, which promotes a row L2 holds); the rows L2 does
  not hold are read from the SSD store (RocksDB) and put into L2;
- **writes**: the rows L1 evicts, then the conflict misses written back after backward,
  are put into L2;
- every row L2 evicts is written to the SSD store (CacheLib keeps no dirty bit: a row
  read from the SSD and evicted unchanged is written back too).

A read hits iff its row is in L2 at the batch's start, so its stack distance must count
the rows accessed between its last access and the batch, not the batch's other reads.
Fed to the stack most recently used first (rows never seen last), every read fed before
it was used more recently, so is counted already: each read's distance in the fed stream
is exactly its distance at the batch's start (`StackDistances.last_positions` gives the
order). The rest is Mattson's stack property (Mattson et al., IBM Systems Journal 9(2),
1970; `replay.analysis.stack`): an access hits an L2 of C rows iff its distance is < C,
so one exact pass gives, at every C:

    SSD reads(C)  = cold reads + #{reads with distance >= C}
    inserts(C)    = cold accesses + #{accesses with distance >= C}
    SSD writes(C) = inserts(C) - min(C, distinct rows of the stream)   (C > 0)

(an LRU that inserts every access it misses evicts all it inserted but what it holds at
the end). Without an L2 (C = 0) the reads and the writes go to the SSD store as they are.

Exact for the reads; the writes can differ from the policy's replay by the order in which
one batch's reads leave L2 later: here most recently used first, in the policy the hits in
read order under the misses in read order, an order that depends on C and so has no
one-pass curve (FBGEMM's `update_cache_and_storage` puts every row of the get, hits too,
in read order: that order has one). Measured against the policy's `L2Cache` on L1
candidates of 0.5%, 2% and 10% load factor: on `tiny` (60 batches) reads equal at every
size, writes within 1% at L2 sizes of at least twice a batch's reads (6% below); on
`criteo-kaggle` (12 batches) both equal at every size.
The distances are counted per size, not kept: memory is the pass's per-row state
(`StackDistances`) plus one counter per size.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from replay.analysis.stack import StackDistances

# a row space above this many keys keeps its per-row state in a hash map of the keys seen
# (a sampled stream touches few of them); below, a direct array of 4-8 bytes per key
DIRECT_MAX_KEYS = 1 << 28


@dataclass(frozen=True)
class L2Counts:
    """What an L2 of each size does over the stream (rows, not bytes)."""

    sizes: np.ndarray  # int64 L2 capacities in rows, ascending (0: no L2)
    ssd_read_rows: np.ndarray  # int64 per size: reads the L2 missed (read from the SSD)
    ssd_write_rows: np.ndarray  # int64 per size: rows written to the SSD store
    reads: int  # rows L1 sent to L2 to read
    writes: int  # rows L1 wrote to L2
    distinct: int  # distinct rows of the stream


class L2Curve:
    """Feed each batch's reads, then its writes; `counts()` answers every size at once.

    `sizes` are L2 capacities in rows (ascending; 0 allowed: no L2); `total_keys` bounds
    the flat keys (`replay.trace.keys`)."""

    def __init__(
        self, total_keys: int, sizes: Iterable[int], *, direct: bool | None = None
    ) -> None:
        self.sizes = np.unique(np.asarray(list(sizes), dtype=np.int64))
        if len(self.sizes) == 0 or self.sizes[0] < 0:
            raise ValueError("L2 sizes must be non-negative and at least one")
        if direct is None:  # a direct array of 4-8 bytes per key, or a map of those seen
            direct = int(total_keys) <= DIRECT_MAX_KEYS
        self._state = StackDistances(int(total_keys), direct=direct)
        # counts by bucket: bucket j holds distances d with j = #{sizes <= d}
        self._read_buckets = np.zeros(len(self.sizes) + 1, dtype=np.int64)
        self._all_buckets = np.zeros(len(self.sizes) + 1, dtype=np.int64)
        self._cold_reads = 0
        self._cold_all = 0
        self.reads = 0
        self.writes = 0

    def feed(self, reads: np.ndarray, writes: np.ndarray) -> None:
        """One batch: the rows L1 reads from L2 (distinct), then those it writes to L2.

        The reads are looked up before any of them is put (FBGEMM's `get`: every row's
        `find`, then the puts), so a read hits iff its row is in L2 at the batch's start:
        its stack distance counts the rows accessed since its last access up to the batch,
        not the batch's other reads. Fed most recently used first (never seen last), each
        read's distance in the stream is exactly that: every read fed before it was used
        more recently, so was counted already. They leave L2 with the batch's reads at the
        front, the least recently used of them (and the new rows) first."""
        reads = np.ascontiguousarray(reads, dtype=np.int64)
        writes = np.ascontiguousarray(writes, dtype=np.int64)
        if len(reads) > 1:
            last = self._state.last_positions(reads)
            reads = reads[np.argsort(-last, kind="stable")]  # -1 (never) sorts last
        n = len(self.sizes) + 1
        for keys, is_read in ((reads, True), (writes, False)):
            if len(keys) == 0:
                continue
            dist = np.empty(len(keys), dtype=np.int64)
            self._state.feed(keys, dist)
            seen = dist[dist >= 0]
            cold = len(dist) - len(seen)
            # bucket j = #{sizes <= d}: the sizes this access misses
            counted = np.bincount(np.searchsorted(self.sizes, seen, side="right"), minlength=n)
            self._all_buckets += counted
            self._cold_all += cold
            if is_read:
                self._read_buckets += counted
                self._cold_reads += cold
                self.reads += len(keys)
            else:
                self.writes += len(keys)

    def counts(self) -> L2Counts:
        # misses(C_i) = cold + #{d >= C_i} = cold + sum of buckets j > i
        above_reads = np.cumsum(self._read_buckets[::-1])[::-1][1:]
        above_all = np.cumsum(self._all_buckets[::-1])[::-1][1:]
        distinct = self._state.distinct
        ssd_reads = self._cold_reads + above_reads
        inserts = self._cold_all + above_all
        ssd_writes = inserts - np.minimum(self.sizes, distinct)
        no_l2 = self.sizes == 0
        ssd_reads = np.where(no_l2, self.reads, ssd_reads)
        ssd_writes = np.where(no_l2, self.writes, ssd_writes)
        return L2Counts(
            sizes=self.sizes.copy(),
            ssd_read_rows=ssd_reads.astype(np.int64),
            ssd_write_rows=ssd_writes.astype(np.int64),
            reads=self.reads,
            writes=self.writes,
            distinct=distinct,
        )


def reference_l2(
    batches: Iterable[tuple[Iterable[int], Iterable[int]]], capacity: int
) -> tuple[int, int]:
    """(SSD read rows, SSD write rows) of an L2 LRU of `capacity` rows, by an explicit
    ordered dict (the slow, obviously correct version the tests compare with): per batch
    its reads are looked up first (a read of a row L2 holds at the batch's start hits),
    then they take the front in order of their last use (most recent first, rows never
    used last), every new row evicting the least recent one (written to the SSD); then
    each write is put the same way. Without an L2 every read and write goes to the SSD."""
    cache: OrderedDict[int, None] = OrderedDict()
    used: dict[int, int] = {}  # row -> time of its last access
    clock = 0
    ssd_reads = ssd_writes = 0

    def put(key: int) -> None:
        nonlocal ssd_writes, clock
        if key in cache:
            cache.move_to_end(key)
        else:
            cache[key] = None
            if len(cache) > capacity:
                cache.popitem(last=False)
                ssd_writes += 1
        clock += 1
        used[key] = clock

    for reads, writes in batches:
        reads = [int(k) for k in reads]
        writes = [int(k) for k in writes]
        if capacity == 0:
            ssd_reads += len(reads)
            ssd_writes += len(writes)
            continue
        ssd_reads += sum(1 for k in reads if k not in cache)
        for key in sorted(reads, key=lambda k: -used.get(k, -1)):  # stable: -(-1) last
            put(key)
        for key in writes:
            put(key)
    return ssd_reads, ssd_writes


__all__ = ["L2Counts", "L2Curve", "reference_l2"]
