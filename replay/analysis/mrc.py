"""LRU miss-ratio curves of traces and workloads: results and the public API (DESIGN s.5).

A request is a dense flat key of `replay.trace.keys` (key = offsets[table] + row, in
[0, total_rows)), taken in trace order. The exact curve comes from one pass of exact
stack distances (`replay.analysis.stack`: Mattson et al.'s formula, the kernel and its
memory); the sampled one from SHARDS (`replay.analysis.shards`: the sampling, its
resolution and its stated error). This module turns either state into an `MrcResult`
and feeds it from keys, trace folders and on-the-fly workloads.

`mrc_trace` streams a trace folder, reading in a background thread (pyarrow releases the
GIL). Both curves read only the (table, row) columns: the exact one makes and checks the
flat keys in the reader thread; the sampled one makes, checks and hashes them in one fused
filter loop, since reading bounds it. `mrc_keys` takes in-memory keys (or chunks of
them); `StackDistances` and `ShardsSampler` are the resumable states for callers that
stream keys themselves. `mrc_source` also takes workloads, and spreads a sampled curve
over a Dask cluster.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import pyarrow as pa

from replay._arrow import to_numpy
from replay._threads import read_ahead
from replay.analysis.head import ExactHead, HeadCurve, head_capacity, head_curves
from replay.analysis.shards import (
    ERROR_T_QUANTILE,
    SHARDS_MODULUS,
    SHARDS_SALT,
    SUBSAMPLES,
    ShardsSampler,
    resolution_rows,
    shards_sample_columns,
    shards_threshold,
)
from replay.analysis.stack import (
    DEFAULT_MIN_WINDOW,
    StackDistances,
    dense_rows,
    reference_lru_misses,
    reference_stack_distances,
    stack_distances,
)
from replay.errors import ConfigError, TraceError, opt
from replay.trace.format import LOOKUPS_DIR
from replay.trace.keys import _flat_keys_checked, bad_lookup_error, table_offsets
from replay.trace.reader import Trace, open_trace
from replay.workload.onthefly import GeneratedTrace
from replay.workload.spec import WorkloadSpec

if TYPE_CHECKING:
    from replay.workload.source import Source, SourceRef

DEFAULT_CURVE_POINTS = 64
MAX_SIZE_ROWS = 2**62 - 1  # the largest cache size a curve is read at (int64 with room)
DEFAULT_TASK_LOOKUPS = 1 << 23  # lookups per map task of a spread sampled curve
KEYS_HEAD_SAMPLE = 1 << 16  # keys without batches: the first ones size the exact head


@dataclass(frozen=True, eq=False)
class MrcResult:
    """An LRU miss-ratio curve: `miss_ratios[i]` for a cache of `sizes[i]` rows."""

    sizes: np.ndarray  # int64 cache sizes in rows, increasing
    miss_ratios: np.ndarray  # float64
    exact: bool
    sample_rate: float | None  # effective T / P; None for the exact one-pass curve
    lookups: int
    sampled_lookups: int
    distinct_keys: int  # exact, or estimated (distinct sampled keys / R)
    expected_error: float  # 0.0 when exact; else ~95% bound, max over the curve
    point_errors: np.ndarray  # float64, the same bound at each size (zeros when exact)
    resolution_rows: int = 1  # smallest cache size the sample resolves (1 when exact)
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "curve": [
                [int(c), float(m)]
                for c, m in zip(self.sizes.tolist(), self.miss_ratios.tolist(), strict=True)
            ],
            "exact": bool(self.exact),
            "sample_rate": self.sample_rate,
            "lookups": int(self.lookups),
            "sampled_lookups": int(self.sampled_lookups),
            "distinct_keys": int(self.distinct_keys),
            "distinct_keys_estimated": self.sample_rate is not None and not self.exact,
            "expected_error": float(self.expected_error),
            "point_errors": [float(e) for e in self.point_errors.tolist()],
            "resolution_rows": int(self.resolution_rows),
            **self.extra,
        }


def default_sizes(
    distinct: int, points: int = DEFAULT_CURVE_POINTS, smallest: int = 1
) -> np.ndarray:
    """About `points` log-spaced sizes in [smallest, distinct], deduplicated, both ends in.

    When `distinct` < `smallest` (a sample that saw few keys) the one size is `smallest`.
    """
    lo = max(int(smallest), 1)
    top = max(int(distinct), lo)
    xs = np.rint(np.geomspace(lo, top, max(points, 2))).astype(np.int64)
    return np.unique(np.concatenate([[lo], xs, [top]]))


def validate_sizes(sizes: Sequence[int] | np.ndarray) -> np.ndarray:
    """Sizes as a sorted, deduplicated int64 array of positive integers (ConfigError)."""
    values = sizes.ravel().tolist() if isinstance(sizes, np.ndarray) else list(sizes)
    if not values:
        raise ConfigError(f"{opt('--sizes')}: give at least one cache size")
    out = []
    for value in values:
        integral = isinstance(value, int | np.integer) or (
            isinstance(value, float | np.floating) and float(value).is_integer()
        )
        if isinstance(value, bool | np.bool_) or not integral:
            raise ConfigError(
                f"{opt('--sizes')}: cache size {value!r} is not an integer number of rows"
            )
        if not 1 <= int(value) <= MAX_SIZE_ROWS:
            # both ends: "positive" alone reads wrong for a size too large
            raise ConfigError(
                f"{opt('--sizes')}: cache size {int(value)} must be a positive number of rows "
                "up to 2^62 - 1"
            )
        out.append(int(value))
    return np.unique(np.array(out, dtype=np.int64))


def validate_options(
    sizes: Sequence[int] | np.ndarray | None, sample_rate: float | None, *, head: bool = True
) -> np.ndarray | None:
    """Validated sizes (None = default); ConfigError for bad sizes or rate, before any work.

    `head`: the sampled curve gets an exact head (`replay.analysis.head`), which covers
    every size below the sample's resolution; without one, smaller sizes are an error."""
    chosen = None if sizes is None else validate_sizes(sizes)
    if sample_rate is not None:
        shards_threshold(sample_rate)
    if sample_rate is not None and not head:
        threshold = shards_threshold(sample_rate)
        floor = resolution_rows(threshold)
        if chosen is not None and chosen[0] < floor:
            raise ConfigError(
                f"{opt('--sizes')}: cache size {int(chosen[0])} is below what a sample at rate "
                f"{sample_rate} resolves (sizes >= {floor} rows); use a higher "
                f"{opt('--sample-rate')} "
                "or the exact curve"
            )
    return chosen


Progress = Callable[[int, int], None]  # (lookups done, lookups)
_Item = TypeVar("_Item")


def _counted(
    items: Iterable[_Item], size: Callable[[_Item], int], total: int, on_progress: Progress | None
) -> Iterable[_Item]:
    """`items` as they are, reporting the lookups done after the consumer has taken each
    (`size` counts an item's lookups)."""
    if on_progress is None:
        return items
    return _counting(items, size, total, on_progress)


def _counting(
    items: Iterable[_Item], size: Callable[[_Item], int], total: int, on_progress: Progress
) -> Iterator[_Item]:
    done = 0
    for item in items:
        yield item  # resumed when the consumer asks for the next: this one is done
        done += size(item)
        on_progress(done, total)


def _source_lookups(source: Any) -> int:
    """A trace's or a workload's lookups (a workload's from its spec)."""
    lookups = int(getattr(source, "num_lookups", 0) or 0)
    if not lookups:
        spec = getattr(source, "spec", None)
        lookups = int(source.num_batches) * int(spec.lookups_per_batch) if spec is not None else 0
    return lookups


def _chunks(keys: np.ndarray | Iterable[np.ndarray]) -> Iterable[np.ndarray]:
    if isinstance(keys, np.ndarray):
        return [keys]
    return keys


def stream_lookups(src: Any) -> int | None:
    """A trace's or a workload's lookups, None where neither its count nor its spec
    says (what `dense_rows` takes)."""
    return _source_lookups(src) or None


def stream_table_lookups(src: Any, tables: int) -> list[int] | None:
    """Each table's lookups in a workload's stream (None for a trace: not counted)."""
    spec = getattr(src, "spec", None)
    if not isinstance(spec, WorkloadSpec) or len(spec.tables) != tables:
        return None
    return [int(src.num_batches) * spec.batch_size * t.pooling for t in spec.tables]


def mrc_keys(
    keys: np.ndarray | Iterable[np.ndarray],
    total_keys: int,
    sizes: Sequence[int] | np.ndarray | None = None,
    sample_rate: float | None = None,
    *,
    min_window: int = DEFAULT_MIN_WINDOW,
    head_rows: int | None = None,
    lookups: int | None = None,
) -> MrcResult:
    """The LRU miss-ratio curve of flat keys in [0, total_keys): an array or its chunks.

    `lookups` (the keys' count, known for an array) picks the exact state's layout: an
    array over the whole row space, or a map over the keys seen where the row space is
    large against them (`replay.analysis.stack.dense_rows`); the distances are the same.

    `sample_rate` None gives the exact curve; a rate in (0, 1] the SHARDS estimate joined
    to the exact head of the whole stream (`replay.analysis.head`) below `head_rows` rows
    (default: `head_capacity` with the distinct keys of the first 65,536 standing for a
    batch's, as keys come without batches).
    """
    chosen = validate_options(sizes, sample_rate)
    if sample_rate is None:
        if lookups is None and isinstance(keys, np.ndarray):
            lookups = len(keys)
        state = StackDistances(
            total_keys, direct=dense_rows(total_keys, lookups), min_window=min_window
        )
        for chunk in _chunks(keys):
            state.feed(chunk)
        return _exact_result(state, chosen)
    sampler = ShardsSampler(total_keys, sample_rate)
    head: ExactHead | None = None
    for chunk in _chunks(keys):
        sampler.feed(chunk)
        if head is None:
            # no batches here: the first 65,536 keys stand for one batch's distinct rows
            first = len(np.unique(np.asarray(chunk[:KEYS_HEAD_SAMPLE])))
            rows = head_rows or head_capacity(first, sampler.resolution, total_keys)
            head = ExactHead(total_keys, min(int(rows), max(total_keys, 1)))
        head.feed(chunk)
    curve = None if head is None else HeadCurve(head.capacity, head.block_counts(), True)
    return _sampled_result(sampler, chosen, curve)


def _exact_result(state: StackDistances, sizes: np.ndarray | None) -> MrcResult:
    sizes = default_sizes(state.distinct) if sizes is None else sizes
    requests = state.requests
    misses = state.misses_at(sizes)
    ratios = misses / requests if requests else np.zeros(len(sizes))
    return MrcResult(
        sizes=sizes,
        miss_ratios=ratios.astype(np.float64),
        exact=True,
        sample_rate=None,
        lookups=requests,
        sampled_lookups=requests,
        distinct_keys=state.distinct,
        expected_error=0.0,
        point_errors=np.zeros(len(sizes)),
    )


def _sampled_result(
    sampler: ShardsSampler, sizes: np.ndarray | None, head: HeadCurve | None = None
) -> MrcResult:
    estimated = sampler.estimated_distinct
    with_head = head is not None and head.usable
    floor = 1 if with_head else sampler.resolution
    if sizes is not None and sizes[0] < floor:
        raise ConfigError(
            f"{opt('--sizes')}: cache size {int(sizes[0])} is below what a sample at rate "
            f"{sampler.rate:.6g} resolves (sizes >= {floor} rows) and the exact head read "
            "no lookups; use a higher rate or the exact curve"
        )
    sizes = default_sizes(estimated, smallest=floor) if sizes is None else sizes
    ratios, errors, bound = sampler.estimate(sizes, head if with_head else None)
    extra: dict[str, Any] = {"subsamples": len(sampler.groups)}
    if sampler.model is not None:
        from replay.analysis.shards_model import METHOD

        extra["model"] = METHOD
    if with_head:
        assert head is not None
        extra["exact_below_rows"] = head.capacity
        extra["head"] = {
            "capacity_rows": head.capacity,
            "exact": head.exact,
            "blocks": len(head.counts),
            "counted_lookups": head.counted,
        }
    return MrcResult(
        sizes=sizes,
        miss_ratios=ratios.astype(np.float64),
        exact=sampler.threshold == SHARDS_MODULUS,
        sample_rate=sampler.rate,
        lookups=sampler.requests,
        sampled_lookups=sampler.full.requests,
        distinct_keys=estimated,
        expected_error=bound,
        point_errors=errors,
        resolution_rows=floor,
        extra=extra,
    )


def _lookup_columns(trace: Trace) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(table, row) columns of each lookups row group, in trace order.

    Only these two columns: a curve needs the order, not the batch boundaries, and
    skipping `batch` (and the concatenation into whole-batch chunks that
    `iter_batch_ranges` does) reads about 1.3x faster, which is what bounds a sampled
    curve. Files and row groups come from the reader's own walk (`Trace._row_groups`), so
    its manifest and schema checks apply.
    """
    for member, handle, index in trace._row_groups(LOOKUPS_DIR, 0, trace.num_batches):
        try:
            table = handle.read_row_group(index, columns=["table", "row"])
        except (OSError, pa.ArrowException) as exc:
            detail = " ".join(str(exc).split())  # pyarrow's message may span lines
            raise TraceError(f"{member}: unreadable row group {index} ({detail})") from None
        tables, rows = table.column("table"), table.column("row")
        if tables.null_count or rows.null_count:
            raise TraceError(f"{member}: row group {index} holds null values")
        yield to_numpy(tables), to_numpy(rows)


def _checked_keys(trace: Trace, offsets: np.ndarray, rows: np.ndarray) -> Iterator[np.ndarray]:
    """Flat keys of each row group, table and row ids checked (runs in the reader thread)."""
    done = 0
    for table, row in _lookup_columns(trace):
        keys = np.empty(len(row), dtype=np.int64)
        if _flat_keys_checked(table, row, offsets, rows, keys):
            raise bad_lookup_error(str(trace.path), done, table, row, rows)
        done += len(row)
        yield keys


def mrc_trace(
    trace: Trace | str | Path,
    sizes: Sequence[int] | np.ndarray | None = None,
    sample_rate: float | None = None,
    on_progress: Progress | None = None,
) -> MrcResult:
    """The LRU miss-ratio curve of a trace folder's lookups, in trace order.

    The (table, row) columns are read ahead in a background thread. Exact: that thread
    also makes the flat keys, and the stack-distance kernel runs here. Sampled: the
    columns go straight into the fused SHARDS filter. Table and row ids are checked
    (TraceError), as the row space must hold every key. on_progress(lookups done,
    lookups) as the pass goes (a sampled curve's exact head follows the last call).
    """
    chosen = validate_options(sizes, sample_rate)  # before reading anything
    opened = trace if isinstance(trace, Trace) else open_trace(trace)
    rows = opened.table_rows.astype(np.int64)
    offsets = table_offsets(rows)[:-1]
    total = int(rows.sum())
    lookups = opened.num_lookups
    if sample_rate is None:
        keys = read_ahead(_checked_keys(opened, offsets, rows))
        return mrc_keys(_counted(keys, len, lookups, on_progress), total, chosen, lookups=lookups)
    sampler = ShardsSampler(total, sample_rate)
    columns = read_ahead(_lookup_columns(opened))
    for table, row in _counted(columns, lambda c: len(c[1]), lookups, on_progress):
        sampler.feed_columns(table, row, offsets, rows, where=str(opened.path))
    return _sampled_result(sampler, chosen, source_heads(opened, sampler.resolution)[0])


def source_heads(
    source: Any, resolution: int, *, total: bool = True, per_table: bool = False
) -> list[HeadCurve]:
    """The exact heads of a trace's or a workload's stream (`replay.analysis.head`):
    its batches read again through `iter_lookups` (the whole stream when it is short, else
    blocks spread over it), so the result is the same whoever ran the sample."""
    rows = np.asarray(source.table_rows, dtype=np.int64)
    offsets = table_offsets(rows)
    where = str(getattr(source, "path", "lookups"))

    def keys_of(a: int, b: int) -> Iterator[np.ndarray]:
        for chunk in source.iter_lookups(a, b):
            keys = np.empty(len(chunk.row), dtype=np.int64)
            if _flat_keys_checked(chunk.table, chunk.row, offsets[:-1], rows, keys):
                raise bad_lookup_error(where, 0, chunk.table, chunk.row, rows)
            yield keys

    num_batches = int(source.num_batches)
    lookups = _source_lookups(source)
    return head_curves(
        keys_of, num_batches, lookups, offsets, resolution, total=total, per_table=per_table
    )


def _row_space(source: Source) -> tuple[np.ndarray, np.ndarray, int]:
    """(rows, offsets without the total, total rows) as the kernels take them."""
    rows = source.table_rows.astype(np.int64)
    return rows, table_offsets(rows)[:-1], int(rows.sum())


_OPENED: dict[str, Source] = {}


def _open_cached(ref: SourceRef) -> Source:
    """A worker process's opened source, kept for its later tasks (a Dask worker runs
    many tasks of one curve; building a workload's sampler tables costs ~0.3 s)."""
    from replay.workload.source import open_source

    key = json.dumps(ref.to_dict(), sort_keys=True) if isinstance(ref, WorkloadSpec) else ref
    if key not in _OPENED:
        _OPENED.clear()
        _OPENED[key] = open_source(ref, threads=1)
    return _OPENED[key]


def shards_map(
    ref: SourceRef, batch_start: int, batch_stop: int, threshold: int
) -> tuple[int, np.ndarray, np.ndarray]:
    """The SHARDS sample of batches [batch_start, batch_stop) of a source (a map task)."""
    source = _open_cached(ref)
    rows, offsets, _ = _row_space(source)
    where = f"{source.path} batches [{batch_start}, {batch_stop})"
    requests, keys, groups = 0, [], []
    for chunk in source.iter_lookups(batch_start, batch_stop):
        n, k, g = shards_sample_columns(
            chunk.table, chunk.row, offsets, rows, threshold, where=where
        )
        requests += n
        keys.append(k)
        groups.append(g)
    if not keys:
        return 0, np.empty(0, dtype=np.int64), np.empty(0, dtype=np.uint8)
    return requests, np.concatenate(keys), np.concatenate(groups)


def task_ranges(source: Source, task_lookups: int = DEFAULT_TASK_LOOKUPS) -> list[tuple[int, int]]:
    """Consecutive batch ranges of about `task_lookups` lookups covering the source, cut
    where its data is cut (files of a trace, row groups of a workload)."""
    if isinstance(source, GeneratedTrace):
        cuts = [(g0, g1, (g1 - g0) * source.spec.lookups_per_batch) for g0, g1 in source.row_groups]
    else:
        cuts = [
            (int(e["batch_start"]), int(e["batch_stop"]), int(e["rows"]))
            for e in source.manifest["files"][LOOKUPS_DIR]
        ]
    ranges: list[tuple[int, int]] = []
    start, size = None, 0
    for lo, hi, n in cuts:
        start = lo if start is None else start
        size += n
        if size >= task_lookups:
            ranges.append((start, hi))
            start, size = None, 0
    if start is not None:
        ranges.append((start, cuts[-1][1]))
    return ranges


def mrc_source(
    ref: SourceRef,
    sizes: Sequence[int] | np.ndarray | None = None,
    sample_rate: float | None = None,
    *,
    client: Any = None,
    threads: int | None = None,
    on_progress: Progress | None = None,
) -> MrcResult:
    """The LRU miss-ratio curve of a trace folder or an on-the-fly workload.

    On one machine a trace goes through `mrc_trace`; a workload is generated by
    `threads` threads, which also make the keys (exact) or run the SHARDS filter
    (sampled), so the caller's thread only runs the stack-distance kernels. With a Dask
    `client` (sampled curves only) the filter is spread over the cluster by batch ranges
    (`task_ranges`, `shards_map`) and the samples are folded in here in trace order, so
    the curve is the single-machine one, bit for bit. on_progress(lookups done, lookups)
    as the pass goes (a sampled curve's exact head follows the last call).
    """
    from replay.workload.source import open_source

    chosen = validate_options(sizes, sample_rate)
    if client is not None and sample_rate is None:
        raise ConfigError(
            "the exact curve is one sequential pass; --scheduler spreads --sample-rate curves"
        )
    source = open_source(ref, threads=threads)
    if client is None and not isinstance(source, GeneratedTrace):
        return mrc_trace(source, chosen, sample_rate, on_progress)
    rows, offsets, total = _row_space(source)
    where = str(source.path)
    if sample_rate is None:
        assert isinstance(source, GeneratedTrace)

        def keys_of(chunk: Any) -> np.ndarray:
            keys = np.empty(len(chunk.row), dtype=np.int64)
            if _flat_keys_checked(chunk.table, chunk.row, offsets, rows, keys):
                raise bad_lookup_error(where, 0, chunk.table, chunk.row, rows)
            return keys

        lookups = _source_lookups(source)
        return mrc_keys(
            _counted(source.map_lookups(keys_of), len, lookups, on_progress),
            total,
            chosen,
            lookups=lookups or None,
        )
    sampler = ShardsSampler(total, sample_rate)
    threshold = sampler.threshold
    if client is None:
        assert isinstance(source, GeneratedTrace)
        parts: Iterable[tuple[int, np.ndarray, np.ndarray]] = source.map_lookups(
            lambda c: shards_sample_columns(c.table, c.row, offsets, rows, threshold, where=where)
        )
    else:
        from replay._distributed import map_in_order

        parts = map_in_order(
            client, shards_map, [(ref, a, b, threshold) for a, b in task_ranges(source)]
        )
    counted = _counted(parts, lambda p: p[0], _source_lookups(source), on_progress)
    for requests, keys, group in counted:
        sampler.feed_sampled(requests, keys, group)
    return _sampled_result(sampler, chosen, source_heads(source, sampler.resolution)[0])


def bench_mrc(trace_path: str | Path, sample_rate: float | None = None) -> dict[str, Any]:
    """Time `mrc_trace` on a trace: lookups, seconds, lookups/s, peak RSS.

    Kernels are compiled (or loaded from numba's cache) and the reader warmed up on the
    first batch before the timing starts. `main_thread_cpu_seconds` is the kernels' share
    (reading runs in a background thread).
    """
    from replay._machine import machine_description, peak_rss_bytes

    trace = open_trace(trace_path)
    rows = trace.table_rows.astype(np.int64)
    offsets = table_offsets(rows)[:-1]
    total = int(rows.sum())
    first = next(_lookup_columns(trace), None)
    if first is not None:
        # one row group through each path, outside the timing: numba's cache loads (for
        # these very array types) and pyarrow's start-up
        table, row = first
        keys = np.empty(len(row), dtype=np.int64)
        _flat_keys_checked(table, row, offsets, rows, keys)
        mrc_keys(keys, total)
        ShardsSampler(total, 0.5).feed_columns(table, row, offsets, rows)
    started = time.perf_counter()
    cpu = time.thread_time()
    result = mrc_trace(trace, sample_rate=sample_rate)
    cpu = time.thread_time() - cpu
    seconds = time.perf_counter() - started
    return {
        "trace": str(trace_path),
        "sample_rate": result.sample_rate,
        "exact": result.exact,
        "lookups": result.lookups,
        "sampled_lookups": result.sampled_lookups,
        "distinct_keys": result.distinct_keys,
        "expected_error": result.expected_error,
        "seconds": seconds,
        "lookups_per_s": result.lookups / seconds if seconds > 0 else 0.0,
        "main_thread_cpu_seconds": cpu,
        "peak_rss_bytes": peak_rss_bytes(),
        "machine": machine_description(),
    }


__all__ = [
    "DEFAULT_CURVE_POINTS",
    "DEFAULT_MIN_WINDOW",
    "DEFAULT_TASK_LOOKUPS",
    "ERROR_T_QUANTILE",
    "MAX_SIZE_ROWS",
    "SHARDS_MODULUS",
    "SHARDS_SALT",
    "SUBSAMPLES",
    "MrcResult",
    "ShardsSampler",
    "StackDistances",
    "bench_mrc",
    "default_sizes",
    "mrc_keys",
    "mrc_source",
    "mrc_trace",
    "reference_lru_misses",
    "reference_stack_distances",
    "resolution_rows",
    "shards_map",
    "shards_sample_columns",
    "shards_threshold",
    "stack_distances",
    "task_ranges",
    "validate_options",
    "validate_sizes",
]
