"""The plan's checkpoint answer in words, shared by the report's plan section and plan.md
(`replay.plan.write`): the recommended strategy and its interval (or that no checkpoint
falls inside the run), its goodput and what to read beside the mean when failures are
rare, the quantized rows' caveat, and each answer's basis (the plan, the failure model).
Pure: plan.json's dicts in, text out."""

from __future__ import annotations

import math
from typing import Any

from replay._units import format_bytes, format_duration, format_number, format_percent, plural
from replay.report.document import fmt_ratio
from replay.report.load import PlanData


def pct_text(x: float | None) -> str:
    return "n/a" if x is None else format_percent(x)


def capped_at_span(s: dict[str, Any]) -> bool:
    """Whether a strategy's interval reaches the run's end (no checkpoint inside it)."""
    if s["name"] == "none":
        return False
    if s.get("interval_capped_at_span"):
        return True
    horizon = s.get("horizon_s")
    return (
        horizon is not None
        and bool(horizon)
        and (float(s["interval_s"]) >= float(horizon) * (1 - 1e-9))
    )


def every(s: dict[str, Any]) -> str:
    """A strategy's interval in a sentence: "every 20.6 min", or, where the interval reaches
    the run's end, that no checkpoint falls inside the run (an interval that is not an
    answer: the figures are a run without checkpoints)."""
    if capped_at_span(s):
        return (
            "with no checkpoint inside the run (its interval reaches the run's end, "
            f"{format_duration(s['interval_s'])}: not an interval to use)"
        )
    return f"every {format_duration(s['interval_s'])}"


def minutes(seconds: float) -> str:
    """An interval as every duration of the report is written (`format_duration`), so one
    interval never reads `36.1 s` in one line and `0.601 min` in another."""
    return format_duration(seconds)


def plan_basis(doc: dict[str, Any]) -> str:
    """`plan: criteo-terabyte, the whole run of 2,135,484 batches`: what every plan
    answer is computed over."""
    h = doc.get("horizon") or {}
    name = h.get("workload") or "the planned workload"
    span = f" of {int(h['batches']):,} batches" if h.get("batches") else ""
    return f"plan: {name}, the whole run{span}"


def failure_model(ck: dict[str, Any]) -> str:
    """`16 nodes each failing once in 30 d on average: a cluster MTBF of 1.88 d`."""
    mtbf = format_duration(ck["cluster_mtbf_s"])
    nodes, node_mtbf = ck.get("nodes"), ck.get("node_mtbf_s")
    if nodes and node_mtbf:
        return (
            f"{int(nodes)} node{'s' * (int(nodes) != 1)} each failing once in "
            f"{format_duration(node_mtbf)} on average: a cluster MTBF of {mtbf}"
        )
    return f"a cluster MTBF of {mtbf}"


def checkpoint_answer(doc: dict[str, Any]) -> str:
    """The recommended strategy with its mode, interval, stall, bytes, storage and
    restore; its goodput is `goodput_line`'s."""
    ck = doc["checkpoint"]
    basis = f"Checkpoint ({plan_basis(doc)}, at {failure_model(ck)})"
    if not ck["strategies"]:
        return f"{basis}: no strategy was planned."
    s = ck["strategies"][0]
    if s["name"] == "none":
        return f"{basis}: no strategy beats running without checkpoints over this run."
    return (
        f"{basis}: {strategy_label(s)} {every(s)} "
        f"({plural(int(s.get('interval_batches') or 0), 'batch')}): a stall of "
        f"{format_duration(s['cost_s'])} and {format_bytes(s['bytes'])} written per "
        f"checkpoint, {format_bytes(s['storage_bytes'])} of storage ({_scope(doc, s)}), a "
        "restore of "
        f"{format_duration(s['restore_s'])}" + (f"; {lossy(s)}." if lossy(s) else ".")
    )


def _scope(doc: dict[str, Any], s: dict[str, Any]) -> str:
    """What a strategy's bytes cover: every node's shards, or the one GPU's whole model."""
    if doc.get("cluster") and s.get("bytes_per_node") is not None:
        return (
            f"all nodes together; the busiest node {format_bytes(s['bytes_per_node'])} "
            "per checkpoint"
        )
    return "the whole model's state"


def goodput_line(doc: dict[str, Any]) -> str:
    """The recommended strategy's goodput over the run, mean and 5th percentile."""
    ck = doc["checkpoint"]
    if not ck["strategies"]:
        return ""
    s = ck["strategies"][0]
    draws = int(s.get("draws") or 0)
    runs = f" over {draws:,} simulated runs" if draws else ""
    return (
        f"Goodput ({plan_basis(doc)}, at {failure_model(ck)}, with {strategy_label(s)}): "
        f"{pct_text(s['goodput'])} on average{runs} ({goodput_spread(s)})."
    )


def planned_checkfreq(plans: list[PlanData]) -> str | None:
    """CheckFreq's stall share over the planned run (the claim's figure where no replayed
    run measured it): one snapshot stall per interval, at the plan's interval."""
    for plan in plans:
        for s in plan.document["checkpoint"]["strategies"]:
            if s["name"] == "checkfreq" and s["interval_s"] > 0:
                # a multiple past 100% (a snapshot longer than its interval), as the
                # report writes every ratio
                return (
                    f"{fmt_ratio(s['cost_s'] / s['interval_s'])} stall overhead "
                    f"({format_duration(s['cost_s'])} of snapshot every "
                    f"{format_duration(s['interval_s'])}; {plan_basis(plan.document)}, at the "
                    "plan's goodput-optimal interval, not CheckFreq's rule)"
                )
    return None


def checkpoint_line(doc: dict[str, Any]) -> str:
    """Which checkpoint scheme, how often, what goodput, how many bytes."""
    ck = doc["checkpoint"]
    mtbf = format_duration(ck["cluster_mtbf_s"])
    if not ck["strategies"]:
        return f"Checkpoint: no strategy was planned (cluster MTBF {mtbf})."
    s = ck["strategies"][0]
    if s["name"] == "none":
        return (
            f"Checkpoint: at a cluster MTBF of {mtbf}, no strategy beats running without "
            f"checkpoints over this run: goodput {pct_text(s['goodput'])}"
            + (
                f" ({goodput_spread(s)})."
                if not goodput_spread(s).startswith("5th percentile")
                else "."
            )
        )
    return (
        f"Checkpoint: {strategy_label(s)} {every(s)} gives goodput "
        f"{pct_text(s['goodput'])} at a cluster MTBF of {mtbf} ({goodput_spread(s)}), writing "
        f"{format_bytes(s['bytes'])} per "
        "checkpoint" + (f"; {lossy(s)}." if lossy(s) else ".")
    )


def lossy(strategy: dict[str, Any]) -> str:
    """A short warning for quantized rows that carry the paper's accuracy caveat."""
    mode = strategy.get("mode") or {}
    bits = mode.get("quantize_bits") or 0
    if not strategy.get("caveat") or not bits:
        return ""
    n = float(strategy.get("failures_per_run") or 0.0)
    text = (
        f"{bits}-bit rows come back lossy from each of the run's "
        f"{format_number(n, 2) if n < 10 else f'{n:,.0f}'} expected restores: "
        "check the width against Check-N-Run's bit-width selection (caveat in plan.json)"
    )
    fallback = next(
        (
            m
            for m in strategy.get("modes") or []
            if m.get("papers_method") and (m.get("mode") or {}).get("quantize_bits") == 8
        ),
        None,
    )
    if fallback is not None:
        text += (
            f"; at 8 bits, the paper's fallback, every {minutes(fallback['interval_s'])} for "
            f"{fallback['goodput']:.3%} against {strategy['goodput']:.3%}"
        )
    return text


def strategy_label(strategy: dict[str, Any]) -> str:
    """A strategy as the plan names it, with its mode (`check-n-run (intermittent,
    4-bit)`); the name alone in a plan.json written before modes."""
    return str(strategy.get("label") or strategy["name"])


RARE_FAILURES_P = 0.5  # below this chance of any failure, a percentile shows no failure


def goodput_spread(strategy: dict[str, Any], pct: Any = None) -> str:
    """What to read beside the mean goodput: its 5th percentile when most runs see a
    failure; when failures are rare, the chance of one and the goodput of a run that
    sees one (`p_any_failure`, `goodput_given_failure`), since the percentiles are then
    runs without any (plans written before these keys: the chance from the expected
    failures, 1 - exp(-n))."""
    pct = pct or pct_text
    n = float(strategy.get("failures_per_run") or 0.0)
    p = strategy.get("p_any_failure")
    p = -math.expm1(-n) if p is None else float(p)
    if p >= RARE_FAILURES_P:
        return f"5th percentile {pct(strategy['goodput_p5'])}"
    given = strategy.get("goodput_given_failure")
    if p <= 0.0:
        return "no failure is expected over the run"
    # three decimals: a failure's cost is often a fraction of a point
    then = "" if given is None else f", and such a run's goodput is {given:.3%}"
    if n <= 0.0:  # the draws saw none (a run that rarely fails): the chance's expectation
        n = -math.log1p(-p)
    return (
        f"the run expects {format_number(n, 2)} failures: {format_percent(p)} of runs see "
        f"one{then}; the mean is mostly runs without any"
    )


__all__ = [
    "RARE_FAILURES_P",
    "capped_at_span",
    "checkpoint_answer",
    "checkpoint_line",
    "every",
    "failure_model",
    "goodput_line",
    "goodput_spread",
    "lossy",
    "minutes",
    "pct_text",
    "plan_basis",
    "planned_checkfreq",
    "strategy_label",
]
