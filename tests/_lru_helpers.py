"""A cache context and an LRU policy over one table, for the LRU's tests
(`tests/test_lru_table.py`, `tests/test_lru_batch.py`, `tests/test_cluster_lru.py`)."""

from __future__ import annotations

import numpy as np

from replay.policies import PolicyContext
from replay.policies.lru import LRUPolicy
from replay.system.spec import PolicySpec


def one_table_ctx(total: int, capacity: int, num_batches: int = 1) -> PolicyContext:
    """The context of a cache of `capacity` rows over one table of `total` rows."""
    return PolicyContext(
        total_keys=total,
        table_rows=np.array([total], dtype=np.int64),
        offsets=np.array([0, total], dtype=np.int64),
        num_batches=num_batches,
        row_state_bytes=64,
        capacity_units=capacity,
        unit_rows=1,
    )


def one_table_lru(total: int, capacity: int, num_batches: int = 1) -> LRUPolicy:
    """The `lru` policy of a cache of `capacity` rows over one table of `total` rows."""
    return LRUPolicy(PolicySpec(name="lru"), one_table_ctx(total, capacity, num_batches))
