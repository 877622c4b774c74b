"""Checkpoint strategies: increments against polars, closed forms, properties, the CLI."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import replay
from replay.checkpoint.checkfreq import checkfreq_interval
from replay.checkpoint.dirty import MODES, DirtySet, dirty_kernel, reference_increments
from replay.checkpoint.quantize import quantization_error, quantize_rows, quantized_row_bytes
from replay.cli import main
from replay.engine.replay import replay_trace
from replay.engine.systems import resolve_system
from replay.errors import ConfigError
from replay.trace.reader import open_trace

FAST = settings(
    max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return replay.generate("tiny", tmp_path_factory.mktemp("ckpt") / "tiny", batches=40)


def run(trace: Path, *sets: str, system: str = "hbm-lru") -> replay.engine.replay.RunResult:
    return replay_trace(open_trace(trace), resolve_system(system, list(sets)))


def updated_pairs(trace: Path, after: int, upto: int) -> int:
    """Distinct (table, row) pairs updated in batches (after, upto], by polars."""
    frame = pl.scan_parquet(str(trace / "updates" / "*.parquet"))
    return (
        frame.filter((pl.col("batch") > after) & (pl.col("batch") <= upto))
        .select(["table", "row"])
        .unique()
        .collect()
        .height
    )


def total_rows(trace: Path) -> int:
    return int(sum(open_trace(trace).table_rows))


@pytest.mark.parametrize(
    "interval", ["checkpoint.interval_batches=7", "checkpoint.interval_s=4e-5"]
)
def test_consecutive_increments_match_polars(tiny: Path, interval: str) -> None:
    result = run(
        tiny, "checkpoint.strategy=check-n-run", "checkpoint.increment=consecutive", interval
    )
    ck = result.checkpoints
    assert ck["kind"][0] == "full" and ck["batch"][0] == -1 and ck["rows"][0] == total_rows(tiny)
    assert len(ck["batch"]) > 3
    for i in range(1, len(ck["batch"])):
        assert ck["kind"][i] == "incremental"
        assert ck["rows"][i] == updated_pairs(tiny, int(ck["batch"][i - 1]), int(ck["batch"][i]))


def test_one_shot_increments_match_polars(tiny: Path) -> None:
    result = run(
        tiny,
        "checkpoint.strategy=check-n-run",
        "checkpoint.increment=one-shot",
        "checkpoint.interval_batches=9",
    )
    ck = result.checkpoints
    assert list(ck["batch"]) == [-1, 8, 17, 26, 35]
    for i in range(1, len(ck["batch"])):
        assert ck["rows"][i] == updated_pairs(tiny, -1, int(ck["batch"][i]))
        # the full plus this increment
        assert ck["restore_bytes"][i] == ck["bytes"][0] + ck["bytes"][i]


def test_intermittent_writes_a_new_full_past_the_threshold(tiny: Path) -> None:
    result = run(
        tiny,
        "checkpoint.strategy=check-n-run",
        "checkpoint.increment=intermittent",
        "checkpoint.interval_batches=5",
        "checkpoint.full_threshold_fraction=0.03",
    )
    ck = result.checkpoints
    rows = total_rows(tiny)
    last_full = -1
    fulls = 0
    for i in range(1, len(ck["batch"])):
        b = int(ck["batch"][i])
        since = updated_pairs(tiny, last_full, b)
        if since > int(0.03 * rows):
            assert ck["kind"][i] == "full" and ck["rows"][i] == rows
            last_full = b
            fulls += 1
        else:
            assert ck["kind"][i] == "incremental" and ck["rows"][i] == since
    assert fulls >= 1


def test_sync_full_closed_form(tiny: Path) -> None:
    result = run(tiny, "checkpoint.strategy=sync-full", "checkpoint.interval_batches=10")
    system = result.system
    nvme = system.tier("nvme")
    ck = result.checkpoints
    state = result.summary["checkpoint"]["state_bytes"]
    dim = 8  # the tiny preset's
    assert state == total_rows(tiny) * 4 * dim + 4 * system.model.dense_params + 8
    t_write = state / nvme.write_bw_bytes_per_s + nvme.write_latency_ns * 1e-9
    assert list(ck["batch"]) == [9, 19, 29, 39]
    assert (ck["rows"] == total_rows(tiny)).all() and (ck["kind"] == "full").all()
    assert np.allclose(ck["stall_s"], t_write, rtol=1e-12)
    batches = result.columns
    assert np.allclose(batches["time_checkpoint_s"][[9, 19, 29, 39]], t_write, rtol=1e-12)
    assert batches["time_checkpoint_s"].sum() == pytest.approx(4 * t_write, rel=1e-12)
    assert result.summary["checkpoint"]["max_bytes_retained"] == 2 * state
    assert result.summary["checkpoint"]["bytes_written"] == 4 * state
    assert result.summary["tiers"]["nvme"]["write_bytes"] == 4 * state
    # durable when the write ends; training goes on after it
    starts = np.cumsum(batches["time_s"] - batches["time_checkpoint_s"])
    assert ck["start_s"][1] == pytest.approx(starts[19] + t_write, rel=1e-12)


def test_fastpersist_closed_form(tiny: Path) -> None:
    sets = [
        "checkpoint.strategy=fastpersist",
        "checkpoint.interval_batches=4",
        "checkpoint.writers=4",
        "checkpoint.drives=2",
        "checkpoint.drive_write_bw_bytes_per_s=1e9",
        "compute.optimizer_fraction=0.25",
    ]
    result = run(tiny, *sets)
    nvme = result.system.tier("nvme")
    state = result.summary["checkpoint"]["state_bytes"]
    t_write = state / 2e9 + nvme.write_latency_ns * 1e-9
    cols = result.columns
    base = cols["time_s"] - cols["time_checkpoint_s"]
    fwd_bwd = base - 0.25 * cols["time_compute_s"]
    ck = result.checkpoints
    for b, stall in zip(ck["batch"], ck["stall_s"], strict=True):
        window = fwd_bwd[b + 1] if b + 1 < len(base) else 0.0
        assert stall == pytest.approx(max(0.0, t_write - window), rel=1e-12, abs=1e-18)
        assert cols["time_checkpoint_s"][min(b + 1, len(base) - 1)] == pytest.approx(stall)


def test_checkfreq_rule(tiny: Path) -> None:
    result = run(tiny, "checkpoint.strategy=checkfreq", "checkpoint.writer_bw_bytes_per_s=2e8")
    s = result.summary["checkpoint"]
    system = result.system
    state = s["state_bytes"]
    t_full = state / 2e8 + system.tier("nvme").write_latency_ns * 1e-9
    dram = system.tier("dram")
    t_snap = state / dram.write_bw_bytes_per_s + dram.write_latency_ns * 1e-9
    cols = result.columns
    t_iter = float((cols["time_s"] - cols["time_checkpoint_s"]).mean())
    k = max(math.ceil((t_full - t_snap) / t_iter), 1)
    assert t_snap / (k * t_iter) <= 0.05  # the 5% rule does not bind here
    assert s["rule_interval_batches"] == k == checkfreq_interval(t_full, t_snap, t_iter, 0.05)
    assert list(result.checkpoints["batch"]) == list(range(k - 1, 40, k))
    # with the rule's spacing the persist is done in time: each stall is the snapshot
    assert np.allclose(result.checkpoints["stall_s"], t_snap, rtol=1e-9)


def test_checkfreq_overhead_rule_raises_k() -> None:
    # snapshot 1 s, persist 2 s, 0.1 s per batch: the persist rule says k = 10, but the
    # snapshot would be 100% overhead; within 5% needs k = 200
    assert checkfreq_interval(2.0, 1.0, 0.1, 0.05) == 200
    assert checkfreq_interval(2.0, 0.001, 0.1, 0.05) == 20
    assert checkfreq_interval(0.5, 1.0, 0.1, 1.0) == 10


def test_trainingcxl_logs_every_batch(tiny: Path) -> None:
    result = run(
        tiny,
        "checkpoint.strategy=trainingcxl",
        "checkpoint.dense_interval_batches=4",
        system="pmem-host",
    )
    ck = result.checkpoints
    assert (ck["kind"] == "log").all() and list(ck["batch"]) == list(range(40))
    for b in (0, 7, 39):
        assert ck["rows"][b] == updated_pairs(tiny, b - 1, b)
    dense = 4 * result.system.model.dense_params
    assert list(ck["dense_bytes"][:8]) == [0, 0, 0, dense, 0, 0, 0, dense]
    pmem = result.system.tier("pmem")
    cols = result.columns
    u = ck["rows"][5]
    row = result.summary["row_state_bytes"]
    moved = -(-row // pmem.access_bytes) * pmem.access_bytes
    t_log = (
        u * moved / pmem.read_bw_bytes_per_s
        + u * moved / pmem.write_bw_bytes_per_s
        + u * (pmem.read_latency_ns + pmem.write_latency_ns) * 1e-9 / pmem.parallelism
    )
    assert cols["time_checkpoint_s"][5] == pytest.approx(
        max(0.0, t_log - cols["time_compute_s"][5])
    )
    assert result.summary["checkpoint"]["dense_lag_batches_max"] == 3


def test_trainingcxl_needs_persistent_rows() -> None:
    with pytest.raises(ConfigError, match="persistent"):
        resolve_system("hbm-lru", ["checkpoint.strategy=trainingcxl"])


@FAST
@given(
    interval=st.integers(1, 12),
    nvme_bw=st.floats(1e8, 2e10),
    increment=st.sampled_from(["consecutive", "one-shot", "intermittent"]),
    bits=st.sampled_from([0, 2, 4, 8]),
)
def test_overlapped_never_stall_longer_than_sync_full(
    tiny: Path, interval: int, nvme_bw: float, increment: str, bits: int
) -> None:
    common = [
        f"checkpoint.interval_batches={interval}",
        f"tiers.nvme.write_bw_bytes_per_s={nvme_bw}",
    ]
    sync = run(tiny, "checkpoint.strategy=sync-full", *common).summary["checkpoint"]
    full_bytes = sync["state_bytes"]
    for strategy, extra in (
        ("fastpersist", []),
        ("checkfreq", []),
        ("check-n-run", [f"checkpoint.increment={increment}", f"checkpoint.quantize_bits={bits}"]),
    ):
        s = run(tiny, f"checkpoint.strategy={strategy}", *common, *extra).summary["checkpoint"]
        assert s["stall_s"] <= sync["stall_s"] * (1 + 1e-9), strategy
    cnr = run(tiny, "checkpoint.strategy=check-n-run", *common, f"checkpoint.increment={increment}")
    ck = cnr.checkpoints
    assert (ck["bytes"] <= full_bytes).all()
    assert (ck["bytes"][ck["kind"] == "incremental"] <= ck["bytes"][0]).all()


@FAST
@given(
    data=st.data(),
    mode=st.sampled_from(sorted(MODES)),
    threshold=st.integers(0, 12),
)
def test_dirty_kernel_matches_reference(data: st.DataObject, mode: str, threshold: int) -> None:
    keys_space = data.draw(st.integers(1, 200))
    batches = data.draw(
        st.lists(st.lists(st.integers(0, keys_space - 1), max_size=12), min_size=1, max_size=30)
    )
    cuts = sorted(data.draw(st.sets(st.integers(0, len(batches) - 1))))
    expected = reference_increments(batches, cuts, mode, threshold)
    # feed the batches in ranges split at random points: the state carries over
    split = sorted(data.draw(st.sets(st.integers(1, max(1, len(batches) - 1)), max_size=4)))
    edges = [0, *[s for s in split if s < len(batches)], len(batches)]
    dirty = DirtySet(keys_space)
    dirty.touched = dirty.touched[: data.draw(st.integers(1, len(dirty.touched)))]  # overflow too
    got = []
    for lo, hi in itertools.pairwise(edges):
        part = batches[lo:hi]
        keys = np.array([k for b in part for k in b], dtype=np.int64)
        bounds = np.concatenate([[0], np.cumsum([len(b) for b in part])]).astype(np.int64)
        local = np.array([c - lo for c in cuts if lo <= c < hi], dtype=np.int64)
        ob = np.zeros(len(local), np.int64)
        orows = np.zeros(len(local), np.int64)
        ofull = np.zeros(len(local), np.bool_)
        n = dirty_kernel(
            keys,
            bounds,
            local,
            MODES[mode],
            threshold,
            dirty.bitmap,
            dirty.touched,
            dirty.state,
            ob,
            orows,
            ofull,
        )
        got += [(lo + int(ob[i]), int(orows[i]), bool(ofull[i])) for i in range(n)]
    assert got == expected


def test_quantization_bytes_and_error() -> None:
    assert quantized_row_bytes(16, 0) == 64
    assert quantized_row_bytes(16, 4) == 8 + 8
    assert quantized_row_bytes(10, 3) == 4 + 8
    errors = [quantization_error(64, b) for b in (2, 3, 4, 8)]
    assert errors == sorted(errors, reverse=True) and errors[-1] < 0.01 < errors[0]
    assert quantization_error(64, 0) == 0.0
    # a uniform ramp restores to within half a step
    x = np.linspace(-1.0, 1.0, 16)[None, :]
    assert np.abs(quantize_rows(x, 4) - x).max() <= (2.0 / 15) / 2 + 1e-6


def test_failures_summary_and_young_daly(tiny: Path) -> None:
    sets = ["checkpoint.strategy=sync-full", "checkpoint.interval_batches=5"]
    fail = ["failures.mtbf_s=0.01", "failures.restart_s=0.0001", "failures.draws=300"]
    result = run(tiny, *sets, *fail)
    f = result.summary["failures"]
    cost = result.summary["checkpoint"]["cost_s_mean"]
    assert f["young_daly_interval_s"] == pytest.approx(math.sqrt(2 * cost * 0.01))
    assert f["interval_s_used"] == result.summary["checkpoint"]["interval_s_used"]
    assert 0 < f["goodput_p5"] <= f["goodput_mean"] <= 1
    for key in (
        "mtbf_s",
        "draws",
        "lost_work_per_training_failure_s",
        "failures_during_restore",
        "failures_during_restore_per_draw_mean",
        "restore_s_mean",
    ):
        assert key in f
    assert "lost_work_s_mean" not in f  # the average over every failure is gone
    # goodput rises with MTBF and with cheaper checkpoints
    longer = run(tiny, *sets, "failures.mtbf_s=1.0", *fail[1:]).summary["failures"]
    assert longer["goodput_mean"] > f["goodput_mean"]
    cheaper = run(
        tiny,
        *sets,
        *fail,
        "tiers.nvme.write_bw_bytes_per_s=4e10",
        "tiers.nvme.read_bw_bytes_per_s=7e10",
    ).summary["failures"]
    assert cheaper["goodput_mean"] > f["goodput_mean"]
    assert run(tiny, *sets).summary["failures"] is None


def test_cli_run_writes_checkpoints(
    tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    code = main(
        [
            "run", str(tiny), "--system", "hbm-lru", "--out", str(out),
            "--set", "checkpoint.strategy=check-n-run",
            "--set", "checkpoint.interval_batches=10",
            "--set", "checkpoint.quantize_bits=4",
            "--set", "failures.mtbf_s=0.05",
        ]
    )  # fmt: skip
    assert code == 0
    assert "checkpoint check-n-run" in capsys.readouterr().out
    table = pq.read_table(out / "checkpoints.parquet")
    for column in ("index", "kind", "batch", "rows", "bytes", "start_s", "durable_s", "stall_s"):
        assert column in table.column_names
    summary = json.loads((out / "summary.json").read_text())
    ck = summary["checkpoint"]
    for key in ("strategy", "count", "bytes_written", "max_bytes_retained", "stall_s", "overhead"):
        assert key in ck
    assert ck["quantization"]["bits"] == 4 and ck["quantization"]["relative_error_mean"] > 0
    assert summary["failures"]["draws"] == 1000


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (["checkpoint.interval_batches=-1"], "checkpoint.interval_batches"),
        (["checkpoint.strategy=nightly"], "unknown strategy 'nightly'"),
        (
            ["checkpoint.strategy=check-n-run", "checkpoint.increment=sometimes"],
            "checkpoint.increment",
        ),
        (["checkpoint.quantize_bits=5"], "checkpoint.quantize_bits"),
        (["checkpoint.quantize_bits=true"], "checkpoint.quantize_bits"),
        (["failures.mtbf_s=0"], "failures.mtbf_s"),
        (["failures.mtbf_s=-3"], "failures.mtbf_s"),
        (["failures.mtbf_s=nan"], "failures.mtbf_s"),
        (["failures.times_s=[1, -2]"], "failures.times_s"),
        (["checkpoint.strategy=sync-full"], "interval"),
        (
            [
                "checkpoint.strategy=sync-full",
                "checkpoint.interval_batches=2",
                "checkpoint.target=dram",
            ],
            "not persistent",
        ),
        (["checkpoint.target=tape"], "no tier named 'tape'"),
        (["checkpoint.cadence=3"], "unknown key 'cadence'"),
    ],
)
def test_bad_checkpoint_values(
    tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], sets: list[str], message: str
) -> None:
    args = ["run", str(tiny), "--system", "hbm-lru", "--out", str(tmp_path / "r")]
    for s in sets:
        args += ["--set", s]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "r").exists()


@settings(max_examples=12, deadline=None, derandomize=True)
@given(
    strategy=st.sampled_from(["sync-full", "checkfreq", "check-n-run", "fastpersist"]),
    interval=st.integers(2, 10),
    nvme_bw=st.floats(1e8, 1e9),
)
def test_goodput_rises_with_mtbf_and_cheaper_checkpoints(
    tiny: Path, strategy: str, interval: int, nvme_bw: float
) -> None:
    common = [
        f"checkpoint.strategy={strategy}",
        f"checkpoint.interval_batches={interval}",
        "failures.restart_s=0.001",
        "failures.horizon_s=0.5",
        "failures.draws=400",
    ]
    speed = [
        f"tiers.nvme.write_bw_bytes_per_s={nvme_bw}",
        f"tiers.nvme.read_bw_bytes_per_s={nvme_bw}",
    ]
    faster = [
        f"tiers.nvme.write_bw_bytes_per_s={10 * nvme_bw}",
        f"tiers.nvme.read_bw_bytes_per_s={10 * nvme_bw}",
    ]

    def goodput(*sets: str) -> float:
        return run(tiny, *common, *sets).summary["failures"]["goodput_mean"]

    base = goodput(*speed, "failures.mtbf_s=0.01")
    assert goodput(*speed, "failures.mtbf_s=0.1") > base
    assert goodput(*faster, "failures.mtbf_s=0.01") > base


# -- the path a checkpoint's bytes take ------------------------------------------------------


def checkpoint_traffic(
    trace: Path, system: str, *sets: str
) -> tuple[replay.engine.replay.RunResult, dict[str, tuple[int, int]], dict[str, int], float]:
    """A run, and what its checkpoints added to each tier's (read, write) bytes, each link's
    d2h bytes and the dynamic energy: the run minus the same system with no checkpoint."""
    with_ck = run(trace, *sets, system=system)
    without = run(trace, *sets, "checkpoint.strategy=none", system=system).summary
    got = with_ck.summary
    tiers = {
        name: (
            t["read_bytes"] - without["tiers"][name]["read_bytes"],
            t["write_bytes"] - without["tiers"][name]["write_bytes"],
        )
        for name, t in got["tiers"].items()
    }
    links = {
        name: lk["d2h_bytes"] - without["links"][name]["d2h_bytes"]
        for name, lk in got["links"].items()
    }
    energy = got["energy"]["dynamic_j"] - without["energy"]["dynamic_j"]
    return with_ck, tiers, links, energy


def test_host_resident_tables_checkpoint_from_their_tier_not_through_hbm(tiny: Path) -> None:
    # pmem-host: tables in host persistent memory, pooled by the host CPU; Check-N-Run's
    # synchronous increments after every batch and a full baseline before batch 0. The
    # writer reads the rows where they live (pmem) and writes the drive: no HBM (the GPU
    # holds no table), no snapshot buffer (training waits), no link (checkpoint.link unset)
    result, tiers, links, energy = checkpoint_traffic(tiny, "pmem-host")
    ck, ckpt = result.checkpoints, result.summary["checkpoint"]
    row_bytes = ckpt["row_bytes"]  # unquantized: 4 x dim + optimizer state
    assert result.summary["checkpoint"]["snapshot_tier"] == "dram"  # not hbm
    full = ck["kind"] == "full"
    assert ck["batch"][full].tolist() == [-1]
    rows = total_rows(tiny)
    # a full checkpoint reads the table region sequentially; an increment reads whole
    # 256 B XPLines per row (Optane's access size)
    increments = int(ck["rows"][~full].sum())
    pmem_read = rows * row_bytes + increments * (-(-row_bytes // 256) * 256)
    written = int(ck["bytes"].sum())
    assert tiers == {
        "hbm": (0, 0),
        "dram": (0, 0),
        "nvme": (0, written),
        "pmem": (pmem_read, 0),
    }
    assert links == {"pcie": 0}
    system = result.system
    joules = (
        pmem_read * system.tier("pmem").energy_read_pj_per_byte
        + written * system.tier("nvme").energy_write_pj_per_byte
    ) * 1e-12
    assert energy == pytest.approx(joules, rel=1e-9)
    # the tiny trace: 25,324 rows of 32 B, 40 increments of 7,962 rows in all
    assert (rows, row_bytes, increments) == (25_324, 32, 7_962)
    assert (pmem_read, written) == (2_848_640, 79_127_020)
    # with training going on meanwhile (not synchronous) every checkpoint is staged in a
    # host buffer (DRAM), never in HBM
    result, tiers, links, _ = checkpoint_traffic(tiny, "pmem-host", "checkpoint.synchronous=false")
    written = int(result.checkpoints["bytes"].sum())
    assert tiers["hbm"] == (0, 0) and tiers["dram"] == (written, written)
    assert tiers["pmem"] == (pmem_read, 0) and tiers["nvme"] == (0, written)
    # a full checkpoint every batch reads the whole table region each time
    result, tiers, _, _ = checkpoint_traffic(tiny, "pmem-host", "checkpoint.strategy=sync-full")
    count = len(result.checkpoints["index"])
    assert tiers["pmem"] == (count * rows * row_bytes, 0) and tiers["hbm"] == (0, 0)


def test_device_resident_tables_checkpoint_as_before(tiny: Path) -> None:
    # a GPU cache's state leaves the device: staged in host DRAM (the snapshot tier),
    # persisted to the drive; the device-side read is not counted, the backing tier is
    # not read. Unchanged by the host-side path.
    sets = ("checkpoint.strategy=check-n-run", "checkpoint.interval_batches=5")
    result, tiers, links, _ = checkpoint_traffic(tiny, "hbm-lru", *sets)
    written = int(result.checkpoints["bytes"].sum())
    assert tiers == {"hbm": (0, 0), "dram": (written, written), "nvme": (0, written)}
    assert links == {"pcie": 0} and written == 18_095_020
    # synchronous: the increments go straight to the drive, the baseline through DRAM
    result, tiers, _, _ = checkpoint_traffic(tiny, "hbm-lru", *sets, "checkpoint.synchronous=true")
    baseline = int(result.checkpoints["bytes"][0])
    assert tiers["dram"] == (baseline, baseline) == (2_714_316, 2_714_316)
    assert tiers["nvme"] == (0, 18_095_020) and tiers["hbm"] == (0, 0)
    # a full write every batch (torch.save): the drive only, over a link only when set
    result, tiers, links, _ = checkpoint_traffic(tiny, "torch-save")
    written = int(result.checkpoints["bytes"].sum())
    assert tiers == {"hbm": (0, 0), "dram": (0, 0), "nvme": (0, written)}
    result, _, links, _ = checkpoint_traffic(tiny, "torch-save", "checkpoint.link=pcie")
    assert links == {"pcie": written}
