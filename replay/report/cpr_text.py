"""CPR's interval and lost updates in words (issue 54), from a strategy's plan.json entry
(`replay.plan.cluster_checkpoint` writes it): how the interval was chosen (the objective's
optimum, the lost-samples bound, or the run's end) and what one failure loses, the mean
over the failed node and the worst node's. Shared by plan.md, the claims and the report.
Pure, standard library and `replay._units` only."""

from __future__ import annotations

from typing import Any

from replay._units import format_duration, format_multiple

BINDING = {
    "optimum": "the objective's optimum",
    "pls_target": "the lost-samples bound (below the objective's optimum)",
    "one batch": "one batch (the lost-samples bound is under one batch)",
    "span": "the run's end: no checkpoint inside the run",
}


def cpr_interval_text(p: Any) -> str:
    """How cpr's interval was chosen, for the claim and plan.md (a plan or its dict)."""
    d = p if isinstance(p, dict) else p.to_dict()
    b = d.get("interval_basis")
    if not b:
        return "cpr's interval: not recorded"
    return (
        f"cpr's interval ({format_duration(d['interval_s'])}) minimises the stall share plus "
        f"the portion of lost samples priced at {b['lost_sample_cost']:g}× their training time "
        f"(ASSUMPTION), at most the {b['pls_target']:.0%} lost-samples bound (ASSUMPTION): "
        f"optimum {format_duration(b['optimum_s'])}, bound "
        f"{format_duration(max(b['pls_bound_s'], 0.0))}, set by {BINDING[b['binding']]}; "
        f"stall {b['stall_share']:.3%} and lost samples {b['pls']:.3%} of the run"
    )


def cpr_lost_text(p: Any) -> str:
    """The updates one failure loses: the mean over the failed node and the worst node's."""
    d = p if isinstance(p, dict) else p.to_dict()
    mean = d.get("lost_updates_rows")
    if mean is None:
        return "a failure loses every update of the failed node (no copy survives it)"
    text = f"a failure loses {mean:,.0f} rows' updates (the mean over which node fails)"
    worst = d.get("lost_updates_rows_worst_node")
    if worst is not None and mean > 0:
        text += (
            f"; a failure of node {d['worst_node']}, which holds "
            f"{d['worst_node_share']:.1%} of the touched rows, loses {worst:,.0f} "
            f"({format_multiple(worst / mean)} the mean)"
        )
    return text


__all__ = ["BINDING", "cpr_interval_text", "cpr_lost_text"]
