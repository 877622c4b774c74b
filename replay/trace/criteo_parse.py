"""Criteo TSV parsing for `replay ingest` (`replay.trace.criteo`): bytes in, arrays out.

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

Row ids are uint32, so ``M`` must be at most 2^32 - 2 (`MAX_IND_RANGE`), and so must the
number of distinct values of a table.

Implementation (no per-line Python): `_iter_parsed` reads one file in blocks of
`BLOCK_BYTES` in a thread of its own (`_Prefetch`; decompressing .gz, zlib releases the
GIL) and copies them into one numpy byte buffer (`_BlockReader`), where a numba kernel
(`_parse_block`) validates every field of the complete lines and writes the 26 hashes and
a missing mask per line. A second kernel maps them to rows: `_map_modulo`, or
`_Dictionary` (first-seen ids from an open-addressing hash table in numpy arrays, grown
from Python at load factor 1/2; about 12 bytes per slot, 2 to 4 slots per distinct
value). Malformed lines raise InputError naming the file and line, or are counted when
skipped.

`replay.trace.criteo_reference` holds slow pure-Python versions of the same rules that
the tests compare the kernels with.
"""

from __future__ import annotations

import gzip
import queue
import threading
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from replay._files import open_regular
from replay._jit import kernel
from replay.errors import InputError

NUM_INT = 13
NUM_CAT = 26
NUM_FIELDS = 1 + NUM_INT + NUM_CAT
FIRST_CAT = 1 + NUM_INT

MAX_IND_RANGE = 2**32 - 2  # row ids 0..M must fit uint32
BLOCK_BYTES = 16 << 20  # bytes read (decompressed) per block
PARSE_LINES = 1 << 17  # lines parsed per kernel call (size of the hash buffer)
MAX_LINE_BYTES = 1 << 20  # a longer line is malformed (and bounds the buffer)
DICT_INITIAL_SLOTS = 1 << 16

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


def _open_input(path: Path) -> tuple[BinaryIO | gzip.GzipFile, BinaryIO]:
    """(stream of decompressed bytes, underlying file for progress)."""
    raw = open_regular(path)  # closed by the caller; refuses a FIFO or a device
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
    path: Path, stream: BinaryIO | gzip.GzipFile, raw: BinaryIO, size: int
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


_END = object()  # the end of `_Prefetch`'s items


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
