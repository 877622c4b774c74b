"""Checkpoint plans: Daly's model, per-strategy costs against the engine, whole-run goodput."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest

from replay.engine.replay import replay_trace
from replay.engine.systems import resolve_system
from replay.errors import ConfigError
from replay.plan.checkpoint import (
    cluster_mtbf_s,
    plan_checkpoints,
    plan_strategy,
    strategy_cost,
)
from replay.plan.daly import best_interval, daly_goodput, daly_interval_s, young_interval_s
from replay.trace.stream import iter_batch_ranges
from replay.workload.onthefly import open_workload

BATCHES = 120


def brute_force_tau(cost: Callable[[np.ndarray], np.ndarray], restore: float, mtbf: float) -> float:
    taus = np.geomspace(1e-3 * mtbf, 10 * mtbf, 400_001)
    return float(taus[np.argmax(daly_goodput(taus, cost(taus), restore, mtbf))])


@pytest.mark.parametrize("ratio", [1e-3, 1e-2, 0.1, 0.5])
def test_best_interval_constant_cost_is_dalys_optimum(ratio: float) -> None:
    mtbf, restore = 3600.0, 90.0
    cost = ratio * mtbf
    tau = best_interval(lambda _t: cost, restore, mtbf)
    assert tau == pytest.approx(
        brute_force_tau(lambda t: np.full_like(t, cost), restore, mtbf), rel=1e-4
    )
    # Daly's higher-order estimate of the exact optimum: 0.1% for δ <= M/10, 1% to M/2
    assert daly_interval_s(cost, mtbf) == pytest.approx(tau, rel=1e-3 if ratio <= 0.1 else 1e-2)
    assert young_interval_s(cost, mtbf) == pytest.approx(math.sqrt(2 * cost * mtbf))
    assert daly_interval_s(3 * mtbf, mtbf) == mtbf  # δ >= 2M


def test_best_interval_cost_growing_with_tau() -> None:
    mtbf, restore = 7200.0, 60.0

    def cost(t: float | np.ndarray) -> float | np.ndarray:
        return 5.0 + 40.0 * (1 - np.exp(-np.asarray(t) / 900.0))  # an increment saturating

    tau = best_interval(lambda t: float(cost(t)), restore, mtbf)
    assert tau == pytest.approx(brute_force_tau(cost, restore, mtbf), rel=1e-4)


def test_daly_goodput_closed_form() -> None:
    m, tau, delta, r = 3600.0, 600.0, 30.0, 120.0
    wall = m * math.exp(r / m) * (math.exp((tau + delta) / m) - 1)
    assert daly_goodput(tau, delta, r, m) == pytest.approx(tau / wall, rel=1e-12)
    assert cluster_mtbf_s(86400.0 * 365, 1000) == pytest.approx(31536.0)


# -- against the engine ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny() -> tuple[object, list[np.ndarray]]:
    source = open_workload("tiny", batches=BATCHES)
    rows = []
    for br in iter_batch_ranges(source, with_updates=True):
        for b in range(br.batches):
            lo, hi = br.update_bounds[b], br.update_bounds[b + 1]
            rows.append(np.unique(br.update_keys[lo:hi]))
    return source, rows


def touched_curve(rows: list[np.ndarray], *, prefix: bool) -> Callable[[object], object]:
    """touched(k) by brute force from the update rows, linear between whole k: the mean
    over the aligned windows [j k, (j + 1) k) (the windows consecutive increments and
    per-batch logs see), or (prefix) the window [0, k) (what one-shot increments count)."""
    nb = len(rows)
    values = []
    for k in range(1, nb + 1):
        starts = [0] if prefix else range(0, nb - k + 1, k)
        values.append(np.mean([len(np.unique(np.concatenate(rows[j : j + k]))) for j in starts]))
    ks = np.arange(1, nb + 1)
    return lambda k: np.interp(k, ks, values)


def sets(strategy: str, *knobs: str) -> list[str]:
    """--set overrides: bare knobs are checkpoint.KNOB."""
    full = [k if "." in k.split("=")[0] else f"checkpoint.{k}" for k in knobs]
    return [f"checkpoint.strategy={strategy}", *full]


FP = ("interval_batches=4", "writers=4", "drives=2", "drive_write_bw_bytes_per_s=1e9")
CASES = [
    # (preset, --set overrides, prefix curve, rel tolerance on the stall, skip the first)
    ("hbm-lru", sets("sync-full", "interval_batches=10"), False, 1e-12, False),
    ("hbm-lru", sets("fastpersist", *FP, "compute.optimizer_fraction=0.25"), False, 2e-3, False),
    ("hbm-lru", sets("checkfreq", "interval_batches=6", "writer_bw_bytes_per_s=2e8"),
     False, 2e-2, True),
    ("hbm-lru", sets("checkfreq", "interval_batches=1"), False, 2e-2, True),
    ("hbm-lru", sets("check-n-run", "interval_batches=5", "quantize_bits=4"), False, 1e-4, False),
    ("hbm-lru", sets("check-n-run", "interval_batches=5", "tiers.nvme.write_bw_bytes_per_s=1e8"),
     False, 1e-4, False),
    ("hbm-lru", sets("check-n-run", "increment=one-shot", "interval_batches=8"), True, 1e-9, False),
    ("hbm-lru", sets("check-n-run", "increment=intermittent", "interval_batches=5",
                     "full_threshold_fraction=0.03"), True, 1e-3, False),
    ("pmem-host", sets("check-n-run"), False, 1e-4, False),  # synchronous, every batch
    ("pmem-host", sets("trainingcxl", "dense_interval_batches=4", "beside_compute=false"),
     False, 1e-9, False),
    ("pmem-host", sets("trainingcxl", "dense_interval_batches=4"), False, 1e-3, False),
]  # fmt: skip


@pytest.mark.parametrize(("preset", "overrides", "prefix", "tol", "steady"), CASES)
def test_strategy_cost_matches_the_engine(
    tiny: tuple[object, list[np.ndarray]],
    preset: str,
    overrides: list[str],
    prefix: bool,
    tol: float,
    steady: bool,
) -> None:
    source, rows = tiny
    system = resolve_system(preset, overrides)
    result = replay_trace(source, system)  # type: ignore[arg-type]
    cols, ck = result.columns, result.checkpoints
    base = cols["time_s"] - cols["time_checkpoint_s"]
    cost = strategy_cost(
        system,
        interval_batches=system.checkpoint.interval_batches or 1,
        time_per_batch_s=float(base.mean()),
        total_rows=int(sum(source.table_rows)),  # type: ignore[attr-defined]
        row_bytes=result.summary["row_state_bytes"],
        touched_rows=touched_curve(rows, prefix=prefix),
        horizon_s=float(base.sum()),
        compute_s_per_batch=float(cols["time_compute_s"].mean()),
    )
    taken = ck["batch"] >= 0  # not check-n-run's baseline
    if steady:  # the first checkpoint has no persist before it to wait for
        taken &= ck["index"] > 0
    assert cost.cost_s == pytest.approx(float(ck["stall_s"][taken].mean()), rel=tol)
    # bytes: the same formula wherever the rows are (intermittent: the cycle of the mean curve)
    assert cost.bytes == pytest.approx(float(ck["bytes"][ck["batch"] >= 0].mean()), rel=1e-3)
    assert cost.storage_bytes >= cost.bytes and cost.restore_s > system.failures.restart_s


# -- whole-run plans ---------------------------------------------------------------------------


def big_system(*sets: str) -> object:
    return resolve_system("hbm-lru", ["failures.restart_s=60", *sets])


def test_sync_full_plan_is_dalys_model() -> None:
    system = big_system()
    mtbf = 4 * 3600.0
    kw = dict(
        time_per_batch_s=0.01, total_rows=200_000_000, row_bytes=512,
        touched_rows=lambda k: np.minimum(2e5 * np.asarray(k), 2e8),
        mtbf_s=mtbf, horizon_s=30 * 86400.0,
    )  # fmt: skip
    plan = plan_strategy(system, strategy="sync-full", draws=400, seed=3, **kw)  # type: ignore[arg-type]
    delta, restore = plan.cost_s, plan.restore_s
    assert 10 < delta < 0.1 * mtbf and plan.cost.rollback_lag_s == 0
    assert plan.interval_s == pytest.approx(daly_interval_s(delta, mtbf), rel=0.02)
    assert plan.young_daly_interval_s == pytest.approx(math.sqrt(2 * delta * mtbf))
    model = daly_goodput(plan.interval_s, delta, restore, mtbf)
    assert plan.goodput_model == pytest.approx(model, rel=1e-12)
    assert abs(plan.goodput - model) < 0.005
    assert 0 < plan.goodput_p5 <= plan.goodput < 1
    assert 0 < plan.lost_work_per_training_failure_s < plan.interval_s + delta


def test_plan_checkpoints_ranks_the_applicable_strategies() -> None:
    system = big_system(
        "checkpoint.writers=8",
        "checkpoint.drives=4",
        "checkpoint.drive_write_bw_bytes_per_s=1.25e9",
    )
    kw = dict(
        time_per_batch_s=0.01, total_rows=50_000_000, row_bytes=256,
        touched_rows=lambda k: 5e7 * (1 - np.exp(-np.asarray(k) / 2e4)),
        mtbf_s=3 * 3600.0, horizon_s=7 * 86400.0, draws=100, seed=1,
    )  # fmt: skip
    plans = plan_checkpoints(system, **kw)  # type: ignore[arg-type]
    names = [p.strategy for p in plans]
    assert set(names) == {"sync-full", "fastpersist", "checkfreq", "check-n-run", "none"}
    goodputs = [p.goodput for p in plans]
    assert goodputs == sorted(goodputs, reverse=True)
    assert names[-1] == "none" and plans[-1].goodput < 1e-6
    by = {p.strategy: p for p in plans}
    # no checkpoint over a week at a 3 h MTBF: Daly's form, not the simulator. Attempts
    # fail e^x - 1 times (x = H / M), each losing M - H / (e^x - 1); each 60 s restart is
    # struck e^(R/M) - 1 times, failures that lose no work and are counted apart
    none, x, r = by["none"], 7 * 86400.0 / (3 * 3600.0), 60.0 / (3 * 3600.0)
    assert not none.simulated
    assert none.lost_work_per_training_failure_s == pytest.approx(
        3 * 3600.0 - 7 * 86400.0 / math.expm1(x)
    )
    assert none.failures_during_restore_per_run == pytest.approx(math.expm1(x) * math.expm1(r))
    assert none.failures_per_run == pytest.approx(math.expm1(x) * math.exp(r))
    # overlapped writes stall no longer than a synchronous one at the same interval
    sync = strategy_cost(system, strategy="sync-full", interval_batches=1000, **_cost_kw(kw))  # type: ignore[arg-type]
    for name in ("fastpersist", "checkfreq"):
        assert (
            strategy_cost(system, strategy=name, interval_batches=1000, **_cost_kw(kw)).cost_s
            <= sync.cost_s
        )  # type: ignore[arg-type]
    assert by["sync-full"].goodput <= by["fastpersist"].goodput + 1e-3
    row = by["check-n-run"].to_json()
    assert row["name"] == "check-n-run" and row["interval_s"] == by["check-n-run"].interval_s
    with pytest.raises(ConfigError, match="persistent"):
        plan_strategy(system, strategy="trainingcxl", **kw)  # type: ignore[arg-type]


def _cost_kw(kw: dict[str, object]) -> dict[str, object]:
    keep = ("time_per_batch_s", "total_rows", "row_bytes", "touched_rows", "horizon_s")
    return {k: kw[k] for k in keep}
