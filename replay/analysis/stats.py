"""Access statistics of a trace: what `replay inspect` reports (DESIGN sections 4 and 9).

Definitions. A lookup is one (batch, table, row) record; a *pair* is a (table, row) pair
and the row space is the union of every table's rows, R = Σ_t rows_t. U_n is the set of
distinct pairs looked up by batch n and L_n the number of lookups of batch n; U_n,t and
L_n,t are the same restricted to table t. B is the number of batches in the manifest
(batches without lookups count in B and in the curve, and are skipped by the means).

- ``lookups``: number of lookups (overall, and per table).
- ``distinct_rows``: number of distinct pairs ever looked up (per table: distinct rows).
  ``touched_fraction`` = distinct_rows / R (per table: / rows_t).
- ``top1pct_share``: the share of the lookups taken by the k most looked-up rows, where
  k = ceil(rows_t / 100) for a table (the table's cardinality, not its touched rows) and
  k = ceil(R / 100) over all rows of all tables overall; rows never looked up count as 0.
  0 when there are no lookups.
- ``distinct_per_batch_mean``: mean over the batches with L_n > 0 of |U_n| / L_n (per
  table: over the batches with L_n,t > 0 of |U_n,t| / L_n,t).
- ``consecutive_reuse_mean``: mean over the batches n >= 1 with U_n non-empty of
  |U_n ∩ U_n-1| / |U_n| (per table: over n >= 1 with U_n,t non-empty, of
  |U_n,t ∩ U_n-1,t| / |U_n,t|). An empty U_n-1 gives 0 for batch n.
- ``touched_curve``: pairs [x, |U_0 ∪ ... ∪ U_x-1| / R] for about ``curve_points``
  log-spaced batch counts x in [1, B], always with x = 1 and x = B (empty when B = 0).
  It is the curve that sizes incremental checkpoints.

Means with nothing to average over are 0.0, so an empty trace gives zeros.

Memory is bounded by per-row state, whatever the trace length: one byte per row of the
flat row space (a 2-bit tag of the last batch that looked the row up and a 6-bit lookup
count; `_TAG_SHIFT` tells the layout), plus per-table counters, the rows each of the last
three batches looked up first (a list each), and the wraps of the rows' counts (events, at
most lookups / 63, folded into one (row, wraps) pair per row when they pile up). The
top-k sums
come from a histogram of the counts per table, the rows whose count wrapped (which
outrank every other row) taken apart with their true counts. The kernel folds each batch
into float64 running sums in batch order, so the results are bit-identical however the
trace is chunked.

Above `INSPECT_TABLE_MAJOR_ROWS` rows (meta-2021), `inspect_trace` takes the tables in
groups, each over every batch with a state of its own rows (`table_major`).

`inspect_trace` streams a trace folder; `inspect_arrays` runs the same kernel on
in-memory arrays; `inspect_reference` is the slow, obviously correct version (sets and
dicts, `stats_reference.py`) that the tests compare both with.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from replay._malloc import populate, state_array, touches_most_pages
from replay._memory import (
    INSPECT_SMALL_ROWS,
    INSPECT_WRAPS_HELD,
    MAX_ROW_SPACE,
    inspect_list_cap,
    inspect_table_major,
)
from replay._threads import read_ahead
from replay._units import plural
from replay.analysis.stats_kernels import (
    _BAD_ROW,
    _BAD_TABLE,
    _COUNT_MASK,
    _COUNT_WRAP,
    _D_COUNT,
    _G_CUR,
    _G_DPB_N,
    _G_DPB_SUM,
    _G_N_CUR,
    _G_N_PREV,
    _G_REUSE_N,
    _G_REUSE_SUM,
    _G_TOUCHED,
    _G_WRAPS,
    _GI_WIDTH,
    _HIST_BLOCK,
    _OK,
    _T_DISTINCT,
    _T_DPB_N,
    _T_DPB_SUM,
    _T_LOOKUPS,
    _T_REUSE_N,
    _T_REUSE_SUM,
    _TI_WIDTH,
    _UNSORTED,
    _checked_keys,
    _count_histograms,
    _finish_kernel,
    _inspect_runs,
)
from replay.analysis.stats_reference import inspect_reference
from replay.errors import TraceError
from replay.trace.curve_points import DEFAULT_CURVE_POINTS
from replay.trace.keys import batch_bounds, curve_batches, table_runs
from replay.trace.reader import Trace, open_trace

if TYPE_CHECKING:
    from replay.workload.onthefly import GeneratedTrace

DEFAULT_MIN_LOOKUPS = 1 << 20

_MAX_BATCHES = 2**32  # batch ids are uint32
# wrap events kept before they are folded into (row, wraps) pairs: 32 MB
_WRAP_FOLD = INSPECT_WRAPS_HELD
# tables of at most this many rows count in an int64 per row, apart (`_inspect_runs`)
_DENSE_ROWS = INSPECT_SMALL_ROWS
_NO_DISTINCT = np.zeros(0, dtype=np.int64)  # feed() without per-batch distinct counts
_FEED_BLOCK = 1 << 16  # lookups checked and flattened at a time by `Inspector.feed`
_SPLIT_HISTOGRAM_ROWS = 1 << 24  # states this large are counted on two threads
# lookups fed before the small tables' counts move out of their words (`_fold_dense`):
# a count then stays below the word's field (`_D_COUNT`)
_DENSE_FOLD_AT = _D_COUNT - 1


def _histogram_scratch() -> tuple[np.ndarray, np.ndarray]:
    """`_count_histograms`' scratch: four interleaved byte histograms and a block's
    nonzero word indices."""
    return np.zeros((4, 256), dtype=np.int64), np.empty(_HIST_BLOCK, dtype=np.int64)


def _histograms(state: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """hist[t, c]: the rows of table t (flat rows bounds[t]..bounds[t+1]) whose state word
    holds count c (`_count_histograms`). A large state is counted in two halves on two
    threads (the kernel releases the GIL; integer sums, so the result does not depend on
    the split): criteo-terabyte's 188 MB take 0.045-0.05 s on one thread, at the end of
    a replay when the other core has nothing left to do."""
    tables = len(bounds) - 1
    words = state[: len(state) // 8 * 8].view(np.uint64)

    def count(edges: np.ndarray) -> np.ndarray:
        hist = np.zeros((tables, 256), dtype=np.int64)
        _count_histograms(state, words, edges, hist, *_histogram_scratch())
        return hist

    if len(state) < _SPLIT_HISTOGRAM_ROWS:
        return count(bounds)
    mid = len(state) // 16 * 8  # a word boundary near the middle
    halves = [np.clip(bounds, 0, mid), np.clip(bounds, mid, len(state))]
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="replay-hist") as pool:
        first, second = pool.map(count, halves)
    return first + second


def _top_sum(hist: np.ndarray, wrapped: np.ndarray, k: int) -> int:
    """Sum of the k largest lookup counts of a set of rows: `wrapped` holds the true
    counts of its rows whose count wrapped (each > `_COUNT_WRAP`, so they outrank the
    others, sorted largest first), `hist[c]` how many of the other rows have count c."""
    if k <= len(wrapped):
        return int(wrapped[:k].sum())
    total = int(wrapped.sum())
    remaining = k - len(wrapped)
    for c in range(_COUNT_WRAP, 0, -1):
        take = min(int(hist[c]), remaining)
        total += take * c
        remaining -= take
        if remaining == 0:
            break
    return total  # rows never looked up add 0


def _top1pct_rows(rows: int) -> int:
    """k = ceil(rows / 100), in integers (0.01 * rows is not exact in floating point)."""
    return -(-int(rows) // 100)


def _list_cap(total_rows: int) -> int:
    """Entries a per-batch list of first-looked-up rows holds at most
    (`inspect_list_cap`, which the estimate counts): above it a batch's tags are cleared
    by a sweep of the state (`_clear_tags`), which reads R bytes in order where the list
    touches one row at random per entry (about as long at R / 512 entries). Keeps the
    lists of meta-2021's 128 M rows per batch to 3 x 10 M entries (288 MiB with their
    growth room) instead of 3.6 GiB."""
    return inspect_list_cap(total_rows)


def _ratio(num: float, den: float) -> float:
    return float(num) / float(den) if den else 0.0


class Inspector:
    """Streaming state of the statistics; feed chunks in trace order, then `result()`."""

    def __init__(
        self,
        table_rows: Sequence[int] | np.ndarray,
        num_batches: int,
        *,
        curve_points: int = DEFAULT_CURVE_POINTS,
        names: Sequence[str] | None = None,
        where: str = "trace",
        first_table: int = 0,
    ) -> None:
        if sum(int(r) for r in np.asarray(table_rows).ravel().tolist()) > MAX_ROW_SPACE:
            raise TraceError(
                f"{where}: the tables' rows add up to more than the 2^63 - 1 rows that "
                "int64 row keys can number"
            )
        rows = np.asarray(table_rows, dtype=np.int64)
        if rows.ndim != 1 or len(rows) == 0 or np.any(rows < 1):
            raise TraceError(f"{where}: table cardinalities must be positive")
        if num_batches > _MAX_BATCHES:
            raise TraceError(f"{where}: {num_batches} batches is more than inspect supports")
        if curve_points < 1:
            raise ValueError("curve_points must be at least 1")
        self.names = list(names) if names is not None else [f"t{i}" for i in range(len(rows))]
        if len(self.names) != len(rows):
            raise ValueError("one name per table")
        self.where = where
        # the index of table 0 in the trace (an inspector of a group of tables, in the
        # table-major pass: `replay.analysis.table_major`), for the error messages
        self.first_table = int(first_table)
        # per-batch (lookups, distinct, reused) sums, when the table-major pass asks
        # (`_inspect_runs`' `batch_sums`): batches x 3, or no rows
        self.batch_sums = np.zeros((0, 3), dtype=np.int64)
        self.num_batches = int(num_batches)
        self.rows = rows
        self.rows_u = rows.astype(np.uint64)
        self.offsets = np.concatenate([[0], np.cumsum(rows)[:-1]]).astype(np.int64)
        total = int(rows.sum())
        # 4 KiB pages: this thread's random updates run beside the caller's kernel, and
        # huge pages cost 5x as much to fault in right after another process freed its
        # memory (`replay._malloc`)
        self.state = state_array(total, np.uint8, huge=False)
        # the rows the current batch and the two before it looked up first (`_inspect_runs`)
        self.lists = np.empty((3, 0), dtype=np.uint32 if total <= 2**32 else np.int64)
        # small tables count exactly, apart (`_inspect_runs`)
        small = rows <= _DENSE_ROWS
        starts = np.concatenate([[0], np.cumsum(np.where(small, rows, 0))[:-1]])
        self.dense_at = np.zeros((len(rows), 2), dtype=np.int64)
        self.dense_at[:, 0] = small
        self.dense_at[:, 1] = np.where(small, starts - self.offsets, 0)
        self.dense = np.zeros(int(rows[small].sum()), dtype=np.int64)
        # the small tables' counts moved out of `dense` (`_fold_dense`), once there are any
        self._dense_base: np.ndarray | None = None
        self._dense_fed = 0  # lookups fed since the last fold
        self.ti = np.zeros((len(rows), _TI_WIDTH), dtype=np.int64)
        self._counters = np.empty((4, len(rows)), dtype=np.int64)  # `_inspect_runs` scratch
        self.tf = np.zeros((len(rows), 2), dtype=np.float64)
        self.gi = np.zeros(_GI_WIDTH, dtype=np.int64)
        self.gi[_G_CUR] = -1
        self.gf = np.zeros(2, dtype=np.float64)
        self.curve_x = curve_batches(self.num_batches, curve_points)
        self.curve_val = np.zeros(len(self.curve_x), dtype=np.int64)
        self.fed = 0
        self.wraps: list[np.ndarray] = []  # flat rows, one entry per count wrap
        self.wrap_count = 0  # wrap events so far
        self.wraps_pending = 0  # of them in `self.wraps`, not yet folded
        # the folded wraps: distinct rows and their wraps
        self.wrapped_rows = np.empty(0, dtype=np.int64)
        self.wrapped_counts = np.empty(0, dtype=np.int64)
        self._keys: np.ndarray | None = None  # `feed`'s scratch
        self.done = False

    def feed(
        self,
        batch: np.ndarray,
        table: np.ndarray,
        row: np.ndarray,
        batch_distinct: np.ndarray | None = None,
        first_batch: int = 0,
    ) -> None:
        """Fold a chunk of lookups (trace order) in; with `batch_distinct`, also add each
        batch's distinct pairs to batch_distinct[batch - first_batch]. Raises TraceError
        for the first lookup that is out of order or out of range."""
        if self.done:
            raise RuntimeError("inspector already finished")
        for lo in range(0, len(row), _FEED_BLOCK):  # bounded scratch for the keys
            hi = min(lo + _FEED_BLOCK, len(row))
            if self._keys is None:
                self._keys = np.empty(_FEED_BLOCK, dtype=np.int64)
            code, index = _checked_keys(
                batch[lo:hi],
                table[lo:hi],
                row[lo:hi],
                self.num_batches,
                self.rows_u,
                self.offsets,
                int(self.gi[_G_CUR]),
                self._keys,
            )
            if code != _OK:
                self.done = True
                self._raise(code, lo + int(index), batch, table, row)
            first = int(batch[lo])
            bounds = batch_bounds(batch[lo:hi], first, int(batch[hi - 1]) + 1)
            runs = table_runs(table[lo:hi], bounds, first)
            self.feed_runs(self._keys[: hi - lo], runs, batch_distinct, first_batch)

    def feed_runs(
        self,
        keys: np.ndarray,
        runs: np.ndarray,
        batch_distinct: np.ndarray | None = None,
        first_batch: int = 0,
    ) -> None:
        """`feed` for lookups already checked and flattened: their flat keys and their
        (batch, table) runs (`_R_*` rows; `table_runs` makes them from a `BatchRange`)."""
        if self.done:
            raise RuntimeError("inspector already finished")
        n = len(keys)
        if n == 0:
            return
        # every wrap of a row's count takes 63 lookups of that row, so the trace so far
        # holds at most lookups // 63 of them, and a lookup makes one at most
        room = min((self.fed + n) // _COUNT_WRAP - self.wrap_count, n) + 1
        wraps = np.empty(max(room, 1), dtype=np.int64)
        # each list gets room for its rows so far and every lookup of the chunk, up to
        # `_list_cap` (a batch that looks up more rows is swept: `_clear_tags`)
        need = int(max(self.gi[_G_N_CUR], self.gi[_G_N_PREV])) + n
        cap = _list_cap(len(self.state))
        if self.lists.shape[1] < min(need, cap):
            grown = np.empty((3, min(need + need // 4, cap)), dtype=self.lists.dtype)
            grown[:, : self.lists.shape[1]] = self.lists
            self.lists = grown
        if self._dense_fed + n > _DENSE_FOLD_AT and len(self.dense):
            self._fold_dense()
        self._dense_fed += n
        code = _inspect_runs(
            keys,
            runs,
            len(self.rows),
            self.state,
            self.ti,
            self.tf,
            self.gi,
            self.gf,
            self.curve_x,
            self.curve_val,
            wraps,
            _NO_DISTINCT if batch_distinct is None else batch_distinct,
            first_batch,
            self._counters,
            self.lists,
            self.dense_at,
            self.dense,
            self.batch_sums,
        )
        if self.gi[_G_WRAPS]:
            self.wraps.append(wraps[: self.gi[_G_WRAPS]].copy())
            self.wrap_count += int(self.gi[_G_WRAPS])
            self.wraps_pending += int(self.gi[_G_WRAPS])
            if self.wraps_pending >= _WRAP_FOLD:
                self._fold_wraps()
        self.fed += n
        if code != _OK:  # pragma: no cover - the bound on wraps makes this unreachable
            self.done = True
            raise TraceError(f"{self.where}: internal error (lookup-count wrap buffer full)")

    def _raise(
        self, code: int, i: int, batch: np.ndarray, table: np.ndarray, row: np.ndarray
    ) -> None:
        b, t, r = int(batch[i]), int(table[i]), int(row[i])
        shown = t + self.first_table
        at = f"lookup (batch {b}, table {shown}, row {r})"
        if code == _BAD_TABLE:
            tables = len(self.rows)
            msg = f"{at}: table index {shown} is out of range (the trace has {tables} tables)"
        elif code == _BAD_ROW:
            msg = (
                f"{at}: row id {r} is out of range "
                f"(table {shown} {self.names[t]!r} has {int(self.rows[t])} rows)"
            )
        elif code == _UNSORTED:
            before = int(batch[i - 1]) if i > 0 else int(self.gi[_G_CUR])
            msg = f"{at}: lookups are not sorted by batch (batch {before} came first)"
        else:
            msg = f"{at}: batch {b} is beyond the manifest's {plural(self.num_batches, 'batch')}"
        raise TraceError(f"{self.where}: {msg}")

    def _fold_dense(self) -> None:
        """Move the small tables' counts above 1 out of their words into `_dense_base`
        (a word's count starts again at 1: 0 still means never looked up), so that a
        count that grows by one a lookup stays within its field; after 2^40 lookups."""
        counts = self.dense & _D_COUNT
        held = counts > 1
        if self._dense_base is None:
            self._dense_base = np.zeros(len(self.dense), dtype=np.int64)
        self._dense_base[held] += counts[held] - 1
        self.dense[held] = (self.dense[held] & ~_D_COUNT) | 1
        self._dense_fed = 0

    def _fold_wraps(self) -> None:
        """Fold the wrap events into (row, wraps) pairs: memory then follows the rows
        that wrapped, not the lookups."""
        # a sort and run lengths, not np.unique(return_inverse) and a weighted bincount:
        # the last fold runs after the replay's loop, on the caller's critical path
        # (the last fold of a 106 M-lookup criteo-terabyte trace: 0.028-0.031 -> 0.007 s)
        new = np.sort(np.concatenate(self.wraps)) if self.wraps else self.wrapped_rows[:0]
        if len(new):
            starts = np.flatnonzero(np.concatenate([[True], new[1:] != new[:-1]]))
            rows = np.concatenate([self.wrapped_rows, new[starts]])
            counts = np.concatenate([self.wrapped_counts, np.diff(np.append(starts, len(new)))])
            if len(self.wrapped_rows):  # merge with the pairs folded before
                order = np.argsort(rows, kind="stable")
                rows, counts = rows[order], counts[order]
                starts = np.flatnonzero(np.concatenate([[True], rows[1:] != rows[:-1]]))
                rows, counts = rows[starts], np.add.reduceat(counts, starts)
            self.wrapped_rows, self.wrapped_counts = rows, counts.astype(np.int64)
        self.wraps = []
        self.wraps_pending = 0

    def _top_parts(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """What the top-1% sums are taken from: each table's histogram of the state
        words' counts (tables x 256), and the true counts of the rows whose count wrapped
        and the small tables' counts above the state word's range (largest first), with
        their tables; those rows are not in the histogram."""
        bounds = np.append(self.offsets, self.offsets[-1] + self.rows[-1])
        hist = _histograms(self.state, bounds)
        self._fold_wraps()
        rows, wrap_counts = self.wrapped_rows, self.wrapped_counts
        low = (self.state[rows] & _COUNT_MASK).astype(np.int64)
        true = low + _COUNT_WRAP * wrap_counts.astype(np.int64)
        table_of = np.searchsorted(self.offsets, rows, side="right") - 1
        np.subtract.at(hist, (table_of, low), 1)  # wrapped rows are counted apart
        extra_true, extra_table = [true], [table_of]
        for t in np.flatnonzero(self.dense_at[:, 0]).tolist():
            start = int(self.dense_at[t, 1] + self.offsets[t])
            counts = self.dense[start : start + int(self.rows[t])] & _D_COUNT
            if self._dense_base is not None:
                counts += self._dense_base[start : start + int(self.rows[t])]
            above = counts > _COUNT_WRAP
            hist[t] = np.bincount(counts[~above], minlength=256)
            extra_true.append(counts[above])
            extra_table.append(np.full(int(above.sum()), t, dtype=np.int64))
        true, table_of = np.concatenate(extra_true), np.concatenate(extra_table)
        order = np.argsort(-true, kind="stable")
        return hist, true[order], table_of[order]

    def prefault(self, lookups: int) -> None:
        """Fault the per-row state in (`populate`: 0.08 s for criteo-terabyte's 188 MB in
        4 KiB pages on the 2-core VM), before the first feed touches it row by row; on a
        replay's helper thread, after the kernels are loaded (`warm_up`). Not where the
        trace's `lookups` touch few of its pages (`touches_most_pages`)."""
        if touches_most_pages(self.state.nbytes, lookups):
            populate(self.state)

    def warm_up(self) -> None:
        """Load the kernels `result` calls (from numba's cache, ~10 ms each), so that a
        replay's helper thread can do it before the first range instead of the caller
        after the last; on copies and empty slices, so nothing of the state changes."""
        scratch = (self.ti, self.tf, self.gi, self.gf, self.curve_x, self.curve_val)
        _finish_kernel(*(a.copy() for a in scratch))
        no_tables = np.zeros(1, dtype=np.int64)
        _count_histograms(
            self.state[:0],
            self.state[:0].view(np.uint64),
            no_tables,
            np.zeros((0, 256), dtype=np.int64),
            *_histogram_scratch(),
        )

    def finish(self) -> InspectParts:
        """Finish the statistics and return what `statistics` makes the result of (the
        table-major pass adds up the parts of several inspectors: `table_major`)."""
        if self.done:
            raise RuntimeError("inspector already finished")
        self.done = True
        _finish_kernel(self.ti, self.tf, self.gi, self.gf, self.curve_x, self.curve_val)
        hist, true, table_of = self._top_parts()
        top_tables = [
            _top_sum(hist[t], true[table_of == t], _top1pct_rows(int(r)))
            for t, r in enumerate(self.rows)
        ]
        return InspectParts(
            self.ti, self.tf, self.gi, self.gf, self.curve_val, top_tables, hist.sum(axis=0), true
        )

    def result(self) -> dict[str, Any]:
        return statistics(self.names, self.rows, self.num_batches, self.curve_x, self.finish())


@dataclass
class InspectParts:
    """An inspector's finished state: the per-table and global counters (`ti`, `tf`,
    `gi`, `gf`, `stats_kernels` layout), the touched counts at the curve's points, the
    top-1% sums per table, and what the overall top-1% sum is taken from: the histogram
    of the counts of all tables (256) and the true counts kept apart (largest first)."""

    ti: np.ndarray
    tf: np.ndarray
    gi: np.ndarray
    gf: np.ndarray
    curve_val: np.ndarray
    top_tables: list[int]
    hist: np.ndarray
    true: np.ndarray


def statistics(
    names: Sequence[str],
    table_rows: np.ndarray,
    num_batches: int,
    curve_x: np.ndarray,
    parts: InspectParts,
) -> dict[str, Any]:
    """The result of `Inspector.result` (module docstring) from its finished parts."""
    total_rows = int(table_rows.sum())
    ti, tf, gi, gf = parts.ti, parts.tf, parts.gi, parts.gf
    top_t = parts.top_tables
    top_all = _top_sum(parts.hist, parts.true, _top1pct_rows(total_rows))
    tables = []
    for t, rows in enumerate(table_rows):
        lookups = int(ti[t, _T_LOOKUPS])
        distinct = int(ti[t, _T_DISTINCT])
        tables.append(
            {
                "name": names[t],
                "rows": int(rows),
                "lookups": lookups,
                "distinct_rows": distinct,
                "touched_fraction": _ratio(distinct, int(rows)),
                "top1pct_rows": _top1pct_rows(int(rows)),
                "top1pct_share": _ratio(top_t[t], lookups),
                "distinct_per_batch_mean": _ratio(tf[t, _T_DPB_SUM], ti[t, _T_DPB_N]),
                "consecutive_reuse_mean": _ratio(tf[t, _T_REUSE_SUM], ti[t, _T_REUSE_N]),
            }
        )
    lookups = int(ti[:, _T_LOOKUPS].sum())
    distinct = int(gi[_G_TOUCHED])
    return {
        "batches": int(num_batches),
        "lookups": lookups,
        "rows": total_rows,
        "distinct_rows": distinct,
        "touched_fraction": _ratio(distinct, total_rows),
        "top1pct_rows": _top1pct_rows(total_rows),
        "top1pct_share": _ratio(top_all, lookups),
        "distinct_per_batch_mean": _ratio(gf[_G_DPB_SUM], gi[_G_DPB_N]),
        "consecutive_reuse_mean": _ratio(gf[_G_REUSE_SUM], gi[_G_REUSE_N]),
        "tables": tables,
        "touched_curve": [
            [int(x), v / total_rows]
            for x, v in zip(curve_x.tolist(), parts.curve_val.tolist(), strict=True)
        ],
    }


def _whole_batch_chunks(
    batch: np.ndarray, table: np.ndarray, row: np.ndarray, min_lookups: int
) -> Iterable[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Split arrays into chunks of >= min_lookups lookups that never split a batch."""
    n = len(row)
    lo = 0
    while lo < n:
        hi = min(lo + max(int(min_lookups), 1), n)
        if hi < n:
            hi = int(np.searchsorted(batch, batch[hi - 1], side="right"))
            hi = max(hi, lo + 1)
        yield batch[lo:hi], table[lo:hi], row[lo:hi]
        lo = hi


def inspect_arrays(
    batch: np.ndarray,
    table: np.ndarray,
    row: np.ndarray,
    table_rows: Sequence[int] | np.ndarray,
    *,
    num_batches: int | None = None,
    names: Sequence[str] | None = None,
    curve_points: int = DEFAULT_CURVE_POINTS,
    min_lookups: int = DEFAULT_MIN_LOOKUPS,
) -> dict[str, Any]:
    """The statistics of in-memory lookups (trace order), with the streaming kernel.

    `num_batches` defaults to the last batch + 1; `min_lookups` sets the chunk size the
    kernel sees (results do not depend on it).
    """
    batch = np.ascontiguousarray(batch, dtype=np.uint32)
    table = np.ascontiguousarray(table, dtype=np.uint16)
    row = np.ascontiguousarray(row)
    if row.dtype not in (np.uint32, np.uint64):
        row = row.astype(np.uint64)
    if num_batches is None:
        num_batches = int(batch.max()) + 1 if len(batch) else 0
    inspector = Inspector(
        table_rows,
        num_batches,
        curve_points=curve_points,
        names=names,
        where="arrays",
    )
    for b, t, r in _whole_batch_chunks(batch, table, row, min_lookups):
        inspector.feed(b, t, r)
    return inspector.result()


def trace_inspector(
    trace: Trace | GeneratedTrace, *, curve_points: int = DEFAULT_CURVE_POINTS
) -> Inspector:
    """An empty `Inspector` for `trace` (feed it the trace's lookups in trace order)."""
    return Inspector(
        trace.table_rows,
        trace.num_batches,
        curve_points=curve_points,
        names=trace.table_names,
        where=str(trace.path),
    )


def trace_statistics(trace: Trace | GeneratedTrace, inspector: Inspector) -> dict[str, Any]:
    """`inspect_trace`'s result from an inspector fed every lookup of `trace`."""
    result = {"trace": str(trace.path), **inspector.result()}
    result["updates"] = trace.num_updates
    return result


def inspect_trace(
    trace_or_path: Trace | GeneratedTrace | str | Path,
    *,
    curve_points: int = DEFAULT_CURVE_POINTS,
    min_lookups: int = DEFAULT_MIN_LOOKUPS,
    batch_reuse: bool = False,
    on_progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """The statistics of a trace (see the module docstring), streamed chunk by chunk;
    on_progress(batches_done, batches) after each chunk.
    With `batch_reuse`, also the reuse within each batch in Meta's bins
    (`replay.analysis.batch_reuse`; `replay inspect` asks for it).

    Above `INSPECT_TABLE_MAJOR_ROWS` rows, the tables are taken in groups, one pass each
    (`replay.analysis.table_major`), with the same result.

    Raises TraceError for a missing or corrupt trace, or a lookup whose table or row is
    out of range. `min_lookups` is the chunk size read at a time (results do not depend
    on it). The result also holds `trace` (the folder) and `updates` (update rows).
    `replay run` gets the same result from the replay's own pass (`replay_trace(...,
    inspect=True)`), feeding an inspector the chunks it decodes anyway.
    """
    trace = open_trace(trace_or_path) if isinstance(trace_or_path, str | Path) else trace_or_path
    if inspect_table_major(trace.table_rows.tolist()):
        # a row space above the threshold: the tables in groups, a state of one group's
        # rows at a time (same result: `replay.analysis.table_major`)
        from replay.analysis.table_major import inspect_table_major as by_tables

        return by_tables(
            trace,
            Inspector,
            statistics,
            curve_points=curve_points,
            batch_reuse=batch_reuse,
            on_progress=on_progress,
        )
    inspector = trace_inspector(trace, curve_points=curve_points)
    # Meta's reuse bins and the workload model they come with (the sampler's 25
    # kernels): `replay inspect`'s, not the statistics `replay run` gathers in its pass
    from replay.analysis.batch_reuse import BatchReuse

    reuse = BatchReuse(trace.table_rows, trace.num_batches) if batch_reuse else None
    # a batch too large for a row group comes in pieces of tables where the source cuts
    # it (`plan_pieces`): the inspector and the reuse histograms take a batch over
    # several chunks, so memory holds a piece in flight, not the batch
    cut = {"pieces": True} if getattr(trace, "pieces", ()) else {}
    # on the fly with a step every batch (no frozen table), a batch's update rows are
    # its distinct lookups: counted here, instead of a second generation pass
    counted = bool(getattr(trace, "steps_every_batch", False))
    distinct = np.zeros(trace.num_batches, dtype=np.int64) if counted else None
    for chunk in read_ahead(trace.iter_lookups(min_lookups=min_lookups, **cut)):
        inspector.feed(chunk.batch, chunk.table, chunk.row, distinct)
        if reuse is not None:
            reuse.feed(chunk.batch, chunk.table, chunk.row)
        if on_progress is not None and len(chunk.batch):
            # a batch is done at its chunk's end unless the batch goes on in a piece
            done = int(chunk.batch[-1]) + 1
            if not cut or int(chunk.table[-1]) == len(trace.table_rows) - 1:
                on_progress(done, trace.num_batches)
    if distinct is not None:
        result = {"trace": str(trace.path), **inspector.result(), "updates": int(distinct.sum())}
    else:
        result = trace_statistics(trace, inspector)
    if reuse is not None:
        result["batch_reuse"] = reuse.result()
    return result


KAGGLE_ROWS = (
    1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194,
    27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572,
)  # fmt: skip


def bench_inspect_kernel(
    lookups: int = 50_000_000,
    batch_size: int = 2048,
    skewed: bool = True,
    repeats: int = 3,
    seed: int = 0,
) -> dict[str, Any]:
    """Lookups per second of the inspect kernel alone, one thread, from memory.

    A synthetic trace shaped like Criteo Kaggle (26 tables, 33.8 M rows, one lookup per
    table and sample, `batch_size` samples per batch). Skewed: log-uniform ranks (a power
    law with alpha = 1) scattered over the table by a multiplicative hash; otherwise
    uniform rows. Each repeat starts from fresh per-row state; the best repeat counts.
    """
    import time

    rows = np.array(KAGGLE_ROWS, dtype=np.int64)
    per_batch = batch_size * len(rows)
    num_batches = max(1, lookups // per_batch)
    n = num_batches * per_batch
    rng = np.random.default_rng(seed)
    batch = np.repeat(np.arange(num_batches, dtype=np.uint32), per_batch)
    table = np.tile(np.repeat(np.arange(len(rows), dtype=np.uint16), batch_size), num_batches)
    cards = rows[table]
    if skewed:
        rank = np.exp(rng.random(n) * np.log(cards + 1.0)).astype(np.int64) - 1
        rank = np.minimum(rank, cards - 1)
        row = ((rank * 2654435761) % cards).astype(np.uint32)
    else:
        row = (rng.random(n) * cards).astype(np.uint32)
    del cards
    Inspector(rows, 1).feed(batch[:1], table[:1], row[:1])  # compile or load outside timing
    seconds = []
    for _ in range(repeats):
        inspector = Inspector(rows, num_batches)
        started = time.perf_counter()
        inspector.feed(batch, table, row)
        seconds.append(time.perf_counter() - started)
    started = time.perf_counter()
    result = inspector.result()
    finish_s = time.perf_counter() - started
    return {
        "lookups": n,
        "batches": num_batches,
        "skewed": skewed,
        "kernel_lookups_per_s": n / min(seconds),
        "kernel_seconds": seconds,
        "finish_seconds": finish_s,
        "top1pct_share": result["top1pct_share"],
        "distinct_rows": result["distinct_rows"],
    }


__all__ = [
    "DEFAULT_CURVE_POINTS",
    "Inspector",
    "bench_inspect_kernel",
    "curve_batches",
    "inspect_arrays",
    "inspect_reference",
    "inspect_trace",
    "table_runs",
]
