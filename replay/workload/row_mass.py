"""How a table's lookups fall on its rows: the lookup mass of any row range [a, b).

Placement. Both the automatic sharder (`replay.engine.sharder`, fed by
`replay.engine.placement`) and the cluster plan's per-GPU lookups
(`replay.plan.rank_curves`) need the share of a table's lookups that a block of rows
receives. It is a property of the workload (the generator's pmf and row permutation, or
the keys a trace holds), so it lives in `workload/`, below both; it is pure (arrays in,
arrays out).

The model (`RowMass`). A table of `rows` rows carries

- the exact mass of a set of *top* rows (their row ids and masses), and
- the mass of every other row in `bins` equal bins of the rows (bin g holds rows
  [g rows // G, (g + 1) rows // G)), spread uniformly over the bin's rows that are not
  top rows.

The mass of [a, b) is the top rows' mass in it plus, per bin, the bin's mass times the
fraction of the bin's non-top rows inside [a, b). The mass is in any unit (lookups,
probability); shares divide by the total.

Sources of the mass:

- `from_spec(spec, t)`: the generator's own pmf (`replay.workload.sampler`: rank k
  weighs k^-alpha, the hot ranks their shares, the normaliser
  `replay.workload.sampled._hot_weights`'s) mapped to rows by the table's keyed
  permutation. The first `SHARE_HEAD_RANKS` ranks are the top rows, exactly; the rest of
  the mass is one bin, spread over the other rows (the keyed permutation scatters the
  tail ranks evenly: a block's tail share is a sum over many rows of similar weight).
  Exact for a table of at most `SHARE_HEAD_RANKS` rows. ASSUMPTION: the table's lookups
  all draw from that pmf, true without drift (reuse repeats earlier draws, so it keeps the
  marginal law); `from_spec` and `block_shares` weigh ranks (k + q)^-alpha with the
  table's `rank_offset` q, while `spec_mass` (the sharder's input) still returns None for
  a table with drift or a `rank_offset` (the caller falls back to rows).
  Cost: the head's shares depend only on the law (rows, alpha, hot shares, offset), so
  they are built once per law and shared read-only (`_law`); each table maps its head
  ranks to rows, radix-sorts them with their shares and sums them in one kernel
  (`_spec_top`): meta-2021's 856 tables of 4 laws take ~2 s of CPU on one thread, ~7.3 s
  with a table's own weights and numpy's argsort (the same arrays).
- `from_lookups(local_rows, rows)`: counted from a trace's keys (table-local row ids):
  the `top` most looked-up rows exactly (ties: lower row), the other lookups counted per
  1 / `bins` of the table (default 4,096 of each: a block of 1 / 64 of a table spans 64
  bins). Rows no lookup reached weigh nothing beyond their bin's spread.

Splitting (`split`): a contiguous partition of the rows into at most k blocks. The greedy
left-to-right cut at cap C makes each block as long as its mass stays <= C and its rows
<= `max_rows`, but at least one row, so a row heavier than C is a block of its own; `split`
takes the smallest C (bisection between 0 and total / k + the hottest row, a cap that is
always enough) whose cut needs at most k blocks. Its largest block, max(C, the hottest
row), is the smallest any partition into k blocks has (the linear-partition bottleneck:
every block of a cut at a smaller cap than the optimum's would fit), and the blocks
beside a hot row share the rest of the mass evenly instead of stopping at the hot row's
mass. Each cut is a bisection on the row: one numba kernel, O(k log rows) per probe.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from replay._intrinsics import ix
from replay._jit import kernel
from replay.workload import sampler
from replay.workload.sampler import permute_index

SHARE_HEAD_RANKS = 1 << 18  # a spec table's first ranks mapped to their rows exactly
COUNT_BINS = 4096  # a counted table's bins (1 / 4096 of its rows each)
COUNT_TOP = 4096  # ... and its exactly counted top rows
SPLIT_PROBES = 48  # bisection steps on the cap (relative precision ~2^-48)


@dataclass(frozen=True, eq=False)
class RowMass:
    """A table's lookup mass over its rows (module docstring). `top_rows` ascending and
    distinct; `bin_mass[g]`: the mass of bin g's non-top rows."""

    rows: int
    top_rows: np.ndarray
    top_mass: np.ndarray
    bin_mass: np.ndarray
    _index: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        top = np.ascontiguousarray(self.top_rows, dtype=np.int64)
        self._finish(top, self.top_mass, self.bin_mass, None)

    def _finish(
        self, top: np.ndarray, top_mass: Any, bin_mass: Any, top_cum: np.ndarray | None
    ) -> None:
        """The checks and the index. `top_cum` given where the caller built the top rows
        sorted and summed them (`_sorted`): the O(n) order check skipped, the sum taken."""
        rows = int(self.rows)
        tmass = np.ascontiguousarray(top_mass, dtype=np.float64)
        bmass = np.ascontiguousarray(bin_mass, dtype=np.float64)
        if len(top) != len(tmass) or len(bmass) < 1:
            raise ValueError("RowMass: top_rows and top_mass differ in length, or no bins")
        unsorted = top_cum is None and len(top) > 1 and bool((np.diff(top) <= 0).any())
        if len(top) and (top[0] < 0 or top[-1] >= rows or unsorted):
            raise ValueError("RowMass: top rows must be ascending, distinct and in the table")
        edges = (np.arange(len(bmass) + 1, dtype=np.int64) * rows) // len(bmass)
        top_at_edge = np.searchsorted(top, edges).astype(np.int64)
        free = np.diff(edges) - np.diff(top_at_edge)  # non-top rows per bin
        bmass = np.where(free > 0, bmass, 0.0)  # a bin of top rows only has no spread mass
        object.__setattr__(self, "top_rows", top)
        object.__setattr__(self, "top_mass", tmass)
        object.__setattr__(self, "bin_mass", bmass)
        if top_cum is None:
            top_cum = np.concatenate([[0.0], np.cumsum(tmass)])
        self._index.update(
            edges=edges,
            top_at_edge=top_at_edge,
            free=free.astype(np.int64),
            top_cum=top_cum,
            bin_cum=np.concatenate([[0.0], np.cumsum(bmass)]),
        )

    @classmethod
    def _sorted(
        cls, rows: int, top: np.ndarray, top_mass: np.ndarray, bin_mass: np.ndarray,
        top_cum: np.ndarray,
    ) -> RowMass:  # fmt: skip
        """A RowMass whose top rows are ascending and distinct by construction (`from_spec`'s
        radix sort of a permutation's images): no O(n) check, the cumsum taken as given."""
        self = object.__new__(cls)
        object.__setattr__(self, "rows", int(rows))
        object.__setattr__(self, "_index", {})
        self._finish(top, top_mass, bin_mass, top_cum)
        return self

    @property
    def total(self) -> float:
        return float(self._index["top_cum"][-1] + self._index["bin_cum"][-1])

    def _args(self) -> tuple[Any, ...]:
        x = self._index
        return (self.top_rows, x["top_cum"], x["edges"], x["top_at_edge"], x["free"],
                self.bin_mass, x["bin_cum"])  # fmt: skip

    def cumulative(self, x: np.ndarray | int) -> np.ndarray:
        """The mass of rows [0, x) for each x (0 <= x <= rows)."""
        xs = np.clip(np.atleast_1d(np.asarray(x, dtype=np.int64)), 0, self.rows)
        out = np.empty(len(xs), dtype=np.float64)
        _cum_many(xs, *self._args(), out)
        return out

    def mass(self, a: np.ndarray | int, b: np.ndarray | int) -> np.ndarray:
        """The mass of rows [a, b), elementwise."""
        return self.cumulative(b) - self.cumulative(a)

    def block_shares(self, starts: np.ndarray) -> np.ndarray:
        """The share of the mass in each block of `starts` (ascending, the first at 0, the
        last block ending at `rows`)."""
        starts = np.asarray(starts, dtype=np.int64)
        cum = self.cumulative(np.append(starts, self.rows))
        mass = np.diff(cum)
        return mass / max(float(mass.sum()), 1e-300)

    def max_row_mass(self) -> float:
        """The mass of the hottest single row."""
        x = self._index
        spread = np.divide(self.bin_mass, x["free"], out=np.zeros(len(self.bin_mass)),
                           where=x["free"] > 0)  # fmt: skip
        top = float(self.top_mass.max()) if len(self.top_mass) else 0.0
        return max(top, float(spread.max()) if len(spread) else 0.0)

    def split(self, k: int, max_rows: int | None = None) -> list[tuple[int, int]]:
        """At most `k` contiguous blocks [a, b) covering the rows, none empty, none over
        `max_rows` rows, the largest of the smallest mass possible, the rows beside hot
        rows in blocks of about equal mass (module docstring).
        k must be at least ceil(rows / max_rows)."""
        rows = int(self.rows)
        if rows == 0:
            return [(0, 0)]
        k = max(1, min(int(k), rows))
        cap_rows = rows if max_rows is None else max(1, min(int(max_rows), rows))
        if -(-rows // cap_rows) > k:
            raise ValueError(f"RowMass.split: {k} blocks of at most {cap_rows} rows miss rows")
        # room for every block a greedy cut can make (mass-bound and row-bound ones)
        cuts = np.zeros(k + -(-rows // cap_rows) + 2, dtype=np.int64)
        n = _split(rows, k, cap_rows, self.total, self.max_row_mass(), *self._args(), cuts)
        if n > k:  # the row cap binds before the mass does: blocks of the cap
            return [(a, min(a + cap_rows, rows)) for a in range(0, rows, cap_rows)]
        return [(int(cuts[i]), int(cuts[i + 1])) for i in range(n)]

    @classmethod
    def uniform(cls, rows: int) -> RowMass:
        """Every row the same mass (the sharder's model without a measurement)."""
        return cls(int(rows), np.empty(0, np.int64), np.empty(0), np.ones(1))

    @classmethod
    def from_lookups(
        cls, local_rows: np.ndarray, rows: int, *, bins: int = COUNT_BINS, top: int = COUNT_TOP
    ) -> RowMass:
        """Counted from lookups' table-local row ids: the `top` most looked-up rows exactly
        (ties: the lower row), the rest per bin (module docstring)."""
        rows = int(rows)
        bins = max(1, min(int(bins), rows))
        ids, counts = np.unique(np.asarray(local_rows, dtype=np.int64), return_counts=True)
        if len(ids) and (ids[0] < 0 or ids[-1] >= rows):
            raise ValueError("RowMass.from_lookups: a row id outside the table")
        order = np.argsort(-counts, kind="stable")[: max(0, int(top))]
        keep = np.sort(order)
        rest = np.ones(len(ids), dtype=bool)
        rest[keep] = False
        edges = (np.arange(bins + 1, dtype=np.int64) * rows) // bins  # as __post_init__'s
        bin_of = np.searchsorted(edges, ids[rest], side="right") - 1
        bin_mass = np.bincount(bin_of, weights=counts[rest].astype(np.float64), minlength=bins)
        return cls(rows, ids[keep], counts[keep].astype(np.float64), bin_mass[:bins])

    @classmethod
    def from_spec(cls, spec: Any, t: int, *, head_ranks: int = SHARE_HEAD_RANKS) -> RowMass:
        """The generator's pmf of table t of `spec` over its rows, its first `head_ranks`
        ranks exact (module docstring). Probability units (the total is 1 up to the
        normaliser's rounding)."""
        table = spec.tables[t]
        rows = int(table.rows)
        q = float(getattr(table, "rank_offset", 0.0))
        head = min(rows, int(head_ranks))
        share, tail = _law(rows, float(table.alpha), tuple(table.hot_shares), q, head)
        top = np.empty(head, dtype=np.int64)
        top_mass = np.empty(head, dtype=np.float64)
        top_cum = np.empty(head + 1, dtype=np.float64)
        bits = sampler.permutation_bits(rows)
        keys = sampler.feistel_round_keys(sampler.root_key(spec.seed), t)
        contiguous = table.mapping == "contiguous"
        if not _spec_top(rows, head, contiguous, bits, keys, share, top, top_mass, top_cum):
            # rows too wide to pack with a rank: numpy's sort (the rows are distinct, so any
            # sort gives the one order)
            alpha_free = np.empty(0, dtype=np.float64)
            _head_rows(rows, head, contiguous, bits, keys, 0.0, alpha_free, top, top_mass, 0.0)
            order = np.argsort(top)
            top = top[order]
            top_mass = share[order]
            top_cum[0] = 0.0
            np.cumsum(top_mass, out=top_cum[1:])
        return cls._sorted(rows, top, top_mass, np.array([tail]), top_cum)


# A law's head shares, shared read-only by every table of that law (meta-2021: 856 tables,
# 4 laws): (rows, alpha, hot shares, rank offset, head) -> (shares, tail share).
_LAWS: OrderedDict[tuple[Any, ...], tuple[np.ndarray, float]] = OrderedDict()
_LAWS_KEPT = 8  # 2 MB each at 2^18 head ranks
_LAWS_LOCK = threading.Lock()


def _law(
    rows: int, alpha: float, hot_shares: tuple[float, ...], q: float, head: int
) -> tuple[np.ndarray, float]:
    """Ranks 0 .. head - 1's shares of the pmf (weight / normaliser, read-only) and the
    share of the ranks after them, computed once per law: the generator's weights from the
    kernel that maps ranks to rows (the same code, so the same bits), its normaliser from
    `replay.workload.sampled._hot_weights`."""
    key = (rows, alpha, hot_shares, q, head)
    with _LAWS_LOCK:  # a law is ~5 ms: the threads of one law wait for the first
        got = _LAWS.get(key)
        if got is not None:
            _LAWS.move_to_end(key)
            return got
        from replay.workload.sampled import _hot_weights  # the generator's setup: lazily

        hot, norm = _hot_weights(rows, alpha, hot_shares, q)
        unused = np.empty(head, dtype=np.int64)
        weight = np.empty(head, dtype=np.float64)
        _head_rows(rows, head, True, 2, np.zeros(4, np.uint64), alpha, hot, unused, weight, q)
        tail = max(norm - float(weight.sum()), 0.0) if rows > head else 0.0
        share = weight / norm
        share.flags.writeable = False
        got = (share, tail / norm)
        _LAWS[key] = got
        if len(_LAWS) > _LAWS_KEPT:
            _LAWS.popitem(last=False)
        return got


def spec_mass(spec: Any, t: int) -> RowMass | None:
    """`RowMass.from_spec` for a table whose lookups all draw from its pmf; None for a
    table with drift or a Zipf-Mandelbrot offset (module docstring)."""
    table = spec.tables[t]
    if float(table.drift) != 0.0 or float(getattr(table, "rank_offset", 0.0)) != 0.0:
        return None
    return RowMass.from_spec(spec, t)


def block_shares(spec: Any, t: int, starts: np.ndarray) -> np.ndarray:
    """The probability a lookup of table t falls in each row block (blocks from `starts`,
    ascending, the first at 0), from the generator's pmf: `RowMass.from_spec`'s shares.
    For a table without reuse or drift (what a sampled horizon has), whose every lookup
    draws from that pmf; exact for a table of at most `SHARE_HEAD_RANKS` rows."""
    return RowMass.from_spec(spec, t).block_shares(starts)


@kernel(inline="always")
def _cum(
    x: int, top: np.ndarray, top_cum: np.ndarray, edges: np.ndarray, top_at_edge: np.ndarray,
    free: np.ndarray, bin_mass: np.ndarray, bin_cum: np.ndarray,
) -> float:  # fmt: skip
    """The mass of rows [0, x)."""
    i = np.searchsorted(top, x)  # top rows below x
    g: np.intp | int = np.searchsorted(edges, x, side="right") - 1
    nb = len(bin_mass)
    if g >= nb:
        g = nb - 1
    out = top_cum[ix(i)] + bin_cum[ix(g)]
    f = free[ix(g)]
    if f > 0:
        part = (x - edges[ix(g)]) - (i - top_at_edge[ix(g)])
        out += bin_mass[ix(g)] * part / f
    return out


@kernel
def _cum_many(
    xs: np.ndarray, top: np.ndarray, top_cum: np.ndarray, edges: np.ndarray,
    top_at_edge: np.ndarray, free: np.ndarray, bin_mass: np.ndarray, bin_cum: np.ndarray,
    out: np.ndarray,
) -> None:  # fmt: skip
    for j in range(len(xs)):
        out[j] = _cum(xs[j], top, top_cum, edges, top_at_edge, free, bin_mass, bin_cum)


@kernel
def _greedy(
    rows: int, k: int, cap_rows: int, cap: float, top: np.ndarray, top_cum: np.ndarray,
    edges: np.ndarray, top_at_edge: np.ndarray, free: np.ndarray, bin_mass: np.ndarray,
    bin_cum: np.ndarray, cuts: np.ndarray,
) -> int:  # fmt: skip
    """Cut left to right, each block the longest of mass <= cap and rows <= cap_rows (at
    least one row); the number of blocks, or k + 1 once more than k are needed. cuts[0..n]
    the boundaries while n <= k."""
    a = 0
    n = 0
    base = 0.0
    cuts[0] = 0
    while a < rows:
        if n == k:
            return k + 1  # more than k blocks needed
        lo = a + 1  # the block [a, lo) always taken
        hi = min(a + cap_rows, rows)
        limit = base + cap
        while lo < hi:  # the largest y in [lo, hi] with cum(y) <= limit
            mid = (lo + hi + 1) // 2
            if _cum(mid, top, top_cum, edges, top_at_edge, free, bin_mass, bin_cum) <= limit:
                lo = mid
            else:
                hi = mid - 1
        n += 1
        cuts[n] = lo
        a = lo
        base = _cum(a, top, top_cum, edges, top_at_edge, free, bin_mass, bin_cum)
    return n


@kernel
def _split(
    rows: int, k: int, cap_rows: int, total: float, hottest: float, top: np.ndarray,
    top_cum: np.ndarray, edges: np.ndarray, top_at_edge: np.ndarray, free: np.ndarray,
    bin_mass: np.ndarray, bin_cum: np.ndarray, cuts: np.ndarray,
) -> int:  # fmt: skip
    """The bottleneck partition: the smallest cap whose greedy cut needs at most k blocks
    (bisection between 0 and total / k + the hottest row, always enough), then that cut;
    the number of blocks (cuts[0..n])."""
    lo = 0.0
    hi = total / k + hottest + 1e-12 * max(total, 1e-300)
    for _ in range(SPLIT_PROBES):
        if hi - lo <= 1e-9 * hi:
            break
        mid = 0.5 * (lo + hi)
        if _greedy(rows, k, cap_rows, mid, top, top_cum, edges, top_at_edge, free, bin_mass,
                   bin_cum, cuts) <= k:  # fmt: skip
            hi = mid
        else:
            lo = mid
    return _greedy(rows, k, cap_rows, hi, top, top_cum, edges, top_at_edge, free, bin_mass,
                   bin_cum, cuts)  # fmt: skip


@kernel
def _head_rows(
    rows: int, head: int, contiguous: bool, bits: int, keys: np.ndarray, alpha: float,
    hot_weight: np.ndarray, out_row: np.ndarray, out_weight: np.ndarray, q: float = 0.0,
) -> None:  # fmt: skip
    """The rows of ranks 0 .. head - 1 and their weights ((k + q)^-alpha, hot ranks their own),
    as the generator maps and weighs them (`replay.workload.sampler`)."""
    for p in range(head):
        out_row[p] = p if contiguous else permute_index(p, rows, bits, keys)
        out_weight[p] = 1.0 if alpha == 0.0 else math.exp(-alpha * math.log(p + 1.0 + q))
        if p < len(hot_weight):
            out_weight[p] = hot_weight[p]


@kernel
def _spec_top(
    rows: int, head: int, contiguous: bool, bits: int, keys: np.ndarray, share: np.ndarray,
    top: np.ndarray, top_mass: np.ndarray, top_cum: np.ndarray,
) -> bool:  # fmt: skip
    """Ranks 0 .. head - 1's rows (the generator's map, as `_head_rows`) ascending in `top`,
    each rank's `share` beside its row in `top_mass`, their running sum from 0 in
    `top_cum` (sequential, as numpy's cumsum: the same bits); False, nothing written,
    where a row and a rank do not fit one int64 (rows over ~2^45: the caller sorts).

    The rows are distinct. Contiguous: rank p is row p. A whole table (head = rows): the
    rows are all of them, so rank p's share goes to slot permute(p), no sort. Otherwise
    a least-significant-digit radix sort of row << rank_bits | rank by the row's bits
    (O(head) a pass, a pass per 12 bits: ~2 ms for 2^18 ranks, np.argsort ~5)."""
    rank_bits = 1
    while (1 << rank_bits) < head:
        rank_bits += 1
    if not contiguous and head < rows and bits + rank_bits > 63:
        return False
    if contiguous:
        for p in range(head):
            top[p] = p
            top_mass[p] = share[p]
    elif head == rows:
        for p in range(head):
            top[p] = p
            top_mass[permute_index(p, rows, bits, keys)] = share[p]
    elif head > 0:
        passes = (bits + 11) // 12
        width = (bits + passes - 1) // passes
        mask = (1 << width) - 1
        hist = np.zeros((passes, 1 << width), dtype=np.int64)
        a = np.empty(head, dtype=np.int64)
        b = np.empty(head, dtype=np.int64)
        for p in range(head):
            v = (permute_index(p, rows, bits, keys) << rank_bits) | p
            a[p] = v
            for d in range(passes):
                hist[d, (v >> (rank_bits + d * width)) & mask] += 1
        for d in range(passes):
            h = hist[d]
            start = 0
            for x in range(1 << width):  # each digit's first slot
                c = h[x]
                h[x] = start
                start += c
            shift = rank_bits + d * width
            for i in range(head):  # stable: equal digits keep the last pass's order
                v = a[i]
                x = (v >> shift) & mask
                j = h[x]
                h[x] = j + 1
                b[j] = v
            a, b = b, a
        low = (1 << rank_bits) - 1
        for i in range(head):
            v = a[i]
            top[i] = v >> rank_bits
            top_mass[i] = share[v & low]
    s = 0.0
    top_cum[0] = 0.0
    for i in range(head):
        s += top_mass[i]
        top_cum[i + 1] = s
    return True


__all__ = [
    "COUNT_BINS",
    "COUNT_TOP",
    "SHARE_HEAD_RANKS",
    "RowMass",
    "block_shares",
    "spec_mass",
]
