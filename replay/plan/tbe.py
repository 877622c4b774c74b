"""What FBGEMM's set-associative TBE cache costs against an ideal LRU of the same bytes,
across load factors, over the plan's whole horizon.

For each load factor f of `LOAD_FACTORS` the TBE cache has FBGEMM's
`ways = ceil(int(Σ rows × f) / assoc) × assoc` rows (`replay.policies.tbe`). Its hit ratio
is one replay of the horizon's stream with the system's own `tbe` spec at that capacity
(checkpointing off); the ideal LRU's is the exact LRU curve at the same rows (the same
bytes: both hold `ways` rows). Over a spatially sampled stream at rate R both are
miniatures: the TBE replay runs a cache of round(ways × R) rows, rounded up to whole sets,
its misses over R x the full stream's lookups (Waldspurger et al., USENIX ATC 2017, with
SHARDS_adj's correction, as for the plan's other policies), and the LRU curve is SHARDS
at R. The sample keeps keys by SplitMix64's finalizer and the TBE's set
is MurmurHash3's: independent hashes, so the sample spreads over the sets as the full
stream does. Load factors whose ways hold every row the horizon touches are left out:
there every cache hits all it can and nothing is compared.

The difference (TBE minus ideal LRU, in points) weighs what 32-way sets cost (evictions
forced in a hot set while others hold cold rows, conflict misses) and batch time stamps
instead of exact recency against what the TBE's admission gains: a batch's misses go only
into ways the batch does not use, and a miss that finds none is served without being
cached, so one-off rows do not displace rows the batch reuses (on Criteo-like streams,
many rows are looked up once); LFU admits only rows counted at least as often as the
row they replace.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from replay.engine.replay import replay_trace
from replay.engine.systems import resolve_system
from replay.plan.policies import SizedSpecs, miniature_hit, sized_system
from replay.policies.tbe import tbe_sets

# FBGEMM's default is 0.2; TorchRec's planner proposes load factors down to ~0.001
LOAD_FACTORS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5)


@dataclass(frozen=True)
class TBECurve:
    """Hit ratios of one TBE system and of an ideal LRU of the same rows, per load factor."""

    system: str
    algorithm: str
    associativity: int
    load_factors: list[float]
    rows: list[int]  # the TBE's ways (full stream), the LRU's capacity
    tbe_hit: list[float]
    lru_hit: list[float]
    method: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def tbe_systems(
    systems: Sequence[str], sets: Sequence[str], resolved: Sequence[Any] = ()
) -> list[tuple[str, Any]]:
    """The first system of each TBE replacement (LRU, LFU) among `systems` (`resolved`:
    their specs with `sets` already applied, as the plan resolves them once)."""
    found: dict[str, tuple[str, Any]] = {}
    for i, name in enumerate(systems):
        spec = resolved[i] if resolved else resolve_system(name, list(sets))
        if spec.policy.name == "tbe":
            found.setdefault(spec.policy.cache_algorithm, (name, spec))
    return list(found.values())


def tbe_curves(
    source: Any,
    systems: Sequence[str],
    sets: Sequence[str],
    *,
    rate: float,
    total_rows: int,
    distinct_rows: int,
    min_rows: int,
    lru_hit_at: Any,
    full_lookups: float = 0.0,
    resolved: Sequence[Any] = (),
    sized: SizedSpecs | None = None,
) -> list[TBECurve]:
    """One curve per TBE replacement among `systems`. `lru_hit_at(rows)` gives the ideal
    LRU's hit ratios at full-stream cache sizes (an array of rows); sizes below `min_rows`
    (a sampled curve's resolution) are left out. `full_lookups`: the full stream's lookups
    (the miniature's misses are scaled by R x it: `replay.plan.policies.miniature_hit`);
    `sized`: the specs of each cache size, shared with the policies' answers."""
    out = []
    lru_cache: dict[tuple[int, ...], list[float]] = {}
    for name, spec in tbe_systems(systems, sets, resolved):
        assoc = int(spec.policy.associativity)
        factors, rows = [], []
        for f in LOAD_FACTORS:
            ways = tbe_sets(int(total_rows * f), assoc) * assoc
            if ways >= distinct_rows:
                break
            if ways < min_rows:
                continue
            factors.append(f)
            rows.append(ways)
        # Whole sets round several load factors up to the same ways (one set of 4096 ways
        # holds 0.1% to 20% of a small workload's rows): one replay per distinct cache, and
        # the LRU curve, which answers each distinct size once, mapped back to every factor.
        distinct = sorted(set(rows))
        hit_of: dict[int, float] = {}
        for ways in distinct:
            # a variant of the plan's spec per cache size (and checkpointing off)
            system = sized_system(name, sets, max(1, round(ways * rate)), sized)
            summary = replay_trace(source, system).summary
            hit_of[ways] = miniature_hit(summary, rate, full_lookups)
        hits = [hit_of[ways] for ways in rows]
        key = tuple(distinct)
        if key not in lru_cache:  # one LRU pass per set of sizes (LRU and LFU share it)
            lru_cache[key] = (
                [float(h) for h in lru_hit_at(np.asarray(distinct, np.int64))] if distinct else []
            )
        lru_of = dict(zip(distinct, lru_cache[key], strict=True))
        lru = [lru_of[ways] for ways in rows]
        method = (
            "replayed; ideal LRU exact"
            if rate >= 1
            else f"miniature simulation at R = {rate:g}; ideal LRU by SHARDS at R = {rate:g}"
        )
        out.append(
            TBECurve(
                system=spec.name,
                algorithm=spec.policy.cache_algorithm,
                associativity=assoc,
                load_factors=factors,
                rows=rows,
                tbe_hit=hits,
                lru_hit=lru,
                method=method,
            )
        )
    return out


__all__ = ["LOAD_FACTORS", "TBECurve", "tbe_curves", "tbe_systems"]
