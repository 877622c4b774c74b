"""`replay ingest`: stream real Criteo TSV files into a trace folder (DESIGN sections 3, 4).

Input format (the Criteo Kaggle and 1TB click logs): one sample per line, 40 fields
separated by tabs: a label (``0`` or ``1``), 13 integer features (an optionally signed
decimal integer, any number of digits) and 26 categorical features C1..C26 (a 32-bit hash
written as 1 to 8 hex digits, either case). An empty field is a missing value. A trailing
``\\r`` (CRLF line ends) is ignored and the last line may lack its newline. Anything else
is a malformed line: a wrong field count, a label other than 0/1, a bad integer, a bad
hash, a blank line, or a line longer than `MAX_LINE_BYTES`. Files ending in ``.gz`` (or
starting with the gzip magic bytes) are decompressed as a stream; files are read in
order, as if concatenated, and line numbers in messages are 1-based per file.

Mapping of a categorical value to a row of its table (tables C1..C26, one lookup per
sample and table, pooling 1); row 0 is reserved for missing values in both rules:

- ``max_ind_range=M`` (as DLRM's ``--max-ind-range``): a present value ``h`` maps to row
  ``1 + int(h, 16) % M``; each table has ``M + 1`` rows. (DLRM itself maps a missing value
  to ``0 % M`` and so shares row 0 with hash 0; we keep missing values apart.)
- ``dictionary=True``: per table, the first distinct value seen (in file order) gets row
  1, the next new one row 2, ...; each table has (distinct values + 1) rows.

Batches are formed in input order, ``batch_size`` samples each (the last one may be
partial; bad lines skipped with ``skip_bad_lines`` are not samples). Inside a batch the
lookups are sorted by table and in sample order inside a table. Update sets follow
`replay.trace.updates` with plain SGD (no accumulation, nothing frozen). Row ids are
uint32, so ``M`` must be at most 2^32 - 2.

Implementation (no per-line Python): a reader thread reads the input in blocks of
`BLOCK_BYTES` (decompressing .gz; zlib releases the GIL); a parser thread copies them into
one numpy byte buffer, where a numba kernel (`_parse_block`) validates every field of the
complete lines and writes the 26 hashes and a missing mask per line, and a second kernel
maps them to rows (a modulo, or first-seen ids from an open-addressing hash table in numpy
arrays, grown from Python at load factor 1/2). Each full Parquet row group of samples
(`plan_layout` whole batches) goes to a thread pool that builds its lookups and update
sets; the calling thread writes the row groups in order into part files of
`batches_per_file` batches, exactly as `write_trace_from_arrays` lays them out, so the
bytes do not depend on block size, thread count, gzip or file splits. Memory is bounded
by a few blocks, `workers + 3` row groups and the dictionary (about 12 bytes per slot,
2 to 4 slots per distinct value), whatever the input size. The output is built in
``.NAME.partial/`` and moved into place only when complete; on any error it is removed,
so no partial output remains.

`ingest_reference_rows` and `reference_lookups` are slow pure-Python versions of the same
rules that the tests compare the kernels with.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import queue
import re
import threading
import zlib
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pyarrow as pa

from replay import _arrow
from replay._jit import kernel
from replay.errors import ConfigError, InputError
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

NUM_INT = 13
NUM_CAT = 26
NUM_FIELDS = 1 + NUM_INT + NUM_CAT
FIRST_CAT = 1 + NUM_INT
TABLE_NAMES = tuple(f"C{i + 1}" for i in range(NUM_CAT))

DEFAULT_BATCH_SIZE = 2048
MAX_BATCH_SIZE = 1 << 26  # the workload spec's limit
MAX_IND_RANGE = 2**32 - 2  # row ids 0..M must fit uint32
BLOCK_BYTES = 16 << 20  # bytes read (decompressed) per block
PARSE_LINES = 1 << 17  # lines parsed per kernel call (size of the hash buffer)
MAX_LINE_BYTES = 1 << 20  # a longer line is malformed (and bounds the buffer)
DICT_INITIAL_SLOTS = 1 << 16
ROW_DTYPE = np.dtype(np.uint32)
_LOOKUPS_SCHEMA = lookups_schema(ROW_DTYPE)
_UPDATES_SCHEMA = updates_schema(ROW_DTYPE)

# Reasons a line is malformed (codes returned by the parse kernel).
OK = 0
BAD_FIELD_COUNT = 1
BAD_LABEL = 2
BAD_INT = 3
BAD_CAT = 4
BLANK_LINE = 5
LINE_TOO_LONG = 6

# Byte -> hex digit value, -1 for anything that is not a hex digit.
_HEX = np.full(256, -1, dtype=np.int64)
for _i, _c in enumerate(b"0123456789abcdef"):
    _HEX[_c] = _i
for _i, _c in enumerate(b"ABCDEF"):
    _HEX[_c] = 10 + _i
del _i, _c

# status slots of `_parse_block`
_S_POS, _S_LINES, _S_GOOD, _S_BAD, _S_FIRST_BAD, _S_CODE, _S_FIELD, _S_LO, _S_HI = range(9)
_STATUS_LEN = 9


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


# -- numba kernels ------------------------------------------------------------------------


@kernel
def _field_code(field: int, flen: int, fbad: bool, ndig: int) -> int:
    """Validation code of a finished field (OK when fine or beyond the 40th field)."""
    if field == 0:
        if fbad or flen != 1:
            return BAD_LABEL
    elif field < FIRST_CAT:
        if flen != 0 and (fbad or ndig == 0):
            return BAD_INT
    elif field < NUM_FIELDS and flen != 0 and (fbad or flen > 8):
        return BAD_CAT
    return OK


@kernel
def _parse_block(
    buf: np.ndarray,
    start: int,
    stop: int,
    final: bool,
    skip: bool,
    hashes: np.ndarray,
    missing: np.ndarray,
    status: np.ndarray,
) -> None:
    """Parse the lines of buf[start:stop] into hashes[i, t] and missing[i, t].

    Only complete lines are parsed (ended by a newline, or by the end of the data when
    `final`); the scan stops at the first incomplete line, when `hashes` is full, or (unless
    `skip`) at the first malformed line. `status` receives: the position after the last
    consumed line, lines consumed, good lines written, bad lines skipped, the index (among
    the lines of this call) of the first bad line or -1, and its code, field (or field count
    for BAD_FIELD_COUNT) and the byte range of the offending field.
    """
    cap = hashes.shape[0]
    pos = start
    lines = 0
    good = 0
    bad = 0
    status[_S_FIRST_BAD] = -1
    status[_S_CODE] = OK
    while pos < stop and good < cap:
        p = pos
        field = 0
        flen = 0
        fbad = False
        ndig = 0
        val = 0
        fstart = p
        code = OK
        cfield = 0
        clo = 0
        chi = 0
        nxt = stop
        complete = False
        while True:
            term = False
            c = 0
            if p == stop:
                if not final:
                    break
                term = True
                nxt = stop
            else:
                c = buf[p]
                if c == 10:
                    term = True
                    nxt = p + 1
                elif c == 13 and p + 1 < stop and buf[p + 1] == 10:
                    term = True
                    nxt = p + 2
                elif c == 13 and p + 1 == stop and final:
                    term = True
                    nxt = stop
            if term or c == 9:
                if code == OK:
                    fc = _field_code(field, flen, fbad, ndig)
                    if fc != OK:
                        code = fc
                        cfield = field
                        clo = fstart
                        chi = p
                if field >= FIRST_CAT and field < NUM_FIELDS:
                    hashes[good, field - FIRST_CAT] = val
                    missing[good, field - FIRST_CAT] = flen == 0
                if term:
                    complete = True
                    break
                field += 1
                flen = 0
                fbad = False
                ndig = 0
                val = 0
                p += 1
                fstart = p
                continue
            if field == 0:
                if flen != 0 or (c != 48 and c != 49):
                    fbad = True
            elif field < FIRST_CAT:
                if c >= 48 and c <= 57:
                    ndig += 1
                elif flen != 0 or (c != 43 and c != 45):
                    fbad = True
            elif field < NUM_FIELDS:
                h = _HEX[c]
                if h < 0:
                    fbad = True
                else:
                    val = ((val << 4) | h) & 0xFFFFFFFF
            flen += 1
            p += 1
        if not complete:
            break
        if p - pos > MAX_LINE_BYTES:
            code = LINE_TOO_LONG
            cfield = 0
            clo = pos
            chi = pos
        elif field == 0 and flen == 0:
            code = BLANK_LINE
            cfield = 0
        elif field + 1 != NUM_FIELDS:
            code = BAD_FIELD_COUNT
            cfield = field + 1
            clo = pos
            chi = pos
        if code == OK:
            good += 1
        else:
            if status[_S_FIRST_BAD] < 0:
                status[_S_FIRST_BAD] = lines
                status[_S_CODE] = code
                status[_S_FIELD] = cfield
                status[_S_LO] = clo
                status[_S_HI] = chi
            if not skip:
                break
            bad += 1
        lines += 1
        pos = nxt
    status[_S_POS] = pos
    status[_S_LINES] = lines
    status[_S_GOOD] = good
    status[_S_BAD] = bad


@kernel
def _map_modulo(
    hashes: np.ndarray, missing: np.ndarray, lo: int, hi: int, m: int, out: np.ndarray, at: int
) -> None:
    """out[at + i - lo, t] = 0 if missing else 1 + hash % m, for lines lo..hi-1."""
    mm = np.uint32(m)  # m <= 2^32 - 2, so 1 + hash % m fits uint32
    one = np.uint32(1)
    for i in range(lo, hi):
        k = at + i - lo
        for t in range(hashes.shape[1]):
            if missing[i, t]:
                out[k, t] = 0
            else:
                out[k, t] = hashes[i, t] % mm + one


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


@kernel
def _map_dictionary(
    hashes: np.ndarray,
    missing: np.ndarray,
    lo: int,
    hi: int,
    keys: np.ndarray,
    vals: np.ndarray,
    counts: np.ndarray,
    state: np.ndarray,
    out: np.ndarray,
    at: int,
) -> int:
    """First-seen ids per table through an open-addressing table (linear probing).

    A slot holds ``((table << 32) | hash) + 1`` (0 = empty) and the row id. `state` is
    [slots used, limit, shift]. Returns hi when done, or the line at which the table
    reached its limit (the caller grows it and calls again from there; lines are
    idempotent, so the partly mapped line is simply mapped again).
    """
    mask = np.uint64(len(keys) - 1)
    shift = np.uint64(state[2])
    one = np.uint64(1)
    used = state[0]
    limit = state[1]
    for i in range(lo, hi):
        k = at + i - lo
        for t in range(hashes.shape[1]):
            if missing[i, t]:
                out[k, t] = 0
                continue
            key = ((np.uint64(t) << np.uint64(32)) | np.uint64(hashes[i, t])) + one
            slot = (key * _GOLDEN) >> shift
            while True:
                have = keys[slot]
                if have == key:
                    out[k, t] = vals[slot]
                    break
                if have == 0:
                    if used >= limit:
                        state[0] = used
                        return i
                    counts[t] += 1
                    keys[slot] = key
                    vals[slot] = counts[t]
                    used += 1
                    out[k, t] = counts[t]
                    break
                slot = (slot + one) & mask
    state[0] = used
    return hi


@kernel
def _rehash(
    keys: np.ndarray, vals: np.ndarray, new_keys: np.ndarray, new_vals: np.ndarray, shift: int
) -> None:
    mask = np.uint64(len(new_keys) - 1)
    sh = np.uint64(shift)
    one = np.uint64(1)
    for j in range(len(keys)):
        key = keys[j]
        if key == 0:
            continue
        slot = (key * _GOLDEN) >> sh
        while new_keys[slot] != 0:
            slot = (slot + one) & mask
        new_keys[slot] = key
        new_vals[slot] = vals[j]


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


# -- the dictionary -------------------------------------------------------------------------


class _Dictionary:
    """First-seen row ids per table, in numpy arrays driven by `_map_dictionary`."""

    def __init__(self, slots: int = DICT_INITIAL_SLOTS) -> None:
        self.counts = np.zeros(NUM_CAT, dtype=np.int64)
        self.keys, self.vals, self.state = self._alloc(slots, used=0)

    @staticmethod
    def _alloc(slots: int, used: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        shift = 64 - (slots.bit_length() - 1)  # slots is a power of two
        return (
            np.zeros(slots, dtype=np.uint64),
            np.zeros(slots, dtype=np.uint32),
            np.array([used, slots // 2, shift], dtype=np.int64),
        )

    def _grow(self) -> None:
        keys, vals, state = self._alloc(2 * len(self.keys), used=int(self.state[0]))
        _rehash(self.keys, self.vals, keys, vals, int(state[2]))
        self.keys, self.vals, self.state = keys, vals, state

    def map(
        self, hashes: np.ndarray, missing: np.ndarray, lo: int, hi: int, out: np.ndarray, at: int
    ) -> None:
        i = lo
        while True:
            i = _map_dictionary(
                hashes,
                missing,
                i,
                hi,
                self.keys,
                self.vals,
                self.counts,
                self.state,
                out,
                at + i - lo,
            )
            if i >= hi:
                break
            self._grow()
        if int(self.counts.max()) > MAX_IND_RANGE:
            raise InputError("more than 2^32 - 2 distinct values in one table (row ids are uint32)")


# -- reading ----------------------------------------------------------------------------------


def _open_input(path: Path) -> tuple[BinaryIO, BinaryIO]:
    """(stream of decompressed bytes, underlying file for progress)."""
    try:
        raw = open(path, "rb")  # noqa: SIM115 - closed by the caller
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a folder, not a file") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        magic = raw.read(2)
        raw.seek(0)
    except OSError as exc:
        raw.close()
        raise InputError(f"{path}: cannot read ({exc.strerror})") from None
    if magic == b"\x1f\x8b" or path.suffix == ".gz":
        return gzip.GzipFile(fileobj=raw, mode="rb"), raw
    return raw, raw


_READ_ERRORS = (OSError, EOFError, zlib.error)


def _read_chunks(
    path: Path, stream: BinaryIO, raw: BinaryIO, size: int
) -> Iterator[tuple[bytes, int]]:
    """(decompressed chunk, position in the file on disk) until the end of the stream."""
    try:
        while chunk := stream.read(size):
            yield chunk, raw.tell()
    except _READ_ERRORS as exc:
        detail = getattr(exc, "strerror", None) or str(exc)
        if isinstance(exc, EOFError | zlib.error | gzip.BadGzipFile):
            detail = f"corrupt or truncated gzip data: {exc}"
        raise InputError(f"{path}: cannot read ({detail})") from None


class _Prefetch:
    """Runs an iterator in a thread of its own, up to `depth` items ahead (reading and
    gzip decompression release the GIL, so they overlap with parsing)."""

    def __init__(self, items: Iterator[Any], depth: int = 2) -> None:
        self.items = items
        self.queue: queue.Queue[Any] = queue.Queue(maxsize=depth)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="ingest-read", daemon=True)
        self.thread.start()

    def _put(self, item: Any) -> bool:
        while not self.stop.is_set():
            try:
                self.queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                pass
        return False

    def _run(self) -> None:
        try:
            for item in self.items:
                if not self._put(item):
                    return
            self._put(_END)
        except BaseException as exc:
            self._put(exc)

    def next(self) -> Any:
        """The next item, or None at the end; raises the iterator's error."""
        item = self.queue.get()
        if item is _END:
            self.queue.put(_END)
            return None
        if isinstance(item, BaseException):
            raise item
        return item

    def close(self) -> None:
        self.stop.set()
        self.thread.join()


class _BlockReader:
    """A growable numpy byte buffer of unparsed input, unconsumed bytes kept in front."""

    def __init__(self, block_bytes: int) -> None:
        self.buf = np.empty(2 * max(block_bytes, 64), dtype=np.uint8)
        self.fill = 0
        self.eof = False

    def consume(self, pos: int) -> None:
        """Drop buf[:pos] and move the rest to the front."""
        if pos:
            rest = self.fill - pos
            self.buf[:rest] = self.buf[pos : self.fill]
            self.fill = rest

    def append(self, chunk: bytes) -> None:
        need = self.fill + len(chunk)
        if need > len(self.buf):
            bigger = np.empty(max(need, 2 * len(self.buf)), dtype=np.uint8)
            bigger[: self.fill] = self.buf[: self.fill]
            self.buf = bigger
        self.buf[self.fill : need] = np.frombuffer(chunk, dtype=np.uint8)
        self.fill = need


def _describe(code: int, field: int, value: bytes) -> str:
    shown = value[:24].decode("utf-8", errors="replace")
    shown = repr(shown + ("..." if len(value) > 24 else ""))
    if code == BAD_FIELD_COUNT:
        return f"expected {NUM_FIELDS} tab-separated fields, found {field}"
    if code == BAD_LABEL:
        return f"the label must be 0 or 1, not {shown}"
    if code == BAD_INT:
        return f"integer feature I{field} is not an integer: {shown}"
    if code == BAD_CAT:
        return f"categorical feature C{field - NUM_INT} is not 1-8 hex digits: {shown}"
    if code == BLANK_LINE:
        return "blank line"
    if code == LINE_TOO_LONG:
        return f"line longer than {MAX_LINE_BYTES} bytes"
    return f"malformed (code {code})"


def _iter_parsed(
    path: Path,
    *,
    skip_bad_lines: bool,
    block_bytes: int,
    hashes: np.ndarray,
    missing: np.ndarray,
    on_bad: Callable[[str, int], None],
    on_progress: Callable[[int], None],
) -> Iterator[int]:
    """Parse one file; yield the number of good lines in `hashes`/`missing` each time.

    Malformed lines raise InputError("FILE:LINE: ...") unless `skip_bad_lines`, in which
    case `on_bad(location, count)` is told about them.
    """
    stream, raw = _open_input(path)
    status = np.zeros(_STATUS_LEN, dtype=np.int64)
    reader = _BlockReader(block_bytes)
    line_base = 0  # lines of this file before reader.buf[0]
    discarding = False  # skipping the rest of an over-long line
    last_raw = 0
    chunks = _Prefetch(_read_chunks(path, stream, raw, block_bytes))
    try:
        while not reader.eof:
            item = chunks.next()
            if item is None:
                reader.eof = True
            else:
                chunk, raw_pos = item
                reader.append(chunk)
                on_progress(raw_pos - last_raw)
                last_raw = raw_pos
            if discarding:
                newline = np.flatnonzero(reader.buf[: reader.fill] == 10)
                if not len(newline):
                    reader.consume(reader.fill)
                    continue
                reader.consume(int(newline[0]) + 1)
                line_base += 1
                discarding = False
            pos = 0
            while True:
                _parse_block(
                    reader.buf,
                    pos,
                    reader.fill,
                    reader.eof,
                    skip_bad_lines,
                    hashes,
                    missing,
                    status,
                )
                lines = int(status[_S_LINES])
                good = int(status[_S_GOOD])
                first_bad = int(status[_S_FIRST_BAD])
                if first_bad >= 0:
                    code, field = int(status[_S_CODE]), int(status[_S_FIELD])
                    value = reader.buf[int(status[_S_LO]) : int(status[_S_HI])].tobytes()
                    where = f"{path}:{line_base + first_bad + 1}"
                    if not skip_bad_lines:
                        reason = _describe(code, field, value)
                        raise InputError(f"{where}: malformed line: {reason}")
                    on_bad(where, int(status[_S_BAD]))
                line_base += lines
                if good:
                    yield good
                new_pos = int(status[_S_POS])
                if new_pos == pos or new_pos >= reader.fill:
                    pos = new_pos
                    break
                pos = new_pos
            reader.consume(pos)
            if reader.fill > MAX_LINE_BYTES:
                where = f"{path}:{line_base + 1}"
                if not skip_bad_lines:
                    raise InputError(f"{where}: malformed line: {_describe(LINE_TOO_LONG, 0, b'')}")
                on_bad(where, 1)
                reader.consume(reader.fill)
                discarding = True
        if discarding:  # the over-long line ran to the end of the file
            line_base += 1
    finally:
        chunks.close()
        stream.close()
        raw.close()


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
        raise ConfigError(f"--batch-size must be a positive integer, not {batch_size!r}")
    if batch_size > MAX_BATCH_SIZE:
        raise ConfigError(f"--batch-size {batch_size} is too large (at most {MAX_BATCH_SIZE})")
    if (max_ind_range is None) == (not dictionary):
        raise ConfigError("give exactly one of --max-ind-range M or --dictionary")
    if max_ind_range is not None:
        if isinstance(max_ind_range, bool) or not isinstance(max_ind_range, int):
            raise ConfigError(f"--max-ind-range must be an integer, not {max_ind_range!r}")
        if not 1 <= max_ind_range <= MAX_IND_RANGE:
            raise ConfigError(
                f"--max-ind-range must be between 1 and {MAX_IND_RANGE} "
                f"(row ids are uint32; hashes are 32-bit), not {max_ind_range}"
            )


def _default_workers() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _check_files(files: list[Path]) -> None:
    if not files:
        raise InputError("no input files given")
    for path in files:
        try:
            exists, is_dir = path.exists(), path.is_dir()
        except OSError as exc:  # e.g. a name too long
            raise InputError(f"{path}: cannot read ({exc.strerror})") from None
        if not exists:
            raise InputError(f"{path}: no such file")
        if is_dir:
            raise InputError(f"{path}: is a folder, not a file")
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
    progress: bool = False,
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
    """
    paths = [Path(files)] if isinstance(files, str | Path) else [Path(f) for f in files]
    _check_options(batch_size, max_ind_range, dictionary)
    if block_bytes < 1:
        raise ConfigError("block_bytes must be positive")
    if workers is None:
        workers = _default_workers()
    if workers < 1:
        raise ConfigError(f"workers must be positive, not {workers}")
    _check_files(paths)
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
    progress: bool,
    block_bytes: int,
    workers: int,
    layout: dict[str, int],
    rule: str,
) -> IngestResult:
    per_group = layout["batches_per_row_group"]
    groups_per_file = layout["batches_per_file"] // per_group
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


# -- slow reference (for tests) -----------------------------------------------------------------

_INT_RE = re.compile(rb"[+-]?[0-9]+")
_HEX_RE = re.compile(rb"[0-9a-fA-F]{1,8}")


def split_lines_reference(data: bytes) -> list[bytes]:
    """Lines of a file's bytes: split at newlines, one trailing CR dropped per line."""
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return [line[:-1] if line.endswith(b"\r") else line for line in lines]


def parse_line_reference(line: bytes) -> tuple[int, int, list[int | None]]:
    """(code, field, hashes): code OK with the 26 hashes (None = missing), or the reason
    the line is malformed with its field index (the field count for BAD_FIELD_COUNT)."""
    if line == b"":
        return BLANK_LINE, 0, []
    if len(line) > MAX_LINE_BYTES:
        return LINE_TOO_LONG, 0, []
    fields = line.split(b"\t")
    if len(fields) != NUM_FIELDS:
        return BAD_FIELD_COUNT, len(fields), []
    if fields[0] not in (b"0", b"1"):
        return BAD_LABEL, 0, []
    for i in range(1, FIRST_CAT):
        if fields[i] and not _INT_RE.fullmatch(fields[i]):
            return BAD_INT, i, []
    cats: list[int | None] = []
    for i in range(FIRST_CAT, NUM_FIELDS):
        if not fields[i]:
            cats.append(None)
        elif _HEX_RE.fullmatch(fields[i]):
            cats.append(int(fields[i], 16))
        else:
            return BAD_CAT, i, []
    return OK, 0, cats


def ingest_reference_rows(
    lines: Iterable[bytes],
    *,
    max_ind_range: int | None = None,
    dictionary: bool = False,
    skip_bad_lines: bool = False,
    name: str = "<input>",
) -> tuple[np.ndarray, int]:
    """Rows (samples x 26, uint32) of the good lines and the number of bad lines skipped.

    The slow, obviously correct version of the parse and mapping kernels.
    """
    _check_options(1, max_ind_range, dictionary)
    seen: list[dict[int, int]] = [{} for _ in range(NUM_CAT)]
    rows: list[list[int]] = []
    bad = 0
    for number, line in enumerate(lines, start=1):
        code, field, cats = parse_line_reference(line)
        if code != OK:
            if not skip_bad_lines:
                raise InputError(f"{name}:{number}: malformed line (code {code}, field {field})")
            bad += 1
            continue
        sample = []
        for t, h in enumerate(cats):
            if h is None:
                sample.append(0)
            elif max_ind_range is not None:
                sample.append(1 + h % max_ind_range)
            else:
                sample.append(seen[t].setdefault(h, len(seen[t]) + 1))
        rows.append(sample)
    return np.array(rows, dtype=np.uint32).reshape(-1, NUM_CAT), bad


def reference_lookups(
    rows: np.ndarray, batch_size: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(batch, table, row) of the lookups of `rows` (samples x tables) in trace order."""
    batch: list[int] = []
    table: list[int] = []
    row: list[int] = []
    for b, s in enumerate(range(0, len(rows), batch_size)):
        chunk = rows[s : s + batch_size]
        for t in range(rows.shape[1]):
            for r in chunk[:, t]:
                batch.append(b)
                table.append(t)
                row.append(int(r))
    return (
        np.array(batch, dtype=np.uint32),
        np.array(table, dtype=np.uint16),
        np.array(row, dtype=np.uint32),
    )
