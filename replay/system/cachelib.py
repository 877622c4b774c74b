"""How many rows CacheLib's LRU holds in a given number of bytes: FBGEMM SSD TBE's L2.

FBGEMM's L2 (`fbgemm_gpu/src/split_embeddings_cache/cachelib_cache.cpp`, `CacheLibCache`)
is a CacheLib `LruAllocator` of `cache_size_bytes`, configured with CacheLib's defaults for
its allocation classes, whose items are keyed by the row's index (`sizeof(index_t)`: 8
bytes for int64 indices) and hold the row (`data.nbytes()`: `max_D` x element size, the
row with its optimizer state). From CacheLib's source (facebook/CacheLib,
`cachelib/allocator/`):

- an item takes `sizeof(Item) + key size + value size` bytes (`CacheItem::getRequiredSize`);
  `sizeof(Item)` is `20 + 3 x sizeof(CompressedPtr)` = 32 bytes with the default 4-byte
  compressed pointer (`CacheAllocator.h`'s `static_assert`: the access hook, the LRU hook,
  the ref count, the creation and expiry times and `KAllocation`'s packed sizes);
- it is allocated a chunk of the smallest allocation class that holds it. The classes are
  `MemoryAllocator::generateAllocSizes(factor = 1.25, maxSize = Slab::kSize,
  minSize = 72, reduceFragmentation = false)` (`CacheAllocatorConfig.h`'s defaults):
  from 72 bytes, each the previous x 1.25 rounded up to 8 bytes (`kAlignment`), while a
  slab holds at least two, then the slab size itself;
- memory is split into slabs of 4 MiB (`Slab::kNumSlabBits = 22`); a slab of a class holds
  floor(4 MiB / chunk) items. `SlabAllocator` rounds the cache down to whole slabs and
  keeps the first ceil(7 B x slabs / 4 MiB) of them for the slab headers (`SlabHeader`:
  a packed 7 bytes), so the cache holds (slabs - header slabs) x floor(4 MiB / chunk) rows.

A 64 B row is an item of 104 B in a 120 B chunk: the L2 holds 53% of the rows that
bytes / 64 gives. Simplifications: one pool (FBGEMM splits the cache into `num_shards`
equal pools, each rounded to whole slabs: at most one slab less per pool), every slab of
the row's class (no other item sizes in the cache). CacheLib refuses a cache of fewer than
two slabs (one for the headers); below that, replay models an L2 of `bytes` as the chunks
those bytes hold, at most one slab's (so the rows grow with the bytes; this matters only on
tiny traces, whose L2s are kilobytes).
"""

from __future__ import annotations

import math
from functools import lru_cache

SLAB_BYTES = 1 << 22  # Slab::kSize (kNumSlabBits = 22)
ITEM_HEADER_BYTES = 20 + 3 * 4  # sizeof(Item) with CompressedPtr4B
KEY_BYTES = 8  # FBGEMM's key: the int64 row index, sizeof(index_t)
MIN_ALLOC_BYTES = 72  # CacheAllocatorConfig::minAllocationClassSize
ALLOC_FACTOR = 1.25  # CacheAllocatorConfig::allocationClassSizeFactor
ALIGN_BYTES = 8  # MemoryAllocator::kAlignment = sizeof(void*)
SLAB_HEADER_BYTES = 7  # sizeof(SlabHeader), packed: pool, class, flags, allocSize


def _aligned(size: int) -> int:
    return -(-size // ALIGN_BYTES) * ALIGN_BYTES


@lru_cache(maxsize=1)
def alloc_sizes() -> tuple[int, ...]:
    """CacheLib's default allocation classes (`generateAllocSizes` with its defaults)."""
    sizes = []
    size = MIN_ALLOC_BYTES
    while size < SLAB_BYTES:
        if SLAB_BYTES // size <= 1:
            break
        sizes.append(size)
        size = _aligned(int(size * ALLOC_FACTOR))
    sizes.append(_aligned(SLAB_BYTES))
    return tuple(sorted(set(sizes)))


def item_bytes(value_bytes: int) -> int:
    """An item's bytes: header, key and the row (`CacheItem::getRequiredSize`)."""
    return ITEM_HEADER_BYTES + KEY_BYTES + int(value_bytes)


def chunk_bytes(value_bytes: int) -> int:
    """The allocation class an item of a `value_bytes` row is allocated from."""
    need = item_bytes(value_bytes)
    for size in alloc_sizes():
        if size >= need:
            return size
    raise ValueError(f"a row of {value_bytes} bytes is larger than a CacheLib slab")


def _header_slabs(slabs: int) -> int:
    return math.ceil(SLAB_HEADER_BYTES * slabs / SLAB_BYTES)


def capacity_rows(capacity_bytes: float, value_bytes: int) -> int:
    """Rows of `value_bytes` a CacheLib cache of `capacity_bytes` holds (0 bytes: none)."""
    cap = int(capacity_bytes)
    if cap <= 0:
        return 0
    chunk = chunk_bytes(value_bytes)
    per_slab = SLAB_BYTES // chunk
    slabs = cap // SLAB_BYTES
    usable = slabs - _header_slabs(slabs)
    if usable < 1:  # CacheLib refuses it; the chunks in the bytes, at most one slab's
        return min(cap // chunk, per_slab)
    return usable * per_slab


def bytes_for_rows(rows: int, value_bytes: int) -> int:
    """The fewest bytes for which `capacity_rows` holds `rows` (0 rows: 0 bytes)."""
    rows = int(rows)
    if rows <= 0:
        return 0
    chunk = chunk_bytes(value_bytes)
    per_slab = SLAB_BYTES // chunk
    if rows <= per_slab and rows * chunk < 2 * SLAB_BYTES:
        return rows * chunk
    need = -(-rows // per_slab)
    slabs = need + _header_slabs(need)
    while slabs - _header_slabs(slabs) < need:
        slabs += 1
    return slabs * SLAB_BYTES
