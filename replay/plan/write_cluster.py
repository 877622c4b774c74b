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

from replay._units import format_bytes, format_duration
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
        "| GPUs | nodes | all-to-all bytes | all-to-all | all-reduce | step time | imbalance |",
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
    out.append("")
    return out


def write_cluster(document: dict[str, Any], folder: Path) -> None:
    """sharding.json and the cluster figures into the plan folder being built."""
    c = document["cluster"]
    (folder / SHARDING_FILE).write_text(json.dumps(c["sharding_plan"], indent=2) + "\n")
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
    top.set_ylabel(f"hit at {format_bytes(c['budget_bytes_per_gpu'])} (%)")
    bottom.set_ylabel("lookups over the run")
    bottom.set_xlabel("GPU (rank)")
    if drawn:
        top.legend(loc="lower right", fontsize=8)
    else:
        top.text(0.5, 0.5, "no sharding fits the GPUs' memory", ha="center", va="center",
                 transform=top.transAxes)  # fmt: skip
    save(fig, path)


def _scaling_figure(c: dict[str, Any], path: Path) -> None:
    from replay.report.figures import new_figure, save

    fig = new_figure(7.5, 4.5)
    ax = fig.add_subplot(1, 1, 1)
    points = [p for p in c["scaling"]["points"] if p["fits"]]
    if points:
        x = [p["gpus"] for p in points]
        ax.plot(x, [p["all_to_all_s_per_batch"] * 1e3 for p in points], marker="o", lw=2,
                label="all-to-all per step")  # fmt: skip
        ax.plot(x, [p["step_time_s"] * 1e3 for p in points], marker="s", lw=1, ls="--",
                label="step time")  # fmt: skip
        ax.axvline(c["world"], color="#d62728", lw=1)
        ax.set_xscale("log", base=2)
        ax.legend(loc="upper left", fontsize=8)
    else:
        ax.text(0.5, 0.5, "no GPU count fits the tables", ha="center", va="center",
                transform=ax.transAxes)  # fmt: skip
    ax.set_xlabel(f"GPUs ({c['gpus_per_node']} per node, auto sharding)")
    ax.set_ylabel("ms per batch")
    save(fig, path)


__all__ = ["FIGURES", "SHARDING_FILE", "cluster_markdown", "write_cluster"]
