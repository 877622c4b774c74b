"""Per-GPU memory (replay.system.gpu_memory, plan.json's `memory`) and the workload's
`[update] rule` (replay.system.optimizer): goldens by hand, the rule's combination, the
EMO benchmark's measured peaks, and one-line refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.cli import main
from replay.engine.placement import resolve_placement
from replay.engine.replay import replay_trace
from replay.engine.systems import resolve_system
from replay.errors import ConfigError
from replay.plan.memory import check_dense, cluster_memory, one_gpu_block
from replay.system.gpu_memory import (
    PART_NAMES,
    PIPELINE_BATCHES,
    TBE_WORKSPACE_BYTES_PER_ID,
    BatchShape,
    MemorySettings,
    ShardMemory,
    cache_slots,
    gpu_memory,
    shard_hbm,
    shard_host,
    table_budget_bytes,
)
from replay.system.optimizer import combine, optimizer_bytes_per_row, with_workload_rule
from replay.workload.onthefly import GeneratedTrace
from replay.workload.presets import get_preset
from replay.workload.spec import load_spec, spec_from_dict, spec_to_toml

ROOT = Path(__file__).resolve().parents[1]
# TorchRec's benchmark prints MiB / 1000 as "GB" (torchrec/distributed/benchmark/base.py,
# GPUMemoryStats.for_device: max_memory_allocated() // 1024 // 1024, then / 1000)
TORCHREC_GB = 1000 * 2**20
# PR #4099's measured peaks, allocated / reserved
EMO = {
    "sdd_fused": (26.10, 35.25),
    "prefetch_emo_0.4": (20.31, 28.96),
    "sdd_fused_uvm": (16.34, 25.54),
    "prefetch_emo_0.2": (18.34, 27.00),
}


def test_optimizer_state_as_fbgemm_stores_it() -> None:
    assert optimizer_bytes_per_row("sgd", 64) == 0
    assert optimizer_bytes_per_row("rowwise-adagrad", 64) == 4
    assert optimizer_bytes_per_row("adagrad", 64) == 4 * 64
    assert optimizer_bytes_per_row("adam", 64) == 8 * 64


def test_rule_and_system_combine() -> None:
    assert combine("sgd", "sgd") == "sgd"
    assert combine("sgd", "adam") == "adam"  # the workload names it
    assert combine("rowwise-adagrad", "sgd") == "rowwise-adagrad"  # the system names it
    assert combine("adam", "adam") == "adam"
    with pytest.raises(ConfigError, match=r"says 'adagrad'.*says 'adam'"):
        combine("adagrad", "adam")
    system = resolve_system("hbm-lru")
    # sgd: the very same object, so every result written with it is byte-identical
    assert with_workload_rule(system, {"update": {"rule": "sgd"}}) is system
    assert with_workload_rule(system, None) is system
    adam = with_workload_rule(system, {"update": {"rule": "adam"}})
    assert adam.model.optimizer == "adam" and adam.to_dict()["model"]["optimizer"] == "adam"


def test_the_rule_sizes_the_replayed_row_state() -> None:
    base = {"tables": [{"name": "a", "rows": 500}], "batches": 2, "batch_size": 32}
    base["embedding_dim"] = 8
    system = resolve_system("hbm-lru")
    for rule, state in (("sgd", 32), ("rowwise-adagrad", 36), ("adam", 96)):
        spec = spec_from_dict({**base, "update": {"rule": rule}})
        result = replay_trace(GeneratedTrace(spec), system)
        assert result.system.model.optimizer == rule
        assert 4 * 8 + optimizer_bytes_per_row(rule, 8) == state
    spec = spec_from_dict({**base, "update": {"rule": "adam"}})
    other = resolve_system("hbm-lru", ["model.optimizer=rowwise-adagrad"])
    with pytest.raises(ConfigError, match="workload's \\[update\\] rule"):
        replay_trace(GeneratedTrace(spec), other)


def test_cache_as_fbgemm_allocates_it() -> None:
    # uvm-caching: cache_sets = (int(rows x clf) + 31) // 32 (_apply_cache_state)
    s = ShardMemory("t", rows=1000, dim=16, kernel="uvm-caching", cache_load_factor=0.1)
    assert cache_slots(s) == 4 * 32  # int(100) + 31 = 131 // 32 = 4 sets
    hbm = shard_hbm(s, "sgd", prefetch=True)
    slots = 128
    assert hbm["cache_bytes"] == slots * 16 * 4 + 8 * slots + 8 * slots + 4 * slots + 4 * 1000
    assert hbm["weights_bytes"] == 0
    assert shard_hbm(s, "sgd", prefetch=False)["cache_bytes"] == hbm["cache_bytes"] - 4 * slots
    # ssd: max(int(clf x rows / 32), 1) sets, clf 0.2 when unsaid
    ssd = ShardMemory("t", rows=10_000, dim=8, kernel="ssd")
    assert cache_slots(ssd) == int(0.2 * 10_000 / 32) * 32
    assert shard_host(ssd, "sgd") == (0, 10_000 * 8 * 4)  # the store on the drives


def test_optimizer_state_lives_where_fbgemm_puts_it() -> None:
    uvm = ShardMemory("t", rows=100, dim=8, kernel="uvm")
    # row-wise state in HBM beside a UVM table; per-value state in UVM beside its weights
    assert shard_hbm(uvm, "rowwise-adagrad", False)["optimizer_bytes"] == 100 * 4
    assert shard_host(uvm, "rowwise-adagrad") == (100 * 8 * 4, 0)
    assert shard_hbm(uvm, "adam", False)["optimizer_bytes"] == 0
    assert shard_host(uvm, "adam") == (100 * 8 * 4 + 100 * 8 * 8, 0)
    # a cache row holds weights only (the state is split with cacheable=False)
    cached = ShardMemory("t", rows=1000, dim=8, kernel="uvm-caching", cache_load_factor=0.5)
    assert (
        shard_hbm(cached, "adam", False)["cache_bytes"]
        == shard_hbm(cached, "sgd", False)["cache_bytes"]
    )


@settings(max_examples=40, deadline=None)
@given(
    rows=st.lists(st.integers(1, 10**6), min_size=1, max_size=5),
    dim=st.sampled_from([4, 8, 64]),
    kernel=st.sampled_from(["hbm", "uvm-caching", "uvm", "ssd"]),
    optimizer=st.sampled_from(["sgd", "rowwise-adagrad", "adam"]),
    pipeline=st.sampled_from(sorted(PIPELINE_BATCHES)),
    activations=st.integers(0, 10**10),
)
def test_the_parts_add_up(
    rows: list[int], dim: int, kernel: str, optimizer: str, pipeline: str, activations: int
) -> None:
    shards = [ShardMemory(f"t{i}", r, dim, kernel, 0.3) for i, r in enumerate(rows)]
    batch = BatchShape(1000, 10, 2000, 20, 4000, 3000, 500)
    s = MemorySettings(optimizer=optimizer, pipeline=pipeline, activations_bytes=activations)
    g = gpu_memory(0, shards, batch, s)
    assert set(g.parts) == set(PART_NAMES) and min(g.parts.values()) >= 0
    slack = g.parts["allocator_slack_bytes"]
    assert g.allocated_peak_bytes == sum(g.parts.values()) - slack
    assert g.reserved_peak_bytes == g.allocated_peak_bytes + slack
    # the tables' bytes are somewhere: HBM weights, host memory or the drives
    if kernel == "hbm":
        assert g.parts["weights_bytes"] == sum(rows) * dim * 4
    else:
        assert g.parts["weights_bytes"] == 0 and g.host_bytes + g.drive_bytes >= sum(rows) * dim * 4


def test_one_gpu_criteo_kaggle_rowwise_adagrad_golden() -> None:
    spec = get_preset("criteo-kaggle").with_overrides(batch_size=2048)
    workload = spec.to_dict()
    workload["update"]["rule"] = "rowwise-adagrad"
    system = with_workload_rule(resolve_system("hbm-lru"), workload)
    rows = [t.rows for t in spec.tables]
    m = one_gpu_block(system, workload, rows)
    parts = m["per_gpu"][0]["parts"]
    dim = spec.embedding_dim
    # weights and row-wise Adagrad's one fp32 per row: rows x (dim x 4 + 4), exactly
    assert parts["weights_bytes"] + parts["optimizer_bytes"] == sum(rows) * (dim * 4 + 4)
    assert parts["optimizer_bytes"] == sum(rows) * 4
    # TrainPipelineSparseDist: 3 batches on the GPU, int64 ids and int32 lengths
    ids = 2048 * sum(t.pooling for t in spec.tables)
    lengths = 2048 * len(rows)
    raw, dist = PIPELINE_BATCHES["sparse-dist"]
    assert (raw, dist) == (3, 2)
    assert parts["inputs_bytes"] == raw * (ids * 8 + lengths * 4)
    assert parts["tbe_workspace_bytes"] == TBE_WORKSPACE_BYTES_PER_ID * ids
    assert parts["all_to_all_bytes"] == 0 and parts["cache_bytes"] == 0
    assert m["per_gpu"][0]["fits"] and m["worst_rank"] == 0


def test_the_pipelines_hold_different_batches() -> None:
    batch = BatchShape(100, 10, 200, 20, 0, 0)
    got = {
        p: gpu_memory(0, [], batch, MemorySettings(pipeline=p)).parts["inputs_bytes"]
        for p in PIPELINE_BATCHES
    }
    one_raw, one_dist = 100 * 8 + 10 * 4, 200 * 8 + 20 * 4
    assert got["base"] == 2 * one_raw + 1 * one_dist
    assert got["sparse-dist"] == got["prefetch-sparse-dist"] == 3 * one_raw + 2 * one_dist


@pytest.mark.parametrize("config", sorted(EMO))
def test_emo_peaks_within_5_percent_or_1_gb(config: str) -> None:
    spec = load_spec(ROOT / "traces" / "emo.toml")
    system = resolve_system(
        str(ROOT / "benchmarks" / "emo" / f"{config}.toml"),
        [f"cluster.sharding_file={ROOT / 'benchmarks' / 'emo' / f'sharding_{config}.json'}"],
    )
    placed = resolve_placement(system, GeneratedTrace(spec))
    gpus = cluster_memory(system, spec.to_dict(), placed.placement, spec.batch_size)
    worst = max(gpus, key=lambda g: g.reserved_peak_bytes)
    for predicted, measured in zip(
        (worst.allocated_peak_bytes, worst.reserved_peak_bytes), EMO[config], strict=True
    ):
        measured_bytes = measured * TORCHREC_GB
        assert abs(predicted - measured_bytes) <= max(0.05 * measured_bytes, 1e9), config


def _plan(tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
    argv = [
        "plan", "--workload", "tiny", "--batches", "60", "--system", "hbm-lru",
        "--cache-budget", "1MiB", "--draws", "50", "--cluster-mtbf", "6h",
        "--time-per-batch", "200ms", "--out", str(tmp_path / "plan"), "--force", *extra,
    ]  # fmt: skip
    if "--workload" in extra:
        at = argv.index("--workload")
        del argv[at : at + 4]
    code = main(argv)
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "phrase"),
    [
        (("--set", "compute.activations_bytes=-1"), "compute.activations_bytes"),
        (("--set", "compute.pipeline=semi-sync"), "compute.pipeline"),
        (("--set", "model.dense_params=30000000000"), "model.dense_params"),
    ],
)
def test_bad_memory_settings_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: tuple[str, ...], phrase: str
) -> None:
    code, err = _plan(tmp_path, capsys, *extra)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("replay: error: "), err
    assert phrase in lines[0]
    assert not (tmp_path / "plan").exists()


def test_plan_json_memory_with_adam(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = get_preset("tiny").to_dict()
    data["update"]["rule"] = "adam"
    workload = tmp_path / "adam.toml"
    workload.write_text(spec_to_toml(spec_from_dict(data)))
    code, err = _plan(tmp_path, capsys, "--workload", str(workload), "--batches", "60")
    assert code == 0, err
    doc = json.loads((tmp_path / "plan" / "plan.json").read_text())
    m = doc["memory"]
    g = m["per_gpu"][0]
    assert {"rank", "allocated_peak_bytes", "reserved_peak_bytes", "capacity_bytes", "fits"} <= set(
        g
    )
    assert set(g["parts"]) >= {
        "weights_bytes", "optimizer_bytes", "cache_bytes", "inputs_bytes", "all_to_all_bytes",
        "dense_bytes", "activations_bytes", "allocator_slack_bytes",
    }  # fmt: skip
    rows = sum(t.rows for t in get_preset("tiny").tables)
    dim = get_preset("tiny").embedding_dim
    assert g["parts"]["optimizer_bytes"] == rows * 8 * dim  # Adam: two fp32 per value
    assert m["per_node"] == [{"node": 0, "host_bytes": 0, "drive_bytes": 0}]
    assert m["worst_rank"] == 0 and m["basis"]
    assert doc["state_bytes_per_row"] == 4 * dim + 8 * dim  # the checkpoint's row too
    assert "Memory: the GPU peaks at" in (tmp_path / "plan" / "plan.md").read_text()


def test_one_gpu_tables_over_hbm_go_to_host_memory_under_the_budgets_cache() -> None:
    system = resolve_system("hbm-lru")  # an LRU cache in HBM over host DRAM
    rows = [100_000_000, 87_767_399]  # 187.8 M rows of 128 fp32: 96 GB, over 80 GB
    workload = {"batch_size": 2048, "embedding_dim": 128, "tables": [{"name": "a"}, {"name": "b"}]}
    m = one_gpu_block(system, workload, rows, budget_bytes=8 * 2**30)
    g = m["per_gpu"][0]
    assert g["kernels"] == {"uvm-caching": 2} and g["parts"]["weights_bytes"] == 0
    assert m["per_node"][0]["host_bytes"] == sum(rows) * 128 * 4
    clf = 8 * 2**30 / (sum(rows) * 128 * 4)
    assert g["parts"]["cache_bytes"] >= int(sum(rows) * clf) // 32 * 32 * 128 * 4
    assert "load factor" in m["basis"]
    # the same tables at dim 16 fit: whole in HBM, no cache
    small = one_gpu_block(system, {**workload, "embedding_dim": 16}, rows, budget_bytes=8 * 2**30)
    assert small["per_gpu"][0]["kernels"] == {"hbm": 2} and "no cache needed" in small["basis"]
    # a dense model over the GPU's memory is refused before any work
    with pytest.raises(ConfigError, match=r"model\.dense_params"):
        check_dense(resolve_system("hbm-lru", ["model.dense_params=30000000000"]))


def test_a_sharders_budget_is_the_gpu_less_what_it_holds_besides_tables() -> None:
    system = resolve_system(str(ROOT / "benchmarks" / "emo" / "sdd_fused.toml"))
    budget = table_budget_bytes(system, 65536, 72 * 30, 72, 72 * 256)
    # the placed rank 0 holds 13.28 GB of tables and 21.72 GB besides (docs/memory.md)
    besides = system.cluster.gpu_memory_bytes - budget
    assert abs(besides - 21.72 * TORCHREC_GB) < 0.05 * besides
    one = resolve_system("hbm-lru", ["compute.activations_bytes=1GiB"])
    hbm = one.tier("hbm").capacity_bytes  # one GPU: its hbm tier
    assert hbm - 1.8 * 2**30 < table_budget_bytes(one, 256, 26, 26, 26 * 16) < hbm - 2**30


def test_a_run_refuses_a_rule_the_system_contradicts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = get_preset("tiny").to_dict()
    data["update"]["rule"] = "adam"
    data["batches"] = 4
    workload = tmp_path / "adam.toml"
    workload.write_text(spec_to_toml(spec_from_dict(data)))
    out = tmp_path / "run"
    argv = ["run", "--workload", str(workload), "--system", "hbm-lru", "--out", str(out)]
    code = main([*argv, "--set", "model.optimizer=rowwise-adagrad"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "[update] rule says 'adam'" in lines[0], lines
    assert not out.exists()
    assert main(argv) == 0  # the system's sgd yields: the run is Adam's
    config = json.loads((out / "config.json").read_text())
    assert config["system"]["model"]["optimizer"] == "adam"
