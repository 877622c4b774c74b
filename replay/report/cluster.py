"""The report's Cluster section: one row per cluster run (a run folder whose summary.json
has a `cluster`, `replay.engine.cluster_run` or `replay.engine.patrickstar_run`) and its
figures (`replay.report.figures_cluster`).

Placement. Analysis and blocks for `replay report`: `cluster_rows` is called by
`replay.report.analysis.analyse` (the report's summary.json `cluster`, present only when
a cluster run is among the results, so a one-GPU report is unchanged), `cluster_blocks`
by `replay.report.build`. Reads only the loaded run folders (`replay.report.load`,
which checked the fields quoted here), never a model.

What a row says, from summary.json (per batch: the mean over all the run's batches, as
summary.json states it, not the report's steady state): the GPUs (nodes x GPUs per
node), the sharding, the step time, the all-to-all's bytes and time (which model:
`all_to_all_model`), the all-reduce's
time (PatrickStar's blocking collectives for a `chunk` run), the imbalance (the busiest
GPU's lookups over the mean, per batch: mean and max), and the hit ratio of each GPU's
cache from summary.json `ranks` (hits / lookups): the worst GPU's and the mean over the
GPUs (unweighted; the cluster's own, weighted by lookups, is `policy.hit_ratio`).
"""

from __future__ import annotations

from typing import Any

from replay._units import format_hit_ratio
from replay.report.blocks import bytes_text, images, ms
from replay.report.document import Block, Heading, Paragraph, Table, fmt_multiple
from replay.report.figures import FigureOut
from replay.report.load import Results, RunData

SECTION = "cluster"  # the figures' section (`FigureOut.section`)
HEADING = "Cluster"


def cluster_runs(results: Results) -> list[RunData]:
    """The runs with a `cluster` in their summary, in the report's order."""
    return [r for r in results.all_runs() if isinstance(r.summary.get("cluster"), dict)]


def rank_hit_ratios(run: RunData) -> list[float] | None:
    """Each GPU's hit ratio (hits / lookups; 0 for a GPU without lookups), in rank
    order; None when summary.json's `ranks` have no hits (a PatrickStar run)."""
    ranks = run.summary.get("ranks") or []
    if not ranks or any("hits" not in r for r in ranks):
        return None
    return [r["hits"] / r["lookups"] if r.get("lookups") else 0.0 for r in ranks]


def _sharding(cluster: dict[str, Any]) -> str:
    basis = cluster.get("sharding") or {}
    kind = str(basis.get("sharding", "?"))
    if kind == "patrickstar" and "chunk_rows" in basis:
        return f"patrickstar (chunks of {basis['chunk_rows']:,} rows)"
    return kind


def _float(cluster: dict[str, Any], key: str) -> float | None:
    value = cluster.get(key)
    return float(value) if value is not None else None


def cluster_row(run: RunData) -> dict[str, Any]:
    """One cluster run's numbers (module docstring): summary.json's, and the per-GPU
    hit ratios' worst and mean."""
    c = run.summary["cluster"]
    ratios = rank_hit_ratios(run)
    worst = min(range(len(ratios)), key=ratios.__getitem__) if ratios else None
    allreduce = _float(c, "allreduce_s_per_batch")
    return {
        "label": run.label,
        "system": run.system,
        "nodes": c["nodes"],
        "gpus_per_node": c["gpus_per_node"],
        "world": c["world"],
        "sharding": _sharding(c),
        "batches": run.summary.get("batches"),
        "step_time_s": _float(c, "step_time_s"),
        "all_to_all_bytes_per_batch": _float(c, "all_to_all_bytes_per_batch"),
        "all_to_all_s_per_batch": _float(c, "all_to_all_s_per_batch"),
        # runs written before TorchRec's collectives were modelled counted the lower bound
        "all_to_all_model": str(c.get("all_to_all_model", "lower-bound")),
        "allreduce_s_per_batch": (
            allreduce if allreduce is not None else _float(c, "collectives_s_per_batch")
        ),
        "collectives": "all-reduce" if allreduce is not None else "patrickstar",
        "imbalance_mean": _float(c, "imbalance_mean"),
        "imbalance_max": _float(c, "imbalance_max"),
        "worst_rank": worst,
        "hit_ratio_worst": ratios[worst] if ratios and worst is not None else None,
        "hit_ratio_mean": sum(ratios) / len(ratios) if ratios else None,
    }


def cluster_rows(results: Results) -> list[dict[str, Any]]:
    """A row per cluster run (empty without one)."""
    return [cluster_row(run) for run in cluster_runs(results)]


def _worst(row: dict[str, Any]) -> str:
    if row["hit_ratio_worst"] is None:
        return "n/a"
    return f"{format_hit_ratio(row['hit_ratio_worst'])} (GPU {row['worst_rank']})"


def cluster_blocks(rows: list[dict[str, Any]] | None, figures: list[FigureOut]) -> list[Block]:
    """The Cluster section: nothing without a cluster run."""
    if not rows:
        return []
    table = tuple(
        (
            row["label"],
            f"{row['world']} ({row['nodes']} x {row['gpus_per_node']})",
            row["sharding"],
            ms(row["step_time_s"]),
            bytes_text(row["all_to_all_bytes_per_batch"]),
            ms(row["all_to_all_s_per_batch"]),
            ms(row["allreduce_s_per_batch"]),
            f"{fmt_multiple(row['imbalance_mean'])} / {fmt_multiple(row['imbalance_max'])}"
            if row["imbalance_mean"] is not None
            else "n/a",
            _worst(row),
            format_hit_ratio(row["hit_ratio_mean"]),
        )
        for row in rows
    )
    text = (
        "Each cluster run: its GPUs (nodes x GPUs per node), the sharding, and per batch "
        "(the mean over all its batches, as its summary.json states it) the step time, the "
        "all-to-all's bytes and time (TorchRec's collectives per sharding type: the input "
        "distribution of ids and lengths, the pooled embeddings forward -- an all-to-all, "
        "or a reduce-scatter of whole partial sums for row-wise and table-row-wise -- and "
        "their gradients back), the all-reduce's time, the "
        "imbalance (the busiest GPU's lookups over the mean GPU's: mean / max over the "
        "batches), and the hit ratio of the GPUs' caches: the worst GPU's and the mean "
        "over the GPUs. Embedding, all-to-all, compute and all-reduce run in sequence."
    )
    lower = [row["label"] for row in rows if row["all_to_all_model"] == "lower-bound"
             and row["collectives"] != "patrickstar"]  # fmt: skip
    if lower:
        text += (
            f" {', '.join(lower)}: the all-to-all is a lower bound (only the pooled "
            "embeddings of the (table, sample) bags with lookups on a GPU, no input "
            "distribution), not TorchRec's collectives."
        )
    if any(row["collectives"] == "patrickstar" for row in rows):
        text += (
            " A PatrickStar (chunk policy) run has no all-to-all: its all-reduce column is its "
            "chunks' all-gathers and reduce-scatters."
        )
    return [
        Heading(HEADING),
        Paragraph(text),
        Table(
            (
                "system",
                "GPUs",
                "sharding",
                "step time (the slowest GPU's)",
                "all-to-all bytes (total over all GPUs)",
                "all-to-all time (the job's)",
                "all-reduce time (the job's)",
                "imbalance mean / max",
                "worst GPU hit ratio",
                "mean GPU hit ratio",
            ),
            table,
        ),
        *images(figures, SECTION),
    ]


__all__ = [
    "HEADING",
    "SECTION",
    "cluster_blocks",
    "cluster_row",
    "cluster_rows",
    "cluster_runs",
    "rank_hit_ratios",
]
