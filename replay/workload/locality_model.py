"""Expected within-batch locality statistics of a workload spec, in closed form.

Meta's locality statistics (`replay.workload.locality_stats`) describe one batch: its
lookups, its distinct rows, and two histograms over reuse bins (0, 1], (1, 2], (2, 4],
..., (16384, 32768], (32768, inf): the share of the distinct rows whose count in the
batch falls in each bin, and the share of the lookups that land on such rows. This module
computes their expectations for tables of the generator's access model
(`replay.workload.sampler`: the bounded power law with hot values and a rank offset q,
p(k) ~ (k + q)^-alpha, drawn independently per lookup) without generating anything.

Model and approximations (each checked against generated batches in the tests):

- A table of `rows` ranks looked up L times in a batch (L = batch_size x pooling) draws
  rank k with probability p_k (the power law with hot shares, `replay.workload.spec`), so
  rank k's count is Binomial(L, p_k), taken here as Poisson(lambda_k = L p_k): exact as
  p_k -> 0, and for the few hot ranks (p_k not small) the bin a count falls in is the
  same, the count being far from a bin edge.
- The expected distinct rows are sum_k (1 - exp(-lambda_k)); the expected rows in bin
  (a, b] are sum_k P(a < X_k <= b) and the expected lookups there sum_k E[X_k 1{a < X_k
  <= b}] = sum_k lambda_k P(a <= Y_k <= b - 1), Y_k ~ Poisson(lambda_k) (the size-biased
  Poisson is 1 + Poisson). The shares are ratios of these expectations (a batch of
  millions of distinct rows is within 1e-3 of them).
- Ranks up to HEAD_RANKS are summed one by one; beyond, ranks are grouped in buckets of
  consecutive ranks spanning a factor BUCKET_RATIO, each bucket's mass by the integral of
  x^-alpha over it (the midpoint rule per rank: relative error below 1e-8 beyond rank
  4,096) and all its ranks at the bucket's mean lambda (lambda varies by a factor
  BUCKET_RATIO^alpha inside a bucket, which moves a share by less than 1e-4).
- Drift and reuse are across batches; a single batch (batch 0) has neither, so they are
  not modelled here. Tables are independent, so a workload's statistics are sums of its
  tables' (what lets a batch of fewer tables stand for the whole, scaled).
- Poisson CDFs come from the regularised incomplete gamma function, P(X <= k) =
  Q(k + 1, lambda) (series and Lentz's continued fraction, Numerical Recipes 6.2), with
  counts more than 12 standard deviations from lambda taken as certain.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from replay._jit import kernel

# Meta's reuse bins: (0, 1], (1, 2], (2, 4], ..., (16384, 32768] and (32768, inf)
BIN_EDGES: tuple[int, ...] = (0, 1, *(2**i for i in range(1, 16)))
BINS = len(BIN_EDGES)  # 17: the 16 closed bins and the open last one
HEAD_RANKS = 256
BUCKET_RATIO = 1.005
NORMAL_P = 0.01
NORMAL_VAR = 50.0


@dataclass(frozen=True)
class TableShape:
    """What a table's within-batch statistics depend on."""

    lookups: float  # L, lookups of the table in one batch
    rows: int
    alpha: float
    hot_shares: tuple[float, ...] = ()
    rank_offset: float = 0.0  # q of the Zipf-Mandelbrot law p(k) ~ (k + q)^-alpha


@dataclass(frozen=True)
class BatchStats:
    """A batch's locality statistics (expected or measured)."""

    lookups: float
    distinct: float
    rows_share: np.ndarray  # float64[BINS]
    lookups_share: np.ndarray  # float64[BINS]

    def as_vector(self) -> np.ndarray:
        return np.concatenate([self.rows_share, self.lookups_share])


@kernel(inline="always")
def _gamma_q(a: float, x: float) -> float:
    """The regularised upper incomplete gamma function Q(a, x), a >= 1, x >= 0."""
    if x <= 0.0:
        return 1.0
    sd = math.sqrt(a) + 1.0
    if x < a - 12.0 * sd:
        return 1.0
    if x > a + 12.0 * sd:
        return 0.0
    log_pre = -x + a * math.log(x) - math.lgamma(a)
    if x < a + 1.0:  # series for P
        ap = a
        term = 1.0 / a
        total = term
        for _ in range(100000):
            ap += 1.0
            term *= x / ap
            total += term
            if term < total * 1e-15:
                break
        return 1.0 - total * math.exp(log_pre)
    tiny = 1e-300  # continued fraction for Q (modified Lentz)
    b = x + 1.0 - a
    c = 1.0 / tiny
    d = 1.0 / b
    h = d
    for i in range(1, 100000):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        if abs(d) < tiny:
            d = tiny
        c = b + an / c
        if abs(c) < tiny:
            c = tiny
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return math.exp(log_pre) * h


@kernel(inline="always")
def poisson_cdf(k: np.int64, lam: float) -> float:
    """P(X <= k) for X ~ Poisson(lam)."""
    if k < 0:
        return 0.0
    if lam <= 0.0:
        return 1.0
    return _gamma_q(k + 1.0, lam)


@kernel(inline="always")
def count_cdf(k: np.int64, mean: float, q: float) -> float:
    """P(X <= k) for a rank's count X of mean `mean` = L p, q = 1 - p: Poisson, or for a
    hot rank (p > NORMAL_P, variance above NORMAL_VAR) the binomial's normal limit with
    continuity correction and variance L p q (a Poisson count of a rank drawn a quarter
    of the time would be 15% too spread, which moves a count across a bin edge)."""
    if k < 0:
        return 0.0
    if q < 1.0 - NORMAL_P and mean * q > NORMAL_VAR:
        z = (k + 0.5 - mean) / math.sqrt(mean * q)
        return 0.5 * math.erfc(-z / math.sqrt(2.0))
    return poisson_cdf(k, mean)


@kernel
def poisson_bins(
    lam: np.ndarray, q: np.ndarray, weight: np.ndarray, edges: np.ndarray
) -> tuple[np.ndarray, np.ndarray, float, float]:
    """Expected (rows per bin, lookups per bin, distinct rows, lookups) of `weight[i]`
    ranks of mean count `lam[i]` each (probability 1 - q[i] per lookup, `count_cdf`);
    bins (edges[j], edges[j + 1]], the last open. The lookups on a bin's rows use the
    size-biased count X* = 1 + Binomial(L - 1, p): mean L p - p, variance (L - 1) p q."""
    nb = len(edges)
    rows = np.zeros(nb)
    looks = np.zeros(nb)
    distinct = 0.0
    total = 0.0
    f_at = np.empty(nb)  # P(X <= edges[j])
    f_below = np.empty(nb)  # P(X <= edges[j] - 1)
    for i in range(len(lam)):
        m = lam[i]
        w = weight[i]
        if w == 0.0 or m <= 0.0:
            continue
        qi = q[i]
        ms = m - (1.0 - qi)  # the size-biased count's mean, less the 1
        for j in range(nb):
            f_at[j] = count_cdf(np.int64(edges[j]), m, qi)
            f_below[j] = count_cdf(np.int64(edges[j]) - 1, ms, qi)
        for j in range(nb):
            hi_at = f_at[j + 1] if j + 1 < nb else 1.0
            hi_below = f_below[j + 1] if j + 1 < nb else 1.0
            rows[j] += w * (hi_at - f_at[j])
            looks[j] += w * m * (hi_below - f_below[j])
        distinct += w * -math.expm1(-m)
        total += w * m
    return rows, looks, distinct, total


def rank_rates(
    shape: TableShape, bucket_ratio: float = BUCKET_RATIO
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lambda, 1 - p, ranks at it): the table's ranks grouped as the module docstring
    says (a coarser `bucket_ratio` is a faster, rougher sum: a fit's search)."""
    rows, alpha, hot = int(shape.rows), float(shape.alpha), shape.hot_shares
    q = float(shape.rank_offset)
    head = min(rows, HEAD_RANKS)
    k = np.arange(1, head + 1, dtype=np.float64) + q
    head_w = k**-alpha
    # the tail's buckets: [lo, hi) of ranks, geometric
    if rows > head:
        n_b = max(1, math.ceil(math.log(rows / head) / math.log(bucket_ratio)))
        edges = np.unique(np.round(head * bucket_ratio ** np.arange(n_b + 1)).astype(np.int64))
        edges = edges[edges > head]
        edges = np.concatenate([[head + 1], edges[edges <= rows], [rows + 1]])
        edges = np.unique(edges)
        lo, hi = edges[:-1].astype(np.float64), edges[1:].astype(np.float64)
        count = hi - lo
        a, b = lo - 0.5 + q, hi - 0.5 + q
        if abs(alpha - 1.0) < 1e-12:
            mass = np.log(b / a)
        else:
            mass = (b ** (1.0 - alpha) - a ** (1.0 - alpha)) / (1.0 - alpha)
    else:
        count = np.zeros(0)
        mass = np.zeros(0)
    j = len(hot)
    rest = math.fsum(head_w[j:].tolist()) + math.fsum(mass.tolist())
    scale = (1.0 - math.fsum(hot)) / rest
    p_head = head_w * scale
    if j:
        p_head[:j] = hot
    lam = np.concatenate(
        [p_head * shape.lookups, mass * scale * shape.lookups / np.maximum(count, 1)]
    )
    weight = np.concatenate([np.ones(head), count])
    not_p = np.concatenate([1.0 - p_head, np.ones(len(count))])
    return lam, not_p, weight


def table_counts(
    shape: TableShape, bucket_ratio: float = BUCKET_RATIO
) -> tuple[np.ndarray, np.ndarray, float, float]:
    """(rows per bin, lookups per bin, distinct, lookups) of one table `shape`."""
    lam, q, weight = rank_rates(shape, bucket_ratio)
    return poisson_bins(lam, q, weight, np.asarray(BIN_EDGES, dtype=np.int64))


def expected_counts(
    shapes: Sequence[TableShape], multiplicity: Sequence[float] | None = None
) -> tuple[np.ndarray, np.ndarray, float, float]:
    """Summed (rows per bin, lookups per bin, distinct, lookups) of tables `shapes`, each
    counted `multiplicity[i]` times (1 by default)."""
    edges = np.asarray(BIN_EDGES, dtype=np.int64)
    rows = np.zeros(BINS)
    looks = np.zeros(BINS)
    distinct = total = 0.0
    for i, shape in enumerate(shapes):
        m = 1.0 if multiplicity is None else float(multiplicity[i])
        lam, q, weight = rank_rates(shape)
        r, lk, d, t = poisson_bins(lam, q, weight, edges)
        rows += m * r
        looks += m * lk
        distinct += m * d
        total += m * t
    return rows, looks, distinct, total


def expected_stats(
    shapes: Sequence[TableShape], multiplicity: Sequence[float] | None = None
) -> BatchStats:
    """The expected statistics of one batch of tables `shapes` (see `expected_counts`)."""
    rows, looks, distinct, total = expected_counts(shapes, multiplicity)
    return BatchStats(total, distinct, rows / distinct, looks / total)


def measured_stats(counts: np.ndarray) -> BatchStats:
    """The statistics of one batch from the counts of its distinct rows (all > 0)."""
    counts = np.asarray(counts, dtype=np.int64)
    counts = counts[counts > 0]
    edges = np.asarray(BIN_EDGES, dtype=np.int64)
    # bin j holds counts in (edges[j], edges[j + 1]]: searchsorted(edges, c, 'left') - 1
    which = np.searchsorted(edges, counts, side="left") - 1
    rows = np.bincount(which, minlength=BINS).astype(np.float64)
    looks = np.bincount(which, weights=counts.astype(np.float64), minlength=BINS)
    total, distinct = float(counts.sum()), float(len(counts))
    return BatchStats(total, distinct, rows / max(distinct, 1.0), looks / max(total, 1.0))
