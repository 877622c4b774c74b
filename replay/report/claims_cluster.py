"""The claims table's rows for a cluster: PatrickStar's communication beside its paper.

Placement. Read by `replay.report.analysis.claims` (the claims table); reads only run
folders' summaries (`summary.json`'s `patrickstar` block, which
`replay.engine.patrickstar` computes), never a model.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from replay._units import format_bytes as fmt_bytes
from replay.report.document import fmt_multiple


def patrickstar_claim(runs: Sequence[Any]) -> dict[str, str] | None:
    """PatrickStar's data-parallel communication: the paper's claim, and each cluster
    run of the `chunk` policy's volume per GPU and step against data parallelism; None
    without such a run (the one-GPU reports' table keeps its rows)."""
    shown = [r for r in runs if isinstance(r.summary.get("patrickstar"), dict)]
    claim = "scales to multiple GPUs using data parallelism, with the lowest communication "
    claim += "bandwidth requirements"
    source = "PatrickStar (arXiv 2108.05818v1) abstract"
    if not shown:
        return None
    parts = []
    for run in shown:
        ps = run.summary["patrickstar"]
        vs = ps.get("vs_data_parallel")
        dense = ps.get("dense_model_ratio")
        moved = ps["all_gather_bytes_per_step"] + ps["reduce_scatter_bytes_per_step"]
        text = f"{run.label} on {ps['world']} GPUs: {fmt_bytes(moved)} per GPU a step"
        if vs:
            text += f", {fmt_multiple(vs)} data parallelism's all-reduce of the same chunks"
        if dense:
            text += f" ({fmt_multiple(dense)} in a dense model)"
        parts.append(text)
    first = shown[0].summary["patrickstar"]
    return {
        "claim": claim,
        "source": source,
        "model": "; ".join(parts),
        "assumptions": (
            f"chunks of {first['chunk_rows']:,} rows in groups of one chunk per GPU, a group "
            "all-gathered in forward and again in backward when any GPU's samples use it, "
            f"gradients reduce-scattered; {first['bytes_per_value']} B a value; ring "
            "collectives (Tencent/PatrickStar's code; the paper's own volume not quoted)"
        ),
    }


__all__ = ["patrickstar_claim"]
