"""A plan (`replay plan --out`) in a report: its answers as summary lines, and its section
(the answers, then how each was reached: its tables and its two figures; a cluster plan's
answer lines and its two cluster figures first, `plan_cluster_gpus.png` and
`plan_cluster_scaling.png`).

Every number is plan.json's, formatted as `replay plan` formats it
(`replay._units.format_bytes`, `format_duration`, `format_percent`), so the report and
plan.md agree to the digit. The figures are copied into the report's `figures/` as
`plan_mrc.png` and `plan_goodput.png` (`_2`, `_3`, ... for a second, third plan).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np

from replay._units import (
    format_bytes,
    format_duration,
    format_multiple,
    format_number,
    format_percent,
    format_target,
)
from replay.report.cpr_text import cpr_interval_text, cpr_lost_text
from replay.report.document import (
    Block,
    Bullets,
    Code,
    Heading,
    Image,
    Paragraph,
    Table,
)
from replay.report.figures import FigureOut
from replay.report.figures_plan import draw_plan_mrc
from replay.report.labels import checkpoint_columns, system_columns
from replay.report.load import PlanData
from replay.report.plan_checkpoint import (
    RARE_FAILURES_P,
    capped_at_span,
    checkpoint_answer,
    checkpoint_line,
    every,
    failure_model,
    goodput_line,
    goodput_spread,
    lossy,
    minutes,
    pct_text,
    plan_basis,
    planned_checkfreq,
    strategy_label,
)
from replay.report.plan_ssd import ssd_blocks, ssd_line

SECTION = "plan"


def suffix(index: int) -> str:
    return "" if index == 0 else f"_{index + 1}"


def heading(plan: PlanData, index: int, part: str = "") -> str:
    """`Plan`, `Plan: cache`; a second plan is named by its folder."""
    name = "Plan" if index == 0 else f"Plan {index + 1} ({plan.path.name})"
    return f"{name}: {part}" if part else name


def _targets(needs: dict[str, Any]) -> str:
    return ", ".join(
        f"hit {format_target(t)} needs {format_bytes(b)}"
        if b is not None
        else f"hit {format_target(t)} is out of reach"
        for t, b in needs.items()
    )


def _first_reaching(sizes: np.ndarray, hits: np.ndarray, target: float) -> int | None:
    """Index of the smallest measured size whose hit (running maximum) reaches `target`,
    as `replay plan` reads bytes for a hit target (never interpolated)."""
    reach = np.nonzero(np.maximum.accumulate(hits) >= target)[0]
    return None if len(reach) == 0 else int(reach[0])


def target_range(mrc: dict[str, Any], target: float) -> dict[str, Any]:
    """Bytes for hit `target` on the plan's LRU curve with the range its error bound
    allows: `low` where the curve's hit plus the bound reaches the target, `high` where
    its hit minus the bound does (None: beyond the curve's largest point). `edge` says
    where an answer is a bound, not a measurement: "first" when the answer (or the low
    end) is the curve's first point (the target may be met by a smaller cache the curve
    did not measure), "last" when the high end lies beyond the curve."""
    sizes = np.asarray(mrc.get("bytes") or [], dtype=np.float64)
    hits = 1.0 - np.asarray(mrc.get("miss_ratio") or [], dtype=np.float64)
    bound = float(mrc.get("error_bound") or 0.0)
    if not len(sizes):
        return {"bytes": None, "low": None, "high": None, "bound": bound, "edge": None}
    at = _first_reaching(sizes, hits, target)
    lo = _first_reaching(sizes, hits + bound, target)
    hi = _first_reaching(sizes, hits - bound, target)
    edge = "first" if lo == 0 else ("last" if hi is None else None)
    return {
        "bytes": None if at is None else float(sizes[at]),
        "low": None if lo is None else float(sizes[lo]),
        "high": None if hi is None else float(sizes[hi]),
        "bound": bound,
        "edge": edge,
        "at_first_point": at == 0,
        "last_bytes": float(sizes[-1]),
    }


def _steady_basis(steady: dict[str, Any]) -> str:
    """`steady state, 200 batches replayed`, or at production scale the routed batches
    whose hits come from each GPU's curve (plan.json cluster.methods.steady)."""
    n = int(steady["batches"])
    batches = f"{n:,} batch{'es' * (n != 1)}"
    if steady.get("routed"):
        return f"steady state: {batches} routed without caches, each GPU's hits from its curve"
    return f"steady state, {batches} replayed"


def range_text(r: dict[str, Any]) -> str:
    """`788 MiB (271 MiB – 4.87 GiB)`; `≤ 32 MiB (the curve's first point: a bound)`;
    an open high end is `more than` the curve's last point."""
    if r["bytes"] is None:
        return "out of reach over the run"
    if r.get("stated"):  # plan.json's range_bytes: an open end is None
        b, lo, hi = (
            None if v is None else format_bytes(v) for v in (r["bytes"], r["low"], r["high"])
        )
        if lo is None and hi is None:
            return f"{b} (unresolved: the curve's error spans every size it measured)"
        if lo is None:
            return f"{b} (at most {hi}; within its error the curve's first size reaches it)"
        return f"{b} ({lo} – {'beyond the curve' if hi is None else hi})"
    if r.get("at_first_point"):
        return f"≤ {format_bytes(r['bytes'])} (the curve's first point: a bound, not a size)"
    low = format_bytes(r["low"]) if r["low"] is not None else "?"
    if r["edge"] == "first":
        low = "≤ " + (format_bytes(r["low"]) if r["low"] is not None else "the curve's first size")
    high = (
        format_bytes(r["high"])
        if r["high"] is not None
        else (f"more than the curve's {format_bytes(r['last_bytes'])}")
    )
    if r["edge"] == "first" and r["high"] is None:
        # the bound spans the whole measured curve: a size, but not one the sample pins
        return (
            f"{format_bytes(r['bytes'])} (unresolved: anywhere from {low} to {high}, the "
            "whole curve)"
        )
    return f"{format_bytes(r['bytes'])} ({low} – {high})"


def stated_range(answer: float | None, pair: list[float | None] | None) -> dict[str, Any] | None:
    """`range_text`'s input from a plan.json `range_bytes` pair ([low, high], each None
    where the curve does not bound it), or None where the plan wrote none."""
    if pair is None or answer is None:
        return None
    low, high = pair
    return {"bytes": answer, "low": low, "high": high, "stated": True}


def targets_with_range(doc: dict[str, Any]) -> str:
    """Each hit target's bytes with its ~95% range: plan.json's `range_bytes` (from the
    curve's error at the size where it crosses the target), else, in a plan written
    before them, from the curve's largest error."""
    lru = doc["cache"]["bytes_for_hit"].get("lru", {})
    ranges = (doc["cache"].get("range_bytes") or {}).get("lru") or {}
    mrc = doc.get("mrc") or {}
    parts = []
    for t in lru:
        r = stated_range(lru[t], ranges.get(t)) or target_range(mrc, float(t))
        if r["bytes"] is None or lru[t] is None:
            parts.append(f"hit {format_target(t)} is out of reach over the run")
        else:
            parts.append(f"hit {format_target(t)} needs {range_text(r)}")
    bound = float(mrc.get("error_bound") or 0.0)
    if ranges and (mrc.get("method") or "exact") != "exact":
        how = "; the curve with Che's as a control variate" if mrc.get("error_method") else ""
        where = f" (~95% ranges from the sampled curve's error where it crosses each target{how})"
    else:
        where = f" (ranges: the curve's ±{bound:.2g} error bound in miss ratio)" if bound else ""
    return ", ".join(parts) + where


def split_verdict(gain_points: float) -> str:
    """The split against the shared cache, in words: a gain under half a point is none."""
    if abs(gain_points) < 0.5:
        return f"{gain_points:+.2g} points: the split gains nothing over the shared cache"
    if gain_points < 0:
        return f"{gain_points:+.3g} points: the shared cache does better"
    return f"{gain_points:+.3g} points over the shared cache"


def split_line(cache: dict[str, Any]) -> str:
    """The budget's split against the shared cache and against one load factor."""
    base = cache.get("baseline")
    uniform = (
        "per-table caches at one load factor "
        f"({format_number(cache['uniform_load_factor'])} of every table's rows) hit "
        f"{pct_text(cache['uniform_hit'])}"
    )
    if base is None:  # a plan.json written before the shared-cache baseline
        split = pct_text(cache["split_hit"])
        return f"Split: per-table caches of the budget hit {split}; {uniform}."
    return (
        f"Split: per-table caches of the budget, sized by each table's curve, hit "
        f"{pct_text(cache['split_hit'])} against {pct_text(base['hit'])} for {base['cache']} "
        f"({split_verdict(base['split_gain_points'])}); {uniform} "
        f"({cache.get('uniform_method', 'per-table LRU curves')})."
    )


def cache_line(doc: dict[str, Any]) -> str:
    """How much cache to buy: bytes per hit target, the hit at the budget as one shared
    cache, the split against it, and per-table caches at one load factor."""
    cache = doc["cache"]
    lru = cache["bytes_for_hit"].get("lru", {})
    # a cluster's plan: this is the one-GPU reference beside the per-GPU lines
    one_gpu = "; one GPU holding every table, beside the cluster" if doc.get("cluster") else ""
    text = f"Cache ({plan_basis(doc)}, one GPU's LRU cache shared by every table{one_gpu}): "
    if lru:
        text += f"{targets_with_range(doc)}; "
    budget = format_bytes(cache["budget_bytes"])
    base = cache.get("baseline")
    if base is None:  # a plan.json written before the shared-cache baseline
        hit = cache["hit_at_budget"].get("lru")
        gain = cache["split_hit"] - cache["uniform_hit"]
        return text + (
            f"the {budget} budget hits {pct_text(hit)} of the run's lookups; split per table it "
            f"hits {pct_text(cache['split_hit'])} against {pct_text(cache['uniform_hit'])} "
            "with one "
            f"load factor ({gain * 100:+.3g} points)."
        )
    shared = "one shared TBE cache" if base["policy"].startswith("tbe-") else "one shared LRU"
    return text + (
        f"the {budget} budget as {shared} hits {pct_text(base['hit'])} of the run's lookups; "
        f"split per table it hits {pct_text(cache['split_hit'])} "
        f"({split_verdict(base['split_gain_points'])}); per-table caches at one load factor "
        f"({format_number(cache['uniform_load_factor'])}) hit {pct_text(cache['uniform_hit'])}."
    )


def systems_basis(doc: dict[str, Any]) -> str:
    """What the systems' per-batch figures are measured over: the span each replays, its
    steady half, each system's own cache (not the plan's budget), checkpointing off."""
    systems = doc["systems"]
    spans = {int(s["batches"]) for s in systems if s.get("batches")}
    if any(s.get("modelled") for s in systems):
        # production scale: one batch's counters from the LRU curve, no replay
        span = "one batch, its counters from the LRU curve (not replayed)"
    elif len(spans) == 1:
        span = f"the first {spans.pop():,} batches (steady state: their second half)"
    else:
        span = "a short span (steady state: its second half)"
    row_bytes = float(doc.get("row_bytes") or 0)
    caches = [
        f"{s['name']} {format_bytes(s['cache_rows'] * row_bytes)}"
        for s in systems
        if s.get("cache_rows") and row_bytes
    ]
    own = (
        f"each system's own cache ({', '.join(caches)}), not the "
        f"{format_bytes(doc['cache']['budget_bytes'])} budget"
        if caches
        else "each system's own cache"
    )
    name = doc["horizon"].get("workload") or "the planned workload"
    return f"plan: {name}, modelled time per batch over {span}, {own}, checkpointing off"


def systems_line(doc: dict[str, Any]) -> str | None:
    systems = doc["systems"]
    if not systems:
        return None
    fast = min(systems, key=lambda s: s["time_per_batch_s"])
    frugal = min(systems, key=lambda s: s["energy_per_batch_j"])
    step = doc["horizon"].get("time_per_batch_s")
    assumed = (
        f"; the plan's intervals and training time use its step of {format_duration(step)} "
        "(--time-per-batch), not this modelled time"
        if doc["horizon"].get("time_per_batch_from") == "--time-per-batch" and step
        else ""
    )
    text = (
        f"Systems ({systems_basis(doc)}): {fast['name']} is fastest at "
        f"{format_duration(fast['time_per_batch_s'])} and "
        f"{format_number(fast['energy_per_batch_j'], 4)} J per batch"
    )
    if frugal["name"] != fast["name"]:
        text += (
            f"; {frugal['name']} is the most energy-efficient at "
            f"{format_number(frugal['energy_per_batch_j'], 4)} J and "
            f"{format_duration(frugal['time_per_batch_s'])} per batch"
        )
    else:
        text += ", and the most energy-efficient"
    return text + assumed + "."


def times_text(x: float | None) -> str:
    """A multiple in the plan's text: `1.23×` (`n/a` for None)."""
    return format_multiple(x)


def size_text(b: float | None) -> str:
    return "out of reach" if b is None else format_bytes(b)


def cluster_shape(c: dict[str, Any]) -> str:
    return (
        f"{c['world']} GPUs ({c['nodes']} node{'s' if c['nodes'] != 1 else ''} x "
        f"{c['gpus_per_node']})"
    )


def cluster_lines(c: dict[str, Any]) -> list[str]:
    """A cluster plan's answer lines (`replay plan` prints them first; plan.md and the
    report show them): cache per GPU for each target, the network and the step time."""
    worst = c["bytes_for_hit"]["worst_gpu"]
    mean = c["bytes_for_hit"]["mean"]
    parts = []
    for t, b in worst.items():
        if b is None:
            parts.append(
                f"hit {format_target(t)} on every GPU is out of reach over this run "
                "(Read this first)"
            )
            continue
        where = "within" if c["fits_gpu_memory"].get(t) else "MORE than"
        spans = c.get("bytes_for_hit_range") or {}
        r = stated_range(b, (spans.get("worst_gpu") or {}).get(t))
        m = stated_range(mean[t], (spans.get("mean") or {}).get(t))
        parts.append(
            f"hit {format_target(t)} on every GPU needs {range_text(r) if r else format_bytes(b)} "
            "of cache per "
            f"GPU (the worst GPU; mean {range_text(m) if m else size_text(mean[t])}), {where} a "
            f"GPU's {format_bytes(c['gpu_memory_bytes'])}"
        )
    h = c["hit_at_budget"]
    lines = [
        f"Cluster: {cluster_shape(c)}, {c['sharding']} sharding: " + "; ".join(parts) + "; "
        f"the {format_bytes(c['budget_bytes_per_gpu'])} budget per GPU hits "
        f"{pct_text(h['worst'])} on the worst GPU (GPU {h['worst_gpu']}), {pct_text(h['mean'])} on "
        "the mean (each GPU's LRU curve over the run).",
        f"Cluster network: all-to-all {format_bytes(c['all_to_all_bytes_per_batch'])} per step "
        f"in total ({_a2a_scope(c)}; {_a2a_basis(c)}), taking "
        f"{format_duration(c['all_to_all_s_per_batch'])} per step; all-reduce "
        f"{format_duration(c['allreduce_s_per_batch'])} per step; step time "
        f"{format_duration(c['step_time_s'])} (the slowest GPU's); imbalance "
        f"{times_text(c['imbalance'])} "
        f"(max / mean lookups per GPU, measured; the sharder modeled "
        f"{times_text(c.get('imbalance_modeled'))}) ({_steady_basis(c['steady'])}).",
    ]
    return lines


def _a2a_scope(c: dict[str, Any]) -> str:
    """What the all-to-all's bytes add up: every GPU's sends over both hops (NVLink in a
    node, the network between nodes) and every phase, and its share per GPU."""
    world = int(c.get("world") or 1)
    per_gpu = format_bytes(float(c["all_to_all_bytes_per_batch"]) / world)
    return (
        f"the sum of the {world} GPUs' sends, within and between nodes, over every phase; "
        f"{per_gpu} per GPU on average"
    )


def _a2a_basis(c: dict[str, Any]) -> str:
    """What the all-to-all counts (plans before the key was written: the lower bound)."""
    if c.get("all_to_all_model", "lower-bound") == "lower-bound":
        return "a lower bound: pooled embeddings of the bags with lookups only"
    return "TorchRec's collectives per sharding type, ids and lengths included"


def horizon_text(doc: dict[str, Any]) -> str:
    h = doc["horizon"]
    rate = h["sample_rate"]
    sampled = "every lookup" if rate >= 1 else f"a spatial sample of the rows at R = {rate:g}"
    return (
        f"{int(h['batches']):,} batches, {int(h['lookups']):,} lookups, "
        f"{format_duration(h['training_time_s'])} of training at "
        f"{format_duration(h['time_per_batch_s'])} per batch ({h.get('time_per_batch_from', '')}); "
        f"curves from {sampled}; {int(doc['distinct_rows']):,} distinct rows of "
        f"{int(doc['row_bytes'])} B in a cache and {int(doc['state_bytes_per_row'])} B in a "
        "checkpoint (with optimizer state)"
    )


def plan_lines(plan: PlanData) -> dict[str, str | None]:
    doc = plan.document
    cluster = cluster_lines(doc["cluster"]) if doc.get("cluster") else []
    return {
        **{f"cluster{i}": line for i, line in enumerate(cluster)},
        "cache": cache_line(doc),
        "ssd": ssd_line(doc, plan_basis(doc)),
        "checkpoint": checkpoint_answer(doc),
        "goodput": goodput_line(doc) or None,
        "systems": systems_line(doc),
    }


FIGURES = ("mrc", "goodput", "cluster_gpus", "cluster_scaling")


def plan_figure_names(index: int) -> frozenset[str]:
    """The names under which the report's figures/ holds plan `index`'s figures."""
    return frozenset(f"plan_{fig}{suffix(index)}.png" for fig in FIGURES)


def plan_figures(plan: PlanData, index: int, fig_dir: Path) -> list[FigureOut]:
    """Copy the plan's figures into the report's figures/ and describe them."""
    doc = plan.document
    out = []
    where = "" if index == 0 else f" ({plan.path.name})"
    cache = doc["cache"]
    name = f"plan_mrc{suffix(index)}.png"
    title = f"Plan{where}: miss ratio against cache bytes"
    drawn = draw_plan_mrc(doc, fig_dir / name, title)  # from plan.json: band, fitted axis
    if not drawn and "mrc" in plan.figures:
        shutil.copyfile(plan.figures["mrc"], fig_dir / name)
    if drawn or "mrc" in plan.figures:
        lru = cache["bytes_for_hit"].get("lru", {})
        sampled = float((doc.get("mrc") or {}).get("error_bound") or 0.0) > 0
        caption = (
            "The LRU miss ratio over the planned run against cache bytes"
            + (" with its ~95% error band" if drawn and sampled else "")
            + f": the {format_bytes(cache['budget_bytes'])} budget (dashed line) hits "
            f"{pct_text(cache['hit_at_budget'].get('lru'))}"
            + (f"; {_targets(lru)} (dots)." if lru else ".")
        )
        out.append(FigureOut(name, title, caption, SECTION))
    if "goodput" in plan.figures:
        name = f"plan_goodput{suffix(index)}.png"
        shutil.copyfile(plan.figures["goodput"], fig_dir / name)
        caption = checkpoint_line(doc).removeprefix("Checkpoint: ") + (
            " Each strategy's optimum is marked."
        )
        out.append(
            FigureOut(name, f"Plan{where}: goodput against checkpoint interval", caption, SECTION)
        )
    cluster = doc.get("cluster")
    for fig, title in (
        ("cluster_gpus", "hit ratio at the budget and lookups per GPU, per sharding"),
        ("cluster_scaling", "all-to-all and step time against the number of GPUs"),
    ):
        path = plan.path / "figures" / f"{fig}.png"
        if cluster and path.is_file():
            name = f"plan_{fig}{suffix(index)}.png"
            shutil.copyfile(path, fig_dir / name)
            caption = cluster_lines(cluster)[0 if fig == "cluster_gpus" else 1]
            out.append(FigureOut(name, f"Plan{where}: {title}", caption, SECTION))
    return out


def plan_blocks(plan: PlanData, index: int, figures: list[FigureOut]) -> list[Block]:
    doc = plan.document
    lines = plan_lines(plan)
    # this plan's figures only (`plan_mrc.png` is the first plan's, `plan_mrc_2.png` the
    # second's): another plan's cluster figures are not this plan's
    mine = [f for f in figures if f.name in plan_figure_names(index)]
    images = {f.name: Image(f.name, f.title, f.caption) for f in mine}
    blocks: list[Block] = [
        Heading(heading(plan, index)),
        Paragraph(
            (
                "From ",
                Code("replay plan"),
                f" ({plan.path.name}): answers for the whole run, {horizon_text(doc)}. "
                "Per-batch costs are steady state; everything that grows with time (rows "
                "touched, failures) is taken over the whole run, not the replayed span.",
            )
        ),
        Bullets(tuple(line for line in lines.values() if line)),
    ]
    if doc.get("notes"):
        blocks += [Paragraph("Read this first:"), Bullets(tuple(doc["notes"]))]
    # a cluster plan's figures (plan.md's Cluster section has its tables)
    blocks += [images[f.name] for f in mine if f.name.startswith("plan_cluster_")]
    blocks += _cache_blocks(plan, index, images)
    blocks += ssd_blocks(doc, heading(plan, index, "SSD TBE"))
    blocks += _checkpoint_blocks(plan, index, images)
    blocks += _systems_blocks(plan, index)
    return blocks


MRC_TABLE_POINTS = 12  # sizes a plan's miss-ratio table shows


def mrc_table_points(doc: dict[str, Any]) -> tuple[list[int], str]:
    """The points of a plan's miss-ratio curve that its table shows, and what to say
    under it. Up to `MRC_TABLE_POINTS` spread over the sizes up to the first that holds
    every row the run touches: the curve is flat beyond it (the miss ratio there is the
    cold misses), so larger sizes are no answer and are left out, and the sentence says
    where the flat part starts ("" when the curve ends before it)."""
    m = doc["mrc"]
    rows = [int(r) for r in m["rows"]]
    if not rows:
        return [], ""
    distinct = int(doc.get("distinct_rows") or 0)
    held = [i for i, r in enumerate(rows) if distinct > 0 and r >= distinct]
    last = held[0] if held else len(rows) - 1
    spread = np.linspace(0, last, min(MRC_TABLE_POINTS, last + 1)).astype(int)
    idx = [int(i) for i in np.unique(spread)]
    if not held:
        return idx, ""
    per_row = float(m["bytes"][last]) / rows[last] if rows[last] else 0.0
    return idx, (
        f"From {distinct:,} rows ({format_bytes(distinct * per_row)}) a cache holds every row "
        "the run touches: its miss ratio is the cold misses (each row's first lookup), and a "
        "larger cache buys nothing, so the table ends there."
    )


def _cache_blocks(plan: PlanData, index: int, images: dict[str, Image]) -> list[Block]:
    doc = plan.document
    m, cache = doc["mrc"], doc["cache"]
    others = "; ".join(f"{p}: {how}" for p, how in cache.get("methods", {}).items() if p != "lru")
    blocks: list[Block] = [
        Heading(heading(plan, index, "cache"), 3),
        Paragraph(
            f"The LRU miss-ratio curve ({m.get('method', '')}, error bound "
            f"{float(m.get('error_bound') or 0):.3g}) over the run's lookups, in bytes of "
            f"embedding rows; other policies: {others or 'none among the systems planned'}."
        ),
    ]
    analytic = m.get("analytic_miss_ratio") or []
    headers = ("cache", "rows", "miss ratio") + (("analytic (Che)",) if analytic else ())
    rows = []
    points, beyond = mrc_table_points(doc)
    for i in points:
        row: tuple[str, ...] = (
            format_bytes(m["bytes"][i]),
            f"{int(m['rows'][i]):,}",
            f"{m['miss_ratio'][i]:.4f}",
        )
        if analytic and i < len(analytic):
            row += (f"{float(analytic[i]):.4f}",)
        elif analytic:
            row += ("n/a",)
        rows.append(row)
    blocks.append(Table(headers, tuple(rows)))
    if beyond:
        blocks.append(Paragraph(beyond))
    name = f"plan_mrc{suffix(index)}.png"
    if name in images:
        blocks.append(Paragraph(f"Figure {name}: the curve with the budget and the targets."))
        blocks.append(images[name])
    blocks += [
        Paragraph(
            "The budget split across tables (load factor = cache rows / table rows). "
            + split_line(cache)
        ),
        Table(
            ("table", "cache", "load factor", "hit"),
            tuple(
                (
                    str(t.get("table", "")),
                    format_bytes(t["bytes"]),
                    format_number(t["load_factor"], 4),
                    pct_text(t["hit"]),
                )
                for t in cache["per_table"]
            ),
        ),
    ]
    return blocks


def _checkpoint_blocks(plan: PlanData, index: int, images: dict[str, Image]) -> list[Block]:
    doc = plan.document
    ck = doc["checkpoint"]
    blocks: list[Block] = [
        Heading(heading(plan, index, "checkpoints"), 3),
        Paragraph(
            f"On {ck.get('system', '')}, at a cluster MTBF of "
            f"{format_duration(ck['cluster_mtbf_s'])}: each strategy's interval maximises the "
            "expected goodput of the whole run (from Young/Daly, refined numerically; cpr's "
            "trades its stall against the updates a failure loses); goodput from the failure "
            "simulator over the run; best first."
        ),
        Table(
            (
                "strategy",
                "interval",
                "Young/Daly",
                *checkpoint_columns(plan.document),
                "lost work per training failure",
                "failures during restores per run",
                "goodput",
                "p5",
            ),
            tuple(
                (
                    s["name"],
                    format_duration(s["interval_s"]),
                    _young_daly(s),
                    format_duration(s["cost_s"]),
                    format_bytes(s["bytes"]),
                    format_bytes(s["storage_bytes"]),
                    format_duration(s["restore_s"]),
                    format_duration(s["lost_work_per_training_failure_s"]),
                    format_number(float(s["failures_during_restore_per_run"])),
                    pct_text(s["goodput"]),
                    pct_text(s["goodput_p5"]),
                )
                for s in ck["strategies"]
            ),
        ),
    ]
    # partial recovery's interval and what a failure loses (a cluster's cpr)
    for s in ck["strategies"]:
        if s.get("interval_basis"):
            lost = cpr_lost_text(s)
            blocks.append(Paragraph(f"{cpr_interval_text(s)}. {lost[:1].upper()}{lost[1:]}."))
    name = f"plan_goodput{suffix(index)}.png"
    if name in images:
        blocks.append(Paragraph(f"Figure {name}: goodput against the interval, per strategy."))
        blocks.append(images[name])
    return blocks


def _young_daly(s: dict[str, Any]) -> str:
    """Young/Daly's interval, or a dash where the strategy writes nothing (`none`: the
    formula's interval of a zero-cost checkpoint is 0, not an answer)."""
    yd = float(s.get("young_daly_interval_s") or 0.0)
    return format_duration(yd) if yd > 0 and s["name"] != "none" else "-"


def _systems_blocks(plan: PlanData, index: int) -> list[Block]:
    systems = plan.document["systems"]
    if not systems:
        return []
    return [
        Heading(heading(plan, index, "systems"), 3),
        Paragraph(
            f"Each system's time and energy per batch ({systems_basis(plan.document)}; "
            "checkpointing is planned above); the hit ratio is over that span from a cold "
            "cache, not the whole run's (the cache answers above); Pareto: no other system is "
            "both as fast and as frugal."
        ),
        Table(
            ("system", "cache", *system_columns(plan.document), "hit ratio (span)", "Pareto"),
            tuple(
                (
                    s["name"],
                    format_bytes(s["cache_rows"] * float(plan.document.get("row_bytes") or 0))
                    if s.get("cache_rows")
                    else "-",
                    format_duration(s["time_per_batch_s"]),
                    f"{format_number(s['energy_per_batch_j'], 4)} J",
                    pct_text(s.get("hit_ratio")),
                    "yes" if s.get("pareto") else "",
                )
                for s in systems
            ),
        ),
    ]


# the checkpoint answer in words lives in plan_checkpoint; its names are kept here too
__all__ = [
    "MRC_TABLE_POINTS",
    "RARE_FAILURES_P",
    "SECTION",
    "capped_at_span",
    "checkpoint_answer",
    "checkpoint_line",
    "cluster_lines",
    "cluster_shape",
    "every",
    "failure_model",
    "format_percent",
    "goodput_line",
    "goodput_spread",
    "heading",
    "lossy",
    "minutes",
    "mrc_table_points",
    "pct_text",
    "plan_basis",
    "plan_blocks",
    "plan_figures",
    "plan_lines",
    "planned_checkfreq",
    "size_text",
    "strategy_label",
    "times_text",
]
