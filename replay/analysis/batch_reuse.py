"""Reuse within a batch, in Meta's bins: `replay inspect`'s `batch_reuse`.

For each batch, every distinct (table, row) it looks up has a count c >= 1 (its lookups
in that batch). Its bin is (0, 1], (1, 2], (2, 4], ..., (16384, 32768] or (32768, inf),
the bins of Meta's locality statistics (facebookresearch/dlrm_datasets,
`embedding_bag/2021/locality_stats.txt`; `replay.workload.locality_stats` parses them).
Per batch, `rows_share[j]` is the share of its distinct rows in bin j and
`lookups_share[j]` the share of its lookups that land on such rows; the result holds
their means over the batches that have lookups, and the mean lookups and distinct rows
per batch over all batches (as Meta's "Avg # of indices" and "Avg # of unique cols").

Lookups arrive in trace order (batches ascending, tables ascending within a batch, a run
possibly spread over several chunks); a (batch, table) run's flat keys are kept until it
ends (its lookups x 8 bytes), then sorted and counted (numba: sort, run lengths, bins)
into the batch's bins: tables never share a row, so memory is one table's lookups of a
batch, not the batch's.

`spec_batch_reuse(spec, batch)` gives the same statistics of one batch of a workload
spec without holding the batch: tables never share a row, so a batch's rows and lookups
per bin are sums over its tables, and each table's lookups are drawn (the generator's
own draws, `replay.workload.sampler`: batch b's stream, positions 0..n_t - 1), counted
and dropped in turn; memory is one table's lookups (8 bytes each) per thread. Ranks are
counted instead of rows (rank -> row is a bijection, so the counts are the same); a
batch with reuse draws from earlier batches and is refused, as is drift (every batch
but 0 is shifted, which moves no count either, but is not needed here).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from replay._jit import kernel
from replay._threads import worker_pool
from replay.errors import ConfigError
from replay.trace.keys import table_offsets
from replay.workload import sampler
from replay.workload.locality_model import BIN_EDGES, BINS, BatchStats
from replay.workload.spec import WorkloadSpec


@kernel
def _bin_counts(keys: np.ndarray, rows: np.ndarray, looks: np.ndarray) -> int:
    """Sort one batch's flat keys (in place) and add each distinct key to its bin:
    rows[j] += 1, looks[j] += its count. Returns the distinct keys."""
    keys.sort()
    n = len(keys)
    distinct = 0
    i = 0
    while i < n:
        j = i + 1
        while j < n and keys[j] == keys[i]:
            j += 1
        c = j - i
        b = 0  # (c - 1).bit_length(), capped at the open bin
        v = c - 1
        while v > 0 and b < BINS - 1:
            v >>= 1
            b += 1
        rows[b] += 1
        looks[b] += c
        distinct += 1
        i = j
    return distinct


class BatchReuse:
    """Accumulates `batch_reuse` over lookups fed in trace order.

    Tables never share a row, so a batch's bins are sums over its (batch, table) runs:
    keys are kept per run (a trace is sorted by batch, then table) and counted when the
    run ends, so memory is one table's lookups of one batch, not the batch's."""

    def __init__(
        self,
        table_rows: Sequence[int] | np.ndarray,
        num_batches: int,
        *,
        batch_sums: np.ndarray | None = None,
    ) -> None:
        """With `batch_sums` (int64, num_batches x `SUMS_WIDTH`), each batch's counts are
        added to its row instead (bins of rows, bins of lookups, lookups, distinct rows:
        `reuse_from_sums`), so that several accumulators of disjoint tables (the
        table-major pass, `replay.analysis.table_major`) add up to the whole trace's."""
        rows = np.asarray(table_rows, dtype=np.int64)
        self.batch_sums = batch_sums
        self.offsets = table_offsets(rows)[:-1]
        self.num_batches = int(num_batches)
        self.rows_share_sum = np.zeros(BINS)
        self.lookups_share_sum = np.zeros(BINS)
        self.batches_with_lookups = 0
        self.lookups = 0
        self.distinct = 0
        self._pending: list[np.ndarray] = []
        self._pending_run = (-1, -1)  # (batch, table) of the pending keys
        self._rows = np.zeros(BINS, dtype=np.int64)  # the current batch's bins so far
        self._looks = np.zeros(BINS, dtype=np.int64)
        self._batch_distinct = 0
        self._batch_lookups = 0

    def feed(self, batch: np.ndarray, table: np.ndarray, row: np.ndarray) -> None:
        """A chunk of lookups in trace order (columns as a trace stores them)."""
        if len(row) == 0:
            return
        table = np.asarray(table, dtype=np.int64)
        keys = self.offsets[table] + np.asarray(row).astype(np.int64)
        batch = np.asarray(batch)
        cuts = np.flatnonzero((batch[1:] != batch[:-1]) | (table[1:] != table[:-1])) + 1
        starts = np.concatenate([[0], cuts])
        stops = np.concatenate([cuts, [len(keys)]])
        for lo, hi in zip(starts.tolist(), stops.tolist(), strict=True):
            run = (int(batch[lo]), int(table[lo]))
            if run != self._pending_run:
                self._count_run()
                if run[0] != self._pending_run[0]:
                    self._finish_batch()
                self._pending_run = run
            self._pending.append(keys[lo:hi])

    def _count_run(self) -> None:
        if not self._pending:
            return
        keys = np.concatenate(self._pending) if len(self._pending) > 1 else self._pending[0].copy()
        self._pending = []
        self._batch_distinct += _bin_counts(keys, self._rows, self._looks)
        self._batch_lookups += len(keys)

    def _finish_batch(self) -> None:
        if not self._batch_lookups:
            return
        if self.batch_sums is not None:
            into = self.batch_sums[self._pending_run[0]]
            into[:BINS] += self._rows
            into[BINS : 2 * BINS] += self._looks
            into[2 * BINS] += self._batch_lookups
            into[2 * BINS + 1] += self._batch_distinct
            self._rows[:] = 0
            self._looks[:] = 0
            self._batch_distinct = self._batch_lookups = 0
            return
        self.rows_share_sum += self._rows / self._batch_distinct
        self.lookups_share_sum += self._looks / self._batch_lookups
        self.batches_with_lookups += 1
        self.lookups += self._batch_lookups
        self.distinct += self._batch_distinct
        self._rows[:] = 0
        self._looks[:] = 0
        self._batch_distinct = self._batch_lookups = 0

    def result(self) -> dict[str, Any]:
        """`batch_reuse` (the module docstring); call once every lookup was fed."""
        self._count_run()
        self._finish_batch()
        if self.batch_sums is not None:
            self._fold(self.batch_sums)
        n = max(self.batches_with_lookups, 1)
        batches = max(self.num_batches, 1)
        return {
            "bins": list(BIN_EDGES),
            "rows_share": (self.rows_share_sum / n).tolist(),
            "lookups_share": (self.lookups_share_sum / n).tolist(),
            "lookups_per_batch": self.lookups / batches,
            "distinct_per_batch": self.distinct / batches,
        }

    def flush(self) -> None:
        """Count what is pending into `batch_sums` (after the last lookup of a group)."""
        self._count_run()
        self._finish_batch()
        self._pending_run = (-1, -1)

    def _fold(self, sums: np.ndarray) -> None:
        """The running means from per-batch counts, in batch order, with the very
        operations `_finish_batch` does (so the result is bit-identical)."""
        for b in np.flatnonzero(sums[:, 2 * BINS]).tolist():
            row = sums[b]
            self.rows_share_sum += row[:BINS] / int(row[2 * BINS + 1])
            self.lookups_share_sum += row[BINS : 2 * BINS] / int(row[2 * BINS])
            self.batches_with_lookups += 1
            self.lookups += int(row[2 * BINS])
            self.distinct += int(row[2 * BINS + 1])


SUMS_WIDTH = 2 * BINS + 2  # a batch's row of `BatchReuse(batch_sums=...)`


def reuse_from_sums(sums: np.ndarray, num_batches: int) -> dict[str, Any]:
    """`batch_reuse` from per-batch counts (`BatchReuse(batch_sums=...)`, summed over
    accumulators of disjoint tables)."""
    reuse = BatchReuse([1], num_batches)
    reuse._fold(sums)
    return reuse.result()


def batch_reuse_arrays(
    batch: np.ndarray, table: np.ndarray, row: np.ndarray, table_rows: Sequence[int]
) -> dict[str, Any]:
    """`batch_reuse` of in-memory lookups (trace order)."""
    num_batches = int(np.max(batch)) + 1 if len(batch) else 0
    acc = BatchReuse(table_rows, num_batches)
    acc.feed(batch, table, row)
    return acc.result()


@kernel
def _table_draws(
    root: np.uint64, batch: np.int64, t: np.int64, n: np.int64, ip: np.ndarray,
    fp: np.ndarray, alias_prob: np.ndarray, alias_index: np.ndarray,
) -> np.ndarray:  # fmt: skip
    """Table t's n rank draws in batch `batch`, as `draws.generate_lookups` draws them
    without reuse (`ip`, `fp` and the alias tables: table t's alone, in row 0)."""
    out = np.empty(n, dtype=np.int64)
    key = sampler.stream_key(root, batch, t, sampler.PURPOSE_FRESH)
    for j in range(n):
        draw_key = sampler.mix64(key + np.uint64(j + 1) * sampler.GAMMA)
        out[j] = sampler.draw_rank(draw_key, 0, ip, fp, alias_prob, alias_index)
    return out


def spec_batch_counts(
    spec: WorkloadSpec, batch: int = 0, tables: Sequence[int] | None = None, threads: int = 2
) -> tuple[np.ndarray, np.ndarray, int, int]:
    """(rows per bin, lookups per bin, distinct rows, lookups) of batch `batch` of `spec`,
    over `tables` (all by default), one table at a time (module docstring)."""
    for t in spec.tables:
        if t.reuse > 0.0:
            raise ConfigError(f"{spec.name}: table {t.name} has reuse; a batch needs its history")
    root = sampler.root_key(spec.seed)
    chosen = range(len(spec.tables)) if tables is None else tables

    def one(t: int) -> tuple[np.ndarray, np.ndarray, int, int]:
        table = spec.tables[t]
        st = sampler.build_sampler_tables([table], root)
        n = spec.batch_size * table.pooling
        draws = _table_draws(
            np.uint64(root), batch, t, n, st.iparams, st.fparams, st.alias_prob, st.alias_index
        )
        rows = np.zeros(BINS, dtype=np.int64)
        looks = np.zeros(BINS, dtype=np.int64)
        distinct = _bin_counts(draws, rows, looks)
        return rows, looks, distinct, n

    rows = np.zeros(BINS, dtype=np.int64)
    looks = np.zeros(BINS, dtype=np.int64)
    distinct = lookups = 0
    with worker_pool(max(1, threads), "batch-reuse") as pool:  # interrupt: no wait
        for r, lk, d, n in pool.map(one, chosen):
            rows += r
            looks += lk
            distinct += d
            lookups += n
    return rows, looks, distinct, lookups


def spec_batch_reuse(
    spec: WorkloadSpec, batch: int = 0, tables: Sequence[int] | None = None, threads: int = 2
) -> BatchStats:
    """The locality statistics of batch `batch` of `spec` (over `tables`, all by default),
    streamed table by table (module docstring)."""
    rows, looks, distinct, lookups = spec_batch_counts(spec, batch, tables, threads)
    return BatchStats(
        float(lookups), float(distinct), rows / max(distinct, 1), looks / max(lookups, 1)
    )
