"""How big FBGEMM's SSD TBE caches must be for a hit target, and what the SSD must carry.

FBGEMM's SSD TBE (`fbgemm_gpu/tbe/ssd/training.py`, TorchRec's `KEY_VALUE` kernel; the
model is `replay.policies.ssd_tbe`'s) has an L1 cache of `cache_sets x 32` ways in GPU
memory, filled per batch as the TBE cache is, an L2 LRU of `l2_cache_size` GiB in host
DRAM (CacheLib), and RocksDB on NVMe behind it. A lookup is a **hit** here when it is
served from L1 or L2, a miss when its row is read from the SSD store: one miss per row
read (its first lookup in the batch; its other lookups read the copy fetched, as every
cache of this tool counts them), so hit = 1 - SSD reads / lookups.

The two-level curve, over the plan's whole horizon:

1. **L1 candidates**: FBGEMM's TBE cache at each load factor of `replay.plan.tbe`'s
   `LOAD_FACTORS` (ways = whole sets of `associativity` holding int(Σ rows x f) rows),
   those holding fewer rows than the run touches. Each is replayed by
   `replay.policies.ssd_tbe.l1_miss_stream`'s recorder, which yields per batch the rows
   L1 reads from L2 (its unique misses), the rows it evicts to L2 and the conflict misses
   it writes back after backward.
2. **L2 curve per L1**: one exact stack-distance pass over that stream gives the SSD
   reads and writes of every L2 size at once (`replay.plan.ssd_tbe_l2`: L2 is an LRU over
   the reads and the writes, Mattson's stack property). Sizes from 0 (no L2) to the
   stream's distinct rows, 5% apart (`replay.plan.cache.curve_sizes`).
3. All L1 candidates share **one read of the horizon**: each range is fed to every L1
   and each L1's stream to its L2 pass before the next range is read.

**The rule** (per target): least HBM first, then least host DRAM. The L1 candidates also
include the whole sets that hold a batch's distinct rows (the run's mean, `touched(1)`):
an L1 smaller than that cannot keep a batch's rows, which then go through the scratch pad
(read from L2 and written back every batch), so the rule takes only candidates at least
that large, and within the cache budget (`--cache-budget`: the HBM the cache may take).
Of those, the smallest L1 for which some L2 within the system's host DRAM tier reaches
the target, with the smallest such L2 (never interpolated: the curve's measured sizes,
5% apart, so an L2 10% smaller does not reach the target with that L1). Where that L1
reaches the target with no L2, a smaller L1 may too (its misses then read the SSD, but
few enough): the answer is the smallest L1 that reaches it alone among sizes 5% apart
below it (whole sets; down to the largest candidate that does not, at most 40 steps),
all replayed in one more read of the horizon, and no L2. HBM is the scarce level: SSD
TBE exists to keep it small. Every candidate's curve is in plan.json
(`cache.ssd_tbe.candidates`): a user who wants a larger L1 (fewer L2 reads over PCIe per
step) reads the L2 it needs there. Bytes are the engine's row (values and optimizer
state, as the `ssd-tbe` policy sizes L1 and L2), so `replay run` replays them.

**SSD bandwidth** per target: SSD read bytes per step = SSD reads x row bytes / batches;
write bytes per step = SSD writes x row bytes x the store's write amplification / batches
(RocksDB compaction rewrites what is written: the policy's
`ssd_write_amplification` where the system has it, else 1, stated as an assumption);
bandwidth = bytes per step / the plan's time per batch. The drive keeps up when
reads / its read bandwidth + writes / its write bandwidth <= 1 (one device serves both),
judged on the busier of the whole run's mean and its second half's (the run starts cold:
every first lookup of a row reads the SSD, where the table was bulk-loaded).

**Sampled horizons** (R < 1): miniature simulation (Waldspurger et al., USENIX ATC 2017):
L1 of round(ways x R) rows in whole sets, L2 sizes x R, SSD reads and writes / R, the hit
1 - SSD reads / (R x the full stream's lookups) (SHARDS_adj's correction, as
`replay.plan.policies.miniature_hit`).

**What a user pastes** (TorchRec, `torchrec/distributed/types.py` `KeyValueParams`;
`batched_embedding_kernel.py` `_populate_ssd_tbe_params`): `cache_load_factor` f such that
TorchRec's `cache_sets = max(int(f x Σ local rows / 32), 1)` is the L1's sets;
`KeyValueParams(l2_cache_size=G, max_l1_cache_size=M)` with `l2_cache_size` in whole GiB
(`int64` GB, CacheLib's `cache_size_gb * 1024^3` bytes), rounded up, and
`max_l1_cache_size` in whole MiB (`* 1024 * 1024`) rounded up, so TorchRec's cap
(`max_l1_cache_size` / 32 / element bytes / max dim sets) does not cut the L1 below its
sets. L2 bytes are what CacheLib allocates for the L2's rows (`replay.system.cachelib`:
an item is a 32 B header, the 8 B key and the row, `max_D` x element bytes, in a chunk of
its slab class; 4 MiB slabs), so `policy.l2_capacity_bytes` set to them holds those rows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from replay._units import format_percent, format_target
from replay.engine.systems import resolve_system
from replay.plan.cache import SIZE_RATIO, curve_sizes
from replay.plan.ssd_tbe_l2 import L2Counts, L2Curve
from replay.plan.tbe import LOAD_FACTORS
from replay.policies.base import HITS, NUM_COUNTERS
from replay.policies.ssd_tbe import l1_recorder
from replay.policies.tbe import tbe_sets
from replay.system import cachelib
from replay.trace.stream import iter_batch_ranges, updates_as_keys

POLICY = "ssd-tbe"
DIRECT_STATE_BYTES = 1 << 30
MIB = 1 << 20
GIB = 1 << 30


@dataclass(frozen=True)
class Candidate:
    """One L1 and the L2 curve of its miss stream (full-stream rows and counts)."""

    load_factor: float
    ways: int  # L1 rows (full stream)
    sets: int
    l1_hit: float
    l2_rows: np.ndarray  # int64 L2 sizes, ascending, 0 first
    hit: np.ndarray  # float64 per L2 size: lookups served from L1 or L2
    ssd_read_rows: np.ndarray  # float64 per L2 size, the whole run (full stream)
    ssd_write_rows: np.ndarray
    warm_read_rows: np.ndarray  # ... from `warm_from` on
    warm_write_rows: np.ndarray
    l2_reads: float  # rows L1 read from L2 over the run (full stream)
    l2_writes: float


def ssd_tbe_system(
    systems: Sequence[str], sets: Sequence[str], resolved: Sequence[Any] = ()
) -> tuple[str, Any] | None:
    """The first system among `systems` whose policy is `ssd-tbe`, resolved; None if none
    (`resolved`: their specs with `sets` already applied, as the plan resolves them once)."""
    for i, name in enumerate(systems):
        spec = resolved[i] if resolved else resolve_system(name, list(sets))
        if spec.policy.name == POLICY:
            return name, spec
    return None


def _l1_ways(total_rows: int, f: float, assoc: int) -> int:
    return tbe_sets(int(total_rows * f), assoc) * assoc


def _simulated_ways(ways: int, rate: float, assoc: int) -> int:
    """The L1 a miniature at `rate` simulates for `ways` full-stream rows: round(ways x R)
    rows in whole sets, standing for those rows / R (R a power of two: whole sets too)."""
    if rate >= 1.0:
        return int(ways)
    return round(tbe_sets(max(1, round(ways * rate)), assoc) * assoc / rate)


def _warm_split(source: Any) -> int:
    return int(source.num_batches) // 2


def two_level_curves(
    source: Any,
    *,
    total_rows: int,
    distinct_rows: int,
    associativity: int,
    rate: float = 1.0,
    full_lookups: float = 0.0,
    min_rows: int = 1,
    load_factors: Sequence[float] = LOAD_FACTORS,
    extra_rows: Sequence[float] = (),
    l2_sizes: Sequence[int] | None = None,
    max_rows: float = math.inf,
) -> tuple[list[Candidate], int]:
    """Each L1 candidate's hit and SSD traffic at every L2 size, from one read of
    `source` (flat keys in [0, total_rows); a spatial sample at `rate`, whose full
    stream has `full_lookups` lookups). L1 candidates: FBGEMM's ways at each of
    `load_factors`, and the whole sets holding each of `extra_rows` (load factor: ways /
    rows), those holding fewer rows than the run touches and no more than `max_rows`
    (the smallest one if none is that small). L2 sizes (full stream): 0 and
    `curve_sizes` up to the distinct rows, or `l2_sizes`. Returns the candidates (by
    ways) and the batch from which the warm counts start."""
    assoc = int(associativity)
    proposed = [(f, _l1_ways(total_rows, f, assoc)) for f in load_factors]
    for rows in extra_rows:
        ways = tbe_sets(math.ceil(rows), assoc) * assoc
        proposed.append((ways / max(int(total_rows), 1), ways))
    chosen: list[tuple[float, int]] = []
    for f, ways in sorted(proposed, key=lambda p: (p[1], p[0])):
        ways = _simulated_ways(ways, rate, assoc)
        if min_rows <= ways < distinct_rows and all(w != ways for _, w in chosen):
            chosen.append((f, ways))
    # an L1 beyond the budget is never recommended: not replayed (each is a replay)
    chosen = [p for i, p in enumerate(chosen) if p[1] <= max_rows or i == 0]
    full_sizes = (
        np.concatenate([[0], curve_sizes(max(int(distinct_rows), 1), 1)])
        if l2_sizes is None
        else np.unique(np.asarray(l2_sizes, dtype=np.int64))
    )
    if rate < 1.0:
        full_sizes = full_sizes[(full_sizes == 0) | (full_sizes * rate >= 1)]
    sample_sizes = np.where(full_sizes == 0, 0, np.maximum(np.rint(full_sizes * rate), 1))
    # each miniature L2 stands for the full-stream L2 of its rows / R (sizes that round to
    # the same miniature are one size)
    sample_sizes = np.unique(sample_sizes.astype(np.int64))
    full_sizes = sample_sizes if rate >= 1.0 else np.rint(sample_sizes / rate).astype(np.int64)
    l1s, l2s = [], []
    # per-row L2 state: a direct array (4 bytes a row of the row space) for the full
    # stream while all candidates' fit in DIRECT_STATE_BYTES; a map of the rows seen for
    # a sample (which touches few of them) or beyond
    direct = rate >= 1.0 and 4 * int(total_rows) * max(len(chosen), 1) <= DIRECT_STATE_BYTES
    for _, ways in chosen:
        sample_ways = ways if rate >= 1.0 else round(ways * rate)
        l1s.append(l1_recorder(total_rows, sample_ways // assoc, assoc))
        l2s.append(L2Curve(total_rows, sample_sizes, direct=direct))
    hits = [0] * len(chosen)
    lookups = 0
    split = _warm_split(source)
    at_split: list[L2Counts | None] = [None] * len(chosen)
    for br in iter_batch_ranges(source, with_updates=True):
        br = updates_as_keys(br, 0)  # the TBE kernel reads update keys
        lookups += len(br.keys)
        # the warm part starts at batch `split`: counts are taken there, mid-range if so
        cut = split - br.batch_start if br.batch_start <= split < br.batch_stop else -1
        for c, (l1, l2) in enumerate(zip(l1s, l2s, strict=True)):
            out = np.zeros((br.batches, NUM_COUNTERS), dtype=np.int64)
            ex = l1.exchange(br, out)
            hits[c] += int(out[:, HITS].sum())
            # per batch in FBGEMM's order: get, prefetch set, backward set
            streams = (ex.bounds, ex.reads, ex.evictions, ex.conflicts)
            if cut < 0:
                l2.feed_batches(*streams)
            else:
                l2.feed_batches(*streams, 0, cut)
                at_split[c] = l2.counts()
                l2.feed_batches(*streams, cut)
    scale = 1.0 if rate >= 1.0 else 1.0 / rate
    denom = float(lookups) if rate >= 1.0 or full_lookups <= 0 else rate * full_lookups
    denom = max(denom, 1.0)
    out_c = []
    for c, (f, ways) in enumerate(chosen):
        end = l2s[c].counts()
        mid = at_split[c]
        reads = end.ssd_read_rows.astype(np.float64)
        writes = end.ssd_write_rows.astype(np.float64)
        if mid is None:  # a run of one batch: it is its own warm part
            warm_r, warm_w = reads, writes
        else:
            warm_r = reads - mid.ssd_read_rows
            warm_w = writes - mid.ssd_write_rows
        l1_hit = 1.0 - (lookups - hits[c]) / denom if rate < 1.0 else hits[c] / max(lookups, 1)
        out_c.append(
            Candidate(
                load_factor=f,
                ways=ways,
                sets=ways // assoc,
                l1_hit=float(min(1.0, max(0.0, l1_hit))),
                l2_rows=full_sizes.astype(np.int64),
                hit=np.clip(1.0 - reads / denom, 0.0, 1.0),
                ssd_read_rows=reads * scale,
                ssd_write_rows=writes * scale,
                warm_read_rows=warm_r * scale,
                warm_write_rows=warm_w * scale,
                l2_reads=end.reads * scale,
                l2_writes=end.writes * scale,
            )
        )
    return out_c, split


def paste_load_factor(sets: int, total_rows: int, assoc: int) -> float:
    """A `cache_load_factor` for which TorchRec's `max(int(f x rows / assoc), 1)` gives
    `sets`: the middle of the interval of factors that do (printed to 6 significant
    digits, and checked)."""
    rows = max(int(total_rows), 1)
    for digits in (6, 9, 12, 17):  # the shortest that TorchRec turns back into `sets`
        f = float(f"{(sets + 0.5) * assoc / rows:.{digits}g}")
        if max(int(f * rows / assoc), 1) == sets:
            return f
    return (sets + 0.5) * assoc / rows


def ssd_tbe_answers(
    source: Any,
    systems: Sequence[str],
    sets: Sequence[str],
    resolved: Sequence[Any] = (),
    **kw: Any,
) -> dict[str, Any] | None:
    """`plan_ssd_tbe` for the first `ssd-tbe` system among `systems`; None without one."""
    found = ssd_tbe_system(systems, sets, resolved)
    if found is None:
        return None
    return plan_ssd_tbe(source, found[0], found[1], **kw)


def plan_ssd_tbe(
    source: Any,
    system_name: str,
    spec: Any,
    *,
    rate: float,
    total_rows: int,
    distinct_rows: int,
    min_rows: int,
    full_lookups: float,
    row_bytes: int,
    targets: Sequence[float],
    time_per_batch_s: float,
    budget_bytes: float,
    batch_rows: float,
) -> dict[str, Any]:
    """plan.json's `cache.ssd_tbe`: per hit target the L1 and L2 that reach it, the SSD
    traffic per step and whether the drive keeps up, and TorchRec's settings.
    `batch_rows`: a batch's distinct rows (the run's mean, full stream), the L1's floor."""
    assoc = int(spec.policy.associativity)
    candidates, warm_from = two_level_curves(
        source, total_rows=total_rows, distinct_rows=distinct_rows, associativity=assoc,
        rate=rate, full_lookups=full_lookups, min_rows=min_rows, extra_rows=[batch_rows],
        max_rows=budget_bytes / row_bytes,
    )  # fmt: skip
    batches = max(int(source.num_batches), 1)
    warm_batches = max(batches - warm_from, 1)
    # L2 in host DRAM (the policy's backing tier), the store on the SSD (its store tier)
    l2_tier, ssd = spec.tier(spec.policy.backing_tier), spec.tier(spec.policy.store_tier)
    dram_cap = float(l2_tier.capacity_bytes)
    wa = float(spec.policy.ssd_write_amplification)
    notes: list[str] = [
        f"the SSD store's write amplification is {wa:g} (policy.ssd_write_amplification: "
        "drive bytes per row byte written, RocksDB's compaction); set yours to rescale the "
        "write bandwidth"
    ]
    eligible = [
        c for c in candidates if c.ways * row_bytes <= budget_bytes and c.ways >= batch_rows
    ]
    if candidates and not eligible:
        eligible = [c for c in candidates if c.ways * row_bytes <= budget_bytes] or candidates
        notes.append(
            "no L1 candidate both fits the cache budget and holds a batch's distinct rows "
            f"({batch_rows:,.0f}): the rule takes "
            + ("those within the budget" if eligible != candidates else "every candidate")
        )

    picks = {t: _choose(eligible, t, row_bytes=row_bytes, dram_cap=dram_cap) for t in targets}
    _smallest_alone(picks, candidates, source, **{
        "total_rows": total_rows, "distinct_rows": distinct_rows, "associativity": assoc,
        "rate": rate, "full_lookups": full_lookups, "min_rows": min_rows,
    })  # fmt: skip
    answers: dict[str, dict[str, Any] | None] = {}
    for target, pick in picks.items():
        answers[f"{target:g}"] = None if pick is None else _describe(
            *pick, row_bytes=row_bytes, batches=batches, warm_batches=warm_batches, wa=wa,
            time_per_batch_s=time_per_batch_s, ssd=ssd, total_rows=total_rows, assoc=assoc,
        )  # fmt: skip
    for label, a in answers.items():
        if a is not None and rate < 1.0 and a["l1_rows"] <= assoc / rate and not a["l2_rows"]:
            notes.append(
                f"{label}: an L1 of one set of the miniature ({a['l1_rows']:,} rows at R = "
                f"{rate:g}) reaches it alone, so a smaller one may too (a bound, not a size): "
                "plan with a higher --sample-rate to size it"
            )
    best = max((float(np.max(c.hit)) for c in eligible), default=None)
    if not candidates:
        notes.append("every L1 candidate holds all the rows the run touches: no L1 and L2 to size")
    for label, answer in answers.items():
        if answer is None and best is not None:
            notes.append(
                f"a hit ratio of {format_target(label)} is out of reach over this run: the best L1 "
                f"and L2 within the limits hit {format_percent(best, 4)} (the rows' first lookups "
                "read the SSD)"
            )
    method = (
        "L1 replayed per load factor; L2 by exact stack distances over L1's miss stream"
        if rate >= 1.0
        else f"miniature simulation at R = {rate:g} (L1 replayed, L2 stack distances)"
    )
    return {
        "system": spec.name,
        "associativity": assoc,
        "method": method,
        "hit": "lookups served from L1 or L2 (1 - SSD reads / lookups)",
        "rule": (
            "least HBM first: of the L1 candidates within the cache budget that hold a "
            "batch's distinct rows, the smallest for which an L2 within the host DRAM tier "
            "reaches the target, with the smallest such L2; where that L1 reaches the target "
            "alone, the smallest L1 that does (L1 sizes 5% apart below it, replayed) and no L2"
        ),
        "batch_rows": batch_rows,
        "ssd": {
            "tier": ssd.name,
            "read_bw_bytes_per_s": float(ssd.read_bw_bytes_per_s),
            "write_bw_bytes_per_s": float(ssd.write_bw_bytes_per_s),
            "write_amplification": wa,
        },
        # a row as the ssd-tbe policy holds it in L1 and L2 (values and optimizer state,
        # the engine's row), so `replay run` with these bytes replays these caches
        "row_bytes": row_bytes,
        "l2_capacity_limit_bytes": dram_cap,
        "time_per_batch_s": time_per_batch_s,
        "warm_from_batch": warm_from,
        "targets": answers,
        "candidates": [
            {
                "load_factor": c.load_factor,
                "sets": c.sets,
                "l1_rows": c.ways,
                "l1_bytes": c.ways * row_bytes,
                "l1_hit": c.l1_hit,
                # what L1 exchanges with L2 per step (over the host link), whatever L2's size
                "l2_read_bytes_per_step": c.l2_reads * row_bytes / batches,
                "l2_write_bytes_per_step": c.l2_writes * row_bytes / batches,
                "l2_bytes": [cachelib.bytes_for_rows(r, row_bytes) for r in c.l2_rows],
                "hit": [float(h) for h in c.hit],
                "ssd_read_bytes_per_step": [
                    float(r) * row_bytes / batches for r in c.ssd_read_rows
                ],
                "ssd_write_bytes_per_step": [
                    float(w) * row_bytes * wa / batches for w in c.ssd_write_rows
                ],
            }
            for c in candidates
        ],
        "notes": notes,
    }


GRID_STEPS = 40  # L1 sizes tried below an L1 that reaches a target alone: down to 1/7


def _smallest_alone(
    picks: dict[float, tuple[Candidate, int] | None],
    candidates: Sequence[Candidate],
    source: Any,
    **kw: Any,
) -> None:
    """Where the rule's L1 reaches a target with no L2, a smaller L1 may too: the smallest
    that does among L1 sizes 5% apart below it, down to the largest candidate that does
    not (at most `GRID_STEPS`), all replayed (with no L2) in one read of the source.
    Updates `picks` in place."""
    alone = {t: p for t, p in picks.items() if p is not None and int(p[0].l2_rows[p[1]]) == 0}
    grid: list[float] = []
    for target, (found, _) in alone.items():
        below = [c.ways for c in candidates if c.ways < found.ways and c.hit[0] < target]
        floor = max(max(below, default=0), kw["associativity"])
        rows = found.ways / SIZE_RATIO
        for _ in range(GRID_STEPS):
            if rows <= floor:
                break
            grid.append(rows)
            rows /= SIZE_RATIO
    if not grid:
        return
    finer, _ = two_level_curves(source, load_factors=(), extra_rows=grid, l2_sizes=[0], **kw)
    for target, (found, _) in alone.items():
        reach = [c for c in finer if c.ways < found.ways and c.hit[0] >= target]
        if reach:
            picks[target] = (min(reach, key=lambda c: c.ways), 0)


def _choose(
    candidates: Sequence[Candidate], target: float, *, row_bytes: int, dram_cap: float
) -> tuple[Candidate, int] | None:
    """The rule: the smallest L1 with an L2 within `dram_cap` reaching `target`, and the
    smallest such L2 (its index)."""
    for c in sorted(candidates, key=lambda c: c.ways):
        fits = np.array([cachelib.bytes_for_rows(r, row_bytes) for r in c.l2_rows]) <= dram_cap
        reach = np.nonzero((np.maximum.accumulate(c.hit) >= target) & fits)[0]
        if len(reach):
            return c, int(reach[0])
    return None


def _describe(
    c: Candidate,
    i: int,
    *,
    row_bytes: int,
    batches: int,
    warm_batches: int,
    wa: float,
    time_per_batch_s: float,
    ssd: Any,
    total_rows: int,
    assoc: int,
) -> dict[str, Any]:
    """plan.json's answer for candidate `c` with its `i`-th L2 size."""
    l2_rows = int(c.l2_rows[i])
    per_step = {
        "run": (c.ssd_read_rows[i] / batches, c.ssd_write_rows[i] / batches),
        "warm": (c.warm_read_rows[i] / warm_batches, c.warm_write_rows[i] / warm_batches),
    }
    traffic: dict[str, Any] = {}
    worst = 0.0
    for part, (r_rows, w_rows) in per_step.items():
        rb = float(r_rows) * row_bytes
        wb = float(w_rows) * row_bytes * wa
        r_bw = rb / time_per_batch_s
        w_bw = wb / time_per_batch_s
        util = r_bw / ssd.read_bw_bytes_per_s + w_bw / ssd.write_bw_bytes_per_s
        worst = max(worst, util)
        traffic[part] = {
            "ssd_read_bytes_per_step": rb,
            "ssd_write_bytes_per_step": wb,
            "ssd_read_bytes_per_s": r_bw,
            "ssd_write_bytes_per_s": w_bw,
            "ssd_utilization": util,
        }
    l1_bytes = c.ways * row_bytes
    l2_bytes = cachelib.bytes_for_rows(l2_rows, row_bytes)  # CacheLib's items and slabs
    f = paste_load_factor(c.sets, total_rows, assoc)
    l2_gib = math.ceil(l2_bytes / GIB) if l2_bytes > 0 else 0
    l1_mib = math.ceil(l1_bytes / MIB)
    return {
        "l1_bytes": l1_bytes,
        "l2_bytes": l2_bytes,
        "l1_rows": c.ways,
        "l2_rows": l2_rows,
        "l1_sets": c.sets,
        "l1_load_factor": c.load_factor,
        "hit": float(c.hit[i]),
        "l1_hit": c.l1_hit,
        # L1's reads from L2 and writes to it per step (over the host link)
        "l2_read_bytes_per_step": c.l2_reads * row_bytes / batches,
        "l2_write_bytes_per_step": c.l2_writes * row_bytes / batches,
        **traffic["run"],
        "warm": traffic["warm"],
        "ssd_keeps_up": worst <= 1.0,
        "torchrec": {
            "cache_load_factor": f,
            "key_value_params": {"l2_cache_size": l2_gib, "max_l1_cache_size": l1_mib},
            "paste": (
                f"cache_params=CacheParams(load_factor={f}), key_value_params=KeyValueParams("
                f"l2_cache_size={l2_gib}, max_l1_cache_size={l1_mib})"
            ),
        },
    }


__all__ = [
    "Candidate",
    "paste_load_factor",
    "plan_ssd_tbe",
    "ssd_tbe_answers",
    "ssd_tbe_system",
    "two_level_curves",
]
