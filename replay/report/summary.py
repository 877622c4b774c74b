"""The report's first screen: its summary lines, and the answers they give as data.

Each line names its workload and its basis (which workload, over what span: the plan's
whole run or the replayed batches' steady state, and at which cache), so two lines that
give different values for one quantity say why they differ. The answers behind the
lines go into summary.json's `answers` (quantity, value, the text quoted, the basis and
the line it is on) so a pipeline, and the tests, can check the Markdown against them.

Oracles (Belady's policy knows the future) are bounds, not systems: they are never
called fastest, and the line that mentions one says it is a bound.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from replay._units import format_duration, format_number, plural
from replay.report.analysis import energy_per_batch, time_terms
from replay.report.blocks import ms as _ms
from replay.report.blocks import pct as _pct
from replay.report.caveats import WARNINGS, warning_line
from replay.report.document import Code, Link, Text
from replay.report.figures import steady_span
from replay.report.load import PlanData, Results, RunData
from replay.report.plan_section import (
    cluster_shape,
    failure_model,
    pct_text,
    plan_basis,
    plan_lines,
    systems_basis,
)
from replay.report.plan_section import heading as plan_heading

CLAIMS = "Claims: the papers beside this model"
ORACLES = frozenset({"belady"})  # policies that read the future: bounds, not systems


def is_oracle(run: RunData) -> bool:
    return str((run.summary.get("policy") or {}).get("name", "")) in ORACLES


def top1pct_says_something(work: dict[str, Any]) -> bool:
    """Whether the hottest 1% of the rows is fewer than the rows touched: on a short span
    of big tables it holds every row touched, and its share of the lookups says nothing."""
    top = work.get("top1pct_rows", -(-int(work["rows"]) // 100))  # ceil(rows / 100)
    return bool(top < work.get("distinct_rows", work["rows"]))


def _trace_name(results: Results) -> str:
    runs = results.all_runs()
    meta = runs[0].meta.get("trace", {}) if runs else {}
    return str(meta.get("workload") or "")


def replayed_basis(results: Results) -> str:
    """`replayed: the first 200 batches of criteo-terabyte, steady state (batches
    100–199)`."""
    work = results.workload() or {}
    name = _trace_name(results)
    runs = [r for r in results.all_runs() if r.batches.height > 0]
    batches = f"{int(work['batches']):,} batches" if work.get("batches") else "the trace"
    whose = f" of {name}" if name else ""
    plan_name = results.plans[0].document["horizon"].get("workload") if results.plans else ""
    first = "the first " if plan_name and plan_name == name else ""
    return f"replayed: {first}{batches}{whose}, steady state ({steady_span(runs)})"


def step_basis(doc: dict[str, Any]) -> str:
    """`the assumed step (--time-per-batch)`, or `the modelled step (hbm-lru's steady
    state)`: where the plan's step time comes from."""
    source = str(doc["horizon"].get("time_per_batch_from") or "")
    if source == "--time-per-batch":
        return "the assumed step (--time-per-batch)"
    return f"the modelled step ({source})" if source else "the modelled step"


def workload_line(results: Results) -> str:
    """The first line: the plan's workload with its size, step time and cluster, then
    the replayed span (said to be another workload where it is one)."""
    work = results.workload()
    name = _trace_name(results)
    replayed = ""
    if work:
        top = (
            f"the hottest 1% of rows take {_pct(work['top1pct_share'])} of the lookups"
            if top1pct_says_something(work)
            else "the hottest 1% of rows take every lookup: fewer are touched"
        )
        replayed = (
            f"{int(work['batches']):,} batches, {int(work['lookups']):,} lookups over "
            f"{plural(len(work.get('tables', [])), 'table')} ({int(work['rows']):,} rows, "
            f"{_pct(work['touched_fraction'])} touched; {top})"
        )
    if not results.plans:
        what = f"the {name} trace" if name else "the trace"
        if not work:
            n = len(results.all_runs())
            return f"Workload: {n} runs; the trace's statistics were not recorded."
        return f"Workload: {what} replayed here: {replayed}."
    doc = results.plans[0].document
    h = doc["horizon"]
    plan_name = h.get("workload") or "the planned workload"
    size = f"{int(doc['distinct_rows']):,} distinct rows of {int(doc['row_bytes'])} B"
    batch = f" of {int(h['batch_size']):,}" if h.get("batch_size") else ""
    text = (
        f"Workload: {plan_name}, planned for {int(h['batches']):,} batches{batch} "
        f"({int(h['lookups']):,} lookups, {size}) at {step_basis(doc)} of "
        f"{format_duration(h['time_per_batch_s'])}: {format_duration(h['training_time_s'])} "
        "of training on "
        + (f"{cluster_shape(doc['cluster'])}, " if doc.get("cluster") else "")
        + f"{failure_model(doc['checkpoint'])}"
    )
    if work:
        if name and name == plan_name:
            text += f"; the replayed studies run its first {replayed}"
        else:
            other = f"the {name} trace" if name else "a trace"
            text += f"; the replayed studies run another workload, {other}: {replayed}"
    return text + "."


def _run_lines(
    results: Results, timed: dict[str, str] | None = None
) -> tuple[str | None, list[dict[str, Any]]]:
    """The fastest buildable replayed run, and the oracles beside it as bounds. `timed`:
    the systems a plan's line already gives a time per batch for (name -> that line's
    basis): the summary gives one time per system, so the runs line names that one."""
    timed = timed or {}
    runs = [r for r in results.all_runs() if r.batches.height > 0]
    if not runs:
        return None, []
    costs = [
        (time_terms(r)["total"], energy_per_batch(r), r.label, is_oracle(r), r.system) for r in runs
    ]
    real = [c for c in costs if not c[3]]
    oracles = [c for c in costs if c[3]]
    basis = replayed_basis(results) + ", each run's own cache and checkpointing"
    answers: list[dict[str, Any]] = []
    parts = []
    if real:
        fast = min(real, key=lambda c: (c[0], c[2]))
        answers.append({"quantity": "fastest", "value": fast[2], "text": fast[2], "basis": basis})
        if fast[4] in timed:  # its time is the plan's line's (one time per system)
            parts.append(
                f"{fast[2]} is the fastest run, at {format_number(fast[1], 4)} J per batch (its "
                f"time per batch is given once: {timed[fast[4]]})"
            )
        else:
            parts.append(
                f"{fast[2]} is the fastest run at {_ms(fast[0])} and "
                f"{format_number(fast[1], 4)} J per batch"
            )
            answers.append(
                {"quantity": "time_per_batch", "value": fast[0], "text": _ms(fast[0]),
                 "basis": basis, "system": fast[4]}
            )  # fmt: skip
    for o in sorted(oracles, key=lambda c: (c[0], c[2]))[:1]:
        parts.append(
            f"{o[2]}, an oracle that knows the future (Belady), bounds what a cache could do at "
            f"{_ms(o[0])}: a bound, not a system"
        )
    text = (
        f"Replayed runs ({basis}; they support the per-batch comparisons: time, energy, "
        f"traffic and checkpoint bytes, not the cache size or the checkpoint interval for the "
        f"run): " + "; ".join(parts) + "."
    )
    return text, answers


def _plan_command(results: Results) -> str:
    """The `replay plan` command that would answer for this trace (no numbers made up)."""
    runs = results.all_runs()
    trace = runs[0].trace if runs else ""
    system = runs[0].system if runs else "hbm-lru"
    return (
        f"replay plan {trace or 'TRACE'} --system {system} --cache-budget SIZE "
        "--hit-target 0.9 --cluster-mtbf DURATION --out plan"
    )


LIMIT = 10  # the summary's lines at most
_COMMAND = re.compile(r"[A-Za-z0-9_./=+ -]+")
# a plan's summary lines in the order they are shown, and the order they are kept in when
# several plans share the summary's lines (each plan keeps at least its first answer)
PLAN_ORDER = ("cluster0", "cluster1", "cache", "ssd", "checkpoint", "goodput", "systems", "notes")
PLAN_PRIORITY = ("cluster0", "cache", "ssd", "checkpoint", "goodput", "systems", "cluster1",
                 "notes")  # fmt: skip


def _plan_keys(plan: PlanData) -> list[str]:
    lines = plan_lines(plan)
    present = [k for k in PLAN_PRIORITY if lines.get(k)]
    if plan.document.get("notes"):
        present.append("notes")
    return present


def _plan_line_budget(results: Results, budget: int) -> list[set[str]]:
    """Which of each plan's lines the summary keeps: every plan's most important line
    first, then each plan's next, round-robin, until `budget` lines are taken."""
    keys = [[k for k in PLAN_PRIORITY if k in _plan_keys(plan)] for plan in results.plans]
    chosen: list[set[str]] = [set() for _ in keys]
    rank = 0
    while budget > 0 and any(rank < len(k) for k in keys):
        for i, k in enumerate(keys):
            if rank < len(k) and budget > 0:
                chosen[i].add(k[rank])
                budget -= 1
        rank += 1
    return chosen


def _plan_summary(
    plan: PlanData,
    index: int,
    count: int,
    keep: set[str],
    add: Callable[..., None],
    answers: list[dict[str, Any]],
) -> None:
    """One plan's summary lines (those in `keep`), each naming the plan where the report
    holds several, and the answers they give."""
    doc = plan.document
    h = doc["horizon"]
    name = plan.path.name
    prefix = f"Plan {index + 1} ({name}): " if count > 1 else ""
    whose = {"plan": name} if count > 1 else {}
    if index == 0:  # the workload line (line 0) gives the first plan's step
        answers.append(
            {
                "quantity": "time_per_batch",
                "value": h["time_per_batch_s"],
                "text": format_duration(h["time_per_batch_s"]),
                "basis": step_basis(doc),
                "line": 0,
                **whose,
            }
        )
    lines = plan_lines(plan)
    given: dict[str, list[dict[str, Any]]] = {}
    hit = doc["cache"]["hit_at_budget"].get("lru")
    given["cache"] = [
        {"quantity": "hit_ratio", "value": hit, "text": pct_text(hit), "basis": plan_basis(doc),
         **whose}
    ]  # fmt: skip
    if doc["systems"]:
        fast = min(doc["systems"], key=lambda s: s["time_per_batch_s"])
        basis = systems_basis(doc)
        given["systems"] = [
            {"quantity": "fastest", "value": fast["name"], "text": fast["name"], "basis": basis,
             **whose},
            {"quantity": "time_per_batch", "value": fast["time_per_batch_s"],
             "text": format_duration(fast["time_per_batch_s"]), "basis": basis,
             "system": fast["name"], **whose},
        ]  # fmt: skip
    part = {"cluster0": "", "cluster1": "", "cache": "cache", "ssd": "SSD TBE",
            "checkpoint": "checkpoints", "goodput": "checkpoints", "systems": "systems",
            "notes": ""}  # fmt: skip
    for key in PLAN_ORDER:
        if key not in keep:
            continue
        if key == "notes":
            n = len(doc["notes"])
            line = f"The plan ({plan_basis(doc)}) notes {n} caveat{'s' * (n > 1)} to read first."
        else:
            line = str(lines[key])
        add(prefix + line, plan_heading(plan, index, part[key]), given.get(key))


def summary_items(
    results: Results, analysis: dict[str, Any], anchors: dict[str, str]
) -> tuple[list[Text], list[dict[str, Any]]]:
    """At most ten lines, each ending in a link to the section it comes from, and the
    answers they give (each with the index of its line)."""

    def see(line: str, heading: str) -> Text:
        target = anchors.get(heading)
        return (line, " (", Link(heading, "#" + target), ")") if target else line

    items: list[Text] = [see(workload_line(results), "Workload")]
    answers: list[dict[str, Any]] = []

    def add(line: str | None, heading: str, given: list[dict[str, Any]] | None = None) -> None:
        if not line:
            return
        answers.extend({**a, "line": len(items)} for a in given or [])
        items.append(see(line, heading))

    add(warning_line(results), WARNINGS)  # read first: a degenerate run's numbers
    if results.plans:
        fixed = len(items) + 1 + bool(analysis.get("claims"))  # the runs' and claims' lines
        chosen = _plan_line_budget(results, max(len(results.plans), LIMIT - fixed))
        for index, plan in enumerate(results.plans):
            _plan_summary(plan, index, len(results.plans), chosen[index], add, answers)
    else:
        command = _plan_command(results)
        items.append(
            (
                "Cache: no plan among the results, so no cache size is given; to get one, run ",
                # a code span only of characters a command is made of: a name that is not
                # (one with backticks, markup or spaces) stays plain text
                Code(command) if _COMMAND.fullmatch(command) else command,
                " and report its folder with these results.",
            )
        )
        items.append(
            (
                "Checkpoint: no plan among the results, so no scheme or interval is given (a "
                "replayed span of seconds cannot measure goodput over days); the same ",
                Code("replay plan"),
                " answers it.",
            )
        )
    # the systems a kept plan line timed: the runs line gives no second time for them
    timed = {
        str(a["system"]): f"{a['plan']}'s Systems line" if a.get("plan") else "the Systems line"
        for a in answers
        if a["quantity"] == "time_per_batch" and a.get("system")
    }
    runs_line, run_answers = _run_lines(results, timed)
    add(runs_line, "Time per batch", run_answers)
    claims = analysis.get("claims") or []
    if claims:
        shown = sum(not c["model"].startswith(("not computed", "not shown")) for c in claims)
        add(
            f"Published claims: {shown} of {len(claims)} computed ({replayed_basis(results)}, "
            "or the plan's whole run where a row says so)"
            + ("; the others say what they need." if shown < len(claims) else "."),
            CLAIMS,
        )
    return items[:LIMIT], [a for a in answers if a["line"] < LIMIT]


__all__ = [
    "CLAIMS",
    "ORACLES",
    "is_oracle",
    "replayed_basis",
    "summary_items",
    "top1pct_says_something",
    "workload_line",
]
