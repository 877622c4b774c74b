"""`lru`: a row cache in the fast tier that evicts the least recently used row.

Every missed lookup fetches its row into the cache (demand fill); when the cache is full
the least recently used row is evicted first, and written back if dirty. The cache is a
doubly linked list over `capacity` slots (a circle through a sentinel slot) plus a
key -> slot hash table, so a request costs O(1) with one random access into the table.

Why a hash table and not a map indexed by key: a map of 4 B per possible row is 751 MB
at criteo-terabyte's 188 M rows, touched at random on every lookup, and on a VM whose
fresh memory is slow to fault in that alone cost 1.7 s of system time per run; a table
sized to the cache (8 B per entry, 4-8 entries per slot: 32 MB for a 1 M-row cache)
stays mostly in the last-level cache.

The table: open addressing with linear probing, a power-of-two number of entries >= 4 x
the slots that can ever be used (min(capacity, rows)), so at most a quarter full (half
full measured 1.5 ns per lookup slower on criteo-terabyte); Fibonacci
hashing (multiply by 2^64 / phi, keep the top bits) spreads the consecutive row ids of a
table; deletion shifts the following entries back (no tombstones), so a lookup never
probes further than the cluster its key's home starts. An entry packs (key + 1) above
the slot's bits (0 = empty): one 8-byte word per entry, so a probe usually reads one
cache line. Rows x slots beyond 2^63 (key bits + slot bits > 63) are refused.

A slot's key carries its dirty flag: k when clean, -1 - k (negative) when dirty, so a
hit marks its row dirty by a store to the slot's key (no load, no separate array of
flags), and the keys are 4 bytes wherever the rows allow (fewer than 2^31 - 1). Measured
(one thread's CPU, 9 passes alternating in one process, medians) against a byte array of
flags and 8-byte keys: 12.97 against 13.18 ns a lookup on criteo-terabyte at 1 M slots,
10.30 against 10.82 on criteo-kaggle at 150,000. A smaller table (1/3 or 1/2 full, so that
the state fits this VM's 32 MiB L3) measured 0.6-1.5 ns slower: docs/performance.md.

Where a batch's update rows are its distinct lookups and the cache holds them all (`replay
run` on a trace folder), `lru_order_kernel` takes each batch's distinct rows in the order
of their first lookups and of their last ones (`replay.trace.stream.DistinctOrder`, made
on the reader's thread beside this one) instead of its lookups. criteo-terabyte's
batches look each row up 3.7 times: the kernel took 8.9 ns a lookup against 14.3 for
`lru_kernel` (criteo-kaggle 5.7 against 8.8), and the order's two passes 3.5 ns (3.0)
on the other core (one thread's CPU, medians of 5 passes). Its docstring says why it
is exact.

A hit on the most recent slot moves nothing (the list is already in order): 14% of
criteo-terabyte's lookups repeat the lookup before (55% of those in its 8 tables of at
most 155 rows), and the unlink and relink they skip measured 5.6-10.5% of the kernel's
time (docs/performance.md).

Per-key state: none. Per slot: 12 bytes where the rows allow 4-byte keys (key 4, links
4 + 4), else 16 + 32-64 bytes of table.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from replay._intrinsics import PREFETCH_AHEAD, ix, prefetch
from replay._jit import kernel
from replay._malloc import populate, state_array
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
    index_dtype,
    register_policy,
)
from replay.system.spec import PolicySpec
from replay.trace.stream import BatchRange, updates_as_keys

# meta slots
_SIZE, _CAP, _SLOT_BITS, _HASH_SHIFT = 0, 1, 2, 3
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # 2^64 / phi


def table_shape(total_keys: int, capacity: int) -> tuple[int, int, int]:
    """(entries, slot bits, hash shift) of the key -> slot table for a cache of
    `capacity` slots over `total_keys` keys. ConfigError where an entry cannot pack."""
    used = max(1, min(int(capacity), int(total_keys)))
    entries = 1 << max(4, (4 * used - 1).bit_length())
    slot_bits = max(1, (max(1, int(capacity)) - 1).bit_length())
    key_bits = int(total_keys).bit_length()  # key + 1 <= total_keys
    if key_bits + slot_bits > 63:
        raise ConfigError(
            f"policy: {total_keys:,} rows x {capacity:,} cache slots do not fit the LRU's "
            f"64-bit table entries ({key_bits} + {slot_bits} bits > 63)"
        )
    return entries, slot_bits, 64 - (entries.bit_length() - 1)


@kernel(inline="always")
def _home(k: int, shift: int) -> np.int64:
    return np.int64((np.uint64(k) * _GOLDEN) >> np.uint64(shift))


@kernel(inline="always")
def _find(table: np.ndarray, k: int, slot_bits: int, shift: int) -> int:
    """The slot of key k; where k is not in the table, -1 - the empty entry its probe
    stopped at (where an insert of k goes)."""
    mask = len(table) - 1
    want = k + 1
    i = _home(k, shift)
    while True:
        e = table[ix(i)]
        if (e >> slot_bits) == want:
            return e & ((1 << slot_bits) - 1)
        if e == 0:
            return -1 - i
        i = (i + 1) & mask


@kernel(inline="always")
def _remove(table: np.ndarray, k: int, slot_bits: int, shift: int) -> None:
    """Drop key k (in the table); the entries after it move back into the gap where
    their probe would otherwise pass it (backward-shift deletion)."""
    mask = len(table) - 1
    want = k + 1
    i = _home(k, shift)
    while (table[ix(i)] >> slot_bits) != want:
        i = (i + 1) & mask
    j = i
    while True:
        j = (j + 1) & mask
        e = table[ix(j)]
        if e == 0:
            break
        h = _home((e >> slot_bits) - 1, shift)
        # e stays where it is when its home lies cyclically in (i, j]
        if (i <= j and (h <= i or h > j)) or (i > j and h <= i and h > j):
            table[ix(i)] = e
            i = j
    table[ix(i)] = 0


@kernel(inline="always")
def _key_of(x: int) -> np.int64:
    """The key a slot's entry holds (k clean, -1 - k dirty)."""
    v = np.int64(x)
    return v ^ (v >> 63)


@kernel(inline="always")
def _unlink(links: np.ndarray, s: int) -> None:
    """Take slot s out of the list (its neighbours point past it)."""
    p = links[ix(2 * s)]
    n = links[ix(2 * s + 1)]
    links[ix(2 * p + 1)] = n
    links[ix(2 * n)] = p


@kernel(inline="always")
def _to_front(links: np.ndarray, cap: int, s: int) -> None:
    """Put slot s (out of the list) at its front, after the sentinel `cap`."""
    first = links[ix(2 * cap + 1)]
    links[ix(2 * s)] = cap
    links[ix(2 * s + 1)] = first
    links[ix(2 * first)] = s
    links[ix(2 * cap + 1)] = s


@kernel(inline="always")
def _evict(
    table: np.ndarray, slot_key: np.ndarray, links: np.ndarray, cap: int, slot_bits: int,
    shift: int, k: int, at: int,
) -> tuple[int, bool]:  # fmt: skip
    """Give key k (not in the table; its probe stopped at entry `at`) the least recent
    slot, out of the list. Returns (the slot, whether the row it held was dirty). The new
    key goes where its probe stopped before the evicted key leaves: a removal could open a
    gap before that entry, an insert after it cannot."""
    s = links[ix(2 * cap)]
    table[ix(at)] = ((k + 1) << slot_bits) | s
    old = slot_key[ix(s)]
    _remove(table, _key_of(old), slot_bits, shift)
    p = links[ix(2 * s)]
    links[ix(2 * p + 1)] = cap
    links[ix(2 * cap)] = p
    # the next eviction removes the new last slot's key: load it now
    prefetch(table, _home(_key_of(slot_key[ix(p)]), shift))
    return s, old < 0


@kernel(inline="always")
def _fill(
    table: np.ndarray, slot_key: np.ndarray, links: np.ndarray, cap: int, slot_bits: int,
    shift: int, size: int, k: int, at: int,
) -> tuple[int, int, bool]:  # fmt: skip
    """A slot for key k (not in the table; its probe stopped at entry `at`): a free one
    while the cache has fewer than `cap` rows, else the least recent slot, out of the list
    (`_evict`). Returns (the slot, the cache's size after, whether the row it held was
    dirty)."""
    if size < cap:
        table[ix(at)] = ((k + 1) << slot_bits) | size
        return size, size + 1, False
    s, dirty = _evict(table, slot_key, links, cap, slot_bits, shift, k, at)
    return s, size, dirty


@kernel(inline="always")
def _batch_row(
    out: np.ndarray, b: int, lookups: int, misses: int, filled: int, writebacks: int,
    fast: int, backing: int, size: int,
) -> None:  # fmt: skip
    """Batch b's counters, from its lookups, misses (each a fill), fills of free slots,
    writebacks, update rows found cached and not, and the cache's size at its end."""
    out[b, HITS] = lookups - misses
    out[b, MISSES] = misses
    out[b, BYPASS] = 0
    out[b, FILLS] = misses
    out[b, EVICTIONS] = misses - filled
    out[b, WRITEBACKS] = writebacks
    out[b, UPDATES_FAST] = fast
    out[b, UPDATES_BACKING] = backing
    out[b, RESIDENT] = size
    out[b, RESIDENT_MAX] = size  # size only grows within a batch
    out[b, NEEDED_ROWS] = misses


@kernel
def lru_kernel(
    keys: np.ndarray,
    bounds: np.ndarray,
    ukeys: np.ndarray,
    ubounds: np.ndarray,
    table: np.ndarray,
    slot_key: np.ndarray,
    links: np.ndarray,
    meta: np.ndarray,
    out: np.ndarray,
    derived: bool,
) -> None:
    # `derived`: each batch's update rows are its distinct lookups and the cache holds
    # every lookup of a batch (the caller checks), so a row looked up stays until the
    # batch ends and its update lands in the cache: the row turns dirty as it is looked
    # up, and the update keys are not searched for (their count is the batch's
    # update_bounds). Exactly the counters of the update pass below, without its second
    # hash search per distinct row (12.9 -> 11.5 ns per lookup on criteo-kaggle).
    # links[2 s] is slot s's previous (more recent) slot, links[2 s + 1] its next; slot
    # `cap` is a sentinel that closes the circle (its next: the most recent slot, its
    # previous: the least recent), so no move to the front tests for an end. Hits and
    # evictions follow from the lookups, misses and the fills of free slots: fewer live
    # values in the loop, which numba otherwise keeps on the stack.
    size = meta[_SIZE]
    cap = meta[_CAP]
    slot_bits = meta[_SLOT_BITS]
    shift = meta[_HASH_SHIFT]
    last = len(keys) - 1
    ulast = len(ukeys) - 1
    for b in range(len(bounds) - 1):
        misses = 0
        writebacks = 0
        size_before = size
        for i in range(bounds[b], bounds[b + 1]):
            # the last key stands in for those past the end: a prefetch, not a test
            prefetch(table, _home(keys[ix(min(i + PREFETCH_AHEAD, last))], shift))
            k = np.int64(keys[ix(i)])
            s = _find(table, k, slot_bits, shift)
            if s >= 0:  # unlink; the move to the front is below
                if derived:
                    slot_key[ix(s)] = -1 - k
                if s == links[ix(2 * cap + 1)]:
                    # the most recent slot already: the row looked up just before
                    # (14% of criteo-terabyte's lookups repeat the one before)
                    continue
                _unlink(links, s)
            else:
                misses += 1
                s, size, dirty = _fill(
                    table, slot_key, links, cap, slot_bits, shift, size, k, -1 - s
                )
                writebacks += dirty
                slot_key[ix(s)] = -1 - k if derived else k
            _to_front(links, cap, s)
        upd_fast = 0
        for j in range(ubounds[b], ubounds[b] if derived else ubounds[b + 1]):
            prefetch(table, _home(ukeys[ix(min(j + PREFETCH_AHEAD, ulast))], shift))
            u = np.int64(ukeys[ix(j)])
            s = _find(table, u, slot_bits, shift)
            if s >= 0:
                slot_key[ix(s)] = -1 - u
                upd_fast += 1
        if derived:
            upd_fast = ubounds[b + 1] - ubounds[b]
        _batch_row(
            out, b, bounds[b + 1] - bounds[b], misses, size - size_before, writebacks,
            upd_fast, (ubounds[b + 1] - ubounds[b]) - upd_fast, size,
        )  # fmt: skip
    meta[_SIZE] = size


@kernel
def lru_order_kernel(
    first: np.ndarray,
    last: np.ndarray,
    obounds: np.ndarray,
    bounds: np.ndarray,
    ubounds: np.ndarray,
    table: np.ndarray,
    slot_key: np.ndarray,
    links: np.ndarray,
    meta: np.ndarray,
    out: np.ndarray,
) -> None:
    """`lru_kernel` with `derived`, on each batch's distinct lookups in order
    (`replay.trace.stream.DistinctOrder`: `first`, `last`, `obounds`) instead of its
    lookups (`bounds` count them, `ubounds` its update rows): the same counters and the
    same state.

    Why it is exact. While a batch runs, the list is its rows looked up so far (front)
    before the rest, and no row of the front is evicted: it holds fewer rows than the
    batch's distinct ones, which the cache holds (the caller checks). So the hits,
    misses and evictions follow from the first lookups alone, in their order: a later
    lookup of a row finds it cached and only moves it within the front. The front then
    leaves the batch in the order of last lookups. The kernel takes the rows out of the
    list in the order of first lookups (a hit unlinks its slot, a miss fills one,
    evicting from the rest), and then puts them in front in the order of last lookups.
    Every row a batch looks up turns dirty, as in `lru_kernel` with `derived`."""
    size = meta[_SIZE]
    cap = meta[_CAP]
    slot_bits = meta[_SLOT_BITS]
    shift = meta[_HASH_SHIFT]
    end = len(first) - 1
    for b in range(len(obounds) - 1):
        misses = 0
        writebacks = 0
        size_before = size
        for i in range(obounds[b], obounds[b + 1]):
            prefetch(table, _home(first[ix(min(i + PREFETCH_AHEAD, end))], shift))
            k = np.int64(first[ix(i)])
            s = _find(table, k, slot_bits, shift)
            if s >= 0:
                _unlink(links, s)
            else:
                misses += 1
                # an eviction takes one of the rows the batch has not used
                s, size, dirty = _fill(
                    table, slot_key, links, cap, slot_bits, shift, size, k, -1 - s
                )
                writebacks += dirty
            slot_key[ix(s)] = -1 - k
        # `last` holds the last row looked up first: it goes to the front last. Its
        # slots were found just above, so the search hits lines in cache.
        for i in range(obounds[b + 1] - 1, obounds[b] - 1, -1):
            _to_front(links, cap, _find(table, np.int64(last[ix(i)]), slot_bits, shift))
        _batch_row(
            out, b, bounds[b + 1] - bounds[b], misses, size - size_before, writebacks,
            ubounds[b + 1] - ubounds[b], 0, size,
        )  # fmt: skip
    meta[_SIZE] = size


@kernel
def _dirty_front(links: np.ndarray, slot_key: np.ndarray, cap: int, n: int) -> None:
    """Mark the n most recent slots dirty (walking the list from the sentinel)."""
    s = links[ix(2 * cap + 1)]
    for _ in range(n):
        slot_key[ix(s)] = -1 - _key_of(slot_key[ix(s)])
        s = links[ix(2 * s + 1)]


# the counters a piece of a batch adds to the batch's row; the others are set at its end
_PIECE_SUMS = np.array([HITS, MISSES, BYPASS, FILLS, EVICTIONS, WRITEBACKS, NEEDED_ROWS])


@register_policy("lru")
class LRUPolicy(Policy):
    sized_to_rows = True
    state_bytes_per_key = 0
    demand_fill = True
    updates_from_lookups = True
    takes_pieces = True
    takes_order = True

    def __init__(self, spec: PolicySpec, ctx: PolicyContext) -> None:
        super().__init__(spec, ctx)
        # no more slots than rows: a larger cache never evicts, and nor does this one
        cap = ctx.slots
        entries, slot_bits, shift = table_shape(ctx.total_keys, cap)
        self.table = state_array(entries, np.int64)
        # A slot's key (and dirty flag) and links are written when the slot is first filled
        # and read only for filled slots: pages of slots never used are never touched (zeros
        # from calloc or a fresh mapping), unless `replay run` faulted them in before its
        # imports, where the trace fills the cache (`replay.cli._reserve`); the sentinel's
        # links start as an empty circle. 4 KiB pages: the links in huge pages measured no
        # faster, and fault in 5x slower right after another process freed its memory.
        self.slot_key = state_array(cap, index_dtype(ctx.total_keys), huge=False)
        self.links = state_array(2 * cap + 2, index_dtype(cap), huge=False)
        self.links[2 * cap :] = cap
        self.meta = np.array([0, cap, slot_bits, shift], dtype=np.int64)
        self._distinct = 0  # the distinct rows of the batch's pieces so far (`_piece`)

    def warm_up(self, empty: BatchRange) -> None:
        # an empty range with an order (`empty_range(ordered=True)`) loads the kernel that
        # ranges with their order take
        self.process(empty, np.zeros((0, NUM_COUNTERS), dtype=np.int64))

    def prefault(self) -> None:
        # the table's pages, off the caller's thread and beside its first ranges: right
        # after a process that freed memory (this VM) 32 MB took 0.12-0.2 s, which the
        # caller spent waiting when this was part of the warm-up
        populate(self.table)

    def process(self, batch_range: BatchRange, out: np.ndarray) -> None:
        if batch_range.tables is not None:
            self._piece(batch_range, out)
            return
        br = updates_as_keys(batch_range, self.ctx.capacity_units)
        order = br.order
        if order is not None and br.updates_are_lookups:  # each batch's rows all stay
            lru_order_kernel(
                order.first, order.last, order.bounds, br.bounds, br.update_bounds,
                self.table, self.slot_key, self.links, self.meta, out,
            )  # fmt: skip
            return
        lru_kernel(
            br.keys,
            br.bounds,
            br.update_keys,
            br.update_bounds,
            self.table,
            self.slot_key,
            self.links,
            self.meta,
            out,
            br.updates_are_lookups,
        )

    def _piece(self, br: BatchRange, out: np.ndarray) -> None:
        """A piece of one batch whose update rows are its distinct lookups: its lookups
        now (the kernel's lookup pass, no update rows), the update pass at the batch's
        last piece. Exact, as the whole batch: a lookup moves its row to the front, so
        when the batch ends the rows it looked up that are still cached are the
        min(resident, distinct) most recent slots (while one of them is evicted, every
        older row went first, and the cache then holds only this batch's rows), which
        the update pass of the whole batch finds and marks dirty."""
        if not br.updates_are_lookups:
            raise ConfigError(
                "policy lru: a batch streamed in pieces needs its update rows to be its "
                "distinct lookups (a step every batch, no frozen table)"
            )
        part = np.zeros((1, NUM_COUNTERS), dtype=np.int64)
        no_updates = np.zeros(2, dtype=np.int64)
        lru_kernel(
            br.keys, br.bounds, br.keys[:0], no_updates, self.table, self.slot_key,
            self.links, self.meta, part, False,
        )  # fmt: skip
        row = out[0]
        row[_PIECE_SUMS] += part[0, _PIECE_SUMS]
        row[RESIDENT] = row[RESIDENT_MAX] = part[0, RESIDENT]
        self._distinct += int(br.update_bounds[-1])
        if br.ends_batch:
            size = int(self.meta[_SIZE])
            fast = min(size, self._distinct)
            _dirty_front(self.links, self.slot_key, int(self.meta[_CAP]), fast)
            row[UPDATES_FAST] = fast
            row[UPDATES_BACKING] = self._distinct - fast
            self._distinct = 0


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
