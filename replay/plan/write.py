"""The files of `replay plan --out DIR`: `plan.md` (the answers in its first lines, then
how each was reached), `plan.json` (the document `make_plan` returns, but its `torchrec`
part), `torchrec.json` (that part: each table's cache statistics for TorchRec's planner,
`replay.plan.torchrec`) and `figures/mrc.png` (the miss-ratio curve in bytes with the
budget and the hit targets marked), `figures/goodput.png` (goodput against the
checkpoint interval, per strategy, each optimum marked) and, with a `tbe` system,
`figures/tbe.png` (FBGEMM's TBE cache against an ideal LRU of the same bytes, hit ratio
against load factor). A cluster plan adds `sharding.json` and the cluster figures
(`replay.plan.write_cluster`). Built in `.DIR.partial` and
renamed into place whole (`replay._output.atomic_folder`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from replay._output import Owned, atomic_folder
from replay._schema_stamp import stamp
from replay._units import (
    format_bytes,
    format_duration,
    format_number,
    format_percent,
    format_target,
)
from replay.plan.torchrec import FEW_SAMPLED_ROWS
from replay.plan.torchrec_shards import torchrec_document, torchrec_text, without_shards
from replay.plan.write_checkpoints_cluster import cluster_checkpoint_markdown
from replay.plan.write_cluster import (
    FIGURES as CLUSTER_FIGURES,
)
from replay.plan.write_cluster import (
    SHARDING_FILE,
    cluster_markdown,
    write_cluster,
)
from replay.plan.write_memory import memory_answer_lines, memory_markdown
from replay.plan.write_ssd_tbe import ssd_tbe_answer_lines, ssd_tbe_markdown
from replay.report.labels import checkpoint_columns, system_columns
from replay.report.plan_section import (
    cluster_lines,
    every,
    goodput_spread,
    lossy,
    mrc_table_points,
    split_line,
    strategy_label,
    systems_basis,
    targets_with_range,
)

# what --force may replace (`replay._output.Owned`): these files, and figures/ holding only
# the figures write_plan draws (a person's file there is refused, never deleted)
OUTPUT_FILES: Owned = {
    "plan.md": None,
    "plan.json": None,
    "torchrec.json": None,
    SHARDING_FILE: None,
    "figures": frozenset({"mrc.png", "goodput.png", "tbe.png", *CLUSTER_FIGURES}),
}
TORCHREC_KEY = "torchrec"
# goodput curves this close (percentage points, at every interval) look like one line on
# the figure: the legend says so, so no strategy seems missing
SAME_CURVE_POINTS = 0.1  # the document's part written as torchrec.json


def plan_json(document: Mapping[str, Any]) -> dict[str, Any]:
    """What plan.json holds: the document without its torchrec part (its own file), and
    a cluster's without its per-shard part (torchrec.json's, `torchrec_document`)."""
    out = {k: v for k, v in document.items() if k != TORCHREC_KEY}
    if out.get("cluster"):
        out["cluster"] = without_shards(out["cluster"])
    return stamp("plan", out)


def write_plan(plan: Mapping[str, Any], out: Path, *, force: bool, curves: dict[str, Any]) -> None:
    """`plan`: the document `make_plan` returns (`replay._schema_plan.PlanDocument`);
    `curves`: what the figures draw beyond plan.json (goodput against interval)."""
    document = dict(plan)  # the section writers read it as a JSON object
    with atomic_folder(out, force=force, owned=OUTPUT_FILES, what="`replay plan` output") as tmp:
        (tmp / "plan.json").write_text(json.dumps(plan_json(document), indent=2) + "\n")
        trec = torchrec_document(document)
        if trec is not None:
            (tmp / "torchrec.json").write_text(torchrec_text(trec))
        (tmp / "figures").mkdir()
        _mrc_figure(document, tmp / "figures" / "mrc.png")
        _goodput_figure(document, curves, tmp / "figures" / "goodput.png")
        if document["cache"].get("tbe"):
            _tbe_figure(document, tmp / "figures" / "tbe.png")
        if document.get("cluster") is not None:
            write_cluster(document, tmp)
        (tmp / "plan.md").write_text(plan_markdown(document))


def policy_title(policy: str) -> str:
    """A policy's answers as plan.md names them (`tbe-lru`: FBGEMM's TBE cache, LRU)."""
    if policy.startswith("tbe-"):
        return f"FBGEMM TBE cache ({policy[4:].upper()})"
    return policy.upper()


def _points(diff: float) -> str:
    """A difference of hit ratios in percentage points, signed."""
    points = diff * 100
    return "within 0.05 points" if abs(points) < 0.05 else f"{points:+.1f} points"


def _pct(x: float | None) -> str:
    return "n/a" if x is None else format_percent(x)


def answers(document: dict[str, Any]) -> list[str]:
    """The answers, one line each: what `replay plan` prints and plan.md starts with."""
    cache = document["cache"]
    lines = cluster_lines(document["cluster"]) if document.get("cluster") else []
    hit = cache["hit_at_budget"]["lru"]
    # each target's bytes with the range the curve's error bound allows (issue 44 item 3)
    targets = targets_with_range(document)
    lines.append(
        f"Cache: {format_bytes(cache['budget_bytes'])} of LRU cache hits {_pct(hit)} of the "
        f"run's lookups; {targets}."
    )
    for policy, other in cache["hit_at_budget"].items():
        if policy == "lru":
            continue
        need = ", ".join(
            f"hit {format_target(t)} needs {format_bytes(b)}"
            if b is not None
            else f"hit {format_target(t)} is out of reach"
            for t, b in cache["bytes_for_hit"][policy].items()
        )
        versus = ""
        if policy.startswith("tbe-") and hit is not None and other is not None:
            versus = (
                f" against {_pct(hit)} for an ideal LRU of the same bytes ({_points(other - hit)})"
            )
        lines.append(
            f"Cache, {policy_title(policy)}: the budget hits {_pct(other)}{versus}; {need}."
        )
    lines.append(split_line(cache))
    lines += ssd_tbe_answer_lines(document)
    lines += memory_answer_lines(document)
    ck = document["checkpoint"]
    if ck["strategies"] and ck["strategies"][0]["name"] == "none":
        s = ck["strategies"][0]
        lines.append(
            f"Checkpoint: at a cluster MTBF of {format_duration(ck['cluster_mtbf_s'])}, no "
            "strategy beats running without checkpoints over this run: goodput "
            f"{_pct(s['goodput'])} ({goodput_spread(s, _pct)})."
        )
    elif ck["strategies"]:
        s = ck["strategies"][0]
        lines.append(
            f"Checkpoint: at a cluster MTBF of {format_duration(ck['cluster_mtbf_s'])}, "
            f"{strategy_label(s)} {every(s)} gives goodput "
            f"{_pct(s['goodput'])} ({goodput_spread(s, _pct)}): "
            f"{format_duration(s['cost_s'])} stall and {format_bytes(s['bytes'])} per "
            f"checkpoint, restore {format_duration(s['restore_s'])}"
            + (f"; {lossy(s)}." if lossy(s) else ".")
        )
    front = [s["name"] for s in document["systems"] if s["pareto"]]
    fastest = min(document["systems"], key=lambda s: s["time_per_batch_s"])
    lines.append(
        f"Systems ({systems_basis(document)}): {fastest['name']} is fastest at "
        f"{format_duration(fastest['time_per_batch_s'])} per batch; on the time/energy "
        f"Pareto front: {', '.join(front)}."
    )
    return lines


def _modes_table(strategies: list[dict[str, Any]]) -> list[str]:
    """Every mode of the strategies that have modes (Check-N-Run), the answer's first."""
    out: list[str] = []
    for s in strategies:
        if not s.get("modes"):
            continue
        out += [
            "",
            f"{s['name']}: every mode at its own best interval (the paper's method, "
            "intermittent fulls with quantized increments, answers; the others for comparison):",
            "",
            "| mode | paper's method | interval | written | storage | restore | goodput | p5 |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for m in s["modes"]:
            out.append(
                f"| {m['label']} | {'yes' if m.get('papers_method') else 'no'} | "
                f"{format_duration(m['interval_s'])} | {format_bytes(m['bytes'])} | "
                f"{format_bytes(m['storage_bytes'])} | {format_duration(m['restore_s'])} | "
                f"{m['goodput']:.3%} | {m['goodput_p5']:.3%} |"
            )
        if s.get("caveat"):
            out += ["", f"Caveat ({strategy_label(s)}): {s['caveat']}"]
    return out


def plan_markdown(document: dict[str, Any]) -> str:
    h = document["horizon"]
    rate = h["sample_rate"]
    sampled = "every lookup" if rate >= 1 else f"a spatial sample of the rows at R = {rate:g}"
    out = [
        f"# Plan: {h['batches']:,} batches, {format_duration(h['training_time_s'])} of training",
        "",
        *[f"- {line}" for line in answers(document)],
        "",
    ]
    if document["notes"]:
        out += ["## Read this first", "", *[f"- {n}" for n in document["notes"]], ""]
    if document.get("cluster"):
        out += cluster_markdown(document)
    out += [
        "## How each answer was reached",
        "",
        "### The run",
        "",
        f"{h['batches']:,} batches, {h['lookups']:,} lookups, "
        f"{format_duration(h['time_per_batch_s'])} per batch ({h['time_per_batch_from']}). "
        f"Curves from {sampled}; "
        f"{document['distinct_rows']:,} distinct rows; a row is "
        f"{document['row_bytes']} B in a cache and {document['state_bytes_per_row']} B in a "
        "checkpoint (with its optimizer state).",
        "",
        "### Cache",
        "",
        f"LRU miss-ratio curve ({document['mrc']['method']}, error bound "
        f"{document['mrc']['error_bound']:.3g}); figure `figures/mrc.png`. Other policies: "
        + (
            "; ".join(f"{p}: {m}" for p, m in document["cache"]["methods"].items() if p != "lru")
            or "none among the systems given"
        )
        + ".",
        "",
        "| cache | rows | miss ratio |"
        + (" analytic (Che) |" if document["mrc"]["analytic_miss_ratio"] else ""),
        "|---|---|---|" + ("---|" if document["mrc"]["analytic_miss_ratio"] else ""),
    ]
    m = document["mrc"]
    idx, beyond = mrc_table_points(document)
    for i in idx:
        row = f"| {format_bytes(m['bytes'][i])} | {m['rows'][i]:,} | {m['miss_ratio'][i]:.4f} |"
        if m["analytic_miss_ratio"]:
            row += f" {m['analytic_miss_ratio'][i]:.4f} |"
        out.append(row)
    out += ["", beyond] if beyond else []
    out += [
        "",
        "Per-table split of the budget (load factor = cache rows / table rows):",
        "",
        "| table | cache | load factor | hit |",
        "|---|---|---|---|",
    ]
    for t in document["cache"]["per_table"]:
        out.append(
            f"| {t['table']} | {format_bytes(t['bytes'])} | {format_number(t['load_factor'], 4)} | "
            f"{_pct(t['hit'])} |"
        )
    trec = document.get(TORCHREC_KEY)
    if trec:
        bins = [t["bins"] for t in trec["tables"].values()]
        shown = f"{min(bins):,}" if min(bins) == max(bins) else f"{min(bins):,}-{max(bins):,}"
        out += [
            "",
            "`torchrec.json`: for TorchRec's planner, each table's load factor above with the "
            "LRU stack-distance histogram of each batch's unique ids, cold misses in its last "
            f"bin ({shown} bins over a table's rows, a bin at most 5% of its cache), and the "
            "unique ids per batch (`EmbeddingOffloadStats`; `replay.parameter_constraints` "
            "reads it): TorchRec's `expected_miss_rate(load factor) x expected_lookups` is the "
            "cache fetches per batch.",
        ]
        if trec.get("few_sampled_rows"):
            out[-1] += (
                f" The sample holds under {FEW_SAMPLED_ROWS} rows of "
                f"{', '.join(trec['few_sampled_rows'])}: their curves say little (raise "
                "--sample-rate)."
            )
    out += _tbe_section(document)
    out += ssd_tbe_markdown(document)
    out += memory_markdown(document)
    ck = document["checkpoint"]
    out += [
        "",
        "### Checkpoint",
        "",
        f"On {ck['system']}, cluster MTBF {format_duration(ck['cluster_mtbf_s'])}; each "
        "strategy's interval maximises the expected goodput of the whole run (from Young/Daly, "
        "refined numerically); goodput from the failure simulator over the run. Figure "
        "`figures/goodput.png`.",
        "",
        "| strategy | interval | Young/Daly | " + " | ".join(checkpoint_columns(document)) + " "
        "| lost work per training failure | failures during restores per run | goodput | p5 |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in ck["strategies"]:
        out.append(
            f"| {strategy_label(s)} | {format_duration(s['interval_s'])} | "
            f"{format_duration(s['young_daly_interval_s'])} | {format_duration(s['cost_s'])} | "
            f"{format_bytes(s['bytes'])} | {format_bytes(s['storage_bytes'])} | "
            f"{format_duration(s['restore_s'])} | "
            f"{format_duration(s['lost_work_per_training_failure_s'])} | "
            f"{format_number(s['failures_during_restore_per_run'])} | {_pct(s['goodput'])} | "
            f"{_pct(s['goodput_p5'])} |"
        )
    out += _modes_table(ck["strategies"])
    out += cluster_checkpoint_markdown(document)  # a cluster's (issue 42); none for one GPU
    out += [
        "",
        "### Systems",
        "",
        "| system | " + " | ".join(system_columns(document)) + " | hit ratio | Pareto |",
        "|---|---|---|---|---|",
    ]
    for s in document["systems"]:
        out.append(
            f"| {s['name']} | {format_duration(s['time_per_batch_s'])} | "
            f"{s['energy_per_batch_j']:.4g} J | {_pct(s['hit_ratio'])} | "
            f"{'yes' if s['pareto'] else ''} |"
        )
    return "\n".join(out) + "\n"


def _tbe_section(document: dict[str, Any]) -> list[str]:
    """plan.md's comparison of FBGEMM's TBE cache with an ideal LRU of the same bytes."""
    out: list[str] = []
    for c in document["cache"].get("tbe", []):
        out += [
            "",
            f"FBGEMM's TBE cache on {c['system']} ({c['associativity']}-way sets, "
            f"{c['algorithm'].upper()}) against an ideal LRU of the same bytes, per load factor "
            f"({c['method']}); figure `figures/tbe.png`. TBE - LRU: positive where the TBE cache "
            "hits more (it admits a batch's misses only into ways the batch does not use: cold "
            "rows do not displace the batch's own), negative where its sets cost more.",
            "",
            "| load factor | cache | rows | ideal LRU | TBE | TBE - LRU |",
            "|---|---|---|---|---|---|",
        ]
        for f, rows, lru, tbe in zip(
            c["load_factors"], c["rows"], c["lru_hit"], c["tbe_hit"], strict=True
        ):
            out.append(
                f"| {f:g} | {format_bytes(rows * document['row_bytes'])} | {rows:,} | "
                f"{_pct(lru)} | {_pct(tbe)} | {_points(tbe - lru)} |"
            )
        if not c["load_factors"]:
            out.append("| (every load factor holds all the rows the run touches) | | | | | |")
    return out


def _tbe_figure(document: dict[str, Any], path: Path) -> None:
    from replay.report.figures import new_figure, save

    fig = new_figure(7.5, 4.5)
    ax = fig.add_subplot(1, 1, 1)
    drawn_lru = False
    for c in document["cache"]["tbe"]:
        if not c["load_factors"]:
            continue
        x = np.asarray(c["load_factors"], dtype=np.float64)
        if not drawn_lru:
            ax.plot(x, np.asarray(c["lru_hit"]) * 100, color="#08519c", lw=2, marker="o",
                    label="ideal LRU, same bytes")  # fmt: skip
            drawn_lru = True
        color = "#d94801" if c["algorithm"] == "lru" else "#238b45"
        ax.plot(x, np.asarray(c["tbe_hit"]) * 100, lw=1.5, marker="s", color=color,
                label=f"FBGEMM TBE, {c['associativity']}-way {c['algorithm'].upper()}")  # fmt: skip
    ax.set_xscale("log")
    ax.set_xlabel("cache load factor (cache rows / all rows)")
    ax.set_ylabel("hit ratio over the run (%)")
    if drawn_lru:
        ax.legend(loc="lower right", fontsize=8)
    else:  # a legend of nothing is a warning on stderr: say why the axes are empty instead
        ax.text(0.5, 0.5, "every load factor holds all the rows the run touches",
                ha="center", va="center", transform=ax.transAxes)  # fmt: skip
    save(fig, path)


def _mrc_figure(document: dict[str, Any], path: Path) -> None:
    from replay.report.figures import new_figure, save

    m = document["mrc"]
    fig = new_figure(7.5, 4.5)
    ax = fig.add_subplot(1, 1, 1)
    x = np.maximum(np.asarray(m["bytes"], dtype=np.float64), 1.0)
    ax.plot(x, m["miss_ratio"], color="#08519c", lw=2, label=f"LRU ({m['method']})")
    if m["analytic_miss_ratio"]:
        ax.plot(
            x, m["analytic_miss_ratio"], color="0.5", lw=1, ls="--", label="Che's approximation"
        )
    budget = document["cache"]["budget_bytes"]
    ax.axvline(budget, color="#d62728", lw=1)
    ax.annotate(f"budget {format_bytes(budget)}", (budget, 0.95), color="#d62728", fontsize=8)
    for target, b in document["cache"]["bytes_for_hit"]["lru"].items():
        if b is not None:
            ax.plot([b], [1 - float(target)], "o", color="#2ca02c")
            ax.annotate(f"hit {format_target(target)}", (b, 1 - float(target)), fontsize=8,
                        xytext=(4, 4), textcoords="offset points")  # fmt: skip
    ax.set_xscale("log")
    ax.set_xlabel("cache size (bytes of embedding rows)")
    ax.set_ylabel("miss ratio over the run")
    ax.set_ylim(0, 1)
    ax.legend(loc="upper right", fontsize=8)
    save(fig, path)


def _same_curve(x0: np.ndarray, y0: np.ndarray, xs: np.ndarray, ys: np.ndarray) -> bool:
    """Whether curve (xs, ys) spans about the same intervals as (x0, y0) and lies within
    SAME_CURVE_POINTS of it at each of its intervals (read on a log axis)."""
    if len(x0) < 2 or len(xs) < 2 or not (np.all(x0 > 0) and np.all(xs > 0)):
        return False
    if abs(np.log(xs[0] / x0[0])) > 0.05 or abs(np.log(xs[-1] / x0[-1])) > 0.05:
        return False
    inside = (xs >= x0[0]) & (xs <= x0[-1])
    along = np.interp(np.log(xs[inside]), np.log(x0), y0)
    return bool(inside.any() and np.all(np.abs(along - ys[inside]) <= SAME_CURVE_POINTS))


# interval ticks people read as durations: 1 s, 10 s, 1 min, 10 min, 1 h, 6 h, 1 d, ...
_DURATION_TICKS_S = (1e-3, 1e-2, 0.1, 1.0, 10.0, 60.0, 600.0, 3600.0, 6 * 3600.0, 86400.0,
                     7 * 86400.0, 30 * 86400.0)  # fmt: skip


def _duration_ticks(ax: Any, xs: list[float]) -> None:
    """A log axis of seconds labelled as durations (`10 min`, not `10^3`)."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    shown = [x for x in xs if x > 0 and np.isfinite(x)]
    if not shown:
        return
    lo, hi = min(shown), max(shown)
    ticks = [t for t in _DURATION_TICKS_S if lo <= t <= hi]
    if len(ticks) >= 2:
        ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: format_duration(v)))
    ax.xaxis.set_minor_formatter(NullFormatter())


def _goodput_figure(document: dict[str, Any], curves: dict[str, Any], path: Path) -> None:
    from replay.report.figures import new_figure, save

    fig = new_figure(7.5, 4.5)
    ax = fig.add_subplot(1, 1, 1)
    # strategies with the same costs (sync-full and fastpersist on one node) draw the same
    # curve: each its own dash and marker, the later ones narrower, so none hides another
    styles = ("-", "--", ":", "-.", (0, (5, 1, 1, 1)))
    markers = ("o", "s", "^", "D", "v")
    drawn: list[tuple[str, np.ndarray, np.ndarray]] = []
    for i, s in enumerate(document["checkpoint"]["strategies"]):
        curve = curves.get(s["name"])
        if curve is None:
            continue
        xs = np.asarray(curve["interval_s"], dtype=float)
        ys = np.asarray(curve["goodput"], dtype=float) * 100
        same = next((n for n, x0, y0 in drawn if _same_curve(x0, y0, xs, ys)), None)
        drawn.append((s["name"], xs, ys))
        label = (
            s["name"] if same is None
            else f"{s['name']} (within {SAME_CURVE_POINTS:g} points of {same}: drawn over it)"
        )  # fmt: skip
        (line,) = ax.plot(
            xs, ys, lw=max(3.0 - 0.6 * i, 1.0), ls=styles[i % len(styles)], label=label
        )
        ax.plot(
            [s["interval_s"]], [s["goodput"] * 100], markers[i % len(markers)],
            color=line.get_color(), markersize=max(9 - 1.5 * i, 4),
        )  # fmt: skip
    ax.set_xscale("log")
    _duration_ticks(ax, [x for _, xs, _ in drawn for x in xs.tolist()])
    ax.set_xlabel("checkpoint interval (of training)")
    ax.set_ylabel("expected goodput (%)")
    ax.legend(loc="lower right", fontsize=8)
    save(fig, path)


__all__ = [
    "OUTPUT_FILES",
    "TORCHREC_KEY",
    "answers",
    "plan_json",
    "plan_markdown",
    "policy_title",
    "write_plan",
]
