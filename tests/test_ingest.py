"""`replay ingest`: Criteo TSV files -> trace (golden rows, gzip, errors, kernel vs reference).

Every test writes its own small Criteo-format files into tmp_path.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import random
import threading
from pathlib import Path

import duckdb
import numpy as np
import polars as pl
import pyarrow.dataset as ds
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import replay
from replay.cli import main
from replay.errors import ConfigError, InputError, OutputError
from replay.trace.criteo import IngestResult, ingest
from replay.trace.criteo_parse import (
    BAD_CAT,
    BAD_FIELD_COUNT,
    BAD_INT,
    BAD_LABEL,
    BLANK_LINE,
    MAX_IND_RANGE,
    MAX_LINE_BYTES,
    NUM_CAT,
    OK,
    _parse_block,
)
from replay.trace.criteo_reference import (
    ingest_reference_rows,
    parse_line_reference,
    reference_lookups,
    split_lines_reference,
)
from replay.trace.updates import update_sets_reference
from replay.trace.writer import write_trace_from_arrays

# -- helpers ----------------------------------------------------------------------------------


def line(label: str = "0", ints: list[str] | None = None, cats: list[str] | None = None) -> str:
    ints = ["1"] * 13 if ints is None else ints
    cats = ["00000001"] * 26 if cats is None else cats
    return "\t".join([label, *ints, *cats])


def cats_with(c1: str, c2: str) -> list[str]:
    return [c1, c2] + ["00000001"] * 24


# C1 and C2 vary; every other table sees "00000001" on every line.
GOLDEN = [
    line("0", cats=cats_with("0000000a", "abc")),
    line("1", ints=[""] * 13, cats=cats_with("ffffffff", "ABC")),
    line("0", ints=["-3", "+4"] + ["0"] * 11, cats=cats_with("", "")),
    line("0", cats=cats_with("0000000a", "")),
    line("1", cats=cats_with("7", "1")),
]


def write(path: Path, lines: list[str], *, end: str = "\n", final_newline: bool = True) -> Path:
    text = end.join(lines) + (end if final_newline and lines else "")
    data = text.encode()
    if path.suffix == ".gz":
        data = gzip.compress(data, mtime=0)
    path.write_bytes(data)
    return path


def cli(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def manifest(path: Path) -> dict:
    return json.loads((path / "manifest.json").read_text())


def digests(path: Path) -> list[str]:
    files = manifest(path)["files"]
    return [e["sha256"] for kind in ("lookups", "updates") for e in files[kind]]


def assert_no_output(out: Path) -> None:
    assert not out.exists()
    assert not (out.parent / f".{out.name}.partial").exists()


# -- golden rows ----------------------------------------------------------------------------


def test_golden_max_ind_range(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = write(tmp_path / "day.tsv", GOLDEN)
    out = tmp_path / "trace"
    code, stdout, _ = cli(
        capsys, "ingest", src, "--out", out, "--batch-size", "2", "--max-ind-range", "10"
    )
    assert code == 0
    assert "5 samples" in stdout and "3 batches" in stdout and "130 lookups" in stdout
    assert str(out) in stdout
    trace = replay.open_trace(out)
    trace.verify()
    m = trace.manifest
    assert m["created_by"] == "ingest"
    assert [t["rows"] for t in m["tables"]] == [11] * 26
    assert [t["name"] for t in m["tables"]] == [f"C{i}" for i in range(1, 27)]
    assert m["source"] == {
        "kind": "criteo-tsv",
        "files": ["day.tsv"],
        "rule": "max-ind-range",
        "max_ind_range": 10,
        "samples": 5,
        "bad_lines_skipped": 0,
    }
    assert m["workload"]["batches"] == 3 and m["workload"]["batch_size"] == 2
    assert all(t["pooling"] == 1 for t in m["workload"]["tables"])
    look = trace.lookups()
    # C1: a -> 1 + 10 % 10, ffffffff -> 1 + 4294967295 % 10, missing -> 0, a, 7 -> 8
    # C2: abc -> 1 + 2748 % 10 (either case), missing -> 0, 1 -> 2; others 00000001 -> 2
    expected = (
        [1, 6]
        + [9, 9]
        + [2, 2] * 24  # batch 0: C1 of samples 0, 1, then C2, ...
        + [0, 1]
        + [0, 0]
        + [2, 2] * 24  # batch 1
        + [8]
        + [2]
        + [2] * 24  # the partial last batch: one sample
    )
    assert look.row.tolist() == expected
    assert look.batch.tolist() == [0] * 52 + [1] * 52 + [2] * 26
    assert look.table.tolist() == [t for t in range(26) for _ in range(2)] * 2 + list(range(26))
    upd = trace.updates()
    ref = update_sets_reference(
        look.batch, look.table, look.row, 0, 3, np.full(26, 11), np.zeros(26, bool)
    )
    for got, want in zip((upd.batch, upd.table, upd.row, upd.count), ref, strict=True):
        assert got.tolist() == want.tolist()
    assert upd.count[(upd.batch == 0) & (upd.table == 1)].tolist() == [2]  # abc, ABC: one row


def test_an_ingested_trace_replays_with_the_models_dimension(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Click logs name rows, not their width: a run of an ingested trace says how to give
    the dimension (one line, exit 2), and runs once it is given."""
    src = write(tmp_path / "day.tsv", GOLDEN)
    out = tmp_path / "trace"
    assert cli(capsys, "ingest", src, "--out", out, "--batch-size", "2",
               "--max-ind-range", "10")[0] == 0  # fmt: skip
    run = ["run", out, "-s", "hbm-lru", "--set", "policy.capacity_rows=8", "-o"]
    code, _, err = cli(capsys, *run, tmp_path / "r1")
    assert code == 2 and err.count("\n") == 1
    assert "names no embedding dimension" in err and "--set model.embedding_dim=N" in err
    assert not (tmp_path / "r1").exists()
    code, _, _ = cli(capsys, *run, tmp_path / "r2", "--set", "model.embedding_dim=16")
    assert code == 0
    summary = json.loads((tmp_path / "r2" / "summary.json").read_text())
    assert summary["lookups"] == 130


def test_golden_dictionary_across_files(tmp_path: Path) -> None:
    a = write(tmp_path / "a.tsv", GOLDEN[:2])
    b = write(tmp_path / "b.tsv.gz", GOLDEN[2:4])
    c = write(tmp_path / "c.tsv", GOLDEN[4:], final_newline=False)
    result = ingest([a, b, c], tmp_path / "trace", batch_size=4, dictionary=True)
    assert isinstance(result, IngestResult)
    assert (result.samples, result.batches, result.lookups, result.bad_lines) == (5, 2, 130, 0)
    trace = replay.open_trace(result.path)
    # C1: a -> 1, ffffffff -> 2, missing -> 0, a -> 1, 7 -> 3; C2: abc = ABC -> 1, 1 -> 2
    assert [t["rows"] for t in trace.manifest["tables"]] == [4, 3] + [2] * 24
    assert list(result.table_rows) == [4, 3] + [2] * 24
    assert trace.manifest["source"]["files"] == ["a.tsv", "b.tsv.gz", "c.tsv"]
    assert trace.manifest["source"]["max_ind_range"] is None
    look = trace.lookups()
    assert look.row.tolist() == (
        [1, 2, 0, 1] + [1, 1, 0, 0] + [1, 1, 1, 1] * 24 + [3] + [2] + [1] * 24
    )
    one_file = ingest(
        write(tmp_path / "all.tsv", GOLDEN), tmp_path / "one", batch_size=4, dictionary=True
    )
    assert digests(one_file.path) == digests(result.path)


def test_gzip_gives_the_same_bytes(tmp_path: Path) -> None:
    rng = random.Random(3)
    lines = [random_line(rng, bad_rate=0.0)[0] for _ in range(300)]
    plain = write(tmp_path / "d.tsv", lines)
    packed = write(tmp_path / "d.tsv.gz", lines)
    # two gzip members back to back (as `cat a.gz b.gz` makes) read as one stream
    multi = tmp_path / "m.gz"
    multi.write_bytes(
        gzip.compress(("\n".join(lines[:100]) + "\n").encode())
        + gzip.compress(("\n".join(lines[100:]) + "\n").encode())
    )
    for r, rule in enumerate(({"max_ind_range": 1000}, {"dictionary": True})):
        traces = [
            ingest(src, tmp_path / f"t{r}-{i}", batch_size=64, **rule)
            for i, src in enumerate((plain, packed, multi))
        ]
        assert digests(traces[0].path) == digests(traces[1].path) == digests(traces[2].path)


def test_crlf_and_missing_final_newline(tmp_path: Path) -> None:
    lf = ingest(write(tmp_path / "lf.tsv", GOLDEN), tmp_path / "lf", max_ind_range=7)
    crlf = ingest(
        write(tmp_path / "crlf.tsv", GOLDEN, end="\r\n", final_newline=False),
        tmp_path / "crlf",
        max_ind_range=7,
    )
    assert digests(lf.path) == digests(crlf.path)


def test_partial_last_batch_and_layout(tmp_path: Path) -> None:
    rng = random.Random(5)
    lines = [random_line(rng, bad_rate=0.0)[0] for _ in range(1003)]
    result = ingest(
        write(tmp_path / "d.tsv", lines),
        tmp_path / "t",
        batch_size=10,
        max_ind_range=50,
        block_bytes=4096,
    )
    assert (result.samples, result.batches) == (1003, 101)
    trace = replay.open_trace(result.path)
    look = trace.lookups()
    assert np.bincount(look.batch).tolist() == [260] * 100 + [78]
    layout = trace.manifest["layout"]
    # layout as write_trace_from_arrays plans it: whole batches per row group and file
    assert layout["batches_per_row_group"] == round((1 << 20) / 260)
    for entry in trace.manifest["files"]["lookups"]:
        assert entry["batch_stop"] - entry["batch_start"] <= layout["batches_per_file"]


# -- errors ---------------------------------------------------------------------------------

BAD_LINES = {
    "field count": line() + "\textra",
    "label": line(label="2"),
    "integer": line(ints=["1.5"] + ["1"] * 12),
    "sign only": line(ints=["1"] * 12 + ["-"]),
    "hex": line(cats=cats_with("00000001", "xyz")),
    "nine digits": line(cats=cats_with("123456789", "1")),
    "blank": "",
}


@pytest.mark.parametrize("kind", sorted(BAD_LINES))
def test_malformed_line_fails_cleanly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    src = write(tmp_path / "bad.tsv", [GOLDEN[0], GOLDEN[1], BAD_LINES[kind], GOLDEN[2]])
    out = tmp_path / "trace"
    code, stdout, stderr = cli(capsys, "ingest", src, "--out", out, "--dictionary")
    assert code == 2
    assert stdout == ""
    assert stderr.count("\n") == 1 and "bad.tsv:3: malformed line" in stderr
    assert_no_output(out)


def test_malformed_line_in_second_file_names_it(tmp_path: Path) -> None:
    a = write(tmp_path / "a.tsv", GOLDEN)
    b = write(tmp_path / "b.tsv.gz", [*GOLDEN, line(label="x")])
    with pytest.raises(InputError, match=r"b\.tsv\.gz:6: malformed line: the label must be"):
        ingest([a, b], tmp_path / "t", max_ind_range=5)
    assert_no_output(tmp_path / "t")


def test_skip_bad_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = [GOLDEN[0], BAD_LINES["label"], GOLDEN[1], "", GOLDEN[2], BAD_LINES["hex"]]
    src = write(tmp_path / "bad.tsv", lines)
    out = tmp_path / "trace"
    code, stdout, _ = cli(
        capsys, "ingest", src, "--out", out, "--max-ind-range", "10", "--skip-bad-lines"
    )
    assert code == 0
    assert "3 samples" in stdout and "3 bad lines skipped (first at" in stdout
    assert "bad.tsv:2" in stdout
    m = manifest(out)
    assert m["source"]["bad_lines_skipped"] == 3 and m["source"]["samples"] == 3
    good = ingest(write(tmp_path / "good.tsv", GOLDEN[:3]), tmp_path / "g", max_ind_range=10)
    assert digests(good.path) == digests(out)


def test_over_long_line(tmp_path: Path) -> None:
    long_line = line(ints=["1" * (MAX_LINE_BYTES + 5)] + ["1"] * 12)
    src = write(tmp_path / "long.tsv", [GOLDEN[0], long_line, GOLDEN[1]])
    for block in (1 << 22, 1 << 17):  # parsed in one block / discarded across blocks
        with pytest.raises(InputError, match=r"long\.tsv:2: malformed line: line longer"):
            ingest(src, tmp_path / "t", max_ind_range=3, block_bytes=block)
        result = ingest(
            src, tmp_path / f"s{block}", max_ind_range=3, block_bytes=block, skip_bad_lines=True
        )
        assert (result.samples, result.bad_lines) == (2, 1)


def test_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = write(tmp_path / "a.tsv", GOLDEN)
    out = tmp_path / "trace"
    code, _, stderr = cli(
        capsys, "ingest", src, tmp_path / "nope.tsv", "--out", out, "--dictionary"
    )
    assert code == 2
    assert stderr.strip() == f"replay: error: {tmp_path / 'nope.tsv'}: no such file"
    assert_no_output(out)


def _unblock_readers(fifo: Path, done: threading.Event) -> None:
    """From 10 s on, open `fifo` for writing and close it whenever a reader waits (it
    reads end of file): a test that regresses fails instead of hanging."""
    wait = 10.0
    while not done.wait(wait):
        wait = 0.2
        with contextlib.suppress(OSError):  # no reader waiting
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A FIFO can block the open or the read forever (issue 39): refused unopened."""
    src = write(tmp_path / "a.tsv", GOLDEN)
    fifo = tmp_path / "pipe.tsv"
    os.mkfifo(fifo)
    done = threading.Event()
    guard = threading.Thread(target=_unblock_readers, args=(fifo, done), daemon=True)
    guard.start()
    out = tmp_path / "trace"
    try:
        code, _, stderr = cli(capsys, "ingest", src, fifo, "--out", out, "--dictionary")
    finally:
        done.set()
        guard.join()
    assert code == 2
    assert stderr == f"replay: error: {fifo}: is a FIFO (named pipe), not a regular file\n"
    assert_no_output(out)


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero here")
def test_a_device_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """/dev/zero never ends: it was read (6.2 GiB in 10 s) until the kernel killed it."""
    out = tmp_path / "trace"
    code, _, stderr = cli(capsys, "ingest", "/dev/zero", "--out", out, "--max-ind-range", "9")
    assert code == 2
    assert stderr == "replay: error: /dev/zero: is a character device, not a regular file\n"
    assert_no_output(out)


def test_a_link_to_a_file_is_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    link = tmp_path / "link.tsv"
    link.symlink_to(write(tmp_path / "a.tsv", GOLDEN))
    broken = tmp_path / "broken.tsv"
    broken.symlink_to(tmp_path / "gone.tsv")
    out = tmp_path / "trace"
    code, _, stderr = cli(capsys, "ingest", link, broken, "--out", out, "--dictionary")
    assert code == 2 and stderr == f"replay: error: {broken}: no such file\n"
    assert cli(capsys, "ingest", link, "--out", out, "--dictionary")[0] == 0


def test_a_nul_in_a_name_is_one_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="embedded null byte"):
        ingest(tmp_path / "a\0b.tsv", tmp_path / "trace", dictionary=True)


@pytest.mark.parametrize(
    "args",
    [
        [],  # neither rule
        ["--dictionary", "--max-ind-range", "5"],  # both
        ["--max-ind-range", "0"],
        ["--max-ind-range", str(2**32 - 1)],
        ["--dictionary", "--batch-size", "0"],
    ],
)
def test_bad_options(tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str]) -> None:
    src = write(tmp_path / "a.tsv", GOLDEN)
    out = tmp_path / "trace"
    code, _, stderr = cli(capsys, "ingest", src, "--out", out, *args)
    assert code == 2 and stderr.count("\n") == 1
    assert_no_output(out)


def test_option_limits() -> None:
    with pytest.raises(ConfigError):
        ingest_reference_rows([], max_ind_range=MAX_IND_RANGE + 1)
    ingest_reference_rows([], max_ind_range=MAX_IND_RANGE)


def test_existing_output_needs_force(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = write(tmp_path / "a.tsv", GOLDEN)
    out = tmp_path / "trace"
    assert cli(capsys, "ingest", src, "--out", out, "--max-ind-range", "3")[0] == 0
    code, _, stderr = cli(capsys, "ingest", src, "--out", out, "--max-ind-range", "4")
    assert code == 2 and "--force" in stderr
    assert manifest(out)["source"]["max_ind_range"] == 3
    assert cli(capsys, "ingest", src, "--out", out, "--max-ind-range", "4", "--force")[0] == 0
    assert manifest(out)["source"]["max_ind_range"] == 4
    with pytest.raises(OutputError):
        ingest(src, out, max_ind_range=4)


def test_no_samples(tmp_path: Path) -> None:
    src = write(tmp_path / "a.tsv", ["", "x"])
    with pytest.raises(InputError, match="no samples"):
        ingest(src, tmp_path / "t", dictionary=True, skip_bad_lines=True)
    assert_no_output(tmp_path / "t")


# -- the kernels against the slow reference ------------------------------------------------


def random_field(rng: random.Random, kind: str, bad_rate: float) -> str:
    if rng.random() < bad_rate:
        return rng.choice(
            {
                "label": ["", "2", "01", "a", " 0", "-1"],
                "int": ["1.5", "+", "-", "1-", " 1", "x", "--2", "1e3"],
                "cat": ["123456789", "g", "0x1", " a", "-1", "fffffffff", "a\rb"],
            }[kind]
        )
    if kind == "label":
        return rng.choice("01")
    if rng.random() < 0.2:
        return ""
    if kind == "int":
        return rng.choice(["", "+", "-"]) + str(rng.randrange(10 ** rng.randrange(1, 12)))
    digits = "".join(rng.choice("0123456789abcdefABCDEF") for _ in range(rng.randint(1, 8)))
    return digits if rng.random() < 0.5 else rng.choice(["0", "1", "2", "3", "7f", "FFFFFFFF"])


def random_line(rng: random.Random, bad_rate: float) -> tuple[str, str]:
    """(line, terminator) of a random, mostly valid Criteo line."""
    if rng.random() < bad_rate / 4:
        text = rng.choice(["", "\r", "0", "1\t2", line() + "\t", "\t".join(["0"] * 39)])
    else:
        fields = [random_field(rng, "label", bad_rate)]
        fields += [random_field(rng, "int", bad_rate / 13) for _ in range(13)]
        fields += [random_field(rng, "cat", bad_rate / 26) for _ in range(26)]
        text = "\t".join(fields)
    return text, rng.choice(["\n", "\n", "\r\n"])


def random_data(seed: int, n: int, bad_rate: float) -> bytes:
    rng = random.Random(seed)
    parts = [a + b for a, b in (random_line(rng, bad_rate) for _ in range(n))]
    if parts and rng.random() < 0.3:
        parts[-1] = parts[-1].rstrip("\n")  # no final newline (maybe a lone final CR)
    return "".join(parts).encode()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(0, 60),
    bad_rate=st.sampled_from([0.0, 0.3]),
    cap=st.sampled_from([1, 7, 1000]),
)
def test_parse_kernel_matches_reference(seed: int, n: int, bad_rate: float, cap: int) -> None:
    data = random_data(seed, n, bad_rate)
    buf = np.frombuffer(data, dtype=np.uint8)
    ref_lines = split_lines_reference(data)
    parsed = [parse_line_reference(x) for x in ref_lines]
    want_good = [cats for code, _, cats in parsed if code == OK]
    want_bad = sum(code != OK for code, _, _ in parsed)
    # skip mode, in calls of `cap` lines at most
    hashes = np.zeros((cap, NUM_CAT), dtype=np.uint32)
    missing = np.zeros((cap, NUM_CAT), dtype=np.bool_)
    status = np.zeros(9, dtype=np.int64)
    got_good: list[list[int | None]] = []
    got_bad = got_lines = pos = 0
    while pos < len(buf):
        _parse_block(buf, pos, len(buf), True, True, hashes, missing, status)
        good = int(status[2])
        got_good += [
            [None if missing[i, t] else int(hashes[i, t]) for t in range(NUM_CAT)]
            for i in range(good)
        ]
        got_bad += int(status[3])
        got_lines += int(status[1])
        assert status[0] > pos
        pos = int(status[0])
    assert got_good == want_good
    assert got_bad == want_bad and got_lines == len(ref_lines)
    # strict mode: stops at the first bad line with the reference's reason
    hashes = np.zeros((len(ref_lines) + 1, NUM_CAT), dtype=np.uint32)
    missing = np.zeros_like(hashes, dtype=np.bool_)
    _parse_block(buf, 0, len(buf), True, False, hashes, missing, status)
    first = next((i for i, (code, _, _) in enumerate(parsed) if code != OK), -1)
    assert int(status[4]) == first
    if first >= 0:
        code, field, _ = parsed[first]
        assert (int(status[5]), int(status[6])) == (code, field)
        assert int(status[2]) == first


def test_parse_kernel_incomplete_line_waits() -> None:
    data = (GOLDEN[0] + "\n" + GOLDEN[1]).encode()
    buf = np.frombuffer(data, dtype=np.uint8)
    hashes = np.zeros((4, NUM_CAT), dtype=np.uint32)
    missing = np.zeros((4, NUM_CAT), dtype=np.bool_)
    status = np.zeros(9, dtype=np.int64)
    _parse_block(buf, 0, len(buf), False, False, hashes, missing, status)
    assert (int(status[0]), int(status[1])) == (len(GOLDEN[0]) + 1, 1)
    _parse_block(buf, 0, len(buf), True, False, hashes, missing, status)
    assert (int(status[0]), int(status[1])) == (len(buf), 2)


def test_reference_reasons() -> None:
    assert parse_line_reference(BAD_LINES["field count"].encode())[:2] == (BAD_FIELD_COUNT, 41)
    assert parse_line_reference(BAD_LINES["label"].encode())[:2] == (BAD_LABEL, 0)
    assert parse_line_reference(BAD_LINES["integer"].encode())[:2] == (BAD_INT, 1)
    assert parse_line_reference(BAD_LINES["hex"].encode())[:2] == (BAD_CAT, 15)
    assert parse_line_reference(b"")[:2] == (BLANK_LINE, 0)
    assert split_lines_reference(b"a\r\nb\r") == [b"a", b"b"]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1),
    dictionary=st.booleans(),
    block=st.sampled_from([200, 3000, 1 << 20]),
    batch_size=st.sampled_from([1, 3, 16]),
)
def test_ingest_matches_reference(
    tmp_path_factory: pytest.TempPathFactory,
    seed: int,
    dictionary: bool,
    block: int,
    batch_size: int,
) -> None:
    tmp = tmp_path_factory.mktemp("ref")
    datas = [random_data(seed + i, 40, 0.2) for i in range(2)]
    files = []
    for i, data in enumerate(datas):
        files.append(tmp / f"part{i}.tsv")
        files[-1].write_bytes(data)
    rule = {"dictionary": True} if dictionary else {"max_ind_range": 97}
    lines = [x for data in datas for x in split_lines_reference(data)]
    rows, bad = ingest_reference_rows(lines, skip_bad_lines=True, **rule)
    if len(rows) == 0:
        return
    result = ingest(
        files, tmp / "t", batch_size=batch_size, skip_bad_lines=True, block_bytes=block, **rule
    )
    assert (result.samples, result.bad_lines) == (len(rows), bad)
    look = replay.open_trace(result.path).lookups()
    for got, want in zip(
        (look.batch, look.table, look.row), reference_lookups(rows, batch_size), strict=True
    ):
        np.testing.assert_array_equal(got, want)
    if len(rows) % batch_size == 0:  # the same bytes as the in-memory writer
        table_rows = np.array(result.table_rows)
        same = write_trace_from_arrays(
            tmp / "arrays",
            tables=[(f"C{i + 1}", int(r)) for i, r in enumerate(table_rows)],
            batch=look.batch,
            table=look.table,
            row=look.row,
            batch_size=batch_size,
        )
        assert digests(same) == digests(result.path)


def test_dictionary_grows(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    values = rng.integers(0, 2**32, size=(3000, 26), dtype=np.uint64)
    values[::7] = values[::7] % 5  # some repeats
    lines = [line(cats=[f"{v:08x}" for v in row]) for row in values]
    src = write(tmp_path / "d.tsv", lines)
    result = ingest(src, tmp_path / "t", batch_size=256, dictionary=True)
    rows, _ = ingest_reference_rows([x.encode() for x in lines], dictionary=True)
    assert list(result.table_rows) == [int(c) + 1 for c in rows.max(axis=0)]
    look = replay.open_trace(result.path).lookups()
    np.testing.assert_array_equal(look.row, reference_lookups(rows, 256)[2])


# -- the files are plain Parquet -------------------------------------------------------------


def test_readers(tmp_path: Path) -> None:
    rng = random.Random(9)
    lines = [random_line(rng, bad_rate=0.0)[0] for _ in range(200)]
    result = ingest(
        write(tmp_path / "d.tsv", lines), tmp_path / "t", batch_size=32, max_ind_range=100
    )
    for kind, count in (("lookups", result.lookups), ("updates", manifest(result.path)["updates"])):
        pattern = str(result.path / kind / "*.parquet")
        frame = pl.scan_parquet(pattern).collect()
        assert frame.height == count
        assert frame.columns[:3] == ["batch", "table", "row"]
        assert ds.dataset(str(result.path / kind), format="parquet").count_rows() == count
        con = duckdb.connect()
        assert con.execute(f"select count(*) from read_parquet('{pattern}')").fetchone()[0] == count
    frame = pl.scan_parquet(str(result.path / "lookups" / "*.parquet")).collect()
    assert frame["row"].max() <= 100 and frame["batch"].max() == 6


# -- several row groups and part files; errors after parts were written ----------------------


def many_lines(n: int) -> list[str]:
    """Lines whose C1 is the line index (distinct), C2 the index mod 3; no per-line RNG."""
    rest = "\t".join(["0", *["7"] * 13]) + "\t"
    tail = "\t" + "\t".join(["00000005"] * 24)
    return [f"{rest}{i:08x}\t{i % 3:x}{tail}" for i in range(n)]


def test_many_groups_and_files(tmp_path: Path) -> None:
    n = 170_000  # batch size 1: 40,330 batches per row group, 4 row groups per file
    src = write(tmp_path / "big.tsv", many_lines(n))
    result = ingest(src, tmp_path / "t", batch_size=1, dictionary=True, block_bytes=1 << 20)
    m = manifest(result.path)
    assert [(e["batch_start"], e["batch_stop"]) for e in m["files"]["lookups"]] == [
        (0, 161_320),
        (161_320, n),
    ]
    assert result.table_rows[:3] == (n + 1, 4, 2)
    rows = np.full((n, NUM_CAT), 1, dtype=np.uint32)
    rows[:, 0] = np.arange(1, n + 1)
    rows[:, 1] = np.arange(n) % 3 + 1
    batch = np.repeat(np.arange(n, dtype=np.uint32), NUM_CAT)
    table = np.tile(np.arange(NUM_CAT, dtype=np.uint16), n)
    same = write_trace_from_arrays(
        tmp_path / "arrays",
        tables=[(f"C{i + 1}", r) for i, r in enumerate(result.table_rows)],
        batch=batch,
        table=table,
        row=rows.reshape(-1),
        batch_size=1,
    )
    assert digests(same) == digests(result.path)


def test_error_after_parts_leaves_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    n = 170_000
    src = write(tmp_path / "big.tsv", [*many_lines(n), "1\tnot a line"])
    out = tmp_path / "trace"
    code, _, stderr = cli(
        capsys, "ingest", src, "--out", out, "--batch-size", "1", "--max-ind-range", "1000"
    )
    assert code == 2 and f"big.tsv:{n + 1}: malformed line: expected 40" in stderr
    assert_no_output(out)


def test_corrupt_gzip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = gzip.compress(("\n".join(GOLDEN * 50) + "\n").encode())
    truncated = tmp_path / "cut.tsv.gz"
    truncated.write_bytes(data[: len(data) // 2])
    not_gzip = tmp_path / "plain.gz"
    not_gzip.write_bytes(b"hello\n")
    for src in (truncated, not_gzip):
        out = tmp_path / "trace"
        code, _, stderr = cli(capsys, "ingest", src, "--out", out, "--dictionary")
        assert code == 2 and f"{src}: cannot read" in stderr and stderr.count("\n") == 1
        assert_no_output(out)


def test_python_api_after_module_import(tmp_path: Path) -> None:
    import replay.trace.criteo

    src = write(tmp_path / "a.tsv", GOLDEN)
    result = replay.ingest(src, tmp_path / "t", max_ind_range=3, progress=True)
    assert result.samples == 5 and result.path == tmp_path / "t"
