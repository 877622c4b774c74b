"""Each table's distinct rows in a batch counted from the draws
(`replay.workload.batch_distinct`) against generating the batch and counting them: the
presets (reuse, drift, hot ranks), the tail guide's blocks and its scalar loop, rank
offsets, the contiguous mapping, uniform and all-alias tables, frozen tables, batches
past 0, and random small specs."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.engine.cluster_routed import source_table_counts
from replay.workload.batch_distinct import batch_table_counts
from replay.workload.generator import CompiledWorkload
from replay.workload.onthefly import GeneratedTrace
from replay.workload.presets import get_preset
from replay.workload.sampler import I_GUIDE_OFF
from replay.workload.spec import WorkloadSpec, spec_from_dict


def _generated(compiled: CompiledWorkload, batch: int) -> np.ndarray:
    """Each table's distinct rows in `batch`, generated and counted."""
    _, table, row = compiled.lookups(batch, batch + 1)
    pairs = np.unique(table.astype(np.int64) << 32 | row.astype(np.int64))
    return np.bincount(pairs >> 32, minlength=len(compiled.spec.tables))


@pytest.mark.parametrize("name", ["tiny", "criteo-kaggle", "criteo-terabyte"])
@pytest.mark.parametrize("batch", [0, 2])
def test_presets_count_as_the_routing_reads_the_batch(name: str, batch: int) -> None:
    spec = get_preset(name).with_overrides(batches=batch + 1)
    looks, upds = batch_table_counts(CompiledWorkload.from_spec(spec), batch)
    want = source_table_counts(GeneratedTrace(spec))
    assert looks.tolist() == want[0][batch : batch + 1].tolist()
    assert upds.tolist() == want[1][batch : batch + 1].tolist()


def _spec(batches: int, **table: Any) -> WorkloadSpec:
    base = {"alpha": 1.05, "pooling": 3}
    tables = [
        {"name": "guided", "rows": 300_000},
        {"name": "offset", "rows": 200_000, "rank_offset": 40.0, "alpha": 0.8},
        {"name": "hot", "rows": 150_000, "hot_shares": [0.2, 0.05]},
        {"name": "contiguous", "rows": 250_000, "mapping": "contiguous", "alpha": 1.2},
        {"name": "uniform", "rows": 90_000, "alpha": 0.0},
        {"name": "small", "rows": 5_000, "alpha": 0.9},
        {"name": "frozen", "rows": 120_000, "frozen": True},
        {
            "name": "moving",
            "rows": 100_000,
            "reuse": 0.3,
            "reuse_window_batches": 3,
            "drift": 0.01,
            "drift_period_batches": 2,
        },
    ]
    return spec_from_dict(
        {
            "name": "distinct",
            "batch_size": 512,
            "batches": batches,
            "seed": 11,
            "embedding_dim": 8,
            "tables": [{**base, **t, **table} for t in tables],
        }
    )


@pytest.mark.parametrize("batch", [0, 1, 5])
def test_guided_tables_count_as_the_generated_batch(batch: int) -> None:
    """Enough batches that the tails are drawn through their guides (the blocks of
    passes, and the scalar loop where the table reuses or drifts)."""
    compiled = CompiledWorkload.from_spec(_spec(10_000))
    guided = compiled.tables.iparams[:, I_GUIDE_OFF] >= 0
    assert guided[[0, 1, 2, 3, 6, 7]].all() and not guided[[4, 5]].any()
    looks, upds = batch_table_counts(compiled, batch)
    distinct = _generated(compiled, batch)
    assert looks[0].tolist() == compiled.table_lookups.tolist()
    assert upds[0].tolist() == np.where(compiled.frozen, 0, distinct).tolist()
    assert upds[0, 6] == 0 and distinct[6] > 0
    # few batches: no guide, the same counts
    few = CompiledWorkload.from_spec(_spec(batch + 1))
    assert (few.tables.iparams[:, I_GUIDE_OFF] < 0).all()
    assert batch_table_counts(few, batch)[1].tolist() == upds.tolist()


def test_accumulated_steps_are_refused() -> None:
    spec = _spec(2)
    spec = dataclasses.replace(spec, update=dataclasses.replace(spec.update, accumulate_batches=2))
    with pytest.raises(ValueError, match="several batches"):
        batch_table_counts(CompiledWorkload.from_spec(spec), 0)


@settings(max_examples=25, deadline=None)
@given(
    rows=st.integers(1, 80_000),
    alpha=st.sampled_from([0.0, 0.5, 1.0, 1.3]),
    offset=st.sampled_from([0.0, 7.5]),
    pooling=st.integers(1, 4),
    reuse=st.sampled_from([0.0, 0.5]),
    drift=st.sampled_from([0.0, 0.3]),
    contiguous=st.booleans(),
    batches=st.sampled_from([4, 5_000]),
    batch=st.integers(0, 3),
    seed=st.integers(0, 2**20),
)
def test_random_specs_count_as_the_generated_batch(
    rows: int, alpha: float, offset: float, pooling: int, reuse: float, drift: float,
    contiguous: bool, batches: int, batch: int, seed: int,
) -> None:  # fmt: skip
    spec = spec_from_dict(
        {
            "name": "random",
            "batch_size": 300,
            "batches": batches,
            "seed": seed,
            "embedding_dim": 4,
            "tables": [
                {
                    "name": "a",
                    "rows": rows,
                    "alpha": alpha,
                    "rank_offset": offset,
                    "pooling": pooling,
                    "reuse": reuse,
                    "drift": drift,
                    "mapping": "contiguous" if contiguous else "permuted",
                },
                {"name": "b", "rows": rows + 70_000, "alpha": alpha, "pooling": pooling},
            ],
        }
    )
    compiled = CompiledWorkload.from_spec(spec)
    _, upds = batch_table_counts(compiled, batch)
    assert upds[0].tolist() == _generated(compiled, batch).tolist()
