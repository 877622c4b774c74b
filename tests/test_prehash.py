"""The checksums hashed while a command imports (`replay._prehash`): the reader gets the
digest of exactly the file it would hash, or hashes it itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from replay import _prehash
from replay.errors import TraceError
from replay.trace.reader import open_trace
from replay.trace.writer import sha256_file, write_trace_from_arrays


@pytest.fixture(autouse=True)
def fresh_registry() -> Iterator[None]:
    _prehash._files.clear()
    yield
    _prehash._files.clear()


def _trace(path: Path) -> Path:
    batch = np.repeat(np.arange(40), 8)
    table = np.tile(np.repeat([0, 1], 4), 40)
    row = np.random.default_rng(1).integers(0, 9, len(batch))
    return write_trace_from_arrays(
        path, tables=[("a", 9), ("b", 9)], batch=batch, table=table, row=row, batch_size=4,
        workload={"embedding_dim": 8},
    )  # fmt: skip


def _files(trace: Path) -> list[Path]:
    manifest = json.loads((trace / "manifest.json").read_text())
    return [trace / e["path"] for kind in ("lookups", "updates") for e in manifest["files"][kind]]


def test_the_reader_gets_each_files_own_digest(tmp_path: Path) -> None:
    trace = _trace(tmp_path / "t")
    thread = _prehash.start(["run", "--system", "hbm-lru", str(trace), "--out", "x"])
    assert thread is not None
    thread.join()
    files = _files(trace)
    assert len(files) >= 2
    for f in files:
        assert _prehash.claim_or_wait(f) == sha256_file(f)
    open_trace(trace).verify()  # and the verification passes on them


def test_a_file_changed_since_is_hashed_again(tmp_path: Path) -> None:
    trace = _trace(tmp_path / "t")
    thread = _prehash.start(["inspect", str(trace)])
    assert thread is not None
    thread.join()
    victim = _files(trace)[0]
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    os.utime(victim, ns=(1, 1))
    assert _prehash.claim_or_wait(victim) is None
    with pytest.raises(TraceError, match="checksum does not match"):
        open_trace(trace).verify()


def test_a_damaged_file_is_reported_with_or_without_the_early_hashing(tmp_path: Path) -> None:
    trace = _trace(tmp_path / "t")
    victim = _files(trace)[-1]
    data = bytearray(victim.read_bytes())
    data[10] ^= 0xFF
    victim.write_bytes(bytes(data))
    thread = _prehash.start(["run", str(trace)])
    assert thread is not None
    thread.join()
    with pytest.raises(TraceError, match="checksum does not match"):
        open_trace(trace).verify()


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["generate", "TRACE"],
        ["run", "TRACE", "--no-verify"],
        ["run", "--workload", "criteo-kaggle"],
        ["run", "NOT_A_TRACE"],
    ],
)
def test_nothing_is_hashed_without_a_verified_trace(tmp_path: Path, argv: list[str]) -> None:
    trace = _trace(tmp_path / "t")
    (tmp_path / "other").mkdir()
    argv = [
        str(trace) if a == "TRACE" else str(tmp_path / "other") if a == "NOT_A_TRACE" else a
        for a in argv
    ]
    assert _prehash.start(argv) is None
    assert not _prehash._files
    for f in _files(trace):  # the reader hashes them itself
        assert _prehash.claim_or_wait(f) is None


def test_only_listed_files_inside_the_folder_are_hashed(tmp_path: Path) -> None:
    trace = _trace(tmp_path / "t")
    outside = tmp_path / "secret.bin"
    outside.write_bytes(b"x" * 100)
    manifest = json.loads((trace / "manifest.json").read_text())
    manifest["files"]["lookups"][0]["path"] = "../secret.bin"
    (trace / "manifest.json").write_text(json.dumps(manifest))
    (trace / "lookups" / "link.parquet").symlink_to(outside)
    manifest["files"]["lookups"].append(
        {**manifest["files"]["lookups"][-1], "path": "lookups/link.parquet"}
    )
    (trace / "manifest.json").write_text(json.dumps(manifest))
    thread = _prehash.start(["run", str(trace)])
    assert thread is not None
    thread.join()
    assert str(outside.resolve()) not in _prehash._files
    assert all(p.startswith(str(trace.resolve()) + os.sep) for p in _prehash._files)


def test_a_whole_run_uses_it_and_still_refuses_a_damaged_trace(tmp_path: Path) -> None:
    """Through the console script, as a user runs it: the checksums match, and a damaged
    file is still a one-line error with exit code 2."""
    trace = _trace(tmp_path / "t")
    cmd = [sys.executable, "-m", "replay", "run", str(trace), "--system", "hbm-lru"]
    ok = subprocess.run([*cmd, "--out", str(tmp_path / "r1")], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    victim = _files(trace)[1]
    data = bytearray(victim.read_bytes())
    data[20] ^= 0xFF
    victim.write_bytes(bytes(data))
    bad = subprocess.run([*cmd, "--out", str(tmp_path / "r2")], capture_output=True, text=True)
    assert bad.returncode == 2
    assert "checksum does not match" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "r2").exists()
