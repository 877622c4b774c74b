"""Long-horizon curves of a source: rows touched per window of batches, and LRU miss-ratio
curves over the whole stream, in total and per table (issue 25).

A source is a trace folder, an on-the-fly workload or a spatially sampled one
(`replay.workload.sampled`: only the lookups of the rows SHARDS keeps at rate R, read
through the same interface, with a `sample_rate` attribute; any other source has R = 1).
Everything is read through `replay.trace.stream.iter_batch_ranges`, so the curves need
memory for per-key state only, never for the number of batches.

Rows touched, `touched(k)`: the mean, over the B - k + 1 windows of k consecutive batches
of a B-batch stream, of the number of distinct rows updated (or looked up) in the window.
For one key seen at batches b_1 < ... < b_m, the windows that miss it are those lying
wholly inside one of its gaps: the leading gap of L_0 = b_1 batches, the interior gaps
L_i = b_{i+1} - b_i - 1 and the trailing gap L_m = B - 1 - b_m. A gap of L batches holds
max(0, L - k + 1) windows of k batches, so with K the keys seen at least once

    sum over windows of distinct(window) = K (B - k + 1) - sum over gaps of max(0, L - k + 1)
    touched(k) = K - sum_{gaps with L >= k} (L - k + 1) / (B - k + 1).

One pass records each gap (the leading and interior ones when a key recurs, the trailing
ones at the end from each key's last batch); as the sum over L >= k is linear in L, a
histogram of the gaps' count and sum of L in the buckets [k_j, k_{j+1}) between the
curve's batch counts gives every k_i exactly (integer arithmetic until the final
division). Per-key state is the last batch of each key: an int32 array over the row space
when it fits in `DENSE_MAX_ROWS` (4 bytes a row: 136 MB for criteo-kaggle), else an
open-addressing map over the keys seen (criteo-terabyte's 882 M rows would take 3.5 GB;
a sampled stream meets about R of them). From a sampled stream the counts are divided by
R (each row is in the sample with probability R, independently of the stream).

Horizon miss-ratio curve: the exact LRU curve of the whole stream (`replay.analysis.mrc`)
at R = 1; from a sampled stream, SHARDS scaling (`replay.analysis.shards`): every lookup of
the sampled stream is a sampled request whose stack distance / R estimates its true
distance. The stream's keys go through the same SHARDS filter (they all pass it when the
stream was sampled by the same rule at the same rate, which is checked) for their error
groups, and the SHARDS_adj total N R uses the full stream's lookup count N (from the
workload spec; else estimated as sampled lookups / R). Per-table curves take each table's
keys on their own (one state per table, table-local keys), for splitting a cache budget.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from replay._intrinsics import PREFETCH_AHEAD, prefetch
from replay._jit import kernel
from replay._malloc import state_array
from replay.analysis.head import HeadCurve, _split_by_table, head_curves
from replay.analysis.head_pieces import ahead, one_batch_heads, one_batch_heads_wanted
from replay.analysis.mrc import (
    MAX_SIZE_ROWS,
    MrcResult,
    _exact_result,
    _sampled_result,
    mrc_keys,
    mrc_source,
    mrc_trace,
    stream_lookups,
    stream_table_lookups,
    validate_options,
)
from replay.analysis.shards import ShardsSampler, TableSamplers, _shards_filter, resolution_rows
from replay.analysis.stack import _FIB, StackDistances, _rehash, dense_rows
from replay.errors import ConfigError, TraceError
from replay.trace.keys import (
    DEFAULT_CURVE_POINTS,
    curve_batches,
    table_of,
    table_offsets,
)
from replay.trace.reader import Trace
from replay.trace.stream import iter_batch_ranges
from replay.workload.onthefly import GeneratedTrace
from replay.workload.sampler import shards_threshold
from replay.workload.spec import WorkloadSpec

HEAD_CHUNK_LOOKUPS = 1 << 20  # lookups generated at a time for the exact head
MODEL_BLEND = 1.0  # the corrected sample above the exact head: blended as the plain one
DENSE_MAX_ROWS = 1 << 27  # per-key state in an array up to 512 MB (int32), else a map
KINDS = ("updates", "lookups")

# int64 scalar state of the touched kernel, `sc`
_T_ENTRIES = 0  # keys in the map (map mode)
_T_SHIFT = 1  # 64 - log2(map slots)
_T_WIDTH = 2
# kernel stop codes
_DONE = 0
_MAP_FULL = 1
_BAD_KEY = 2


@kernel
def _touched_kernel(
    keys: np.ndarray,
    bounds: np.ndarray,
    batch_start: int,
    start: int,
    offsets: np.ndarray,
    last: np.ndarray,
    map_keys: np.ndarray,
    map_last: np.ndarray,
    bucket_of: np.ndarray,
    count: np.ndarray,
    gapsum: np.ndarray,
    distinct: np.ndarray,
    sc: np.ndarray,
) -> tuple[int, int]:
    """Fold keys[start:] (batch b of the range = keys[bounds[b]:bounds[b+1]]) in.

    For each key's first occurrence in a batch, the gap L = batch - previous - 1 (previous
    = -1 for a first occurrence: the leading gap) goes to its table's bucket
    `bucket_of[L]` (count and sum of L); a key's first occurrence counts in `distinct`.
    Direct mode when `map_keys` is empty (`last` indexed by key); else the map
    (`map_keys` -1 = empty, `map_last` the last batch). Returns (index of the first key
    not processed, stop code); every stop happens before the key changes any state.
    """
    direct = len(map_keys) == 0
    total = offsets[len(offsets) - 1]
    mask = len(map_keys) - 1
    shift = np.uint64(sc[_T_SHIFT])
    entries = sc[_T_ENTRIES]
    cap = len(map_keys) >> 1  # grow at half full
    n = bounds[len(bounds) - 1]
    nb = len(bounds) - 1
    b = 0
    while b < nb and bounds[b + 1] <= start:
        b += 1
    i = start
    code = _DONE
    while b < nb:
        batch = batch_start + b
        hi = bounds[b + 1]
        while i < hi:
            if direct and i + PREFETCH_AHEAD < n:
                ahead = np.int64(keys[i + PREFETCH_AHEAD])
                if ahead >= 0 and ahead < total:
                    prefetch(last, ahead)
            key = np.int64(keys[i])
            if key < 0 or key >= total:
                code = _BAD_KEY
                break
            slot = key
            if direct:
                q: np.int64 | int = np.int64(last[key])  # or -1 below: numba unifies them
            else:
                slot = np.int64((np.uint64(key) * _FIB) >> shift)
                while True:
                    k = map_keys[slot]
                    if k == key:
                        q = np.int64(map_last[slot])
                        break
                    if k < 0:
                        q = -1
                        break
                    slot = (slot + 1) & mask
                if q < 0:
                    if entries >= cap:
                        code = _MAP_FULL
                        break
                    map_keys[slot] = key
                    entries += 1
            if q != batch:  # the key's first occurrence in this batch
                t = table_of(offsets, key)
                if q < 0:
                    distinct[t] += 1
                gap = batch - q - 1
                j = bucket_of[gap]
                if j >= 0:
                    count[t, j] += 1
                    gapsum[t, j] += gap
                if direct:
                    last[key] = batch
                else:
                    map_last[slot] = batch
            i += 1
        if code != _DONE:
            break
        b += 1
    sc[_T_ENTRIES] = entries
    return i, code


@kernel
def _trailing_dense(
    last: np.ndarray,
    offsets: np.ndarray,
    stop: int,
    bucket_of: np.ndarray,
    count: np.ndarray,
    gapsum: np.ndarray,
) -> None:
    """Add every seen key's trailing gap stop - 1 - last (direct mode)."""
    for t in range(len(offsets) - 1):
        for key in range(offsets[t], offsets[t + 1]):
            q = np.int64(last[key])
            if q >= 0:
                gap = stop - 1 - q
                j = bucket_of[gap]
                if j >= 0:
                    count[t, j] += 1
                    gapsum[t, j] += gap


@kernel
def _trailing_map(
    map_keys: np.ndarray,
    map_last: np.ndarray,
    offsets: np.ndarray,
    stop: int,
    bucket_of: np.ndarray,
    count: np.ndarray,
    gapsum: np.ndarray,
) -> None:
    """Add every seen key's trailing gap stop - 1 - last (map mode)."""
    for s in range(len(map_keys)):
        key = map_keys[s]
        if key >= 0:
            t = table_of(offsets, key)
            gap = stop - 1 - np.int64(map_last[s])
            j = bucket_of[gap]
            if j >= 0:
                count[t, j] += 1
                gapsum[t, j] += gap


@dataclass(frozen=True, eq=False)
class TouchedCurve:
    """Mean distinct rows touched in a window of `batches[i]` consecutive batches."""

    batches: np.ndarray  # int64 window lengths k, increasing, 1 .. num_batches
    rows: np.ndarray  # float64 mean distinct rows in a window, all tables
    per_table: np.ndarray  # float64 [tables, len(batches)]
    sample_rate: float  # R of the stream (counts are divided by it); 1.0 = full stream
    num_batches: int
    kind: str = "updates"  # "updates" (rows written) or "lookups" (rows read)
    table_names: tuple[str, ...] = ()

    def bytes(self, row_bytes: float | Sequence[float] | np.ndarray) -> np.ndarray:
        """Mean bytes touched in each window: rows x `row_bytes` (one number, or one per
        table, e.g. embedding_dim x 4 for float32 rows; optimizer state adds its share)."""
        per_row = np.asarray(row_bytes, dtype=np.float64)
        if per_row.ndim == 0:
            return self.rows * float(per_row)
        if per_row.shape != (self.per_table.shape[0],):
            raise ConfigError(
                f"row_bytes: give one number or one per table ({self.per_table.shape[0]})"
            )
        return per_row @ self.per_table

    def at(self, k: int) -> float:
        """touched(k) at a window length on the curve (KeyError otherwise)."""
        where = np.flatnonzero(self.batches == int(k))
        if not len(where):
            raise KeyError(f"window of {k} batches is not on the curve")
        return float(self.rows[int(where[0])])

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "sample_rate": float(self.sample_rate),
            "num_batches": int(self.num_batches),
            "curve": [
                [int(k), float(r)]
                for k, r in zip(self.batches.tolist(), self.rows.tolist(), strict=True)
            ],
            "per_table": {
                name: [float(r) for r in row.tolist()]
                for name, row in zip(self.table_names, self.per_table, strict=False)
            },
        }


class TouchedCounter:
    """The one-pass state of `touched_curve`: feed each batch's keys in batch order.

    `table_rows` gives the row space (flat keys as in `replay.trace.keys`); `batches` the
    window lengths (default: `curve_batches(num_batches, points)`); `direct` chooses the
    per-key array (default when the row space has at most `DENSE_MAX_ROWS` rows) or the
    map (tests force it to cover both).
    """

    def __init__(
        self,
        table_rows: Sequence[int] | np.ndarray,
        num_batches: int,
        *,
        points: int = DEFAULT_CURVE_POINTS,
        batches: Sequence[int] | np.ndarray | None = None,
        direct: bool | None = None,
        lookups: int | None = None,
    ) -> None:
        if num_batches < 0 or num_batches >= 2**31 - 1:
            raise ValueError("num_batches must be in [0, 2^31 - 1)")
        self.offsets = table_offsets(np.asarray(table_rows, dtype=np.int64))
        self.tables = len(self.offsets) - 1
        self.total = int(self.offsets[-1])
        self.num_batches = int(num_batches)
        if batches is None:
            ks = curve_batches(self.num_batches, points)
        else:
            ks = np.unique(np.asarray(batches, dtype=np.int64))
            if len(ks) and (ks[0] < 1 or ks[-1] > self.num_batches):
                raise ConfigError(f"window lengths must be in [1, {self.num_batches}]")
        self.batches = ks
        # gaps L in [k_j, k_{j+1}) go to bucket j; gaps below k_0 (>= 1) count for no k
        gaps = np.arange(max(self.num_batches, 1), dtype=np.int64)
        self.bucket_of = (np.searchsorted(ks, gaps, side="right") - 1).astype(np.int32)
        self.count = np.zeros((self.tables, len(ks)), dtype=np.int64)
        self.gapsum = np.zeros((self.tables, len(ks)), dtype=np.int64)
        self.distinct = np.zeros(self.tables, dtype=np.int64)
        # an array a row, or a map of the keys seen where there are too many rows or the
        # stream (`lookups`, an upper bound of the keys fed) is short against them
        dense = self.total <= DENSE_MAX_ROWS and dense_rows(self.total, lookups)
        self.direct = dense if direct is None else bool(direct)
        self.sc = np.zeros(_T_WIDTH, dtype=np.int64)
        if self.direct:
            self.last = state_array(self.total, np.int32, -1)
            self.map_keys = np.empty(0, dtype=np.int64)
        else:
            self.last = np.empty(0, dtype=np.int32)
            self.map_keys = np.full(1024, -1, dtype=np.int64)
            self.map_last = np.zeros(1024, dtype=np.int32)
            self.sc[_T_SHIFT] = 64 - 10
        if self.direct:
            self.map_last = np.empty(0, dtype=np.int32)
        self.next_batch = 0
        self.keys_fed = 0

    def feed(self, keys: np.ndarray, bounds: np.ndarray, batch_start: int) -> None:
        """Fold in batches [batch_start, batch_start + len(bounds) - 1): batch start + b
        touched keys[bounds[b]:bounds[b + 1]] (flat keys; repeats inside a batch are fine)."""
        batches = len(bounds) - 1
        if batch_start < self.next_batch or batch_start + batches > self.num_batches:
            raise ValueError(
                f"batches [{batch_start}, {batch_start + batches}) out of order or beyond "
                f"{self.num_batches}"
            )
        bounds = np.ascontiguousarray(bounds, dtype=np.int64)
        keys = np.ascontiguousarray(keys)
        if keys.dtype not in (np.uint32, np.int64):
            keys = keys.astype(np.int64)
        i = int(bounds[0]) if batches else 0
        while batches:
            i, code = _touched_kernel(
                keys, bounds, batch_start, i, self.offsets, self.last, self.map_keys,
                self.map_last, self.bucket_of, self.count, self.gapsum, self.distinct, self.sc,
            )  # fmt: skip
            if code == _DONE:
                break
            if code == _MAP_FULL:
                self._grow_map()
            else:
                raise TraceError(
                    f"batch range [{batch_start}, {batch_start + batches}): key {int(keys[i])} "
                    f"is outside the row space [0, {self.total})"
                )
        self.keys_fed += len(keys)
        self.next_batch = batch_start + batches

    def feed_source(self, src: Any, kind: str = "updates") -> None:
        """Feed every batch of an opened source: its update rows (`kind="updates"`) or
        its lookups (`"lookups"`)."""
        updates = kind == "updates"
        for r in iter_batch_ranges(src, with_updates=updates):
            if updates:
                self.feed(r.update_keys, r.update_bounds, r.batch_start)
            else:
                self.feed(r.keys, r.bounds, r.batch_start)

    def _grow_map(self) -> None:
        size = 2 * len(self.map_keys)
        keys = np.full(size, -1, dtype=np.int64)
        last = np.zeros(size, dtype=np.int32)
        _rehash(self.map_keys, self.map_last, keys, last)
        self.map_keys, self.map_last = keys, last
        self.sc[_T_SHIFT] = 64 - int(np.log2(size))

    @property
    def distinct_keys(self) -> int:
        return int(self.distinct.sum())

    def curve(
        self, sample_rate: float = 1.0, kind: str = "updates", table_names: Sequence[str] = ()
    ) -> TouchedCurve:
        """The curve of what was fed (the state stays usable); counts divided by R."""
        count, gapsum = self.count.copy(), self.gapsum.copy()
        stop = self.num_batches
        if self.direct:
            _trailing_dense(self.last, self.offsets, stop, self.bucket_of, count, gapsum)
        else:
            _trailing_map(
                self.map_keys, self.map_last, self.offsets, stop, self.bucket_of, count, gapsum
            )
        ks = self.batches
        windows = stop - ks + 1  # int64 > 0
        # suffix sums over buckets j >= i: the gaps with L >= k_i
        cnt = np.cumsum(count[:, ::-1], axis=1)[:, ::-1]
        gsum = np.cumsum(gapsum[:, ::-1], axis=1)[:, ::-1]
        missed = gsum - (ks - 1) * cnt  # sum over gaps with L >= k of (L - k + 1), exact
        present = self.distinct[:, None] * windows - missed  # sum over windows of distinct
        per_table = present / windows / float(sample_rate)
        rows = present.sum(axis=0) / windows / float(sample_rate)
        return TouchedCurve(
            batches=ks.copy(),
            rows=rows.astype(np.float64),
            per_table=per_table.astype(np.float64).reshape(self.tables, len(ks)),
            sample_rate=float(sample_rate),
            num_batches=stop,
            kind=kind,
            table_names=tuple(table_names),
        )


# -- sources --------------------------------------------------------------------------------


def _open(source: Any, threads: int | None) -> Any:
    """An opened source: a trace folder path or a workload spec is opened here."""
    if isinstance(source, str | Path | WorkloadSpec):
        from replay.workload.source import open_source

        return open_source(source, threads=threads)
    return source


def source_sample_rate(source: Any) -> float:
    """R of a source (`sample_rate`, 1.0 when it has none), checked to be in (0, 1]."""
    rate = float(getattr(source, "sample_rate", 1.0))
    if not 0.0 < rate <= 1.0:
        raise ConfigError(f"{source!r}: sample_rate {rate} must be in (0, 1]")
    return rate


def _label(source: Any) -> str:
    return str(getattr(source, "path", source))


def full_lookups(source: Any, sampled: np.ndarray, rate: float) -> np.ndarray:
    """Lookups per table of the full stream a sampled one was drawn from (int64): from
    its workload spec (batches x batch_size x pooling), else the sampled count / R."""
    spec = getattr(source, "spec", None)
    if isinstance(spec, WorkloadSpec):
        per_batch = np.array([spec.batch_size * t.pooling for t in spec.tables], dtype=np.int64)
        return per_batch * int(source.num_batches)
    return np.rint(np.asarray(sampled, dtype=np.float64) / rate).astype(np.int64)


def touched_curve(
    source: Any,
    *,
    points: int = DEFAULT_CURVE_POINTS,
    kind: str = "updates",
    threads: int | None = None,
) -> TouchedCurve:
    """Mean distinct rows updated (`kind="updates"`) or looked up (`"lookups"`) in a
    window of k consecutive batches, for about `points` log-spaced k in [1, batches], per
    table and in total; from a sampled stream, divided by its rate (module docstring).

    `source`: an opened source (trace, on-the-fly or sampled workload) or a trace folder
    path or workload spec, opened with `threads` generator threads.
    """
    if kind not in KINDS:
        raise ConfigError(f"kind {kind!r} is not one of {', '.join(KINDS)}")
    src = _open(source, threads)
    rate = source_sample_rate(src)
    counter = TouchedCounter(
        src.table_rows, src.num_batches, points=points, lookups=stream_lookups(src)
    )
    counter.feed_source(src, kind)
    names = tuple(getattr(src, "table_names", ()))
    return counter.curve(rate, kind, names)


# -- miss-ratio curves ----------------------------------------------------------------------


def _stream_keys(src: Any) -> Iterator[np.ndarray]:
    """The lookups' flat keys (int64) of each batch range, in stream order."""
    for r in iter_batch_ranges(src, with_updates=False):
        yield np.ascontiguousarray(r.keys, dtype=np.int64)


def _sample_groups(keys: np.ndarray, sampler: ShardsSampler, where: str) -> np.ndarray:
    """The SHARDS error group of each key of a sampled stream; ConfigError when a key is
    not one the SHARDS rule keeps at the sampler's rate (the stream was sampled otherwise)."""
    out_keys = np.empty(len(keys), dtype=np.int64)
    group = np.empty(len(keys), dtype=np.uint8)
    n, bad = _shards_filter(
        keys, sampler.threshold, sampler.salt, sampler.total_keys, out_keys, group
    )
    if bad:
        first = int(np.argmax((keys < 0) | (keys >= sampler.total_keys)))
        raise TraceError(
            f"{where}: key {int(keys[first])} is outside the row space [0, {sampler.total_keys})"
        )
    if n != len(keys):
        kept = set(out_keys[:n].tolist())
        odd = next(int(k) for k in keys.tolist() if k not in kept)
        raise ConfigError(
            f"{where}: key {odd} is not one SHARDS samples at rate {sampler.rate:.9g} "
            "(replay.analysis.shards: hash below T = round(R 2^24) with its salt); the stream "
            "was not sampled by that rule at that rate"
        )
    return group


def _full_stream_heads(src: Any, resolution: int) -> list[HeadCurve] | None:
    """[the total head, then one per table] of the full stream a sampled workload was drawn
    from (`replay.analysis.head`: its blocks generated in full from the spec, which gives
    any batch range on its own); None for a sampled source without a workload spec. Kept
    on the source, since the total and per-table curves share it."""
    spec = getattr(src, "spec", None)
    if not isinstance(spec, WorkloadSpec):
        return None
    cache: dict[int, list[HeadCurve]] = src.__dict__.setdefault("_replay_heads", {})
    if resolution not in cache:
        from replay.workload.generator import CompiledWorkload

        compiled = CompiledWorkload.from_spec(spec)
        offsets = table_offsets(np.array([t.rows for t in spec.tables], dtype=np.int64))
        step = max(1, HEAD_CHUNK_LOOKUPS // max(spec.lookups_per_batch, 1))

        def keys_of(a: int, b: int) -> Iterator[np.ndarray]:
            for g0 in range(a, b, step):
                _, table, row = compiled.lookups(g0, min(g0 + step, b))
                yield offsets[table.astype(np.int64)] + row.astype(np.int64)

        pieces = compiled.pieces
        if one_batch_heads_wanted(int(src.num_batches), int(spec.lookups_per_batch), pieces):
            # production scale (`replay.analysis.head_pieces`): one batch, in pieces
            middle = int(src.num_batches) // 2

            def make(piece: tuple[int, int]) -> np.ndarray:
                # the rows alone (the table ids are runs the spec fixes, and no head
                # needs flat keys): a head checks each row it reads against its table
                return compiled.batch_rows(middle, piece)

            def pieces_of() -> Iterator[tuple[tuple[int, int], None, np.ndarray]]:
                # generated a few pieces ahead on the source's threads (the generator's
                # kernel releases the GIL) while the heads take the current one
                threads = int(getattr(src, "threads", 1) or 1)
                for piece, rows in ahead(make, pieces, threads):
                    yield piece, None, rows

            from replay.analysis.touched_model import expected_touched

            cache[resolution] = one_batch_heads(
                pieces_of, offsets, compiled.table_lookups, resolution,
                expected_touched(spec, [1], kind="lookups")[:, 0],
            )  # fmt: skip
            src.__dict__["heads_basis"] = (
                f"the sampled curves' exact heads (sizes up to {cache[resolution][0].capacity:,} "
                f"rows in total) are counted in batch {middle:,} alone, read in "
                f"{len(pieces)} pieces of tables, 16 blocks within it (16 whole batches "
                f"would be {min(16, int(src.num_batches)) * int(spec.lookups_per_batch):,} "
                "lookups; replay.analysis.head_pieces)"
            )
            return cache[resolution]
        cache[resolution] = head_curves(
            keys_of, int(src.num_batches), int(spec.lookups), offsets, resolution,
            total=True, per_table=True,
        )  # fmt: skip
    return cache[resolution]


def horizon_mrc(
    source: Any,
    sizes_rows: np.ndarray | Sequence[int] | None = None,
    *,
    threads: int | None = None,
    tables: bool = False,
) -> MrcResult:
    """The LRU miss-ratio curve of a source's whole stream, cache sizes in rows.

    R = 1: the exact curve (`mrc_source`/`mrc_trace`, the very same result). A sampled
    stream: SHARDS_adj at its rate (every lookup is a sampled request; distances / R), with
    the random-group `expected_error` of `replay.analysis.shards`; sizes below the rate's
    `resolution_rows` are a ConfigError, as for `replay mrc --sample-rate`. A sampled
    workload spec's curve is corrected by Che's approximation as a control variate
    (`replay.analysis.shards_model`; `extra["model"]` says so). `tables`: a sampled
    stream's pass also feeds the per-table samplers, kept on the source for the next
    `per_table_mrc` (the same curves, without a second pass over the stream).
    """
    src = _open(source, threads)
    rate = source_sample_rate(src)
    if rate == 1.0:
        chosen = validate_options(sizes_rows, None)
        if isinstance(src, Trace):
            return mrc_trace(src, chosen)
        if type(src) is GeneratedTrace:
            return mrc_source(src.spec, chosen, threads=threads or src.threads)
        total = int(np.asarray(src.table_rows, dtype=np.int64).sum())
        return mrc_keys(_stream_keys(src), total, chosen, lookups=stream_lookups(src))
    with_head = isinstance(getattr(src, "spec", None), WorkloadSpec)
    chosen = validate_options(sizes_rows, rate, head=with_head)
    total = int(np.asarray(src.table_rows, dtype=np.int64).sum())
    sampler = ShardsSampler(total, rate)
    where = _label(src)
    sampled = 0
    rows = np.asarray(src.table_rows, dtype=np.int64)
    fed = _table_samplers(src, rows, rate) if tables else None
    for keys in _stream_keys(src):
        sampler.feed_sampled(0, keys, _sample_groups(keys, sampler, where))
        sampled += len(keys)
        if fed is not None:
            fed.add(keys)
    if fed is not None:
        fed.close()
        src.__dict__["_replay_table_samplers"] = fed
    requests = int(full_lookups(src, np.array([sampled]), rate).sum())
    sampler.feed_sampled(requests, np.empty(0, np.int64), np.empty(0, np.uint8))
    heads = _full_stream_heads(src, sampler.resolution)
    from replay.analysis import shards_model

    if shards_model.applicable(src):  # Che's curve as a control variate (its docstring)

        def model(sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            return shards_model.che_correction(
                src, sizes, sampler.rate, float(requests), int(sampler.salt), sampler.threshold
            )

        sampler.model, sampler.model_blend = model, MODEL_BLEND
    return _sampled_result(sampler, chosen, heads[0] if heads else None)


def _per_table_sizes(
    sizes: Any, tables: int, rate: float | None, head: bool = False
) -> list[np.ndarray | None]:
    """One validated size array (or None = default) per table: `sizes` None, one array for
    every table, or a sequence of `tables` arrays (each may be None)."""
    if sizes is None:
        return [None] * tables
    one = isinstance(sizes, np.ndarray) and sizes.ndim == 1
    if (
        not one
        and isinstance(sizes, Sequence)
        and all(isinstance(s, int | float | np.integer | np.floating) for s in sizes)
    ):
        one = True
    if one:
        chosen = validate_options(sizes, rate, head=head)
        return [chosen] * tables
    per = list(sizes)
    if len(per) != tables:
        raise ConfigError(f"sizes: give one size list per table ({tables}), got {len(per)}")
    validate_options(None, rate, head=head)  # the rate, once

    def valid(s: Any) -> np.ndarray:
        # an integer array in range: what `validate_sizes` makes of it, without its
        # per-value checks (856 tables of ~250 sizes each in a plan)
        if (
            isinstance(s, np.ndarray)
            and s.ndim == 1
            and s.dtype.kind in "iu"
            and len(s)
            and (rate is None or head)
            and int(s.min()) >= 1
            and int(s.max()) <= MAX_SIZE_ROWS
        ):
            return np.unique(s.astype(np.int64))
        chosen = validate_options(s, rate, head=head)
        assert chosen is not None
        return chosen

    return [None if s is None else valid(s) for s in per]


def per_table_mrc(
    source: Any,
    sizes_rows_per_table: Any = None,
    *,
    threads: int | None = None,
) -> list[MrcResult]:
    """Each table's LRU miss-ratio curve, its keys taken on their own (table-local sizes
    in rows): what splitting a cache budget across tables needs.

    `sizes_rows_per_table`: None (each table's default sizes), one size array for every
    table, or one per table. R = 1: exact, one `StackDistances` per table over the table's
    rows (4 bytes a row in all, as the total curve). A sampled stream: one SHARDS sampler
    per table, fed the stream's keys of that table (their error groups from the global
    keys' hash, as `horizon_mrc`), N_t the table's full lookups. Each result's `extra`
    names its table.
    """
    src = _open(source, threads)
    rate = source_sample_rate(src)
    rows = np.asarray(src.table_rows, dtype=np.int64)
    tables = len(rows)
    offsets = table_offsets(rows)
    with_head = isinstance(getattr(src, "spec", None), WorkloadSpec)
    sizes = _per_table_sizes(
        sizes_rows_per_table, tables, None if rate == 1.0 else rate, head=with_head
    )
    names = list(getattr(src, "table_names", [f"table {t}" for t in range(tables)]))
    exact = rate == 1.0
    # a table's stack over an array of its rows, or a map of the rows seen where the
    # stream is short against them (`dense_rows`): the same distances
    table_lookups = stream_table_lookups(src, tables) if exact else None
    states = (
        [
            StackDistances(
                int(r),
                direct=dense_rows(int(r), None if table_lookups is None else table_lookups[t]),
            )
            for t, r in enumerate(rows)
        ]
        if exact
        else []
    )
    no_group = np.empty(0, dtype=np.uint8)
    if not exact:
        # fed by `horizon_mrc(tables=True)`'s pass where it ran one, else here
        fed = src.__dict__.pop("_replay_table_samplers", None)
        if not isinstance(fed, TableSamplers) or fed.threshold != shards_threshold(rate):
            fed = _table_samplers(src, rows, rate)
            for keys in _stream_keys(src):
                fed.add(keys)
            fed.close()
        sampled = fed.sampled
    else:
        tid = np.empty(0, dtype=np.int32)
        starts = np.zeros(tables + 1, dtype=np.int64)
        sampled = np.zeros(tables, dtype=np.int64)
        for keys in _stream_keys(src):
            if len(tid) < len(keys):
                tid = np.empty(len(keys), dtype=np.int32)
            local = np.empty(len(keys), dtype=np.int64)
            _split_by_table(keys, no_group, offsets, tid, starts, local, no_group)
            for t in range(tables):
                lo, hi = int(starts[t]), int(starts[t + 1])
                if hi > lo:
                    sampled[t] += hi - lo
                    states[t].feed(local[lo:hi])
    results = []
    if exact:
        for t in range(tables):
            result = _exact_result(states[t], sizes[t])
            results.append(_named(result, names[t]))
        return results
    requests = full_lookups(src, sampled, rate)
    heads = _full_stream_heads(src, resolution_rows(fed.threshold)) if tables else None
    empty: dict[int, ShardsSampler] = {}
    for t in range(tables):
        sampler = fed.samplers.pop(t, None)
        if sampler is None:
            # a table without sampled keys: an empty sampler of its rows, one per row
            # count (nothing reads it but its requests, N_t: set, as feeding them would)
            if int(rows[t]) not in empty:
                empty[int(rows[t])] = ShardsSampler(int(rows[t]), rate)
            sampler = empty[int(rows[t])]
            sampler.requests = int(requests[t])
        else:
            sampler.feed_sampled(int(requests[t]), np.empty(0, np.int64), no_group)
        head = heads[1 + t] if heads else None
        results.append(_named(_sampled_result(sampler, sizes[t], head), names[t]))
    return results


def _table_samplers(src: Any, rows: np.ndarray, rate: float) -> TableSamplers:
    whole = ShardsSampler(int(rows.sum()), rate, subsamples=0)
    where = _label(src)
    return TableSamplers(rows, rate, lambda keys: _sample_groups(keys, whole, where))


def _named(result: MrcResult, name: str) -> MrcResult:
    result.extra["table"] = name
    return result


# -- references -----------------------------------------------------------------------------


def reference_touched(keys_by_batch: Sequence[Iterable[int]], k: int) -> float:
    """Mean distinct keys over the windows of k consecutive batches, window by window
    (a sliding multiset of the window's keys): the slow, obviously correct version."""
    batches = [list(b) for b in keys_by_batch]
    num = len(batches)
    if not 1 <= k <= num:
        raise ValueError("k must be in [1, batches]")
    window: Counter[int] = Counter()
    for b in batches[:k]:
        window.update(b)
    total = len(window)
    for t in range(1, num - k + 1):
        window.subtract(batches[t - 1])
        window.update(batches[t + k - 1])
        window = +window  # drop keys whose count fell to zero
        total += len(window)
    return total / (num - k + 1)


__all__ = [
    "DENSE_MAX_ROWS",
    "KINDS",
    "TouchedCounter",
    "TouchedCurve",
    "full_lookups",
    "horizon_mrc",
    "per_table_mrc",
    "reference_touched",
    "source_sample_rate",
    "touched_curve",
]
