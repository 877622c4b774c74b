"""The one-GPU LRU replay in segments of batches, one core each, with the counters of one
pass to the bit.

Why it is exact. Where each batch's update rows are its distinct lookups (an optimizer
step every batch: the trace's `updates_are_lookups`), an LRU's whole state at a batch
boundary is the list of the min(C, D) most recently used distinct rows in their order (C
slots, D distinct rows looked up so far), every one of them dirty:
- an LRU holds the C most recently used distinct rows, ordered by their last use, and
  nothing else decides what it evicts or counts later;
- a cached row was looked up in some batch while cached and stayed cached to that
  batch's end (it is cached now, and nothing brings a row back but a lookup), so that
  batch's update reached it in the cache after its fill: it is dirty, and so every
  eviction of it writes it back. Slot numbers are the only thing that differs, and no
  counter depends on them.
So a segment that starts at batch m builds that state from the keys before m read
backward, the latest first (`LRUPolicy.seed`: each key not yet seen joins at the least
recent end), until C distinct rows are found or the trace's start is reached, and then
replays its batches as one pass would. `tests/test_lru_segments.py` holds every
counter of every batch against the one-thread replay and the slow reference.

What it costs: the backward read of a segment's past until it has C distinct rows (at
criteo-terabyte's 2,000 x 2,048 batches and 1 M rows, 14 M lookups back from the
middle: 0.1-0.15 s of one core) and a second cache's state (12-16 B a slot and its
table, in `replay.runs.run_memory`). It pays where a run has more lookups per segment
than several caches' worth of them (`MIN_LOOKUPS_PER_SLOT`) and the machine has cores
to spare: a run of the 2-core VM has the reader and the statistics beside the policy,
busy about half the time, and the LRU's 1.4 s at criteo-terabyte was its critical path.

Where it applies (the caller checks the rest): a trace folder (a generated workload would
generate the past twice), whole batches (not pieces), the update rows taken from the
lookups and nothing else reading the counters while the loop runs (no checkpoint
strategy observing each range, no raw-access counts), and a policy that can be seeded
(`Policy.seeds_from_past`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable

import numpy as np

from replay.policies.base import Policy
from replay.trace.reader import Trace
from replay.trace.stream import BatchRange, empty_range, iter_batch_ranges

# a segment is worth its backward read only when it replays many caches' worth of
# lookups: the read goes back until C distinct rows, several C lookups at a skewed
# trace's reuse (5.6 x C at criteo-terabyte's 1 M rows, 14 M lookups back from mid-run)
MIN_LOOKUPS_PER_SLOT = 16
# the backward read starts with this many caches' worth of lookups and doubles
_FIRST_READ_SLOTS = 8
MAX_SEGMENTS = 8
ENV_SEGMENTS = "REPLAY_LRU_SEGMENTS"


def usable_cores() -> int:
    """The cores this process may run on (its affinity where the OS says)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def segment_count(lookups: int, batches: int, slots: int, cores: int | None = None) -> int:
    """How many segments a run of `lookups` in `batches` with a cache of `slots` is split
    into: one per core (at most `MAX_SEGMENTS`), none shorter than `MIN_LOOKUPS_PER_SLOT`
    caches' worth of lookups, at least one batch each. `REPLAY_LRU_SEGMENTS` (a positive
    integer) replaces the cores' count: 1 turns the split off."""
    given = os.environ.get(ENV_SEGMENTS, "").strip()
    if given.isdigit() and int(given) > 0:
        cores = int(given)
    elif cores is None:
        cores = usable_cores()
    by_length = max(int(lookups), 0) // max(MIN_LOOKUPS_PER_SLOT * max(int(slots), 1), 1)
    return max(1, min(int(cores), MAX_SEGMENTS, int(batches), by_length))


def segment_starts(batches: int, segments: int) -> list[int]:
    """The first batch of each segment after the first: `segments` runs of batches as
    even as whole batches allow."""
    return [round(j * batches / segments) for j in range(1, segments)]


def seed_from_past(policy: Policy, trace: Trace, start: int) -> None:
    """Give `policy` the state one pass leaves after batches [0, start): their keys
    read backward, the latest first, in reads that double until the cache is full or the
    trace's start is reached."""
    per_batch = trace.num_lookups / max(trace.num_batches, 1)
    want = _FIRST_READ_SLOTS * max(policy.ctx.slots, 1)
    hi = start
    while hi > 0:
        lo = max(0, hi - max(1, math.ceil(want / max(per_batch, 1.0))))
        ranges = list(iter_batch_ranges(trace, lo, hi, with_updates=False, read_ahead=0))
        for br in reversed(ranges):
            if policy.seed(br.keys):
                return
        hi = lo
        want *= 2


def replay_segment(
    make: Callable[[], Policy],
    trace: Trace,
    start: int,
    stop: int,
    counters: np.ndarray,
    *,
    from_lookups: bool,
) -> None:
    """Replay batches [start, stop) of `trace` on a policy of their own (`make()`),
    seeded with the state one pass has at `start`; their counters go to
    counters[start:stop]."""
    policy = make()
    policy.warm_up(empty_range(policy.ctx.total_keys))
    seed_from_past(policy, trace, start)
    for br in iter_batch_ranges(
        trace, start, stop, with_updates=True, updates_from_lookups=from_lookups
    ):
        policy.process(br, counters[br.batch_start : br.batch_stop])


def head_range(br: BatchRange, stop: int) -> BatchRange | None:
    """The batches of `br` before `stop`: `br` itself, a slice, or None."""
    from replay.trace.stream import batch_slice

    if br.batch_stop <= stop:
        return br
    if br.batch_start >= stop:
        return None
    return batch_slice(br, 0, stop - br.batch_start)


__all__ = [
    "ENV_SEGMENTS",
    "MIN_LOOKUPS_PER_SLOT",
    "head_range",
    "replay_segment",
    "seed_from_past",
    "segment_count",
    "segment_starts",
    "usable_cores",
]
