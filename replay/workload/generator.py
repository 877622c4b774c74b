"""Trace generation: a workload spec in, a trace folder out (DESIGN sections 3 and 4).

The work is cut by the file layout (`plan_layout`: row groups of ~1 M lookups, files of
4 row groups), which depends on the workload's shape only. Files are written in
parallel by `workers` threads; inside a file, the next row group is sampled (numba,
GIL released) while the current one is compressed and written (pyarrow, GIL released),
so sampling hides behind writing. Because every draw is a pure function of
(spec, seed, batch, table, position), the bytes do not depend on the number of workers.

Memory: each file in flight holds at most ROW_GROUPS_AHEAD row groups (lookups +
updates), so peak memory is bounded by `workers` x a few row groups, never by the
number of batches.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import CancelledError, Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from replay import _arrow
from replay._output import partial_path
from replay._threads import wait_for, worker_pool
from replay._version import __version__
from replay.errors import ConfigError, Interrupted, opt
from replay.trace.format import (
    FORMAT_VERSION,
    LOOKUPS_DIR,
    MANIFEST_NAME,
    UPDATES_DIR,
    build_manifest,
    largest_piece,
    lookups_schema,
    piece_groups,
    plan_layout,
    plan_pieces,
    row_dtype_for,
    updates_schema,
)
from replay.trace.updates import update_sets
from replay.trace.writer import TraceFolderWriter, write_parts
from replay.workload import draws, sampler
from replay.workload.presets import PRESETS, get_preset
from replay.workload.spec import WorkloadSpec, load_spec

# Row groups a file sampled ahead of the one being written: enough that the sampling
# threads never wait on a writer (measured: 4 gives ~44 M lookups/s on 2 cores where 2
# gave ~37 M); the memory in flight is workers x this many row groups.
ROW_GROUPS_AHEAD = 4
# Workers at most (threads here, processes of a local cluster): more is a typo, and a
# local cluster of a million processes would be a fork bomb
MAX_WORKERS = 1024


def check_workers(workers: int) -> int:
    """`workers`, or ConfigError unless it is in [1, MAX_WORKERS]."""
    if workers < 1:
        raise ConfigError(f"{opt('--workers')} must be at least 1, got {workers}")
    if workers > MAX_WORKERS:
        raise ConfigError(f"{opt('--workers')}: {workers} is above the limit of {MAX_WORKERS:,}")
    return workers


# The sampler tables of the (tables, seed) pairs some object still holds: the same spec
# compiled again (a plan opens meta-2021's 856 tables, 5.16 G rows, five times: its
# horizon, the heads, the routed batch, the steady span) shares the tables already built
# (read-only to every kernel) instead of building them again, ~2 s each on 2 cores.
_SAMPLER_TABLES: weakref.WeakValueDictionary[Any, sampler.SamplerTables] = (
    weakref.WeakValueDictionary()
)
_SAMPLER_TABLES_LOCK = threading.Lock()


def _sampler_tables(spec: WorkloadSpec, root: int) -> sampler.SamplerTables:
    # the spec's draws of each table decide which laws get a guide (a workload of a few
    # batches draws none often enough to pay for one); specs alike in that share tables
    draws = [spec.batches * spec.batch_size * t.pooling for t in spec.tables]
    try:
        key: Any = (tuple(spec.tables), int(root), tuple(sampler.rare_laws(spec.tables, draws)))
        hash(key)
    except TypeError:  # a table with an unhashable field: built every time
        return sampler.build_sampler_tables(spec.tables, root, draws)
    with _SAMPLER_TABLES_LOCK:
        found = _SAMPLER_TABLES.get(key)
    if found is not None:
        return found
    built = sampler.build_sampler_tables(spec.tables, root, draws)
    with _SAMPLER_TABLES_LOCK:
        return _SAMPLER_TABLES.setdefault(key, built)


@dataclass(frozen=True)
class CompiledWorkload:
    """A spec turned into the flat arrays the sampling kernel takes."""

    spec: WorkloadSpec
    root: np.uint64
    tables: sampler.SamplerTables
    rows: np.ndarray
    frozen: np.ndarray
    row_dtype: np.dtype

    @classmethod
    def from_spec(cls, spec: WorkloadSpec) -> CompiledWorkload:
        root = sampler.root_key(spec.seed)
        rows = np.array([t.rows for t in spec.tables], dtype=np.int64)
        return cls(
            spec=spec,
            root=np.uint64(root),
            tables=_sampler_tables(spec, root),
            rows=rows,
            frozen=np.array([t.frozen for t in spec.tables], dtype=np.bool_),
            row_dtype=row_dtype_for(int(rows.max())),
        )

    def lookups(
        self, batch_start: int, batch_stop: int, tables: tuple[int, int] | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(batch, table, row) arrays of batches [batch_start, batch_stop) in trace order;
        of tables [t0, t1) only with `tables` (a piece, `replay.trace.format.plan_pieces`)."""
        t0, t1 = (0, len(self.spec.tables)) if tables is None else tables
        per_batch = self.spec.lookups_per_batch
        if tables is not None:
            per_batch = self.spec.batch_size * sum(t.pooling for t in self.spec.tables[t0:t1])
        n = (batch_stop - batch_start) * per_batch
        out_batch = np.empty(n, dtype=np.uint32)
        out_table = np.empty(n, dtype=np.uint16)
        out_row = np.empty(n, dtype=self.row_dtype)
        st = self.tables
        draws.generate_lookups(
            self.root, batch_start, batch_stop, self.spec.batch_size, st.iparams, st.fparams,
            st.round_keys, st.alias_prob, st.alias_index, st.perm, st.guide, out_batch, out_table,
            out_row, t0, t1,
        )  # fmt: skip
        return out_batch, out_table, out_row

    def batch_rows(
        self, batch: int, tables: tuple[int, int], out: np.ndarray | None = None
    ) -> np.ndarray:
        """The rows of `lookups(batch, batch + 1, tables)` alone: its batch and table ids
        are runs that the spec fixes (`table_lookups`), so they are not written (6 bytes
        a lookup; `replay.trace.keys.flat_keys_of_tables` makes the keys without them).
        `out`: a buffer of `row_dtype` to write them to the start of (a thread's own,
        reused piece after piece), at least as long; the rows are then a view of it."""
        t0, t1 = tables
        n = int(self.table_lookups[t0:t1].sum())
        if out is None:
            out_row = np.empty(n, dtype=self.row_dtype)
        elif out.dtype != self.row_dtype or len(out) < n:
            raise ValueError(f"batch_rows: out must hold {n} {self.row_dtype} rows")
        else:
            out_row = out[:n]
        st = self.tables
        draws.generate_lookups(
            self.root, batch, batch + 1, self.spec.batch_size, st.iparams, st.fparams,
            st.round_keys, st.alias_prob, st.alias_index, st.perm, st.guide,
            np.empty(0, np.uint32), np.empty(0, np.uint16), out_row, t0, t1,
        )  # fmt: skip
        return out_row

    @property
    def table_lookups(self) -> np.ndarray:
        """Each table's lookups per batch (int64)."""
        spec = self.spec
        return np.array([spec.batch_size * t.pooling for t in spec.tables], dtype=np.int64)

    @property
    def pieces(self) -> tuple[tuple[int, int], ...]:
        """The table ranges a batch is cut into, or () (`plan_pieces`)."""
        return plan_pieces(self.table_lookups.tolist(), self.spec.update.accumulate_batches)

    def updates(
        self,
        batch: np.ndarray,
        table: np.ndarray,
        row: np.ndarray,
        batch_start: int,
        batch_stop: int,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        return update_sets(
            batch, table, row, batch_start, batch_stop, self.rows, self.frozen,
            self.spec.update.accumulate_batches,
        )  # fmt: skip

    def row_group(
        self, batch_start: int, batch_stop: int, tables: tuple[int, int] | None = None
    ) -> dict[str, pa.Table]:
        """The lookups and updates tables of one row group (of one piece: `tables`)."""
        b, t, r = self.lookups(batch_start, batch_stop, tables)
        ub, ut, ur, uc = self.updates(b, t, r, batch_start, batch_stop)
        return {
            LOOKUPS_DIR: _arrow.table({"batch": b, "table": t, "row": r}, self.lookups_schema),
            UPDATES_DIR: _arrow.table(
                {"batch": ub, "table": ut, "row": ur, "count": uc}, self.updates_schema
            ),
        }

    @property
    def lookups_schema(self) -> pa.Schema:
        return lookups_schema(self.row_dtype)

    @property
    def updates_schema(self) -> pa.Schema:
        return updates_schema(self.row_dtype)


def resolve_workload(workload: WorkloadSpec | str | Path) -> WorkloadSpec:
    """A spec object, a preset name, or a path to a TOML spec."""
    if isinstance(workload, WorkloadSpec):
        return workload
    text = str(workload)
    if text in PRESETS:
        return get_preset(text)
    if text.endswith(".toml") or Path(text).exists():
        return load_spec(text)
    return get_preset(text)  # raises the unknown-preset error


@dataclass(frozen=True)
class FileTask:
    index: int
    batch_start: int
    batch_stop: int
    row_groups: tuple[tuple[int, int], ...]
    # the table ranges each batch is cut into (a row group per piece), or () for whole
    # batches per row group (`replay.trace.format.plan_pieces`)
    pieces: tuple[tuple[int, int], ...] = ()

    def groups(self) -> Iterator[tuple[int, int, tuple[int, int] | None]]:
        """(g0, g1, tables) of each row group the file holds, in trace order."""
        return piece_groups(self.row_groups, self.pieces)


def plan_files(spec: WorkloadSpec) -> tuple[dict[str, Any], list[FileTask]]:
    """The layout (the manifest's: `plan_layout`, and where batches are cut, their
    pieces as `batch_pieces` and the largest piece's lookups as `piece_lookups`) and the
    files to write."""
    layout: dict[str, Any] = dict(
        plan_layout(spec.lookups_per_batch, spec.update.accumulate_batches)
    )
    per_file, per_group = layout["batches_per_file"], layout["batches_per_row_group"]
    looks = [spec.batch_size * t.pooling for t in spec.tables]
    pieces = plan_pieces(looks, spec.update.accumulate_batches)
    if pieces:
        layout["batch_pieces"] = [list(p) for p in pieces]
        layout["piece_lookups"] = largest_piece(looks, pieces)
    tasks = []
    for index, start in enumerate(range(0, spec.batches, per_file)):
        stop = min(start + per_file, spec.batches)
        groups = tuple((g, min(g + per_group, stop)) for g in range(start, stop, per_group))
        tasks.append(FileTask(index, start, stop, groups, pieces))
    return layout, tasks


def generate(
    workload: WorkloadSpec | str | Path,
    out: str | Path,
    *,
    batches: int | None = None,
    batch_size: int | None = None,
    seed: int | None = None,
    alpha: float | None = None,
    drift: float | None = None,
    reuse: float | None = None,
    workers: int | None = None,
    force: bool = False,
    resume: bool = False,
    progress: Callable[[int], None] | None = None,
    client: Any = None,
) -> Path:
    """Generate a trace folder at `out` and return its path.

    `workload` is a WorkloadSpec, a preset name or a TOML path; the keyword overrides
    replace the spec's values (alpha, drift and reuse for every table). `progress`, if
    given, is called with the number of lookups of each row group written (of each file
    with a Dask `client`, whose workers then write the files: `write_file_task`).
    """
    spec = resolve_workload(workload).with_overrides(
        batches=batches, batch_size=batch_size, seed=seed, alpha=alpha, drift=drift, reuse=reuse
    )
    if workers is None:
        workers = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    check_workers(workers)
    out = Path(out)
    layout, tasks = plan_files(spec)
    plan = {
        "created_by": "generate",
        "format_version": FORMAT_VERSION,
        "tool_version": __version__,
        "workload": spec.to_dict(),
        "layout": layout,
    }
    if (
        resume
        and (out / MANIFEST_NAME).exists()
        and not (out.parent / f".{out.name}.partial").exists()
    ):
        from replay.trace.reader import open_trace

        if open_trace(out).workload == spec.to_dict():
            return out  # already complete: resuming is a no-op
    lock = threading.Lock()

    def report(n: int) -> None:
        if progress is not None:
            with lock:
                progress(n)

    # An interrupt from the moment the partial folder may exist (while it is created,
    # while the sampler tables are built, seconds for large tables) to the rename keeps
    # the folder for --resume and says so: `_interrupted`.
    writer: TraceFolderWriter | None = None
    try:
        writer = TraceFolderWriter(out, plan, force=force, resume=resume)
        compiled = CompiledWorkload.from_spec(spec)
        schemas = {LOOKUPS_DIR: compiled.lookups_schema, UPDATES_DIR: compiled.updates_schema}
        if client is not None:
            results = _write_files_on_cluster(client, writer, spec, tasks, schemas, report)
        else:
            results = _write_files_here(writer, compiled, spec, tasks, schemas, workers, report)
        files: dict[str, list[dict[str, Any]]] = {kind: [] for kind in schemas}
        for task, entries in zip(tasks, results, strict=True):
            for kind, entry in entries.items():
                files[kind].append(
                    {**entry, "batch_start": task.batch_start, "batch_stop": task.batch_stop}
                )
        manifest = build_manifest(
            created_by="generate",
            workload=spec.to_dict(),
            tables=[{"name": t.name, "rows": t.rows} for t in spec.tables],
            batches=spec.batches,
            batch_size=spec.batch_size,
            row_dtype=compiled.row_dtype,
            layout=layout,
            files=files,
        )
    except KeyboardInterrupt:
        raise _interrupted(out) from None
    except BaseException:
        if writer is not None:
            writer.abort()
        raise
    try:
        return writer.finish(manifest)
    except KeyboardInterrupt:
        raise _interrupted(out) from None


def _interrupted(out: Path) -> BaseException:
    """What an interrupt of `generate` raises: with the partial folder there, the finished
    parts stay for --resume (every reader refuses a partial folder) and the line says so;
    before it exists nothing is left, and the interrupt is a plain one."""
    partial = partial_path(out)
    if not partial.exists():
        return KeyboardInterrupt()
    return Interrupted(
        f"{out}: the finished files are kept in {partial.name}; finish it with "
        "the same command and --resume"
    )


def _write_files_here(
    writer: TraceFolderWriter,
    compiled: CompiledWorkload,
    spec: WorkloadSpec,
    tasks: list[FileTask],
    schemas: dict[str, pa.Schema],
    workers: int,
    report: Callable[[int], None],
) -> list[dict[str, dict[str, Any]]]:
    """Every file, written by `workers` threads of this process.

    A file of meta-2021's one batch is 567 row groups (pieces), 30-70 s of writing on
    2 cores: so the threads look at `stop` before each row group, and once the caller is
    interrupted or fails, each abandons its file there (its temporary part, which
    `--resume` deletes, is never renamed complete). An interrupt leaves the pools without
    waiting even for that (`replay._threads.worker_pool`)."""
    stop = threading.Event()

    def check() -> None:
        if stop.is_set():
            raise CancelledError("the generation stopped")

    with (
        worker_pool(workers, "sample") as sample_pool,
        worker_pool(workers, "write") as write_pool,
    ):

        def write_file(task: FileTask) -> dict[str, dict[str, Any]]:
            check()
            done = {kind: writer.done_part(kind, task.index) for kind in schemas}
            if all(done.values()):
                report((task.batch_stop - task.batch_start) * spec.lookups_per_batch)
                return done  # type: ignore[return-value]  # all(...): no part is None

            def groups() -> Iterator[dict[str, pa.Table]]:
                pending: deque[Future[dict[str, pa.Table]]] = deque()
                try:
                    for g0, g1, tables in task.groups():
                        check()
                        pending.append(sample_pool.submit(compiled.row_group, g0, g1, tables))
                        if len(pending) >= ROW_GROUPS_AHEAD:
                            group = pending.popleft().result()
                            check()
                            yield group
                            report(group[LOOKUPS_DIR].num_rows)
                    while pending:
                        group = pending.popleft().result()
                        check()
                        yield group
                        report(group[LOOKUPS_DIR].num_rows)
                finally:
                    for future in pending:
                        future.cancel()

            return writer.write_parts(task.index, schemas, groups())

        try:
            futures = [write_pool.submit(write_file, task) for task in tasks]
            return [wait_for(future) for future in futures]
        except BaseException:
            stop.set()
            raise


def _write_files_on_cluster(
    client: Any,
    writer: TraceFolderWriter,
    spec: WorkloadSpec,
    tasks: list[FileTask],
    schemas: dict[str, pa.Schema],
    report: Callable[[int], None],
) -> list[dict[str, dict[str, Any]]]:
    """Every file, written by the Dask cluster's workers into the partial folder (which
    they must see: a local cluster, or a filesystem shared with a remote one)."""
    from replay._distributed import map_as_completed

    results: dict[int, dict[str, dict[str, Any]]] = {}
    todo = []
    for task in tasks:
        done = {kind: writer.done_part(kind, task.index) for kind in schemas}
        if all(done.values()):
            results[task.index] = done  # type: ignore[assignment]  # all(...): no None
            report((task.batch_stop - task.batch_start) * spec.lookups_per_batch)
        else:
            todo.append(task)
    args = [(str(writer.partial.resolve()), spec, task) for task in todo]
    for i, entries in map_as_completed(client, write_file_task, args):
        task = todo[i]
        results[task.index] = entries
        report((task.batch_stop - task.batch_start) * spec.lookups_per_batch)
    return [results[task.index] for task in tasks]


def write_file_task(partial: str, spec: WorkloadSpec, task: FileTask) -> dict[str, dict[str, Any]]:
    """Sample and write one file of a trace into `partial` (a Dask task); the same bytes
    as `generate` writes on one machine, since each row group is a pure function of the
    spec and its batch range."""
    compiled = CompiledWorkload.from_spec(spec)
    schemas = {LOOKUPS_DIR: compiled.lookups_schema, UPDATES_DIR: compiled.updates_schema}
    groups = (compiled.row_group(g0, g1, tables) for g0, g1, tables in task.groups())
    return write_parts(Path(partial), task.index, schemas, groups)
