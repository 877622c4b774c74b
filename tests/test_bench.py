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
