"""`step_keys` (flat keys and update keys of generated ranges in one pass) against the
update sets and flat keys it replaces, on random sorted lookups with frozen tables."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.trace.keys import batch_bounds, key_dtype, table_offsets
from replay.trace.updates import step_keys, update_sets


@settings(max_examples=200, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    tables=st.integers(1, 5),
    batches=st.integers(1, 6),
    max_rows=st.sampled_from([1, 3, 50, 100_000, 3_000_000_000]),
)
def test_step_keys_are_the_update_sets_flat_keys(
    seed: int, tables: int, batches: int, max_rows: int
) -> None:
    rng = np.random.default_rng(seed)
    rows = rng.integers(1, max_rows + 1, size=tables).astype(np.int64)
    frozen = rng.random(tables) < 0.3
    batch, table, row = [], [], []
    for b in range(batches):
        for t in range(tables):
            n = int(rng.integers(0, 12))
            hot = rng.integers(0, rows[t], size=3)  # repeats within a batch
            picks = np.where(rng.random(n) < 0.5, rng.choice(hot, n), rng.integers(0, rows[t], n))
            batch += [b] * n
            table += [t] * n
            row += picks.tolist()
    batch_a = np.array(batch, dtype=np.uint32)
    table_a = np.array(table, dtype=np.uint16)
    row_a = np.array(row, dtype=np.uint64 if max_rows > 2**32 else np.uint32)
    offsets = table_offsets(rows)
    dtype = key_dtype(int(offsets[-1]))
    bounds = batch_bounds(batch_a, 0, batches)
    keys, ukeys, ubounds = step_keys(table_a, row_a, bounds, offsets, frozen, dtype)

    want_keys = offsets[table_a.astype(np.int64)] + row_a.astype(np.int64)
    np.testing.assert_array_equal(keys, want_keys)
    assert keys.dtype == dtype and ukeys.dtype == dtype
    ub, ut, ur, _ = update_sets(batch_a, table_a, row_a, 0, batches, rows, frozen, 1)
    np.testing.assert_array_equal(ukeys, offsets[ut.astype(np.int64)] + ur.astype(np.int64))
    np.testing.assert_array_equal(ubounds, batch_bounds(ub, 0, batches))
