"""Verified-checksum records (`replay._verified`): a file unchanged since its checksum
matched the manifest is not hashed again; any change to it, or to the manifest, is still
caught."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import pytest

from replay import _prehash, _verified
from replay.errors import TraceError
from replay.trace import writer as writer_module
from replay.trace.reader import open_trace
from replay.trace.writer import sha256_file, write_trace_from_arrays


def _trace(path: Path) -> Path:
    batch = np.repeat(np.arange(6, dtype=np.uint32), 4)
    table = np.tile(np.array([0, 0, 1, 1], dtype=np.uint16), 6)
    row = np.arange(len(batch)) % 5
    out = write_trace_from_arrays(
        path, tables=[("a", 5), ("b", 7)], batch=batch, table=table, row=row, batch_size=2
    )
    return out


@pytest.fixture(autouse=True)
def _not_racy(monkeypatch) -> None:
    # the files were written a moment ago: their change times (which no call sets back)
    # are "racy" for 2 s; the tests take files as settled at once, but the racy one
    monkeypatch.setattr(_verified, "RACY_NS", -(10**9))


def _hashes(monkeypatch) -> list[Path]:
    """Record every file the verification hashes itself."""
    seen: list[Path] = []
    # the reader imports the writer's sha256_file where it hashes (not at its own import)
    real = writer_module.sha256_file

    def counting(path: Path) -> str:
        seen.append(Path(path))
        return real(path)

    monkeypatch.setattr(writer_module, "sha256_file", counting)
    return seen


def test_a_verified_unchanged_trace_is_not_hashed_again(tmp_path, monkeypatch) -> None:
    trace = _trace(tmp_path / "t")
    hashed = _hashes(monkeypatch)
    open_trace(trace).verify()
    files = sorted(p for p in trace.rglob("*.parquet"))
    assert sorted(hashed) == files  # the first time: every file
    hashed.clear()
    open_trace(trace).verify()
    assert hashed == []  # unchanged since: none


def test_a_rewritten_file_is_hashed_again_even_with_its_times_set_back(
    tmp_path, monkeypatch
) -> None:
    trace = _trace(tmp_path / "t")
    open_trace(trace).verify()
    victim = sorted(trace.rglob("*.parquet"))[0]
    st = victim.stat()
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, one byte flipped
    victim.write_bytes(bytes(data))
    os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns))  # mtime back; ctime moves on
    hashed = _hashes(monkeypatch)
    with pytest.raises(TraceError, match="checksum does not match"):
        open_trace(trace).verify()
    assert victim in hashed


def test_an_edited_manifest_is_still_caught(tmp_path) -> None:
    trace = _trace(tmp_path / "t")
    open_trace(trace).verify()
    manifest = json.loads((trace / "manifest.json").read_text())
    manifest["files"]["lookups"][0]["sha256"] = "0" * 64
    (trace / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(TraceError, match="checksum does not match"):
        open_trace(trace).verify()


def test_a_failed_verification_records_nothing(tmp_path) -> None:
    trace = _trace(tmp_path / "t")
    manifest = json.loads((trace / "manifest.json").read_text())
    manifest["files"]["lookups"][0]["sha256"] = "0" * 64
    (trace / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(TraceError):
        open_trace(trace).verify()
    assert _verified.Records(trace).entries == {}


def test_files_changed_within_2_s_of_hashing_are_not_recorded(tmp_path, monkeypatch) -> None:
    trace = _trace(tmp_path / "t")
    monkeypatch.setattr(_verified, "RACY_NS", 300_000_000)  # 0.3 s instead of 2 s
    time.sleep(0.4)
    young = sorted(trace.rglob("*.parquet"))[0]
    young.write_bytes(young.read_bytes())  # same bytes, times now
    open_trace(trace).verify()
    recorded = _verified.Records(trace).entries
    assert os.path.realpath(young) not in recorded
    assert len(recorded) == len(list(trace.rglob("*.parquet"))) - 1
    hashed = _hashes(monkeypatch)
    open_trace(trace).verify()
    assert hashed == [young]


def test_records_off_and_unwritable_records_are_no_error(tmp_path, monkeypatch) -> None:
    trace = _trace(tmp_path / "t")
    monkeypatch.setenv("REPLAY_CACHE_DIR", "")
    assert _verified.records_dir() is None
    open_trace(trace).verify()
    hashed = _hashes(monkeypatch)
    open_trace(trace).verify()
    assert len(hashed) == len(list(trace.rglob("*.parquet")))  # off: every file, every time
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("REPLAY_CACHE_DIR", str(blocker))  # a file, not a folder
    open_trace(trace).verify()


def test_damaged_records_are_ignored(tmp_path, monkeypatch) -> None:
    trace = _trace(tmp_path / "t")
    open_trace(trace).verify()
    record = _verified.Records(trace).path
    assert record is not None and record.exists()
    for text in ("{", '{"root": 1}', json.dumps({"root": os.path.realpath(trace), "files": 3})):
        record.write_text(text)
        hashed = _hashes(monkeypatch)
        open_trace(trace).verify()
        assert len(hashed) == len(list(trace.rglob("*.parquet")))


def test_the_console_takes_recorded_digests_while_it_imports(tmp_path, monkeypatch) -> None:
    trace = _trace(tmp_path / "t")
    open_trace(trace).verify()
    hashed: list[str] = []
    real = _prehash._sha256
    monkeypatch.setattr(_prehash, "_sha256", lambda p, b: hashed.append(p) or real(p, b))
    monkeypatch.setattr(_prehash, "_files", {})
    thread = _prehash.start(["run", str(trace)])
    assert thread is not None
    thread.join()
    assert hashed == []
    for file in sorted(trace.rglob("*.parquet")):
        assert _prehash.claim_or_wait(file) == sha256_file(file)


def test_records_of_folders_that_are_gone_are_pruned(tmp_path, monkeypatch) -> None:
    trace = _trace(tmp_path / "t")
    where = _verified.records_dir()
    assert where is not None
    where.mkdir(parents=True)
    monkeypatch.setattr(_verified, "PRUNE_ABOVE", 5)
    for i in range(8):  # records of scratch traces deleted since
        gone = {"root": str(tmp_path / f"gone{i}"), "files": {}}
        (where / f"{i:064x}.json").write_text(json.dumps(gone))
    kept = tmp_path / "kept"
    kept.mkdir()
    (where / f"{99:064x}.json").write_text(json.dumps({"root": str(kept), "files": {}}))
    open_trace(trace).verify()
    left = sorted(p.name for p in where.glob("*.json"))
    assert left == sorted([f"{99:064x}.json", _verified.Records(trace).path.name])
