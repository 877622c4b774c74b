"""`replay.engine.placement`: a cluster system's placement from its `[cluster]`, the same
for a run and a plan."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from replay.engine.placement import resolve_placement, spec_loads, table_loads
from replay.errors import ConfigError
from replay.system.spec import SystemSpec, apply_overrides, build_system, load_system_data
from replay.workload.generator import resolve_workload
from replay.workload.onthefly import GeneratedTrace


def _system(*sets: str) -> SystemSpec:
    data, _ = load_system_data("hbm-lru")
    return build_system(apply_overrides(data, list(sets)))


SPEC = resolve_workload("criteo-kaggle").with_overrides(batches=8, batch_size=256)
SOURCE = GeneratedTrace(SPEC)


def test_counted_loads_are_the_specs_poolings() -> None:
    system = _system("cluster.nodes=2", "cluster.gpus_per_node=4")
    counted = table_loads(SOURCE, system)
    assert counted == spec_loads(SPEC, system)
    pairs = zip(counted, SPEC.tables, strict=True)
    assert all(ld.lookups == SPEC.batch_size * t.pooling for ld, t in pairs)


@pytest.mark.parametrize("kind", ["table-wise", "row-wise", "table-row-wise", "column-wise"])
def test_a_uniform_type_shards_every_table_that_way(kind: str) -> None:
    system = _system("cluster.nodes=2", "cluster.gpus_per_node=4", f"cluster.sharding={kind}")
    result = resolve_placement(system, SOURCE)
    assert {e.type for e in result.plan.tables} == {kind}
    assert result.basis["sharding"] == kind and result.basis["world"] == 8
    assert "modeled_imbalance" not in result.basis  # no loads counted for a uniform type
    with_loads = resolve_placement(system, SOURCE, loads=spec_loads(SPEC, system))
    assert with_loads.basis["modeled_imbalance"] >= 1.0


def test_auto_is_the_sharders_and_its_plan_reads_back(tmp_path: Path) -> None:
    system = _system("cluster.nodes=2", "cluster.gpus_per_node=4", "cluster.sharding=auto")
    auto = resolve_placement(system, SOURCE)
    assert auto.basis["sharding"] == "auto"
    assert auto.basis["modeled_max_over_bound"] <= 1.05 + 1e-9
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(auto.plan.to_json()))
    again = resolve_placement(
        _system("cluster.nodes=2", "cluster.gpus_per_node=4", f"cluster.sharding_file={path}"),
        SOURCE,
    )
    assert again.basis["sharding"] == "file"
    assert again.placement.shards == auto.placement.shards


def test_overrides_pick_another_sharding_and_world() -> None:
    system = _system("cluster.nodes=2", "cluster.gpus_per_node=4")
    other = resolve_placement(system, SOURCE, sharding="row-wise", nodes=1, gpus_per_node=2)
    assert other.placement.world == 2
    assert {e.type for e in other.plan.tables} == {"row-wise"}


def test_a_file_naming_a_missing_table_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"tables": [{"table": "nope", "type": "table-wise", "ranks": [0]}]}))
    system = _system("cluster.nodes=1", "cluster.gpus_per_node=2", f"cluster.sharding_file={path}")
    with pytest.raises(ConfigError, match="nope") as err:
        resolve_placement(system, SOURCE)
    assert "\n" not in str(err.value)


def test_tables_too_large_for_the_gpus_are_refused() -> None:
    system = _system(
        "cluster.nodes=1", "cluster.gpus_per_node=2", "cluster.gpu_memory_bytes=1e6",
        "cluster.sharding=row-wise",
    )  # fmt: skip
    with pytest.raises(ConfigError, match="GPU"):
        resolve_placement(system, SOURCE)


def test_one_gpu_system_has_nothing_to_place() -> None:
    with pytest.raises(ConfigError, match="no \\[cluster\\]"):
        resolve_placement(_system(), SOURCE)


def test_loads_carry_how_lookups_fall_on_rows() -> None:
    """spec_loads: the generator's pmf over the rows; table_loads: counted from the keys.
    The hottest row's share agrees on the big tables (2,048 lookups counted per table)."""
    system = _system("cluster.nodes=2", "cluster.gpus_per_node=4")
    spec, counted = spec_loads(SPEC, system), table_loads(SOURCE, system)
    assert all(ld.mass is not None for ld in spec + counted)
    for s, c in zip(spec, counted, strict=True):
        assert c.mass is not None and c.mass.total == c.lookups * SOURCE.num_batches
        if s.rows > 1_000_000:
            assert abs(s.hottest_share() - c.hottest_share()) < 0.03, s.name


def test_the_allreduce_weight_is_the_systems() -> None:
    """replica_byte = seconds per all-reduced byte (NVLink in a node, the NICs' share per
    GPU across nodes) / seconds per lookup (hit + all-to-all); hit-only on request."""
    from replay.engine.placement import allreduce_byte_seconds, system_cost_model

    one = _system("cluster.preset=dgx-h100", "cluster.nodes=1")
    many = _system("cluster.preset=dgx-h100", "cluster.nodes=8")
    assert allreduce_byte_seconds(one, 1, 8) == pytest.approx(1 / 450e9)
    assert allreduce_byte_seconds(many, 8, 8) == pytest.approx(1 / 50e9)
    model, prices = system_cost_model(many, 8, 8, 128)
    assert model.replica_byte == pytest.approx(
        prices["seconds_per_allreduce_byte"] / prices["seconds_per_lookup"]
    )
    hit, _ = system_cost_model(many, 8, 8, 128, all_to_all=False)
    assert hit.replica_byte == pytest.approx(2e-11 / (512 / 3.35e12 + 500e-9 / 16384))
