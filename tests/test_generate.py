"""Trace generation: format, update semantics, determinism, resume, bounded memory."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import polars as pl
import pyarrow.parquet as pq
import pytest

import replay
from replay.trace.updates import update_sets_reference
from replay.workload.generator import CompiledWorkload
from replay.workload.presets import get_preset
from replay.workload.spec import TableSpec, UpdateRule, WorkloadSpec


def _digests(path: Path) -> dict[str, str]:
    manifest = json.loads((path / "manifest.json").read_text())
    return {e["path"]: e["sha256"] for kind in manifest["files"].values() for e in kind}


def test_tiny_trace_layout_and_content(tmp_path: Path) -> None:
    spec = get_preset("tiny")
    path = replay.generate("tiny", tmp_path / "t", batches=30, seed=5, workers=2)
    trace = replay.open_trace(path)
    manifest = trace.manifest
    assert manifest["format_version"] == 1
    assert manifest["workload"]["seed"] == 5 and manifest["batches"] == 30
    assert trace.num_lookups == 30 * spec.lookups_per_batch == manifest["lookups"]
    trace.verify()
    look = trace.lookups()
    # sorted by (batch, table); multi-hot table has 3 lookups per sample
    key = look.batch.astype(np.int64) * 65536 + look.table
    assert np.all(np.diff(key) >= 0)
    per_table = np.bincount(look.table[look.batch == 0], minlength=4)
    assert per_table.tolist() == [64, 192, 64, 64]
    for t, table in enumerate(spec.tables):
        assert look.row[look.table == t].max() < table.rows
    # default update rule: the distinct rows of each batch, count = lookups of that row
    upd = trace.updates()
    ref = update_sets_reference(
        look.batch, look.table, look.row, 0, 30, trace.table_rows, np.zeros(4, bool)
    )
    columns = (upd.batch, upd.table, upd.row, upd.count)
    got = sorted(zip(*(c.tolist() for c in columns), strict=True))
    assert got == sorted(zip(*(a.tolist() for a in ref), strict=True))
    assert upd.count.sum() == trace.num_lookups


def test_batch_content_depends_only_on_seed_and_batch(tmp_path: Path) -> None:
    short = replay.open_trace(replay.generate("tiny", tmp_path / "a", batches=10, workers=1))
    long = replay.open_trace(replay.generate("tiny", tmp_path / "b", batches=40, workers=2))
    a, b = short.lookups(), long.lookups(0, 10)
    assert np.array_equal(a.row, b.row) and np.array_equal(a.table, b.table)
    other = replay.open_trace(replay.generate("tiny", tmp_path / "c", batches=10, seed=1))
    assert not np.array_equal(other.lookups().row, a.row)


def test_accumulation_and_frozen_tables(tmp_path: Path) -> None:
    spec = WorkloadSpec(
        name="acc",
        tables=(TableSpec(name="a", rows=50), TableSpec(name="b", rows=1000, frozen=True)),
        batch_size=8,
        batches=9,
        update=UpdateRule(accumulate_batches=3),
    )
    trace = replay.open_trace(replay.generate(spec, tmp_path / "acc"))
    upd = trace.updates()
    assert sorted(set(upd.batch.tolist())) == [2, 5, 8]  # a step every 3rd batch
    assert set(upd.table.tolist()) == {0}  # frozen table b is never updated
    look = trace.lookups()
    for step in (2, 5, 8):
        window = (look.batch >= step - 2) & (look.batch <= step) & (look.table == 0)
        rows, counts = np.unique(look.row[window], return_counts=True)
        mine = upd.batch == step
        assert np.array_equal(np.sort(upd.row[mine]), rows)
        assert upd.count[mine].sum() == counts.sum() == 24


def test_reuse_raises_consecutive_batch_overlap() -> None:
    base = WorkloadSpec(name="r", tables=(TableSpec(name="a", rows=10**6, alpha=0.8),),
                        batch_size=2000, batches=20)  # fmt: skip

    def overlap(spec: WorkloadSpec) -> float:
        c = CompiledWorkload.from_spec(spec)
        ratios = []
        for b in range(1, 20):
            prev = set(c.lookups(b - 1, b)[2].tolist())
            cur = set(c.lookups(b, b + 1)[2].tolist())
            ratios.append(len(cur & prev) / len(cur))
        return float(np.mean(ratios))

    plain = overlap(base)
    reused = overlap(base.with_overrides(reuse=0.5))
    assert plain < 0.1 and reused > 0.4


def test_drift_moves_the_hot_rows() -> None:
    spec = WorkloadSpec(name="d", tables=(TableSpec(name="a", rows=100_000, alpha=1.4),),
                        batch_size=4000, batches=1000)  # fmt: skip

    def hottest(s: WorkloadSpec, b: int) -> int:
        rows = CompiledWorkload.from_spec(s).lookups(b, b + 1)[2]
        return int(np.bincount(rows).argmax())

    assert hottest(spec, 0) == hottest(spec, 999)
    drifting = spec.with_overrides(drift=0.001)
    assert hottest(drifting, 0) != hottest(drifting, 999)


def test_kaggle_acceptance_size_readers_and_worker_determinism(tmp_path: Path) -> None:
    one = replay.generate("criteo-kaggle", tmp_path / "k1", batches=200, batch_size=2048, workers=1)
    two = replay.generate("criteo-kaggle", tmp_path / "k2", batches=200, batch_size=2048, workers=2)
    manifest = json.loads((one / "manifest.json").read_text())
    assert manifest["lookups"] == 10_649_600
    assert len(manifest["files"]["lookups"]) > 1
    assert _digests(one) == _digests(two)
    for kind in ("lookups", "updates"):
        assert (one / kind).is_dir()
        for a in sorted((one / kind).iterdir()):
            assert a.read_bytes() == (two / kind / a.name).read_bytes()
    # every promised reader opens every file with no options
    lookups_glob = str(one / "lookups" / "*.parquet")
    assert pl.scan_parquet(lookups_glob).select(pl.len()).collect().item() == 10_649_600
    n = duckdb.sql(f"SELECT count(*) FROM read_parquet('{lookups_glob}')").fetchall()[0][0]
    assert n == 10_649_600
    for part in sorted((one / "updates").iterdir()) + sorted((one / "lookups").iterdir()):
        assert pq.read_table(part).num_rows == pd.read_parquet(part).shape[0] > 0


def _kill_when_first_part_done(cmd: list[str], partial: Path) -> None:
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    try:
        while time.time() < deadline:
            if (partial / "lookups" / "part-00000.parquet").exists() or proc.poll() is not None:
                break
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()


def test_killed_generation_resumes_to_the_same_bytes(tmp_path: Path) -> None:
    args = ["--preset", "criteo-kaggle", "--batches", "240", "--batch-size", "2048",
            "--workers", "1"]  # fmt: skip
    out = tmp_path / "k"
    cmd = [sys.executable, "-m", "replay", "generate", *args, "--out", str(out)]
    _kill_when_first_part_done(cmd, tmp_path / ".k.partial")
    assert not out.exists(), "a killed run leaves no output under the target name"
    assert (tmp_path / ".k.partial").exists()
    # without --resume or --force the leftover is reported, not overwritten
    again = subprocess.run(cmd, capture_output=True, text=True)
    assert again.returncode == 2 and "--resume" in again.stderr
    resumed = subprocess.run([*cmd, "--resume"], capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    assert not (tmp_path / ".k.partial").exists()
    clean = replay.generate("criteo-kaggle", tmp_path / "clean", batches=240, batch_size=2048)
    assert _digests(out) == _digests(clean)
    assert (out / "manifest.json").read_bytes() == (clean / "manifest.json").read_bytes()


def test_resume_with_different_inputs_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "t"
    partial = tmp_path / ".t.partial"
    replay.generate("tiny", out, batches=5)
    out.rename(partial)  # pretend it was interrupted (a finished folder has no plan)
    (partial / ".plan.json").write_text(json.dumps({"workload": "something else"}))
    with pytest.raises(replay.ReplayError, match="same inputs"):
        replay.generate("tiny", out, batches=5, resume=True)


def test_peak_memory_is_bounded_by_the_batches_in_flight(tmp_path: Path) -> None:
    """numpy allocations (the bulk of the data path) do not grow with the trace length.

    One worker keeps the number of row groups in flight fixed (at most 2 sampled ahead
    of the one being written); with W workers it is W times that, still not a function
    of the number of batches.
    """
    spec = get_preset("criteo-kaggle").with_overrides(batch_size=1024)
    peaks = []
    for batches in (160, 640):
        tracemalloc.start()
        replay.generate(spec, tmp_path / f"m{batches}", batches=batches, workers=1)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    assert peaks[1] < 1.5 * peaks[0], peaks
    row_group_bytes = (1 << 20) * (4 + 2 + 4) * 2  # lookups + at most as many update rows
    assert peaks[1] < 6 * row_group_bytes, peaks
