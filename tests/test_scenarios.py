"""Scenario presets: the TrainingCXL ladder, FastPersist; the read-after-write count."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import replay
from replay.engine.raw import RawState, count_raw, reference_raw
from replay.engine.replay import replay_trace
from replay.engine.systems import resolve_system
from replay.trace.reader import open_trace

LADDER = ("ssd", "pmem-host", "pcie-ndp", "cxl-d", "cxl-b", "cxl")


@pytest.fixture(scope="module")
def kaggle_small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return replay.generate(
        "criteo-kaggle", tmp_path_factory.mktemp("scen") / "k", batches=12, batch_size=256
    )


def test_trainingcxl_ladder_is_monotone(kaggle_small: Path) -> None:
    trace = open_trace(kaggle_small)
    times = [replay_trace(trace, resolve_system(s)).summary["time_s"] for s in LADDER]
    assert all(b <= a for a, b in itertools.pairwise(times)), dict(zip(LADDER, times, strict=True))


def test_read_after_write_stall_is_counted_and_relaxed_removes_it(kaggle_small: Path) -> None:
    trace = open_trace(kaggle_small)
    cxl_b = replay_trace(trace, resolve_system("cxl-b"))
    relaxed = replay_trace(trace, resolve_system("cxl-b", ["lookup.relaxed=true"]))
    raw = cxl_b.columns["raw_lookups"]
    assert raw[0] == 0 and raw[1:].sum() > 0
    pmem = cxl_b.system.tier("pmem")
    expected = raw * pmem.write_to_read_ns * 1e-9 / pmem.parallelism
    assert np.allclose(cxl_b.columns["time_raw_stall_s"], expected)
    assert relaxed.columns["raw_lookups"].sum() == 0
    assert relaxed.summary["time_s"] < cxl_b.summary["time_s"]


def test_fastpersist_presets_beat_torch_save(kaggle_small: Path) -> None:
    trace = open_trace(kaggle_small)
    stall = {
        s: replay_trace(trace, resolve_system(s)).summary["checkpoint"]["stall_s"]
        for s in ("torch-save", "fastpersist-1", "fastpersist", "fastpersist-8")
    }
    assert (
        stall["torch-save"] > stall["fastpersist-1"] > stall["fastpersist"] > stall["fastpersist-8"]
    )


@settings(
    max_examples=80, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(data=st.data())
def test_raw_kernel_matches_reference(data: st.DataObject) -> None:
    space = data.draw(st.integers(1, 150))
    n = data.draw(st.integers(1, 25))
    batch = st.lists(st.integers(0, space - 1), max_size=10)
    lookups = [data.draw(batch) for _ in range(n)]
    updates = [sorted(set(data.draw(batch))) for _ in range(n)]
    expected = reference_raw(lookups, updates)
    cut = sorted(data.draw(st.sets(st.integers(1, max(1, n - 1)), max_size=3)))
    edges = [0, *[c for c in cut if c < n], n]
    state = RawState(space, np.dtype(np.int64))
    got: list[int] = []
    for lo, hi in itertools.pairwise(edges):
        keys = np.array([k for b in lookups[lo:hi] for k in b], dtype=np.int64)
        bounds = np.concatenate([[0], np.cumsum([len(b) for b in lookups[lo:hi]])]).astype(np.int64)
        ukeys = np.array([k for b in updates[lo:hi] for k in b], dtype=np.int64)
        ubounds = np.concatenate([[0], np.cumsum([len(b) for b in updates[lo:hi]])]).astype(
            np.int64
        )
        got += list(count_raw(keys, bounds, ukeys, ubounds, state))
    assert got == expected
