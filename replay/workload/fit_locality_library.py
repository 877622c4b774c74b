"""The locality fit's library of single tables (`replay.workload.fit_locality`, step 3).

Each table of a grid over (pooling, alpha, rows, rank offset) has expected batch counts
(`replay.workload.locality_model`) that are a column of a linear problem: a mixture of
tables with weights w >= 0 (tables, fractional) has statistics linear in w. Non-negative
least squares over all of them (Lawson and Hanson, Solving Least Squares Problems,
1974, chapter 23) is a relaxation of the fit (any tables, any fractions of them): a
record it misses by far is a shape no spec of the family reaches. Mixtures of a few
columns of at least one table each, chosen by forward selection and swaps on the
largest gap, start the fit's search of that many groups. docs/locality_fit.md.
"""

from __future__ import annotations

import math
from typing import Protocol

import numpy as np

from replay.workload.locality_model import BINS, BatchStats, TableShape, table_counts


class _Target(Protocol):
    """What the library reads of the fit's problem (`fit_locality._Problem`)."""

    target: BatchStats
    tables: int
    batch_size: int
    pooling: int  # lookups per sample, all tables
    max_log_rows: float


DISTINCT_WEIGHT = 3.0  # D's relative error against a share, in the fit's objective
IRLS_POWER = 8.0
IRLS_ROUNDS = 4
# the library of single tables whose non-negative mixture starts the search (`_library`)
LIBRARY_ALPHAS = (0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0)
LIBRARY_OFFSETS = (0.0, 3.0, 30.0, 300.0, 3000.0)
LIBRARY_ROWS_STEP = 10.0**0.5  # rows 1, 3.2, 10, ... up to LIBRARY_ROWS_REACH x lookups
LIBRARY_ROWS_REACH = 100.0
LIBRARY_STARTS = 3  # the best mixtures of G atoms that start the search of G groups
# mixtures of up to this many atoms (each candidate's NNLS is solved on all 2^G subsets:
# 6 s of CPU up to 5 on a Meta record, 86 s more up to 8); more groups start from fewer
LIBRARY_GROUPS = 5
CONSTRAINT_WEIGHT = 30.0  # tables and lookups of the mixture, nearly exact


# an atom of the library: (tables, per-table pooling, alpha, rows, rank offset)
Atom = tuple[float, float, float, float, float]


def _library(
    problem: _Target, max_groups: int, give_up: float = math.inf
) -> tuple[list[list[list[Atom]]], float]:
    """The non-negative mixture of single tables (a library over pooling, alpha, rows
    and rank offset) closest to the target: each table's expected counts are a column,
    the mixture's weights are tables (fractional), so its statistics are linear in them
    (shares over the target's D and L, D's relative error, and the tables and lookups
    nearly exact). Least squares under w >= 0 (`nnls`), reweighted a few times towards
    the largest gap (the acceptance is a bound on every bin): a relaxation (any tables,
    any fractions of them), so a gap far above the acceptance (`give_up`: then no
    mixtures are chosen) is a shape no spec of the family reaches. Then, for G = 1 to
    max_groups, mixtures of G atoms of at least one table each, by forward selection
    and swaps on the largest gap (the LIBRARY_STARTS best per G), which start the
    search of G groups. Returns (those mixtures per G, the relaxation's gap)."""
    t, b, tables = problem.target, problem.batch_size, problem.tables
    top = problem.pooling - tables + 1  # the most one table may hold
    # a count's bin moves with its table's lookups: poolings a factor 2^(1/3) apart
    poolings = np.unique(np.rint(np.geomspace(1, top, 1 + math.ceil(3 * math.log2(top)))))
    if tables == 1:  # one table holds every lookup
        poolings = np.array([float(top)])
    atoms: list[tuple[float, float, float, float]] = []  # (pooling, alpha, rows, q)
    columns = []
    for pool in poolings.tolist():
        lookups = b * pool
        reach = min(math.exp(problem.max_log_rows), LIBRARY_ROWS_REACH * lookups)
        rows_grid = [1.0]
        while rows_grid[-1] * LIBRARY_ROWS_STEP <= reach:
            rows_grid.append(rows_grid[-1] * LIBRARY_ROWS_STEP)
        for rows in rows_grid:
            for alpha in LIBRARY_ALPHAS if rows > 1 else (0.0,):
                for q in LIBRARY_OFFSETS if alpha > 0 else (0.0,):
                    if q > rows:
                        continue
                    r, lk, d, n = table_counts(
                        TableShape(lookups, int(rows), alpha, rank_offset=q), 1.05
                    )
                    atoms.append((pool, alpha, rows, q))
                    columns.append(np.concatenate([
                        r / t.distinct, lk / t.lookups, [DISTINCT_WEIGHT * d / t.distinct],
                        [CONSTRAINT_WEIGHT / tables, CONSTRAINT_WEIGHT * n / t.lookups],
                    ]))  # fmt: skip
    a = np.array(columns).T
    goal = np.concatenate([t.rows_share, t.lookups_share, [DISTINCT_WEIGHT],
                           [CONSTRAINT_WEIGHT, CONSTRAINT_WEIGHT]])  # fmt: skip
    shares = 2 * BINS + 1
    weights = np.ones(len(goal))
    best: tuple[float, np.ndarray] | None = None
    for _ in range(IRLS_ROUNDS + 1):
        w = nnls(a * weights[:, None], goal * weights)
        gap = float(np.abs(a[: 2 * BINS] @ w - goal[: 2 * BINS]).max())
        if best is None or gap < best[0]:
            best = (gap, w)
        r = np.abs(a[:shares] @ w - goal[:shares])
        weights[:shares] = np.sqrt((r / max(float(r.max()), 1e-12)) ** (IRLS_POWER - 2.0) + 1e-3)
    assert best is not None
    gap, w = best
    if gap > give_up:
        return [], gap
    # forward selection: the G-atom mixtures, each the G - 1 one and the atom whose
    # addition lowers the (reweighted) misfit most, their weights refitted
    aw, bw = a * weights[:, None], goal * weights
    scale = np.concatenate([np.ones(2 * BINS), [3.0 * DISTINCT_WEIGHT],
                            [CONSTRAINT_WEIGHT, CONSTRAINT_WEIGHT]])  # fmt: skip

    def costs(fixed: list[int], cand: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # each candidate beside the `fixed` atoms: at least one table each (w = 1 + v,
        # v >= 0; a fraction of a table is not a table, its rows' counts are a whole
        # table's), judged on the largest gap, as the acceptance is (D's over 3; the
        # tables and lookups as shares). Returns (gaps, weights [fixed..., candidate]).
        return _mixture_costs(aw, bw, a, goal, scale, fixed, cand)

    # forward selection: the G-atom mixture is the G - 1 one and the atom whose addition
    # lowers the largest gap most, then each of its atoms swapped for the one that
    # lowers it most (two sweeps: greedy's first picks are not the best pair's)
    support: list[int] = []
    mixtures = []
    n = a.shape[1]
    every = np.arange(n)
    for _ in range(min(max_groups, tables, n, LIBRARY_GROUPS)):
        cand = np.setdiff1d(every, support)
        c, _ = costs(support, cand)
        least = float(c.min())
        support.append(int(cand[int(np.argmin(c))]))
        for _sweep in range(2 if len(support) > 1 else 0):
            for pos in range(len(support)):
                others = support[:pos] + support[pos + 1 :]
                cand = np.setdiff1d(every, support)
                c, _ = costs(others, cand)
                if len(c) and float(c.min()) < least:
                    least = float(c.min())
                    support[pos] = int(cand[int(np.argmin(c))])
        # the best few for the position added last, each a start of the search
        cand = np.setdiff1d(every, support[:-1])
        c, w = costs(support[:-1], cand)
        found = []
        for k in np.argsort(c, kind="stable")[:LIBRARY_STARTS].tolist():
            cols = [*support[:-1], int(cand[k])]
            found.append([(float(w[k, i]), *atoms[col]) for i, col in enumerate(cols)])
        mixtures.append(found)
    return mixtures, gap


def _mixture_costs(
    aw: np.ndarray, bw: np.ndarray, a: np.ndarray, goal: np.ndarray, scale: np.ndarray,
    fixed: list[int], cand: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """For each candidate column j: min |C v - (bw - C 1)| over v >= 0, C = aw's columns
    `fixed` and j (weights w = 1 + v), and the largest of |a's columns w - goal| / scale.
    All candidates at once: the G x G normal equations of each, solved on every subset
    of the G columns; the non-negative least squares solution is the feasible subset
    solution of least cost (its support's unconstrained solution is positive, and every
    other feasible one is a feasible point). Returns (gaps, weights [fixed..., j])."""
    k = len(fixed)
    g = k + 1
    cf, cc = aw[:, fixed], aw[:, cand]
    y0 = bw - cf.sum(axis=1)  # the target less one table of each fixed column
    gram = np.empty((len(cand), g, g))
    gram[:, :k, :k] = cf.T @ cf
    gram[:, :k, k] = gram[:, k, :k] = (cf.T @ cc).T
    gram[:, k, k] = np.einsum("ij,ij->j", cc, cc)
    rhs = np.empty((len(cand), g))
    rhs[:, :k] = cf.T @ y0 - gram[:, :k, k]  # y = y0 - the candidate's one table
    rhs[:, k] = cc.T @ y0 - gram[:, k, k]
    ridge = 1e-12 * np.maximum(np.einsum("nii->n", gram), 1e-300)
    v = np.zeros((len(cand), g))
    best = np.zeros(len(cand))  # 0.5 v'Gv - v'rhs at v = 0
    for mask in range(1, 2**g):
        idx = np.array([i for i in range(g) if mask >> i & 1])
        sub = gram[:, idx][:, :, idx] + ridge[:, None, None] * np.eye(len(idx))
        sol = np.linalg.solve(sub, rhs[:, idx, None])[:, :, 0]
        obj = -0.5 * np.einsum("ni,ni->n", sol, rhs[:, idx])
        take = (sol > 0).all(axis=1) & (obj < best)
        best = np.where(take, obj, best)
        v[take] = 0.0
        v[np.ix_(np.flatnonzero(take), idx)] = sol[take]
    w = 1.0 + v
    resid = a[:, fixed] @ w[:, :k].T + a[:, cand] * w[:, k] - goal[:, None]
    return (np.abs(resid) / scale[:, None]).max(axis=0), w


def nnls(a: np.ndarray, b: np.ndarray, iterations: int = 500) -> np.ndarray:
    """min |a x - b| over x >= 0 (Lawson and Hanson, Solving Least Squares Problems,
    1974, chapter 23: the active set method)."""
    n = a.shape[1]
    passive = np.zeros(n, dtype=bool)
    x = np.zeros(n)
    tol = 1e-10 * max(1.0, float(np.abs(a).max()))
    for _ in range(iterations):
        grad = a.T @ (b - a @ x)
        grad[passive] = -np.inf
        j = int(np.argmax(grad))
        if grad[j] <= tol:
            break
        passive[j] = True
        for _ in range(iterations):
            idx = np.flatnonzero(passive)
            z = np.zeros(n)
            z[idx] = np.linalg.lstsq(a[:, idx], b, rcond=None)[0]
            if (z[idx] > 0).all():
                x = z
                break
            neg = idx[z[idx] <= 0]
            step = float(np.min(x[neg] / np.maximum(x[neg] - z[neg], 1e-300)))
            x = x + step * (z - x)
            passive &= x > 1e-12
            x[~passive] = 0.0
            if not passive.any():
                break
    return x
