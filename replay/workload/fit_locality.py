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
3. theta minimises the squared differences of the 34 shares plus the relative error of D
   (weight DISTINCT_WEIGHT), by Levenberg-Marquardt with forward-difference Jacobians
   from N_STARTS seeded starting points (for G > 1: WARM_RANDOM_STARTS of them and the
   G - 1 fit with each of its groups split, `_grow`); then a few rounds of iteratively
   reweighted least squares (weights |r|^(p - 2), p = IRLS_POWER) pull the largest
   differences down, since the acceptance is a bound on every bin, not on their sum of
   squares. Candidates are compared on the spec they round to (whole tables, whole
   pooling factors), and a group of less than one table is penalised.
4. G is the fewest groups (1 to max_groups) whose rounded spec's expected statistics
   meet the targets (every share within SELECT_SHARE, D within SELECT_DISTINCT); if none
   does, the G with the smallest largest difference.

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

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from replay.errors import ConfigError
from replay.workload.locality_model import BatchStats, TableShape, expected_stats
from replay.workload.locality_spec import TableGroup, apportion, group_tables
from replay.workload.spec import MAX_POOLING, WorkloadSpec, spec_from_dict

DISTINCT_WEIGHT = 3.0
N_STARTS = 4
IRLS_POWER = 8.0
IRLS_ROUNDS = 4
LM_ITERATIONS = 40
SELECT_SHARE = 0.007  # model error left for the sampling noise of one generated batch
SELECT_DISTINCT = 0.01
MAX_ALPHA = 4.0
MAX_LOG_OFFSET = 12.0  # q up to e ^ 12 = 1.6e5 ranks
PER_GROUP = 3  # alpha, log rows, log(1 + q)
DEFAULT_MAX_ROWS = 100_000_000  # rows per table at most (`--max-rows`)
WARM_RANDOM_STARTS = 2  # random starts beside the warm ones from G - 1 groups


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

    def unpack(
        self, x: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        g = self.g
        w = _softmax(x[: g - 1])
        p = _softmax(x[g - 1 : 2 * g - 2])
        shape = x[2 * g - 2 :].reshape(g, PER_GROUP)
        alpha = np.clip(shape[:, 0], 0.0, MAX_ALPHA)
        log_rows = np.clip(shape[:, 1], 0.0, self.max_log_rows)
        offset = np.expm1(np.clip(shape[:, 2], 0.0, MAX_LOG_OFFSET))
        return w, p, alpha, log_rows, offset

    def shapes(self, x: np.ndarray) -> tuple[list[TableShape], np.ndarray]:
        w, p, alpha, log_rows, offset = self.unpack(x)
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
        return expected_stats(shapes, multiplicity)

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

    def rounded_gap(self, x: np.ndarray) -> float:
        """The largest gap (shares, and D's relative error over SELECT_DISTINCT x
        SELECT_SHARE) of the spec that x rounds to: whole tables, whole pooling."""
        groups = self.groups_of(x)
        spec = spec_from_groups(groups, self.batch_size, name="candidate", source="")
        e = spec_expected_stats(spec)
        share = float(np.abs(e.as_vector() - self.target.as_vector()).max())
        d = abs(e.distinct / self.target.distinct - 1.0) * SELECT_SHARE / SELECT_DISTINCT
        return max(share, d)

    def starts(self, rng: np.random.Generator, n: int) -> list[np.ndarray]:
        g = self.g
        per_table = self.target.lookups / self.tables
        out = []
        for _ in range(n):
            groups = [
                [
                    rng.uniform(0.6, 1.4),
                    rng.uniform(math.log(per_table / 30), math.log(per_table * 30)),
                    rng.uniform(0.0, 4.0),
                ]
                for _ in range(g)
            ]
            out.append(np.concatenate([rng.normal(0, 1, 2 * g - 2), np.ravel(groups)]))
        return out

    def groups_of(self, x: np.ndarray) -> tuple[TableGroup, ...]:
        w, p, alpha, log_rows, offset = self.unpack(x)
        counts = apportion(self.tables, w.tolist(), minimum=1)
        # one lookup per sample per table, and the extra lookups shared as p says
        extra = apportion(self.pooling - self.tables, p.tolist())
        pooling = [c + e for c, e in zip(counts, extra, strict=True)]
        return tuple(
            TableGroup(counts[i], pooling[i], round(float(alpha[i]), 4),
                       max(1, round(math.exp(log_rows[i]))), round(float(offset[i]), 3))
            for i in range(self.g)
        )  # fmt: skip


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(np.concatenate([[0.0], z]) - max(0.0, float(np.max(z, initial=0.0))))
    return e / e.sum()


def levenberg_marquardt(
    f: Callable[[np.ndarray], np.ndarray],
    x: np.ndarray,
    weights: np.ndarray | None = None,
    iterations: int = LM_ITERATIONS,
) -> np.ndarray:
    """Minimise sum (weights * f(x))^2 from x (forward-difference Jacobian)."""
    wts = np.ones_like(f(x)) if weights is None else weights

    def wf(v: np.ndarray) -> np.ndarray:
        return wts * f(v)

    damping = 1e-2
    r = wf(x)
    cost = float(r @ r)
    for _ in range(iterations):
        jac = np.empty((len(r), len(x)))
        for i in range(len(x)):
            h = 1e-4 * max(1.0, abs(x[i]))
            xp = x.copy()
            xp[i] += h
            jac[:, i] = (wf(xp) - r) / h
        a = jac.T @ jac
        grad = jac.T @ r
        while True:
            step = -np.linalg.solve(a + damping * np.diag(np.diag(a) + 1e-12), grad)
            xn = x + step
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


def _fit_groups(problem: _Problem, seed: int, warm: np.ndarray | None = None) -> np.ndarray:
    rng = np.random.default_rng([seed, problem.g])
    starts = problem.starts(rng, N_STARTS if warm is None else WARM_RANDOM_STARTS)
    if warm is not None:
        starts += _grow(warm, problem.g - 1, rng)
    best, best_cost = None, math.inf
    for x0 in starts:
        x = levenberg_marquardt(problem.residuals, x0)
        r = problem.residuals(x)
        if float(r @ r) < best_cost:
            best, best_cost = x, float(r @ r)
    assert best is not None
    x = best
    gap = problem.rounded_gap(x)
    for _ in range(IRLS_ROUNDS):  # towards the largest difference (an Lp norm, p = 8)
        r = np.abs(problem.residuals(x))
        weights = np.sqrt((r / max(float(r.max()), 1e-12)) ** (IRLS_POWER - 2.0) + 1e-3)
        candidate = levenberg_marquardt(problem.residuals, x, weights, iterations=15)
        candidate_gap = problem.rounded_gap(candidate)
        if candidate_gap < gap:  # judged on the spec it writes (whole tables, pooling)
            x, gap = candidate, candidate_gap
    return x


def fit_locality(
    target: BatchStats,
    *,
    tables: int,
    batch_size: int,
    max_groups: int = 5,
    seed: int = 0,
    name: str = "locality-fit",
    source: str = "",
    drift: float = 0.0,
    max_rows: int = DEFAULT_MAX_ROWS,
    select_share: float = SELECT_SHARE,
) -> LocalityFit:
    """Fit a spec of `tables` tables to one batch's statistics (see the module docstring)."""
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
    for g in range(1, max_groups + 1):
        if g > tables:
            break
        problem = _Problem(target, tables, batch_size, g, max_rows)
        x = _fit_groups(problem, seed, warm)
        warm = x
        gap = problem.rounded_gap(x)
        tried[g] = gap
        if best is None or gap < best[0]:
            best = (gap, problem, x)
        if gap <= select_share:  # every share within it, D within SELECT_DISTINCT
            break
    assert best is not None
    _, problem, x = best
    groups = problem.groups_of(x)
    spec = spec_from_groups(groups, batch_size, name=name, source=source, seed=seed, drift=drift)
    # what is written must load: the spec's own checks (ranges, lookups per batch), as
    # every command that reads it back will make them
    spec_from_dict(spec.to_dict(), where=f"the fitted spec {name!r}")
    return LocalityFit(spec, groups, target, spec_expected_stats(spec), tried)


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
