"""What makes the 400-table model's whole plan (docs/memory.md) finish: the kernels' hit
model answers each cache once per table mass (the greedy, each table budget the
placement tries and each sharding and cluster size the plan compares ask again), and
stops its bisection where it no longer moves, with the very numbers of the 100-step
bisection it replaces. (The plans themselves: tests/test_big_plan_bench.py.)"""

from __future__ import annotations

import dataclasses

import numpy as np

from replay.engine import kernels
from replay.engine.placement import spec_loads
from replay.engine.systems import resolve_system
from replay.workload.spec import TableSpec, WorkloadSpec


def _reference_che_hit(load: kernels.TableLoad, cache_rows: float) -> float:
    """Che's hit by 100 bisection steps, as the kernels computed it before the memo."""
    rows = load.rows
    if cache_rows >= rows:
        return 1.0
    mass = load.mass
    assert mass is not None and mass.total > 0
    x = mass._index
    free = np.asarray(x["free"], dtype=np.float64)
    p_bin = np.divide(mass.bin_mass, free, out=np.zeros(len(free)), where=free > 0)
    p = np.concatenate([np.asarray(mass.top_mass, dtype=np.float64), p_bin]) / mass.total
    n = np.concatenate([np.ones(len(mass.top_mass)), free])
    keep = (p > 0) & (n > 0)
    p, n = p[keep], n[keep]
    if n.sum() <= cache_rows:
        return 1.0

    def filled(t: float) -> float:
        return float((n * -np.expm1(-p * t)).sum())

    lo, hi = 0.0, 1.0
    while filled(hi) < cache_rows:
        hi *= 2.0
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if filled(mid) < cache_rows:
            lo = mid
        else:
            hi = mid
    return float(min(1.0, (n * p * -np.expm1(-p * hi)).sum()))


def test_che_hit_is_the_full_bisection_and_answers_again_from_its_memo() -> None:
    spec = WorkloadSpec(
        name="che",
        tables=(
            TableSpec(name="a", rows=3_000, alpha=0.9, pooling=2),
            TableSpec(name="b", rows=60_000, alpha=1.2, pooling=4),
        ),
        batch_size=512,
        batches=2,
        seed=7,
        embedding_dim=16,
    )
    loads = spec_loads(spec, resolve_system("hbm-lru", []))
    assert all(ld.mass is not None for ld in loads)
    for ld in loads:
        for f in kernels.CLF_STEPS[::4]:
            cache = float(int(f * ld.rows))
            want = _reference_che_hit(ld, cache)
            assert kernels.che_hit(ld, cache) == want  # the very same float
            assert kernels.che_hit(ld, cache) == want  # and again, from the memo
        assert ld.mass in kernels._CHE_MEMO
    # a copy of a load with another mass object is answered afresh, the same
    other = dataclasses.replace(
        loads[1], mass=spec_loads(spec, resolve_system("hbm-lru", []))[1].mass
    )
    assert kernels.che_hit(other, 4_000.0) == _reference_che_hit(loads[1], 4_000.0)
