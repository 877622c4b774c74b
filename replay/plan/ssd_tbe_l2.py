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
is exactly its distance at the batch's start (the order is read from the stack's own
per-row last positions, which a compaction renumbers keeping their order). The rest is
Mattson's stack property (Mattson et al., IBM Systems Journal 9(2), 1970;
`replay.analysis.stack`): an access hits an L2 of C rows iff its distance is < C, so one
exact pass gives, at every C:

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
The reads' distances are counted per size, not kept, and every access's come from the
stack's own histogram: memory is the pass's per-row state (`StackDistances`: 4-8 bytes
per row of the row space, or a map of the rows seen, plus its histogram) and one counter
per size. One kernel call feeds a range of batches (`_batches_kernel`: a batch's reads
ordered, then fed with its writes by the stack's kernel), so a run of millions of small
batches costs no Python per batch.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from replay._jit import kernel
from replay.analysis.stack import (  # the stack kernel's state, fed a range at a time
    _DONE,
    _FIB,
    _S_SHIFT,
    DEFAULT_MIN_WINDOW,
    StackDistances,
    _stack_kernel,
)
from replay.errors import TraceError
from replay.policies.ssd_tbe import CONFLICTS, EVICTS, READS  # an exchange's bounds' columns

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


# counters of a pass: cold reads, reads, writes, accesses in the scratch of the batch
# stopped in (kept across a resume)
_C_COLD, _C_READS, _C_WRITES, _C_HELD = 0, 1, 2, 3


@kernel
def _batches_kernel(
    bounds: np.ndarray,
    reads: np.ndarray,
    evictions: np.ndarray,
    conflicts: np.ndarray,
    b: int,
    stop: int,
    resume: int,
    buf: np.ndarray,
    dist: np.ndarray,
    total_keys: int,
    last: np.ndarray,
    map_keys: np.ndarray,
    map_ids: np.ndarray,
    bits: np.ndarray,
    tree: np.ndarray,
    pos2id: np.ndarray,
    hist: np.ndarray,
    sc: np.ndarray,
    sizes: np.ndarray,
    read_buckets: np.ndarray,
    counters: np.ndarray,
) -> tuple[int, int, int]:
    """Batches [b, stop) of an exchange into the stack state: per batch the reads in
    order of their last use (most recent first, never seen last: the stable sort keeps
    read order among those), then the evictions and the conflict write-backs; each read's
    distance counted in `read_buckets` (bucket j: j sizes <= d). Stops where the state
    must grow and returns (batch, offset in its accesses, code) to resume at (`resume`
    >= 0: the batch's accesses are in `buf` already); (stop, 0, done) at the end."""
    direct = len(map_keys) == 0
    mask = len(map_keys) - 1
    shift = np.uint64(sc[_S_SHIFT])
    while b < stop:
        r0, r1 = bounds[b, READS], bounds[b + 1, READS]
        nr = r1 - r0
        if resume < 0:
            pos = np.empty(nr, dtype=np.int64)
            for j in range(nr):
                key = reads[r0 + j]
                if direct:
                    pos[j] = -np.int64(last[key]) if 0 <= key < total_keys else 0
                else:
                    pos[j] = 1
                    slot = np.int64((np.uint64(key) * _FIB) >> shift)
                    while map_keys[slot] >= 0:
                        if map_keys[slot] == key:
                            pos[j] = -np.int64(last[map_ids[slot]])
                            break
                        slot = (slot + 1) & mask
            order = np.argsort(pos, kind="mergesort")  # -last: most recent first, -(-1) last
            n = 0
            for j in range(nr):
                buf[n] = reads[r0 + order[j]]
                n += 1
            for i in range(bounds[b, EVICTS], bounds[b + 1, EVICTS]):
                buf[n] = evictions[i]
                n += 1
            for i in range(bounds[b, CONFLICTS], bounds[b + 1, CONFLICTS]):
                buf[n] = conflicts[i]
                n += 1
            counters[_C_HELD] = n
            resume = 0
        n = counters[_C_HELD]
        if n > 0:
            i, code = _stack_kernel(
                buf[:n], resume, total_keys, last, map_keys, map_ids, bits, tree, pos2id,
                hist, sc, dist[:n],
            )  # fmt: skip
            if code != _DONE:
                return b, i, code
        for j in range(nr):
            d = dist[j]
            if d < 0:
                counters[_C_COLD] += 1
            else:
                read_buckets[np.searchsorted(sizes, d, side="right")] += 1
        counters[_C_READS] += nr
        counters[_C_WRITES] += n - nr
        resume = -1
        b += 1
    return stop, 0, _DONE


class L2Curve:
    """Feed each batch's reads, then its writes; `counts()` answers every size at once.

    `sizes` are L2 capacities in rows (ascending; 0 allowed: no L2); `total_keys` bounds
    the flat keys (`replay.trace.keys`). The reads of a batch are looked up before any of
    them is put (FBGEMM's `get`: every row's `find`, then the puts), so a read hits iff
    its row is in L2 at the batch's start: its distance counts the rows accessed since its
    last access up to the batch, not the batch's other reads. Fed most recently used first
    (never seen last), each read's distance in the stream is exactly that: every read fed
    before it was used more recently, so was counted already. One kernel call per range
    of batches (`feed_exchange`)."""

    def __init__(
        self,
        total_keys: int,
        sizes: Iterable[int],
        *,
        direct: bool | None = None,
        min_window: int = DEFAULT_MIN_WINDOW,
    ) -> None:
        self.sizes = np.unique(np.asarray(list(sizes), dtype=np.int64))
        if len(self.sizes) == 0 or self.sizes[0] < 0:
            raise ValueError("L2 sizes must be non-negative and at least one")
        if direct is None:  # a direct array of 4-8 bytes per key, or a map of those seen
            direct = int(total_keys) <= DIRECT_MAX_KEYS
        self._no_l2 = len(self.sizes) == 1 and self.sizes[0] == 0
        # no L2: no stack (a map's 1,024 slots)
        self._state = StackDistances(
            int(total_keys), direct=direct and not self._no_l2, min_window=min_window
        )
        # reads by bucket: bucket j holds distances d with j = #{sizes <= d}
        self._read_buckets = np.zeros(len(self.sizes) + 1, dtype=np.int64)
        self._counters = np.zeros(4, dtype=np.int64)
        self._buf = np.empty(0, dtype=np.int64)
        self._dist = np.empty(0, dtype=np.int64)

    @property
    def reads(self) -> int:
        return int(self._counters[_C_READS])

    @property
    def writes(self) -> int:
        return int(self._counters[_C_WRITES])

    def feed(self, reads: np.ndarray, writes: np.ndarray) -> None:
        """One batch: the rows L1 reads from L2 (distinct), then those it writes to L2."""
        reads = np.ascontiguousarray(reads, dtype=np.int64)
        writes = np.ascontiguousarray(writes, dtype=np.int64)
        bounds = np.array([[0, 0, 0], [len(reads), len(writes), 0]], dtype=np.int64)
        self.feed_batches(bounds, reads, writes, np.empty(0, dtype=np.int64))

    def feed_batches(
        self,
        bounds: np.ndarray,
        reads: np.ndarray,
        evictions: np.ndarray,
        conflicts: np.ndarray,
        lo: int = 0,
        hi: int | None = None,
    ) -> None:
        """Batches [lo, hi) of an exchange (`L1Exchange`'s bounds and streams)."""
        hi = len(bounds) - 1 if hi is None else hi
        if hi <= lo:
            return
        if self._no_l2:  # no L2 to model: the reads and writes go to the SSD as they are
            n = (bounds[hi] - bounds[lo]).astype(np.int64)
            self._counters[_C_READS] += n[READS]
            self._counters[_C_WRITES] += n[EVICTS] + n[CONFLICTS]
            return
        widest = int(np.diff(bounds[lo : hi + 1], axis=0).sum(axis=1).max())
        if widest > len(self._buf):
            self._buf = np.empty(widest, dtype=np.int64)
            self._dist = np.empty(widest, dtype=np.int64)
        st = self._state
        b, at = lo, -1
        while True:
            b, at, code = _batches_kernel(
                bounds, reads, evictions, conflicts, b, hi, at, self._buf, self._dist,
                st.total_keys, st.last, st.map_keys, st.map_ids, st.bits, st.tree,
                st.pos2id, st.hist, st.sc, self.sizes, self._read_buckets, self._counters,
            )  # fmt: skip
            if code == _DONE:
                return
            if not st.make_room(code):
                raise TraceError(f"an L2 access outside the row space [0, {st.total_keys})")

    def counts(self) -> L2Counts:
        # misses(C_i) = cold + #{d >= C_i}: the reads' from their buckets (j > i), every
        # access's from the stack's own histogram
        above_reads = np.cumsum(self._read_buckets[::-1])[::-1][1:]
        distinct = self._state.distinct
        ssd_reads = self._counters[_C_COLD] + above_reads
        inserts = self._state.misses_at(self.sizes)
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
