"""The stages of `replay plan`, each a function returning a small frozen result.

`replay.plan.plan.make_plan` calls them in this order and `replay.plan.plan_document`
assembles plan.json from their results:

1. `prepare`: the systems checked and each resolved once (with the workload's stateful
   `[update] rule` and dense model carried into every system, `replay.plan.memory`; a
   cluster's also as one GPU), the horizon opened at its sample rate, the rows' sizes.
   The later stages take these specs: what they resolve is a variant (a replay's cache
   size, checkpointing off, a cluster size), each resolved once;
2. `run_curves`: the LRU miss-ratio curve (exact, or SHARDS with its error bound), Che's
   analytic curve for a workload without reuse or drift, `touched(k)`;
3. `cache_answers`: bytes per hit target with their ~95% ranges, the other policies, the
   TBE cache per load factor, the per-table curves and the budget's split, TorchRec's
   statistics;
4. `system_answers`: a cluster's per-GPU answers, each system's steady state (replayed,
   or modelled from the curve at production scale), the time per batch, the SSD TBE;
5. `checkpoint_answers`: each strategy's best interval at the MTBF (one GPU, or every GPU
   of a cluster writing its shards) and its goodput curve around it (Daly's complete
   model, `replay.plan.daly`).

Each stage returns the notes it adds; the plan's notes are their concatenation in stage
order, so the document's notes keep the order in which the answers were reached.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from replay._units import format_duration, format_percent, format_target
from replay.errors import ConfigError
from replay.plan.request import PlanRequest, open_horizon, row_sizes, steady_source
from replay.workload.spec import WorkloadSpec

if TYPE_CHECKING:
    from replay.analysis.horizon import TouchedCurve
    from replay.analysis.mrc import MrcResult
    from replay.plan.cache import Split
    from replay.plan.checkpoint import StrategyPlan
    from replay.plan.cluster_checkpoint import ClusterCheckpoints
    from replay.plan.systems import SystemCost
    from replay.plan.table_curves import TableCurves
    from replay.plan.tbe import TBECurve

Say = Callable[[str], None]


@dataclass(frozen=True)
class Setup:
    """The request as planned (a stateful rule's sets added), its first system resolved
    once, and the horizon the curves read."""

    request: PlanRequest
    base: Any  # the first system's spec, resolved with every --set (a cluster's too)
    local_sets: tuple[str, ...]  # the sets of one GPU (a cluster's left out)
    local_systems: tuple[Any, ...]  # every system resolved once with `local_sets`
    horizon: Any
    rate: float
    spec: WorkloadSpec | None  # None for a trace folder
    batches: int
    names: list[str]
    table_rows: list[int]
    row_bytes: int
    state_bytes: int
    notes: tuple[str, ...]


@dataclass(frozen=True)
class Curves:
    mrc: MrcResult
    sizes: np.ndarray  # rows
    hits: np.ndarray  # LRU hit ratio at each size
    lookups: int
    distinct: int
    smallest: int  # the smallest size the curves resolve (SHARDS's resolution)
    budget_rows: float
    touched: TouchedCurve
    touched_basis: dict[str, Any]  # how touched(k) was reached at R < 1 (empty: exact)
    che: np.ndarray | None
    notes: tuple[str, ...]


@dataclass(frozen=True)
class CacheAnswers:
    bytes_for_hit: dict[str, float | None]
    range_bytes: dict[str, list[float | None]]
    policy_hits: dict[str, float]
    policy_bytes: dict[str, dict[str, float | None]]
    methods: dict[str, str]
    full_lookups: float  # the full stream's lookups: sampled misses are scaled by R x these
    tbe: list[TBECurve]
    per_table: TableCurves
    split: Split
    torchrec: dict[str, Any]
    notes: tuple[str, ...]


@dataclass(frozen=True)
class SystemAnswers:
    cluster: dict[str, Any] | None
    systems: list[SystemCost]
    modelled: bool  # production scale: the steady state modelled from the curve
    time_per_batch_s: float
    horizon_s: float
    ssd_tbe: dict[str, Any] | None
    notes: tuple[str, ...]


@dataclass(frozen=True)
class CheckpointAnswers:
    strategies: list[StrategyPlan]
    curves: dict[str, Any]  # goodput against interval, per strategy
    cluster: ClusterCheckpoints | None  # store and claims; None for one GPU
    notes: tuple[str, ...]


def prepare(request: PlanRequest, resolved: Sequence[Any] = ()) -> Setup:
    """`resolved`: the request's systems already resolved with its sets, else done here."""
    from replay.engine.kernels import home_tier_note
    from replay.engine.systems import resolve_system
    from replay.plan.memory import rule_request

    notes = list(request.notes)
    if not request.systems:
        raise ConfigError("give at least one --system")
    if resolved and len(resolved) != len(request.systems):
        raise ValueError("prepare: resolved must hold one spec per system")
    base = resolved[0] if resolved else resolve_system(request.systems[0], list(request.sets))
    if request.time_per_batch_s is None and not _has_compute(base):
        # the system's step time would be its embedding work alone: every interval and
        # goodput computed from it would describe a training run that does not exist
        raise ConfigError(
            f"replay plan: {base.name} has no compute model ([compute] flops_per_sample or "
            "seconds_per_batch), so its step time would be the embedding work alone; give "
            "--time-per-batch DURATION, your model's measured step time (e.g. 50ms)"
        )
    # every system resolved once (here, or by the caller): the stages take these specs; one
    # that needs another spec (a replay's cache size, checkpointing off) resolves it
    given = tuple(resolved) or (
        base,
        *(resolve_system(name, list(request.sets)) for name in request.systems[1:]),
    )
    local_systems = given
    if base.cluster is not None:  # the other sections plan one GPU (`replay.plan.cluster`)
        from replay.plan.cluster import check_one_gpu, one_gpu_sets

        one = one_gpu_sets(request.sets)  # its refusal first, as before the horizon is opened
        # the one-GPU sections' systems: other specs (the [cluster] sets left out)
        local_systems = tuple(resolve_system(name, list(one)) for name in request.systems)
        check_one_gpu(request.systems, request.sets, resolved=local_systems)
    horizon, rate, spec = open_horizon(request)
    if base.cluster is not None and spec is not None:
        from replay.plan.cluster_scaling import count_ahead

        # at production scale the routed batch's counts need the spec alone: made on a
        # helper thread while the stages before the routing run (after the horizon,
        # whose sampler tables it shares)
        count_ahead(spec, base)
    # a stateful [update] rule names every system's optimizer (replay.plan.memory)
    planned, base = rule_request(request, horizon.workload, base, resolved=given)
    local_sets = _local_sets(planned, base)
    if planned is not request:  # the rule's sets added: other specs, resolved with them
        again = request.systems if base.cluster is not None else request.systems[1:]
        others = tuple(resolve_system(name, list(local_sets)) for name in again)
        local_systems = others if base.cluster is not None else (base, *others)
    request = planned
    table_rows = [int(r) for r in horizon.table_rows]
    row_bytes, state_bytes = row_sizes(dict(horizon.workload or {}), base)
    for system in local_systems:  # a tier over its capacity is said, never silent
        over = home_tier_note(
            system,
            float(sum(table_rows)) * state_bytes,
            cluster=base.cluster is not None,
        )
        if over is not None:
            notes.append(over)
    return Setup(
        request=request, base=base, local_sets=local_sets,
        local_systems=local_systems, horizon=horizon, rate=rate,
        spec=spec, batches=int(horizon.num_batches), names=list(horizon.table_names),
        table_rows=table_rows, row_bytes=row_bytes, state_bytes=state_bytes,
        notes=tuple(notes),
    )  # fmt: skip


def _local_sets(request: PlanRequest, base: Any) -> tuple[str, ...]:
    if base.cluster is None:
        return tuple(request.sets)
    from replay.plan.cluster import one_gpu_sets

    return tuple(one_gpu_sets(request.sets))


def run_curves(s: Setup, say: Say) -> Curves:
    from replay.analysis.horizon import horizon_mrc
    from replay.analysis.touched_plan import plan_touched
    from replay.plan.cache import curve_sizes

    request, horizon, rate, spec = s.request, s.horizon, s.rate, s.spec
    notes: list[str] = []
    say(f"curves over {s.batches:,} batches at sample rate {rate:g}")
    smallest = 1
    if rate < 1.0:
        from replay.analysis.shards import resolution_rows, shards_threshold

        smallest = resolution_rows(shards_threshold(rate))
    first = smallest
    if rate < 1.0 and spec is not None:
        from replay.analysis.head import HEAD_MAX_RESOLVED_ROWS

        # the total curve's exact head reaches only this far (memory); above it, up to the
        # resolution, the sample anchored at the head answers with its wider error: without
        # these sizes a budget below the resolution (64 GiB of rows at R = 2^-23) read as a
        # hit ratio of 0. (A small table's head may not fill: per-table curves keep theirs.)
        first = min(smallest, HEAD_MAX_RESOLVED_ROWS)
    total_sizes = curve_sizes(sum(s.table_rows), first)
    budget_rows = request.cache_budget_bytes / s.row_bytes
    budget_at = math.floor(budget_rows)
    if first <= budget_at < total_sizes[-1]:
        # the budget's own size too: the shared cache's hit is read there, not up to 5% below
        total_sizes = np.union1d(total_sizes, [budget_at])
    # its pass feeds the per-table curves too (`table_curves`, in `cache_answers`)
    mrc = horizon_mrc(horizon, total_sizes, tables=True)
    if getattr(horizon, "heads_basis", None):  # production scale: `analysis.head_pieces`
        notes.append(f"basis: {horizon.heads_basis}")
    lookups = int(mrc.lookups)
    # a sampled count / R can pass the row space (meta-2021 at R = 2^-23: 5.28 G of 5.16 G)
    distinct = min(int(mrc.distinct_keys), sum(s.table_rows))
    sizes = np.asarray(mrc.sizes, dtype=np.float64)
    # at R < 1: exact over the first full batches for small k, the sample's growth above
    touched, touched_basis = plan_touched(horizon, spec)
    che = None
    if spec is not None and not _has_reuse_or_drift(spec):
        from replay.analysis.che import che_miss_ratios
        from replay.analysis.shards_model import applicable, full_che

        che = np.asarray(
            full_che(horizon, sizes, lookups)  # the control variate solved these already
            if applicable(horizon)
            else che_miss_ratios(spec, sizes.astype(np.int64), horizon_lookups=lookups),
            dtype=np.float64,
        )
    if budget_rows >= distinct:
        notes.append(
            f"the budget holds {budget_rows:,.0f} rows, at least the {distinct:,} distinct rows "
            "the run touches: every row fits, so a smaller cache gives the same hit ratio"
        )
    return Curves(
        mrc=mrc, sizes=sizes, hits=1.0 - np.asarray(mrc.miss_ratios, dtype=np.float64),
        lookups=lookups, distinct=distinct, smallest=smallest, budget_rows=budget_rows,
        touched=touched, touched_basis=touched_basis, che=che, notes=tuple(notes),
    )  # fmt: skip


def begin_cluster_stage(s: Setup, c: Curves) -> Any:
    """A cluster's first part begun beside the cache answers (a future for
    `system_answers`); None for one GPU."""
    if s.base.cluster is None:
        return None
    from replay.plan.cluster import begin_cluster

    return begin_cluster(
        base=s.base, horizon=s.horizon, spec=s.spec, rate=s.rate,
        budget_bytes=s.request.cache_budget_bytes, row_bytes=s.row_bytes, smallest=c.smallest,
    )  # fmt: skip


def cache_answers(s: Setup, c: Curves, say: Say) -> CacheAnswers:
    from replay.analysis.horizon import horizon_mrc
    from replay.plan.cache import (
        hit_at,
        range_for_hit,
        rows_for_hit,
        split_budget,
        uniform_load_factor,
    )
    from replay.plan.policies import SizedSpecs, policy_answers
    from replay.plan.table_curves import table_curves
    from replay.plan.tbe import tbe_curves
    from replay.plan.torchrec import torchrec_stats

    request, horizon, rate, row_bytes = s.request, s.horizon, s.rate, s.row_bytes
    sizes, hits = c.sizes, c.hits
    notes: list[str] = []
    bytes_for_hit: dict[str, float | None] = {}
    # each answer's ~95% range from the curve's error where it crosses the target
    range_bytes: dict[str, list[float | None]] = {}
    for target in request.hit_targets:
        rows = rows_for_hit(sizes, hits, target)
        bytes_for_hit[f"{target:g}"] = None if rows is None else rows * row_bytes
        low, high = range_for_hit(sizes, hits, c.mrc.point_errors, target)
        range_bytes[f"{target:g}"] = [
            None if low is None else low * row_bytes,
            None if high is None else high * row_bytes,
        ]
        if rows is None:
            notes.append(
                f"a hit ratio of {format_target(target)} is out of reach over this run: the "
                f"curve ends at {format_percent(float(hits[-1]), 4)} (the rows' first lookups "
                "always miss)"
            )
    policy_hits: dict[str, float] = {"lru": hit_at(sizes, hits, c.budget_rows)}
    policy_bytes: dict[str, dict[str, float | None]] = {"lru": bytes_for_hit}
    methods = {"lru": "exact stack distances" if c.mrc.exact else f"SHARDS at R = {rate:g}"}
    full_lookups = float(s.spec.lookups) if s.spec is not None else float(c.lookups)
    sized: SizedSpecs = {}  # each cache size's spec resolved once, for both stages below
    say("other cache policies of the systems (one replay per size)")
    for answer in policy_answers(
        horizon, request.systems, s.local_sets, rate=rate, budget_rows=c.budget_rows,
        targets=request.hit_targets, distinct_rows=c.distinct, full_lookups=full_lookups,
        resolved=s.local_systems, sized=sized,
    ):  # fmt: skip
        policy_hits[answer.policy] = answer.hit_at_budget
        policy_bytes[answer.policy] = {
            t: None if r is None else r * row_bytes for t, r in answer.rows_for_hit.items()
        }
        methods[answer.policy] = f"{answer.method} ({answer.replays} replays of {answer.system})"

    def lru_hit_at(rows: np.ndarray) -> np.ndarray:
        return 1.0 - np.asarray(horizon_mrc(horizon, rows).miss_ratios, dtype=np.float64)

    say("FBGEMM's TBE cache against an ideal LRU, per load factor (one replay each)")
    tbe = tbe_curves(
        horizon, request.systems, s.local_sets, rate=rate, total_rows=sum(s.table_rows),
        distinct_rows=c.distinct, min_rows=c.smallest, lru_hit_at=lru_hit_at,
        full_lookups=full_lookups, resolved=s.local_systems, sized=sized,
    )  # fmt: skip
    say("per-table curves and the budget's split")
    uniform_f = uniform_load_factor(c.budget_rows, s.table_rows)
    per_table = table_curves(
        horizon, s.spec, rate, c.smallest, s.table_rows,
        extra_sizes=[np.array([math.floor(uniform_f * r * (1 + 1e-12))]) for r in s.table_rows],
    )  # fmt: skip
    split = split_budget(s.names, s.table_rows, per_table.lookups, per_table.curves, c.budget_rows)
    say("TorchRec's cache statistics per table (torchrec.json)")
    torchrec = torchrec_stats(
        horizon,
        bins=request.torchrec_bins,
        load_factors={t.table: t.load_factor for t in split.tables},
    )
    return CacheAnswers(
        bytes_for_hit=bytes_for_hit, range_bytes=range_bytes, policy_hits=policy_hits,
        policy_bytes=policy_bytes, methods=methods, full_lookups=full_lookups, tbe=tbe,
        per_table=per_table, split=split, torchrec=torchrec, notes=tuple(notes),
    )  # fmt: skip


def system_answers(
    s: Setup, c: Curves, cache: CacheAnswers, say: Say, begun: Any = None
) -> SystemAnswers:
    """`begun`: `begin_cluster_stage`'s, where the plan began it."""
    from replay.plan.cache import hit_at
    from replay.plan.cluster import routed_steady
    from replay.plan.ssd_tbe import ssd_tbe_answers, ssd_tbe_system
    from replay.plan.systems import steady_state
    from replay.plan.systems_model import modelled_wanted

    request, base, spec, horizon = s.request, s.base, s.spec, s.horizon
    notes: list[str] = []
    # at production scale nothing replays the steady span: its compiled workload (~0.5 GB
    # for meta-2021's 5.16 G rows) is not built
    modelled = modelled_wanted(spec) and (base.cluster is None or routed_steady(spec, base))
    steady = None if modelled else steady_source(request, horizon)
    cluster = None
    if base.cluster is not None:
        from replay.plan.cluster import plan_cluster

        cluster = plan_cluster(
            system_name=request.systems[0], sets=request.sets, base=base, horizon=horizon,
            steady_source=steady, rate=s.rate, spec=spec,
            budget_bytes=request.cache_budget_bytes, row_bytes=s.row_bytes,
            targets=request.hit_targets, smallest=c.smallest, say=say,
            torchrec_bins=request.torchrec_bins, torchrec_tables=cache.torchrec["tables"],
            begun=begun,
        )  # fmt: skip
        notes += [f"cluster: {n}" for n in cluster["notes"]]
        notes.append(
            "cluster: the cache, split, TBE and systems answers are one GPU holding every "
            "table with the whole budget (the reference beside the cluster's per-GPU "
            "answers); checkpoints are the cluster's: every GPU writes its shards "
            "(replay.plan.cluster_checkpoint)"
        )
    # a batch's distinct rows, E touched(1): the modelled systems' updates, the SSD TBE's
    batch_rows = float(np.interp(1, c.touched.batches, c.touched.rows))
    systems_modelled = modelled_wanted(spec)
    if systems_modelled and spec is not None:  # production scale: `replay.plan.systems_model`
        from replay.plan.systems_model import modelled_note, modelled_steady_state

        say("systems: steady state per batch, modelled from the curve (production scale)")
        systems, left = modelled_steady_state(
            spec, request.systems, sets=s.local_sets, distinct_per_batch=batch_rows,
            lru_hit_at=lambda rows: hit_at(c.sizes, c.hits, rows),
        )  # fmt: skip
        notes.append(modelled_note(left, batch_rows, int(spec.lookups_per_batch)))
        if not systems:
            raise ConfigError(
                f"replay plan: at this scale ({spec.lookups_per_batch:,} lookups a batch) the "
                "systems' steady state is modelled for LRU caches only; give an LRU system "
                f"first (left out: {', '.join(left)})"
            )
    else:
        say("systems: steady state per batch")
        systems = steady_state(steady, request.systems, sets=s.local_sets, resolved=s.local_systems)
    time_per_batch = request.time_per_batch_s or (
        cluster["step_time_s"] if cluster is not None else systems[0].time_per_batch_s
    )
    roomy = [x.name for x in systems if x.never_evicts]
    if roomy:
        notes.append(
            f"{', '.join(roomy)}: the cache never evicted in the {systems[0].batches}-batch span "
            "each system replays (it holds every row the span touches), so these systems' time "
            "per batch is that of a cache without capacity misses, and their policies do not "
            "differ there; the cache answers above compare the policies at the budget"
        )
    ssd_tbe = None
    if ssd_tbe_system(request.systems, s.local_sets, s.local_systems) is not None:
        say("FBGEMM's SSD TBE: L1 and L2 per hit target (every L1 candidate in one read)")
        ssd_tbe = ssd_tbe_answers(
            horizon, request.systems, s.local_sets, rate=s.rate, total_rows=sum(s.table_rows),
            distinct_rows=c.distinct, min_rows=c.smallest, full_lookups=cache.full_lookups,
            row_bytes=s.state_bytes, targets=request.hit_targets,
            time_per_batch_s=time_per_batch, budget_bytes=request.cache_budget_bytes,
            batch_rows=batch_rows, resolved=s.local_systems,
        )  # fmt: skip
    return SystemAnswers(
        cluster=cluster, systems=systems, modelled=systems_modelled,
        time_per_batch_s=time_per_batch, horizon_s=s.batches * time_per_batch,
        ssd_tbe=ssd_tbe, notes=tuple(notes),
    )  # fmt: skip


def checkpoint_answers(s: Setup, c: Curves, sa: SystemAnswers, say: Say) -> CheckpointAnswers:
    from replay.plan.checkpoint import plan_checkpoints

    request, base, horizon, horizon_s = s.request, s.base, s.horizon, sa.horizon_s
    notes: list[str] = []
    say("checkpoint strategies at the cluster's MTBF")
    common: dict[str, Any] = {
        "time_per_batch_s": sa.time_per_batch_s,
        "total_rows": int(sum(s.table_rows)),
        "row_bytes": s.state_bytes,
        "touched_rows": _interpolator(c.touched.batches, c.touched.rows),
        "horizon_s": horizon_s,
        "batch_size": int(horizon.workload.get("batch_size") or 0) if horizon.workload else 0,
        "embedding_dim": s.row_bytes // 4,
    }
    checkpoints_cluster = None
    if sa.cluster is not None:  # every GPU writes its shards, nodes fail
        from replay.plan.cluster_checkpoint import plan_cluster_checkpoints

        checkpoints_cluster = plan_cluster_checkpoints(
            base, sa.cluster, mtbf_s=request.mtbf_s, draws=request.draws, seed=request.seed,
            **common,
        )  # fmt: skip
        strategies = checkpoints_cluster.strategies
        curves = dict(checkpoints_cluster.curves)
        notes += [f"checkpoint: {n}" for n in checkpoints_cluster.notes]
    else:
        strategies = plan_checkpoints(
            base, mtbf_s=request.mtbf_s, draws=request.draws, seed=request.seed, **common
        )
        curves = {x.name: goodput_curve(base, x, request.mtbf_s, common) for x in strategies}
    notes += _outside_papers_method(strategies)
    whole = [
        x.name
        for x in strategies
        # cpr's interval is bounded by the updates it may lose, not by goodput
        if x.name not in ("none", "cpr") and x.interval_s >= horizon_s * (1 - 1e-9)
    ]
    if whole:
        notes.append(
            f"{', '.join(whole)}: the best interval is the whole run "
            f"({format_duration(horizon_s)} of training): over a run this short one checkpoint "
            "costs more than the work it saves, so their only checkpoint is the run's last "
            "batch: a failure restarts from scratch, as without checkpoints, and their goodput "
            "also pays that last write's stall"
        )
    return CheckpointAnswers(
        strategies=strategies, curves=curves, cluster=checkpoints_cluster, notes=tuple(notes)
    )


def _has_compute(system: Any) -> bool:
    """Whether a system models a step's dense compute (a given time, or FLOPs at a rate)."""
    compute = system.compute
    return compute.seconds_per_batch > 0 or (
        compute.flops_per_sample > 0 and compute.flops_per_s > 0
    )


def _has_reuse_or_drift(spec: WorkloadSpec) -> bool:
    return any(t.reuse > 0 or t.drift > 0 for t in spec.tables)


def _interpolator(xs: np.ndarray, ys: np.ndarray) -> Callable[[Any], Any]:
    """A monotone curve through (xs, ys), linear in log-log, held flat beyond its ends."""
    lx = np.log(np.maximum(np.asarray(xs, dtype=np.float64), 1e-300))
    ly = np.log(np.maximum(np.asarray(ys, dtype=np.float64), 1e-300))
    ly = np.maximum.accumulate(ly)

    def curve(k: Any) -> Any:
        kk = np.log(np.maximum(np.asarray(k, dtype=np.float64), 1e-300))
        out = np.exp(np.interp(kk, lx, ly))
        return float(out) if np.ndim(out) == 0 else out

    return curve


def _outside_papers_method(strategies: list[Any]) -> list[str]:
    """A note for each Check-N-Run mode outside the paper's method that beats the answer
    by goodput: listed in plan.json, not answered (`replay.plan.check_n_run.ranked`)."""
    from replay._units import format_bytes

    out = []
    for s in strategies:
        better = [
            m for m in s.modes if not m.get("papers_method", True) and m["goodput"] > s.goodput
        ]
        if not better:
            continue
        m = better[0]  # the best of them
        out.append(
            f"{s.label} is the paper's method (intermittent fulls, quantized increments); "
            f"{m['label']} would give {format_percent(m['goodput'] - s.goodput, 2)[:-1]} points "
            f"more goodput ({m['goodput']:.3%} against {s.goodput:.3%}) with "
            f"{format_bytes(m['storage_bytes'])} of storage against "
            f"{format_bytes(s.storage_bytes)} and a {format_duration(m['restore_s'])} restore "
            f"against {format_duration(s.restore_s)}: its chain grows with the run. Every "
            "mode's numbers are in plan.json (checkpoint.strategies[].modes)"
        )
    return out


def goodput_curve(
    system: Any, plan: Any, mtbf_s: float, common: dict[str, Any], points: int = 41
) -> dict[str, list[float]] | None:
    """Expected goodput (Daly's complete model with the strategy's own cost, restore and
    rollback lag at each interval) on a log grid around the chosen interval: the figure's
    curve. None for strategies whose interval is not a choice (every batch, never)."""
    from replay.plan.checkpoint import FIXED_INTERVAL, strategy_cost
    from replay.plan.daly import daly_goodput

    if plan.name in FIXED_INTERVAL or not plan.interval_s > 0:
        return None
    tb = common["time_per_batch_s"]
    lo = max(tb, plan.interval_s / 30)
    hi = min(common["horizon_s"], plan.interval_s * 30)
    if hi <= lo:
        return None
    taus, goodputs = [], []
    for tau in np.geomspace(lo, hi, points):
        c = strategy_cost(
            system, strategy=plan.name, interval_batches=tau / tb, mode=plan.mode, **common
        )
        taus.append(float(tau))
        goodputs.append(float(daly_goodput(tau, c.cost_s, c.restore_s + c.rollback_lag_s, mtbf_s)))
    return {"interval_s": taus, "goodput": goodputs}


__all__ = [
    "CacheAnswers",
    "CheckpointAnswers",
    "Curves",
    "Setup",
    "SystemAnswers",
    "begin_cluster_stage",
    "cache_answers",
    "checkpoint_answers",
    "goodput_curve",
    "prepare",
    "run_curves",
    "system_answers",
]
