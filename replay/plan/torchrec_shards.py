"""TorchRec's cache statistics per shard of a cluster plan: `torchrec.json`'s `cluster`.

Placement. Called by `replay.plan.cluster.plan_cluster` with the placement the plan
recommends (`replay.engine.placement`) and the horizon the plan reads; its result goes
into plan.json's `cluster` under `SHARDS_KEY` only while the plan is built:
`replay.plan.write` moves it into `torchrec.json` (`torchrec_document`) and leaves it out
of plan.json. A one-GPU plan has no `cluster`.

Why per shard. FBGEMM builds a cache per rank's TBE over its local shards
(`CacheParams.load_factor` x the shard's rows), so a table's statistics are not what a
shard's cache sees:

- a row-wise (or table-row-wise) shard of rows [a, b) is a table of height b - a whose
  stream is the table's lookups that fall in [a, b) (row - a);
- a table-wise shard is the table; a column-wise shard is the table's rows at fewer
  columns, and every column block sees every lookup of its table;
- a data-parallel replica sees the lookups of the samples its rank owns (about 1 / W),
  over all the table's rows.

Each shard's entry has TorchRec's fields, read as the one-GPU file's tables
(`replay.plan.torchrec`'s docstring: `mrc_hist_counts` of the shard's stream of each
batch's unique ids over `bins` bins of the shard's height, the cold misses in the last
bin, `bins` from `choose_bins` at the shard's cache, `cacheability`, `cold_miss_ratio`,
`expected_lookups` = mean unique ids of the shard per global batch) plus where it sits:
`table`, `rank`, `node`, `type`, `rows` [a, b), `columns` [c0, c1), `height` = b - a,
`lookups` (over the run, full stream), `lookups_per_batch`, `load_factor` and
`cache_rows` (its share of its GPU's budget; load_factor = cache_rows / height exactly).
TorchRec takes one constraint per table: `replay.plan.torchrec.combine_shards` says how
a table's shards become it.

One pass. The horizon's batch ranges are routed once by one numba kernel
(`_route_streams`) that takes its blocks and data-parallel hash from
`replay.plan.rank_curves` (`_layout`, `_dp_rank`: the same routing as the per-GPU
curves and the cluster replay) and gives each lookup one *stream*: the block of a
row-split table, the table itself for a table-wise, single-block or column-wise table
(all of a column-wise table's blocks see the same stream: one state, not one per
block), each data-parallel replica its own. Each (stream, row)'s first occurrence in its
batch is kept (`replay.plan.torchrec_unique.FirstInBatch` on the streams' rows end to
end: a row in two replicas' samples is a unique id of each), and each stream's kept rows
feed its own LRU state (`replay.analysis.stack.StackDistances`, exact, Mattson et al.
1970); never one pass per shard. At R = 1 the unique ids per (batch, stream) are counted
in the same pass.

Sampled horizons (R < 1, `replay.workload.sampled`). SHARDS (Waldspurger et al., FAST
2015) keeps a row by the hash of its global key, and routing and keeping first
occurrences keep every use of a row in one stream, so a stream's sampled unique ids are
the SHARDS sample of its full stream of unique ids: its curve is SHARDS_adj at R (miss(C)
= (cold_s + #{d_s >= ceil(C R)}) / (U R)), U the stream's unique ids over the run (its
mean per batch, counted over the first `torchrec.span_batches` batches of the full
stream, generated and routed by the same kernel, or in closed form at production scale;
without a workload spec, the sample's count / R, x batches). Sizes below the sample's
resolution (16 (1 - R) / R rows) are read linearly between 0 and it
(`interpolated_below_rows`), and `sampled_rows` says how many rows the sample holds: a
shard with few sampled rows (`few_sampled_rows`) has a curve of little worth; a few
hundred sampled rows do not resolve a cache of most of a shard's rows (the one-GPU file
measured SHARDS 42-96% low there). A shard whose stream is its table's (table-wise,
column-wise, a single row block) takes, at R < 1, its table's one-GPU entry instead
(`table_stats`: Che's approximation above the full stream's exact head,
`replay.plan.torchrec_unique`), read between its edges linearly (`hits_at`); `curve`
says which.

The split of a GPU's budget among its shards: the plan's per-table rule
(`replay.plan.cache.split_budget`, greedy on each curve's upper concave hull) applied
per GPU, over that GPU's shards' curves of unique ids (read on `curve_sizes` and 100
equal bins), each weighed by its unique ids, so the GPU's cache fetches over the run are
minimised; `cache_rows` = the rows it gets, floored; rows the greedy leaves (no shard's
curve gains from more: a run's curve is flat past the rows it touched) go to the busiest
shards, each up to whole, so a GPU's caches hold its whole budget unless all its shards
fit. ASSUMPTION: one cache per shard
(FBGEMM groups a rank's same-config tables in one TBE whose cache the shards then share;
the plan's per-GPU answers in plan.json model that shared LRU). Shards with no rows
(TorchRec's trailing empty row-wise blocks) have no cache and no entry. The file's
`tables` stay the one-GPU reference (a GPU holding every table with the whole budget),
as plan.json's one-GPU sections.

Memory: one state per stream (exact: 4 B a row directly indexed up to
`rank_curves.DIRECT_MAX_ROWS` rows in all, else a hash map over the rows seen; sampled:
the sampled rows), per range the routed streams and rows and their grouping (24 B a
lookup), and a set of twice a batch's lookups (8 B a slot) for the first occurrences.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from replay._intrinsics import ix
from replay._jit import kernel
from replay._schema_stamp import stamp
from replay.analysis.shards import SHARDS_MODULUS
from replay.analysis.stack import DEFAULT_MIN_WINDOW, StackDistances
from replay.errors import ConfigError
from replay.plan.cache import curve_sizes, split_budget
from replay.plan.rank_curves import (
    _DP,
    _GRID,
    _ROWS,
    DIRECT_MAX_ROWS,
    DP_SALT,
    _dp_rank,
    _layout,
    _table_full_lookups,
    row_block,
)
from replay.plan.torchrec import (
    DEFAULT_BINS,
    FEW_SAMPLED_ROWS,
    Counts,
    HistogramHits,
    choose_bins,
    counts_array,
    edge_sizes,
    histogram,
    span_batches,
    torchrec_cacheability,
)
from replay.plan.torchrec_unique import FirstInBatch
from replay.system.sharding import DATA_PARALLEL, Placement
from replay.trace.keys import table_of, table_offsets
from replay.trace.stream import iter_batch_ranges
from replay.workload.row_mass import block_shares

SHARDS_KEY = "torchrec_shards"  # plan.json's cluster part moved into torchrec.json
SPLIT_RULE = (
    "each GPU's budget (--cache-budget, per GPU) split among its shards by the plan's "
    "per-table rule (replay.plan.cache.split_budget: greedy on the upper concave hull of "
    "each shard's own curve of its unique ids per batch, the GPU's cache fetches over the "
    "run minimised); load_factor = cache rows / height"
)

# What the streams' stack states hold at their start, in all: each state's first position
# window and its key map and histogram are this divided among the streams (within
# `stack`'s defaults), since every state grows with its keys and the distances are the
# same at any size. meta-2021's day on 128 GPUs with `sharding = "row-wise"` routes 856
# tables x 128 blocks = 109,568 streams, whose states at the defaults (2^16 positions,
# 1,024 keys) took 10.5 GiB before most of them saw a key (the plan peaked at 11.0 GiB).
STATE_WINDOWS = 1 << 24  # positions (int32: 64 MiB)
STATE_KEYS = 1 << 20  # map slots and histogram bins


def _state_sizes(streams: int) -> tuple[int, int]:
    """(min_window, initial_keys) of each of `streams` stack states."""
    n = max(int(streams), 1)
    window = min(max(STATE_WINDOWS // n, 64), DEFAULT_MIN_WINDOW)
    keys = min(max(STATE_KEYS // n, 16), 1024)
    return window, 1 << (keys.bit_length() - 1)


@dataclass(frozen=True, eq=False)
class _Streams:
    """Each routing block's stream (`stream_of[block]`), the streams' tables and heights,
    and each shard's block (-1: an empty shard)."""

    stream_of: np.ndarray  # int64 per block
    table: np.ndarray  # int64 per stream
    height: np.ndarray  # int64 per stream
    first_row: np.ndarray  # int64 per stream: its first row in its table
    shard_block: list[int]  # per shard
    layout: Any  # `rank_curves._layout` of the placement (made once: ~0.1 s at 856 tables)


def _streams(placement: Placement, *, replicas_apart: bool) -> _Streams:
    """Streams of the layout's blocks (module docstring); `replicas_apart`: one stream per
    data-parallel replica, else one per data-parallel table."""
    x = _layout(placement)
    local_of: list[int] = []
    nxt = [0] * placement.world
    for s in placement.shards:
        local_of.append(nxt[s.rank])
        nxt[s.rank] += s.rows
    block_of = {}
    for t in range(len(placement.tables)):
        for blk in range(int(x.base[t]), int(x.base[t] + x.count[t])):
            block_of[(t, int(x.rank[blk]), int(x.local[blk]))] = blk
    shard_block = [
        block_of.get((s.table, s.rank, local_of[i]), -1) if s.rows > 0 else -1
        for i, s in enumerate(placement.shards)
    ]
    stream_of = np.zeros(len(x.start), dtype=np.int64)
    table: list[int] = []
    height: list[int] = []
    first: list[int] = []
    for t, shape in enumerate(placement.tables):
        lo, hi = int(x.base[t]), int(x.base[t] + x.count[t])
        if x.kind[t] == _GRID and hi > lo:  # a stream per row block, every column block's
            ranges: dict[tuple[int, int], int] = {}
            for blk in range(lo, hi):
                a = int(x.start[blk])
                key = (a, min(a + int(x.geven[blk]), int(shape.rows)))
                if key not in ranges:
                    if blk >= lo + -(-int(shape.rows) // int(x.even[t])):
                        raise ConfigError(
                            f"table {shape.name!r}: its grid column blocks split the rows "
                            "differently; TorchRec's statistics per shard take one row split "
                            "(each column block over a whole node)"
                        )
                    ranges[key] = len(table)
                    table.append(t)
                    height.append(key[1] - key[0])
                    first.append(a)
                stream_of[blk] = ranges[key]
            continue
        own = (x.kind[t] == _ROWS and hi - lo > 1) or (x.kind[t] == _DP and replicas_apart)
        if own:
            stops = np.append(x.start[lo + 1 : hi], shape.rows) if x.kind[t] == _ROWS else None
            for blk in range(lo, hi):
                stream_of[blk] = len(table)
                table.append(t)
                if stops is not None:
                    height.append(int(stops[blk - lo] - x.start[blk]))
                    first.append(int(x.start[blk]))
                else:
                    height.append(int(shape.rows))
                    first.append(0)
        elif hi > lo:
            stream_of[lo:hi] = len(table)
            table.append(t)
            height.append(int(shape.rows))
            first.append(0)
    arr = lambda v: np.array(v, dtype=np.int64)  # noqa: E731
    return _Streams(stream_of, arr(table), arr(height), arr(first), shard_block, x)


@kernel
def _route_streams(
    keys: np.ndarray,
    bounds: np.ndarray,
    batch_start: int,
    offsets: np.ndarray,
    kind: np.ndarray,
    even: np.ndarray,
    base: np.ndarray,
    count: np.ndarray,
    start: np.ndarray,
    stream_of: np.ndarray,
    world: int,
    salt: np.uint64,
    out_stream: np.ndarray,
    out_row: np.ndarray,
) -> None:
    """Each lookup's stream and its row in the stream (out[i] for lookup i): the
    block `rank_curves._route` sends it to (a column-wise table's first block stands for
    all of them: they share one stream)."""
    for b in range(len(bounds) - 1):
        lo = bounds[b]
        for i in range(lo, bounds[b + 1]):
            key = np.int64(keys[ix(i)])
            t = table_of(offsets, key)
            row = key - offsets[ix(t)]
            tb = base[ix(t)]
            k_t = kind[ix(t)]
            blk = tb
            if k_t == _ROWS or k_t == _GRID:  # noqa: SIM109 - numba; grid: 1st column block's
                blk = row_block(row, tb, even[ix(t)], count[ix(t)], start)
            elif k_t == _DP:
                blk = tb + _dp_rank(batch_start + b, i - lo, world, salt)
            s = stream_of[ix(blk)]
            out_stream[ix(i)] = s
            out_row[ix(i)] = row - start[ix(blk)] if k_t == _ROWS or k_t == _GRID else row  # noqa: SIM109


@kernel
def _group_rows(stream: np.ndarray, row: np.ndarray, cuts: np.ndarray, out: np.ndarray) -> None:
    """out = the rows grouped by stream (a counting sort: trace order within a stream),
    stream s's at out[cuts[s]:cuts[s + 1]]."""
    cursor = cuts[:-1].copy()
    for i in range(len(stream)):
        s = stream[ix(i)]
        c = cursor[ix(s)]
        out[ix(c)] = row[ix(i)]
        cursor[ix(s)] = c + 1


class _Pass:
    """Routes batch ranges to streams, keeps each (stream, row)'s first occurrence in its
    batch (the stream of each batch's unique ids), feeds each stream's state (`states`:
    None counts only) and counts the unique ids per stream when `distinct` is set."""

    def __init__(
        self, placement: Placement, streams: _Streams, table_rows: np.ndarray, *,
        states: list[Any] | None, distinct: bool,
    ) -> None:  # fmt: skip
        self.x = streams.layout
        self.world = placement.world
        self.offsets = table_offsets(table_rows)
        self.s = streams
        self.states = states
        self.distinct = np.zeros(len(streams.table), dtype=np.int64) if distinct else None
        self.routed = np.zeros(len(streams.table), dtype=np.int64)
        self.flat = table_offsets(streams.height)  # streams' rows end to end
        self.first = FirstInBatch()
        self.batches = 0

    def feed(self, keys: np.ndarray, bounds: np.ndarray, batch_start: int) -> None:
        keys = np.ascontiguousarray(keys, dtype=np.int64)
        bounds = np.ascontiguousarray(bounds, dtype=np.int64)
        n = len(keys)
        self.batches += len(bounds) - 1
        if n == 0:
            return
        stream = np.empty(n, dtype=np.int64)
        row = np.empty(n, dtype=np.int64)
        x = self.x
        _route_streams(
            keys, bounds, int(batch_start), self.offsets, x.kind, x.even, x.base, x.count,
            x.start, self.s.stream_of, self.world, np.uint64(DP_SALT), stream, row,
        )  # fmt: skip
        self.routed += np.bincount(stream, minlength=len(self.routed))
        keep = self.first.mask(self.flat[stream] + row, bounds)
        stream, row = stream[keep], row[keep]
        per_stream = np.bincount(stream, minlength=len(self.routed))
        if self.distinct is not None:
            self.distinct += per_stream
        if self.states is not None and len(stream):
            cuts = np.zeros(len(per_stream) + 1, dtype=np.int64)
            np.cumsum(per_stream, out=cuts[1:])
            rows = np.empty(len(row), dtype=np.int64)
            _group_rows(stream, row, cuts, rows)
            for s in np.flatnonzero(per_stream).tolist():
                self.states[s].feed(rows[int(cuts[s]) : int(cuts[s + 1])])


@dataclass(frozen=True, eq=False)
class _Curve:
    """One stream's LRU over its unique ids per batch: U (full stream) and how to read
    hits at any size (module docstring)."""

    height: int
    unique: float
    cold: float
    state: StackDistances | None = None  # exact, or the SHARDS sample's stack
    threshold: int = 0  # SHARDS's T (0: exact)
    table: dict[str, Any] | None = None  # the one-GPU entry the stream takes (R < 1)
    # that entry's histogram read (`HistogramHits`) and its U, made once for both reads
    table_hits: HistogramHits | None = None
    table_unique: float = 0.0

    def hits(self, sizes: np.ndarray) -> np.ndarray:
        from replay.analysis.shards import SHARDS_MODULUS, resolution_rows

        sizes = np.asarray(sizes, dtype=np.int64)
        n = float(self.unique)
        if self.table_hits is not None:
            whole = self.table_unique
            got = self.table_hits.at(sizes.astype(np.float64))
            out = got * (n / whole) if whole > 0 else np.zeros(len(sizes))
        elif self.threshold == 0:
            assert self.state is not None
            out = np.where(sizes > 0, float(self.state.requests), 0.0)
            out -= np.where(sizes > 0, self.state.misses_at(np.maximum(sizes, 0)), 0)
        else:
            assert self.state is not None
            expected = n * self.threshold / SHARDS_MODULUS
            below = resolution_rows(self.threshold)
            at = np.maximum(sizes, below)
            cuts = -(-at * self.threshold // SHARDS_MODULUS)
            ratio = self.state.misses_at(cuts) / expected if expected > 0 else np.ones(len(at))
            out = n * (1.0 - np.clip(ratio, 0.0, 1.0))
            low = sizes < below
            out[low] *= sizes[low] / below  # linear below the resolution
        out = np.clip(np.where(sizes > 0, out, 0.0), 0.0, n)
        rank = np.argsort(sizes, kind="stable")
        out[rank] = np.maximum.accumulate(out[rank])
        return out


def shard_stats(
    horizon: Any,
    placement: Placement,
    *,
    rate: float,
    spec: Any,
    budget_rows: float,
    bins: int = DEFAULT_BINS,
    table_stats: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The per-shard part of a cluster plan's `torchrec.json` (module docstring), from one
    pass over `horizon` (sampled at `rate`; `spec` the workload, if any). `table_stats`:
    the one-GPU file's tables (`torchrec_stats`): at R < 1 a shard whose stream is its
    table's (table-wise, column-wise, one row block) takes its table's curve from there."""
    tables = dict(table_stats or {})
    from replay.analysis.shards import resolution_rows, shards_threshold

    table_rows = np.asarray(horizon.table_rows, dtype=np.int64)
    exact = rate >= 1.0
    streams = _streams(placement, replicas_apart=True)
    direct = exact and int(streams.height.sum()) <= DIRECT_MAX_ROWS
    read = _pass_read(placement, streams, tables, table_rows, exact=exact, spec=spec)
    # a pass nothing reads needs no states (every shard then takes its table's curve)
    window, keys = _state_sizes(len(streams.height))
    states = (
        [
            StackDistances(int(h), direct=direct, min_window=window, initial_keys=keys)
            for h in streams.height
        ]
        if read
        else []
    )
    main = _Pass(placement, streams, table_rows, states=states, distinct=exact)
    if read:
        for r in iter_batch_ranges(horizon, with_updates=False):
            main.feed(r.keys, r.bounds, r.batch_start)
    batches = max(int(horizon.num_batches), 1)
    if exact:
        full = main.routed.astype(np.float64)
        distinct = main.distinct.astype(np.float64) / batches  # type: ignore[union-attr]  # distinct=exact
        lookups_from = "the horizon"
    else:
        full = _stream_full(horizon, spec, placement, streams, main.routed, rate)
        distinct, lookups_from = _span_distinct(horizon, spec, placement, streams, rate)
    threshold = 0 if exact else shards_threshold(rate)
    below = 0 if exact else resolution_rows(threshold)
    entries: list[dict[str, Any]] = []
    curves: list[_Curve] = []
    for i, shard in enumerate(placement.shards):
        blk = streams.shard_block[i]
        if blk < 0:
            continue
        t = shard.table
        ttype = placement.entry(t).type
        cs = int(streams.stream_of[blk])
        height = int(streams.height[cs])
        st = states[cs] if read else None  # exact: always read
        unique = float(st.requests) if st is not None and exact else float(distinct[cs]) * batches
        whole = tables.get(placement.tables[t].name) if not exact else None
        own = whole is not None and height == int(table_rows[t]) and ttype != DATA_PARALLEL
        if exact:
            assert st is not None
            curve = _Curve(height, unique, float(st.cold), state=st)
        elif own:
            assert whole is not None
            cold = float(whole["cold_miss_ratio"]) * unique
            counts = counts_array(whole["mrc_hist_counts"])
            # U as the counts' exact sum (whole numbers: numpy's int64 sum is Python's)
            total = int(counts.sum()) if counts.dtype.kind in "iu" else sum(counts.tolist())
            curve = _Curve(
                height, unique, cold, table=whole,
                table_hits=HistogramHits(counts, int(whole["height"])), table_unique=float(total),
            )  # fmt: skip
        else:
            assert st is not None  # a shard on its own stream: the pass is read
            cold = min(float(st.cold) * SHARDS_MODULUS / threshold, unique)
            curve = _Curve(height, unique, cold, state=st, threshold=threshold)
        n = float(full[cs])
        entry: dict[str, Any] = {
            "table": placement.tables[t].name,
            "rank": int(shard.rank),
            "node": placement.node_of(shard.rank),
            "type": ttype,
            "rows": [int(shard.row_start), int(shard.row_stop)],
            "columns": [int(shard.col_start), int(shard.col_stop)],
            "height": height,
            "bins": None,
            "mrc_hist_counts": None,
            "expected_lookups": unique / batches,
            "cacheability": None,
            "cold_miss_ratio": min(curve.cold / unique, 1.0) if unique > 0 else 0.0,
            "load_factor": None,
            "cache_rows": None,
            "lookups": round(n) if exact else float(n),
            "lookups_per_batch": n / batches,
        }
        if own:
            assert whole is not None
            for key in ("exact_below_rows", "sampled_rows", "interpolated_below_rows"):
                if key in whole:
                    entry[key] = whole[key]
            entry["curve"] = "its table's (tables)"
        elif not exact:
            assert st is not None
            entry["sampled_rows"] = int(st.distinct)
            entry["curve"] = "its own (SHARDS)"
            if below > 1:
                entry["interpolated_below_rows"] = int(below)
        entries.append(entry)
        curves.append(curve)
    _split(entries, curves, placement.world, budget_rows)
    for entry, curve in zip(entries, curves, strict=True):
        h = entry["height"]
        nb = choose_bins(h, entry["cache_rows"] if entry["cache_rows"] else None, bins)
        hist = histogram(curve.hits(edge_sizes(h, nb)[:-1]), curve.unique)
        entry["bins"] = nb
        entry["mrc_hist_counts"] = hist
        entry["cacheability"] = torchrec_cacheability(hist, h)
    return {
        "world": placement.world,
        "nodes": int(placement.nodes),
        "gpus_per_node": int(placement.gpus_per_node),
        "budget_rows_per_gpu": float(budget_rows),
        "split": SPLIT_RULE,
        "expected_lookups": f"mean unique ids of the shard per global batch, over {lookups_from}",
        "method": ("exact stack distances of each batch's unique ids per shard" if exact else
                   f"SHARDS at R = {rate:g} per shard over each batch's unique ids (stack "
                   "distances / R; counts are expected counts of the full stream, rounded; "
                   "sizes below the resolution read linearly), a shard on its table's "
                   "stream its table's curve") + ", one pass over the horizon "
                   "(replay.plan.torchrec_shards)",
        "few_sampled_rows": [] if exact else sorted({
            f"{e['table']}@{e['rank']}" for e in entries
            if e.get("sampled_rows", FEW_SAMPLED_ROWS) < FEW_SAMPLED_ROWS
            and e.get("exact_below_rows", 0) < e["height"]
        }),
        "shards": entries,
    }  # fmt: skip


def _pass_read(
    placement: Placement, streams: _Streams, tables: Mapping[str, Any], table_rows: np.ndarray,
    *, exact: bool, spec: Any,
) -> bool:  # fmt: skip
    """Whether `shard_stats` reads anything of its pass over the horizon: not at R < 1
    with a workload spec where every shard takes its table's one-GPU curve (a whole,
    not data-parallel table: its state is not read) and no table is a data-parallel
    one (the spec gives every stream's full lookups, `_stream_full`; a replica's share
    is its sampled lookups'). meta-2021's day plan on 128 GPUs: 856 table-wise shards,
    a pass of ~2.5 s of CPU (the sampled horizon's generation and the routing) whose
    result went unread."""
    if exact or spec is None:
        return True
    for i, shard in enumerate(placement.shards):
        if streams.shard_block[i] < 0:
            continue
        t = shard.table
        if placement.entry(t).type == DATA_PARALLEL:
            return True
        cs = int(streams.stream_of[streams.shard_block[i]])
        if placement.tables[t].name not in tables or int(streams.height[cs]) != int(table_rows[t]):
            return True
    return False


def _split(
    entries: list[dict[str, Any]], curves: list[_Curve], world: int, budget_rows: float
) -> None:
    """Each GPU's budget split among its shards (`SPLIT_RULE`), into the entries: the
    shards' curves read on the plan's grid of sizes (`replay.plan.cache.curve_sizes`) and
    at `DEFAULT_BINS` equal bins."""
    for rank in range(world):
        idx = [i for i, e in enumerate(entries) if e["rank"] == rank]
        if not idx:
            continue
        shaped = []
        for i in idx:
            h = int(entries[i]["height"])
            sizes = np.union1d(curve_sizes(h, 1), edge_sizes(h, DEFAULT_BINS)[1:])
            u = curves[i].unique
            shaped.append((sizes.astype(np.float64), curves[i].hits(sizes) / u if u > 0 else
                           np.zeros(len(sizes))))  # fmt: skip
        split = split_budget(
            [f"{entries[i]['table']}:{i}" for i in idx],
            [entries[i]["height"] for i in idx],
            [curves[i].unique for i in idx],
            shaped,
            float(budget_rows),
        )
        rows = [
            min(math.floor(share.rows * (1 + 1e-12)), int(entries[i]["height"]))
            for i, share in zip(idx, split.tables, strict=True)
        ]
        # what the greedy leaves (no shard's curve gains from more: a run's curve is flat
        # past the rows it touched) goes to the busiest shards, each up to whole, so the
        # GPU's caches hold its budget unless all its shards fit
        left = math.floor(float(budget_rows) * (1 + 1e-12)) - sum(rows)
        for j in sorted(range(len(idx)), key=lambda j: (-curves[idx[j]].unique, j)):
            if left <= 0:
                break
            more = min(left, int(entries[idx[j]]["height"]) - rows[j])
            rows[j] += more
            left -= more
        for i, r in zip(idx, rows, strict=True):
            entries[i]["cache_rows"] = r
            entries[i]["load_factor"] = r / entries[i]["height"]


def _stream_full(
    horizon: Any, spec: Any, placement: Placement, streams: _Streams, sampled: np.ndarray,
    rate: float,
) -> np.ndarray:  # fmt: skip
    """Each stream's lookups in the full stream at R < 1 (module docstring): a row block
    its share of the table's (the generator's pmf, else the sample's); a data-parallel
    replica its share of the sample's (1 / W each when the sample has none)."""
    nt = len(placement.tables)
    per_table = np.bincount(streams.table, weights=sampled, minlength=nt).astype(np.int64)
    full = _table_full_lookups(horizon, spec, per_table, rate).astype(np.float64)
    out = np.zeros(len(streams.table))
    for t in range(nt):
        mine = np.flatnonzero(streams.table == t)
        got = sampled[mine].astype(np.float64)
        if len(mine) == 1:
            out[mine] = full[t]
        elif placement.entry(t).type == DATA_PARALLEL:
            out[mine] = full[t] * (got / got.sum() if got.sum() > 0 else 1.0 / len(mine))
        elif len(mine) > 1:
            if spec is not None:
                shares = block_shares(spec, t, streams.first_row[mine])
            else:
                shares = (got if got.sum() > 0 else streams.height[mine]) / max(
                    float(got.sum()) if got.sum() > 0 else float(streams.height[mine].sum()), 1.0
                )
            out[mine] = full[t] * shares
    return out


def _closed_distinct(
    spec: Any, placement: Placement, counted: _Streams
) -> tuple[np.ndarray, str] | None:
    """At production scale (one batch over `SPAN_MAX_LOOKUPS`, i.i.d. batches: the rule
    of `replay.plan.torchrec`), each counted stream's mean distinct rows per batch from
    the spec in closed form (`replay.analysis.touched_model`): a whole table's E D_t(1);
    a data-parallel replica's, its rank's samples only (1 / W of the lookups); a row
    block of a permuted table, its share of the rows x E D_t(1) (each rank equally
    likely in any row: the expectation over the permutation). None elsewhere, or where a
    row-blocked table's rows are not permuted."""
    from replay.analysis.touched_model import closed_form_wanted, expected_touched
    from replay.plan.torchrec import SPAN_MAX_LOOKUPS
    from replay.workload.spec import WorkloadSpec

    if not isinstance(spec, WorkloadSpec) or not closed_form_wanted(spec, SPAN_MAX_LOOKUPS):
        return None
    world = placement.world
    per_table = np.bincount(counted.table, minlength=len(spec.tables))
    rows = np.array([t.rows for t in spec.tables], dtype=np.float64)
    whole = expected_touched(spec, [1.0, 1.0 / world], kind="lookups")
    out = np.zeros(len(counted.table))
    for i, t in enumerate(counted.table.tolist()):
        replica = placement.entry(t).type == DATA_PARALLEL and per_table[t] > 1
        if replica:
            out[i] = whole[t, 1]
            continue
        if int(counted.height[i]) < rows[t] and spec.tables[t].mapping != "permuted":
            return None
        out[i] = whole[t, 0] * float(counted.height[i]) / rows[t]
    return out, (
        "the spec in closed form (E D(1) per table, a row block's share of its rows, a "
        "replica's 1 / W of the lookups; replay.analysis.touched_model)"
    )


def _span_distinct(
    horizon: Any, spec: Any, placement: Placement, counted: _Streams, rate: float
) -> tuple[np.ndarray, str]:
    """Mean distinct rows per batch of each counted stream at R < 1: the first batches of
    the full stream (a workload spec), else the sample's count / R over the horizon."""
    from replay.workload.spec import WorkloadSpec

    table_rows = np.asarray(horizon.table_rows, dtype=np.int64)
    closed = _closed_distinct(spec, placement, counted)
    if closed is not None:
        return closed
    if isinstance(spec, WorkloadSpec):
        from replay.workload.onthefly import GeneratedTrace

        span = span_batches(spec, int(horizon.num_batches))
        source: Any = GeneratedTrace(spec.with_overrides(batches=max(span, 1)))
        scale, basis = 1.0, f"the first {span} batches of the full stream"
    else:
        source, scale = horizon, 1.0 / rate
        basis = "the horizon (its sample's count / R)"
    p = _Pass(placement, counted, table_rows, states=None, distinct=True)
    for r in iter_batch_ranges(source, with_updates=False):
        p.feed(r.keys, r.bounds, r.batch_start)
    assert p.distinct is not None
    return p.distinct * scale / max(int(source.num_batches), 1), basis


def torchrec_document(document: dict[str, Any]) -> dict[str, Any] | None:
    """What `torchrec.json` holds for a plan document: its `torchrec` part with what a
    TorchRec setup reads beside it (`row_bytes`, the per-GPU `cache_budget_bytes` the
    load factors split, a cluster's `gpu_memory_bytes`), and a cluster plan's per-shard
    part (`cluster`)."""
    doc = document.get("torchrec")
    if doc is None:
        return None
    cluster = document.get("cluster") or {}
    extra = {
        "row_bytes": document.get("row_bytes"),
        "cache_budget_bytes": (document.get("cache") or {}).get("budget_bytes"),
    }
    if cluster:
        extra["gpu_memory_bytes"] = cluster.get("gpu_memory_bytes")
    out: dict[str, Any] = {}
    for key, value in doc.items():
        out[key] = value
        if key == "batch_size":
            out.update(extra)
    if SHARDS_KEY in cluster:
        # each shard says the global batch its expected_lookups and lookups_per_batch count
        shards = [{**e, "batch_size": out.get("batch_size")} for e in cluster[SHARDS_KEY]["shards"]]
        out["cluster"] = {**cluster[SHARDS_KEY], "shards": shards}
    return stamp("torchrec", out)


@kernel
def _ints_text(values: np.ndarray) -> np.ndarray:
    """The ASCII bytes of `json.dumps(values.tolist(), separators=(", ", ": "))` for int64
    `values`: "[1, 2, 3]" (the C encoder took ~90 ns a count, 0.8 s for meta-2021's 10 M)."""
    n = len(values)
    size = 2 + 2 * max(n - 1, 0)
    for i in range(n):
        v = values[ix(i)]
        u = np.uint64(v) if v >= 0 else np.uint64(-(v + 1)) + np.uint64(1)
        size += 1 if v >= 0 else 2
        while u >= np.uint64(10):
            u //= np.uint64(10)
            size += 1
    out = np.empty(size, dtype=np.uint8)
    out[0] = 91  # [
    at = 1
    for i in range(n):
        if i:
            out[ix(at)] = 44  # ,
            out[ix(at + 1)] = 32
            at += 2
        v = values[ix(i)]
        if v < 0:
            out[ix(at)] = 45  # -
            at += 1
        u = np.uint64(v) if v >= 0 else np.uint64(-(v + 1)) + np.uint64(1)
        digits = 1
        w = u
        while w >= np.uint64(10):
            w //= np.uint64(10)
            digits += 1
        for d in range(digits - 1, -1, -1):
            out[ix(at + d)] = np.uint8(48 + u % np.uint64(10))
            u //= np.uint64(10)
        at += digits
    out[ix(at)] = 93  # ]
    return out


def _counts_text(hist: list[Any]) -> str:
    """A histogram's counts as `json.dumps(hist, separators=(", ", ": "))` writes them."""
    array = hist.array if isinstance(hist, Counts) else None
    if array is None or array.dtype != np.int64 or len(array) != len(hist):
        return json.dumps(hist, separators=(", ", ": "))
    return _ints_text(np.ascontiguousarray(array)).tobytes().decode("ascii")


def torchrec_text(document: dict[str, Any]) -> str:
    """`torchrec.json`'s text: indented JSON, each histogram on one line (a count a line
    made a 100,000-bin table 1.3 MB). `json.loads` gives `document` back."""
    hists: list[list[Any]] = []

    def marked(entry: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(entry.get("mrc_hist_counts"), list):
            return entry
        hists.append(entry["mrc_hist_counts"])
        return {**entry, "mrc_hist_counts": f"\x00{len(hists) - 1}\x00"}

    doc = {**document, "tables": {n: marked(t) for n, t in document["tables"].items()}}
    if "cluster" in document:
        doc["cluster"] = {**document["cluster"],
                          "shards": [marked(e) for e in document["cluster"]["shards"]]}  # fmt: skip
    text = json.dumps(doc, indent=2)
    return (
        re.sub(
            r'"\\u0000(\d+)\\u0000"',
            lambda m: _counts_text(hists[int(m[1])]),
            text,
        )
        + "\n"
    )


def without_shards(cluster: dict[str, Any]) -> dict[str, Any]:
    """plan.json's `cluster` without the per-shard part torchrec.json holds."""
    return {k: v for k, v in cluster.items() if k != SHARDS_KEY}


__all__ = [
    "SHARDS_KEY",
    "SPLIT_RULE",
    "shard_stats",
    "torchrec_document",
    "torchrec_text",
    "without_shards",
]
