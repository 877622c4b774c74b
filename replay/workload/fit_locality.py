"""`replay fit --locality-stats FILE`: a workload spec fitted to Meta's locality statistics.

Input: one record of a locality statistics file (`replay.workload.locality_stats`):
lookups L and distinct rows D per batch of B samples, and the two histograms over Meta's
reuse bins (share of distinct rows, share of lookups). Output: a workload spec of T tables
in G groups of alike tables (`replay.workload.locality_spec`), each group with a share of
the tables, a share of the lookups per sample, an exponent alpha, a rank offset q (the
Zipf-Mandelbrot law p(k) ~ (k + q)^-alpha, `rank_offset` in the spec) and a table size
N, whose generated batch reproduces L, D and both histograms.

Method (minimum distance over a parametric family; docs/locality_fit.md):

1. Lookups per sample P = round(L / B) are exact: one per table, and the P - T others
   shared among the groups, inside a group evenly among its tables (whole pooling
   factors, totals exact).
2. For candidate parameters theta = (table shares, lookup shares, alpha_g, log N_g,
   log(1 + q_g)), the
   expected statistics of one batch are computed in closed form
   (`replay.workload.locality_model`: each rank's count Poisson, or normal for hot ranks,
   summed over rank buckets), in about a millisecond per group.
3. Starts (`_library`): single tables over a grid of (pooling, alpha, N, q) are the
   columns of a linear problem (a mixture's statistics are linear in its tables, with
   D and L the target's): non-negative least squares (`nnls`) over all of them is a
   relaxation, and a record it misses by more than RELAXED_SHARE is refused at once
   (no mixture of the family reaches it); mixtures of G columns of at least one table
   each (forward selection and swaps on the largest gap, every candidate scored at once
   by `_mixture_costs`; G up to LIBRARY_GROUPS) start the search of G groups, beside
   N_STARTS seeded random starts (for G > 1: WARM_RANDOM_STARTS of them, the G - 1 free
   fit with each of its groups split, `_grow`, and the G - 1 final fit with one table
   split off as a group of its own, `_split`: the same spec, so G ends no worse).
4. theta minimises the squared differences of the 34 shares plus the relative error of D
   (weight DISTINCT_WEIGHT), by Levenberg-Marquardt with forward-difference Jacobians
   (at least one row in log N: ranks are whole); then a few rounds of iteratively
   reweighted least squares (weights |r|^(p - 2), p = IRLS_POWER) pull the largest
   differences down, since the acceptance is a bound on every bin, not on their sum of
   squares. The groups' tables are then made whole (`whole_tables`) and the rest is
   searched again with them fixed, ending with a compass search (`_compass`) on the
   largest gap of the written spec: where counts are large, a count's bin is a step
   function of theta that a gradient does not see. Candidates are compared on the spec
   they round to (whole tables, whole pooling factors), and a group of less than one
   table is penalised; the POLISHED best of each G (among the library's, the split's
   and the FREE_KEPT best of the free fits) are searched to the end (`_polish`).
5. G is the fewest groups (1 to max_groups) whose rounded spec's expected statistics
   meet the targets (every share within SELECT_SHARE, D within SELECT_DISTINCT); if none
   does, the G with the smallest largest difference. A spec whose expected statistics
   miss the acceptance (ACCEPT_SHARE, ACCEPT_DISTINCT) is not returned: ConfigError,
   one line, naming the share it missed.

Assumptions, each a default the caller can change (what the statistics cannot say):

- the number of tables T: from a record name like `fbgemm_t856_bs65536.pt`, else given
  (`--tables`); the statistics are sums over tables, so only T x (per-table shape) is
  seen, and T sets how the lookups are cut into tables;
- alike tables in a few groups, evenly pooled inside a group (real tables differ one by
  one; the batch statistics only see the mixture);
- the Zipf-Mandelbrot law with no hot values (`hot_shares` are not fitted: three hot
  ranks per table are too few rows to move a histogram of 128 M rows);
- table sizes: N is fitted as the support of the law, identified through the law by the
  rows seen once; rows never drawn by any batch are not seen, and beyond some N the
  statistics no longer move, so N is capped (`--max-rows`, DEFAULT_MAX_ROWS);
- across batches: no reuse and no drift (consecutive batches are independent draws of
  the same popularity); the statistics are of single batches and say nothing about
  either. Drift (`--drift`) moves the ranking between batches and leaves every batch's
  statistics as they are; `reuse` would change them, so it is not offered.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from replay.errors import ConfigError
from replay.workload.fit_locality_library import (
    DISTINCT_WEIGHT,
    IRLS_POWER,
    IRLS_ROUNDS,
    Atom,
    _library,
)
from replay.workload.locality_model import (
    BIN_EDGES,
    BINS,
    BatchStats,
    TableShape,
    expected_stats,
    table_counts,
)
from replay.workload.locality_spec import TableGroup, apportion, group_tables
from replay.workload.spec import MAX_POOLING, WorkloadSpec, spec_from_dict

N_STARTS = 4
LM_ITERATIONS = 40
SELECT_SHARE = 0.005  # model error: the rest of 0.01 is left for two batches' sampling noise
SELECT_DISTINCT = 0.01
MAX_ALPHA = 4.0
MAX_LOG_OFFSET = 12.0  # q up to e ^ 12 = 1.6e5 ranks
PER_GROUP = 3  # alpha, log rows, log(1 + q)
DEFAULT_MAX_ROWS = 100_000_000  # rows per table at most (`--max-rows`)
# random starts beside the warm ones from G - 1 groups: each is a short local search
# (0.1-0.3 s; the objective's basins are many and narrow, e.g. a rank offset of 130
# beside one of 1), so many are cheap beside the polishing of the best few
WARM_RANDOM_STARTS = 24
FREE_KEPT = 2  # the best free-share fits that join the candidates to polish
SEARCH_BUCKET_RATIO = 1.02  # the search's coarser rank buckets (the spec is judged exactly)
ACCEPT_SHARE = 0.01  # what a written spec must meet (the acceptance): else refused
ACCEPT_DISTINCT = 0.03
# the library's mixture is a relaxation (any fractions of tables), on a grid: a record
# it misses by more than this is refused before the search
RELAXED_SHARE = 2 * ACCEPT_SHARE


@dataclass(frozen=True)
class LocalityFit:
    """A fitted spec, its groups, and the statistics it is expected to give."""

    spec: WorkloadSpec
    groups: tuple[TableGroup, ...]
    target: BatchStats
    expected: BatchStats
    tried: dict[int, float] = field(default_factory=dict)  # groups -> largest share gap

    @property
    def max_share_gap(self) -> float:
        return float(np.abs(self.expected.as_vector() - self.target.as_vector()).max())

    @property
    def distinct_gap(self) -> float:
        return self.expected.distinct / self.target.distinct - 1.0

    def to_json(self) -> dict[str, Any]:
        return {
            "tables": len(self.spec.tables),
            "batch_size": self.spec.batch_size,
            "groups": [
                {
                    "tables": g.tables,
                    "pooling_total": g.pooling_total,
                    "alpha": g.alpha,
                    "rank_offset": g.rank_offset,
                    "rows": g.rows,
                }
                for g in self.groups
            ],
            "target": _stats_json(self.target),
            "expected": _stats_json(self.expected),
            "max_share_gap": self.max_share_gap,
            "distinct_gap": self.distinct_gap,
            "groups_tried": {str(k): v for k, v in self.tried.items()},
        }


def _stats_json(stats: BatchStats) -> dict[str, Any]:
    return {
        "lookups_per_batch": stats.lookups,
        "distinct_per_batch": stats.distinct,
        "rows_share": stats.rows_share.tolist(),
        "lookups_share": stats.lookups_share.tolist(),
    }


class _Problem:
    """theta -> groups -> expected statistics -> residuals, for G groups."""

    def __init__(
        self, target: BatchStats, tables: int, batch_size: int, groups: int,
        max_rows: int = DEFAULT_MAX_ROWS,
    ) -> None:  # fmt: skip
        self.target, self.tables, self.batch_size, self.g = target, tables, batch_size, groups
        self.max_log_rows = math.log(max_rows)
        self.pooling = max(round(target.lookups / batch_size), tables)
        self.cache: dict[TableShape, tuple[np.ndarray, np.ndarray, float, float]] = {}
        self.fixed: np.ndarray | None = None  # whole tables per group, once rounded
        self.exact: dict[TableShape, tuple[np.ndarray, np.ndarray, float, float]] = {}

    def unpack(
        self, x: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        g = self.g
        w = _softmax(x[: g - 1]) if self.fixed is None else self.fixed / self.tables
        p = _softmax(x[g - 1 : 2 * g - 2])
        shape = x[2 * g - 2 :].reshape(g, PER_GROUP)
        alpha = np.clip(shape[:, 0], 0.0, MAX_ALPHA)
        log_rows = np.clip(shape[:, 1], 0.0, self.max_log_rows)
        offset = np.expm1(np.clip(shape[:, 2], 0.0, MAX_LOG_OFFSET))
        return w, p, alpha, log_rows, offset

    def shapes(self, x: np.ndarray) -> tuple[list[TableShape], np.ndarray]:
        w, p, alpha, log_rows, offset = self.unpack(x)
        w = np.maximum(w, 1e-12)  # a share the softmax underflowed (penalised, not NaN)
        extra = self.pooling - self.tables  # lookups per sample beyond one per table
        shapes = [
            TableShape(self.batch_size * (1.0 + extra * p[i] / (w[i] * self.tables)),
                       max(1, round(math.exp(log_rows[i]))),
                       float(alpha[i]), rank_offset=float(offset[i]))
            for i in range(self.g)
        ]  # fmt: skip
        return shapes, w * self.tables

    def stats(self, x: np.ndarray) -> BatchStats:
        shapes, multiplicity = self.shapes(x)
        rows, looks = np.zeros(BINS), np.zeros(BINS)
        distinct = total = 0.0
        for shape, m in zip(shapes, multiplicity, strict=True):
            counts = self.cache.get(shape)
            if counts is None:  # a Jacobian column moves one group: the others are kept
                if len(self.cache) > 4096:
                    self.cache.clear()
                counts = self.cache[shape] = table_counts(shape, SEARCH_BUCKET_RATIO)
            rows += m * counts[0]
            looks += m * counts[1]
            distinct += m * counts[2]
            total += m * counts[3]
        return BatchStats(total, distinct, rows / distinct, looks / total)

    def residuals(self, x: np.ndarray) -> np.ndarray:
        s = self.stats(x)
        w = self.unpack(x)[0]
        return np.concatenate(
            [
                s.rows_share - self.target.rows_share,
                s.lookups_share - self.target.lookups_share,
                [DISTINCT_WEIGHT * (s.distinct / self.target.distinct - 1.0)],
                # a group of less than one table cannot be written: pushed back to one
                np.maximum(0.0, 1.0 - w * self.tables),
            ]
        )

    def min_step(self, x: np.ndarray) -> np.ndarray:
        """Forward-difference steps at least one row in log rows (a table's ranks are
        whole: a smaller step moves nothing, and the solver would see no slope)."""
        out = np.zeros(len(x))
        at = 2 * self.g - 2 + 1 + PER_GROUP * np.arange(self.g)
        out[at] = np.minimum(1.5 * np.exp(-np.clip(x[at], 0.0, self.max_log_rows)), 0.5)
        return out

    def rounded_gap(self, x: np.ndarray) -> float:
        """The largest gap (shares, and D's relative error over SELECT_DISTINCT x
        SELECT_SHARE) of the spec that x rounds to: whole tables, whole pooling."""
        rows, looks = np.zeros(BINS), np.zeros(BINS)
        distinct = total = 0.0
        for g in self.groups_of(x):  # the spec's tables, alike ones computed once
            for pool in set(apportion(g.pooling_total, [1.0] * g.tables)):
                shape = TableShape(
                    float(self.batch_size * max(pool, 1)), g.rows, g.alpha, (), g.rank_offset
                )
                counts = self.exact.get(shape)
                if counts is None:
                    if len(self.exact) > 4096:
                        self.exact.clear()
                    counts = self.exact[shape] = table_counts(shape)
                m = apportion(g.pooling_total, [1.0] * g.tables).count(pool)
                rows += m * counts[0]
                looks += m * counts[1]
                distinct += m * counts[2]
                total += m * counts[3]
        e = BatchStats(total, distinct, rows / distinct, looks / total)
        share = float(np.abs(e.as_vector() - self.target.as_vector()).max())
        d = abs(e.distinct / self.target.distinct - 1.0) * SELECT_SHARE / SELECT_DISTINCT
        return max(share, d)

    def starts(self, rng: np.random.Generator, n: int) -> list[np.ndarray]:
        g = self.g
        per_table = self.target.lookups / self.tables
        seen = self.target.distinct / self.tables  # a table's rows are at least its share
        out = []
        for _ in range(n):
            groups = [
                [
                    rng.uniform(0.0, 2.0),
                    rng.uniform(math.log(seen), math.log(max(seen, per_table) * 30)),
                    rng.uniform(0.0, 6.0),
                ]
                for _ in range(g)
            ]
            out.append(np.concatenate([rng.normal(0, 1, 2 * g - 2), np.ravel(groups)]))
        return out

    def groups_of(self, x: np.ndarray) -> tuple[TableGroup, ...]:
        w, p, alpha, log_rows, offset = self.unpack(x)
        counts = (
            whole_tables(self.tables, w) if self.fixed is None else [int(c) for c in self.fixed]
        )
        # one lookup per sample per table, and the extra lookups shared as p says
        extra = apportion(self.pooling - self.tables, p.tolist())
        pooling = [c + e for c, e in zip(counts, extra, strict=True)]
        return tuple(
            TableGroup(counts[i], pooling[i], round(float(alpha[i]), 4),
                       max(1, round(math.exp(log_rows[i]))), round(float(offset[i]), 3))
            for i in range(self.g)
        )  # fmt: skip


def whole_tables(tables: int, shares: np.ndarray) -> list[int]:
    """`tables` split as `shares` say, each part at least 1: the nearest whole parts (a
    share of 1/7 of 7 tables is 1 table), then the largest remainders take or give the
    difference (`apportion` shares only what is left above the minimum)."""
    exact = np.asarray(shares, dtype=np.float64) * tables
    parts = np.maximum(np.rint(exact), 1.0)
    while parts.sum() != tables:
        more = parts.sum() < tables
        room = np.where(more, exact - parts, np.where(parts > 1, parts - exact, -np.inf))
        parts[int(np.argmax(room))] += 1.0 if more else -1.0
    return [int(v) for v in parts]


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(np.concatenate([[0.0], z]) - max(0.0, float(np.max(z, initial=0.0))))
    return e / e.sum()


def levenberg_marquardt(
    f: Callable[[np.ndarray], np.ndarray],
    x: np.ndarray,
    weights: np.ndarray | None = None,
    iterations: int = LM_ITERATIONS,
    active: np.ndarray | None = None,
    min_step: Callable[[np.ndarray], np.ndarray] | None = None,
) -> np.ndarray:
    """Minimise sum (weights * f(x))^2 from x (forward-difference Jacobian, steps at
    least `min_step(x)`) over the coordinates `active` (all by default)."""
    moving = np.arange(len(x)) if active is None else np.flatnonzero(active)
    wts = np.ones_like(f(x)) if weights is None else weights

    def wf(v: np.ndarray) -> np.ndarray:
        return wts * f(v)

    damping = 1e-2
    r = wf(x)
    cost = float(r @ r)
    for _ in range(iterations):
        jac = np.empty((len(r), len(moving)))
        floor = np.zeros(len(x)) if min_step is None else min_step(x)
        for c, i in enumerate(moving):
            h = max(1e-4 * max(1.0, abs(x[i])), float(floor[i]))
            xp = x.copy()
            xp[i] += h
            jac[:, c] = (wf(xp) - r) / h
        a = jac.T @ jac
        grad = jac.T @ r
        while True:
            step = -np.linalg.solve(a + damping * np.diag(np.diag(a) + 1e-12), grad)
            xn = x.copy()
            xn[moving] += step
            rn = wf(xn)
            cn = float(rn @ rn)
            if cn < cost:
                improved = cost - cn
                x, r, cost = xn, rn, cn
                damping = max(damping / 3.0, 1e-7)
                break
            damping *= 4.0
            if damping > 1e8:
                return x
        if improved < 1e-12 * max(cost, 1e-300):
            break
    return x


def _start_of(problem: _Problem, atoms: list[Atom]) -> np.ndarray:
    """The solver's x for groups `atoms` (tables, pooling, alpha, rows, q), the largest
    group first (its logits are the fixed 0)."""
    order = sorted(atoms, key=lambda a: -a[0] * a[1])
    n = np.array([a[0] for a in order])
    w = np.maximum(n / n.sum(), 1e-6)
    extra = np.maximum(n * (np.array([a[1] for a in order]) - 1.0), 0.0)
    p = np.maximum(extra / extra.sum(), 1e-6) if extra.sum() > 0 else w
    shape = np.array([[a[2], math.log(max(a[3], 1.0)), math.log1p(a[4])] for a in order])
    return np.concatenate([np.log(w[1:] / w[0]), np.log(p[1:] / p[0]), shape.ravel()])


def _grow(x: np.ndarray, g: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Starts for g + 1 groups from a fit of g: each group split in two (the copy a
    twentieth of its tables and lookups, its shape perturbed), so that more groups start
    no worse than fewer did."""
    w, p = x[: g - 1], x[g - 1 : 2 * g - 2]
    shape = x[2 * g - 2 :].reshape(g, PER_GROUP)
    out = []
    for i in range(g):
        wi = 0.0 if i == 0 else float(w[i - 1])  # group 0's logit is the fixed 0
        pi = 0.0 if i == 0 else float(p[i - 1])
        new_shape = shape[i] + rng.normal(0.0, [0.1, 0.5, 0.5])
        out.append(np.concatenate([w, [wi - 3.0], p, [pi - 3.0], shape.ravel(), new_shape]))
    return out


def _split(x: np.ndarray, fixed: np.ndarray, g: int, i: int) -> tuple[np.ndarray, np.ndarray]:
    """The fit x of g groups (whole tables `fixed`) as g + 1: one table of group i made a
    group of its own with the same shape and per-table lookups, so that the spec it
    writes is the same (up to the rounding of the lookups): more groups start exactly
    where fewer ended, and G groups end no worse than G - 1."""
    p = x[g - 1 : 2 * g - 2]
    shape = x[2 * g - 2 :].reshape(g, PER_GROUP)
    logits = np.concatenate([[0.0], p])
    tables = fixed.copy()
    share = 1.0 / tables[i]  # the new group's part of group i's extra lookups
    moved = logits[i] + math.log(share)
    logits[i] += math.log1p(-share)
    logits = np.append(logits, moved) - logits[0]
    tables[i] -= 1.0
    new_x = np.concatenate([np.zeros(g), logits[1:], shape.ravel(), shape[i]])
    return new_x, np.append(tables, 1.0)


def _fit_groups(
    problem: _Problem,
    seed: int,
    warm: np.ndarray | None,
    library: list[list[list[Atom]]],
    previous: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray, float]:
    """(a fit with free table shares, the warm start of G + 1; the best fit with whole
    tables, `problem.fixed` left at its tables; its rounded gap). `previous`: the best
    fit of G - 1 groups and its tables, split (`_split`) into starts of G."""
    rng = np.random.default_rng([seed, problem.g])
    active = np.ones(problem.g * (PER_GROUP + 2) - 2, dtype=bool)
    active[: problem.g - 1] = False
    # the library's mixtures with their whole tables (a mixture's table counts are what
    # its atoms' lookups were fitted with), then random and warm starts with free shares
    found: list[tuple[float, list[int], np.ndarray]] = []
    for mixture in library[problem.g - 1] if problem.g <= len(library) else []:
        x0 = _start_of(problem, mixture)
        weights = np.array([a[0] for a in sorted(mixture, key=lambda a: -a[0] * a[1])])
        tables = whole_tables(problem.tables, weights / weights.sum())
        problem.fixed = np.array(tables, dtype=np.float64)
        x = levenberg_marquardt(problem.residuals, x0, active=active, min_step=problem.min_step)
        found.append((problem.rounded_gap(x), [int(v) for v in problem.fixed], x))
    if previous is not None:
        px, pfixed = previous
        for i in range(problem.g - 1):
            if pfixed[i] > 1:
                x0, problem.fixed = _split(px, pfixed, problem.g - 1, i)
                found.append((problem.rounded_gap(x0), [int(v) for v in problem.fixed], x0))
    problem.fixed = None
    starts = problem.starts(rng, N_STARTS if warm is None else WARM_RANDOM_STARTS)
    if warm is not None:
        starts += _grow(warm, problem.g - 1, rng)
    frees: list[tuple[float, int, np.ndarray]] = []
    for k, x0 in enumerate(starts):
        x = levenberg_marquardt(problem.residuals, x0, min_step=problem.min_step)
        frees.append((problem.rounded_gap(x), k, x))
    frees.sort(key=lambda f: (f[0], f[1]))
    free = frees[0][2]
    for free_gap, _, x in frees[:FREE_KEPT]:
        found.append((free_gap, [g.tables for g in problem.groups_of(x)], x))
    # the best POLISHED candidates (by their rounded gap), each searched on: the
    # search from one is local, and the best start is not always the best end
    found.sort(key=lambda f: f[0])
    best: tuple[float, list[int], np.ndarray] | None = None
    for gap, base, x in found[:POLISHED]:
        done = _polish(problem, gap, base, x, active)
        if best is None or done[0] < best[0]:
            best = done
    assert best is not None
    problem.fixed = np.array(best[1], dtype=np.float64)
    return free, best[2], best[0]


def _polish(
    problem: _Problem, gap: float, base: list[int], x: np.ndarray, active: np.ndarray
) -> tuple[float, list[int], np.ndarray]:
    """One candidate with whole tables `base` searched on: (its rounded gap, tables, x)."""
    # whole tables per group, then the lookups and shapes again: a group's per-table
    # lookups move with its table count, and with them every count's bin. The table
    # counts are weakly told apart (3 tables of 118 lookups per sample or 2 of 178), so
    # each move of one table between two groups is tried too (up to NEIGHBOUR_GROUPS
    # groups), each by a short search, and the best searched on
    splits = [base]
    if problem.g <= NEIGHBOUR_GROUPS:
        for i, j in itertools.permutations(range(problem.g), 2):
            if base[i] > 1:
                moved = base.copy()
                moved[i] -= 1
                moved[j] += 1
                splits.append(moved)
    trials = [(gap, base, x)]
    for split in splits[1:]:
        problem.fixed = np.array(split, dtype=np.float64)
        y = levenberg_marquardt(
            problem.residuals, x, iterations=NEIGHBOUR_ITERATIONS, active=active,
            min_step=problem.min_step,
        )  # fmt: skip
        trials.append((problem.rounded_gap(y), split, y))
    gap, split, x = min(trials, key=lambda t: t[0])
    problem.fixed = np.array(split, dtype=np.float64)
    polished = levenberg_marquardt(problem.residuals, x, active=active, min_step=problem.min_step)
    polished_gap = problem.rounded_gap(polished)
    if polished_gap > gap:
        polished, polished_gap = x, gap
    polished, polished_gap = _irls(problem, polished, polished_gap, active)
    polished, polished_gap = _compass(problem, polished, polished_gap, active)
    return polished_gap, split, polished


DEFAULT_GROUPS = 8  # `--groups`: the fewest that meet SELECT_SHARE are kept
POLISHED = 2  # candidates of G groups searched on to the end
NEIGHBOUR_GROUPS = 4  # table moves between groups tried up to this many groups
NEIGHBOUR_ITERATIONS = 10
COMPASS_STEPS = (0.5, 0.1, 0.3, 0.5)  # first steps: logits, alpha, log rows, log(1 + q)
COMPASS_HALVINGS = 5


def _compass(
    problem: _Problem, x: np.ndarray, gap: float, active: np.ndarray
) -> tuple[np.ndarray, float]:
    """Compass search (Kolda, Lewis and Torczon, SIAM Review 45, 2003) on the largest gap
    of the spec x rounds to: each coordinate stepped up and down, the first improvement
    taken, the steps halved when none improves. A count's bin is a step function of
    the parameters where counts are large (a hot row's count is nearly certain), and
    there a gradient sees no slope; the rounded spec's gap is what is judged."""
    g = problem.g
    steps = np.concatenate([np.full(2 * g - 2, COMPASS_STEPS[0]), np.tile(COMPASS_STEPS[1:], g)])
    moving = np.flatnonzero(active)
    for _ in range(COMPASS_HALVINGS):
        improved = True
        while improved:
            improved = False
            for i in moving.tolist():
                for sign in (1.0, -1.0):
                    trial = x.copy()
                    trial[i] += sign * steps[i]
                    trial_gap = problem.rounded_gap(trial)
                    if trial_gap < gap:
                        x, gap, improved = trial, trial_gap, True
                        break
        steps = steps / 2.0
    return x, gap


def _irls(
    problem: _Problem, x: np.ndarray, gap: float, active: np.ndarray | None = None
) -> tuple[np.ndarray, float]:
    """Towards the largest difference (an Lp norm, p = IRLS_POWER), each candidate judged
    on the spec it writes (whole tables, whole pooling)."""
    for _ in range(IRLS_ROUNDS):
        r = np.abs(problem.residuals(x))
        weights = np.sqrt((r / max(float(r.max()), 1e-12)) ** (IRLS_POWER - 2.0) + 1e-3)
        candidate = levenberg_marquardt(problem.residuals, x, weights, 15, active, problem.min_step)
        candidate_gap = problem.rounded_gap(candidate)
        if candidate_gap < gap:
            x, gap = candidate, candidate_gap
    return x, gap


def fit_locality(
    target: BatchStats,
    *,
    tables: int,
    batch_size: int,
    max_groups: int = DEFAULT_GROUPS,
    seed: int = 0,
    name: str = "locality-fit",
    source: str = "",
    drift: float = 0.0,
    max_rows: int = DEFAULT_MAX_ROWS,
    select_share: float = SELECT_SHARE,
    allow_miss: bool = False,
) -> LocalityFit:
    """Fit a spec of `tables` tables to one batch's statistics (see the module docstring);
    ConfigError, one line, if its expected statistics miss the acceptance (`_miss`),
    unless `allow_miss`."""
    if tables < 1:
        raise ConfigError(f"--tables must be at least 1, got {tables}")
    if not 1 <= max_groups <= 8:
        raise ConfigError(f"--groups must be in [1, 8], got {max_groups}")
    if target.lookups < tables * batch_size:
        raise ConfigError(
            f"{target.lookups:,.0f} lookups per batch is less than one per sample for each of "
            f"{tables} tables of a batch of {batch_size}: give fewer --tables"
        )
    if target.lookups > MAX_POOLING * tables * batch_size:
        raise ConfigError(
            f"{target.lookups:,.0f} lookups per batch is more than {MAX_POOLING:,} per sample "
            f"for each of {tables} tables of a batch of {batch_size} (a table's pooling in a "
            "workload spec is at most 2^20): give more --tables"
        )
    tried: dict[int, float] = {}
    best: tuple[float, _Problem, np.ndarray] | None = None
    warm: np.ndarray | None = None
    previous: tuple[np.ndarray, np.ndarray] | None = None
    # the library only once one group has missed (one group from random starts is fast,
    # and a record one group meets is no shape the family cannot express)
    library: list[list[list[Atom]]] = [[]]
    relaxed = math.nan
    for g in range(1, max_groups + 1):
        if g > tables:
            break
        if g == 2 or (g == 1 and tables == 1):
            library, relaxed = _library(
                _Problem(target, tables, batch_size, 1, max_rows),
                max_groups,
                math.inf if allow_miss else RELAXED_SHARE,
            )
            if relaxed > RELAXED_SHARE and not allow_miss:
                raise ConfigError(
                    "the fit cannot express these statistics (docs/locality_fit.md): no "
                    "mixture of tables of its family (independent draws of Zipf-Mandelbrot "
                    f"laws, any number of each) comes within {relaxed:.3f} of every share"
                )
        problem = _Problem(target, tables, batch_size, g, max_rows)
        warm, x, gap = _fit_groups(problem, seed, warm, library, previous)
        assert problem.fixed is not None  # the tables of x, as _fit_groups left them
        previous = (x, problem.fixed.copy())
        tried[g] = gap
        if best is None or gap < best[0]:
            best = (gap, problem, x)
        if gap <= select_share:  # every share within it, D within SELECT_DISTINCT
            break
    assert best is not None
    _, problem, x = best
    groups = problem.groups_of(x)
    spec = spec_from_groups(groups, batch_size, name=name, source=source, seed=seed, drift=drift)
    expected = spec_expected_stats(spec)
    miss = _miss(target, expected)
    if miss and not allow_miss:
        raise ConfigError(
            f"the fit found no spec that meets these statistics (docs/locality_fit.md): its "
            f"closest ({len(groups)} groups) misses {miss}"
            + ("" if math.isnan(relaxed) else f"; a mixture of any fractions of tables of its "
               f"family, by {relaxed:.3f}")
        )  # fmt: skip
    # what is written must load: the spec's own checks (ranges, lookups per batch), as
    # every command that reads it back will make them
    spec_from_dict(spec.to_dict(), where=f"the fitted spec {name!r}")
    return LocalityFit(spec, groups, target, expected, tried)


def _miss(target: BatchStats, expected: BatchStats) -> str:
    """How `expected` misses the acceptance (every share within ACCEPT_SHARE, D within
    ACCEPT_DISTINCT), or ""."""
    gaps = np.abs(expected.as_vector() - target.as_vector())
    j = int(np.argmax(gaps))
    if gaps[j] > ACCEPT_SHARE:
        which = "rows" if j < BINS else "lookups"
        k = j % BINS
        label = f"({BIN_EDGES[k]}+" if k == BINS - 1 else f"({BIN_EDGES[k]}, {BIN_EDGES[k + 1]}]"
        return f"the {which} share of bin {label} by {gaps[j]:.3f} (more than {ACCEPT_SHARE})"
    d = expected.distinct / target.distinct - 1.0
    if abs(d) > ACCEPT_DISTINCT:
        return f"the distinct rows by {100 * d:+.1f}% (more than {100 * ACCEPT_DISTINCT:.0f}%)"
    return ""


def spec_from_groups(
    groups: tuple[TableGroup, ...],
    batch_size: int,
    *,
    name: str,
    source: str,
    seed: int = 0,
    drift: float = 0.0,
    batches: int = 10,
) -> WorkloadSpec:
    """The spec of `groups` (tables T0, T1, ...)."""
    tables = group_tables(groups)
    if drift:
        from dataclasses import replace

        tables = tuple(replace(t, drift=drift) for t in tables)
    return WorkloadSpec(
        name=name, tables=tables, batch_size=batch_size, batches=batches, seed=seed,
        source=source,
    )  # fmt: skip


def spec_expected_stats(spec: WorkloadSpec) -> BatchStats:
    """The expected statistics of one batch of `spec` (alike tables computed once)."""
    shapes: dict[TableShape, int] = {}
    for t in spec.tables:
        shape = TableShape(
            float(spec.batch_size * t.pooling), t.rows, t.alpha, t.hot_shares, t.rank_offset
        )
        shapes[shape] = shapes.get(shape, 0) + 1
    return expected_stats(list(shapes), list(shapes.values()))
