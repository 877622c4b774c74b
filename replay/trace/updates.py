"""Update sets: which embedding rows an optimizer step writes (DESIGN section 3).

With plain SGD and no accumulation the update set of batch b, per table, is the set of
distinct rows b looked up, and `count` is the number of lookups of that row (gradient
contributions folded into one update). With gradient accumulation over k batches the
step lands on batches b with (b + 1) % k == 0 and covers batches b-k+1..b; batches after
the last full window take no step (training would not step on a partial window).
Frozen tables produce no updates. Output is sorted by (batch, table); inside a group,
rows come in the order the window first looked them up (deterministic, and O(1) per
lookup, where sorting would cost O(log n)).

`update_sets` is the numba kernel; `update_sets_reference` the slow, obviously correct
version the tests compare it with.
"""

from __future__ import annotations

import numpy as np

from replay._intrinsics import PREFETCH_AHEAD, ix, prefetch
from replay._jit import kernel

# Tables of up to this many rows find a row's output slot in a dense array; larger ones
# too where the array is no larger than the hash table, else an open-addressing hash
# table sized 2x the window's lookups (`_use_dense`).
DENSE_ROWS_LIMIT = 1 << 16
GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing multiplier


@kernel(inline="always")
def _capacity(lookups: int) -> int:
    """The open-addressing table's slots for a window of `lookups`: a power of two, at
    least 2x the lookups (so at least half its slots stay empty) and 16."""
    capacity = 16
    while capacity < 2 * lookups:
        capacity *= 2
    return capacity


@kernel(inline="always")
def _use_dense(rows: int, lookups: int) -> bool:
    """Whether a table of `rows` finds its slots in a dense array for a window of
    `lookups`: below DENSE_ROWS_LIMIT, or no larger than the hash table would be."""
    return rows <= DENSE_ROWS_LIMIT or rows <= _capacity(lookups)


@kernel
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
        # b, t: numpy scalars here, Python ints in the loops below (numba unifies them)
        b: np.int64 | int = np.int64(batch[i]) - batch_start
        t: np.int64 | int = np.int64(table[i])
        j = i + 1
        while j < n and batch[j] == batch[i] and table[j] == table[i]:
            j += 1
        group_lo[b, t] = i
        group_hi[b, t] = j
        i = j

    # where a row finds its output slot, per table and window: a dense row -> slot array
    # when it is no larger than the hash table would be (small tables, and tables a window
    # looks up many times over, e.g. 4.4 M lookups of 256 K rows: a 2 MB array instead
    # of a 128 MB hash whose every probe misses the cache); otherwise open addressing
    # sized 2x the window's lookups. Either gives the same output: first-seen order.
    dense_size = 0
    largest = 0
    for t in range(num_tables):
        for b0 in range(0, nb, accumulate):
            total = 0
            for bb in range(b0, min(b0 + accumulate, nb)):
                total += group_hi[bb, t] - group_lo[bb, t]
            if _use_dense(table_rows[t], total):
                dense_size = max(dense_size, table_rows[t])
            else:
                largest = max(largest, total)
    dense_slot = np.full(dense_size, -1, dtype=np.int64)  # row -> output index
    hash_slot = np.full(_capacity(largest), -1, dtype=np.int64)  # slot -> output index

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
            begin = out
            total = 0
            for bb in range(first - batch_start, b - batch_start + 1):
                total += group_hi[bb, t] - group_lo[bb, t]
            if _use_dense(table_rows[t], total):
                for bb in range(first - batch_start, b - batch_start + 1):
                    hi = group_hi[bb, t]
                    for k in range(group_lo[bb, t], hi):
                        if k + PREFETCH_AHEAD < hi:
                            prefetch(dense_slot, row[ix(k + PREFETCH_AHEAD)])
                        r = row[ix(k)]
                        at = dense_slot[ix(r)]
                        if at >= 0:
                            out_count[ix(at)] += 1
                            continue
                        out_batch[ix(out)] = b
                        out_table[ix(out)] = t
                        out_row[ix(out)] = r
                        out_count[ix(out)] = 1
                        dense_slot[ix(r)] = out
                        out += 1
                for at in range(begin, out):  # reset only the slots this group used
                    dense_slot[ix(out_row[ix(at)])] = -1
                continue
            # a table per window of its own size: the probes stay within 2x its lookups
            capacity = _capacity(total)
            mask = np.uint64(capacity - 1)
            shift = np.uint64(64 - int(np.log2(capacity)))
            for bb in range(first - batch_start, b - batch_start + 1):
                hi = group_hi[bb, t]
                for k in range(group_lo[bb, t], hi):
                    if k + PREFETCH_AHEAD < hi:
                        ahead = np.uint64(row[ix(k + PREFETCH_AHEAD)])
                        prefetch(hash_slot, ((ahead * GOLDEN) >> shift) & mask)
                    r = row[ix(k)]
                    h = ((np.uint64(r) * GOLDEN) >> shift) & mask
                    while True:
                        at = hash_slot[h]
                        if at < 0 or out_row[ix(at)] == r:
                            break
                        h = (h + np.uint64(1)) & mask
                    if at >= 0:
                        out_count[ix(at)] += 1
                        continue
                    out_batch[ix(out)] = b
                    out_table[ix(out)] = t
                    out_row[ix(out)] = r
                    out_count[ix(out)] = 1
                    hash_slot[h] = out
                    out += 1
            # reset only the slots this group used
            for at in range(begin, out):
                r = out_row[ix(at)]
                h = ((np.uint64(r) * GOLDEN) >> shift) & mask
                while hash_slot[h] != at:  # skips slots already cleared
                    h = (h + np.uint64(1)) & mask
                hash_slot[h] = -1
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
            counts: dict[int, int] = {}  # insertion-ordered: first-seen order
            for r in row[window & (table == t)].tolist():
                counts[r] = counts.get(r, 0) + 1
            records.extend((b, t, r, c) for r, c in counts.items())
    arr = np.array(records, dtype=np.int64).reshape(-1, 4)
    return (
        arr[:, 0].astype(np.uint32),
        arr[:, 1].astype(np.uint16),
        arr[:, 2].astype(row.dtype),
        arr[:, 3].astype(np.uint32),
    )


@kernel
def _step_keys_kernel(
    table: np.ndarray,
    row: np.ndarray,
    bounds: np.ndarray,
    offsets: np.ndarray,
    frozen: np.ndarray,
    set_keys: np.ndarray,
    set_bits: int,
    seen: np.ndarray,
    keys: np.ndarray,
    ukeys: np.ndarray,
    ubounds: np.ndarray,
) -> None:
    """keys[i] = offsets[table[i]] + row[i]; ukeys: each batch's distinct keys of tables
    not frozen, in first-seen order, batch b's at ukeys[ubounds[b]:ubounds[b + 1]].

    `set_keys` is an open-addressing set of key + 1 (0 empty) of 2^set_bits >= 2 x the
    largest batch's lookups entries, all zero between calls; each batch clears what it
    set. A batch whose keys span no more than `seen`'s bits (zero between calls, a bit per
    key from the batch's first table's offset) marks its keys there instead: one access
    per lookup into a bitmap no larger than the set, where the set probes a hash.
    """
    mask = np.uint64(len(set_keys) - 1)
    shift = np.uint64(64 - set_bits)
    out = 0
    ubounds[0] = 0
    for b in range(len(bounds) - 1):
        begin = out
        hi = bounds[b + 1]
        if hi > bounds[b]:
            # sorted by table, so the batch's keys lie in its first and last tables' span
            first = offsets[ix(table[ix(bounds[b])])]
            span = offsets[ix(np.int64(table[ix(hi - 1)]) + 1)] - first
            if span <= 8 * len(seen):
                for i in range(bounds[b], hi):
                    if i + PREFETCH_AHEAD < hi:
                        a = i + PREFETCH_AHEAD
                        ahead = offsets[ix(table[ix(a)])] + np.int64(row[ix(a)])
                        prefetch(seen, (ahead - first) >> 3)
                    t = np.int64(table[ix(i)])
                    k = offsets[ix(t)] + np.int64(row[ix(i)])
                    keys[ix(i)] = k
                    if frozen[ix(t)]:
                        continue
                    d = k - first
                    byte = seen[ix(d >> 3)]
                    bit = np.uint8(1) << np.uint8(d & 7)
                    seen[ix(d >> 3)] = byte | bit
                    ukeys[ix(out)] = k
                    out += (byte & bit) == 0
                for at in range(begin, out):  # a whole byte: its other keys are this batch's
                    seen[ix((ukeys[ix(at)] - first) >> 3)] = 0
                ubounds[b + 1] = out
                continue
        for i in range(bounds[b], hi):
            if i + PREFETCH_AHEAD < hi:  # the set is larger than L2 at batch 2,048
                a = i + PREFETCH_AHEAD
                ahead = offsets[ix(table[ix(a)])] + np.int64(row[ix(a)])
                prefetch(set_keys, (np.uint64(ahead) * GOLDEN) >> shift)
            t = np.int64(table[ix(i)])
            k = offsets[ix(t)] + np.int64(row[ix(i)])
            keys[ix(i)] = k
            if frozen[ix(t)]:
                continue
            h = (np.uint64(k) * GOLDEN) >> shift
            e = set_keys[h]
            while (e != 0) & (e != k + 1):  # one branch, almost never taken
                h = (h + np.uint64(1)) & mask
                e = set_keys[h]
            # stores instead of a branch on whether k is new (it is at random)
            set_keys[h] = k + 1
            ukeys[ix(out)] = k
            out += e == 0
        # clear exactly the entries this batch set (each search matches its key, so it
        # walks past entries already cleared)
        for at in range(begin, out):
            h = (np.uint64(ukeys[ix(at)]) * GOLDEN) >> shift
            while set_keys[h] != ukeys[ix(at)] + 1:
                h = (h + np.uint64(1)) & mask
            set_keys[h] = 0
        ubounds[b + 1] = out


def step_keys(
    table: np.ndarray,
    row: np.ndarray,
    bounds: np.ndarray,
    offsets: np.ndarray,
    frozen: np.ndarray,
    key_dtype: np.dtype,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(flat keys, update flat keys, update bounds) of whole batches of lookups sorted by
    (batch, table), with a step every batch: `flat_keys` of the lookups and of
    `update_sets(..., accumulate=1)`'s rows, in one pass and without the batch, table and
    count columns, for replays of generated workloads (whose rows are in range by
    construction, so they are not checked)."""
    sizes = np.diff(bounds)
    largest = int(sizes.max()) if len(sizes) else 0
    set_bits = max(4, (2 * largest).bit_length())
    offsets = np.asarray(offsets, dtype=np.int64)
    # each batch's key span (its first table's offset to its last table's end): a batch
    # whose bitmap is no larger than the set (8 bytes an entry) marks a bit per key
    # instead (meta-2021's piece of one 256 K-row table looked up 4.46 M times: 32 KB,
    # not a 128 MB set; three tables of 16 M rows: 6 MB, not 32 MB)
    starts, ends = np.asarray(bounds[:-1]), np.asarray(bounds[1:])
    full = ends > starts
    spans = (
        offsets[np.asarray(table[ends[full] - 1], dtype=np.int64) + 1]
        - offsets[np.asarray(table[starts[full]], dtype=np.int64)]
    )
    dense = spans <= 64 << set_bits
    seen = np.zeros((int(spans[dense].max()) + 7) // 8 if dense.any() else 0, dtype=np.uint8)
    set_keys = np.zeros(1 << set_bits if not dense.all() else 1, dtype=np.int64)
    keys = np.empty(len(row), dtype=key_dtype)
    ukeys = np.empty(len(row), dtype=key_dtype)
    ubounds = np.empty(len(bounds), dtype=np.int64)
    _step_keys_kernel(
        table, row, bounds, offsets, np.asarray(frozen, dtype=np.bool_), set_keys, set_bits,
        seen, keys, ukeys, ubounds,
    )  # fmt: skip
    return keys, ukeys[: ubounds[-1]], ubounds
