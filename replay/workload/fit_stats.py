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
- The hot values (`hot_shares` h_1..h_j: p(k) = sum_i h_i [k == i] + (1 - sum h)
  k^-alpha / H(rows, alpha), `replay.workload.spec`). `hot_values_test` decides how many
  of the most frequent rows (j <= `MAX_HOT_VALUES`) stand out from the power law of the
  rest, before the exponent is fitted. M_j is the model whose ranks 1..j take free
  shares pi_1..pi_j and whose ranks above j follow k^-alpha (j = 0: the plain law):

  1. Given that a lookup is not on ranks 1..j, its rank has the law k^-alpha over
     [j + 1, rows] whatever the hot shares are, so the likelihood of M_j factorises into
     a multinomial over (rank 1, ..., rank j, the rest) and the rest's conditional power
     law. Its MLE is pi^_i = c_i / n (the observed shares of the ranked counts) and
     alpha^ = the conditional MLE over ranks j + 1, ... (`power_law_mle(counts, rows,
     first=j + 1)`, the mean log-rank matched as below).
  2. Rank j's point mass is tested by the likelihood ratio of M_j against M_(j-1): ranks
     1..j-1 have the same free shares in both and drop out, so LR_j = 2 [l_1 - l_0] over
     the m lookups on ranks >= j, l_1 = c_j log(c_j / m) + (m - c_j) log(1 - c_j / m) -
     alpha_1 sum_(k > j) c_k log k - (m - c_j) log H_(j+1)(alpha_1) and l_0 = -alpha_0
     sum_(k >= j) c_k log k - m log H_j(alpha_0), H_a(alpha) = sum_(k=a)^rows k^-alpha.
     Where c_j / m is not above j^-alpha_1 / H_j(alpha_1) (rank j's share of the rest's
     law) the MLE of M_j is on M_(j-1) (h_j = 0): LR_j = 0. h_j = 0 is on the boundary
     of the parameter space, so under M_(j-1) LR_j follows 1/2 chi2_0 + 1/2 chi2_1
     asymptotically (Chernoff, Ann. Math. Stat. 25, 1954; Self & Liang, JASA 82, 1987):
     at level `HOT_LEVEL` = 0.001 rank j stands out when LR_j exceeds the chi-square(1)
     upper 0.002 point, `HOT_CRITICAL` = 9.55. The level is strict because the ranking is
     empirical (the top rows of a sample are the likeliest top ranks, not surely them)
     and a sparse tail's ranks are not its true ranks: a hot value is added only on
     strong evidence.
  3. The number of hot values: the nested models M_0 < M_1 < M_2 < M_3 are tested from
     the largest down, the classical procedure for ordered nested hypotheses (Anderson,
     "The choice of the degree of a polynomial regression as a multiple decision
     problem", Ann. Math. Stat. 33, 1962): j is the largest rank whose LR_j stands out,
     0 if none does. Stepping up from rank 1 instead would stop at once on tables whose
     two top values are alike (Criteo's C14, C16, C17, C19, C23: the empty value and
     one other, 46% each): against a law fitted to ranks >= 2, whose own rank 2 takes
     46%, rank 1's 47% is no point mass (LR_1 = 0), while the pair stands far out of
     the tail. Under the plain law each step rejects with probability 0.001, so the
     whole procedure with at most 0.003.

  Tables of fewer than j + 2 rows, or with no lookups beyond rank j, have no rest to fit
  an exponent to and test no rank j (a power law over 2 ranks already fits any share).
  `hot_shares_for` turns the observed shares s_1..s_j back into h_1..h_j for any
  exponent (h_i = s_i - (1 - S) / (1 - Q) q_i, S = sum s_i, q_i = i^-alpha / H(rows,
  alpha), Q = sum q_i: the mixture's rank i then takes s_i), so the fit can move alpha
  while the fitted hot ranks keep the observed shares.
- `chao1` (the lower bound of the rows `--rows extrapolate` fits): Chao's
  bias-corrected species estimator D + F1 (F1 - 1) / (2 (F2 + 1)) (Chao 1984; D = rows
  touched, F1, F2 = rows seen once, twice).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from replay._jit import kernel
from replay.workload.sampler import power_law_sum
from replay.workload.spec import MAX_HOT_VALUES

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


@kernel
def _first_seen_ids(row: np.ndarray) -> tuple[np.ndarray, int]:
    """(ids, how many): each row's label replaced by the order of its first lookup (0, 1,
    ...), in one pass through an open-addressing table of at least twice the lookups
    (np.unique's sort was 1 ms of a 10,240-lookup table's simulation, a fifth of the fit)."""
    n = len(row)
    size = 16
    while size < 2 * n:
        size *= 2
    bits = np.uint64(0)
    while (np.uint64(1) << bits) < np.uint64(size):
        bits += np.uint64(1)
    shift = np.uint64(64) - bits
    mask = np.int64(size - 1)
    keys = np.empty(size, dtype=np.int64)
    slot_id = np.full(size, -1, dtype=np.int64)
    ids = np.empty(n, dtype=np.int64)
    num_ids = 0
    for i in range(n):
        key = np.int64(row[i])
        h = np.int64((np.uint64(key) * np.uint64(0x9E3779B97F4A7C15)) >> shift)
        while slot_id[h] != -1 and keys[h] != key:
            h = (h + 1) & mask
        if slot_id[h] == -1:
            keys[h] = key
            slot_id[h] = num_ids
            num_ids += 1
        ids[i] = slot_id[h]
    return ids, num_ids


def table_statistics(
    batch: np.ndarray, row: np.ndarray, rows: int, num_batches: int, window_batches: int
) -> np.ndarray:
    """The matched statistics of one table (`STATISTICS` names them)."""
    batch = np.ascontiguousarray(batch, dtype=np.int64)
    # the kernel's per-row arrays (six int64s a row) are filled on every call, once per
    # simulation: above 4 rows a lookup that fill costs more than relabelling the rows
    # (a 1 M-row table of 51,200 lookups: 9.0 ms a call against 2.9 ms on np.unique's
    # dense ids); the statistics do not depend on row labels, so all give the same numbers
    if rows <= 4 * len(row) and (not len(row) or int(row.max()) < rows):
        ids, num_ids = np.ascontiguousarray(row, dtype=np.int64), int(rows)
    else:  # a sparse table (or rows fitted below the ids seen): dense ids
        ids, num_ids = _first_seen_ids(np.ascontiguousarray(row, dtype=np.int64))
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


@functools.lru_cache(maxsize=16)
def _log_ranks(first: int, head: int) -> np.ndarray:
    """log k for k = first..head: the same for every alpha a bisection tries (60 a fit)."""
    logk = np.log(np.arange(first, head + 1, dtype=np.float64))
    logk.flags.writeable = False
    return logk


@functools.lru_cache(maxsize=16)
def _log_quadrature(head: int, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """(u, Simpson's weights) over log x from head + 0.5 to rows + 0.5."""
    u = np.linspace(math.log(head + 0.5), math.log(rows + 0.5), _QUAD_POINTS)
    h = (u[-1] - u[0]) / (_QUAD_POINTS - 1)
    simpson = np.ones(_QUAD_POINTS)
    simpson[1:-1:2], simpson[2:-1:2] = 4.0, 2.0
    simpson *= h / 3.0
    u.flags.writeable = simpson.flags.writeable = False
    return u, simpson


def mean_log_rank(alpha: float, rows: int, first: int = 1) -> tuple[float, float]:
    """(E[log k], Var[log k]) for p(k) ~ k^-alpha on [first, rows]: exact sums up to 2^16
    ranks, the midpoint integral beyond (Simpson in log space; its error is below 1e-9
    relative there)."""
    head = min(int(rows), _EXPLICIT_RANKS)
    if head < first:
        return 0.0, 0.0
    logk = _log_ranks(first, head)
    w = np.exp(-alpha * logk)
    wl = w * logk  # (w * logk) * logk below: the products, and so the sums, as written out
    s0, s1, s2 = w.sum(), wl.sum(), (wl * logk).sum()
    if rows > head:
        u, simpson = _log_quadrature(head, int(rows))
        f = np.exp((1.0 - alpha) * u)  # x^-alpha dx with x = e^u
        sf = simpson * f
        sfu = sf * u
        s0 += float(sf.sum())
        s1 += float(sfu.sum())
        s2 += float((sfu * u).sum())
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


# -- the hot values ------------------------------------------------------------------

HOT_LEVEL = 0.001
# chi-square(1)'s upper 2 x HOT_LEVEL point: the level-HOT_LEVEL critical value of the
# boundary law 1/2 chi2_0 + 1/2 chi2_1 (module docstring)
HOT_CRITICAL = 9.5495


@dataclass(frozen=True)
class HotRank:
    """The test of rank j's point mass given ranks 1..j-1 free (module docstring, step 2)."""

    rank: int
    share: float  # c_j / n: the observed share of the j-th most frequent row
    lr: float  # LR_j (0 when rank j's share is not above the rest's law, or untested)
    stands_out: bool  # lr > HOT_CRITICAL


@dataclass(frozen=True)
class HotValues:
    """How many of a table's most frequent rows stand out from the power law of the rest."""

    ranks: tuple[HotRank, ...]  # the ranks tested, 1..min(MAX_HOT_VALUES, ...)
    count: int  # j: the largest rank that stands out (step 3), 0 if none
    alpha_rest: float | None  # the MLE exponent over ranks j+1..rows (None: none to fit)
    alpha_plain: float | None  # M_0's exponent: the plain MLE over all ranks
    top_share: float  # c_1 / n: the observed share of the most frequent row
    rows: int

    @property
    def shares(self) -> tuple[float, ...]:
        """The observed shares of the hot ranks 1..j (the MLE of their shares)."""
        return tuple(r.share for r in self.ranks[: self.count])

    @property
    def stands_out(self) -> bool:
        return self.count > 0

    @property
    def hot_shares(self) -> tuple[float, ...]:
        """h_1..h_j at alpha_rest (`hot_shares_for`); () without hot values."""
        if not self.count or self.alpha_rest is None:
            return ()
        return hot_shares_for(self.shares, self.alpha_rest, self.rows)


def _tail_sum(rows: int, alpha: float, first: int) -> float:
    """H_first(alpha) = sum_(k=first)^rows k^-alpha (the generator's H, its first ranks
    taken off)."""
    head = np.arange(1, first, dtype=np.float64) ** -alpha
    return power_law_sum(int(rows), alpha) - math.fsum(head.tolist())


def _rank_lr(counts: np.ndarray, log_ranks: np.ndarray, rows: int, j: int) -> float:
    """LR_j of rank j's point mass against the power law over ranks >= j (`counts`
    sorted decreasing; module docstring, step 2); 0 where no rest can be fitted."""
    if rows < j + 2 or len(counts) <= j:
        return 0.0
    alpha1, _ = power_law_mle(counts, rows, first=j + 1)
    alpha0, _ = power_law_mle(counts, rows, first=j)
    if alpha1 is None or alpha0 is None:  # the rest on one row, or beyond alpha = 16
        return 0.0
    c_j = float(counts[j - 1])
    m = float(counts[j - 1 :].sum())
    share = c_j / m
    norm1 = _tail_sum(rows, alpha1, j + 1)
    if share <= j**-alpha1 / (norm1 + j**-alpha1):  # the MLE is on h_j = 0
        return 0.0
    l1 = c_j * math.log(share) + (m - c_j) * (math.log1p(-share) - math.log(norm1))
    l1 -= alpha1 * float((counts[j:] * log_ranks[j:]).sum())
    l0 = -alpha0 * float((counts[j - 1 :] * log_ranks[j - 1 :]).sum())
    l0 -= m * math.log(_tail_sum(rows, alpha0, j))
    return max(0.0, 2.0 * (l1 - l0))


def hot_values_test(counts: np.ndarray, rows: int, max_hot: int = MAX_HOT_VALUES) -> HotValues:
    """The likelihood-ratio tests of hot values on a table's row counts, ranks 1..max_hot,
    and the number kept (module docstring, steps 1-3)."""
    counts = np.sort(np.asarray(counts, dtype=np.float64)[np.asarray(counts) > 0])[::-1]
    n = float(counts.sum())
    top = float(counts[0]) / n if n > 0 else 0.0
    plain = power_law_mle(counts, rows)[0] if len(counts) else None
    log_ranks = np.log(np.arange(1, len(counts) + 1, dtype=np.float64))
    ranks = []
    for j in range(1, min(max_hot, len(counts)) + 1):
        lr = _rank_lr(counts, log_ranks, int(rows), j)
        ranks.append(HotRank(j, float(counts[j - 1]) / n, lr, lr > HOT_CRITICAL))
    # from the largest rank down (step 3): the largest that stands out
    count = next((r.rank for r in reversed(ranks) if r.stands_out), 0)
    rest = power_law_mle(counts, rows, first=count + 1)[0] if len(counts) > count else None
    return HotValues(tuple(ranks), count, rest, plain, top, int(rows))


def hot_shares_for(shares: Sequence[float], alpha: float, rows: int) -> tuple[float, ...]:
    """h_1..h_j such that ranks 1..j of the mixture take `shares` of the lookups at
    exponent `alpha` (module docstring); a rank whose share its power-law share alone
    reaches gets 0 (the boundary of the MLE), the others keep the formula's h."""
    if not shares or rows <= len(shares):
        return ()
    norm = power_law_sum(int(rows), float(alpha))
    q = np.arange(1, len(shares) + 1, dtype=np.float64) ** -float(alpha) / norm
    factor = (1.0 - math.fsum(shares)) / (1.0 - math.fsum(q.tolist()))
    return tuple(max(0.0, float(s) - factor * float(qi)) for s, qi in zip(shares, q, strict=True))


def chao1(counts: np.ndarray) -> int:
    """Bias-corrected Chao1 estimate of the number of distinct values (Chao 1984)."""
    counts = np.asarray(counts)
    distinct = int((counts > 0).sum())
    f1, f2 = int((counts == 1).sum()), int((counts == 2).sum())
    return distinct + (f1 * (f1 - 1)) // (2 * (f2 + 1))
