"""`replay ingest`: stream real Criteo TSV files into a trace folder (DESIGN sections 3, 4).

`replay.trace.criteo_parse` parses and maps the input: it holds the input format (40
tab-separated fields, of which the 26 categorical features C1..C26 are the tables, one
lookup per sample and table, pooling 1), the rules for malformed lines and the two
mappings of a value to a row (``max_ind_range=M``: ``1 + hash % M``; ``dictionary=True``:
first-seen order; row 0 is the missing value in both).

Batches are formed in input order, ``batch_size`` samples each (the last one may be
partial; bad lines skipped with ``skip_bad_lines`` are not samples). Inside a batch the
lookups are sorted by table and in sample order inside a table. Update sets follow
`replay.trace.updates` with plain SGD (no accumulation, nothing frozen). Row ids are
uint32, so ``M`` must be at most 2^32 - 2.

Implementation (no per-line Python): a parser thread (`_Producer`) reads, parses and maps
the input block by block (`criteo_parse._iter_parsed`, a reader thread of its own beneath
it). Each full Parquet row group of samples (`plan_layout` whole batches) goes to a thread
pool that builds its lookups (the `_to_lookups` kernel) and update sets; the calling
thread writes the row groups in order into part files of `batches_per_file` batches,
exactly as `write_trace_from_arrays` lays them out, so the bytes do not depend on block
size, thread count, gzip or file splits. Memory is bounded by a few blocks, `workers + 3`
row groups and the dictionary (about 12 bytes per slot, 2 to 4 slots per distinct value),
whatever the input size. The output is built in ``.NAME.partial/`` and moved into place
only when complete; on any error it is removed, so no partial output remains.

`replay.trace.criteo_reference` holds slow pure-Python versions of the same rules
(`ingest_reference_rows`, `reference_lookups`) that the tests compare the kernels with.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from replay import _arrow
from replay._files import check_regular
from replay._jit import kernel
from replay.errors import ConfigError, InputError, opt
from replay.trace.criteo_parse import (
    BLOCK_BYTES,
    MAX_IND_RANGE,
    NUM_CAT,
    PARSE_LINES,
    _Dictionary,
    _iter_parsed,
    _map_modulo,
)
from replay.trace.format import (
    KINDS,
    LOOKUPS_DIR,
    UPDATES_DIR,
    build_manifest,
    lookups_schema,
    plan_layout,
    row_dtype_for,
    updates_schema,
)
from replay.trace.updates import update_sets
from replay.trace.writer import TraceFolderWriter

TABLE_NAMES = tuple(f"C{i + 1}" for i in range(NUM_CAT))

DEFAULT_BATCH_SIZE = 2048
MAX_BATCH_SIZE = 1 << 26  # the workload spec's limit
ROW_DTYPE = np.dtype(np.uint32)
_LOOKUPS_SCHEMA = lookups_schema(ROW_DTYPE)
_UPDATES_SCHEMA = updates_schema(ROW_DTYPE)


@dataclass(frozen=True)
class IngestResult:
    """What `ingest` wrote."""

    path: Path
    samples: int
    batches: int
    lookups: int
    bad_lines: int
    table_rows: tuple[int, ...] = ()
    first_bad_line: str | None = None  # "FILE:LINE" of the first skipped line


# -- lookups in trace order ------------------------------------------------------------------


@kernel
def _to_lookups(
    samples: np.ndarray,
    lo: int,
    hi: int,
    batch_size: int,
    first_batch: int,
    out_batch: np.ndarray,
    out_table: np.ndarray,
    out_row: np.ndarray,
) -> None:
    """Lookups of samples[lo:hi] (whole batches from `first_batch`; the last may be partial):
    per batch, all lookups of table 0 in sample order, then table 1, ..."""
    k = 0
    s = lo
    b = first_batch
    num_tables = samples.shape[1]
    while s < hi:
        e = min(s + batch_size, hi)
        for t in range(num_tables):
            for i in range(s, e):
                out_batch[k] = b
                out_table[k] = t
                out_row[k] = samples[i, t]
                k += 1
        s = e
        b += 1


# -- the ingester ---------------------------------------------------------------------------


class _BadLines:
    """Skipped malformed lines: how many, and where the first was."""

    def __init__(self) -> None:
        self.count = 0
        self.first: str | None = None

    def add(self, where: str, count: int) -> None:
        if self.first is None:
            self.first = where
        self.count += count


@dataclass(frozen=True)
class _Group:
    """One Parquet row group: its lookups and update tables and its batch range."""

    batch_start: int
    batch_stop: int
    samples: int
    lookups: pa.Table
    updates: pa.Table


def _build_group(
    samples: np.ndarray, n: int, batch_size: int, first_batch: int, table_rows: np.ndarray
) -> _Group:
    """Lookups (in trace order) and SGD update sets of samples[:n], whole batches from
    `first_batch` (the last one may be partial)."""
    stop = first_batch + -(-n // batch_size)
    size = n * NUM_CAT
    batch = np.empty(size, dtype=np.uint32)
    table = np.empty(size, dtype=np.uint16)
    row = np.empty(size, dtype=ROW_DTYPE)
    _to_lookups(samples, 0, n, batch_size, first_batch, batch, table, row)
    frozen = np.zeros(NUM_CAT, dtype=np.bool_)
    ub, ut, ur, uc = update_sets(batch, table, row, first_batch, stop, table_rows, frozen, 1)
    return _Group(
        first_batch,
        stop,
        n,
        _arrow.table({"batch": batch, "table": table, "row": row}, _LOOKUPS_SCHEMA),
        _arrow.table({"batch": ub, "table": ut, "row": ur, "count": uc}, _UPDATES_SCHEMA),
    )


class _Stopped(Exception):
    """The consumer gave up (after an error); the producer thread just ends."""


_END = object()


class _Producer:
    """Reads, parses and maps the input in a thread of its own; hands row groups (futures
    of `_build_group` on a thread pool) to the writing thread through a bounded queue."""

    def __init__(
        self,
        paths: list[Path],
        *,
        batch_size: int,
        group_batches: int,
        max_ind_range: int | None,
        skip_bad_lines: bool,
        block_bytes: int,
        pool: ThreadPoolExecutor,
        depth: int,
        on_progress: Callable[[int], None],
    ) -> None:
        self.paths = paths
        self.batch_size = batch_size
        self.group_samples = group_batches * batch_size
        self.group_batches = group_batches
        self.max_ind_range = max_ind_range
        self.dictionary = _Dictionary() if max_ind_range is None else None
        self.skip_bad_lines = skip_bad_lines
        self.block_bytes = block_bytes
        self.pool = pool
        self.queue: queue.Queue[Any] = queue.Queue(maxsize=depth)
        self.stop = threading.Event()
        self.on_progress = on_progress
        self.bad = _BadLines()
        self.samples = 0
        self.thread = threading.Thread(target=self._run, name="ingest-parse", daemon=True)

    def table_rows(self) -> np.ndarray:
        if self.dictionary is None:
            return np.full(NUM_CAT, int(self.max_ind_range or 0) + 1, dtype=np.int64)
        return self.dictionary.counts + 1

    def _put(self, item: Any) -> None:
        while True:
            try:
                self.queue.put(item, timeout=0.1)
                return
            except queue.Full:
                if self.stop.is_set():
                    raise _Stopped from None

    def _progress(self, n: int) -> None:
        if self.stop.is_set():
            raise _Stopped
        self.on_progress(n)

    def _submit(self, samples: np.ndarray, n: int, first_batch: int) -> None:
        rows = self.table_rows()  # a snapshot: every row id in `samples` is below it
        self._put(self.pool.submit(_build_group, samples, n, self.batch_size, first_batch, rows))

    def _run(self) -> None:
        try:
            self._produce()
            self._put(_END)
        except _Stopped:
            pass
        except BaseException as exc:  # handed to the writing thread, which raises it
            with contextlib.suppress(_Stopped):
                self._put(exc)

    def _produce(self) -> None:
        hashes = np.empty((PARSE_LINES, NUM_CAT), dtype=np.uint32)
        missing = np.empty((PARSE_LINES, NUM_CAT), dtype=np.bool_)
        size = self.group_samples
        group = np.empty((size, NUM_CAT), dtype=ROW_DTYPE)
        fill = 0
        first_batch = 0
        for path in self.paths:
            for good in _iter_parsed(
                path,
                skip_bad_lines=self.skip_bad_lines,
                block_bytes=self.block_bytes,
                hashes=hashes,
                missing=missing,
                on_bad=self.bad.add,
                on_progress=self._progress,
            ):
                done = 0
                while done < good:
                    k = min(good - done, size - fill)
                    if self.dictionary is None:
                        _map_modulo(
                            hashes,
                            missing,
                            done,
                            done + k,
                            int(self.max_ind_range or 1),
                            group,
                            fill,
                        )
                    else:
                        self.dictionary.map(hashes, missing, done, done + k, group, fill)
                    done += k
                    fill += k
                    if fill == size:
                        self._submit(group, fill, first_batch)
                        group = np.empty((size, NUM_CAT), dtype=ROW_DTYPE)
                        fill = 0
                        first_batch += self.group_batches
                self.samples += good
        if fill:
            self._submit(group, fill, first_batch)


def _check_options(batch_size: int, max_ind_range: int | None, dictionary: bool) -> None:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ConfigError(f"{opt('--batch-size')} must be a positive integer, not {batch_size!r}")
    if batch_size > MAX_BATCH_SIZE:
        raise ConfigError(
            f"{opt('--batch-size')} {batch_size} is too large (at most {MAX_BATCH_SIZE})"
        )
    if (max_ind_range is None) == (not dictionary):
        raise ConfigError(
            f"give exactly one of {opt('--max-ind-range M', 'max_ind_range=M')} or "
            f"{opt('--dictionary', 'dictionary=True')}"
        )
    if max_ind_range is not None:
        if isinstance(max_ind_range, bool) or not isinstance(max_ind_range, int):
            raise ConfigError(f"{opt('--max-ind-range')} must be an integer, not {max_ind_range!r}")
        if not 1 <= max_ind_range <= MAX_IND_RANGE:
            raise ConfigError(
                f"{opt('--max-ind-range')} must be between 1 and {MAX_IND_RANGE} "
                f"(row ids are uint32; hashes are 32-bit), not {max_ind_range}"
            )


def _default_workers() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def check_input_files(files: list[Path]) -> None:
    """One-line errors for input files that are missing, folders, not regular files or
    unreadable.

    Only regular files (or links to them) are read: a device such as /dev/zero never
    ends and a FIFO can block the open or the read forever. `check_regular` looks
    without opening, so a FIFO cannot block this check (and the reader opens each file
    with `open_regular`, which checks again what it opened).
    """
    if not files:
        raise InputError("no input files given")
    for path in files:
        check_regular(path)
        if not os.access(path, os.R_OK):
            raise InputError(f"{path}: cannot read (permission denied)")


def ingest(
    files: str | Path | Iterable[str | Path],
    out: str | Path,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    max_ind_range: int | None = None,
    dictionary: bool = False,
    skip_bad_lines: bool = False,
    force: bool = False,
    progress: bool | Callable[[int, int], None] = False,
    block_bytes: int = BLOCK_BYTES,
    workers: int | None = None,
) -> IngestResult:
    """Stream Criteo TSV files (plain or gzipped) into the trace folder `out`.

    Exactly one of `max_ind_range` (row = 1 + hash % M) and `dictionary` (first-seen
    order) must be given; row 0 is the missing value (see the module docstring). Raises
    ConfigError for bad options, InputError for missing or malformed input (naming the
    file and line) and OutputError when `out` exists (unless `force`). On error nothing
    is left at `out` or beside it. `block_bytes` (the read size) and `workers` (threads
    that build row groups; default: all cores) change the speed, never the output.
    `progress`: True draws a bar on stderr; a function is called with (input bytes
    read, input bytes) as the files are read (from a reading thread).
    """
    paths = [Path(files)] if isinstance(files, str | Path) else [Path(f) for f in files]
    _check_options(batch_size, max_ind_range, dictionary)
    if block_bytes < 1:
        raise ConfigError("block_bytes must be positive")
    if workers is None:
        workers = _default_workers()
    if workers < 1:
        raise ConfigError(f"workers must be positive, not {workers}")
    check_input_files(paths)
    out = Path(out)
    rule = "dictionary" if dictionary else "max-ind-range"
    layout = plan_layout(batch_size * NUM_CAT)
    plan = {
        "created_by": "ingest",
        "files": [str(p) for p in paths],
        "rule": rule,
        "max_ind_range": max_ind_range,
        "batch_size": batch_size,
        "skip_bad_lines": skip_bad_lines,
        "layout": layout,
    }
    writer = TraceFolderWriter(out, plan, force=force, resume=None)  # no --resume
    try:
        return _ingest_into(
            writer,
            paths,
            batch_size=batch_size,
            max_ind_range=max_ind_range,
            skip_bad_lines=skip_bad_lines,
            progress=progress,
            block_bytes=block_bytes,
            workers=workers,
            layout=layout,
            rule=rule,
        )
    except BaseException:
        writer.abort()
        raise


class _GroupStream:
    """The producer's row groups in order, for the writing thread."""

    def __init__(self, source: queue.Queue[Any]) -> None:
        self.source = source
        self.head: Any = None
        self.fetched = False

    def peek(self) -> _Group | None:
        """The next row group (None at the end); raises the producer's error."""
        if not self.fetched:
            self.head = self.source.get()
            self.fetched = True
        item = self.head
        if item is _END:
            return None
        if isinstance(item, BaseException):
            raise item
        return item.result()

    def take(self, limit: int, spans: list[_Group]) -> Iterator[dict[str, pa.Table]]:
        """Up to `limit` row groups for one part file; each is appended to `spans`."""
        while len(spans) < limit:
            group = self.peek()
            if group is None:
                return
            self.fetched = False
            spans.append(group)
            yield {LOOKUPS_DIR: group.lookups, UPDATES_DIR: group.updates}


def _ingest_into(
    writer: TraceFolderWriter,
    paths: list[Path],
    *,
    batch_size: int,
    max_ind_range: int | None,
    skip_bad_lines: bool,
    progress: bool | Callable[[int, int], None],
    block_bytes: int,
    workers: int,
    layout: dict[str, int],
    rule: str,
) -> IngestResult:
    per_group = layout["batches_per_row_group"]
    groups_per_file = layout["batches_per_file"] // per_group
    if callable(progress):
        bar, advance = None, _reporting(progress, sum(p.stat().st_size for p in paths))
    else:
        bar, advance = _progress_bar(paths) if progress else (None, _no_progress)
    pool = ThreadPoolExecutor(workers, thread_name_prefix="ingest-build")
    producer = _Producer(
        paths,
        batch_size=batch_size,
        group_batches=per_group,
        max_ind_range=max_ind_range,
        skip_bad_lines=skip_bad_lines,
        block_bytes=block_bytes,
        pool=pool,
        depth=workers + 1,
        on_progress=advance,
    )
    schemas = {LOOKUPS_DIR: _LOOKUPS_SCHEMA, UPDATES_DIR: _UPDATES_SCHEMA}
    files: dict[str, list[dict[str, Any]]] = {kind: [] for kind in KINDS}
    lookups = batches = 0

    stream = _GroupStream(producer.queue)
    producer.thread.start()
    try:
        part = 0
        while stream.peek() is not None:
            spans: list[_Group] = []
            entries = writer.write_parts(part, schemas, stream.take(groups_per_file, spans))
            start, stop = spans[0].batch_start, spans[-1].batch_stop
            for kind in KINDS:
                files[kind].append({**entries[kind], "batch_start": start, "batch_stop": stop})
            lookups += sum(g.samples for g in spans) * NUM_CAT
            batches = stop
            part += 1
    finally:
        producer.stop.set()
        producer.thread.join()
        pool.shutdown(wait=True, cancel_futures=True)
        if bar is not None:
            bar.stop()
    samples, bad = producer.samples, producer.bad
    if samples == 0:
        detail = f" ({bad.count} malformed lines skipped)" if bad.count else ""
        raise InputError(f"{', '.join(map(str, paths))}: no samples in the input{detail}")

    rows = [int(r) for r in producer.table_rows()]
    tables = [{"name": name, "rows": r} for name, r in zip(TABLE_NAMES, rows, strict=True)]
    workload = {
        "name": "criteo-ingest",
        "batch_size": batch_size,
        "batches": batches,
        "update": {"rule": "sgd", "accumulate_batches": 1},
        "tables": [{**t, "pooling": 1} for t in tables],
    }
    source = {
        "kind": "criteo-tsv",
        "files": [p.name for p in paths],
        "rule": rule,
        "max_ind_range": max_ind_range,
        "samples": samples,
        "bad_lines_skipped": bad.count,
    }
    manifest = build_manifest(
        created_by="ingest",
        workload=workload,
        tables=tables,
        batches=batches,
        batch_size=batch_size,
        row_dtype=row_dtype_for(max(rows)),
        layout=layout,
        files=files,
        source=source,
    )
    path = writer.finish(manifest)
    return IngestResult(
        path=path,
        samples=samples,
        batches=batches,
        lookups=lookups,
        bad_lines=bad.count,
        table_rows=tuple(rows),
        first_bad_line=bad.first,
    )


def _no_progress(n: int) -> None:
    pass


def _reporting(report: Callable[[int, int], None], total: int) -> Callable[[int], None]:
    """An `advance(n)` that reports the bytes read so far of `total` to `report`."""
    done = [0]

    def advance(n: int) -> None:
        done[0] += n
        report(done[0], total)

    return advance


def _progress_bar(paths: list[Path]) -> tuple[Any, Callable[[int], None]]:
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    total = sum(p.stat().st_size for p in paths)
    bar = Progress(
        TextColumn("ingest"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
    )
    task = bar.add_task("ingest", total=total)
    bar.start()
    return bar, lambda n: bar.advance(task, n)
