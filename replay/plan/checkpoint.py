"""Checkpoint costs at any interval and goodput over a whole training run (issue 25).

The engine replays a few hundred batches; a run lasts days, with a cluster MTBF of hours
and checkpoints every few to tens of minutes. The plan takes the per-batch costs from
the engine's steady state (`time_per_batch_s`, `compute_s_per_batch`) and what grows
with time from the curve touched(k): the expected distinct rows updated within k
consecutive batches (a callable, monotone; `replay.analysis` measures it).

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

Whole-run goodput: Daly's complete model (`replay.plan.daly`) with δ = cost_s and
R = restore_s + rollback_lag_s, where rollback_lag_s is the time from the position
training resumes at to the checkpoint being durable (0 for sync-full; W for the overlapped
ones): a failure in that window rolls back one checkpoint further, which adds exactly that
much re-execution to every recovery of Daly's renewal argument. The interval maximising it
is searched by `best_interval` (k >= 1 batch, rounded to whole batches), then the failure
simulator (`replay.checkpoint.failures`) draws failures on the recovery points of one
period at that interval, tiled over `horizon_s` (the whole run for consecutive and one-shot
chains), for the mean and 5th-percentile goodput, the lost work per failure that strikes
training and the failures that strike a restore (they lose no work; counted apart).
`horizon_s` is the run's training time without stalls (its batches × t_b); the simulated
failure-free timeline adds the stalls (horizon × period / useful time).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from replay.checkpoint import STRATEGIES
from replay.checkpoint.base import NS, CheckpointContext, snapshot_tier_name
from replay.checkpoint.failures import (
    RecoveryPoints,
    evaluate_failures,
    goodput_given_failure,
    p_any_failure,
)
from replay.checkpoint.trainingcxl import home_tier_name
from replay.errors import ConfigError, opt
from replay.plan import check_n_run as cnr
from replay.plan.check_n_run import SEARCH_MAX_CHECKPOINTS
from replay.plan.daly import (
    MtbfTooShort,
    best_interval,
    daly_goodput,
    daly_interval_s,
    least_mtbf,
    mtbf_too_short,
    progress_bound,
    young_interval_s,
)
from replay.system.spec import BYTES_PER_VALUE, SystemSpec, optimizer_bytes_per_row

TouchedRows = Callable[[Any], Any]
NONE_SIMULATED_MAX = 10.0  # `none`: simulate up to horizon / MTBF = this, else Daly's form
# the simulator stops a draw at this many times the run's training time; below its inverse
# in goodput a strategy makes no progress (`plan_checkpoints` refuses such an MTBF)
MAX_WALL_FACTOR = 1000.0


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
class _Eval:
    cost: StrategyCost
    period_s: float  # the failure-free timeline the points cover (tiled over the run)
    useful_s: float  # its training time without stalls
    points_of: RecoveryPoints | Callable[[], RecoveryPoints]  # or built on demand

    @property
    def points(self) -> RecoveryPoints:
        p = self.points_of
        return p if isinstance(p, RecoveryPoints) else p()


@dataclass(frozen=True)
class StrategyPlan:
    """A strategy at the interval that maximises the whole run's expected goodput."""

    strategy: str
    cost: StrategyCost  # at the chosen interval
    mtbf_s: float
    horizon_s: float
    goodput: float  # mean over the failure draws
    goodput_p5: float  # 5th percentile over the draws
    goodput_model: float  # Daly's complete model at the chosen interval
    lost_work_per_training_failure_s: float  # mean work lost per failure of training
    restore_per_failure_s: float  # mean restore wall time per failure (simulated)
    failures_per_run: float  # every failure: training's and restores'
    failures_during_restore_per_run: float  # of those, the ones that struck a restore
    young_daly_interval_s: float  # √(2 cost M), at the chosen interval's cost
    daly_interval_s: float  # Daly's higher-order optimum at that cost
    draws: int
    draws_capped: int
    simulated: bool  # False: `none` with horizon ≫ MTBF, from Daly's form
    # check-n-run: the chosen mode's knobs (`check_n_run.knobs`), and every mode evaluated
    # (`modes`, best first: the answer is modes[0], or with `plan_strategy`'s default
    # the mode the system's spec gives); other strategies: None and ()
    mode: dict[str, Any] | None = None
    label: str = ""  # "check-n-run (intermittent, 4-bit)"; other strategies: the name
    caveat: str | None = None  # the chosen bit width's accuracy caveat (its source)
    quantization_error: float = 0.0  # mean relative L2 error of a restored row
    modes: tuple[dict[str, Any], ...] = ()
    # the chance the run sees a failure, 1 - exp(-H / M) (H its failure-free wall time),
    # and the mean goodput of the runs that do (`replay.checkpoint.failures`): what to read
    # when failures are rare, as the mean and its 5th percentile are then a run without one
    p_any_failure: float = 0.0
    goodput_given_failure: float | None = None

    def __post_init__(self) -> None:
        if not self.label:
            object.__setattr__(self, "label", self.strategy)

    @property
    def interval_s(self) -> float:
        return self.cost.interval_s

    @property
    def interval_batches(self) -> float:
        return self.cost.interval_batches

    @property
    def cost_s(self) -> float:
        return self.cost.cost_s

    @property
    def bytes(self) -> float:
        return self.cost.bytes

    @property
    def restore_s(self) -> float:
        return self.cost.restore_s

    @property
    def storage_bytes(self) -> float:
        return self.cost.storage_bytes

    @property
    def durable_lag_s(self) -> float:
        return self.cost.durable_lag_s

    @property
    def name(self) -> str:
        return self.strategy

    def to_json(self) -> dict[str, Any]:
        """Flat: the plan's fields, the cost's fields, and `name` (= strategy); `modes` a
        list of dicts (`check_n_run.ranked`: its ROW_FIELDS and `spec`)."""
        out = {k: v for k, v in dataclasses.asdict(self).items() if k != "cost"}
        out.update(self.cost.to_json())
        out["name"] = self.strategy
        out["modes"] = [dict(m) for m in self.modes]
        return out

    to_dict = to_json


def cluster_mtbf_s(node_mtbf_s: float, nodes: int) -> float:
    """MTBF of a job over `nodes` independent nodes that each fail at 1 / node_mtbf_s."""
    if not node_mtbf_s > 0 or nodes < 1:
        raise ConfigError(
            f"cluster_mtbf_s: need node_mtbf_s > 0 and nodes >= 1, got {node_mtbf_s}, {nodes}"
        )
    return node_mtbf_s / nodes


# -- shared inputs ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Inputs:
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
        raise ConfigError(f"strategy {name!r} has no plan model (replay/plan/checkpoint.py)")
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


def _check_time_per_batch(time_per_batch_s: float) -> None:
    if not (time_per_batch_s > 0 and math.isfinite(time_per_batch_s)):
        raise ConfigError(
            f"{opt('--time-per-batch', 'time_per_batch_s')}: the time per batch must be a "
            f"finite number of seconds above 0, got {time_per_batch_s:g} s"
        )


def _inputs(
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
) -> _Inputs:
    _check_time_per_batch(time_per_batch_s)
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
    return _Inputs(ctx, float(time_per_batch_s), compute, touched_rows, float(horizon_s), dim)


def _with_mode(inp: _Inputs, mode: cnr.Mode) -> _Inputs:  # check-n-run in another mode
    ctx = dataclasses.replace(inp.ctx, system=cnr.with_mode(inp.system, mode))
    return dataclasses.replace(inp, ctx=ctx, cycle=mode.increments_per_full)


# -- per-strategy models ---------------------------------------------------------------------


def _cost(inp: _Inputs, k: float, **values: float) -> StrategyCost:
    return StrategyCost(
        strategy=inp.ctx.spec.strategy,
        interval_s=k * inp.tb,
        interval_batches=k,
        **values,
    )


def _one_point(
    inp: _Inputs,
    k: float,
    stall: float,
    resume: float,
    durable: float,
    nbytes: float,
    restore_bytes: float,
    restore: float,
    start: float,
    storage: float,
) -> _Eval:
    tau = k * inp.tb
    cost = _cost(
        inp, k, cost_s=stall, bytes=nbytes, restore_s=restore, storage_bytes=storage,
        durable_lag_s=durable - start, rollback_lag_s=durable - resume,
        restore_bytes=restore_bytes,
    )  # fmt: skip
    points = RecoveryPoints(np.array([durable]), np.array([resume]), np.array([restore]))
    return _Eval(cost, tau + stall, tau, points)


def _full_state(inp: _Inputs, k: float, *, overlap: bool) -> _Eval:
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


def _checkfreq(inp: _Inputs, k: float) -> _Eval:
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


def _check_n_run(inp: _Inputs, k: float) -> _Eval:
    walk = cnr.model(inp, k)
    return _Eval(_cost(inp, k, **walk.values), walk.period_s, walk.useful_s, walk.points_of)


def _trainingcxl(inp: _Inputs, k: float) -> _Eval:
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


def _none(inp: _Inputs, k: float) -> _Eval:
    period = inp.horizon_s if inp.horizon_s > 0 else k * inp.tb
    cost = _cost(
        inp, period / inp.tb, cost_s=0.0, bytes=0.0, restore_s=inp.restart_s, storage_bytes=0.0,
        durable_lag_s=0.0, rollback_lag_s=0.0, restore_bytes=0.0,
    )  # fmt: skip
    return _Eval(cost, period, period, RecoveryPoints.empty())


MODELS: dict[str, Callable[[_Inputs, float], _Eval]] = {
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
    return _evaluate(
        system, strategy, interval_batches, mode=mode, time_per_batch_s=time_per_batch_s,
        total_rows=total_rows, row_bytes=row_bytes, touched_rows=touched_rows,
        horizon_s=horizon_s, compute_s_per_batch=compute_s_per_batch, batch_size=batch_size,
        embedding_dim=embedding_dim, dense_bytes=dense_bytes,
    ).cost  # fmt: skip


def _evaluate(
    system: SystemSpec, strategy: str | None, interval_batches: float, **kw: Any
) -> _Eval:
    name = strategy or system.checkpoint.strategy
    if not (interval_batches > 0 and math.isfinite(interval_batches)):
        raise ConfigError(f"interval_batches: must be finite and > 0, got {interval_batches}")
    mode = kw.pop("mode", None)
    inp = _inputs(system, name, **kw)
    if name == "check-n-run" and mode is not None:
        inp = _with_mode(inp, cnr.mode_from(mode, inp.system))
    return MODELS[name](inp, float(interval_batches))


@dataclass
class _Chosen:
    """A strategy at the interval Daly's complete model prefers, before the simulator."""

    name: str
    inp: _Inputs
    costs: dict[float, StrategyCost]  # by interval (batches): they do not depend on the MTBF
    mtbf_s: float
    k: float
    goodput_model: float
    mode: cnr.Mode | None = None  # check-n-run: this one's mode
    # check-n-run: every mode at its interval (this one, the best by Daly's model, among
    # them), for the simulator to rank
    modes: list[_Chosen] = field(default_factory=list)


# check-n-run's intermittent cycle search reads each cycle's interval coarsely (13 points,
# to 1% in ln τ; `check_n_run.search_modes`), then the best cycle's as every strategy's
_COARSE = {"grid": 13, "rel_tol": 1e-2}


def _choose(
    inp: _Inputs,
    name: str,
    mtbf_s: float,
    costs: dict[float, StrategyCost],
    *,
    coarse: bool = False,
) -> tuple[float, float]:
    """(k, Daly's goodput there): the whole number of batches between checkpoints that
    maximises the model's goodput at `mtbf_s`, searched by `best_interval` (`coarse`:
    `_COARSE`)."""
    model = MODELS[name]
    tb = inp.tb
    horizon_s = inp.horizon_s

    def at(k: float) -> StrategyCost:
        if k not in costs:
            costs[k] = model(inp, k).cost
        return costs[k]

    def model_goodput(k: float) -> float:
        c = at(k)
        return float(daly_goodput(k * tb, c.cost_s, c.restore_s + c.rollback_lag_s, mtbf_s))

    if name == "none":
        return horizon_s / tb, float(daly_goodput(horizon_s, 0.0, inp.restart_s, mtbf_s))
    if name in FIXED_INTERVAL:
        return 1.0, model_goodput(1.0)
    lo = tb
    if name == "check-n-run":  # the run's chain is walked: at most 2e5 checkpoints
        lo = max(tb, horizon_s / SEARCH_MAX_CHECKPOINTS)
    tau = best_interval(
        lambda t: at(t / tb).cost_s,
        lambda t: at(t / tb).restore_s + at(t / tb).rollback_lag_s,
        mtbf_s,
        lo_s=lo,
        hi_s=max(horizon_s, lo),
        **(_COARSE if coarse else {}),
    )
    whole = {max(1.0, math.floor(tau / tb)), max(1.0, math.ceil(tau / tb))}
    k = max(sorted(whole), key=model_goodput)
    return k, model_goodput(k)


_OPTIONAL_INPUTS = {"compute_s_per_batch": None, "batch_size": 0, "embedding_dim": 0}


def _prepare(
    system: SystemSpec, name: str, *, mtbf_s: float, horizon_s: float, **inputs: Any
) -> _Chosen:
    """Checked inputs and the model's interval. `inputs`: `_inputs`' keywords, the
    optional ones defaulting as plan_strategy's do (dense_bytes as well: None)."""
    # the plan's inputs come from options: a message names the option (`opt`), not only
    # the parameter, and says what it must be
    if not (mtbf_s > 0 and math.isfinite(mtbf_s)):
        raise ConfigError(
            f"{opt('--cluster-mtbf (or --node-mtbf / --nodes)', 'mtbf_s')}: the cluster MTBF "
            f"must be a finite number of seconds above 0, got {mtbf_s:g} s"
        )
    _check_time_per_batch(inputs["time_per_batch_s"])  # before the run's time it makes
    if not (horizon_s > 0 and math.isfinite(horizon_s)):
        raise ConfigError(
            f"the run's training time ({opt('its batches x --time-per-batch', 'horizon_s')}) "
            f"must be a finite number of seconds above 0, got {horizon_s:g} s"
        )
    inp = _inputs(
        system, name, horizon_s=horizon_s, **{**_OPTIONAL_INPUTS, "dense_bytes": None, **inputs}
    )
    if name == "check-n-run":
        return _prepare_modes(inp, float(mtbf_s))
    costs: dict[float, StrategyCost] = {}
    k, goodput_model = _choose(inp, name, float(mtbf_s), costs)
    return _Chosen(name, inp, costs, float(mtbf_s), k, goodput_model)


def _prepare_modes(inp: _Inputs, mtbf_s: float) -> _Chosen:
    """check-n-run: every mode at its interval (`check_n_run.search_modes`), in `modes`
    of the one Daly's model prefers (which the progress check reads)."""

    def choose(m: _Inputs, coarse: bool) -> tuple[float, float]:
        return _choose(m, "check-n-run", mtbf_s, {}, coarse=coarse)

    max_cycle = min(SEARCH_MAX_CHECKPOINTS, max(1, math.floor(inp.horizon_s / inp.tb)))
    found = cnr.search_modes(
        cnr.modes_for(inp.system), lambda m: _with_mode(inp, m), choose, max_cycle
    )
    chosen = [
        _Chosen("check-n-run", f.inp, {}, mtbf_s, f.k, f.goodput_model, f.mode) for f in found
    ]
    best = max(chosen, key=lambda c: c.goodput_model)
    return dataclasses.replace(best, modes=chosen)


def plan_strategy(
    system: SystemSpec,
    *,
    time_per_batch_s: float,
    total_rows: int,
    row_bytes: int,
    touched_rows: TouchedRows,
    mtbf_s: float,
    horizon_s: float,
    draws: int = 1000,
    seed: int = 0,
    strategy: str | None = None,
    compute_s_per_batch: float | None = None,
    batch_size: int = 0,
    embedding_dim: int = 0,
    dense_bytes: int | None = None,
    max_wall_factor: float = MAX_WALL_FACTOR,
    mode: str = "given",
) -> StrategyPlan:
    """The interval that maximises the run's expected goodput (Daly's complete model with
    the strategy's δ(τ), R(τ) + rollback lag, searched by `best_interval` over whole
    batches), and the failure simulator's goodput there over `horizon_s`. check-n-run:
    every mode is evaluated (`modes`, best first); `mode="given"` answers the mode the
    system's `checkpoint.increment` and `checkpoint.quantize_bits` give, `mode="best"`
    the best (what `replay plan` answers). `MtbfTooShort` when the strategy makes no
    progress at `mtbf_s` (see `plan_checkpoints`)."""
    chosen = _prepare(
        system, strategy or system.checkpoint.strategy, time_per_batch_s=time_per_batch_s,
        total_rows=total_rows, row_bytes=row_bytes, touched_rows=touched_rows, mtbf_s=mtbf_s,
        horizon_s=horizon_s, compute_s_per_batch=compute_s_per_batch, batch_size=batch_size,
        embedding_dim=embedding_dim, dense_bytes=dense_bytes,
    )  # fmt: skip
    if mode not in ("given", "best"):
        raise ConfigError(f"mode: 'given' or 'best', not {mode!r}")
    if not _progresses([chosen], chosen.mtbf_s, max_wall_factor):
        raise _too_short(system, [chosen], max_wall_factor)  # the simulator would not end
    return _simulate(
        chosen, draws=draws, seed=seed, max_wall_factor=max_wall_factor, given=mode == "given"
    )


def _simulate_modes(
    chosen: _Chosen, *, draws: int, seed: int, max_wall_factor: float, given: bool = False
) -> StrategyPlan:
    """check-n-run: every mode simulated at its interval (the same draws: common random
    numbers), the best by mean goodput (`check_n_run.ranked`; `given`: the system spec's
    own mode) with every mode's numbers in `modes`."""
    plans = []
    for c in chosen.modes:
        assert c.mode is not None
        plan = _simulate(c, draws=draws, seed=seed, max_wall_factor=max_wall_factor)
        described = cnr.describe(c.mode, c.inp, c.k, plan.failures_per_run)
        plans.append(dataclasses.replace(plan, **described))
    best, rows = cnr.ranked(plans, [c.mode for c in chosen.modes if c.mode])
    if given:
        best = next(i for i, c in enumerate(chosen.modes) if c.mode is not None and c.mode.spec)
    return dataclasses.replace(plans[best], modes=rows)


def _simulate(
    chosen: _Chosen, *, draws: int, seed: int, max_wall_factor: float, given: bool = False
) -> StrategyPlan:
    """The failure simulator's goodput at the chosen interval (Daly's form for `none`
    over a run much longer than the MTBF); check-n-run: `_simulate_modes`."""
    if chosen.modes:
        return _simulate_modes(
            chosen, draws=draws, seed=seed, max_wall_factor=max_wall_factor, given=given
        )
    name, inp, k, mtbf_s = chosen.name, chosen.inp, chosen.k, chosen.mtbf_s
    horizon_s = inp.horizon_s
    goodput_model = chosen.goodput_model
    ev = MODELS[name](inp, k)
    cost = ev.cost
    if name == "none" and horizon_s / mtbf_s > NONE_SIMULATED_MAX:
        # restarting from scratch: Daly's form with τ = the run; the simulator would
        # spend ~max_wall_factor × horizon / MTBF failures per draw reaching its cap.
        # Attempts fail e^x − 1 times in expectation before one lasts H, each losing
        # E[T | T < H] = M − H / (e^x − 1); each restart of R is struck e^(R/M) − 1
        # times in expectation (exponential gaps) before one completes
        x = horizon_s / mtbf_s
        # beyond e^709 the expected failures are no float: infinite, each losing M
        training = math.expm1(x) if x < 709.0 else math.inf
        lost = mtbf_s - horizon_s / training
        r = inp.restart_s / mtbf_s
        during_restore = training * (math.expm1(r) if r < 709.0 else math.inf)
        p = p_any_failure(horizon_s, mtbf_s)
        return StrategyPlan(
            name, cost, mtbf_s, horizon_s, goodput_model, goodput_model, goodput_model,
            lost, inp.restart_s, training + during_restore, during_restore, 0.0, 0.0, 0, 0,
            False, p_any_failure=p,
            goodput_given_failure=goodput_given_failure(goodput_model, 1.0, p, None),
        )  # fmt: skip
    kw = dict(
        scratch_restore_s=inp.restart_s, horizon_s=horizon_s * ev.period_s / ev.useful_s,
        mtbf_s=mtbf_s, draws=draws, seed=seed, max_wall_factor=max_wall_factor,
    )  # fmt: skip
    stats = evaluate_failures(ev.period_s, ev.useful_s, ev.points, **kw)  # type: ignore[arg-type]
    p = p_any_failure(float(kw["horizon_s"]), mtbf_s)
    given = goodput_given_failure(
        stats.goodput_mean, ev.useful_s / ev.period_s, p,
        lambda: evaluate_failures(
            ev.period_s, ev.useful_s, ev.points, given_failure=True, **kw  # type: ignore[arg-type]
        ).goodput_mean,
    )  # fmt: skip
    checkpoints = name != "none"
    return StrategyPlan(
        strategy=name,
        cost=cost,
        mtbf_s=float(mtbf_s),
        horizon_s=float(horizon_s),
        goodput=stats.goodput_mean,
        goodput_p5=stats.goodput_p5,
        goodput_model=goodput_model,
        lost_work_per_training_failure_s=stats.lost_work_per_training_failure_s,
        restore_per_failure_s=stats.restore_s_mean,
        failures_per_run=stats.failures_per_draw_mean,
        failures_during_restore_per_run=stats.failures_during_restore_per_draw_mean,
        young_daly_interval_s=young_interval_s(cost.cost_s, mtbf_s) if checkpoints else 0.0,
        daly_interval_s=daly_interval_s(cost.cost_s, mtbf_s) if checkpoints else 0.0,
        draws=stats.draws,
        draws_capped=stats.draws_capped,
        simulated=True,
        p_any_failure=p,
        goodput_given_failure=given,
    )


def applicable_strategies(system: SystemSpec) -> list[str]:
    """The registered strategies with a plan model that `system` can run."""
    out = []
    for name in sorted(STRATEGIES):
        try:
            check_applicable(system, name)
        except ConfigError:
            continue
        out.append(name)
    return out


def plan_checkpoints(
    system: SystemSpec,
    *,
    strategies: Sequence[str] | None = None,
    **kw: Any,
) -> list[StrategyPlan]:
    """`plan_strategy` for each strategy (default: every applicable one), best mean
    goodput first (ties: lower stall, then name). `kw`: plan_strategy's keywords.

    `MtbfTooShort` when no strategy makes progress at the MTBF (`_progresses`: Daly's
    goodput below 1 / max_wall_factor over a run that expects failures), before any
    failure is simulated."""
    names = applicable_strategies(system) if strategies is None else list(strategies)
    draws, seed = kw.pop("draws", 1000), kw.pop("seed", 0)
    max_wall_factor = kw.pop("max_wall_factor", MAX_WALL_FACTOR)
    chosen = [_prepare(system, name, **kw) for name in names]
    if chosen and not _progresses(chosen, chosen[0].mtbf_s, max_wall_factor):
        raise _too_short(system, chosen, max_wall_factor)
    plans = [_simulate(c, draws=draws, seed=seed, max_wall_factor=max_wall_factor) for c in chosen]
    return sorted(plans, key=lambda p: (-p.goodput, p.cost_s, p.strategy))


def _progresses(chosen: Sequence[_Chosen], mtbf_s: float, max_wall_factor: float) -> bool:
    """Some strategy's Daly goodput is at least 1 / max_wall_factor, or the run sees no
    failure with at least that chance, e^(−H / M) (a run of seconds at an MTBF of seconds
    is planned: most draws finish; it simulates at most ln(max_wall_factor) failures)."""
    inp = chosen[0].inp
    if inp.horizon_s / mtbf_s <= math.log(max_wall_factor):
        return True
    threshold = 1.0 / max_wall_factor
    if progress_bound(inp.restart_s, inp.tb, mtbf_s) < threshold:
        return False
    if mtbf_s == chosen[0].mtbf_s:
        return max(c.goodput_model for c in chosen) >= threshold
    return max(_choose(c.inp, c.name, mtbf_s, c.costs)[1] for c in chosen) >= threshold


def _too_short(system: SystemSpec, chosen: Sequence[_Chosen], factor: float) -> MtbfTooShort:
    inp, mtbf_s = chosen[0].inp, chosen[0].mtbf_s
    best = max(chosen, key=lambda c: c.goodput_model)
    return mtbf_too_short(
        mtbf_s=mtbf_s, least_s=least_mtbf(lambda m: _progresses(chosen, m, factor), mtbf_s),
        horizon_s=inp.horizon_s, restart_s=inp.restart_s, tb=inp.tb, system=system.name,
        which="any checkpoint strategy" if len(chosen) > 1 else chosen[0].name,
        best=(best.name, best.goodput_model), max_wall_factor=factor,
    )  # fmt: skip


__all__ = [
    "MODELS",
    "MtbfTooShort",
    "StrategyCost",
    "StrategyPlan",
    "applicable_strategies",
    "check_applicable",
    "cluster_mtbf_s",
    "plan_checkpoints",
    "plan_strategy",
    "snapshot_tier_name",
    "strategy_cost",
]
