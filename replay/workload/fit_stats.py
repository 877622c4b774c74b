"""The statistics `replay fit` matches, and the bounded power law's estimators.

One kernel (`_table_stats`) computes the statistics, the same for the trace and for every
synthetic trace the fit simulates: whatever bias a statistic has, it has on both sides.
`replay fit --check` measures its sample and its synthetic traces with it too. Per table,
`table_statistics` returns (`STATISTICS` names them, in order):

- the mean log-rank within windows of about `WINDOW_LOOKUPS` lookups (one batch at
  Criteo batch sizes): the MLE's sufficient statistic, and blind to drift since the
  ranking moves between batches only;
- the consecutive-batch reuse |U_n ∩ U_n-1| / |U_n|, averaged over batches (as
  `replay inspect` defines it);
- the rows touched by the whole sample, in log: drift's strongest handle (a fifth
  off in drift is a tenth off in rows touched, ten times their noise, on a table
  whose hot rows drift);
- the rows-touched curve, as the mean of log(rows touched by batches 0..x-1) over
  `CURVE_POINTS` log-spaced x (its early points weigh most: rows touched by a few
  batches);
- the lookup-weighted overlaps with batch n - L for L in `LAGS`: reuse raises lag 1
  most, drift lowers the long lags, which tells them apart (with the touched curve
  alone they trade off along a ridge).

The bounded power law, p(k) ~ k^-alpha over ranks k in [1, rows]:

- `mean_log_rank`: E[log k] and Var[log k], exact sums over the first 2^16 ranks and a
  Simpson integral in log space beyond.
- `power_law_mle` (the fit's **alpha_mle**): the maximum-likelihood exponent fitted to
  the observed frequencies ranked in decreasing order. Setting the derivative of the
  log-likelihood -alpha sum_i c_i log i - n log H(rows, alpha) to 0 gives
  E_alpha[log k] = (1/n) sum_i c_i log i: the MLE matches the mean log-rank (found by
  bisection), with standard error 1 / sqrt(n Var_alpha[log k]). It is the classic
  estimator, and it is biased whenever rows are seen only a few times (the empirical
  ranks of the tail are not the true ranks), when lookups repeat (reuse) and when the
  ranking moves (drift).
- The hot value (`hot_share` h: p(k) = h [k == 1] + (1 - h) k^-alpha / H(rows, alpha),
  `replay.workload.spec`). `hot_value_test` decides whether the most frequent row
  stands out from the power law, before the exponent is fitted:

  1. Given that a lookup is not on rank 1, its rank has the law k^-alpha over [2, rows]
     whatever h is, so the exponent of the rest is estimated from the other rows alone:
     `power_law_mle(counts, rows, first=2)` drops the top count and matches the mean
     log-rank over ranks 2, 3, ... (the same conditional MLE as above, on [2, rows]).
  2. The top row's count c_1 of n is Binomial(n, pi), pi = h + (1 - h) q with
     q = 1 / H(rows, alpha) rank 1's share under the power law alone. The likelihood
     factorises into pi^c_1 (1 - pi)^(n - c_1) and the rest's conditional law, so
     where the observed share c_1 / n is above q(alpha_rest) the mixture's MLE is
     pi^ = c_1 / n (the observed share) and alpha^ = alpha_rest, h^ = (pi^ - q) / (1 - q);
     where it is not, the MLE is on h = 0 (the plain power law): no hot value.
  3. H0: h = 0 (the plain power law over all ranks, its exponent re-fitted to all rows:
     `power_law_mle(counts, rows)`) against H1: h >= 0, by the likelihood ratio of the
     nested models, LR = 2 [max l_H1 - max l_H0] with the multinomial log-likelihoods
     over the ranked counts. h = 0 is on the boundary of the parameter space, so under
     H0 LR follows 1/2 chi2_0 + 1/2 chi2_1 asymptotically (Chernoff, Ann. Math. Stat.
     25, 1954; Self & Liang, JASA 82, 1987): at level `HOT_LEVEL` = 0.001 the top row
     stands out when LR exceeds the chi-square(1) upper 0.002 point, `HOT_CRITICAL`
     = 9.55. The level is strict because the ranking is empirical (the top row of a
     sample is the likeliest rank 1, not surely it) and a sparse tail's ranks are not
     its true ranks: a hot value is added only on strong evidence.

  Tables of fewer than 3 rows, or whose other rows are all one row, have no rest to
  fit an exponent to: no hot value (a power law over 2 ranks already fits any share).
  `hot_share_for` turns the observed top share back into h for any exponent, so the
  fit can move alpha while the fitted rank 1 keeps the observed share.
- `chao1` (the rows of `--rows extrapolate`): Chao's bias-corrected species estimator
  D + F1 (F1 - 1) / (2 (F2 + 1)) (Chao 1984; D = rows touched, F1, F2 = rows seen once,
  twice).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from replay._jit import kernel
from replay.workload.sampler import power_law_sum

WINDOW_LOOKUPS = 128
CURVE_POINTS = 16
LAGS = (1, 2, 8, 32)
STATISTICS = (
    "mean_log_rank", "consecutive_reuse", "touched_log_final", "touched_log_mean",
    *(f"lookup_overlap_lag{lag}" for lag in LAGS),
)  # fmt: skip


# -- statistics (the same kernel for the trace and every simulation) -------------------


@kernel
def _table_stats(
    batch: np.ndarray,
    ids: np.ndarray,
    num_ids: int,
    num_batches: int,
    curve_x: np.ndarray,
    window_batches: int,
    lags: np.ndarray,
) -> tuple[float, float, float, np.ndarray, np.ndarray]:
    """(mean log-rank in windows, consecutive reuse mean, distinct/batch mean, touched
    rows at each curve_x, and for each lag L the share of batch n's lookups whose row
    batch n - L looked up, averaged over n >= L) of one table's lookups: `batch`
    sorted, `ids` in [0, num_ids)."""
    n = len(ids)
    starts = np.searchsorted(batch, np.arange(num_batches + 1))
    stamps = np.full((len(lags), num_ids), -1, dtype=np.int64)
    lag_sum = np.zeros(len(lags))
    lag_n = np.zeros(len(lags), dtype=np.int64)
    lag_hits = np.zeros(len(lags), dtype=np.int64)
    last = np.full(num_ids, -1, dtype=np.int64)
    wcount = np.zeros(num_ids, dtype=np.int64)
    wlist = np.empty(min(n, num_ids), dtype=np.int64)
    curve_val = np.zeros(len(curve_x), dtype=np.int64)
    wn = 0
    logrank_sum = 0.0
    logrank_n = 0
    reuse_sum = 0.0
    reuse_n = 0
    dpb_sum = 0.0
    dpb_n = 0
    touched = 0
    cpos = 0
    i = 0
    for b in range(num_batches):
        for q in range(len(lags)):  # stamp the rows of batch b - L
            if b >= lags[q]:
                for j in range(starts[b - lags[q]], starts[b - lags[q] + 1]):
                    stamps[q, ids[j]] = b
            lag_hits[q] = 0
        start = i
        dist = 0
        rep = 0
        while i < n and batch[i] == b:
            x = ids[i]
            seen = last[x]
            if seen != b:
                dist += 1
                if seen == -1:
                    touched += 1
                elif seen == b - 1:
                    rep += 1
                last[x] = b
            for q in range(len(lags)):  # lookup-weighted: hot rows count as they weigh
                if stamps[q, x] == b:
                    lag_hits[q] += 1
            if wcount[x] == 0:
                wlist[wn] = x
                wn += 1
            wcount[x] += 1
            i += 1
        looked = i - start
        if looked > 0:
            dpb_sum += dist / looked
            dpb_n += 1
            if b >= 1:
                reuse_sum += rep / dist
                reuse_n += 1
            for q in range(len(lags)):
                if b >= lags[q]:
                    lag_sum[q] += lag_hits[q] / looked
                    lag_n[q] += 1
        while cpos < len(curve_x) and curve_x[cpos] <= b + 1:
            curve_val[cpos] = touched
            cpos += 1
        if (b + 1) % window_batches == 0 or b == num_batches - 1:
            counts = np.empty(wn, dtype=np.int64)
            for j in range(wn):
                counts[j] = wcount[wlist[j]]
                wcount[wlist[j]] = 0
            counts.sort()
            for j in range(wn):  # rank 1 is the largest count
                c = counts[wn - 1 - j]
                logrank_sum += c * math.log(j + 1.0)
                logrank_n += c
            wn = 0
    mean_logrank = logrank_sum / logrank_n if logrank_n else 0.0
    reuse = reuse_sum / reuse_n if reuse_n else 0.0
    dpb = dpb_sum / dpb_n if dpb_n else 0.0
    lag_mean = np.zeros(len(lags))
    for q in range(len(lags)):
        if lag_n[q]:
            lag_mean[q] = lag_sum[q] / lag_n[q]
    return mean_logrank, reuse, dpb, curve_val, lag_mean


def table_statistics(
    batch: np.ndarray, row: np.ndarray, rows: int, num_batches: int, window_batches: int
) -> np.ndarray:
    """The matched statistics of one table (`STATISTICS` names them)."""
    batch = np.ascontiguousarray(batch, dtype=np.int64)
    if rows <= max(4 * len(row), 1 << 22) and (not len(row) or int(row.max()) < rows):
        ids, num_ids = np.ascontiguousarray(row, dtype=np.int64), int(rows)
    else:  # a huge sparse table (or rows fitted below the ids seen): dense ids
        uniq, inverse = np.unique(row, return_inverse=True)
        ids, num_ids = inverse.astype(np.int64), len(uniq)
    curve_x = _curve_x(num_batches)
    logrank, reuse, _, curve, lagged = _table_stats(
        batch, ids, num_ids, num_batches, curve_x, window_batches, _lags(num_batches)
    )
    return np.array(
        [logrank, reuse, math.log(max(int(curve[-1]), 1)), _curve_statistic(curve), *lagged]
    )


def _lags(num_batches: int) -> np.ndarray:
    """Lags whose lookup-weighted overlap tells drift (which lowers it more the longer
    the lag) from reuse (which raises lag 1 most), as far as the trace reaches."""
    return np.minimum(np.array(LAGS), max(num_batches - 1, 1))


def _curve_x(num_batches: int) -> np.ndarray:
    from replay.trace.keys import curve_batches

    return curve_batches(num_batches, CURVE_POINTS)


def _curve_statistic(curve: np.ndarray) -> float:
    return float(np.mean(np.log(np.maximum(curve, 1))))


# -- the bounded power law's moments -------------------------------------------------

_EXPLICIT_RANKS = 1 << 16
_QUAD_POINTS = 4097


def mean_log_rank(alpha: float, rows: int, first: int = 1) -> tuple[float, float]:
    """(E[log k], Var[log k]) for p(k) ~ k^-alpha on [first, rows]: exact sums up to 2^16
    ranks, the midpoint integral beyond (Simpson in log space; its error is below 1e-9
    relative there)."""
    head = min(int(rows), _EXPLICIT_RANKS)
    if head < first:
        return 0.0, 0.0
    k = np.arange(first, head + 1, dtype=np.float64)
    logk = np.log(k)
    w = np.exp(-alpha * logk)
    s0, s1, s2 = w.sum(), (w * logk).sum(), (w * logk * logk).sum()
    if rows > head:
        u = np.linspace(math.log(head + 0.5), math.log(rows + 0.5), _QUAD_POINTS)
        f = np.exp((1.0 - alpha) * u)  # x^-alpha dx with x = e^u
        h = (u[-1] - u[0]) / (_QUAD_POINTS - 1)
        simpson = np.ones(_QUAD_POINTS)
        simpson[1:-1:2], simpson[2:-1:2] = 4.0, 2.0
        simpson *= h / 3.0
        s0 += float((simpson * f).sum())
        s1 += float((simpson * f * u).sum())
        s2 += float((simpson * f * u * u).sum())
    mean = s1 / s0
    return mean, max(s2 / s0 - mean * mean, 0.0)


def power_law_mle(
    counts: np.ndarray, rows: int, first: int = 1
) -> tuple[float | None, float | None]:
    """(alpha, standard error) of the bounded power law on [first, rows] fitted to
    `counts` (lookups per touched row) ranked in decreasing order, the largest count at
    rank `first` (first = 2: the top row is left out, the rest's exponent): (None, None)
    for a single rank or a concentration beyond alpha = 16, (0.0, None) when as flat as
    uniform or flatter."""
    counts = np.sort(np.asarray(counts, dtype=np.float64)[np.asarray(counts) > 0])[::-1]
    counts = counts[first - 1 :]
    n = float(counts.sum())
    if rows - first < 1 or len(counts) == 0:
        return None, None
    ranks = np.arange(first, first + len(counts), dtype=np.float64)
    target = float((counts * np.log(ranks)).sum()) / n
    lo, hi = 0.0, 16.0
    if target >= mean_log_rank(0.0, rows, first)[0]:
        return 0.0, None  # as flat as the uniform law or flatter
    if target <= mean_log_rank(hi, rows, first)[0]:
        return None, None
    for _ in range(60):  # E[log k] decreases in alpha
        mid = 0.5 * (lo + hi)
        if mean_log_rank(mid, rows, first)[0] > target:
            lo = mid
        else:
            hi = mid
    alpha = 0.5 * (lo + hi)
    var = mean_log_rank(alpha, rows, first)[1]
    return alpha, (1.0 / math.sqrt(n * var) if var > 0 else None)


# -- the hot value -------------------------------------------------------------------

HOT_LEVEL = 0.001
# chi-square(1)'s upper 2 x HOT_LEVEL point: the level-HOT_LEVEL critical value of the
# boundary law 1/2 chi2_0 + 1/2 chi2_1 (module docstring)
HOT_CRITICAL = 9.5495


@dataclass(frozen=True)
class HotValue:
    """Whether a table's most frequent row stands out from the power law of the rest."""

    top_share: float  # c_1 / n: the observed share of the most frequent row
    alpha_rest: float | None  # the MLE exponent over ranks 2..rows (None: no rest to fit)
    power_law_share: float | None  # q = 1 / H(rows, alpha_rest): rank 1 without a hot value
    lr: float  # the likelihood-ratio statistic (0 when the top share is not above q)
    stands_out: bool  # lr > HOT_CRITICAL
    alpha_plain: float | None = None  # H0's exponent: the plain MLE over all ranks

    @property
    def hot_share(self) -> float:
        """h at alpha_rest: (c_1 / n - q) / (1 - q) where the row stands out, else 0."""
        if not self.stands_out or self.power_law_share is None:
            return 0.0
        q = self.power_law_share
        return max(0.0, (self.top_share - q) / (1.0 - q))


def hot_value_test(counts: np.ndarray, rows: int) -> HotValue:
    """The likelihood-ratio test of a hot value on a table's row counts (the module
    docstring: steps 1-3)."""
    counts = np.sort(np.asarray(counts, dtype=np.float64)[np.asarray(counts) > 0])[::-1]
    n = float(counts.sum())
    top = float(counts[0]) / n if n > 0 else 0.0
    if rows < 3 or len(counts) < 2:
        return HotValue(top, None, None, 0.0, False)
    alpha, _ = power_law_mle(counts, rows, first=2)
    plain, _ = power_law_mle(counts, rows)
    if alpha is None or plain is None:  # the rest on one row: no exponent to test against
        return HotValue(top, None, None, 0.0, False, plain)
    norm = power_law_sum(int(rows), alpha)
    q = 1.0 / norm
    if top <= q:  # the MLE is on h = 0
        return HotValue(top, alpha, q, 0.0, False, plain)
    c1 = float(counts[0])
    log_ranks = float((counts * np.log(np.arange(1, len(counts) + 1))).sum())
    # H1: pi^ = c_1 / n on rank 1, the rest's conditional law k^-alpha / (H - 1) on [2, rows]
    h1 = c1 * math.log(top) - alpha * log_ranks - (n - c1) * math.log(norm - 1.0)
    if top < 1.0:
        h1 += (n - c1) * math.log1p(-top)
    # H0: the plain power law over all ranks at its own MLE
    h0 = -plain * log_ranks - n * math.log(power_law_sum(int(rows), plain))
    lr = max(0.0, 2.0 * (h1 - h0))
    return HotValue(top, alpha, q, lr, lr > HOT_CRITICAL, plain)


def hot_share_for(top_share: float, alpha: float, rows: int) -> float:
    """h such that rank 1 of the mixture takes `top_share` of the lookups at exponent
    `alpha`: (top_share - q) / (1 - q), q = 1 / H(rows, alpha); 0 when q reaches it."""
    if rows < 2:
        return 0.0
    q = 1.0 / power_law_sum(int(rows), float(alpha))
    return max(0.0, (top_share - q) / (1.0 - q))


def chao1(counts: np.ndarray) -> int:
    """Bias-corrected Chao1 estimate of the number of distinct values (Chao 1984)."""
    counts = np.asarray(counts)
    distinct = int((counts > 0).sum())
    f1, f2 = int((counts == 1).sum()), int((counts == 2).sum())
    return distinct + (f1 * (f1 - 1)) // (2 * (f2 + 1))
