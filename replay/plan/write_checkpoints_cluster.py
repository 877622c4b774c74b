"""plan.md's lines for a cluster's checkpoints and the published claims (issue 42).

Reads plan.json's `checkpoint` (its `store` and each strategy's `write_s`,
`bytes_per_node`, `restore_node_failure_s`, `lost_updates_rows` and the worst node's,
cpr's `interval_basis`) and `claims`, as
`replay.plan.cluster_checkpoint` wrote them. Pure: lines of Markdown, no files.
"""

from __future__ import annotations

from typing import Any

from replay._units import format_bytes, format_duration, format_multiple, format_percent


def _dur(x: float | None) -> str:
    return "no copy" if x is None else format_duration(x)


def _worst(s: dict[str, Any]) -> str:
    """The worst node's lost updates and its multiple of the mean ("-" where unknown)."""
    worst, mean = s.get("lost_updates_rows_worst_node"), s.get("lost_updates_rows")
    if worst is None:
        return "-"
    ratio = f" ({format_multiple(worst / mean)} the mean)" if mean else ""
    return f"{worst:,.0f} (node {s.get('worst_node')}){ratio}"


def cluster_checkpoint_markdown(document: dict[str, Any]) -> list[str]:
    """The cluster's checkpoint table and the claims table (empty for one GPU)."""
    ck = document["checkpoint"]
    store = ck.get("store")
    if store is None:
        return []
    out = [
        "",
        "#### Checkpoints of the cluster",
        "",
        f"{store['nodes']} nodes (node MTBF {format_duration(store['node_mtbf_s'])}), "
        f"checkpoints to {store['kind']}"
        + (
            f" with {store['replicas']} buddy cop{'y' if store['replicas'] == 1 else 'ies'}"
            if store["replicas"]
            else ""
        )
        + "; every GPU writes its shards at once, the dense state split over the ranks; "
        "write = the slowest node's; restore after a node failure = restart + the "
        "replacement node's pull while the others read locally (docs/cluster_checkpoints.md).",
        "",
        "| strategy | recovery | write (slowest node) | bytes per node (the busiest) "
        "| restore after a node failure | lost updates per failure (rows, mean over nodes) "
        "| lost updates per failure (rows, the worst node) | goodput | p5 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    partial = []
    for s in ck["strategies"]:
        if s.get("write_s") is None:
            continue
        rows = s.get("lost_updates_rows")
        out.append(
            f"| {s.get('label') or s['name']} | {s.get('recovery', '')} | "
            f"{format_duration(s['write_s'])} | {format_bytes(s['bytes_per_node'])} | "
            f"{_dur(s.get('restore_node_failure_s'))} | "
            f"{'-' if rows is None else f'{rows:,.0f}'} | {_worst(s)} | "
            f"{format_percent(s['goodput'])} | {format_percent(s['goodput_p5'])} |"
        )
        if s.get("interval_basis"):
            partial.append(s)
    from replay.report.cpr_text import cpr_interval_text, cpr_lost_text

    for s in partial:
        lost = cpr_lost_text(s)
        out += ["", f"{cpr_interval_text(s)}. {lost[:1].upper()}{lost[1:]}."]
    claims = document.get("claims") or []
    if claims:
        out += ["", "#### Published claims, computed", "",
                "| claim | source | this model | assumptions |", "|---|---|---|---|"]  # fmt: skip
        for c in claims:
            out.append(
                f"| {c['claim']} | {c['source']} | {c['model']} | {'; '.join(c['assumptions'])} |"
            )
    return out


__all__ = ["cluster_checkpoint_markdown"]
