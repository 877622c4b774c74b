"""`replay._arrow`: numpy <-> Arrow for number columns, checked against pyarrow's own
conversions, and the commands never importing pandas through pyarrow."""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from replay import _arrow

NUMBER_DTYPES = [
    np.uint8, np.uint16, np.uint32, np.uint64, np.int8, np.int16, np.int32, np.int64,
    np.float32, np.float64,
]  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(
    dtype=st.sampled_from(NUMBER_DTYPES),
    data=st.data(),
    cuts=st.lists(st.integers(0, 40), max_size=4),
    offset=st.integers(0, 3),
)
def test_round_trip_equals_pyarrows_own_conversion(
    dtype: type, data: st.DataObject, cuts: list[int], offset: int
) -> None:
    values = data.draw(hnp.arrays(dtype, st.integers(0, 40)))
    array = _arrow.from_numpy(values)
    reference = pa.array(values)
    assert array.type == reference.type and array.null_count == 0
    np.testing.assert_array_equal(array.to_numpy(), reference.to_numpy())  # NaN == NaN here
    # chunked, and sliced so that chunks start at an offset into their buffers
    bounds = sorted({0, len(values), *(min(c, len(values)) for c in cuts)})
    chunks = [array.slice(a, b - a) for a, b in itertools.pairwise(bounds)]
    column = pa.chunked_array(chunks, type=array.type)
    back = _arrow.to_numpy(column)
    assert back.dtype == dtype
    np.testing.assert_array_equal(back, values)
    tail = array.slice(min(offset, len(values)))
    np.testing.assert_array_equal(_arrow.to_numpy(tail), tail.to_numpy(zero_copy_only=False))


def test_one_chunk_is_a_read_only_view_of_arrows_buffer() -> None:
    array = pa.array(np.arange(10, dtype=np.uint32))
    view = _arrow.to_numpy(pa.chunked_array([array]))
    assert view.ctypes.data == array.buffers()[1].address
    assert not view.flags.writeable


def test_integer_casts_are_checked_like_pyarrows() -> None:
    assert _arrow.from_numpy(np.array([0, 7], dtype=np.int64), pa.uint16()).equals(
        pa.array([0, 7], type=pa.uint16())
    )
    for bad in ([-1, 3], [0, 70_000]):
        with pytest.raises(pa.ArrowInvalid):
            pa.array(np.array(bad, dtype=np.int64), type=pa.uint16())
        with pytest.raises(pa.ArrowInvalid):
            _arrow.from_numpy(np.array(bad, dtype=np.int64), pa.uint16())


def test_bools_strings_and_nulls() -> None:
    flags = np.array([True, False, True, True, False, False, False, True, True])
    assert _arrow.from_numpy(flags).equals(pa.array(flags))
    for strings in (
        np.array(["full", "incremental", "log", "é"], dtype=object),
        np.array(["a", "bc", ""]),
        np.array([], dtype=object),
    ):
        assert _arrow.from_numpy(strings).equals(pa.array(strings))
    with pytest.raises(pa.ArrowTypeError):  # what pyarrow itself raises
        _arrow.from_numpy(np.array(["x", 3], dtype=object))
    with pytest.raises(ValueError, match="null"):
        _arrow.to_numpy(pa.array([1, None, 3], type=pa.int64()))
    with pytest.raises(ValueError, match="not a number column"):
        _arrow.to_numpy(pa.array(["a"]))


def test_masked_entries_are_nulls() -> None:
    for data, type in (([1, 2, 3, 4], pa.int64()), ([0.5, 1.0, 2.0, 3.0], None)):
        masked = np.ma.masked_array(data, mask=[False, True, False, True])
        assert _arrow.from_numpy(masked, type).equals(pa.array(masked, type=type))
    whole = np.ma.masked_array([7, 8], mask=[False, False])
    assert _arrow.from_numpy(whole).equals(pa.array([7, 8]))


def test_table_takes_the_schemas_types_and_writes_parquet(tmp_path: Path) -> None:
    schema = pa.schema([pa.field("batch", pa.uint32(), nullable=False), ("x", pa.float64())])
    table = _arrow.table({"batch": np.arange(3), "x": [0.5, 1.5, 2.5]}, schema)
    assert table.schema == schema
    pq.write_table(table, tmp_path / "t.parquet")
    assert pq.read_table(tmp_path / "t.parquet").equals(table)
    assert _arrow.table({"a": np.arange(2, dtype=np.int16)}).schema.field("a").type == pa.int16()


_NO_PANDAS = """
import sys
from replay.cli import main

class Watch:
    def find_spec(self, name, path=None, target=None):
        if name == "pandas":
            raise SystemExit("pandas imported during: " + " ".join(sys.argv[1:]))
        return None

sys.meta_path.insert(0, Watch())
sys.exit(main(sys.argv[1:]))
"""


def test_commands_that_read_and_write_parquet_never_import_pandas(tmp_path: Path) -> None:
    """pyarrow imports pandas (0.3 s where installed) from its numpy conversions; the
    watcher sees the attempt whether or not pandas is installed."""
    trace, run, curve = tmp_path / "trace", tmp_path / "run", tmp_path / "mrc"
    for args in (
        ["generate", "--preset", "tiny", "--batches", "3", "--out", str(trace)],
        ["run", str(trace), "--system", "hbm-lru", "--out", str(run)],
        ["mrc", str(trace), "--out", str(curve)],
    ):
        done = subprocess.run(
            [sys.executable, "-c", _NO_PANDAS, *args], capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr
    assert (run / "batches.parquet").is_file() and (curve / "mrc.parquet").is_file()
