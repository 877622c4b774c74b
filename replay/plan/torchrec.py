"""TorchRec's cache statistics from a plan's horizon: `torchrec.json`, and the
`ParameterConstraints` TorchRec's planner takes from it.

What TorchRec does with them (torchrec 1.8.0, read in its source). A table's UVM cache is
sized by a load factor (`CacheParams.load_factor`, cache rows / table rows;
`torchrec/distributed/types.py`) and may carry measured statistics,
`EmbeddingOffloadStats(cacheability, expected_lookups, mrc_hist_counts, height)`
(`torchrec/distributed/planner/shard_estimators.py`). They enter two places only:

- the prefetch term of the perf estimate (`planner/estimator/types.py`
  `ShardPerfContext._build_contexts`, `planner/estimator/estimator.py`
  `_default_prefetch_comp`): expected cache fetches per batch =
  `expected_miss_rate(clf) x expected_lookups`, `expected_lookups` "the expected number of
  unique embedding ids per global batch", times the shard's row bytes over the HBM-to-DDR
  bandwidth (divided by the world size for row-wise, the local world for table-row-wise);
- `EmbeddingOffloadScaleupProposer` (`planner/proposers.py`): it grows the caches of the
  tables with stats in proportion to `cacheability x expected_lookups` (and skips a table
  whose product or load factor is 0).

The lookup itself is priced at `clf x HBM + (1 - clf) x HBM-to-DDR` bandwidth
(`planner/constants.py` `kernel_bw_lookup`): there the load factor stands in for the hit
rate, and the statistics are not read.

TorchRec's reading of a histogram h of n bins over a table of H rows, at load factor f
(`EmbeddingOffloadStats.estimate_cache_miss_rate`):

    edges e_i = i H / n (i = 0..n, `torch.linspace(0, H, n + 1)`, float32)
    ys = 1 - cumsum(h) / sum(h), then ys + [0, 1]
    miss(f) = ys[bucketize(f H - 1, edges, right=True) - 1]

that is, with j the number of edges <= f H - 1: miss = 1 when j = 0 (a cache under one
row), 1 - (h_0 + ... + h_(j-1)) / sum(h) for j in 1..n, so 0 for j = n (ys[n - 1] = 0
whatever the counts); 0 when sum(h) = 0.

What we export, per table: its LRU over the stream of each global batch's unique ids
(`replay.plan.torchrec_unique`: a batch keeps each row once, at its first occurrence),
U the stream's length (all batches' unique ids), hits(k) its hits with a cache of k
rows (stack distance d <= k - 1), k_b = ceil(b H / n):

- `mrc_hist_counts[b]` = hits(k_(b+1)) - hits(k_b) for b < n - 1, the stream's requests
  with d in [e_b, e_(b+1)); the last bin also holds the reuses beyond e_(n-1) and the cold
  misses (first uses): h_(n-1) = U - hits(k_(n-1)). So sum(h) = U and, with j as above,
  TorchRec reads miss(f) = (U - hits(k_j)) / U for 1 <= j <= n - 1: our miss ratio, cold
  misses included, at ceil(e_j), the first edge above f H - 1. The edges: at f <= 1 / H
  TorchRec reads 1 (an empty cache misses everything, right); cold misses are counted at
  every f with f H - 1 < e_(n-1), i.e. f < 1 - 1 / n + 1 / H (every f < 1 once n >= H,
  and f = 1 too once n > H); above that TorchRec reads 0 (its sentinel). A cache of the
  whole table is a plain-HBM table (`fused`), whose statistics TorchRec does not read.
- `bins` n per table (`choose_bins`): at least `--torchrec-bins`, and enough that a bin is
  at most `BIN_SHARE` (5%) of the plan's cache rows k = load factor x H; of those the
  smallest n with an edge in (k - 1, k] that float32 cannot move, so that TorchRec reads
  hits(k) exactly at the plan's own load factor (its fetches per batch there are the
  exact LRU's, up to our curve's own error). One exists for every table of up to
  `MAX_BINS` rows with a cache of up to about 2^20 rows (n = H puts an edge on every row);
  for a larger table it may not within `MAX_BINS` bins (k / H within 1 / H of a fraction
  of small denominator, or a cache past 2^20 rows, where float32's rounding is a good
  part of a row), and TorchRec then reads the first edge above, within one bin. Elsewhere
  TorchRec reads the curve at the first edge above f H - 1: within one bin, 5% of k, above
  the cache it is asked about (`EmbeddingOffloadScaleupProposer` only grows caches from
  the constraint's load factor, so every size it reads is >= k, resolved to 5% of its
  size; the misses change less than the size there). Finer bins cost file size: a table of
  40 M rows with a cache of 8,000 rows takes 100,000 bins (about 300 kB).
- `expected_lookups` = U / batches: the mean unique ids of the table per global batch (a
  trace batch is a global batch of `batch_size` samples; `pooling_factor` = the table's
  lookups per sample), counted exactly at R = 1.
- `cacheability`: the area under TorchRec's own reading of the histogram over f in
  [0, 1] (`torchrec_cacheability`; so TorchRec and the file agree).
- `cold_miss_ratio`: the cold misses' share of U (inside the last bin; for reading only).
- `load_factor`: the plan's split of the cache budget (`replay.plan.cache.split_budget`,
  over the every-lookup curves plan.json holds).

At sample rate R < 1 (the horizon is a SHARDS spatial sample, `replay.workload.sampled`)
the curves are SHARDS-scaled over the sample's own batches deduplicated (keeping first
occurrences commutes with sampling rows), N = U of the full stream, joined to the full
stream's exact head below the sample's resolution where that head is usable, else read
linearly there (`interpolated_below_rows`); cumulative counts are rounded to whole
requests (each edge within 0.5). `sampled_rows` says how many of the table's rows the
sample holds and `exact_below_rows` up to which size the curve is the exact head's: a
table with few sampled rows and no head over all its rows (`few_sampled_rows`) has a curve
of little worth, whatever SHARDS's error bound says. The unique ids per batch are not read
from the sample: R x a batch's distinct rows is a fraction of a row, so on the
quickstart's Criteo Terabyte plan (R = 2^-12) the sample's count / R was 0 for 11 of its
26 tables and off by up to 11x for others (C5: 76 for 869). A sampled workload has neither
reuse nor drift (`replay.workload.sampled` refuses them), so its batches are independent
and identically distributed, and the first `SPAN_BATCHES` batches of the full stream,
generated in full, give the mean (within 1% between two seeds there); a sampled source
without a workload spec falls back to the sample's count / R.

A cluster plan (`replay plan` with a `[cluster]`) adds `cluster`: per shard of the
recommended placement the same fields over that shard's own stream
(`replay.plan.torchrec_shards`). `parameter_constraints` then combines a table's shards
into TorchRec's one constraint per table (`combine_shards`). `tables` stay the one-GPU
reference; a one-GPU plan's file has no `cluster`.

Assumed, not modelled: FBGEMM's cache is set-associative (32-way LRU sets), not fully
associative. `parameter_constraints` needs torch and torchrec, which replay does not
depend on (the `torchrec` extra installs a tested set).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from replay._files import TORCHREC_STATS, read_bytes
from replay._json import parse_json
from replay._schema import check_version
from replay.errors import ConfigError, InputError
from replay.workload.spec import WorkloadSpec

if TYPE_CHECKING:
    from torchrec.distributed.planner.types import ParameterConstraints

FORMAT = "replay-torchrec-cache-stats"
# 2: the histograms count each batch's unique ids with the cold misses in the last bin
# (1 counted every lookup and left the cold misses out)
VERSION = 2
FILE_NAME = "torchrec.json"
DEFAULT_BINS = 100
MAX_BINS = 1_000_000
BIN_SHARE = 0.05  # a bin at most this share of the plan's cache rows (`choose_bins`)
MAX_HEIGHT = 2**63 - 1  # a table's rows: an int64 (the trace format's limit)
ALGORITHMS = ("lru", "lfu")  # FBGEMM's CacheAlgorithm members TorchRec takes
SPAN_BATCHES = 200  # full batches behind expected_lookups at R < 1 (the plan's steady span)
# ... cut to about this many lookups (at least one batch): their distinct rows are a map of
# 16 B slots, so 200 production batches (5.2 G lookups) held 7 GB and more (issue 39)
SPAN_MAX_LOOKUPS = 1 << 25
FEW_SAMPLED_ROWS = 100  # a sampled table with fewer rows than this is named in the file
_TABLE_KEYS = (
    "height", "bins", "mrc_hist_counts", "expected_lookups", "cacheability",
    "cold_miss_ratio", "load_factor",
)  # fmt: skip
# float32 error of TorchRec's edges and of f H - 1, relative to their size: a few ulp
# (2^-23) of `torch.linspace`'s vectorized steps and of float32(f H)
_F32_MARGIN = 2.0**-21


def edge_sizes(height: int, bins: int) -> np.ndarray:
    """k_b = ceil(b height / bins) for b = 0..bins (int64, integer arithmetic): bin b holds
    the stack distances d with k_b <= d < k_(b+1), i.e. d in [b H / n, (b + 1) H / n)."""
    b = np.arange(bins + 1, dtype=np.int64)
    return -((-b * int(height)) // int(bins))


def _edge_at(height: int, rows: float, bins: np.ndarray) -> np.ndarray:
    """For each candidate bin count n: whether TorchRec's reading at f = rows / H lands,
    whatever float32 does, on an edge e_j in (rows - 1, floor(rows)] (so it reads hits at
    floor(rows) rows exactly): e_(j-1) <= rows - 1 - m < rows - 1 + m < e_j <= floor(rows) - m."""
    n = bins.astype(np.float64)
    h = float(height)
    x = rows - 1.0
    m = _F32_MARGIN * max(rows, 1.0) + 1e-6
    j = np.floor(x * n / h) + 1.0  # the first edge strictly above x, in exact arithmetic
    below = (j - 1.0) * h / n
    at = j * h / n
    # e_0 = 0 is exact in float32 (and x >= 0): only the edges after it move
    settled = (j == 1.0) | (below <= x - m)
    return settled & (at > x + m) & (at <= math.floor(rows) - m) & (j <= n - 1)


def choose_bins(height: int, rows: float | None, at_least: int = DEFAULT_BINS) -> int:
    """The bins of a table (or shard) of `height` rows whose cache holds `rows` (None: no
    cache): at least `at_least`; a bin at most `BIN_SHARE` of the cache; the last edge
    above the cache, so its cold misses are read (n > H / (H - rows + 1)); and of those
    the smallest n with an edge on the cache (`_edge_at`), searched up to four times that
    or H (where one always is). At most `MAX_BINS`."""
    n0 = max(int(at_least), 1)
    if rows is None or not 1.0 <= rows < height:
        return min(n0, MAX_BINS)
    fine = math.ceil(height / (BIN_SHARE * rows))
    # e_(n-1) = H - H / n above f H - 1 = rows - 1 even where float32 rounds them
    gap = height - rows + 1.0 - (_F32_MARGIN * height + 1e-6)
    top = int(height // gap) + 1 if gap > 0 else MAX_BINS
    n0 = max(n0, fine, top)
    if n0 >= MAX_BINS:
        return MAX_BINS
    if height > 2**53:  # float64 no longer holds the edges exactly
        return n0
    # near a simple fraction k / H the edges of few bins stay away from k (j / n within
    # 1 / H of k / H needs n ~ 1 / (k / H - the fraction)); from n = H on, edges are at most
    # a row apart and one always lands on the cache
    limit = min(MAX_BINS, max(4 * n0, int(height) + 1))
    # candidates in runs growing from 64 to 65,536: the first fit is most often near n0
    # (`_edge_at` is elementwise, so the runs find the same first n as one run would)
    lo, run = n0, 64
    while lo <= limit:
        cand = np.arange(lo, min(lo + run, limit + 1), dtype=np.int64)
        hit = np.flatnonzero(_edge_at(height, float(rows), cand))
        if len(hit):
            return int(cand[hit[0]])
        lo += run
        run = min(run * 4, 1 << 16)
    return n0


def torchrec_cacheability(hist: np.ndarray | Sequence[float], height: int) -> float:
    """The area under TorchRec's reading of `hist` (module docstring) over load factors
    [0, 1]: 1 below p_0 = 1 / H, ys[j - 1] on [p_(j-1), p_j), p_i = min(1, (e_i + 1) / H);
    0 for a histogram without counts (TorchRec then reads no misses at all)."""
    h = np.asarray(hist, dtype=np.float64)
    total = float(h.sum())
    if not total > 0:
        return 0.0
    ys = 1.0 - np.cumsum(h) / total
    edges = np.arange(len(h) + 1, dtype=np.float64) * (float(height) / len(h))
    p = np.minimum(1.0, (edges + 1.0) / float(height))  # p_n = 1: (H + 1) / H > 1
    return float(p[0] + np.sum(np.diff(p) * ys))


class Counts(list[int]):
    """A histogram's counts: a list of ints (JSON, equality, as any list) that keeps the
    int64 array it was made from (`array`), so that the per-shard curves and the writer
    read 10 M counts without converting them again; any change through the list's own
    methods drops the array."""

    __slots__ = ("array",)

    def __init__(self, array: np.ndarray, like: Counts | None = None) -> None:
        """`like`: a `Counts` of the same `array`, whose list is copied (not made again)."""
        super().__init__(array.tolist() if like is None else like)
        array.flags.writeable = False  # shared by alike tables' lists
        self.array: np.ndarray | None = array


def _dropping(name: str) -> Any:
    def method(self: Counts, *args: Any, **kwargs: Any) -> Any:
        self.array = None
        return getattr(list, name)(self, *args, **kwargs)

    return method


for _name in ("__setitem__", "__delitem__", "__iadd__", "__imul__", "append", "extend", "insert",
              "pop", "remove", "sort", "reverse", "clear"):  # fmt: skip
    setattr(Counts, _name, _dropping(_name))


def counts_array(hist: Sequence[Any]) -> np.ndarray:
    """A histogram's counts as an array: a `Counts`'s own, else converted."""
    kept = hist.array if isinstance(hist, Counts) else None
    return kept if kept is not None else np.asarray(hist)


def histogram(hits: np.ndarray, unique: float) -> list[int]:
    """`mrc_hist_counts` from hits at the edge sizes k_0..k_(n-1) and U (module
    docstring): the last bin takes the rest of U (far reuses and cold misses). Counts are
    whole requests (a sampled curve's expected counts rounded cumulatively: each edge's
    hits within 0.5)."""
    return Counts(histogram_counts(hits, unique))


def histogram_counts(hits: np.ndarray, unique: float) -> np.ndarray:
    """`histogram`'s counts as an int64 array."""
    cum = np.append(np.maximum.accumulate(np.asarray(hits, dtype=np.float64)), float(unique))
    cum = np.rint(np.minimum(cum, float(unique))).astype(np.int64)
    return np.diff(cum)


def hits_at(hist: Sequence[float], height: int, sizes: np.ndarray) -> np.ndarray:
    """A histogram's hits with caches of `sizes` rows (float64; may be fractional): exact
    at the edge sizes k_b (b < n), linear between them; U at the whole table."""
    return HistogramHits(hist, height).at(sizes)


class HistogramHits:
    """`hits_at` of one histogram, its edges and cumulative counts made once for any
    number of reads."""

    def __init__(self, hist: Sequence[float] | np.ndarray, height: int) -> None:
        h = np.asarray(hist, dtype=np.float64)
        self.height = int(height)
        self.k = edge_sizes(self.height, len(h)).astype(np.float64)
        self.cum = np.concatenate([[0.0], np.cumsum(h)])
        # hits of the whole table: the last bin's reuses are not told apart from its cold
        # misses; read the curve flat across the last bin
        self.cum[-1] = self.cum[-2] if len(h) else 0.0
        self.total = float(np.sum(h))

    def at(self, sizes: np.ndarray) -> np.ndarray:
        out = np.interp(np.asarray(sizes, dtype=np.float64), self.k, self.cum)
        return np.where(np.asarray(sizes) >= self.height, self.total, out)


def span_batches(spec: WorkloadSpec, batches: int) -> int:
    """Full batches read for the distinct rows per batch at R < 1: `SPAN_BATCHES`, fewer
    where they hold more than `SPAN_MAX_LOOKUPS` lookups, at least one."""
    fit = SPAN_MAX_LOOKUPS // max(int(spec.lookups_per_batch), 1)
    return max(1, min(batches, SPAN_BATCHES, fit))


def _closed_form(spec: WorkloadSpec) -> bool:
    """Whether the distinct rows per batch come from the spec in closed form: one batch
    is more than `SPAN_MAX_LOOKUPS` lookups (counting it would hold its distinct keys,
    ~128 M for meta-2021, in a map)."""
    from replay.analysis.touched_model import closed_form_wanted

    return closed_form_wanted(spec, SPAN_MAX_LOOKUPS)


def _distinct_per_batch(src: Any, rate: float) -> np.ndarray:
    """Mean distinct rows looked up per batch, per table, over the source (divided by R):
    touched(1) over the lookups, exact (integer counts until the final division)."""
    from replay.analysis.horizon import TouchedCounter
    from replay.analysis.mrc import stream_lookups
    from replay.trace.stream import iter_batch_ranges

    tables = len(src.table_rows)
    if int(src.num_batches) < 1:
        return np.zeros(tables)
    counter = TouchedCounter(
        src.table_rows, int(src.num_batches), batches=[1], lookups=stream_lookups(src)
    )
    for r in iter_batch_ranges(src, with_updates=False):
        counter.feed(r.keys, r.bounds, r.batch_start)
    return counter.curve(rate, "lookups").per_table[:, 0].copy()


def sampled_unique_per_batch(src: Any, rate: float, threads: int | None = None) -> tuple[
    np.ndarray, str
]:  # fmt: skip
    """Each table's mean unique ids per batch of the full stream a sampled source was
    drawn from (module docstring), and what it was read from."""
    spec = getattr(src, "spec", None)
    if isinstance(spec, WorkloadSpec) and _closed_form(spec):
        # production scale: one batch is too large to count (`replay.analysis.touched_model`)
        from replay.analysis.touched_model import expected_touched

        distinct = expected_touched(spec, [1], kind="lookups")[:, 0]
        return distinct, "the spec in closed form (E D(1), replay.analysis.touched_model)"
    if isinstance(spec, WorkloadSpec):  # i.i.d. batches: see the module docstring
        from replay.workload.onthefly import GeneratedTrace

        span = span_batches(spec, int(src.num_batches))
        full = GeneratedTrace(spec.with_overrides(batches=max(span, 1)), threads=threads)
        return _distinct_per_batch(full, 1.0), f"the first {span} batches of the full stream"
    return _distinct_per_batch(src, rate), "the horizon (its sample's count / R)"


def batch_size_of(src: Any) -> int | None:
    """Samples per batch of a source: its workload spec's, or its trace's manifest's."""
    spec = getattr(src, "spec", None)
    if isinstance(spec, WorkloadSpec):
        return int(spec.batch_size)
    manifest = getattr(src, "manifest", None)
    size = manifest.get("batch_size") if isinstance(manifest, dict) else None
    return int(size) if isinstance(size, int) and not isinstance(size, bool) else None


def table_lookups(src: Any, rate: float) -> np.ndarray:
    """Each table's lookups over the run, full stream (a sampled source: its spec's
    batches x batch size x pooling, else the sample's count / R)."""
    from replay.analysis.horizon import full_lookups
    from replay.trace.keys import table_offsets
    from replay.trace.stream import iter_batch_ranges

    rows = np.asarray(src.table_rows, dtype=np.int64)
    spec = getattr(src, "spec", None)
    if rate < 1.0 and isinstance(spec, WorkloadSpec):
        return full_lookups(src, np.zeros(len(rows)), rate)
    offsets = table_offsets(rows)
    counts = np.zeros(len(rows), dtype=np.int64)
    for r in iter_batch_ranges(src, with_updates=False):
        keys = np.asarray(r.keys, dtype=np.int64)
        counts += np.bincount(
            np.searchsorted(offsets, keys, side="right") - 1, minlength=len(rows)
        )[: len(rows)]
    return counts if rate >= 1.0 else full_lookups(src, counts, rate)


def _method(src: Any, rate: float) -> str:
    if rate >= 1.0:
        return "exact stack distances of each batch's unique ids"
    if isinstance(getattr(src, "spec", None), WorkloadSpec):
        return (
            f"sampled at R = {rate:g}: Che's approximation at batch granularity (a sampled "
            "workload's references are independent; replay.plan.torchrec_unique) above the "
            "full stream's exact head of each batch's unique ids; counts are expected counts "
            "of the full stream, rounded"
        )
    return (
        f"SHARDS at R = {rate:g} over each batch's unique ids (stack distances / R; counts "
        "are expected counts of the full stream, rounded), sizes below the resolution read "
        "linearly"
    )


def torchrec_stats(
    source: Any,
    *,
    bins: int = DEFAULT_BINS,
    load_factors: Mapping[str, float] | None = None,
    threads: int | None = None,
) -> dict[str, Any]:
    """The `torchrec.json` document of a source (a trace folder, an on-the-fly or a
    sampled workload, as `replay.analysis.horizon` reads them): per table its histogram
    of the unique ids per batch in at least `bins` bins (more where the load factor given
    in `load_factors` asks for them, `choose_bins`), expected lookups, cacheability,
    cold-miss ratio, height, pooling factor and that load factor (None where none is
    given). One pass over the source (at R < 1, another over the first full batches)."""
    from replay._version import __version__
    from replay.analysis.horizon import _open, source_sample_rate
    from replay.plan.torchrec_unique import unique_curves

    if isinstance(bins, bool) or not isinstance(bins, int | np.integer):
        raise ConfigError(f"torchrec bins: {bins!r} is not a whole number")
    if not 1 <= int(bins) <= MAX_BINS:
        raise ConfigError(f"torchrec bins: {bins} must be in [1, {MAX_BINS:,}]")
    bins = int(bins)
    src = _open(source, threads)
    rate = source_sample_rate(src)
    exact = rate >= 1.0
    names = [str(n) for n in src.table_names]
    heights = [int(r) for r in src.table_rows]
    if exact:
        curves, distinct = unique_curves(src, rate=rate)
        lookups_from = "the horizon"
    else:
        unique, lookups_from = sampled_unique_per_batch(src, rate, threads)
        curves, distinct = unique_curves(src, rate=rate, unique_per_batch=unique)
    lookups = table_lookups(src, rate)
    batches = int(src.num_batches)
    batch_size = batch_size_of(src)
    factors = dict(load_factors or {})
    tables: dict[str, Any] = {}
    # alike tables (one law, the same curve and load factor: meta-2021's 856 tables ask 36
    # questions) get the numbers of the first: a function of exactly this key
    asked: dict[tuple[Any, ...], tuple[int, Counts, float]] = {}
    for t, (name, height, curve) in enumerate(zip(names, heights, curves, strict=True)):
        factor = factors.get(name)
        law = curve.key()
        key = None if law is None else (law, height, None if factor is None else float(factor))
        kept = asked.get(key) if key is not None else None
        if kept is None:
            n = choose_bins(height, None if factor is None else float(factor) * height, bins)
            counts = histogram_counts(curve.hits(edge_sizes(height, n)[:-1]), curve.unique)
            kept = n, Counts(counts), torchrec_cacheability(counts, height)
            if key is not None:
                asked[key] = kept
        n, hist, cacheability = kept
        entry: dict[str, Any] = {
            "height": height,
            "bins": n,
            "mrc_hist_counts": Counts(hist.array, hist) if hist.array is not None else hist,
            "expected_lookups": float(distinct[t]),
            "cacheability": cacheability,
            "cold_miss_ratio": min(curve.cold / curve.unique, 1.0) if curve.unique > 0 else 0.0,
            "load_factor": None if factor is None else float(factor),
            "lookups": int(lookups[t]),
            "pooling_factor": (
                float(lookups[t]) / (batches * batch_size) if batch_size and batches else None
            ),
            # the global batch expected_lookups counts (also the file's): an entry alone
            # says what it assumes
            "batch_size": batch_size,
        }
        if not exact:
            if curve.sampled_rows is not None:  # SHARDS: the curve rests on these rows
                entry["sampled_rows"] = curve.sampled_rows
            # the curve is the full stream's exact head's up to this many rows (0: none)
            entry["exact_below_rows"] = curve.exact_below_rows
            if curve.interpolated_below_rows:
                entry["interpolated_below_rows"] = curve.interpolated_below_rows
        tables[name] = entry
    return {
        "format": FORMAT,
        "version": VERSION,
        "replay_version": __version__,
        "batches": batches,
        "batch_size": batch_size,
        "sample_rate": float(rate),
        "method": _method(src, rate),
        "histogram": "mrc_hist_counts[b]: requests of the stream of each batch's unique ids "
        "(a row once per batch) whose LRU stack distance d lies in [b height / bins, (b + 1) "
        "height / bins); the last bin also holds the first uses (cold misses)",
        "miss_ratio": "EmbeddingOffloadStats.expected_miss_rate(load_factor): cache fetches "
        "per unique id, cold misses included",
        "bins": f"at least {bins}, a bin at most {BIN_SHARE:.0%} of the table's cache rows, "
        "an edge on the cache where float32 allows (replay.plan.torchrec.choose_bins)",
        "expected_lookups": f"mean unique ids of the table per global batch of batch_size "
        f"samples, over {lookups_from}",
        # tables whose curve rests on a handful of sampled rows (plan.md names them)
        "few_sampled_rows": [
            name
            for name, t in tables.items()
            if t.get("sampled_rows", FEW_SAMPLED_ROWS) < FEW_SAMPLED_ROWS
            and t["exact_below_rows"] < t["height"]
        ],
        "tables": tables,
    }


class TorchRecFileError(InputError, ValueError):
    """A `torchrec.json` that is missing, unreadable or malformed: one line (exit 2 on the
    command line), and a ValueError to TorchRec code that catches those."""


class TorchRecArgumentError(ConfigError, ValueError):
    """An argument of `parameter_constraints` TorchRec would not take (a compute kernel it
    lacks, an algorithm, a load factor): one line, and a ValueError."""


def _bad(path: Path, why: str) -> InputError:
    return TorchRecFileError(f"{path}: {why} (a `replay plan` {FILE_NAME} is expected)")


def read_torchrec_stats(path: str | Path) -> dict[str, Any]:
    """A `torchrec.json` (a plan folder or the file), checked: `TorchRecFileError` (an
    InputError and a ValueError) for another file, another version, or a table or shard
    whose fields do not fit TorchRec's."""
    p = Path(path)
    if p.is_dir():
        p = p / FILE_NAME
    try:  # regular files only, at most TORCHREC_STATS.limit_bytes read (replay._files)
        text = read_bytes(p, TORCHREC_STATS, TorchRecFileError)
    except TorchRecFileError as exc:
        raise _bad(p, str(exc).removeprefix(f"{p}: ")) from None
    document = parse_json(text, p, TorchRecFileError)
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise _bad(p, f"not a {FORMAT} document")
    if document.get("version") != VERSION:
        raise _bad(p, f"version {document.get('version')!r}; this replay reads {VERSION}")
    check_version("torchrec", document, p, TorchRecFileError)
    tables = document.get("tables")
    if not isinstance(tables, dict) or not tables:
        raise _bad(p, "no tables")
    for name, table in tables.items():
        _check_entry(p, f"table {name!r}", table)
    if "cluster" in document:
        _check_cluster(p, document["cluster"], tables)
    return document


def _check_entry(p: Path, label: str, table: Any, extra: tuple[str, ...] = ()) -> None:
    """One table's (or shard's) fields as TorchRec takes them."""
    missing = [k for k in _TABLE_KEYS + extra if not isinstance(table, dict) or k not in table]
    if missing:
        raise _bad(p, f"{label} lacks {', '.join(missing)}")
    hist = table["mrc_hist_counts"]
    height, bins = table["height"], table["bins"]
    # TorchRec takes the height as an int64 tensor's bound; bools are ints to Python
    if not (_whole(height, MAX_HEIGHT) and _whole(bins, MAX_BINS)):
        raise _bad(
            p,
            f"{label}: height {_shown(height)} and bins {_shown(bins)} must be whole "
            f"numbers, height 1 to 2^63 - 1 and bins 1 to {MAX_BINS:,}",
        )
    if not isinstance(hist, list) or len(hist) != bins:
        raise _bad(p, f"{label}: mrc_hist_counts must hold {bins} counts")
    # each count a plain number: numpy would read "3", true or [1, 2] as counts too
    counts = None
    if {type(c) for c in hist} <= {int, float}:
        try:
            counts = np.asarray(hist, dtype=np.float64)
        except OverflowError:  # an integer past float's range
            counts = None
    if counts is None or not np.isfinite(counts).all() or (counts < 0).any():
        bad = next(c for c in hist if not (_number(c) and c >= 0))
        raise _bad(
            p,
            f"{label}: mrc_hist_counts holds {_shown(bad)}; each count must be a "
            "finite number >= 0",
        )
    lf = table["load_factor"]
    if lf is not None and not (_number(lf) and 0 <= lf <= 1):
        raise _bad(p, f"{label}: load_factor {_shown(lf)} must be in [0, 1] or null")
    for key in ("expected_lookups", "cacheability", "cold_miss_ratio"):
        value = table[key]
        if not (_number(value) and value >= 0):
            raise _bad(p, f"{label}: {key} {_shown(value)} must be a number >= 0")


def _check_cluster(p: Path, cluster: Any, tables: dict[str, Any]) -> None:
    """A cluster plan's per-shard part: each shard's fields, and where it sits in a table
    the file has (what `combine_shards` reads)."""
    shards = cluster.get("shards") if isinstance(cluster, dict) else None
    if not isinstance(shards, list) or not shards:
        raise _bad(p, "cluster holds no shards")
    for i, shard in enumerate(shards):
        label = f"cluster shard {i}"
        _check_entry(p, label, shard, ("table", "type", "rank", "rows", "columns", "cache_rows"))
        table = tables.get(shard["table"]) if isinstance(shard["table"], str) else None
        if table is None:
            raise _bad(p, f"{label}: table {_shown(shard['table'])} is not one of the tables")
        spans = [shard["rows"], shard["columns"]]
        if not all(
            isinstance(s, list) and len(s) == 2 and all(_count(v) for v in s) and s[0] < s[1]
            for s in spans
        ) or shard["rows"][1] > table["height"]:  # fmt: skip
            raise _bad(
                p,
                f"{label}: rows {_shown(shard['rows'])} and columns {_shown(shard['columns'])} "
                f"must be [start, stop) within the table's {table['height']} rows",
            )
        rows = shard["cache_rows"]
        if rows is not None and not (_count(rows) and rows <= shard["height"]):
            raise _bad(p, f"{label}: cache_rows {_shown(rows)} must be 0 to its height or null")
        if not isinstance(shard["type"], str) or not _count(shard["rank"]):
            raise _bad(p, f"{label}: type {_shown(shard['type'])} and rank must be a name and >= 0")


def _number(value: Any) -> bool:
    """A finite JSON number: not a bool, and within float's range (JSON integers are not)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer of hundreds of digits
        return False


def _whole(value: Any, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= high


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_HEIGHT


def _shown(value: Any) -> str:
    """A field's value as a message quotes it, cut short (a 4,000-digit integer parses)."""
    text = json.dumps(value, default=repr)
    return text if len(text) <= 40 else text[:37] + "..."


def combine_shards(document: dict[str, Any], at_least: int = DEFAULT_BINS) -> dict[str, Any]:
    """A cluster plan's shards combined into TorchRec's one entry per table (TorchRec
    gives every shard of a table the table's load factor and reads the table's stats):

    - load factor = the table's cache bytes over its bytes, sum of cache_rows x columns
      over sum of height x columns of its shards (so the constraints' cache bytes add up
      to the shards', i.e. to the GPUs' budgets);
    - the shards' streams: each row block its own, a table-wise shard or every column
      block of one row range one (they see the same ids), each data-parallel replica its
      own; `expected_lookups` = their sum (unique ids of a row block add up to the
      table's; a column block's are the table's);
    - the histogram in the table's rows: hits(k) = sum over streams of the stream's hits
      at k x its height / H (what one load factor gives each shard), read from each
      stream's histogram (exact at its edges, linear between), in `choose_bins` bins for
      the combined load factor; U = the streams' U.
    A table the shards do not name keeps its one-GPU entry."""
    tables = document["tables"]
    by_table: dict[str, list[dict[str, Any]]] = {}
    for shard in document["cluster"]["shards"]:
        by_table.setdefault(shard["table"], []).append(shard)
    out: dict[str, Any] = {}
    for name, table in tables.items():
        shards = by_table.get(name)
        if not shards:
            out[name] = table
            continue
        height = int(table["height"])
        widths = [s["columns"][1] - s["columns"][0] for s in shards]
        factors = {s["load_factor"] for s in shards}
        if None in factors or any(s["cache_rows"] is None for s in shards):
            factor = None
        elif len(factors) == 1:
            factor = float(next(iter(factors)))
        else:
            cache = sum(s["cache_rows"] * w for s, w in zip(shards, widths, strict=True))
            whole = sum(s["height"] * w for s, w in zip(shards, widths, strict=True))
            factor = min(cache / whole, 1.0) if whole else None
        streams: dict[tuple[int, int, int], dict[str, Any]] = {}
        for s in shards:
            rank = int(s["rank"]) if s["type"] == "data-parallel" else -1
            streams.setdefault((int(s["rows"][0]), int(s["rows"][1]), rank), s)
        one = list(streams.values())
        n = choose_bins(height, None if factor is None else factor * height, at_least)
        if len(one) == 1 and one[0]["height"] == height and one[0]["bins"] == n:
            hist = list(one[0]["mrc_hist_counts"])
        else:
            k = edge_sizes(height, n)[:-1].astype(np.float64)
            hits = sum(
                (hits_at(s["mrc_hist_counts"], s["height"], k * s["height"] / height)
                 for s in one),
                np.zeros(len(k)),
            )  # fmt: skip
            unique = float(sum(sum(s["mrc_hist_counts"]) for s in one))
            hist = histogram(hits, unique)
        out[name] = {
            "height": height,
            "bins": n,
            "mrc_hist_counts": hist,
            "expected_lookups": float(sum(s["expected_lookups"] for s in one)),
            "cacheability": torchrec_cacheability(hist, height),
            "load_factor": factor,
            "pooling_factor": table.get("pooling_factor"),
            "shards": len(shards),
        }
    return out


# the plain-HBM and the uncached kernel of a family, for tables that fit whole or get no
# cache (TorchRec's caching kernels take a load factor strictly between 0 and 1)
_WHOLE = {"fused": ("fused", "fused_uvm"), "quant": ("quant", "quant_uvm")}


def parameter_constraints(
    path: str | Path,
    *,
    compute_kernels: Sequence[str] | None = None,
    algorithm: str = "lru",
    load_factors: Mapping[str, float | None] | None = None,
    **constraints: Any,
) -> dict[str, ParameterConstraints]:
    """TorchRec `ParameterConstraints` per table name from a plan's `torchrec.json` (or
    its folder). A table with a cache: `compute_kernels` (default
    `["fused_uvm_caching"]`), `cache_params=CacheParams(algorithm, load_factor, stats=
    EmbeddingOffloadStats(...))`, `pooling_factors=[the table's]`; a table that fits whole
    (load factor 1): `["fused"]` and no cache (`["quant"]` where every kernel asked for is
    a quant one); a table with no cache rows (load factor 0): `["fused_uvm"]`
    (`["quant_uvm"]`). The load factor is the plan's split (a cluster plan's: its shards
    combined, `combine_shards`), or `load_factors[name]` (None lets TorchRec choose); any
    other `ParameterConstraints` field from `constraints` (e.g. `sharding_types=[...]`)
    goes to every table. The stats describe LRU whatever `algorithm`. The table names are
    the plan's: TorchRec matches them with its `EmbeddingBagConfig` names. Needs torch
    and torchrec (not replay's dependencies): ConfigError when they cannot be imported;
    `TorchRecArgumentError` (a ValueError) for a kernel TorchRec lacks."""
    document = read_torchrec_stats(path)
    algo = str(algorithm).lower()
    if algo not in ALGORITHMS:
        raise TorchRecArgumentError(
            f"algorithm {algorithm!r}: TorchRec's caches take {', '.join(ALGORITHMS)}"
        )
    kernels = ["fused_uvm_caching"] if compute_kernels is None else compute_kernels
    if (
        not isinstance(kernels, list | tuple)
        or not kernels
        or not all(isinstance(k, str) for k in kernels)
    ):
        raise TorchRecArgumentError(
            f"compute_kernels {_shown(kernels)}: give a non-empty list of TorchRec's kernel "
            "names, e.g. ['fused_uvm_caching']"
        )
    kernels = list(kernels)
    chosen = dict(load_factors or {})
    for name, value in chosen.items():
        if value is not None and not (_number(value) and 0 <= value <= 1):
            raise TorchRecArgumentError(
                f"load_factors[{name!r}] = {_shown(value)}: a load factor is in [0, 1] or None"
            )
    try:
        import torch
        from torchrec.distributed.embedding_types import EmbeddingComputeKernel
        from torchrec.distributed.planner.shard_estimators import EmbeddingOffloadStats
        from torchrec.distributed.planner.types import ParameterConstraints
        from torchrec.distributed.types import CacheAlgorithm, CacheParams
    except (ImportError, OSError) as exc:  # OSError: a native library that fails to load
        detail = " ".join(str(exc).split())
        raise ConfigError(
            "parameter_constraints needs TorchRec, which replay does not install: pip install "
            "-e '.[torchrec]' && pip install --no-deps torchrec==1.8.0 (or pip install "
            f"torchrec with fbgemm-gpu, or fbgemm-gpu-cpu without a GPU) [{detail}]"
        ) from None
    known = [k.value for k in EmbeddingComputeKernel]
    unknown = [k for k in kernels if k not in known]
    if unknown:
        raise TorchRecArgumentError(
            f"compute_kernels: {', '.join(map(repr, unknown))} is not one of TorchRec's "
            f"kernels ({', '.join(known)})"
        )
    family = "quant" if all(k.startswith("quant") for k in kernels) else "fused"
    whole_kernel, uncached_kernel = _WHOLE[family]
    entries = combine_shards(document) if "cluster" in document else document["tables"]
    out: dict[str, ParameterConstraints] = {}
    for name, table in entries.items():
        factor = chosen.get(name, table["load_factor"])
        extra = dict(constraints)
        if "pooling_factors" not in extra and table.get("pooling_factor"):
            extra["pooling_factors"] = [float(table["pooling_factor"])]
        if factor is not None and factor >= 1.0:
            out[name] = ParameterConstraints(compute_kernels=[whole_kernel], **extra)
            continue
        if factor is not None and factor <= 0.0:
            out[name] = ParameterConstraints(compute_kernels=[uncached_kernel], **extra)
            continue
        stats = EmbeddingOffloadStats(
            cacheability=float(table["cacheability"]),
            expected_lookups=table["expected_lookups"],
            # float64: the cumulative sums of large counts stay exact
            mrc_hist_counts=torch.tensor(table["mrc_hist_counts"], dtype=torch.float64),
            height=int(table["height"]),
        )
        cache = CacheParams(
            algorithm=CacheAlgorithm[algo.upper()],
            load_factor=None if factor is None else float(factor),
            stats=stats,
        )
        out[name] = ParameterConstraints(compute_kernels=list(kernels), cache_params=cache, **extra)
    return out


__all__ = [
    "DEFAULT_BINS",
    "FILE_NAME",
    "FORMAT",
    "VERSION",
    "TorchRecArgumentError",
    "TorchRecFileError",
    "choose_bins",
    "combine_shards",
    "edge_sizes",
    "parameter_constraints",
    "read_torchrec_stats",
    "torchrec_cacheability",
    "torchrec_stats",
]
