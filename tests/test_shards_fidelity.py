"""Sampled miss-ratio curves against exact ones on varied generated traces (issue 28).

Target at R = 0.01: the largest error over every size (the exact head covers the sizes
below the sample's resolution) at most 0.01, and the stated `expected_error` at least the
true largest error on at least 19 of 20 traces spread over skew 0.8-1.4, reuse 0-0.5,
drift on and off, the Criteo Kaggle and Terabyte key spaces and batch sizes 256-2,048.
The 20-trace suite is a benchmark (`pytest -m bench`, about two minutes); the default run
checks 4 smaller traces of the same spread.
"""

from __future__ import annotations

import numpy as np
import pytest

from replay.analysis.mrc import default_sizes, mrc_keys
from replay.analysis.stack import StackDistances
from replay.trace.stream import iter_batch_ranges
from replay.workload.onthefly import GeneratedTrace
from replay.workload.presets import get_preset
from replay.workload.spec import WorkloadSpec

RATE = 0.01
TARGET_LARGEST_ERROR = 0.01


def varied_specs(count: int, lookups: int, seed: int = 7) -> list[WorkloadSpec]:
    """`count` workloads of about `lookups` lookups each, alternating key spaces; drift on
    in every other pair."""
    rng = np.random.default_rng(seed)
    specs = []
    for i in range(count):
        space = "criteo-kaggle" if i % 2 == 0 else "criteo-terabyte"
        alpha = round(0.8 + 0.6 * float(rng.random()), 2)
        reuse = round(0.5 * float(rng.random()), 2)
        drift = 0.0 if (i // 2) % 2 == 0 else round(10 ** float(rng.uniform(-5, -3)), 7)
        batch = int(rng.choice([256, 512, 1024, 2048]))
        batches = max(20, lookups // (batch * 26))
        specs.append(
            get_preset(space).with_overrides(
                batches=batches,
                batch_size=batch,
                seed=100 + i,
                alpha=alpha,
                reuse=reuse,
                drift=drift,
            )
        )
    return specs


def sampled_against_exact(spec: WorkloadSpec) -> tuple[float, float]:
    """(true largest error over 256 sizes from 1 row to all rows touched, stated bound)."""
    source = GeneratedTrace(spec, threads=2)
    keys = np.concatenate(
        [np.asarray(r.keys, dtype=np.int64) for r in iter_batch_ranges(source, with_updates=False)]
    )
    total = spec.total_rows
    exact = StackDistances(total)
    exact.feed(keys)
    sizes = default_sizes(exact.distinct, points=256)
    sampled = mrc_keys(keys, total, sizes, sample_rate=RATE)
    truth = exact.misses_at(sizes) / exact.requests
    return float(np.abs(sampled.miss_ratios - truth).max()), float(sampled.expected_error)


def _check(specs: list[WorkloadSpec], covered_at_least: int) -> None:
    results = [sampled_against_exact(spec) for spec in specs]
    largest = [err for err, _ in results]
    covered = sum(err <= bound for err, bound in results)
    assert max(largest) <= TARGET_LARGEST_ERROR, results
    assert covered >= covered_at_least, results


def test_sampled_curves_hold_on_varied_traces() -> None:
    """4 traces of about 2 M lookups: every largest error <= 0.01, every one covered."""
    _check(varied_specs(4, 2_000_000, seed=11), covered_at_least=4)


@pytest.mark.bench
def test_sampled_curves_hold_on_twenty_varied_traces() -> None:
    """20 traces of about 8 M lookups: largest error <= 0.01 on each, bound covers >= 19."""
    _check(varied_specs(20, 8_000_000), covered_at_least=19)
