"""What makes the 400-table model's whole plan (docs/memory.md) finish: the kernels' hit
model answers each cache once per table mass (the greedy, each table budget the
placement tries and each sharding and cluster size the plan compares ask again), and
stops its bisection where it no longer moves, with the very numbers of the 100-step
bisection it replaces. (The plans themselves: tests/test_big_plan_bench.py.)"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

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


@pytest.mark.bench
def test_the_scaling_point_of_the_users_cluster_is_the_steady_replay(monkeypatch) -> None:
    """A steady span of at most `SCALING_BATCHES`: the scaling point at the user's node
    count takes the steady replay's columns, and plan.json is the one replaying it again
    gives. Two small cluster plans (~20 s of CPU): bench."""
    from replay.plan import cluster_spread
    from replay.plan.plan import make_plan
    from replay.plan.request import PlanRequest
    from replay.plan.write import plan_json
    from replay.workload.presets import get_preset

    request = PlanRequest(
        source=get_preset("criteo-kaggle").with_overrides(batches=8, batch_size=64),
        systems=("hbm-lru",),
        cache_budget_bytes=1 << 20,
        hit_targets=(0.5,),
        mtbf_s=6 * 3600,
        sample_rate=1.0,
        draws=20,
        sets=("cluster.nodes=2", "cluster.gpus_per_node=2", "cluster.torchrec_proposer=none"),
    )
    said: list[bool] = []
    same_run = cluster_spread.same_run

    def spy(*args: object) -> bool:
        said.append(same_run(*args))  # type: ignore[arg-type]
        return said[-1]

    monkeypatch.setattr(cluster_spread, "same_run", spy)
    reused, _ = make_plan(request)
    assert said.count(True) == 1  # the user's 2 nodes, and only them
    monkeypatch.setattr(cluster_spread, "same_run", lambda *args: False)
    replayed, _ = make_plan(request)
    assert json.dumps(plan_json(reused)) == json.dumps(plan_json(replayed))


def _memory_document(left: list[dict[str, object]]) -> dict[str, object]:
    gpu = {
        "rank": 0, "allocated_peak_bytes": 2 << 30, "reserved_peak_bytes": 3 << 30,
        "capacity_bytes": 80 << 30, "fits": True, "over_bytes": -(77 << 30),
        "parts": {"weights_bytes": 2 << 30},
    }  # fmt: skip
    line = "2 of 3 tables leave HBM (ssd, 1 GiB of 2 GiB): ..." if left else "fits in HBM"
    return {
        "memory": {
            "per_gpu": [gpu], "per_node": [], "worst_rank": 0, "fits": True, "basis": "b",
        },
        "cluster": {"kernels": {"line": line, "left_hbm": left}},
    }  # fmt: skip


def test_plan_md_lists_the_tables_that_leave_hbm_and_their_cost() -> None:
    from replay.plan.write_memory import LEFT_HBM_SHOWN, memory_markdown

    def table(i: int) -> dict[str, object]:
        return {
            "table": f"t{i:02d}", "kernel": "ssd", "cache_load_factor": 0.05, "hit": 0.8,
            "bytes": (i + 1) << 30, "pcie_bytes": float(i << 20),
        }  # fmt: skip

    left = [table(i) for i in range(LEFT_HBM_SHOWN + 3)]
    md = "\n".join(memory_markdown(_memory_document(left)))
    assert "Tables: 2 of 3 tables leave HBM" in md
    rows = [r for r in md.splitlines() if r.startswith("| t") and "| ssd |" in r]
    # the costliest first, as many as shown, the rest counted
    assert len(rows) == LEFT_HBM_SHOWN and rows[0].startswith(f"| t{LEFT_HBM_SHOWN + 2:02d} | ssd")
    assert "| 0.05 | 0.800 |" in rows[0] and "and 3 more" in md
    # a plan whose tables all stay in HBM: the section as before
    assert "Tables:" not in "\n".join(memory_markdown(_memory_document([])))


# measured peaks (`/usr/bin/time -v` maximum RSS) of the whole plans of docs/memory.md,
# "The 400-table model as a whole plan"
MEASURED_PEAK_BYTES = {"8": 9_943_036 * 1024, "1": 5_633_648 * 1024}


def test_the_dry_run_is_within_25_percent_of_the_big_plans_measured_peaks(
    capsys: pytest.CaptureFixture[str], tmp_path: object
) -> None:
    from pathlib import Path

    from replay._units import parse_bytes
    from replay.cli import main

    big = Path(__file__).resolve().parent.parent / "traces" / "big-400.toml"
    for nodes, measured in MEASURED_PEAK_BYTES.items():
        sets = ["cluster.preset=dgx-h100", f"cluster.nodes={nodes}"]
        if nodes == "1":
            sets.append("policy.l2_capacity_bytes=256MiB")
        argv = ["plan", "--workload", str(big), "--system", "ssd-tbe"]
        argv += [x for s in sets for x in ("--set", s)]
        argv += ["--cache-budget", "8GiB", "--cluster-mtbf", "6h", "--dry-run"]
        argv += ["--out", str(Path(str(tmp_path)) / f"p{nodes}")]
        main(argv)  # a machine with less memory says so and exits non-zero: the figure stands
        said = capsys.readouterr()
        line = next(x for x in (said.out + said.err).splitlines() if x.startswith("memory: about"))
        estimate = parse_bytes(line.split("about ")[1].split(" at the peak")[0].replace(" ", ""))
        assert abs(estimate / measured - 1) <= 0.25, (nodes, estimate, measured)
