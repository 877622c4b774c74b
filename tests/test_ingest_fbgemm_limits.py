"""`replay ingest --format fbgemm`: the limits of issue 39.

- the trace's row space (Σ rows over its tables, each largest id + 1 or `--table-rows`)
  must fit the int64 flat keys: ingest accepts exactly what `inspect`'s
  `check_row_space` accepts, and a row id of 2^63 - 1 (once a segmentation fault)
  is refused;
- `--table-rows` text is read as ASCII digits only (``²`` was a traceback);
- only regular files are read (``/dev/zero`` read until killed; a FIFO blocks);
- an installed torch older than 2.6 is never used (CVE-2025-32434);
- the uint64 restart keeps the one claimed output folder.

The files are written by `test_ingest_fbgemm`'s writer of torch's zip format.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import types
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from test_ingest_fbgemm import V3_DTYPES, assert_no_output, assert_round_trip, cli, fbgemm_file

import replay
from replay._memory import MAX_ROW_SPACE, check_row_space
from replay.errors import ConfigError
from replay.trace import fbgemm
from replay.trace.fbgemm import ingest_fbgemm, parse_table_rows, read_tensors

DATA = Path(__file__).parent / "data"
TOP = 2**63 - 1  # MAX_ROW_SPACE: the largest int64


@pytest.fixture
def builtin_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    """The built-in reader, also where torch is installed (as in test_ingest_fbgemm)."""
    monkeypatch.setattr(fbgemm, "torch_available", lambda: False)


def assert_refused(code: int, stdout: str, stderr: str, phrase: str, out: Path) -> None:
    assert code == 2, stdout
    assert stderr.startswith("replay: error: ") and stderr.count("\n") == 1, stderr
    assert phrase in stderr, stderr
    assert_no_output(out)


# -- the row space ------------------------------------------------------------------------------

# (lengths [tables, batch], indices) per file, and whether the trace's rows fit
ROW_SPACE_CASES = {
    # the crash: rows = 2^63 overflowed int64 and the update-set kernel indexed
    # out of bounds (exit 139, .partial left behind)
    "id-2^63-1": ([([[1, 2], [0, 1]], [4, 0, 3, TOP])], False),
    "id-2^63-1-one-table": ([([[1, 2]], [4, 0, TOP])], False),
    # the "accepted, then refused by inspect": 5 + (2^63 - 1) rows
    "id-2^63-2-two-tables": ([([[1, 2], [0, 1]], [4, 0, 3, TOP - 1])], False),
    # the boundary: exactly 2^63 - 1 rows in all is what check_row_space accepts
    "id-2^63-2-one-table": ([([[1, 2]], [4, 0, TOP - 1])], True),
    "two-tables-at-the-limit": ([([[1, 2], [0, 1]], [4, 0, 3, TOP - 6])], True),
    "two-tables-one-over": ([([[1, 2], [0, 1]], [4, 0, 3, TOP - 5])], False),
    # each file alone fits; the second one's ids make the sum overflow
    "over-across-files": (
        [([[1, 0], [0, 1]], [2**62, 3]), ([[1, 0], [0, 1]], [1, 2**62 - 1])],
        False,
    ),
}


@pytest.mark.parametrize("case", list(ROW_SPACE_CASES))
@pytest.mark.usefixtures("builtin_reader")
def test_row_space_is_what_inspect_accepts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    files, fits = ROW_SPACE_CASES[case]
    paths = [
        fbgemm_file(tmp_path / f"b{i}.pt", lengths, indices)
        for i, (lengths, indices) in enumerate(files)
    ]
    out = tmp_path / "trace"
    code, stdout, stderr = cli(capsys, "ingest", "--format", "fbgemm", *paths, "-o", out)
    if not fits:
        assert_refused(code, stdout, stderr, "int64 row keys", out)
        assert str(paths[-1]) in stderr  # the file that crossed the limit
        return
    assert code == 0, stderr
    trace = replay.open_trace(out)
    trace.verify()
    assert check_row_space(trace.table_rows.tolist()) == MAX_ROW_SPACE
    assert_round_trip(out, paths)
    # inspect takes it past its row-space check (and then asks for ~8 EiB of memory)
    code, _, stderr = cli(capsys, "inspect", out)
    assert code == 2 and "memory" in stderr and "row keys" not in stderr, stderr


@pytest.mark.usefixtures("builtin_reader")
def test_uint64_ids_at_and_beyond_2_to_the_63(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(V3_DTYPES, np.dtype(np.uint64), "uint64")  # the writer's v3 dtypes
    out = tmp_path / "trace"
    for top, phrase in ((TOP, "int64 row keys"), (2**64 - 1, "beyond the 2^63 - 1 rows")):
        ids = np.array([4, 0, top], dtype=np.uint64)
        path = fbgemm_file(tmp_path / "u.pt", [[1, 2]], ids, index_dtype=np.uint64)
        code, stdout, stderr = cli(capsys, "ingest", "--format", "fbgemm", path, "-o", out)
        assert_refused(code, stdout, stderr, phrase, out)
    path = fbgemm_file(tmp_path / "u.pt", [[1, 2]], [4, 0, TOP - 1], index_dtype=np.uint64)
    assert cli(capsys, "ingest", "--format", "fbgemm", path, "-o", out)[0] == 0
    assert replay.open_trace(out).table_rows.tolist() == [TOP]


@pytest.mark.parametrize(
    ("rows", "fits"),
    [
        (str(TOP), False),  # the case: 2 tables of 2^63 - 1 rows
        (f"{2**62 - 1},{2**62}", True),  # 2^63 - 1 in all
        (f"{2**62},{2**62}", False),
        (str(2**62 - 1), True),
        (str(2**62), False),
    ],
)
@pytest.mark.usefixtures("builtin_reader")
def test_table_rows_must_fit_the_row_space(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], rows: str, fits: bool
) -> None:
    good = fbgemm_file(tmp_path / "good.pt", [[1, 2], [0, 1]], [4, 0, 3, 2])
    out = tmp_path / "trace"
    argv = ("ingest", "--format", "fbgemm", good, "--table-rows", rows, "-o", out)
    code, stdout, stderr = cli(capsys, *argv)
    if not fits:
        assert_refused(code, stdout, stderr, "--table-rows gives 2 tables", out)
        return
    assert code == 0, stderr
    assert check_row_space(replay.open_trace(out).table_rows.tolist()) <= MAX_ROW_SPACE


@pytest.mark.usefixtures("builtin_reader")
def test_one_table_of_2_to_the_63_minus_1_rows_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = fbgemm_file(tmp_path / "one.pt", [[1, 2]], [4, 0, 2])
    out = tmp_path / "trace"
    assert cli(capsys, "ingest", "--format", "fbgemm", path, "--table-rows", TOP, "-o", out)[0] == 0
    assert replay.open_trace(out).table_rows.tolist() == [TOP]


# -- --table-rows as text -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    ["²", "5,²", "٣", "1e3", "-1", "+5", "0x10", "1__0", "_5", "5_", "", "5,", "1.0", "5 5"],
)
def test_table_rows_text_is_ascii_digits(text: str) -> None:
    with pytest.raises(ConfigError, match="a comma list of numbers"):
        parse_table_rows(text)


@pytest.mark.parametrize("text", ["9" * 20, "1" * 5000, "9223372036854775808", "0"])
def test_table_rows_text_out_of_range(text: str) -> None:
    with pytest.raises(ConfigError, match="between 1 and 2"):
        parse_table_rows(text)


def test_table_rows_text_accepted() -> None:
    assert parse_table_rows(" 1_000 , 0007") == (1000, 7)
    assert parse_table_rows("0" * 40 + "5") == (5,)
    assert parse_table_rows(str(TOP)) == (TOP,)
    with pytest.raises(ConfigError, match="between 1 and 2"):
        parse_table_rows(2.5)  # type: ignore[arg-type]  # the API, given a float


@pytest.mark.parametrize("text", ["²", "1" * 5000])
def test_table_rows_text_through_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str
) -> None:
    out = tmp_path / "trace"
    argv = ("ingest", "--format", "fbgemm", DATA / "fbgemm_tiny.pt", "--table-rows", text)
    code, stdout, stderr = cli(capsys, *argv, "-o", out)
    assert_refused(code, stdout, stderr, "--table-rows", out)
    assert len(stderr) < 200  # the 5,000 digits are not echoed back


# -- only regular files -------------------------------------------------------------------------


@pytest.fixture
def fifo(tmp_path: Path) -> Iterator[Path]:
    """A FIFO no one writes to. Should a reader block in opening it, from 10 s on a
    writer opens it and closes it (end of file) whenever a reader waits: the test fails
    instead of hanging."""
    path = tmp_path / "pipe.pt"
    os.mkfifo(path)
    done = threading.Event()

    def unblock() -> None:
        wait = 10.0
        while not done.wait(wait):
            wait = 0.2
            with contextlib.suppress(OSError):  # no reader waiting
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))

    thread = threading.Thread(target=unblock, daemon=True)
    thread.start()
    yield path
    done.set()
    thread.join()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
@pytest.mark.usefixtures("builtin_reader")
def test_a_fifo_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], fifo: Path) -> None:
    out = tmp_path / "trace"
    good = DATA / "fbgemm_tiny.pt"
    code, stdout, stderr = cli(capsys, "ingest", "--format", "fbgemm", good, fifo, "-o", out)
    assert_refused(code, stdout, stderr, f"{fifo}: is a FIFO (named pipe), not a regular file", out)


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero here")
@pytest.mark.usefixtures("builtin_reader")
def test_dev_zero_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "trace"
    code, stdout, stderr = cli(capsys, "ingest", "--format", "fbgemm", "/dev/zero", "-o", out)
    assert_refused(code, stdout, stderr, "/dev/zero: is a character device, not a regular", out)


@pytest.mark.usefixtures("builtin_reader")
def test_a_link_to_a_regular_file_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    link = tmp_path / "link.pt"
    link.symlink_to(DATA / "fbgemm_tiny.pt")
    out = tmp_path / "trace"
    assert cli(capsys, "ingest", "--format", "fbgemm", link, "-o", out)[0] == 0


# -- the torch version gate ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "safe"),
    [
        ("2.1.0", False), ("2.5.1+cu121", False), ("1.13.1", False), ("unknown", False),
        ("2.6.0", True), ("2.6.0+cpu", True), ("2.10.1", True), ("3.0", True),
    ],
)  # fmt: skip
def test_torch_before_2_6_is_never_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: str, safe: bool
) -> None:
    monkeypatch.setattr(fbgemm, "torch_version", lambda: version)
    used: list[Path] = []
    monkeypatch.setattr(fbgemm, "_load_with_torch", lambda path: used.append(path) or "torch")
    assert fbgemm.torch_available() is safe
    got = read_tensors(DATA / "fbgemm_tiny.pt")  # auto
    if safe:
        assert got == "torch" and used == [DATA / "fbgemm_tiny.pt"]
        assert read_tensors(DATA / "fbgemm_tiny.pt", "torch") == "torch"
        return
    assert used == [] and len(got) == 3  # the built-in reader's three arrays
    with pytest.raises(ConfigError, match="CVE-2025-32434"):
        read_tensors(DATA / "fbgemm_tiny.pt", "torch")
    assert used == []


def test_no_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fbgemm, "torch_version", lambda: None)
    assert not fbgemm.torch_available()
    assert len(read_tensors(DATA / "fbgemm_tiny.pt")) == 3
    with pytest.raises(ConfigError, match="torch is not installed"):
        read_tensors(DATA / "fbgemm_tiny.pt", "torch")


def test_the_version_comes_from_torch_metadata(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = types.SimpleNamespace(name="torch")
    monkeypatch.setattr(fbgemm.importlib.util, "find_spec", lambda name: spec)
    monkeypatch.setattr(fbgemm.importlib.metadata, "version", lambda name: "2.5.0")
    assert fbgemm.torch_version() == "2.5.0" and not fbgemm.torch_available()
    monkeypatch.setattr(fbgemm.importlib.metadata, "version", lambda name: "2.7.1")
    assert fbgemm.torch_available()


def test_the_imported_torch_is_checked_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """Metadata that says 2.6 over a module that says 2.5 (a source tree on the path)."""
    monkeypatch.setattr(fbgemm, "torch_version", lambda: "2.6.0")
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(__version__="2.5.0"))
    with pytest.raises(ConfigError, match=r"torch 2\.5\.0 is older than 2\.6"):
        read_tensors(DATA / "fbgemm_tiny.pt", "torch")


# -- the uint64 restart ---------------------------------------------------------------------------


@pytest.mark.usefixtures("builtin_reader")
def test_the_uint64_restart_keeps_one_claim_on_the_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A row id past 2^32 in a later file rewrites the parts in the same `.partial`
    folder: the output is claimed once (a lock taken there is never let go midway), and
    no --force is assumed for the second start."""
    made: list[bool] = []

    class Counting(fbgemm.TraceFolderWriter):
        def __init__(self, *args: object, **kwargs: object) -> None:
            made.append(bool(kwargs.get("force")))
            super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(fbgemm, "TraceFolderWriter", Counting)
    lengths = np.array([[1, 2], [1, 0]])
    small = fbgemm_file(tmp_path / "a.pt", lengths, [1, 2, 3, 4])
    wide = fbgemm_file(tmp_path / "b.pt", lengths, [1, 2**33, 3, 4])
    result = ingest_fbgemm([small, wide], tmp_path / "t")
    assert made == [False]
    trace = replay.open_trace(result.path)
    assert trace.row_dtype == np.uint64
    assert_round_trip(result.path, [small, wide])


@pytest.mark.usefixtures("builtin_reader")
def test_batches_beyond_the_trace_limit_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch wider than a trace may hold (2^26 samples: the reader refuses such a
    manifest) is refused at ingest; the limit is lowered here so the file stays small."""
    monkeypatch.setattr(fbgemm, "MAX_BATCH_SIZE", 4)
    out = tmp_path / "o"
    wide = fbgemm_file(tmp_path / "wide.pt", [[1, 1, 1, 1, 1]], [0, 1, 2, 3, 4])
    code, stdout, stderr = cli(capsys, "ingest", "--format", "fbgemm", wide, "-o", out)
    assert_refused(code, stdout, stderr, "batches of 5 samples; a trace holds at most 4", out)
    fits = fbgemm_file(tmp_path / "fits.pt", [[1, 1, 1, 1]], [0, 1, 2, 3])
    assert cli(capsys, "ingest", "--format", "fbgemm", fits, "-o", out)[0] == 0
