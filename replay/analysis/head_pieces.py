"""The exact heads of a sampled curve from one batch read in pieces: production scale.

Why. `replay.analysis.head.head_curves` reads `HEAD_BLOCKS` (16) excerpts of whole
batches, plus batch 0 for the heads' capacities. A batch of meta-2021 is 887 M lookups
(856 tables, 65,536 samples): 17 batches are 15 G lookups to generate, tens of minutes on
two cores, and a whole batch's keys alone are 7 GiB. Above `HEAD_FULL_MAX_LOOKUPS` lookups
in those 16 blocks, the heads read **one batch** instead (the run's middle batch), in the
pieces of tables the generator cuts it into (`replay.trace.format.plan_pieces`), and take
their 16 blocks inside it:

- the total head: 16 excerpts of the batch's stream, their starts evenly spread over its
  lookups, each `max(HEAD_LOOKUPS / 16, 8 C_x)` lookups long (what `head_blocks` gives a
  block), each from an empty stack that counts only once it holds C_x keys (warm);
- each table's head: 16 excerpts of that table's own lookups in the batch (table-local
  keys, stream order), evenly spread, each at least 8 C_t lookups (fewer blocks where the
  table's lookups in the batch cannot hold 16 of them; one block leaves the head unusable
  and the table's curve falls back to the sample, as `HeadCurve.usable` says).

A piece holds whole tables in trace order, so its keys are a consecutive part of the
batch's stream and every table's lookups lie in one piece: the excerpts are excerpts of
the very stream `head_curves` reads, only shorter and all in one batch. Basis, said in the
plan: the heads' counts stand for the run as that batch's do. That is the run's when its
batches are alike in distribution (a workload without drift: each batch draws from the
same tables); with drift, the middle batch stands for the run's average. Errors: the 16
blocks' spread (`HeadCurve.miss_ratios`), blocks of one batch.

Capacities: `head_capacity` asks for 4 x the first batch's distinct rows, clamped to
[2^12, 2^19], and then at least the sample's resolution (up to 2^20). Batch 0 is not read
for them: a batch's expected distinct rows per table come from the spec in closed form
(`replay.analysis.touched_model`; at the rates that make this path worth it, R <= 2^-19,
the resolution decides anyway). A capacity 4 x a batch's distinct rows cannot fill within
one batch: a block that never fills counts nothing, and a head with fewer than two
counting blocks is not usable (its curve falls back to the sample).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future
from typing import Any, TypeVar

import numpy as np

from replay._threads import worker_pool
from replay.analysis.head import (
    _H_COUNTED,
    HEAD_BLOCKS,
    HEAD_LOOKUPS,
    ExactHead,
    HeadCurve,
    head_capacity,
    shared_capacities,
)

# above this many lookups in the 16 whole-batch blocks (`head_blocks`), the heads read
# one batch in pieces instead: 16 batches of a 400-table workload (26 M lookups a batch,
# 420 M) stay as they were; 16 of meta-2021's (14 G) do not
HEAD_FULL_MAX_LOOKUPS = 1 << 30
HEAD_MIN_BLOCK_LOOKUPS = 1 << 12  # a table's block: at least this many lookups
# pieces the total head may hold while it lags behind the tables' heads (meta-2021's are
# ~1.6 M lookups, 12.5 MB of keys each: at most ~300 MB)
TOTAL_LAG_PIECES = 24


def one_batch_heads_wanted(num_batches: int, batch_lookups: int, pieces: tuple) -> bool:
    """Whether the heads read one batch in pieces (module docstring): the batch is cut
    into pieces and 16 whole-batch blocks would exceed `HEAD_FULL_MAX_LOOKUPS`."""
    blocks = min(HEAD_BLOCKS, max(int(num_batches), 0))
    return bool(pieces) and blocks * int(batch_lookups) > HEAD_FULL_MAX_LOOKUPS


T = TypeVar("T")
R = TypeVar("R")


def ahead(make: Callable[[T], R], items: Sequence[T], threads: int) -> Iterator[tuple[T, R]]:
    """(item, make(item)) in order, `make` running on `threads` worker threads up to
    threads + 1 items ahead of the consumer (bounded memory: that many pieces)."""
    with worker_pool(max(1, threads), "head-pieces") as pool:  # interrupt: no wait
        pending: deque[tuple[T, Future[R]]] = deque()
        todo = iter(items)
        for item in todo:
            pending.append((item, pool.submit(make, item)))
            if len(pending) > threads:
                break
        while pending:
            item, future = pending.popleft()
            nxt = next(todo, None)
            if nxt is not None:
                pending.append((nxt, pool.submit(make, nxt)))
            yield item, future.result()


def spread_blocks(n: int, length: int, blocks: int) -> list[tuple[int, int]]:
    """`blocks` ranges [a, a + length) of [0, n), their starts evenly spread (the first at
    0, the last ending at n), or one range of all of n when they do not fit apart."""
    if n <= 0:
        return []
    if blocks <= 1 or length * blocks >= n:
        k = max(1, min(blocks, n // max(length, 1)))
        step = n // k
        return [(j * step, n if j == k - 1 else (j + 1) * step) for j in range(k)]
    return [(j * (n - length) // (blocks - 1), j * (n - length) // (blocks - 1) + length)
            for j in range(blocks)]  # fmt: skip


def _feed_blocks(head: ExactHead, keys: np.ndarray, blocks: list[tuple[int, int]]) -> None:
    for a, b in blocks:
        head.start_block(warm=True)
        head.feed(keys[a:b])
    head.end_block()


def table_blocks(lookups: int, capacity: int) -> list[tuple[int, int]]:
    """A table's blocks inside its lookups of one batch: up to 16, each at least 8 C_t
    (and `HEAD_MIN_BLOCK_LOOKUPS`) lookups."""
    length = max(8 * int(capacity), HEAD_MIN_BLOCK_LOOKUPS)
    count = max(1, min(HEAD_BLOCKS, int(lookups) // length))
    return spread_blocks(int(lookups), length, count)


# ((t0, t1), flat keys int64) or ((t0, t1), flat keys, table-local rows) of each piece
Pieces = Callable[[], Iterable[tuple[Any, ...]]]


def one_batch_heads(
    pieces_of: Pieces,
    offsets: np.ndarray,
    table_lookups: np.ndarray,
    resolution: int,
    distinct: np.ndarray,
) -> list[HeadCurve]:
    """[the total head, then one per table] from one batch whose pieces `pieces_of()`
    yields in trace order as ((t0, t1), flat keys int64), or with a third item, the
    same lookups' table-local rows (any integer type, checked where they were made: the
    tables' heads read them instead of subtracting each table's offset); `table_lookups`:
    each table's lookups in that batch (fixed by the spec); `distinct`: each table's expected
    distinct rows in a batch, for the capacities."""
    offsets = np.asarray(offsets, dtype=np.int64)
    looks = np.asarray(table_lookups, dtype=np.int64)
    rows = np.diff(offsets)
    space = int(offsets[-1])
    batch = int(looks.sum())
    # the capacities from the batch's expected distinct rows (see the docstring)
    seen = np.rint(np.asarray(distinct, dtype=np.float64)).astype(np.int64)
    total = ExactHead(space, head_capacity(int(seen.sum()), resolution, space))
    wanted = [head_capacity(int(d), resolution, int(r)) for d, r in zip(seen, rows, strict=True)]
    tables = [ExactHead(int(r), c) for r, c in zip(rows, shared_capacities(wanted), strict=True)]
    # the total head's blocks: block j may read from its start, j x batch / 16, up to the
    # next block's, and ends once it has counted `target` lookups (what `head_blocks`
    # gives a block); its warm-up first fills the stack with C_x distinct keys, which in
    # a run of small tables takes many of them
    target = max(HEAD_LOOKUPS // HEAD_BLOCKS, 8 * total.capacity)
    edges = [j * batch // HEAD_BLOCKS for j in range(HEAD_BLOCKS + 1)]
    starts = np.concatenate([[0], np.cumsum(looks)])
    state = {"block": 0, "open": False}

    def feed_total(keys: np.ndarray, at: int) -> None:
        end, pos = at + len(keys), at
        while state["block"] < HEAD_BLOCKS and pos < end:
            lo, hi = edges[state["block"]], edges[state["block"] + 1]
            if pos < lo:
                pos = lo
                continue
            if not state["open"]:
                total.start_block(warm=True)
                state["open"] = True
            stop = min(end, hi)
            total.feed(keys[pos - at : stop - at])
            pos = stop
            if total.sc[_H_COUNTED] >= target or pos >= hi:
                total.end_block()
                state["open"] = False
                state["block"] += 1

    # the total head takes each piece on a thread of its own while the tables' heads take
    # it here (the heads' kernels release the GIL; each head is fed in stream order). It
    # may lag up to `TOTAL_LAG_PIECES` pieces behind: its blocks (~9 M lookups each at
    # ~150 ns) come in bursts, which the tables' heads and the generator then run beside
    # instead of waiting for (meta-2021: 27 s of its 80 s of CPU). What it is sent: every
    # piece past its current block's start, as it last said it (a later block starts
    # later, so no piece it needs is left out; one it does not need it passes over).
    with worker_pool(1, "total-head") as side:
        running: deque[Future[None]] = deque()
        for item in pieces_of():
            (t0, t1), piece = item[0], item[1]
            local = item[2] if len(item) > 2 else None
            keys = np.ascontiguousarray(piece, dtype=np.int64)
            at = int(starts[t0])  # the piece's first lookup in the batch's stream
            if len(keys) != int(starts[t1]) - at or (local is not None and len(local) != len(keys)):
                raise ValueError(
                    f"piece {t0}-{t1}: {len(keys)} keys, the spec says {starts[t1] - at}"
                )
            while running and (running[0].done() or len(running) >= TOTAL_LAG_PIECES):
                running.popleft().result()
            block = state["block"]  # as the total head last said it (it only grows)
            if block < HEAD_BLOCKS and at + len(keys) > edges[block]:
                running.append(side.submit(feed_total, keys, at))
            # a batch's trace order is table-major, so each table's lookups are one slice
            for t in range(t0, t1):
                a, b = int(starts[t] - at), int(starts[t + 1] - at)
                if b <= a:
                    continue
                if local is not None:
                    sub = local[a:b]
                else:
                    sub = keys[a:b] - offsets[t]
                    if int(sub.min()) < 0 or int(sub.max()) >= int(rows[t]):
                        raise ValueError(
                            f"table {t}'s lookups are not where the trace order puts them"
                        )
                _feed_blocks(tables[t], sub, table_blocks(b - a, tables[t].capacity))
        while running:
            running.popleft().result()
    total.end_block()
    return [HeadCurve(h.capacity, h.block_counts(), False) for h in [total, *tables]]


__all__ = [
    "HEAD_FULL_MAX_LOOKUPS",
    "ahead",
    "one_batch_heads",
    "one_batch_heads_wanted",
    "spread_blocks",
    "table_blocks",
]
