"""Stream a trace as aligned batch ranges of lookups and update rows, read ahead.

`iter_batch_ranges` yields `BatchRange` objects that cover consecutive batch ranges of
the trace in order; each carries the flat keys of its lookups and of its update rows with
per-batch bounds, so a kernel can walk batch by batch. A background thread reads and
decodes the next ranges (pyarrow and the key kernel release the GIL) while the caller's
kernel runs on the current one, so reading costs little wall time on two cores.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from replay._intrinsics import ix
from replay._jit import kernel
from replay._threads import read_ahead as read_ahead_items
from replay.trace.keys import batch_bounds, flat_keys, key_dtype, table_offsets, table_runs
from replay.trace.reader import Trace


class GeneratedRanges(Protocol):
    """What `iter_batch_ranges` needs of a source that makes its own ranges: an
    on-the-fly workload (`replay.workload.onthefly.GeneratedTrace`, a layer above)."""

    @property
    def num_batches(self) -> int: ...

    def generated_ranges(
        self, start: int, stop: int, *, with_updates: bool, with_distinct: bool
    ) -> Iterator[BatchRange]: ...


DEFAULT_MIN_LOOKUPS = 1  # one row group (~1 M lookups) per range: no concatenation
READ_AHEAD = 4


@dataclass(frozen=True)
class BatchRange:
    """Lookups and update rows of batches [batch_start, batch_stop), as flat keys."""

    batch_start: int
    batch_stop: int
    keys: np.ndarray  # int64 flat key per lookup, trace order
    bounds: np.ndarray  # int64, len batches + 1: lookups of batch start+i are keys[b[i]:b[i+1]]
    update_keys: np.ndarray  # int64 flat key per update row
    update_bounds: np.ndarray  # int64, len batches + 1
    distinct: np.ndarray | None = None  # int64 distinct keys per batch (when asked for)
    # the lookups' (batch, table) runs for the trace statistics (`replay.trace.keys.table_runs`,
    # when asked for)
    runs: np.ndarray | None = None

    @property
    def batches(self) -> int:
        return self.batch_stop - self.batch_start


def empty_range(total_keys: int) -> BatchRange:
    """A range of no batches whose arrays have the types of every range the stream makes
    (so a kernel called on it loads the same compiled version: for warm-ups)."""
    keys = np.empty(0, dtype=key_dtype(total_keys))
    return BatchRange(0, 0, keys, np.zeros(1, np.int64), keys, np.zeros(1, np.int64))


@kernel
def distinct_kernel(
    keys: np.ndarray, bounds: np.ndarray, seen: np.ndarray, out: np.ndarray
) -> None:
    """out[b] = distinct keys of batch b of the range.

    `seen` is a bitmap over all keys (uint64 words, all zero between calls): 1 bit per
    key keeps it in the last-level cache (4 MB for the 34 M rows of criteo-kaggle), where
    a per-key stamp array would miss to DRAM on every cold key. Each batch clears the
    words it set by walking its keys again (they are in cache by then).
    """
    for b in range(len(bounds) - 1):
        lo = bounds[b]
        hi = bounds[b + 1]
        n = 0
        for i in range(lo, hi):
            k = keys[ix(i)]
            word = ix(k >> 6)
            bit = np.uint64(1) << np.uint64(k & 63)
            old = seen[word]
            n += (old & bit) == 0  # branchless: new keys come at random
            seen[word] = old | bit
        for i in range(lo, hi):
            seen[ix(keys[ix(i)] >> 6)] = 0
        out[b] = n


def distinct_bitmap(total_keys: int) -> np.ndarray:
    """The zeroed `seen` bitmap `distinct_kernel` needs (1 bit per key)."""
    return np.zeros((total_keys + 63) // 64, dtype=np.uint64)


def build_range(
    lo: int,
    hi: int,
    offsets: np.ndarray,
    batch: np.ndarray,
    table: np.ndarray | None,
    row: np.ndarray | None,
    update_batch: np.ndarray | None,
    update_table: np.ndarray | None,
    update_row: np.ndarray | None,
    seen: np.ndarray | None,
    where: str = "trace",
    with_runs: bool = False,
) -> BatchRange:
    """The `BatchRange` of batches [lo, hi) from its lookup and update columns.

    `table`/`row` None means no lookups; `update_*` None means no update rows asked for;
    `seen` (a zeroed `distinct_bitmap`, left zeroed) asks for the distinct counts;
    `with_runs` adds the lookups' (batch, table) runs, for the trace statistics.
    """
    empty = np.empty(0, dtype=key_dtype(int(offsets[-1])))
    bounds = batch_bounds(batch, lo, hi)
    distinct = None
    if table is None or row is None:
        keys = empty
        if seen is not None:
            distinct = np.zeros(hi - lo, dtype=np.int64)
    else:
        keys = flat_keys(table, row, offsets, where=where, batch=batch)
        if seen is not None:
            distinct = np.zeros(hi - lo, dtype=np.int64)
            distinct_kernel(keys, bounds, seen, distinct)
    if update_batch is not None and update_table is not None and update_row is not None:
        ukeys = flat_keys(
            update_table, update_row, offsets, where=f"{where} (updates)", batch=update_batch
        )
        ubounds = batch_bounds(update_batch, lo, hi)
    else:
        ukeys, ubounds = empty, np.zeros(hi - lo + 1, dtype=np.int64)
    runs = None
    if with_runs:
        runs = table_runs(np.empty(0, dtype=np.uint16) if table is None else table, bounds, lo)
    return BatchRange(lo, hi, keys, bounds, ukeys, ubounds, distinct, runs)


class _UpdateCursor:
    """Update rows of consecutive batch ranges, from one streaming pass over the files."""

    def __init__(self, trace: Trace, start: int, stop: int, min_rows: int) -> None:
        self._chunks = trace.iter_updates(
            start, stop, min_rows=min_rows, use_threads=False, with_count=False
        )
        self._batch = np.empty(0, dtype=np.uint32)
        self._table = np.empty(0, dtype=np.uint16)
        self._row = np.empty(0, dtype=trace.row_dtype)
        self._exhausted = False

    def take(self, stop: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(batch, table, row) of every buffered or upcoming update of batches < stop."""
        # chunks never split a batch, so a buffer that reaches batch stop - 1 holds all of
        # them: reading on to the next chunk would only copy it in here (row groups end
        # where the lookups' ranges end, so each range's updates then pass uncopied)
        while not self._exhausted and (len(self._batch) == 0 or self._batch[-1] < stop - 1):
            try:
                chunk = next(self._chunks)
            except StopIteration:
                self._exhausted = True
                break
            if len(self._batch):
                self._batch = np.concatenate([self._batch, chunk.batch])
                self._table = np.concatenate([self._table, chunk.table])
                self._row = np.concatenate([self._row, chunk.row])
            else:
                self._batch, self._table, self._row = chunk.batch, chunk.table, chunk.row
        cut = int(np.searchsorted(self._batch, self._batch.dtype.type(min(stop, 2**32 - 1))))
        taken = self._batch[:cut], self._table[:cut], self._row[:cut]
        self._batch, self._table, self._row = (
            self._batch[cut:],
            self._table[cut:],
            self._row[cut:],
        )
        return taken


def _ranges(
    trace: Trace,
    start: int,
    stop: int,
    min_lookups: int,
    with_updates: bool,
    with_distinct: bool = False,
    with_runs: bool = False,
) -> Iterator[BatchRange]:
    offsets = table_offsets(trace.table_rows)
    seen = distinct_bitmap(int(offsets[-1]) if with_distinct else 0)
    updates = _UpdateCursor(trace, start, stop, max(1, min_lookups // 2)) if with_updates else None

    def make(
        lo: int, hi: int, batch: np.ndarray, table: np.ndarray | None, row: np.ndarray | None
    ) -> BatchRange:
        if updates is not None:
            ubatch, utable, urow = updates.take(hi)
        else:
            ubatch = utable = urow = None
        return build_range(
            lo, hi, offsets, batch, table, row, ubatch, utable, urow,
            seen if with_distinct else None, str(trace.path), with_runs,
        )  # fmt: skip

    cursor = start
    # decode on this thread only: the caller's kernels use the other core
    for chunk in trace.iter_lookups(start, stop, min_lookups=min_lookups, use_threads=False):
        # a range starts where the previous one stopped, so batches without lookups
        # (possible in ingested traces) still belong to exactly one range
        yield make(cursor, chunk.batch_stop, chunk.batch, chunk.table, chunk.row)
        cursor = chunk.batch_stop
    if cursor < stop:  # trailing batches without lookups
        yield make(cursor, stop, np.empty(0, dtype=np.uint32), None, None)


def iter_batch_ranges(
    trace: Trace | GeneratedRanges,
    start: int = 0,
    stop: int | None = None,
    *,
    min_lookups: int = DEFAULT_MIN_LOOKUPS,
    with_updates: bool = True,
    with_distinct: bool = False,
    read_ahead: int = READ_AHEAD,
    with_runs: bool = False,
) -> Iterator[BatchRange]:
    """Consecutive `BatchRange`s covering [start, stop), decoded in a background thread
    (for an on-the-fly workload: generated in its own pool of threads).

    `with_runs` (trace folders only) adds each range's (batch, table) runs, for the trace
    statistics. Errors raised while reading (a corrupt file) are re-raised in
    the caller's thread.
    """
    stop = trace.num_batches if stop is None else min(stop, trace.num_batches)
    generated = getattr(trace, "generated_ranges", None)
    if generated is not None:  # an on-the-fly workload makes its ranges in its own threads
        if with_runs:
            raise ValueError("with_runs needs a trace folder")
        yield from generated(start, stop, with_updates=with_updates, with_distinct=with_distinct)
        return
    ranges = _ranges(trace, start, stop, min_lookups, with_updates, with_distinct, with_runs)
    if read_ahead <= 0:
        yield from ranges
    else:
        yield from read_ahead_items(ranges, read_ahead, "replay-stream")
