"""The LRU replayed in segments of batches on several threads (`replay.engine.lru_segments`):
every counter of every batch as one pass has it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from replay.cli import main
from replay.engine.lru_segments import segment_count, segment_starts
from replay.engine.replay import replay_trace
from replay.engine.systems import resolve_system
from replay.trace.reader import open_trace


@pytest.fixture(scope="module")
def trace_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("segments") / "kaggle"
    code = main(
        ["generate", "--preset", "criteo-kaggle", "--batches", "57", "--batch-size", "64",
         "--seed", "3", "--out", str(out)]
    )  # fmt: skip
    assert code == 0
    return out


@pytest.mark.parametrize("capacity", [40, 700, 3000, 10**6])
@pytest.mark.parametrize("segments", [2, 3, 7])
def test_segments_count_as_one_pass(trace_dir: Path, capacity: int, segments: int) -> None:
    system = resolve_system("hbm-lru", [f"policy.capacity_rows={capacity}"])
    one = replay_trace(open_trace(trace_dir), system, segments=1)
    split = replay_trace(open_trace(trace_dir), system, segments=segments)
    assert one.summary == split.summary
    assert one.columns.keys() == split.columns.keys()
    for name, column in one.columns.items():
        np.testing.assert_array_equal(column, split.columns[name], err_msg=name)


def test_segment_count_and_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REPLAY_LRU_SEGMENTS", raising=False)
    assert segment_count(10**8, 2000, 10**6, cores=2) == 2
    assert segment_count(10**8, 2000, 10**6, cores=64) == 6  # 16 caches' worth each
    assert segment_count(10**5, 2, 10**6, cores=8) == 1  # too short to pay
    monkeypatch.setenv("REPLAY_LRU_SEGMENTS", "1")
    assert segment_count(10**8, 2000, 10**6, cores=8) == 1
    assert segment_starts(10, 3) == [3, 7]
