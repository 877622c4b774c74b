"""Each checkpoint strategy's costs at one interval, from the engine's per-batch costs and
the curve touched(k) (the models `replay.plan.checkpoint` searches and simulates).

Notation: k = interval_batches, t_b = time_per_batch_s, τ = k t_b (the work between
checkpoints, failure-free and without stalls: the engine's `interval_s`), S = the full
state (rows × row_bytes + dense bytes + `READER_POSITION_BYTES`), W(n) = n / write_bw +
target write latency (`CheckpointContext.write_s`: drives, per-writer caps and
checkpoint.link included), Snap(n) the copy into the snapshot tier
(`CheckpointContext.snapshot_s`), Rd(n) the read back (`CheckpointContext.read_s`),
restart = failures.restart_s. Each strategy's formulas are its engine model
(`replay/checkpoint/NAME.py`) with uniform batches; per checkpoint:

- `sync-full` (torch.save; `FullStateStrategy`): bytes S, stall W(S), durable when the
  write ends (lag W(S) from the start), restore restart + Rd(S), storage 2S (the
  previous one is kept until the new one is durable).
- `fastpersist` (Wang et al., arXiv 2406.13768, 2024): bytes S, written during the next
  batch's forward and backward, fb = t_b − optimizer_fraction × compute: stall
  max(0, W(S) − fb); training resumes at the checkpoint's start and it is durable W(S)
  later; restore and storage as sync-full.
- `checkfreq` (Mohan et al., FAST 2021; `snapshot_persist`): bytes S; the snapshot
  cannot complete before the previous persist, which ended W(S) − τ after this
  checkpoint is ready: stall max(Snap(S), W(S) − τ), durable W(S) after the snapshot
  ends. CheckFreq's own rule for k is replaced by the searched k. With
  `checkpoint.synchronous`: stall W(S), durable at once.
- `check-n-run` (Eisenman et al., NSDI 2022): `replay.plan.check_n_run` (its formulas;
  the modes searched, increment × bit width with intermittent's refresh cycle; explicit
  `--set` modes). The answer is the best mode: `StrategyPlan.mode`, `label`, `modes`.
- `trainingcxl` (Kwon et al., IEEE Micro 2023): an undo log every batch (k = 1, not
  searched), U = touched(1) rows of row_bytes each, moving m = ceil(row_bytes / access) ×
  access bytes; t_log = U m / read_bw + (U m + dense_n) / write_bw + U (read + write
  latency) / parallelism on the rows' tier, dense_n = dense bytes every K =
  dense_interval_batches batches. Stall beside compute: ((K−1) max(0, t_log(0) − c) +
  max(0, t_log(dense) − c)) / K with c = compute_s_per_batch; after the batch
  (`beside_compute = false`): the mean t_log. Durable at the batch end; restore restart +
  (U row_bytes + dense) / read_bw + read latency; storage U row_bytes + 2 dense.
- `none`: nothing written; a failure restarts the run from scratch (cost restart).

Means over the run: `cost_s`, `bytes` and `durable_lag_s` are means over the checkpoints
taken during training (not the baseline); `restore_s` is the mean over the recovery points
(each is the target for about one interval); `storage_bytes` the maximum. Strategies whose
sizes change from one checkpoint to the next (consecutive and one-shot increments) are
walked over the whole run (`horizon_s`; one increment when 0); intermittent over one
full-to-full cycle; the others over one interval.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from replay.checkpoint import STRATEGIES
from replay.checkpoint.base import NS, CheckpointContext
from replay.checkpoint.failures import RecoveryPoints
from replay.checkpoint.trainingcxl import home_tier_name
from replay.errors import ConfigError, opt
from replay.plan import check_n_run as cnr
from replay.system.spec import BYTES_PER_VALUE, SystemSpec, optimizer_bytes_per_row

TouchedRows = Callable[[Any], Any]


@dataclass(frozen=True)
class StrategyCost:
    """What a strategy costs at one interval (means over the run; module docstring)."""

    strategy: str
    interval_s: float  # work between checkpoints: interval_batches × time_per_batch_s
    interval_batches: float
    cost_s: float  # training stall per checkpoint
    bytes: float  # written per checkpoint
    restore_s: float  # restart + restore reads (the chain for incremental ones)
    storage_bytes: float  # capacity kept at once
    durable_lag_s: float  # from the checkpoint's start until it is durable
    rollback_lag_s: float  # from where training resumes until the checkpoint is durable
    restore_bytes: float  # read by a restore (mean over recovery points)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Eval:
    cost: StrategyCost
    period_s: float  # the failure-free timeline the points cover (tiled over the run)
    useful_s: float  # its training time without stalls
    points_of: RecoveryPoints | Callable[[], RecoveryPoints]  # or built on demand

    @property
    def points(self) -> RecoveryPoints:
        p = self.points_of
        return p if isinstance(p, RecoveryPoints) else p()


# -- shared inputs ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Inputs:
    ctx: CheckpointContext
    tb: float  # time per batch
    compute_s: float
    touched: TouchedRows
    horizon_s: float
    dim: int
    cycle: int | None = None  # check-n-run intermittent: fixed increments per full

    @property
    def system(self) -> SystemSpec:
        return self.ctx.system

    @property
    def restart_s(self) -> float:
        return self.system.failures.restart_s

    def touched_at(self, k: Any) -> np.ndarray:
        out = np.asarray(self.touched(np.asarray(k, dtype=np.float64)), dtype=np.float64)
        return np.clip(out, 0.0, float(self.ctx.total_rows))


def _with_strategy(system: SystemSpec, name: str) -> SystemSpec:
    ck = dataclasses.replace(system.checkpoint, strategy=name)
    return dataclasses.replace(system, checkpoint=ck)


def check_applicable(system: SystemSpec, name: str) -> None:
    """ConfigError when strategy `name` cannot run on `system` (its `check_spec`)."""
    if name not in STRATEGIES:
        raise ConfigError(f"unknown strategy {name!r} (known: {', '.join(sorted(STRATEGIES))})")
    if name not in MODELS:
        raise ConfigError(f"strategy {name!r} has no plan model (replay/plan/checkpoint_models.py)")
    ck = dataclasses.replace(system.checkpoint, strategy=name, interval_batches=1, interval_s=0.0)
    STRATEGIES[name].check_spec(dataclasses.replace(system, checkpoint=ck), "system.checkpoint")


def _dim(system: SystemSpec, row_bytes: int, embedding_dim: int) -> int:
    """The embedding dim: given, the system's, or solved from row_bytes and the optimizer."""
    if embedding_dim > 0:
        return embedding_dim
    if system.model.embedding_dim > 0:
        return system.model.embedding_dim
    opt = system.model.optimizer
    per_dim = BYTES_PER_VALUE + optimizer_bytes_per_row(opt, 1) - optimizer_bytes_per_row(opt, 0)
    fixed = optimizer_bytes_per_row(opt, 0)
    dim, rem = divmod(row_bytes - fixed, per_dim)
    if rem or dim <= 0:
        raise ConfigError(
            f"row_bytes {row_bytes} is not a row of optimizer {opt!r}: give embedding_dim"
        )
    return int(dim)


def check_time_per_batch(time_per_batch_s: float) -> None:
    if not (time_per_batch_s > 0 and math.isfinite(time_per_batch_s)):
        raise ConfigError(
            f"{opt('--time-per-batch', 'time_per_batch_s')}: the time per batch must be a "
            f"finite number of seconds above 0, got {time_per_batch_s:g} s"
        )


def model_inputs(
    system: SystemSpec,
    name: str,
    *,
    time_per_batch_s: float,
    total_rows: int,
    row_bytes: int,
    touched_rows: TouchedRows,
    horizon_s: float,
    compute_s_per_batch: float | None,
    batch_size: int,
    embedding_dim: int,
    dense_bytes: int | None,
) -> Inputs:
    check_time_per_batch(time_per_batch_s)
    if total_rows < 1 or row_bytes < 1:
        raise ConfigError("total_rows and row_bytes: must be >= 1")
    if not (horizon_s >= 0 and math.isfinite(horizon_s)):
        raise ConfigError(
            f"the run's training time ({opt('its batches x --time-per-batch', 'horizon_s')}) "
            f"must be a finite number of seconds, got {horizon_s:g} s"
        )
    check_applicable(system, name)
    system = _with_strategy(system, name)
    comp = system.compute
    if compute_s_per_batch is not None:
        compute = float(compute_s_per_batch)
    elif comp.seconds_per_batch > 0:
        compute = comp.seconds_per_batch
    elif comp.flops_per_sample > 0 and comp.flops_per_s > 0 and batch_size > 0:
        compute = comp.flops_per_sample * batch_size / comp.flops_per_s
    else:
        compute = 0.0  # unknown: nothing hides behind compute
    dim = _dim(system, row_bytes, embedding_dim) if name == "check-n-run" else embedding_dim
    ctx = CheckpointContext(
        system=system,
        total_rows=int(total_rows),
        table_rows=np.array([total_rows], dtype=np.int64),
        num_batches=0,
        embedding_dim=dim,
        row_state_bytes=int(row_bytes),
        dense_bytes=(
            BYTES_PER_VALUE * system.model.dense_params if dense_bytes is None else dense_bytes
        ),
    )
    return Inputs(ctx, float(time_per_batch_s), compute, touched_rows, float(horizon_s), dim)


def with_mode(inp: Inputs, mode: cnr.Mode) -> Inputs:  # check-n-run in another mode
    ctx = dataclasses.replace(inp.ctx, system=cnr.with_mode(inp.system, mode))
    return dataclasses.replace(inp, ctx=ctx, cycle=mode.increments_per_full)


# -- per-strategy models ---------------------------------------------------------------------


def _cost(inp: Inputs, k: float, **values: float) -> StrategyCost:
    return StrategyCost(
        strategy=inp.ctx.spec.strategy,
        interval_s=k * inp.tb,
        interval_batches=k,
        **values,
    )


def _one_point(
    inp: Inputs,
    k: float,
    stall: float,
    resume: float,
    durable: float,
    nbytes: float,
    restore_bytes: float,
    restore: float,
    start: float,
    storage: float,
) -> Eval:
    tau = k * inp.tb
    cost = _cost(
        inp, k, cost_s=stall, bytes=nbytes, restore_s=restore, storage_bytes=storage,
        durable_lag_s=durable - start, rollback_lag_s=durable - resume,
        restore_bytes=restore_bytes,
    )  # fmt: skip
    points = RecoveryPoints(np.array([durable]), np.array([resume]), np.array([restore]))
    return Eval(cost, tau + stall, tau, points)


def _full_state(inp: Inputs, k: float, *, overlap: bool) -> Eval:
    ctx = inp.ctx
    tau = k * inp.tb
    state = float(ctx.state_bytes)
    w = ctx.write_s(state)
    restore = ctx.restore_s(state)
    if overlap:  # fastpersist: behind the next batch's forward and backward
        fb = inp.tb - inp.system.compute.optimizer_fraction * inp.compute_s
        stall = max(0.0, w - fb)
        resume = tau
    else:
        stall = w
        resume = tau + w
    return _one_point(inp, k, stall, resume, tau + w, state, state, restore, tau, 2 * state)


def _checkfreq(inp: Inputs, k: float) -> Eval:
    ctx = inp.ctx
    tau = k * inp.tb
    state = float(ctx.state_bytes)
    w = ctx.write_s(state)
    if ctx.spec.synchronous:
        stall, lag = w, 0.0
    else:
        stall, lag = max(ctx.snapshot_s(state), w - tau), w
    restore = ctx.restore_s(state)
    return _one_point(
        inp, k, stall, tau + stall, tau + stall + lag, state, state, restore, tau, 2 * state
    )


def _check_n_run(inp: Inputs, k: float) -> Eval:
    walk = cnr.model(inp, k)
    return Eval(_cost(inp, k, **walk.values), walk.period_s, walk.useful_s, walk.points_of)


def _trainingcxl(inp: Inputs, k: float) -> Eval:
    ctx = inp.ctx
    system = inp.system
    tier = system.tier(home_tier_name(system))
    state = ctx.row_state_bytes
    moved = -(-state // tier.access_bytes) * tier.access_bytes
    dense = float(ctx.dense_bytes)
    every = ctx.spec.dense_interval_batches
    u = float(inp.touched_at(1.0))
    t0 = (
        u * moved / tier.read_bw_bytes_per_s
        + u * moved / tier.write_bw_bytes_per_s
        + u * (tier.read_latency_ns + tier.write_latency_ns) * NS / tier.parallelism
    )
    td = t0 + dense / tier.write_bw_bytes_per_s
    c = inp.compute_s
    if ctx.spec.beside_compute:
        stall = ((every - 1) * max(0.0, t0 - c) + max(0.0, td - c)) / every
    else:
        stall = ((every - 1) * t0 + td) / every
    undo = u * state
    restore_bytes = undo + dense
    restore = inp.restart_s + restore_bytes / tier.read_bw_bytes_per_s + tier.read_latency_ns * NS
    end = inp.tb + stall
    return _one_point(
        inp, 1.0, stall, end, end, undo + dense / every, restore_bytes, restore, 0.0,
        undo + 2 * dense,
    )  # fmt: skip


def _none(inp: Inputs, k: float) -> Eval:
    period = inp.horizon_s if inp.horizon_s > 0 else k * inp.tb
    cost = _cost(
        inp, period / inp.tb, cost_s=0.0, bytes=0.0, restore_s=inp.restart_s, storage_bytes=0.0,
        durable_lag_s=0.0, rollback_lag_s=0.0, restore_bytes=0.0,
    )  # fmt: skip
    return Eval(cost, period, period, RecoveryPoints.empty())


MODELS: dict[str, Callable[[Inputs, float], Eval]] = {
    "sync-full": lambda inp, k: _full_state(inp, k, overlap=False),
    "fastpersist": lambda inp, k: _full_state(inp, k, overlap=True),
    "checkfreq": _checkfreq,
    "check-n-run": _check_n_run,  # replay.plan.check_n_run
    "trainingcxl": _trainingcxl,
    "none": _none,
}
FIXED_INTERVAL = ("trainingcxl", "none")  # not searched: every batch / never


def strategy_cost(
    system: SystemSpec,
    *,
    interval_batches: float,
    time_per_batch_s: float,
    total_rows: int,
    row_bytes: int,
    touched_rows: TouchedRows,
    strategy: str | None = None,
    horizon_s: float = 0.0,
    compute_s_per_batch: float | None = None,
    batch_size: int = 0,
    embedding_dim: int = 0,
    dense_bytes: int | None = None,
    mode: dict[str, Any] | None = None,
) -> StrategyCost:
    """A strategy's costs every `interval_batches` batches (module docstring).

    strategy: default system.checkpoint.strategy; its knobs come from system.checkpoint.
    row_bytes: one row's state (4 × dim + optimizer bytes, `CheckpointContext.row_state_bytes`).
    horizon_s: the run's training time without checkpoint stalls (batches × time per
    batch), for chains that grow (0: one increment).
    compute_s_per_batch: default compute.seconds_per_batch, or FLOPs × batch_size / rate;
    0 when unknown. embedding_dim: for quantized rows (default: the system's, or solved
    from row_bytes). dense_bytes: default 4 × model.dense_params.
    mode: check-n-run's mode as `StrategyPlan.mode` gives it (increment, quantize_bits,
    increments_per_full or full_threshold_fraction; missing: the spec's); ignored for the
    other strategies (their `mode` is None).
    """
    return evaluate(
        system, strategy, interval_batches, mode=mode, time_per_batch_s=time_per_batch_s,
        total_rows=total_rows, row_bytes=row_bytes, touched_rows=touched_rows,
        horizon_s=horizon_s, compute_s_per_batch=compute_s_per_batch, batch_size=batch_size,
        embedding_dim=embedding_dim, dense_bytes=dense_bytes,
    ).cost  # fmt: skip


def evaluate(system: SystemSpec, strategy: str | None, interval_batches: float, **kw: Any) -> Eval:
    name = strategy or system.checkpoint.strategy
    if not (interval_batches > 0 and math.isfinite(interval_batches)):
        raise ConfigError(f"interval_batches: must be finite and > 0, got {interval_batches}")
    mode = kw.pop("mode", None)
    inp = model_inputs(system, name, **kw)
    if name == "check-n-run" and mode is not None:
        inp = with_mode(inp, cnr.mode_from(mode, inp.system))
    return MODELS[name](inp, float(interval_batches))


__all__ = [
    "FIXED_INTERVAL",
    "MODELS",
    "Eval",
    "Inputs",
    "StrategyCost",
    "TouchedRows",
    "check_applicable",
    "check_time_per_batch",
    "evaluate",
    "model_inputs",
    "strategy_cost",
    "with_mode",
]
