"""Per-GPU LRU miss-ratio curves of a sharded cluster, all GPUs from one pass.

Placement. `replay plan` for a cluster (issue 41, item 4): each GPU has its own cache,
which sees only the lookups of the shards it holds, so the plan needs one LRU curve per
GPU, not the one curve of a cache holding every table (`replay.analysis.horizon`). This
module reads the same horizon `make_plan` reads (a `GeneratedTrace` or trace at R = 1, the
spatially sampled workload `replay.workload.sampled` at R < 1) and a `Placement`
(`replay.system.sharding`); it is pure (arrays in, a `RankCurves` out).

One pass. Each batch range of `replay.trace.stream.iter_batch_ranges` is routed once, by
one numba kernel (`_route`, two passes over the range's keys: count, then write), into
one contiguous sub-stream per rank in trace order; each rank's sub-stream then goes to
that rank's own state. Never one pass over the horizon per GPU.

Routing, TorchRec's semantics as the cluster replay has them (`replay.engine.cluster`):

- table-wise, row-wise, table-row-wise: a lookup goes to the rank holding its row's block
  (row-wise blocks of ceil(rows / len(ranks)) rows in rank order, or the plan's explicit
  blocks);
- column-wise: a lookup goes to every column block of its table (every block's rank looks
  the row up for its columns; a rank holding two blocks of a table looks it up twice, in
  two caches' worth of keys, as the engine does);
- data-parallel: a lookup goes to one rank, the rank of its sample in the engine (sample
  s of B owned by rank s W // B). A sampled stream no longer says which sample a lookup
  came from (its positions are not the full stream's), so here the rank is a hash of the
  lookup's (batch, position in the batch), mixed by SplitMix64 and spread evenly over the
  W ranks by a multiply-shift (`_dp_rank`). ASSUMPTION, equivalent in distribution: the
  samples of a batch are i.i.d. and the sample-to-rank split does not depend on the keys,
  so the lookups of a table that reach rank r are a 1 / W thinning of the table's stream
  independent of its keys either way. What differs: the engine's split is exactly
  even per batch (B / W samples a rank) and keeps a bag's `pooling` lookups together;
  the hash's split is Binomial(n, 1 / W) per rank (the tests bound it).

Rank-local keys. Each rank's state is over its own rows: its shards in `Placement.shards`
order laid end to end (a row block of [a, b) takes b - a local keys, a column block or a
data-parallel replica its table's rows), the numbering of the cluster replay. At R = 1 a
rank's state is `replay.analysis.stack.StackDistances` (exact, Mattson et al. 1970),
indexed directly by local key while the ranks' rows add up to at most `DIRECT_MAX_ROWS`
(4 B a row), else a hash map over the keys seen.

Sampled horizons (R < 1). SHARDS (Waldspurger et al., FAST 2015; `replay.analysis.shards`)
keeps a row when the hash of its *global* flat key falls below T = R 2^24. Routing sends
every lookup of a row to the same rank(s), so the sampled sub-stream a rank receives is
exactly the SHARDS sample, at the same rate and by the same hash, of the rank's own full
stream: the rule is per key, and the rank-local renumbering is one-to-one within a shard
(a data-parallel thinning is independent of the key, so it commutes with the sampling).
Each rank's curve is therefore SHARDS_adj at rate R over its own sub-stream, with its own
random-group error estimate (K = 8 hash groups from bits 24-26 of the same global hash),
exactly as `horizon_mrc` estimates the whole stream:

    miss_r(C) ~= (cold_s + #{rank r's sampled requests with distance_s >= C R}) / (N_r R),

and `error_bound[r]` the ~95% bound on the largest error over the resolved sizes
(`ShardsSampler.estimate`).

Cold misses. Where Che's correction applies (`replay.analysis.shards_model`: every shard
of the GPU a whole table), a GPU's curve also replaces its sample's distinct rows D_s (a
cold miss each, at every size: the plateau of SHARDS_adj's curve is D_s / (N_r R)) by
the count they are expected to be given the rows sampled, E[D_s] = sum over the sampled
rows of 1 - exp(-π_i N_r) (`shards_model.rank_expected_distinct`; π_i a row's share of
the GPU's lookups): the curve gains (E[D_s] - D_s) / (N_r R), and each random group its
own, with its rows and at R / K. The term has mean zero whichever rows were sampled (the
lookups of a workload spec without reuse or drift are independent draws, Che's own
assumption), so the curve stays unbiased; what it removes is the luck of which sampled
rows the run happened to touch, which dominated a GPU's error where its target sits near
the plateau. Measured on the 8-GPU plan of Criteo Terabyte (20,000 batches of 2,048,
auto sharding) over 20 seeds at R = 2^-12: at the hit of 0.95 the worst GPU's error
(a 38.5 M- and a 3 M-row table, 4.5 M rows for 0.95 of a 0.952 plateau) fell from a
standard deviation of 0.00088 to 0.00033, its stated one from 0.00107 to 0.00031 on
average, and its range's high / low from 1.71 to 1.22 at the median
(`tests/test_plan_ranges.py`, bench).

N_r, the rank's lookups in the full stream: each table's full lookups N_t (the workload
spec's batches x batch size x pooling; without a spec the table's sampled lookups / R)
go to the rank that holds the table, to each of its column blocks, 1 / W of them to
each rank for a data-parallel table, and, for a row-split table, in proportion to the
probability mass of each rank's block under the generator's pmf (the workload spec's
power law, hot shares and row permutation: `replay.workload.row_mass.block_shares`);
without a spec, in the proportion of the table's sampled lookups routed to each rank (a
ratio estimator, N_t s_tr / s_t). So the ranks' lookups add up to the routed full-stream
lookups exactly. Distinct rows: sampled distinct / R.

Resolution. A sample at rate R resolves sizes of at least `resolution_rows` =
16 (1 - R) / R rows (`replay.analysis.shards.resolution_rows`); there is no exact head per
rank (the one-GPU curve's `replay.analysis.head`), so at R < 1 sizes below the resolution
are not measured: their miss ratio is NaN, and `hit_at` / `rows_for_hit` read only the
resolved sizes (as `replay.plan.cache` reads a curve: nothing below its first size).
LIMITATION: per-GPU caches for low hit targets can be smaller than the resolution
(65,520 rows at R = 2^-12); a plan that needs them needs a higher rate or a per-rank head.

Memory: per rank, the SHARDS states over its sampled keys (9 stack states, ~30 B a
sampled key each, windows of at least `MIN_WINDOW` positions) or the exact state over
its rows; per range, the routed keys (8 B + 1 B a routed lookup) and a count matrix of
tables x ranks. Time: one routing kernel pass and one stack-kernel pass per routed key.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from replay._intrinsics import ix
from replay._jit import kernel
from replay._machine import usable_cores
from replay._threads import worker_pool
from replay.analysis.horizon import _sample_groups, full_lookups, source_sample_rate
from replay.analysis.shards import ShardsSampler
from replay.analysis.stack import StackDistances
from replay.errors import ConfigError
from replay.plan import cache
from replay.system.sharding import COLUMN_SPLIT, DATA_PARALLEL, GRID, TABLE_WISE, Placement
from replay.trace.keys import last_at_most, table_of, table_offsets
from replay.trace.stream import iter_batch_ranges
from replay.workload.row_mass import RowMass
from replay.workload.sampler import mix64
from replay.workload.spec import WorkloadSpec

DIRECT_MAX_ROWS = 1 << 27  # exact states indexed by local key up to 512 MB (int32) in all
MIN_WINDOW = 1 << 12  # a stack state's smallest position window (64 states and more)
DP_SALT = 0x3C6EF372FE94F82B  # the data-parallel rank hash's salt (fixed: deterministic)

# table kinds in the routing kernel
_ROWS, _CW, _DP, _GRID = 0, 1, 2, 3


@dataclass(frozen=True, eq=False)
class RankCurves:
    """Each GPU's LRU miss-ratio curve at the same per-GPU sizes (rows).

    `miss_ratio[r, i]`: rank r's miss ratio with a cache of `sizes[i]` rows (NaN below
    `resolution_rows` at R < 1); `lookups[r]`: its lookups in the full stream; `distinct[r]`
    its distinct rows (estimated at R < 1); `error_bound[r]`: ~95% bound on the largest
    error of its curve over the resolved sizes (0 when exact); `sampled_lookups[r]`: the
    routed lookups its state read."""

    sizes: np.ndarray  # int64 [n], ascending
    miss_ratio: np.ndarray  # float64 [world, n]
    lookups: np.ndarray  # int64 [world]
    distinct: np.ndarray  # int64 [world]
    exact: bool
    error_bound: np.ndarray  # float64 [world]
    method: str
    sample_rate: float = 1.0
    resolution_rows: int = 1
    sampled_lookups: np.ndarray | None = None  # int64 [world]
    # ~95% error of each rank's curve at each size (NaN unresolved; None: exact)
    point_errors: np.ndarray | None = None  # float64 [world, n]

    @property
    def world(self) -> int:
        return int(self.miss_ratio.shape[0])

    def _resolved(self) -> np.ndarray:
        return np.asarray(self.sizes >= self.resolution_rows)

    def hit_at(self, rows: float) -> np.ndarray:
        """float64 [world]: each rank's hit ratio with a cache of `rows` rows, read as
        `replay.plan.cache.hit_at` reads a curve (the largest resolved size not above it,
        never interpolated; 0 below the first)."""
        keep = self._resolved()
        sizes = self.sizes[keep]
        return np.array(
            [cache.hit_at(sizes, 1.0 - m[keep], rows) for m in self.miss_ratio],
            dtype=np.float64,
        )

    def rows_for_hit(self, target: float) -> list[float | None]:
        """Each rank's smallest resolved size (rows) whose hit reaches `target`, None
        where its curve never does (`replay.plan.cache.rows_for_hit`)."""
        keep = self._resolved()
        sizes = self.sizes[keep]
        return [cache.rows_for_hit(sizes, 1.0 - m[keep], target) for m in self.miss_ratio]

    def range_for_hit(self, target: float) -> list[tuple[float | None, float | None]]:
        """Each rank's ~95% (low, high) rows around `rows_for_hit`
        (`replay.plan.cache.range_for_hit`, from its curve's error at each size)."""
        keep = self._resolved()
        sizes = self.sizes[keep]
        errors = np.zeros_like(self.miss_ratio) if self.point_errors is None else self.point_errors
        return [
            cache.range_for_hit(sizes, 1.0 - m[keep], e[keep], target)
            for m, e in zip(self.miss_ratio, errors, strict=True)
        ]


def cluster_ranges(
    curves: RankCurves, targets: Sequence[float], busy: Sequence[int], row_bytes: float
) -> tuple[list[dict[str, list[float | None]]], dict[str, dict[str, list[float | None]]]]:
    """(per rank {target: [low, high] bytes}, {"worst_gpu", "mean": {target: [low,
    high]}}): the worst GPU's need lies in [max low, max high] when each rank's does in
    its own (an open low end counts as 0, an open high end leaves the high open), the
    mean's in [mean low, mean high], over the ranks with lookups (`busy`)."""

    def scaled(v: float | None) -> float | None:
        return None if v is None else float(v) * row_bytes

    per: list[dict[str, list[float | None]]] = [{} for _ in range(curves.world)]
    worst: dict[str, list[float | None]] = {}
    mean: dict[str, list[float | None]] = {}
    for t in targets:
        key = f"{t:g}"
        pairs = curves.range_for_hit(t)
        for r, (lo, hi) in enumerate(pairs):
            per[r][key] = [scaled(lo), scaled(hi)]
        mine = [pairs[r] for r in busy]
        lows = [0.0 if lo is None else lo for lo, _ in mine]
        highs = [hi for _, hi in mine]
        open_high = not mine or any(h is None for h in highs)
        worst[key] = [
            scaled(max(lows)) if mine else None,
            None if open_high else scaled(max(h for h in highs if h is not None)),
        ]
        mean[key] = [
            scaled(float(np.mean(lows))) if mine else None,
            None if open_high else scaled(float(np.mean([h for h in highs if h is not None]))),
        ]
    return per, {"worst_gpu": worst, "mean": mean}


# -- layout and routing -------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class _Layout:
    """The routing kernel's arrays. Blocks per table: row-split and table-wise tables
    their non-empty row blocks by first row; column-wise one per column block (shard
    order); data-parallel one per rank (rank order); grid its column blocks by first
    column, each its non-empty row blocks by first row (a row's block in column block c:
    c's first block + row // geven)."""

    kind: np.ndarray  # int64 per table
    even: np.ndarray  # int64 per table: even block size (0: explicit blocks; grid: its
    # first column block's)
    base: np.ndarray  # int64 per table: its first block
    count: np.ndarray  # int64 per table: its blocks
    start: np.ndarray  # int64 per block: its first row
    rank: np.ndarray  # int64 per block
    local: np.ndarray  # int64 per block: the local key of its first row on its rank
    rank_rows: np.ndarray  # int64 per rank: local keys (rows of its shards, end to end)
    geven: np.ndarray  # int64 per block: a grid block's column block's row block size, else 0
    columns: np.ndarray  # int64 per table: the blocks a lookup reaches (1; column-split: all)


def _layout(placement: Placement) -> _Layout:
    world = placement.world
    local_of: list[int] = []
    next_local = [0] * world
    for s in placement.shards:
        local_of.append(next_local[s.rank])
        next_local[s.rank] += s.rows
    by_table: dict[int, list[int]] = {}
    for i, s in enumerate(placement.shards):
        by_table.setdefault(s.table, []).append(i)
    nt = len(placement.tables)
    kind, even, base, count = (np.zeros(nt, np.int64) for _ in range(4))
    start: list[int] = []
    rank: list[int] = []
    local: list[int] = []
    geven: list[int] = []
    columns = np.ones(nt, np.int64)
    for t, shape in enumerate(placement.tables):
        e = placement.entry(t)
        idx = by_table.get(t, [])
        size: dict[int, int] = {}  # grid: per column block (its first column) its row blocks
        if e.type in COLUMN_SPLIT:  # column-wise, table-column-wise
            kind[t] = _CW
            columns[t] = len(idx)
        elif e.type == GRID:
            kind[t] = _GRID
            for i in idx:
                c0 = placement.shards[i].col_start
                size[c0] = size.get(c0, 0) + 1
            columns[t] = len(size)
            size = {c0: max(-(-shape.rows // n), 1) for c0, n in size.items()}
            even[t] = size[min(size)] if size else 0  # the first column block's
            idx = sorted(
                (i for i in idx if placement.shards[i].rows > 0),
                key=lambda i: (placement.shards[i].col_start, placement.shards[i].row_start),
            )
        elif e.type == DATA_PARALLEL:
            kind[t] = _DP
            idx = sorted(idx, key=lambda i: placement.shards[i].rank)
        else:
            kind[t] = _ROWS
            idx = sorted(
                (i for i in idx if placement.shards[i].rows > 0),
                key=lambda i: placement.shards[i].row_start,
            )
            if e.type == TABLE_WISE:
                even[t] = max(shape.rows, 1)
            elif e.shards is None:  # the even rule: blocks in rank order, trailing empty
                even[t] = max(-(-shape.rows // len(e.ranks)), 1)
        base[t] = len(start)
        for i in idx:
            s = placement.shards[i]
            start.append(s.row_start)
            rank.append(s.rank)
            local.append(local_of[i])
            geven.append(size.get(s.col_start, 0))
        count[t] = len(start) - base[t]
    arr = lambda v: np.array(v, dtype=np.int64)  # noqa: E731
    return _Layout(
        kind, even, base, count, arr(start), arr(rank), arr(local), arr(next_local),
        arr(geven), columns,
    )  # fmt: skip


@kernel(inline="always")
def _dp_rank(batch: int, pos: int, world: int, salt: np.uint64) -> np.int64:
    """A data-parallel lookup's rank: SplitMix64 of (batch, position), its top 32 bits
    times W shifted down 32 (even over the W ranks to 2^-32)."""
    h = mix64((np.uint64(batch) << np.uint64(32)) ^ np.uint64(pos) ^ salt)
    return np.int64(((h >> np.uint64(32)) * np.uint64(world)) >> np.uint64(32))


@kernel(inline="always")
def row_block(row: int, tb: int, size: int, n: int, start: np.ndarray) -> int:
    """The block of a row of a row-split table whose blocks are [tb, tb + n): row // size
    for even blocks (size > 0), else a search of the blocks' first rows."""
    if size > 0:
        return tb + row // size
    return last_at_most(start, tb, tb + n - 1, row)


@kernel
def _route(
    keys: np.ndarray,
    group: np.ndarray,
    bounds: np.ndarray,
    batch_start: int,
    offsets: np.ndarray,
    kind: np.ndarray,
    even: np.ndarray,
    base: np.ndarray,
    count: np.ndarray,
    start: np.ndarray,
    brank: np.ndarray,
    local: np.ndarray,
    geven: np.ndarray,
    world: int,
    salt: np.uint64,
    emit: bool,
    counts: np.ndarray,
    cursor: np.ndarray,
    out: np.ndarray,
    out_group: np.ndarray,
) -> None:
    """Route the range's lookups. emit False: counts[t, r] += lookups of table t routed
    to rank r. emit True: write each routed lookup's local key (and its SHARDS group when
    `group` is not empty) at out[cursor[r]], cursor advanced: trace order per rank."""
    grouped = len(group) > 0
    for b in range(len(bounds) - 1):
        lo = bounds[b]
        for i in range(lo, bounds[b + 1]):
            key = np.int64(keys[ix(i)])
            t = table_of(offsets, key)
            row = key - offsets[ix(t)]
            k_t = kind[ix(t)]
            tb = base[ix(t)]
            if k_t == _ROWS:
                blk = row_block(row, tb, even[ix(t)], count[ix(t)], start)
                first = blk
                last = blk + 1
                row -= start[ix(blk)]
            elif k_t == _DP:
                first = tb + _dp_rank(batch_start + b, i - lo, world, salt)
                last = first + 1
            elif k_t == _GRID:  # the row's block in each column block
                rows = offsets[ix(t + 1)] - offsets[ix(t)]
                c0 = tb
                while c0 < tb + count[ix(t)]:
                    size = geven[ix(c0)]
                    blk = c0 + row // size
                    r = brank[ix(blk)]
                    if emit:
                        c = cursor[ix(r)]
                        out[ix(c)] = local[ix(blk)] + row - start[ix(blk)]
                        if grouped:
                            out_group[ix(c)] = group[ix(i)]
                        cursor[ix(r)] = c + 1
                    else:
                        counts[t, r] += 1
                    c0 += (rows + size - 1) // size
                continue
            else:
                first = tb
                last = tb + count[ix(t)]
            for blk in range(first, last):
                r = brank[ix(blk)]
                if emit:
                    c = cursor[ix(r)]
                    out[ix(c)] = local[ix(blk)] + row
                    if grouped:
                        out_group[ix(c)] = group[ix(i)]
                    cursor[ix(r)] = c + 1
                else:
                    counts[t, r] += 1


class _Router:
    """Routes batch ranges with one placement; buffers reused across ranges."""

    def __init__(self, placement: Placement, table_rows: np.ndarray) -> None:
        self.world = placement.world
        self.offsets = table_offsets(table_rows)
        self.layout = _layout(placement)
        self.salt = np.uint64(DP_SALT)
        self.counts = np.zeros((len(table_rows), self.world), dtype=np.int64)
        self.out = np.empty(0, dtype=np.int64)
        self.out_group = np.empty(0, dtype=np.uint8)

    def route(
        self, keys: np.ndarray, group: np.ndarray, bounds: np.ndarray, batch_start: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(local keys, their groups, per-rank cuts) of one range; adds to `counts`."""
        x = self.layout
        range_counts = np.zeros_like(self.counts)
        cursor = np.zeros(self.world, dtype=np.int64)
        args = (keys, group, bounds, batch_start, self.offsets, x.kind, x.even, x.base,
                x.count, x.start, x.rank, x.local, x.geven, self.world, self.salt)  # fmt: skip
        _route(*args, False, range_counts, cursor, self.out, self.out_group)
        per_rank = range_counts.sum(axis=0)
        cuts = np.zeros(self.world + 1, dtype=np.int64)
        np.cumsum(per_rank, out=cuts[1:])
        n = int(cuts[-1])
        if len(self.out) < n:
            self.out = np.empty(n, dtype=np.int64)
        if len(group) and len(self.out_group) < n:
            self.out_group = np.empty(n, dtype=np.uint8)
        cursor[:] = cuts[:-1]
        _route(*args, True, range_counts, cursor, self.out, self.out_group)
        self.counts += range_counts
        return self.out[:n], self.out_group[:n] if len(group) else self.out_group[:0], cuts


# -- per-rank states ----------------------------------------------------------------------


class _RankSampler(ShardsSampler):
    """`ShardsSampler` over a rank's local keys with small starting windows (64 ranks x
    9 states of the default 2^16 positions would hold 170 MB before any key)."""

    def __init__(self, total_keys: int, sample_rate: float) -> None:
        super().__init__(total_keys, sample_rate)
        self.full = StackDistances(self.total_keys, direct=False, min_window=MIN_WINDOW)
        self.groups = [
            StackDistances(self.total_keys, direct=False, min_window=MIN_WINDOW)
            for _ in self.groups
        ]


def _check_sizes(sizes_rows: Any) -> np.ndarray:
    sizes = np.asarray(sizes_rows, dtype=np.int64)
    if sizes.ndim != 1 or not len(sizes):
        raise ConfigError("rank curves: give at least one cache size (rows)")
    if sizes[0] < 1 or (np.diff(sizes) <= 0).any():
        raise ConfigError("rank curves: cache sizes must be positive and ascending")
    return sizes


def rank_curves(
    horizon: Any,
    placement: Placement,
    sizes_rows: Sequence[int] | np.ndarray,
    *,
    rate: float,
    spec: WorkloadSpec | None = None,
    shares: dict[int, np.ndarray] | None = None,
    ranges: Sequence[HeldRange] | None = None,
    keep: list[HeldRange] | None = None,
) -> RankCurves:
    """Every GPU's LRU miss-ratio curve over the horizon, from one pass (module docstring).

    `horizon`: the stream `make_plan` reads (R = 1: a `GeneratedTrace` or a trace; R < 1:
    the sampled workload, whose `sample_rate` must be `rate`); `placement` over the same
    tables; `sizes_rows`: per-GPU cache sizes (rows, ascending); `spec`: the workload (its
    tables' full lookups; default the horizon's own spec, if any); `shares`: the spec's
    row-split tables' block shares for this placement, where already computed
    (`spec_block_shares`). `keep`: a list the pass appends its ranges to (`HeldRange`);
    `ranges`: such a list from an earlier pass over the same horizon, read instead of
    the horizon (the same keys: a sampled workload's generation is ~1.8 s of CPU a pass
    at meta-2021's day, its 24 M sampled keys 195 MB held)."""
    sizes = _check_sizes(sizes_rows)
    src_rate = source_sample_rate(horizon)
    if abs(src_rate - float(rate)) > 1e-12 * max(src_rate, 1e-300):
        raise ConfigError(f"rank curves: rate {rate} but the horizon is sampled at {src_rate}")
    table_rows = np.asarray(horizon.table_rows, dtype=np.int64)
    want = [t.rows for t in placement.tables]
    if table_rows.tolist() != want:
        raise ConfigError(
            f"rank curves: the placement's tables ({len(want)}, rows {want[:4]}...) are not "
            f"the horizon's ({len(table_rows)}, rows {table_rows[:4].tolist()}...)"
        )
    router = _Router(placement, table_rows)
    world = router.world
    rank_rows = router.layout.rank_rows
    exact = src_rate == 1.0
    if exact:
        direct = int(rank_rows.sum()) <= DIRECT_MAX_ROWS
        states: list[Any] = [
            StackDistances(int(n), direct=direct, min_window=MIN_WINDOW) for n in rank_rows
        ]
        whole = None
    else:
        states = [_RankSampler(int(n), src_rate) for n in rank_rows]
        whole = ShardsSampler(int(table_rows.sum()), src_rate, subsamples=0)
    no_group = np.empty(0, dtype=np.uint8)
    read = _read_ranges(horizon, whole, keep) if ranges is None else ranges
    for keys, group, bounds, batch_start in read:
        local, local_group, cuts = router.route(keys, group, bounds, batch_start)
        for rank in range(world):
            lo, hi = int(cuts[rank]), int(cuts[rank + 1])
            if hi == lo:
                continue
            if exact:
                states[rank].feed(local[lo:hi])
            else:
                states[rank].feed_sampled(0, local[lo:hi], local_group[lo:hi])
    counts = router.counts  # [tables, world] routed (sampled) lookups
    routed = counts.sum(axis=0)
    if spec is None and isinstance(getattr(horizon, "spec", None), WorkloadSpec):
        spec = horizon.spec
    lookups = (
        routed.copy()
        if exact
        else _rank_lookups(horizon, spec, placement, router, src_rate, shares)
    )
    miss = np.full((world, len(sizes)), np.nan)
    errors = None if exact else np.full((world, len(sizes)), np.nan)
    bound = np.zeros(world)
    distinct = np.zeros(world, dtype=np.int64)
    resolution = 1
    if exact:
        for rank, st in enumerate(states):
            n = st.requests
            miss[rank] = st.misses_at(sizes) / n if n else 0.0
            distinct[rank] = st.distinct
        method = f"exact stack distances per GPU ({world} GPUs, one pass)"
    else:
        resolution = int(states[0].resolution) if states else 1
        ok = sizes >= resolution
        models = _rank_models(horizon, placement, router.layout, world)
        for rank, st in enumerate(states):
            st.feed_sampled(int(lookups[rank]), np.empty(0, np.int64), no_group)
            distinct[rank] = st.estimated_distinct
            if (model := models[rank]) is not None:  # Che's curve as a control variate
                st.model = _model_of(horizon, model, st)
            if ok.any():
                curve, point, sup = st.estimate(sizes[ok])
                miss[rank, ok] = curve
                assert errors is not None
                errors[rank, ok] = point
                bound[rank] = sup
        method = (
            f"SHARDS at R = {src_rate:g} per GPU ({world} GPUs, one pass; sizes below "
            f"{resolution:,} rows not resolved)"
        )
    return RankCurves(
        sizes=sizes.copy(),
        miss_ratio=miss,
        lookups=lookups.astype(np.int64),
        distinct=distinct,
        exact=exact,
        error_bound=bound,
        method=method,
        sample_rate=src_rate,
        resolution_rows=resolution,
        sampled_lookups=routed.astype(np.int64),
        point_errors=errors,
    )


# a batch range as `rank_curves` reads it: flat keys (int64), their SHARDS groups (uint8;
# empty at R = 1), batch bounds (int64) and its first batch
HeldRange = tuple[np.ndarray, np.ndarray, np.ndarray, int]


def _read_ranges(
    horizon: Any, whole: ShardsSampler | None, keep: list[HeldRange] | None
) -> Iterator[HeldRange]:
    """The horizon's batch ranges with their keys' SHARDS groups (`whole`: the sampler
    whose hash groups them; None at R = 1), each also appended to `keep`."""
    where = str(getattr(horizon, "path", horizon))
    no_group = np.empty(0, dtype=np.uint8)
    for r in iter_batch_ranges(horizon, with_updates=False):
        keys = np.ascontiguousarray(r.keys, dtype=np.int64)
        group = no_group if whole is None else _sample_groups(keys, whole, where)
        bounds = np.ascontiguousarray(r.bounds, dtype=np.int64)
        held = (keys, group, bounds, int(r.batch_start))
        if keep is not None:
            keep.append(held)
        yield held


def _rank_models(
    horizon: Any, placement: Placement, x: _Layout, world: int
) -> list[list[tuple[int, float]] | None]:
    """Per rank, its shards as (table, share of the table's lookups) where every one is a
    whole table (table-wise, a column block, a data-parallel replica) and the horizon a
    sampled workload Che applies to (`replay.analysis.shards_model`); else None: a row
    block's rows are a permuted slice of the table's law, which the model does not sum."""
    from replay.analysis import shards_model

    if not shards_model.applicable(horizon):
        return [None] * world
    out: list[list[tuple[int, float]] | None] = []
    for rank in range(world):
        shards: list[tuple[int, float]] | None = []
        for sh in placement.rank_shards(rank):
            rows = placement.tables[sh.table].rows
            if sh.row_start != 0 or sh.row_stop != rows or x.kind[sh.table] == _GRID:
                shards = None
                break
            assert shards is not None
            shards.append((sh.table, 1.0 / world if x.kind[sh.table] == _DP else 1.0))
        out.append(shards or None)
    return out


def _model_of(horizon: Any, shards: list[tuple[int, float]], st: ShardsSampler) -> Any:
    """The GPU's correction (`shards_model.rank_correction`) plus its cold misses' own:
    the sample's distinct rows, each a cold miss of SHARDS_adj's curve at every size, are
    replaced by the count they are expected to be given the rows sampled
    (`rank_expected_distinct`; module docstring, "Cold misses"). Read after the pass: the
    state's distinct rows are final."""
    from replay.analysis.shards_model import rank_correction, rank_expected_distinct

    def model(sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        whole, groups = rank_correction(horizon, shards, sizes, st.rate, int(st.salt), st.threshold)
        expected = st.requests * st.rate  # N R: SHARDS_adj's denominator (`_curve`)
        if expected <= 0.0 or len(groups) != len(st.groups):
            return whole, groups
        want, want_k = rank_expected_distinct(horizon, shards, int(st.salt), st.threshold)
        got_k = np.array([g.distinct for g in st.groups], dtype=np.float64)
        k = len(st.groups)
        whole = whole + (want - st.full.distinct) / expected
        groups = groups + ((want_k - got_k) / (expected / k))[:, None]
        return whole, groups

    return model


def row_split_starts(placement: Placement) -> dict[int, np.ndarray]:
    """Each row-split table's blocks' first rows (tables cut into row blocks; grid: its
    first column block's)."""
    x = _layout(placement)
    out = {}
    for t, shape in enumerate(placement.tables):
        lo, n = int(x.base[t]), int(x.count[t])
        if x.kind[t] == _GRID and n > 0:
            n = -(-shape.rows // int(x.even[t]))
        if x.kind[t] not in (_DP, _CW) and n > 1:
            out[t] = x.start[lo : lo + n]
    return out


def spec_block_shares(
    spec: WorkloadSpec,
    starts: Sequence[dict[int, np.ndarray]],
    masses: Sequence[RowMass | None] | None = None,
) -> list[dict[int, np.ndarray]]:
    """For each placement's `row_split_starts`, each table's pmf over its blocks
    (`replay.workload.row_mass.block_shares`), every table's pmf built once for all the
    placements that split it (its 2^18 head ranks' rows mapped and sorted, ~1-3.5 ms:
    meta-2021's 856 tables under row-wise and table-row-wise), tables on the cores side by
    side (the kernel releases the GIL). `masses`: per table its
    `RowMass.from_spec(spec, t)` where already built (the sharder's loads,
    `replay.engine.placement.spec_loads`), else None: taken, not built again."""
    tables = sorted({t for one in starts for t in one})

    def shares_of(t: int) -> list[np.ndarray | None]:
        kept = masses[t] if masses is not None else None
        mass = kept if kept is not None else RowMass.from_spec(spec, t)
        return [mass.block_shares(one[t]) if t in one else None for one in starts]

    out: list[dict[int, np.ndarray]] = [{} for _ in starts]
    with worker_pool(usable_cores(), "block-shares") as pool:  # interrupt: no wait
        for t, got in zip(tables, pool.map(shares_of, tables), strict=True):
            for i, share in enumerate(got):
                if share is not None:
                    out[i][t] = share
    return out


def _rank_lookups(
    horizon: Any, spec: WorkloadSpec | None, placement: Placement, router: _Router, rate: float,
    shares: dict[int, np.ndarray] | None = None,
) -> np.ndarray:  # fmt: skip
    """Each rank's lookups in the full stream (int64 [world]): each table's full lookups
    split over the ranks in the proportion its sampled lookups were routed (a column-wise
    table's reach each of its blocks, a data-parallel table's 1 / W each), except a
    row-split table of a workload spec, split by its rows' probabilities (`block_shares`:
    a small table may have no sampled row at all, and a hot row sampled or not moves a
    block's sampled share by points), and a row-split table with no sampled lookup and no
    spec, split by rows. A grid table's every column block takes its full lookups, split
    as a row-split table's (the spec's shares where the column block splits its rows as
    the first one does; its rows' otherwise)."""
    x = router.layout
    counts = router.counts.astype(np.float64)
    multiplicity = x.columns
    per_table = counts.sum(axis=1)
    seen = (router.counts.sum(axis=1) // np.maximum(multiplicity, 1)).astype(np.int64)
    full = _table_full_lookups(horizon, spec, seen, rate).astype(np.float64)
    out = np.zeros(router.world)
    if shares is None:
        shares = {} if spec is None else spec_block_shares(spec, [row_split_starts(placement)])[0]
    for t, shape in enumerate(placement.tables):
        lo, hi = int(x.base[t]), int(x.base[t] + x.count[t])
        ranks = x.rank[lo:hi]
        if x.kind[t] == _DP:
            out += full[t] / router.world
        elif x.kind[t] == _CW:
            np.add.at(out, ranks, full[t])
        elif x.kind[t] == _GRID and spec is None and per_table[t] > 0:
            out += full[t] * x.columns[t] * counts[t] / per_table[t]  # the sample's shares
        elif x.kind[t] == _GRID:  # each column block as a row-split table of its own
            starts = x.start[lo:hi]
            stops = starts + np.minimum(x.geven[lo:hi], shape.rows - starts)
            first = shares.get(t)  # the spec's, over the first column block's row blocks
            c0 = lo
            while c0 < hi:
                c1 = c0 + -(-shape.rows // int(x.geven[c0]))
                mine = x.start[c0:c1]
                if c1 - c0 == 1:
                    share = np.ones(1)
                elif first is not None and np.array_equal(mine, x.start[lo : lo + len(first)]):
                    share = first
                else:  # its rows' share (a column block split unlike the first)
                    share = (stops[c0 - lo : c1 - lo] - mine) / max(shape.rows, 1)
                np.add.at(out, x.rank[c0:c1], full[t] * share)
                c0 = c1
        elif hi - lo == 1:
            out[ranks[0]] += full[t]
        elif spec is not None:
            np.add.at(out, ranks, full[t] * shares[t])
        elif per_table[t] > 0:
            out += full[t] * counts[t] / per_table[t]
        else:
            stops = np.append(x.start[lo + 1 : hi], shape.rows)
            np.add.at(out, ranks, full[t] * (stops - x.start[lo:hi]) / max(shape.rows, 1))
    return np.rint(out).astype(np.int64)


def _table_full_lookups(
    horizon: Any, spec: WorkloadSpec | None, sampled: np.ndarray, rate: float
) -> np.ndarray:
    """Each table's lookups in the full stream: from `spec` (batches x batch size x
    pooling), else the horizon's (`replay.analysis.horizon.full_lookups`)."""
    if spec is not None:
        per_batch = np.array([spec.batch_size * t.pooling for t in spec.tables], dtype=np.int64)
        return per_batch * int(horizon.num_batches)
    return full_lookups(horizon, sampled, rate).astype(np.int64)


__all__ = [
    "DIRECT_MAX_ROWS",
    "DP_SALT",
    "HeldRange",
    "RankCurves",
    "cluster_ranges",
    "rank_curves",
    "row_split_starts",
    "spec_block_shares",
]
