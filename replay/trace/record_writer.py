"""The streaming writer behind `replay.record` and `replay record merge`: recorded batches
and optimizer steps in, a trace folder out (`replay.trace.format`).

What it is given: per batch, each table's looked-up row ids in the order the model looked
them up (several parts per table are kept in the order given, stable by table); and the
optimizer steps, in order between the batches. What it writes:

- lookups: batch b's rows sorted by table, in lookup order inside a table;
- updates: a step lands on the last batch recorded before it and covers every batch since
  the previous step (gradient accumulation: the union of those batches' rows, `count` the
  lookups folded into each); its rows are each table's distinct rows in order of first
  touch, tables in order, frozen tables none, as `replay.trace.updates` defines them for
  generated traces (so a step every batch gives exactly `generate`'s update sets). A step
  with no batch since the previous one writes nothing; batches after the last step take
  none (as training that stops mid-window).

Threads: the caller's thread only queues the batches (already copied out of the model's
tensors) and the steps; a writer thread sorts, computes the update sets (the numba kernel
of `replay.trace.updates`, which releases the GIL), encodes and writes the row groups. The
queue holds at most `QUEUE_ITEMS` items, so a writer that falls behind slows the training
down instead of holding an unbounded backlog (bounded memory). Measured at batch 65,536 of
Criteo Kaggle's 26 tables (1.7 M lookups a batch, 2-core VM under load): 12 ms a batch
on the training's thread (the ids' copies), 120 ms of CPU a batch on the writer thread,
against a CPU training step of 7.5 to 9 s (`tests/test_record.py`, bench).

Row groups: about `ROW_GROUP_TARGET_LOOKUPS` lookups of whole batches (the batches per
group planned from the first batch, as the FBGEMM ingester does), closed at a step, so a
row group holds whole accumulation windows; a window longer than 4 groups is cut anyway
(its step lands in a later group). Memory: the open group, the current window's lookups
(held until its step; beyond `COMPACT_LOOKUPS` they are folded into their distinct rows
with counts, which a table's rows bound) and the queue (the ids as the model gave them,
int64: 14 MB a batch of Criteo Kaggle's 26 tables at batch 65,536).

Atomicity (`replay.trace.writer.TraceFolderWriter`): parts go into `.NAME.partial/` under
temporary names; `close` writes the manifest and renames the folder into place, so a
process killed outright leaves no folder any command reads as a trace; `close` after an
exception in the training keeps the batches completed so far (a valid shorter trace);
`abort` removes everything.
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from replay import _arrow
from replay.errors import InputError
from replay.trace.format import (
    KINDS,
    LOOKUPS_DIR,
    MAX_BATCH_SIZE,
    MAX_TABLES,
    ROW_GROUPS_PER_FILE,
    UPDATES_DIR,
    build_manifest,
    lookups_schema,
    plan_layout,
    row_dtype_for,
    updates_schema,
)
from replay.trace.updates import update_sets
from replay.trace.writer import TraceFolderWriter, write_parts

QUEUE_ITEMS = 4  # batches or steps in flight between the training and the writer thread
COMPACT_LOOKUPS = 1 << 24  # a window's raw lookups beyond this are folded (16 Mi: 160 MB)
_END = object()
_STEP = object()


@dataclass(frozen=True)
class RecordedTable:
    """One table of a recorded model: its trace name, rows, dimension and whether the
    training updates it."""

    name: str
    rows: int
    dim: int
    frozen: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "rows": self.rows, "dim": self.dim, "frozen": self.frozen}


Part = tuple[int | np.ndarray, np.ndarray]  # (table index or per-lookup tables, row ids)


def step_runs(steps: Sequence[int]) -> list[list[int]]:
    """Step batches as runs [first, last, every] (the manifest's `source.steps`)."""
    runs: list[list[int]] = []
    for b in steps:
        if runs:
            first, last, every = runs[-1]
            if first == last and b > last:
                runs[-1] = [first, b, b - first]
                continue
            if b - last == every:
                runs[-1][1] = b
                continue
        runs.append([int(b), int(b), 1])
    return runs


def steps_from_runs(runs: Any, where: str) -> list[int]:
    """The step batches of `step_runs`' output, checked (a TraceError-free InputError)."""
    try:
        steps = [b for first, last, every in runs for b in range(first, last + 1, every)]
        if any(type(x) is not int for run in runs for x in run):
            raise TypeError("not whole numbers")
    except (TypeError, ValueError) as exc:
        raise InputError(
            f"{where}: source.steps is not a list of [first, last, every] ({exc})"
        ) from None
    if any(b < 0 for b in steps) or any(a >= b for a, b in itertools.pairwise(steps)):
        raise InputError(f"{where}: source.steps are not increasing batch numbers")
    return steps


class RecordWriter:
    """Batches and steps in (from one thread), a trace folder out (see the module)."""

    def __init__(
        self,
        out: str | Path,
        tables: Sequence[RecordedTable],
        *,
        created_by: str,
        source: dict[str, Any],
        force: bool = False,
    ) -> None:
        if not tables:
            raise InputError("the model has no embedding tables to record")
        if len(tables) > MAX_TABLES:
            raise InputError(f"{len(tables):,} tables; a trace holds at most {MAX_TABLES:,}")
        self.out = Path(out)
        self.tables = list(tables)
        self.rows = np.array([t.rows for t in tables], dtype=np.int64)
        self.frozen = np.array([t.frozen for t in tables], dtype=np.bool_)
        self.row_dtype = row_dtype_for(int(self.rows.max()))
        self.created_by = created_by
        self.source = source
        self.batches = 0  # queued so far (the training's side)
        self.written = 0  # taken by the writer thread: the manifest's count
        self.batch_size = 0
        self.steps: list[int] = []  # the batches steps landed on (the writer's side)
        self._open_window = False  # a batch queued since the last step
        self.error: BaseException | None = None
        plan = {"created_by": created_by, "tables": [t.to_dict() for t in tables]}
        self._writer = TraceFolderWriter(self.out, plan, force=force, resume=None)
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=QUEUE_ITEMS)
        self._files: dict[str, list[dict[str, Any]]] = {kind: [] for kind in KINDS}
        self._layout: dict[str, int] | None = None
        self._lookups = 0
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="replay-record", daemon=True)
        self._thread.start()

    # -- the caller's side ------------------------------------------------------------

    def add_batch(self, parts: Sequence[Part], samples: int) -> None:
        """Queue one batch: `parts` of (table index, row ids) in lookup order (arrays the
        writer may keep: copies, not views of the model's tensors); `samples` its size."""
        self._check()
        self.batch_size = max(self.batch_size, int(samples))
        self._put(parts)
        self.batches += 1
        self._open_window = True

    def step(self) -> None:
        """An optimizer step after the batches queued so far."""
        self._check()
        if self._open_window:  # else nothing to update (the writer would skip it too)
            self._open_window = False
            self._put(_STEP)

    def close(self, *, workload_name: str = "recorded") -> Path:
        """Write what was queued, the manifest, and move the trace into place."""
        if self._closed:
            raise RuntimeError("closed already")
        self._closed = True
        try:
            self._put(_END)
            self._thread.join()
            if self.error is not None:
                raise self.error
            if self.written == 0:
                raise InputError(
                    f"{self.out}: no batch was recorded (the model's forward never ran with "
                    "gradients enabled inside the recording), so no trace was written"
                )
            return self._writer.finish(self._manifest(workload_name))
        except BaseException:
            self._writer.abort()
            raise

    def abort(self) -> None:
        """Stop the writer and remove everything written."""
        if self._closed:
            return
        self._closed = True
        self.error = self.error or InputError("aborted")
        while self._thread.is_alive():
            try:
                self._queue.put(_END, timeout=0.05)
                break
            except queue.Full:
                self._drain()
        self._thread.join()
        self._writer.abort()

    def _check(self) -> None:
        if self._closed:
            raise RuntimeError("the recording is closed")
        if self.error is not None:
            raise self.error

    def _put(self, item: Any) -> None:
        while True:
            try:
                self._queue.put(item, timeout=0.1)
                return
            except queue.Full:
                if self.error is not None or not self._thread.is_alive():
                    raise self.error or RuntimeError("the writer thread stopped") from None

    def _drain(self) -> None:
        try:
            while True:
                self._queue.get_nowait()
        except queue.Empty:
            pass

    # -- the writer thread --------------------------------------------------------------

    def _run(self) -> None:
        try:
            groups = _Peek(self._groups())
            part = 0
            schemas = {
                LOOKUPS_DIR: lookups_schema(self.row_dtype),
                UPDATES_DIR: updates_schema(self.row_dtype),
            }
            while groups.head is not None:
                spans: list[tuple[int, int]] = []
                entries = write_parts(
                    self._writer.partial, part, schemas, groups.take(ROW_GROUPS_PER_FILE, spans)
                )
                for kind in KINDS:
                    self._files[kind].append(
                        {**entries[kind], "batch_start": spans[0][0], "batch_stop": spans[-1][1]}
                    )
                part += 1
        except BaseException as exc:  # handed to the caller's thread
            self.error = exc
            self._drain()

    def _groups(self) -> Iterator[tuple[int, int, pa.Table, pa.Table]]:
        """Row groups (start, stop, lookups, updates) as the queue fills them."""
        look_schema, upd_schema = lookups_schema(self.row_dtype), updates_schema(self.row_dtype)
        group: list[tuple[np.ndarray, np.ndarray]] = []  # the open group's batches
        updates: list[tuple[np.ndarray, ...]] = []  # its steps' update rows
        window = _Window(self)
        start = batch = 0
        per_group = 0
        while True:
            item = self._queue.get()
            if item is _END:
                break
            if item is _STEP:
                if not window.empty:
                    self.steps.append(batch - 1)
                    updates.append(window.step(batch - 1))
                continue
            tables, rows = self._batch(item, batch)
            if per_group == 0:
                self._layout = plan_layout(max(len(rows), 1))
                per_group = self._layout["batches_per_row_group"]
            if group and (
                (len(group) >= per_group and window.empty) or len(group) >= 4 * per_group
            ):
                yield self._group(start, batch, group, updates, look_schema, upd_schema)
                group, updates, start = [], [], batch
            group.append((tables, rows))
            window.add(tables, rows)
            self._lookups += len(rows)
            batch += 1
            self.written = batch
        if group:
            yield self._group(start, batch, group, updates, look_schema, upd_schema)

    def _batch(self, parts: list[Part], batch: int) -> tuple[np.ndarray, np.ndarray]:
        """Batch `batch`'s (table, row) columns, sorted by table (stable), ids checked:
        a negative id or one beyond its table is refused (the update-set kernel indexes
        per-row state by id)."""
        tables_list, rows_list = [], []
        for t, r in parts:
            if not len(r):
                continue
            if r.dtype.kind == "i" and int(r.min()) < 0:
                where = np.flatnonzero(r < 0)[0]
                t_at = int(t[where]) if isinstance(t, np.ndarray) else t
                raise InputError(
                    f"batch {batch}: table {self.tables[t_at].name!r} looked up row "
                    f"{int(r[where])}, a negative id"
                )
            if not isinstance(t, np.ndarray) and int(r.max()) >= self.rows[t]:
                self._beyond(batch, np.full(len(r), t, dtype=np.uint16), r)
            rows_list.append(r)
            if isinstance(t, np.ndarray):
                tables_list.append(t.astype(np.uint16, copy=False))
            else:
                tables_list.append(np.full(len(r), t, dtype=np.uint16))
        if not rows_list:
            return np.empty(0, np.uint16), np.empty(0, self.row_dtype)
        tables = np.concatenate(tables_list) if len(tables_list) > 1 else tables_list[0]
        rows = np.concatenate(rows_list) if len(rows_list) > 1 else rows_list[0]
        rows = rows.astype(self.row_dtype, copy=False)
        if len(tables) > 1 and np.any(tables[1:] < tables[:-1]):
            order = np.argsort(tables, kind="stable")
            tables, rows = tables[order], rows[order]
        if any(isinstance(t, np.ndarray) for t, _ in parts):  # tables per lookup (merge)
            self._beyond(batch, tables, rows)
        return tables, rows

    def _beyond(self, batch: int, tables: np.ndarray, rows: np.ndarray) -> None:
        """InputError for the first id at or beyond its table's rows, if any."""
        bad = np.flatnonzero(rows.astype(np.uint64) >= self.rows[tables].astype(np.uint64))
        if len(bad):
            i = int(bad[0])
            t = self.tables[int(tables[i])]
            raise InputError(
                f"batch {batch}: table {t.name!r} looked up row {int(rows[i])}, "
                f"outside its {t.rows:,} rows"
            )

    def _group(
        self,
        start: int,
        stop: int,
        group: list[tuple[np.ndarray, np.ndarray]],
        updates: list[tuple[np.ndarray, ...]],
        look_schema: pa.Schema,
        upd_schema: pa.Schema,
    ) -> tuple[int, int, pa.Table, pa.Table]:
        lens = [len(r) for _, r in group]
        batch = np.repeat(np.arange(start, stop, dtype=np.uint32), lens)
        table = np.concatenate([t for t, _ in group])
        row = np.concatenate([r for _, r in group])
        look = _arrow.table({"batch": batch, "table": table, "row": row}, look_schema)
        cols: list[np.ndarray] = (
            [np.concatenate(c) for c in zip(*updates, strict=True)]
            if updates
            else [
                np.empty(0, np.uint32),
                np.empty(0, np.uint16),
                np.empty(0, self.row_dtype),
                np.empty(0, np.uint32),
            ]
        )
        names = ("batch", "table", "row", "count")
        upd = _arrow.table(dict(zip(names, cols, strict=True)), upd_schema)
        return start, stop, look, upd

    # -- the manifest ----------------------------------------------------------------------

    def _manifest(self, workload_name: str) -> dict[str, Any]:
        layout = self._layout or plan_layout(1)
        batch_size = min(max(self.batch_size, 1), MAX_BATCH_SIZE)
        dims = np.array([t.dim for t in self.tables], dtype=np.float64)
        # the engine sizes every row by one dimension: the rows-weighted mean gives the
        # tables' total bytes (each table's own dimension is in `tables`)
        dim = int(np.ceil(np.dot(dims, self.rows) / self.rows.sum()))
        update: dict[str, Any] = {"rule": "recorded"}
        every = _regular_steps(self.steps, self.written)
        if every is not None:
            update = {"rule": "sgd", "accumulate_batches": every}
        workload = {
            "name": workload_name,
            "batch_size": batch_size,
            "batches": self.written,
            "embedding_dim": dim,
            "update": update,
            "tables": [t.to_dict() for t in self.tables],
        }
        manifest = build_manifest(
            created_by=self.created_by,
            workload=workload,
            tables=[t.to_dict() for t in self.tables],
            batches=self.written,
            batch_size=batch_size,
            row_dtype=self.row_dtype,
            layout=layout,
            files=self._files,
            source={**self.source, "steps": step_runs(self.steps)},
        )
        for entry, t in zip(manifest["tables"], self.tables, strict=True):
            entry["dim"] = t.dim
        return manifest


def _regular_steps(steps: Sequence[int], batches: int) -> int | None:
    """k where the steps are exactly those of accumulation over k batches
    ((b + 1) % k == 0, every full window), else None."""
    if not steps:
        return None
    k = steps[0] + 1
    return k if list(steps) == list(range(k - 1, batches - batches % k, k)) else None


class _Window:
    """The lookups since the last step, and the update set a step makes of them."""

    def __init__(self, writer: RecordWriter) -> None:
        self.writer = writer
        self.raw: list[tuple[np.ndarray, np.ndarray]] = []
        self.raw_lookups = 0
        self.folded: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    @property
    def empty(self) -> bool:
        return not self.raw and self.folded is None

    def add(self, tables: np.ndarray, rows: np.ndarray) -> None:
        self.raw.append((tables, rows))
        self.raw_lookups += len(rows)
        if self.raw_lookups > COMPACT_LOOKUPS:
            self.folded = self._distinct()
            self.raw, self.raw_lookups = [], 0

    def step(self, landing: int) -> tuple[np.ndarray, ...]:
        w = self.writer
        if self.folded is None:
            n = len(self.raw)
            lens = [len(r) for _, r in self.raw]
            batch = np.repeat(np.arange(n, dtype=np.uint32), lens)
            table = np.concatenate([t for t, _ in self.raw])
            row = np.concatenate([r for _, r in self.raw])
            _, ut, ur, uc = update_sets(batch, table, row, 0, n, w.rows, w.frozen, n)
        else:
            ut, ur, uc = self._distinct()
            keep = ~w.frozen[ut]
            ut, ur, uc = ut[keep], ur[keep], uc[keep]
        self.raw, self.raw_lookups, self.folded = [], 0, None
        return (np.full(len(ur), landing, dtype=np.uint32), ut, ur, uc)

    def _distinct(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The window's distinct (table, row) with their lookups, tables in order and rows
        in order of first touch (what `update_sets` gives, for any window length)."""
        w = self.writer
        tables, rows, counts = [], [], []
        if self.folded is not None:
            tables.append(self.folded[0])
            rows.append(self.folded[1])
            counts.append(self.folded[2].astype(np.int64))
        for t, r in self.raw:
            tables.append(t)
            rows.append(r)
            counts.append(np.ones(len(r), dtype=np.int64))
        table = np.concatenate(tables)
        row = np.concatenate(rows)
        count = np.concatenate(counts)
        offsets = np.concatenate([[0], np.cumsum(w.rows)[:-1]]).astype(np.int64)
        key = offsets[table] + row.astype(np.int64)
        uniq, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        sums = np.bincount(inverse, weights=count, minlength=len(uniq)).astype(np.int64)
        order = np.lexsort((first, table[first]))
        ut = table[first][order]
        ur = row[first][order]
        uc = np.minimum(sums[order], np.iinfo(np.uint32).max).astype(np.uint32)
        return ut, ur, uc


class _Peek:
    """The row groups in order, the next one read ahead (to know when they end)."""

    def __init__(self, groups: Iterator[tuple[int, int, pa.Table, pa.Table]]) -> None:
        self.groups = groups
        self.head = next(groups, None)

    def take(self, limit: int, spans: list[tuple[int, int]]) -> Iterator[dict[str, pa.Table]]:
        while self.head is not None and len(spans) < limit:
            start, stop, look, upd = self.head
            self.head = None
            spans.append((start, stop))
            yield {LOOKUPS_DIR: look, UPDATES_DIR: upd}
            self.head = next(self.groups, None)
