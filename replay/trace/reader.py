"""Streaming reader of trace folders.

`open_trace(path)` checks the manifest and returns a `Trace`; `Trace.iter_lookups()` and
`Trace.iter_updates()` yield whole batches as numpy arrays, row group by row group, so
memory is bounded by the batch range in flight and never by the trace length. Chunks
come in trace order (files in name order, rows in file order).

Counts are checked against the files as they are opened: each file's row count in the
manifest must be the one its Parquet footer holds (read anyway to stream it, so the check
costs nothing), whether or not the checksums are verified. `open_trace` refuses an empty
trace (no batches or no lookups) unless asked for one: no command has anything to say
about it, and a manifest edited to list nothing must not read as a valid, empty trace.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from replay._arrow import to_numpy
from replay._prehash import claim_or_wait
from replay._threads import lower_priority
from replay._verified import Identity, Records, identity, now_ns
from replay.errors import TraceError
from replay.trace.counts import COUNTS_KEY, decode_counts
from replay.trace.format import (
    KINDS,
    LOOKUPS_DIR,
    MANIFEST_NAME,
    UPDATES_DIR,
    load_manifest,
    safe_member,
)


@dataclass(frozen=True)
class LookupChunk:
    """Lookups of the batches [batch_start, batch_stop), in trace order."""

    batch_start: int
    batch_stop: int
    batch: np.ndarray  # uint32
    table: np.ndarray  # uint16
    row: np.ndarray  # uint32 or uint64

    def __len__(self) -> int:
        return len(self.row)


@dataclass(frozen=True)
class UpdateChunk:
    """Embedding rows updated by the optimizer steps of [batch_start, batch_stop)."""

    batch_start: int
    batch_stop: int
    batch: np.ndarray
    table: np.ndarray
    row: np.ndarray
    count: np.ndarray  # uint32: gradient contributions folded into the update

    def __len__(self) -> int:
        return len(self.row)


@dataclass(frozen=True)
class Group:
    """A row group's rows of batches [batch_start, batch_stop) (`Trace.iter_groups`)."""

    batch_start: int
    batch_stop: int
    # counts[b, t]: rows of batch batch_start + b and table t, in that order (None: not
    # sorted by table; `columns` then holds `batch` and `table` too)
    counts: np.ndarray | None
    columns: dict[str, np.ndarray]

    def __len__(self) -> int:
        if self.counts is not None:
            return int(self.counts.sum())
        return len(self.columns["batch"])


def _trim(columns: dict[str, np.ndarray], start: int, stop: int) -> dict[str, np.ndarray]:
    """The rows of batches [start, stop) (the `batch` column is sorted)."""
    batch = columns["batch"]
    if len(batch) and (batch[0] < start or batch[-1] >= stop):
        lo, hi = np.searchsorted(batch, np.array([start, stop], dtype=np.int64).astype(batch.dtype))
        columns = {name: col[lo:hi] for name, col in columns.items()}
    return columns


def _decoded_group(columns: dict[str, np.ndarray]) -> Group:
    """A `Group` of decoded columns (a file without footer counts): no matrix, so a
    reader takes the columns as they are."""
    batch = columns["batch"]
    return Group(int(batch[0]), int(batch[-1]) + 1, None, columns)


_COLUMNS = {LOOKUPS_DIR: ("batch", "table", "row"), UPDATES_DIR: ("batch", "table", "row", "count")}
_TYPES = {"batch": pa.uint32(), "table": pa.uint16(), "count": pa.uint32()}  # row: row_dtype
# What pyarrow raises on a damaged file: its own errors, I/O errors, and ValueErrors such
# as a UnicodeDecodeError on a damaged column name in the footer.
_PARQUET_ERRORS = (OSError, ValueError, pa.ArrowException)


def _one_line(exc: BaseException) -> str:
    """An exception's message on one line (pyarrow's may span several)."""
    return " ".join(str(exc).split()) or type(exc).__name__


class Trace:
    """A trace folder opened for reading (see `replay.trace.format`)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.manifest: dict[str, Any] = load_manifest(self.path)
        self._verification: Verification | None = None
        self._members: dict[str, Path] = {}
        try:
            self._real_root: Path | None = self.path.resolve()
        except (OSError, RuntimeError):
            self._real_root = None  # `member` says why, path by path
        for kind in KINDS:
            for entry in self.manifest["files"][kind]:
                member = self.member(entry["path"])
                try:
                    found = member.is_file()
                except OSError as exc:  # e.g. a name too long
                    raise TraceError(f"{member}: cannot be read ({exc.strerror})") from None
                if not found:
                    raise TraceError(f"{member}: listed in the manifest but missing")

    def member(self, relative: str) -> Path:
        """The file of a manifest path (`safe_member`), resolved once per trace."""
        found = self._members.get(relative)
        if found is None:
            found = self._members[relative] = safe_member(self.path, relative, self._real_root)
        return found

    # -- description ------------------------------------------------------------------
    @property
    def num_batches(self) -> int:
        return int(self.manifest["batches"])

    @property
    def num_lookups(self) -> int:
        return sum(int(e["rows"]) for e in self.manifest["files"][LOOKUPS_DIR])

    @property
    def num_updates(self) -> int:
        return sum(int(e["rows"]) for e in self.manifest["files"][UPDATES_DIR])

    @property
    def table_names(self) -> list[str]:
        return [t["name"] for t in self.manifest["tables"]]

    @cached_property
    def table_rows(self) -> np.ndarray:
        return np.array([int(t["rows"]) for t in self.manifest["tables"]], dtype=np.int64)

    @property
    def row_dtype(self) -> np.dtype:
        return np.dtype(self.manifest["row_dtype"])

    @property
    def updates_are_lookups(self) -> bool:
        """Whether the manifest declares that each batch's update rows are exactly its
        distinct looked-up rows: an optimizer step every batch (`update.accumulate_batches`
        1) and a workload table list with no frozen table (`replay.trace.updates`). A
        manifest without the declaration (e.g. `write_trace_from_arrays` without a
        workload) says no."""
        workload = self.manifest.get("workload") or {}
        update = workload.get("update") or {}
        tables = workload.get("tables")
        return (
            update.get("accumulate_batches") == 1
            and isinstance(tables, list)
            and len(tables) == len(self.manifest["tables"])
            and not any(bool(t.get("frozen", False)) for t in tables)
        )

    @property
    def workload(self) -> dict[str, Any]:
        return self.manifest.get("workload", {})

    @property
    def pieces(self) -> tuple[tuple[int, int], ...]:
        """The table ranges each batch is cut into, a row group each (the manifest's
        `layout.batch_pieces`, `replay.trace.format.plan_pieces`), or () for row groups
        of whole batches."""
        layout = self.manifest.get("layout") or {}
        given = layout.get("batch_pieces") if isinstance(layout, dict) else None
        try:
            pieces = tuple((int(t0), int(t1)) for t0, t1 in given or ())
            if not all(0 <= t0 < t1 <= len(self.table_rows) for t0, t1 in pieces):
                raise ValueError("a table range out of bounds")
            if isinstance(layout, dict):  # a layout that is no table has no pieces
                int(layout.get("piece_lookups", 0))
        except (TypeError, ValueError) as exc:
            raise TraceError(
                f"{self.path / MANIFEST_NAME}: layout.batch_pieces is not a list of table "
                f"ranges [t0, t1) ({exc})"
            ) from None
        return pieces

    @property
    def piece_lookups(self) -> int:
        """The lookups of the largest piece of a batch, or 0 where batches are whole."""
        layout = self.manifest.get("layout") or {}
        return int(layout.get("piece_lookups", 0)) if self.pieces else 0

    def __repr__(self) -> str:
        return (
            f"Trace({str(self.path)!r}, batches={self.num_batches}, "
            f"lookups={self.num_lookups}, tables={len(self.table_names)})"
        )

    # -- integrity ----------------------------------------------------------------------
    def verify(self) -> None:
        """Compare every file's SHA-256 with the manifest; raise TraceError on a mismatch
        (for the first such file in manifest order).

        Files are hashed two at a time (hashlib releases the GIL): 0.13 s -> 0.07 s for
        the 126 MB of a 53 M-lookup trace on the 2-core VM.
        """
        Verification(self)()

    def check_not_empty(self) -> None:
        """TraceError unless the trace has batches and lookups.

        A manifest that lists lookups files yet claims no lookups may have had its counts
        edited: those files are checked first (checksum, then footer), so the error names
        the file that disagrees rather than calling the trace empty.
        """
        if self.num_batches > 0 and self.num_lookups > 0:
            return
        for entry in self.manifest["files"][LOOKUPS_DIR]:
            member = self.member(entry["path"])
            # hashed before its footer is parsed, as with `verify_in_background`: no
            # damaged byte reaches pyarrow (this runs before a command verifies)
            digest = _digest_or_error(member)
            if isinstance(digest, OSError):
                raise TraceError(f"{member}: cannot be read ({digest.strerror})")
            if digest != entry["sha256"]:
                raise TraceError(f"{member}: checksum does not match the manifest")
            self._open(LOOKUPS_DIR, entry)
        raise TraceError(f"{self.path}: the trace is empty (no lookups)")

    def check_row_counts(self, kind: str) -> None:
        """Check every `kind` file's footer row count against the manifest without
        reading it (reading checks them anyway): for a caller that reports the manifest's
        count of files it does not read, e.g. `replay inspect`'s updates. Opens each
        footer, so call it after `verify` (or only with --no-verify knowingly)."""
        for entry in self.manifest["files"][kind]:
            self._open(kind, entry)

    def verify_in_background(self) -> Verification:
        """Start `verify` on two threads and return it (call it to wait and raise).

        Hashing releases the GIL, so a command can do its single-threaded set-up
        meanwhile (`replay run`: imports, numba's first call). From now on this trace
        reads no file before that file's checksum has matched, so no damaged byte reaches
        pyarrow (which can abort the process on a damaged footer).
        """
        self._verification = Verification(self)
        return self._verification

    # -- streaming ----------------------------------------------------------------------
    def _row_groups(
        self, kind: str, start: int, stop: int
    ) -> Iterator[tuple[Path, pq.ParquetFile, int]]:
        """(file, row group index) pairs that may hold batches in [start, stop)."""
        for entry in self.manifest["files"][kind]:
            # files the manifest calls empty are opened too: a count edited to 0 would
            # otherwise hide the file's rows without an error
            if entry["batch_stop"] <= start or entry["batch_start"] >= stop:
                continue
            member, handle = self._open(kind, entry)
            yield from self._file_row_groups(entry, member, handle, start, stop)

    def _file_row_groups(
        self, entry: dict[str, Any], member: Path, handle: pq.ParquetFile, start: int, stop: int
    ) -> Iterator[tuple[Path, pq.ParquetFile, int]]:
        """The row groups of one file that may hold batches in [start, stop).

        A file inside the range yields all its row groups. In a file that straddles an
        end of the range, a row group is kept when its (sorted) `batch` column meets the
        range: the column is decoded rather than its min/max statistics read, because
        pyarrow (26) aborts the whole process (an uncaught C++ exception) on the column
        chunk metadata of a damaged footer, where reading the row group fails cleanly.
        Whole-trace reads and ranges cut at file boundaries decode nothing extra.
        """
        inside = start <= entry["batch_start"] and entry["batch_stop"] <= stop
        for index in range(handle.metadata.num_row_groups):
            if not inside:
                first, last = _batch_span(member, handle, index)
                if first >= stop:
                    break  # row groups come in batch order
                if last < start:
                    continue
            yield member, handle, index

    def _open(self, kind: str, entry: dict[str, Any]) -> tuple[Path, pq.ParquetFile]:
        """Open the file of a manifest entry (after its checksum, when being verified) and
        check its footer: the columns of `kind` and the row count the manifest gives."""
        member = self.member(entry["path"])
        if self._verification is not None:
            self._verification.file(member)
        try:
            # a trace of batches cut into pieces is one file of hundreds of row groups
            # per few batches (meta-2021's one batch: 2.7 GB): mapped, every page read
            # stays in the process's resident memory until the file closes (1.4 GB more
            # peak RSS measured), so such files are read, not mapped
            handle = pq.ParquetFile(member, memory_map=not self.pieces)
            num_rows = handle.metadata.num_rows
            schema = handle.schema_arrow
        except _PARQUET_ERRORS as exc:
            raise TraceError(f"{member}: not a readable Parquet file ({_one_line(exc)})") from None
        self._check_schema(member, kind, schema)
        if num_rows != entry["rows"]:
            raise TraceError(f"{member}: holds {num_rows} rows, the manifest says {entry['rows']}")
        return member, handle

    def _check_schema(self, member: Path, kind: str, schema: pa.Schema) -> None:
        """The columns of `kind` with the trace's types (a check per file, not per row)."""
        names = schema.names
        if tuple(names) != _COLUMNS[kind]:
            raise TraceError(f"{member}: columns {names} are not {list(_COLUMNS[kind])}")
        for name in names:
            want = _TYPES[name] if name != "row" else pa.from_numpy_dtype(self.row_dtype)
            got = schema.field(name).type
            if got != want:
                raise TraceError(f"{member}: column {name!r} is {got}, not {want}")

    def _read_group(
        self,
        member: Path,
        handle: pq.ParquetFile,
        index: int,
        names: tuple[str, ...] | list[str],
        use_threads: bool = False,
    ) -> dict[str, np.ndarray]:
        """The `names` columns of one row group as numpy arrays (TraceError if damaged)."""
        if not names:
            return {}
        try:
            table = handle.read_row_group(index, columns=list(names), use_threads=use_threads)
        except _PARQUET_ERRORS as exc:
            raise TraceError(f"{member}: unreadable row group {index} ({_one_line(exc)})") from None
        if any(table.column(name).null_count for name in names):
            raise TraceError(f"{member}: row group {index} holds null values")
        return {name: to_numpy(table.column(name)) for name in names}

    def _iter(
        self,
        kind: str,
        start: int,
        stop: int | None,
        use_threads: bool = True,
        names: tuple[str, ...] | None = None,
    ) -> Iterator[dict[str, np.ndarray]]:
        names = names or _COLUMNS[kind]
        stop = self._check_range(start, stop)
        for member, handle, index in self._row_groups(kind, start, stop):
            columns = self._read_group(member, handle, index, names, use_threads)
            columns = _trim(columns, start, stop)
            if len(columns["batch"]):
                yield columns

    def _check_range(self, start: int, stop: int | None) -> int:
        stop = self.num_batches if stop is None else min(stop, self.num_batches)
        if start < 0 or start > stop:
            raise TraceError(f"{self.path}: bad batch range [{start}, {stop})")
        return stop

    def _footer_counts(
        self, kind: str, entry: dict[str, Any], member: Path, handle: pq.ParquetFile
    ) -> list[tuple[int, np.ndarray]] | None:
        """The (first batch, counts) of every row group from the file's footer
        (`replay.trace.counts`), checked against the footer's row counts, the file's batch
        range and the tables; None when the footer has none."""
        text = (handle.metadata.metadata or {}).get(COUNTS_KEY.encode())
        if text is None:
            return None
        try:
            groups = decode_counts(text)
        except ValueError as exc:
            raise TraceError(f"{member}: damaged row group counts in the footer ({exc})") from None
        meta = handle.metadata
        if len(groups) != meta.num_row_groups:
            raise TraceError(
                f"{member}: the footer counts {len(groups)} row groups, the file holds "
                f"{meta.num_row_groups}"
            )
        tables = len(self.table_rows)
        at = int(entry["batch_start"])
        last_table = tables  # of batch at - 1 in the row groups so far: none continues
        for index, (first, counts) in enumerate(groups):
            rows = meta.row_group(index).num_rows
            if counts.shape[1] > tables or int(counts.sum()) != rows:
                raise TraceError(
                    f"{member}: row group {index}'s counts do not match its {rows} rows "
                    f"of {tables} tables"
                )
            if not counts.any():
                continue
            # a row group may go on with the last batch of the one before (a piece of a
            # batch cut by tables, `plan_pieces`), from a later table on
            held = np.flatnonzero(counts[0])
            goes_on = first == at - 1 and len(held) and int(held[0]) > last_table
            if (first < at and not goes_on) or first + len(counts) > entry["batch_stop"]:
                raise TraceError(
                    f"{member}: row group {index} holds batches outside the file's range "
                    f"[{entry['batch_start']}, {entry['batch_stop']}) or out of order"
                )
            at = first + len(counts)
            last_table = int(np.flatnonzero(counts[-1])[-1]) if counts[-1].any() else -1
        return groups

    def iter_groups(
        self, kind: str, start: int = 0, stop: int | None = None, names: tuple[str, ...] = ("row",)
    ) -> Iterator[Group]:
        """The row groups of `kind` that hold batches in [start, stop), trimmed to it, in
        trace order, decoded on the calling thread: with its counts matrix
        (`replay.trace.counts`) and only the `names` columns where the file's footer has
        the matrix, else with every column and no matrix (a file written before the
        footer counts, or by another tool; whole batches per group). Groups without rows
        are skipped."""
        stop = self._check_range(start, stop)
        for entry in self.manifest["files"][kind]:
            if entry["batch_stop"] <= start or entry["batch_start"] >= stop:
                continue
            member, handle = self._open(kind, entry)
            footer = self._footer_counts(kind, entry, member, handle)
            if footer is None:
                names_all = _COLUMNS[kind]
                pieces = (
                    _trim(self._read_group(member, handle, index, names_all), start, stop)
                    for _, _, index in self._file_row_groups(entry, member, handle, start, stop)
                )
                # a batch may span row groups in such a file: whole batches per group
                for columns in _gather((p for p in pieces if len(p["batch"])), 1):
                    yield _decoded_group(columns)
                continue
            for index, (first, counts) in enumerate(footer):
                last = first + len(counts)
                if last <= start or first >= stop or not counts.any():
                    continue
                columns = self._read_group(member, handle, index, names)
                lo, hi = max(first, start), min(last, stop)
                if lo > first or hi < last:
                    cut = np.concatenate([[0], np.cumsum(counts.sum(axis=1))])
                    r0, r1 = int(cut[lo - first]), int(cut[hi - first])
                    columns = {name: col[r0:r1] for name, col in columns.items()}
                    counts = counts[lo - first : hi - first]
                # from its first batch with rows to its last, as a decoded group spans
                held = np.flatnonzero(counts.any(axis=1))
                if not len(held):
                    continue
                counts = counts[held[0] : held[-1] + 1]
                yield Group(lo + int(held[0]), lo + int(held[-1]) + 1, counts, columns)

    def iter_lookups(
        self,
        start: int = 0,
        stop: int | None = None,
        *,
        min_lookups: int = 1 << 20,
        use_threads: bool = True,
        pieces: bool = False,
    ) -> Iterator[LookupChunk]:
        """Lookups of batches [start, stop) in trace order, in chunks of whole batches.

        Row groups are concatenated until a chunk holds at least `min_lookups` lookups.
        `use_threads=False` decodes on the calling thread only (for callers that keep the
        other cores busy themselves). `pieces`: where the trace cuts its batches into
        pieces of tables (`self.pieces`), a chunk is one row group, possibly some tables
        of one batch (in trace order).
        """
        groups = self._iter(LOOKUPS_DIR, start, stop, use_threads)
        if pieces and self.pieces:
            for cols in groups:
                yield LookupChunk(int(cols["batch"][0]), int(cols["batch"][-1]) + 1, **cols)
            return
        for cols in _gather(groups, min_lookups):
            yield LookupChunk(int(cols["batch"][0]), int(cols["batch"][-1]) + 1, **cols)

    def iter_table_lookups(self, tables: tuple[int, int]) -> Iterator[LookupChunk]:
        """The row groups of lookups that hold tables [t0, t1), each whole (rows of other
        tables too: the caller picks its tables' rows), in trace order, for the table-
        major pass of `replay inspect` (`replay.analysis.table_major`). Row groups whose
        footer counts (`replay.trace.counts`) hold none of those tables are not read: a
        trace cut into pieces of tables is read one piece range at a time; a file
        without the counts is read whole."""
        t0, t1 = tables
        names = _COLUMNS[LOOKUPS_DIR]
        for entry in self.manifest["files"][LOOKUPS_DIR]:
            member, handle = self._open(LOOKUPS_DIR, entry)
            footer = self._footer_counts(LOOKUPS_DIR, entry, member, handle)
            for index in range(handle.metadata.num_row_groups):
                if footer is not None and not footer[index][1][:, t0:t1].any():
                    continue
                cols = self._read_group(member, handle, index, names)
                if len(cols["batch"]):
                    yield LookupChunk(int(cols["batch"][0]), int(cols["batch"][-1]) + 1, **cols)

    def iter_updates(
        self,
        start: int = 0,
        stop: int | None = None,
        *,
        min_rows: int = 1 << 20,
        use_threads: bool = True,
        with_count: bool = True,
    ) -> Iterator[UpdateChunk]:
        """Update rows of batches [start, stop), in chunks of whole batches.

        `with_count=False` skips decoding the `count` column (the chunks' `count` is then
        an empty array), for callers that need only which rows were updated.
        """
        names = None if with_count else ("batch", "table", "row")
        for cols in _gather(self._iter(UPDATES_DIR, start, stop, use_threads, names), min_rows):
            cols.setdefault("count", np.empty(0, dtype=np.uint32))
            yield UpdateChunk(int(cols["batch"][0]), int(cols["batch"][-1]) + 1, **cols)

    def lookups(self, start: int = 0, stop: int | None = None) -> LookupChunk:
        """All lookups of batches [start, stop) in one chunk (mind the memory)."""
        chunks = list(self.iter_lookups(start, stop, min_lookups=1 << 62))
        if chunks:
            return chunks[0]
        empty = np.empty(0, dtype=np.uint32)
        return LookupChunk(
            start, start, empty, empty.astype(np.uint16), empty.astype(self.row_dtype)
        )

    def updates(self, start: int = 0, stop: int | None = None) -> UpdateChunk:
        """All update rows of batches [start, stop) in one chunk."""
        chunks = list(self.iter_updates(start, stop, min_rows=1 << 62))
        if chunks:
            return chunks[0]
        empty = np.empty(0, dtype=np.uint32)
        return UpdateChunk(
            start, start, empty, empty.astype(np.uint16), empty.astype(self.row_dtype), empty
        )


def _batch_span(member: Path, handle: pq.ParquetFile, index: int) -> tuple[int, int]:
    """First and last batch of row group `index` (its batches are sorted); (-1, -1) when
    it is empty, and (-1, 2^32) when nulls make it unknown (reading it then fails)."""
    try:
        column = handle.read_row_group(index, columns=["batch"], use_threads=False)["batch"]
    except _PARQUET_ERRORS as exc:
        raise TraceError(f"{member}: unreadable row group {index} ({_one_line(exc)})") from None
    if column.null_count:
        return -1, 1 << 32
    if len(column) == 0:
        return -1, -1
    return column[0].as_py(), column[-1].as_py()


def _gather(
    pieces: Iterator[dict[str, np.ndarray]], min_rows: int
) -> Iterator[dict[str, np.ndarray]]:
    """Concatenate pieces into chunks of >= min_rows that never split a batch.

    Pieces are held until the next one shows whether it continues their last batch; row
    groups written by this tool end on batch boundaries, so they pass through uncopied.
    """
    pending: list[dict[str, np.ndarray]] = []
    size = 0
    for piece in pieces:
        if pending and size >= min_rows and piece["batch"][0] != pending[-1]["batch"][-1]:
            yield _concat(pending)  # the next piece starts a new batch
            pending, size = [], 0
        pending.append(piece)
        size += len(piece["batch"])
        if size >= min_rows and len(pending) > 1:
            merged = _concat(pending)
            # keep the last batch back: the next piece may continue it
            last = merged["batch"][-1]
            cut = int(np.searchsorted(merged["batch"], last))
            if cut == 0:
                pending = [merged]
                continue
            yield {k: v[:cut] for k, v in merged.items()}
            pending = [{k: v[cut:] for k, v in merged.items()}]
            size = len(pending[0]["batch"])
    if pending and size:
        yield _concat(pending)


def _concat(pieces: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    if len(pieces) == 1:
        return pieces[0]
    return {k: np.concatenate([p[k] for p in pieces]) for k in pieces[0]}


class Verification:
    """The checksums of a trace's files, hashed on two threads in the order a stream
    reads them: by batch range, each range's lookups then its updates. (In manifest
    order, every lookups file came first, and a replay's reader waited ~0.09 s for the
    first updates file of a 289 MB trace on the 2-core VM.)"""

    def __init__(self, trace: Trace) -> None:
        entries = [e for kind in KINDS for e in trace.manifest["files"][kind]]
        self._expected = {trace.member(e["path"]): e["sha256"] for e in entries}
        pool = ThreadPoolExecutor(
            max_workers=2, thread_name_prefix="replay-verify", initializer=lower_priority
        )
        first: dict[Path, int] = {}  # a file listed twice goes at its earlier range
        for e in entries:
            member = trace.member(e["path"])
            first[member] = min(first.get(member, int(e["batch_start"])), int(e["batch_start"]))
        order = sorted(first, key=first.__getitem__)  # stable: lookups before updates
        # files unchanged since this machine matched them with the manifest are not
        # hashed again (`replay._verified`); what is hashed now is recorded on success
        self._records = Records(trace.path)
        self._started_ns = now_ns()
        self._hashed: dict[str, tuple[Identity, str]] = {}
        self._digests = {m: pool.submit(self._digest, m) for m in order}
        pool.shutdown(wait=False)

    def _digest(self, member: Path) -> str | OSError:
        before = identity(member)
        recorded = self._records.digest(member, before)
        if recorded is not None:
            return recorded
        digest = _digest_or_error(member)
        if isinstance(digest, str) and before is not None and identity(member) == before:
            self._hashed[os.path.realpath(member)] = (before, digest)
        return digest

    def file(self, member: Path) -> None:
        """Wait for one file's digest; raise TraceError unless it matches."""
        digest = self._digests[member].result()
        if isinstance(digest, OSError):
            raise TraceError(f"{member}: cannot be read ({digest.strerror})")
        if digest != self._expected[member]:
            raise TraceError(f"{member}: checksum does not match the manifest")

    def __call__(self) -> None:
        """Wait for every file; raise for the first mismatch in manifest order. When
        all match, record the digests hashed (`replay._verified`)."""
        for member in self._expected:
            self.file(member)
        self._records.save(self._hashed, self._started_ns)


def _digest_or_error(member: Path) -> str | OSError:
    found = claim_or_wait(member)  # hashed while the command imported (`replay._prehash`)
    if found is not None:
        return found
    # the writer's module (and the update sets' kernels it imports) only where a file was
    # not hashed already: a command that reads a trace writes none
    from replay.trace.writer import sha256_file

    try:
        return sha256_file(member)
    except OSError as exc:
        return exc


def open_trace(path: str | Path, *, allow_empty: bool = False) -> Trace:
    """Open a trace folder for streaming; raises TraceError if it is not a valid trace,
    or if it is empty (no batches or no lookups) unless `allow_empty`."""
    trace = Trace(path)
    if not allow_empty:
        trace.check_not_empty()
    return trace
