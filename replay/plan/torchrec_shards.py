"""TorchRec's cache statistics per shard of a cluster plan: `torchrec.json`'s `cluster`.

Placement. Called by `replay.plan.cluster.plan_cluster` with the placement the plan
recommends (`replay.engine.placement`) and the horizon the plan reads; its result goes
into plan.json's `cluster` under `SHARDS_KEY` only while the plan is built:
`replay.plan.write` moves it into `torchrec.json` (`torchrec_document`) and leaves it out
of plan.json. A one-GPU plan has no `cluster`, and its `torchrec.json` is unchanged.

Why per shard. TorchRec builds one cache per shard (each rank's TBE over its local
shards, `CacheParams.load_factor` x the shard's rows), so a table's statistics are not
what a shard's cache sees:

- a row-wise (or table-row-wise) shard of rows [a, b) is a table of height b - a whose
  stream is the table's lookups that fall in [a, b) (row - a);
- a table-wise shard is the table; a column-wise shard is the table's rows at fewer
  columns, and every column block sees every lookup of its table;
- a data-parallel replica sees 1 / W of the table's lookups (the lookups of the samples
  its rank owns), over all the table's rows.

Each shard's entry has TorchRec's fields, read exactly as the one-GPU file's tables
(`replay.plan.torchrec`'s docstring: `mrc_hist_counts` over `bins` bins of the shard's
height, `cacheability`, `cold_miss_ratio`, `expected_lookups` = mean distinct rows of the
shard per global batch) plus where it sits: `table`, `rank`, `node`, `type`, `rows`
[a, b), `columns` [c0, c1), `height` = b - a, `lookups` (over the run, full stream),
`lookups_per_batch`, `load_factor` and `cache_rows` (its share of its GPU's budget).

One pass. The horizon's batch ranges are routed once by one numba kernel
(`_route_streams`) that takes its blocks and data-parallel hash from
`replay.plan.rank_curves` (`_layout`, `_dp_rank`: the same routing as the per-GPU
curves and the cluster replay) and gives each lookup one *stream*: the block of a
row-split table, the table itself for a table-wise, single-block or column-wise table
(all of a column-wise table's blocks see the same stream: one state, not one per
block), a data-parallel replica at R = 1. Each stream has its own LRU state
(`replay.analysis.stack.StackDistances`, exact, Mattson et al. 1970); never one pass
per shard. At R = 1 the distinct rows per (batch, stream) are counted in the same pass.

Sampled horizons (R < 1, `replay.workload.sampled`). SHARDS (Waldspurger et al., FAST
2015) keeps a row by the hash of its global key, and routing keeps every lookup of a row
in one stream, so a stream's sampled lookups are the SHARDS sample of its full stream:
its curve is SHARDS_adj at R (miss(C) = (cold_s + #{d_s >= ceil(C R)}) / (N R)), N the
stream's full lookups (a table's: batches x batch size x pooling; a row block's: the
table's x the block's probability under the generator's pmf,
`replay.workload.row_mass.block_shares`; without a workload spec, sampled / R). Sizes
below the sample's resolution (16 (1 - R) / R rows) are read linearly between 0 and it
(`interpolated_below_rows`, as the one-GPU file), and `sampled_rows` says how many rows
the sample holds: a shard with few sampled rows (`few_sampled_rows`) has a curve of
little worth. A shard whose stream is its table's (table-wise, column-wise, a single row
block) takes, at R < 1, its table's one-GPU entry (`table_stats`: the plan's per-table
curve, with the full stream's exact head where the plan reads one), and so does a
data-parallel replica, with counts / W (ASSUMPTION, exact in distribution for a sampled
workload, which has neither reuse nor drift: an independent 1 / W thinning of an
independent-reference stream has the same LRU miss ratio at every size; its cold misses
are then the table's share, an undercount of up to W x over a run where the replica
touches every row the table does); `curve` says which. `expected_lookups` at R < 1 is
counted over the first `torchrec.span_batches` batches of the full stream (generated,
routed by the same kernel, data-parallel replicas apart), as the one-GPU file counts it;
a sampled source without a workload spec: the sample's distinct / R.

The split of a GPU's budget among its shards: the plan's per-table rule
(`replay.plan.cache.split_budget`, greedy on each curve's upper concave hull, the hits
the GPU's caches get over the run maximised) applied per GPU, over that GPU's shards'
curves (sizes k_b, hits from the histogram and cold-miss ratio), lookups over the run and
the per-GPU budget in rows; `load_factor` = cache rows / height. ASSUMPTION: one cache
per shard as the brief says (FBGEMM groups a rank's same-config tables in one TBE whose
cache the shards then share; the plan's per-GPU answers in plan.json model that shared
LRU). Shards with no rows (TorchRec's trailing empty row-wise blocks) have no cache and
no entry. The file's `tables` stay the one-GPU reference (a GPU holding every table
with the whole budget), as plan.json's one-GPU sections.

Memory: one state per stream (exact: 4 B a row directly indexed up to
`rank_curves.DIRECT_MAX_ROWS` rows in all, else a hash map over the rows seen; sampled:
the sampled rows), per range the routed streams and rows and their grouping (24 B a
lookup), and a set of twice a batch's lookups (8 B a slot) for the distinct rows.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from replay._intrinsics import ix
from replay._jit import kernel
from replay.analysis.stack import StackDistances
from replay.plan.cache import split_budget
from replay.plan.rank_curves import (
    _DP,
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
    edge_sizes,
    span_batches,
    torchrec_cacheability,
)
from replay.system.sharding import DATA_PARALLEL, Placement
from replay.trace.keys import table_of, table_offsets
from replay.trace.stream import iter_batch_ranges
from replay.workload.row_mass import block_shares

SHARDS_KEY = "torchrec_shards"  # plan.json's cluster part moved into torchrec.json
SPLIT_RULE = (
    "each GPU's budget (--cache-budget, per GPU) split among its shards by the plan's "
    "per-table rule (replay.plan.cache.split_budget: greedy on the upper concave hull of "
    "each shard's own curve, the GPU's hits over the run maximised); load_factor = cache "
    "rows / height"
)


@dataclass(frozen=True, eq=False)
class _Streams:
    """Each routing block's stream (`stream_of[block]`), the streams' tables and heights,
    and each shard's block (-1: an empty shard)."""

    stream_of: np.ndarray  # int64 per block
    table: np.ndarray  # int64 per stream
    height: np.ndarray  # int64 per stream
    first_row: np.ndarray  # int64 per stream: its first row in its table
    shard_block: list[int]  # per shard


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
    return _Streams(stream_of, arr(table), arr(height), arr(first), shard_block)


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
            if k_t == _ROWS:
                blk = row_block(row, tb, even[ix(t)], count[ix(t)], start)
            elif k_t == _DP:
                blk = tb + _dp_rank(batch_start + b, i - lo, world, salt)
            s = stream_of[ix(blk)]
            out_stream[ix(i)] = s
            out_row[ix(i)] = row - start[ix(blk)] if k_t == _ROWS else row


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


@kernel
def _count_distinct(
    stream: np.ndarray, row: np.ndarray, bounds: np.ndarray, flat: np.ndarray,
    slots: np.ndarray, used: np.ndarray, out: np.ndarray,
) -> None:  # fmt: skip
    """out[s] += the distinct rows of stream s in each batch of `bounds`: an open-
    addressing set of (stream, row) per batch (`slots`, a power of two at least twice a
    batch's lookups, all 0 on entry and on return; `used`: the slots a batch filled)."""
    bits = np.uint64(0)
    while (np.uint64(1) << bits) < np.uint64(len(slots)):
        bits += np.uint64(1)
    shift = np.uint64(64) - bits
    mask = np.int64(len(slots) - 1)
    for b in range(len(bounds) - 1):
        n_used = 0
        for i in range(bounds[b], bounds[b + 1]):
            s = stream[ix(i)]
            key = flat[ix(s)] + row[ix(i)] + 1  # 0: an empty slot
            h = np.int64((np.uint64(key) * np.uint64(0x9E3779B97F4A7C15)) >> shift)
            while True:
                k = slots[ix(h)]
                if k == key:
                    break
                if k == 0:
                    slots[ix(h)] = key
                    used[ix(n_used)] = h
                    n_used += 1
                    out[ix(s)] += 1
                    break
                h = (h + 1) & mask
        for j in range(n_used):
            slots[ix(used[ix(j)])] = 0


class _Pass:
    """Routes batch ranges to streams, feeds each stream's state (`states`: None counts
    only) and counts distinct rows per (batch, stream) when `distinct` is set."""

    def __init__(
        self, placement: Placement, streams: _Streams, table_rows: np.ndarray, *,
        states: list[Any] | None, distinct: bool,
    ) -> None:  # fmt: skip
        self.x = _layout(placement)
        self.world = placement.world
        self.offsets = table_offsets(table_rows)
        self.s = streams
        self.states = states
        self.distinct = np.zeros(len(streams.table), dtype=np.int64) if distinct else None
        self.routed = np.zeros(len(streams.table), dtype=np.int64)
        self.flat = table_offsets(streams.height)  # streams' rows end to end
        self.slots = np.zeros(0, dtype=np.int64)
        self.used = np.zeros(0, dtype=np.int64)
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
        per_stream = np.bincount(stream, minlength=len(self.routed))
        self.routed += per_stream
        if self.distinct is not None:
            widest = int(np.diff(bounds).max(initial=0))
            need = 1 << max(int(2 * widest - 1).bit_length(), 4)
            if len(self.slots) < need:
                self.slots = np.zeros(need, dtype=np.int64)
                self.used = np.empty(need, dtype=np.int64)
            _count_distinct(stream, row, bounds, self.flat, self.slots, self.used, self.distinct)
        if self.states is not None:
            cuts = np.zeros(len(per_stream) + 1, dtype=np.int64)
            np.cumsum(per_stream, out=cuts[1:])
            rows = np.empty(n, dtype=np.int64)
            _group_rows(stream, row, cuts, rows)
            for s in np.flatnonzero(per_stream).tolist():
                self.states[s].feed(rows[int(cuts[s]) : int(cuts[s + 1])])


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
    the one-GPU file's tables (`torchrec_stats`, the same `bins`): at R < 1 a shard whose
    stream is its table's (table-wise, column-wise, one row block, a data-parallel
    replica's 1 / W) takes its table's curve from there."""
    tables = dict(table_stats or {})
    from replay.analysis.shards import SHARDS_MODULUS, resolution_rows, shards_threshold

    table_rows = np.asarray(horizon.table_rows, dtype=np.int64)
    exact = rate >= 1.0
    counted = _streams(placement, replicas_apart=True)
    curved = counted if exact else _streams(placement, replicas_apart=False)
    direct = exact and int(curved.height.sum()) <= DIRECT_MAX_ROWS
    states = [StackDistances(int(h), direct=direct) for h in curved.height]
    main = _Pass(placement, curved, table_rows, states=states, distinct=exact)
    for r in iter_batch_ranges(horizon, with_updates=False):
        main.feed(r.keys, r.bounds, r.batch_start)
    batches = max(int(horizon.num_batches), 1)
    # full-stream lookups of each curve stream
    if exact:
        full = main.routed.astype(np.float64)
        distinct = main.distinct.astype(np.float64) / batches  # type: ignore[union-attr]
        lookups_from = "the horizon"
    else:
        full = _stream_full(horizon, spec, placement, curved, main.routed, rate)
        distinct, lookups_from = _span_distinct(horizon, spec, placement, counted, rate)
    threshold = 0 if exact else shards_threshold(rate)
    below = 0 if exact else resolution_rows(threshold)
    world = placement.world
    entries: list[dict[str, Any]] = []
    curves: list[tuple[np.ndarray, np.ndarray]] = []
    for i, shard in enumerate(placement.shards):
        blk = counted.shard_block[i]
        if blk < 0:
            continue
        t = shard.table
        ttype = placement.entry(t).type
        cs = int(curved.stream_of[blk])
        height = int(curved.height[cs]) if ttype != DATA_PARALLEL else int(table_rows[t])
        share = 1.0 / world if (ttype == DATA_PARALLEL and not exact) else 1.0
        n = float(full[cs]) * share
        st = states[cs]
        edges = edge_sizes(height, bins)
        whole = tables.get(placement.tables[t].name) if not exact else None
        if whole is not None and int(curved.height[cs]) == int(table_rows[t]):
            # the table's own stream (or a 1 / W thinning of it): its one-GPU entry, whose
            # curve has the full stream's exact head where the plan could read one
            n = float(whole["lookups"]) * share
            hist_t = np.asarray(whole["mrc_hist_counts"], dtype=np.float64) * share
            hits = np.concatenate([[0.0], np.cumsum(hist_t)])
        elif exact:
            miss = st.misses_at(np.maximum(edges, 0)).astype(np.float64)
            hits = np.where(edges > 0, float(st.requests) - miss, 0.0)
        else:
            expected = n * threshold / SHARDS_MODULUS / share
            cuts = -(-edges * threshold // SHARDS_MODULUS)
            ratio = st.misses_at(cuts) / expected if expected > 0 else np.ones(len(edges))
            hits = n * (1.0 - np.clip(ratio, 0.0, 1.0))
            low = (edges > 0) & (edges < below)
            if low.any():
                at = -(-below * threshold // SHARDS_MODULUS)
                r_at = st.misses_at(np.array([at]))[0] / expected if expected > 0 else 1.0
                hits[low] = n * (1.0 - min(max(float(r_at), 0.0), 1.0)) * edges[low] / below
            hits[edges == 0] = 0.0
            hits = np.maximum.accumulate(hits)
        hist = np.diff(hits)
        cold = 1.0 - float(hits[-1]) / n if n > 0 else 0.0
        cs_count = int(counted.stream_of[blk])
        entry: dict[str, Any] = {
            "table": placement.tables[t].name,
            "rank": int(shard.rank),
            "node": placement.node_of(shard.rank),
            "type": ttype,
            "rows": [int(shard.row_start), int(shard.row_stop)],
            "columns": [int(shard.col_start), int(shard.col_stop)],
            "height": height,
            "bins": int(bins),
            "mrc_hist_counts": [round(c) for c in hist] if exact else hist.tolist(),
            "expected_lookups": float(distinct[cs_count]),
            "cacheability": torchrec_cacheability(hist, height),
            "cold_miss_ratio": max(cold, 0.0),
            "load_factor": None,
            "cache_rows": None,
            "lookups": round(n) if exact else float(n),
            "lookups_per_batch": n / batches,
        }
        if whole is not None and int(curved.height[cs]) == int(table_rows[t]):
            for key in ("sampled_rows", "exact_below_rows", "interpolated_below_rows"):
                if key in whole:
                    entry[key] = whole[key]
            entry["curve"] = "its table's (tables)" + (", lookups / W" if share < 1.0 else "")
        elif not exact:
            entry["sampled_rows"] = int(st.distinct)
            entry["curve"] = "its table's, lookups / W" if share < 1.0 else "its own"
            if below > 1:
                entry["interpolated_below_rows"] = int(below)
        entries.append(entry)
        sizes = edges[1:].astype(np.float64)
        curves.append((sizes, hits[1:] / n if n > 0 else np.zeros(len(sizes))))
    _split(entries, curves, world, budget_rows)
    return {
        "world": world,
        "nodes": int(placement.nodes),
        "gpus_per_node": int(placement.gpus_per_node),
        "budget_rows_per_gpu": float(budget_rows),
        "split": SPLIT_RULE,
        "expected_lookups": f"mean distinct rows of the shard per batch, over {lookups_from}",
        "method": ("exact stack distances per shard" if exact else
                   f"SHARDS at R = {rate:g} per shard (stack distances / R; counts are "
                   "expected counts of the full stream; sizes below the resolution read "
                   "linearly)") + ", one pass over the horizon (replay.plan.torchrec_shards)",
        "few_sampled_rows": [] if exact else sorted({
            f"{e['table']}@{e['rank']}" for e in entries
            if e.get("sampled_rows", FEW_SAMPLED_ROWS) < FEW_SAMPLED_ROWS
            and e.get("exact_below_rows", 0) < e["height"]
        }),
        "shards": entries,
    }  # fmt: skip


def _split(
    entries: list[dict[str, Any]], curves: list[tuple[np.ndarray, np.ndarray]], world: int,
    budget_rows: float,
) -> None:  # fmt: skip
    """Each GPU's budget split among its shards (`SPLIT_RULE`), into the entries."""
    for rank in range(world):
        idx = [i for i, e in enumerate(entries) if e["rank"] == rank]
        if not idx:
            continue
        split = split_budget(
            [f"{entries[i]['table']}:{i}" for i in idx],
            [entries[i]["height"] for i in idx],
            [float(entries[i]["lookups"]) for i in idx],
            [curves[i] for i in idx],
            float(budget_rows),
        )
        for i, share in zip(idx, split.tables, strict=True):
            entries[i]["load_factor"] = float(min(max(share.load_factor, 0.0), 1.0))
            entries[i]["cache_rows"] = math.floor(share.rows * (1 + 1e-12))


def _stream_full(
    horizon: Any, spec: Any, placement: Placement, streams: _Streams, sampled: np.ndarray,
    rate: float,
) -> np.ndarray:  # fmt: skip
    """Each curve stream's lookups in the full stream at R < 1 (module docstring)."""
    nt = len(placement.tables)
    per_table = np.bincount(streams.table, weights=sampled, minlength=nt).astype(np.int64)
    full = _table_full_lookups(horizon, spec, per_table, rate).astype(np.float64)
    out = np.zeros(len(streams.table))
    for t in range(nt):
        mine = np.flatnonzero(streams.table == t)
        if len(mine) == 1:
            out[mine] = full[t]
        elif len(mine) > 1:
            if spec is not None:
                shares = block_shares(spec, t, streams.first_row[mine])
            else:
                got = sampled[mine].astype(np.float64)
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
    """What `torchrec.json` holds for a plan document: its `torchrec` part, with the
    per-shard part (`cluster`) of a cluster plan; a one-GPU plan's part unchanged."""
    doc = document.get("torchrec")
    cluster = document.get("cluster")
    if doc is None or not cluster or SHARDS_KEY not in cluster:
        return doc
    return {**doc, "cluster": cluster[SHARDS_KEY]}


def without_shards(cluster: dict[str, Any]) -> dict[str, Any]:
    """plan.json's `cluster` without the per-shard part torchrec.json holds."""
    return {k: v for k, v in cluster.items() if k != SHARDS_KEY}


__all__ = [
    "SHARDS_KEY",
    "SPLIT_RULE",
    "shard_stats",
    "torchrec_document",
    "without_shards",
]
