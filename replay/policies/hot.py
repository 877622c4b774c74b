"""`hot`: the most frequently looked-up rows pinned in the fast tier, the rest in the
backing tier (static hot-row placement).

Frequencies come from a warm-up window of the first W batches (`warmup_batches = W`), or
from the whole trace (`warmup_batches = 0`, an oracle). With a window, batches 0..W-1
run with nothing pinned while they are profiled, and the hot set is copied in before
batch W (counted as that batch's fills); the oracle's hot set is copied in before batch 0.
The hot set is the `capacity` rows with the highest counts among the rows looked up at
least once; ties go to the lower key, so the choice is deterministic. Lookups of other
rows are served from the backing tier without caching (counted as misses and bypass).

Per-key state: 5 bytes (uint32 count, uint8 pinned flag).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from replay._intrinsics import PREFETCH_AHEAD, prefetch
from replay._jit import kernel
from replay.policies.base import (
    BYPASS,
    FILLS,
    HITS,
    MISSES,
    NEEDED_ROWS,
    NUM_COUNTERS,
    RESIDENT,
    RESIDENT_MAX,
    UPDATES_BACKING,
    UPDATES_FAST,
    Policy,
    PolicyContext,
    register_policy,
)
from replay.system.spec import PolicySpec
from replay.trace.stream import BatchRange, iter_batch_ranges

if TYPE_CHECKING:
    from replay.workload.source import Source


@kernel
def count_kernel(keys: np.ndarray, counts: np.ndarray) -> None:
    n = len(keys)
    for i in range(n):
        if i + PREFETCH_AHEAD < n:
            prefetch(counts, keys[i + PREFETCH_AHEAD])
        c = counts[keys[i]]
        if c < 0xFFFFFFFF:  # saturate rather than wrap
            counts[keys[i]] = c + 1


@kernel
def hot_kernel(
    keys: np.ndarray,
    bounds: np.ndarray,
    ukeys: np.ndarray,
    ubounds: np.ndarray,
    pinned: np.ndarray,
    resident: np.int64,
    out: np.ndarray,
) -> None:
    n = len(keys)
    for b in range(len(bounds) - 1):
        hits = 0
        for i in range(bounds[b], bounds[b + 1]):
            if i + PREFETCH_AHEAD < n:
                prefetch(pinned, keys[i + PREFETCH_AHEAD])
            hits += pinned[keys[i]]
        upd_fast = 0
        for j in range(ubounds[b], ubounds[b + 1]):
            upd_fast += pinned[ukeys[j]]
        misses = bounds[b + 1] - bounds[b] - hits
        out[b, HITS] = hits
        out[b, MISSES] = misses
        out[b, BYPASS] = misses
        out[b, UPDATES_FAST] = upd_fast
        out[b, UPDATES_BACKING] = ubounds[b + 1] - ubounds[b] - upd_fast
        out[b, RESIDENT] = resident
        out[b, RESIDENT_MAX] = resident


def select_hot(counts: np.ndarray, capacity: int) -> np.ndarray:
    """Keys of the `capacity` highest positive counts, ties to the lower key (sorted)."""
    seen = np.flatnonzero(counts)
    if len(seen) <= capacity:
        return seen
    values = counts[seen]
    threshold = np.partition(values, len(values) - capacity)[len(values) - capacity]
    above = seen[values > threshold]
    tied = seen[values == threshold][: capacity - len(above)]
    return np.sort(np.concatenate([above, tied]))


@register_policy("hot")
class HotPolicy(Policy):
    state_bytes_per_key = 5
    evicts = False

    def __init__(self, spec: PolicySpec, ctx: PolicyContext) -> None:
        super().__init__(spec, ctx)
        self.counts = ctx.row_array(np.uint32)
        self.pinned = ctx.row_array(np.uint8)
        self.resident = 0
        # the batch before which the hot set is copied in (never when W >= batches)
        self.pin_batch = spec.warmup_batches

    def needs_prepare(self) -> bool:
        return self.spec.warmup_batches == 0

    def prepare(self, trace: Source | None) -> None:
        assert trace is not None
        for br in iter_batch_ranges(trace, with_updates=False):
            count_kernel(br.keys, self.counts)

    def prepare_arrays(self, keys: np.ndarray) -> None:
        count_kernel(keys, self.counts)

    def _pin(self) -> int:
        hot = select_hot(self.counts, self.ctx.capacity_units)
        self.pinned[hot] = 1
        self.resident = len(hot)
        self.counts = np.zeros(0, dtype=np.uint32)  # no longer needed
        return self.resident

    def process(self, batch_range: BatchRange, out: np.ndarray) -> None:
        br = batch_range
        lo, hi = br.batch_start, br.batch_stop
        split = min(max(self.pin_batch, lo), hi)  # batches [lo, split) before pinning
        if split > lo:
            upto = br.bounds[split - lo]
            count_kernel(br.keys[br.bounds[0] : upto], self.counts)
            self._run(br, 0, split - lo, out)
        if split < hi:
            if split == self.pin_batch:
                out[split - lo, FILLS] = self._pin()
            self._run(br, split - lo, hi - lo, out)

    def _run(self, br: BatchRange, first: int, last: int, out: np.ndarray) -> None:
        hot_kernel(
            br.keys,
            br.bounds[first : last + 1],
            br.update_keys,
            br.update_bounds[first : last + 1],
            self.pinned,
            np.int64(self.resident),
            out[first:last],
        )
        out[first:last, NEEDED_ROWS] = out[first:last, FILLS]


def reference_hot(
    batches: Sequence[tuple[Sequence[int], Sequence[int]]], capacity: int, warmup_batches: int
) -> np.ndarray:
    """Slow hot-set placement; warmup_batches = 0 is the whole-trace oracle."""
    out = np.zeros((len(batches), NUM_COUNTERS), dtype=np.int64)
    window = batches if warmup_batches == 0 else batches[:warmup_batches]
    counts = Counter(k for lookups, _ in window for k in lookups)
    ranked = sorted(counts, key=lambda k: (-counts[k], k))[:capacity]
    pin_at = warmup_batches
    hot: set[int] = set()
    for b, (lookups, updates) in enumerate(batches):
        row = out[b]
        if b == pin_at:
            hot = set(ranked)
            row[FILLS] = row[NEEDED_ROWS] = len(hot)
        for key in lookups:
            if key in hot:
                row[HITS] += 1
            else:
                row[MISSES] += 1
                row[BYPASS] += 1
        for key in updates:
            row[UPDATES_FAST if key in hot else UPDATES_BACKING] += 1
        row[RESIDENT] = row[RESIDENT_MAX] = len(hot)
    return out
