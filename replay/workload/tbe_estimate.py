"""FBGEMM's estimator of a TBE batch's index distribution, and the tail that reproduces it.

FBGEMM's TBE reporter (`fbgemm_gpu/tbe/monitoring/bench_params_reporter.py`) summarizes
one batch of a table's indices with `torch.ops.fbgemm.tbe_estimate_indices_distribution`
(`fbgemm_gpu/src/tbe/eeg/indices_estimator.cpp`). `estimate_indices` is that estimator in
numpy, step for step, so replay can run it without torch:

- the indices' frequencies, sorted in decreasing order and normalized to sum 1: f_0 >= f_1
  >= ... >= f_(D-1), D the distinct indices seen;
- the heavy hitters: f_0, f_1, ... up to 20 of them (`kHeavyHitterMaxEntries_`), stopping
  after the first whose running sum passes 0.9 (`kHeavyHitterThreshold_`); j of them;
- the Zipf fit of the rest, p(i) ~ (i + q)^-s for 0-based ranks i = j..D-1: a grid search
  of the log-likelihood L(q, s) = -Z log C(s, q + j, D - j) + s F(q) - 1e-4 q, Z the
  rest's mass, C(s, a, n) = sum_(i<n) (a + i)^-s and F(q) = -sum_(i>=j) f_i log(i + q +
  7/8) (the source's log table of step 1/8 is read one entry early, so its logarithm is
  of i + q + 7/8, not i + q; kept, as every fit FBGEMM writes has it); q from 1 in steps
  of 10^floor(log10 q) / 4 below 100,000, s from 0.01 in steps of 0.01 below 2 (the
  steps summed in floating point, as there); a pair is skipped unless the smallest heavy
  hitter is 1 to 5 times the law's largest probability Z (q + j)^-s / C. No pair left
  gives FBGEMM's default (q, s) = (1, 2).

C is summed here by Euler-Maclaurin beyond the first 32 terms (error below 1e-12
relative), where FBGEMM takes a difference of two Hurwitz zeta values (or sums it
directly within 1e-8 of s = 1), and F by runs of equal frequencies (lgamma differences;
FBGEMM sums every rank): the grid's choice is the same but where two pairs' likelihoods
tie to about 1e-9 (`tests/test_tbe_config.py` holds the two against each other; 30
random batches matched FBGEMM's answers exactly).

The estimator fits the law over the D ranks a batch saw, while FBGEMM's own generator
(`indices_generator.cpp`) draws the tail over all E - j rows of the table: regenerating a
batch from a reported (q, s) and estimating again does not give (q, s) back where a batch
sees a small part of its table (measured, FBGEMM's own round trip on 1 M-lookup batches of
1 M-row tables: s from 0.81 to 0.73 on one, (q, s) from (150, 1.43) to (97.5, 1.26) on
another). `calibrate_tail`
therefore finds, by indirect inference (Gouriéroux, Monfort & Renault 1993, as `replay
fit` does), the spec's tail (alpha, rank_offset) whose generated batch of the reported
size, estimated as FBGEMM estimates it, gives the reported (q, s): Broyden's method on
(log q, s) with the estimates averaged over `CALIBRATION_SEEDS` batches. Every
step keeps the heavy hitters the most frequent ranks (the offset at least `least_offset`:
FBGEMM's consistency condition, heavy hitters at least as likely as the law's largest
probability, applied to the law over the whole table). Measured (2-core machine): on
FBGEMM's reporter's file of three tables (`tests/test_tbe_config.py`) every table
converged, about 2 s in all; a 10 M-row table read in batches of 2 M lookups in 3 steps,
10 s at a load of 13. The heavy hitters are pinned (`hot_shares`) and do not move.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

HEAVY_HITTER_MAX = 20  # kHeavyHitterMaxEntries_
HEAVY_HITTER_THRESHOLD = 0.90  # kHeavyHitterThreshold_
Q_MAX = 100_000.0  # kMaxQ
Q_REGULARIZER = 1e-4  # kQRegularizer_
S_MIN, S_MAX, S_STEP = 0.01, 2.0, 0.01  # kMinS_, kMaxS_, kSStep_
DEFAULT_Q, DEFAULT_S = 1.0, 2.0  # ZipfParameters()
LOG_SHIFT = 7.0 / 8.0  # the log table's offset (module docstring)
HEAD_TERMS = 32  # C's terms summed exactly before Euler-Maclaurin
CALIBRATION_SEEDS = 3
CALIBRATION_STEPS = 12
CALIBRATION_TOLERANCE = 0.02  # relative, on q and on s
TRUST = np.array([1.0, 0.3])  # the largest step in log(rank_offset + 1) and in alpha


def _grid() -> tuple[np.ndarray, np.ndarray]:
    qs: list[float] = []
    q = 1.0
    while q < Q_MAX:
        qs.append(q)
        q += 10.0 ** math.floor(math.log10(q)) / 4
    ss: list[float] = []
    s = S_MIN
    while s < S_MAX:
        ss.append(s)
        s += S_STEP
    return np.array(qs), np.array(ss)


Q_GRID, S_GRID = _grid()


@dataclass(frozen=True)
class IndicesFit:
    """What FBGEMM's estimator reports for one batch of a table's indices."""

    heavy_hitters: tuple[float, ...]
    q: float
    s: float
    max_index: int
    num_indices: int


def zipf_constants(s: np.ndarray | Sequence[float], a: float, n: int) -> np.ndarray:
    """C(s, a, n) = sum_(i=0)^(n-1) (a + i)^-s for every s (a >= 1, n >= 0)."""
    s = np.asarray(s, dtype=np.float64)
    if n <= 0:
        return np.zeros_like(s)
    head = min(n, HEAD_TERMS)
    x = a + np.arange(head, dtype=np.float64)
    total = (x[None, :] ** -s[:, None]).sum(axis=1)
    if n <= head:
        return total
    lo, hi = a + head, a + n - 1  # the tail's first and last terms
    # integral of x^-s from lo to hi, stable at s = 1: lo^(1-s) expm1((1-s) ln(hi/lo)) / (1-s)
    one = 1.0 - s
    ratio = math.log(hi / lo)
    with np.errstate(divide="ignore", invalid="ignore"):
        integral = np.where(
            np.abs(one) < 1e-12, ratio, lo**one * np.expm1(one * ratio) / np.where(one == 0, 1, one)
        )
    f_lo, f_hi = lo**-s, hi**-s
    d1 = -s * lo ** (-s - 1), -s * hi ** (-s - 1)
    d3 = (
        -s * (s + 1) * (s + 2) * lo ** (-s - 3),
        -s * (s + 1) * (s + 2) * hi ** (-s - 3),
    )
    return total + integral + (f_lo + f_hi) / 2 + (d1[1] - d1[0]) / 12 - (d3[1] - d3[0]) / 720


def estimate_from_counts(counts: np.ndarray) -> tuple[tuple[float, ...], float, float]:
    """(heavy hitters, q, s) of FBGEMM's estimator from the indices' counts (any order)."""
    counts = np.asarray(counts, dtype=np.float64)
    counts = counts[counts > 0]
    if not len(counts):
        raise ValueError("no indices to estimate from")
    freqs = np.sort(counts)[::-1] / counts.sum()
    hitters: list[float] = []
    cdf = 0.0
    for f in freqs[:HEAVY_HITTER_MAX].tolist():
        hitters.append(f)
        cdf += f
        if cdf > HEAVY_HITTER_THRESHOLD:
            break
    j = len(hitters)
    rest = np.ascontiguousarray(freqs[j:])
    n = len(rest)
    if n == 0:
        return tuple(hitters), DEFAULT_Q, DEFAULT_S
    mass = float(rest.sum())
    # F(q) = -sum_i f_i log(i + q + 7/8) by runs of equal frequencies (most of a large
    # batch's indices are seen once or twice): a run over ranks [a, b) adds f (lgamma(b +
    # c) - lgamma(a + c)), c = q + 7/8, so each q costs the runs, not the ranks
    edges = np.flatnonzero(np.diff(rest)) + 1
    starts = np.concatenate(([0], edges)) + j
    stops = np.concatenate((edges, [n])) + j
    values = rest[starts - j]
    single = stops - starts == 1
    log_gamma = np.vectorize(math.lgamma, otypes=[np.float64])
    smallest = hitters[-1]
    best = (-math.inf, DEFAULT_Q, DEFAULT_S)
    for q in Q_GRID.tolist():
        c = q + LOG_SHIFT
        runs = log_gamma(stops[~single] + c) - log_gamma(starts[~single] + c)
        freq_term = -(
            math.fsum((values[~single] * runs).tolist())
            + math.fsum((values[single] * np.log(starts[single] + c)).tolist())
        )
        const = zipf_constants(S_GRID, q + j, n)
        zipf_max = mass / const * (q + j) ** -S_GRID
        ratio = smallest / zipf_max
        ok = (ratio >= 1.0) & (ratio <= 5.0)
        if not ok.any():
            continue
        ll = -mass * np.log(const) + S_GRID * freq_term - Q_REGULARIZER * q
        ll = np.where(ok, ll, -np.inf)
        i = int(np.argmax(ll))  # the first of equals, as the source's strict `>` keeps
        if ll[i] > best[0]:
            best = (float(ll[i]), q, float(S_GRID[i]))
    return tuple(hitters), best[1], best[2]


def estimate_indices(indices: np.ndarray) -> IndicesFit:
    """FBGEMM's `tbe_estimate_indices_distribution` of one table's batch of indices."""
    indices = np.asarray(indices)
    if indices.size == 0:
        raise ValueError("no indices to estimate from")
    _, counts = np.unique(indices, return_counts=True)
    hitters, q, s = estimate_from_counts(counts)
    return IndicesFit(hitters, q, s, int(indices.max()), int(indices.size))


@dataclass(frozen=True)
class Calibration:
    """A table's tail as the spec generates it, and what FBGEMM's estimator makes of it."""

    alpha: float
    rank_offset: float
    q: float  # the estimate's mean over the calibration's batches
    s: float
    steps: int
    converged: bool
    ordered: bool = True  # no tail rank likelier than the least hot one


def _refit(
    rows: int, hot: tuple[float, ...], alpha: float, offset: float, lookups: int, seed: int
) -> tuple[float, float]:
    """Mean (q, s) of FBGEMM's estimator over CALIBRATION_SEEDS generated batches."""
    from replay.workload.generator import CompiledWorkload  # numba: only when calibrating
    from replay.workload.spec import TableSpec, WorkloadSpec

    table = TableSpec(name="t", rows=rows, alpha=alpha, rank_offset=offset, hot_shares=hot)
    spec = WorkloadSpec(name="calibration", tables=(table,), batch_size=lookups,
                        batches=CALIBRATION_SEEDS, seed=seed)  # fmt: skip
    _, _, row = CompiledWorkload.from_spec(spec).lookups(0, CALIBRATION_SEEDS)
    fits = [
        estimate_from_counts(np.unique(part, return_counts=True)[1])[1:]
        for part in np.split(row, CALIBRATION_SEEDS)
    ]
    return float(np.mean([f[0] for f in fits])), float(np.mean([f[1] for f in fits]))


def first_tail_share(rows: int, hot: tuple[float, ...], alpha: float, offset: float) -> float:
    """The largest probability of a rank above the hot ones: rank j + 1's."""
    j = len(hot)
    if rows <= j:
        return 0.0
    const = float(zipf_constants(np.array([alpha]), j + 1 + offset, rows - j)[0])
    return (1.0 - math.fsum(hot)) * (j + 1 + offset) ** -alpha / const


def least_offset(rows: int, hot: tuple[float, ...], alpha: float) -> float | None:
    """The smallest rank offset at which no rank above the hot ones is likelier than the
    least hot one (FBGEMM's consistency: heavy hitters are the most frequent indices);
    0 without hot values; None where even the flattest tail breaks it."""
    if not hot or rows <= len(hot):
        return 0.0
    least = min(hot)
    if first_tail_share(rows, hot, alpha, 0.0) <= least:
        return 0.0
    hi = math.log(Q_MAX)
    if first_tail_share(rows, hot, alpha, math.expm1(hi)) > least:
        return None
    lo = 0.0
    for _ in range(40):  # rank j + 1's share falls as the offset flattens the law
        mid = (lo + hi) / 2
        if first_tail_share(rows, hot, alpha, math.expm1(mid)) > least:
            lo = mid
        else:
            hi = mid
    return math.expm1(hi)


def calibrate_tail(
    rows: int,
    hot: tuple[float, ...],
    q: float,
    s: float,
    lookups: int,
    seed: int = 0,
    max_alpha: float = 10.0,
) -> Calibration:
    """The (alpha, rank_offset) whose generated batches of `lookups` lookups FBGEMM's
    estimator reads as (q, s) (module docstring). Starts at (s, q - 1), FBGEMM's own
    generator's law, and solves refit(x) = (log q, s) for x = (log(rank_offset + 1),
    alpha) by Broyden's method from the identity (the estimator's bias moves little with
    the parameters), each coordinate kept inside the bracket its signs so far give (the
    estimate's s grows with alpha, its q with the offset; bisection where a step would
    leave it); stops within CALIBRATION_TOLERANCE of both or after CALIBRATION_STEPS,
    keeping the closest. Every step keeps the heavy hitters the most frequent ranks: the
    offset is raised to at least `least_offset` (where no offset can, the tail is left as
    it is and `Calibration.ordered` is false); the (q, s) then reached may be further off."""
    target = np.array([math.log(q), s])
    # q is read on a grid of steps 10^floor(log10 q) / 4 (25% of q at 100): within half a
    # step is as close as an estimate can tell
    q_tolerance = max(CALIBRATION_TOLERANCE, 10.0 ** math.floor(math.log10(q)) / 8 / q)
    x = np.array([math.log(max(q, 1.0)), s])
    floor, ceiling = np.array([0.0, 0.0]), np.array([math.log(Q_MAX), max_alpha])
    lo, hi = np.full(2, -np.inf), np.full(2, np.inf)  # the brackets found so far
    jac = np.eye(2)
    best: Calibration | None = None
    best_error = math.inf
    previous: tuple[np.ndarray, np.ndarray] | None = None
    ordered = True
    for step in range(1, CALIBRATION_STEPS + 1):
        floor_offset = least_offset(rows, hot, float(x[1]))
        ordered = floor_offset is not None
        if floor_offset is not None:
            x[0] = max(float(x[0]), math.log1p(floor_offset))
        alpha, offset = float(x[1]), math.exp(float(x[0])) - 1.0
        got_q, got_s = _refit(rows, hot, alpha, offset, lookups, seed)
        error = max(abs(got_q - q) / q / q_tolerance, abs(got_s - s) / s / CALIBRATION_TOLERANCE)
        if error < best_error:
            best_error = error
            best = Calibration(alpha, offset, got_q, got_s, step, error <= 1.0, ordered)
        if error <= 1.0:
            break
        f = np.array([math.log(got_q), got_s]) - target
        for k in range(2):  # the bracket: too high a read means the parameter is too high
            if f[k] > 0:
                hi[k] = min(hi[k], x[k])
            elif f[k] < 0:
                lo[k] = max(lo[k], x[k])
        if previous is not None:
            dx, df = x - previous[0], f - previous[1]
            if float(dx @ dx) > 0:
                jac = jac + np.outer(df - jac @ dx, dx) / float(dx @ dx)
        try:
            move = -np.linalg.solve(jac, f)
        except np.linalg.LinAlgError:
            jac, move = np.eye(2), -f
        if not np.all(np.isfinite(move)):
            jac, move = np.eye(2), -f
        move = np.clip(move, -TRUST, TRUST)  # grid-noisy secants: small steps only
        previous = (x, f)
        proposed = x + move
        known = np.isfinite(lo) & np.isfinite(hi)
        middle = np.where(known, (np.where(known, lo, 0) + np.where(known, hi, 0)) / 2, 0)
        outside = known & ((proposed <= lo) | (proposed >= hi))
        x = np.clip(np.where(outside, middle, proposed), floor, ceiling)
    assert best is not None
    return Calibration(
        round(best.alpha, 6), round(best.rank_offset, 6), best.q, best.s, best.steps,
        best.converged, best.ordered,
    )  # fmt: skip
