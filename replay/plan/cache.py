"""The cache answers of a plan: bytes for a hit target, the hit at a budget, and the
budget's split across tables.

Inputs are LRU miss-ratio curves over the whole horizon (`replay.analysis.horizon`): one
for all tables together (a cache shared by every table, as `hbm-lru` models it) and one
per table (a cache per table, as TorchRec and FBGEMM size them with a load factor). Sizes
are rows; bytes are rows x `row_bytes` (the embedding values a cache holds).

- **Bytes for a hit target**: the smallest measured size whose hit ratio reaches the
  target (sizes 5% apart, `curve_sizes`), never interpolated: the curves have cliffs
  (at the distinct rows of a batch), and a line across one promises hits a cache of that
  size does not get. A target above the curve's largest hit (the cold misses of the
  horizon bound it) is unreachable and left out (None), never extrapolated.
- **Hit at the budget**: the hit of the largest measured size within the budget; a
  budget at least the distinct rows of the horizon holds every row touched, so the hit
  is the curve's last point and the plan flags that the budget is larger than needed.
- **Split across tables**: per-table caches of c_t rows serve table t with hit
  h_t(c_t); the split maximises sum_t n_t h_t(c_t) (n_t the table's lookups) under
  sum_t c_t <= budget, greedily on the marginal hits per row along each table's upper
  concave hull, the last segment taken in part (the optimum of the fractional problem;
  each table's hit is then read from its own curve, so what is reported is achieved, not
  a bound). No table gets more rows than it has. The load factor of table t is
  c_t / rows_t. Against it: one uniform load factor f = budget / sum_t rows_t for every
  table, the rule a TorchRec user applies by default.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from replay.analysis.mrc import MAX_SIZE_ROWS
from replay.errors import ConfigError


def hit_at(sizes_rows: np.ndarray, hits: np.ndarray, size_rows: float) -> float:
    """The curve's hit ratio at `size_rows`: that of the largest measured size not above
    it (0 below the first). Never interpolated: LRU curves of embedding traces have
    cliffs (at the distinct rows of a batch, of a few batches), and a straight line
    across one promises hits a cache of that size does not get."""
    sizes = np.asarray(sizes_rows, dtype=np.float64)
    h = np.maximum.accumulate(np.asarray(hits, dtype=np.float64))
    i = int(np.searchsorted(sizes, size_rows * (1 + 1e-12), side="right")) - 1
    return float(h[i]) if i >= 0 else 0.0


def rows_for_hit(sizes_rows: np.ndarray, hits: np.ndarray, target: float) -> float | None:
    """The smallest measured size (rows) whose hit reaches `target`, None when the curve
    never does. With sizes at most `SIZE_RATIO` apart, a cache 10% smaller falls at or
    below the previous measured size, which does not reach the target."""
    sizes = np.asarray(sizes_rows, dtype=np.float64)
    h = np.maximum.accumulate(np.asarray(hits, dtype=np.float64))
    reach = np.nonzero(h >= target)[0]
    return None if len(reach) == 0 else float(sizes[int(reach[0])])


def range_for_hit(
    sizes_rows: np.ndarray, hits: np.ndarray, errors: np.ndarray | float, target: float
) -> tuple[float | None, float | None]:
    """(low, high) rows around `rows_for_hit`'s answer, from the curve's ~95% error at
    each size (`MrcResult.point_errors`): the true smallest size reaching `target` lies
    above `low`, the largest measured size whose hit even plus its error falls short (None:
    the curve's first size might already reach it), and at or below `high`, the first
    measured size whose hit less its error reaches it (None: not within the curve). The
    band is inverted size by size, so the range is as wide as the error where the curve
    crosses the target, not its largest error anywhere."""
    sizes = np.asarray(sizes_rows, dtype=np.float64)
    h = np.asarray(hits, dtype=np.float64)
    e = np.broadcast_to(np.asarray(errors, dtype=np.float64), h.shape)
    e = np.where(np.isfinite(e), e, 0.0)
    up = np.nonzero(np.maximum.accumulate(h + e) >= target)[0]
    down = np.nonzero(np.maximum.accumulate(h - e) >= target)[0]
    low = None if not len(up) or up[0] == 0 else float(sizes[int(up[0]) - 1])
    if not len(up):
        low = float(sizes[-1]) if len(sizes) else None
    high = None if not len(down) else float(sizes[int(down[0])])
    return low, high


SIZE_RATIO = 1.05  # consecutive curve sizes: a step of 5%, finer than "10% smaller"


def curve_sizes(top_rows: int, smallest: int = 1) -> np.ndarray:
    """Cache sizes (rows) from `smallest` to `top_rows`, each at most `SIZE_RATIO` times
    the one before (a sampled curve starts at its resolution, `smallest`)."""
    if int(top_rows) > MAX_SIZE_ROWS:
        # the curve code's limit, said in the user's terms: plan has no --sizes option (a
        # workload's tables of up to 2^53 rows each, or a trace's, can add up to 2^63 - 1)
        raise ConfigError(
            f"the workload's or trace's tables hold {int(top_rows):,} rows in all: a plan's "
            f"cache curves take at most 2^62 - 1 ({MAX_SIZE_ROWS:,}); plan fewer or smaller "
            "tables"
        )
    lo = max(int(smallest), 1)
    top = max(int(top_rows), lo)
    n = int(np.ceil(np.log(top / lo) / np.log(SIZE_RATIO))) + 1 if top > lo else 1
    xs = np.rint(np.geomspace(lo, top, max(n, 2)))
    # float64 rounds a top above 2^53 to a neighbour, 2^62 - 1 up to 2^62 (past what the
    # curves take): the sizes below it come from floats, `top` itself stays exact
    xs = xs[xs < float(top)].astype(np.int64)
    return np.unique(np.concatenate([[lo], xs, [top]]).astype(np.int64))


@dataclass(frozen=True)
class TableShare:
    table: str
    table_rows: int
    rows: float  # cache rows given to the table
    load_factor: float  # rows / table_rows
    hit: float  # the table's hit ratio with that cache


@dataclass(frozen=True)
class Split:
    tables: tuple[TableShare, ...]
    split_hit: float  # lookup-weighted hit of the split
    uniform_load_factor: float
    uniform_hit: float  # lookup-weighted hit of one load factor for every table
    uniform_hits: tuple[float, ...] = ()  # each table's hit at that load factor


def _upper_hull(s: np.ndarray, h: np.ndarray) -> list[int]:
    """Indices of the upper concave hull of the points (s, h), s increasing, from the
    first point to the highest one: the segments a greedy allocation may take."""
    top = int(np.argmax(h))
    hull: list[int] = []
    for i in range(top + 1):
        while len(hull) >= 2:
            a, b = hull[-2], hull[-1]
            # b lies on or below the chord a -> i: not a vertex of the upper hull
            if (h[b] - h[a]) * (s[i] - s[a]) <= (h[i] - h[a]) * (s[b] - s[a]):
                hull.pop()
            else:
                break
        hull.append(i)
    return hull


def uniform_load_factor(budget_rows: float, table_rows: Sequence[int]) -> float:
    """One load factor for every table: the budget over all the tables' rows, at most 1."""
    return min(budget_rows / max(float(sum(int(r) for r in table_rows)), 1.0), 1.0)


def split_budget(
    names: Sequence[str],
    table_rows: Sequence[int],
    lookups: Sequence[float],
    curves: Sequence[tuple[np.ndarray, np.ndarray]],
    budget_rows: float,
) -> Split:
    """The budget's split across per-table caches and the uniform load factor's hit for
    comparison. `curves[t]` = (sizes in rows, hit ratios) of table t alone; `lookups[t]`
    its lookups over the horizon.

    Greedy on the marginal hits per row along each table's upper concave hull (a sampled
    or cliff-shaped curve is not concave; on the hull the greedy is the optimum of the
    fractional problem), the last segment taken in part; each table's hit is then read
    from its own curve at the rows it got, never from the hull."""
    n = np.asarray(lookups, dtype=np.float64)
    total = float(n.sum()) or 1.0
    points = []
    for t, (sizes, hits) in enumerate(curves):
        cap = float(max(int(table_rows[t]), 1))
        sz = np.minimum(np.asarray(sizes, dtype=np.float64), cap)  # no cache beyond the table
        hh = np.maximum.accumulate(np.asarray(hits, dtype=np.float64))
        sz, first = np.unique(sz, return_index=True)
        hh = np.maximum.reduceat(hh, first) if len(hh) else hh
        s_t = np.concatenate([[0.0], sz])
        h_t = np.concatenate([[0.0], hh])
        points.append((s_t, h_t, _upper_hull(s_t, h_t)))
    segments = []  # (gain per row, table, from size, to size)
    for t, (s_t, h_t, hull) in enumerate(points):
        for a, b in itertools.pairwise(hull):
            step = s_t[b] - s_t[a]
            if step > 0 and h_t[b] > h_t[a]:
                segments.append((n[t] * (h_t[b] - h_t[a]) / step, t, s_t[a], s_t[b]))
    # slopes fall along each hull, so taking segments by slope keeps each table's in order
    segments.sort(key=lambda seg: (-seg[0], seg[1], seg[2]))
    given = [0.0] * len(curves)
    left = float(budget_rows)
    for _, t, lo, hi in segments:
        if left <= 0:
            break
        take = min(hi - lo, left)
        given[t] = lo + take
        left -= take
    shares = []
    hits_total = 0.0
    for t, (s_t, h_t, _) in enumerate(points):
        hit = hit_at(s_t[1:], h_t[1:], given[t]) if given[t] > 0 else 0.0
        hits_total += n[t] * hit
        shares.append(
            TableShare(
                table=names[t],
                table_rows=int(table_rows[t]),
                rows=given[t],
                load_factor=given[t] / max(int(table_rows[t]), 1),
                hit=hit,
            )
        )
    f = uniform_load_factor(budget_rows, table_rows)
    # per-table caches of floor(f x rows) rows (a fraction of a row holds nothing)
    uniform = tuple(
        hit_at(curves[t][0], curves[t][1], f * int(table_rows[t])) for t in range(len(curves))
    )
    weighted = float(sum(n[t] * h for t, h in enumerate(uniform)))
    return Split(tuple(shares), hits_total / total, f, weighted / total, uniform)


__all__ = [
    "SIZE_RATIO",
    "Split",
    "TableShare",
    "curve_sizes",
    "hit_at",
    "range_for_hit",
    "rows_for_hit",
    "split_budget",
    "uniform_load_factor",
]
