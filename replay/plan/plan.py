"""`replay plan`: answers for a whole training run, each with how it was reached.

A replayed trace covers seconds of training; users decide for days. The plan takes the
per-batch costs from the engine (steady state, `replay.plan.systems`) and everything that
grows with time from long-horizon curves over the whole run (`replay.analysis.horizon`):

1. the horizon: a trace folder as it is, or a workload over any number of batches,
   generated on the fly and, beyond a few tens of millions of lookups, spatially sampled
   (`replay.workload.sampled`: only the rows SHARDS keeps at rate R are generated, exact
   in distribution, so a month of training costs R x its lookups);
2. the curves: the LRU miss-ratio curve in rows and bytes (exact at R = 1, SHARDS-scaled
   with its 95% error bound below), per table, Che's analytic curve beside it for a
   workload without reuse or drift (over the run's lookups from an empty cache, so with
   its cold misses), and `touched(k)`, the distinct rows updated within k
   consecutive batches (what an incremental checkpoint at interval k writes);
3. the answers: cache bytes for each hit target and the hit at the budget, the budget's
   split across tables (`replay.plan.cache`), FBGEMM's TBE cache against an ideal LRU of
   the same bytes per load factor (`replay.plan.tbe`), each table's statistics for TorchRec's
   planner (`replay.plan.torchrec`), each checkpoint strategy's best interval at
   the cluster's MTBF with its goodput over the run (`replay.plan.checkpoint`), and each
   system's steady-state time and energy per batch with the Pareto front.

Sizes: `row_bytes` is what a cache holds per row (the embedding values, fp32);
`state_bytes_per_row` adds the optimizer state, what a checkpoint writes per row.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from replay.errors import ConfigError
from replay.workload.spec import WorkloadSpec

# a horizon of more lookups than this is sampled (when no rate is given): the curves then
# cost about this many lookups whatever the length of the run
SAMPLED_LOOKUPS_TARGET = 30_000_000
SAMPLED_ROWS_TARGET = 1 << 24  # ... and about as many sampled rows at most
STEADY_BATCHES = 200  # the span each system replays for its per-batch costs
# ... cut to about this many lookups (at least `STEADY_MIN_BATCHES`): 200 batches of a
# production batch (400 tables x 65,536 samples) are 5.2 G lookups, minutes of replay for a
# per-batch cost that a few batches give as well
STEADY_MAX_LOOKUPS = 1 << 27
STEADY_MIN_BATCHES = 4
MIN_SAMPLE_RATE = 2.0**-24  # SHARDS's resolution: one key in 2^24


@dataclass(frozen=True)
class PlanRequest:
    """What `replay plan` was asked. `source` is a trace folder or a workload spec (with
    its batches, batch size and seed applied)."""

    source: Path | WorkloadSpec
    systems: tuple[str, ...]
    cache_budget_bytes: int
    hit_targets: tuple[float, ...]
    mtbf_s: float
    sample_rate: float | None = None  # None: chosen from the horizon's size
    time_per_batch_s: float | None = None  # None: the first system's steady state
    sets: tuple[str, ...] = ()
    draws: int = 1000
    seed: int = 0
    notes: list[str] = field(default_factory=list)
    torchrec_bins: int = 100  # torchrec.json's histogram bins (`replay.plan.torchrec`)
    # the training length as the user gave it, {"duration_s" | "samples" | "epochs" |
    # "batches": value}, recorded in plan.json's horizon; None: the source's own batches
    given: dict[str, float | int] | None = None
    # the failure model as the user gave it (--nodes with --node-mtbf), recorded in
    # plan.json beside mtbf_s; None where --cluster-mtbf was given
    nodes: int | None = None
    node_mtbf_s: float | None = None


def choose_sample_rate(lookups: int, rows: int = 0) -> float:
    """1 up to `SAMPLED_LOOKUPS_TARGET` lookups, else the power of two that keeps the
    sample under it (a power of two is exact in SHARDS's 2^24 thresholds), and, where
    the tables have more than `SAMPLED_ROWS_TARGET` rows, that keeps the sampled rows
    under it too (their alias tables take ~54 B a row: 12 tables of 4 G rows at R = 2^-7
    asked for 19 GB)."""
    if lookups <= SAMPLED_LOOKUPS_TARGET:
        return 1.0
    rate = 2.0 ** math.floor(math.log2(SAMPLED_LOOKUPS_TARGET / lookups))
    if rows > SAMPLED_ROWS_TARGET:
        rate = min(rate, 2.0 ** math.floor(math.log2(SAMPLED_ROWS_TARGET / rows)))
    return max(rate, MIN_SAMPLE_RATE)


def request_sample_rate(request: PlanRequest, spec: WorkloadSpec) -> float:
    """The rate a workload's curves are sampled at: `--sample-rate`, else chosen from its
    lookups and rows (`choose_sample_rate`); what the plan and its estimate both use."""
    if request.sample_rate is not None:
        return request.sample_rate
    return choose_sample_rate(
        spec.batches * spec.lookups_per_batch, sum(t.rows for t in spec.tables)
    )


def _open_horizon(request: PlanRequest) -> tuple[Any, float, WorkloadSpec | None]:
    """The source the curves read, its sample rate, and the spec (None for a trace)."""
    from replay.trace.reader import open_trace

    if isinstance(request.source, WorkloadSpec):
        spec = request.source
        rate = request_sample_rate(request, spec)
        if rate >= 1.0:
            from replay.workload.onthefly import GeneratedTrace

            return GeneratedTrace(spec), 1.0, spec
        from replay.workload.sampled import open_sampled_workload

        sampled = open_sampled_workload(spec, rate)
        return sampled, float(sampled.sample_rate), spec
    if request.sample_rate is not None and request.sample_rate < 1.0:
        raise ConfigError(
            "--sample-rate applies to a workload (--workload): a trace folder is read whole"
        )
    return open_trace(request.source), 1.0, None


def _steady_source(request: PlanRequest, horizon: Any) -> Any:
    if isinstance(request.source, WorkloadSpec):
        from replay.workload.onthefly import GeneratedTrace

        spec = request.source
        return GeneratedTrace(spec.with_overrides(batches=steady_batches(spec)))
    return horizon


def steady_batches(spec: WorkloadSpec) -> int:
    """The span each system replays on a workload: `STEADY_BATCHES`, or fewer where that
    many batches hold more than `STEADY_MAX_LOOKUPS` lookups (at least
    `STEADY_MIN_BATCHES`), never more than the run."""
    fit = STEADY_MAX_LOOKUPS // max(int(spec.lookups_per_batch), 1)
    return max(1, min(int(spec.batches), STEADY_BATCHES, max(STEADY_MIN_BATCHES, fit)))


def _row_sizes(workload: dict[str, Any], system: Any) -> tuple[int, int]:
    from replay.system.spec import BYTES_PER_VALUE, optimizer_bytes_per_row

    dim = int(system.model.embedding_dim or workload.get("embedding_dim") or 0)
    if dim <= 0:
        raise ConfigError("the embedding dimension is unknown: set model.embedding_dim")
    row_bytes = BYTES_PER_VALUE * dim
    return row_bytes, row_bytes + optimizer_bytes_per_row(system.model.optimizer, dim)


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


def make_plan(
    request: PlanRequest, progress: Callable[[str], None] | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The plan as the JSON document `plan.json` holds (see docs/plan.md; its `torchrec`
    part is written as `torchrec.json`), and the curves its goodput figure draws (goodput
    against interval, per strategy)."""
    from replay._malloc import trim_freed_memory
    from replay.analysis.horizon import horizon_mrc
    from replay.engine.systems import resolve_system
    from replay.plan.cache import (
        curve_sizes,
        hit_at,
        range_for_hit,
        rows_for_hit,
        split_budget,
        uniform_load_factor,
    )
    from replay.plan.checkpoint import plan_checkpoints
    from replay.plan.systems import steady_state

    told = progress or (lambda _: None)

    def say(stage: str) -> None:
        trim_freed_memory()  # the last stage's freed batches, kept by the heap for reuse
        told(stage)

    notes = list(request.notes)
    if not request.systems:
        raise ConfigError("give at least one --system")
    base = resolve_system(request.systems[0], list(request.sets))
    if request.time_per_batch_s is None and not _has_compute(base):
        # the system's step time would be its embedding work alone: every interval and
        # goodput computed from it would describe a training run that does not exist
        raise ConfigError(
            f"replay plan: {base.name} has no compute model ([compute] flops_per_sample or "
            "seconds_per_batch), so its step time would be the embedding work alone; give "
            "--time-per-batch DURATION, your model's measured step time (e.g. 50ms)"
        )
    # a cluster (`replay.plan.cluster`): the other sections plan one GPU without it
    local_sets = request.sets
    if base.cluster is not None:
        from replay.plan.cluster import check_one_gpu, one_gpu_sets

        local_sets = one_gpu_sets(request.sets)
        check_one_gpu(request.systems, request.sets)
    horizon, rate, spec = _open_horizon(request)
    from replay.plan.memory import rule_request

    # a stateful [update] rule names every system's optimizer (replay.plan.memory)
    request, base = rule_request(request, horizon.workload, base)
    local_sets = one_gpu_sets(request.sets) if base.cluster is not None else request.sets
    batches = int(horizon.num_batches)
    names = list(horizon.table_names)
    table_rows = [int(r) for r in horizon.table_rows]
    row_bytes, state_bytes = _row_sizes(dict(horizon.workload or {}), base)
    from replay.engine.kernels import home_tier_note

    for name in request.systems:  # a tier over its capacity is said, never silent
        over = home_tier_note(
            resolve_system(name, list(local_sets)),
            float(sum(table_rows)) * state_bytes,
            cluster=base.cluster is not None,
        )
        if over is not None:
            notes.append(over)

    say(f"curves over {batches:,} batches at sample rate {rate:g}")
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
    total_sizes = curve_sizes(sum(table_rows), first)
    budget_rows = request.cache_budget_bytes / row_bytes
    budget_at = math.floor(budget_rows)
    if first <= budget_at < total_sizes[-1]:
        # the budget's own size too: the shared cache's hit is read there, not up to 5% below
        total_sizes = np.union1d(total_sizes, [budget_at])
    mrc = horizon_mrc(horizon, total_sizes)
    if getattr(horizon, "heads_basis", None):  # production scale: `analysis.head_pieces`
        notes.append(f"basis: {horizon.heads_basis}")
    lookups = int(mrc.lookups)
    # a sampled count / R can pass the row space (meta-2021 at R = 2^-23: 5.28 G of 5.16 G)
    distinct = min(int(mrc.distinct_keys), sum(table_rows))
    sizes = np.asarray(mrc.sizes, dtype=np.float64)
    hits = 1.0 - np.asarray(mrc.miss_ratios, dtype=np.float64)
    from replay.analysis.touched_plan import plan_touched

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
    bytes_for_hit: dict[str, float | None] = {}
    # each answer's ~95% range from the curve's error where it crosses the target
    range_bytes: dict[str, list[float | None]] = {}
    for target in request.hit_targets:
        rows = rows_for_hit(sizes, hits, target)
        bytes_for_hit[f"{target:g}"] = None if rows is None else rows * row_bytes
        low, high = range_for_hit(sizes, hits, mrc.point_errors, target)
        range_bytes[f"{target:g}"] = [
            None if low is None else low * row_bytes,
            None if high is None else high * row_bytes,
        ]
        if rows is None:
            notes.append(
                f"a hit ratio of {target:g} is out of reach over this run: the curve ends at "
                f"{hits[-1]:.4f} (the rows' first lookups always miss)"
            )
    hit_at_budget = hit_at(sizes, hits, budget_rows)
    policy_hits: dict[str, float] = {"lru": hit_at_budget}
    policy_bytes: dict[str, dict[str, float | None]] = {"lru": bytes_for_hit}
    methods = {"lru": "exact stack distances" if mrc.exact else f"SHARDS at R = {rate:g}"}
    # the full stream's lookups: a sampled replay's misses are scaled by R x these
    full_lookups = float(spec.lookups) if spec is not None else float(lookups)
    say("other cache policies of the systems (one replay per size)")
    from replay.plan.policies import policy_answers

    for answer in policy_answers(
        horizon, request.systems, local_sets, rate=rate, budget_rows=budget_rows,
        targets=request.hit_targets, distinct_rows=distinct, full_lookups=full_lookups,
    ):  # fmt: skip
        policy_hits[answer.policy] = answer.hit_at_budget
        policy_bytes[answer.policy] = {
            t: None if r is None else r * row_bytes for t, r in answer.rows_for_hit.items()
        }
        methods[answer.policy] = f"{answer.method} ({answer.replays} replays of {answer.system})"

    from replay.plan.tbe import tbe_curves

    def lru_hit_at(rows: np.ndarray) -> np.ndarray:
        return 1.0 - np.asarray(horizon_mrc(horizon, rows).miss_ratios, dtype=np.float64)

    say("FBGEMM's TBE cache against an ideal LRU, per load factor (one replay each)")
    tbe = tbe_curves(
        horizon, request.systems, local_sets, rate=rate, total_rows=sum(table_rows),
        distinct_rows=distinct, min_rows=smallest, lru_hit_at=lru_hit_at,
        full_lookups=full_lookups,
    )  # fmt: skip

    say("per-table curves and the budget's split")
    from replay.plan.table_curves import table_curves
    from replay.plan.torchrec import torchrec_stats

    uniform_f = uniform_load_factor(budget_rows, table_rows)
    per_table = table_curves(
        horizon, spec, rate, smallest, table_rows,
        extra_sizes=[np.array([math.floor(uniform_f * r * (1 + 1e-12))]) for r in table_rows],
    )  # fmt: skip
    table_lru = per_table.curves
    split = split_budget(names, table_rows, per_table.lookups, table_lru, budget_rows)
    say("TorchRec's cache statistics per table (torchrec.json)")
    torchrec = torchrec_stats(
        horizon,
        bins=request.torchrec_bins,
        load_factors={s.table: s.load_factor for s in split.tables},
    )

    from replay.plan.cluster import routed_steady
    from replay.plan.systems_model import modelled_wanted

    # at production scale nothing replays the steady span: its compiled workload (~0.5 GB
    # for meta-2021's 5.16 G rows) is not built
    modelled = modelled_wanted(spec) and (base.cluster is None or routed_steady(spec, base))
    steady_source = None if modelled else _steady_source(request, horizon)
    cluster = None
    if base.cluster is not None:
        from replay.plan.cluster import plan_cluster

        cluster = plan_cluster(
            system_name=request.systems[0], sets=request.sets, base=base, horizon=horizon,
            steady_source=steady_source, rate=rate, spec=spec,
            budget_bytes=request.cache_budget_bytes, row_bytes=row_bytes,
            targets=request.hit_targets, smallest=smallest, say=say,
            torchrec_bins=request.torchrec_bins, torchrec_tables=torchrec["tables"],
        )  # fmt: skip
        notes += [f"cluster: {n}" for n in cluster["notes"]]
        notes.append(
            "cluster: the cache, split, TBE and systems answers are one GPU holding every "
            "table with the whole budget (the reference beside the cluster's per-GPU "
            "answers); checkpoints are the cluster's: every GPU writes its shards "
            "(replay.plan.cluster_checkpoint)"
        )
    # a batch's distinct rows, E touched(1): the modelled systems' updates, the SSD TBE's
    batch_rows = float(np.interp(1, touched.batches, touched.rows))
    systems_modelled = modelled_wanted(spec)
    if systems_modelled and spec is not None:  # production scale: `replay.plan.systems_model`
        from replay.plan.systems_model import modelled_note, modelled_steady_state

        say("systems: steady state per batch, modelled from the curve (production scale)")
        systems, left = modelled_steady_state(
            spec, request.systems, sets=local_sets, distinct_per_batch=batch_rows,
            lru_hit_at=lambda rows: hit_at(sizes, hits, rows),
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
        systems = steady_state(steady_source, request.systems, sets=local_sets)
    time_per_batch = request.time_per_batch_s or (
        cluster["step_time_s"] if cluster is not None else systems[0].time_per_batch_s
    )
    roomy = [c.name for c in systems if c.never_evicts]
    if roomy:
        notes.append(
            f"{', '.join(roomy)}: the cache never evicted in the {systems[0].batches}-batch span "
            "each system replays (it holds every row the span touches), so these systems' time "
            "per batch is that of a cache without capacity misses, and their policies do not "
            "differ there; the cache answers above compare the policies at the budget"
        )
    horizon_s = batches * time_per_batch
    from replay.plan.ssd_tbe import ssd_tbe_answers, ssd_tbe_system

    ssd_tbe = None
    if ssd_tbe_system(request.systems, local_sets) is not None:
        say("FBGEMM's SSD TBE: L1 and L2 per hit target (every L1 candidate in one read)")
        ssd_tbe = ssd_tbe_answers(
            horizon, request.systems, local_sets, rate=rate, total_rows=sum(table_rows),
            distinct_rows=distinct, min_rows=smallest, full_lookups=full_lookups,
            row_bytes=state_bytes, targets=request.hit_targets, time_per_batch_s=time_per_batch,
            budget_bytes=request.cache_budget_bytes,
            batch_rows=batch_rows,
        )  # fmt: skip

    say("checkpoint strategies at the cluster's MTBF")
    touched_rows = _interpolator(touched.batches, touched.rows)
    common: dict[str, Any] = {
        "time_per_batch_s": time_per_batch,
        "total_rows": int(sum(table_rows)),
        "row_bytes": state_bytes,
        "touched_rows": touched_rows,
        "horizon_s": horizon_s,
        "batch_size": int(horizon.workload.get("batch_size") or 0) if horizon.workload else 0,
        "embedding_dim": row_bytes // 4,
    }
    checkpoints_cluster = None
    if cluster is not None:  # every GPU writes its shards, nodes fail (issue 42)
        from replay.plan.cluster_checkpoint import plan_cluster_checkpoints

        checkpoints_cluster = plan_cluster_checkpoints(
            base, cluster, mtbf_s=request.mtbf_s, draws=request.draws, seed=request.seed,
            **common,
        )  # fmt: skip
        strategies = checkpoints_cluster.strategies
        curves = dict(checkpoints_cluster.curves)
        notes += [f"checkpoint: {n}" for n in checkpoints_cluster.notes]
    else:
        strategies = plan_checkpoints(
            base, mtbf_s=request.mtbf_s, draws=request.draws, seed=request.seed, **common
        )
        curves = {s.name: goodput_curve(base, s, request.mtbf_s, common) for s in strategies}
    notes += _outside_papers_method(strategies)
    best = strategies[0] if strategies else None
    whole = [
        s.name
        for s in strategies
        # cpr's interval is bounded by the updates it may lose, not by goodput
        if s.name not in ("none", "cpr") and s.interval_s >= horizon_s * (1 - 1e-9)
    ]
    if whole:
        notes.append(
            f"{', '.join(whole)}: the best interval is the whole run ({horizon_s:.3g} s of "
            "training): over a run this short one checkpoint costs more than the work it "
            "saves, so these figures are a run without checkpoints"
        )
    document: dict[str, Any] = {
        "horizon": {
            "batches": batches,
            "lookups": lookups,
            "sample_rate": rate,
            "training_time_s": horizon_s,
            "time_per_batch_s": time_per_batch,
            "time_per_batch_from": _time_from(request, systems[0].name, cluster),
            "given": request.given,
            # what the run is, for the answers' first line (a report names it)
            "workload": str((horizon.workload or {}).get("name") or ""),
            "batch_size": int((horizon.workload or {}).get("batch_size") or 0),
        },
        "row_bytes": row_bytes,
        "state_bytes_per_row": state_bytes,
        "distinct_rows": distinct,
        "mrc": {
            "rows": [int(s) for s in sizes],
            "bytes": [float(s * row_bytes) for s in sizes],
            "miss_ratio": [float(m) for m in mrc.miss_ratios],
            "method": "exact" if mrc.exact else f"SHARDS at R = {rate:g}",
            "error_bound": float(mrc.expected_error),
            # ~95% at each size: what each answer's range_bytes is read from
            "point_errors": [float(e) for e in mrc.point_errors],
            **({"error_method": mrc.extra["model"]} if "model" in mrc.extra else {}),
            "analytic_miss_ratio": None if che is None else [float(m) for m in che],
        },
        "touched": {
            **({"basis": touched_basis} if touched_basis else {}),
            "batches": [int(k) for k in touched.batches],
            "rows": [float(r) for r in touched.rows],
            "bytes": [float(r * state_bytes) for r in touched.rows],
            "per_table": {
                name: [float(r) for r in touched.per_table[t]] for t, name in enumerate(names)
            },
        },
        "cache": {
            "budget_bytes": int(request.cache_budget_bytes),
            "hit_at_budget": policy_hits,
            "bytes_for_hit": policy_bytes,
            "range_bytes": {"lru": range_bytes},
            "methods": methods,
            "per_table": [
                {
                    "table": s.table,
                    "table_rows": s.table_rows,
                    "rows": s.rows,
                    "bytes": s.rows * row_bytes,
                    "load_factor": s.load_factor,
                    "hit": s.hit,
                    "uniform_hit": u,  # at the uniform load factor
                    "curve": how,  # how the table's curve was computed at small sizes
                }
                for s, u, how in zip(
                    split.tables, split.uniform_hits, per_table.methods, strict=True
                )
            ],
            "split_hit": split.split_hit,
            "uniform_hit": split.uniform_hit,
            "uniform_load_factor": split.uniform_load_factor,
            # what the split is compared with: one cache of the budget shared by every
            # table, as TorchRec runs the tables of a TBE (one cache, the weighted load
            # factor), and per-table caches at one load factor, labelled as such
            "baseline": _baseline(base, policy_hits, split.split_hit),
            "shared_hit": {
                p: h for p, h in policy_hits.items() if p == "lru" or p.startswith("tbe-")
            },
            "uniform_method": (
                "per-table LRU caches of floor(load factor x rows) rows each over the run: "
                + _curve_basis(per_table.methods, rate)
            ),
            # FBGEMM's TBE cache against an ideal LRU of the same rows (`replay.plan.tbe`)
            "tbe": [c.to_dict() for c in tbe],
            # FBGEMM's SSD TBE: L1 and L2 per hit target (`replay.plan.ssd_tbe`)
            **({"ssd_tbe": ssd_tbe} if ssd_tbe is not None else {}),
        },
        "checkpoint": {
            "cluster_mtbf_s": request.mtbf_s,
            # the failure model as given (--nodes, --node-mtbf); None: --cluster-mtbf
            "nodes": request.nodes,
            "node_mtbf_s": request.node_mtbf_s,
            "system": base.name,
            "best": None if best is None else best.name,
            "strategies": [s.to_dict() for s in strategies],
        },
        "systems": [
            {
                "name": c.name,
                "time_per_batch_s": c.time_per_batch_s,
                "energy_per_batch_j": c.energy_per_batch_j,
                "hit_ratio": c.hit_ratio,
                "pareto": c.pareto,
                "never_evicts": c.never_evicts,
                # the basis of these per-batch figures: the span replayed, the cache's rows
                "batches": c.batches,
                "cache_rows": c.cache_rows,
                # production scale: modelled from the curve, not replayed (only then)
                **({"modelled": True} if systems_modelled else {}),
            }
            for c in systems
        ],
        "notes": notes,
        "torchrec": torchrec,  # written apart as torchrec.json (`replay.plan.write`)
    }
    if cluster is not None:  # only then: a one-GPU plan.json is unchanged
        document["cluster"] = cluster
    from replay.plan.memory import one_gpu_block

    # what each GPU holds, part by part (replay.plan.memory, replay.system.gpu_memory)
    document["memory"] = (
        cluster.pop("memory")
        if cluster is not None
        else one_gpu_block(base, horizon.workload, table_rows, request.cache_budget_bytes)
    )
    if checkpoints_cluster is not None:  # the store, and the published claims computed
        document["checkpoint"]["store"] = checkpoints_cluster.store
        document["claims"] = checkpoints_cluster.claims
    return document, curves


def _has_compute(system: Any) -> bool:
    """Whether a system models a step's dense compute (a given time, or FLOPs at a rate)."""
    compute = system.compute
    return compute.seconds_per_batch > 0 or (
        compute.flops_per_sample > 0 and compute.flops_per_s > 0
    )


def _time_from(request: PlanRequest, first: str, cluster: dict[str, Any] | None) -> str:
    """Where the plan's time per batch comes from, in words."""
    if request.time_per_batch_s:
        return "--time-per-batch"
    if cluster is not None:
        return (
            f"{first} on {cluster['world']} GPUs, the cluster's steady-state step time "
            "(slowest GPU, all-to-all, all-reduce)"
        )
    return f"{first}, steady state"


def _outside_papers_method(strategies: list[Any]) -> list[str]:
    """A note for each Check-N-Run mode outside the paper's method that beats the answer
    by goodput: listed in plan.json, not answered (`replay.plan.check_n_run.ranked`)."""
    from replay._units import format_bytes, format_duration

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
            f"{m['label']} would give {(m['goodput'] - s.goodput) * 100:.2g} points more goodput "
            f"({m['goodput']:.3%} against {s.goodput:.3%}) with "
            f"{format_bytes(m['storage_bytes'])} of storage against "
            f"{format_bytes(s.storage_bytes)} and a {format_duration(m['restore_s'])} restore "
            f"against {format_duration(s.restore_s)}: its chain grows with the run. Every "
            "mode's numbers are in plan.json (checkpoint.strategies[].modes)"
        )
    return out


def _baseline(system: Any, policy_hits: dict[str, float], split_hit: float) -> dict[str, Any]:
    """The shared cache the split is compared with: FBGEMM's TBE cache of the budget when
    the first system's policy is a TBE (what its user runs), else one LRU cache."""
    from replay.plan.policies import policy_label

    label = policy_label(system)
    policy = label if label.startswith("tbe-") and label in policy_hits else "lru"
    hit = float(policy_hits[policy])
    name = (
        f"one FBGEMM TBE cache ({system.policy.cache_algorithm.upper()}) of the budget shared "
        "by every table"
        if policy != "lru"
        else "one LRU cache of the budget shared by every table"
    )
    return {
        "policy": policy,
        "cache": name,
        "hit": hit,
        "split_gain_points": (split_hit - hit) * 100.0,
    }


def _curve_basis(methods: list[str], rate: float) -> str:
    """How the per-table curves were computed, in one line."""
    if rate >= 1.0:
        return "exact stack distances per table"
    counts = Counter(methods)
    parts = [f"{n} table{'s' * (n != 1)}: {m}" for m, n in sorted(counts.items())]
    return f"SHARDS at R = {rate:g} per table, " + "; ".join(parts)


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


def _has_reuse_or_drift(spec: WorkloadSpec) -> bool:
    return any(t.reuse > 0 or t.drift > 0 for t in spec.tables)


__all__ = ["PlanRequest", "choose_sample_rate", "make_plan", "request_sample_rate"]
