"""The 400-table model (traces/big-400.toml: 2 billion rows, 954 GiB of fp32) on a
cluster: every table placed in a tier within its capacity, "fits in HBM" on 64 H100s,
tables leaving HBM on 8. The normal suite runs the model's 400 tables at 1 / 10,000 of
their rows on GPUs of 1 / 10,000 of an H100's memory (the same choice at a ten-thousandth
of the bytes); `pytest -m bench` plans the full model."""

from __future__ import annotations

import json
import re
from pathlib import Path
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
    gpu = "cluster.gpu_memory_bytes=8e6"  # an H100's 80 GB / 10,000
    # 64 GPUs: 64 x 8 MB hold the tables whole
    wide = _run(tmp_path, "wide", spec, "hbm-lru", "cluster.nodes=8", gpu)
    tables = wide["sharding"]["tables"]
    assert len(tables) == 400 and {t["kernel"] for t in tables} == {"hbm"}
    # 8 GPUs: 64 MB do not; under ssd-tbe tables leave HBM for the drives (hbm-lru's
    # uvm-caching: tests/test_kernels.py)
    for system, offload in (("ssd-tbe", "ssd"),):
        got = _run(tmp_path, system, spec, system, "cluster.nodes=1", gpu)
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
def test_the_400_table_model_on_64_and_8_h100s(tmp_path: Path) -> None:
    """The full model planned: 64 H100s hold it in HBM (fits, no cache needed) under
    hbm-lru and ssd-tbe; on 8, ssd-tbe moves tables to the drives and says which and what
    their misses cost; no tier over its capacity anywhere."""
    common = [
        "plan", "--workload", str(BIG), "--batches", "2", "--batch-size", "1024",
        "--cluster-mtbf", "24h", "--set", "cluster.preset=dgx-h100",
    ]  # fmt: skip
    for name, nodes, system, extra in (
        ("ssd8", 1, "ssd-tbe", ["--set", "policy.l2_capacity_bytes=256MiB"]),
        ("lru64", 8, "hbm-lru", []),
    ):
        out = tmp_path / name
        budget = "512MiB" if system == "ssd-tbe" else "8GiB"
        argv = [*common, "-s", system, "--set", f"cluster.nodes={nodes}", *extra]
        assert main([*argv, "--cache-budget", budget, "-o", str(out)]) == 0
        plan = json.loads((out / "plan.json").read_text())
        kernels = plan["cluster"]["kernels"]
        tiers = kernels["tiers"]
        assert all(g["hbm_bytes"] <= tiers["hbm_capacity_bytes"] for g in tiers["per_gpu"])
        assert all(
            n["host_bytes"] <= tiers["host_capacity_bytes_per_node"] for n in tiers["per_node"]
        )
        assert all(
            n["drive_bytes"] <= tiers["drive_capacity_bytes_per_node"] for n in tiers["per_node"]
        )
        sharding = json.loads((out / "sharding.json").read_text())
        assert len(sharding["tables"]) == 400
        if nodes == 8:
            assert kernels["line"].startswith("fits in HBM, no cache needed")
        else:
            assert kernels["left_hbm"] and "leave HBM" in kernels["line"]
