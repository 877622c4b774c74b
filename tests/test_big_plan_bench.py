"""The 400-table, 2-billion-row model (traces/big-400.toml, 954 GiB of fp32 weights) as a
whole `replay plan` under FBGEMM's SSD TBE on DGX H100 nodes (docs/memory.md, "The
400-table model as a whole plan"): on 64 H100s every table placed, each GPU's memory
said and fitting, no tier over its capacity, `ssd-tbe` answered on the cluster; on 8
H100s the tables that leave HBM and what their misses cost. Minutes each on the 2-core
VM: `pytest -m bench tests/test_big_plan_bench.py`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from replay.cli import main

ROOT = Path(__file__).resolve().parent.parent
BIG = ROOT / "traces" / "big-400.toml"
TABLES = 400
DGX = ("--set", "cluster.preset=dgx-h100")


def _plan(out: Path, *sets: str) -> tuple[dict[str, Any], dict[str, Any]]:
    argv = ["plan", "--workload", str(BIG), "--system", "ssd-tbe", *DGX]
    argv += [x for s in sets for x in ("--set", s)]
    argv += ["--cache-budget", "8GiB", "--cluster-mtbf", "6h", "--out", str(out)]
    assert main(argv) == 0
    plan = json.loads((out / "plan.json").read_text())
    sharding = json.loads((out / "sharding.json").read_text())
    return plan, sharding


def _check_placed_and_fitting(plan: dict[str, Any], sharding: dict[str, Any]) -> None:
    """Every table placed with a kernel, every GPU's memory said and fitting, no tier
    over its capacity."""
    tables = sharding["tables"]
    assert len({t["table"] for t in tables}) == TABLES
    assert all(t["kernel"] in ("hbm", "uvm-caching", "uvm", "ssd") for t in tables)
    assert all(t["ranks"] for t in tables)
    cluster = plan["cluster"]
    world = cluster["world"]
    memory = plan["memory"]
    per_gpu = memory["per_gpu"]
    assert [g["rank"] for g in per_gpu] == list(range(world))
    for g in per_gpu:
        parts = g["parts"]
        assert parts["weights_bytes"] > 0  # every GPU holds tables
        assert g["allocated_peak_bytes"] >= sum(
            v for k, v in parts.items() if k != "allocator_slack_bytes"
        )
        assert g["reserved_peak_bytes"] <= g["capacity_bytes"] and g["fits"]
    assert memory["fits"]
    tiers = cluster["kernels"]["tiers"]
    assert len(tiers["per_gpu"]) == world
    assert all(g["hbm_bytes"] <= tiers["hbm_capacity_bytes"] for g in tiers["per_gpu"])
    for n in tiers["per_node"]:
        assert n["host_bytes"] <= tiers["host_capacity_bytes_per_node"]
        assert n["drive_bytes"] <= tiers["drive_capacity_bytes_per_node"]
    # the cluster answered under ssd-tbe: its step and each GPU's hits from the replay
    assert cluster["step_time_s"] > 0
    assert all(g["steady_lookups"] > 0 for g in cluster["per_gpu"])
    assert plan["systems"][0]["name"] == "ssd-tbe"


@pytest.mark.bench
def test_the_400_table_model_on_64_h100s(tmp_path: Path) -> None:
    plan, sharding = _plan(tmp_path / "big-64", "cluster.nodes=8")
    _check_placed_and_fitting(plan, sharding)
    kernels = plan["cluster"]["kernels"]
    assert kernels["line"].startswith("fits in HBM, no cache needed")
    assert {t["kernel"] for t in sharding["tables"]} == {"hbm"} and not kernels["left_hbm"]
    assert plan["cluster"]["world"] == 64
    md = (tmp_path / "big-64" / "plan.md").read_text()
    assert "every GPU fits" in md


@pytest.mark.bench
def test_the_400_table_model_on_8_h100s(tmp_path: Path) -> None:
    plan, sharding = _plan(tmp_path / "big-8", "cluster.nodes=1", "policy.l2_capacity_bytes=256MiB")
    _check_placed_and_fitting(plan, sharding)
    kernels = plan["cluster"]["kernels"]
    assert plan["cluster"]["world"] == 8
    assert "leave HBM" in kernels["line"]
    left = kernels["left_hbm"]
    offloaded = {t["table"] for t in sharding["tables"] if t["kernel"] != "hbm"}
    assert left and {t["table"] for t in left} == offloaded
    rows = {t["table"]: t["rows"] for t in sharding["tables"]}
    for t in left:  # which tables, in which tier, and what their misses cost
        assert t["kernel"] == "ssd" and rows[t["table"]] >= 1000
        assert 0 < t["cache_load_factor"] < 1
        assert t["pcie_bytes"] > 0
    assert kernels["pcie_bytes_per_batch"] == pytest.approx(sum(t["pcie_bytes"] for t in left))
    assert kernels["basis"]["pcie_s_per_batch_per_gpu"] > 0
    # the drives hold the offloaded tables, within the node's drives
    assert sum(n["drive_bytes"] for n in kernels["tiers"]["per_node"]) > 0
    md = (tmp_path / "big-8" / "plan.md").read_text()
    assert "leave HBM" in md and "every GPU fits" in md
