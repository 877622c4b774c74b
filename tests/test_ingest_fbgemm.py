"""`replay ingest --format fbgemm`: FBGEMM (dlrm_datasets) torch.save files -> trace.

The files are written by `write_torch_zip` below, a small writer of torch's zip
serialization that lays out the pickle as `torch.save` does (protocol 2, the same
opcodes and globals), so the tests need no torch; `tests/data/fbgemm_tiny*.pt` were
written by real `torch.save` (`tests/data/README.md`). Every lookup is read back through
`replay.open_trace` and compared with the file's bags. The tests use the built-in
reader even where torch is installed (`builtin_reader`).
"""

from __future__ import annotations

import io
import json
import pickletools
import struct
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import replay
from replay.cli import main
from replay.errors import ConfigError, InputError
from replay.trace import fbgemm, torch_zip
from replay.trace.fbgemm import (
    ROWS_GIVEN,
    ROWS_OBSERVED,
    ingest_fbgemm,
    parse_table_rows,
    read_tensors,
)
from replay.trace.updates import update_sets_reference

DATA = Path(__file__).parent / "data"


@pytest.fixture(autouse=True)
def builtin_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    """The built-in reader everywhere, also where torch is installed (the fbgemm extra):
    these tests check its messages; torch's path was checked by hand (the module's
    docstring says how)."""
    monkeypatch.setattr(fbgemm, "torch_available", lambda: False)


# -- a writer of torch's zip format ------------------------------------------------------------

STORAGES = {
    np.dtype(np.int64): "LongStorage",
    np.dtype(np.int32): "IntStorage",
    np.dtype(np.int16): "ShortStorage",
    np.dtype(np.int8): "CharStorage",
    np.dtype(np.uint8): "ByteStorage",
    np.dtype(np.bool_): "BoolStorage",
    np.dtype(np.float64): "DoubleStorage",
    np.dtype(np.float32): "FloatStorage",
    np.dtype(np.float16): "HalfStorage",
}
V3_DTYPES = {np.dtype(np.uint16): "uint16", np.dtype(np.uint32): "uint32"}


class Pickle:
    """Pickle opcodes, written by hand as torch.save's pickler emits them."""

    def __init__(self) -> None:
        self.out = bytearray(b"\x80\x02")  # PROTO 2

    def op(self, code: bytes) -> Pickle:
        self.out += code
        return self

    def glob(self, module: str, name: str) -> Pickle:
        return self.op(b"c" + f"{module}\n{name}\n".encode())

    def text(self, value: str) -> Pickle:
        raw = value.encode()
        return self.op(b"X" + struct.pack("<I", len(raw)) + raw)

    def int(self, value: int) -> Pickle:
        if 0 <= value < 256:
            return self.op(b"K" + bytes([value]))
        if 0 <= value < 65536:
            return self.op(b"M" + struct.pack("<H", value))
        if -(2**31) <= value < 2**31:
            return self.op(b"J" + struct.pack("<i", value))
        raw = value.to_bytes(9, "little", signed=True)
        return self.op(b"\x8a" + bytes([len(raw)]) + raw)

    def ints(self, values: tuple[int, ...]) -> Pickle:
        self.op(b"(")
        for v in values:
            self.int(v)
        return self.op(b"t")

    def tensor(
        self,
        key: str,
        storage: str,
        numel: int,
        offset: int,
        size: tuple[int, ...],
        stride: tuple[int, ...],
        v3_dtype: str | None = None,
    ) -> Pickle:
        self.glob("torch._utils", "_rebuild_tensor_v3" if v3_dtype else "_rebuild_tensor_v2")
        self.op(b"((").text("storage")
        if v3_dtype:
            self.glob("torch.storage", "UntypedStorage")
        else:
            self.glob("torch", storage)
        self.text(key).text("cpu").int(numel).op(b"tQ")  # the persistent id
        self.int(offset).ints(size).ints(stride).op(b"\x89")  # requires_grad False
        self.glob("collections", "OrderedDict").op(b")R")  # backward hooks
        if v3_dtype:
            self.glob("torch", v3_dtype)
        return self.op(b"tR")


def torch_zip_bytes(
    items: list[Any],
    *,
    byteorder: str = "little",
    views: dict[int, tuple[int, tuple[int, ...], tuple[int, ...]]] | None = None,
    pickle_bytes: bytes | None = None,
    container: str = "tuple",
) -> bytes:
    """A torch.save zip file of `items` (numpy arrays, each its own storage; ints and
    strings as themselves), in a tuple or a list. `views[i]` = (offset, size, stride)
    makes item i a view into its array's storage; `pickle_bytes` replaces data.pkl."""
    p = Pickle().op(b"]" if container == "list" else b"(")
    records: dict[str, bytes] = {}
    if container == "list":
        p.op(b"(")
    for i, item in enumerate(items):
        if isinstance(item, int):
            p.int(item)
            continue
        if isinstance(item, str):
            p.text(item)
            continue
        arr = np.ascontiguousarray(item)
        flat = arr.reshape(-1)
        key = str(i)
        order = "<" if byteorder == "little" else ">"
        records[key] = flat.astype(flat.dtype.newbyteorder(order)).tobytes()
        if views and i in views:
            offset, size, stride = views[i]
        else:
            strides = tuple(s // arr.itemsize for s in arr.strides) if arr.ndim else ()
            offset, size, stride = 0, arr.shape, strides
        if arr.dtype in V3_DTYPES:
            p.tensor(key, "", flat.nbytes, offset, size, stride, V3_DTYPES[arr.dtype])
        else:
            p.tensor(key, STORAGES[arr.dtype], flat.size, offset, size, stride)
    p.op(b"e" if container == "list" else b"t").op(b".")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", bytes(p.out) if pickle_bytes is None else pickle_bytes)
        z.writestr("archive/byteorder", byteorder)
        for key, raw in records.items():
            z.writestr(f"archive/data/{key}", raw)
        z.writestr("archive/version", "3\n")
    return buffer.getvalue()


def write_torch_zip(path: Path, items: list[Any], **kwargs: Any) -> Path:
    path.write_bytes(torch_zip_bytes(items, **kwargs))
    return path


def fbgemm_file(
    path: Path,
    lengths: np.ndarray,
    indices: np.ndarray,
    *,
    index_dtype: Any = np.int64,
    offset_dtype: Any = np.int64,
) -> Path:
    """A file in the released layout: offsets table-major, the prefix sums of lengths."""
    lengths = np.asarray(lengths, dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths.reshape(-1))]).astype(offset_dtype)
    indices = np.asarray(indices).astype(index_dtype)
    assert offsets[-1] == len(indices)
    return write_torch_zip(path, [indices, offsets, lengths])


def random_file(
    path: Path, rng: np.random.Generator, tables: int, batch: int, rows: list[int], **kw: Any
) -> Path:
    """Multi-hot bags (0-5 lookups, some empty) of skewed ids below each table's rows."""
    lengths = rng.integers(0, 6, size=(tables, batch))
    ids = [
        rng.zipf(1.3, size=int(lengths[t].sum())) % rows[t] for t in range(tables)
    ]  # table-major, in sample order
    return fbgemm_file(path, lengths, np.concatenate(ids), **kw)


def bags(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """indices, offsets, lengths of a file, read with the built-in reader."""
    indices, offsets, lengths = read_tensors(path, "builtin")
    return indices, offsets, lengths


def expected_lookups(paths: list[Path]) -> list[dict[int, list[int]]]:
    """Per batch, per table: the rows of its samples' bags, sample by sample, in order,
    taken bag by bag with FBGEMM's own indexing (offsets[t*B + s] .. offsets[t*B + s + 1])."""
    out = []
    for path in paths:
        indices, offsets, lengths = bags(path)
        tables, batch = lengths.shape
        per_table = {}
        for t in range(tables):
            rows: list[int] = []
            for s in range(batch):
                bag = indices[offsets[t * batch + s] : offsets[t * batch + s + 1]]
                assert len(bag) == lengths[t, s]
                rows += bag.tolist()
            per_table[t] = rows
        out.append(per_table)
    return out


def assert_round_trip(trace_path: Path, paths: list[Path]) -> None:
    trace = replay.open_trace(trace_path)
    trace.verify()
    look = trace.lookups()
    want = expected_lookups(paths)
    assert trace.num_batches == len(paths)
    for b, per_table in enumerate(want):
        for t, rows in per_table.items():
            got = look.row[(look.batch == b) & (look.table == t)]
            assert got.tolist() == rows, (b, t)
    # and nothing else: the trace holds exactly these lookups, in (batch, table) order
    flat = [r for per_table in want for t in sorted(per_table) for r in per_table[t]]
    assert look.row.tolist() == flat
    # SGD update sets of each batch, as the Criteo ingester writes them
    upd = trace.updates()
    ref = update_sets_reference(
        look.batch,
        look.table,
        look.row,
        0,
        len(paths),
        trace.table_rows,
        np.zeros(len(trace.table_rows), bool),
    )
    for got, exp in zip((upd.batch, upd.table, upd.row, upd.count), ref, strict=True):
        assert got.tolist() == exp.tolist()


def cli(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_no_output(out: Path) -> None:
    assert not out.exists()
    assert not (out.parent / f".{out.name}.partial").exists()


# -- the built-in reader ---------------------------------------------------------------------


TINY_INDICES = [5, 0, 7, 2, 2, 9, 3, 1, 8, 8, 0, 6, 4, 11]
TINY_OFFSETS = [0, 2, 2, 3, 6, 7, 8, 8, 8, 8, 12, 13, 14]
TINY_LENGTHS = [[2, 0, 1, 3], [1, 1, 0, 0], [0, 4, 1, 1]]


@pytest.mark.parametrize(
    ("name", "index_dtype"), [("fbgemm_tiny.pt", np.int64), ("fbgemm_tiny_int32.pt", np.int32)]
)
def test_reads_files_real_torch_save_wrote(name: str, index_dtype: type) -> None:
    indices, offsets, lengths = read_tensors(DATA / name, "builtin")
    assert indices.dtype == index_dtype and indices.tolist() == TINY_INDICES
    assert offsets.dtype == np.int64 and offsets.tolist() == TINY_OFFSETS
    assert lengths.dtype == np.int64 and lengths.shape == (3, 4)
    assert lengths.tolist() == TINY_LENGTHS
    assert all(a.flags.c_contiguous for a in (indices, offsets, lengths))


def test_ingests_the_real_torch_fixture(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "trace"
    files = [DATA / "fbgemm_tiny.pt", DATA / "fbgemm_tiny_int32.pt"]
    code, stdout, _ = cli(capsys, "ingest", "--format", "fbgemm", *files, "--out", out)
    assert code == 0, stdout
    assert stdout.strip() == (
        f"ingested 2 files: 2 batches of 4 samples, 28 lookups, 3 tables "
        f"(rows = largest id + 1) -> {out}"
    )
    assert_round_trip(out, files)
    trace = replay.open_trace(out)
    assert trace.table_rows.tolist() == [10, 4, 12]  # largest ids 9, 3, 11
    assert trace.table_names == ["T0", "T1", "T2"]
    tables = trace.manifest["workload"]["tables"]
    assert [t["pooling_max"] for t in tables] == [3, 1, 4]
    assert [t["empty_bags"] for t in tables] == [2, 4, 2]  # over both files
    assert [t["pooling_mean"] for t in tables] == [1.5, 0.5, 1.5]


def load_bytes(tmp_path: Path, blob: bytes) -> Any:
    path = tmp_path / "x.pt"
    path.write_bytes(blob)
    return torch_zip.load(path)


def test_reader_matches_what_was_written(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    arrays = [
        rng.integers(-(2**40), 2**40, size=17),
        rng.integers(0, 2**31, size=(3, 5)).astype(np.int32),
        rng.integers(0, 2**16, size=4).astype(np.uint16),
        rng.integers(0, 2**32, size=6).astype(np.uint32),
        rng.random(5).astype(np.float32),
        np.array([True, False]),
        np.zeros((0, 3), dtype=np.int64),
    ]
    for byteorder in ("little", "big"):
        got = load_bytes(tmp_path, torch_zip_bytes(arrays, byteorder=byteorder))
        assert isinstance(got, tuple) and len(got) == len(arrays)
        for g, a in zip(got, arrays, strict=True):
            assert g.dtype == a.dtype and g.dtype.isnative and g.shape == a.shape
            assert np.array_equal(g, a) and g.flags.c_contiguous


def test_views_share_a_storage_and_come_back_contiguous(tmp_path: Path) -> None:
    base = np.arange(20, dtype=np.int64)
    # item 0: a 3x2 view at offset 6 with strides (5, 1); item 1: the transpose of 4x5
    blob = torch_zip_bytes([base, base], views={0: (6, (3, 2), (5, 1)), 1: (0, (5, 4), (1, 5))})
    a, b = load_bytes(tmp_path, blob)
    grid = base.reshape(4, 5)
    assert np.array_equal(a, grid[1:, 1:3]) and a.flags.c_contiguous
    assert np.array_equal(b, grid.T) and b.flags.c_contiguous


def test_a_list_and_other_plain_values_are_read(tmp_path: Path) -> None:
    blob = torch_zip_bytes([np.arange(3), 7, "x"], container="list")
    got = load_bytes(tmp_path, blob)
    assert isinstance(got, list) and got[0].tolist() == [0, 1, 2] and got[1:] == [7, "x"]


def test_the_os_system_pickle_is_refused_and_never_run(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    evil = Pickle().glob("os", "system").op(b"(").text(f"touch {marker}").op(b"tR.").out
    assert ("GLOBAL", "os system") in [(o.name, a) for o, a, _ in pickletools.genops(evil)]
    path = tmp_path / "evil.pt"
    path.write_bytes(torch_zip_bytes([], pickle_bytes=bytes(evil)))
    with pytest.raises(InputError, match=r"names the global os\.system, which is not allowed"):
        torch_zip.load(path)
    assert not marker.exists()


@pytest.mark.parametrize(
    ("pickle_bytes", "message"),
    [
        # a class, even an allowed module's: only the listed names are allowed
        (Pickle().glob("builtins", "eval").op(b".").out, "builtins.eval"),
        (Pickle().glob("torch", "Tensor").op(b".").out, "torch.Tensor"),
        # INST and BUILD build objects: opcodes plain tensors do not need
        (b"\x80\x02(ios\nsystem\n.", "opcode b'i'"),
        (Pickle().op(b"}}b.").out, "opcode b'b'"),
        # calling a storage class rather than passing it in a persistent id
        (Pickle().glob("torch", "LongStorage").op(b")R.").out, "not a function"),
        (Pickle().glob("collections", "OrderedDict").op(b"(K\x01tR.").out, "with arguments"),
        (b"\x80\x02", "ends in the middle"),
        (b"\x80\x02K\x01K\x02.", "leaves values on the stack"),
        (b"\x80\x02h\x05.", "memo entry 5"),
        (Pickle().text("storage").op(b"Q.").out, "persistent id that is not a tuple"),
    ],
)
def test_the_reader_refuses_anything_but_plain_tensors(
    tmp_path: Path, pickle_bytes: bytes, message: str
) -> None:
    path = tmp_path / "x.pt"
    path.write_bytes(torch_zip_bytes([], pickle_bytes=bytes(pickle_bytes)))
    with pytest.raises(InputError, match=message.replace("(", r"\(")) as caught:
        torch_zip.load(path)
    assert str(caught.value).startswith(f"{path}: ") and "\n" not in str(caught.value)


def _pickle_of_one_tensor(
    key: str, storage: str, numel: int, size: tuple[int, ...], offset: int = 0
) -> bytes:
    p = Pickle().op(b"(").tensor(key, storage, numel, offset, size, (1,) * len(size))
    return bytes(p.op(b"t.").out)


@pytest.mark.parametrize(
    ("pickle_bytes", "message"),
    [
        (_pickle_of_one_tensor("0", "LongStorage", 5, (4,)), "holds 24 bytes"),  # 3 stored
        (_pickle_of_one_tensor("9", "LongStorage", 3, (3,)), "no archive/data/9"),
        (_pickle_of_one_tensor("0", "LongStorage", 3, (2,), 2), "reaches element 3"),
        (_pickle_of_one_tensor("0", "BFloat16Storage", 12, (12,)), "BFloat16Storage"),
        (_pickle_of_one_tensor("../0", "LongStorage", 3, (3,)), "names no data record"),
        # an expanded view: 2^40 elements of one stored value
        (
            bytes(Pickle().op(b"(").tensor("0", "LongStorage", 3, 0, (2**40,), (0,)).op(b"t.").out),
            r"shape \[1099511627776\] is larger than its storage",
        ),
    ],
)
def test_storages_must_match_their_records(
    tmp_path: Path, pickle_bytes: bytes, message: str
) -> None:
    blob = torch_zip_bytes([np.arange(3, dtype=np.int64)], pickle_bytes=pickle_bytes)
    path = tmp_path / "x.pt"
    path.write_bytes(blob)
    with pytest.raises(InputError, match=message):
        torch_zip.load(path)


def test_not_a_torch_zip(tmp_path: Path) -> None:
    cases = {
        "text.pt": (b"indices,offsets\n1,2\n", "not a torch.save zip archive"),
        "empty.pt": (b"", "an empty file"),
        "legacy.pt": (torch_zip.LEGACY_MAGIC + b"\x2e", "a legacy (pre-1.6, non-zip)"),
        "day.pt.gz": (b"\x1f\x8b\x08\x00rest", "gzip-compressed; decompress it first"),
    }
    for name, (raw, message) in cases.items():
        (tmp_path / name).write_bytes(raw)
        with pytest.raises(InputError) as caught:
            torch_zip.load(tmp_path / name)
        assert str(caught.value).startswith(f"{tmp_path / name}: {message}")
    other = io.BytesIO()
    with zipfile.ZipFile(other, "w") as z:
        z.writestr("notes.txt", "hello")
    (tmp_path / "other.zip").write_bytes(other.getvalue())
    with pytest.raises(InputError, match=r"without one <archive>/data.pkl \(found notes.txt\)"):
        torch_zip.load(tmp_path / "other.zip")
    big = io.BytesIO()
    with zipfile.ZipFile(big, "w") as z:
        z.writestr("a/data.pkl", b"\x80\x02" + b"N" * torch_zip.MAX_PICKLE_BYTES + b".")
    (tmp_path / "big.pt").write_bytes(big.getvalue())
    with pytest.raises(InputError, match="more than a tuple of tensors needs"):
        torch_zip.load(tmp_path / "big.pt")


def test_truncated_archive(tmp_path: Path) -> None:
    blob = torch_zip_bytes([np.arange(1000, dtype=np.int64)] * 3)
    path = tmp_path / "cut.pt"
    path.write_bytes(blob[: len(blob) // 2])
    with pytest.raises(InputError) as caught:
        torch_zip.load(path)
    assert str(caught.value).startswith(f"{path}: ")


def test_names_from_the_file_are_shown_on_one_line(tmp_path: Path) -> None:
    hostile = "x\n\x1b[31m\u202e"
    other = io.BytesIO()
    with zipfile.ZipFile(other, "w") as z:
        z.writestr(f"{hostile}/notes", "hello")
    (tmp_path / "a.pt").write_bytes(other.getvalue())
    evil = Pickle().glob(f"os{hostile}", "system").op(b".").out
    write_torch_zip(tmp_path / "b.pt", [], pickle_bytes=bytes(evil))
    for name in ("a.pt", "b.pt"):
        with pytest.raises(InputError) as caught:
            torch_zip.load(tmp_path / name)
        message = str(caught.value)
        # (a GLOBAL opcode's names end at a line break: b.pt's module is "osx")
        assert message.isprintable() and "\\x1b[31m\\u202e" in message, message


def test_mutated_files_are_read_or_refused_in_one_line(tmp_path: Path) -> None:
    """Random bytes changed in a valid file (its pickle, or anywhere): the reader and the
    checks give arrays or an InputError of one line, never another exception."""
    rng = np.random.default_rng(5)
    lengths = np.array([[1, 2, 0], [0, 1, 3]])
    offsets = np.concatenate([[0], np.cumsum(lengths.reshape(-1))])
    items = [np.arange(7), offsets, lengths]
    valid = torch_zip_bytes(items)
    pickled = zipfile.ZipFile(io.BytesIO(valid)).read("archive/data.pkl")
    sources = [valid, (DATA / "fbgemm_tiny.pt").read_bytes()]
    outcomes = {"read": 0, "refused": 0}
    for i in range(1500):
        if i % 3 == 0:
            raw = bytearray(pickled)
            for k in rng.integers(0, len(raw), size=rng.integers(1, 5)):
                raw[k] = rng.integers(0, 256)
            blob = torch_zip_bytes(items, pickle_bytes=bytes(raw[: rng.integers(1, len(raw) + 1)]))
        else:
            raw = bytearray(sources[i % 3 - 1])
            for k in rng.integers(0, len(raw), size=rng.integers(1, 9)):
                raw[k] = rng.integers(0, 256)
            blob = bytes(raw)
        path = tmp_path / "m.pt"
        path.write_bytes(blob)
        try:
            fbgemm.check_batch(path, torch_zip.load(path))
            outcomes["read"] += 1
        except InputError as exc:
            assert str(exc).isprintable(), str(exc)
            outcomes["refused"] += 1
    assert outcomes["read"] > 50 and outcomes["refused"] > 500, outcomes


# -- ingest: round trips ------------------------------------------------------------------


def test_round_trip_several_files(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    rows = [50, 7, 1000, 3]
    paths = [random_file(tmp_path / f"b{i}.pt", rng, 4, 16, rows) for i in range(5)]
    # int32 indices and int32 offsets in one file, as --indices-dtype 32 makes them
    paths.append(random_file(tmp_path / "b5.pt", rng, 4, 16, rows, index_dtype=np.int32,
                             offset_dtype=np.int32))  # fmt: skip
    # a table with no lookups at all in a file, and a whole file of empty bags but one
    lengths = np.zeros((4, 16), dtype=np.int64)
    lengths[2, 15] = 3
    paths.append(fbgemm_file(tmp_path / "b6.pt", lengths, [999, 0, 999]))
    result = ingest_fbgemm(paths, tmp_path / "trace", reader="builtin")
    assert (result.files, result.batches, result.tables, result.batch_size) == (7, 7, 4, 16)
    assert result.rows_rule == ROWS_OBSERVED
    assert_round_trip(result.path, paths)
    trace = replay.open_trace(result.path)
    largest = np.full(4, -1)
    for p in paths:
        indices, offsets, lengths = bags(p)
        bounds = offsets[::16]
        for t in range(4):
            seg = indices[bounds[t] : bounds[t + 1]]
            largest[t] = max(largest[t], seg.max(initial=-1))
    assert trace.table_rows.tolist() == (largest + 1).tolist()
    assert result.lookups == trace.num_lookups
    m = trace.manifest
    assert m["batch_size"] == 16 and m["workload"]["batch_size"] == 16
    assert m["source"]["kind"] == "fbgemm" and m["source"]["files"] == [p.name for p in paths]
    assert m["source"]["table_rows"] == ROWS_OBSERVED


def test_table_rows_given(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(1)
    paths = [random_file(tmp_path / f"b{i}.pt", rng, 3, 8, [20, 20, 20]) for i in range(2)]
    out = tmp_path / "one"
    code, stdout, _ = cli(
        capsys, "ingest", "--format", "fbgemm", *paths, "--table-rows", "20", "-o", out
    )
    assert code == 0 and "(rows given)" in stdout
    assert replay.open_trace(out).table_rows.tolist() == [20, 20, 20]
    result = ingest_fbgemm(paths, tmp_path / "each", table_rows="20,30,5_000_000_000")
    trace = replay.open_trace(result.path)
    assert trace.table_rows.tolist() == [20, 30, 5_000_000_000]
    assert trace.row_dtype == np.uint64  # a table of more than 2^32 rows
    assert result.rows_rule == ROWS_GIVEN
    assert_round_trip(result.path, paths)


def test_ids_beyond_2_to_the_32_widen_the_row_column(tmp_path: Path) -> None:
    lengths = np.array([[1, 2], [1, 0]])
    small = fbgemm_file(tmp_path / "a.pt", lengths, [1, 2, 3, 4])
    wide = fbgemm_file(tmp_path / "b.pt", lengths, [1, 2**33, 3, 4])
    result = ingest_fbgemm([small, wide], tmp_path / "t")
    trace = replay.open_trace(result.path)
    assert trace.row_dtype == np.uint64 and trace.table_rows.tolist() == [2**33 + 1, 5]
    assert_round_trip(result.path, [small, wide])


def test_many_row_groups_and_parts(tmp_path: Path) -> None:
    """Batches of ~800 k lookups: one per row group, four per part file."""
    rng = np.random.default_rng(2)
    paths = []
    for i in range(6):
        lengths = rng.integers(300, 500, size=(2, 2000))
        ids = rng.integers(0, 100_000, size=int(lengths.sum()))
        paths.append(fbgemm_file(tmp_path / f"b{i}.pt", lengths, ids))
    result = ingest_fbgemm(paths, tmp_path / "t")
    m = json.loads((result.path / "manifest.json").read_text())
    assert m["layout"] == {"batches_per_row_group": 1, "batches_per_file": 4}
    assert [(e["batch_start"], e["batch_stop"]) for e in m["files"]["lookups"]] == [(0, 4), (4, 6)]
    trace = replay.open_trace(result.path)
    trace.verify()
    for b, chunk in enumerate(trace.iter_lookups()):
        indices, _, _ = bags(paths[b])
        assert (chunk.batch_start, chunk.batch_stop) == (b, b + 1)
        assert np.array_equal(chunk.row, indices)


def test_the_same_trace_from_the_same_files(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    paths = [random_file(tmp_path / f"b{i}.pt", rng, 2, 5, [9, 9]) for i in range(3)]
    a = ingest_fbgemm(paths, tmp_path / "a").path
    b = ingest_fbgemm(paths, tmp_path / "b").path
    strip = lambda m: {k: v for k, v in m.items() if k != "files"}  # noqa: E731
    ma, mb = (json.loads((p / "manifest.json").read_text()) for p in (a, b))
    assert strip(ma) == strip(mb)
    assert [e["sha256"] for e in ma["files"]["lookups"]] == [
        e["sha256"] for e in mb["files"]["lookups"]
    ]


# -- ingest: refusals -----------------------------------------------------------------------


def _tiny(path: Path, **kw: Any) -> Path:
    return fbgemm_file(path, [[1, 2], [0, 1]], [4, 0, 3, 2], **kw)


def _refusals(tmp: Path) -> dict[str, tuple[list[Path], list[str], str]]:
    """name -> (files, extra options, a phrase of the message)."""
    good = _tiny(tmp / "good.pt")
    text = tmp / "text.pt"
    text.write_text("not a tensor file\n")
    offsets = np.array([0, 1, 3, 3, 4])
    lengths = np.array([[1, 2], [0, 1]])
    three_tables = fbgemm_file(tmp / "t3.pt", [[1], [1], [1]], [0, 1, 2])
    return {
        "not-zip": ([good, text], [], "not a torch.save zip archive"),
        "two-tensors": (
            [write_torch_zip(tmp / "two.pt", [np.arange(4), offsets])],
            [],
            "holds a tuple of 2: int64[4], int64[5]; an FBGEMM trace file holds three",
        ),
        "float-indices": (
            [write_torch_zip(tmp / "f.pt", [np.arange(4.0), offsets, lengths])],
            [],
            "indices are float64, not integers",
        ),
        "float-offsets": (
            [write_torch_zip(tmp / "fo.pt", [np.arange(4), offsets.astype(np.float32), lengths])],
            [],
            "offsets are float32, not integers",
        ),
        "out-of-range": (
            [good], ["--table-rows", "4"], "row 4, but --table-rows gives it 4 rows"
        ),
        "out-of-range-list": ([good], ["--table-rows", "5,2"], "table 1 looks up row 2"),
        "table-rows-count": ([good], ["--table-rows", "5,5,5"], "lists 3 tables but"),
        "table-rows-text": ([good], ["--table-rows", "many"], "a comma list of numbers"),
        "table-rows-zero": ([good], ["--table-rows", "0"], "between 1 and 2^63 - 1 rows"),
        "table-count": ([good, three_tables], [], "3 tables, but"),
        "batch-size": (
            [good, fbgemm_file(tmp / "b3.pt", [[1, 0, 0], [0, 0, 1]], [1, 2])],
            [],
            "a batch of 3 samples, but",
        ),
        "negative-id": (
            [fbgemm_file(tmp / "neg.pt", [[1, 2], [0, 1]], [4, 0, 3, -1])],
            [],
            "table 1 looks up the negative row id -1",
        ),
        "lengths-disagree": (
            [write_torch_zip(tmp / "ld.pt", [np.arange(4), offsets, np.array([[1, 2], [1, 0]])])],
            [],
            "lengths[1][0] is 1 but its offsets step by 0",
        ),
        "offsets-decrease": (
            [write_torch_zip(tmp / "od.pt", [np.arange(4), np.array([0, 2, 1, 3, 4]), lengths])],
            [],
            "offsets decrease at entry 2",
        ),
        "offsets-short": (
            [write_torch_zip(tmp / "os.pt", [np.arange(5), offsets, lengths])],
            [],
            "offsets run from 0 to 4, not from 0 to the 5 indices",
        ),
        "offsets-count": (
            [write_torch_zip(tmp / "oc.pt", [np.arange(4), offsets[:-1], lengths])],
            [],
            "4 offsets for lengths of shape [2, 2]",
        ),
        "lengths-1d": (
            [write_torch_zip(tmp / "l1.pt", [np.arange(4), offsets, lengths.reshape(-1)])],
            [],
            "lengths has shape [4], not [tables, batch]",
        ),
        "no-lookups": (
            [fbgemm_file(tmp / "none.pt", [[0, 0]], [])],
            [],
            "no lookups in the input",
        ),
        "batch-size-option": ([good], ["--batch-size", "4"], "--batch-size applies to --format"),
        "dictionary-option": ([good], ["--dictionary"], "--dictionary applies to --format criteo"),
        "missing-file": ([good, tmp / "nope.pt"], [], "nope.pt: no such file"),
    }  # fmt: skip


@pytest.mark.parametrize(
    "case",
    [
        "not-zip", "two-tensors", "float-indices", "float-offsets", "out-of-range",
        "out-of-range-list", "table-rows-count", "table-rows-text", "table-rows-zero",
        "table-count", "batch-size", "negative-id", "lengths-disagree", "offsets-decrease",
        "offsets-short", "offsets-count", "lengths-1d", "no-lookups", "batch-size-option",
        "dictionary-option", "missing-file",
    ],
)  # fmt: skip
def test_refusals_exit_2_with_one_line_and_no_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    files, options, phrase = _refusals(tmp_path)[case]
    out = tmp_path / "trace"
    code, stdout, stderr = cli(capsys, "ingest", "--format", "fbgemm", *files, *options, "-o", out)
    assert code == 2, stdout
    assert stderr.startswith("replay: error: ") and stderr.count("\n") == 1, stderr
    assert phrase in stderr, stderr
    assert_no_output(out)


def test_the_evil_pickle_through_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = tmp_path / "pwned"
    evil = bytes(Pickle().glob("os", "system").op(b"(").text(f"touch {marker}").op(b"tR.").out)
    good = _tiny(tmp_path / "good.pt")
    bad = tmp_path / "evil.pt"
    bad.write_bytes(torch_zip_bytes([], pickle_bytes=evil))
    out = tmp_path / "trace"
    code, _, stderr = cli(capsys, "ingest", "--format", "fbgemm", good, bad, "-o", out)
    assert code == 2 and stderr.count("\n") == 1 and str(bad) in stderr
    assert "os.system" in stderr or "os system" in stderr  # the built-in reader, or torch's
    assert not marker.exists()
    assert_no_output(out)


def test_criteo_refuses_table_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tsv = tmp_path / "day.tsv"
    tsv.write_text("\t".join(["0"] + ["1"] * 13 + ["00000001"] * 26) + "\n")
    out = tmp_path / "trace"
    code, _, stderr = cli(capsys, "ingest", tsv, "--dictionary", "--table-rows", "5", "-o", out)
    assert code == 2 and "--table-rows applies to --format fbgemm only" in stderr
    code, _, stderr = cli(capsys, "ingest", "--format", "parquet", tsv, "-o", out)
    assert code == 2 and "--format must be criteo or fbgemm" in stderr
    assert_no_output(out)
    # the default format is still Criteo, with its default batch size
    assert cli(capsys, "ingest", tsv, "--dictionary", "-o", out)[0] == 0
    assert replay.open_trace(out).manifest["batch_size"] == 2048


def test_existing_output_needs_force(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = _tiny(tmp_path / "good.pt")
    out = tmp_path / "trace"
    assert cli(capsys, "ingest", "--format", "fbgemm", good, "-o", out)[0] == 0
    code, _, stderr = cli(capsys, "ingest", "--format", "fbgemm", good, "-o", out)
    assert code == 2 and "--force" in stderr
    assert cli(capsys, "ingest", "--format", "fbgemm", good, "-o", out, "--force")[0] == 0


def test_api_errors() -> None:
    assert parse_table_rows(None) is None
    assert parse_table_rows("3, 4") == (3, 4)
    assert parse_table_rows(7) == (7,)
    assert parse_table_rows([1, 2]) == (1, 2)
    with pytest.raises(ConfigError, match="table_rows"):
        parse_table_rows("1,,2")
    with pytest.raises(ConfigError, match="reader must be"):
        ingest_fbgemm([DATA / "fbgemm_tiny.pt"], "/nonexistent/x", reader="pickle")
