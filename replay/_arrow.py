"""numpy <-> Arrow for number columns, without pyarrow's pandas bridge.

pyarrow's own conversions (`pa.array`, `pa.table` of numpy arrays, `Array.to_numpy`,
`ChunkedArray.to_numpy`) initialise its C++ pandas bridge, which imports pandas whenever
pandas is installed: 0.33 s of a 0.8 s `replay run` on the 2-core VM (pandas 3.1,
pyarrow 26), paid by every command that reads or writes a Parquet file. Number columns
need none of it: an Arrow array of a fixed-width type is one validity buffer (none here)
and one data buffer laid out exactly like a contiguous numpy array, so both directions are
zero-copy views (`Array.from_buffers`, `np.frombuffer`); strings (checkpoints.parquet's
`kind`) are laid out here too. Anything else falls back to pyarrow's conversion.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping

import numpy as np
import pyarrow as pa

_NUMPY_OF_ARROW: dict[pa.DataType, np.dtype] = {
    arrow: np.dtype(numpy)
    for arrow, numpy in (
        (pa.uint8(), np.uint8),
        (pa.uint16(), np.uint16),
        (pa.uint32(), np.uint32),
        (pa.uint64(), np.uint64),
        (pa.int8(), np.int8),
        (pa.int16(), np.int16),
        (pa.int32(), np.int32),
        (pa.int64(), np.int64),
        (pa.float16(), np.float16),
        (pa.float32(), np.float32),
        (pa.float64(), np.float64),
    )
}
_ARROW_OF_NUMPY: dict[np.dtype, pa.DataType] = {v: k for k, v in _NUMPY_OF_ARROW.items()}


def to_numpy(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """A null-free number column as numpy: a read-only view of Arrow's data buffer (one
    chunk) or a concatenation (several). Callers check `null_count` first; a column with
    nulls, or of a type that is not a fixed-width number, is a ValueError here."""
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    dtype = _NUMPY_OF_ARROW.get(column.type)
    if dtype is None:
        raise ValueError(f"not a number column: {column.type}")
    if column.null_count:
        raise ValueError(f"column of {column.type} holds {column.null_count} null values")
    parts = [
        np.frombuffer(
            chunk.buffers()[1], dtype=dtype, count=len(chunk), offset=chunk.offset * dtype.itemsize
        )
        if len(chunk)
        else np.empty(0, dtype=dtype)
        for chunk in chunks
    ]
    if len(parts) != 1:
        return np.concatenate(parts) if parts else np.empty(0, dtype=dtype)
    view = parts[0]
    view.flags.writeable = False  # Arrow data is immutable (pyarrow's views are read-only)
    return view


def from_numpy(values: np.ndarray | list, type: pa.DataType | None = None) -> pa.Array:
    """A numpy array (or list) as an Arrow array of `type` (default: the array's own
    dtype), zero-copy where it is contiguous and of that type already. Integers are cast
    to another integer type only when every value fits (pyarrow's safe cast raises the
    same ArrowInvalid); bools are bit-packed; a masked array's masked entries are nulls;
    anything else goes through `pa.array`."""
    # masked entries are nulls, as in pa.array; asking `np.ma` imports numpy.ma (7 ms of
    # every run), and a masked array cannot exist before it is imported
    if "numpy.ma" in sys.modules and isinstance(values, np.ma.MaskedArray):
        return _masked(values, type)
    array = np.asarray(values)
    if type is None:
        type = _ARROW_OF_NUMPY.get(array.dtype.newbyteorder("="))
    if array.ndim == 1 and type == pa.bool_() and array.dtype == np.bool_:
        bits = np.packbits(array, bitorder="little")
        return pa.Array.from_buffers(type, len(array), [None, pa.py_buffer(bits)])
    if array.ndim == 1 and array.dtype.kind in "OU" and type in (None, pa.string()):
        return _strings(array)
    dtype = _NUMPY_OF_ARROW.get(type) if type is not None else None
    if array.ndim != 1 or dtype is None:
        return pa.array(array, type=type)
    same = array.dtype.newbyteorder("=") == dtype
    if not same and not (array.dtype.kind in "iu" and dtype.kind in "iu"):
        return pa.array(array, type=type)
    if not same and len(array):
        info = np.iinfo(dtype)
        low, high = array.min(), array.max()
        if low < info.min or high > info.max:
            raise pa.ArrowInvalid(f"integer value out of bounds for {type}: [{low}, {high}]")
    data = np.ascontiguousarray(array, dtype=dtype)
    return pa.Array.from_buffers(type, len(data), [None, pa.py_buffer(data)])


def _masked(values: np.ma.MaskedArray, type: pa.DataType | None) -> pa.Array:
    valid = ~np.ma.getmaskarray(values)
    data = from_numpy(np.ma.getdata(values), type)
    if valid.all() or valid.ndim != 1 or data.type not in _NUMPY_OF_ARROW:
        return data if valid.all() else pa.array(values, type=type)
    bits = pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(
        data.type, len(data), [bits, data.buffers()[1]], null_count=int((~valid).sum())
    )


def _strings(array: np.ndarray) -> pa.Array:
    """Strings as Arrow's string layout (int32 offsets and UTF-8 bytes); an empty object
    array is a null-typed array, as `pa.array` makes it."""
    if array.dtype.kind == "O" and not len(array):
        return pa.nulls(0)
    if array.dtype.kind == "O" and not all(isinstance(value, str) for value in array):
        return pa.array(array)
    encoded = [str(value).encode() for value in array]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(b) for b in encoded], out=offsets[1:])
    if offsets[-1] > np.iinfo(np.int32).max:
        return pa.array(array)
    data = pa.py_buffer(b"".join(encoded))
    return pa.Array.from_buffers(
        pa.string(), len(encoded), [None, pa.py_buffer(offsets.astype(np.int32)), data]
    )


def table(columns: Mapping[str, np.ndarray | list], schema: pa.Schema | None = None) -> pa.Table:
    """`pa.table` of number columns, by `from_numpy` (with `schema`'s types if given)."""
    if schema is None:
        return pa.table({name: from_numpy(values) for name, values in columns.items()})
    return pa.table(
        {name: from_numpy(columns[name], schema.field(name).type) for name in schema.names},
        schema=schema,
    )
