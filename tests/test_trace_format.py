"""The trace folder: manifest checks, streaming reads by batch range, atomic writes."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.errors import OutputError, TraceError
from replay.trace import open_trace
from replay.trace.updates import update_sets, update_sets_reference
from replay.trace.writer import write_trace_from_arrays


def _small_trace(path: Path, batches: int = 12) -> Path:
    rng = np.random.default_rng(0)
    batch = np.repeat(np.arange(batches), 10)
    table = np.tile(np.repeat([0, 1], 5), batches)
    row = np.where(table == 0, rng.integers(0, 7, len(batch)), rng.integers(0, 1000, len(batch)))
    return write_trace_from_arrays(
        path, tables=[("a", 7), ("b", 1000)], batch=batch, table=table, row=row, batch_size=5
    )


def test_batch_ranges_stream_exactly(tmp_path: Path) -> None:
    trace = open_trace(_small_trace(tmp_path / "t"))
    everything = trace.lookups()
    for start, stop in [(0, 12), (3, 7), (11, 12), (5, 5)]:
        chunk = trace.lookups(start, stop)
        mask = (everything.batch >= start) & (everything.batch < stop)
        assert np.array_equal(chunk.row, everything.row[mask])
    chunks = list(trace.iter_lookups(min_lookups=25))
    assert all(len(c) >= 25 for c in chunks[:-1])
    assert np.array_equal(np.concatenate([c.row for c in chunks]), everything.row)
    # chunks never split a batch
    for a, b in itertools.pairwise(chunks):
        assert a.batch[-1] < b.batch[0]


def test_background_verification_gates_every_file(tmp_path: Path) -> None:
    """With the checksums hashed in the background, the trace still reads no file whose
    checksum has not matched: a damaged file fails as a checksum mismatch (never as a
    Parquet error from pyarrow), and the check names the first bad file in manifest
    order."""
    path = _small_trace(tmp_path / "t")
    clean = open_trace(path)
    check = clean.verify_in_background()
    assert np.array_equal(clean.lookups().row, open_trace(path).lookups().row)
    check()  # nothing to report
    manifest = json.loads((path / "manifest.json").read_text())
    bad = [path / e["path"] for kind in ("lookups", "updates") for e in manifest["files"][kind]]
    for part in bad[::-1]:  # all of them, last first
        part.write_bytes(np.random.default_rng(1).bytes(part.stat().st_size))
    trace = open_trace(path)
    check = trace.verify_in_background()
    with pytest.raises(TraceError, match="checksum does not match") as read:
        trace.lookups()
    assert "Parquet" not in str(read.value)
    with pytest.raises(TraceError, match="checksum does not match") as whole:
        check()
    assert str(bad[0]) in str(whole.value)


def _edit_manifest(path: Path, **changes) -> None:
    manifest = json.loads((path / "manifest.json").read_text())
    manifest.update(changes)
    (path / "manifest.json").write_text(json.dumps(manifest))


def test_future_version_is_refused(tmp_path: Path) -> None:
    path = _small_trace(tmp_path / "t")
    _edit_manifest(path, format_version=2)
    with pytest.raises(TraceError, match="version 2 is not supported"):
        open_trace(path)


def test_paths_cannot_leave_the_trace(tmp_path: Path) -> None:
    path = _small_trace(tmp_path / "t")
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["files"]["lookups"][0]["path"] = "../../etc/passwd"
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(TraceError, match="leaves the trace folder"):
        open_trace(path)


def test_not_json_missing_and_corrupt(tmp_path: Path) -> None:
    path = _small_trace(tmp_path / "t")
    with pytest.raises(TraceError, match="no such trace folder"):
        open_trace(tmp_path / "nothing")
    part = next((path / "lookups").glob("*.parquet"))
    part.write_bytes(part.read_bytes()[:-20] + b"x" * 20)
    with pytest.raises(TraceError, match="checksum"):
        open_trace(path).verify()
    with pytest.raises(TraceError, match="not a readable Parquet"):
        open_trace(path).lookups()
    (path / "manifest.json").write_text("{not json")
    with pytest.raises(TraceError, match="not valid JSON"):
        open_trace(path)


def test_existing_output_needs_force(tmp_path: Path) -> None:
    path = _small_trace(tmp_path / "t")
    with pytest.raises(OutputError, match="force=True"):
        _small_trace(path)
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    with pytest.raises(OutputError, match="holds other files"):
        write_trace_from_arrays(
            other, tables=[("a", 1)], batch=np.zeros(1), table=np.zeros(1), row=np.zeros(1),
            batch_size=1, force=True,
        )  # fmt: skip
    assert (other / "notes.txt").read_text() == "keep me"
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(OutputError):
        _small_trace(blocker / "t")


@given(
    data=st.lists(
        st.tuples(st.integers(0, 5), st.integers(0, 2), st.integers(0, 80)), max_size=300
    ),
    accumulate=st.integers(1, 3),
    frozen=st.lists(st.booleans(), min_size=3, max_size=3),
)
@settings(max_examples=80, deadline=None)
def test_update_sets_kernel_matches_reference(data, accumulate, frozen) -> None:
    data.sort(key=lambda x: (x[0], x[1]))
    arr = np.array(data, dtype=np.int64).reshape(-1, 3)
    batch, table, row = arr[:, 0].astype(np.uint32), arr[:, 1].astype(np.uint16), arr[:, 2]
    rows = np.array([81, 5, 1 << 20])  # dense, dense-small, sorted paths
    row = np.minimum(row, rows[table] - 1).astype(np.uint32)
    got = update_sets(batch, table, row, 0, 6, rows, np.array(frozen), accumulate)
    ref = update_sets_reference(batch, table, row, 0, 6, rows, np.array(frozen), accumulate)
    for g, r in zip(got, ref, strict=True):
        assert g.dtype == r.dtype and np.array_equal(g, r)
