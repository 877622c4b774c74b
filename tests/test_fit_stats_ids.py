"""`replay.workload.fit_stats`: a sparse table's rows relabelled in first-seen order
(`_first_seen_ids`, a numba hash pass) against a dict, and the matched statistics unchanged
by any relabelling of the rows (they depend on which lookups share a row, not on its id)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.workload.fit_stats import _first_seen_ids, table_statistics


def _reference_ids(row: np.ndarray) -> tuple[list[int], int]:
    seen: dict[int, int] = {}
    return [seen.setdefault(int(r), len(seen)) for r in row], len(seen)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(min_value=0, max_value=2**62), max_size=300),
    st.integers(min_value=1, max_value=8),
)
def test_first_seen_ids_equal_a_dicts(values: list[int], spread: int) -> None:
    # few distinct values (heavy repeats, long probe clusters) and many
    row = np.array([v % (spread * 7 + 1) if spread < 8 else v for v in values], dtype=np.int64)
    ids, n = _first_seen_ids(row)
    expected, expected_n = _reference_ids(row)
    assert ids.tolist() == expected
    assert n == expected_n


def test_first_seen_ids_of_nothing() -> None:
    ids, n = _first_seen_ids(np.zeros(0, dtype=np.int64))
    assert len(ids) == 0 and n == 0


@settings(max_examples=25, deadline=None)
@given(st.integers(min_value=0, max_value=2**32 - 1))
def test_statistics_do_not_depend_on_row_labels(seed: int) -> None:
    rng = np.random.default_rng(seed)
    batches, per_batch, rows = 12, 40, 1_000
    batch = np.repeat(np.arange(batches, dtype=np.int64), per_batch)
    row = (rng.zipf(1.3, size=batches * per_batch) - 1) % rows
    # the ids as they are: the dense path (rows <= 4 x lookups); scattered by a bijection of
    # [0, 10 rows): the first-seen relabelling (rows > 4 x lookups)
    relabel = rng.permutation(10 * rows)
    a = table_statistics(batch, row, rows, batches, 4)
    b = table_statistics(batch, relabel[row], 10 * rows, batches, 4)
    np.testing.assert_array_equal(a, b)
