"""Flat keys: one integer per (table, row) pair, and per-batch offsets into a chunk.

A cache or a stack distance sees a lookup as a request for the key (table, row). The key
is ``offsets[table] + row``, where ``offsets`` is the exclusive prefix sum of the tables'
row counts, so keys are dense in [0, Σ rows): per-key state can live in plain arrays
(direct indexing), which is what makes the kernels fast.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from replay._intrinsics import ix
from replay._jit import kernel
from replay.errors import TraceError
from replay.trace.curve_points import DEFAULT_CURVE_POINTS


def table_offsets(table_rows: np.ndarray) -> np.ndarray:
    """int64 offsets with offsets[t] = Σ_{u<t} rows_u; len = tables + 1 (last = Σ rows)."""
    rows = np.asarray(table_rows, dtype=np.int64)
    out = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(rows, out=out[1:])
    return out


@kernel(inline="always")
def last_at_most(values: np.ndarray, lo: np.int64, hi: np.int64, x: np.int64) -> np.int64:
    """The largest i in [lo, hi] with values[i] <= x, values ascending over [lo, hi] and
    values[lo] <= x (binary search): a key's table in its offsets, a row's block in its
    table's block starts."""
    while lo < hi:
        mid = (lo + hi + 1) >> 1
        if values[ix(mid)] <= x:
            lo = mid
        else:
            hi = mid - 1
    return np.int64(lo)


@kernel(inline="always")
def table_of(offsets: np.ndarray, key: np.int64) -> np.int64:
    """t with offsets[t] <= key < offsets[t + 1] (`table_offsets`; key in range)."""
    return last_at_most(offsets, np.int64(0), np.int64(len(offsets) - 2), key)


@kernel
def _flat_keys_checked(
    table: np.ndarray, row: np.ndarray, offsets: np.ndarray, rows: np.ndarray, out: np.ndarray
) -> int | np.signedinteger[Any]:
    """out[i] = offsets[table[i]] + row[i]; returns the number of out-of-range lookups.

    An id outside its table would alias another table's row or index past the per-key
    state arrays of the kernels (which do not bounds-check), so every key is checked
    here, where it is made; a bad one is clamped and counted, and the caller raises.
    """
    tables = len(rows)
    bad: int | np.signedinteger[Any] = 0  # numpy's bools add into it (numba: an int64)
    for i in range(len(row)):
        tb: int | np.int64 = np.int64(table[ix(i)])
        bad += tb >= tables
        tb = min(tb, tables - 1)
        r = np.uint64(row[ix(i)])
        bad += r >= np.uint64(rows[ix(tb)])
        out[ix(i)] = offsets[ix(tb)] + np.int64(min(r, np.uint64(rows[ix(tb)] - 1)))
    return bad


def bad_lookup_error(
    where: str,
    before: int,
    table: np.ndarray,
    row: np.ndarray,
    rows: np.ndarray,
    batch: np.ndarray | None = None,
) -> TraceError:
    """The TraceError for the first lookup of a chunk whose table or row is out of range
    (`before`: lookups ahead of the chunk; `batch`, when given, names the batch)."""
    t64 = table.astype(np.int64)
    wrong = (t64 >= len(rows)) | (row >= rows[np.minimum(t64, len(rows) - 1)])
    first = int(np.argmax(wrong))
    t, r = int(table[first]), int(row[first])
    what = (
        f"table index {t} is out of range (the trace has {len(rows)} tables)"
        if t >= len(rows)
        else f"row id {r} is out of range (table {t} has {int(rows[t])} rows)"
    )
    at = f"batch {int(batch[first])}" if batch is not None else f"lookup {before + first + 1}"
    return TraceError(f"{where}: {at} (table {t}, row {r}): {what}")


def key_dtype(total_keys: int) -> np.dtype:
    """uint32 keys when every key fits (half the memory traffic of int64), else int64."""
    return np.dtype(np.uint32) if total_keys <= 2**32 else np.dtype(np.int64)


def flat_keys(
    table: np.ndarray,
    row: np.ndarray,
    offsets: np.ndarray,
    *,
    where: str = "trace",
    batch: np.ndarray | None = None,
) -> np.ndarray:
    """The key of each lookup (or update row), in `key_dtype(offsets[-1])`; a TraceError
    (naming `where` and the batch) when a table or row id is out of range."""
    out = np.empty(len(table), dtype=key_dtype(int(offsets[-1])))
    if len(table):
        rows = np.diff(offsets)
        if _flat_keys_checked(table, row, offsets, rows, out):
            raise bad_lookup_error(where, 0, table, row, rows, batch)
    return out


@kernel
def _flat_runs_checked(
    row: np.ndarray, offsets: np.ndarray, counts: np.ndarray, t0: int, out: np.ndarray
) -> int | np.signedinteger[Any]:
    """`_flat_keys_checked` where the lookups are runs of whole tables: counts[k] rows of
    table t0 + k, then the next; no table ids to read."""
    bad: int | np.signedinteger[Any] = 0
    i = 0
    for k in range(len(counts)):
        base = offsets[ix(t0 + k)]
        rows = np.uint64(offsets[ix(t0 + k + 1)] - base)
        for _ in range(counts[ix(k)]):
            r = np.uint64(row[ix(i)])
            bad += r >= rows
            out[ix(i)] = base + np.int64(min(r, rows - np.uint64(1)))
            i += 1
    return bad


def flat_keys_of_tables(
    row: np.ndarray, offsets: np.ndarray, counts: np.ndarray, t0: int, *, where: str
) -> np.ndarray:
    """`flat_keys` (int64) of lookups that are runs of whole tables in order: counts[k]
    rows of table t0 + k, then the next (a generated piece of one batch, trace order).
    What `flat_keys` gives from the table ids these runs stand for, without them; a
    TraceError naming `where` when a row is outside its table."""
    counts = np.asarray(counts, dtype=np.int64)
    if int(counts.sum()) != len(row) or t0 < 0 or t0 + len(counts) >= len(offsets):
        raise TraceError(f"{where}: {len(row)} rows are not runs of tables {t0}-{t0 + len(counts)}")
    out = np.empty(len(row), dtype=np.int64)
    if len(row) and _flat_runs_checked(row, offsets, counts, t0, out):
        table = np.repeat(np.arange(t0, t0 + len(counts)), counts)
        raise bad_lookup_error(where, 0, table, row, np.diff(offsets), None)
    return out


def batch_bounds(batch: np.ndarray, batch_start: int, batch_stop: int) -> np.ndarray:
    """int64 array b of len (stop - start + 1): batch `start + i` is rows [b[i], b[i+1]).

    `batch` must be sorted (trace order guarantees it); batches without rows get an empty
    range, so the bounds cover every batch of [batch_start, batch_stop).
    """
    # edges in the batch column's own dtype: a mixed-dtype searchsorted would convert
    # the whole column first (measured: 10x slower than the search itself)
    dtype = batch.dtype if batch_stop < np.iinfo(batch.dtype).max else np.dtype(np.int64)
    edges = np.arange(batch_start, batch_stop + 1, dtype=dtype)
    return np.searchsorted(batch, edges, side="left").astype(np.int64)


# one row per (batch, table) run of lookups, int64, shape (runs + 1, RUN_WIDTH); the last
# row's start is the end of the chunk
RUN_START = 0  # index of the run's first lookup
RUN_TABLE = 1
RUN_BATCH = 2
RUN_WIDTH = 3


def table_runs(table: np.ndarray, bounds: np.ndarray, first_batch: int) -> np.ndarray:
    """The (batch, table) runs (`_R_*` rows, plus an end row) of lookups already checked
    and flattened: `bounds` are the per-batch offsets of batches first_batch, ... .

    Two kernels, a count and a fill, with the array allocated here between them: a
    kernel that allocates (`np.empty`) makes numba import `numba.np.arrayobj` when it
    loads the kernel from its cache (its code refers to that module's environment), 0.06 s
    under numba's compile lock in front of a command's first batch."""
    runs = np.empty((_count_runs(table, bounds) + 1, RUN_WIDTH), dtype=np.int64)
    _fill_runs(table, bounds, first_batch, runs)
    return runs


@kernel
def _count_runs(table: np.ndarray, bounds: np.ndarray) -> int | np.int64:
    """Each batch's changes of table are compared on two shifted slices: a loop that LLVM
    vectorizes (0.05 ms per million lookups, against 0.9 ms with the batch edge tested
    inside the loop)."""
    n: int | np.int64 = 0
    for b in range(len(bounds) - 1):
        lo = bounds[b]
        hi = bounds[b + 1]
        if hi > lo:
            after = table[lo + 1 : hi]
            before = table[lo : hi - 1]
            changes: int | np.int64 = 0
            for i in range(len(after)):
                changes += np.int64(after[i] != before[i])
            n += 1 + changes
    return n


@kernel
def _fill_runs(table: np.ndarray, bounds: np.ndarray, first_batch: int, runs: np.ndarray) -> None:
    n = 0
    for b in range(len(bounds) - 1):
        lo = bounds[b]
        hi = bounds[b + 1]
        if hi == lo:
            continue
        runs[n, RUN_START] = lo
        runs[n, RUN_TABLE] = table[lo]
        runs[n, RUN_BATCH] = first_batch + b
        n += 1
        after = table[lo + 1 : hi]
        before = table[lo : hi - 1]
        for i in range(len(after)):
            if after[i] != before[i]:
                runs[n, RUN_START] = lo + 1 + i
                runs[n, RUN_TABLE] = after[i]
                runs[n, RUN_BATCH] = first_batch + b
                n += 1
    runs[n, RUN_START] = bounds[-1]


def curve_batches(num_batches: int, points: int = DEFAULT_CURVE_POINTS) -> np.ndarray:
    """About `points` log-spaced batch counts in [1, num_batches], with 1 and num_batches."""
    if num_batches <= 0:
        return np.empty(0, dtype=np.int64)
    if points - 2 > num_batches * (math.log(num_batches) + 1):
        # the log-spaced steps are all below 1, so every count appears: the same result
        # without `points` floats (a billion of them is 8 GB)
        return np.arange(1, num_batches + 1, dtype=np.int64)
    xs = np.rint(np.geomspace(1, num_batches, max(int(points), 2))).astype(np.int64)
    xs = np.unique(np.concatenate([[1], xs, [num_batches]]))
    return xs[(xs >= 1) & (xs <= num_batches)]
