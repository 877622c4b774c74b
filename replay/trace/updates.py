"""Update sets: which embedding rows an optimizer step writes (DESIGN section 3).

With plain SGD and no accumulation the update set of batch b, per table, is the set of
distinct rows b looked up, and `count` is the number of lookups of that row (gradient
contributions folded into one update). With gradient accumulation over k batches the
step lands on batches b with (b + 1) % k == 0 and covers batches b-k+1..b; batches after
the last full window take no step (training would not step on a partial window).
Frozen tables produce no updates. Output is sorted by (batch, table, row).

`update_sets` is the numba kernel; `update_sets_reference` the slow, obviously correct
version the tests compare it with.
"""

from __future__ import annotations

import numpy as np
from numba import njit

# Count distinct rows with a dense scratch array when the table is this small and no
# larger than 4x the lookups being folded; otherwise sort.
DENSE_ROWS_LIMIT = 1 << 16


@njit(cache=True, nogil=True)
def _update_sets_kernel(
    batch: np.ndarray,
    table: np.ndarray,
    row: np.ndarray,
    batch_start: int,
    batch_stop: int,
    num_tables: int,
    table_rows: np.ndarray,
    frozen: np.ndarray,
    accumulate: int,
    out_batch: np.ndarray,
    out_table: np.ndarray,
    out_row: np.ndarray,
    out_count: np.ndarray,
) -> int:
    nb = batch_stop - batch_start
    group_lo = np.zeros((nb, num_tables), dtype=np.int64)
    group_hi = np.zeros((nb, num_tables), dtype=np.int64)
    n = len(row)
    i = 0
    while i < n:
        b = np.int64(batch[i]) - batch_start
        t = np.int64(table[i])
        j = i + 1
        while j < n and batch[j] == batch[i] and table[j] == table[i]:
            j += 1
        group_lo[b, t] = i
        group_hi[b, t] = j
        i = j

    dense_size = 0
    for t in range(num_tables):
        if table_rows[t] <= DENSE_ROWS_LIMIT and table_rows[t] > dense_size:
            dense_size = table_rows[t]
    scratch = np.zeros(dense_size, dtype=np.uint32)
    buf = np.empty(n, dtype=row.dtype)

    out = 0
    for b in range(batch_start, batch_stop):
        if (b + 1) % accumulate != 0:
            continue
        first = b - accumulate + 1
        if first < batch_start:
            continue  # window starts before this chunk: callers align chunks to k
        for t in range(num_tables):
            if frozen[t]:
                continue
            total = 0
            for bb in range(first - batch_start, b - batch_start + 1):
                total += group_hi[bb, t] - group_lo[bb, t]
            if total == 0:
                continue
            rows_t = table_rows[t]
            if rows_t <= DENSE_ROWS_LIMIT and rows_t <= 4 * total:
                for bb in range(first - batch_start, b - batch_start + 1):
                    for k in range(group_lo[bb, t], group_hi[bb, t]):
                        scratch[row[k]] += 1
                for r in range(rows_t):
                    c = scratch[r]
                    if c != 0:
                        out_batch[out] = b
                        out_table[out] = t
                        out_row[out] = r
                        out_count[out] = c
                        out += 1
                        scratch[r] = 0
            else:
                m = 0
                for bb in range(first - batch_start, b - batch_start + 1):
                    for k in range(group_lo[bb, t], group_hi[bb, t]):
                        buf[m] = row[k]
                        m += 1
                sorted_rows = np.sort(buf[:m])
                k = 0
                while k < m:
                    r = sorted_rows[k]
                    e = k + 1
                    while e < m and sorted_rows[e] == r:
                        e += 1
                    out_batch[out] = b
                    out_table[out] = t
                    out_row[out] = r
                    out_count[out] = e - k
                    out += 1
                    k = e
    return out


def update_sets(
    batch: np.ndarray,
    table: np.ndarray,
    row: np.ndarray,
    batch_start: int,
    batch_stop: int,
    table_rows: np.ndarray,
    frozen: np.ndarray,
    accumulate: int = 1,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Update rows of the steps in [batch_start, batch_stop) from its lookups.

    The lookups must be sorted by (batch, table) and cover whole batches; with
    accumulation, `batch_start` must be a multiple of `accumulate`.
    """
    n = len(row)
    out_batch = np.empty(n, dtype=np.uint32)
    out_table = np.empty(n, dtype=np.uint16)
    out_row = np.empty(n, dtype=row.dtype)
    out_count = np.empty(n, dtype=np.uint32)
    m = _update_sets_kernel(
        batch,
        table,
        row,
        batch_start,
        batch_stop,
        len(table_rows),
        np.asarray(table_rows, dtype=np.int64),
        np.asarray(frozen, dtype=np.bool_),
        accumulate,
        out_batch,
        out_table,
        out_row,
        out_count,
    )
    return out_batch[:m], out_table[:m], out_row[:m], out_count[:m]


def update_sets_reference(
    batch: np.ndarray,
    table: np.ndarray,
    row: np.ndarray,
    batch_start: int,
    batch_stop: int,
    table_rows: np.ndarray,
    frozen: np.ndarray,
    accumulate: int = 1,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Slow, obviously correct version of `update_sets` (for tests)."""
    records: list[tuple[int, int, int, int]] = []
    for b in range(batch_start, batch_stop):
        if (b + 1) % accumulate or b - accumulate + 1 < batch_start:
            continue
        window = (batch >= b - accumulate + 1) & (batch <= b)
        for t in range(len(table_rows)):
            if frozen[t]:
                continue
            rows, counts = np.unique(row[window & (table == t)], return_counts=True)
            records.extend((b, t, int(r), int(c)) for r, c in zip(rows, counts, strict=True))
    arr = np.array(records, dtype=np.int64).reshape(-1, 4)
    return (
        arr[:, 0].astype(np.uint32),
        arr[:, 1].astype(np.uint16),
        arr[:, 2].astype(row.dtype),
        arr[:, 3].astype(np.uint32),
    )
