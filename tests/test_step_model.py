"""The step model (`replay/engine/step_model.py`, `step_cluster.py`, `step_emo.py`): each
kernel's parts against hand-computed goldens, the three pipeline classes' overlap rules,
their order as a property, a tiny cluster's parts from its replay, bad input, and TorchRec's
EMO benchmark held to the acceptance (order and ratios to the all-HBM run within 10%)."""

from __future__ import annotations

import importlib.util
import json
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.engine import step_emo
from replay.engine.cluster import replay_cluster
from replay.engine.step_cluster import cluster_step, system_kernel
from replay.engine.step_model import (
    PARTS,
    GpuLoad,
    KernelLoad,
    StepConstants,
    gpu_parts,
    kernel_parts,
    locked_inserts,
    overlap,
    step_document,
)
from replay.errors import ConfigError
from replay.system.gpu_memory import PIPELINES
from replay.system.sharding import TableShape, resolve_plan, uniform_plan
from replay.system.spec import apply_overrides, build_system, load_system_data
from replay.trace.stream import BatchRange

C = StepConstants(
    hbm_bw_bytes_per_s=1000.0,
    h2d_bw_bytes_per_s=100.0,
    d2h_bw_bytes_per_s=50.0,
    drive_read_bw_bytes_per_s=10.0,
    drive_write_bw_bytes_per_s=5.0,
    drive_write_amplification=2.0,
    index_bytes=8,
)


# -- each kernel's parts, by hand ----------------------------------------------------------


def test_hbm_kernel_parts() -> None:
    # 10 lookups of 16 B rows, 4 bags of 2 values: (10 x 8 + 10 x 16 + 4 x 2 x 4) / 1000
    p = kernel_parts(KernelLoad("hbm", 10, 4, 2, 16), C)
    assert p["tbe_forward_s"] == pytest.approx(0.272)
    assert p["tbe_backward_s"] == pytest.approx(0.544)  # TorchRec's BWD_COMPUTE_MULTIPLIER
    assert p["uvm_forward_s"] == p["uvm_backward_s"] == p["prefetch_s"] == p["drive_s"] == 0
    weighted = kernel_parts(KernelLoad("hbm", 10, 4, 2, 16, weighted=True), C)
    assert weighted["tbe_forward_s"] == pytest.approx(0.272 * 1.1)


def test_uvm_kernel_parts() -> None:
    # every lookup over PCIe h2d; 6 unique rows read and written back, at the slower way
    p = kernel_parts(KernelLoad("uvm", 10, 4, 2, 16, host_lookups=10, host_rows=6), C)
    assert p["tbe_forward_s"] == pytest.approx((80 + 0 + 32) / 1000)  # ids and outputs only
    assert p["uvm_forward_s"] == pytest.approx(160 / 100)
    assert p["uvm_backward_s"] == pytest.approx(96 / 50)


def test_cached_and_ssd_kernel_parts() -> None:
    # 5 rows filled (80 B h2d: 0.8 s), 3 written back (48 B d2h: 0.96 s): the slower way
    p = kernel_parts(KernelLoad("uvm-caching", 10, 4, 2, 16, fetched_rows=5, evicted_rows=3), C)
    assert p["prefetch_s"] == pytest.approx(0.96)
    assert p["tbe_forward_s"] == pytest.approx(0.272)  # every lookup from the cache
    s = kernel_parts(
        KernelLoad("ssd", 10, 4, 2, 16, fetched_rows=5, drive_read_rows=4, drive_write_rows=1), C
    )
    # 4 x 16 B / 10 + 1 x 16 B x 2 / 5
    assert s["drive_s"] == pytest.approx(6.4 + 6.4)


def test_gpu_parts_add_the_stages_given() -> None:
    load = GpuLoad(
        (KernelLoad("hbm", 10, 4, 2, 16),), input_copy_bytes=300, input_dist_s=0.5,
        dense_forward_s=1.0, dense_backward_s=2.0, allreduce_s=0.25, other_s=0.1,
    )  # fmt: skip
    p = gpu_parts(load, C)
    assert set(p) == set(PARTS)
    assert p["input_copy_s"] == pytest.approx(3.0)
    assert (p["input_dist_s"], p["dense_forward_s"], p["allreduce_s"]) == (0.5, 1.0, 0.25)


# -- the pipelines' overlap ---------------------------------------------------------------


def _parts(**kw: float) -> dict[str, float]:
    out = dict.fromkeys(PARTS, 0.0)
    out.update(kw)
    return out


PARTS_A = _parts(
    input_copy_s=3.0, input_dist_s=2.0, prefetch_s=4.0, tbe_forward_s=1.0,
    output_dist_forward_s=0.5, dense_forward_s=2.0, dense_backward_s=3.0,
    output_dist_backward_s=0.5, tbe_backward_s=2.0, allreduce_s=1.0, other_s=0.5,
)  # fmt: skip
# default stream without fills or input all-to-all: forward 3.5, backward 5.5, other 0.5


def test_base_runs_the_input_all_to_all_and_fills_in_the_forward() -> None:
    o = overlap(PARTS_A, "base")
    assert o["critical_s"] == pytest.approx(3.5 + 5.5 + 0.5 + 2.0 + 4.0)
    # the copy hides behind the backward and the rest (6.0 >= 3.0)
    assert o["hidden_s"]["input_copy_s"] == pytest.approx(3.0)
    assert o["step_time_s"] == pytest.approx(15.5)
    assert o["hidden_s"]["allreduce_s"] == pytest.approx(1.0)  # within the dense backward


def test_sparse_dist_hides_the_input_all_to_all() -> None:
    o = overlap(PARTS_A, "sparse-dist")
    assert o["critical_s"] == pytest.approx(3.5 + 5.5 + 0.5 + 4.0)
    assert o["exposed_s"]["input_dist_s"] == 0.0
    assert o["step_time_s"] == pytest.approx(13.5)
    # an input all-to-all longer than the whole default stream shows its excess
    long = overlap({**PARTS_A, "input_dist_s": 20.0}, "sparse-dist")
    assert long["exposed_s"]["input_dist_s"] == pytest.approx(20.0 - 13.5)
    assert long["step_time_s"] == pytest.approx(20.0)


def test_prefetch_hides_behind_the_dense_backward_only() -> None:
    o = overlap(PARTS_A, "prefetch-sparse-dist")
    # window: dense backward 3.0 + output all-to-all backward 0.5; the TBE backward waits
    assert o["windows_s"]["prefetch_s"] == pytest.approx(3.5)
    assert o["exposed_s"]["prefetch_s"] == pytest.approx(0.5)
    assert o["step_time_s"] == pytest.approx(3.5 + 5.5 + 0.5 + 0.5)
    none = overlap(PARTS_A, "prefetch-sparse-dist", prefetch_overlap=0.0)
    assert none["step_time_s"] == pytest.approx(overlap(PARTS_A, "sparse-dist")["step_time_s"])


def test_allreduce_beyond_the_dense_backward_is_exposed() -> None:
    o = overlap({**PARTS_A, "allreduce_s": 5.0}, "sparse-dist")
    assert o["exposed_s"]["allreduce_s"] == pytest.approx(2.0)
    assert o["step_time_s"] == pytest.approx(13.5 + 2.0)


_part = st.floats(min_value=0.0, max_value=10.0, allow_nan=False)


@settings(max_examples=200, deadline=None)
@given(st.fixed_dictionaries(dict.fromkeys(PARTS, _part)), st.floats(0.0, 1.0))
def test_deeper_pipelines_never_take_longer(parts: dict[str, float], share: float) -> None:
    steps = [overlap(parts, p, share)["step_time_s"] for p in PIPELINES]
    base, sparse, prefetch = steps
    assert prefetch <= sparse + 1e-9 and sparse <= base + 1e-9
    default = parts["dense_forward_s"] + parts["dense_backward_s"] + parts["tbe_forward_s"]
    for s in steps:
        assert default - 1e-9 <= s <= sum(parts.values()) + 1e-9


def test_bad_pipeline_and_kernel_are_config_errors() -> None:
    with pytest.raises(ConfigError, match=r"compute\.pipeline"):
        overlap(PARTS_A, "async")
    with pytest.raises(ConfigError, match="kernel"):
        KernelLoad("nvme", 1, 1, 1, 1)
    with pytest.raises(ConfigError, match="drive read bandwidth"):
        kernel_parts(KernelLoad("ssd", 1, 1, 1, 1, drive_read_rows=1),
                     StepConstants(1.0, 1.0, 1.0))  # fmt: skip


def test_the_document_names_the_slowest_gpu() -> None:
    fast = GpuLoad((KernelLoad("hbm", 10, 4, 2, 16),), dense_forward_s=1.0)
    slow = GpuLoad((KernelLoad("hbm", 100, 4, 2, 16),), dense_forward_s=1.0)
    doc = step_document([fast, slow, fast], C, "sparse-dist", "test")
    assert doc["worst_rank"] == 1
    assert doc["step_time_s"] == max(g["step_time_s"] for g in doc["per_gpu"])
    assert doc["parts_s"] == doc["per_gpu"][1]["parts_s"]
    assert doc["overlap"]["pipeline"] == "sparse-dist" and doc["basis"] == "test"


# -- a tiny cluster, from its replay ------------------------------------------------------


class Tiny:
    """Two tables (A: 4 rows, pooling 1; B: 6 rows, pooling 2), 4 samples, one batch."""

    def __init__(self) -> None:
        self.table_names = ["A", "B"]
        self.table_rows = np.array([4, 6], dtype=np.int64)
        self.num_batches = 1
        self.workload = {"name": "tiny", "batch_size": 4, "embedding_dim": 8}
        self.manifest: dict[str, Any] = {"batch_size": 4}
        self.path = Path("tiny")

    def generated_ranges(self, start: int, stop: int, **_: Any) -> Iterator[BatchRange]:
        keys = np.array([0, 3, 1, 2] + [4 + r for r in (0, 5, 1, 3, 3, 4, 0, 4)], dtype=np.int64)
        empty = np.empty(0, dtype=np.int64)
        yield BatchRange(0, 1, keys, np.array([0, len(keys)]), empty, np.zeros(2, np.int64))


def _system(*sets: str) -> Any:
    data, origin = load_system_data("hbm-lru")
    return build_system(apply_overrides(data, list(sets)), origin)


def test_tiny_cluster_parts_from_the_replay() -> None:
    tables = (TableShape("A", 4, 8), TableShape("B", 6, 8))
    placement = resolve_plan(uniform_plan("table-wise", tables, nodes=1, gpus_per_node=2),
                             tables, nodes=1, gpus_per_node=2)  # fmt: skip
    system = _system("cluster.nodes=1", "cluster.gpus_per_node=2", "policy.name=static",
                     "policy.tier=hbm", "model.dense_params=0")  # fmt: skip
    assert system_kernel(system) == "hbm"
    columns = replay_cluster(Tiny(), system, placement).columns
    assert columns["rank_lookups"].tolist() == [[4, 8]]
    doc = cluster_step(columns, system, placement, 4)
    assert doc["worst_rank"] == 1  # B's 8 lookups
    g0, g1 = (g["parts_s"] for g in doc["per_gpu"])
    hbm, pcie = 3.35e12, 50e9
    # A on rank 0: 4 ids x 8 B + 4 rows x 32 B + 4 bags x 8 x 4 B; B on rank 1: 8, 8, 4
    assert g0["tbe_forward_s"] == pytest.approx((32 + 128 + 128) / hbm)
    assert g1["tbe_forward_s"] == pytest.approx((64 + 256 + 128) / hbm)
    assert g1["tbe_backward_s"] == pytest.approx(2 * 448 / hbm)
    # the local batch's 12 / 2 ids x 8 B and 2 tables x 2 samples x 4 B of lengths
    assert g1["input_copy_s"] == pytest.approx(64 / pcie)
    # [compute]: 3.2e6 FLOPs a sample x 2 local samples / 20e12, forward a third
    assert g1["dense_forward_s"] == pytest.approx(3.2e6 * 2 / 20e12 / 3)
    assert g1["dense_backward_s"] == pytest.approx(3.2e6 * 2 / 20e12 * 2 / 3)
    a2a = float(columns["all_to_all_s"][0])
    phases = g1["input_dist_s"] + g1["output_dist_forward_s"] + g1["output_dist_backward_s"]
    assert phases == pytest.approx(a2a)
    assert g1["output_dist_forward_s"] == pytest.approx(g1["output_dist_backward_s"])
    assert doc["per_gpu"][1]["kernel"] == "hbm" and doc["overlap"]["pipeline"] == "sparse-dist"
    assert g1["prefetch_s"] == g1["uvm_forward_s"] == 0.0
    cached = _system("cluster.nodes=1", "cluster.gpus_per_node=2", "policy.capacity_rows=2")
    doc = cluster_step(replay_cluster(Tiny(), cached, placement).columns, cached, placement, 4)
    assert doc["per_gpu"][0]["kernel"] == "uvm-caching"
    assert doc["parts_s"]["prefetch_s"] > 0  # a cold cache of 2 rows misses


def test_locked_inserts_by_hand() -> None:
    # room for everything: every miss inserted; nothing missed: nothing inserted
    assert locked_inserts(10, 8, 1000) == 8
    assert locked_inserts(10, 0, 5) == 0
    # a cache of one batch, no hits: a batch that filled it leaves the next no slot, that
    # one leaves the next the whole cache: 10 and 0 in turn
    assert locked_inserts(10, 10, 10) == pytest.approx(5)


def test_prefetch_pipeline_leaves_locked_misses_in_host_memory() -> None:
    tables = (TableShape("A", 4, 8), TableShape("B", 6, 8))
    placement = resolve_plan(uniform_plan("table-wise", tables, nodes=1, gpus_per_node=2),
                             tables, nodes=1, gpus_per_node=2)  # fmt: skip
    out = {}
    for pipeline in ("sparse-dist", "prefetch-sparse-dist"):
        system = _system("cluster.nodes=1", "cluster.gpus_per_node=2",
                         "policy.capacity_rows=2", f"compute.pipeline={pipeline}")  # fmt: skip
        result = replay_cluster(Tiny(), system, placement)
        columns = {"rank_updates": result.rank_updates, **result.columns}
        out[pipeline] = cluster_step(columns, system, placement, 4)
    plain, locked = (out[p]["per_gpu"][1]["parts_s"] for p in out)
    assert plain["uvm_forward_s"] == 0.0 and locked["uvm_forward_s"] > 0.0
    assert locked["prefetch_s"] < plain["prefetch_s"]  # fewer rows inserted


# -- TorchRec's EMO benchmark -------------------------------------------------------------


@pytest.fixture(scope="module")
def emo() -> dict[str, dict[str, Any]]:
    return {row["run"]: row for row in step_emo.predictions()}


def test_emo_all_hbm_is_the_one_fitted_run(emo: dict[str, dict[str, Any]]) -> None:
    assert emo["sdd_fused"]["predicted_ms"] == pytest.approx(2855.41)
    # without the fitted overhead the cited constants alone fall short of the step
    assert emo["sdd_fused"]["unfitted_ms"] < emo["sdd_fused"]["measured_ms"]
    assert step_emo.fitted_other_s() > 0


def test_emo_cache_of_0_4_holds_every_miss_and_0_2_does_not() -> None:
    roomy = step_emo.cache_loads(0.4, locked=True)
    tight = step_emo.cache_loads(0.2, locked=True)
    assert roomy["hits"] / roomy["unique"] == pytest.approx(0.4)
    # a few sets' spread: under 3% of the misses at 0.4, 47% at 0.2, where FBGEMM's
    # locked rows leave no room for them
    assert roomy["host_rows"] < 0.03 * (roomy["unique"] - roomy["hits"])
    assert tight["host_rows"] > 0.4 * (tight["unique"] - tight["hits"])
    assert step_emo.cache_loads(0.2, locked=False)["host_rows"] == 0.0


@pytest.mark.parametrize("run", ["prefetch_emo_0.4", "sdd_fused_uvm"])
def test_emo_ratio_within_10_percent(emo: dict[str, dict[str, Any]], run: str) -> None:
    assert abs(emo[run]["ratio_error"]) <= 0.10, emo[run]


def test_emo_cache_of_0_4_within_10_percent_without_the_prefetch_hidden() -> None:
    """PR #4099's trace shows the 0.4 run's prefetch on the critical path: the model
    without any overlap of the prefetch still meets the acceptance there."""
    rows = {r["run"]: r for r in step_emo.predictions(prefetch_overlap=0.0)}
    assert abs(rows["prefetch_emo_0.4"]["ratio_error"]) <= 0.10
    assert rows["prefetch_emo_0.4"]["predicted_ms"] > rows["sdd_fused"]["predicted_ms"]


def test_emo_order_of_hbm_cache_0_4_and_uvm(emo: dict[str, dict[str, Any]]) -> None:
    runs = ["sdd_fused", "prefetch_emo_0.4", "sdd_fused_uvm"]
    assert [emo[r]["predicted_ms"] for r in runs] == sorted(emo[r]["predicted_ms"] for r in runs)
    assert emo["sdd_fused"]["predicted_ms"] < emo["prefetch_emo_0.2"]["predicted_ms"]


@pytest.mark.xfail(
    strict=True,
    reason="known miss (docs/step_time.md): the model prices load factor 0.2 at ~1.10x the "
    "all-HBM step, PR #4099's run measured 1.64x (and slower than UVM without a cache); "
    "PR #4096's run of the same configuration measured 1.18x",
)
def test_emo_cache_of_0_2_ratio_and_order(emo: dict[str, dict[str, Any]]) -> None:
    row = emo["prefetch_emo_0.2"]
    assert abs(row["ratio_error"]) <= 0.10
    assert row["predicted_ms"] > emo["sdd_fused_uvm"]["predicted_ms"]


@pytest.mark.parametrize("overlap", [1.0, 0.0])
def test_emo_cache_of_0_2_within_10_percent_of_its_second_run(overlap: float) -> None:
    """PR #4096 ran the 0.2 configuration too (`step_emo.SECOND_RUN_MS`): against that run
    the model's ratio is within 10%, with the prefetch hidden or not, fitted or not, and
    the four order as measured there (all in HBM, 0.4, 0.2, UVM without a cache)."""
    rows = {r["run"]: r for r in step_emo.predictions(prefetch_overlap=overlap)}
    row = rows["prefetch_emo_0.2"]
    assert row["second_measured_ratio"] == pytest.approx(3362.94 / 2855.41)
    assert abs(row["second_ratio_error"]) <= 0.10, row
    assert abs(row["second_unfitted_ratio_error"]) <= 0.10, row
    order = ["sdd_fused", "prefetch_emo_0.4", "prefetch_emo_0.2", "sdd_fused_uvm"]
    measured = [rows[r].get("second_measured_ms", rows[r]["measured_ms"]) for r in order]
    assert measured == sorted(measured)
    predicted = [rows[r]["predicted_ms"] for r in order]
    assert predicted == sorted(predicted)
    # the two runs of one configuration lie further apart than the tolerance
    assert step_emo.MEASURED_MS["prefetch_emo_0.2"] / row["second_measured_ms"] > 1.3


ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("run", step_emo.RUNS, ids=lambda r: r.name)
def test_emo_setup_is_the_repositorys_emo_specs(run: step_emo.Run) -> None:
    """The closed form's setup and the workload and systems kept in benchmarks/emo and
    traces/emo.toml describe one benchmark."""
    workload = tomllib.loads((ROOT / "traces" / "emo.toml").read_text())
    assert workload["batch_size"] == step_emo.WORLD * step_emo.LOCAL_BATCH
    rows = {t["name"]: t["rows"] for t in workload["tables"]}
    assert len(rows) == step_emo.UNWEIGHTED + step_emo.WEIGHTED + 2
    # large_table written as rows of 256: the same bytes
    assert rows["large_table"] * workload["embedding_dim"] == step_emo.LARGE_ROWS * 512
    system = tomllib.loads((ROOT / "benchmarks" / "emo" / f"{run.name}.toml").read_text())
    assert system["compute"]["pipeline"] == run.pipeline
    assert system["policy"].get("cache_load_factor", 0.0) == run.load_factor
    flops = 3 * step_emo.dense_flops_per_sample()
    assert system["compute"]["flops_per_sample"] == pytest.approx(flops, rel=1e-3)
    assert system["model"]["dense_params"] == pytest.approx(step_emo.dense_params(), rel=1e-6)
    plan = json.loads((ROOT / "benchmarks" / "emo" / f"sharding_{run.name}.json").read_text())
    large = next(t for t in plan["tables"] if t["table"] == "large_table")
    assert large["kernel"] == run.kernel and large["type"] == "row-wise"
    on_zero = [t["table"] for t in plan["tables"] if t["ranks"] == [0]]
    assert len(on_zero) == sum(step_emo._tables(0))


def test_calibration_script_imports_without_a_gpu() -> None:
    path = ROOT / "benchmarks" / "calibrate_step.py"
    spec = importlib.util.spec_from_file_location("calibrate_step", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert callable(module.main)
    assert set(module.PREDICTED) == {"hbm", "uvm", "uvm-caching"}
