"""The report's table of FBGEMM TBE caches (runs of the `tbe` policy): the cache's shape
and FBGEMM's own counters from summary.json (`policy.fbgemm_counters`, see
`replay.policies.tbe`), so that a run reads as the statistics TBE's
`gather_uvm_cache_stats` would log for the same stream."""

from __future__ import annotations

from replay._units import format_hit_ratio, format_number
from replay.report.blocks import pct
from replay.report.document import Block, Paragraph, Table
from replay.report.load import Results


def _share(part: int, whole: int) -> str:
    return f"{part:,} ({pct(part / whole)})" if whole else f"{part:,}"


def tbe_blocks(results: Results) -> list[Block]:
    rows = []
    for run in results.all_runs():
        pol = run.summary.get("policy") or {}
        fb = pol.get("fbgemm_counters")
        if not isinstance(fb, dict):
            continue
        rows.append(
            (
                run.label,
                f"{pol['sets']:,} x {pol['associativity']}, {str(pol['algorithm']).upper()}",
                format_number(pol["load_factor"], 4),
                _share(fb["unique_misses"], fb["unique_indices"]),
                _share(fb["conflict_unique_misses"], fb["unique_misses"]),
                _share(fb["conflict_misses"], fb["requested_indices"]),
                format_hit_ratio(pol["hit_ratio"]),
            )
        )
    if not rows:
        return []
    return [
        Paragraph(
            "FBGEMM TBE caches: sets x ways and replacement, the load factor (ways / rows of "
            "all tables) and FBGEMM's counters: unique misses (share of the batches' distinct "
            "rows), conflict unique misses (share of those: no way free in their set, served "
            "from host memory uncached) and conflict misses (share of all lookups)."
        ),
        Table(
            (
                "system",
                "cache",
                "load factor",
                "unique misses",
                "conflict unique misses",
                "conflict misses",
                "hit ratio",
            ),
            tuple(rows),
        ),
    ]


__all__ = ["tbe_blocks"]
