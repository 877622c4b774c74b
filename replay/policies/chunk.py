"""`chunk`: PatrickStar-style chunk placement with a phase-varying budget (the "tide").

Source: J. Fang, Z. Zhu, S. Li, H. Su, Y. Yu, J. Zhou, Y. You, "Parallel Training of
Pre-Trained Models via Chunk-Based Dynamic Memory Management" (PatrickStar), IEEE TPDS,
2022. There, parameters are packed into fixed-size chunks, a chunk is the unit of
placement and movement between CPU and GPU memory, the GPU room left to chunks changes
across the iteration (activations take room in forward and backward), and chunks are
evicted by furthest next use (from a warm-up iteration's trace) or LRU.

Model and assumptions:

- The flat row space (`replay.trace.keys`: tables laid out one after another) is cut
  into chunks of `spec.chunk_rows` consecutive keys, chunk = key // chunk_rows; like in
  PatrickStar a chunk may hold the tail of one table and the head of the next. Capacity,
  fills, evictions, write-backs and the RESIDENT columns are in chunks.
- Each batch runs three phases, each with a budget
  max(1, floor(capacity × <phase>_budget_fraction)) (`phase_budget`); entering a phase,
  chunks are evicted until at most the budget is resident.
  1. Forward: each lookup requests its chunk, counted in HITS or MISSES; a miss fills the
     chunk (FILLS), evicting one first if the budget is full.
  2. Backward: each update row of the batch requests its chunk the same way (the gradient
     needs the row), with fills and evictions as needed but no HITS/MISSES.
  3. Optimizer: after shrinking to the optimizer budget, each update row whose chunk is
     resident marks the chunk dirty (UPDATES_FAST), else it counts in UPDATES_BACKING.
  Evicting a dirty chunk counts a WRITEBACK. Nothing is flushed at the end of the trace.
- Eviction (`spec.chunk_eviction`): "furthest" evicts the resident chunk whose next
  request (forward and backward requests in the order above, over the whole trace: an
  oracle computed by `prepare`, where PatrickStar uses a warm-up iteration's profile, so
  this is its best case) is furthest; chunks never requested again go first, the least
  recently requested of them first. "lru" evicts the least recently requested chunk.
- NEEDED_ROWS: for each residency of a chunk, the number of distinct rows of it requested
  (lookups or backward update rows) while it is resident, counted in the batch where the
  row is first touched in that residency (fill amplification: FILLS × chunk_rows /
  NEEDED_ROWS).
- RESIDENT: chunks resident at the end of the batch (after the optimizer shrink);
  RESIDENT_MAX: the most resident at any time in the batch, counting the chunks resident
  when it starts (so at most the largest phase budget, at most the capacity).

Kernel: an indexed binary max-heap over the resident chunks keyed by an eviction
priority (furthest: next request position, or 2N - last position when never requested
again; lru: -(last request position)); O(log C) per request.

State: per key 4 bytes (uint32 stamp: the residency number of its chunk when the row was
last counted in NEEDED_ROWS); per chunk 9 bytes (int32 heap index, uint8 dirty, uint32
residency number); per resident chunk 16 bytes. "furthest" also keeps the next request of
every request (8 B per lookup and per update row) after `prepare`, which computes them in
place with a per-chunk int64 "next position" array (8 B per chunk, freed afterwards).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from replay._jit import kernel
from replay.policies.base import (
    EVICTIONS,
    FILLS,
    HITS,
    MISSES,
    NEEDED_ROWS,
    NUM_COUNTERS,
    RESIDENT,
    RESIDENT_MAX,
    UPDATES_BACKING,
    UPDATES_FAST,
    WRITEBACKS,
    Policy,
    PolicyContext,
    index_dtype,
    register_policy,
)
from replay.policies.belady import heap_sift_down, heap_sift_up, next_use_inplace
from replay.system.spec import PolicySpec
from replay.trace.stream import BatchRange, iter_batch_ranges

if TYPE_CHECKING:
    from replay.workload.source import Source

# meta slots
_SIZE, _CURSOR, _TOTAL, _LRU, _ROWS, _BF, _BB, _BO = 0, 1, 2, 3, 4, 5, 6, 7
# accumulator slots
_A_FILLS, _A_EVICTIONS, _A_WRITEBACKS, _A_NEEDED = 0, 1, 2, 3
_STAMP_MAX = 0xFFFFFFFF


def phase_budget(capacity: int, fraction: float) -> int:
    """max(1, floor(capacity × fraction)), tolerant of the float error of the product
    (100 × 0.29 is 28.999999999999996 in binary floating point: 29 is meant)."""
    return max(1, math.floor(capacity * fraction * (1 + 1e-12)))


@kernel
def _evict_root(
    hp: np.ndarray, hs: np.ndarray, pos: np.ndarray, dirty: np.ndarray, size: int, acc: np.ndarray
) -> int:
    c = hs[0]
    pos[c] = -1
    acc[_A_EVICTIONS] += 1
    if dirty[c]:
        acc[_A_WRITEBACKS] += 1
        dirty[c] = 0
    size -= 1
    if size > 0:
        hp[0] = hp[size]
        hs[0] = hs[size]
        heap_sift_down(hp, hs, pos, 0, size)
    return size


@kernel
def _shrink(
    hp: np.ndarray,
    hs: np.ndarray,
    pos: np.ndarray,
    dirty: np.ndarray,
    size: int,
    budget: int,
    acc: np.ndarray,
) -> int:
    while size > budget:
        size = _evict_root(hp, hs, pos, dirty, size, acc)
    return size


@kernel
def _new_residency(rn: np.ndarray, stamp: np.ndarray, c: int, rows: int) -> None:
    n: np.int64 | int = np.int64(rn[c]) + 1
    if n > _STAMP_MAX:  # the residency number wraps: forget the chunk's stamps
        lo = c * rows
        for q in range(lo, min(lo + rows, len(stamp))):
            stamp[q] = 0
        n = 1
    rn[c] = n


@kernel
def chunk_kernel(
    keys: np.ndarray,
    bounds: np.ndarray,
    ukeys: np.ndarray,
    ubounds: np.ndarray,
    nxt: np.ndarray,
    hp: np.ndarray,
    hs: np.ndarray,
    pos: np.ndarray,
    dirty: np.ndarray,
    rn: np.ndarray,
    stamp: np.ndarray,
    meta: np.ndarray,
    out: np.ndarray,
) -> None:
    size = meta[_SIZE]
    r = meta[_CURSOR]  # global request position
    total = meta[_TOTAL]  # furthest: next request == total: never requested again
    lru = meta[_LRU] != 0
    rows = meta[_ROWS]
    acc = np.zeros(4, dtype=np.int64)
    for b in range(len(bounds) - 1):
        acc[:] = 0
        rmax = size
        hits = 0
        misses = 0
        for phase in range(2):  # forward: the lookups; backward: the update rows
            if phase == 0:
                req = keys
                lo = bounds[b]
                hi = bounds[b + 1]
                budget = meta[_BF]
            else:
                req = ukeys
                lo = ubounds[b]
                hi = ubounds[b + 1]
                budget = meta[_BB]
            size = _shrink(hp, hs, pos, dirty, size, budget, acc)
            for i in range(lo, hi):
                k = req[i]
                c = k // rows
                if lru:
                    prio = -r
                else:
                    nu = nxt[r]
                    prio = nu if nu < total else 2 * total - r
                r += 1
                h = pos[c]
                if h >= 0:
                    hits += 1
                    old = hp[h]
                    hp[h] = prio
                    if prio > old:
                        heap_sift_up(hp, hs, pos, h)
                    else:
                        heap_sift_down(hp, hs, pos, h, size)
                else:
                    misses += 1
                    if size >= budget:
                        size = _evict_root(hp, hs, pos, dirty, size, acc)
                    hp[size] = prio
                    hs[size] = c
                    heap_sift_up(hp, hs, pos, size)
                    size += 1
                    acc[_A_FILLS] += 1
                    if size > rmax:
                        rmax = size
                    _new_residency(rn, stamp, c, rows)
                if stamp[k] != rn[c]:  # first touch of the row in this residency
                    stamp[k] = rn[c]
                    acc[_A_NEEDED] += 1
            if phase == 0:  # backward requests are not counted as hits or misses
                out[b, HITS] = hits
                out[b, MISSES] = misses
        size = _shrink(hp, hs, pos, dirty, size, meta[_BO], acc)  # optimizer
        upd_fast = 0
        for j in range(ubounds[b], ubounds[b + 1]):
            c = ukeys[j] // rows
            if pos[c] >= 0:
                dirty[c] = 1
                upd_fast += 1
        out[b, FILLS] = acc[_A_FILLS]
        out[b, EVICTIONS] = acc[_A_EVICTIONS]
        out[b, WRITEBACKS] = acc[_A_WRITEBACKS]
        out[b, UPDATES_FAST] = upd_fast
        out[b, UPDATES_BACKING] = (ubounds[b + 1] - ubounds[b]) - upd_fast
        out[b, RESIDENT] = size
        out[b, RESIDENT_MAX] = rmax
        out[b, NEEDED_ROWS] = acc[_A_NEEDED]
    meta[_SIZE] = size
    meta[_CURSOR] = r


@kernel
def _chunk_requests(
    keys: np.ndarray,
    bounds: np.ndarray,
    ukeys: np.ndarray,
    ubounds: np.ndarray,
    rows: int,
    seq: np.ndarray,
    start: int,
) -> int:
    """Write the chunk of every request (per batch: lookups, then update rows) into
    seq[start:]; returns the position after the last one."""
    n = start
    for b in range(len(bounds) - 1):
        for i in range(bounds[b], bounds[b + 1]):
            seq[n] = keys[i] // rows
            n += 1
        for j in range(ubounds[b], ubounds[b + 1]):
            seq[n] = ukeys[j] // rows
            n += 1
    return n


@register_policy("chunk")
class ChunkPolicy(Policy):
    sized_to_rows = True
    state_bytes_per_key = 4  # plus 9 B per chunk (and 8 B per chunk during prepare)
    #: "furthest" keeps the next request of every lookup and update row after `prepare`
    state_bytes_per_request: ClassVar[int] = 8

    @classmethod
    def unit_rows(cls, spec: PolicySpec) -> int:
        return spec.chunk_rows

    def __init__(self, spec: PolicySpec, ctx: PolicyContext) -> None:
        super().__init__(spec, ctx)
        cap = ctx.capacity_units  # the phases' budgets are fractions of the capacity as given
        if cap < 1:
            raise ValueError("chunk: capacity_units must be at least 1")
        rows = spec.chunk_rows
        self.num_chunks = max(1, -(-ctx.total_keys // rows))
        self.budgets = tuple(
            phase_budget(cap, f)
            for f in (
                spec.forward_budget_fraction,
                spec.backward_budget_fraction,
                spec.optimizer_budget_fraction,
            )
        )
        self.lru = spec.chunk_eviction == "lru"
        # the heap holds the resident chunks: at most the largest phase budget, and no
        # more than the chunks there are
        slots = min(self.num_chunks, max(self.budgets))
        self.hp = np.zeros(slots, dtype=np.int64)
        self.hs = np.zeros(slots, dtype=np.int64)
        self.pos = np.full(self.num_chunks, -1, dtype=index_dtype(slots))
        self.dirty = np.zeros(self.num_chunks, dtype=np.uint8)
        self.rn = np.zeros(self.num_chunks, dtype=np.uint32)
        self.stamp = ctx.row_array(np.uint32)
        self.meta = np.array([0, 0, 0, int(self.lru), rows, *self.budgets], dtype=np.int64)
        self.nxt: np.ndarray = np.zeros(0, dtype=np.int64)
        self.prepared = False

    def needs_prepare(self) -> bool:
        return not self.lru

    def prepare(self, trace: Source | None) -> None:
        if self.lru:
            return
        assert trace is not None
        seq = np.empty(trace.num_lookups + trace.num_updates, dtype=np.int64)
        n = 0
        for br in iter_batch_ranges(trace):
            m = int(br.bounds[-1] - br.bounds[0] + br.update_bounds[-1] - br.update_bounds[0])
            if n + m > len(seq):
                raise ValueError("chunk: the trace has more rows than its manifest says")
            n = _chunk_requests(
                br.keys, br.bounds, br.update_keys, br.update_bounds, self.spec.chunk_rows, seq, n
            )
        if n != len(seq):
            raise ValueError("chunk: the trace has fewer rows than its manifest says")
        self._set_next(seq)

    def prepare_arrays(
        self,
        keys: np.ndarray,
        bounds: np.ndarray,
        update_keys: np.ndarray,
        update_bounds: np.ndarray,
    ) -> None:
        """`prepare` from the whole trace's lookups and update rows (as in a BatchRange)."""
        if self.lru:
            return
        seq = np.empty(len(keys) + len(update_keys), dtype=np.int64)
        n = _chunk_requests(
            np.asarray(keys, dtype=np.int64),
            np.asarray(bounds, dtype=np.int64),
            np.asarray(update_keys, dtype=np.int64),
            np.asarray(update_bounds, dtype=np.int64),
            self.spec.chunk_rows,
            seq,
            0,
        )
        if n != len(seq):
            raise ValueError("chunk: bounds do not cover the keys")
        self._set_next(seq)

    def _set_next(self, seq: np.ndarray) -> None:
        last = np.full(self.num_chunks, len(seq), dtype=np.int64)
        if len(seq):
            next_use_inplace(seq, last)
        del last
        self.nxt = seq
        self.meta[_TOTAL] = len(seq)
        self.meta[_CURSOR] = 0
        self.prepared = True

    def process(self, batch_range: BatchRange, out: np.ndarray) -> None:
        br = batch_range
        if not self.lru:
            if not self.prepared:
                raise RuntimeError("chunk: process() before prepare()")
            n = int(br.bounds[-1] - br.bounds[0] + br.update_bounds[-1] - br.update_bounds[0])
            if self.meta[_CURSOR] + n > self.meta[_TOTAL]:
                raise ValueError("chunk: more requests than the prepared trace holds")
        chunk_kernel(
            br.keys,
            br.bounds,
            br.update_keys,
            br.update_bounds,
            self.nxt,
            self.hp,
            self.hs,
            self.pos,
            self.dirty,
            self.rn,
            self.stamp,
            self.meta,
            out,
        )


def reference_chunk(
    batches: Sequence[tuple[Sequence[int], Sequence[int]]],
    capacity: int,
    chunk_rows: int,
    eviction: str = "furthest",
    forward_fraction: float = 1.0,
    backward_fraction: float = 1.0,
    optimizer_fraction: float = 1.0,
) -> np.ndarray:
    """Slow chunk placement on (lookup keys, update keys) per batch; the counter rows.

    Every eviction scans all resident chunks (furthest next request, never-requested
    chunks first and the least recently requested of those first; or least recent)."""
    budgets = [
        phase_budget(capacity, f) for f in (forward_fraction, backward_fraction, optimizer_fraction)
    ]
    requests = [k // chunk_rows for lookups, updates in batches for k in [*lookups, *updates]]
    inf = float("inf")
    nxt: list[float] = [inf] * len(requests)
    following: dict[int, float] = {}
    for r in range(len(requests) - 1, -1, -1):
        nxt[r] = following.get(requests[r], inf)
        following[requests[r]] = r
    # chunk -> {"next": next request, "last": last request, "dirty", "rows": rows touched}
    resident: dict[int, dict] = {}
    out = np.zeros((len(batches), NUM_COUNTERS), dtype=np.int64)

    def evict(row: np.ndarray) -> None:
        if eviction == "lru":
            victim = min(resident, key=lambda c: resident[c]["last"])
        else:
            victim = max(resident, key=lambda c: (resident[c]["next"], -resident[c]["last"]))
        row[EVICTIONS] += 1
        row[WRITEBACKS] += int(resident.pop(victim)["dirty"])

    r = 0
    for b, (lookups, updates) in enumerate(batches):
        row = out[b]
        row[RESIDENT_MAX] = len(resident)
        for phase, budget in enumerate(budgets):
            while len(resident) > budget:
                evict(row)
            if phase == 2:
                break
            for key in lookups if phase == 0 else updates:
                c = key // chunk_rows
                if c in resident:
                    if phase == 0:
                        row[HITS] += 1
                else:
                    if phase == 0:
                        row[MISSES] += 1
                    if len(resident) == budget:
                        evict(row)
                    resident[c] = {"dirty": False, "rows": set()}
                    row[FILLS] += 1
                    row[RESIDENT_MAX] = max(row[RESIDENT_MAX], len(resident))
                entry = resident[c]
                entry["next"] = nxt[r]
                entry["last"] = r
                if key not in entry["rows"]:
                    entry["rows"].add(key)
                    row[NEEDED_ROWS] += 1
                r += 1
        for key in updates:
            c = key // chunk_rows
            if c in resident:
                resident[c]["dirty"] = True
                row[UPDATES_FAST] += 1
            else:
                row[UPDATES_BACKING] += 1
        row[RESIDENT] = len(resident)
    return out
