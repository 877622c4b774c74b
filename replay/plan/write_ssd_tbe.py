"""plan.md's SSD TBE lines (`replay.plan.ssd_tbe`): the answer per hit target, and the
section saying how it was reached, what the SSD must carry and what to paste."""

from __future__ import annotations

from typing import Any

from replay._units import (
    format_bytes,
    format_duration,
    format_number,
    format_percent,
    format_rate,
    format_target,
)


def _ssd(document: dict[str, Any]) -> dict[str, Any] | None:
    return document.get("cache", {}).get("ssd_tbe")


def ssd_tbe_answer_lines(document: dict[str, Any]) -> list[str]:
    """One answer line: the L1 and L2 per hit target and whether the SSD keeps up."""
    s = _ssd(document)
    if not s:
        return []
    parts = []
    for target, a in s["targets"].items():
        if a is None:
            parts.append(f"hit {format_target(target)} is out of reach")
            continue
        keeps = "keeps up" if a["ssd_keeps_up"] else "does NOT keep up"
        parts.append(
            f"hit {format_target(target)} needs L1 {format_bytes(a['l1_bytes'])} + "
            + (f"L2 {format_bytes(a['l2_bytes'])}" if a["l2_bytes"] else "no L2")
            + f" (SSD reads {format_rate(a['ssd_read_bytes_per_s'])}, "
            f"writes {format_rate(a['ssd_write_bytes_per_s'])}: the {s['ssd']['tier']} {keeps})"
        )
    return [f"SSD TBE ({s['system']}): " + "; ".join(parts) + "."]


def ssd_tbe_markdown(document: dict[str, Any]) -> list[str]:
    """plan.md's section: the rule, per target the sizes, traffic and settings, and the
    candidates' L1 with the L2 each needs."""
    s = _ssd(document)
    if not s:
        return []
    ssd = s["ssd"]
    out = [
        "",
        f"FBGEMM's SSD TBE on {s['system']} (L1 of {s['associativity']}-way sets in HBM, L2 "
        f"LRU in host DRAM, the store on {ssd['tier']}: {format_rate(ssd['read_bw_bytes_per_s'])}"
        f" read, {format_rate(ssd['write_bw_bytes_per_s'])} write, write amplification "
        f"{ssd['write_amplification']:g}); {s['method']}. A hit is a lookup served from L1 or "
        f"L2. Rule: {s['rule']}. Bandwidth at {format_duration(s['time_per_batch_s'])} per "
        f"step, the run's mean (warm: from batch {s['warm_from_batch']:,} on).",
        "",
        "| hit target | L1 | L2 | hit | L1 hit | SSD read | SSD write | warm read | warm write "
        "| drive busy | keeps up |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    pastes = []
    for target, a in s["targets"].items():
        if a is None:
            out.append(f"| {float(target):g} | out of reach | | | | | | | | | |")
            continue
        w = a["warm"]
        busy = max(a["ssd_utilization"], w["ssd_utilization"])
        out.append(
            f"| {float(target):g} | {format_bytes(a['l1_bytes'])} (load factor "
            f"{format_number(a['l1_load_factor'], 6)}) | {format_bytes(a['l2_bytes'])} | "
            f"{format_percent(a['hit'])} | {format_percent(a['l1_hit'])} | "
            f"{format_rate(a['ssd_read_bytes_per_s'])} | "
            f"{format_rate(a['ssd_write_bytes_per_s'])} | "
            f"{format_rate(w['ssd_read_bytes_per_s'])} | "
            f"{format_rate(w['ssd_write_bytes_per_s'])} | {format_percent(busy)} | "
            f"{'yes' if a['ssd_keeps_up'] else 'no'} |"
        )
        pastes.append(f"- {float(target):g}: `{a['torchrec']['paste']}`")
    if pastes:
        out += [
            "",
            "TorchRec settings to paste into each table's `ParameterSharding` (compute kernel "
            "`key_value`; TorchRec passes them to the SSD TBE as `cache_load_factor`, "
            "`l2_cache_size` in whole GiB and `max_l1_cache_size` in whole MiB, rounded up; "
            "the load factor is over the rows of the tables sharing the TBE):",
            "",
            *pastes,
        ]
    out += [
        "",
        "Each L1 candidate and the smallest L2 for each target with it (plan.json "
        "`cache.ssd_tbe.candidates` has every L2 size):",
        "",
        "| load factor | L1 | L1 hit | L2 0 hit | "
        + " | ".join(f"L2 for {float(t):g}" for t in s["targets"])
        + " |",
        "|---|---|---|---|" + "---|" * len(s["targets"]),
    ]
    for c in s["candidates"]:
        cells = []
        for t in s["targets"]:
            reach = [b for b, h in zip(c["l2_bytes"], c["hit"], strict=True) if h >= float(t)]
            cells.append(format_bytes(reach[0]) if reach else "out of reach")
        out.append(
            f"| {format_number(c['load_factor'], 6)} | {format_bytes(c['l1_bytes'])} | "
            f"{format_percent(c['l1_hit'])} | {format_percent(c['hit'][0])} | "
            + " | ".join(cells)
            + " |"
        )
    if s.get("notes"):
        out += ["", *[f"- {n}" for n in s["notes"]]]
    return out


__all__ = ["ssd_tbe_answer_lines", "ssd_tbe_markdown"]
