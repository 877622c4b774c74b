"""`replay run`'s summary on the terminal, from summary.json and meta.json, in the units
people read: durations as `format_duration` writes them (`0.0675 ms`, `1.86 min`), memory
and traffic in binary bytes (`626 KiB`), energy in SI joules, goodput as a percentage,
a share as a percentage up to 100% and a multiple (`13,189×`) beyond. summary.json keeps
the plain numbers; this is only how a person reads them. `replay compare` and `replay
sweep` use the same cells (`ratio_text`, `goodput_text`, `speedup_text`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from replay._study_bounds import failures_struck
from replay._units import (
    format_bytes,
    format_duration,
    format_hit_ratio,
    format_multiple,
    format_number,
    format_percent,
    plural,
)
from replay.cli.app import shown

# the all-to-all model a cluster run names (`replay.engine.collectives`), in a word
_A2A = {"torchrec": "TorchRec's collectives", "lower-bound": "lower bound"}


def si_text(value: float, unit: str, digits: int = 3) -> str:
    """`35.2 mJ`, `3.61 kJ`, `100.8 µs`: an SI prefix from tera to nano."""
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""),
                           (1e-3, "m"), (1e-6, "µ"), (1e-9, "n")):  # fmt: skip
        if abs(value) >= factor:
            return f"{value / factor:.{digits}g} {prefix}{unit}"
    return f"{value:.{digits}g} {unit}"


def energy_text(joules: float) -> str:
    """`35.2 mJ`, `3.61 kJ`: 3 significant digits."""
    return si_text(joules, "J")


def ratio_text(x: float) -> str:
    """A share as a percentage up to 100% (`19.1%`), a multiple above (`13,189×`)."""
    return format_multiple(x) if x > 1 else format_percent(x)


def overhead_text(overhead: float) -> str:
    """A checkpoint overhead (stall over the failure-free time without checkpoints)."""
    what = "the time without checkpoints"
    return f"{ratio_text(overhead)} {'of ' * (overhead <= 1)}{what}"


def goodput_text(goodput: float) -> str:
    """`99.2%`, and more digits near 100% where the difference is the answer."""
    text = format_percent(goodput)
    digits = 2
    while text.startswith("100") and goodput < 1 and digits <= 6:  # 99.996% is not 100%
        text = f"{100 * goodput:.{digits}f}%"
        digits += 1
    return text


def speedup_text(x: float) -> str:
    """`1.42×`, `0.366×`, and `1/12,870×` for a system thousands of times slower."""
    if x >= 0.001:
        return format_multiple(x)
    return f"1/{1 / x:,.0f}×" if x > 0 else "0×"


def rate_text(lookups_per_s: float) -> str:
    """`13.2 M lookups/s`, `0.46 M lookups/s` (not `0.0`) for a short trace."""
    if lookups_per_s >= 1e6:
        return f"{lookups_per_s / 1e6:.1f} M lookups/s"
    if lookups_per_s >= 1e3:
        return f"{lookups_per_s / 1e6:.2g} M lookups/s"
    return f"{lookups_per_s:.0f} lookups/s"


def print_summary(name: str, summary: dict[str, Any], meta: dict[str, Any], out: Path) -> None:
    for line in summary_lines(name, summary, meta, out):
        typer.echo(line)


def summary_lines(name: str, summary: dict[str, Any], meta: dict[str, Any], out: Path) -> list[str]:
    pol = summary["policy"]
    t = summary["time"]
    dur = format_duration
    lines = [
        f"{shown(name, markup=False)}: {summary['lookups']:,} lookups in "
        f"{plural(summary['batches'], 'batch')}; "
        f"policy {pol['name']}: hit ratio {format_hit_ratio(pol['hit_ratio'], 'n/a (no cache)')} "
        f"({pol['misses']:,} misses, {pol['evictions']:,} evictions, "
        f"{pol['writebacks']:,} write-backs)"
    ]
    fb = pol.get("fbgemm_counters")
    if fb:
        lines.append(
            f"  FBGEMM TBE cache: {pol['sets']:,} sets x {pol['associativity']} ways (load "
            f"factor {format_number(pol['load_factor'], 4)}), {pol['algorithm'].upper()}; per "
            "FBGEMM's "
            f"counters: {fb['unique_misses']:,} unique misses of {fb['unique_indices']:,} unique "
            f"indices ({fb['requested_indices']:,} requested, {fb['calls']:,} calls), "
            f"{fb['conflict_unique_misses']:,} conflict unique misses, "
            f"{fb['conflict_misses']:,} conflict misses"
        )
    extra = (
        ("all_to_all_s", "all-to-all"),
        ("allreduce_s", "all-reduce"),
        ("patrickstar_comm_s", "PatrickStar's collectives"),
    )
    lines.append(
        f"  time {dur(summary['time_s'])} (compute {dur(t['compute_s'])}, embedding exposed "
        f"{dur(t['embedding_exposed_s'])}, checkpoint {dur(t['checkpoint_s'])}, "
        f"other {dur(t['other_s'])}"
        + "".join(f", {label} {dur(t[key])}" for key, label in extra if key in t)
        + f"); energy {energy_text(summary['energy_j'])}"
    )
    for tier_name, tier in summary["tiers"].items():
        if tier["read_bytes"] or tier["write_bytes"]:
            lines.append(
                f"  tier {shown(tier_name, markup=False)}: read "
                f"{format_bytes(tier['read_bytes'])}, write {format_bytes(tier['write_bytes'])}"
            )
    for link_name, link in summary["links"].items():
        if link["h2d_bytes"] or link["d2h_bytes"]:
            lines.append(
                f"  link {shown(link_name, markup=False)}: h2d {format_bytes(link['h2d_bytes'])}, "
                f"d2h {format_bytes(link['d2h_bytes'])}"
            )
    ck = summary.get("checkpoint")
    if ck and ck["strategy"] != "none":
        lines.append(
            f"  checkpoint {ck['strategy']}: {ck['count']:,} written "
            f"({format_bytes(ck['bytes_written'])}, at most "
            f"{format_bytes(ck['max_bytes_retained'])} kept), stall {dur(ck['stall_s'])}, "
            f"{overhead_text(ck['overhead'])}"
        )
    fail = summary.get("failures")
    if fail:
        yd = fail["young_daly_interval_s"]
        used = fail["interval_s_used"]
        struck = failures_struck(fail)
        lines.append(
            f"  failures: goodput {goodput_text(fail['goodput_mean'])} mean, "
            f"{goodput_text(fail['goodput_p5'])} p5 over {fail['draws']:,} draws; "
            + (
                f"lost work {dur(fail['lost_work_per_training_failure_s'])} per failure of "
                f"training, {format_number(fail['failures_during_restore_per_draw_mean'])} "
                f"failures during restores per draw, restore {dur(fail['restore_s_mean'])} per "
                "failure"
                if struck  # else zeros over no failures (a warning says why)
                else f"no failure struck in {dur(fail['horizon_s'])} of training"
            )
            + (f"; Young/Daly interval {dur(yd)}" if yd is not None else "")
            + (f" (used {dur(used)})" if used is not None else "")
        )
    cl = summary.get("cluster")
    ps = summary.get("patrickstar")
    if cl and ps:
        lines.append(
            f"  PatrickStar on {cl['nodes']} x {cl['gpus_per_node']} GPUs (chunks partitioned, "
            f"data-parallel): {ps['groups_per_batch']:.4g} chunk groups gathered a batch, "
            f"{format_bytes(ps['all_gather_bytes_per_step'])} all-gathered and "
            f"{format_bytes(ps['reduce_scatter_bytes_per_step'])} reduce-scattered per GPU a "
            f"step, {dur(ps['comm_s_per_step'])}"
            + (
                f"; {format_multiple(ps['vs_data_parallel'])} the bytes of data parallelism's "
                "all-reduce of the same chunks"
                if ps.get("vs_data_parallel") is not None
                else ""
            )
            + f"; step {dur(cl['step_time_s'])}"
        )
    elif cl:
        lines.append(
            f"  cluster {cl['nodes']} x {cl['gpus_per_node']} GPUs, "
            f"{cl['sharding'].get('sharding', '?')}: step {dur(cl['step_time_s'])} a batch "
            f"(slowest GPU's embedding {dur(cl['rank_embedding_s_max_per_batch'])}, "
            f"all-to-all {dur(cl['all_to_all_s_per_batch'])} for "
            f"{format_bytes(cl['all_to_all_bytes_per_batch'])} "
            f"({_A2A.get(cl.get('all_to_all_model', ''), 'lower bound')}), all-reduce "
            f"{dur(cl['allreduce_s_per_batch'])}); imbalance (max / mean lookups per GPU) "
            f"{format_multiple(cl['imbalance_mean'])} on the mean batch, "
            f"{format_multiple(cl['imbalance_max'])} on the worst"
        )
    rate = meta["timings"]["lookups_per_s"]
    lines.append(f"  replayed at {rate_text(rate)}; wrote {shown(out, markup=False)}")
    return lines


__all__ = [
    "energy_text",
    "goodput_text",
    "overhead_text",
    "print_summary",
    "rate_text",
    "ratio_text",
    "si_text",
    "speedup_text",
    "summary_lines",
]
