"""Each table's LRU reuse over every global batch's *unique* ids: the stream TorchRec's
cache statistics describe (`replay.plan.torchrec`).

Why unique ids. FBGEMM's cache prefetch looks up each batch's linearized unique ids
(`fbgemm_gpu` `lxu_cache_populate`: one fetch per distinct missing row of the batch),
and TorchRec prices a cached table's prefetch as `expected_miss_rate(clf) x
expected_lookups` with `expected_lookups` "the expected number of unique embedding ids
per global batch" (`torchrec/distributed/planner/shard_estimators.py`,
`EmbeddingOffloadStats`; `planner/estimator/estimator.py`, `_default_prefetch_comp`).
So the miss rate TorchRec reads must be a share of unique ids: misses over the stream in
which each batch keeps each of its rows once. A histogram of every lookup counts a
batch's repeats as hits and reads about 6x too few fetches on Criteo Terabyte's large
tables.

The stream. Per batch, each key's first occurrence, in trace order (`first_in_batch`,
an open-addressing set of the batch's keys); the rest of the batch is dropped. Its LRU
stack distances (Mattson et al. 1970) give, for a cache of k rows, hits(k) = #{distance
<= k - 1}; misses(k) = U - hits(k) with U the stream's length (the unique ids of all
batches) include the first use of every row (cold misses). Keeping first occurrences
commutes with SHARDS's spatial sampling (a row is sampled or not whatever the batch), so
at R < 1 the sample's own batches, deduplicated, are the SHARDS sample of this stream.

Exact (R = 1): one `StackDistances` per table over its rows (4 B a row), fed the
deduplicated batches split by table; U and each table's unique ids per batch are counted
in the same pass.

A sampled workload (R < 1, `replay.workload.sampled`): the sampler refuses reuse and
drift, so every table's lookups are independent draws from its popularity p_i (the
independent reference model), n = batch size x pooling of them per batch, and a batch
touches row i with probability q_i = 1 - (1 - p_i)^n, independently of other batches.
Che's approximation (Che, Tung, Wang, IEEE JSAC 2002; `replay.analysis.che`) then holds
at batch granularity: an LRU cache of k rows keeps a row for T batches after it was last
touched, T solving sum_i (1 - (1 - q_i)^T) = k (the expected distinct rows of T batches),
and a run of B batches from an empty cache misses

    M(k) = sum_i (1 - (1 - q_i)^T) + (B - T) sum_i q_i (1 - q_i)^T
         = k + (B - T) sum_i q_i (1 - q_i)^T

(a touched row misses when it was not touched in the last min(b, T) batches; for T >= B,
or k at least the rows, M is the run's distinct rows, its cold misses), of U = B sum_i
q_i unique ids: `che_unique_misses`, the popularity summed in buckets as
`replay.analysis.che.table_popularity` (solved with its `che_hit_ratios` on the rates
-log(1 - q_i)). Within a batch the order of first occurrences is not modelled, so for
caches of a few batches' unique ids (T of a few batches) Che reads too few hits (10% too
many fetches on Criteo Terabyte's C8: 1,334 of its 1,543 rows, 2.5 batches), and there
the curve is the full stream's exact head (`_unique_heads`, after
`replay.analysis.head`: its blocks generated in full from the spec, sized by the full
stream's lookups as the plan's own heads, and deduplicated batch by batch), where that
head is usable: a block counts only once its stack is full, so a table's capacity in
blocks is at most `HEAD_FILL` (95%) of the rows Che expects a block's batches to touch.
Measured against an exact LRU of each batch's unique ids on `criteo-terabyte` (1,000
batches at 256 MiB, 20,000 at 1 GiB: every table with a cache, caches from 0.1% to 95%
of the rows): within 1.3% (SHARDS on the deduplicated sample was within 1% on the large
tables but read 42-96% too few fetches for caches of 80-95% of a small table, whose last
rows a sample of a few hundred holds too few of). At production scale (a batch read in
pieces, `replay.analysis.head_pieces`) there is no head.

A sampled source without a workload spec: one `ShardsSampler` per table (SHARDS_adj,
Waldspurger et al., FAST 2015) fed the sample's batches deduplicated (keeping first
occurrences commutes with SHARDS's choice of rows), its error groups from the global
keys' hash as `replay.analysis.horizon.per_table_mrc` takes them, N = the table's unique
ids per batch x batches (the caller's), sizes below the resolution (16 (1 - R) / R rows)
read linearly between (0, 0) and it (`interpolated_below_rows`).
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from replay._intrinsics import ix
from replay._jit import kernel
from replay._machine import usable_cores
from replay._threads import worker_pool
from replay.analysis.head import HeadCurve, _split_by_table
from replay.analysis.mrc import stream_table_lookups
from replay.analysis.shards import ShardsSampler
from replay.analysis.stack import StackDistances, dense_rows
from replay.trace.keys import table_offsets
from replay.trace.stream import iter_batch_ranges
from replay.workload.spec import WorkloadSpec

HEAD_CHUNK_LOOKUPS = 1 << 20  # lookups generated at a time for the exact head


@kernel
def _first_in_batch(
    keys: np.ndarray, bounds: np.ndarray, slots: np.ndarray, used: np.ndarray, keep: np.ndarray
) -> None:
    """keep[i] = 1 where keys[i] (>= 0) is its key's first occurrence in its batch, else
    0: an open-addressing set per batch (`slots`, a power of two at least twice a batch's
    keys, all 0 on entry and on return; `used`: the slots a batch filled)."""
    bits = np.uint64(0)
    while (np.uint64(1) << bits) < np.uint64(len(slots)):
        bits += np.uint64(1)
    shift = np.uint64(64) - bits
    mask = np.int64(len(slots) - 1)
    for b in range(len(bounds) - 1):
        n_used = 0
        for i in range(bounds[b], bounds[b + 1]):
            key = np.int64(keys[ix(i)]) + 1  # 0: an empty slot
            h = np.int64((np.uint64(key) * np.uint64(0x9E3779B97F4A7C15)) >> shift)
            keep[ix(i)] = 0
            while True:
                k = slots[ix(h)]
                if k == key:
                    break
                if k == 0:
                    slots[ix(h)] = key
                    used[ix(n_used)] = h
                    n_used += 1
                    keep[ix(i)] = 1
                    break
                h = (h + 1) & mask
        for j in range(n_used):
            slots[ix(used[ix(j)])] = 0


class FirstInBatch:
    """Each batch's first occurrences of its keys (module docstring), buffers reused."""

    def __init__(self) -> None:
        self.slots = np.zeros(0, dtype=np.int64)
        self.used = np.zeros(0, dtype=np.int64)

    def mask(self, keys: np.ndarray, bounds: np.ndarray) -> np.ndarray:
        """bool per key: the first occurrence of its key (int64 >= 0) in its batch."""
        keys = np.ascontiguousarray(keys, dtype=np.int64)
        bounds = np.ascontiguousarray(bounds, dtype=np.int64)
        keep = np.zeros(len(keys), dtype=np.uint8)
        if len(keys) == 0:
            return keep.astype(bool)
        widest = int(np.diff(bounds).max(initial=0))
        need = 1 << max(int(2 * widest - 1).bit_length(), 4)
        if len(self.slots) < need:
            self.slots = np.zeros(need, dtype=np.int64)
            self.used = np.empty(need, dtype=np.int64)
        _first_in_batch(keys, bounds, self.slots, self.used, keep)
        return keep.astype(bool)

    def unique(self, keys: np.ndarray, bounds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(keys, bounds) of the batches with each key once, in first-occurrence order."""
        keys = np.ascontiguousarray(keys, dtype=np.int64)
        keep = self.mask(keys, bounds)
        kept = np.zeros(len(keys) + 1, dtype=np.int64)
        np.cumsum(keep, out=kept[1:])
        return keys[keep], kept[np.asarray(bounds, dtype=np.int64)]


def reference_unique_lru_misses(batches: list[list[int]], capacity: int) -> int:
    """Misses of an LRU cache of `capacity` rows fed each batch's unique keys in order of
    first occurrence (an OrderedDict: the slow, obviously correct version)."""
    from collections import OrderedDict

    cache: OrderedDict[int, None] = OrderedDict()
    misses = 0
    for batch in batches:
        for key in dict.fromkeys(batch):
            if key in cache:
                cache.move_to_end(key)
                continue
            misses += 1
            if capacity < 1:
                continue
            cache[key] = None
            if len(cache) > capacity:
                cache.popitem(last=False)
    return misses


CHE_GRID = 1024  # characteristic times T the curve is evaluated at (log-spaced)
CHE_CHUNK = 16  # of them evaluated at a time: a chunk x buckets matrix within the L2 cache
# tables whose popularity is kept: every table's of meta-2021 (856), whose cold misses are
# read for all tables before any curve (a smaller cache built each table's twice: 40% of
# TorchRec's statistics there); ~16,000 buckets x 16 B a table at most
CHE_TABLES_KEPT = 1024


@functools.lru_cache(maxsize=64)
def _popularity(rows: int, alpha: float, hot: tuple[float, ...], offset: float) -> Any:
    """`table_popularity` of a table's law at weight 1, kept per law: alike tables share it
    (meta-2021's 856 tables are 4 laws)."""
    from replay.analysis.che import table_popularity

    return table_popularity(rows, alpha, 1.0, hot_shares=hot, rank_offset=offset)


@functools.lru_cache(maxsize=CHE_TABLES_KEPT)
def _che_rates(table: Any, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows per bucket m_j, per-batch rates -log(1 - q_j)) of a table's popularity
    (`replay.analysis.che.table_popularity`, its hot values and rank offset); kept per
    (table spec, batch size): the heads, the cold misses and the curve all read it."""
    pop = _popularity(
        int(table.rows), float(table.alpha), tuple(table.hot_shares), float(table.rank_offset)
    )
    n = int(batch_size) * int(table.pooling)
    return pop.counts, -n * np.log1p(-np.minimum(pop.probabilities, 1.0 - 1e-16))


def che_law(table: Any, batch_size: int, batches: int) -> tuple[Any, ...]:
    """What Che's numbers of a table depend on: its law (rows, alpha, hot shares, rank
    offset), pooling, the batch size and the run (not its name)."""
    return (
        int(table.rows), float(table.alpha), tuple(float(h) for h in table.hot_shares),
        float(table.rank_offset), int(table.pooling), int(batch_size), int(batches),
    )  # fmt: skip


def che_unique_cold(table: Any, batch_size: int, batches: int) -> tuple[float, float]:
    """(the run's distinct rows, its unique ids): the cold misses and U of
    `che_unique_misses`, in closed form; kept per `che_law`."""
    law = che_law(table, batch_size, batches)
    kept = _che_colds.get(law)
    if kept is None:
        m, rate = _che_rates(table, batch_size)
        b = float(batches)
        kept = float(np.sum(m * -np.expm1(-rate * b))), b * float(np.sum(m * -np.expm1(-rate)))
        with _che_lock:
            if len(_che_colds) >= CHE_TABLES_KEPT:
                _che_colds.pop(next(iter(_che_colds)))
            _che_colds[law] = kept
    return kept


# curves kept per law (rows, alpha, hot shares, rank offset, pooling), batch size and run:
# alike tables read the same one at their own sizes (meta-2021's 856 tables are 8 laws and
# sizes; the curve took 19 of the 21 s of its TorchRec statistics, 856 times over)
CHE_CURVES_KEPT = 64
_che_curves: dict[tuple[Any, ...], tuple[np.ndarray, np.ndarray, float, float]] = {}
_che_colds: dict[tuple[Any, ...], tuple[float, float]] = {}  # per law: `che_unique_cold`
_che_lock = threading.Lock()


def che_unique_misses(
    table: Any, batch_size: int, batches: int, sizes: np.ndarray
) -> tuple[np.ndarray, float]:
    """(M(k) for each size k, U): a table's misses over a run of `batches` batches from an
    empty LRU cache of k rows fed each batch's unique ids, and the run's unique ids, by
    Che's approximation at batch granularity (module docstring). `table`: a
    `replay.workload.spec.TableSpec` (independent references: no reuse, no drift).

    k(T) and M(T) are both read off T, so they are evaluated at `CHE_GRID` log-spaced T
    in (0, B] and M is interpolated at each k linearly (k(T) rises with T): any number of
    sizes costs one pass over the grid (within 1e-5 of M of the exact solve for each k on
    criteo-terabyte's tables). The grid is a function of the table's law, the batch size
    and the run alone, kept per those: a table of the same law as one asked before reads
    that one's grid at its own sizes (the same values as its own grid's)."""
    key = che_law(table, batch_size, batches)
    with _che_lock:
        kept = _che_curves.get(key)
    if kept is None:
        kept = _che_grid(table, batch_size, batches)
        with _che_lock:
            if len(_che_curves) >= CHE_CURVES_KEPT:
                _che_curves.pop(next(iter(_che_curves)))
            _che_curves[key] = kept
    k, mm, floor, unique = kept
    out = np.interp(np.asarray(sizes, dtype=np.float64), k, mm)
    # a cache at least the run's distinct rows (k(B)) never evicts: its cold misses
    return np.maximum(out, floor), unique


def _che_grid(
    table: Any, batch_size: int, batches: int
) -> tuple[np.ndarray, np.ndarray, float, float]:
    """(occupancy k(T) rising, M at those k, M(B), U) over `CHE_GRID` times T."""
    m, rate = _che_rates(table, batch_size)
    q = -np.expm1(-rate)
    b = float(batches)
    unique = b * float(np.sum(m * q))
    rows = float(np.sum(m))
    # from T where a cache holds about a thousandth of a row to the run's end
    times = np.geomspace(1e-3 / float(np.sum(m * rate)), b, CHE_GRID)
    occupancy = np.empty(len(times))
    misses = np.empty(len(times))
    weights = m * q
    minus = -rate

    def chunk(lo: int) -> None:
        t = times[lo : lo + CHE_CHUNK]
        stay = np.multiply(minus[None, :], t[:, None])
        np.exp(stay, out=stay)  # (1 - q_j)^T, in place: a (chunk x buckets) matrix
        occupancy[lo : lo + CHE_CHUNK] = rows - stay @ m  # sum_j m_j (1 - (1 - q_j)^T)
        misses[lo : lo + CHE_CHUNK] = occupancy[lo : lo + CHE_CHUNK] + (b - t) * (stay @ weights)

    def part(first: int) -> None:
        for lo in range(first * per, min((first + 1) * per, len(times)), CHE_CHUNK):
            chunk(lo)

    # the chunks are independent (each its own rows of the grid) and numpy's exp and
    # matrix products release the GIL: a run of chunks per core, the same values
    cores = usable_cores()
    per = -(-len(times) // (cores * CHE_CHUNK)) * CHE_CHUNK
    with worker_pool(cores, "che-chunks") as pool:  # interrupt: no wait
        list(pool.map(part, range(cores)))
    k = np.concatenate([[0.0], occupancy])
    mm = np.concatenate([[unique], misses])  # an empty cache misses every unique id
    k, first = np.unique(np.maximum.accumulate(k), return_index=True)
    return k, mm[first], float(misses[-1]), unique


@dataclass(eq=False)
class UniqueCurve:
    """One table's LRU over its unique ids per batch: `hits(k)` for caches of k rows, U
    (`unique`, full-stream units), the cold misses, how it was measured: exact stack
    distances, Che's approximation above an exact head, or SHARDS."""

    height: int
    unique: float
    cold: float
    exact: StackDistances | None = None
    sampler: ShardsSampler | None = None
    head: HeadCurve | None = None
    floor: int = 1  # smallest size the sample (or its head) reads; below it, linear
    che: tuple[Any, int, int] | None = None  # (table spec, batch size, batches)

    def hits(self, sizes: np.ndarray) -> np.ndarray:
        """Expected hits of LRU caches of `sizes` rows (float64, 0 at size 0, made
        non-decreasing in size)."""
        sizes = np.asarray(sizes, dtype=np.int64)
        out = np.zeros(len(sizes))
        n = float(self.unique)
        if self.exact is not None:
            st = self.exact
            pos = sizes > 0
            out[pos] = float(st.requests) - st.misses_at(sizes[pos]).astype(np.float64)
            return out
        if self.che is not None:
            table, batch_size, batches = self.che
            cap = self.head.capacity if self.head is not None else 0
            low = (sizes > 0) & (sizes <= cap)
            if low.any():
                assert self.head is not None
                out[low] = n * (1.0 - self.head.miss_ratios(sizes[low])[0])
            high = sizes > cap
            if high.any():
                misses, total = che_unique_misses(table, batch_size, batches, sizes[high])
                out[high] = n * (1.0 - misses / total) if total > 0 else 0.0
        else:
            assert self.sampler is not None
            high = sizes >= self.floor
            order = np.unique(np.concatenate([sizes[high], [self.floor]]))
            miss, _, _ = self.sampler.estimate(order, self.head)
            hits = n * (1.0 - np.clip(miss, 0.0, 1.0))
            out[high] = hits[np.searchsorted(order, sizes[high])]
            low = (sizes > 0) & ~high
            if low.any():
                at_floor = float(hits[np.searchsorted(order, self.floor)])
                out[low] = at_floor * sizes[low] / self.floor
        # a sampled curve, or the join of a head and a model, may wiggle: hits never fall
        # as the cache grows
        out = np.clip(out, 0.0, n)
        rank = np.argsort(sizes, kind="stable")
        out[rank] = np.maximum.accumulate(out[rank])
        return out

    def key(self) -> tuple[Any, ...] | None:
        """What `hits`, `unique` and `cold` depend on where that is not this object's
        own state (Che's approximation alone: no head), else None; alike tables' curves
        have equal keys and read the same hits at the same sizes."""
        if self.che is None or self.head is not None or self.exact is not None:
            return None
        return (int(self.height), float(self.unique), float(self.cold), che_law(*self.che))

    @property
    def sampled_rows(self) -> int | None:
        return None if self.sampler is None else int(self.sampler.full.distinct)

    @property
    def exact_below_rows(self) -> int:
        usable = self.head is not None and self.head.usable
        return int(self.head.capacity) if self.head is not None and usable else 0

    @property
    def interpolated_below_rows(self) -> int:
        return int(self.floor) if self.sampler is not None and self.floor > 1 else 0


HEAD_FILL = 0.95  # a block's head holds at most this share of the rows it expects to touch


def _unique_heads(src: Any, spec: WorkloadSpec, resolution: int) -> list[HeadCurve] | None:
    """Per table, the exact head of the full stream's unique ids per batch (module
    docstring); None at production scale. As `replay.analysis.head.head_curves`'s
    per-table heads (blocks sized by the full stream's lookups: the plan's own heads'
    generation cost), except that in blocks a table's capacity is at most `HEAD_FILL` of
    the rows a block is expected to touch (Che's occupancy over its batches): a block
    counts only once its stack is full, and a small table's rarest rows may never come
    within one block (Criteo Terabyte's C8, 1,543 rows, in 39 batches)."""
    from replay.analysis.head import (
        ExactHead,
        head_blocks,
        head_capacity,
        shared_capacities,
    )
    from replay.analysis.head_pieces import one_batch_heads_wanted
    from replay.trace.format import plan_pieces
    from replay.workload.generator import CompiledWorkload

    batches = int(src.num_batches)
    pieces = plan_pieces(
        [int(spec.batch_size) * int(t.pooling) for t in spec.tables],
        spec.update.accumulate_batches,
    )  # `CompiledWorkload.pieces`, without compiling 5.16 G rows' tables at production scale
    if one_batch_heads_wanted(batches, int(spec.lookups_per_batch), pieces):
        return None
    compiled = CompiledWorkload.from_spec(spec)
    rows = np.array([t.rows for t in spec.tables], dtype=np.int64)
    offsets = table_offsets(rows)
    step = max(1, HEAD_CHUNK_LOOKUPS // max(int(spec.lookups_per_batch), 1))
    first = FirstInBatch()

    def keys_of(a: int, b: int) -> Iterator[np.ndarray]:
        for g0 in range(a, b, step):
            g1 = min(g0 + step, b)
            batch, table, row = compiled.lookups(g0, g1)
            keys = offsets[table.astype(np.int64)] + row.astype(np.int64)
            bounds = np.searchsorted(batch, np.arange(g0, g1 + 1, dtype=np.int64))
            yield first.unique(keys, bounds)[0]

    one = np.unique(np.concatenate([*keys_of(0, min(1, batches)), np.zeros(0, np.int64)]))
    distinct = np.diff(np.searchsorted(one, offsets))
    wanted = [
        head_capacity(int(d), resolution, int(r)) for r, d in zip(rows, distinct, strict=True)
    ]
    caps = shared_capacities(wanted)
    blocks = head_blocks(batches, int(spec.lookups), max(caps))
    exact = blocks == [(0, batches)]
    if not exact:
        length = blocks[0][1] - blocks[0][0]
        for t, table in enumerate(spec.tables):
            m, rate = _che_rates(table, int(spec.batch_size))
            touched = float(np.sum(m * -np.expm1(-rate * length)))
            caps[t] = max(1, min(caps[t], math.floor(HEAD_FILL * touched)))
    heads = [ExactHead(int(r), c) for r, c in zip(rows, caps, strict=True)]
    tid = np.empty(0, dtype=np.int32)
    local = np.empty(0, dtype=np.int64)
    cuts = np.zeros(len(heads) + 1, dtype=np.int64)
    no_group = np.empty(0, dtype=np.uint8)
    for a, b in blocks:
        for h in heads:
            h.start_block(warm=not exact)
        for keys in keys_of(a, b):
            if len(tid) < len(keys):
                tid = np.empty(len(keys), dtype=np.int32)
                local = np.empty(len(keys), dtype=np.int64)
            _split_by_table(keys, no_group, offsets, tid, cuts, local, no_group)
            for t, h in enumerate(heads):
                if cuts[t + 1] > cuts[t]:
                    h.feed(local[cuts[t] : cuts[t + 1]])
    return [HeadCurve(h.capacity, h.take_counts(), exact) for h in heads]


def unique_curves(
    src: Any, *, rate: float, unique_per_batch: np.ndarray | None = None
) -> tuple[list[UniqueCurve], np.ndarray]:
    """Per table, the LRU curve of its unique ids per batch over the source (an opened
    trace, on-the-fly or sampled workload; module docstring), and each table's mean
    unique ids per batch (R = 1: counted here; R < 1: `unique_per_batch`, the full
    stream's, which the sampled curves are scaled to)."""
    rows = np.asarray(src.table_rows, dtype=np.int64)
    tables = len(rows)
    batches = max(int(src.num_batches), 1)
    if rate >= 1.0:
        return _exact(src, rows, batches)
    if unique_per_batch is None:
        raise ValueError("a sampled source needs the full stream's unique ids per batch")
    per_batch = np.asarray(unique_per_batch, dtype=np.float64)
    full = per_batch * batches
    spec = getattr(src, "spec", None)
    if not isinstance(spec, WorkloadSpec):
        return _sampled(src, rows, rate, full), per_batch
    from replay.analysis.shards import resolution_rows, shards_threshold

    resolution = resolution_rows(shards_threshold(rate))
    heads = _unique_heads(src, spec, resolution) if tables else None
    curves = []
    for t in range(tables):
        head = heads[t] if heads is not None and heads[t].usable else None
        table = spec.tables[t]
        cold, _ = che_unique_cold(table, spec.batch_size, batches)
        curves.append(
            UniqueCurve(
                int(rows[t]), float(full[t]), min(cold, float(full[t])),
                head=head, che=(table, int(spec.batch_size), batches),
            )
        )  # fmt: skip
    return curves, per_batch


def _exact(src: Any, rows: np.ndarray, batches: int) -> tuple[list[UniqueCurve], np.ndarray]:
    """R = 1: one exact stack per table fed the deduplicated batches (module docstring)."""
    tables = len(rows)
    offsets = table_offsets(rows)
    # an array over a table's rows, or a map of the rows seen where the batches are
    # short against them (`dense_rows`: the same distances)
    lookups = stream_table_lookups(src, tables)
    states = [
        StackDistances(int(r), direct=dense_rows(int(r), None if lookups is None else lookups[t]))
        for t, r in enumerate(rows)
    ]
    first = FirstInBatch()
    no_group = np.empty(0, dtype=np.uint8)
    starts = np.zeros(tables + 1, dtype=np.int64)
    for r in iter_batch_ranges(src, with_updates=False):
        keys, _ = first.unique(r.keys, r.bounds)
        if len(keys) == 0:
            continue
        tid = np.empty(len(keys), dtype=np.int32)
        local = np.empty(len(keys), dtype=np.int64)
        _split_by_table(keys, no_group, offsets, tid, starts, local, no_group)
        for t in range(tables):
            if starts[t + 1] > starts[t]:
                states[t].feed(local[int(starts[t]) : int(starts[t + 1])])
    curves = [
        UniqueCurve(int(rows[t]), float(st.requests), float(st.cold), exact=st)
        for t, st in enumerate(states)
    ]
    return curves, np.array([st.requests for st in states], dtype=np.float64) / batches


def _sampled(src: Any, rows: np.ndarray, rate: float, full: np.ndarray) -> list[UniqueCurve]:
    """A sampled source without a workload spec: SHARDS over its deduplicated batches."""
    from replay.analysis.horizon import _label, _sample_groups

    tables = len(rows)
    offsets = table_offsets(rows)
    samplers = [ShardsSampler(int(r), rate) for r in rows]
    whole = ShardsSampler(int(offsets[-1]), rate, subsamples=0)
    where = _label(src)
    first = FirstInBatch()
    starts = np.zeros(tables + 1, dtype=np.int64)
    for r in iter_batch_ranges(src, with_updates=False):
        keys, _ = first.unique(r.keys, r.bounds)
        if len(keys) == 0:
            continue
        group = _sample_groups(keys, whole, where)
        tid = np.empty(len(keys), dtype=np.int32)
        local = np.empty(len(keys), dtype=np.int64)
        local_group = np.empty(len(group), dtype=np.uint8)
        _split_by_table(keys, group, offsets, tid, starts, local, local_group)
        for t in range(tables):
            lo, hi = int(starts[t]), int(starts[t + 1])
            if hi > lo:
                samplers[t].feed_sampled(0, local[lo:hi], local_group[lo:hi])
    curves = []
    no_group = np.empty(0, dtype=np.uint8)
    for t, s in enumerate(samplers):
        s.feed_sampled(round(float(full[t])), np.empty(0, np.int64), no_group)
        # cold misses of the full stream: the sample's first uses / R
        cold = min(float(s.full.cold) / s.rate, float(full[t]))
        curves.append(
            UniqueCurve(int(rows[t]), float(full[t]), cold, sampler=s, floor=s.resolution)
        )
    return curves


__all__ = [
    "FirstInBatch",
    "UniqueCurve",
    "che_unique_cold",
    "che_unique_misses",
    "reference_unique_lru_misses",
    "unique_curves",
]
