"""Row groups' (batch, table) counts in the Parquet footer (`replay.trace.counts`): the
writer's matrices, their text, and a stream that reads them exactly as one that decodes
the `batch` and `table` columns."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.errors import TraceError
from replay.trace import counts as counts_module
from replay.trace import writer as writer_module
from replay.trace.counts import (
    COUNTS_KEY,
    decode_counts,
    encode_counts,
    group_counts,
    keys_from_counts,
    runs_of,
)
from replay.trace.keys import batch_bounds, flat_keys, table_offsets, table_runs
from replay.trace.reader import open_trace
from replay.trace.stream import iter_batch_ranges
from replay.trace.writer import sha256_file, write_trace_from_arrays


@st.composite
def sorted_lookups(draw: st.DrawFn, max_tables: int = 5) -> tuple:
    """(table rows, batch, table, row): sorted by (batch, table), with batches and
    tables that have no lookups, row ids inside their tables."""
    tables = draw(st.integers(1, max_tables))
    rows = np.array(draw(st.lists(st.integers(1, 50), min_size=tables, max_size=tables)))
    groups = draw(
        st.lists(
            st.tuples(st.integers(0, 30), st.integers(0, tables - 1), st.integers(1, 12)),
            min_size=1,
            max_size=40,
        )
    )
    sizes = {(b, t): n for b, t, n in reversed(groups)}  # the first draw of a pair wins
    groups = sorted(sizes)
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    batch = np.concatenate([np.full(sizes[g], g[0]) for g in groups]).astype(np.uint32)
    table = np.concatenate([np.full(sizes[g], g[1]) for g in groups]).astype(np.uint16)
    row = (rng.random(len(batch)) * rows[table]).astype(np.int64)
    return rows, batch, table, row


def reference_counts(batch: np.ndarray, table: np.ndarray) -> np.ndarray:
    first = int(batch[0])
    out = np.zeros((int(batch[-1]) - first + 1, int(table.max()) + 1), dtype=np.int64)
    np.add.at(out, (batch.astype(np.int64) - first, table.astype(np.int64)), 1)
    return out


@settings(max_examples=150, deadline=None)
@given(sorted_lookups())
def test_group_counts_match_a_reference(data) -> None:
    _, batch, table, _ = data
    first, counts = group_counts(batch, table)
    assert first == int(batch[0])
    assert np.array_equal(counts, reference_counts(batch, table))
    # any pair of rows out of (batch, table) order is refused, never counted
    if len(np.unique(batch.astype(np.int64) * 65536 + table)) > 1:
        swapped = np.argmax(np.diff(batch.astype(np.int64) * 65536 + table) > 0)
        b, t = batch.copy(), table.copy()
        b[[swapped, swapped + 1]] = b[[swapped + 1, swapped]]
        t[[swapped, swapped + 1]] = t[[swapped + 1, swapped]]
        assert group_counts(b, t) is None


@settings(max_examples=150, deadline=None)
@given(sorted_lookups(), st.booleans())
def test_keys_from_counts_match_the_decoded_path(data, bad) -> None:
    rows, batch, table, row = data
    offsets = table_offsets(rows)
    first, counts = group_counts(batch, table)
    row = row.astype(np.uint32)
    if bad:  # one id past its table's end
        at = len(row) // 2
        row[at] = rows[table[at]]
    keys = np.empty(len(row), dtype=np.uint32)
    bounds = np.empty(len(counts) + 1, dtype=np.int64)
    runs = runs_of(counts)
    found = keys_from_counts(row, counts, offsets, rows, keys, bounds, runs, first)
    want_bounds = batch_bounds(batch, first, first + len(counts))
    assert np.array_equal(bounds, want_bounds)
    want_runs = table_runs(table, want_bounds, first)
    assert np.array_equal(runs[:-1], want_runs[:-1])
    assert runs[-1, 0] == want_runs[-1, 0] == len(row)
    if bad:
        assert found == len(row) // 2
        with pytest.raises(TraceError):
            flat_keys(table, row, offsets)
    else:
        assert found == -1
        assert np.array_equal(keys, flat_keys(table, row, offsets))


@settings(max_examples=100, deadline=None)
@given(st.lists(sorted_lookups(), min_size=0, max_size=4))
def test_footer_text_round_trips(groups) -> None:
    made = [group_counts(b, t) for _, b, t, _ in groups]
    text = encode_counts(made)
    assert text.isascii()
    back = decode_counts(text)
    assert len(back) == len(made)
    for (f0, c0), (f1, c1) in zip(made, back, strict=True):
        assert f0 == f1
        assert np.array_equal(c1[:, : c0.shape[1]], c0)
        assert not c1[:, c0.shape[1] :].any()


@pytest.mark.parametrize(
    "text",
    ["", "2:abc", "1:not base64!", "1:" + "A" * 8, "1:eJwDAAAAAAE="],
)
def test_damaged_footer_text_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        decode_counts(text)


def test_truncated_or_negative_footer_values_are_refused() -> None:
    good = encode_counts([(3, np.array([[2, 0], [1, 1]], dtype=np.int64))])
    assert decode_counts(good)[0][0] == 3
    import base64
    import zlib

    raw = np.frombuffer(zlib.decompress(base64.b64decode(good[2:])), dtype="<i8").copy()
    for cut in (raw[:-1], raw[:3], np.concatenate([raw, [0]])):
        with pytest.raises(ValueError):
            decode_counts("1:" + base64.b64encode(zlib.compress(cut.tobytes())).decode())
    bad = raw.copy()
    bad[-1] = -1
    with pytest.raises(ValueError, match="negative"):
        decode_counts("1:" + base64.b64encode(zlib.compress(bad.tobytes())).decode())


def _write(path: Path, data, *, footer: bool, **kw) -> Path:
    rows, batch, table, row = data
    with pytest.MonkeyPatch.context() as m:
        if not footer:
            m.setattr(writer_module, "group_counts", lambda b, t: None)
        return write_trace_from_arrays(
            path,
            tables=[(f"t{i}", int(r)) for i, r in enumerate(rows)],
            batch=batch,
            table=table,
            row=row,
            batch_size=4,
            force=True,
            **kw,
        )


def _ranges(path: Path, start: int, stop: int | None, **kw) -> list[tuple]:
    out = []
    for br in iter_batch_ranges(open_trace(path), start, stop, read_ahead=0, **kw):
        runs = None if br.runs is None else (br.runs[:-1].tolist(), int(br.runs[-1, 0]))
        out.append(
            (
                br.batch_start,
                br.batch_stop,
                br.keys.astype(np.int64).tolist(),
                br.bounds.tolist(),
                br.update_keys.astype(np.int64).tolist(),
                br.update_bounds.tolist(),
                None if br.distinct is None else br.distinct.tolist(),
                runs,
            )
        )
    return out


@settings(max_examples=40, deadline=None)
@given(
    sorted_lookups(),
    st.integers(0, 40),
    st.integers(0, 40),
    st.sampled_from([1, 7, 1000]),
    st.integers(1, 3),
    st.booleans(),
)
def test_stream_reads_footer_counts_as_the_decoded_columns(
    tmp_path_factory, data, a, b, min_lookups, accumulate, frozen_first
) -> None:
    tmp = tmp_path_factory.mktemp("counted")
    kw = {"accumulate_batches": accumulate, "frozen": [frozen_first] + [False] * (len(data[0]) - 1)}
    counted = _write(tmp / "counted", data, footer=True, **kw)
    decoded = _write(tmp / "decoded", data, footer=False, **kw)
    meta = pq.ParquetFile(counted / "lookups" / "part-00000.parquet").metadata.metadata
    assert COUNTS_KEY.encode() in meta
    assert not pq.ParquetFile(decoded / "lookups" / "part-00000.parquet").metadata.metadata
    batches = int(data[1][-1]) + 1
    start, stop = min(a, b, batches), min(max(a, b), batches)
    for opts in (
        {"with_updates": True, "with_runs": True},
        {"with_updates": False, "with_distinct": True},
    ):
        for s0, s1 in ((0, None), (start, stop)):
            want = _ranges(decoded, s0, s1, min_lookups=min_lookups, **opts)
            got = _ranges(counted, s0, s1, min_lookups=min_lookups, **opts)
            assert got == want


def _rewrite_footer(path: Path, kind: str, text: str) -> None:
    """Replace one file's footer counts and fix its checksum in the manifest."""
    member = path / kind / "part-00000.parquet"
    table = pq.read_table(member)
    meta = pq.ParquetFile(member).metadata
    with pq.ParquetWriter(member, table.schema, compression="lz4") as w:
        at = 0
        for g in range(meta.num_row_groups):
            n = meta.row_group(g).num_rows
            w.write_table(table.slice(at, n), row_group_size=max(n, 1))
            at += n
        w.add_key_value_metadata({COUNTS_KEY: text})
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["files"][kind][0]["sha256"] = sha256_file(member)
    (path / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize("kind", ["lookups", "updates"])
@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda g: [(f, c * 2) for f, c in g], "do not match"),
        (lambda g: g[:-1], "row groups"),
        (lambda g: [(f + 1000, c) for f, c in g], "outside the file's range"),
        (lambda g: [(f, np.pad(c, ((0, 0), (0, 5)))) for f, c in g], "of 2 tables"),
    ],
)
def test_footer_counts_that_disagree_are_refused(tmp_path, kind, damage, message):
    rng = np.random.default_rng(3)
    batch = np.repeat(np.arange(30), 6)
    table = np.tile(np.repeat([0, 1], 3), 30)
    row = rng.integers(0, 5, len(batch))
    path = _write(tmp_path / "t", (np.array([5, 9]), batch, table, row), footer=True)
    member = path / kind / "part-00000.parquet"
    groups = decode_counts(pq.ParquetFile(member).metadata.metadata[COUNTS_KEY.encode()])
    assert len(groups) >= 1
    _rewrite_footer(path, kind, encode_counts(damage(groups)))
    trace = open_trace(path)
    with pytest.raises(TraceError, match=message):
        list(iter_batch_ranges(trace, read_ahead=0))


def test_unsorted_row_groups_get_no_footer(tmp_path) -> None:
    """A file with a row group out of (batch, table) order (not one `write_trace_from_arrays`
    accepts, so written through `write_parts`) keeps no footer counts: readers decode it."""
    import pyarrow as pa

    schema = pa.schema([("batch", pa.uint32()), ("table", pa.uint16()), ("row", pa.uint32())])
    good = pa.table({"batch": [0, 0, 1], "table": [0, 1, 0], "row": [1, 2, 3]}, schema)
    bad = pa.table({"batch": [2, 2], "table": [1, 0], "row": [1, 2]}, schema)
    (tmp_path / "lookups").mkdir()
    writer_module.write_parts(tmp_path, 0, {"lookups": schema}, [{"lookups": good}])
    writer_module.write_parts(
        tmp_path, 1, {"lookups": schema}, [{"lookups": good}, {"lookups": bad}]
    )
    first = pq.ParquetFile(tmp_path / "lookups" / "part-00000.parquet").metadata.metadata
    second = pq.ParquetFile(tmp_path / "lookups" / "part-00001.parquet").metadata.metadata
    assert decode_counts(first[COUNTS_KEY.encode()])[0][1].tolist() == [[1, 1], [1, 0]]
    assert not second or COUNTS_KEY.encode() not in second
    assert counts_module.encode_counts([]).startswith("1:")


_WARM_UP_CHECK = """
import sys
from replay.trace.counts import keys_from_counts
from replay.trace.reader import open_trace
from replay.trace.stream import distinct_kernel, iter_batch_ranges, warm_up_reader

trace = open_trace(sys.argv[1])
kernels = (keys_from_counts, distinct_kernel)
warm_up_reader(trace, with_distinct=True)
loaded = [set(k.signatures) for k in kernels]
for runs in (True, False):
    for _ in iter_batch_ranges(trace, with_runs=runs, with_distinct=not runs):
        pass
print([[len(s) for s in loaded], [len(set(k.signatures) - s) for k, s in zip(kernels, loaded)]])
"""


def test_reader_warm_up_loads_what_the_reader_calls(tmp_path) -> None:
    # in a fresh interpreter: the warm-up on a helper thread must load the very
    # versions (argument types) of the reader's kernels that the stream calls, or the
    # reader loads its own while the helper faults memory in (`warm_up_reader`)
    rng = np.random.default_rng(5)
    batch = np.repeat(np.arange(12, dtype=np.uint32), 6)
    table = np.tile(np.repeat(np.arange(2, dtype=np.uint16), 3), 12)
    row = rng.integers(0, 40, len(batch))
    path = _write(tmp_path / "t", (np.array([40, 50]), batch, table, row), footer=True)
    out = subprocess.run(
        [sys.executable, "-c", _WARM_UP_CHECK, str(path)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONWARNINGS": "error"},
    )
    loaded, added = json.loads(out.stdout)
    assert loaded == [1, 1] and added == [0, 0], out.stdout
