"""LRU miss-ratio curves: exact stack distances, and SHARDS spatial sampling (DESIGN s.5).

A request is a dense flat key of `replay.trace.keys` (key = offsets[table] + row, in
[0, total_rows)), taken in trace order.

Exact curve (Mattson, Gecsei, Slutz, Traiger, "Evaluation techniques for storage
hierarchies", IBM Systems Journal 9(2), 1970). LRU is a stack algorithm: the contents of
an LRU cache of C rows are the C most recently used distinct keys. The *stack distance*
of a request is the number of distinct keys accessed since the previous access to the
same key (0 for an immediate repeat); a first access has an infinite distance (a cold
miss). A request hits an LRU cache of capacity C >= 1 rows (one that inserts every missed
key and evicts the least recently used) exactly when its distance is < C, so one pass
gives every cache size at once:

    miss_ratio(C) = (cold + #{requests with distance >= C}) / requests.

Kernel (Olken-style: per-key last access position plus a counting tree over positions).
Each key keeps the position of its last access (-1 = never seen); a bitmap holds a 1 at
the last position of every key seen so far, so a request's distance is the number of set
bits strictly between the key's last position and the current one. Those are counted
with popcounts inside the two end words and a Fenwick tree over the words' popcounts in
between (so the tree is 64x smaller than the position window and stays in L2):

- Positions are numbered inside a window of W slots. When the window is full, the live
  marks (one per distinct key) are renumbered 0..n-1 in order and bitmap and tree rebuilt,
  so memory is bounded by per-key state, never by the trace length. W = max(4 n, minimum)
  rounded up to 64: a compaction (linear in n) happens at most once every 3 n requests.
- Tree nodes are materialized lazily: a word's node is written when the word fills up
  (from its children, which all lie before it), and a removal updates only nodes of
  complete words. With a range query that walks both prefix paths only until they meet,
  a request costs O(log of its distance in positions / 64) tree steps, not O(log W).
- The per-key array is mostly cold in a large row space: the kernel prefetches the entry
  of the request 16 ahead (1.9x on the Criteo Kaggle trace).

Exact mode indexes per-key state directly by key (4 bytes per row of the row space, 8 when
the row space exceeds about 2^29 rows), plus about 16 bytes per distinct key for the
window (positions -> key) and up to 8 for the histogram, which is exact (one bucket per
distance, grown by doubling).

Sampled curve (Waldspurger, Park, Garthwaite, Ahmad, "Efficient MRC Construction with
SHARDS", FAST 2015; fixed-rate SHARDS with the adjustment, "SHARDS_adj"). A key is
sampled when hash(key) mod P < T, P = 2^24, so the sample rate is R = T / P (T is the
requested rate times P, rounded; `sample_rate` reports T / P). The hash is SplitMix64's
finalizer (`replay.workload.sampler.mix64`) of the key xor a fixed salt. Sampling is by
key, so every request of a sampled key is kept and its stack distance in the sampled
stream, divided by R, estimates its true distance. The sampled stream goes through the
same kernel, with per-key state in an open-addressing hash map over the sampled keys
only. With N requests of which N_s sampled, the adjustment adds N R - N_s to the
smallest-distance bucket (always a hit), which makes the histogram total N R:

    miss_ratio(C) ~= (cold_s + #{sampled requests with distance_s >= C R}) / (N R),

clipped to [0, 1]. Distinct keys are estimated as distinct sampled keys / R. At R = 1
every key is sampled and the result equals the exact curve (`exact` is then true).

Resolution. A request of true distance d has a sampled distance of about Binomial(d, R),
so the estimate blurs the curve over sizes by a relative standard deviation of
sqrt((1 - R) / (C R)). Sampled curves start where that is 25%, at C = 16 (1 - R) / R rows
(`resolution_rows`: 1,585 rows at R = 0.01), and smaller explicit sizes are a
ConfigError: the blur grows fast below (around C = 1 / R most sampled distances are 0
or 1, and on the Criteo Kaggle trace the estimate at C = 1 was 0.39 against 0.92).
Above it, the blur still rounds off sharp cliffs (embedding traces have one near the
number of distinct rows per batch), which is where the largest errors are.

Stated error (`expected_error`), by the random-group method (Wolter, "Introduction to
Variance Estimation", 2nd ed., Springer 2007, ch. 2): the sample is split into K = 8
hash-disjoint groups by three further hash bits (bits 24-26 of the same hash, independent
of the sampling bits), each of which is itself a SHARDS_adj sample at rate R / K with its
own kernel state. The K group curves m_k(C) are independent estimates and the full-rate
estimate m(C) behaves like their mean, so its standard error is s_k(C) / sqrt(K), s_k the
sample standard deviation (ddof=1) of the m_k(C). The blur's bias grows as the rate
falls (about sqrt(K) times larger at R / K near a cliff, K times on smooth parts), so
b(C) = (mean_k m_k(C) - m(C)) / (sqrt(K) - 1) estimates the bias at R, erring large.
`point_errors` = |b(C)| + t s_k(C) / sqrt(K) at each size, with t = 2.365 (Student's t,
7 degrees of freedom, two-sided 95%), and `expected_error` is their maximum. Measured on
the Criteo Kaggle trace (1,000 batches of 2,048) at R = 0.01 over 16 salts: the per-size
bound held at 95% of the sizes, and `expected_error` covered the curve's largest error
in 13 of 16; the errors themselves were 0.004 mean absolute (median; 0.002-0.011) and
0.029 largest (median; 0.014-0.055, always at the batch cliff). The groups cost one
more kernel pass over the sampled requests (about 2 R of the trace), so the filter over
all requests stays the hot loop.

`mrc_trace` streams a trace folder, reading in a background thread (pyarrow releases the
GIL). Both curves read only the (table, row) columns: the exact one makes and checks the
flat keys in the reader thread; the sampled one makes, checks and hashes them in one fused
filter loop, since reading bounds it. `mrc_keys` takes in-memory keys (or chunks of
them); `StackDistances` and `ShardsSampler` are the resumable states for callers that
stream keys themselves. `reference_stack_distances` and `reference_lru_misses` are the
slow, obviously correct versions the tests compare with.
"""

from __future__ import annotations

import json
import math
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
from llvmlite import ir
from numba import types
from numba.core.extending import intrinsic

from replay._arrow import to_numpy
from replay._intrinsics import PREFETCH_AHEAD, prefetch
from replay._jit import kernel
from replay._malloc import state_array
from replay._threads import read_ahead
from replay.errors import ConfigError, TraceError
from replay.trace.format import LOOKUPS_DIR
from replay.trace.keys import _flat_keys_checked, bad_lookup_error, table_offsets
from replay.trace.reader import Trace, open_trace
from replay.workload.onthefly import GeneratedTrace
from replay.workload.sampler import mix64
from replay.workload.spec import WorkloadSpec

if TYPE_CHECKING:
    from replay.workload.source import Source, SourceRef

SHARDS_MODULUS = 1 << 24  # P: the hash is compared modulo 2^24
SHARDS_SALT = 0x5A17ED5EED0F0A11  # fixed, so the same trace gives the same sample
SUBSAMPLES = 8  # K hash-disjoint groups for the error estimate (a power of 2)
ERROR_T_QUANTILE = 2.365  # Student t, K - 1 = 7 degrees of freedom, two-sided 95%
DEFAULT_CURVE_POINTS = 64
DEFAULT_MIN_WINDOW = 1 << 16  # smallest position window (positions between compactions)
DEFAULT_TASK_LOOKUPS = 1 << 23  # lookups per map task of a spread sampled curve
_HIST_MIN = 1024
_FIB = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing for the sampled-key map

# int64 scalar state of a kernel, `sc`
_S_POS = 0  # next position to use (0-based, inside the window)
_S_LIVE = 1  # distinct keys seen (= marks in the tree)
_S_COLD = 2  # first accesses
_S_REQ = 3  # requests fed
_S_IDS = 4  # ids given out by the hash map (map mode)
_S_SHIFT = 5  # 64 - log2(map slots) (map mode)
_S_WIDTH = 6

# kernel stop codes
_DONE = 0
_WINDOW_FULL = 1
_HIST_FULL = 2
_IDS_FULL = 3
_BAD_KEY = 4


# -- exact stack distances -----------------------------------------------------------------


@intrinsic
def _popcount(typingctx: Any, src: Any) -> Any:
    """Number of set bits of an integer (LLVM's ctpop: one instruction on x86-64)."""
    if not isinstance(src, types.Integer):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.ctpop(args[0])

    return src(src), codegen


@intrinsic
def _trailing_zeros(typingctx: Any, src: Any) -> Any:
    if not isinstance(src, types.Integer):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.cttz(args[0], ir.Constant(ir.IntType(1), 0))

    return src(src), codegen


_ONE = np.uint64(1)
_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)


@kernel
def _stack_kernel(
    keys: np.ndarray,
    start: int,
    total_keys: int,
    last: np.ndarray,
    map_keys: np.ndarray,
    map_ids: np.ndarray,
    bits: np.ndarray,
    tree: np.ndarray,
    pos2id: np.ndarray,
    hist: np.ndarray,
    sc: np.ndarray,
    dist_out: np.ndarray,
) -> tuple[int, int]:
    """Feed keys[start:] into the state until done or until some array must grow.

    Returns (index of the first request not processed, stop code). Positions are 0-based
    in a window of len(pos2id) slots (a multiple of 64); `bits` holds one bit per
    position (set = the last access of a live key) and `tree` is a 1-based Fenwick tree
    over the bit words' popcounts, whose node j (word j - 1) is written once that word
    is complete (lazy materialization). Direct mode when `map_keys` is empty (the id of a
    key is the key); otherwise ids come from the open-addressing map (`map_keys` -1 =
    empty). `dist_out`, when not empty, gets each request's distance (-1 = cold miss).
    Every stop check happens before the request changes any state, so the caller grows
    the arrays and calls again at the returned index.
    """
    direct = len(map_keys) == 0
    record = len(dist_out) > 0
    window = len(pos2id)
    hist_len = len(hist)
    id_cap = len(last)
    p = sc[_S_POS]
    live = sc[_S_LIVE]
    cold = sc[_S_COLD]
    nids = sc[_S_IDS]
    shift = np.uint64(sc[_S_SHIFT])
    mask = len(map_keys) - 1
    n = len(keys)
    i = start
    code = _DONE
    while i < n:
        if p >= window:
            code = _WINDOW_FULL
            break
        if live >= hist_len:  # a new distance could reach index live
            code = _HIST_FULL
            break
        key = keys[i]
        if direct and i + PREFETCH_AHEAD < n:
            # the per-key array is large and mostly cold: start the load a few requests
            # early, since each request's own work is a chain of dependent loads
            ahead = keys[i + PREFETCH_AHEAD]
            if np.uint64(ahead) < np.uint64(total_keys):
                prefetch(last, ahead)
        if np.uint64(key) >= np.uint64(total_keys):
            code = _BAD_KEY
            break
        if direct:
            ident = key
        else:
            slot = np.int64((np.uint64(key) * _FIB) >> shift)
            while True:
                k = map_keys[slot]
                if k == key:
                    ident = np.int64(map_ids[slot])
                    break
                if k < 0:
                    ident = -1
                    break
                slot = (slot + 1) & mask
            if ident < 0:
                if nids >= id_cap:
                    code = _IDS_FULL
                    break
                map_keys[slot] = key
                map_ids[slot] = nids
                ident = nids
                nids += 1
        wp = p >> 6
        below_p = (_ONE << np.uint64(p & 63)) - _ONE  # bits of positions < p in word wp
        q = np.int64(last[ident])
        if q < 0:
            cold += 1
            live += 1
            d = -1
        else:
            wq = q >> 6
            bq = np.uint64(q & 63)
            above_q = ~((_ONE << bq) - _ONE) & ~(_ONE << bq)  # bits of positions > q
            if wq == wp:
                d = np.int64(_popcount(bits[wq] & above_q & below_p))
                bits[wq] &= ~(_ONE << bq)
            else:
                d = np.int64(_popcount(bits[wq] & above_q) + _popcount(bits[wp] & below_p))
                # words wq+1 .. wp-1: prefix(wp) - prefix(wq + 1), walking until they meet
                a = wp
                b = wq + 1
                while a != b:
                    if a > b:
                        d += tree[a]
                        a &= a - 1
                    else:
                        d -= tree[b]
                        b &= b - 1
                bits[wq] &= ~(_ONE << bq)
                # the mark leaves word wq: update the materialized nodes (<= wp) above it
                j = wq + 1
                while j <= wp:
                    tree[j] -= 1
                    j += j & -j
            hist[d] += 1
        bits[wp] |= below_p + _ONE  # set the bit of p (below_p + 1 = 1 << (p & 63))
        pos2id[p] = ident
        last[ident] = p
        p += 1
        if p & 63 == 0:  # word wp is complete: materialize its node from its children
            node = wp + 1
            v = np.int64(_popcount(bits[wp]))
            low = node & -node
            k2 = 1
            while k2 < low:
                v += tree[node - k2]
                k2 <<= 1
            tree[node] = v
        if record:
            dist_out[i] = d
        i += 1
    sc[_S_REQ] += i - start
    sc[_S_POS] = p
    sc[_S_LIVE] = live
    sc[_S_COLD] = cold
    sc[_S_IDS] = nids
    return i, code


@kernel
def _compact(
    last: np.ndarray,
    bits: np.ndarray,
    pos2id: np.ndarray,
    end: int,
    new_bits: np.ndarray,
    new_tree: np.ndarray,
    new_pos2id: np.ndarray,
) -> int:
    """Renumber the live marks 0..n-1 in position order, rebuild bits and tree; returns n.

    The new arrays may be the old ones: the new position n never exceeds the old one, so
    nothing is overwritten before it is read.
    """
    n = 0
    for w in range((end + 63) >> 6):
        word = bits[w]
        while word:
            q = (w << 6) + np.int64(_trailing_zeros(word))
            ident = pos2id[q]
            new_pos2id[n] = ident
            last[ident] = n
            n += 1
            word &= word - _ONE
    full = n >> 6
    for w in range(len(new_bits)):
        if w < full:
            new_bits[w] = _ALL
        elif w == full:
            new_bits[w] = (_ONE << np.uint64(n & 63)) - _ONE
        else:
            new_bits[w] = 0
    for j in range(1, full + 1):
        new_tree[j] = 64 * (j & -j)  # every complete word holds 64 marks
    return n


@kernel
def _rehash(old_keys: np.ndarray, old_ids: np.ndarray, keys: np.ndarray, ids: np.ndarray) -> None:
    shift = np.uint64(64 - int(np.log2(len(keys))))
    mask = len(keys) - 1
    for s in range(len(old_keys)):
        k = old_keys[s]
        if k < 0:
            continue
        slot = np.int64((np.uint64(k) * _FIB) >> shift)
        while keys[slot] >= 0:
            slot = (slot + 1) & mask
        keys[slot] = k
        ids[slot] = old_ids[s]


def _window_size(live: int, min_window: int) -> int:
    """Positions between compactions: >= 4 x live keys (a compaction every >= 3 live), x 64."""
    size = max(4 * live, min_window, live + 1)
    return -(-size // 64) * 64


class StackDistances:
    """Resumable exact LRU stack-distance state; feed keys in trace order.

    `total_keys`: keys lie in [0, total_keys). With `direct=True` per-key state is an array
    over all keys; otherwise a hash map over the keys seen (what the SHARDS sample uses).
    `min_window` is the smallest position window (tests set it tiny to force many
    compactions; the window is a multiple of 64 positions).
    """

    def __init__(
        self, total_keys: int, *, direct: bool = True, min_window: int = DEFAULT_MIN_WINDOW
    ) -> None:
        if total_keys < 0:
            raise ValueError("total_keys must be >= 0")
        if min_window < 1:
            raise ValueError("min_window must be >= 1")
        self.total_keys = int(total_keys)
        self.direct = direct
        self.min_window = int(min_window)
        # int32 positions and ids while the window (<= 4 x keys, rounded) and the keys fit
        small = 4 * self.total_keys + self.min_window + 64 < 2**31
        self.index_dtype = np.dtype(np.int32 if small else np.int64)
        if direct:
            self.last = state_array(self.total_keys, self.index_dtype, -1)
            self.map_keys = np.empty(0, dtype=np.int64)
            self.map_ids = np.empty(0, dtype=self.index_dtype)
        else:
            cap = 1024
            self.last = np.full(cap, -1, dtype=self.index_dtype)
            self.map_keys = np.full(2 * cap, -1, dtype=np.int64)
            self.map_ids = np.zeros(2 * cap, dtype=self.index_dtype)
        window = _window_size(0, min(self.min_window, 2 * max(self.total_keys, 1)))
        self._allocate(window)
        self.hist = np.zeros(min(_HIST_MIN, self.total_keys + 1), dtype=np.int64)
        self.sc = np.zeros(_S_WIDTH, dtype=np.int64)
        if not direct:
            self.sc[_S_SHIFT] = 64 - int(np.log2(len(self.map_keys)))
        self.compactions = 0

    def _allocate(self, window: int) -> None:
        self.bits = np.zeros(window // 64, dtype=np.uint64)
        self.tree = np.zeros(window // 64 + 1, dtype=self.index_dtype)
        self.pos2id = np.zeros(window, dtype=self.index_dtype)

    # -- feeding ------------------------------------------------------------------------
    def feed(self, keys: np.ndarray, out: np.ndarray | None = None) -> None:
        """Fold keys (int64, trace order) in; `out` (int64, same length) gets distances."""
        keys = np.ascontiguousarray(keys, dtype=np.int64)
        if out is None:
            out = np.empty(0, dtype=np.int64)
        elif len(out) != len(keys):
            raise ValueError("out must have one slot per key")
        i = 0
        while True:
            i, code = _stack_kernel(
                keys, i, self.total_keys, self.last, self.map_keys, self.map_ids,
                self.bits, self.tree, self.pos2id, self.hist, self.sc, out,
            )  # fmt: skip
            if code == _DONE:
                return
            if code == _WINDOW_FULL:
                self._compact()
            elif code == _HIST_FULL:
                grown = np.zeros(min(2 * len(self.hist), self.total_keys + 1), dtype=np.int64)
                grown[: len(self.hist)] = self.hist
                self.hist = grown
            elif code == _IDS_FULL:
                self._grow_ids()
            else:
                raise TraceError(
                    f"lookup {int(self.sc[_S_REQ]) + 1}: key {int(keys[i])} is outside the "
                    f"row space [0, {self.total_keys}) (a row id beyond its table)"
                )

    def _compact(self) -> None:
        live = int(self.sc[_S_LIVE])
        window = _window_size(live, self.min_window)
        old = (self.bits, self.pos2id)
        if window > len(self.pos2id):
            self._allocate(window)
        n = _compact(
            self.last, old[0], old[1], int(self.sc[_S_POS]), self.bits, self.tree, self.pos2id
        )
        assert n == live
        self.sc[_S_POS] = n
        self.compactions += 1

    def _grow_ids(self) -> None:
        cap = 2 * len(self.last)
        last = np.full(cap, -1, dtype=self.index_dtype)
        last[: len(self.last)] = self.last
        keys = np.full(2 * cap, -1, dtype=np.int64)
        ids = np.zeros(2 * cap, dtype=self.index_dtype)
        _rehash(self.map_keys, self.map_ids, keys, ids)
        self.last, self.map_keys, self.map_ids = last, keys, ids
        self.sc[_S_SHIFT] = 64 - int(np.log2(len(keys)))

    # -- results ------------------------------------------------------------------------
    @property
    def requests(self) -> int:
        return int(self.sc[_S_REQ])

    @property
    def cold(self) -> int:
        return int(self.sc[_S_COLD])

    @property
    def distinct(self) -> int:
        return int(self.sc[_S_LIVE])

    def histogram(self) -> np.ndarray:
        """int64 counts of finite distances: h[d] = requests with distance d (d < distinct)."""
        return self.hist[: self.distinct].copy()

    def misses_at(self, thresholds: np.ndarray) -> np.ndarray:
        """cold + #{requests with distance >= t} for each threshold t (int64, t >= 0)."""
        hist = self.hist[: self.distinct]
        # suffix[t] = #{distance >= t}, with suffix[len] = 0
        suffix = np.zeros(len(hist) + 1, dtype=np.int64)
        suffix[:-1] = np.cumsum(hist[::-1])[::-1]
        t = np.minimum(np.asarray(thresholds, dtype=np.int64), len(hist))
        return self.cold + suffix[t]


def stack_distances(
    keys: np.ndarray,
    total_keys: int | None = None,
    *,
    direct: bool = True,
    min_window: int = DEFAULT_MIN_WINDOW,
) -> np.ndarray:
    """Per-request stack distances (int64, -1 for a first access) from the kernel."""
    keys = np.ascontiguousarray(keys, dtype=np.int64)
    if total_keys is None:
        total_keys = int(keys.max()) + 1 if len(keys) else 0
    state = StackDistances(total_keys, direct=direct, min_window=min_window)
    out = np.empty(len(keys), dtype=np.int64)
    state.feed(keys, out)
    return out


# -- references ----------------------------------------------------------------------------


def reference_stack_distances(keys: Iterable[int]) -> list[int | None]:
    """Stack distances by an explicit LRU stack (a Python list, most recent first)."""
    stack: list[int] = []
    out: list[int | None] = []
    for key in keys:
        key = int(key)
        if key in stack:
            depth = stack.index(key)  # distinct keys used since its last access
            out.append(depth)
            del stack[depth]
        else:
            out.append(None)
        stack.insert(0, key)
    return out


def reference_lru_misses(keys: Iterable[int], capacity: int) -> int:
    """Misses of an LRU cache of `capacity` keys that inserts every missed key."""
    cache: OrderedDict[int, None] = OrderedDict()
    misses = 0
    for key in keys:
        key = int(key)
        if key in cache:
            cache.move_to_end(key)
            continue
        misses += 1
        cache[key] = None
        if len(cache) > capacity:
            cache.popitem(last=False)
    return misses


# -- SHARDS --------------------------------------------------------------------------------


@kernel
def _shards_filter(
    keys: np.ndarray,
    threshold: int,
    salt: np.uint64,
    total_keys: int,
    out_keys: np.ndarray,
    out_group: np.ndarray,
) -> tuple[int, int]:
    """Keep the requests whose key hashes below `threshold` mod 2^24; (kept, bad keys).

    The group of a kept key (bits 24.. of the same hash) goes to `out_group`.
    """
    t = np.uint64(threshold)
    low = np.uint64(SHARDS_MODULUS - 1)
    gmask = np.uint64(SUBSAMPLES - 1)
    s24 = np.uint64(24)
    limit = np.uint64(total_keys)
    bad = 0
    n = 0
    for i in range(len(keys)):
        u = np.uint64(keys[i])
        bad += u >= limit
        h = mix64(u ^ salt)
        if (h & low) < t:
            out_keys[n] = keys[i]
            out_group[n] = np.uint8((h >> s24) & gmask)
            n += 1
    return n, bad


@kernel
def _shards_filter_columns(
    table: np.ndarray,
    row: np.ndarray,
    offsets: np.ndarray,
    rows: np.ndarray,
    threshold: int,
    salt: np.uint64,
    out_keys: np.ndarray,
    out_group: np.ndarray,
) -> tuple[int, int]:
    """`_shards_filter` straight from a trace's (table, row) columns; (kept, bad lookups).

    This loop touches every lookup of the trace, so it makes the flat key itself (no
    int64 key array in between) and checks table and row ids without a branch.
    """
    t = np.uint64(threshold)
    low = np.uint64(SHARDS_MODULUS - 1)
    gmask = np.uint64(SUBSAMPLES - 1)
    s24 = np.uint64(24)
    tables = len(rows)
    bad = 0
    n = 0
    for i in range(len(row)):
        tb = np.int64(table[i])
        bad += tb >= tables
        tb = min(tb, tables - 1)
        r = np.uint64(row[i])
        bad += r >= np.uint64(rows[tb])
        key = offsets[tb] + np.int64(r)
        h = mix64(np.uint64(key) ^ salt)
        if (h & low) < t:
            out_keys[n] = key
            out_group[n] = np.uint8((h >> s24) & gmask)
            n += 1
    return n, bad


def shards_threshold(sample_rate: float) -> int:
    """T for a rate R: round(R P), validated (R in (0, 1], T >= 1)."""
    try:
        rate = float(sample_rate)
    except (TypeError, ValueError):
        raise ConfigError(f"--sample-rate {sample_rate!r} is not a number") from None
    if not (math.isfinite(rate) and 0.0 < rate <= 1.0):
        raise ConfigError(f"--sample-rate {sample_rate!r} must be in (0, 1]")
    threshold = round(rate * SHARDS_MODULUS)
    if threshold < 1:
        raise ConfigError(
            f"--sample-rate {sample_rate!r} is below the hash resolution 1/{SHARDS_MODULUS}"
        )
    return threshold


def resolution_rows(threshold: int) -> int:
    """Smallest cache size a sample at rate R = T / P resolves: ceil(16 (1 - R) / R), >= 1.

    A request with true distance d has a sampled distance ~ Binomial(d, R), so d_s / R has
    a relative standard deviation sqrt((1 - R) / (d R)); at this size it is 25%, and it
    grows fast below (around 1 / R most sampled distances are 0 or 1).
    """
    return max(1, -(-16 * (SHARDS_MODULUS - threshold) // threshold))


class ShardsSampler:
    """Fixed-rate SHARDS over a stream of chunks: the full sample and K hash groups."""

    def __init__(
        self,
        total_keys: int,
        sample_rate: float,
        *,
        subsamples: int = SUBSAMPLES,
        salt: int = SHARDS_SALT,
    ) -> None:
        if subsamples not in (0, SUBSAMPLES):
            raise ValueError(f"subsamples must be 0 or {SUBSAMPLES}")
        self.total_keys = int(total_keys)
        self.salt = np.uint64(salt)
        self.threshold = shards_threshold(sample_rate)
        self.full = StackDistances(self.total_keys, direct=False)
        # at R = 1 the sample is the whole trace: there is no sampling error to estimate
        groups = subsamples if self.threshold < SHARDS_MODULUS else 0
        self.groups = [StackDistances(self.total_keys, direct=False) for _ in range(groups)]
        self.requests = 0
        self._buf_keys = np.empty(0, dtype=np.int64)
        self._buf_group = np.empty(0, dtype=np.uint8)

    @property
    def rate(self) -> float:
        return self.threshold / SHARDS_MODULUS

    @property
    def resolution(self) -> int:
        return resolution_rows(self.threshold)

    def _buffers(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        if len(self._buf_keys) < n:
            self._buf_keys = np.empty(n, dtype=np.int64)
            self._buf_group = np.empty(n, dtype=np.uint8)
        return self._buf_keys, self._buf_group

    def feed(self, keys: np.ndarray) -> None:
        """Fold in a chunk of flat keys (trace order)."""
        keys = np.ascontiguousarray(keys, dtype=np.int64)
        out_keys, out_group = self._buffers(len(keys))
        n, bad = _shards_filter(
            keys, self.threshold, self.salt, self.total_keys, out_keys, out_group
        )
        if bad:
            first = int(np.argmax((keys < 0) | (keys >= self.total_keys)))
            raise TraceError(
                f"lookup {self.requests + first + 1}: key {int(keys[first])} is outside the "
                f"row space [0, {self.total_keys}) (a row id beyond its table)"
            )
        self._take(len(keys), n)

    def feed_columns(
        self,
        table: np.ndarray,
        row: np.ndarray,
        offsets: np.ndarray,
        rows: np.ndarray,
        *,
        where: str = "lookups",
    ) -> None:
        """Fold in a chunk of a trace's lookup columns; `offsets`/`rows` int64 per table."""
        out_keys, out_group = self._buffers(len(row))
        n, bad = _shards_filter_columns(
            table, row, offsets, rows, self.threshold, self.salt, out_keys, out_group
        )
        if bad:
            raise bad_lookup_error(where, self.requests, table, row, rows)
        self._take(len(row), n)

    def _take(self, requests: int, n: int) -> None:
        self.feed_sampled(requests, self._buf_keys[:n], self._buf_group[:n])

    def feed_sampled(self, requests: int, sampled: np.ndarray, group: np.ndarray) -> None:
        """Fold in the output of `shards_sample_columns` for `requests` requests (in trace
        order): how a sample filtered elsewhere (a worker) joins the kernels."""
        self.requests += requests
        self.full.feed(sampled)
        if self.groups and len(sampled):
            order = np.argsort(group, kind="stable")  # keeps trace order inside a group
            ends = np.cumsum(np.bincount(group, minlength=len(self.groups)))
            ordered = sampled[order]
            lo = 0
            for g, hi in enumerate(ends.tolist()):
                if hi > lo:
                    self.groups[g].feed(ordered[lo:hi])
                lo = hi

    def _curve(self, state: StackDistances, sizes: np.ndarray, groups: int = 1) -> np.ndarray:
        """SHARDS_adj miss ratios of one sample at rate T / (P groups)."""
        den = SHARDS_MODULUS * groups
        expected = self.requests * self.threshold / den  # N R, the adjusted histogram total
        if expected <= 0:
            return np.zeros(len(sizes))
        # distance_s / R >= C  <=>  distance_s >= ceil(C T / den); Python ints: no overflow
        cuts = [-(-int(c) * self.threshold // den) for c in sizes.tolist()]
        misses = state.misses_at(np.array(cuts, dtype=np.int64))
        return np.clip(misses / expected, 0.0, 1.0)

    def miss_ratios(self, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(curve, expected error at each size) at the given sizes (module docstring)."""
        curve = self._curve(self.full, sizes)
        k = len(self.groups)
        if k < 2:
            return curve, np.zeros(len(sizes))
        per = np.array([self._curve(g, sizes, k) for g in self.groups], dtype=np.float64)
        per = per.reshape(k, len(sizes))
        stderr = per.std(axis=0, ddof=1) / math.sqrt(k)  # random-group standard error
        # smoothing bias grows as the rate falls: at rate R / K it is about sqrt(K) times
        # that at R near a cliff of the curve (less elsewhere), so this over-covers
        bias = (per.mean(axis=0) - curve) / (math.sqrt(k) - 1.0)
        return curve, np.abs(bias) + ERROR_T_QUANTILE * stderr

    @property
    def estimated_distinct(self) -> int:
        return round(self.full.distinct / self.rate)


# -- results and public API ----------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class MrcResult:
    """An LRU miss-ratio curve: `miss_ratios[i]` for a cache of `sizes[i]` rows."""

    sizes: np.ndarray  # int64 cache sizes in rows, increasing
    miss_ratios: np.ndarray  # float64
    exact: bool
    sample_rate: float | None  # effective T / P; None for the exact one-pass curve
    lookups: int
    sampled_lookups: int
    distinct_keys: int  # exact, or estimated (distinct sampled keys / R)
    expected_error: float  # 0.0 when exact; else ~95% bound, max over the curve
    point_errors: np.ndarray  # float64, the same bound at each size (zeros when exact)
    resolution_rows: int = 1  # smallest cache size the sample resolves (1 when exact)
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "curve": [
                [int(c), float(m)]
                for c, m in zip(self.sizes.tolist(), self.miss_ratios.tolist(), strict=True)
            ],
            "exact": bool(self.exact),
            "sample_rate": self.sample_rate,
            "lookups": int(self.lookups),
            "sampled_lookups": int(self.sampled_lookups),
            "distinct_keys": int(self.distinct_keys),
            "distinct_keys_estimated": self.sample_rate is not None and not self.exact,
            "expected_error": float(self.expected_error),
            "point_errors": [float(e) for e in self.point_errors.tolist()],
            "resolution_rows": int(self.resolution_rows),
            **self.extra,
        }


def default_sizes(
    distinct: int, points: int = DEFAULT_CURVE_POINTS, smallest: int = 1
) -> np.ndarray:
    """About `points` log-spaced sizes in [smallest, distinct], deduplicated, both ends in.

    When `distinct` < `smallest` (a sample that saw few keys) the one size is `smallest`.
    """
    lo = max(int(smallest), 1)
    top = max(int(distinct), lo)
    xs = np.rint(np.geomspace(lo, top, max(points, 2))).astype(np.int64)
    return np.unique(np.concatenate([[lo], xs, [top]]))


def validate_sizes(sizes: Sequence[int] | np.ndarray) -> np.ndarray:
    """Sizes as a sorted, deduplicated int64 array of positive integers (ConfigError)."""
    values = sizes.ravel().tolist() if isinstance(sizes, np.ndarray) else list(sizes)
    if not values:
        raise ConfigError("--sizes: give at least one cache size")
    out = []
    for value in values:
        integral = isinstance(value, int | np.integer) or (
            isinstance(value, float | np.floating) and float(value).is_integer()
        )
        if isinstance(value, bool | np.bool_) or not integral:
            raise ConfigError(f"--sizes: cache size {value!r} is not an integer number of rows")
        if not 1 <= int(value) < 2**62:
            raise ConfigError(f"--sizes: cache size {int(value)} must be a positive number of rows")
        out.append(int(value))
    return np.unique(np.array(out, dtype=np.int64))


def validate_options(
    sizes: Sequence[int] | np.ndarray | None, sample_rate: float | None
) -> np.ndarray | None:
    """Validated sizes (None = default); ConfigError for bad sizes or rate, before any work."""
    chosen = None if sizes is None else validate_sizes(sizes)
    if sample_rate is not None:
        threshold = shards_threshold(sample_rate)
        floor = resolution_rows(threshold)
        if chosen is not None and chosen[0] < floor:
            raise ConfigError(
                f"--sizes: cache size {int(chosen[0])} is below what a sample at rate "
                f"{sample_rate} resolves (sizes >= {floor} rows); use a higher --sample-rate "
                "or the exact curve"
            )
    return chosen


def _chunks(keys: np.ndarray | Iterable[np.ndarray]) -> Iterable[np.ndarray]:
    if isinstance(keys, np.ndarray):
        return [keys]
    return keys


def mrc_keys(
    keys: np.ndarray | Iterable[np.ndarray],
    total_keys: int,
    sizes: Sequence[int] | np.ndarray | None = None,
    sample_rate: float | None = None,
    *,
    min_window: int = DEFAULT_MIN_WINDOW,
) -> MrcResult:
    """The LRU miss-ratio curve of flat keys in [0, total_keys): an array or its chunks.

    `sample_rate` None gives the exact curve; a rate in (0, 1] the SHARDS estimate, whose
    sizes must be at least `resolution_rows` of the rate (ConfigError otherwise).
    """
    chosen = validate_options(sizes, sample_rate)
    if sample_rate is None:
        state = StackDistances(total_keys, direct=True, min_window=min_window)
        for chunk in _chunks(keys):
            state.feed(chunk)
        return _exact_result(state, chosen)
    sampler = ShardsSampler(total_keys, sample_rate)
    for chunk in _chunks(keys):
        sampler.feed(chunk)
    return _sampled_result(sampler, chosen)


def _exact_result(state: StackDistances, sizes: np.ndarray | None) -> MrcResult:
    sizes = default_sizes(state.distinct) if sizes is None else sizes
    requests = state.requests
    misses = state.misses_at(sizes)
    ratios = misses / requests if requests else np.zeros(len(sizes))
    return MrcResult(
        sizes=sizes,
        miss_ratios=ratios.astype(np.float64),
        exact=True,
        sample_rate=None,
        lookups=requests,
        sampled_lookups=requests,
        distinct_keys=state.distinct,
        expected_error=0.0,
        point_errors=np.zeros(len(sizes)),
    )


def _sampled_result(sampler: ShardsSampler, sizes: np.ndarray | None) -> MrcResult:
    estimated = sampler.estimated_distinct
    floor = sampler.resolution
    sizes = default_sizes(estimated, smallest=floor) if sizes is None else sizes
    ratios, errors = sampler.miss_ratios(sizes)
    return MrcResult(
        sizes=sizes,
        miss_ratios=ratios.astype(np.float64),
        exact=sampler.threshold == SHARDS_MODULUS,
        sample_rate=sampler.rate,
        lookups=sampler.requests,
        sampled_lookups=sampler.full.requests,
        distinct_keys=estimated,
        expected_error=float(errors.max(initial=0.0)),
        point_errors=errors,
        resolution_rows=floor,
        extra={"subsamples": len(sampler.groups)},
    )


def _lookup_columns(trace: Trace) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(table, row) columns of each lookups row group, in trace order.

    Only these two columns: a curve needs the order, not the batch boundaries, and
    skipping `batch` (and the concatenation into whole-batch chunks that
    `iter_batch_ranges` does) reads about 1.3x faster, which is what bounds a sampled
    curve. Files and row groups come from the reader's own walk (`Trace._row_groups`), so
    its manifest and schema checks apply.
    """
    for member, handle, index in trace._row_groups(LOOKUPS_DIR, 0, trace.num_batches):
        try:
            table = handle.read_row_group(index, columns=["table", "row"])
        except (OSError, pa.ArrowException) as exc:
            detail = " ".join(str(exc).split())  # pyarrow's message may span lines
            raise TraceError(f"{member}: unreadable row group {index} ({detail})") from None
        tables, rows = table.column("table"), table.column("row")
        if tables.null_count or rows.null_count:
            raise TraceError(f"{member}: row group {index} holds null values")
        yield to_numpy(tables), to_numpy(rows)


def _checked_keys(trace: Trace, offsets: np.ndarray, rows: np.ndarray) -> Iterator[np.ndarray]:
    """Flat keys of each row group, table and row ids checked (runs in the reader thread)."""
    done = 0
    for table, row in _lookup_columns(trace):
        keys = np.empty(len(row), dtype=np.int64)
        if _flat_keys_checked(table, row, offsets, rows, keys):
            raise bad_lookup_error(str(trace.path), done, table, row, rows)
        done += len(row)
        yield keys


def mrc_trace(
    trace: Trace | str | Path,
    sizes: Sequence[int] | np.ndarray | None = None,
    sample_rate: float | None = None,
) -> MrcResult:
    """The LRU miss-ratio curve of a trace folder's lookups, in trace order.

    The (table, row) columns are read ahead in a background thread. Exact: that thread
    also makes the flat keys, and the stack-distance kernel runs here. Sampled: the
    columns go straight into the fused SHARDS filter. Table and row ids are checked
    (TraceError), as the row space must hold every key.
    """
    chosen = validate_options(sizes, sample_rate)  # before reading anything
    opened = trace if isinstance(trace, Trace) else open_trace(trace)
    rows = opened.table_rows.astype(np.int64)
    offsets = table_offsets(rows)[:-1]
    total = int(rows.sum())
    if sample_rate is None:
        return mrc_keys(read_ahead(_checked_keys(opened, offsets, rows)), total, chosen)
    sampler = ShardsSampler(total, sample_rate)
    for table, row in read_ahead(_lookup_columns(opened)):
        sampler.feed_columns(table, row, offsets, rows, where=str(opened.path))
    return _sampled_result(sampler, chosen)


def shards_sample_columns(
    table: np.ndarray,
    row: np.ndarray,
    offsets: np.ndarray,
    rows: np.ndarray,
    threshold: int,
    *,
    salt: int = SHARDS_SALT,
    where: str = "lookups",
) -> tuple[int, np.ndarray, np.ndarray]:
    """(requests, sampled keys, their groups) of one chunk of lookup columns: the SHARDS
    filter on its own, for work spread over threads or workers (`ShardsSampler.feed_sampled`
    folds the results in, in trace order)."""
    keys = np.empty(len(row), dtype=np.int64)
    group = np.empty(len(row), dtype=np.uint8)
    n, bad = _shards_filter_columns(
        table, row, offsets, rows, threshold, np.uint64(salt), keys, group
    )
    if bad:
        raise bad_lookup_error(where, 0, table, row, rows)
    return len(row), keys[:n].copy(), group[:n].copy()


def _row_space(source: Source) -> tuple[np.ndarray, np.ndarray, int]:
    """(rows, offsets without the total, total rows) as the kernels take them."""
    rows = source.table_rows.astype(np.int64)
    return rows, table_offsets(rows)[:-1], int(rows.sum())


_OPENED: dict[str, Source] = {}


def _open_cached(ref: SourceRef) -> Source:
    """A worker process's opened source, kept for its later tasks (a Dask worker runs
    many tasks of one curve; building a workload's sampler tables costs ~0.3 s)."""
    from replay.workload.source import open_source

    key = json.dumps(ref.to_dict(), sort_keys=True) if isinstance(ref, WorkloadSpec) else ref
    if key not in _OPENED:
        _OPENED.clear()
        _OPENED[key] = open_source(ref, threads=1)
    return _OPENED[key]


def shards_map(
    ref: SourceRef, batch_start: int, batch_stop: int, threshold: int
) -> tuple[int, np.ndarray, np.ndarray]:
    """The SHARDS sample of batches [batch_start, batch_stop) of a source (a map task)."""
    source = _open_cached(ref)
    rows, offsets, _ = _row_space(source)
    where = f"{source.path} batches [{batch_start}, {batch_stop})"
    requests, keys, groups = 0, [], []
    for chunk in source.iter_lookups(batch_start, batch_stop):
        n, k, g = shards_sample_columns(
            chunk.table, chunk.row, offsets, rows, threshold, where=where
        )
        requests += n
        keys.append(k)
        groups.append(g)
    if not keys:
        return 0, np.empty(0, dtype=np.int64), np.empty(0, dtype=np.uint8)
    return requests, np.concatenate(keys), np.concatenate(groups)


def task_ranges(source: Source, task_lookups: int = DEFAULT_TASK_LOOKUPS) -> list[tuple[int, int]]:
    """Consecutive batch ranges of about `task_lookups` lookups covering the source, cut
    where its data is cut (files of a trace, row groups of a workload)."""
    if isinstance(source, GeneratedTrace):
        cuts = [(g0, g1, (g1 - g0) * source.spec.lookups_per_batch) for g0, g1 in source.row_groups]
    else:
        cuts = [
            (int(e["batch_start"]), int(e["batch_stop"]), int(e["rows"]))
            for e in source.manifest["files"][LOOKUPS_DIR]
        ]
    ranges: list[tuple[int, int]] = []
    start, size = None, 0
    for lo, hi, n in cuts:
        start = lo if start is None else start
        size += n
        if size >= task_lookups:
            ranges.append((start, hi))
            start, size = None, 0
    if start is not None:
        ranges.append((start, cuts[-1][1]))
    return ranges


def mrc_source(
    ref: SourceRef,
    sizes: Sequence[int] | np.ndarray | None = None,
    sample_rate: float | None = None,
    *,
    client: Any = None,
    threads: int | None = None,
) -> MrcResult:
    """The LRU miss-ratio curve of a trace folder or an on-the-fly workload.

    On one machine a trace goes through `mrc_trace`; a workload is generated by
    `threads` threads, which also make the keys (exact) or run the SHARDS filter
    (sampled), so the caller's thread only runs the stack-distance kernels. With a Dask
    `client` (sampled curves only) the filter is spread over the cluster by batch ranges
    (`task_ranges`, `shards_map`) and the samples are folded in here in trace order, so
    the curve is the single-machine one, bit for bit.
    """
    from replay.workload.source import open_source

    chosen = validate_options(sizes, sample_rate)
    if client is not None and sample_rate is None:
        raise ConfigError(
            "the exact curve is one sequential pass; --scheduler spreads --sample-rate curves"
        )
    source = open_source(ref, threads=threads)
    if client is None and not isinstance(source, GeneratedTrace):
        return mrc_trace(source, chosen, sample_rate)
    rows, offsets, total = _row_space(source)
    where = str(source.path)
    if sample_rate is None:
        assert isinstance(source, GeneratedTrace)

        def keys_of(chunk: Any) -> np.ndarray:
            keys = np.empty(len(chunk.row), dtype=np.int64)
            if _flat_keys_checked(chunk.table, chunk.row, offsets, rows, keys):
                raise bad_lookup_error(where, 0, chunk.table, chunk.row, rows)
            return keys

        return mrc_keys(source.map_lookups(keys_of), total, chosen)
    sampler = ShardsSampler(total, sample_rate)
    threshold = sampler.threshold
    if client is None:
        assert isinstance(source, GeneratedTrace)
        parts: Iterable[tuple[int, np.ndarray, np.ndarray]] = source.map_lookups(
            lambda c: shards_sample_columns(c.table, c.row, offsets, rows, threshold, where=where)
        )
    else:
        from replay._distributed import map_in_order

        parts = map_in_order(
            client, shards_map, [(ref, a, b, threshold) for a, b in task_ranges(source)]
        )
    for requests, keys, group in parts:
        sampler.feed_sampled(requests, keys, group)
    return _sampled_result(sampler, chosen)


def bench_mrc(trace_path: str | Path, sample_rate: float | None = None) -> dict[str, Any]:
    """Time `mrc_trace` on a trace: lookups, seconds, lookups/s, peak RSS.

    Kernels are compiled (or loaded from numba's cache) and the reader warmed up on the
    first batch before the timing starts. `main_thread_cpu_seconds` is the kernels' share
    (reading runs in a background thread).
    """
    from replay._machine import machine_description, peak_rss_bytes

    trace = open_trace(trace_path)
    rows = trace.table_rows.astype(np.int64)
    offsets = table_offsets(rows)[:-1]
    total = int(rows.sum())
    first = next(_lookup_columns(trace), None)
    if first is not None:
        # one row group through each path, outside the timing: numba's cache loads (for
        # these very array types) and pyarrow's start-up
        table, row = first
        keys = np.empty(len(row), dtype=np.int64)
        _flat_keys_checked(table, row, offsets, rows, keys)
        mrc_keys(keys, total)
        ShardsSampler(total, 0.5).feed_columns(table, row, offsets, rows)
    started = time.perf_counter()
    cpu = time.thread_time()
    result = mrc_trace(trace, sample_rate=sample_rate)
    cpu = time.thread_time() - cpu
    seconds = time.perf_counter() - started
    return {
        "trace": str(trace_path),
        "sample_rate": result.sample_rate,
        "exact": result.exact,
        "lookups": result.lookups,
        "sampled_lookups": result.sampled_lookups,
        "distinct_keys": result.distinct_keys,
        "expected_error": result.expected_error,
        "seconds": seconds,
        "lookups_per_s": result.lookups / seconds if seconds > 0 else 0.0,
        "main_thread_cpu_seconds": cpu,
        "peak_rss_bytes": peak_rss_bytes(),
        "machine": machine_description(),
    }
