"""plan.md's memory answer and its `### GPU memory` section (plan.json's `memory`,
`replay.plan.memory`): the worst GPU's peaks against its capacity, whether every GPU fits,
by how much, and which part to cut first."""

from __future__ import annotations

from typing import Any

from replay._units import format_bytes

PART_LABELS = {
    "weights_bytes": "weights (hbm tables)",
    "optimizer_bytes": "optimizer state",
    "cache_bytes": "caches and their metadata",
    "inputs_bytes": "input batches in flight",
    "all_to_all_bytes": "pooled-embedding all-to-all",
    "tbe_workspace_bytes": "TBE backward workspace",
    "dense_bytes": "dense model (params, grads, state)",
    "activations_bytes": "activations (given)",
    "allocator_slack_bytes": "allocator slack (reserved - allocated)",
}
CUTS = {
    "weights_bytes": "move the largest tables off HBM (cluster.kernel, sharding.json kernel) "
    "or add GPUs",
    "optimizer_bytes": "a lighter optimizer (row-wise Adagrad keeps one value per row)",
    "cache_bytes": "a lower cache load factor",
    "inputs_bytes": "a smaller batch or a shallower pipeline (compute.pipeline)",
    "all_to_all_bytes": "a smaller batch",
    "tbe_workspace_bytes": "a smaller batch",
    "dense_bytes": "a smaller dense model or a stateless dense optimizer",
    "activations_bytes": "a smaller batch or activation checkpointing",
}


def memory_answer_lines(document: dict[str, Any]) -> list[str]:
    """The one-line answer (none without plan.json's `memory`)."""
    m = document.get("memory")
    if not m:
        return []
    gpus = m["per_gpu"]
    worst = next(g for g in gpus if g["rank"] == m["worst_rank"])
    where = f"GPU {worst['rank']}" if len(gpus) > 1 else "the GPU"
    peak = (
        f"{where} peaks at {format_bytes(worst['allocated_peak_bytes'])} allocated, "
        f"{format_bytes(worst['reserved_peak_bytes'])} reserved of "
        f"{format_bytes(worst['capacity_bytes'])}"
    )
    if m["fits"]:
        room = format_bytes(-worst["over_bytes"])
        return [f"Memory: {peak}; every GPU fits ({room} to spare on the fullest)."]
    over = [g for g in gpus if not g["fits"]]
    cut = worst.get("cut", "weights_bytes")
    return [
        f"Memory: {peak}: {len(over)} of {len(gpus)} GPUs do not fit, the worst by "
        f"{format_bytes(worst['over_bytes'])}; cut its {PART_LABELS[cut]} first: "
        f"{CUTS.get(cut, '')}."
    ]


def memory_markdown(document: dict[str, Any]) -> list[str]:
    """The `### GPU memory` section: the worst GPU's parts, each node's host and drives."""
    m = document.get("memory")
    if not m:
        return []
    worst = next(g for g in m["per_gpu"] if g["rank"] == m["worst_rank"])
    out = [
        "### GPU memory",
        "",
        f"GPU {worst['rank']} (the fullest): {format_bytes(worst['allocated_peak_bytes'])} "
        f"allocated and {format_bytes(worst['reserved_peak_bytes'])} reserved at the peak, "
        f"of {format_bytes(worst['capacity_bytes'])}. {m['basis']}.",
        "",
        f"| part | bytes (GPU {worst['rank']}) |",
        "|---|---|",
    ]
    out += [
        f"| {PART_LABELS.get(k, k)} | {format_bytes(v)} |"
        for k, v in worst["parts"].items()
        if v > 0
    ]
    nodes = [n for n in m["per_node"] if n["host_bytes"] or n["drive_bytes"]]
    if nodes:
        out += ["", "| node | host memory | drives |", "|---|---|---|"]
        out += [
            f"| {n['node']} | {format_bytes(n['host_bytes'])} | {format_bytes(n['drive_bytes'])} |"
            for n in nodes
        ]
    return [*out, *_left_hbm_lines(document), ""]


LEFT_HBM_SHOWN = 12  # the tables that leave HBM listed in plan.md (all: plan.json)


def _left_hbm_lines(document: dict[str, Any]) -> list[str]:
    """A cluster's tables that leave HBM (`cluster.kernels`, `replay.engine.kernels`):
    the kernels' line, then the costliest tables by the bytes their misses move."""
    kernels = (document.get("cluster") or {}).get("kernels") or {}
    left = kernels.get("left_hbm") or []
    if not left:
        return []
    out = [
        "",
        f"Tables: {kernels['line']}.",
        "",
        "| table | kernel | load factor | expected hit | the table's bytes | its misses over "
        "PCIe a batch (all its GPUs) |",
        "|---|---|---|---|---|---|",
    ]
    costliest = sorted(left, key=lambda t: (-t["pcie_bytes"], t["table"]))
    for t in costliest[:LEFT_HBM_SHOWN]:
        clf = t.get("cache_load_factor")
        out.append(
            f"| {t['table']} | {t['kernel']} | {'-' if clf is None else f'{clf:g}'} | "
            f"{t['hit']:.3f} | {format_bytes(t['bytes'])} | {format_bytes(t['pcie_bytes'])} |"
        )
    if len(left) > LEFT_HBM_SHOWN:
        out += [
            "",
            f"and {len(left) - LEFT_HBM_SHOWN} more (plan.json's cluster.kernels.left_hbm).",
        ]
    return out


__all__ = ["memory_answer_lines", "memory_markdown"]
