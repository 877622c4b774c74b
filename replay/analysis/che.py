"""Che's approximation: the LRU hit ratio of a workload spec, analytically (issue 25).

Model (Che, Tung, Wang, "Hierarchical Web caching systems: modeling, design and
experimental results", IEEE JSAC 20(7), 2002; Fricker, Robert, Roberts, "A versatile and
accurate approximation for LRU cache performance", ITC 2012). Under the independent
reference model (each request is key i with probability p_i, independently), an LRU cache
of C keys behaves as if each key stayed for a fixed characteristic time t_C after its last
request, t_C (in requests) solving

    sum_i (1 - exp(-p_i t_C)) = C,       hit(C) = sum_i p_i (1 - exp(-p_i t_C)).

A workload spec (`replay.workload.spec`) draws table t's lookups from the bounded power
law p_t(k) = k^-alpha / Z_t over ranks 1..rows_t (`replay.workload.sampler`; with a
`rank_offset` q, (k + q)^-alpha / Z_t), n_t =
batch_size x pooling_t of the n lookups of a batch, so rank k of table t is requested with
probability (n_t / n) p_t(k). A table with hot values (`hot_shares` s_1..s_j,
`replay.workload.spec`) has p_t(k) = s_k for k <= j and (1 - sum s) k^-alpha / R_t
above, R_t = Z_t less the hot ranks' k^-alpha: each hot rank, always a head rank summed
on its own, gets its share, and the other ranks the power law's probabilities scaled
to 1 - sum s; the bucketing below and its error bound are unchanged (the buckets hold
ranks above the head).
Within a batch the tables come in a fixed order, in runs of
n_t lookups, not at random, so caches smaller than a batch's lookups see more hits than the
model (measured: up to 0.07 in miss ratio below one batch of 512 lookups, 2 tables of
2,000 and 20,000 rows, alpha 1; within 0.01 above it: tests/test_horizon.py).

Steady state: the curve is the hit ratio of a warm cache. Over a finite horizon the exact
curve (`replay.analysis.mrc`) also counts cold misses, about distinct rows / lookups of the
run, so it lies above this one by up to that much (all of it at sizes near the distinct
rows, where Che's miss ratio goes to 0 while the exact one stays at the cold misses).
`finite_horizon_hits` gives the curve of a run of N lookups from an empty cache, cold
misses included (what `replay plan` shows beside the measured curve).

Refused (ConfigError): tables with reuse > 0 (repeats of recent lookups) or drift > 0 (a
popularity ranking that moves): their references are not independent with fixed p_i.

Sums without materializing the keys (tables reach 40 M rows, 882 M for criteo-terabyte):
the head ranks 1..H are summed exactly; ranks above H are grouped in buckets [a, e] with
(e / a)^alpha <= 1 + tolerance, each summed as (e - a + 1) keys of the bucket's mean
probability (its exact sum of k^-alpha by Euler-Maclaurin, over the count). H is where a
bucket starts holding at least two ranks, about alpha / tolerance. Error bound: inside a
bucket p varies by a factor r <= 1 + tolerance; 1 - e^-x and x (1 - e^-x) are increasing
with (1 - e^-x)/x decreasing, so, at a given t, every bucket's occupancy and hit share
are within a relative r - 1 of the exact sums; solving for t_C from the bucketed occupancy
moves C by at most that relative amount, and hit(C) is concave with hit(0) = 0, so
hit'(C) <= hit(C) / C: the bucketed hit ratio is within 2 x tolerance (relative) of the
full sum, to first order in the tolerance. The error is of second order in fact (the
bucket mean matches the first moment exactly): measured below 1e-6 relative at the
default tolerance 1e-3 on tables of 1e5-1e6 rows (tests/test_horizon.py).

Solver: f(t) = sum m_j (1 - e^-p_j t) (m_j keys of probability p_j) rises from 0 to the
keys in all, f(t) <= t, so t_C >= C; in u = log t the bracket [log C, hi] is widened by
doubling steps until f(e^hi) >= C, then safeguarded Newton (bisection whenever a step
leaves the bracket), warm-started from the previous size, to |f - C| <= 1e-12 C.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from replay._jit import kernel
from replay.errors import ConfigError
from replay.workload.spec import WorkloadSpec

DEFAULT_TOLERANCE = 1e-3  # largest p ratio inside a tail bucket, minus 1
MIN_HEAD = 64  # ranks always summed one by one
_REL = 1e-12  # solver: |f(t) - C| <= _REL C


@dataclass(frozen=True, eq=False)
class Popularity:
    """Keys grouped by probability: `counts[j]` keys of probability `probabilities[j]`."""

    counts: np.ndarray  # float64
    probabilities: np.ndarray  # float64 per key; sum(counts * probabilities) = 1
    max_ratio: float  # largest p_max / p_min inside a group (1.0: every key exact)
    rows: int  # keys in all


def _bucket_sums(a: np.ndarray, e: np.ndarray, alpha: float, q: float = 0.0) -> np.ndarray:
    """sum_{k=a}^{e} (k + q)^-alpha by Euler-Maclaurin to the third derivative (a >=
    MIN_HEAD: the first dropped term is below 1e-12 of the sum)."""
    af, ef = a.astype(np.float64) + q, e.astype(np.float64) + q
    log_ratio = np.log(ef / af)
    y = (1.0 - alpha) * log_ratio
    small = np.abs(y) < 1e-8
    helper = np.where(
        small, 1.0 + y / 2.0, np.expm1(np.where(small, 1.0, y)) / np.where(small, 1.0, y)
    )
    integral = af ** (1.0 - alpha) * log_ratio * helper  # integral of x^-alpha over [a, e]

    def d1(x: np.ndarray) -> np.ndarray:
        return -alpha * x ** (-alpha - 1.0)

    def d3(x: np.ndarray) -> np.ndarray:
        return -alpha * (alpha + 1.0) * (alpha + 2.0) * x ** (-alpha - 3.0)

    sums = (
        integral
        + (af**-alpha + ef**-alpha) / 2.0
        + (d1(ef) - d1(af)) / 12.0
        - (d3(ef) - d3(af)) / 720.0
    )
    return np.where(a == e, af**-alpha, sums)


@kernel
def _tail_buckets(
    rows: int, head: int, growth: float, alpha: float, tolerance: float
) -> tuple[np.ndarray, np.ndarray]:
    """The tail's buckets [a, e] after the head: each as long as growth allows, cut back
    while its ratio (e / a)^alpha passes 1 + tolerance (a floating-point guard). Compiled:
    meta-2021's 856 tables hold ~7,000 buckets each, a Python loop of 6 M steps."""
    starts = np.empty(64, dtype=np.int64)
    ends = np.empty(64, dtype=np.int64)
    n = 0
    a = head + 1
    while a <= rows:
        e = min(rows, max(a, math.floor(a * growth)))
        while e > a and (e / a) ** alpha > 1.0 + tolerance:
            e -= 1
        if n == len(starts):
            more = np.empty(2 * n, dtype=np.int64)
            more[:n] = starts
            starts = more
            more = np.empty(2 * n, dtype=np.int64)
            more[:n] = ends
            ends = more
        starts[n] = a
        ends[n] = e
        n += 1
        a = e + 1
    return starts[:n].copy(), ends[:n].copy()


def table_popularity(
    rows: int,
    alpha: float,
    weight: float = 1.0,
    tolerance: float = DEFAULT_TOLERANCE,
    *,
    hot_shares: Sequence[float] = (),
    rank_offset: float = 0.0,
) -> Popularity:
    """One table's ranks: the head one by one, the tail in buckets (module docstring);
    probabilities scaled to sum to `weight` (the table's share of the lookups), ranks
    1..j with the hot values' shares `hot_shares` of it; rank k weighs (k + q)^-alpha,
    q = `rank_offset` (a bucket's ratio ((e + q) / (a + q))^alpha is at most (e / a)^alpha,
    so the buckets and the bound are the plain law's)."""
    q = float(rank_offset)
    rows = int(rows)
    if rows < 1:
        raise ConfigError("rows must be >= 1")
    if not tolerance > 0.0:
        raise ConfigError("tolerance must be > 0")
    hot = np.array(hot_shares, dtype=np.float64)
    if (hot < 0.0).any() or hot.sum() >= 1.0 or (len(hot) and len(hot) >= rows):
        raise ConfigError("hot_shares must be >= 0, sum below 1 and be fewer than the rows")
    total = math.fsum(hot.tolist())
    if alpha == 0.0 and (not len(hot) or rows == 1):
        return Popularity(np.array([float(rows)]), np.array([weight / rows]), 1.0, rows)
    if alpha == 0.0:  # the hot rows one by one, then the other rows, all equally likely
        flat_counts = [1.0] * len(hot) + [float(rows - len(hot))]
        flat_probs = [*(hot * weight).tolist(), (1.0 - total) * weight / (rows - len(hot))]
        return Popularity(np.array(flat_counts), np.array(flat_probs), 1.0, rows)
    growth = (1.0 + tolerance) ** (1.0 / alpha)
    head = min(rows, max(MIN_HEAD, math.ceil(1.0 / (growth - 1.0)) + 1))
    head_w = (np.arange(1, head + 1, dtype=np.float64) + q) ** -alpha
    lo, hi = _tail_buckets(rows, head, growth, float(alpha), float(tolerance))
    tail = _bucket_sums(lo, hi, float(alpha), q) if len(lo) else np.zeros(0)
    norm = math.fsum(head_w.tolist()) + math.fsum(tail.tolist())
    counts = np.concatenate([np.ones(head), (hi - lo + 1).astype(np.float64)])
    if len(hot):  # the hot ranks (head ranks, each on its own) take their shares
        norm = math.fsum(head_w[len(hot) :].tolist()) + math.fsum(tail.tolist())
        probs = np.concatenate([head_w, tail / (hi - lo + 1)]) * ((1.0 - total) * weight / norm)
        probs[: len(hot)] = hot * weight
    else:
        probs = np.concatenate([head_w, tail / (hi - lo + 1)]) * (weight / norm)
    ratio = float((((hi + q) / (lo + q)).astype(np.float64) ** alpha).max()) if len(lo) else 1.0
    return Popularity(counts, probs, ratio, rows)


def check_independent(spec: WorkloadSpec) -> None:
    """ConfigError when a table's references are not independent (reuse or drift)."""
    for i, t in enumerate(spec.tables):
        where = f"{spec.name}: tables[{i}] ({t.name})"
        if t.reuse > 0.0:
            raise ConfigError(
                f"{where}: reuse = {t.reuse:g}: Che's approximation assumes independent "
                "references with fixed probabilities, and reuse repeats recent lookups; "
                "use the exact curve (replay mrc) or reuse = 0"
            )
        if t.drift > 0.0:
            raise ConfigError(
                f"{where}: drift = {t.drift:g}: Che's approximation assumes fixed "
                "probabilities, and drift moves the popularity ranking over time; use the "
                "exact curve (replay mrc) or drift = 0"
            )


def spec_popularity(spec: WorkloadSpec, tolerance: float = DEFAULT_TOLERANCE) -> Popularity:
    """Every table's ranks, weighted by its share n_t / n of the lookups (pooling)."""
    check_independent(spec)
    pooling = sum(t.pooling for t in spec.tables)
    # alike tables (meta-2021's 856 are 4 kinds) have the same ranks and probabilities:
    # one part each, its key counts times how many there are (the sums are the same)
    kinds = Counter(
        (t.rows, float(t.alpha), t.pooling, tuple(t.hot_shares), float(t.rank_offset))
        for t in spec.tables
    )
    parts = []
    for (rows, alpha, pool, hot, q), many in kinds.items():
        part = table_popularity(
            rows, alpha, pool / pooling, tolerance, hot_shares=hot, rank_offset=q
        )
        parts.append((part, many))
    return Popularity(
        np.concatenate([p.counts * many for p, many in parts]),
        np.concatenate([p.probabilities for p, _ in parts]),
        max(p.max_ratio for p, _ in parts),
        sum(p.rows * many for p, many in parts),
    )


# key groups x sizes that one `_che_solve` call takes at most (~0.3 s)
SOLVE_CALL_WORK = 1 << 21


@kernel
def _occupancy(counts: np.ndarray, probs: np.ndarray, t: float) -> tuple[float, float, float]:
    """(f(t), t f'(t), hit(t)): expected keys in cache, its derivative in log t, hits."""
    f = 0.0
    df = 0.0
    hit = 0.0
    for j in range(len(counts)):
        x = probs[j] * t
        stay = -math.expm1(-x)
        f += counts[j] * stay
        df += counts[j] * x * math.exp(-x)
        hit += counts[j] * probs[j] * stay
    return f, df, hit


@kernel
def _che_solve(
    counts: np.ndarray,
    probs: np.ndarray,
    sizes: np.ndarray,
    times: np.ndarray,
    hits: np.ndarray,
    u_prev: float,
) -> float:
    """t_C and hit(C) for each size (module docstring: bracketing + safeguarded Newton),
    warm-started from `u_prev` (log t of the previous size; -1.0: none); returns the last
    size's, the warm start of the next call."""
    keys = 0.0
    mass = 0.0
    for j in range(len(counts)):
        keys += counts[j]
        mass += counts[j] * probs[j]
    for i in range(len(sizes)):
        c = sizes[i]
        if c <= 0.0:
            times[i] = 0.0
            hits[i] = 0.0
            continue
        if c >= keys:
            times[i] = np.inf
            hits[i] = mass
            continue
        lo = math.log(c)  # f(t) <= t: f(C) <= C
        step = 1.0
        hi = lo + step
        while _occupancy(counts, probs, math.exp(hi))[0] < c:
            lo = hi
            step *= 2.0
            hi = lo + step
        u = u_prev if lo < u_prev < hi else 0.5 * (lo + hi)
        hit = 0.0
        for _ in range(200):
            f, df, hit = _occupancy(counts, probs, math.exp(u))
            if abs(f - c) <= _REL * c:
                break
            if f < c:
                lo = u
            else:
                hi = u
            nxt = u - (f - c) / df if df > 0.0 else 0.5 * (lo + hi)
            if not lo < nxt < hi:
                nxt = 0.5 * (lo + hi)
            if nxt == u:
                break
            u = nxt
        u_prev = u
        times[i] = math.exp(u)
        hits[i] = hit
    return u_prev


def che_hit_ratios(
    counts: np.ndarray, probabilities: np.ndarray, sizes_rows: np.ndarray | Sequence[float]
) -> tuple[np.ndarray, np.ndarray]:
    """(hit ratios, characteristic times t_C in requests) for keys grouped as `counts`
    keys of probability `probabilities` (sum of counts x probabilities = 1)."""
    sizes = np.asarray(sizes_rows, dtype=np.float64).ravel()
    if not np.all(np.isfinite(sizes)) or np.any(sizes < 0):
        raise ConfigError("sizes: cache sizes must be finite numbers of rows >= 0")
    order = np.argsort(sizes, kind="stable")  # increasing: warm starts
    times = np.empty(len(sizes))
    hits = np.empty(len(sizes))
    counts = np.ascontiguousarray(counts, dtype=np.float64)
    probabilities = np.ascontiguousarray(probabilities, dtype=np.float64)
    ordered = np.ascontiguousarray(sizes[order])
    # in calls of ~0.3 s, the warm start carried from one to the next (the same numbers
    # as one call): a signal's handler runs between kernel calls only, and 186 sizes of
    # criteo-terabyte's 109 K key groups are 3 s (2-core VM)
    step = max(1, SOLVE_CALL_WORK // max(len(counts), 1))
    u = -1.0
    for lo in range(0, len(ordered), step):
        hi = lo + step
        u = _che_solve(counts, probabilities, ordered[lo:hi], times[lo:hi], hits[lo:hi], u)
    out_hits = np.empty(len(sizes))
    out_times = np.empty(len(sizes))
    out_hits[order] = np.clip(hits, 0.0, 1.0)
    out_times[order] = times
    return out_hits, out_times


def che_lru_curve(
    spec: WorkloadSpec,
    sizes_rows: np.ndarray | Sequence[float],
    *,
    tolerance: float = DEFAULT_TOLERANCE,
) -> np.ndarray:
    """Steady-state LRU hit ratios (float64) of a spec's lookup stream for caches of
    `sizes_rows` rows shared by all tables, by Che's approximation (module docstring:
    no cold misses; ConfigError for reuse or drift). Miss ratios: `che_miss_ratios`."""
    pop = spec_popularity(spec, tolerance)
    return che_hit_ratios(pop.counts, pop.probabilities, sizes_rows)[0]


def che_miss_ratios(
    spec: WorkloadSpec,
    sizes_rows: np.ndarray | Sequence[float],
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    horizon_lookups: float | None = None,
) -> np.ndarray:
    """1 - `che_lru_curve`: steady-state miss ratios (no cold misses); with
    `horizon_lookups` = N, the miss ratios of a run of N lookups that starts with an
    empty cache (`finite_horizon_hits`: cold misses included)."""
    if horizon_lookups is None:
        return 1.0 - che_lru_curve(spec, sizes_rows, tolerance=tolerance)
    pop = spec_popularity(spec, tolerance)
    _, times = che_hit_ratios(pop.counts, pop.probabilities, sizes_rows)
    hits = finite_horizon_hits(pop.counts, pop.probabilities, times, float(horizon_lookups))
    return 1.0 - hits


def finite_horizon_hits(
    counts: np.ndarray, probabilities: np.ndarray, times: np.ndarray, horizon: float
) -> np.ndarray:
    """Che's hit ratios over a run of N = `horizon` requests from an empty cache.

    A request at position n of key i hits when key i was requested within the last
    min(t_C, n) requests: probability 1 - exp(-p_i min(t_C, n)) (the same characteristic
    time t_C, `times`; Che's argument needs only that the cache holds a key for t_C after
    its last request, and before n = t_C the cache is not yet full, so it holds every key
    requested so far). Averaged over n uniform on [0, N]:

        miss_i = [(1 - e^{-p t}) / p + (N - t) e^{-p t}] / N   for t <= N,
        miss_i = (1 - e^{-p N}) / (p N)                         for t > N,

    and hit = sum_i p_i (1 - miss_i). For a cache larger than the keys the run requests
    the miss ratio is sum_i (1 - e^{-p_i N}) / N, the expected distinct keys over N: the
    cold misses. As N grows the curve tends to the steady state (`che_hit_ratios`)."""
    p = np.asarray(probabilities, dtype=np.float64)
    m = np.asarray(counts, dtype=np.float64)
    n = float(horizon)
    if not n > 0:
        raise ConfigError("horizon_lookups: must be > 0")
    out = np.empty(len(times))
    for j, t in enumerate(np.asarray(times, dtype=np.float64)):
        t = min(float(t), n)
        first = -np.expm1(-p * t) / p  # (1 - e^{-p t}) / p, stable for small p t
        miss = (first + (n - t) * np.exp(-p * t)) / n
        out[j] = float(np.sum(m * p * (1.0 - miss)))
    return np.clip(out, 0.0, 1.0)


def reference_che(probabilities: np.ndarray, sizes_rows: Sequence[float]) -> np.ndarray:
    """Hit ratios by the full sum over every key and plain bisection on log t (100 steps):
    the slow, obviously correct version (each key's probability given)."""
    p = np.asarray(probabilities, dtype=np.float64)
    out = []
    for c in sizes_rows:
        if c <= 0:
            out.append(0.0)
            continue
        if c >= len(p):
            out.append(float(p.sum()))
            continue
        lo, hi = math.log(c), math.log(c) + 1.0
        while np.sum(-np.expm1(-p * math.exp(hi))) < c:
            lo, hi = hi, hi + 2.0 * (hi - lo)
        for _ in range(100):
            mid = 0.5 * (lo + hi)
            if np.sum(-np.expm1(-p * math.exp(mid))) < c:
                lo = mid
            else:
                hi = mid
        t = math.exp(0.5 * (lo + hi))
        out.append(float(np.sum(p * -np.expm1(-p * t))))
    return np.array(out)


__all__ = [
    "DEFAULT_TOLERANCE",
    "Popularity",
    "che_hit_ratios",
    "che_lru_curve",
    "che_miss_ratios",
    "check_independent",
    "reference_che",
    "spec_popularity",
    "table_popularity",
]
