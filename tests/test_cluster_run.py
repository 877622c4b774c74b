"""`replay run` and `replay compare` for a cluster (issue 41): the run folder's
sharding.json, ranks and cluster blocks, ranks.parquet, round trips through
`cluster.sharding_file`, determinism, one-GPU equality, and the one-line refusals."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from replay.cli import main

TINY = ["--workload", "tiny", "--batches", "12"]
CLUSTER = ["--set", "cluster.nodes=2", "--set", "cluster.gpus_per_node=2"]
SMALL = ["--set", "policy.capacity_rows=100"]  # per GPU: the caches evict
# tiny's tables: user 20,000 rows, item 5,000, category 300, hour 24


def _run(tmp: Path, name: str, *extra: str, system: str = "hbm-lru") -> Path:
    out = tmp / name
    assert main(["run", *TINY, "-s", system, *extra, "-o", str(out)]) == 0
    return out


def _json(path: Path) -> Any:
    return json.loads(path.read_text())


def _refused(tmp: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> str:
    out = tmp / "refused"
    assert main(["run", *TINY, "-s", "hbm-lru", *extra, "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert not out.exists() and not any(p.name.startswith(".refused") for p in tmp.iterdir())
    return err


@pytest.mark.parametrize("sharding", ["row-wise", "table-wise", "column-wise", "auto"])
def test_a_cluster_run_folder(tmp_path: Path, sharding: str) -> None:
    out = _run(tmp_path, "run", *CLUSTER, *SMALL, "--set", f"cluster.sharding={sharding}")
    names = {p.name for p in out.iterdir()}
    assert {"sharding.json", "ranks.parquet", "summary.json", "batches.parquet"} <= names
    summary = _json(out / "summary.json")
    ranks = summary["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1, 2, 3]
    assert [r["node"] for r in ranks] == [0, 0, 1, 1]
    pol = summary["policy"]
    # the ranks sum to the totals; each rank's lookups are its hits and misses
    assert sum(r["lookups"] for r in ranks) == summary["lookups"]
    assert sum(r["hits"] for r in ranks) == pol["hits"]
    assert sum(r["misses"] for r in ranks) == pol["misses"]
    for r in ranks:
        assert r["hits"] + r["misses"] == r["lookups"]
    cl = summary["cluster"]
    assert (cl["nodes"], cl["gpus_per_node"], cl["world"]) == (2, 2, 4)
    assert cl["sharding"]["sharding"] == sharding
    assert cl["imbalance_max"] >= cl["imbalance_mean"] >= 1.0
    assert pol["evictions"] > 0
    batches = pq.read_table(out / "batches.parquet").to_pydict()
    for name in ("all_to_all_bytes", "all_to_all_s", "step_time_s", "imbalance", "time_s"):
        assert len(batches[name]) == 12
    assert batches["step_time_s"] == batches["time_s"]
    assert (
        sum(batches["trace_lookups"]) == cl["trace_lookups"] == 12 * 64 * 6
    )  # poolings 1, 3, 1, 1
    assert cl["all_to_all_bytes_per_batch"] == pytest.approx(sum(batches["all_to_all_bytes"]) / 12)
    assert summary["time_s"] == pytest.approx(sum(batches["step_time_s"]))
    per_rank = pq.read_table(out / "ranks.parquet").to_pydict()
    assert len(per_rank["rank"]) == 12 * 4
    for r in ranks:
        rows = [i for i, x in enumerate(per_rank["rank"]) if x == r["rank"]]
        assert sum(per_rank["lookups"][i] for i in rows) == r["lookups"]
        assert sum(per_rank["hits"][i] for i in rows) == r["hits"]
    # the all-to-all is TorchRec's collectives (the default), said so, split by phase; each
    # rank's bytes sent sum to the batch's, and what one sends another receives
    assert cl["all_to_all_model"] == "torchrec" and "TorchRec" in cl["all_to_all"]
    phases = [batches[f"all_to_all_{p}_bytes"] for p in ("input", "forward", "backward")]
    for b in range(12):
        assert sum(p[b] for p in phases) == pytest.approx(batches["all_to_all_bytes"][b])
        sent = per_rank["all_to_all_sent_bytes"][b * 4 : b * 4 + 4]
        got = per_rank["all_to_all_received_bytes"][b * 4 : b * 4 + 4]
        assert sum(sent) == pytest.approx(batches["all_to_all_bytes"][b]) == sum(got)
        assert min(phases[0][b], phases[1][b]) > 0  # ids and lengths; embeddings
    assert sum(r["all_to_all_sent_bytes"] for r in ranks) == pytest.approx(
        sum(batches["all_to_all_bytes"])
    )
    step = batches["step_time_s"]
    slowest = [max(per_rank["time_s"][b * 4 : b * 4 + 4]) for b in range(12)]
    for b in range(12):  # the step holds the slowest rank's embedding time and the network
        parts = batches["time_compute_s"][b] + slowest[b] + batches["all_to_all_s"][b]
        assert step[b] == pytest.approx(parts + batches["allreduce_s"][b])


def test_sharding_json_round_trips(tmp_path: Path) -> None:
    first = _run(tmp_path, "auto", *CLUSTER, "--set", "cluster.sharding=auto")
    plan = _json(first / "sharding.json")
    assert set(plan) == {
        "schema_version",
        "tables",
        "source",
        "world_size",
        "gpus_per_node",
        "torchrec_executable",
    }
    assert plan["torchrec_executable"] is True  # auto plans what TorchRec executes
    assert [t["table"] for t in plan["tables"]] == ["user", "item", "category", "hour"]
    again = _run(
        tmp_path, "file", *CLUSTER, "--set", f"cluster.sharding_file={first / 'sharding.json'}"
    )
    assert _json(again / "sharding.json") == plan
    a, b = _json(first / "summary.json"), _json(again / "summary.json")
    for key in ("ranks", "policy", "lookups", "time_s", "energy_j", "tiers", "links"):
        assert a[key] == b[key], key
    assert pq.read_table(first / "batches.parquet").equals(pq.read_table(again / "batches.parquet"))
    assert pq.read_table(first / "ranks.parquet").equals(pq.read_table(again / "ranks.parquet"))


def test_row_wise_blocks_in_rank_order(tmp_path: Path) -> None:
    out = _run(tmp_path, "rw", *CLUSTER, "--set", "cluster.sharding=row-wise")
    plan = _json(out / "sharding.json")
    for t in plan["tables"]:
        assert t["type"] == "row-wise" and t["ranks"] == [0, 1, 2, 3] and "shards" not in t


def test_two_runs_are_byte_identical(tmp_path: Path) -> None:
    a = _run(tmp_path, "a", *CLUSTER, "--set", "cluster.sharding=auto")
    b = _run(tmp_path, "b", *CLUSTER, "--set", "cluster.sharding=auto")
    for name in sorted(p.name for p in a.iterdir()):
        if name == "meta.json":  # wall times
            ma, mb = _json(a / name), _json(b / name)
            ma.pop("timings"), mb.pop("timings")
            assert ma == mb
            continue
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


@pytest.mark.parametrize(
    ("system", "sets"), [("hbm-lru", SMALL), ("hbm-lru", []), ("hbm-tbe-lru", [])]
)
def test_one_gpu_cluster_counts_as_one_gpu(tmp_path: Path, system: str, sets: list[str]) -> None:
    one = _run(tmp_path, "one", *sets, system=system)
    cluster = _run(
        tmp_path,
        "cluster",
        *sets,
        "--set",
        "cluster.nodes=1",
        "--set",
        "cluster.gpus_per_node=1",
        system=system,
    )
    a, b = _json(one / "summary.json"), _json(cluster / "summary.json")
    for key in ("hits", "misses", "fills", "evictions", "writebacks", "bypass"):
        assert a["policy"][key] == b["policy"][key], key
    assert b["ranks"][0]["hits"] == a["policy"]["hits"]
    assert a["lookups"] == b["lookups"] and a["tiers"] == b["tiers"]
    ta, tb = pq.read_table(one / "batches.parquet"), pq.read_table(cluster / "batches.parquet")
    for name in ta.column_names:
        if name not in ("raw_lookups", "time_raw_stall_s"):
            assert ta[name].equals(tb[name]), name


def test_report_reads_a_cluster_run(tmp_path: Path) -> None:
    out = _run(tmp_path, "run", *CLUSTER)
    assert main(["report", str(out), "-o", str(tmp_path / "rep")]) == 0


def test_compare_clusters(tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    argv = ["compare", *TINY, "-s", "hbm-lru,hbm-tbe-lru", *CLUSTER, "-o", str(out)]
    assert main(argv) == 0
    for name in ("hbm-lru", "hbm-tbe-lru"):
        folder = out / name
        assert (folder / "sharding.json").is_file() and (folder / "ranks.parquet").is_file()
        assert len(_json(folder / "summary.json")["ranks"]) == 4


def test_compare_refuses_a_bad_sharding_before_writing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"tables": [{"table": "nope", "type": "table-wise", "ranks": [0]}]}))
    out = tmp_path / "cmp"
    argv = ["compare", *TINY, "-s", "hbm-lru", *CLUSTER, "-o", str(out)]
    assert main([*argv, "--set", f"cluster.sharding_file={plan}"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert not out.exists()


def _plan(tmp: Path, tables: list[dict[str, Any]]) -> str:
    path = tmp / "plan.json"
    path.write_text(json.dumps({"tables": tables}))
    return f"cluster.sharding_file={path}"


def _whole(*names: str, rank: int = 0) -> list[dict[str, Any]]:
    return [{"table": n, "type": "table-wise", "ranks": [rank]} for n in names]


def test_refuses_a_plan_naming_a_missing_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = _plan(tmp_path, _whole("user", "item", "category", "hour", "nope"))
    assert "nope" in _refused(tmp_path, capsys, *CLUSTER, "--set", plan)


def test_refuses_a_rank_outside_the_cluster(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = _plan(tmp_path, [*_whole("user", "item", "category"), *_whole("hour", rank=4)])
    assert "4" in _refused(tmp_path, capsys, *CLUSTER, "--set", plan)


def _row_wise(shards: list[list[int]]) -> list[dict[str, Any]]:
    return [
        {"table": "user", "type": "row-wise", "ranks": [0, 1], "shards": shards},
        *_whole("item", "category", "hour"),
    ]


def test_refuses_overlapping_shards(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = _plan(tmp_path, _row_wise([[0, 12000], [10000, 20000]]))
    assert "overlap" in _refused(tmp_path, capsys, *CLUSTER, "--set", plan)


def test_refuses_uncovered_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = _plan(tmp_path, _row_wise([[0, 9000], [10000, 20000]]))
    err = _refused(tmp_path, capsys, *CLUSTER, "--set", plan)
    assert "9000" in err or "9,000" in err or "cover" in err


def test_refuses_a_shard_over_its_gpu_memory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = _plan(tmp_path, _whole("user", "item", "category", "hour"))
    err = _refused(
        tmp_path, capsys, *CLUSTER, "--set", plan, "--set", "cluster.gpu_memory_bytes=1000"
    )
    assert "more than a GPU's" in err


def test_refuses_zero_gpus(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _refused(tmp_path, capsys, "--set", "cluster.nodes=0", "--set", "cluster.gpus_per_node=2")


def test_refuses_a_cluster_checkpoint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = _refused(
        tmp_path,
        capsys,
        *CLUSTER,
        "--set",
        "checkpoint.strategy=sync-full",
        "--set",
        "checkpoint.interval_batches=4",
    )
    assert "checkpoint.strategy=none" in err and "not modelled" in err
