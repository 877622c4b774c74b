"""Checkpoint costs at any interval and goodput over a whole training run (issue 25).

The engine replays a few hundred batches; a run lasts days, with a cluster MTBF of hours
and checkpoints every few to tens of minutes. The plan takes the per-batch costs from
the engine's steady state (`time_per_batch_s`, `compute_s_per_batch`) and what grows
with time from the curve touched(k): the expected distinct rows updated within k
consecutive batches (a callable, monotone; `replay.analysis` measures it).

Each strategy's costs at one interval, its formulas and the means over the run they
give are `replay.plan.checkpoint_models`' (re-exported here: `strategy_cost`, `MODELS`).

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
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from replay.checkpoint import STRATEGIES
from replay.checkpoint.base import snapshot_tier_name
from replay.checkpoint.failures import (
    evaluate_failures,
    goodput_given_failure,
    p_any_failure,
)
from replay.errors import ConfigError, opt
from replay.plan import check_n_run as cnr
from replay.plan.check_n_run import SEARCH_MAX_CHECKPOINTS
from replay.plan.checkpoint_models import (
    FIXED_INTERVAL,
    MODELS,
    Inputs,
    StrategyCost,
    TouchedRows,
    check_applicable,
    check_time_per_batch,
    model_inputs,
    strategy_cost,
    with_mode,
)
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
from replay.system.spec import SystemSpec

NONE_SIMULATED_MAX = 10.0  # `none`: simulate up to horizon / MTBF = this, else Daly's form
# the simulator stops a draw at this many times the run's training time; below its inverse
# in goodput a strategy makes no progress (`plan_checkpoints` refuses such an MTBF)
MAX_WALL_FACTOR = 1000.0


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


@dataclass
class _Chosen:
    """A strategy at the interval Daly's complete model prefers, before the simulator."""

    name: str
    inp: Inputs
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
_COARSE: dict[str, Any] = {"grid": 13, "rel_tol": 1e-2}


def _choose(
    inp: Inputs,
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
    """Checked inputs and the model's interval. `inputs`: `model_inputs`' keywords, the
    optional ones defaulting as plan_strategy's do (dense_bytes as well: None)."""
    # the plan's inputs come from options: a message names the option (`opt`), not only
    # the parameter, and says what it must be
    if not (mtbf_s > 0 and math.isfinite(mtbf_s)):
        raise ConfigError(
            f"{opt('--cluster-mtbf (or --node-mtbf / --nodes)', 'mtbf_s')}: the cluster MTBF "
            f"must be a finite number of seconds above 0, got {mtbf_s:g} s"
        )
    check_time_per_batch(inputs["time_per_batch_s"])  # before the run's time it makes
    if not (horizon_s > 0 and math.isfinite(horizon_s)):
        raise ConfigError(
            f"the run's training time ({opt('its batches x --time-per-batch', 'horizon_s')}) "
            f"must be a finite number of seconds above 0, got {horizon_s:g} s"
        )
    inp = model_inputs(
        system, name, horizon_s=horizon_s, **{**_OPTIONAL_INPUTS, "dense_bytes": None, **inputs}
    )
    if name == "check-n-run":
        return _prepare_modes(inp, float(mtbf_s))
    costs: dict[float, StrategyCost] = {}
    k, goodput_model = _choose(inp, name, float(mtbf_s), costs)
    return _Chosen(name, inp, costs, float(mtbf_s), k, goodput_model)


def _prepare_modes(inp: Inputs, mtbf_s: float) -> _Chosen:
    """check-n-run: every mode at its interval (`check_n_run.search_modes`), in `modes`
    of the one Daly's model prefers (which the progress check reads)."""

    def choose(m: Inputs, coarse: bool) -> tuple[float, float]:
        return _choose(m, "check-n-run", mtbf_s, {}, coarse=coarse)

    max_cycle = min(SEARCH_MAX_CHECKPOINTS, max(1, math.floor(inp.horizon_s / inp.tb)))
    found = cnr.search_modes(
        cnr.modes_for(inp.system), lambda m: with_mode(inp, m), choose, max_cycle
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
    kw: dict[str, Any] = dict(
        scratch_restore_s=inp.restart_s, horizon_s=horizon_s * ev.period_s / ev.useful_s,
        mtbf_s=mtbf_s, draws=draws, seed=seed, max_wall_factor=max_wall_factor,
    )  # fmt: skip
    stats = evaluate_failures(ev.period_s, ev.useful_s, ev.points, **kw)
    p = p_any_failure(float(kw["horizon_s"]), mtbf_s)
    given_goodput = goodput_given_failure(
        stats.goodput_mean, ev.useful_s / ev.period_s, p,
        lambda: evaluate_failures(
            ev.period_s, ev.useful_s, ev.points, given_failure=True, **kw
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
        goodput_given_failure=given_goodput,
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
    "FIXED_INTERVAL",
    "MODELS",
    "MtbfTooShort",
    "StrategyCost",
    "StrategyPlan",
    "TouchedRows",
    "applicable_strategies",
    "check_applicable",
    "cluster_mtbf_s",
    "plan_checkpoints",
    "plan_strategy",
    "snapshot_tier_name",
    "strategy_cost",
]
