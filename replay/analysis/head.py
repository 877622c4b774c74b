"""Exact LRU stack distances below a bound: the small-cache part of a sampled curve.

Why. SHARDS (`replay.analysis.shards`) estimates a request's stack distance d by d_s / R,
d_s its distance among the sampled keys, which is about Binomial(d, R): a relative blur
of sqrt((1 - R) / (d R)). Embedding traces have a near-vertical cliff in the miss-ratio
curve at about the number of distinct rows per batch (a row used in one batch is often
used in the next), and in a trace every batch shares the same sampled rows, so the blur
does not average out: the whole cliff moves by one random amount. At R = 0.01 that put
the sampled curve 4-17 points off at the cliff on generated Criteo-like traces. Small
distances are cheap to get exactly, though: they only need the most recent distinct keys.

What. An LRU stack truncated at `capacity` = C_x keys: the C_x most recently used
distinct keys, each with the position of its last access. A request whose key is in it
has distance d < C_x, counted exactly as in `replay.analysis.stack` (the number of live
marks between its last position and now, popcounts and a Fenwick tree over bit words);
a request whose key is not in it is *far*: a first access or d >= C_x, a miss for every
cache of at most C_x rows. After each request the key C_x + 1 deep, if any, is dropped
(the oldest live mark). So for every C <= C_x

    misses(C) = far + #{requests with d in [C, C_x)},

exactly, with memory for C_x keys only: an open-addressing map key -> position (linear
probing, backward-shift deletion; each slot's key and position side by side, one cache
line a probe) at load <= 1/2, the position window (2 C_x slots,
renumbered when full, at most once every C_x requests) and a histogram of C_x counts.

Excerpts. Fed from the start of a stream the counts are exact. Fed a block of
consecutive requests from the middle of a stream (`start_block(warm=True)`), a request
whose key is not yet in the stack may have an earlier use before the block, so requests
are only counted once the stack holds C_x distinct keys: from then on "not in the stack"
means d >= C_x. Each block's counts are kept apart, so their spread gives a standard
error (blocks spread over the stream are the random groups of Wolter, "Introduction to
Variance Estimation", ch. 2; see `replay.analysis.shards`).

`reference_head` is the slow, obviously correct version the tests compare with.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from replay._intrinsics import PREFETCH_AHEAD, prefetch
from replay._jit import kernel
from replay.analysis.stack import (
    _FIB,
    _dense_marks,
    _marks_between,
    _materialize,
    _remove_mark,
    _trailing_zeros,
    reference_stack_distances,
)
from replay.errors import TraceError
from replay.trace.keys import table_of

_ONE = np.uint64(1)

# int64 scalar state, `sc`
_H_POS = 0  # next position in the window
_H_LIVE = 1  # keys in the stack (<= capacity)
_H_OLDEST = 2  # no live mark below this position
_H_FAR = 3  # counted requests whose key was not in the stack
_H_COUNTED = 4  # counted requests
_H_REQ = 5  # requests fed (counted or not)
_H_WARMING = 6  # 1 while requests are not counted (an excerpt's warm-up)
_H_SHIFT = 7  # 64 - log2(map slots)
_H_WIDTH = 8

# positions past the oldest live mark whose key's map slot a drop prefetches
_VICTIM_AHEAD = 16

_DONE = 0
_WINDOW_FULL = 1
_BAD_KEY = 2


@kernel
def _map_delete(table: np.ndarray, slot: int, shift: np.uint64) -> None:
    """Remove the entry at `slot` by backward shift (linear probing stays tombstone-free).
    `table`: slot s's key at 2 s (-1: empty), its position at 2 s + 1."""
    mask = (len(table) >> 1) - 1
    i = slot
    j = slot
    while True:
        j = (j + 1) & mask
        k = table[2 * j]
        if k < 0:
            break
        home = np.int64((np.uint64(k) * _FIB) >> shift)
        # the entry at j may move to i unless its home lies cyclically in (i, j]
        if i <= j:
            if i < home <= j:
                continue
        elif home > i or home <= j:
            continue
        table[2 * i] = k
        table[2 * i + 1] = table[2 * j + 1]
        i = j
    table[2 * i] = -1


@kernel
def _map_find(table: np.ndarray, key: np.int64, shift: np.uint64) -> np.int64:
    """Slot of `key`, or of the empty slot where it would go."""
    mask = (len(table) >> 1) - 1
    slot = np.int64((np.uint64(key) * _FIB) >> shift)
    while True:
        k = table[2 * slot]
        if k == key or k < 0:
            return slot
        slot = (slot + 1) & mask


@kernel
def _head_kernel(
    keys: np.ndarray,
    start: int,
    total_keys: int,
    capacity: int,
    table: np.ndarray,
    bits: np.ndarray,
    tree: np.ndarray,
    pos2key: np.ndarray,
    hist: np.ndarray,
    sc: np.ndarray,
) -> tuple[int, int]:
    """Feed keys[start:] until done or the window is full; (next index, stop code).

    The counting tree is `replay.analysis.stack`'s: one bit per position, a Fenwick tree
    over the words' popcounts whose node j (word j - 1) is written when that word is
    complete, and range counts that walk both prefix paths only until they meet, so a
    request costs O(log of its distance in words), not O(log of the window)."""
    window = len(pos2key)
    p = sc[_H_POS]
    live = sc[_H_LIVE]
    oldest = sc[_H_OLDEST]
    far = sc[_H_FAR]
    counted = sc[_H_COUNTED]
    warming = sc[_H_WARMING]
    shift = np.uint64(sc[_H_SHIFT])
    n = len(keys)
    i = start
    code = _DONE
    while i < n:
        if p >= window:
            code = _WINDOW_FULL
            break
        key = keys[i]
        if np.uint64(key) >= np.uint64(total_keys):
            code = _BAD_KEY
            break
        if warming and live >= capacity:
            warming = 0
        if i + PREFETCH_AHEAD < n:
            # the map outgrows the caches at large C_x: start the loads of a later
            # request's slot now (each request's own work is a chain of dependent loads)
            ahead = np.int64((np.uint64(keys[i + PREFETCH_AHEAD]) * _FIB) >> shift)
            prefetch(table, 2 * ahead)
        slot = _map_find(table, key, shift)
        wp = p >> 6
        if table[2 * slot] != key:
            if not warming:
                far += 1
                counted += 1
            table[2 * slot] = key
            live += 1
        else:
            q = np.int64(table[2 * slot + 1])
            if not warming:  # a warm-up's distances count nowhere (~half a block's requests)
                hist[_marks_between(bits, tree, q, p)] += 1
                counted += 1
            _remove_mark(bits, tree, q, wp)
        table[2 * slot + 1] = p
        bits[wp] |= _ONE << np.uint64(p & 63)
        pos2key[p] = key
        if live > capacity:  # drop the key capacity + 1 deep: the oldest live mark
            w = oldest >> 6
            word = bits[w] & ~((_ONE << np.uint64(oldest & 63)) - _ONE)
            while word == 0:
                w += 1
                word = bits[w]
            o = (w << 6) + np.int64(_trailing_zeros(word))
            _remove_mark(bits, tree, o, wp)
            _map_delete(table, _map_find(table, pos2key[o], shift), shift)
            live -= 1
            oldest = o + 1
            if oldest + _VICTIM_AHEAD < p:
                # the next drops take the oldest live marks, whose map slots nothing else
                # brings into cache: start loading the slot of a key a few positions on
                # (a hint: that position may have been hit since); with the slots' keys
                # and positions side by side, meta-2021's 2^20-key total head took 79 ->
                # 62 ns a lookup (its 16 blocks, 2-core VM at load 4)
                ahead = np.int64((np.uint64(pos2key[oldest + _VICTIM_AHEAD]) * _FIB) >> shift)
                prefetch(table, 2 * ahead)
        p += 1
        if p & 63 == 0:  # word wp is complete
            _materialize(bits, tree, wp)
        i += 1
    sc[_H_REQ] += i - start
    sc[_H_POS] = p
    sc[_H_LIVE] = live
    sc[_H_OLDEST] = oldest
    sc[_H_FAR] = far
    sc[_H_COUNTED] = counted
    sc[_H_WARMING] = warming
    return i, code


@kernel
def _head_compact(
    table: np.ndarray,
    bits: np.ndarray,
    tree: np.ndarray,
    pos2key: np.ndarray,
    end: int,
    shift: np.uint64,
) -> int:
    """Renumber the live marks 0..n-1 in order (map values too), rebuild bits and tree."""
    n = 0
    for w in range((end + 63) >> 6):
        word = bits[w]
        while word:
            q = (w << 6) + np.int64(_trailing_zeros(word))
            key = pos2key[q]
            pos2key[n] = key  # n <= q: nothing unread is overwritten
            table[2 * _map_find(table, key, shift) + 1] = n
            n += 1
            word &= word - _ONE
    _dense_marks(bits, tree, n)
    return n


def _layout(capacity: int) -> tuple[int, int]:
    """(map slots, window positions) of a head of `capacity` keys: the map at load <= 1/2;
    at least 2^16 positions, since small stacks would otherwise compact (and return to
    Python) every few dozen requests. `head_bytes` counts from the same figures."""
    slots = 1 << max(4, int(2 * capacity + 1).bit_length())
    window = -(-max(2 * capacity + 2, 1 << 16) // 64) * 64
    return slots, window


class ExactHead:
    """Exact LRU stack distances below `capacity` keys, over a stream or its excerpts."""

    def __init__(self, total_keys: int, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self.total_keys = int(total_keys)
        self.capacity = int(capacity)
        slots, window = _layout(self.capacity)
        self.table = np.zeros(2 * slots, dtype=np.int64)  # key, position per slot
        self.table[::2] = -1
        self.bits = np.zeros(window // 64, dtype=np.uint64)
        self.tree = np.zeros(window // 64 + 1, dtype=np.int64)
        self.pos2key = np.zeros(window, dtype=np.int64)
        self.sc = np.zeros(_H_WIDTH, dtype=np.int64)
        self.sc[_H_SHIFT] = 64 - int(np.log2(slots))
        self.blocks: list[np.ndarray] = []  # per finished block: hist + [far, counted]
        self._hist = np.zeros(self.capacity, dtype=np.int64)
        self._open = False

    def start_block(self, *, warm: bool) -> None:
        """Begin a block of consecutive requests with an empty stack. `warm`: the block
        does not start the stream, so requests count only once the stack is full."""
        self.end_block()
        self.table[::2] = -1
        self.bits.fill(0)
        self.tree.fill(0)
        shift = self.sc[_H_SHIFT]
        req = self.sc[_H_REQ]
        self.sc[:] = 0
        self.sc[_H_SHIFT] = shift
        self.sc[_H_REQ] = req
        self.sc[_H_WARMING] = 1 if warm else 0
        self._hist = np.zeros(self.capacity, dtype=np.int64)
        self._open = True

    def end_block(self) -> None:
        if self._open:
            self.blocks.append(np.concatenate([self._hist, [self.sc[_H_FAR], self.sc[_H_COUNTED]]]))
            self._open = False

    def feed(self, keys: np.ndarray) -> None:
        """Fold in keys (int64, stream order); a block from the stream's start if none
        is open."""
        if not self._open:
            self.start_block(warm=False)
        keys = np.ascontiguousarray(keys, dtype=np.int64)
        i = 0
        while True:
            i, code = _head_kernel(
                keys, i, self.total_keys, self.capacity, self.table,
                self.bits, self.tree, self.pos2key, self._hist, self.sc,
            )  # fmt: skip
            if code == _DONE:
                return
            if code == _WINDOW_FULL:
                n = _head_compact(
                    self.table, self.bits, self.tree, self.pos2key,
                    int(self.sc[_H_POS]), np.uint64(self.sc[_H_SHIFT]),
                )  # fmt: skip
                self.sc[_H_POS] = n
                self.sc[_H_OLDEST] = 0
            else:
                raise TraceError(
                    f"key {int(keys[i])} is outside the row space [0, {self.total_keys})"
                )

    def block_counts(self) -> np.ndarray:
        """int64 [blocks, capacity + 2]: per block the histogram of distances < capacity,
        then far and counted requests."""
        self.end_block()
        if not self.blocks:
            return np.zeros((0, self.capacity + 2), dtype=np.int64)
        return np.stack(self.blocks)

    def take_counts(self) -> np.ndarray:
        """`block_counts`, the finished blocks let go: the stack is a copy, and heads
        that kept both would hold their counts twice at once."""
        counts = self.block_counts()
        self.blocks = []
        return counts

    @staticmethod
    def miss_fractions(counts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
        """misses(C) / counted for sizes C <= capacity, from one row of `block_counts`
        (or their sum): (far + #{d in [C, capacity)}) / counted."""
        hist, far, counted = counts[:-2], counts[-2], counts[-1]
        if counted <= 0:
            return np.full(len(sizes), np.nan)
        suffix = np.zeros(len(hist) + 1, dtype=np.int64)
        suffix[:-1] = np.cumsum(hist[::-1])[::-1]
        at = np.minimum(np.asarray(sizes, dtype=np.int64), len(hist))
        return (far + suffix[at]) / counted


def reference_head(keys: Iterable[int], capacity: int) -> tuple[np.ndarray, int]:
    """(histogram of distances < capacity, far requests) from a whole stream, by the
    explicit LRU stack of `replay.analysis.stack.reference_stack_distances`."""
    hist = np.zeros(capacity, dtype=np.int64)
    far = 0
    for d in reference_stack_distances(keys):
        if d is None or d >= capacity:
            far += 1
        else:
            hist[d] += 1
    return hist, far


# -- the head of a sampled curve ------------------------------------------------------------

HEAD_LOOKUPS = 1 << 25  # streams up to this many lookups: the head reads them whole
HEAD_BLOCKS = 16  # else this many blocks spread evenly over the stream
HEAD_MIN_ROWS = 1 << 12
HEAD_MAX_ROWS = 1 << 19  # 2^19 keys: about 40 MB of state
HEAD_DISTINCT_MULTIPLE = 4  # C_x >= 4 x distinct rows of the first batch
# C_x reaches up to the sample's resolution only this far: at R = 2^-23 the resolution is
# 2^27 keys, and a head of that capacity holds ~29 GB (~216 B a key with its 16 blocks'
# histograms). Sizes between C_x and the resolution then come from the sample anchored at
# C_x (`ShardsSampler.estimate`), with the wider error that their blur gives.
HEAD_MAX_RESOLVED_ROWS = 1 << 20
# the per-table heads' capacities in all (~450 MB): 400 tables of millions of rows would
# otherwise ask for one full head each; beyond, every table's is cut to a common level
HEAD_TABLES_MAX_KEYS = 1 << 21
BLOCK_T_QUANTILE = 2.131  # Student t, HEAD_BLOCKS - 1 = 15 degrees of freedom, two-sided 95%


def _pow2_at_least(x: int) -> int:
    return 1 << max(0, int(x - 1).bit_length())


def head_capacity(first_batch_distinct: int, resolution: int, total_keys: int) -> int:
    """C_x: the power of two >= 4 x the first batch's distinct keys (the curve's cliff is
    near one batch's distinct keys; reuse of older batches puts more of it below 4
    batches' worth), in [2^12, 2^19], at least the sample's resolution (so every size is
    exact or resolved) up to `HEAD_MAX_RESOLVED_ROWS`, at most the keys there are."""
    c = _pow2_at_least(HEAD_DISTINCT_MULTIPLE * max(int(first_batch_distinct), 1))
    c = min(max(c, HEAD_MIN_ROWS), HEAD_MAX_ROWS)
    resolved = min(_pow2_at_least(resolution), HEAD_MAX_RESOLVED_ROWS)
    return max(1, min(max(c, resolved), int(total_keys)))


def shared_capacities(wanted: list[int], budget: int = HEAD_TABLES_MAX_KEYS) -> list[int]:
    """`wanted` capacities cut to a common level L (min(c, L) each) so they sum to at
    most `budget` (as they are when they already do); each at least 1."""
    if sum(wanted) <= budget:
        return list(wanted)
    lo, hi = 1, max(wanted)  # the largest level that fits is in [lo, hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if sum(min(c, mid) for c in wanted) <= budget:
            lo = mid
        else:
            hi = mid
    return [max(1, min(c, lo)) for c in wanted]


def head_bytes(capacities: list[int], blocks: int) -> int:
    """What heads of these capacities hold while they read `blocks` blocks (an upper
    bound: the map is sized to a power of two >= 2 C + 1 slots): each one's map and window,
    its finished blocks' counts and the block in hand's."""
    total = head_counts_bytes(capacities, blocks + 1)
    for c in capacities:
        slots, window = _layout(c)
        total += 16 * slots + 8 * window + window // 4
    return total


def head_counts_bytes(capacities: list[int], blocks: int) -> int:
    """What heads of these capacities keep once read (`HeadCurve.counts`): int64
    [blocks, C + 2] each, their maps and windows freed."""
    return sum(8 * (int(c) + 2) * int(blocks) for c in capacities)


def head_blocks(num_batches: int, lookups: int, capacity: int) -> list[tuple[int, int]]:
    """Batch ranges the head reads: the whole stream when it has at most `HEAD_LOOKUPS`
    lookups, else `HEAD_BLOCKS` blocks, evenly spread, of max(HEAD_LOOKUPS / blocks,
    8 capacity) lookups each (a block first fills the stack, then counts)."""
    if num_batches <= 0:
        return []
    if lookups <= HEAD_LOOKUPS:
        return [(0, num_batches)]
    per_batch = max(lookups / num_batches, 1.0)
    length = int(np.ceil(max(HEAD_LOOKUPS / HEAD_BLOCKS, 8 * capacity) / per_batch))
    if length * HEAD_BLOCKS >= num_batches:
        return [(0, num_batches)]
    starts = [j * (num_batches - length) // (HEAD_BLOCKS - 1) for j in range(HEAD_BLOCKS)]
    return [(a, a + length) for a in starts]


@dataclass(frozen=True, eq=False)
class HeadCurve:
    """The exact part of a sampled curve: miss ratios for sizes <= `capacity`."""

    capacity: int
    counts: np.ndarray  # int64 [blocks, capacity + 2] (`ExactHead.block_counts`)
    exact: bool  # one block from the stream's start: no error at all

    @property
    def counted(self) -> int:
        return int(self.counts[:, -1].sum()) if len(self.counts) else 0

    @property
    def usable(self) -> bool:
        """Exact: it counted something. Blocks: every block filled its stack and counted
        (a stack that cannot fill, e.g. C_x about all the rows of a small table, leaves
        first uses in a block undecided; and blocks that did fill would be a biased
        choice), so the curve falls back to the sample alone."""
        if self.exact:
            return self.counted > 0
        return len(self.counts) > 1 and bool((self.counts[:, -1] > 0).all())

    def miss_ratios(self, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(miss ratio, ~95% error) at min(size, capacity) for each size: pooled over the
        blocks (a ratio estimator); the error is t s / sqrt(K) of the blocks' own ratios
        (0 when exact)."""
        at = np.minimum(np.asarray(sizes, dtype=np.int64), self.capacity)
        pooled = ExactHead.miss_fractions(self.counts.sum(axis=0), at)
        if self.exact:
            return pooled, np.zeros(len(at))
        per = _block_fractions(self.counts[self.counts[:, -1] > 0], at)
        if len(per) < 2:
            return pooled, np.ones(len(at))  # not `usable`: no spread to tell
        t = BLOCK_T_QUANTILE if len(per) == HEAD_BLOCKS else _t95(len(per) - 1)
        return pooled, t * per.std(axis=0, ddof=1) / np.sqrt(len(per))


def _block_fractions(counts: np.ndarray, at: np.ndarray) -> np.ndarray:
    """`ExactHead.miss_fractions` of each row of `counts` (every one counted something) at
    `at` (each in [0, capacity]), [rows, len(at)]: the histogram's suffix sums taken at
    those sizes only (segment sums between them, then summed from the top), not over
    every distance of every block; the same integers, so the same ratios."""
    hist = counts[:, :-2]
    cap = hist.shape[1]
    cuts = np.unique(at[at < cap])
    suffix = np.zeros((len(counts), len(cuts) + 1), dtype=np.int64)
    if len(cuts):
        seg = np.add.reduceat(hist, cuts, axis=1)  # [cuts[i], cuts[i + 1]), the last to cap
        suffix[:, :-1] = np.cumsum(seg[:, ::-1], axis=1)[:, ::-1]
    # a size at the capacity: no counted distance reaches it (the zero column)
    where = np.where(at < cap, np.searchsorted(cuts, at), len(cuts))
    # C order, as the rows stacked one by one: the blocks' spread sums down the columns
    # in that order (an F-ordered array's `std` sums pairwise, other bits)
    return np.ascontiguousarray((counts[:, -2:-1] + suffix[:, where]) / counts[:, -1:])


def _t95(dof: int) -> float:
    """Two-sided 95% Student t quantile (table values; 1.96 beyond 30)."""
    table = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365,
             8: 2.306, 9: 2.262, 10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145,
             15: 2.131}  # fmt: skip
    return table.get(dof, 1.96 if dof > 30 else 2.1)


@kernel
def _split_by_table(
    keys: np.ndarray,
    group: np.ndarray,
    offsets: np.ndarray,
    tid: np.ndarray,
    starts: np.ndarray,
    out_keys: np.ndarray,
    out_group: np.ndarray,
) -> None:
    """Counting sort of keys by table, stable: table t's table-local keys (and groups)
    land in out[starts[t]:starts[t + 1]] in stream order."""
    tables = len(offsets) - 1
    for t in range(tables + 1):
        starts[t] = 0
    for i in range(len(keys)):
        t = table_of(offsets, np.int64(keys[i]))
        tid[i] = t
        starts[t + 1] += 1
    for t in range(tables):
        starts[t + 1] += starts[t]
    fill = starts[:tables].copy()
    with_group = len(group) > 0
    for i in range(len(keys)):
        t = tid[i]
        j = fill[t]
        out_keys[j] = np.int64(keys[i]) - offsets[t]
        if with_group:
            out_group[j] = group[i]
        fill[t] = j + 1


KeyBatches = Callable[[int, int], Iterable[np.ndarray]]


def head_curves(
    keys_of: KeyBatches,
    num_batches: int,
    lookups: int,
    offsets: np.ndarray,
    resolution: int,
    *,
    total: bool = True,
    per_table: bool = False,
) -> list[HeadCurve]:
    """Head curves of a stream whose batches [a, b) `keys_of(a, b)` yields as flat keys
    (int64, stream order) in [0, offsets[-1]): the whole key space's (`total`), then one
    per table (table-local keys) with `per_table`, all from one read of the blocks.
    Capacities come from batch 0."""
    offsets = np.asarray(offsets, dtype=np.int64)
    space = int(offsets[-1])
    first = np.unique(
        np.concatenate(
            [np.asarray(k, dtype=np.int64) for k in keys_of(0, 1)] or [np.empty(0, np.int64)]
        )
    ).astype(np.int64)
    heads: list[ExactHead] = []
    if total:
        heads.append(ExactHead(space, head_capacity(len(first), resolution, space)))
    tables: list[ExactHead] = []
    if per_table:
        distinct = np.diff(np.searchsorted(first, offsets)).tolist()
        table_rows = np.diff(offsets).tolist()
        wanted = [
            head_capacity(int(d), resolution, int(rows))
            for rows, d in zip(table_rows, distinct, strict=True)
        ]
        for rows, c in zip(table_rows, shared_capacities(wanted), strict=True):
            tables.append(ExactHead(int(rows), c))
    every = heads + tables
    if not every:
        return []
    blocks = head_blocks(num_batches, lookups, max(h.capacity for h in every))
    exact = blocks == [(0, num_batches)]
    tid = np.empty(0, dtype=np.int32)
    local = np.empty(0, dtype=np.int64)
    cuts = np.zeros(len(tables) + 1, dtype=np.int64)
    no_group = np.empty(0, dtype=np.uint8)
    for a, b in blocks:
        for h in every:
            # blocks stand for the whole run: the first one too skips its filling, or
            # the stream's cold start would weigh one block in 16
            h.start_block(warm=not exact)
        for chunk in keys_of(a, b):
            keys = np.asarray(chunk, dtype=np.int64)
            if total:
                heads[0].feed(keys)
            if not tables:
                continue
            # a counting sort by table, stream order within each: 12 B a key, where an
            # argsort and its gathers held ~56 (1.5 GB for a batch of 26 M lookups)
            if len(tid) < len(keys):
                tid = np.empty(len(keys), dtype=np.int32)
                local = np.empty(len(keys), dtype=np.int64)
            _split_by_table(keys, no_group, offsets, tid, cuts, local, no_group)
            for t, h in enumerate(tables):
                if cuts[t + 1] > cuts[t]:
                    h.feed(local[cuts[t] : cuts[t + 1]])
    return [HeadCurve(h.capacity, h.take_counts(), exact) for h in every]
