"""Hit ratios of the systems' other cache policies over the whole run, by miniature
simulation.

LRU has its miss-ratio curve for every size in one pass (`replay.analysis.horizon`). The
other row-cache policies (LFU, the static hot set, Belady's optimum, FBGEMM's TBE cache,
named `tbe-lru` / `tbe-lfu` by its replacement) have no stack
property, so each size is one replay. Over a spatially sampled stream at rate R, a cache
of C rows of the full stream behaves like a cache of C x R rows of the sample
(Waldspurger, Park, Garthwaite, Ahmad, "Cache Modeling and Optimization using Miniature
Simulations", USENIX ATC 2017: the same spatial sampling as SHARDS, with the cache scaled
by the rate); at R = 1 the replay is the engine's, exact. So:

- the hit at the budget is one replay of the horizon's stream with the policy at
  capacity round(budget rows x R), its misses over R x the full stream's lookups
  (`miniature_hit`: SHARDS_adj's correction, without which a sample that took or missed
  a heavy row reads that row's hits);
- the bytes for a hit target come from a bisection on the capacity in log space (each
  step one replay), to the 5% step of the LRU curve's sizes, and are the smallest
  capacity tried that reaches the target (never interpolated).

Each replay runs the system's own policy spec with its capacity replaced, checkpointing
off. A scaled cache smaller than one row cannot be simulated: targets that need less
than 1 / R rows report 1 / R rows, an upper bound (said in the plan's method).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from replay.engine.replay import replay_trace
from replay.engine.systems import resolve_system
from replay.plan.cache import SIZE_RATIO

MINIATURE_POLICIES = ("lfu", "hot", "belady", "tbe")  # row caches without a one-pass curve
# a plan's systems with a cache of given rows, by (system, sets, rows): `sized_system`
SizedSpecs = dict[tuple[str, tuple[str, ...], int], Any]


@dataclass(frozen=True)
class PolicyAnswer:
    policy: str
    system: str
    hit_at_budget: float
    rows_for_hit: dict[str, float | None]  # target (as text) -> full-stream rows
    replays: int
    method: str


def policy_label(spec: Any) -> str:
    """How plan.json names a system's cache answers: its policy, and for FBGEMM's TBE
    cache its replacement too (`tbe-lru`, `tbe-lfu`)."""
    if spec.policy.name == "tbe":
        return f"tbe-{spec.policy.cache_algorithm}"
    return str(spec.policy.name)


def miniature_hit(summary: dict[str, Any], rate: float, full_lookups: float) -> float:
    """A replay's hit ratio over the full stream. At R = 1 the replay's own. Over a
    spatial sample: 1 - misses / (R x full lookups), SHARDS_adj's correction (Waldspurger
    et al., FAST 2015) carried to the miniature: the sample holds R x N lookups in
    expectation, and its surplus or deficit comes from the heavy rows it happened to take
    or miss, which every cache worth sizing hits, so only the misses are scaled. Without
    it the hit ratio is that of the sample's own mix: on 300 Criteo Terabyte batches
    (hot values of 37-47% of a table's lookups) at R = 1/4 LRU read 0.921 for an exact
    0.8975, corrected 0.8981."""
    pol = summary["policy"]
    if rate >= 1.0 or full_lookups <= 0:
        return float(pol["hit_ratio"])
    return float(min(1.0, max(0.0, 1.0 - pol["misses"] / (rate * full_lookups))))


def _hit(
    source: Any, system: str, sets: Sequence[str], rows: int, rate: float = 1.0,
    full_lookups: float = 0.0, sized: SizedSpecs | None = None,
) -> float:  # fmt: skip
    """`sized`: the specs of each cache size, resolved once and kept (`sized_system`)."""
    capacity = max(rows, 1)
    return miniature_hit(
        replay_trace(source, sized_system(system, sets, capacity, sized)).summary,
        rate,
        full_lookups,
    )


def sized_system(
    system: str, sets: Sequence[str], rows: int, sized: SizedSpecs | None = None
) -> Any:
    """`system` with a cache of `rows` and checkpointing off: a variant of the plan's spec
    per cache size, resolved once per plan (`sized`: kept there, shared by the stages that
    replay caches of given sizes: the policies' and FBGEMM's TBE cache's)."""
    key = (system, tuple(sets), rows)
    spec = None if sized is None else sized.get(key)
    if spec is None:
        spec = resolve_system(
            system, [*sets, "checkpoint.strategy=none", f"policy.capacity_rows={rows}"]
        )
        if sized is not None:
            sized[key] = spec
    return spec


def policy_answers(
    source: Any,
    systems: Sequence[str],
    sets: Sequence[str],
    *,
    rate: float,
    budget_rows: float,
    targets: Sequence[float],
    distinct_rows: int,
    full_lookups: float = 0.0,
    resolved: Sequence[Any] = (),
    sized: SizedSpecs | None = None,
) -> list[PolicyAnswer]:
    """One answer per cache policy of `systems` that `MINIATURE_POLICIES` lists (the
    first system with that policy), from replays of `source` (sampled at `rate`);
    `resolved`: the systems' specs with `sets` applied, as the plan resolves them once;
    `sized`: the specs of each cache size replayed (`sized_system`)."""
    answers = []
    seen: set[str] = set()
    for i, name in enumerate(systems):
        spec = resolved[i] if resolved else resolve_system(name, list(sets))
        if spec.policy.name not in MINIATURE_POLICIES:
            continue
        policy = policy_label(spec)
        if policy in seen:
            continue
        seen.add(policy)
        replays = 0

        def hit_at_rows(full_rows: float, system: str = name) -> float:
            nonlocal replays
            replays += 1
            # a size asked again (the budget at the curve's top, the smallest size for
            # each target) is replayed again, its spec not resolved again
            rows = round(full_rows * rate)
            return _hit(source, system, sets, rows, rate, full_lookups, sized)

        at_budget = hit_at_rows(min(budget_rows, distinct_rows))
        found: dict[str, float | None] = {}
        top = max(float(distinct_rows), 1.0 / rate)
        top_hit = hit_at_rows(top)
        for target in targets:
            if top_hit < target:
                found[f"{target:g}"] = None
                continue
            lo, hi = 1.0 / rate, top  # hit(lo) may already reach it: then lo is the answer
            if hit_at_rows(lo) >= target:
                found[f"{target:g}"] = lo
                continue
            while hi / lo > SIZE_RATIO:
                mid = math.sqrt(lo * hi)
                if hit_at_rows(mid) >= target:
                    hi = mid
                else:
                    lo = mid
            found[f"{target:g}"] = hi
        method = "replayed" if rate >= 1 else f"miniature simulation at R = {rate:g}"
        answers.append(PolicyAnswer(policy, spec.name, at_budget, found, replays, method))
    return answers


__all__ = [
    "MINIATURE_POLICIES",
    "PolicyAnswer",
    "SizedSpecs",
    "miniature_hit",
    "policy_answers",
    "policy_label",
    "sized_system",
]
