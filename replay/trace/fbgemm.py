"""`replay ingest --format fbgemm`: Meta's released embedding traces into a trace folder.

The input is the `dlrm_datasets` format that FBGEMM's TBE benchmarks read
(facebookresearch/dlrm_datasets, README: "each pt file contains an independently
generated synthetic dataset", e.g. ``fbgemm_t856_bs65536.pt`` "represents a single batch
of 65536 samples for 856 tables", loaded with ``indices, offsets, lengths =
torch.load(path)``). What this module assumes of a file, and where FBGEMM says so
(pytorch/FBGEMM, ``fbgemm_gpu/fbgemm_gpu/tbe/utils/requests.py``,
``generate_requests_from_data_file``; ``fbgemm_gpu/bench/tbe/README.md``;
``--requests_data_file`` and ``--tables`` in
``fbgemm_gpu/bench/tbe/split_table_batched_embeddings_benchmark.py``):

- ``torch.load(requests_data_file, weights_only=True)`` gives ``indices, offsets, *rest``;
  FBGEMM ignores the rest. The released files hold a third tensor, ``lengths``, of shape
  [tables, batch]; this ingester needs it (it is the only place the table count and the
  batch size are written; FBGEMM takes them from ``--num-tables`` and ``--batch-size``)
  and checks it against the offsets.
- ``offsets`` is table-major, one entry per (table, sample) plus one:
  ``numel(offsets) - 1 == T * B`` is asserted, and table t's bags are
  ``offsets[B * t : B * (t + 1) + 1]``, offsets into the one ``indices`` tensor (not
  restarting per table): table t's indices are ``indices[offsets[B*t]:offsets[B*(t+1)]]``.
  So sample s of table t looks up ``indices[offsets[t*B + s]:offsets[t*B + s + 1]]``.
- Indices are row ids local to their table. FBGEMM keeps the file's dtypes unless its
  caller asks for others (``maybe_to_dtype``; the benchmark asks for ``torch.long``, and
  ``--indices-dtype 32|64`` exists), so int32 and int64 (any integer dtype) are read.
- Table sizes are not in the file: FBGEMM asserts ``E > max(indices_tensor)`` against
  its ``--num-embeddings``. Here table t has max(row id) + 1 rows over all files (a lower
  bound of its real size), or the rows given (``table_rows``).
- Negative ids: FBGEMM's synthetic requests use -1 for pruned rows
  (``emulate_pruning``), but nothing in a data file is read that way; a negative id is
  refused here.
- FBGEMM's ``--tables 4,7`` picks tables out of a file; this ingester takes all tables.

Checks (each failure is an InputError naming the file; ConfigError for a bad option):
integer dtypes, a 1-D ``indices`` and ``offsets`` and a 2-D ``lengths``, ``offsets``
starting at 0, non-decreasing, ending at ``len(indices)`` and stepping by ``lengths``
(in table-major order); no negative id; ids below the given table rows; the same table
count and batch size in every file (the trace format records one batch size).

Each file becomes one batch, files in the order given. A batch's lookups in the trace
are sorted by table and in sample order inside a table (`replay.trace.format`), which is
exactly the file's order: the rows of batch b are `indices` of file b as they stand,
and the table column repeats t once per index of table t. The trace keeps no bag
boundaries (no trace does: Criteo's bags hold one lookup), so per-table bag statistics
(mean and largest pooling factor, empty bags) go to the manifest's ``workload.tables``.
Update sets follow `replay.trace.updates` with plain SGD, as the Criteo ingester's do.

Reading a file (`read_tensors`): with torch 2.6 or later installed,
``torch.load(weights_only=True, map_location="cpu", mmap=True)`` (FBGEMM's call, with the
file mapped rather than copied); without it, or with an older torch (`MIN_TORCH`),
`replay.trace.torch_zip`, which reads the same zip format with the same allow-list idea.
Both give numpy arrays; torch 2.14 and the built-in reader were checked to give the same
arrays and the same trace bytes (the tests use the built-in one).

Memory: files are read one at a time, and a row group (whole batches; the layout is
planned from the first file) is freed as soon as it is written. A batch costs about 40
bytes per lookup at its peak: the batch, table and row columns (10 bytes), the update-set
kernel's outputs (14), the memory-mapped indices (8, page cache) and the Parquet writer's
buffers; measured: 2.25 GB peak RSS for two files of 52 M lookups over 100 tables (2-core
VM, 11 s). The dlrm_datasets files of 2021 and 2022 are gzipped (``.pt.gz``): both
readers refuse them with a hint to decompress them first, since a zip archive is read by
seeking and a gzip stream cannot seek.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import warnings
import zipfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from replay import _arrow
from replay._files import check_regular, open_regular
from replay._memory import MAX_ROW_SPACE, row_space
from replay.errors import ConfigError, InputError, opt
from replay.trace import torch_zip
from replay.trace.criteo import check_input_files
from replay.trace.format import (
    KINDS,
    LOOKUPS_DIR,
    MAX_BATCH_SIZE,
    MAX_TABLE_ROWS,
    UINT32_ROWS,
    UPDATES_DIR,
    build_manifest,
    lookups_schema,
    plan_layout,
    row_dtype_for,
    updates_schema,
)
from replay.trace.updates import update_sets
from replay.trace.writer import TraceFolderWriter

MAX_TABLES = 1 << 16  # the trace's table column is uint16
READERS = ("auto", "torch", "builtin")
_ROWS_TEXT = re.compile(r"[0-9]+(_[0-9]+)*")  # what int() reads, in ASCII digits
ROWS_OBSERVED = "max row id + 1 per table over all files"
ROWS_GIVEN = "given (--table-rows)"


@dataclass(frozen=True)
class FbgemmIngestResult:
    """What `ingest_fbgemm` wrote."""

    path: Path
    files: int
    batches: int
    lookups: int
    tables: int
    batch_size: int
    table_rows: tuple[int, ...]
    rows_rule: str  # ROWS_OBSERVED or ROWS_GIVEN


def table_name(t: int) -> str:
    """Table t's name: FBGEMM numbers tables from 0 (``--tables 44``)."""
    return f"T{t}"


# -- reading a file ----------------------------------------------------------------------------


# torch.load(weights_only=True) is the safety of the torch path, and before torch 2.6 it
# could be made to run code (CVE-2025-32434, GHSA-53q9-r3pm-6pq6; fixed in 2.6.0). The
# torch path is kept, not dropped for the built-in reader, because torch reads every file
# it wrote (legacy pre-1.6 files, any layout) where the built-in reader reads the released
# one; so the `fbgemm` extra asks for torch>=2.6 and an older torch installed beside
# replay is never used (``auto`` reads with the built-in reader instead).
MIN_TORCH = (2, 6)


def torch_version() -> str | None:
    """The installed torch's version, from its metadata (importing torch takes seconds),
    or None when torch is not installed."""
    if importlib.util.find_spec("torch") is None:
        return None
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"  # importable but not installed as a package: no version to trust


def torch_is_safe(version: str) -> bool:
    """Whether torch `version` ("2.6.0+cu124", "2.10.1") is MIN_TORCH or later."""
    match = re.match(r"(\d+)\.(\d+)", version)
    return match is not None and (int(match[1]), int(match[2])) >= MIN_TORCH


def torch_available() -> bool:
    """Whether a torch that `read_tensors` may use is installed (MIN_TORCH or later)."""
    version = torch_version()
    return version is not None and torch_is_safe(version)


def _check_torch(version: str | None) -> None:
    """ConfigError unless torch `version` may read untrusted files (``reader="torch"``)."""
    if version is None:
        raise ConfigError("reader='torch': torch is not installed (the fbgemm extra installs it)")
    if not torch_is_safe(version):
        raise ConfigError(
            f"reader='torch': torch {version} is older than "
            f"{'.'.join(map(str, MIN_TORCH))}, whose torch.load(weights_only=True) can be "
            "made to run code (CVE-2025-32434); upgrade torch or use reader='builtin'"
        )


def read_tensors(path: str | Path, reader: str = "auto") -> Any:
    """What the file at `path` holds, its tensors as numpy arrays.

    The one place the reader is chosen (`reader`: ``auto`` is torch when torch 2.6 or
    later is installed, else the built-in reader; an older torch is never used, see
    `MIN_TORCH`). Two readers, because torch is a 2+ GB dependency that nothing
    else in replay needs: with the ``fbgemm`` extra, torch's own ``weights_only`` loader
    reads every file torch can write; without it, `replay.trace.torch_zip` reads the same
    zip format with the same idea (an allow-list of the globals of plain tensors, nothing
    else imported or run), which covers the released files.
    """
    path = Path(path)
    if reader not in READERS:
        raise ConfigError(f"reader must be one of {', '.join(READERS)}, not {reader!r}")
    check_regular(path)  # a FIFO or a device would block or never end either reader
    if reader == "auto":
        reader = "torch" if torch_available() else "builtin"
    if reader == "builtin":
        return torch_zip.load(path)
    _check_torch(torch_version())
    return _load_with_torch(path)


def _load_with_torch(path: Path) -> Any:
    import torch

    _check_torch(str(torch.__version__))  # the module imported, in case its metadata lied

    with open_regular(path) as handle:  # torch's own message for these says little
        if handle.read(2) == b"\x1f\x8b":
            raise InputError(f"{path}: gzip-compressed; decompress it first (gunzip -k FILE)")
    try:
        with warnings.catch_warnings():
            # torch warns about pickle protocols it may not read; it refuses them if so
            warnings.simplefilter("ignore")
            # mmap (zip files only): a billion indices stay in the page cache, not a copy
            obj = torch.load(
                path, weights_only=True, map_location="cpu", mmap=zipfile.is_zipfile(path)
            )
    except Exception as exc:  # torch raises many types for a file it refuses
        raise InputError(f"{path}: torch.load refused it ({_torch_reason(exc)})") from None
    if not isinstance(obj, tuple | list):
        return obj

    def convert(item: Any) -> Any:
        if not isinstance(item, torch.Tensor):
            return item
        if item.dtype in (torch.bfloat16,) or item.dtype.is_complex:
            raise InputError(f"{path}: holds a {item.dtype} tensor, not integers")
        return item.detach().cpu().contiguous().numpy()

    return type(obj)(convert(item) for item in obj)


def _torch_reason(exc: Exception) -> str:
    """The reason in torch's message, on one line (weights_only's message is a
    paragraph of advice around it)."""
    text = str(exc)
    if text.startswith("Weights only load failed") and "\n" in text:
        text = text.split("\n", 1)[1].split("Check the documentation of torch.load")[0]
        text = "weights_only: " + text.split("WeightsUnpickler error:")[-1]
    text = torch_zip.printable(" ".join(text.split())) or type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."


# -- one file's batch --------------------------------------------------------------------------


@dataclass(frozen=True)
class _Batch:
    """One file checked: its indices in file order and where each table begins."""

    indices: np.ndarray  # 1-D, integer, non-negative
    bounds: np.ndarray  # int64 [tables + 1]: table t is indices[bounds[t]:bounds[t + 1]]
    lengths: np.ndarray  # int64 [tables, batch]: each bag's lookups
    table_max: np.ndarray  # int64 [tables]: the largest row id (-1 for no lookups)

    @property
    def tables(self) -> int:
        return self.lengths.shape[0]

    @property
    def batch_size(self) -> int:
        return self.lengths.shape[1]


def _describe(obj: Any) -> str:
    """What a file holds, in a few words: ``a tuple of 2: int64[12], int64[13]``."""

    def short(x: Any) -> str:
        if isinstance(x, np.ndarray):
            return f"{x.dtype}{list(x.shape)}"
        return type(x).__name__

    if isinstance(obj, tuple | list):
        items = ", ".join(short(x) for x in obj[:4]) + (", ..." if len(obj) > 4 else "")
        return f"a {type(obj).__name__} of {len(obj)}" + (f": {items}" if obj else "")
    return f"a tensor {short(obj)}" if isinstance(obj, np.ndarray) else f"a {short(obj)}"


def check_batch(path: Path, obj: Any) -> _Batch:
    """The checks of the module docstring on what one file holds."""
    if (
        not isinstance(obj, tuple | list)
        or len(obj) != 3
        or not all(isinstance(x, np.ndarray) for x in obj)
    ):
        raise InputError(
            f"{path}: holds {_describe(obj)}; an FBGEMM trace file holds three tensors "
            "(indices, offsets, lengths)"
        )
    indices, offsets, lengths = obj
    named = (("indices", indices, 1), ("offsets", offsets, 1), ("lengths", lengths, 2))
    for name, array, ndim in named:
        if array.dtype.kind not in "iu":
            raise InputError(f"{path}: {name} are {array.dtype}, not integers")
        if array.ndim != ndim:
            want = "[tables, batch]" if ndim == 2 else "1-D"
            raise InputError(f"{path}: {name} has shape {list(array.shape)}, not {want}")
    tables, batch_size = lengths.shape
    if tables < 1 or batch_size < 1:
        raise InputError(f"{path}: lengths has shape {list(lengths.shape)}: no tables or samples")
    if tables > MAX_TABLES:
        raise InputError(f"{path}: {tables} tables; a trace holds at most {MAX_TABLES}")
    if batch_size > MAX_BATCH_SIZE:  # the reader refuses a trace of larger batches
        raise InputError(
            f"{path}: batches of {batch_size:,} samples; a trace holds at most "
            f"{MAX_BATCH_SIZE:,} (2^26, the workload spec's limit)"
        )
    if len(offsets) != tables * batch_size + 1:
        raise InputError(
            f"{path}: {len(offsets)} offsets for lengths of shape [{tables}, {batch_size}]; "
            f"FBGEMM's layout has tables x batch + 1 = {tables * batch_size + 1}"
        )
    for name, array in (("offsets", offsets), ("lengths", lengths)):
        if array.dtype == np.uint64 and len(array) and int(array.max()) > np.iinfo(np.int64).max:
            raise InputError(f"{path}: {name} hold values beyond 2^63")
    offsets = offsets.astype(np.int64, copy=False)
    lengths = lengths.astype(np.int64, copy=False)
    steps = np.diff(offsets)
    if offsets[0] != 0 or offsets[-1] != len(indices):
        raise InputError(
            f"{path}: offsets run from {offsets[0]} to {offsets[-1]}, not from 0 to the "
            f"{len(indices):,} indices"
        )
    if len(steps) and steps.min() < 0:
        at = int(np.argmax(steps < 0))
        raise InputError(f"{path}: offsets decrease at entry {at + 1} (table {at // batch_size})")
    if not np.array_equal(steps, lengths.reshape(-1)):
        at = int(np.argmax(steps != lengths.reshape(-1)))
        t, s = divmod(at, batch_size)
        raise InputError(
            f"{path}: lengths[{t}][{s}] is {lengths[t, s]} but its offsets step by {steps[at]}"
        )
    bounds = offsets[::batch_size]  # table t begins at offsets[t * B]
    if indices.dtype.kind == "i" and len(indices) and indices.min() < 0:
        at = int(np.argmax(indices < 0))
        t = int(np.searchsorted(bounds, at, side="right")) - 1
        raise InputError(f"{path}: table {t} looks up the negative row id {indices[at]}")
    return _Batch(indices, bounds, lengths, _table_max(indices, bounds))


def _table_max(indices: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """The largest id of each table (-1 where a table has no lookups), in one pass."""
    counts = np.diff(bounds)
    out = np.full(len(counts), -1, dtype=np.int64)
    busy = counts > 0
    if busy.any():
        # reduceat over the busy tables' starts: each segment runs to the next busy
        # table's start, and the empty tables between hold nothing
        top = np.maximum.reduceat(indices, bounds[:-1][busy])
        if top.dtype == np.uint64 and int(top.max()) > MAX_TABLE_ROWS:
            # the caller names the file
            raise InputError(
                f"a row id of {int(top.max()):,}, beyond the 2^63 - 1 rows that a trace's "
                "int64 row keys can number"
            )
        out[busy] = top
    return out


# -- options -----------------------------------------------------------------------------------


def parse_table_rows(value: str | int | Sequence[int] | None) -> tuple[int, ...] | None:
    """`--table-rows`: one number for every table or a comma list, one per table."""
    if value is None:
        return None
    if isinstance(value, str):
        parts = [p.strip() for p in value.split(",")]
        # ASCII digits only: str.isdigit() passes "²", which int() then refuses
        if not all(_ROWS_TEXT.fullmatch(p) for p in parts):
            raise ConfigError(
                f"{opt('--table-rows')} takes a number or a comma list of numbers, not "
                f"{value[:60]!r}{'...' if len(value) > 60 else ''}"
            )
        for p in parts:
            # past 19 digits a number is out of range anyway, and int() of thousands of
            # digits raises ValueError (sys.get_int_max_str_digits)
            if len(p.replace("_", "").lstrip("0")) > 19:
                raise ConfigError(
                    f"{opt('--table-rows')}: every table needs between 1 and 2^63 - 1 rows, "
                    f"not {p[:40]}{'...' if len(p) > 40 else ''}"
                )
        rows = tuple(int(p) for p in parts)
    elif isinstance(value, int) and not isinstance(value, bool):
        rows = (value,)
    elif isinstance(value, Iterable):
        rows = tuple(value)
    else:
        rows = (value,)  # refused below, with what it is
    for r in rows:
        if (
            isinstance(r, bool)
            or not isinstance(r, int | np.integer)
            or not 1 <= r <= MAX_TABLE_ROWS
        ):
            raise ConfigError(
                f"{opt('--table-rows')}: every table needs between 1 and 2^63 - 1 rows, not {r!r}"
            )
    return tuple(int(r) for r in rows)


# -- the ingester ------------------------------------------------------------------------------


class _WideRows(Exception):
    """A row id needs uint64 row columns: start over with them."""


@dataclass
class _State:
    """What the files so far agree on and add up to."""

    tables: int
    batch_size: int
    first: Path
    given_rows: np.ndarray | None  # int64 [tables] or None
    row_dtype: np.dtype
    table_max: np.ndarray  # int64 [tables]
    lookups: np.ndarray  # int64 [tables]: lookups per table over all files
    largest_bag: np.ndarray  # int64 [tables]
    empty_bags: np.ndarray  # int64 [tables]

    def rows(self) -> np.ndarray:
        """Table rows: given, or what the files so far need (at least 1)."""
        if self.given_rows is not None:
            return self.given_rows
        return np.maximum(self.table_max + 1, 1)


def _start_state(path: Path, batch: _Batch, table_rows: tuple[int, ...] | None) -> _State:
    given = None
    if table_rows is not None:
        if len(table_rows) not in (1, batch.tables):
            raise ConfigError(
                f"{opt('--table-rows')} lists {len(table_rows)} tables but {path} has "
                f"{batch.tables}"
            )
        given = np.broadcast_to(np.array(table_rows, dtype=np.int64), batch.tables).copy()
        _check_given_space(given)
    zeros = np.zeros(batch.tables, dtype=np.int64)
    return _State(
        tables=batch.tables,
        batch_size=batch.batch_size,
        first=path,
        given_rows=given,
        row_dtype=row_dtype_for(int(given.max()) if given is not None else UINT32_ROWS),
        table_max=np.full(batch.tables, -1, dtype=np.int64),
        lookups=zeros.copy(),
        largest_bag=zeros.copy(),
        empty_bags=zeros,
    )


def _accept(state: _State, path: Path, batch: _Batch) -> None:
    """Check one more file against the first and the given rows; add it to the totals."""
    if batch.tables != state.tables:
        raise InputError(f"{path}: {batch.tables} tables, but {state.first} has {state.tables}")
    if batch.batch_size != state.batch_size:
        raise InputError(
            f"{path}: a batch of {batch.batch_size} samples, but {state.first} has "
            f"{state.batch_size} (a trace records one batch size)"
        )
    if state.given_rows is not None:
        over = batch.table_max >= state.given_rows
        if over.any():
            t = int(np.argmax(over))
            rows = int(state.given_rows[t])
            raise InputError(
                f"{path}: table {t} looks up row {batch.table_max[t]}, but "
                f"{opt('--table-rows')} gives it {rows:,} rows (ids 0 to {rows - 1:,})"
            )
    else:
        # before _WideRows: a file no trace can hold is refused, not read a second time
        _check_observed_space(path, np.maximum(state.table_max, batch.table_max))
        if state.row_dtype == np.uint32 and batch.table_max.max() >= UINT32_ROWS:
            raise _WideRows
    np.maximum(state.table_max, batch.table_max, out=state.table_max)
    state.lookups += np.diff(batch.bounds)
    np.maximum(state.largest_bag, batch.lengths.max(axis=1), out=state.largest_bag)
    state.empty_bags += (batch.lengths == 0).sum(axis=1)


# The trace's row space (Σ rows over its tables) must fit the flat int64 keys that every
# other command numbers rows by (`replay._memory.check_row_space`, as `inspect` and `run`
# refuse): a trace beyond it would be written only to be refused, and a table of 2^63
# rows overflows the int64 row counts that the update-set kernel indexes by.
_LIMIT = f"2^63 - 1 ({MAX_ROW_SPACE:,})"


def _check_given_space(given: np.ndarray) -> None:
    total = row_space(given.tolist())
    if total > MAX_ROW_SPACE:
        raise ConfigError(
            f"{opt('--table-rows')} gives {len(given)} tables {total:,} rows in all, above "
            f"the {_LIMIT} rows over all tables that a trace's int64 row keys can number "
            f"({len(given)} tables of one size: at most {MAX_ROW_SPACE // len(given):,} "
            "rows each)"
        )


def _check_observed_space(path: Path, table_max: np.ndarray) -> None:
    """`table_max`: each table's largest row id over the files so far, this one included."""
    top = int(table_max.max())
    if top < MAX_ROW_SPACE // len(table_max):
        return  # every table's rows (at most top + 1) fit, however many tables
    total = row_space(np.maximum(table_max, 0).tolist()) + len(table_max)  # rows = id + 1
    if total > MAX_ROW_SPACE:
        t = int(np.argmax(table_max))
        raise InputError(
            f"{path}: table {t} looks up row {top:,}, which makes the trace's "
            f"{len(table_max):,} tables (rows = largest id + 1) {total:,} rows in all, "
            f"above the {_LIMIT} rows over all tables that a trace's int64 row keys can number"
        )


def _load(path: Path, reader: str) -> _Batch:
    try:
        return check_batch(path, read_tensors(path, reader))
    except InputError as exc:
        if str(exc).startswith(str(path)):
            raise
        raise InputError(f"{path}: {exc}") from None


def ingest_fbgemm(
    files: str | Path | Iterable[str | Path],
    out: str | Path,
    *,
    table_rows: str | int | Sequence[int] | None = None,
    force: bool = False,
    progress: bool | Callable[[int, int], None] = False,
    reader: str = "auto",
) -> FbgemmIngestResult:
    """Write the FBGEMM trace files `files` (one batch each, in order) as the trace
    folder `out`.

    `table_rows`: one number for every table or one per table (default: each table's
    largest row id + 1 over all files). Raises ConfigError for bad options, InputError
    for a file that is not an FBGEMM trace file (naming it and what it holds), and
    OutputError when `out` exists (unless `force`). On error nothing is left at `out`
    or beside it. `reader`: ``auto``, ``torch`` or ``builtin`` (`read_tensors`).
    `progress`: True draws a bar on stderr; a function is called with (files read,
    files) after each file.
    """
    paths = [Path(files)] if isinstance(files, str | Path) else [Path(f) for f in files]
    rows_option = parse_table_rows(table_rows)
    if reader not in READERS:
        raise ConfigError(f"reader must be one of {', '.join(READERS)}, not {reader!r}")
    check_input_files(paths)
    out = Path(out)
    plan = {
        "created_by": "ingest",
        "format": "fbgemm",
        "files": [str(p) for p in paths],
        "table_rows": list(rows_option) if rows_option is not None else None,
    }
    # `TraceFolderWriter` claims `out` (its `.NAME.partial`, `replay._output.partial_path`)
    # until `finish` renames it into place or `abort` removes it
    writer = TraceFolderWriter(out, plan, force=force, resume=None)  # no --resume
    try:
        try:
            return _ingest_into(writer, paths, rows_option, progress, reader, wide=False)
        except _WideRows:
            # a table beyond 2^32 rows: uint64 row columns, written over in the same
            # folder, so that `out` stays claimed (and --force is never assumed) meanwhile
            _clear_parts(writer)
            return _ingest_into(writer, paths, rows_option, progress, reader, wide=True)
    except BaseException:
        writer.abort()
        raise


def _clear_parts(writer: TraceFolderWriter) -> None:
    for kind in KINDS:
        for part in (writer.partial / kind).iterdir():
            part.unlink()


def _ingest_into(
    writer: TraceFolderWriter,
    paths: list[Path],
    rows_option: tuple[int, ...] | None,
    progress: bool | Callable[[int, int], None],
    reader: str,
    wide: bool,
) -> FbgemmIngestResult:
    if callable(progress):
        bar, advance = None, _reporting(progress, len(paths))
    else:
        bar, advance = _progress_bar(len(paths)) if progress else (None, _no_progress)
    try:
        first = _load(paths[0], reader)
        state = _start_state(paths[0], first, rows_option)
        if wide and state.given_rows is None:
            state.row_dtype = np.dtype(np.uint64)
        layout = plan_layout(max(len(first.indices), 1))
        look_schema, upd_schema = lookups_schema(state.row_dtype), updates_schema(state.row_dtype)
        schemas = {LOOKUPS_DIR: look_schema, UPDATES_DIR: upd_schema}
        groups = _Peek(_row_groups(paths, first, state, layout, reader, advance))
        del first
        per_file = layout["batches_per_file"] // layout["batches_per_row_group"]
        files: dict[str, list[dict[str, Any]]] = {kind: [] for kind in KINDS}
        lookups = part = 0
        while groups.head is not None:
            spans: list[tuple[int, int, int]] = []
            entries = writer.write_parts(part, schemas, groups.take(per_file, spans))
            for kind in KINDS:
                files[kind].append(
                    {**entries[kind], "batch_start": spans[0][0], "batch_stop": spans[-1][1]}
                )
            lookups += sum(n for _, _, n in spans)
            part += 1
    finally:
        if bar is not None:
            bar.stop()
    return _finish(writer, paths, state, layout, files, lookups)


_Group = tuple[int, int, pa.Table, pa.Table]  # batch_start, batch_stop, lookups, updates


class _Peek:
    """The row groups in order, the next one read ahead (to know when they end)."""

    def __init__(self, groups: Iterator[_Group]) -> None:
        self.groups = groups
        self.head: _Group | None = next(groups, None)

    def take(self, limit: int, spans: list[tuple[int, int, int]]) -> Iterator[dict[str, pa.Table]]:
        """Up to `limit` row groups for one part file; each one's span goes to `spans`."""
        while self.head is not None and len(spans) < limit:
            start, stop, look, upd = self.head
            self.head = None  # the writer holds the group now, not this reader
            spans.append((start, stop, look.num_rows))
            group = {LOOKUPS_DIR: look, UPDATES_DIR: upd}
            del look, upd
            yield group
            # the writer asks for the next group once it has written this one: free this
            # one now, not when its loop variable moves on (after the next file is built)
            group.clear()
            self.head = next(self.groups, None)


def _row_groups(
    paths: list[Path],
    first: _Batch | None,
    state: _State,
    layout: dict[str, int],
    reader: str,
    advance: Callable[[], None],
) -> Iterator[_Group]:
    """(batch_start, batch_stop, lookups, updates) of each row group, in order: the
    files read one at a time, `batches_per_row_group` of them per group."""
    per_group = layout["batches_per_row_group"]
    frozen = np.zeros(state.tables, dtype=np.bool_)
    look_schema, upd_schema = lookups_schema(state.row_dtype), updates_schema(state.row_dtype)
    pieces: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    start = 0
    for b, path in enumerate(paths):
        batch = first if first is not None else _load(path, reader)
        first = None  # held no longer than its group
        _accept(state, path, batch)
        n = len(batch.indices)
        table = np.repeat(np.arange(state.tables, dtype=np.uint16), np.diff(batch.bounds))
        pieces.append(
            (np.full(n, b, dtype=np.uint32), table, batch.indices.astype(state.row_dtype))
        )
        del batch
        advance()
        if len(pieces) == per_group or b == len(paths) - 1:
            cols = [
                np.concatenate(c) if len(pieces) > 1 else c[0] for c in zip(*pieces, strict=True)
            ]
            pieces.clear()
            stop = b + 1
            # the rows so far: every id in this group is below them (the update-set
            # kernel indexes per-row state by id)
            ub, ut, ur, uc = update_sets(
                cols[0], cols[1], cols[2], start, stop, state.rows(), frozen, 1
            )
            look = _arrow.table(
                dict(zip(("batch", "table", "row"), cols, strict=True)), look_schema
            )
            upd = _arrow.table({"batch": ub, "table": ut, "row": ur, "count": uc}, upd_schema)
            del cols, ub, ut, ur, uc  # the tables hold them; the writer drops the tables
            yield start, stop, look, upd
            del look, upd
            start = stop


def _finish(
    writer: TraceFolderWriter,
    paths: list[Path],
    state: _State,
    layout: dict[str, int],
    files: dict[str, list[dict[str, Any]]],
    lookups: int,
) -> FbgemmIngestResult:
    if lookups == 0:
        raise InputError(f"{', '.join(map(str, paths))}: no lookups in the input")
    rows = [int(r) for r in state.rows()]
    batches = len(paths)
    samples = batches * state.batch_size
    rule = ROWS_GIVEN if state.given_rows is not None else ROWS_OBSERVED
    tables = [{"name": table_name(t), "rows": r} for t, r in enumerate(rows)]
    workload = {
        "name": "fbgemm-ingest",
        "batch_size": state.batch_size,
        "batches": batches,
        "update": {"rule": "sgd", "accumulate_batches": 1},
        "tables": [
            {
                **t,
                # the bags' sizes, which the trace's lookups no longer separate
                "pooling_mean": round(int(state.lookups[i]) / samples, 6),
                "pooling_max": int(state.largest_bag[i]),
                "empty_bags": int(state.empty_bags[i]),
            }
            for i, t in enumerate(tables)
        ],
    }
    source = {
        "kind": "fbgemm",
        "files": [p.name for p in paths],
        "table_rows": rule,
        "note": "each file is an independent sample of one batch, not consecutive training steps",
    }
    manifest = build_manifest(
        created_by="ingest",
        workload=workload,
        tables=tables,
        batches=batches,
        batch_size=state.batch_size,
        row_dtype=state.row_dtype,
        layout=layout,
        files=files,
        source=source,
    )
    path = writer.finish(manifest)
    return FbgemmIngestResult(
        path=path,
        files=len(paths),
        batches=batches,
        lookups=lookups,
        tables=state.tables,
        batch_size=state.batch_size,
        table_rows=tuple(rows),
        rows_rule=rule,
    )


def _no_progress() -> None:
    pass


def _reporting(report: Callable[[int, int], None], total: int) -> Callable[[], None]:
    """An `advance()` per file that reports the files read so far of `total`."""
    done = [0]

    def advance() -> None:
        done[0] += 1
        report(done[0], total)

    return advance


def _progress_bar(total: int) -> tuple[Any, Callable[[], None]]:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    bar = Progress(
        TextColumn("ingest"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("files"),
        console=Console(stderr=True),
        transient=True,
    )
    task = bar.add_task("ingest", total=total)
    bar.start()
    return bar, lambda: bar.advance(task, 1)
