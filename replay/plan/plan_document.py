"""plan.json assembled from the typed results of `replay plan`'s stages
(`replay.plan.plan_stages`): the one place the document's shape is written (its typed
definition: `replay._schema_plan.Plan`; its keys and units: docs/plan.md).

It computes nothing but words (where the time per batch comes from, how the per-table
curves were reached), a one-GPU plan's memory block (`replay.plan.memory.one_gpu_block`)
and the baseline the split is compared with: one shared cache of the budget, FBGEMM's
TBE cache when the first system's policy is a TBE (what its user runs), else one LRU
cache.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, TypedDict, cast

from replay._schema_plan import (
    Baseline,
    Cache,
    Checkpoint,
    Claim,
    Cluster,
    Horizon,
    Memory,
    MissRatioCurve,
    PlanDocument,
    Strategy,
    SystemAnswer,
    TableSplit,
    Touched,
)
from replay.plan.plan_stages import (
    CacheAnswers,
    CheckpointAnswers,
    Curves,
    Setup,
    SystemAnswers,
)
from replay.plan.request import PlanRequest


# A part's optional keys sit between required ones in plan.json: each is unpacked from one
# of these where the key goes, so the document keeps its order (and its bytes).
class _ErrorMethod(TypedDict, total=False):
    error_method: str


class _Basis(TypedDict, total=False):
    basis: Any


class _ClusterPart(TypedDict, total=False):
    cluster: Cluster


class _Claims(TypedDict, total=False):
    claims: list[Claim]


def assemble_plan(
    s: Setup,
    c: Curves,
    cache: CacheAnswers,
    sa: SystemAnswers,
    ck: CheckpointAnswers,
    notes: list[str],
) -> PlanDocument:
    """The document plan.json holds (its `torchrec` part is written as torchrec.json)."""
    request, base = s.request, s.base
    # a cluster's part is plan_cluster's open shape (`Cluster`); its memory moves to the
    # document's own `memory`
    cluster = None if sa.cluster is None else dict(sa.cluster)
    memory = cast(Memory, cluster.pop("memory")) if cluster is not None else _one_gpu_memory(s)
    in_cluster: _ClusterPart = {} if cluster is None else {"cluster": cast(Cluster, cluster)}
    # the store and the published claims computed, for a cluster only
    claims: _Claims = {}
    if ck.cluster is not None:
        claims = {"claims": cast(list[Claim], ck.cluster.claims)}
    return {
        "horizon": _horizon(s, c, sa, cluster),
        "row_bytes": s.row_bytes,
        "state_bytes_per_row": s.state_bytes,
        "distinct_rows": c.distinct,
        "mrc": _mrc(c, s.row_bytes, s.rate),
        "touched": _touched(s, c),
        "cache": _cache(s, cache, sa),
        "checkpoint": _checkpoint(request, base.name, ck),
        "systems": [_system(x, sa.modelled) for x in sa.systems],
        "notes": list(notes),
        "torchrec": cache.torchrec,  # written apart as torchrec.json (`replay.plan.write`)
        **in_cluster,  # only then: a one-GPU plan.json is unchanged
        # what each GPU holds, part by part (replay.plan.memory, replay.system.gpu_memory)
        "memory": memory,
        **claims,
    }


def _horizon(s: Setup, c: Curves, sa: SystemAnswers, cluster: dict[str, Any] | None) -> Horizon:
    workload = s.horizon.workload or {}
    return {
        "batches": s.batches,
        "lookups": c.lookups,
        "sample_rate": s.rate,
        "training_time_s": sa.horizon_s,
        "time_per_batch_s": sa.time_per_batch_s,
        "time_per_batch_from": _time_from(s.request, sa.systems[0].name, cluster),
        "given": s.request.given,
        # what the run is, for the answers' first line (a report names it)
        "workload": str(workload.get("name") or ""),
        "batch_size": int(workload.get("batch_size") or 0),
    }


def _mrc(c: Curves, row_bytes: int, rate: float) -> MissRatioCurve:
    mrc = c.mrc
    error_method: _ErrorMethod = {}
    if "model" in mrc.extra:
        error_method = {"error_method": mrc.extra["model"]}
    return {
        "rows": [int(r) for r in c.sizes],
        "bytes": [float(r * row_bytes) for r in c.sizes],
        "miss_ratio": [float(m) for m in mrc.miss_ratios],
        "method": "exact" if mrc.exact else f"SHARDS at R = {rate:g}",
        "error_bound": float(mrc.expected_error),
        # ~95% at each size: what each answer's range_bytes is read from
        "point_errors": [float(e) for e in mrc.point_errors],
        **error_method,
        "analytic_miss_ratio": None if c.che is None else [float(m) for m in c.che],
    }


def _touched(s: Setup, c: Curves) -> Touched:
    touched, state_bytes = c.touched, s.state_bytes
    basis: _Basis = {"basis": c.touched_basis} if c.touched_basis else {}
    return {
        **basis,
        "batches": [int(k) for k in touched.batches],
        "rows": [float(r) for r in touched.rows],
        "bytes": [float(r * state_bytes) for r in touched.rows],
        "per_table": {
            name: [float(r) for r in touched.per_table[t]] for t, name in enumerate(s.names)
        },
    }


def _cache(s: Setup, cache: CacheAnswers, sa: SystemAnswers) -> Cache:
    split, per_table, policy_hits = cache.split, cache.per_table, cache.policy_hits
    hit_at_budget: dict[str, float | None] = dict(policy_hits)
    out: Cache = {
        "budget_bytes": int(s.request.cache_budget_bytes),
        "hit_at_budget": hit_at_budget,
        "bytes_for_hit": cache.policy_bytes,
        "range_bytes": {"lru": cache.range_bytes},
        "methods": cache.methods,
        "per_table": [
            _table_split(t, u, how, s.row_bytes)
            for t, u, how in zip(split.tables, split.uniform_hits, per_table.methods, strict=True)
        ],
        "split_hit": split.split_hit,
        "uniform_hit": split.uniform_hit,
        "uniform_load_factor": split.uniform_load_factor,
        # what the split is compared with: one cache of the budget shared by every
        # table, as TorchRec runs the tables of a TBE (one cache, the weighted load
        # factor), and per-table caches at one load factor, labelled as such
        "baseline": _baseline(s.base, policy_hits, split.split_hit),
        "shared_hit": {p: h for p, h in policy_hits.items() if p == "lru" or p.startswith("tbe-")},
        "uniform_method": (
            "per-table LRU caches of floor(load factor x rows) rows each over the run: "
            + _curve_basis(per_table.methods, s.rate)
        ),
        # FBGEMM's TBE cache against an ideal LRU of the same rows (`replay.plan.tbe`)
        "tbe": [x.to_dict() for x in cache.tbe],
    }
    if sa.ssd_tbe is not None:  # FBGEMM's SSD TBE: L1 and L2 per hit target (its last key)
        out["ssd_tbe"] = sa.ssd_tbe
    return out


def _table_split(t: Any, uniform_hit: float, how: str, row_bytes: int) -> TableSplit:
    return {
        "table": t.table,
        "table_rows": t.table_rows,
        "rows": t.rows,
        "bytes": t.rows * row_bytes,
        "load_factor": t.load_factor,
        "hit": t.hit,
        "uniform_hit": uniform_hit,  # at the uniform load factor
        "curve": how,  # how the table's curve was computed at small sizes
    }


def _checkpoint(request: PlanRequest, system: str, ck: CheckpointAnswers) -> Checkpoint:
    strategies = ck.strategies
    out: Checkpoint = {
        "cluster_mtbf_s": request.mtbf_s,
        # the failure model as given (--nodes, --node-mtbf); None: --cluster-mtbf
        "nodes": request.nodes,
        "node_mtbf_s": request.node_mtbf_s,
        "system": system,
        "best": strategies[0].name if strategies else None,
        # each strategy's open shape (`Strategy`: its modes, a cluster's breakdowns)
        "strategies": [cast(Strategy, x.to_dict()) for x in strategies],
    }
    if ck.cluster is not None:  # a cluster's checkpoint store (its last key)
        out["store"] = ck.cluster.store
    return out


def _system(x: Any, modelled: bool) -> SystemAnswer:
    out: SystemAnswer = {
        "name": x.name,
        "time_per_batch_s": x.time_per_batch_s,
        "energy_per_batch_j": x.energy_per_batch_j,
        "hit_ratio": x.hit_ratio,
        "pareto": x.pareto,
        "never_evicts": x.never_evicts,
        # the basis of these per-batch figures: the span replayed, the cache's rows
        "batches": x.batches,
        "cache_rows": x.cache_rows,
    }
    if modelled:  # production scale: modelled from the curve, not replayed (only then)
        out["modelled"] = True
    return out


def _one_gpu_memory(s: Setup) -> Memory:
    from replay.plan.memory import one_gpu_block

    # one_gpu_block's open shape (`Memory`: the parts of each GPU in bytes)
    block = one_gpu_block(s.base, s.horizon.workload, s.table_rows, s.request.cache_budget_bytes)
    return cast(Memory, block)


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


def _baseline(system: Any, policy_hits: dict[str, float], split_hit: float) -> Baseline:
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


__all__ = ["assemble_plan"]
