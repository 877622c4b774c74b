"""The spread of a cluster plan beside its imbalance: each GPU's and each node's shard
bytes, cache needed and checkpoint bytes, the sharder's bounds, and what the shardings
the plan compares cost in hit ratio, modeled step time and bytes (plan.json's
`cluster.spread` and `cluster.tradeoff`).

Placement. Called by `replay.plan.cluster.plan_cluster` on what it already measured (the
per-GPU entries, the checkpoint bytes, the comparison of shardings); pure arithmetic,
nothing written (`replay.plan.write_cluster` draws it in plan.md).

What is reported, per GPU and per node (min, max, mean, max / mean):

- `shard_bytes`: the rows (values and optimizer state) of the GPU's shards;
- `cache_bytes_for_hit`: the cache each GPU needs for the plan's highest hit target
  (its own curve; GPUs whose curve does not reach it are left out and counted);
- `checkpoint_bytes`: what the GPU writes to a checkpoint (its model-parallel shards;
  rank 0 also each replicated table once, `cluster_checkpoint.checkpoint_bytes`).

The bounds are the sharder's (`replay.engine.sharder`): `hbm_bytes_floor` no plan's
fullest GPU holds less HBM (max(the tables' HBM / W, the largest unsplittable piece: a
table under 1,000 rows whole, any other's even block over every GPU)); `hbm_bytes_bound`
no assignment of the chosen shards holds less; `step_floor_s` no plan of the sharder's
types has a busiest GPU faster (its lookups and splits' collectives, the sharder's model).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def _stats(values: Sequence[float]) -> dict[str, float] | None:
    if not len(values):
        return None
    arr = np.asarray(values, dtype=np.float64)
    mean = float(arr.mean())
    return {
        "min": float(arr.min()),
        "max": float(arr.max()),
        "mean": mean,
        "max_over_mean": float(arr.max() / mean) if mean > 0 else 1.0,
    }


def spread(
    per_gpu: Sequence[dict[str, Any]],
    checkpoint: dict[str, Any],
    basis: dict[str, Any],
    targets: Sequence[float],
    gpus_per_node: int,
) -> dict[str, Any]:
    """plan.json's `cluster.spread` (module docstring)."""
    world = len(per_gpu)
    shard = [float(g["shard_bytes"]) for g in per_gpu]
    top = f"{max(targets):g}" if targets else None
    cache = [
        float(g["bytes_for_hit"][top])
        for g in per_gpu
        if top is not None and g["bytes_for_hit"].get(top) is not None
    ]
    ckpt = [
        float(b) + (float(checkpoint["replicated"]) if r == 0 else 0.0)
        for r, b in enumerate(checkpoint["sharded_per_rank"])
    ]
    nodes = max(1, -(-world // max(gpus_per_node, 1)))

    def node_sums(values: Sequence[float]) -> list[float]:
        out = [0.0] * nodes
        for r, v in enumerate(values):
            out[r // gpus_per_node] += v
        return out

    unit = basis.get("seconds_per_lookup")
    floor_over = basis.get("modeled_floor_over_mean")
    return {
        "per_gpu": {
            "shard_bytes": _stats(shard),
            "cache_bytes_for_hit": _stats(cache),
            "checkpoint_bytes": _stats(ckpt),
        },
        "per_node": {
            "shard_bytes": _stats(node_sums(shard)),
            "checkpoint_bytes": _stats(node_sums(ckpt)),
        },
        "cache_target": None if top is None else float(top),
        "cache_gpus_out_of_reach": world - len(cache) if top is not None else 0,
        "hbm_bytes_floor": basis.get("hbm_bytes_floor"),
        "hbm_bytes_bound": basis.get("hbm_bytes_bound"),
        "step_imbalance_modeled": basis.get("modeled_step_imbalance"),
        "step_max_over_floor_modeled": basis.get("modeled_max_over_floor"),
        "step_s_max_modeled": basis.get("modeled_step_s_max"),
        "step_floor_over_mean_modeled": floor_over,
        "seconds_per_lookup": unit,
        "tables_never_split": basis.get("tables_never_split"),
    }


def tradeoff(comparison: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each compared sharding that fits: its worst GPU's hit at the budget, its busiest
    GPU's modeled step time and its fullest GPU's shard bytes, beside the recommended
    one's (what choosing it costs: points of hit, seconds, bytes)."""
    rows = []
    for s in comparison:
        if not s.get("fits"):
            continue
        hits = [h for h in s["hit_at_budget"] if h is not None]
        rows.append(
            {
                "sharding": s["sharding"],
                "recommended": bool(s["recommended"]),
                "worst_hit": float(min(hits)) if hits else None,
                "step_s_modeled": s.get("modeled_step_s"),
                "shard_bytes_max": s.get("shard_bytes_max"),
            }
        )
    ref = next((r for r in rows if r["recommended"]), None)
    for r in rows:
        if ref is None or r is ref:
            continue
        if r["worst_hit"] is not None and ref["worst_hit"] is not None:
            r["worst_hit_minus_recommended"] = r["worst_hit"] - ref["worst_hit"]
        if r["step_s_modeled"] and ref["step_s_modeled"]:
            r["step_over_recommended"] = r["step_s_modeled"] / ref["step_s_modeled"]
        if r["shard_bytes_max"] and ref["shard_bytes_max"]:
            r["shard_bytes_over_recommended"] = r["shard_bytes_max"] / ref["shard_bytes_max"]
    return rows


def same_run(steady: tuple[Any, Any, Any], system: Any, placement: Any) -> bool:
    """Whether replaying `placement` under `system` is the steady span's replay again
    (`steady`: its placement, system and columns): a scaling point at the user's cluster
    then takes its columns (the replay is deterministic: the same numbers, one replay
    fewer; `replay.plan.cluster_scaling.scaling`)."""
    mine, sys0, _ = steady
    return bool(
        system == sys0
        and (placement.nodes, placement.gpus_per_node) == (mine.nodes, mine.gpus_per_node)
        and placement.plan == mine.plan
        and placement.tables == mine.tables
        and placement.shards == mine.shards
        and placement.row_bytes == mine.row_bytes
    )


def spread_markdown(c: dict[str, Any]) -> list[str]:
    """plan.md's lines for `cluster.spread` and `cluster.tradeoff` (empty without them)."""
    from replay._units import format_bytes, format_number
    from replay.report.plan_section import pct_text, times_text

    sp = c.get("spread")
    if not sp:
        return []

    def b(v: float | None) -> str:
        return "n/a" if v is None else format_bytes(v)

    out = [
        "",
        "Spread per GPU and per node (min / mean / max, max / mean):",
        "",
        "| what | min | mean | max | max / mean |",
        "|---|---|---|---|---|",
    ]
    rows = [
        ("shard bytes per GPU", sp["per_gpu"]["shard_bytes"]),
        ("cache for hit {} per GPU".format(pct_text(sp["cache_target"])),
         sp["per_gpu"]["cache_bytes_for_hit"]),
        ("checkpoint bytes per GPU", sp["per_gpu"]["checkpoint_bytes"]),
        ("shard bytes per node", sp["per_node"]["shard_bytes"]),
        ("checkpoint bytes per node", sp["per_node"]["checkpoint_bytes"]),
    ]  # fmt: skip
    for name, st in rows:
        if st is None:
            out.append(f"| {name} | n/a | | | |")
            continue
        out.append(
            f"| {name} | {b(st['min'])} | {b(st['mean'])} | {b(st['max'])} | "
            f"{times_text(st['max_over_mean'])} |"
        )
    bounds = []
    if sp.get("hbm_bytes_floor") is not None:
        bounds.append(
            f"no plan holds fewer than {b(sp['hbm_bytes_floor'])} of HBM on its fullest GPU "
            f"(the tables' bytes / GPUs, or the largest piece that cannot split), none with "
            f"these shards fewer than {b(sp['hbm_bytes_bound'])}"
        )
    if sp.get("step_max_over_floor_modeled") is not None:
        bounds.append(
            f"the busiest GPU's modeled step (lookups, misses, splits' collectives) is "
            f"{times_text(sp['step_max_over_floor_modeled'])} the lowest any plan of the "
            f"sharder's types can reach, {times_text(sp['step_imbalance_modeled'])} the mean"
        )
    if sp.get("tables_never_split"):
        bounds.append(f"{sp['tables_never_split']} tables under 1,000 rows are never split")
    if bounds:
        out += ["", "Bounds (the sharder's model): " + "; ".join(bounds) + "."]
    rows_t = c.get("tradeoff") or []
    ref = next((r for r in rows_t if r["recommended"]), None)
    if ref is not None and len(rows_t) > 1:
        out += ["", "What each sharding costs against the recommended one:", ""]
        for r in rows_t:
            if r is ref:
                continue
            parts = []
            if "worst_hit_minus_recommended" in r:
                d = r["worst_hit_minus_recommended"] * 100
                parts.append(f"worst GPU hit {pct_text(r['worst_hit'])} ({d:+.1f} points)")
            if "step_over_recommended" in r:
                parts.append(
                    f"modeled busiest-GPU step {format_number(r['step_s_modeled'] * 1e6)} µs "
                    f"({times_text(r['step_over_recommended'])} the recommended)"
                )
            if "shard_bytes_over_recommended" in r:
                parts.append(
                    f"fullest GPU {b(r['shard_bytes_max'])} "
                    f"({times_text(r['shard_bytes_over_recommended'])})"
                )
            out.append(f"- {r['sharding']}: " + "; ".join(parts or ["no figures"]))
    return out


__all__ = ["same_run", "spread", "spread_markdown", "tradeoff"]
