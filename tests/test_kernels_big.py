"""The 400-table model (traces/big-400.toml: 2 billion rows, 954 GiB of fp32) on a
cluster: every table placed in a tier within its capacity, "fits in HBM" on 64 H100s,
tables leaving HBM on 8. The normal suite runs the model's 400 tables at 1 / 10,000 of
their rows on GPUs of 1 / 10,000 of an H100's memory (the same choice at a ten-thousandth
of the bytes); `pytest -m bench` plans the full model."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from replay.cli import main
from replay.engine.kernels import TINY_ROWS

ROOT = Path(__file__).resolve().parent.parent
BIG = ROOT / "traces" / "big-400.toml"


def _scaled(tmp: Path, factor: int) -> Path:
    """big-400 with every table's rows / factor (at least 2)."""
    text = BIG.read_text()
    text = re.sub(
        r"^rows = (\d+)$",
        lambda m: f"rows = {max(2, int(m.group(1)) // factor)}",
        text,
        flags=re.MULTILINE,
    )
    path = tmp / "big-scaled.toml"
    path.write_text(text)
    return path


def _run(tmp: Path, name: str, spec: Path, system: str, *sets: str) -> dict[str, Any]:
    out = tmp / name
    argv = ["run", "--workload", str(spec), "--batches", "2", "--batch-size", "64"]
    extra = [x for s in sets for x in ("--set", s)]
    assert main([*argv, "-s", system, *extra, "-o", str(out)]) == 0
    return {
        "summary": json.loads((out / "summary.json").read_text()),
        "sharding": json.loads((out / "sharding.json").read_text()),
    }


def test_the_400_table_model_at_a_ten_thousandth(tmp_path: Path) -> None:
    spec = _scaled(tmp_path, 10_000)  # 200 K rows, 98 MiB of fp32
    # an H100's 80 GB / 10,000, and no dense model (the tables' share of a GPU)
    gpu = "cluster.gpu_memory_bytes=8e6"
    sets = (gpu, "model.dense_params=0")
    # 64 GPUs: 64 x 8 MB hold the tables whole
    wide = _run(tmp_path, "wide", spec, "hbm-lru", "cluster.nodes=8", *sets)
    tables = wide["sharding"]["tables"]
    assert len(tables) == 400 and {t["kernel"] for t in tables} == {"hbm"}
    # 8 GPUs: 64 MB do not; under ssd-tbe tables leave HBM for the drives (hbm-lru's
    # uvm-caching: tests/test_kernels.py)
    for system, offload in (("ssd-tbe", "ssd"),):
        got = _run(tmp_path, system, spec, system, "cluster.nodes=1", *sets)
        tables = got["sharding"]["tables"]
        rows = {t["table"]: t["rows"] for t in tables}
        left = [t for t in tables if t["kernel"] != "hbm"]
        assert left and {t["kernel"] for t in left} == {offload}
        assert all(rows[t["table"]] >= TINY_ROWS for t in left)  # tiny tables stay whole
        assert "leave HBM" in got["summary"]["cluster"]["sharding"]["kernels"]
        for r in got["summary"]["ranks"]:
            assert r["hits"] + r["misses"] == r["lookups"]
        if offload == "ssd":
            assert sum(r["drive_read_bytes"] for r in got["summary"]["ranks"]) > 0


@pytest.mark.bench
def test_the_400_table_model_on_64_and_8_h100s() -> None:
    """The full model placed on DGX H100 nodes: 64 H100s hold it in HBM (fits, no cache
    needed) under hbm-lru and ssd-tbe; on 8, ssd-tbe moves tables to the drives and says
    which and what their misses cost, hbm-lru needs more host memory than the preset's
    512 GB DRAM tier (one line) and, with a DGX H100's 2 TB, caches them over it; no tier
    over its capacity anywhere."""
    from replay.engine.kernels import kernels_document
    from replay.engine.placement import resolve_placement, spec_loads
    from replay.engine.systems import resolve_system
    from replay.errors import ConfigError
    from replay.workload.spec import load_spec

    spec = load_spec(BIG)
    dgx = "cluster.preset=dgx-h100"
    loads = spec_loads(spec, resolve_system("hbm-lru", [dgx]))

    tables = SimpleNamespace(  # what resolve_placement reads of a source
        table_names=[t.name for t in spec.tables],
        table_rows=[t.rows for t in spec.tables],
        workload={"embedding_dim": spec.embedding_dim, "batch_size": spec.batch_size},
    )

    l2 = "policy.l2_capacity_bytes=256MiB"
    for system, sets, left in (
        ("hbm-lru", ["cluster.nodes=8"], None),
        ("ssd-tbe", ["cluster.nodes=8", l2], None),
        ("ssd-tbe", ["cluster.nodes=1", l2], "ssd"),
        ("hbm-lru", ["cluster.nodes=1", "tiers.dram.capacity_bytes=2e12"], "uvm-caching"),
    ):
        s = resolve_system(system, [dgx, *sets])
        placed = resolve_placement(s, tables, loads=loads)
        doc = kernels_document(placed, s)
        tiers = doc["tiers"]
        assert len(doc["tables"]) == 400
        assert all(g["hbm_bytes"] <= tiers["hbm_capacity_bytes"] for g in tiers["per_gpu"])
        for n in tiers["per_node"]:
            assert n["host_bytes"] <= tiers["host_capacity_bytes_per_node"]
            assert n["drive_bytes"] <= tiers["drive_capacity_bytes_per_node"]
        if left is None:
            assert doc["line"].startswith("fits in HBM, no cache needed")
        else:
            assert "leave HBM" in doc["line"] and doc["left_hbm"]
            assert {t["kernel"] for t in doc["left_hbm"]} == {left}
            assert doc["pcie_bytes_per_batch"] > 0
    with pytest.raises(ConfigError, match="host memory"):
        resolve_placement(resolve_system("hbm-lru", [dgx, "cluster.nodes=1"]), tables, loads=loads)


def _plan(tmp: Path, name: str, *sets: str, system: str = "ssd-tbe") -> dict[str, Any]:
    """`replay plan` of the whole model (its curves sampled at the rate the plan picks),
    plan.json and sharding.json."""
    out = tmp / name
    argv = ["plan", "--workload", str(BIG), "--system", system, "--cache-budget", "8GiB",
            "--cluster-mtbf", "6h", "--set", "cluster.preset=dgx-h100"]  # fmt: skip
    assert main([*argv, *(x for s in sets for x in ("--set", s)), "-o", str(out)]) == 0
    return {
        "plan": json.loads((out / "plan.json").read_text()),
        "sharding": json.loads((out / "sharding.json").read_text()),
    }


def _every_tier_within(plan: dict[str, Any]) -> None:
    memory = plan["memory"]
    assert all(g["fits"] for g in memory["per_gpu"]) and memory["fits"]
    tiers = plan["cluster"]["kernels"]["tiers"]
    assert all(g["hbm_bytes"] <= tiers["hbm_capacity_bytes"] for g in tiers["per_gpu"])
    for n in tiers["per_node"]:
        assert n["host_bytes"] <= tiers["host_capacity_bytes_per_node"]
        assert n["drive_bytes"] <= tiers["drive_capacity_bytes_per_node"]


@pytest.mark.bench
def test_the_400_table_model_as_a_whole_plan(tmp_path: Path) -> None:
    """`replay plan` of the 400-table, 2-billion-row model under ssd-tbe (docs/memory.md
    gives the command, its time and peak memory): on 64 H100s every table placed whole in
    HBM, each GPU's memory by parts and fitting; on 8 the tables that leave HBM for the
    drives and what their misses cost; no tier over its capacity. Minutes."""
    wide = _plan(tmp_path, "p64", "cluster.nodes=8")
    plan = wide["plan"]
    assert len(wide["sharding"]["tables"]) == 400
    assert {t["kernel"] for t in wide["sharding"]["tables"]} == {"hbm"}
    assert plan["cluster"]["kernels"]["line"].startswith("fits in HBM, no cache needed")
    assert len(plan["memory"]["per_gpu"]) == 64
    _every_tier_within(plan)
    l2 = "policy.l2_capacity_bytes=256MiB"
    narrow = _plan(tmp_path, "p8", "cluster.nodes=1", l2)
    plan = narrow["plan"]
    kernels = plan["cluster"]["kernels"]
    assert len(narrow["sharding"]["tables"]) == 400 and len(plan["memory"]["per_gpu"]) == 8
    assert "leave HBM" in kernels["line"] and kernels["left_hbm"]
    assert {t["kernel"] for t in kernels["left_hbm"]} == {"ssd"}
    assert all(t["pcie_bytes"] > 0 for t in kernels["left_hbm"])
    _every_tier_within(plan)
