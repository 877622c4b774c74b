"""Exact LRU stack distances: one pass gives the miss ratio of every cache size (DESIGN s.5).

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
distance, grown by doubling). Hash-map mode keeps per-key state for the keys seen only
(what the SHARDS sample of `replay.analysis.shards` uses).

`StackDistances` is the resumable state for callers that stream keys themselves;
`stack_distances` gives each request's distance. `reference_stack_distances` and
`reference_lru_misses` are the slow, obviously correct versions the tests compare with.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
from llvmlite import ir
from numba import types

from replay._intrinsics import PREFETCH_AHEAD, kernel_call, prefetch
from replay._jit import kernel
from replay._malloc import state_array
from replay.errors import TraceError

DEFAULT_MIN_WINDOW = 1 << 16  # smallest position window (positions between compactions)
# row space per key fed above which per-key state is a map of the keys seen (`dense_rows`)
SPARSE_ROWS_PER_KEY = 8
_INITIAL_KEYS = 1024  # key map slots and histogram bins a state starts with
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


def _popcount_llvm(typingctx: Any, src: Any) -> Any:
    """Number of set bits of an integer (LLVM's ctpop: one instruction on x86-64)."""
    if not isinstance(src, types.Integer):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.ctpop(args[0])

    return src(src), codegen


def _trailing_zeros_llvm(typingctx: Any, src: Any) -> Any:
    if not isinstance(src, types.Integer):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.cttz(args[0], ir.Constant(ir.IntType(1), 0))

    return src(src), codegen


# inside a kernel only: an integer's set bits, its trailing zero bits (of its own type)
_popcount: Callable[[np.integer[Any]], np.integer[Any]] = kernel_call(_popcount_llvm)
_trailing_zeros: Callable[[np.integer[Any]], np.integer[Any]] = kernel_call(_trailing_zeros_llvm)


_ONE = np.uint64(1)
_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)


# -- the counting tree (shared with `replay.analysis.head`) --------------------------------


@kernel
def _marks_between(bits: np.ndarray, tree: np.ndarray, q: int, p: int) -> np.int64:
    """Set bits at positions strictly between q < p: popcounts inside the two end words,
    the tree's materialized nodes for the words between, walking both prefix paths
    (prefix(wp) - prefix(wq + 1)) only until they meet."""
    wq = q >> 6
    wp = p >> 6
    bq = np.uint64(q & 63)
    above_q = ~((_ONE << bq) - _ONE) & ~(_ONE << bq)  # bits of positions > q
    below_p = (_ONE << np.uint64(p & 63)) - _ONE  # bits of positions < p in word wp
    if wq == wp:
        return np.int64(_popcount(bits[wq] & above_q & below_p))
    d = np.int64(_popcount(bits[wq] & above_q) + _popcount(bits[wp] & below_p))
    a = wp
    b = wq + 1
    while a != b:
        if a > b:
            d += tree[a]
            a &= a - 1
        else:
            d -= tree[b]
            b &= b - 1
    return d


@kernel
def _remove_mark(bits: np.ndarray, tree: np.ndarray, q: int, wp: int) -> None:
    """Clear the mark at position q; update the materialized nodes (those of complete
    words, <= wp, the current word's index) above its word."""
    wq = q >> 6
    bits[wq] &= ~(_ONE << np.uint64(q & 63))
    j = wq + 1
    while j <= wp:
        tree[j] -= 1
        j += j & -j


@kernel
def _materialize(bits: np.ndarray, tree: np.ndarray, w: int) -> None:
    """Word w is complete: write its node (w + 1) from its popcount and its children."""
    node = w + 1
    v = np.int64(_popcount(bits[w]))
    low = node & -node
    k2 = 1
    while k2 < low:
        v += tree[node - k2]
        k2 <<= 1
    tree[node] = v


@kernel
def _dense_marks(bits: np.ndarray, tree: np.ndarray, n: int) -> None:
    """Bits and tree after a compaction: marks at positions 0..n-1, none above."""
    full = n >> 6
    for w in range(len(bits)):
        if w < full:
            bits[w] = _ALL
        elif w == full:
            bits[w] = (_ONE << np.uint64(n & 63)) - _ONE
        else:
            bits[w] = 0
    for j in range(1, full + 1):
        tree[j] = 64 * (j & -j)  # every complete word holds 64 marks


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
        q = np.int64(last[ident])
        if q < 0:
            cold += 1
            live += 1
            d = -1
        else:
            d = _marks_between(bits, tree, q, p)
            _remove_mark(bits, tree, q, wp)
            hist[d] += 1
        bits[wp] |= _ONE << np.uint64(p & 63)
        pos2id[p] = ident
        last[ident] = p
        p += 1
        if p & 63 == 0:  # word wp is complete
            _materialize(bits, tree, wp)
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
    _dense_marks(new_bits, new_tree, n)
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


def dense_rows(total_keys: int, lookups: int | None) -> bool:
    """Whether per-key state over a stream of `lookups` keys (None: not known) is an
    array over the whole row space [0, total_keys) rather than a map of the keys seen: a
    short stream in a large row space touches few of its rows, and filling 4 bytes a row
    (750 MB for Criteo Terabyte) costs more than the whole stream (at 187.8 M rows, map
    against array: 0.02-0.12 against 0.19-4.3 s at 168 K lookups, 2.4-4.4 against 8.1-8.4 s
    at 12 M, 23-28 against 15-17 s at 40 M). Either layout gives the same answers."""
    return lookups is None or total_keys <= SPARSE_ROWS_PER_KEY * lookups


def _window_size(live: int, min_window: int) -> int:
    """Positions between compactions: >= 4 x live keys (a compaction every >= 3 live), x 64."""
    size = max(4 * live, min_window, live + 1)
    return -(-size // 64) * 64


class StackDistances:
    """Resumable exact LRU stack-distance state; feed keys in trace order.

    `total_keys`: keys lie in [0, total_keys). With `direct=True` per-key state is an array
    over all keys; otherwise a hash map over the keys seen (what the SHARDS sample uses).
    `min_window` is the smallest position window (tests set it tiny to force many
    compactions; the window is a multiple of 64 positions). `initial_keys` (a power of
    two) sizes the key map (without `direct`) and the distance histogram at the start;
    both grow as keys come, so a caller holding many states that may see few keys
    starts them small (the distances are the same at any size).
    """

    def __init__(
        self,
        total_keys: int,
        *,
        direct: bool = True,
        min_window: int = DEFAULT_MIN_WINDOW,
        initial_keys: int = _INITIAL_KEYS,
    ) -> None:
        if total_keys < 0:
            raise ValueError("total_keys must be >= 0")
        if min_window < 1:
            raise ValueError("min_window must be >= 1")
        if initial_keys < 1 or initial_keys & (initial_keys - 1):
            raise ValueError("initial_keys must be a power of two")
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
            cap = int(initial_keys)
            self.last = np.full(cap, -1, dtype=self.index_dtype)
            self.map_keys = np.full(2 * cap, -1, dtype=np.int64)
            self.map_ids = np.zeros(2 * cap, dtype=self.index_dtype)
        window = _window_size(0, min(self.min_window, 2 * max(self.total_keys, 1)))
        self._allocate(window)
        self.hist = np.zeros(min(int(initial_keys), self.total_keys + 1), dtype=np.int64)
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
            if not self.make_room(code):
                raise TraceError(
                    f"lookup {int(self.sc[_S_REQ]) + 1}: key {int(keys[i])} is outside the "
                    f"row space [0, {self.total_keys}) (a row id beyond its table)"
                )

    def make_room(self, code: int) -> bool:
        """Grow what a kernel call stopped on (`code`: its window, histogram or id map
        full) so that the call can resume; False for any other code (an error)."""
        if code == _WINDOW_FULL:
            self._compact()
        elif code == _HIST_FULL:
            grown = np.zeros(min(2 * len(self.hist), self.total_keys + 1), dtype=np.int64)
            grown[: len(self.hist)] = self.hist
            self.hist = grown
        elif code == _IDS_FULL:
            self._grow_ids()
        else:
            return False
        return True

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
