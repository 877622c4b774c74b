"""Bench (pytest -m bench): a 16-node plan of the 24-day Criteo Terabyte run answers its
cluster checkpoints, their claims and within 60 s (issue 42)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from replay.cli import main

pytestmark = pytest.mark.bench


def test_a_16_node_terabyte_plan_in_a_minute(tmp_path: Path) -> None:
    out = tmp_path / "pg"
    argv = [
        "plan", "--workload", "criteo-terabyte", "--batches", "2135484",
        "--system", "fastpersist", "--set", "cluster.preset=dgx-h100",
        "--set", "cluster.nodes=16", "--set", "checkpoint.replicas=1",
        "--cache-budget", "8GiB", "--node-mtbf", "30d", "--time-per-batch", "1s",
        "--out", str(out),
    ]  # fmt: skip
    start = time.perf_counter()
    assert main(argv) == 0
    wall = time.perf_counter() - start
    doc = json.loads((out / "plan.json").read_text())
    names = {s["name"]: s for s in doc["checkpoint"]["strategies"]}
    for name in ("sync-full", "fastpersist", "cpr", "torch-save"):
        s = names[name]
        assert s["write_s"] > 0 and s["bytes_per_node"] > 0
        assert s["restore_node_failure_s"] is not None
    assert names["cpr"]["lost_updates_rows"] > 0
    fastpersist = doc["claims"][0]
    assert fastpersist["value"] > 1 and "needs" not in fastpersist["model"]
    assert wall <= 60.0, f"{wall:.1f} s"
