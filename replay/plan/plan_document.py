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
from typing import Any

from replay.plan.plan_stages import (
    CacheAnswers,
    CheckpointAnswers,
    Curves,
    Setup,
    SystemAnswers,
)
from replay.plan.request import PlanRequest


def assemble_plan(
    s: Setup,
    c: Curves,
    cache: CacheAnswers,
    sa: SystemAnswers,
    ck: CheckpointAnswers,
    notes: list[str],
) -> dict[str, Any]:
    """The document plan.json holds (its `torchrec` part is written as torchrec.json)."""
    request, base, horizon = s.request, s.base, s.horizon
    row_bytes, state_bytes, rate = s.row_bytes, s.state_bytes, s.rate
    mrc, touched, che, sizes = c.mrc, c.touched, c.che, c.sizes
    split, per_table, policy_hits = cache.split, cache.per_table, cache.policy_hits
    strategies = ck.strategies
    best = strategies[0] if strategies else None
    cluster = None if sa.cluster is None else dict(sa.cluster)
    document: dict[str, Any] = {
        "horizon": {
            "batches": s.batches,
            "lookups": c.lookups,
            "sample_rate": rate,
            "training_time_s": sa.horizon_s,
            "time_per_batch_s": sa.time_per_batch_s,
            "time_per_batch_from": _time_from(request, sa.systems[0].name, cluster),
            "given": request.given,
            # what the run is, for the answers' first line (a report names it)
            "workload": str((horizon.workload or {}).get("name") or ""),
            "batch_size": int((horizon.workload or {}).get("batch_size") or 0),
        },
        "row_bytes": row_bytes,
        "state_bytes_per_row": state_bytes,
        "distinct_rows": c.distinct,
        "mrc": {
            "rows": [int(r) for r in sizes],
            "bytes": [float(r * row_bytes) for r in sizes],
            "miss_ratio": [float(m) for m in mrc.miss_ratios],
            "method": "exact" if mrc.exact else f"SHARDS at R = {rate:g}",
            "error_bound": float(mrc.expected_error),
            # ~95% at each size: what each answer's range_bytes is read from
            "point_errors": [float(e) for e in mrc.point_errors],
            **({"error_method": mrc.extra["model"]} if "model" in mrc.extra else {}),
            "analytic_miss_ratio": None if che is None else [float(m) for m in che],
        },
        "touched": {
            **({"basis": c.touched_basis} if c.touched_basis else {}),
            "batches": [int(k) for k in touched.batches],
            "rows": [float(r) for r in touched.rows],
            "bytes": [float(r * state_bytes) for r in touched.rows],
            "per_table": {
                name: [float(r) for r in touched.per_table[t]] for t, name in enumerate(s.names)
            },
        },
        "cache": {
            "budget_bytes": int(request.cache_budget_bytes),
            "hit_at_budget": policy_hits,
            "bytes_for_hit": cache.policy_bytes,
            "range_bytes": {"lru": cache.range_bytes},
            "methods": cache.methods,
            "per_table": [
                {
                    "table": t.table,
                    "table_rows": t.table_rows,
                    "rows": t.rows,
                    "bytes": t.rows * row_bytes,
                    "load_factor": t.load_factor,
                    "hit": t.hit,
                    "uniform_hit": u,  # at the uniform load factor
                    "curve": how,  # how the table's curve was computed at small sizes
                }
                for t, u, how in zip(
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
            "tbe": [x.to_dict() for x in cache.tbe],
            # FBGEMM's SSD TBE: L1 and L2 per hit target (`replay.plan.ssd_tbe`)
            **({"ssd_tbe": sa.ssd_tbe} if sa.ssd_tbe is not None else {}),
        },
        "checkpoint": {
            "cluster_mtbf_s": request.mtbf_s,
            # the failure model as given (--nodes, --node-mtbf); None: --cluster-mtbf
            "nodes": request.nodes,
            "node_mtbf_s": request.node_mtbf_s,
            "system": base.name,
            "best": None if best is None else best.name,
            "strategies": [x.to_dict() for x in strategies],
        },
        "systems": [
            {
                "name": x.name,
                "time_per_batch_s": x.time_per_batch_s,
                "energy_per_batch_j": x.energy_per_batch_j,
                "hit_ratio": x.hit_ratio,
                "pareto": x.pareto,
                "never_evicts": x.never_evicts,
                # the basis of these per-batch figures: the span replayed, the cache's rows
                "batches": x.batches,
                "cache_rows": x.cache_rows,
                # production scale: modelled from the curve, not replayed (only then)
                **({"modelled": True} if sa.modelled else {}),
            }
            for x in sa.systems
        ],
        "notes": list(notes),
        "torchrec": cache.torchrec,  # written apart as torchrec.json (`replay.plan.write`)
    }
    if cluster is not None:  # only then: a one-GPU plan.json is unchanged
        document["cluster"] = cluster
    from replay.plan.memory import one_gpu_block

    # what each GPU holds, part by part (replay.plan.memory, replay.system.gpu_memory)
    document["memory"] = (
        cluster.pop("memory")
        if cluster is not None
        else one_gpu_block(base, horizon.workload, s.table_rows, request.cache_budget_bytes)
    )
    if ck.cluster is not None:  # the store, and the published claims computed
        document["checkpoint"]["store"] = ck.cluster.store
        document["claims"] = ck.cluster.claims
    return document


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


__all__ = ["assemble_plan"]
