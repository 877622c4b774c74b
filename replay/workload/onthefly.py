"""On-the-fly workloads: a workload spec read like a trace folder, generated as it is read.

`GeneratedTrace(spec)` offers what the engine, `replay mrc` and the statistics read from
a `replay.trace.reader.Trace` (shape, `iter_lookups`, `iter_updates`, the replay
stream's batch ranges) without writing anything: each row group of the layout that
`replay generate` would write (`plan_files`; `RowGroups` computes them) is sampled in
memory when it is read.
Because every draw is a pure function of (spec, seed, batch, table, position) and row
groups hold whole gradient-accumulation windows, the lookups and update rows are exactly
those of the generated trace, so a replay gives the same results (tests check it).

Threads: row groups are made by a pool of `threads` threads (numba kernels that release
the GIL), in order, up to `threads + AHEAD` row groups ahead of the consumer. For the
replay stream a task also makes the flat keys, batch bounds, update keys and distinct
counts (in one pass with a step every batch; else with a per-thread bitmap), so the
caller's thread only runs the policy. A piece of a batch with a step every batch is made
from its rows alone (`piece_keys`: its tables are runs the spec fixes, so no batch or
table column is written), into a rows buffer and a bitmap each thread keeps.

Memory: the row groups in flight (about 1 M lookups each, ~40 MB with their keys and
update rows) plus one bitmap of 1 bit per row per thread; never the number of batches.
A batch too large for a row group (meta-2021: 887 M lookups) is a row group of its own,
which a reader that asks (`pieces=True`) gets in pieces of tables instead
(`replay.trace.format.plan_pieces`, a row group of `replay generate` each): then the
pieces are in flight, never the batch.
An oracle policy (`hot` without warm-up, `belady`, `chunk` with furthest-next-use)
generates the workload twice: once for its pass over the future, once to replay.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, overload

import numpy as np

from replay._intrinsics import PREFETCH_AHEAD, ix, prefetch
from replay._jit import kernel
from replay._threads import wait_for, worker_pool
from replay.trace.format import FORMAT_VERSION, largest_piece, piece_groups
from replay.trace.keys import table_offsets
from replay.trace.reader import LookupChunk, UpdateChunk
from replay.workload.generator import CompiledWorkload, plan_layout
from replay.workload.spec import WorkloadSpec

if TYPE_CHECKING:
    from replay.trace.stream import BatchRange

AHEAD = 2  # row groups made beyond one per thread, so no thread waits on the consumer
Item = TypeVar("Item")
Tables = tuple[int, int] | None  # a piece's table range [t0, t1), or None: every table
Piece = tuple[int, int, Tables]  # (g0, g1, tables): a row group or a piece of one


class RowGroups(Sequence[tuple[int, int]]):
    """The row groups [g0, g1) of a layout, computed, not listed: files of `per_file`
    batches, each cut into groups of `per_group` (the last of a file may be shorter).

    A list of them costs ~200 B a group: 1.5 GB for a run of 7.2 M batches of one group
    each, which a plan of a production-size workload held for nothing (issue 39)."""

    def __init__(self, batches: int, per_file: int, per_group: int) -> None:
        self.batches = max(0, int(batches))
        self.per_file = max(1, int(per_file))
        self.per_group = max(1, min(int(per_group), self.per_file))
        self._in_file = -(-self.per_file // self.per_group)  # groups in a whole file

    def __len__(self) -> int:
        whole, rest = divmod(self.batches, self.per_file)
        return whole * self._in_file + -(-rest // self.per_group)

    def _group(self, i: int) -> tuple[int, int]:
        f, j = divmod(i, self._in_file)
        start = f * self.per_file + j * self.per_group
        stop = min(start + self.per_group, (f + 1) * self.per_file, self.batches)
        return start, stop

    def _index(self, batch: int) -> int:
        """The index of the group holding `batch` (in [0, batches))."""
        f, within = divmod(batch, self.per_file)
        return f * self._in_file + within // self.per_group

    @overload
    def __getitem__(self, i: int) -> tuple[int, int]: ...
    @overload
    def __getitem__(self, i: slice) -> list[tuple[int, int]]: ...
    def __getitem__(self, i: int | slice) -> tuple[int, int] | list[tuple[int, int]]:
        if isinstance(i, slice):
            return [self._group(k) for k in range(*i.indices(len(self)))]
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("row group index out of range")
        return self._group(i)

    def __iter__(self) -> Iterator[tuple[int, int]]:
        for i in range(len(self)):
            yield self._group(i)

    def __eq__(self, other: object) -> bool:  # as the list it stands for
        if isinstance(other, RowGroups | list | tuple):
            return len(self) == len(other) and list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # unhashable, as the list it stands for

    def __repr__(self) -> str:
        shape = f"batches={self.batches}, per_file={self.per_file}, per_group={self.per_group}"
        return f"RowGroups({shape})"

    def meeting(self, start: int, stop: int) -> list[tuple[int, int]]:
        """The groups with g1 > start and g0 < stop, in order (found, not scanned for)."""
        lo, hi = max(0, int(start)), min(self.batches, int(stop))
        if lo >= self.batches or hi <= 0:
            return []
        first, last = self._index(lo), self._index(hi - 1)
        return [self._group(i) for i in range(first, last + 1)]


class GeneratedTrace:
    """A workload spec, read as a trace whose batches are generated when read."""

    def __init__(self, spec: WorkloadSpec, *, threads: int | None = None) -> None:
        if threads is None:
            threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
        self.spec = spec
        self.threads = max(1, int(threads))
        self.compiled = CompiledWorkload.from_spec(spec)
        self.layout = plan_layout(spec.lookups_per_batch, spec.update.accumulate_batches)
        # the table ranges a batch is cut into where it is too large for a row group
        # (`plan_pieces`), for the readers that ask (`pieces=True`); () for whole batches
        self.pieces = self.compiled.pieces
        self.row_groups: Sequence[tuple[int, int]] = RowGroups(
            spec.batches, self.layout["batches_per_file"], self.layout["batches_per_row_group"]
        )
        self.manifest: dict[str, Any] = {
            "format_version": FORMAT_VERSION,
            "created_by": "on-the-fly",
            "batches": spec.batches,
            "batch_size": spec.batch_size,
            "lookups": spec.lookups,
            "row_dtype": self.compiled.row_dtype.name,
            "tables": [{"name": t.name, "rows": t.rows} for t in spec.tables],
            "layout": self.layout,
            "workload": spec.to_dict(),
        }

    # -- description (as `Trace`) ---------------------------------------------------------
    @property
    def path(self) -> Path:
        """A label in place of a folder (nothing is written): `workload:NAME`."""
        return Path(f"workload:{self.spec.name}")

    @property
    def steps_every_batch(self) -> bool:
        """A step every batch and no frozen table: each batch's update rows are its
        distinct lookups, so a replay stream needs no distinct-row bitmap."""
        return self.spec.update.accumulate_batches == 1 and not any(
            t.frozen for t in self.spec.tables
        )

    @property
    def num_batches(self) -> int:
        return self.spec.batches

    @property
    def num_lookups(self) -> int:
        return self.spec.lookups

    @cached_property
    def num_updates(self) -> int:
        """Update rows: counted by generating the workload once (only oracles ask)."""
        chunks = self._chunks(0, self.num_batches, updates=True, pieces=True)
        return sum(len(u) for _, u in chunks if u)

    @property
    def table_names(self) -> list[str]:
        return [t.name for t in self.spec.tables]

    @cached_property
    def table_rows(self) -> np.ndarray:
        return np.array([t.rows for t in self.spec.tables], dtype=np.int64)

    @property
    def row_dtype(self) -> np.dtype:
        return self.compiled.row_dtype

    @property
    def workload(self) -> dict[str, Any]:
        return self.manifest["workload"]

    def digest(self) -> str:
        """SHA-256 of the spec's canonical JSON: what identifies the generated batches."""
        text = json.dumps(self.workload, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    def __repr__(self) -> str:
        return (
            f"GeneratedTrace({self.spec.name!r}, batches={self.num_batches}, "
            f"lookups={self.num_lookups}, tables={len(self.spec.tables)})"
        )

    # -- streaming ------------------------------------------------------------------------
    def _groups(self, start: int, stop: int) -> list[tuple[int, int]]:
        if isinstance(self.row_groups, RowGroups):
            return self.row_groups.meeting(start, stop)
        return [(g0, g1) for g0, g1 in self.row_groups if g1 > start and g0 < stop]

    def _items(self, start: int, stop: int, pieces: bool) -> Iterator[Piece]:
        """(g0, g1, tables) of every row group meeting [start, stop): tables None, or with
        `pieces` where batches are cut, one item per (batch, piece) in trace order."""
        return piece_groups(self._groups(start, stop), self.pieces if pieces else ())

    def _ordered(
        self,
        work: Callable[[int, int, Tables], Item],
        start: int,
        stop: int,
        pieces: bool = False,
        items: Iterator[Piece] | None = None,
    ) -> Iterator[Item]:
        """work(g0, g1, tables) of every row group (or piece: `_items`) meeting [start,
        stop), or of `items`, in order, in the pool."""
        groups = self._items(start, stop, pieces) if items is None else items
        if self.threads == 1:
            for g0, g1, tables in groups:
                yield work(g0, g1, tables)
            return
        # an interrupt abandons the row groups in flight (`worker_pool`); the main
        # thread waits in slices, so it runs the signal's handler (`wait_for`)
        with worker_pool(self.threads, "on-the-fly") as pool:
            pending: deque[Future[Item]] = deque()
            try:
                for g0, g1, tables in groups:
                    pending.append(pool.submit(work, g0, g1, tables))
                    if len(pending) >= self.threads + AHEAD:
                        yield wait_for(pending.popleft())
                while pending:
                    yield wait_for(pending.popleft())
            finally:
                for future in pending:
                    future.cancel()

    def _lookups(self, g0: int, g1: int, lo: int, hi: int, tables: Tables = None) -> LookupChunk:
        """Lookups of row group [g0, g1) (of its `tables` only), cut to [lo, hi)."""
        c = self.compiled
        lookups = LookupChunk(
            g0, g1, *(c.lookups(g0, g1) if tables is None else c.lookups(g0, g1, tables))
        )
        return lookups if (lo, hi) == (g0, g1) else _cut(lookups, lo, hi)

    def _make(
        self, g0: int, g1: int, start: int, stop: int, updates: bool, tables: Tables = None
    ) -> tuple[LookupChunk, UpdateChunk | None]:
        """Lookups (and update rows) of row group [g0, g1) (of its `tables` only: a
        piece, whose update rows are its own), cut to [start, stop)."""
        c = self.compiled
        batch, table, row = c.lookups(g0, g1) if tables is None else c.lookups(g0, g1, tables)
        lookups = LookupChunk(g0, g1, batch, table, row)
        chunk = UpdateChunk(g0, g1, *c.updates(batch, table, row, g0, g1)) if updates else None
        lo, hi = max(g0, start), min(g1, stop)
        if (lo, hi) != (g0, g1):
            lookups = _cut(lookups, lo, hi)
            chunk = None if chunk is None else _cut(chunk, lo, hi)
        return lookups, chunk

    def _chunks(
        self, start: int, stop: int, *, updates: bool, pieces: bool = False
    ) -> Iterator[tuple[LookupChunk, UpdateChunk | None]]:
        yield from self._ordered(
            lambda g0, g1, tables: self._make(g0, g1, start, stop, updates, tables),
            start,
            stop,
            pieces,
        )

    def map_lookups(
        self, work: Callable[[LookupChunk], Item], start: int = 0, stop: int | None = None
    ) -> Iterator[Item]:
        """work(lookups of one row group) for each row group of [start, stop), in order;
        generation and `work` run together in the pool's threads (numba releases the GIL)."""
        stop = self.num_batches if stop is None else min(stop, self.num_batches)
        yield from self._ordered(
            lambda g0, g1, _: work(self._make(g0, g1, start, stop, False)[0]), start, stop
        )

    def iter_lookups(
        self,
        start: int = 0,
        stop: int | None = None,
        *,
        min_lookups: int = 1,
        use_threads: bool = True,
        pieces: bool = False,
    ) -> Iterator[LookupChunk]:
        """Lookups of batches [start, stop), one row group (~1 M lookups) per chunk.

        `min_lookups` and `use_threads` are accepted for `Trace`'s signature; chunks
        hold whole batches, unless `pieces` asks for a large batch in pieces of tables
        (`plan_pieces`: a chunk then holds some tables of one batch, in trace order).
        """
        stop = self.num_batches if stop is None else min(stop, self.num_batches)
        for lookups, _ in self._chunks(start, stop, updates=False, pieces=pieces):
            if len(lookups):
                yield lookups

    def iter_table_lookups(self, tables: tuple[int, int]) -> Iterator[LookupChunk]:
        """The lookups of tables [t0, t1) only, of every batch, in trace order (the
        table-major pass of `replay inspect`, `replay.analysis.table_major`): per row
        group, or where batches are cut, per batch and piece of the range (which then
        starts and ends between pieces). Draws depend on (batch, table, position) only,
        so they are the lookups of those tables in `iter_lookups`."""
        t0, t1 = tables

        def items() -> Iterator[Piece]:
            for g0, g1 in self._groups(0, self.num_batches):
                if not self.pieces:
                    yield g0, g1, (t0, t1)
                    continue
                for b in range(g0, g1):
                    for p0, p1 in self.pieces:
                        if t0 <= p0 and p1 <= t1:
                            yield b, b + 1, (p0, p1)

        work = lambda g0, g1, part: self._lookups(g0, g1, g0, g1, part)  # noqa: E731
        for lookups in self._ordered(work, 0, self.num_batches, items=items()):
            if len(lookups):
                yield lookups

    def iter_updates(
        self,
        start: int = 0,
        stop: int | None = None,
        *,
        min_rows: int = 1,
        use_threads: bool = True,
        with_count: bool = True,
    ) -> Iterator[UpdateChunk]:
        """Update rows of batches [start, stop), one row group per chunk."""
        stop = self.num_batches if stop is None else min(stop, self.num_batches)
        for _, chunk in self._chunks(start, stop, updates=True):
            if chunk is not None and len(chunk):
                yield chunk

    @cached_property
    def piece_lookups(self) -> int:
        """The lookups of the largest piece of a batch, or 0 where batches are whole."""
        return largest_piece(self.compiled.table_lookups, self.pieces)

    @property
    def updates_are_lookups(self) -> bool:
        """Each batch's update rows are its distinct lookups (as `Trace`'s)."""
        return self.steps_every_batch

    def generated_ranges(
        self,
        start: int,
        stop: int,
        *,
        with_updates: bool,
        with_distinct: bool,
        updates_from_lookups: bool = False,
        pieces: bool = False,
    ) -> Iterator[BatchRange]:
        """The replay stream's `BatchRange`s of [start, stop), one per row group, or per
        piece of a batch with `pieces` (`iter_batch_ranges` says what `updates_from_lookups`
        and `pieces` ask)."""
        from replay.trace.keys import batch_bounds
        from replay.trace.stream import BatchRange, build_range, distinct_bitmap
        from replay.trace.updates import step_keys

        offsets = self._offsets
        local = threading.local()
        # With a step every batch and no frozen table, batch b's update rows are exactly
        # its distinct (table, row) pairs (`replay.trace.updates`): one kernel makes the
        # flat keys and the update keys (`step_keys`: 5 ns per lookup against 9 for the
        # update sets' four columns and two flat-key passes), and the update keys' count
        # per batch is the distinct count (no bitmap pass, a random touch of 1 bit per
        # row per lookup: 7 ns).
        fused = with_updates and self.steps_every_batch
        no_frozen = np.zeros(len(self.spec.tables), dtype=np.bool_)
        dtype = self._key_dtype
        num_tables = len(self.spec.tables)

        def work(g0: int, g1: int, tables: Tables) -> BatchRange:
            piece: dict[str, Any] = (
                {} if tables is None else {"tables": tables, "ends_batch": tables[1] == num_tables}
            )
            made = None if not fused or tables is None else self._piece_keys(g0, tables, local)
            if made is not None:
                keys, ukeys, ubounds = made
                return BatchRange(
                    g0, g0 + 1, keys, np.array([0, len(keys)], dtype=np.int64), ukeys, ubounds,
                    np.diff(ubounds) if with_distinct else None,
                    updates_are_lookups=updates_from_lookups, **piece,
                )  # fmt: skip
            if fused:
                lo, hi = max(g0, start), min(g1, stop)
                lookups = self._lookups(g0, g1, lo, hi, tables)
                bounds = batch_bounds(lookups.batch, lo, hi)
                keys, ukeys, ubounds = step_keys(
                    lookups.table, lookups.row, bounds, offsets, no_frozen, dtype
                )
                distinct = np.diff(ubounds) if with_distinct else None
                return BatchRange(
                    lo, hi, keys, bounds, ukeys, ubounds, distinct,
                    updates_are_lookups=updates_from_lookups, **piece,
                )  # fmt: skip
            lookups, chunk = self._make(g0, g1, start, stop, with_updates, tables)
            seen = None
            if with_distinct:
                seen = getattr(local, "seen", None)
                if seen is None:
                    seen = local.seen = distinct_bitmap(int(offsets[-1]))
            r = build_range(
                lookups.batch_start, lookups.batch_stop, offsets,
                lookups.batch, lookups.table, lookups.row,
                None if chunk is None else chunk.batch,
                None if chunk is None else chunk.table,
                None if chunk is None else chunk.row,
                seen,
            )  # fmt: skip
            return replace(r, **piece) if piece else r

        yield from self._ordered(work, start, stop, pieces)

    def _piece_keys(
        self, batch: int, tables: tuple[int, int], local: threading.local
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """(flat keys, distinct keys in first-seen order, update bounds [0, distinct]) of
        one piece of a batch with a step every batch: `step_keys` of `lookups(batch,
        batch + 1, tables)`, made from the rows alone (the table of each lookup is a run
        the spec fixes) into buffers the thread keeps; None where the piece's keys span
        more than a bitmap as large as `step_keys`' set (it then hashes them instead), and
        where a subclass draws its own lookups (`replay.workload.sampled`)."""
        if type(self.compiled) is not CompiledWorkload:  # a subclass's own lookups
            return None
        t0, t1 = tables
        offsets = self._offsets
        counts = self.compiled.table_lookups[t0:t1]
        n = int(counts.sum())
        first, span = int(offsets[t0]), int(offsets[t1] - offsets[t0])
        if span > 64 << max(4, (2 * n).bit_length()):
            return None
        rows = getattr(local, "rows", None)
        if rows is None or len(rows) < n:
            # the largest piece at once: a thread makes every piece in the one buffer
            local.rows = rows = np.empty(max(n, self.piece_lookups), self.compiled.row_dtype)
        seen = getattr(local, "piece_seen", None)
        if seen is None or 8 * len(seen) < span:
            local.piece_seen = seen = np.zeros((span + 7) // 8, dtype=np.uint8)
        row = self.compiled.batch_rows(batch, tables, out=rows)
        keys = np.empty(n, dtype=self._key_dtype)
        ukeys = np.empty(n, dtype=self._key_dtype)
        distinct = piece_keys(row, counts, offsets[t0:t1], first, seen, keys, ukeys)
        return keys, ukeys[:distinct], np.array([0, distinct], dtype=np.int64)

    @cached_property
    def _offsets(self) -> np.ndarray:
        return table_offsets(self.table_rows)

    @cached_property
    def _key_dtype(self) -> np.dtype:
        from replay.trace.keys import key_dtype

        return key_dtype(int(self._offsets[-1]))


@kernel
def piece_keys(
    row: np.ndarray,
    counts: np.ndarray,
    offsets: np.ndarray,
    first: np.int64,
    seen: np.ndarray,
    keys: np.ndarray,
    ukeys: np.ndarray,
) -> int:
    """keys[i] = offsets[k] + row[i] for the counts[k] lookups of the k-th table, one
    table after another; ukeys: the distinct keys in first-seen order, counted by a bit
    per key from `first` in `seen` (zero between calls: what is set is cleared). What
    `replay.trace.updates.step_keys` makes of one batch without frozen tables, from the
    table ids these runs stand for. Returns the distinct count."""
    out = 0
    i = 0
    for t in range(len(counts)):
        base = offsets[t] - first
        end = i + counts[t]
        for j in range(i, end):
            if j + PREFETCH_AHEAD < end:
                prefetch(seen, (base + np.int64(row[ix(j + PREFETCH_AHEAD)])) >> 3)
            d = base + np.int64(row[ix(j)])
            k = d + first
            keys[ix(j)] = k
            byte = seen[ix(d >> 3)]
            bit = np.uint8(1) << np.uint8(d & 7)
            seen[ix(d >> 3)] = byte | bit
            ukeys[ix(out)] = k
            out += (byte & bit) == 0
        i = end
    for at in range(out):  # a whole byte: its other keys are this piece's
        seen[ix((np.int64(ukeys[ix(at)]) - first) >> 3)] = 0
    return out


def _cut(chunk: Any, lo: int, hi: int) -> Any:
    """The rows of a Lookup/UpdateChunk whose batch is in [lo, hi)."""
    edges = np.searchsorted(chunk.batch, np.array([lo, hi], dtype=chunk.batch.dtype))
    a, b = int(edges[0]), int(edges[1])
    fields = {
        name: getattr(chunk, name)[a:b]
        for name in ("batch", "table", "row", "count")
        if hasattr(chunk, name)
    }
    return type(chunk)(lo, hi, **fields)


def open_workload(
    workload: WorkloadSpec | str | Path,
    *,
    batches: int | None = None,
    batch_size: int | None = None,
    seed: int | None = None,
    alpha: float | None = None,
    drift: float | None = None,
    reuse: float | None = None,
    threads: int | None = None,
) -> GeneratedTrace:
    """A preset name, TOML spec path or spec, with `replay generate`'s overrides."""
    from replay.workload.generator import resolve_workload

    spec = resolve_workload(workload).with_overrides(
        batches=batches, batch_size=batch_size, seed=seed, alpha=alpha, drift=drift, reuse=reuse
    )
    return GeneratedTrace(spec, threads=threads)


__all__ = ["GeneratedTrace", "open_workload"]
