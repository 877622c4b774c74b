"""One table budget per GPU (`replay.engine.placement`): the kernels' choice and the sharder
get each GPU's memory less what it holds besides the tables, and every placement accepted
fits every GPU as plan.json's `memory` counts it (`replay.system.gpu_memory.cluster_memory`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replay.cli import main
from replay.engine.placement import first_budget, resolve_placement, spec_loads
from replay.errors import ConfigError
from replay.system.gpu_memory import cluster_memory
from replay.system.sharding import resolve_plan, table_shapes, uniform_plan
from replay.system.spec import SystemSpec, apply_overrides, build_system, load_system_data
from replay.workload.generator import resolve_workload
from replay.workload.onthefly import GeneratedTrace
from replay.workload.spec import TableSpec, WorkloadSpec

# tiny: user 20,000 rows, item 5,000, category 300, hour 24; dim 8, SGD: 810 KB of tables;
# hbm-lru's dense model, 475,985 parameters, takes 5.71 MB with its gradients and buckets
TINY = resolve_workload("tiny").with_overrides(batches=4)
TIGHT = "cluster.gpu_memory_bytes=6e6"  # 2 x 6 MB hold 810 KB, but not beside 5.7 MB each


def _system(name: str = "hbm-lru", *sets: str) -> SystemSpec:
    data, _ = load_system_data(name)
    return build_system(apply_overrides(data, ["cluster.gpus_per_node=2", *sets]))


def test_tables_that_fit_the_memory_but_not_beside_the_rest_leave_hbm() -> None:
    system = _system("hbm-lru", TIGHT)
    source = GeneratedTrace(TINY)
    budget = first_budget(system, source, 2)
    assert 0 < 2 * budget < 810_000 < 2 * 6e6  # the tables fit the GPUs, not their budgets
    placed = resolve_placement(system, source, loads=spec_loads(TINY, system))
    assert placed.kernels is not None and not placed.kernels.all_hbm
    assert "leave HBM" in placed.kernels.line
    assert placed.basis["table_budget_bytes"] <= budget
    gpus = cluster_memory(system, source.workload, placed.placement, TINY.batch_size)
    assert all(g.fits for g in gpus)
    # every table whole in HBM, as a budget of the whole memory would place them: the GPU
    # holding `user` does not fit
    shapes = table_shapes([t.name for t in TINY.tables], [t.rows for t in TINY.tables], 8)
    whole = resolve_plan(
        uniform_plan("table-wise", shapes, nodes=1, gpus_per_node=2), shapes,
        nodes=1, gpus_per_node=2, row_bytes=32,
    )  # fmt: skip
    assert not all(g.fits for g in cluster_memory(system, source.workload, whole, 64))


def test_a_given_placement_that_does_not_fit_is_one_line() -> None:
    system = _system("hbm-lru", TIGHT, "cluster.sharding=table-wise", "cluster.kernel=hbm")
    with pytest.raises(ConfigError) as err:
        resolve_placement(system, GeneratedTrace(TINY), loads=spec_loads(TINY, system))
    line = str(err.value)
    assert "\n" not in line and "more than its" in line and "dense_bytes" in line


def test_a_gpu_the_rest_fills_leaves_nothing_for_the_tables() -> None:
    system = _system("hbm-lru", "cluster.gpu_memory_bytes=5e6")
    with pytest.raises(ConfigError, match="leave nothing for the tables"):
        resolve_placement(system, GeneratedTrace(TINY), loads=spec_loads(TINY, system))


@pytest.mark.bench
def test_the_plans_memory_fits_every_gpu(tmp_path: Path) -> None:
    """`replay plan` at the tight memory: tables leave HBM, and plan.json's memory says
    every GPU fits (bench: a whole plan, 15-40 s)."""
    out = tmp_path / "plan"
    argv = [
        "plan",
        "--workload",
        "tiny",
        "--batches",
        "4",
        "-s",
        "hbm-lru",
        "--cache-budget",
        "64KiB",
        "--cluster-mtbf",
        "6h",
    ]
    sets = ["cluster.gpus_per_node=2", TIGHT]
    assert main([*argv, *(x for s in sets for x in ("--set", s)), "-o", str(out)]) == 0
    plan = json.loads((out / "plan.json").read_text())
    per_gpu = plan["memory"]["per_gpu"]
    assert len(per_gpu) == 2 and all(g["fits"] for g in per_gpu)
    tables = json.loads((out / "sharding.json").read_text())["tables"]
    assert {t["kernel"] for t in tables} - {"hbm"}


SETTINGS = settings(
    max_examples=25, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck)
)


@SETTINGS
@given(
    rows=st.lists(st.integers(2, 60_000), min_size=1, max_size=6),
    pooling=st.integers(1, 4),
    batch=st.sampled_from([64, 256, 1024]),
    nodes=st.integers(1, 2),
    gpn=st.integers(1, 4),
    share=st.floats(0.3, 3.0),
    dense=st.sampled_from([0, 20_000]),
    system=st.sampled_from(["hbm-lru", "ssd-tbe"]),
    sharding=st.sampled_from(["auto", "auto-uneven", "table-wise", "row-wise"]),
)
def test_every_accepted_placement_fits_every_gpu(
    rows: list[int],
    pooling: int,
    batch: int,
    nodes: int,
    gpn: int,
    share: float,
    dense: int,
    system: str,
    sharding: str,
) -> None:
    """Small specs on GPUs of `share` x the tables' bytes per GPU plus the rest: the
    placement is refused in one line or every GPU's peak reserved is within its memory."""
    spec = WorkloadSpec(
        name="small",
        tables=tuple(
            TableSpec(name=f"t{i}", rows=r, alpha=1.05, pooling=pooling) for i, r in enumerate(rows)
        ),
        batch_size=batch,
        batches=2,
        seed=1,
        embedding_dim=8,
    )
    source = GeneratedTrace(spec)
    world = nodes * gpn
    base = _system(system, f"cluster.nodes={nodes}", f"cluster.gpus_per_node={gpn}",
                   f"model.dense_params={dense}", "cluster.gpu_memory_bytes=80e9")  # fmt: skip
    rest = base.cluster.gpu_memory_bytes - first_budget(base, source, world)
    memory = int(rest + share * sum(rows) * 32 / world)
    placed_system = _system(
        system, f"cluster.nodes={nodes}", f"cluster.gpus_per_node={gpn}",
        f"model.dense_params={dense}", f"cluster.gpu_memory_bytes={memory}",
        f"cluster.sharding={sharding}",
    )  # fmt: skip
    try:
        placed = resolve_placement(placed_system, source, loads=spec_loads(spec, placed_system))
    except ConfigError as exc:
        assert "\n" not in str(exc)
        return
    gpus = cluster_memory(placed_system, source.workload, placed.placement, batch)
    assert all(g.fits for g in gpus), [(g.rank, g.over_bytes) for g in gpus]


def test_a_mixed_placements_caches_are_sized_from_their_load_factors() -> None:
    """The run's memory estimate of a mixed placement: each GPU's one cache over its
    cached shards, of sum ceil(load factor x rows) rows, as the cluster replay makes it
    (81 B an LRU slot), not the policy's capacity over every row the GPU holds."""
    from replay.runs.run_memory import _SLOT_BYTES, gpu_caches, gpu_rows, run_state

    system = _system("hbm-lru", TIGHT)
    source = GeneratedTrace(TINY)
    placed = resolve_placement(system, source, loads=spec_loads(TINY, system)).placement
    caches = gpu_caches(placed, system)
    # user cached (item whole in HBM: the greedy's best jump from its smallest cache)
    assert caches is not None and sum(rows for rows, _ in caches) == 20_000
    slots = sum(min(rows, cache) for rows, cache in caches)
    assert slots < 20_000
    mixed = run_state(source, system, gpu_rows=gpu_rows(placed), caches=caches)
    every = run_state(source, system, gpu_rows=gpu_rows(placed))
    per_gpu = mixed.fixed_bytes - slots * _SLOT_BYTES["lru"]
    assert per_gpu == every.fixed_bytes - 25_324 * _SLOT_BYTES["lru"]  # the rest unchanged
