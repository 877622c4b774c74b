"""`replay inspect` of a row space too large for one byte of state per row: tables in groups.

`replay.analysis.stats` keeps one state byte per row of the whole row space (a batch tag
and a lookup count): meta-2021's 5.16 G rows take 4.80 GiB, above the 4 GiB that its
887 M-lookup batch must be inspected in (issue 43), and a batch's 128 M distinct rows are
spread over every page of it. Above `replay._memory.INSPECT_TABLE_MAJOR_ROWS` rows,
`inspect_trace` comes here instead, and takes the tables in groups
(`replay._memory.inspect_groups`: consecutive tables, or consecutive pieces of a batch
where the source cuts batches, `plan_pieces`, of at most `INSPECT_GROUP_ROWS` rows):
each group is one pass over every batch, with an `Inspector` (and a `BatchReuse`) of the
group's tables only, whose state is freed before the next group's is allocated.

Why this is exact. Tables never share a row (a flat key is the table's offset plus the
row), so every statistic of a table depends on that table's lookups only, and an
inspector of a group of tables gives each of its tables the same counters, float sums
(in batch order) and top-1% sum as the inspector of all tables. The overall figures are
sums over tables:

- lookups and distinct rows ever: sums of the groups'; the touched curve: the sum of the
  groups' touched counts at the same curve points (a pure function of the batch count);
- the means over batches (distinct per batch, consecutive-batch reuse) are taken of a
  batch's lookups, distinct rows and rows reused from the batch before, each a sum over
  tables: every group adds them to one array of batches x 3 integers
  (`_inspect_runs`' `batch_sums`), which is folded at the end in batch order by the
  very float operations of the one-pass kernel (`_fold_batch_sums`), so the means are
  bit-identical;
- the overall top-1% sum is taken from the histogram of all rows' counts (the sum of
  the groups' histograms) and the counts kept apart (the union of the groups');
- the reuse within a batch in Meta's bins: each group adds its per-batch bins to one
  array of batches x 34 integers (`BatchReuse(batch_sums=...)`), folded in batch order.

Why groups of tables and not a hash map of the touched rows. A map of meta-2021's 128 M
touched rows (a key and a state byte, at a load of 1/2) is 2 GiB and grows with the
rows a trace touches, and its probes are slower than an indexed byte; the groups reuse
the one-pass kernel unchanged, with a state bounded by `INSPECT_GROUP_ROWS` whatever the
trace. The cost is a read of the lookups per group: on the fly only the group's tables
are generated (draws are a pure function of (spec, seed, batch, table, position),
`GeneratedTrace.iter_table_lookups`), and from a trace folder whose row groups are pieces
of tables only the group's row groups are read (`Trace.iter_table_lookups`, from the
footer counts), so either way the lookups are made or read about once in all; a trace
whose row groups hold every table is read once per group.

Errors: a lookup out of range or out of order raises TraceError as in the one pass, but
the one reported may be another than the first in trace order (groups come in turn).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from replay import _memory
from replay._threads import read_ahead
from replay.analysis.batch_reuse import SUMS_WIDTH, BatchReuse, reuse_from_sums
from replay.analysis.stats_kernels import _G_TOUCHED, _GI_WIDTH, _fold_batch_sums
from replay.errors import TraceError
from replay.trace.keys import DEFAULT_CURVE_POINTS, curve_batches

if TYPE_CHECKING:
    from replay.trace.reader import LookupChunk, Trace
    from replay.workload.onthefly import GeneratedTrace


def _picked(
    chunk: LookupChunk, tables: tuple[int, int], num_tables: int, last: int, where: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The chunk's lookups of tables [t0, t1), tables numbered from t0. Checks what the
    group's inspector cannot see: every lookup's table in range, and the chunk's batches
    in order (after `last`, the batch of the chunk before)."""
    batch, table, row = chunk.batch, chunk.table, chunk.row
    if len(batch) and (int(batch[0]) < last or np.any(batch[1:] < batch[:-1])):
        i = 0 if int(batch[0]) < last else int(np.flatnonzero(batch[1:] < batch[:-1])[0]) + 1
        before = last if i == 0 else int(batch[i - 1])
        raise TraceError(
            f"{where}: lookup (batch {int(batch[i])}, table {int(table[i])}, row "
            f"{int(row[i])}): lookups are not sorted by batch (batch {before} came first)"
        )
    t0, t1 = tables
    inside = (table >= t0) & (table < t1)
    if not inside.all():
        bad = np.flatnonzero(table >= num_tables)
        if len(bad):
            i = int(bad[0])
            raise TraceError(
                f"{where}: lookup (batch {int(batch[i])}, table {int(table[i])}, row "
                f"{int(row[i])}): table index {int(table[i])} is out of range (the trace "
                f"has {num_tables} tables)"
            )
        batch, table, row = batch[inside], table[inside], row[inside]
    # numbered within the group (uint16, as the trace's column)
    return batch, (table - np.uint16(t0)).astype(np.uint16, copy=False), row


def _combined(parts: list[Any], batch_sums: np.ndarray) -> Any:
    """One inspector's parts (`stats.InspectParts`) from those of groups of tables (the
    module docstring)."""
    gi = np.zeros(_GI_WIDTH, dtype=np.int64)
    gi[_G_TOUCHED] = sum(int(p.gi[_G_TOUCHED]) for p in parts)
    gf = np.zeros(2, dtype=np.float64)
    _fold_batch_sums(batch_sums, gi, gf)
    true = np.concatenate([p.true for p in parts])
    return dataclasses.replace(
        parts[0],
        ti=np.concatenate([p.ti for p in parts]),
        tf=np.concatenate([p.tf for p in parts]),
        gi=gi,
        gf=gf,
        curve_val=np.sum([p.curve_val for p in parts], axis=0, dtype=np.int64),
        top_tables=[s for p in parts for s in p.top_tables],
        hist=np.sum([p.hist for p in parts], axis=0, dtype=np.int64),
        true=np.sort(true)[::-1],  # largest first; the top sums take values, not rows
    )


def inspect_table_major(
    trace: Trace | GeneratedTrace,
    inspector_class: Callable[..., Any],
    statistics: Callable[..., dict[str, Any]],
    *,
    curve_points: int = DEFAULT_CURVE_POINTS,
    batch_reuse: bool = False,
    on_progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """`inspect_trace`'s result, table group by table group (the module docstring);
    on_progress(done, groups x batches) after each chunk, done counting the batches of
    the groups before.
    `inspector_class` and `statistics` are `replay.analysis.stats`' `Inspector` and
    `statistics`, passed in by its `inspect_trace`: that module comes here, so this one
    does not import it back."""
    rows = np.asarray(trace.table_rows, dtype=np.int64)
    names = list(trace.table_names)
    num_batches = int(trace.num_batches)
    where = str(trace.path)
    pieces = tuple(getattr(trace, "pieces", ()) or ())
    groups = _memory.inspect_groups(rows.tolist(), pieces)
    batch_sums = np.zeros((num_batches, 3), dtype=np.int64)
    reuse_sums = np.zeros((num_batches, SUMS_WIDTH), dtype=np.int64) if batch_reuse else None
    parts: list[Any] = []
    total = len(groups) * num_batches
    for g, (t0, t1) in enumerate(groups):
        inspector = inspector_class(
            rows[t0:t1],
            num_batches,
            curve_points=curve_points,
            names=names[t0:t1],
            where=where,
            first_table=t0,
        )
        inspector.batch_sums = batch_sums
        reuse = (
            BatchReuse(rows[t0:t1], num_batches, batch_sums=reuse_sums)
            if reuse_sums is not None
            else None
        )
        last = 0
        for chunk in read_ahead(trace.iter_table_lookups((t0, t1))):
            batch, table, row = _picked(chunk, (t0, t1), len(rows), last, where)
            last = int(chunk.batch[-1])
            inspector.feed(batch, table, row)
            if reuse is not None:
                reuse.feed(batch, table, row)
            if on_progress is not None:
                on_progress(g * num_batches + last, total)
        if reuse is not None:
            reuse.flush()
        parts.append(inspector.finish())
        del inspector, reuse  # the group's state goes before the next one's comes
    curve_x = curve_batches(num_batches, curve_points)
    result = {
        "trace": where,
        **statistics(names, rows, num_batches, curve_x, _combined(parts, batch_sums)),
    }
    if getattr(trace, "steps_every_batch", False):
        # on the fly with a step every batch, a batch's update rows are its distinct rows
        result["updates"] = int(batch_sums[:, 1].sum())
    else:
        result["updates"] = trace.num_updates
    if reuse_sums is not None:
        result["batch_reuse"] = reuse_from_sums(reuse_sums, num_batches)
    if on_progress is not None:
        on_progress(total, total)
    return result
