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

Counting: a piece's tables are runs (each table's lookups in a batch lie together, in
trace order), so every head here is a `RunsHead`: `ExactHead`'s counts of a warm block,
taken per run of one table's rows, with one position a row instead of a map of C_x keys
(see its docstring; tested equal to `ExactHead` and to the explicit LRU stack).

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

from replay._intrinsics import PREFETCH_AHEAD, prefetch
from replay._jit import kernel
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
from replay.analysis.stack import _marks_between, _materialize, _remove_mark

_ONE = np.uint64(1)

# above this many lookups in the 16 whole-batch blocks (`head_blocks`), the heads read
# one batch in pieces instead: 16 batches of a 400-table workload (26 M lookups a batch,
# 420 M) stay as they were; 16 of meta-2021's (14 G) do not
HEAD_FULL_MAX_LOOKUPS = 1 << 30
HEAD_MIN_BLOCK_LOOKUPS = 1 << 12  # a table's block: at least this many lookups
# pieces the total head may hold while it lags behind the tables' heads (meta-2021's are
# ~1.6 M lookups, 6.5 MB of rows each: at most ~160 MB)
TOTAL_LAG_PIECES = 24
# `RunsHead` holds a position a row of the largest table, twice (the total head, the
# tables'): above this many rows (256 MiB each) the heads are `ExactHead`s as before
# (memory for C_x keys; meta-2021's largest table has 16 M rows)
RUNS_MAX_ROWS = 1 << 25


# -- the total head over runs of tables ----------------------------------------------------

# int64 scalar state of `RunsHead`, `sc`
_R_POS = 0  # next position, counted over every run ever fed (never renumbered)
_R_RUN = 1  # the current run's first position
_R_DISTINCT = 2  # distinct keys in the block so far
_R_WARMING = 3  # 1 while requests are not counted (the block's warm-up)
_R_FAR = 4  # counted requests at distance >= capacity or first in the block
_R_COUNTED = 5  # counted requests
_R_WIDTH = 6

_RUN_DONE = 0
_RUN_BAD_ROW = 1
_RUN_TOO_LONG = 2


@kernel
def _runs_feed(
    rows: np.ndarray,
    table_rows: int,
    capacity: int,
    last: np.ndarray,
    bits: np.ndarray,
    tree: np.ndarray,
    hist: np.ndarray,
    sc: np.ndarray,
) -> tuple[int, int]:
    """Fold one table's rows (table-local, stream order) into the current run; (index
    reached, stop code). A row's last position is `last[row]`, a position of any run ever
    fed: one before the run's start is a first use in the run (no clearing between runs
    or tables). The run's marks: one bit per position from the run's start, a Fenwick
    tree over the words' popcounts (`replay.analysis.stack`'s, each word cleared as it is
    entered and its node written once complete, so nothing is cleared for a new run)."""
    p = sc[_R_POS]
    run = sc[_R_RUN]
    distinct = sc[_R_DISTINCT]
    warming = sc[_R_WARMING]
    far = sc[_R_FAR]
    counted = sc[_R_COUNTED]
    limit = len(bits) << 6
    n = len(rows)
    i = 0
    code = _RUN_DONE
    while i < n:
        row = np.int64(rows[i])
        if np.uint64(row) >= np.uint64(table_rows):
            code = _RUN_BAD_ROW
            break
        rp = p - run
        if rp >= limit:
            code = _RUN_TOO_LONG
            break
        if i + PREFETCH_AHEAD < n:
            # a large table's positions are a cold 8 bytes a row: start that load early
            ahead = np.int64(rows[i + PREFETCH_AHEAD])
            if np.uint64(ahead) < np.uint64(table_rows):
                prefetch(last, ahead)
        wp = rp >> 6
        if warming and distinct >= capacity:
            # the warm-up kept the marks' bits alone: the run's complete words' nodes now
            warming = 0
            for w in range(wp):
                _materialize(bits, tree, w)
        if rp & 63 == 0:
            bits[wp] = 0
        q = last[row]
        if q < run:  # first use in the run, so in the block: tables' keys are disjoint
            distinct += 1
            if not warming:
                far += 1
                counted += 1
        else:
            rq = q - run
            if warming:  # nothing counted: the bit alone (about 3/5 of meta-2021's)
                bits[rq >> 6] &= ~(_ONE << np.uint64(rq & 63))
            else:
                d = _marks_between(bits, tree, rq, rp)
                if d < capacity:
                    hist[d] += 1
                else:
                    far += 1
                counted += 1
                _remove_mark(bits, tree, rq, wp)
        bits[wp] |= _ONE << np.uint64(rp & 63)
        last[row] = p
        p += 1
        if not warming and (rp + 1) & 63 == 0:  # word wp is complete
            _materialize(bits, tree, wp)
        i += 1
    sc[_R_POS] = p
    sc[_R_DISTINCT] = distinct
    sc[_R_WARMING] = warming
    sc[_R_FAR] = far
    sc[_R_COUNTED] = counted
    return i, code


class RunsHead:
    """`ExactHead`'s warm blocks (the same counts) over a stream in which each table's
    lookups within a block are one run: a batch in trace order, table-major.

    Why exact with less. A reuse of table t's key inside its run has only t's keys between
    its two uses, so its distance in the whole stream is its distance within the run, at
    most the run's distinct rows; a key seen in an earlier run of the block belongs to
    another table. So a block's counts are the sum of its runs' exact stack distances
    (each run from empty marks), d >= `capacity` counted far like a key dropped from a
    truncated stack, with the block's warm-up (its first distinct keys, `capacity` of
    them, over the runs in order) uncounted. A run's state is one position a row,
    indexed by the table-local row (`max_rows`), and its marks, not a map of `capacity`
    keys: meta-2021's 2^20-key total head, whose map of 64 MiB every request missed,
    reads each table's rows in a run of one table's keys instead."""

    last: np.ndarray  # int64 per row: its last position (before the run's start: unseen)
    bits: np.ndarray
    tree: np.ndarray
    sc: np.ndarray
    _holder: list[RunsHead | None]  # the head whose block is open, of those sharing state

    def __init__(
        self, capacity: int, max_rows: int, max_run: int, *, share: RunsHead | None = None
    ) -> None:
        """`share`: a head whose state this one uses too (fed one at a time, on one
        thread: a block of one, then a block of the other), with its `max_rows` and
        `max_run`."""
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self.capacity = int(capacity)
        if share is not None:
            self.last, self.bits, self.tree, self.sc = share.last, share.bits, share.tree, share.sc
            self._holder = share._holder
        else:
            self._holder = [None]
            self.last = np.full(max(int(max_rows), 1), -1, dtype=np.int64)
            words = int(max_run) // 64 + 1
            self.bits = np.zeros(words, dtype=np.uint64)
            self.tree = np.zeros(words + 1, dtype=np.int64)
            self.sc = np.zeros(_R_WIDTH, dtype=np.int64)
        self.blocks: list[np.ndarray] = []  # per finished block: hist + [far, counted]
        self._hist = np.zeros(0, dtype=np.int64)
        self._table = -1  # the current run's table (-1: none)
        self._open = False

    @property
    def counted(self) -> int:
        return int(self.sc[_R_COUNTED])

    def start_block(self) -> None:
        """Begin a block (a warm one: it does not start the stream) with empty state."""
        self.end_block()
        if self._holder[0] is not None:
            raise ValueError("a head sharing this one's state has a block open")
        self._holder[0] = self
        pos = self.sc[_R_POS]
        self.sc[:] = 0
        self.sc[_R_POS] = pos
        self.sc[_R_RUN] = pos
        self.sc[_R_WARMING] = 1
        self._hist = np.zeros(self.capacity, dtype=np.int64)
        self._table = -1
        self._open = True

    def end_block(self) -> None:
        if self._open:
            far, counted = self.sc[_R_FAR], self.sc[_R_COUNTED]
            self.blocks.append(np.concatenate([self._hist, [far, counted]]))
            self._open = False
            self._holder[0] = None

    def feed(self, table: int, rows: np.ndarray, table_rows: int) -> None:
        """Fold in table `table`'s next rows (table-local, any integer type, stream order);
        a table other than the last one fed begins a new run."""
        if not self._open:
            raise ValueError("feed before start_block")
        if int(table_rows) > len(self.last):
            raise ValueError(f"table {table}: {table_rows} rows, the head holds {len(self.last)}")
        if table != self._table:
            if table < self._table:  # an earlier table again: its run's keys would recur
                raise ValueError(f"table {table} after table {self._table}: not table-major")
            self.sc[_R_RUN] = self.sc[_R_POS]
            self._table = table
        i, code = _runs_feed(
            rows, int(table_rows), self.capacity, self.last, self.bits, self.tree,
            self._hist, self.sc,
        )  # fmt: skip
        if code == _RUN_BAD_ROW:
            raise ValueError(f"table {table}: row {int(rows[i])} is outside [0, {table_rows})")
        if code == _RUN_TOO_LONG:
            raise ValueError(f"table {table}: a run longer than {len(self.bits) * 64} lookups")

    def block_counts(self) -> np.ndarray:
        """int64 [blocks, capacity + 2], as `ExactHead.block_counts`."""
        self.end_block()
        if not self.blocks:
            return np.zeros((0, self.capacity + 2), dtype=np.int64)
        return np.stack(self.blocks)

    def take_counts(self) -> np.ndarray:
        """`block_counts`, the finished blocks let go (as `ExactHead.take_counts`)."""
        counts = self.block_counts()
        self.blocks = []
        return counts


def runs_state_bytes(max_rows: int, max_run: int) -> int:
    """What one `RunsHead`'s own state holds (a head made with `share` holds none): a
    position a row, and the marks and their tree over the longest run."""
    words = int(max_run) // 64 + 1
    return 8 * max(int(max_rows), 1) + 8 * words + 8 * (words + 1) + 8 * _R_WIDTH


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


class _MapHead:
    """`RunsHead`'s calls on an `ExactHead` (its memory: C_x keys, whatever the rows): of
    the whole key space (`offsets`: a table's rows made keys) or of one table (None)."""

    def __init__(self, head: ExactHead, offsets: np.ndarray | None) -> None:
        self.head, self.offsets, self.capacity = head, offsets, head.capacity

    @property
    def counted(self) -> int:
        return int(self.head.sc[_H_COUNTED])

    def start_block(self) -> None:
        self.head.start_block(warm=True)

    def end_block(self) -> None:
        self.head.end_block()

    def feed(self, table: int, rows: np.ndarray, table_rows: int) -> None:
        keys = np.asarray(rows, dtype=np.int64)
        if self.offsets is not None:  # below the table's offset, or past its rows: refused
            bad = (keys < 0) | (keys >= table_rows)
            if bad.any():
                raise ValueError(
                    f"table {table}: row {int(keys[bad][0])} is outside [0, {table_rows})"
                )
            keys = keys + self.offsets[table]
        self.head.feed(keys)

    def block_counts(self) -> np.ndarray:
        return self.head.block_counts()

    def take_counts(self) -> np.ndarray:
        return self.head.take_counts()


def _feed_blocks(
    head: RunsHead | _MapHead,
    table: int,
    rows: np.ndarray,
    table_rows: int,
    blocks: list[tuple[int, int]],
) -> None:
    for a, b in blocks:
        head.start_block()
        head.feed(table, rows[a:b], table_rows)
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
    same lookups' table-local rows (any integer type; the flat keys may then be None):
    the heads read the rows instead of subtracting each table's offset, and check each
    row they read against its table's rows; `table_lookups`:
    each table's lookups in that batch (fixed by the spec); `distinct`: each table's expected
    distinct rows in a batch, for the capacities."""
    offsets = np.asarray(offsets, dtype=np.int64)
    looks = np.asarray(table_lookups, dtype=np.int64)
    rows = np.diff(offsets)
    space = int(offsets[-1])
    batch = int(looks.sum())
    # the capacities from the batch's expected distinct rows (see the docstring)
    seen = np.rint(np.asarray(distinct, dtype=np.float64)).astype(np.int64)
    # the total head over the batch's runs of tables (`RunsHead`: `ExactHead`'s counts)
    capacity = head_capacity(int(seen.sum()), resolution, space)
    wanted = [head_capacity(int(d), resolution, int(r)) for d, r in zip(seen, rows, strict=True)]
    largest, longest = int(rows.max(initial=1)), int(looks.max(initial=1))
    total: RunsHead | _MapHead
    tables: list[RunsHead] | list[_MapHead]
    if largest <= RUNS_MAX_ROWS:
        total = RunsHead(capacity, largest, longest)
        # the tables' heads too, each block a run, fed in turn on this thread
        first = RunsHead(1, largest, longest)
        tables = [RunsHead(c, 0, 0, share=first) for c in shared_capacities(wanted)]
    else:
        total = _MapHead(ExactHead(space, capacity), offsets)
        tables = [_MapHead(ExactHead(int(r), c), None) for r, c in
                  zip(rows, shared_capacities(wanted), strict=True)]  # fmt: skip
    # the total head's blocks: block j may read from its start, j x batch / 16, up to the
    # next block's, and ends once it has counted `target` lookups (what `head_blocks`
    # gives a block); its warm-up first fills the stack with C_x distinct keys, which in
    # a run of small tables takes many of them
    target = max(HEAD_LOOKUPS // HEAD_BLOCKS, 8 * total.capacity)
    edges = [j * batch // HEAD_BLOCKS for j in range(HEAD_BLOCKS + 1)]
    starts = np.concatenate([[0], np.cumsum(looks)])
    state = {"block": 0, "open": False}

    def feed_total(t0: int, keys: np.ndarray | None, local: np.ndarray | None, at: int) -> None:
        # keys or table-local rows of tables t0.. from the batch's lookup `at` on
        given = local if local is not None else keys
        assert given is not None  # a piece has one or both
        end = at + len(given)
        pos = at
        while state["block"] < HEAD_BLOCKS and pos < end:
            lo, hi = edges[state["block"]], edges[state["block"] + 1]
            if pos < lo:
                pos = lo
                continue
            if not state["open"]:
                total.start_block()
                state["open"] = True
            stop = min(end, hi)
            t = t0
            while pos < stop:
                a, b = max(pos, int(starts[t])), min(stop, int(starts[t + 1]))
                if b > a:
                    if local is not None:
                        total.feed(t, local[a - at : b - at], int(rows[t]))
                    else:  # flat keys: below the table's offset wraps, and is refused
                        assert keys is not None
                        total.feed(t, keys[a - at : b - at] - offsets[t], int(rows[t]))
                    pos = b
                t += 1
            if total.counted >= target or pos >= hi:
                total.end_block()
                state["open"] = False
                state["block"] += 1

    # the total head takes each piece on a thread of its own while the tables' heads take
    # it here (the heads' kernels release the GIL; each head is fed in stream order). It
    # may lag up to `TOTAL_LAG_PIECES` pieces behind: its blocks (~21 M lookups each,
    # warm-up included) come in bursts, which the tables' heads and the generator then
    # run beside instead of waiting for. What it is sent: every
    # piece past its current block's start, as it last said it (a later block starts
    # later, so no piece it needs is left out; one it does not need it passes over).
    with worker_pool(1, "total-head") as side:
        running: deque[Future[None]] = deque()
        for item in pieces_of():
            (t0, t1), piece = item[0], item[1]
            local = item[2] if len(item) > 2 else None
            keys = None if piece is None else np.ascontiguousarray(piece, dtype=np.int64)
            at = int(starts[t0])  # the piece's first lookup in the batch's stream
            got = [len(x) for x in (keys, local) if x is not None]
            if not got or any(g != int(starts[t1]) - at for g in got):
                raise ValueError(
                    f"piece {t0}-{t1}: {got or 'no'} lookups, the spec says {starts[t1] - at}"
                )
            while running and (running[0].done() or len(running) >= TOTAL_LAG_PIECES):
                running.popleft().result()
            block = state["block"]  # as the total head last said it (it only grows)
            if block < HEAD_BLOCKS and int(starts[t1]) > edges[block]:
                running.append(side.submit(feed_total, t0, keys, local, at))
            # a batch's trace order is table-major, so each table's lookups are one slice
            for t in range(t0, t1):
                a, b = int(starts[t] - at), int(starts[t + 1] - at)
                if b <= a:
                    continue
                if local is not None:
                    sub = local[a:b]
                else:
                    assert keys is not None  # checked above
                    sub = keys[a:b] - offsets[t]
                    if int(sub.min()) < 0 or int(sub.max()) >= int(rows[t]):
                        raise ValueError(
                            f"table {t}'s lookups are not where the trace order puts them"
                        )
                blocks = table_blocks(b - a, tables[t].capacity)
                _feed_blocks(tables[t], t, sub, int(rows[t]), blocks)
        while running:
            running.popleft().result()
    total.end_block()
    return [HeadCurve(h.capacity, h.take_counts(), False) for h in [total, *tables]]


__all__ = [
    "HEAD_FULL_MAX_LOOKUPS",
    "ahead",
    "one_batch_heads",
    "one_batch_heads_wanted",
    "runs_state_bytes",
    "spread_blocks",
    "table_blocks",
]
