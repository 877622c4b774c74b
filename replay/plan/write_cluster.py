"""The cluster part of `replay plan --out DIR` (`replay.plan.write` calls it when plan.json
has a `cluster`, `replay.plan.cluster`): its answer lines, plan.md's "Cluster" section,
`sharding.json` (the recommended plan, in the format `cluster.sharding_file` reads) and
two figures: `figures/cluster_gpus.png` (each GPU's hit ratio at the budget and lookups
under each sharding) and `figures/cluster_scaling.png` (the all-to-all and step time per
batch against the number of GPUs).

Units as the user reads them: bytes as `8 GiB`, times as `ms`, ratios as `x`; every
number names its basis, and a number the run cannot support (a hit target out of reach
on a GPU, a sharding that does not fit) is said as such, never shown as a result.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from replay._schema_stamp import stamp
from replay._units import format_bytes, format_duration, format_multiple
from replay.plan.cluster_spread import spread_markdown
from replay.report.labels import SCALING_COLUMNS
from replay.report.plan_section import (
    cluster_shape,
    pct_text,
    size_text,
    times_text,
)

SHARDING_FILE = "sharding.json"
FIGURES = ("cluster_gpus.png", "cluster_scaling.png")
TABLE_GPUS = 16  # plan.md lists every GPU up to this many, else the worst ones


def cluster_markdown(document: dict[str, Any]) -> list[str]:
    """plan.md's "Cluster" section."""
    c = document["cluster"]
    m = c["methods"]
    targets = list(c["bytes_for_hit"]["worst_gpu"])
    out = [
        "## Cluster",
        "",
        f"{cluster_shape(c)}, {format_bytes(c['gpu_memory_bytes'])} of memory per GPU "
        "(cluster.gpu_memory_bytes), a cache budget of "
        f"{format_bytes(c['budget_bytes_per_gpu'])} **per GPU** (--cache-budget is per GPU "
        "in a cluster): how much of each GPU must be cache for each hit target on every "
        "GPU, how to shard, and what the all-to-all costs per step.",
        "",
        "### Cache per GPU",
        "",
        f"Basis: {m['curves']} (error bound {m['error_bound']:.3g}).",
        "",
        "| hit target | worst GPU needs | mean GPU needs | fits a GPU's memory |",
        "|---|---|---|---|",
    ]
    for t in targets:
        fits = c["fits_gpu_memory"].get(t)
        out.append(
            f"| {t} | {size_text(c['bytes_for_hit']['worst_gpu'][t])} | "
            f"{size_text(c['bytes_for_hit']['mean'][t])} | "
            f"{'n/a' if fits is None else ('yes' if fits else 'NO')} |"
        )
    gpus = c["per_gpu"]
    shown = gpus
    if len(gpus) > TABLE_GPUS:
        order = sorted(gpus, key=lambda g: (g["hit_at_budget"] is not None, g["hit_at_budget"]))
        shown = sorted(order[:TABLE_GPUS], key=lambda g: g["rank"])
    out += [
        "",
        (
            "Each GPU:"
            if shown is gpus
            else f"The {TABLE_GPUS} GPUs with the lowest hit at the budget (every GPU in "
            "plan.json, cluster.per_gpu):"
        ),
        "",
        "| GPU | node | lookups over the run | shards | shard bytes | hit at budget | "
        + " | ".join(f"bytes for {t}" for t in targets)
        + " |",
        "|---" * (6 + len(targets)) + "|",
    ]
    for g in shown:
        out.append(
            f"| {g['rank']} | {g['node']} | {g['lookups']:,.0f} | {g['shards']} | "
            f"{format_bytes(g['shard_bytes'])} | {pct_text(g['hit_at_budget'])} | "
            + " | ".join(
                ("<= " if t in g.get("at_resolution", ()) else "")
                + size_text(g["bytes_for_hit"][t])
                for t in targets
            )
            + " |"
        )
    types = ", ".join(f"{n} {k}" for k, n in c["sharding_types"].items())
    out += [
        "",
        "### Sharding",
        "",
        f"{m['sharding']}: {types} tables; `sharding.json` holds the plan (give it back with "
        f"--set cluster.sharding_file=sharding.json). Imbalance (max / mean lookups per GPU): "
        f"{times_text(c['imbalance'])} per batch measured in the steady state, "
        f"{times_text(c['imbalance_run'])} over the whole run, "
        f"{times_text(c.get('imbalance_modeled'))} "
        "as the sharder modeled it.",
        "",
        "Each sharding (figure `figures/cluster_gpus.png`: hit ratio at the budget and "
        f"lookups per GPU; {m['comparison']}):",
        "",
        "| sharding | worst GPU hit | mean hit | imbalance (run) | imbalance (modeled) |",
        "|---|---|---|---|---|",
    ]
    for s in c["comparison"]:
        name = s["sharding"] + (" (recommended)" if s["recommended"] else "")
        if not s["fits"]:
            out.append(f"| {name} | does not fit: {s['why']} | | | |")
            continue
        hits = [h for h in s["hit_at_budget"] if h is not None]
        out.append(
            f"| {name} | {pct_text(min(hits) if hits else None)} | "
            f"{pct_text(float(np.mean(hits)) if hits else None)} | "
            f"{times_text(s['imbalance_run'])} | "
            f"{times_text(s.get('imbalance_modeled'))} |"
        )
    out += spread_markdown(c)
    out += [
        "",
        "### Network and step time",
        "",
        f"{m['steady']}. All-to-all per step: {format_bytes(c['all_to_all_bytes_per_batch'])}, "
        f"{format_duration(c['all_to_all_s_per_batch'])} ({m['all_to_all']}). All-reduce: "
        f"{format_duration(c['allreduce_s_per_batch'])} ({m['allreduce']}). Step time: "
        f"{format_duration(c['step_time_s'])} ({m['step_time']}).",
        "",
        f"Against the number of GPUs (figure `figures/cluster_scaling.png`; {m['scaling']}):",
        "",
        "| GPUs | nodes | " + " | ".join(SCALING_COLUMNS) + " | imbalance |",
        "|---|---|---|---|---|---|---|",
    ]
    for p in c["scaling"]["points"]:
        if not p["fits"]:
            out.append(f"| {p['gpus']} | {p['nodes']} | does not fit: {p['why']} | | | | |")
            continue
        out.append(
            f"| {p['gpus']} | {p['nodes']} | {format_bytes(p['all_to_all_bytes_per_batch'])} | "
            f"{format_duration(p['all_to_all_s_per_batch'])} | "
            f"{format_duration(p['allreduce_s_per_batch'])} | "
            f"{format_duration(p['step_time_s'])} | {times_text(p['imbalance'])} |"
        )
    if "step" in c:  # plans written before the step model have none
        from replay.plan.write_step import step_markdown

        out += step_markdown(c["step"])
    out.append("")
    if "torchrec" in c:  # plans written before TorchRec's planner ran beside ours have none
        out += torchrec_markdown(c)
    return out


def _ms(value: float | None) -> str:
    return "n/a" if value is None else format_duration(value / 1e3)


def torchrec_markdown(c: dict[str, Any]) -> list[str]:
    """plan.md's "TorchRec's plan beside ours": TorchRec's planner's plan on the same
    tables, topology, budget and statistics, replayed on the same trace as ours, with
    TorchRec's own per-rank estimates (`replay.plan.torchrec_planner`)."""
    t = c["torchrec"]
    out = ["### TorchRec's plan beside ours", ""]
    if "skipped" in t:
        return [*out, f"TorchRec's planner was not run: {t['skipped']}.", ""]
    who = (
        "TorchRec's EmbeddingOffloadScaleupProposer"
        if t["proposer"] == "scaleup"
        else "TorchRec's planner (its default proposers)"
    )
    topo = t["topology"]
    out.append(
        f"{who} on the same tables, the same {topo['world_size']} GPUs "
        f"({topo['local_world_size']} per node, {format_bytes(topo['hbm_cap'])} of HBM each: "
        + (
            "the budget per GPU, which it splits among the caches"
            if t["proposer"] == "scaleup"
            else "a GPU's memory, where it places this plan's caches"
        )
        + "), a batch of "
        f"{t['batch_size_per_rank']:,} samples per GPU and this plan's statistics as its "
        f"constraints (`replay.parameter_constraints` of `torchrec.json`; {t['torchrec_tested']})"
        + (
            f": {t['error']}."
            if "error" in t and "sharding" not in t
            else (
                f", chose {_counts_text(t['sharding_types'])} "
                f"({_counts_text(t['kernels'])} kernels)."
            )
        )
    )
    out.append("")
    if "sharding" not in t:
        return out
    ours_gpus = {g["rank"]: g for g in c["per_gpu"]}
    theirs = t["per_gpu"]
    rows = [
        ("imbalance (max / mean lookups per GPU, steady state)",
         times_text(c["imbalance"]), times_text(t["imbalance"])),
        ("imbalance over the run", times_text(c["imbalance_run"]),
         times_text(t["imbalance_run"])),
        ("hit at the budget, worst GPU", pct_text(c["hit_at_budget"]["worst"]),
         pct_text(t["hit_at_budget"]["worst"])),
        ("hit at the budget, mean over GPUs", pct_text(c["hit_at_budget"]["mean"]),
         pct_text(t["hit_at_budget"]["mean"])),
        ("all-to-all per step", f"{format_bytes(c['all_to_all_bytes_per_batch'])}, "
         f"{format_duration(c['all_to_all_s_per_batch'])}",
         f"{format_bytes(t['all_to_all_bytes_per_batch'])}, "
         f"{format_duration(t['all_to_all_s_per_batch'])}"),
        ("step time (replayed)", format_duration(c["step_time_s"]),
         format_duration(t["step_time_s"])),
        ("TorchRec's estimate, its largest rank", "", _ms(t["estimate_max_ms"])),
    ]  # fmt: skip
    out += [
        f"Both replayed on the same trace ({c['methods']['steady']}; hits from each GPU's "
        "curve over the run):",
        "",
        f"| | ours ({c['sharding']}) | TorchRec's ({t['proposer']}) |",
        "|---|---|---|",
        *[f"| {a} | {b} | {x} |" for a, b, x in rows],
        "",
    ]
    shown = theirs
    if len(theirs) > TABLE_GPUS:
        busiest = sorted(theirs, key=lambda g: -g["lookups"])[:TABLE_GPUS]
        shown = sorted(busiest, key=lambda g: g["rank"])
    out += [
        "Each GPU:"
        if shown is theirs
        else f"The {TABLE_GPUS} GPUs TorchRec's plan loads most "
        "(every GPU in plan.json, cluster.torchrec.per_gpu):",
        "",
        "| GPU | lookups (ours) | lookups (TorchRec's) | hit (ours) | hit (TorchRec's) | "
        "TorchRec's estimate | its HBM | its DDR |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for g in shown:
        o = ours_gpus.get(g["rank"], {})
        out.append(
            f"| {g['rank']} | {o.get('lookups', 0):,.0f} | {g['lookups']:,.0f} | "
            f"{pct_text(o.get('hit_at_budget'))} | {pct_text(g['hit_at_budget'])} | "
            f"{_ms(g.get('estimate_ms'))} | {format_bytes(g.get('hbm_bytes', 0))} | "
            f"{format_bytes(g.get('ddr_bytes', 0))} |"
        )
    out += ["", _sees_text(t), ""]
    return out


def _counts_text(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {k}" for k, n in counts.items())


def _sees_text(t: dict[str, Any]) -> str:
    """Where TorchRec's estimates and the trace put the most work, and why they differ."""
    gpus = t["per_gpu"]
    sees = t["methods"]["what_the_trace_sees"]
    est = np.array([g.get("estimate_ms", 0.0) for g in gpus], dtype=np.float64)
    seen = np.array([g["lookups"] for g in gpus], dtype=np.float64)
    if not len(gpus) or est.mean() <= 0 or seen.mean() <= 0:
        return "What the trace sees that TorchRec's formulas miss: " + sees + "."
    e, s = int(est.argmax()), int(seen.argmax())
    return (
        f"TorchRec's estimates put the most work on GPU {gpus[e]['rank']} "
        f"({_ms(float(est[e]))}, {format_multiple(est[e] / est.mean())} the mean rank's); the "
        f"trace puts the most lookups on GPU {gpus[s]['rank']} ({seen[s]:,.0f} over the run, "
        f"{format_multiple(seen[s] / seen.mean())} the mean, from {seen.min():,.0f} to "
        f"{seen.max():,.0f} per GPU). What the trace sees that TorchRec's formulas miss: {sees}."
    )


def write_cluster(document: dict[str, Any], folder: Path) -> None:
    """sharding.json and the cluster figures into the plan folder being built."""
    c = document["cluster"]
    sharding = stamp("sharding", c["sharding_plan"])
    (folder / SHARDING_FILE).write_text(json.dumps(sharding, indent=2) + "\n")
    _gpus_figure(c, folder / "figures" / FIGURES[0])
    _scaling_figure(c, folder / "figures" / FIGURES[1])


def _gpus_figure(c: dict[str, Any], path: Path) -> None:
    from replay.report.figures import new_figure, save

    fig = new_figure(7.5, 6.0)
    top = fig.add_subplot(2, 1, 1)
    bottom = fig.add_subplot(2, 1, 2, sharex=top)
    drawn = False
    for s in c["comparison"]:
        if not s["fits"]:
            continue
        x = np.arange(len(s["lookups"]))
        hits = np.array([np.nan if h is None else h * 100 for h in s["hit_at_budget"]])
        label = s["sharding"] + (" (recommended)" if s["recommended"] else "")
        lw = 2.0 if s["recommended"] else 1.0
        top.plot(x, hits, marker=".", lw=lw, label=label)
        bottom.plot(x, s["lookups"], marker=".", lw=lw, label=label)
        drawn = True
    top.set_ylabel(f"hit at {format_bytes(c['budget_bytes_per_gpu'])} per GPU (%)")
    bottom.set_ylabel("lookups over the run")
    bottom.set_xlabel("GPU (rank)")
    if drawn:
        top.legend(loc="lower right", fontsize=8)
    else:
        top.text(0.5, 0.5, "no sharding fits the GPUs' memory", ha="center", va="center",
                 transform=top.transAxes)  # fmt: skip
    save(fig, path)


def _scaling_figure(c: dict[str, Any], path: Path) -> None:
    from matplotlib.ticker import FuncFormatter, NullFormatter

    from replay.report.figures import new_figure, save

    fig = new_figure(7.5, 4.5)
    ax = fig.add_subplot(1, 1, 1)
    points = [p for p in c["scaling"]["points"] if p["fits"]]
    if points:
        x = [p["gpus"] for p in points]
        ax.plot(x, [p["all_to_all_s_per_batch"] * 1e3 for p in points], marker="o", lw=2,
                label="all-to-all per step (the job's)")  # fmt: skip
        ax.plot(x, [p["step_time_s"] * 1e3 for p in points], marker="s", lw=1, ls="--",
                label="step time (the slowest GPU's)")  # fmt: skip
        ax.axvline(c["world"], color="#d62728", lw=1, label=f"this plan's {c['world']:,} GPUs")
        ax.set_xscale("log", base=2)
        # the GPU counts planned, as counts (64, not 2^6)
        ax.set_xticks(x)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:,.0f}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.legend(loc="upper left", fontsize=8)
    else:
        ax.text(0.5, 0.5, "no GPU count fits the tables", ha="center", va="center",
                transform=ax.transAxes)  # fmt: skip
    ax.set_xlabel(f"GPUs ({c['gpus_per_node']} per node, auto sharding)")
    ax.set_ylabel("ms per batch")
    save(fig, path)


__all__ = ["FIGURES", "SHARDING_FILE", "cluster_markdown", "torchrec_markdown", "write_cluster"]
