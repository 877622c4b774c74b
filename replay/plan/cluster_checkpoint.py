"""Checkpoints and failures of a cluster over a whole run (issue 42).

What a checkpoint writes comes from the placement (`checkpoint_bytes`: each rank's
model-parallel shards, rows x (values + optimizer state); the data-parallel tables, the
dense parameters and the reader position once, split across all ranks); how long writing
and restoring take from `replay.checkpoint.store` (the slowest node's write W through its
drives, NICs and any shared cap; the rank-0 baseline's gather and one writer; the reads
after a node failure). Failures strike nodes independently, each at 1 / node MTBF, so the
job fails at the cluster MTBF M = node MTBF / N; every strategy but `cpr` restarts the
whole job from its last durable checkpoint (restart + the reads, `restore_node_failure_s`).

Per checkpoint at interval τ = k t_b (formulas of `replay.plan.checkpoint`, with the
cluster's W): `sync-full` (every GPU writes its shards, training waits): stall W, durable
when the write ends; `fastpersist` (Wang et al., arXiv 2406.13768): the same write behind
the next batch's forward and backward, stall max(0, W − fb); `checkfreq` (Mohan et al.,
FAST 2021): stall max(snapshot of the largest rank's bytes, W − τ), durable W after the
snapshot; `torch-save`: `sync-full` with the rank-0 baseline's W_0 (`rank0_write_s`), the
row FastPersist's claim is measured against; `none`: `replay.plan.checkpoint`'s. Their
intervals maximise Daly's complete model (`best_interval`), and their goodput (mean, 5th
percentile) is the failure simulator's at that interval (`replay.checkpoint.failures`).

`cpr` (Maeng et al., MLSys 2021) writes as `sync-full` and recovers partially: a failure
rolls back only the failed node's shards; the job goes on from where it was after a restart
and the replacement node's reads (`partial_restore_s`), so failures cost no work but lose
updates. Its goodput rises with τ, so CPR picks τ by trading the checkpoint's stall against
the samples whose updates a failure loses (`replay.checkpoint.cpr`: the objective
δ / (τ + δ) + c PLS(τ), PLS = (τ/2 + W) / (M N), minimal at τ* = sqrt(2 δ M N / c) − δ, at
most the `CPR_PLS_TARGET` bound 2 (target M N − W); `interval_basis` names every input and
which one bound the interval, `interval_capped_at_span` flags an interval that reaches the
run's end). Goodput from `replay.checkpoint.partial`; `lost_updates_rows` per failure =
(1 / N) x the mean over the failure's position of touched(batches rolled back) (the mean
over which node fails, nodes failing alike) and `lost_updates_rows_worst_node` = the
largest node's share x the same (the share of the GPUs' distinct rows,
`cluster.per_gpu[].distinct_rows`; absent without them), and `lost_updates_fraction` =
the PLS the draws saw.

Node-local checkpoints without replicas die with their node: a node failure then restarts
the job from scratch, so the whole-job strategies are planned as `none` and say so.

Claims (`claims`): FastPersist's "up to 116x faster than torch.save" computed at the
paper's setup (DGX-2 nodes, 16 V100 and 8 NVMe drives each, 1 to 8 nodes: up to 128 GPUs;
this plan's state; the torch-save preset's one-writer bandwidth) as W_0 / W; CPR's
checkpoint-related overhead (1 − goodput) of full recovery (`sync-full`) against partial
recovery (`cpr`) at this plan's cluster, beside the paper's 8.2-8.5% -> 0.53-0.68%.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from replay._units import format_duration
from replay.checkpoint.base import READER_POSITION_BYTES, CheckpointContext
from replay.checkpoint.cpr import (
    CPR_LOST_SAMPLE_COST,
    CPR_PLS_TARGET,
    OBJECTIVE,
    cpr_optimum_s,
    cpr_overhead,
    cpr_pls,
    cpr_pls_bound_s,
    node_touched_shares,
)
from replay.checkpoint.failures import (
    RecoveryPoints,
    evaluate_failures,
    goodput_given_failure,
    p_any_failure,
)
from replay.checkpoint.partial import evaluate_partial
from replay.checkpoint.store import StoreModel, node_bytes, store_of
from replay.errors import ConfigError
from replay.plan.checkpoint import NONE_SIMULATED_MAX
from replay.plan.daly import best_interval, daly_goodput, daly_interval_s, young_interval_s
from replay.report.cpr_text import cpr_interval_text, cpr_lost_text
from replay.system.spec import BYTES_PER_VALUE, SystemSpec

NODE_SHARE_BASIS = "each node's GPUs' distinct rows over the run (cluster.per_gpu[].distinct_rows)"
CLUSTER_STRATEGIES = ("sync-full", "fastpersist", "checkfreq", "cpr", "torch-save")
FASTPERSIST_CLAIM = 116.0  # "up to 116x" (Wang et al., arXiv 2406.13768, abstract)
FASTPERSIST_NODES = (1, 2, 4, 8)  # DGX-2 nodes: 16 to 128 V100 GPUs, the paper's range
QUADRATURE = 256  # points of the mean over a failure's position (lost updates)


def checkpoint_bytes(placement: Any) -> dict[str, Any]:
    """Bytes a checkpoint holds per rank: `sharded_per_rank` (model-parallel shards only)
    and `replicated` (each data-parallel table once); plan.json's `cluster.checkpoint_bytes`."""
    from replay.system.sharding import DATA_PARALLEL

    sharded = np.zeros(placement.world, dtype=np.int64)
    replicated = 0
    for s in placement.shards:
        nbytes = int(placement.shard_bytes(s))
        if placement.entry(s.table).type == DATA_PARALLEL:
            replicated += nbytes if s.rank == 0 else 0
        else:
            sharded[s.rank] += nbytes
    return {"sharded_per_rank": [int(b) for b in sharded], "replicated": int(replicated)}


@dataclass(frozen=True)
class ClusterStrategyPlan:
    """One strategy on the cluster at its interval (plan.json's `checkpoint.strategies`)."""

    strategy: str
    label: str
    interval_s: float
    interval_batches: float
    cost_s: float  # stall per checkpoint
    write_s: float  # the slowest node's write (W; W_0 for torch-save)
    bytes: float  # per checkpoint, all nodes
    bytes_per_node: float  # the node that writes the most
    bytes_per_node_mean: float
    replica_bytes: float  # buddy copies sent over the NICs per checkpoint, all nodes
    storage_bytes: float  # kept at once, all nodes (the last two checkpoints, copies included)
    restore_s: float  # restart + reads per failure (what the simulator charges)
    restore_node_failure_s: float | None  # the same; None: no copy survives a node failure
    durable_lag_s: float
    rollback_lag_s: float
    mtbf_s: float
    horizon_s: float
    goodput: float
    goodput_p5: float
    goodput_model: float
    lost_work_per_training_failure_s: float
    restore_per_failure_s: float
    failures_per_run: float
    failures_during_restore_per_run: float
    young_daly_interval_s: float
    daly_interval_s: float
    draws: int
    draws_capped: int
    simulated: bool = True
    recovery: str = "whole job"  # or "partial" (cpr)
    lost_updates_rows: float | None = None  # cpr: rows rolled back per failure (mean)
    # cpr: one failure of the node holding the largest share of the touched rows
    lost_updates_rows_worst_node: float | None = None
    worst_node: int | None = None
    worst_node_share: float | None = None
    node_share_basis: str | None = None
    # cpr: the objective, its inputs and what bound the interval (`replay.checkpoint.cpr`)
    interval_basis: dict[str, Any] | None = None
    interval_capped_at_span: bool = False
    lost_batches_per_failure: float | None = None  # cpr: batches of the failed node's updates
    lost_updates_fraction: float | None = None  # cpr: portion of lost samples over the run
    modes: tuple[dict[str, Any], ...] = ()
    mode: dict[str, Any] | None = None
    caveat: str | None = None
    # the chance the run sees a failure and the mean goodput of the runs that do
    # (`replay.plan.checkpoint.StrategyPlan`)
    p_any_failure: float = 0.0
    goodput_given_failure: float | None = None

    @property
    def name(self) -> str:
        return self.strategy

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["name"] = self.strategy
        out["modes"] = []
        return out

    to_json = to_dict


@dataclass
class ClusterCheckpoints:
    """The cluster's checkpoint answers: strategies best first, curves, notes, claims."""

    strategies: list[Any]
    curves: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    claims: list[dict[str, Any]] = field(default_factory=list)
    store: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class _Setup:
    system: SystemSpec
    model: StoreModel
    b: np.ndarray  # bytes per node
    rank_max: float  # the largest rank's bytes (its snapshot)
    tb: float
    fb: float  # forward + backward of a batch (fastpersist's window)
    horizon_s: float
    restart_s: float
    mtbf_s: float
    nodes: int
    touched: Callable[[Any], Any]
    ctx: CheckpointContext | None  # for checkfreq's snapshot; None: no snapshot tier
    rank0: StoreModel  # the rank-0 baseline's: one writer at the system's cap or torch-save's
    ranks: np.ndarray  # bytes per GPU (each writes its own: a per-writer cap's busiest)
    node_shares: list[float] | None = None  # each node's share of the touched rows
    torch_save_bw: float = 0.0  # torch-save's one writer (the claims' baseline too)


def _setup(system: SystemSpec, cluster_doc: dict[str, Any], mtbf_s: float, **common: Any) -> _Setup:
    c = system.cluster
    assert c is not None
    ck = system.checkpoint
    model = StoreModel(c, store_of(ck.store), ck.replicas, ck.writer_bw_bytes_per_s)
    cb = cluster_doc["checkpoint_bytes"]
    dense = BYTES_PER_VALUE * system.model.dense_params + READER_POSITION_BYTES
    replicated = float(cb["replicated"]) + dense
    sharded = np.asarray(cb["sharded_per_rank"], dtype=np.float64)
    b = node_bytes(sharded, replicated, c)
    ranks = sharded + replicated / c.world_size  # each GPU writes its own (its writer's cap)
    tb = float(common["time_per_batch_s"])
    compute = common.get("compute_s_per_batch")
    if compute is None:
        compute = system.compute.seconds_per_batch
    fb = tb - system.compute.optimizer_fraction * float(compute)
    ctx = None
    torch_save = torch_save_writer_bw()  # resolved once per plan: the claims read it too
    one_writer = ck.writer_bw_bytes_per_s or torch_save
    from replay.checkpoint.base import snapshot_tier_name

    if snapshot_tier_name(system):
        ctx = CheckpointContext(system, 0, np.zeros(0, np.int64), 0, 0, 0, 0)
    return _Setup(
        system, model, b, float(np.max(ranks, initial=0.0)), tb,
        fb, float(common["horizon_s"]), system.failures.restart_s, float(mtbf_s), c.nodes,
        common["touched_rows"], ctx,
        dataclasses.replace(model, writer_bw_bytes_per_s=one_writer), ranks,
        node_touched_shares(cluster_doc.get("per_gpu"), c.nodes), torch_save,
    )  # fmt: skip


def _per_checkpoint(s: _Setup, name: str, tau: float) -> dict[str, float]:
    """stall, resume, durable (positions from the period's start), write and restore."""
    m = s.model
    w = s.rank0.rank0_write_s(s.b) if name == "torch-save" else m.write_s(s.b, s.ranks)
    reads = m.restore_node_failure_s(s.b)
    if name == "torch-save" and reads is not None:  # node 0 reads it all and scatters
        total = float(s.b.sum())
        d = m.drive_read_bw if m.local else m.store_read_bw(1)
        scatter = (total - float(s.b[0])) / m.nic_bw if s.nodes > 1 else 0.0
        reads = total / d + scatter + m.store.latency_s
    if name == "fastpersist":
        stall, resume = max(0.0, w - s.fb), tau
        durable = tau + w
    elif name == "checkfreq":
        snap = s.ctx.snapshot_s(s.rank_max) if s.ctx is not None else 0.0
        stall = max(snap, w - tau)
        resume, durable = tau + stall, tau + stall + w
    else:  # sync-full, torch-save, cpr
        stall, resume, durable = w, tau + w, tau + w
    restore = s.restart_s + (reads or 0.0)
    return {"stall": stall, "resume": resume, "durable": durable, "write": w,
            "reads": -1.0 if reads is None else reads, "restore": restore}  # fmt: skip


def _interval(s: _Setup, name: str) -> float:
    """Whole batches between checkpoints maximising Daly's complete model."""

    def cost(t: float) -> float:
        return _per_checkpoint(s, name, t)["stall"]

    def restore(t: float) -> float:
        p = _per_checkpoint(s, name, t)
        return p["restore"] + p["durable"] - p["resume"]

    tau = best_interval(cost, restore, s.mtbf_s, lo_s=s.tb, hi_s=max(s.horizon_s, s.tb))
    ks = {max(1.0, math.floor(tau / s.tb)), max(1.0, math.ceil(tau / s.tb))}
    return max(sorted(ks), key=lambda k: _daly(s, name, k * s.tb))


def _daly(s: _Setup, name: str, tau: float) -> float:
    p = _per_checkpoint(s, name, tau)
    lag = p["durable"] - p["resume"]
    return float(daly_goodput(tau, p["stall"], p["restore"] + lag, s.mtbf_s))


def _entry(
    s: _Setup, name: str, k: float, stats: Any, goodput_model: float, **extra: Any
) -> ClusterStrategyPlan:
    tau = k * s.tb
    p = _per_checkpoint(s, name, tau)
    total = float(s.b.sum())
    copies = s.model.replicas * total if s.model.local else 0.0
    label = {"torch-save": "torch-save (rank-0 baseline)",
             "cpr": "cpr (partial recovery: loses updates, not time)"}.get(name, name)  # fmt: skip
    return ClusterStrategyPlan(
        strategy=name, label=label, interval_s=tau, interval_batches=k, cost_s=p["stall"],
        write_s=p["write"], bytes=total,
        bytes_per_node=float(np.max(s.b)), bytes_per_node_mean=float(np.mean(s.b)),
        replica_bytes=copies, storage_bytes=2 * (total + copies), restore_s=p["restore"],
        restore_node_failure_s=None if p["reads"] < 0 else p["restore"],
        durable_lag_s=p["durable"] - tau, rollback_lag_s=p["durable"] - p["resume"],
        mtbf_s=s.mtbf_s, horizon_s=s.horizon_s, goodput=stats.goodput_mean,
        goodput_p5=stats.goodput_p5, goodput_model=goodput_model,
        lost_work_per_training_failure_s=stats.lost_work_per_training_failure_s,
        restore_per_failure_s=stats.restore_s_mean, failures_per_run=stats.failures_per_draw_mean,
        failures_during_restore_per_run=stats.failures_during_restore_per_draw_mean,
        young_daly_interval_s=young_interval_s(p["stall"], s.mtbf_s),
        daly_interval_s=daly_interval_s(p["stall"], s.mtbf_s), draws=stats.draws,
        draws_capped=stats.draws_capped, **extra,
    )  # fmt: skip


def _whole_job(s: _Setup, name: str, draws: int, seed: int) -> ClusterStrategyPlan:
    k = _interval(s, name)
    tau = k * s.tb
    p = _per_checkpoint(s, name, tau)
    period = tau + p["stall"]
    points = RecoveryPoints(np.array([p["durable"]]), np.array([p["resume"]]),
                            np.array([p["restore"]]))  # fmt: skip
    kw: dict[str, Any] = dict(
        scratch_restore_s=s.restart_s, horizon_s=s.horizon_s * period / tau, mtbf_s=s.mtbf_s,
        draws=draws, seed=seed,
    )  # fmt: skip
    stats = evaluate_failures(period, tau, points, **kw)
    p_any = p_any_failure(kw["horizon_s"], s.mtbf_s)
    given = goodput_given_failure(
        stats.goodput_mean, tau / period, p_any,
        lambda: evaluate_failures(period, tau, points, given_failure=True, **kw).goodput_mean,
    )  # fmt: skip
    return _entry(
        s, name, k, stats, _daly(s, name, tau), p_any_failure=p_any, goodput_given_failure=given
    )


def _none(s: _Setup, draws: int, seed: int) -> ClusterStrategyPlan:
    """`none`: no checkpoint, every failure restarts the run. As `replay.plan.checkpoint`
    answers it, so one GPU and a cluster agree on the same run: the failure simulator's
    draws up to horizon / MTBF = `NONE_SIMULATED_MAX` (its mean and 5th percentile are
    of runs, most of them without a failure where failures are rare), Daly's form with
    τ = the run beyond (the simulator would spend ~1,000 × horizon / MTBF failures per
    draw reaching its cap)."""
    h, m, r = s.horizon_s, s.mtbf_s, s.restart_s
    g = float(daly_goodput(h, 0.0, r, m))
    p_any = p_any_failure(h, m)
    answer = _none_simulated(h, m, r, draws, seed, p_any) if h / m <= NONE_SIMULATED_MAX else (
        _none_daly(h, m, r, g, p_any)
    )  # fmt: skip
    return ClusterStrategyPlan(
        strategy="none", label="none", interval_s=h, interval_batches=h / s.tb, cost_s=0.0,
        write_s=0.0, bytes=0.0, bytes_per_node=0.0, bytes_per_node_mean=0.0, replica_bytes=0.0,
        storage_bytes=0.0, restore_s=r, restore_node_failure_s=r, durable_lag_s=0.0,
        rollback_lag_s=0.0, mtbf_s=m, horizon_s=h, goodput_model=g, young_daly_interval_s=0.0,
        daly_interval_s=0.0, recovery="scratch", p_any_failure=p_any, **answer,
    )  # fmt: skip


def _none_simulated(
    h: float, m: float, r: float, draws: int, seed: int, p_any: float
) -> dict[str, Any]:
    """`none`'s goodput and failures from the failure simulator's draws of the run."""
    points = RecoveryPoints.empty()
    kw: dict[str, Any] = dict(scratch_restore_s=r, horizon_s=h, mtbf_s=m, draws=draws, seed=seed)
    stats = evaluate_failures(h, h, points, **kw)
    return dict(
        goodput=stats.goodput_mean, goodput_p5=stats.goodput_p5,
        lost_work_per_training_failure_s=stats.lost_work_per_training_failure_s,
        restore_per_failure_s=stats.restore_s_mean, failures_per_run=stats.failures_per_draw_mean,
        failures_during_restore_per_run=stats.failures_during_restore_per_draw_mean,
        draws=stats.draws, draws_capped=stats.draws_capped, simulated=True,
        goodput_given_failure=goodput_given_failure(
            stats.goodput_mean, 1.0, p_any,
            lambda: evaluate_failures(h, h, points, given_failure=True, **kw).goodput_mean,
        ),
    )  # fmt: skip


def _none_daly(h: float, m: float, r: float, g: float, p_any: float) -> dict[str, Any]:
    """`none`'s goodput (Daly's form with τ = the run) and expected failures: attempts
    fail e^(H/M) − 1 times before one lasts H, each restart is struck e^(R/M) − 1 times."""
    x = h / m
    training = math.expm1(x) if x < 709.0 else math.inf
    during = training * (math.expm1(r / m) if r / m < 709.0 else math.inf)
    return dict(
        goodput=g, goodput_p5=g,
        lost_work_per_training_failure_s=m - h / training if training > 0 else 0.0,
        restore_per_failure_s=r, failures_per_run=training + during,
        failures_during_restore_per_run=during, draws=0, draws_capped=0, simulated=False,
        # Daly's form is the expected wall time H / g; of the runs with a failure it is
        # (H / g - (1 - p) H) / p, and their goodput H over that
        goodput_given_failure=(
            p_any / (1.0 / g - (1.0 - p_any)) if g > 0 and h < 709 * m else None
        ),
    )  # fmt: skip


def _cpr_interval(s: _Setup, notes: list[str]) -> tuple[float, dict[str, Any]]:
    """CPR's interval in whole batches: the objective's optimum, at most the PLS bound
    (`replay.checkpoint.cpr`), and the basis plan.json names it by."""
    p = _per_checkpoint(s, "cpr", s.tb)
    w, stall = p["write"], p["stall"]
    best = cpr_optimum_s(stall, s.mtbf_s, s.nodes)
    bound = cpr_pls_bound_s(w, s.mtbf_s, s.nodes, CPR_PLS_TARGET)
    tau = min(best, bound)
    most = max(1, math.floor(s.horizon_s / s.tb))
    ks = {min(max(1, f(tau / s.tb)), most) for f in (math.floor, math.ceil)}
    ks = {k for k in ks if k * s.tb <= bound} or {min(ks)}

    def overhead(k: float) -> float:
        return cpr_overhead(k * s.tb, stall, w, s.mtbf_s, s.nodes)

    k = float(min(sorted(ks), key=overhead))
    if bound < s.tb:
        binding = "one batch"
        notes.append(
            f"cpr: no interval keeps the portion of lost samples under {CPR_PLS_TARGET:.0%} "
            f"(the write alone, {format_duration(w)}, exceeds it at this MTBF): planned every "
            "batch"
        )
    elif k >= most:
        binding = "span"
    else:
        binding = "pls_target" if bound < best else "optimum"
    capped = binding == "span"
    if capped:
        notes.append(
            f"cpr: its interval reaches the run's end (the objective's optimum "
            f"{format_duration(best)}, the {CPR_PLS_TARGET:.0%} lost-samples bound "
            f"{format_duration(max(bound, 0.0))}, the run {format_duration(s.horizon_s)}): no "
            "checkpoint falls inside the run, so its figures are a run without checkpoints, "
            "not an interval to use"
        )
    basis = {
        "objective": OBJECTIVE,
        "stall_s": stall,
        "write_s": w,
        "cluster_mtbf_s": s.mtbf_s,
        "nodes": s.nodes,
        "lost_sample_cost": CPR_LOST_SAMPLE_COST,
        "pls_target": CPR_PLS_TARGET,
        "optimum_s": best,
        "pls_bound_s": bound,
        "binding": binding,
        "capped_at_span": capped,
        "stall_share": stall / (k * s.tb + stall),
        "pls": cpr_pls(k * s.tb, w, s.mtbf_s, s.nodes),
        "overhead": overhead(k),
    }
    return k, basis


def _cpr(s: _Setup, draws: int, seed: int, notes: list[str]) -> ClusterStrategyPlan:
    k, basis = _cpr_interval(s, notes)
    tau = k * s.tb
    p = _per_checkpoint(s, "cpr", tau)
    reads = s.model.partial_restore_s(s.b)
    restore = s.restart_s + (reads or 0.0)
    period = tau + p["stall"]
    kw: dict[str, Any] = dict(
        restore_s=restore, horizon_s=s.horizon_s * period / tau, mtbf_s=s.mtbf_s, draws=draws,
        seed=seed,
    )  # fmt: skip
    stats = evaluate_partial(period, tau, **kw)
    p_any = p_any_failure(kw["horizon_s"], s.mtbf_s)
    given = goodput_given_failure(
        stats.goodput_mean, tau / period, p_any,
        lambda: evaluate_partial(period, tau, given_failure=True, **kw).goodput_mean,
    )  # fmt: skip
    # a failure at a uniform position of the period rolls the node back x of training
    # (x in [0, τ)) or τ (during the write, not yet durable)
    x = (np.arange(QUADRATURE) + 0.5) / QUADRATURE * tau
    rows = np.asarray(s.touched(np.maximum(x / s.tb, 1e-9)), dtype=np.float64)
    rows_w = float(np.asarray(s.touched(k), dtype=np.float64))
    touched = (float(rows.mean()) * tau + rows_w * p["stall"]) / period
    # nodes fail alike: the mean over the failed node is 1 / N of the touched rows; the
    # node with the largest share loses that share of them
    lost_rows = touched / s.nodes
    shares = s.node_shares
    worst = None if shares is None else int(np.argmax(shares))
    lost_worst = None if shares is None else touched * float(np.max(shares))
    if reads is None:
        lost_rows = float("nan")
        lost_worst = None
        notes.append(
            "cpr: node-local checkpoints without replicas die with their node: a failed node's "
            "shards restart from their initial values (every update lost); set "
            "checkpoint.replicas=1 or checkpoint.store.kind=shared-fs"
        )
    roll = (tau * tau / 2 + p["stall"] * tau) / period  # training rolled back per failure
    training_failures = stats.failures_per_draw_mean - stats.failures_during_restore_per_draw_mean
    pls = training_failures * (roll / s.tb) / (s.horizon_s / s.tb) / s.nodes
    model = tau / period * math.exp(-restore / s.mtbf_s) if s.mtbf_s > 0 else 0.0
    entry = _entry(
        s, "cpr", k, stats, model, recovery="partial",
        lost_updates_rows=None if math.isnan(lost_rows) else lost_rows,
        lost_updates_rows_worst_node=lost_worst, worst_node=worst,
        worst_node_share=None if shares is None else float(np.max(shares)),
        node_share_basis=NODE_SHARE_BASIS if shares is not None else None,
        lost_batches_per_failure=roll / s.tb, lost_updates_fraction=pls,
        p_any_failure=p_any, goodput_given_failure=given, interval_basis=basis,
        interval_capped_at_span=bool(basis["capped_at_span"]),
    )  # fmt: skip
    return dataclasses.replace(
        entry, restore_s=restore, rollback_lag_s=0.0,
        restore_node_failure_s=None if reads is None else restore,
    )  # fmt: skip


def plan_cluster_checkpoints(
    system: SystemSpec,
    cluster_doc: dict[str, Any],
    *,
    mtbf_s: float,
    draws: int = 1000,
    seed: int = 0,
    none_plan: Any = None,
    **common: Any,
) -> ClusterCheckpoints:
    """Every cluster strategy at its interval, best mean goodput first (module docstring).
    `common`: `replay.plan.checkpoint.plan_strategy`'s inputs (time_per_batch_s,
    horizon_s, touched_rows, ...); `none_plan`: the `none` strategy's plan, as one GPU's."""
    if not (mtbf_s > 0 and math.isfinite(mtbf_s)):
        raise ConfigError(
            f"the cluster MTBF must be a finite number of seconds above 0, got {mtbf_s:g}"
        )
    s = _setup(system, cluster_doc, mtbf_s, **common)
    notes: list[str] = []
    plans: list[Any] = [_none(s, draws, seed) if none_plan is None else none_plan]
    curves: dict[str, Any] = {}
    for name in CLUSTER_STRATEGIES:
        if name == "checkfreq" and s.ctx is None:
            continue
        if name == "cpr":
            plans.append(_cpr(s, draws, seed, notes))
            curves[name] = _cpr_curve(s, plans[-1])
            continue
        if not s.model.survives_node_failure:
            continue
        plan = _whole_job(s, name, draws, seed)
        plans.append(plan)
        curves[name] = _curve(s, name, plan.interval_s)
    if not s.model.survives_node_failure:
        notes.append(
            "node-local checkpoints without replicas die with their node: every node failure "
            "restarts the job from scratch, so sync-full, fastpersist, checkfreq and torch-save "
            "are not planned (they would cost stalls and save nothing); set "
            "checkpoint.replicas=1 (a buddy copy) or checkpoint.store.kind=shared-fs"
        )
    plans.sort(key=lambda p: (-p.goodput, p.cost_s, p.strategy))
    out = ClusterCheckpoints(plans, curves, notes)
    out.store = store_document(s)
    out.claims = claims(s, plans)
    return out


def store_document(s: _Setup) -> dict[str, Any]:
    m = s.model
    return {
        **dataclasses.asdict(m.store),
        "replicas": m.replicas,
        "nodes": s.nodes,
        "node_mtbf_s": s.mtbf_s * s.nodes,
        "bytes_per_node": [float(x) for x in s.b],
        "survives_node_failure": m.survives_node_failure,
        "write_s": m.write_s(s.b, s.ranks),
        "rank0_write_s": s.rank0.rank0_write_s(s.b),
        "cpr_pls_target": CPR_PLS_TARGET,
        "cpr_lost_sample_cost": CPR_LOST_SAMPLE_COST,
    }


def _curve(s: _Setup, name: str, tau: float, points: int = 41) -> dict[str, list[float]] | None:
    lo, hi = max(s.tb, tau / 30), min(s.horizon_s, tau * 30)
    if hi <= lo:
        return None
    taus = np.geomspace(lo, hi, points)
    return {"interval_s": [float(t) for t in taus],
            "goodput": [_daly(s, name, float(t)) for t in taus]}  # fmt: skip


def _cpr_curve(s: _Setup, plan: ClusterStrategyPlan, points: int = 41) -> dict[str, Any] | None:
    """cpr's model goodput against τ: τ / (τ + stall) x e^(−R / M) (no lost work)."""
    tau = plan.interval_s
    lo, hi = max(s.tb, tau / 30), min(s.horizon_s, tau * 30)
    if hi <= lo:
        return None
    taus = np.geomspace(lo, hi, points)
    g = taus / (taus + plan.cost_s) * math.exp(-plan.restore_s / s.mtbf_s)
    return {"interval_s": [float(t) for t in taus], "goodput": [float(x) for x in g]}


def fastpersist_speedup(total_bytes: float, nodes: int, torch_save_writer_bw: float) -> float:
    """W_0 / W on `nodes` DGX-2 nodes (the paper's testbed: clusters.toml's dgx-2) for a
    state of `total_bytes` spread evenly over the GPUs, node-local drives, no replicas."""
    from replay.system.spec import CheckpointStoreSpec, build_cluster

    c = build_cluster({"preset": "dgx-2", "nodes": nodes})
    b = np.full(c.nodes, float(total_bytes) / c.nodes)
    fast = StoreModel(c, CheckpointStoreSpec()).write_s(b)
    base = StoreModel(c, CheckpointStoreSpec(), 0, torch_save_writer_bw).rank0_write_s(b)
    return base / fast


def torch_save_writer_bw() -> float:
    """The one writer's bandwidth of the torch-save preset (its stated ASSUMPTION)."""
    from replay.engine.systems import resolve_system

    return float(resolve_system("torch-save").checkpoint.writer_bw_bytes_per_s)


def claims(s: _Setup, plans: list[Any]) -> list[dict[str, Any]]:
    """plan.json's `claims`: FastPersist's speedup at its setup, CPR's overhead reduction."""

    writer = s.torch_save_bw
    total = float(s.b.sum())
    by_nodes = {n: fastpersist_speedup(total, n, writer) for n in FASTPERSIST_NODES}
    best = max(by_nodes.values())
    out = [
        {
            "claim": "FastPersist: checkpoint creation up to 116x faster than torch.save",
            "source": "Wang et al., FastPersist, arXiv 2406.13768 (2024), abstract; DGX-2 "
            "nodes with V100-32GB GPUs, up to 128 GPUs",
            "model": f"{best:.0f}× at {max(FASTPERSIST_NODES)} DGX-2 nodes "
            f"({16 * max(FASTPERSIST_NODES)} GPUs): "
            + ", ".join(f"{n * 16} GPUs {v:.1f}×" for n, v in by_nodes.items()),
            "value": best,
            "paper_value": FASTPERSIST_CLAIM,
            "by_gpus": {str(n * 16): v for n, v in by_nodes.items()},
            "assumptions": [
                f"this plan's checkpoint ({total / 1e9:.3g} GB) spread evenly over the GPUs "
                "(the paper's models are dense transformers)",
                "FastPersist: every GPU writes its share at once to its node's 8 NVMe drives "
                "(clusters.toml dgx-2: 2 GB/s each, an ASSUMPTION), no overlap counted",
                f"torch.save: gathered over node 0's 8 x 100 Gb/s NICs, then one writer at "
                f"{writer / 1e9:g} GB/s (the torch-save preset's ASSUMPTION)",
                "peak bandwidths, no protocol overhead",
            ],
        }
    ]
    named = {p.strategy: p for p in plans}
    full, cpr = named.get("sync-full"), named.get("cpr")
    if full is not None and cpr is not None:
        out.append(
            {
                "claim": "CPR: checkpoint-related overhead falls from 8.2-8.5% to 0.53-0.68% "
                "against full recovery (Criteo Terabyte)",
                "source": "Maeng et al., CPR, MLSys 2021 (arXiv 2011.02999), abstract",
                "model": f"{1 - full.goodput:.2%} (sync-full, full recovery) -> "
                f"{1 - cpr.goodput:.2%} (cpr, partial recovery) at this plan's cluster "
                f"({s.nodes} nodes, cluster MTBF {format_duration(s.mtbf_s)})",
                "value": [1 - full.goodput, 1 - cpr.goodput],
                "paper_value": [[0.082, 0.085], [0.0053, 0.0068]],
                "assumptions": [
                    "overhead = 1 - goodput (stalls, lost work, restarts and restores)",
                    cpr_interval_text(cpr),
                    cpr_lost_text(cpr),
                    "CPR's MFU/SSU variants (saving the most used rows more often) are not "
                    "modelled: the plan's cpr is CPR's vanilla partial recovery",
                ],
            }
        )
    return out


__all__ = [
    "CLUSTER_STRATEGIES",
    "CPR_PLS_TARGET",
    "NODE_SHARE_BASIS",
    "ClusterCheckpoints",
    "ClusterStrategyPlan",
    "checkpoint_bytes",
    "claims",
    "fastpersist_speedup",
    "plan_cluster_checkpoints",
]
