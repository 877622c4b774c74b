"""`replay run` of a `chunk` (PatrickStar) system on a cluster: the one-GPU chunk replay
plus PatrickStar's collectives (`replay.engine.patrickstar_run`)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from replay.cli import main

RUN = ["run", "--workload", "tiny", "--batches", "40", "--system", "chunk"]


def _run(tmp_path: Path, name: str, *sets: str) -> Path:
    out = tmp_path / name
    argv = [*RUN, *[a for s in sets for a in ("--set", s)], "--out", str(out)]
    assert main(argv) == 0
    return out


def test_a_chunk_cluster_adds_the_collectives_to_one_gpus_replay(tmp_path: Path) -> None:
    one = _run(tmp_path, "one")
    many = _run(tmp_path, "many", "cluster.nodes=2", "cluster.gpus_per_node=4")
    a = pq.read_table(one / "batches.parquet").to_pydict()
    b = pq.read_table(many / "batches.parquet").to_pydict()
    for name in ("lookups", "hits", "misses", "fills", "time_embedding_s"):
        assert a[name] == b[name], name
    comm = np.asarray(b["patrickstar_comm_s"])
    assert (comm > 0).all()
    np.testing.assert_allclose(b["time_s"], np.asarray(a["time_s"]) + comm, rtol=1e-12)
    summary = json.loads((many / "summary.json").read_text())
    ps = summary["patrickstar"]
    assert ps["world"] == 8 and ps["all_gather_bytes_per_step"] > 0
    assert ps["claim"]["source"]
    assert summary["cluster"]["world"] == 8
    assert sum(r["lookups"] for r in summary["ranks"]) == summary["lookups"]
    sharding = json.loads((many / "sharding.json").read_text())
    assert {t["type"] for t in sharding["tables"]} == {"data-parallel"}
    assert all(t["ranks"] == list(range(8)) for t in sharding["tables"])
    assert "PatrickStar" in sharding["source"]


def test_one_gpu_of_a_cluster_communicates_nothing(tmp_path: Path) -> None:
    one = _run(tmp_path, "one")
    single = _run(tmp_path, "single", "cluster.nodes=1", "cluster.gpus_per_node=1")
    a = pq.read_table(one / "batches.parquet").to_pydict()
    b = pq.read_table(single / "batches.parquet").to_pydict()
    assert not any(b["patrickstar_comm_s"])
    assert a["time_s"] == b["time_s"]


def test_the_report_sets_the_volume_beside_the_papers_claim(tmp_path: Path) -> None:
    many = _run(tmp_path, "many", "cluster.nodes=1", "cluster.gpus_per_node=4")
    assert main(["report", str(many), "--out", str(tmp_path / "r")]) == 0
    text = (tmp_path / "r" / "report.md").read_text()
    row = next(line for line in text.splitlines() if "2108.05818" in line)
    assert "on 4 GPUs" in row and "data parallelism" in row
