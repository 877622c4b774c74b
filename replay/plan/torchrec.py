"""TorchRec's cache statistics from a plan's horizon: `torchrec.json`, and the
`ParameterConstraints` TorchRec's planner takes from it.

TorchRec (github.com/pytorch/torchrec) sizes a table's UVM cache with a load factor
(`CacheParams.load_factor`, cache rows / table rows) and can weigh it with measured
statistics, `EmbeddingOffloadStats(cacheability, expected_lookups, mrc_hist_counts,
height)` (`torchrec/distributed/planner/shard_estimators.py`; `CacheParams` in
`torchrec/distributed/types.py`, `ParameterConstraints` in
`torchrec/distributed/planner/types.py`; its `EmbeddingOffloadScaleupProposer` in
`torchrec/distributed/planner/proposers.py` grows the caches in order of
cacheability x expected_lookups). Its reading of a histogram h of n bins over a table of
H rows, at load factor f (`estimate_cache_miss_rate`):

    edges e_i = i H / n (i = 0..n, `torch.linspace(0, H, n + 1)`, float32)
    ys = 1 - cumsum(h) / sum(h), then ys + [0, 1]
    miss(f) = ys[bucketize(f H - 1, edges, right=True) - 1]

that is, with j the number of edges <= f H - 1: miss = 1 when j = 0 (a cache under one
row), else 1 - (h_0 + ... + h_(j-1)) / sum(h); 0 when sum(h) = 0.

What we export, per table (its own LRU cache over the table's table-local rows, as
`replay.analysis.horizon.per_table_mrc` measures it over the whole horizon):

- `mrc_hist_counts[b]` = the lookups whose LRU stack distance d (0-based: the distinct
  rows of the table used since the row's previous lookup; a cache of k rows hits d <= k - 1)
  lies in [e_b, e_(b+1)); d is an integer, so that is ceil(e_b) <= d < ceil(e_(b+1)), and
  the bin is hits(k_(b+1)) - hits(k_b) with k_b = ceil(b H / n) and hits(k) the lookups a
  cache of k rows hits (k_0 = 0, k_n = H). Only finite distances: TorchRec's reading is
  0 at f = 1, so it cannot hold the first lookups of rows (cold misses).
- `cold_miss_ratio` = cold misses / the table's lookups over the run = our miss ratio at
  H rows. With it our whole curve is cold + (1 - cold) x TorchRec's miss(f): at f with
  j as above, that is our miss ratio at ceil(e_j) rows, the first edge above f H - 1
  rounded up. So it is exact at every edge size k_b (f = k_b / H; every integer size when
  H < n) and at any size within one bin: between our miss ratio at (f - 1/n) H and at
  (f + 1/n) H (a fractional size holds floor(size) rows).
- `cacheability`: the area under TorchRec's own reading of the histogram over f in
  [0, 1], piecewise constant between the points (e_i + 1) / H (so TorchRec and the file
  agree; cold misses are not in it).
- `expected_lookups`: the mean distinct rows of the table per batch (a trace batch is a
  global batch), counted exactly (`TouchedCounter` at windows of one batch, over the
  lookups) over the horizon at R = 1.
- `load_factor`: the plan's split of the cache budget (`replay.plan.cache.split_budget`).

At sample rate R < 1 (the horizon is a SHARDS spatial sample, `replay.workload.sampled`)
the curves are SHARDS-scaled (stack distances / R, the full stream's lookups), joined to
the exact head of the full stream below its capacity where that head is usable (else the
sizes below the sample's resolution are read linearly between 0 and the resolution, and
the table says so); the counts are then expected counts (floats, made monotone), and
`sampled_rows` says how many of the table's rows the sample holds and `exact_below_rows`
up to which size the curve is the exact head's: a table with few sampled rows and no head
over all its rows (a small table at a low R; `few_sampled_rows` lists those under
`FEW_SAMPLED_ROWS`) has a curve of little worth, whatever SHARDS's error bound says.
The distinct rows per batch are not read from the sample: R x a batch's distinct rows is
a fraction of a row, so on the quickstart's Criteo Terabyte plan (R = 2^-12) the sample's
count / R was 0 for 11 of its 26 tables and off by up to 11x for others (C5: 76 for
869). A sampled workload has neither reuse nor drift (`replay.workload.sampled` refuses
them), so its batches are independent and identically distributed, and the first
`SPAN_BATCHES` batches of the full stream, generated in full, give the mean (within 1%
between two seeds there); a sampled source without a workload spec falls back to the
sample's count / R.

A cluster plan (`replay plan` with a `[cluster]`) adds `cluster`: TorchRec's caches are
one per shard, so per shard of the recommended placement `shards` holds an entry with the
fields above read over that shard's own stream (`replay.plan.torchrec_shards`, one pass):
`table`, `rank`, `node`, `type`, `rows` [a, b), `columns` [c0, c1), `height` (b - a; a
column block or data-parallel replica: the table's rows), `bins`, `mrc_hist_counts`,
`expected_lookups` (the shard's distinct rows per batch), `cacheability`,
`cold_miss_ratio`, `lookups` (over the run) and `lookups_per_batch` (row blocks add up to
the table's, each column block sees all, a data-parallel replica about 1 / W),
`load_factor` and `cache_rows` (its GPU's budget split among its shards by
`replay.plan.cache.split_budget`, `split` says so); beside them `world`, `nodes`,
`gpus_per_node`, `budget_rows_per_gpu`, `method`, `expected_lookups`, `few_sampled_rows`.
`tables` stay the one-GPU reference; a one-GPU plan's file has no `cluster`.

Assumed, not modelled: FBGEMM's cache is set-associative (32-way LRU sets), not fully
associative. `parameter_constraints` needs torch and torchrec, which replay does not
install (and reads `tables` only: TorchRec's constraints are per table).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from replay._json import parse_json
from replay.errors import ConfigError, InputError
from replay.workload.spec import WorkloadSpec

if TYPE_CHECKING:
    from torchrec.distributed.planner.types import ParameterConstraints

FORMAT = "replay-torchrec-cache-stats"
VERSION = 1
FILE_NAME = "torchrec.json"
DEFAULT_BINS = 100
MAX_BINS = 1_000_000
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


def edge_sizes(height: int, bins: int) -> np.ndarray:
    """k_b = ceil(b height / bins) for b = 0..bins (int64, integer arithmetic): bin b holds
    the stack distances d with k_b <= d < k_(b+1), i.e. d in [b H / n, (b + 1) H / n)."""
    b = np.arange(bins + 1, dtype=np.int64)
    return -((-b * int(height)) // int(bins))


def torchrec_cacheability(hist: np.ndarray | list[float], height: int) -> float:
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
    from replay.trace.stream import iter_batch_ranges

    tables = len(src.table_rows)
    if int(src.num_batches) < 1:
        return np.zeros(tables)
    counter = TouchedCounter(src.table_rows, int(src.num_batches), batches=[1])
    for r in iter_batch_ranges(src, with_updates=False):
        counter.feed(r.keys, r.bounds, r.batch_start)
    return counter.curve(rate, "lookups").per_table[:, 0].copy()


def _sizes_per_table(src: Any, heights: list[int], bins: int, rate: float) -> tuple[
    list[np.ndarray], list[int]
]:  # fmt: skip
    """The cache sizes each table's curve is read at (the edge sizes >= 1), and the size
    below which a sampled table's edges are interpolated (0: none). A sampled curve is
    exact below the sample's resolution only where the full stream's head is usable
    (`per_table_mrc` refuses smaller sizes otherwise), so those tables are read from the
    resolution up."""
    edges = [np.unique(np.maximum(edge_sizes(h, bins)[1:], 1)) for h in heights]
    if rate >= 1.0:
        return edges, [0] * len(heights)
    from replay.analysis.shards import resolution_rows, shards_threshold
    from replay.plan.table_curves import per_table_sizes

    floor = resolution_rows(shards_threshold(rate))
    # 1 where the full stream's head is usable (cached on the source, as the plan's curves
    # read it), else the resolution
    firsts = per_table_sizes(src, getattr(src, "spec", None), rate, floor, heights)
    sizes, below = [], []
    for t, e in enumerate(edges):
        if firsts[t] == 1 or e[0] >= floor:
            sizes.append(e)
            below.append(0)
        else:
            sizes.append(np.unique(np.maximum(e, floor)))
            below.append(floor)
    return sizes, below


def torchrec_sizes(source: Any, bins: int) -> list[np.ndarray]:
    """The cache sizes (rows) `torchrec_stats` reads each table's curve at."""
    from replay.analysis.horizon import source_sample_rate

    heights = [int(r) for r in source.table_rows]
    return _sizes_per_table(source, heights, int(bins), source_sample_rate(source))[0]


def torchrec_stats(
    source: Any,
    *,
    bins: int = DEFAULT_BINS,
    load_factors: Mapping[str, float] | None = None,
    threads: int | None = None,
    curves: Sequence[Any] | None = None,
) -> dict[str, Any]:
    """The `torchrec.json` document of a source (a trace folder, an on-the-fly or a
    sampled workload, as `replay.analysis.horizon` reads them): per table its histogram
    in `bins` bins, expected lookups, cacheability, cold-miss ratio, height and the load
    factor given in `load_factors` (None where none is given). Two passes over the
    source: the per-table curves at the edge sizes, and the distinct rows per batch.
    `curves`: the per-table curves already read at (at least) `torchrec_sizes`' sizes,
    as the plan does in one pass with its own sizes (then one pass here)."""
    from replay._version import __version__
    from replay.analysis.horizon import _open, per_table_mrc, source_sample_rate

    if isinstance(bins, bool) or not isinstance(bins, int | np.integer):
        raise ConfigError(f"torchrec bins: {bins!r} is not a whole number")
    if not 1 <= int(bins) <= MAX_BINS:
        raise ConfigError(f"torchrec bins: {bins} must be in [1, {MAX_BINS:,}]")
    bins = int(bins)
    src = _open(source, threads)
    rate = source_sample_rate(src)
    names = [str(n) for n in src.table_names]
    heights = [int(r) for r in src.table_rows]
    sizes, below = _sizes_per_table(src, heights, bins, rate)
    if curves is None:
        curves = per_table_mrc(src, sizes, threads=threads)
    spec = getattr(src, "spec", None)
    if rate < 1.0 and isinstance(spec, WorkloadSpec) and _closed_form(spec):
        # production scale: one batch is too large to count (`replay.analysis.touched_model`)
        from replay.analysis.touched_model import expected_touched

        distinct = expected_touched(spec, [1], kind="lookups")[:, 0]
        lookups_from = "the spec in closed form (E D(1), replay.analysis.touched_model)"
    elif rate < 1.0 and isinstance(spec, WorkloadSpec):  # i.i.d. batches: see the docstring
        from replay.workload.onthefly import GeneratedTrace

        span = span_batches(spec, int(src.num_batches))
        full = GeneratedTrace(spec.with_overrides(batches=max(span, 1)), threads=threads)
        distinct = _distinct_per_batch(full, 1.0)
        lookups_from = f"the first {span} batches of the full stream"
    else:
        distinct = _distinct_per_batch(src, rate)
        lookups_from = "the horizon" + ("" if rate >= 1.0 else " (its sample's count / R)")
    factors = dict(load_factors or {})
    tables: dict[str, Any] = {}
    for t, (name, height, curve) in enumerate(zip(names, heights, curves, strict=True)):
        edges = edge_sizes(height, bins)
        lookups = int(curve.lookups)
        miss = np.clip(np.asarray(curve.miss_ratios, dtype=np.float64), 0.0, 1.0)
        at = np.asarray(curve.sizes, dtype=np.int64)
        # exact: the integer miss counts, recovered from the ratios; sampled: expected hits
        exact_hits = lookups - np.rint(miss * lookups)
        hits_at = exact_hits if rate >= 1.0 else lookups * (1.0 - miss)
        hits = np.zeros(bins + 1)
        inside = edges >= max(below[t], 1)
        hits[inside] = hits_at[np.searchsorted(at, edges[inside])]
        if below[t]:  # a sampled table without a usable head: linear below the resolution
            low = (edges > 0) & ~inside
            hits[low] = hits_at[0] * edges[low] / below[t]
        hits = np.maximum.accumulate(hits)  # a sampled curve may wiggle; counts stay >= 0
        hist = np.diff(hits)
        cold = 1.0 - float(hits[-1]) / lookups if lookups else 0.0
        factor = factors.get(name)
        entry: dict[str, Any] = {
            "height": height,
            "bins": bins,
            "mrc_hist_counts": [int(c) for c in hist] if rate >= 1.0 else hist.tolist(),
            "expected_lookups": float(distinct[t]),
            "cacheability": torchrec_cacheability(hist, height),
            "cold_miss_ratio": max(cold, 0.0),
            "load_factor": None if factor is None else float(factor),
            "lookups": lookups,
        }
        if rate < 1.0:
            entry["sampled_rows"] = round(curve.distinct_keys * rate)
            # the curve is the full stream's exact head's up to this many rows (0: none)
            entry["exact_below_rows"] = int(curve.extra.get("exact_below_rows", 0))
        if below[t]:
            entry["interpolated_below_rows"] = int(below[t])
        tables[name] = entry
    exact = rate >= 1.0
    return {
        "format": FORMAT,
        "version": VERSION,
        "replay_version": __version__,
        "batches": int(src.num_batches),
        "sample_rate": float(rate),
        "method": "exact stack distances"
        if exact
        else f"SHARDS at R = {rate:g} (stack distances / R; counts are expected counts of "
        "the full stream), exact head below its capacity",
        "histogram": "mrc_hist_counts[b]: lookups whose LRU stack distance d (distinct rows "
        "of the table since the row's previous lookup) lies in [b height / bins, (b + 1) "
        "height / bins); first lookups (cold misses) are not in it",
        "miss_ratio": "cold_miss_ratio + (1 - cold_miss_ratio) x "
        "EmbeddingOffloadStats.expected_miss_rate(load_factor)",
        "expected_lookups": f"mean distinct rows of the table per batch, over {lookups_from}",
        # tables whose curve rests on a handful of sampled rows (plan.md names them)
        "few_sampled_rows": [
            name
            for name, t in tables.items()
            if t.get("sampled_rows", FEW_SAMPLED_ROWS) < FEW_SAMPLED_ROWS
            and t["exact_below_rows"] < t["height"]
        ],
        "tables": tables,
    }


def _bad(path: Path, why: str) -> InputError:
    return InputError(f"{path}: {why} (a `replay plan` {FILE_NAME} is expected)")


def read_torchrec_stats(path: str | Path) -> dict[str, Any]:
    """A `torchrec.json` (a plan folder or the file), checked: InputError for another
    file, another version, or a table whose fields do not fit TorchRec's."""
    p = Path(path)
    if p.is_dir():
        p = p / FILE_NAME
    try:
        text = p.read_bytes()
    except FileNotFoundError:
        raise _bad(p, "no such file") from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the name
        raise _bad(p, f"unreadable ({' '.join(str(exc).split())})") from None
    document = parse_json(text, p, InputError)
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise _bad(p, f"not a {FORMAT} document")
    if document.get("version") != VERSION:
        raise _bad(p, f"version {document.get('version')!r}; this replay reads {VERSION}")
    tables = document.get("tables")
    if not isinstance(tables, dict) or not tables:
        raise _bad(p, "no tables")
    for name, table in tables.items():
        missing = [k for k in _TABLE_KEYS if not isinstance(table, dict) or k not in table]
        if missing:
            raise _bad(p, f"table {name!r} lacks {', '.join(missing)}")
        hist = table["mrc_hist_counts"]
        height, bins = table["height"], table["bins"]
        # TorchRec takes the height as an int64 tensor's bound; bools are ints to Python
        if not (_whole(height, MAX_HEIGHT) and _whole(bins, MAX_BINS)):
            raise _bad(
                p,
                f"table {name!r}: height {_shown(height)} and bins {_shown(bins)} must be whole "
                f"numbers, height 1 to 2^63 - 1 and bins 1 to {MAX_BINS:,}",
            )
        if not isinstance(hist, list) or len(hist) != bins:
            raise _bad(p, f"table {name!r}: mrc_hist_counts must hold {bins} counts")
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
                f"table {name!r}: mrc_hist_counts holds {_shown(bad)}; each count must be a "
                "finite number >= 0",
            )
        lf = table["load_factor"]
        if lf is not None and not (_number(lf) and 0 <= lf <= 1):
            raise _bad(p, f"table {name!r}: load_factor {_shown(lf)} must be in [0, 1] or null")
        for key in ("expected_lookups", "cacheability", "cold_miss_ratio"):
            value = table[key]
            if not (_number(value) and value >= 0):
                raise _bad(p, f"table {name!r}: {key} {_shown(value)} must be a number >= 0")
    return document


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


def _shown(value: Any) -> str:
    """A field's value as a message quotes it, cut short (a 4,000-digit integer parses)."""
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def parameter_constraints(
    path: str | Path,
    *,
    algorithm: str = "lru",
    load_factors: Mapping[str, float | None] | None = None,
    **constraints: Any,
) -> dict[str, ParameterConstraints]:
    """TorchRec `ParameterConstraints` per table name from a plan's `torchrec.json` (or
    its folder): `cache_params=CacheParams(algorithm, load_factor, stats=
    EmbeddingOffloadStats(...))`, the load factor the plan's split gives (or
    `load_factors[name]`; None lets TorchRec choose), any other `ParameterConstraints`
    field from `constraints` (e.g. `compute_kernels=["fused_uvm_caching"]`). The stats
    describe LRU whatever `algorithm`. The table names are the plan's: TorchRec matches
    them with its `EmbeddingBagConfig` names. Needs torch and torchrec (not replay's
    dependencies): ConfigError when they cannot be imported."""
    document = read_torchrec_stats(path)
    algo = str(algorithm).lower()
    if algo not in ALGORITHMS:
        raise ConfigError(
            f"algorithm {algorithm!r}: TorchRec's caches take {', '.join(ALGORITHMS)}"
        )
    try:
        import torch
        from torchrec.distributed.planner.shard_estimators import EmbeddingOffloadStats
        from torchrec.distributed.planner.types import ParameterConstraints
        from torchrec.distributed.types import CacheAlgorithm, CacheParams
    except (ImportError, OSError) as exc:  # OSError: a native library that fails to load
        detail = " ".join(str(exc).split())
        raise ConfigError(
            f"parameter_constraints needs TorchRec, which replay does not install: pip install "
            f"torchrec (with fbgemm-gpu, or fbgemm-gpu-cpu without a GPU) [{detail}]"
        ) from None
    chosen = dict(load_factors or {})
    out: dict[str, ParameterConstraints] = {}
    for name, table in document["tables"].items():
        stats = EmbeddingOffloadStats(
            cacheability=float(table["cacheability"]),
            expected_lookups=table["expected_lookups"],
            # float64: the cumulative sums of large counts stay exact
            mrc_hist_counts=torch.tensor(table["mrc_hist_counts"], dtype=torch.float64),
            height=int(table["height"]),
        )
        factor = chosen.get(name, table["load_factor"])
        cache = CacheParams(
            algorithm=CacheAlgorithm[algo.upper()],
            load_factor=None if factor is None else float(factor),
            stats=stats,
        )
        out[name] = ParameterConstraints(cache_params=cache, **constraints)
    return out


__all__ = [
    "DEFAULT_BINS",
    "FILE_NAME",
    "FORMAT",
    "VERSION",
    "edge_sizes",
    "parameter_constraints",
    "read_torchrec_stats",
    "torchrec_cacheability",
    "torchrec_stats",
]
