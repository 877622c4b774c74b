"""The sample `replay fit` reads: a trace's lookups split per table, and its shape.

`read_sample` takes at most `max_lookups` lookups (a prefix of whole batches, inside an
optional batch range), checks table and row ids as the engine does, leaves out a last
batch shorter than the others (the remainder of `replay ingest`), and takes the lookups
per batch of each table as constant (their mean, rounded; notes say when they vary), so
that a simulation of the same shape can be generated (`replay.workload.fit`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from replay.errors import ConfigError, TraceError
from replay.trace.keys import bad_lookup_error
from replay.trace.reader import Trace


@dataclass
class Sample:
    """The trace's lookups, split per table, and the shape a simulation copies."""

    names: list[str]
    declared_rows: np.ndarray
    num_batches: int
    batch_size: int
    pooling: np.ndarray  # lookups per batch per table / batch_size
    per_table: list[tuple[np.ndarray, np.ndarray]]  # (batch, row) in trace order
    notes: list[str] = field(default_factory=list)

    @property
    def lookups_per_batch(self) -> np.ndarray:
        return self.pooling * self.batch_size


def read_sample(
    trace: Trace, max_lookups: int, batch_range: tuple[int, int] | None = None
) -> Sample:
    first, last = batch_range if batch_range is not None else (0, trace.num_batches)
    if not 0 <= first < last <= trace.num_batches:
        raise ConfigError(
            f"batch range [{first}, {last}) is not inside the trace's {trace.num_batches} batches"
        )
    notes: list[str] = []
    if batch_range is not None:
        notes.append(f"fitted on batches [{first:,}, {last:,}) of {trace.num_batches:,}")
    stop = last
    in_range = trace.num_lookups * (last - first) // max(trace.num_batches, 1)
    if in_range > max_lookups:
        stop = first + max(1, (last - first) * max_lookups // in_range)
        notes.append(
            f"fitted on the first {stop - first:,} of {last - first:,} batches "
            f"(--max-lookups {max_lookups:,})"
        )
    chunk = trace.lookups(first, stop)
    stop -= first
    num_tables = len(trace.table_names)
    rows_t = trace.table_rows
    t64 = chunk.table.astype(np.int64)
    wrong = (t64 >= num_tables) | (chunk.row >= rows_t[np.minimum(t64, num_tables - 1)])
    if wrong.any():  # the engine's check and message (replay.trace.keys)
        raise bad_lookup_error(str(trace.path), 0, chunk.table, chunk.row, rows_t, chunk.batch)
    batch = chunk.batch.astype(np.int64) - first
    table = t64
    per_batch = np.bincount(batch * num_tables + table, minlength=stop * num_tables).reshape(
        stop, num_tables
    )
    if stop > 1 and (per_batch[-1] < per_batch[:-1].max(axis=0)).any():
        stop -= 1  # a short last batch (ingest's remainder): its shape is not the others'
        keep = batch < stop
        batch, table, row = batch[keep], table[keep], chunk.row[keep]
        per_batch = per_batch[:stop]
        notes.append("the last batch is shorter than the others and is left out")
    else:
        row = chunk.row
    if not len(row):
        raise TraceError(f"{trace.path}: no lookups to fit")
    lookups_t = per_batch.sum(axis=0)
    mean_t = np.rint(lookups_t / stop).astype(np.int64)
    varying = [trace.table_names[t] for t in range(num_tables) if np.ptp(per_batch[:, t]) > 0]
    if varying:
        shown = ", ".join(varying[:5]) + (" ..." if len(varying) > 5 else "")
        notes.append(f"lookups per batch vary in {shown}; the synthetic trace uses their mean")
    mean_t = np.maximum(mean_t, 1)
    batch_size = int(trace.manifest.get("batch_size") or 0)
    if batch_size < 1 or (mean_t % batch_size).any():
        batch_size = int(np.gcd.reduce(mean_t))
    per_table = split_by_table(batch, table, row, num_tables)
    return Sample(
        names=list(trace.table_names),
        declared_rows=trace.table_rows.copy(),
        num_batches=stop,
        batch_size=batch_size,
        pooling=mean_t // batch_size,
        per_table=per_table,
        notes=notes,
    )


def split_by_table(
    batch: np.ndarray, table: np.ndarray, row: np.ndarray, num_tables: int
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per table, its (batch, row) in trace order."""
    order = np.argsort(table, kind="stable")
    bounds = np.searchsorted(table[order], np.arange(num_tables + 1))
    return [
        (batch[order[bounds[t] : bounds[t + 1]]], row[order[bounds[t] : bounds[t + 1]]])
        for t in range(num_tables)
    ]
