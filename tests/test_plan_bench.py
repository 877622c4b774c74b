"""Benchmarks of `replay plan` (issue 25's acceptance; `pytest -m bench`, minutes).

- Sampled against exact on a Kaggle-scale workload (criteo-kaggle, 2,000 batches of
  2,048: 106 M lookups) at the rate the plan picks for it: the sampled LRU curve within
  0.01 of the exact one at every size from one row, inside its stated bound, touched(k) within 2%
  for k up to 1,000, Che's curve (over the run, cold misses included) within 0.02 from one
  batch's lookups up.
- The 24 days of Criteo Terabyte at batch 2,048 (2,135,484 batches, 113.7 G lookups):
  `replay plan` in at most 60 s with at most 2 GiB of peak memory (a whole process), and
  its sampled curve against the exact curve of one day (88,979 batches, 4.6 G lookups).
"""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from replay.analysis.che import che_miss_ratios
from replay.analysis.horizon import horizon_mrc, touched_curve
from replay.plan.cache import curve_sizes
from replay.plan.plan import choose_sample_rate
from replay.workload.onthefly import GeneratedTrace
from replay.workload.presets import get_preset
from replay.workload.sampled import open_sampled_workload

pytestmark = pytest.mark.bench

TERABYTE_DAYS = 2_135_484


def _sampled_against_exact(spec, rate: float) -> dict[str, float]:
    full = GeneratedTrace(spec)
    # every size from one row: the sampled curve's exact head covers the small ones
    sizes = curve_sizes(int(sum(full.table_rows)), 1)
    exact = horizon_mrc(full, sizes)
    sampled = open_sampled_workload(spec, rate)
    estimate = horizon_mrc(sampled, sizes)
    return {
        "mrc_error": float(np.max(np.abs(exact.miss_ratios - estimate.miss_ratios))),
        "error_bound": float(estimate.expected_error),
        "exact": exact,
        "sampled": sampled,
        "full": full,
        "sizes": sizes,
    }


def test_sampled_curves_hold_against_exact_ones_at_kaggle_scale() -> None:
    spec = get_preset("criteo-kaggle").with_overrides(batches=2000, batch_size=2048)
    rate = choose_sample_rate(spec.batches * spec.lookups_per_batch)
    assert rate < 1  # the plan samples this run
    found = _sampled_against_exact(spec, rate)
    print(f"\nR = {rate:g}: sampled LRU curve within {found['mrc_error']:.4f} of exact")
    assert found["mrc_error"] <= 0.01
    assert found["mrc_error"] <= found["error_bound"]

    exact_touched = touched_curve(found["full"])
    sampled_touched = touched_curve(found["sampled"])
    k = exact_touched.batches <= 1000
    rel = np.abs(sampled_touched.rows[k] / exact_touched.rows[k] - 1)
    print(f"touched(k), k <= 1000: within {rel.max():.2%}")
    assert rel.max() <= 0.02

    exact = found["exact"]
    che = che_miss_ratios(spec, found["sizes"], horizon_lookups=exact.lookups)
    batch = found["sizes"] >= spec.lookups_per_batch
    gap = np.abs(exact.miss_ratios - che)[batch]
    print(f"Che over the run: within {gap.max():.4f} of exact from one batch up")
    assert gap.max() <= 0.02


def test_a_24_day_plan_in_a_minute_and_2_gib(tmp_path: Path) -> None:
    argv = [
        sys.executable, "-m", "replay", "plan", "--workload", "criteo-terabyte",
        "--batches", str(TERABYTE_DAYS), "--system", "hbm-lru", "--system", "dram",
        "--cache-budget", "8GiB", "--hit-target", "0.9", "--hit-target", "0.95",
        "--cluster-mtbf", "6h", "--time-per-batch", "1s", "--out", str(tmp_path / "plan"),
    ]  # fmt: skip
    subprocess.run([*argv[:-1], str(tmp_path / "warm")], check=True, capture_output=True)
    start = time.perf_counter()
    done = subprocess.run(argv, check=True, capture_output=True, text=True)
    wall = time.perf_counter() - start
    # the largest child so far: the warm-up or this run, the same command
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    print(f"\n24-day plan: {wall:.1f} s, peak {peak / 2**30:.2f} GiB\n{done.stdout}")
    assert wall <= 60
    assert peak <= 2 * 2**30
