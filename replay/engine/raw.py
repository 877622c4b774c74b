"""Read-after-write lookups: lookups of batch n whose row batch n−1 updated.

TrainingCXL's persistent memory applies batch n−1's updates while batch n starts to
look rows up; a lookup of a row still being written waits for the media's write-to-read
turnaround (DESIGN section 7). The count comes from the trace: one bitmap (1 bit per key)
holds the rows the previous batch updated; after a batch's lookups are counted against
it, its words are cleared by walking the previous batch's update keys again (so the
bitmap is empty) and the batch's own updates are set.
"""

from __future__ import annotations

import numpy as np

from replay._jit import kernel


class RawState:
    """The bitmap and the previous batch's update keys (carried across ranges)."""

    def __init__(self, total_keys: int, key_dtype: np.dtype) -> None:
        self.prev = np.zeros(max(1, (total_keys + 63) // 64), dtype=np.uint64)
        self.carry = np.zeros(0, dtype=key_dtype)


@kernel
def _raw_kernel(
    keys: np.ndarray,
    bounds: np.ndarray,
    ukeys: np.ndarray,
    ubounds: np.ndarray,
    carry: np.ndarray,
    prev: np.ndarray,
    out: np.ndarray,
) -> None:
    for b in range(len(bounds) - 1):
        n = 0
        for i in range(bounds[b], bounds[b + 1]):
            k = keys[i]
            n += (prev[k >> 6] >> np.uint64(k & 63)) & np.uint64(1)
        out[b] = n
        # forget the previous batch's updates, remember this one's
        if b == 0:
            for i in range(len(carry)):
                prev[carry[i] >> 6] = 0
        else:
            for i in range(ubounds[b - 1], ubounds[b]):
                prev[ukeys[i] >> 6] = 0
        for i in range(ubounds[b], ubounds[b + 1]):
            k = ukeys[i]
            prev[k >> 6] |= np.uint64(1) << np.uint64(k & 63)


def count_raw(
    keys: np.ndarray,
    bounds: np.ndarray,
    ukeys: np.ndarray,
    ubounds: np.ndarray,
    state: RawState,
) -> np.ndarray:
    """Per batch of the range: lookups whose row the previous batch updated."""
    out = np.zeros(len(bounds) - 1, dtype=np.int64)
    if len(out) == 0:
        return out
    _raw_kernel(keys, bounds, ukeys, ubounds, state.carry, state.prev, out)
    state.carry = ukeys[ubounds[-2] : ubounds[-1]].copy()
    return out


def reference_raw(lookups: list[list[int]], updates: list[list[int]]) -> list[int]:
    """Slow reference: for each batch, lookups of rows in the previous batch's updates."""
    out = []
    previous: set[int] = set()
    for keys, ups in zip(lookups, updates, strict=True):
        out.append(sum(1 for k in keys if k in previous))
        previous = set(ups)
    return out
