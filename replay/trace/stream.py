"""Stream a trace as aligned batch ranges of lookups and update rows, read ahead.

`iter_batch_ranges` yields `BatchRange` objects that cover consecutive batch ranges of
the trace in order; each carries the flat keys of its lookups and of its update rows with
per-batch bounds, so a kernel can walk batch by batch. A background thread reads and
decodes the next ranges (pyarrow and the key kernel release the GIL) while the caller's
kernel runs on the current one, so reading costs little wall time on two cores.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Protocol, cast

import numpy as np

from replay._intrinsics import ix, prefetch
from replay._jit import kernel
from replay._threads import read_ahead as read_ahead_items
from replay.errors import TraceError
from replay.trace.counts import keys_from_counts, runs_of
from replay.trace.format import LOOKUPS_DIR, UPDATES_DIR
from replay.trace.keys import (
    RUN_WIDTH,
    bad_lookup_error,
    batch_bounds,
    flat_keys,
    key_dtype,
    table_offsets,
    table_runs,
)
from replay.trace.reader import Group, Trace


class GeneratedRanges(Protocol):
    """What `iter_batch_ranges` needs of a source that makes its own ranges: an
    on-the-fly workload (`replay.workload.onthefly.GeneratedTrace`, a layer above)."""

    @property
    def num_batches(self) -> int: ...

    def generated_ranges(
        self,
        start: int,
        stop: int,
        *,
        with_updates: bool,
        with_distinct: bool,
        updates_from_lookups: bool = False,
        pieces: bool = False,
    ) -> Iterator[BatchRange]: ...


DEFAULT_MIN_LOOKUPS = 1  # one row group (~1 M lookups) per range: no concatenation
READ_AHEAD = 4


@dataclass(frozen=True)
class DistinctOrder:
    """Each batch's distinct lookups twice, for a cache that takes a batch's rows at once
    (`replay.policies.lru`): `first` in the order of their first lookups, `last` in the
    reverse order of their last lookups (the last row looked up first). Batch i of the
    range holds [bounds[i], bounds[i + 1]) of each."""

    first: np.ndarray
    last: np.ndarray
    bounds: np.ndarray  # int64, len batches + 1

    def window(self, a: int, b: int) -> DistinctOrder:
        """Batches [a, b) of the range."""
        lo, hi = int(self.bounds[a]), int(self.bounds[b])
        return DistinctOrder(self.first[lo:hi], self.last[lo:hi], self.bounds[a : b + 1] - lo)


@dataclass(frozen=True)
class BatchRange:
    """Lookups and update rows of batches [batch_start, batch_stop), as flat keys."""

    batch_start: int
    batch_stop: int
    keys: np.ndarray  # int64 flat key per lookup, trace order
    bounds: np.ndarray  # int64, len batches + 1: lookups of batch start+i are keys[b[i]:b[i+1]]
    update_keys: np.ndarray  # int64 flat key per update row
    update_bounds: np.ndarray  # int64, len batches + 1
    distinct: np.ndarray | None = None  # int64 distinct keys per batch (when asked for)
    # the lookups' (batch, table) runs for the trace statistics (`replay.trace.keys.table_runs`,
    # when asked for)
    runs: np.ndarray | None = None
    # True: each batch's update rows are its distinct lookups (the source declares it and
    # the caller asked, `iter_batch_ranges(updates_from_lookups=True)`); update_bounds
    # count them, update_keys may be empty
    updates_are_lookups: bool = False
    # A piece of one batch (the caller asked, `iter_batch_ranges(pieces=True)`, and the
    # source cuts its batches: `replay.trace.format.plan_pieces`): the lookups and update
    # rows of batch batch_start's tables [t0, t1) only; None: whole batches. Tables never
    # share a row, so a consumer adds the pieces' counts up and closes the batch (applies
    # what waits for its end, writes its row) at the piece with `ends_batch`.
    tables: tuple[int, int] | None = None
    ends_batch: bool = True  # False: the range's last batch goes on in the next range
    # each batch's distinct lookups in order (when asked for, `iter_batch_ranges(with_order=
    # True)`, of a trace folder's whole batches); None: not made
    order: DistinctOrder | None = None

    @property
    def batches(self) -> int:
        return self.batch_stop - self.batch_start


def updates_as_keys(batch_range: BatchRange, max_lookups: int) -> BatchRange:
    """`batch_range` as it is, unless its update rows are its lookups
    (`updates_are_lookups`) and a batch holds more than `max_lookups` lookups (a cache
    that cannot keep one batch's rows until it ends): then with each batch's distinct
    lookups as its update keys, and the flag off."""
    br = batch_range
    if not br.updates_are_lookups or not br.batches or np.diff(br.bounds).max() <= max_lookups:
        return br
    if len(br.update_keys) != br.update_bounds[-1]:  # no keys with the range (a trace's)
        keys = [np.unique(br.keys[lo:hi]) for lo, hi in itertools.pairwise(br.bounds)]
        ubounds = np.zeros(br.batches + 1, dtype=np.int64)
        np.cumsum([len(k) for k in keys], out=ubounds[1:])
        ukeys = np.concatenate(keys).astype(br.keys.dtype)
        br = replace(br, update_keys=ukeys, update_bounds=ubounds)
    return replace(br, updates_are_lookups=False)


def split_ranges(ranges: Iterator[BatchRange], batches: int) -> Iterator[BatchRange]:
    """`ranges` in ranges of at most `batches` batches each (a consumer whose state per
    range grows with its batches: the cluster's per-GPU columns). A piece of a batch
    passes as it is; the trace statistics' runs are not split (ask for none)."""
    most = max(int(batches), 1)
    for br in ranges:
        if br.batches <= most or br.tables is not None:
            yield br
            continue
        if br.runs is not None:
            raise ValueError("split_ranges: a range with the statistics' runs")
        with_update_keys = len(br.update_keys) == br.update_bounds[-1]
        for a in range(0, br.batches, most):
            b = min(a + most, br.batches)
            lo, hi = int(br.bounds[a]), int(br.bounds[b])
            ulo, uhi = int(br.update_bounds[a]), int(br.update_bounds[b])
            yield replace(
                br,
                batch_start=br.batch_start + a,
                batch_stop=br.batch_start + b,
                keys=br.keys[lo:hi],
                bounds=br.bounds[a : b + 1] - lo,
                update_keys=br.update_keys[ulo:uhi] if with_update_keys else br.update_keys,
                update_bounds=br.update_bounds[a : b + 1] - ulo,
                distinct=None if br.distinct is None else br.distinct[a:b],
                order=None if br.order is None else br.order.window(a, b),
            )


def empty_range(total_keys: int, *, ordered: bool = False) -> BatchRange:
    """A range of no batches whose arrays have the types of every range the stream makes
    (so a kernel called on it loads the same compiled version: for warm-ups); `ordered`:
    as the ranges of `iter_batch_ranges(with_order=True, updates_from_lookups=True)`."""
    keys = np.empty(0, dtype=key_dtype(total_keys))
    bounds = np.zeros(1, np.int64)
    if not ordered:
        return BatchRange(0, 0, keys, bounds, keys, bounds)
    order = DistinctOrder(keys, keys, bounds)
    return BatchRange(0, 0, keys, bounds, keys, bounds, updates_are_lookups=True, order=order)


@kernel
def distinct_kernel(
    keys: np.ndarray, bounds: np.ndarray, seen: np.ndarray, out: np.ndarray
) -> None:
    """out[b] = distinct keys of batch b of the range.

    `seen` is a bitmap over all keys (uint64 words, all zero between calls): 1 bit per
    key keeps it in the last-level cache (4 MB for the 34 M rows of criteo-kaggle), where
    a per-key stamp array would miss to DRAM on every cold key. Each batch clears the
    words it set by walking its keys again (they are in cache by then).
    """
    for b in range(len(bounds) - 1):
        lo = bounds[b]
        hi = bounds[b + 1]
        n = 0
        for i in range(lo, hi):
            k = keys[ix(i)]
            word = ix(k >> 6)
            bit = np.uint64(1) << np.uint64(k & 63)
            old = seen[word]
            n += (old & bit) == 0  # branchless: new keys come at random
            seen[word] = old | bit
        for i in range(lo, hi):
            seen[ix(keys[ix(i)] >> 6)] = 0
        out[b] = n


def distinct_bitmap(total_keys: int) -> np.ndarray:
    """The zeroed `seen` bitmap `distinct_kernel` needs (1 bit per key)."""
    return np.zeros((total_keys + 63) // 64, dtype=np.uint64)


_ORDER_AHEAD = 64  # lookups


@kernel
def order_kernel(
    keys: np.ndarray,
    bounds: np.ndarray,
    seen: np.ndarray,
    first: np.ndarray,
    last: np.ndarray,
    obounds: np.ndarray,
) -> None:
    """`DistinctOrder` of the range, on `distinct_kernel`'s bitmap (all zero between
    calls): a pass forward over each batch keeps the keys whose bit it sets (first
    lookups), a pass backward those whose bit it clears (last lookups), which leaves the
    bitmap zero. Branch-free: every key is stored and the count moves on by whether it
    was kept, since kept keys come at random. The large tables' rows land anywhere in
    the bitmap (23 MB at criteo-terabyte's 188 M rows): each pass loads the word of the
    key `_ORDER_AHEAD` lookups on (one thread's CPU, 7 passes alternating, medians:
    0.465 -> 0.373 s at 64 ahead over criteo-terabyte's 106.5 M lookups, 0.484 -> 0.417
    at 32, 0.522 -> 0.406 at 128; criteo-kaggle 0.314 -> 0.287 at 64)."""
    n = 0
    m = 0
    end = len(keys) - 1
    for b in range(len(bounds) - 1):
        lo = bounds[b]
        hi = bounds[b + 1]
        obounds[b] = n
        for i in range(lo, hi):
            prefetch(seen, keys[ix(min(i + _ORDER_AHEAD, end))] >> 6)
            k = keys[ix(i)]
            word = ix(k >> 6)
            bit = np.uint64(1) << np.uint64(k & 63)
            old = seen[word]
            first[ix(n)] = k
            n += (old & bit) == 0
            seen[word] = old | bit
        # every key's bit is set now: the first backward, its last lookup, clears it
        for i in range(hi - 1, lo - 1, -1):
            prefetch(seen, keys[ix(max(i - _ORDER_AHEAD, 0))] >> 6)
            k = keys[ix(i)]
            word = ix(k >> 6)
            bit = np.uint64(1) << np.uint64(k & 63)
            old = seen[word]
            last[ix(m)] = k
            m += (old & bit) != 0
            seen[word] = old & ~bit
    obounds[len(bounds) - 1] = n


def distinct_order(keys: np.ndarray, bounds: np.ndarray, seen: np.ndarray) -> DistinctOrder:
    """The `DistinctOrder` of a range's lookups (`seen`: a zeroed `distinct_bitmap`, left
    zeroed)."""
    first = np.empty(len(keys), dtype=keys.dtype)
    last = np.empty(len(keys), dtype=keys.dtype)
    obounds = np.empty(len(bounds), dtype=np.int64)
    order_kernel(keys, bounds, seen, first, last, obounds)
    n = int(obounds[-1])
    return DistinctOrder(first[:n], last[:n], obounds)


def build_range(
    lo: int,
    hi: int,
    offsets: np.ndarray,
    batch: np.ndarray,
    table: np.ndarray | None,
    row: np.ndarray | None,
    update_batch: np.ndarray | None,
    update_table: np.ndarray | None,
    update_row: np.ndarray | None,
    seen: np.ndarray | None,
    where: str = "trace",
    with_runs: bool = False,
) -> BatchRange:
    """The `BatchRange` of batches [lo, hi) from its lookup and update columns.

    `table`/`row` None means no lookups; `update_*` None means no update rows asked for;
    `seen` (a zeroed `distinct_bitmap`, left zeroed) asks for the distinct counts;
    `with_runs` adds the lookups' (batch, table) runs, for the trace statistics.
    """
    empty = np.empty(0, dtype=key_dtype(int(offsets[-1])))
    bounds = batch_bounds(batch, lo, hi)
    distinct = None
    if table is None or row is None:
        keys = empty
        if seen is not None:
            distinct = np.zeros(hi - lo, dtype=np.int64)
    else:
        keys = flat_keys(table, row, offsets, where=where, batch=batch)
        if seen is not None:
            distinct = np.zeros(hi - lo, dtype=np.int64)
            distinct_kernel(keys, bounds, seen, distinct)
    if update_batch is not None and update_table is not None and update_row is not None:
        ukeys = flat_keys(
            update_table, update_row, offsets, where=f"{where} (updates)", batch=update_batch
        )
        ubounds = batch_bounds(update_batch, lo, hi)
    else:
        ukeys, ubounds = empty, np.zeros(hi - lo + 1, dtype=np.int64)
    runs = None
    if with_runs:
        runs = table_runs(np.empty(0, dtype=np.uint16) if table is None else table, bounds, lo)
    return BatchRange(lo, hi, keys, bounds, ukeys, ubounds, distinct, runs)


def _range_from_counts(
    lo: int,
    hi: int,
    offsets: np.ndarray,
    group: Group,
    ukeys: np.ndarray,
    ubounds: np.ndarray,
    seen: np.ndarray | None,
    where: str,
    with_runs: bool,
) -> BatchRange:
    """The `BatchRange` of batches [lo, hi) whose lookups are one counted group (its
    batches end at hi; [lo, group.batch_start) hold no lookups)."""
    assert group.counts is not None and group.batch_stop == hi
    keys, bounds, runs = _keys_of_group(offsets, group, where, with_runs)
    if group.batch_start > lo:
        bounds = np.concatenate([np.zeros(group.batch_start - lo, dtype=np.int64), bounds])
    distinct = None
    if seen is not None:
        distinct = np.zeros(hi - lo, dtype=np.int64)
        distinct_kernel(keys, bounds, seen, distinct)
    return BatchRange(lo, hi, keys, bounds, ukeys, ubounds, distinct, runs)


def warm_up_reader(
    trace: Trace | GeneratedRanges, *, with_distinct: bool = False, with_order: bool = False
) -> None:
    """Load the kernels the stream's reader calls on a trace folder's counted row groups
    (and `distinct_kernel` where the ranges count distinct rows, `order_kernel` where they
    carry the `DistinctOrder`), on arguments of the
    types the reader passes: for a helper thread, so that the reader's first range does
    not load them. numba loads a cached kernel under its global lock, and while the
    replay's helper thread faulted state in, the reader's `keys_from_counts` took
    0.12-0.17 s to load against 3 ms alone (loading maps memory, which waits for the
    faulting's memory-map lock). Nothing for an on-the-fly source."""
    if not isinstance(trace, Trace):
        return
    offsets = table_offsets(trace.table_rows)
    row = np.empty(0, dtype=trace.row_dtype)
    row.flags.writeable = False  # as `replay._arrow.to_numpy`'s one-chunk views
    group = Group(0, 1, np.zeros((1, len(offsets) - 1), dtype=np.int64), {"row": row})
    keys, bounds, _ = _keys_of_group(offsets, group, str(trace.path), with_runs=True)
    _keys_of_group(offsets, group, str(trace.path), with_runs=False)
    if with_order:
        distinct_order(keys, bounds, np.zeros(1, dtype=np.uint64))
    elif with_distinct:
        distinct_kernel(keys, bounds, np.zeros(1, dtype=np.uint64), np.zeros(1, np.int64))


def _keys_of_group(
    offsets: np.ndarray, group: Group, where: str, with_runs: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(flat keys, per-batch bounds from group.batch_start, runs or None) of a counted
    group; a TraceError naming the batch when a row id is outside its table."""
    counts = group.counts
    assert counts is not None
    row = group.columns["row"]
    keys = np.empty(len(row), dtype=key_dtype(int(offsets[-1])))
    bounds = np.empty(len(counts) + 1, dtype=np.int64)
    runs = runs_of(counts) if with_runs else np.empty((0, RUN_WIDTH), dtype=np.int64)
    rows = np.diff(offsets)
    bad = keys_from_counts(row, counts, offsets, rows, keys, bounds, runs, group.batch_start)
    if bad >= 0:
        b = int(np.searchsorted(bounds, bad, side="right")) - 1
        per_table = np.concatenate([[0], np.cumsum(counts[b])]) + bounds[b]
        t = int(np.searchsorted(per_table, bad, side="right")) - 1
        table = np.array([t], dtype=np.uint16)
        batch = np.array([group.batch_start + b], dtype=np.uint32)
        raise bad_lookup_error(where, 0, table, row[bad : bad + 1], rows, batch)
    return keys, bounds, runs if with_runs else None


def check_counted_rows(group: Group, rows: np.ndarray, where: str) -> None:
    """A TraceError naming the batch, table and row when a counted group's row id is
    outside its table (`rows`: each table's rows). One vectorized pass over the `row`
    column, the largest id of each (batch, table) run against its table's rows: what
    `_keys_of_group` checks while it makes keys, for ranges that need no keys."""
    counts = group.counts
    assert counts is not None
    row = group.columns["row"]
    flat = counts.ravel()
    held = np.flatnonzero(flat)  # the reader checked that counts add up to len(row)
    if not len(held):
        return
    ends = np.cumsum(flat[held])
    starts = ends - flat[held]
    largest = np.maximum.reduceat(row, starts).astype(np.uint64)
    tables = held % counts.shape[1]
    wrong = largest >= rows[tables].astype(np.uint64)
    if not wrong.any():
        return
    i = int(np.argmax(wrong))
    batch, table = divmod(int(held[i]), counts.shape[1])
    run = row[starts[i] : ends[i]]
    bad = run[int(np.argmax(run.astype(np.uint64) >= np.uint64(rows[table])))]
    raise bad_lookup_error(
        where,
        0,
        np.array([table], dtype=np.uint16),
        np.array([bad], dtype=row.dtype),
        rows,
        np.array([group.batch_start + batch], dtype=np.uint32),
    )


class _UpdateKeys:
    """Flat keys of the update rows of consecutive batch ranges, from one streaming pass
    over the update files (`Trace.iter_groups`)."""

    def __init__(
        self, trace: Trace, start: int, stop: int, offsets: np.ndarray, keys: bool = True
    ) -> None:
        # without keys, only the `row` column is decoded: the ranges carry counts only, but
        # a row id outside its table must be refused whichever policy replays the trace
        self._groups = trace.iter_groups(UPDATES_DIR, start, stop, ("row",))
        self._keys = keys
        self._offsets = offsets
        self._where = f"{trace.path} (updates)"
        # (first batch, update rows per batch, keys), in batch order
        self._pending: list[tuple[int, np.ndarray, np.ndarray]] = []
        self._exhausted = False
        self._cut = bool(trace.pieces)  # batches in pieces of tables, a row group each

    def _piece(self, group: Group) -> tuple[int, np.ndarray, np.ndarray]:
        if group.counts is not None and not self._keys:
            check_counted_rows(group, np.diff(self._offsets), self._where)
            empty = np.empty(0, dtype=key_dtype(int(self._offsets[-1])))
            return group.batch_start, group.counts.sum(axis=1), empty
        if group.counts is not None:
            keys, bounds, _ = _keys_of_group(self._offsets, group, self._where)
            return group.batch_start, np.diff(bounds), keys
        cols = group.columns
        if not self._keys:
            rows = np.diff(self._offsets)
            t64 = cols["table"].astype(np.int64)
            wrong = (t64 >= len(rows)) | (
                cols["row"].astype(np.uint64)
                >= rows[np.minimum(t64, len(rows) - 1)].astype(np.uint64)
            )
            if wrong.any():
                raise bad_lookup_error(
                    self._where, 0, cols["table"], cols["row"], rows, cols["batch"]
                )
            first, empty = group.batch_start, np.empty(0, dtype=key_dtype(int(self._offsets[-1])))
            return first, np.diff(batch_bounds(cols["batch"], first, group.batch_stop)), empty
        keys = flat_keys(
            cols["table"], cols["row"], self._offsets, where=self._where, batch=cols["batch"]
        )
        first = group.batch_start
        sizes = np.diff(batch_bounds(cols["batch"], first, group.batch_stop))
        return first, sizes, keys

    def take(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        """(keys, bounds) of the update rows of batches [lo, hi); ranges come in order."""
        # a group that starts at or after hi shows that nothing before hi is left unread;
        # where batches are cut into pieces (a row group each), the next group may go on
        # with batch hi - 1: read until one starts at or after hi
        while not self._exhausted and (
            not self._pending
            or self._pending[-1][0] + len(self._pending[-1][1]) < hi
            or (self._cut and self._pending[-1][0] < hi)
        ):
            try:
                self._pending.append(self._piece(next(self._groups)))
            except StopIteration:
                self._exhausted = True
        sizes = np.zeros(hi - lo, dtype=np.int64)
        parts = []
        kept = []
        for first, per_batch, keys in self._pending:
            last = first + len(per_batch)
            if first >= hi:
                kept.append((first, per_batch, keys))
                continue
            a, b = max(first, lo), min(last, hi)
            cut = np.concatenate([[0], np.cumsum(per_batch)])
            sizes[a - lo : b - lo] += per_batch[a - first : b - first]
            parts.append(keys[cut[a - first] : cut[b - first]])
            if last > hi:
                kept.append((hi, per_batch[hi - first :], keys[cut[hi - first] :]))
        self._pending = kept
        bounds = np.zeros(hi - lo + 1, dtype=np.int64)
        np.cumsum(sizes, out=bounds[1:])
        if len(parts) == 1:
            return parts[0], bounds
        empty = np.empty(0, dtype=key_dtype(int(self._offsets[-1])))
        return (np.concatenate(parts) if parts else empty), bounds


def _merge(groups: list[Group]) -> Group:
    """Consecutive counted groups as one (batches between them hold no lookups; a group
    may go on with the last batch of the one before, from a later table: a piece)."""
    if len(groups) == 1:
        return groups[0]
    lo, hi = groups[0].batch_start, groups[-1].batch_stop
    width = max(g.counts.shape[1] for g in groups if g.counts is not None)
    counts = np.zeros((hi - lo, width), dtype=np.int64)
    for g in groups:
        assert g.counts is not None
        counts[g.batch_start - lo : g.batch_stop - lo, : g.counts.shape[1]] += g.counts
    row = np.concatenate([g.columns["row"] for g in groups])
    return Group(lo, hi, counts, {"row": row})


def _linked(groups: Iterator[Group]) -> Iterator[tuple[Group, bool, bool]]:
    """(group, whether it goes on with the last batch of the group before, whether the
    next group goes on with its last batch), one group ahead: pieces of a batch cut by
    tables (`replay.trace.format.plan_pieces`) come as such links, a row group each."""

    def goes_on(before: Group | None, group: Group) -> bool:
        return (
            before is not None
            and before.counts is not None
            and group.counts is not None
            and group.batch_start < before.batch_stop
        )

    before: Group | None = None
    held: Group | None = None
    for group in groups:
        if held is not None:
            yield held, goes_on(before, held), goes_on(held, group)
            before = held
        held = group
    if held is not None:
        yield held, goes_on(before, held), False


def _ranges(
    trace: Trace,
    start: int,
    stop: int,
    min_lookups: int,
    with_updates: bool,
    with_distinct: bool = False,
    with_runs: bool = False,
    updates_from_lookups: bool = False,
    pieces: bool = False,
    with_order: bool = False,
) -> Iterator[BatchRange]:
    offsets = table_offsets(trace.table_rows)
    # the order's passes count the distinct rows too, on the same bitmap
    ordered = distinct_bitmap(int(offsets[-1])) if with_order else None
    seen = distinct_bitmap(int(offsets[-1])) if with_distinct and not with_order else None
    derived = with_updates and updates_from_lookups and trace.updates_are_lookups
    updates = _UpdateKeys(trace, start, stop, offsets, not derived) if with_updates else None
    where = str(trace.path)
    empty = np.empty(0, dtype=key_dtype(int(offsets[-1])))

    def update_keys(lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        if updates is None:
            return empty, np.zeros(hi - lo + 1, dtype=np.int64)
        return updates.take(lo, hi)

    def make(lo: int, group: Group) -> BatchRange:
        hi = group.batch_stop
        ukeys, ubounds = update_keys(lo, hi)
        if group.counts is not None:
            r = _range_from_counts(lo, hi, offsets, group, ukeys, ubounds, seen, where, with_runs)
        else:
            cols = group.columns  # a file without footer counts: its decoded columns
            r = build_range(
                lo, hi, offsets, cols["batch"], cols["table"], cols["row"], None, None, None,
                seen, where, with_runs,
            )  # fmt: skip
        r = replace(r, update_keys=ukeys, update_bounds=ubounds, updates_are_lookups=derived)
        if ordered is None:
            return r
        order = distinct_order(r.keys, r.bounds, ordered)
        return replace(r, order=order, distinct=np.diff(order.bounds) if with_distinct else None)

    def empty_batches(lo: int, hi: int) -> BatchRange:
        ukeys, ubounds = update_keys(lo, hi)
        zeros = np.zeros(hi - lo + 1, dtype=np.int64)
        return BatchRange(
            lo, hi, empty, zeros, ukeys, ubounds,
            np.zeros(hi - lo, dtype=np.int64) if with_distinct else None,
            np.array([[0, 0, 0]], dtype=np.int64) if with_runs else None,
            derived,
            order=None if ordered is None else distinct_order(empty, zeros, ordered),
        )  # fmt: skip

    def piece(group: Group, first: bool, last: bool) -> BatchRange:
        """The range of one row group of a batch cut into pieces (the batch's update
        rows with its first piece)."""
        assert group.counts is not None
        if group.batch_stop - group.batch_start != 1:
            raise TraceError(
                f"{where}: a row group of batches {group.batch_start}-{group.batch_stop - 1} "
                "shares a batch with the next or the one before (the layout cuts batches "
                "into pieces of one batch each)"
            )
        b = group.batch_start
        held = np.flatnonzero(group.counts[0])
        tables = (int(held[0]), int(held[-1]) + 1)
        if first:
            ukeys, ubounds = update_keys(b, b + 1)
        else:
            ukeys, ubounds = empty, np.zeros(2, dtype=np.int64)
        # a piece carries no order: its distinct rows are counted on the order's bitmap
        bits = ordered if ordered is not None and with_distinct else seen
        r = _range_from_counts(b, b + 1, offsets, group, ukeys, ubounds, bits, where, with_runs)
        return replace(r, updates_are_lookups=derived, tables=tables, ends_batch=last)

    cut = pieces and bool(trace.pieces)  # stream cut batches piece by piece
    cursor = start
    pending: list[Group] = []
    size = 0
    chain: list[Group] = []  # without `cut`: the pieces of a batch so far, made whole
    # decode on this thread only: the caller's kernels use the other core
    for group, continues, continued in _linked(
        trace.iter_groups(LOOKUPS_DIR, start, stop, ("row",))
    ):
        if cut and (continues or continued):
            if not continues:  # the batch's first piece
                if pending:
                    merged = _merge(pending)
                    pending, size = [], 0
                    yield make(cursor, merged)
                    cursor = merged.batch_stop
                if cursor < group.batch_start:  # batches without lookups before
                    yield empty_batches(cursor, group.batch_start)
            yield piece(group, not continues, not continued)
            cursor = group.batch_stop
            continue
        if continued:
            chain.append(group)
            continue
        if chain:
            group, chain = _merge([*chain, group]), []  # a batch cut into pieces, whole
        if group.counts is None or size + len(group) >= min_lookups:
            if group.counts is not None:
                pending.append(group)
                group, pending, size = _merge(pending), [], 0
            elif pending:
                merged = _merge(pending)
                pending, size = [], 0
                yield make(cursor, merged)
                cursor = merged.batch_stop
            # a range starts where the previous one stopped, so batches without lookups
            # (possible in ingested traces) still belong to exactly one range
            yield make(cursor, group)
            cursor = group.batch_stop
        else:
            pending.append(group)
            size += len(group)
    if pending:
        merged = _merge(pending)
        yield make(cursor, merged)
        cursor = merged.batch_stop
    if cursor < stop:  # trailing batches without lookups
        yield empty_batches(cursor, stop)


def iter_batch_ranges(
    trace: Trace | GeneratedRanges,
    start: int = 0,
    stop: int | None = None,
    *,
    min_lookups: int = DEFAULT_MIN_LOOKUPS,
    with_updates: bool = True,
    with_distinct: bool = False,
    read_ahead: int = READ_AHEAD,
    with_runs: bool = False,
    updates_from_lookups: bool = False,
    pieces: bool = False,
    with_order: bool = False,
) -> Iterator[BatchRange]:
    """Consecutive `BatchRange`s covering [start, stop), decoded in a background thread
    (for an on-the-fly workload: generated in its own pool of threads).

    `with_order` (trace folders; an on-the-fly source ignores it) adds each whole batch's
    `DistinctOrder`, made on the reader's thread, beside the caller's kernel: a piece of
    a batch carries none.

    `with_runs` (trace folders only) adds each range's (batch, table) runs, for the trace
    statistics. `updates_from_lookups`: where the source declares that each batch's
    update rows are its distinct lookups (`updates_are_lookups`), the ranges say so and
    carry only the update rows' count per batch (`update_bounds`; update keys only where
    they cost nothing, as on the fly): of a trace's update files only the `row` column is
    then decoded, to refuse an id outside its table (`check_counted_rows`: 30 ms of the
    reader's thread for 15 M update rows), and no keys are made. `pieces`: where the
    source cuts a large batch into pieces of tables (`plan_pieces`), a range may be one
    piece of one batch (`BatchRange.tables`, `ends_batch`); without it every range holds
    whole batches. Errors raised while reading (a corrupt file) are re-raised in the
    caller's thread.
    """
    stop = trace.num_batches if stop is None else min(stop, trace.num_batches)
    generated = getattr(trace, "generated_ranges", None)
    if generated is not None:  # an on-the-fly workload makes its ranges in its own threads
        if with_runs:
            raise ValueError("with_runs needs a trace folder")
        # asked only when wanted: a source without the keyword never gets it
        derive: dict[str, bool] = {"updates_from_lookups": True} if updates_from_lookups else {}
        if pieces:
            derive["pieces"] = True
        yield from generated(
            start, stop, with_updates=with_updates, with_distinct=with_distinct, **derive
        )
        return
    ranges = _ranges(
        cast(Trace, trace),  # a source without its own ranges is read as a trace folder
        start, stop, min_lookups, with_updates, with_distinct, with_runs,
        updates_from_lookups, pieces, with_order,
    )  # fmt: skip
    if read_ahead <= 0:
        yield from ranges
    else:
        yield from read_ahead_items(ranges, read_ahead, "replay-stream")
