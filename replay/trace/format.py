"""Trace format version 1: constants, Parquet settings and manifest validation.

Layout of a trace folder (DESIGN section 3)::

    manifest.json                 format_version, tool, workload, layout, files with SHA-256
    lookups/part-NNNNN.parquet    batch uint32, table uint16, row uint32|uint64
    updates/part-NNNNN.parquet    batch uint32, table uint16, row uint32|uint64, count uint32

Lookups are sorted by (batch, table) and in sample order inside a group; updates are
sorted by (batch, table, row). Files cover contiguous batch ranges and every Parquet row
group holds whole batches, so a reader can stream any batch range.

Parquet settings: LZ4 (the LZ4_RAW codec) everywhere; `batch` and `table` PLAIN-encoded
(long runs that the codec folds to almost nothing, and cheaper to encode than
dictionary+RLE); `row` and `count` BYTE_STREAM_SPLIT, which compresses better and faster
than PLAIN (with zstd, 107 vs 58 M values/s on one core, pyarrow 26).
LZ4 rather than zstd (DESIGN section 3 measured zstd): a replay reads a trace many times
and decoding was its reader thread's largest cost. On the 53 M-lookup criteo-kaggle trace
(2-core VM, pyarrow 26): reading lookups and updates 0.54 -> 0.32 s, files 12% larger
(1.69 -> 1.90 B per lookup for `lookups`, 2.37 -> 2.65 B in all), generation time
unchanged (1.62-1.70 s either way; sampling dominates). Every reader we promise (polars,
pyarrow, DuckDB, pandas) reads these codecs and encodings with no option; traces written
with zstd (before this change) read the same.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np
import pyarrow as pa

from replay._files import MANIFEST, read_json
from replay._memory import MAX_ROW_SPACE, format_count
from replay._schema import check_version
from replay.errors import TraceError

FORMAT_VERSION = 1
MANIFEST_NAME = "manifest.json"
LOOKUPS_DIR = "lookups"
UPDATES_DIR = "updates"
KINDS = (LOOKUPS_DIR, UPDATES_DIR)

# The largest row id a uint32 column can hold; tables with more rows use uint64.
UINT32_ROWS = 2**32
MAX_TABLE_ROWS = 2**63 - 1  # table sizes are int64 (the workload spec's limit)
MAX_BATCHES = 2**32  # batch ids are uint32
MAX_TABLES = 1 << 16  # table ids are uint16
# The workload spec's limits (`replay.workload.spec`), which the generator and the Criteo
# ingest keep: a manifest beyond them was not written by replay, and the engine's
# per-batch figures (pooled bytes, compute time) would scale by a batch nobody looked up.
MAX_BATCH_SIZE = 1 << 26
MAX_EMBEDDING_DIM = 1 << 16

PARQUET_WRITE_OPTIONS: dict[str, Any] = {
    "compression": "lz4",  # LZ4_RAW in the files; see the module docstring
    "use_dictionary": False,
    "column_encoding": {
        "batch": "PLAIN",
        "table": "PLAIN",
        "row": "BYTE_STREAM_SPLIT",
        "count": "BYTE_STREAM_SPLIT",
    },
    # min/max of `batch` per row group lets readers skip to a batch range
    "write_statistics": ["batch"],
    "write_page_index": False,
    "store_schema": False,
}


def part_name(index: int) -> str:
    return f"part-{index:05d}.parquet"


def row_dtype_for(max_rows: int) -> np.dtype:
    """uint32 row ids, or uint64 where a table has more than 2^32 rows."""
    return np.dtype(np.uint32) if max_rows <= UINT32_ROWS else np.dtype(np.uint64)


def lookups_schema(row_dtype: np.dtype) -> pa.Schema:
    return pa.schema(
        [
            pa.field("batch", pa.uint32(), nullable=False),
            pa.field("table", pa.uint16(), nullable=False),
            pa.field("row", pa.from_numpy_dtype(row_dtype), nullable=False),
        ]
    )


def updates_schema(row_dtype: np.dtype) -> pa.Schema:
    return pa.schema(
        [
            pa.field("batch", pa.uint32(), nullable=False),
            pa.field("table", pa.uint16(), nullable=False),
            pa.field("row", pa.from_numpy_dtype(row_dtype), nullable=False),
            pa.field("count", pa.uint32(), nullable=False),
        ]
    )


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write JSON to `path` through a temporary name in the same folder."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(obj, indent=2, sort_keys=False) + "\n")
    tmp.replace(path)


def safe_member(root: Path, relative: str, real_root: Path | None = None) -> Path:
    """Resolve a manifest path, refusing anything that points outside the trace folder,
    whether by its name (absolute, ``..``) or through a symlink on the way. `real_root`:
    `root.resolve()`, for a caller that checks many paths of one folder."""
    where = root / MANIFEST_NAME
    pure = PurePosixPath(relative)
    if pure.is_absolute() or ".." in pure.parts or not pure.parts:
        raise TraceError(f"{where}: file path {relative!r} leaves the trace folder")
    if "\0" in relative:
        raise TraceError(f"{where}: file path {relative!r} holds a NUL byte")
    member = root.joinpath(*pure.parts)
    try:
        real_root = root.resolve() if real_root is None else real_root
        real = member.resolve()
    except (OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop (Python < 3.13)
        detail = getattr(exc, "strerror", None) or "symlink loop"
        raise TraceError(f"{where}: file path {relative!r} cannot be resolved ({detail})") from None
    if not real.is_relative_to(real_root):
        raise TraceError(
            f"{where}: file path {relative!r} leaves the trace folder (through a symlink)"
        )
    return member


def _require(obj: dict[str, Any], key: str, kind: type | tuple[type, ...], where: Path) -> Any:
    if key not in obj:
        raise TraceError(f"{where}: manifest has no {key!r}")
    value = obj[key]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise TraceError(f"{where}: manifest field {key!r} has the wrong type")
    return value


def _check_size(obj: dict[str, Any], key: str, name: str, high: int, why: str, where: Path) -> None:
    """`obj[key]`, when present, a whole number in [1, high] (not null, a bool, a string or
    a float: the commands read it as `int(...)`)."""
    if key not in obj:
        return
    value = obj[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise TraceError(
            f"{where}: {name} is {_short(value)}; it must be a whole number from 1 to {high:,}"
        )
    if not 1 <= value <= high:
        shown = format_count(value) if abs(value) < 10**300 else _short(value)  # float's range
        raise TraceError(f"{where}: {name} is {shown}; {why}")


def _short(value: Any) -> str:
    """A manifest value as a message quotes it: JSON, cut to a few dozen characters."""
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _check_shape(manifest: dict[str, Any], where: Path) -> None:
    """The batch size and the workload's fields that the commands read from a manifest:
    each is checked here, so that every command refuses a bad one in one line instead of
    failing (or computing nonsense) wherever it is first used."""
    batch_why = f"a batch holds 1 to {MAX_BATCH_SIZE:,} samples (2^26, the workload spec's limit)"
    _check_size(manifest, "batch_size", "batch_size", MAX_BATCH_SIZE, batch_why, where)
    if "workload" not in manifest:
        return
    workload = manifest["workload"]
    if not isinstance(workload, dict):
        raise TraceError(f"{where}: workload is {_short(workload)}, not an object")
    _check_size(workload, "batch_size", "workload.batch_size", MAX_BATCH_SIZE, batch_why, where)
    _check_size(
        workload, "embedding_dim", "workload.embedding_dim", MAX_EMBEDDING_DIM,
        f"an embedding holds 1 to {MAX_EMBEDDING_DIM:,} values (the workload spec's limit)",
        where,
    )  # fmt: skip
    for key, kind, what in (("update", dict, "an object"), ("tables", list, "a list")):
        if key in workload and not isinstance(workload[key], kind):
            raise TraceError(f"{where}: workload.{key} is {_short(workload[key])}, not {what}")
    for i, table in enumerate(workload.get("tables", [])):
        if not isinstance(table, dict) or not isinstance(table.get("name", ""), str):
            raise TraceError(
                f"{where}: workload.tables[{i}] is {_short(table)}, not an object with a name"
            )


def load_manifest(root: Path) -> dict[str, Any]:
    """Read and check `manifest.json`; raise TraceError with a clear reason otherwise."""
    where = root / MANIFEST_NAME
    if not root.exists():
        raise TraceError(f"{root}: no such trace folder")
    if not root.is_dir():
        raise TraceError(f"{root}: not a folder (a trace is a folder with manifest.json)")
    if not where.exists():
        partial = root.parent / f".{root.name}.partial"
        hint = (
            " (an interrupted generation is beside it: finish it with --resume)"
            if (partial.exists())
            else ""
        )
        raise TraceError(f"{root}: no manifest.json, not a trace folder{hint}")
    # regular files only, of at most MANIFEST's limit: a FIFO or /dev/zero is refused
    manifest = read_json(where, MANIFEST, TraceError)
    if not isinstance(manifest, dict):
        raise TraceError(f"{where}: not a JSON object")
    check_version("trace-manifest", manifest, where, TraceError)
    version = _require(manifest, "format_version", int, where)
    if version != FORMAT_VERSION:
        raise TraceError(
            f"{where}: trace format version {version} is not supported "
            f"(this replay reads version {FORMAT_VERSION})"
        )
    tables = _require(manifest, "tables", list, where)
    if not tables:
        raise TraceError(f"{where}: manifest lists no tables")
    if len(tables) > MAX_TABLES:
        raise TraceError(
            f"{where}: {len(tables):,} tables; a trace holds at most {MAX_TABLES:,} "
            "(table ids are uint16)"
        )
    for i, table in enumerate(tables):
        if not isinstance(table, dict):
            raise TraceError(f"{where}: tables[{i}] is not an object")
        _require(table, "name", str, where)
        rows = _require(table, "rows", int, where)
        if not 1 <= rows <= MAX_TABLE_ROWS:
            raise TraceError(f"{where}: tables[{i}].rows must be between 1 and 2^63 - 1")
    # every command numbers a row by its table's offset + the row, one int64 key
    total_rows = sum(table["rows"] for table in tables)
    if total_rows > MAX_ROW_SPACE:
        raise TraceError(
            f"{where}: the {len(tables)} tables hold {format_count(total_rows)} rows in all, "
            "above the 2^63 - 1 rows that the replay's int64 row keys can number"
        )
    _check_shape(manifest, where)
    if not isinstance(manifest.get("layout", {}), dict):
        raise TraceError(f"{where}: layout is not an object")
    batches = _require(manifest, "batches", int, where)
    if not 0 <= batches <= MAX_BATCHES:
        raise TraceError(f"{where}: batches must be between 0 and 2^32 (batch ids are uint32)")
    _require(manifest, "row_dtype", str, where)
    if manifest["row_dtype"] not in ("uint32", "uint64"):
        raise TraceError(f"{where}: row_dtype must be uint32 or uint64")
    files = _require(manifest, "files", dict, where)
    try:
        real_root: Path | None = root.resolve()
    except (OSError, RuntimeError):
        real_root = None  # each path's check says why
    for kind in KINDS:
        entries = files.get(kind)
        if not isinstance(entries, list):
            raise TraceError(f"{where}: files.{kind} is missing or not a list")
        expected_start = 0
        listed = 0
        for entry in entries:
            if not isinstance(entry, dict):
                raise TraceError(f"{where}: files.{kind} holds a non-object entry")
            path = _require(entry, "path", str, where)
            safe_member(root, path, real_root)
            start = _require(entry, "batch_start", int, where)
            stop = _require(entry, "batch_stop", int, where)
            rows = _require(entry, "rows", int, where)
            if rows < 0:
                raise TraceError(f"{where}: files.{kind} holds a negative row count")
            listed += rows
            _require(entry, "sha256", str, where)
            if start != expected_start or stop < start:
                raise TraceError(f"{where}: files.{kind} batch ranges are not contiguous")
            expected_start = stop
        # Every writer lists files of both kinds for every batch range, so a manifest
        # whose files stop short (or list none at all) lost some: reading it would give a
        # shorter or empty trace rather than an error.
        if expected_start != batches:
            raise TraceError(f"{where}: files.{kind} cover {expected_start} of {batches} batches")
        # The totals are written from the entries; one that disagrees means an edit (the
        # entries' counts are checked against the files' footers when they are read).
        total = _require(manifest, kind, int, where)
        if total != listed:
            raise TraceError(
                f"{where}: {kind} is {total} but the files.{kind} entries add up to {listed}"
            )
    return manifest


def build_manifest(
    *,
    created_by: str,
    workload: dict[str, Any],
    tables: list[dict[str, Any]],
    batches: int,
    batch_size: int,
    row_dtype: np.dtype,
    layout: dict[str, Any],
    files: dict[str, list[dict[str, Any]]],
    source: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The manifest of a finished trace. Deterministic: no timestamps, no worker count.

    `files[kind]` entries carry path, batch_start, batch_stop, rows and sha256.
    """
    from replay._version import __version__

    manifest: dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "tool": {"name": "replay", "version": __version__},
        "created_by": created_by,
        "batches": batches,
        "batch_size": batch_size,
        "lookups": sum(int(e["rows"]) for e in files[LOOKUPS_DIR]),
        "updates": sum(int(e["rows"]) for e in files[UPDATES_DIR]),
        "row_dtype": np.dtype(row_dtype).name,
        "tables": [{"name": t["name"], "rows": int(t["rows"])} for t in tables],
        "layout": layout,
        "workload": workload,
    }
    if source is not None:
        manifest["source"] = source
    manifest["files"] = files
    return manifest


# Target sizes of the file layout: a row group of about 1 M lookups (what readers stream
# at a time) and files of 4 row groups, small enough that all cores write in parallel.
ROW_GROUP_TARGET_LOOKUPS = 1 << 20
ROW_GROUPS_PER_FILE = 4
# a batch above this many lookups is cut into pieces of tables (`plan_pieces`); below,
# a row group holds whole batches (a batch of 2 M lookups in flight costs ~34 MB)
PIECE_MIN_LOOKUPS = 2 * ROW_GROUP_TARGET_LOOKUPS


def plan_layout(lookups_per_batch: int, accumulate_batches: int = 1) -> dict[str, int]:
    """Batches per row group and per file; a function of the workload shape only.

    Row groups hold whole batches and whole gradient-accumulation windows, so each row
    group's update sets can be computed from its own lookups.
    """
    per_group = max(1, round(ROW_GROUP_TARGET_LOOKUPS / max(lookups_per_batch, 1)))
    per_group = -(-per_group // accumulate_batches) * accumulate_batches
    return {
        "batches_per_row_group": per_group,
        "batches_per_file": per_group * ROW_GROUPS_PER_FILE,
    }


def plan_pieces(
    table_lookups: Sequence[int], accumulate_batches: int = 1
) -> tuple[tuple[int, int], ...]:
    """The pieces a batch is cut into, as table ranges [t0, t1), or () for whole batches.

    A batch of more than `PIECE_MIN_LOOKUPS` lookups (`table_lookups`: each table's
    lookups per batch, fixed by the spec) with a step every batch is cut between tables
    into pieces of about `ROW_GROUP_TARGET_LOOKUPS` lookups (whole tables, one table at
    least), so a row group and a batch range in flight hold a piece, not the batch (887 M
    lookups of meta-2021 as int64 keys are 6.6 GiB). Tables never share a row, so each
    piece has its own update set (its distinct rows) and a batch's per-row statistics
    are sums over its pieces. A gradient-accumulation window spans batches, so windows
    (`accumulate_batches` > 1) are never cut. A function of the workload shape only.
    """
    looks = [max(int(n), 0) for n in table_lookups]
    if accumulate_batches != 1 or sum(looks) <= PIECE_MIN_LOOKUPS:
        return ()
    pieces = []
    start, size = 0, 0
    for t, n in enumerate(looks):
        if t > start and size + n > ROW_GROUP_TARGET_LOOKUPS:
            pieces.append((start, t))
            start, size = t, 0
        size += n
    pieces.append((start, len(looks)))
    return tuple(pieces)


def largest_piece(
    table_lookups: Sequence[int] | np.ndarray, pieces: Sequence[tuple[int, int]]
) -> int:
    """The lookups of the largest of `pieces` (table ranges, `plan_pieces`) of a batch
    (`table_lookups`: each table's lookups per batch), or 0 where batches are whole."""
    return max((int(sum(table_lookups[t0:t1])) for t0, t1 in pieces), default=0)


def piece_groups(
    row_groups: Iterable[tuple[int, int]], pieces: Sequence[tuple[int, int]]
) -> Iterator[tuple[int, int, tuple[int, int] | None]]:
    """(g0, g1, tables) of each row group [g0, g1) in trace order: tables None without
    `pieces`, else one item per batch and piece (`plan_pieces`), a row group each."""
    for g0, g1 in row_groups:
        if not pieces:
            yield g0, g1, None
            continue
        for b in range(g0, g1):
            for tables in pieces:
                yield b, b + 1, tables
