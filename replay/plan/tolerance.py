"""`replay plan --tolerance`: a sample rate chosen for the answers (issue 54).

A sampled plan's byte answers carry ~95% ranges (`cache.range_bytes`, each GPU's
`cluster.per_gpu[].bytes_for_hit_range`: the curve's error where it crosses the target,
`replay.plan.cache.range_for_hit`). The tolerance asks every headline range (the shared
LRU cache's per target and, on a cluster, the worst GPU's) to lie within ±tolerance of
its answer. When one does not, the rate that would bring it in is estimated from how a
sampled curve's error falls with the rate, as 1 / sqrt(R) (the random-group standard
error of a sample of R x the rows), so the range's half-width w at rate R becomes
w sqrt(R / R') at R', and R' = R (w / tolerance)^2, rounded up to a power of two (exact
in SHARDS's 2^24 thresholds). An answer that is only a bound (the target reached at the
curve's first size: the sample's resolution, 16 (1 - R) / R rows, or the exact head's
end) needs a rate whose resolution lies below it: R' >= 32 / its rows.

With `--tolerance` given (the default, 25%, is only checked and said), the plan is then
made again at R', when the rate was chosen by the plan (not given with `--sample-rate`),
the sample stays within `MAX_SAMPLED_LOOKUPS` and the machine's memory holds it
(`replay.runs.plan_memory` checks before each run); at most `MAX_RERUNS` times.
Otherwise the plan says, in a note, which answer is wider than the tolerance, the rate
that would resolve it and how much longer the curves would take (R' / R times this
plan's sampled lookups, and the curves' time grows in proportion: an upper bound, as the
exact head's part does not grow). No wall time is written: plan.json stays
byte-identical for the same inputs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from replay._units import format_number, format_target

if TYPE_CHECKING:
    from replay._schema_plan import PlanDocument

DEFAULT_TOLERANCE = 0.25
MAX_RERUNS = 2
MAX_SAMPLED_LOOKUPS = 1 << 28  # ~8x the default sample (`plan.SAMPLED_LOOKUPS_TARGET`)


def parse_tolerance(text: str) -> float:
    """`10%` or `0.1` as a fraction in (0, 1); ConfigError otherwise."""
    from replay.errors import ConfigError

    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise ConfigError(f"--tolerance: {text!r} is not a share like 10% or 0.1") from None
    if not 0 < value < 1:
        raise ConfigError(f"--tolerance: {text!r} must be above 0% and below 100%")
    return value


def _width(answer: float | None, pair: Any) -> float | None:
    """The larger relative half-width of a range about its answer; inf where an end is
    open; None where there is no answer (out of reach)."""
    if answer is None or not answer:
        return None
    low, high = (pair or [None, None])[:2]
    if low is None or high is None:
        return math.inf
    return max((answer - low) / answer, (high - answer) / answer, 0.0)


def headline_ranges(document: Mapping[str, Any]) -> list[tuple[str, float, float]]:
    """(what, answer bytes, relative half-width) of every headline byte answer."""
    out = []
    cache = document["cache"]
    ranges = (cache.get("range_bytes") or {}).get("lru") or {}
    for t, b in (cache["bytes_for_hit"].get("lru") or {}).items():
        w = _width(b, ranges.get(t))
        if w is not None:
            out.append((f"hit {format_target(t)}", float(b), w))
    c = document.get("cluster")
    if c:
        worst = c["bytes_for_hit"]["worst_gpu"]
        span = (c.get("bytes_for_hit_range") or {}).get("worst_gpu") or {}
        for t, b in worst.items():
            w = _width(b, span.get(t))
            if w is not None:
                out.append((f"hit {format_target(t)} on every GPU", float(b), w))
    return out


def needed_rate(rate: float, width: float, tolerance: float, answer_rows: float) -> float:
    """The power-of-two rate that would bring a range of relative half-width `width` at
    `rate` within `tolerance` (module docstring), at most 1."""
    if math.isinf(width):
        want = 32.0 / max(answer_rows, 1.0)
        want = max(want, 4.0 * rate)
    else:
        want = rate * (width / tolerance) ** 2
    return min(1.0, 2.0 ** math.ceil(math.log2(max(want, rate * 2.0))))


def plan_within(
    request: Any,
    tolerance: float,
    make: Callable[[Any], tuple[PlanDocument, dict[str, Any]]],
    fits: Callable[[Any], bool],
    *,
    may_raise: bool = True,
) -> tuple[PlanDocument, dict[str, Any]]:
    """`make(request)`, made again at a higher rate while a headline range is wider than
    `tolerance` and the rate may rise (module docstring; `may_raise` False: never, the
    default tolerance only checked); the document records what was asked and met
    (`tolerance`) and notes what was not."""
    tried: list[dict[str, Any]] = []
    current = request
    for attempt in range(MAX_RERUNS + 1):
        document, curves = make(current)
        rate = float(document["horizon"]["sample_rate"])
        widths = headline_ranges(document)
        wide = [(what, b, w) for what, b, w in widths if w > tolerance]
        # no wall time here: plan.json is byte-identical for the same inputs (the time a
        # higher rate takes scales with the lookups it samples, said in the note)
        tried.append({"sample_rate": rate, "widest": max((w for *_, w in widths), default=0.0)})
        if not wide or rate >= 1.0:
            break
        row_bytes = float(document["row_bytes"]) or 1.0
        want = max(needed_rate(rate, w, tolerance, b / row_bytes) for _, b, w in wide)
        lookups = float(document["horizon"]["lookups"])
        sampled = lookups * want
        again = replace(current, sample_rate=want)
        chosen = request.sample_rate is None
        if (
            may_raise
            and chosen
            and attempt < MAX_RERUNS
            and sampled <= MAX_SAMPLED_LOOKUPS
            and fits(again)
        ):
            current = again
            continue
        what = ", ".join(
            f"{name} ({'a bound' if math.isinf(w) else f'±{w:.0%}'})" for name, _, w in wide
        )
        why = (
            "--tolerance was not given (the default is checked, the rate left as chosen)"
            if not may_raise
            else "--sample-rate was given"
            if not chosen
            else f"that samples {format_number(sampled)} lookups, more than this plan makes on "
            f"its own ({format_number(MAX_SAMPLED_LOOKUPS)})"
            if sampled > MAX_SAMPLED_LOOKUPS
            else "the plan at that rate does not fit this machine's memory"
            if not fits(again)
            else f"the plan was made {MAX_RERUNS + 1} times"
        )
        document["notes"].append(
            f"tolerance ±{tolerance:.0%}: {what} wider at R = {rate:g}; R = {want:g} would "
            f"resolve it, sampling about {want / rate:,.0f}× the lookups of this plan (its "
            f"sampled curves' time grows in proportion); not made because {why}: give "
            f"--sample-rate {want:g}"
        )
        break
    document["tolerance"] = {
        "tolerance": tolerance,
        "met": all(w <= tolerance for *_, w in headline_ranges(document)),
        "tried": tried,
    }
    return document, curves


__all__ = [
    "DEFAULT_TOLERANCE",
    "MAX_RERUNS",
    "MAX_SAMPLED_LOOKUPS",
    "headline_ranges",
    "needed_rate",
    "parse_tolerance",
    "plan_within",
]
