"""A plan's FBGEMM SSD TBE answer in a report (plan.json `cache.ssd_tbe`, written when a
planned system's policy is `ssd-tbe`): per hit target the L1 in HBM and the L2 in host
DRAM it needs, and whether the drive keeps up with the reads and writes at the plan's
step time. The numbers are plan.json's, formatted as `replay plan` formats them
(`replay._units`), so the report and plan.md agree; how they are computed is the plan's
(docs/ssd_tbe_plan.md).
"""

from __future__ import annotations

from typing import Any

from replay._units import format_bytes, format_duration, format_percent, format_rate, format_target
from replay.report.document import Block, Heading, Paragraph, Table

HEADERS = ("hit target", "L1 (HBM)", "L2 (host DRAM)", "hit", "L1 hit", "SSD read", "SSD write",
           "drive busy")  # fmt: skip


def _ssd(doc: dict[str, Any]) -> dict[str, Any] | None:
    s = (doc.get("cache") or {}).get("ssd_tbe")
    return s if isinstance(s, dict) and s.get("targets") else None


def ssd_line(doc: dict[str, Any], basis: str) -> str | None:
    """`SSD TBE (plan: ..., ssd-tbe, per GPU): hit 80% needs L1 7.25 MiB in HBM + L2 534
    KiB of host DRAM (SSD reads 109 MB/s, writes 876 MB/s: the nvme keeps up); ...`."""
    s = _ssd(doc)
    if s is None:
        return None
    parts = []
    for target, a in s["targets"].items():
        if a is None:
            parts.append(f"hit {format_target(target)} is out of reach within the L1 and L2 tried")
            continue
        keeps = "keeps up" if a["ssd_keeps_up"] else "does NOT keep up"
        l2 = f"L2 {format_bytes(a['l2_bytes'])} of host DRAM" if a["l2_bytes"] else "no L2"
        parts.append(
            f"hit {format_target(target)} needs L1 {format_bytes(a['l1_bytes'])} in HBM + {l2} "
            f"(SSD reads {format_rate(a['ssd_read_bytes_per_s'])} and writes "
            f"{format_rate(a['ssd_write_bytes_per_s'])}, the run's mean: the "
            f"{(s.get('ssd') or {}).get('tier', 'drive')} {keeps})"
        )
    return f"SSD TBE ({basis}, {s.get('system', 'ssd-tbe')}'s caches): " + "; ".join(parts) + "."


def ssd_blocks(doc: dict[str, Any], title: str) -> list[Block]:
    """The section: the rule, then per target the sizes, hits and the drive's load."""
    s = _ssd(doc)
    if s is None:
        return []
    ssd = s.get("ssd") or {}
    step = s.get("time_per_batch_s")
    at = f" at {format_duration(step)} per step" if step else ""
    rows = []
    for target, a in s["targets"].items():
        if a is None:
            rows.append((f"{float(target):g}", "out of reach", "", "", "", "", "", ""))
            continue
        warm = a.get("warm") or {}
        busy = max(float(a["ssd_utilization"]), float(warm.get("ssd_utilization") or 0.0))
        rows.append(
            (
                f"{float(target):g}",
                format_bytes(a["l1_bytes"]),
                format_bytes(a["l2_bytes"]),
                format_percent(a["hit"]),
                format_percent(a["l1_hit"]),
                format_rate(a["ssd_read_bytes_per_s"]),
                format_rate(a["ssd_write_bytes_per_s"]),
                f"{format_percent(busy)} ({'keeps up' if a['ssd_keeps_up'] else 'does NOT'})",
            )
        )
    return [
        Heading(title, 3),
        Paragraph(
            f"FBGEMM's SSD TBE on {s.get('system', 'ssd-tbe')}: an L1 in HBM, an L2 LRU in host "
            f"DRAM, the store on {ssd.get('tier', 'a drive')}; {s.get('method', '')}. A hit is "
            f"a lookup served from L1 or L2. Rule: {s.get('rule', '')}. SSD bandwidth{at}, the "
            "run's mean; the drive's load is the busier of reads and writes over its "
            "bandwidth (plan.md has the TorchRec settings and every L1 candidate)."
        ),
        Table(HEADERS, tuple(rows)),
    ]


__all__ = ["ssd_blocks", "ssd_line"]
