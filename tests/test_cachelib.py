"""CacheLib's allocation for FBGEMM SSD TBE's L2 (`replay.system.cachelib`), against goldens
worked by hand from CacheLib's source (facebook/CacheLib, `cachelib/allocator/`)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.policies.base import PolicyContext
from replay.policies.ssd_tbe import SSDTBEPolicy
from replay.system import cachelib
from replay.system.spec import PolicySpec

GIB = 1 << 30


def test_alloc_classes_are_generate_alloc_sizes_with_its_defaults() -> None:
    """`generateAllocSizes(1.25, Slab::kSize, 72, false)`: 72, then x 1.25 rounded up to 8
    bytes while a 4 MiB slab holds two, then the slab itself."""
    sizes = cachelib.alloc_sizes()
    assert sizes[:12] == (72, 96, 120, 152, 192, 240, 304, 384, 480, 600, 752, 944)
    assert sizes[14:16] == (1856, 2320)
    assert sizes[-1] == 4 << 20 and sizes[-2] <= 2 << 20
    assert all(s % 8 == 0 for s in sizes)


def test_l2_row_capacity_is_cachelibs_allocation_for_64_512_and_2048_byte_rows() -> None:
    """An item is 32 B (sizeof(Item), 4-byte compressed pointers) + 8 B (the int64 key) + the
    row, in the smallest class holding it; a slab of that class holds floor(4 MiB / chunk);
    an 8 GiB cache is 2,048 slabs of which one holds the slab headers (7 B each)."""
    for row, item, chunk in ((64, 104, 120), (512, 552, 600), (2048, 2088, 2320)):
        assert cachelib.item_bytes(row) == item
        assert cachelib.chunk_bytes(row) == chunk
    assert cachelib.capacity_rows(8 * GIB, 64) == 2047 * 34952  # 4,194,304 // 120
    assert cachelib.capacity_rows(8 * GIB, 512) == 2047 * 6990
    assert cachelib.capacity_rows(8 * GIB, 2048) == 2047 * 1807
    # the figure: a 64 B row's L2 holds 53% of bytes / 64
    assert round(cachelib.capacity_rows(8 * GIB, 64) / (8 * GIB // 64), 2) == 0.53
    assert cachelib.capacity_rows(0, 64) == 0


def test_the_policy_holds_cachelibs_rows() -> None:
    """ssd-tbe's L2 is as many rows as CacheLib allocates in `l2_capacity_bytes`."""
    for row in (64, 512, 2048):
        ctx = PolicyContext(
            total_keys=1 << 30, table_rows=np.array([1 << 30], dtype=np.int64),
            offsets=np.array([0, 1 << 30], dtype=np.int64), num_batches=1,
            row_state_bytes=row, capacity_units=64, unit_rows=1,
        )  # fmt: skip
        spec = PolicySpec(name="ssd-tbe", l2_capacity_bytes=GIB / 2, associativity=32)
        policy = SSDTBEPolicy(spec, ctx)
        assert policy.l2.capacity_rows == 127 * (cachelib.SLAB_BYTES // cachelib.chunk_bytes(row))


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 3_000_000), st.sampled_from([8, 32, 64, 100, 512, 2048, 8192]))
def test_bytes_for_rows_is_the_fewest_bytes_holding_them(rows: int, row: int) -> None:
    """Monotone, and `bytes_for_rows` is the inverse: it holds the rows, a byte less not."""
    b = cachelib.bytes_for_rows(rows, row)
    assert cachelib.capacity_rows(b, row) >= rows
    if rows:
        assert cachelib.capacity_rows(b - 1, row) < rows
    assert cachelib.capacity_rows(b + cachelib.SLAB_BYTES, row) >= cachelib.capacity_rows(b, row)
