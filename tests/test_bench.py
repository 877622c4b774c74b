"""Speed goals (run with `pytest -m bench`; excluded from the default run)."""

from __future__ import annotations

import pytest

from replay.bench import bench_generate


@pytest.mark.bench
def test_generation_hides_sampling_behind_writing() -> None:
    """Issue 2: generation >= 0.8 x writing the same tables from memory (kaggle, batch 2048)."""
    result = bench_generate("criteo-kaggle", batches=1000, batch_size=2048)
    assert result["lookups"] == 53_248_000
    assert result["ratio_generate_to_write_only"] >= 0.8, result


@pytest.mark.bench
def test_replay_streams_at_25m_lookups_per_s() -> None:
    """Issue 3: hbm-lru and hbm-hot stream >= 25 M lookups/s including Parquet reads, and
    SHARDS at rate 0.01 runs >= 100 M lookups/s (criteo-kaggle, 1000 x 2048)."""
    from replay.bench import bench_replay

    result = bench_replay(batches=1000, batch_size=2048, repeats=2)
    assert result["lookups"] == 53_248_000
    for system in ("hbm-lru", "hbm-hot"):
        assert result["runs"][system]["stream_lookups_per_s"] >= 25e6, result
    assert result["mrc_sampled"]["lookups_per_s"] >= 100e6, result


@pytest.mark.bench
def test_checkpoint_models_cost_under_a_fifth_of_the_replay() -> None:
    """Issue 4: checkpoint and failure models < 20% of the replay's run time (kaggle)."""
    from replay.bench import bench_checkpoint

    result = bench_checkpoint(batches=1000, batch_size=2048)
    for label, case in result["cases"].items():
        assert case["share"] < 0.2, (label, case)
