"""Flat keys: one integer per (table, row) pair, and per-batch offsets into a chunk.

A cache or a stack distance sees a lookup as a request for the key (table, row). The key
is ``offsets[table] + row``, where ``offsets`` is the exclusive prefix sum of the tables'
row counts, so keys are dense in [0, Σ rows): per-key state can live in plain arrays
(direct indexing), which is what makes the kernels fast.
"""

from __future__ import annotations

import numpy as np
from numba import njit


def table_offsets(table_rows: np.ndarray) -> np.ndarray:
    """int64 offsets with offsets[t] = Σ_{u<t} rows_u; len = tables + 1 (last = Σ rows)."""
    rows = np.asarray(table_rows, dtype=np.int64)
    out = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(rows, out=out[1:])
    return out


@njit(cache=True, nogil=True)
def _flat_keys(table: np.ndarray, row: np.ndarray, offsets: np.ndarray, out: np.ndarray) -> None:
    for i in range(len(table)):
        out[i] = offsets[np.int64(table[i])] + np.int64(row[i])


def key_dtype(total_keys: int) -> np.dtype:
    """uint32 keys when every key fits (half the memory traffic of int64), else int64."""
    return np.dtype(np.uint32) if total_keys <= 2**32 else np.dtype(np.int64)


def flat_keys(table: np.ndarray, row: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """The key of each lookup (or update row), in `key_dtype(offsets[-1])`."""
    out = np.empty(len(table), dtype=key_dtype(int(offsets[-1])))
    if len(table):
        _flat_keys(table, row, offsets, out)
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
