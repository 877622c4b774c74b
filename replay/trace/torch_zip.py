"""A restricted reader of `torch.save` files that hold plain tensors, without torch.

Why a reader of our own: the FBGEMM traces (`replay.trace.fbgemm`) are `torch.save`
files, and torch is a 2+ GB dependency that nothing else in replay needs. This module
reads the same format with the same idea as ``torch.load(weights_only=True)``: the
pickle inside may name only an allow-list of globals, the ones a tuple of plain tensors
needs, and nothing else is ever imported or called.

The format (torch's own writer and reader: `torch/serialization.py`, `_save` and `_load`
of torch 2.x; checked against files written by torch 2.14's `torch.save`):

- a zip archive (stored, not compressed) whose entries share one top-level folder
  ``<archive>/``: ``data.pkl`` (the pickled object), ``data/<key>`` (the bytes of each
  storage), ``byteorder`` (``little`` or ``big``; absent in old files, which are little
  endian), ``version``, and bookkeeping (``.format_version``, ``.storage_alignment``,
  ``.data/serialization_id``) this reader does not need;
- ``data.pkl`` is pickle protocol 2 (another protocol if the caller asked for one). A
  tensor is ``torch._utils._rebuild_tensor_v2(storage, storage_offset, size, stride,
  requires_grad, backward_hooks[, metadata])`` with ``backward_hooks`` an empty
  ``collections.OrderedDict()``; the storage is a persistent id ``('storage',
  torch.LongStorage, key, location, numel)`` with ``numel`` in elements. The dtypes
  without a legacy storage class (uint16, uint32, uint64) use ``_rebuild_tensor_v3``
  with ``torch.storage.UntypedStorage`` (``numel`` in bytes) and the dtype (``torch.uint32``)
  as a seventh argument. Views share their storage (one ``data/<key>`` record, several
  tensors with their own offset, size and stride).

The pickle is not unpickled by Python's `pickle` module (the package allows none:
`tests/test_untrusted.py`): `_Unpickler` interprets the few opcodes these files use,
on a stack of plain values, and maps each global it meets through `_ALLOWED` to a
marker of our own. A global not in `_ALLOWED` (``os.system``, any class) is refused
before anything else happens; an opcode outside the handful that torch emits (building
objects, calling anything but the rebuild functions) is refused as well. The result is
built from tuples, lists, dicts, strings, numbers and numpy arrays only.

Storages are read in place (a read-only memory map of the zip entry) so that a file of a
billion indices costs page cache, not a copy; their CRCs are not checked (the small
records are read through `zipfile`, which checks them). Torch's writer never compresses
or encrypts an entry, so an entry that is either is refused (no decompressor runs on
untrusted input, and no zip bomb is inflated). Each tensor is returned as a C-contiguous numpy
array of the storage's dtype in native byte order: a ``big`` byteorder record swaps every
storage, untyped ones (uint16-uint64) included, where torch 2.14's loader swaps those as
bytes, that is not at all (only files saved on a big-endian machine differ).
"""

from __future__ import annotations

import struct
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from replay.errors import InputError

# torch.save's legacy (pre-1.6, non-zip) format starts with the pickled magic number
# 0x1950A86A20F9469CFC6C (torch/serialization.py MAGIC_NUMBER) as a LONG1 opcode
LEGACY_MAGIC = b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19"
# data.pkl of a tuple of three tensors is about 250 bytes: a larger one is something else
MAX_PICKLE_BYTES = 1 << 20


@dataclass(frozen=True)
class _StorageType:
    """A storage class the pickle may name: its element dtype (None: raw bytes)."""

    name: str
    dtype: np.dtype | None


@dataclass(frozen=True)
class _DType:
    """A torch dtype global (``torch.uint32``), the seventh argument of the v3 rebuild."""

    name: str
    dtype: np.dtype


@dataclass(frozen=True)
class _Function:
    """A function the pickle may call (REDUCE): the rebuild functions and OrderedDict."""

    name: str


_REBUILD_V2 = _Function("torch._utils._rebuild_tensor_v2")
_REBUILD_V3 = _Function("torch._utils._rebuild_tensor_v3")
_ORDERED_DICT = _Function("collections.OrderedDict")

# The legacy typed storages torch.save names for each dtype (torch/__init__.py), with
# the dtype of their elements (little endian; `byteorder` says otherwise).
_TYPED_STORAGES = {
    "LongStorage": "<i8",
    "IntStorage": "<i4",
    "ShortStorage": "<i2",
    "CharStorage": "i1",
    "ByteStorage": "u1",
    "BoolStorage": "?",
    "DoubleStorage": "<f8",
    "FloatStorage": "<f4",
    "HalfStorage": "<f2",
}
# dtypes the v3 rebuild names (torch.uint16, ...): those numpy has
_DTYPES = {
    "int64": "<i8",
    "int32": "<i4",
    "int16": "<i2",
    "int8": "i1",
    "uint64": "<u8",
    "uint32": "<u4",
    "uint16": "<u2",
    "uint8": "u1",
    "bool": "?",
    "float64": "<f8",
    "float32": "<f4",
    "float16": "<f2",
}

# (module, name) -> the marker that stands for it; nothing else may be named
_ALLOWED: dict[tuple[str, str], object] = {
    ("torch._utils", "_rebuild_tensor_v2"): _REBUILD_V2,
    ("torch._utils", "_rebuild_tensor_v3"): _REBUILD_V3,
    ("collections", "OrderedDict"): _ORDERED_DICT,
    ("torch.storage", "UntypedStorage"): _StorageType("UntypedStorage", None),
    **{("torch", n): _StorageType(n, np.dtype(d)) for n, d in _TYPED_STORAGES.items()},
    **{("torch", n): _DType(n, np.dtype(d)) for n, d in _DTYPES.items()},
}


def printable(text: str) -> str:
    """`text` from a file as one line a terminal shows as written: control characters,
    line breaks and bidi overrides as escapes (``\\n``, ``\\u202e``)."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class _Refused(Exception):
    """The file is not what this reader reads; the message says what was found."""


# -- the pickle interpreter --------------------------------------------------------------------


class _Mark:
    """The MARK opcode's entry on the stack."""


_MARK = _Mark()


class _Unpickler:
    """Interprets the opcodes of protocols 2-5 that `torch.save` emits for tensors in
    tuples, lists and dicts (see the module docstring). `load_storage` turns a persistent
    id into a 1-D numpy array of the storage's elements."""

    def __init__(
        self,
        data: bytes,
        load_storage: Callable[[tuple[Any, ...]], np.ndarray],
        big_endian: bool = False,
    ) -> None:
        self.data = memoryview(data)
        self.big_endian = big_endian  # of untyped storages' values (typed ones: native)
        self.pos = 0
        self.stack: list[Any] = []
        self.memo: dict[int, Any] = {}
        self.load_storage = load_storage

    # reading the stream
    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise _Refused("data.pkl ends in the middle of an opcode")
        out = bytes(self.data[self.pos : self.pos + n])
        self.pos += n
        return out

    def _unpack(self, fmt: str) -> int:
        (value,) = struct.unpack(fmt, self._take(struct.calcsize(fmt)))
        return int(value)

    def _line(self) -> str:
        end = bytes(self.data[self.pos : self.pos + 256]).find(b"\n")
        if end < 0:
            raise _Refused("data.pkl holds a global name without an end of line")
        return self._take(end + 1)[:-1].decode("utf-8")

    # the stack
    def _pop(self) -> Any:
        if not self.stack or self.stack[-1] is _MARK:
            raise _Refused("data.pkl pops from an empty stack")
        return self.stack.pop()

    def _pop_mark(self) -> list[Any]:
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i] is _MARK:
                items = self.stack[i + 1 :]
                del self.stack[i:]
                return items
        raise _Refused("data.pkl closes a MARK it never opened")

    def _global(self, module: str, name: str) -> object:
        marker = _ALLOWED.get((module, name))
        if marker is None:
            raise _Refused(
                f"data.pkl names the global {printable(f'{module}.{name}')}, which is not allowed "
                "(only the globals of plain tensors are; nothing was run)"
            )
        return marker

    def load(self) -> Any:
        while True:
            op = self._take(1)
            if op == b".":  # STOP
                result = self._pop()
                if self.stack:
                    raise _Refused("data.pkl leaves values on the stack at STOP")
                return result
            handler = _OPCODES.get(op)
            if handler is None:
                raise _Refused(
                    f"data.pkl uses pickle opcode {op!r} at byte {self.pos - 1}, which "
                    "plain tensors do not need"
                )
            handler(self)

    # opcodes
    def _proto(self) -> None:
        if self._unpack("<B") > 5:
            raise _Refused("data.pkl is of a pickle protocol above 5")

    def _frame(self) -> None:
        self._unpack("<Q")  # a framing hint: the opcodes follow as usual

    def _global_op(self) -> None:
        module = self._line()
        self.stack.append(self._global(module, self._line()))

    def _stack_global(self) -> None:
        name, module = self._pop(), self._pop()
        if not isinstance(name, str) or not isinstance(module, str):
            raise _Refused("data.pkl names a global by something other than strings")
        self.stack.append(self._global(module, name))

    def _put(self, index: int) -> None:
        if not self.stack:
            raise _Refused("data.pkl memoizes from an empty stack")
        self.memo[index] = self.stack[-1]

    def _get(self, index: int) -> None:
        if index not in self.memo:
            raise _Refused(f"data.pkl reads memo entry {index}, which it never wrote")
        self.stack.append(self.memo[index])

    def _tuple_n(self, n: int) -> None:
        items = [self._pop() for _ in range(n)][::-1]
        self.stack.append(tuple(items))

    def _append(self) -> None:
        value = self._pop()
        target = self._pop()
        if not isinstance(target, list):
            raise _Refused("data.pkl appends to something other than a list")
        target.append(value)
        self.stack.append(target)

    def _appends(self) -> None:
        items = self._pop_mark()
        target = self._pop()
        if not isinstance(target, list):
            raise _Refused("data.pkl appends to something other than a list")
        target.extend(items)
        self.stack.append(target)

    def _setitems(self, items: list[Any]) -> None:
        if len(items) % 2:
            raise _Refused("data.pkl sets a dict item without a value")
        target = self._pop()
        if not isinstance(target, dict):
            raise _Refused("data.pkl sets items of something other than a dict")
        for key, value in zip(items[::2], items[1::2], strict=True):
            if not isinstance(key, str | int):
                raise _Refused("data.pkl uses a dict key other than a string or integer")
            target[key] = value
        self.stack.append(target)

    def _persid(self) -> None:
        pid = self._pop()
        if not isinstance(pid, tuple):
            raise _Refused("data.pkl holds a persistent id that is not a tuple")
        self.stack.append(self.load_storage(pid))

    def _reduce(self) -> None:
        args = self._pop()
        func = self._pop()
        if not isinstance(args, tuple):
            raise _Refused("data.pkl calls a function with arguments that are not a tuple")
        if func is _ORDERED_DICT:
            if args:
                raise _Refused("data.pkl builds an OrderedDict with arguments")
            self.stack.append({})
        elif func is _REBUILD_V2:
            self.stack.append(_rebuild(args, v3=False))
        elif func is _REBUILD_V3:
            self.stack.append(_rebuild(args, v3=True, big_endian=self.big_endian))
        else:
            raise _Refused(f"data.pkl calls {_describe(func)}, which is not a function")

    def _long1(self) -> None:
        n = self._unpack("<B")
        if n > 9:  # beyond int64 and a bit: no size, stride or numel is that large
            raise _Refused("data.pkl holds an integer of more than 9 bytes")
        self.stack.append(int.from_bytes(self._take(n), "little", signed=True))


_OPCODES: dict[bytes, Callable[[_Unpickler], None]] = {
    b"\x80": _Unpickler._proto,
    b"\x95": _Unpickler._frame,
    b"c": _Unpickler._global_op,
    b"\x93": _Unpickler._stack_global,
    b"q": lambda u: u._put(u._unpack("<B")),  # BINPUT
    b"r": lambda u: u._put(u._unpack("<I")),  # LONG_BINPUT
    b"\x94": lambda u: u._put(len(u.memo)),  # MEMOIZE
    b"h": lambda u: u._get(u._unpack("<B")),  # BINGET
    b"j": lambda u: u._get(u._unpack("<I")),  # LONG_BINGET
    b"(": lambda u: u.stack.append(_MARK),
    b"t": lambda u: u.stack.append(tuple(u._pop_mark())),  # TUPLE
    b")": lambda u: u.stack.append(()),  # EMPTY_TUPLE
    b"\x85": lambda u: u._tuple_n(1),
    b"\x86": lambda u: u._tuple_n(2),
    b"\x87": lambda u: u._tuple_n(3),
    b"]": lambda u: u.stack.append([]),  # EMPTY_LIST
    b"a": _Unpickler._append,
    b"e": _Unpickler._appends,
    b"}": lambda u: u.stack.append({}),  # EMPTY_DICT
    b"s": lambda u: u._setitems([u._pop(), u._pop()][::-1]),  # SETITEM
    b"u": lambda u: u._setitems(u._pop_mark()),  # SETITEMS
    b"X": lambda u: u.stack.append(u._take(u._unpack("<I")).decode("utf-8")),
    b"\x8c": lambda u: u.stack.append(u._take(u._unpack("<B")).decode("utf-8")),
    b"\x8d": lambda u: u.stack.append(u._take(u._unpack("<Q")).decode("utf-8")),
    b"K": lambda u: u.stack.append(u._unpack("<B")),  # BININT1
    b"M": lambda u: u.stack.append(u._unpack("<H")),  # BININT2
    b"J": lambda u: u.stack.append(u._unpack("<i")),  # BININT
    b"\x8a": _Unpickler._long1,
    b"\x88": lambda u: u.stack.append(True),
    b"\x89": lambda u: u.stack.append(False),
    b"N": lambda u: u.stack.append(None),
    b"Q": _Unpickler._persid,
    b"R": _Unpickler._reduce,
}


# -- rebuilding tensors ------------------------------------------------------------------------


def _ints(value: Any, what: str) -> tuple[int, ...]:
    if not isinstance(value, tuple) or not all(
        isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**63 for v in value
    ):
        raise _Refused(f"a tensor's {what} is not a tuple of non-negative integers")
    return value


def _rebuild(args: tuple[Any, ...], *, v3: bool, big_endian: bool = False) -> np.ndarray:
    """`_rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks[, metadata])`
    or v3 (`..., hooks, dtype[, metadata]`) as a C-contiguous numpy array."""
    fixed = 7 if v3 else 6
    if len(args) not in (fixed, fixed + 1):
        raise _Refused(f"a tensor is rebuilt from {len(args)} arguments, not {fixed}")
    storage, offset, size, stride, requires_grad, hooks = args[:6]
    metadata = args[fixed] if len(args) > fixed else None
    if not isinstance(storage, np.ndarray):
        raise _Refused("a tensor is rebuilt from something other than a storage")
    if v3:
        dtype = args[6]
        if not isinstance(dtype, _DType):
            raise _Refused("a tensor (v3) names no dtype")
        if storage.dtype != np.uint8 or len(storage) % dtype.dtype.itemsize:
            raise _Refused(f"a {dtype.name} tensor's storage is not whole {dtype.name} values")
        storage = storage.view(dtype.dtype.newbyteorder(">" if big_endian else "<"))
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise _Refused("a tensor's storage offset is not a non-negative integer")
    size, stride = _ints(size, "size"), _ints(stride, "stride")
    if len(size) != len(stride):
        raise _Refused("a tensor's size and stride differ in length")
    if not isinstance(requires_grad, bool) or hooks != {} or metadata not in (None, {}):
        raise _Refused("a tensor carries gradient hooks or metadata, not only values")
    native = storage.dtype.newbyteorder("=")
    if 0 in size:
        return np.empty(size, dtype=native)
    if np.prod(size, dtype=object) > len(storage):
        # an expanded view (stride 0): copying it could take any amount of memory, and
        # a file of indices has no use for one
        raise _Refused(f"a tensor of shape {list(size)} is larger than its storage")
    last = offset + sum((n - 1) * s for n, s in zip(size, stride, strict=True))
    if last >= len(storage):
        raise _Refused(f"a tensor reaches element {last} of a storage of {len(storage)} elements")
    item = storage.dtype.itemsize
    view = np.lib.stride_tricks.as_strided(
        storage[offset:], shape=size, strides=[s * item for s in stride], writeable=False
    )
    # (not np.ascontiguousarray, which makes a 0-d tensor 1-d)
    out = view if view.flags.c_contiguous else view.copy(order="C")
    return out.astype(native, copy=False)


# -- the archive -------------------------------------------------------------------------------


def _describe(value: Any) -> str:
    if isinstance(value, _StorageType | _DType | _Function):
        return value.name
    return type(value).__name__


class _Archive:
    """The zip archive of one `torch.save` file: its records under one folder."""

    def __init__(self, path: Path, handle: zipfile.ZipFile) -> None:
        self.path = path
        self.zip = handle
        pickles = [n for n in handle.namelist() if n.endswith("/data.pkl") and n.count("/") == 1]
        if len(pickles) != 1:
            found = ", ".join(printable(n) for n in handle.namelist()[:4]) or "no entries"
            raise _Refused(
                f"a zip archive without one <archive>/data.pkl (found {found}), not a "
                "torch.save file"
            )
        self.prefix = pickles[0][: -len("data.pkl")]
        byteorder = self._record("byteorder", required=False)
        if byteorder not in (None, b"little", b"big"):
            raise _Refused(f"byteorder record {byteorder[:16]!r} is neither little nor big")
        self.big_endian = byteorder == b"big"
        self.storages: dict[str, np.ndarray] = {}

    def _record(self, name: str, *, required: bool = True) -> bytes | None:
        try:
            info = self.zip.getinfo(self.prefix + name)
        except KeyError:
            if required:
                raise _Refused(f"no {printable(self.prefix + name)} record") from None
            return None
        if info.file_size > MAX_PICKLE_BYTES:
            raise _Refused(
                f"{printable(info.filename)} is {info.file_size:,} bytes, more than a tuple of "
                "tensors needs"
            )
        _check_stored(info)
        return self.zip.read(info)

    def load(self) -> Any:
        data = self._record("data.pkl")
        assert data is not None
        return _Unpickler(data, self._storage, self.big_endian).load()

    def _storage(self, pid: tuple[Any, ...]) -> np.ndarray:
        if len(pid) != 5 or pid[0] != "storage":
            raise _Refused(
                f"data.pkl holds a persistent id other than a storage: {printable(repr(pid))[:60]}"
            )
        _, kind, key, _location, numel = pid
        if not isinstance(kind, _StorageType):
            raise _Refused(f"a storage of type {_describe(kind)}")
        if not isinstance(key, str) or not key or "/" in key:
            raise _Refused(f"a storage key {printable(str(key))[:40]} that names no data record")
        if not isinstance(numel, int) or isinstance(numel, bool) or numel < 0:
            raise _Refused("a storage's size is not a non-negative integer")
        if key not in self.storages:
            dtype = kind.dtype if kind.dtype is not None else np.dtype(np.uint8)
            self.storages[key] = self._read_storage(key, dtype, numel)
        array = self.storages[key]
        if kind.dtype is not None and array.dtype != kind.dtype.newbyteorder("="):
            raise _Refused(f"storage {printable(key)} is read as two different types")
        return array

    def _read_storage(self, key: str, dtype: np.dtype, numel: int) -> np.ndarray:
        name = f"{self.prefix}data/{key}"
        try:
            info = self.zip.getinfo(name)
        except KeyError:
            raise _Refused(
                f"data.pkl names storage {printable(key)}, but there is no {printable(name)}"
            ) from None
        nbytes = numel * dtype.itemsize
        if info.file_size != nbytes:
            raise _Refused(
                f"{printable(name)} holds {info.file_size:,} bytes; its storage of {numel:,} "
                f"{dtype.name} values needs {nbytes:,}"
            )
        if dtype.itemsize > 1 and self.big_endian:
            dtype = dtype.newbyteorder(">")
        _check_stored(info)
        array = self._map(info).view(dtype) if nbytes else np.empty(0, dtype=dtype)
        if not array.dtype.isnative:
            array = array.astype(array.dtype.newbyteorder("="))
        return array

    def _map(self, info: zipfile.ZipInfo) -> np.ndarray:
        """A stored entry's bytes, memory-mapped read-only from the file."""
        with self.path.open("rb") as handle:
            handle.seek(info.header_offset)
            header = handle.read(30)
            size = handle.seek(0, 2)
        if len(header) != 30 or header[:4] != b"PK\x03\x04":
            raise _Refused(f"{printable(info.filename)}: no local zip header where the index says")
        name_len, extra_len = struct.unpack_from("<HH", header, 26)
        start = info.header_offset + 30 + name_len + extra_len
        if start + info.file_size > size:
            raise _Refused(f"{printable(info.filename)} runs past the end of the file (truncated?)")
        if info.file_size == 0:
            return np.empty(0, dtype=np.uint8)
        return np.memmap(self.path, dtype=np.uint8, mode="r", offset=start, shape=info.file_size)


def _check_stored(info: zipfile.ZipInfo) -> None:
    """Refuse an entry torch's writer would not make: compressed or encrypted."""
    if info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 0x41:
        raise _Refused(
            f"{printable(info.filename)} is compressed or encrypted; torch.save stores entries "
            "as they are"
        )


def _what_it_is(path: Path) -> str:
    """What a file that is not a zip archive starts with, in words."""
    with path.open("rb") as handle:
        head = handle.read(len(LEGACY_MAGIC))
    if head.startswith(LEGACY_MAGIC):
        return (
            "a legacy (pre-1.6, non-zip) torch.save file; this reader reads the zip format "
            "(install the fbgemm extra, torch 2.6 or later, to read it, or save it again "
            "with torch)"
        )
    if head.startswith(b"\x1f\x8b"):
        return "gzip-compressed; decompress it first (gunzip -k FILE)"
    if not head:
        return "an empty file, not a torch.save zip archive"
    return f"not a torch.save zip archive (it starts with {head[:8]!r})"


def load(path: str | Path) -> Any:
    """The object a `torch.save` zip file holds, its tensors as numpy arrays.

    Only tuples, lists, dicts, strings, numbers and plain tensors are rebuilt; anything
    else (another global, a legacy or non-zip file, a damaged archive) raises InputError
    with one line that names the file and says what was found.
    """
    path = Path(path)
    try:
        if not zipfile.is_zipfile(path):
            raise _Refused(_what_it_is(path))
        with zipfile.ZipFile(path) as handle:
            return _Archive(path, handle).load()
    except _Refused as exc:
        raise InputError(f"{path}: {exc}") from None
    except (
        zipfile.BadZipFile,
        zipfile.LargeZipFile,
        EOFError,  # zipfile, on an entry cut short
        NotImplementedError,  # zipfile, on a damaged version, method or flag field
        RuntimeError,  # zipfile, on an entry flagged as encrypted
        UnicodeDecodeError,
        struct.error,
    ) as exc:
        detail = " ".join(str(exc).split()) or type(exc).__name__
        raise InputError(f"{path}: a damaged torch.save archive ({detail})") from None
    except (ValueError, OverflowError) as exc:  # numpy on sizes no check above foresaw
        raise InputError(f"{path}: a malformed torch.save archive ({exc})") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror or exc})") from None
