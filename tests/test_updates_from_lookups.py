"""Update rows taken as each batch's distinct lookups (`BatchRange.updates_are_lookups`):
the LRU's counters are those of the update keys read from the trace, whatever the cache
size (a cache smaller than a batch gets the keys back), and only sources that declare it
get it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_group_counts import sorted_lookups
from test_policies import make_policy

import replay
from replay.engine.replay import replay_trace
from replay.engine.systems import resolve_system
from replay.policies.base import NUM_COUNTERS
from replay.policies.lru import LRUPolicy, reference_lru
from replay.trace.reader import open_trace
from replay.trace.stream import iter_batch_ranges
from replay.trace.writer import write_trace_from_arrays


def _declared(path: Path, data, *, frozen=None, accumulate: int = 1, declare: bool = True):
    rows, batch, table, row = data
    tables = [(f"t{i}", int(r)) for i, r in enumerate(rows)]
    workload = None
    if declare:
        workload = {
            "update": {"rule": "sgd", "accumulate_batches": accumulate},
            "tables": [
                {"name": n, "rows": r, "frozen": bool(frozen[i]) if frozen else False}
                for i, (n, r) in enumerate(tables)
            ],
        }
    return write_trace_from_arrays(
        path, tables=tables, batch=batch, table=table, row=row, batch_size=4,
        workload=workload, frozen=frozen, accumulate_batches=accumulate, force=True,
    )  # fmt: skip


def _batches(path: Path) -> list[tuple[list[int], list[int]]]:
    """(lookup keys, update keys) per batch, as the trace's files hold them."""
    out = []
    for br in iter_batch_ranges(open_trace(path), read_ahead=0):
        for i in range(br.batches):
            look = br.keys[br.bounds[i] : br.bounds[i + 1]].tolist()
            upd = br.update_keys[br.update_bounds[i] : br.update_bounds[i + 1]].tolist()
            out.append((look, upd))
    return out


def _lru_counters(path: Path, capacity: int, from_lookups: bool) -> np.ndarray:
    trace = open_trace(path)
    policy = make_policy("lru", _batches(path), capacity)
    out = np.zeros((trace.num_batches, NUM_COUNTERS), dtype=np.int64)
    for br in iter_batch_ranges(trace, read_ahead=0, updates_from_lookups=from_lookups):
        assert br.updates_are_lookups == (from_lookups and trace.updates_are_lookups)
        policy.process(br, out[br.batch_start : br.batch_stop])
    return out


@settings(max_examples=40, deadline=None)
@given(sorted_lookups(), st.integers(1, 60))
def test_lru_counts_the_same_with_update_rows_from_lookups(tmp_path_factory, data, capacity):
    path = _declared(tmp_path_factory.mktemp("derived") / "t", data)
    assert open_trace(path).updates_are_lookups
    derived = _lru_counters(path, capacity, True)
    explicit = _lru_counters(path, capacity, False)
    assert np.array_equal(derived, explicit)
    # and the slow reference on the trace's own update rows
    assert np.array_equal(derived, reference_lru(_batches(path), capacity))


def test_only_declared_sources_take_updates_from_lookups(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    batch = np.repeat(np.arange(8), 6)
    table = np.tile(np.repeat([0, 1], 3), 8)
    row = rng.integers(0, 4, len(batch))
    data = (np.array([4, 4]), batch, table, row)
    assert open_trace(_declared(tmp_path / "a", data)).updates_are_lookups
    assert not open_trace(_declared(tmp_path / "b", data, declare=False)).updates_are_lookups
    assert not open_trace(_declared(tmp_path / "c", data, accumulate=2)).updates_are_lookups
    frozen = _declared(tmp_path / "d", data, frozen=[True, False])
    assert not open_trace(frozen).updates_are_lookups
    # a table list that does not cover the tables declares nothing
    manifest = json.loads((tmp_path / "a" / "manifest.json").read_text())
    manifest["workload"]["tables"] = manifest["workload"]["tables"][:1]
    (tmp_path / "a" / "manifest.json").write_text(json.dumps(manifest))
    assert not open_trace(tmp_path / "a").updates_are_lookups
    for path, capacity in ((frozen, 3), (tmp_path / "c", 100)):
        assert np.array_equal(
            _lru_counters(path, capacity, True), _lru_counters(path, capacity, False)
        )


@pytest.mark.parametrize("capacity", [100, 5_000, 200_000])
@pytest.mark.parametrize("on_the_fly", [False, True])
def test_runs_are_identical_with_and_without(tmp_path: Path, monkeypatch, capacity, on_the_fly):
    """A whole replay (accounting, checkpoints, statistics) of a generated trace and of the
    same workload on the fly: the same summary and batch table either way."""
    if on_the_fly:
        source = replay.open_workload("criteo-kaggle", batches=30, batch_size=256)
    else:
        source = open_trace(
            replay.generate("criteo-kaggle", tmp_path / "t", batches=30, batch_size=256)
        )
    assert source.updates_are_lookups
    system = resolve_system("hbm-lru", [f"policy.capacity_rows={capacity}"])
    fast = replay_trace(source, system, inspect=not on_the_fly)
    monkeypatch.setattr(LRUPolicy, "updates_from_lookups", False)
    slow = replay_trace(source, system, inspect=not on_the_fly)
    assert fast.summary == slow.summary
    assert fast.workload == slow.workload
    for name in fast.columns:
        assert np.array_equal(fast.columns[name], slow.columns[name]), name
