"""`replay fit`: estimate a workload spec from a trace, so synthetic traces look like it.

The model fitted is the generator's own (DESIGN section 4, `replay.workload.sampler`):
per table, a fresh lookup draws a popularity rank k in [1, rows]: the hot ranks 1..j
(j <= 3, `hot_shares`) with their own shares s_1..s_j, the others with p(k) ~ k^-alpha
scaled to 1 - sum s; the ranking moves `drift` x rows places per batch, and with
probability `reuse` a lookup repeats a lookup of the batch before (reuse window 1, drift
period 1: the fit does not estimate those two, and says so in the spec). Per table it
estimates:

- **rows**: by default (`--rows auto`) the declared rows where the table's fit at them
  converges, else the fitted rows of `extrapolate` where those converge or lower the
  misfit by more than FLAT_MARGIN (`_auto_rows`: a dictionary's declared rows are only
  what the sample saw, and a hash cap's may be far above the table's values; the
  second fit runs only where a table missed). Or the table's declared rows (`--rows
  declared`: the manifest's cardinality, e.g. the hash cap of `replay ingest
  --max-ind-range`), the rows the trace touched (`observed`), or a stated extrapolation
  (`extrapolate`): fitted with alpha,
  reuse and drift (below) in log rows, from Chao's bias-corrected species estimator
  (`chao1`, Chao 1984: a lower bound of the richness, never below the rows touched) up
  to the declared rows where they are above it (a hash cap, `--max-ind-range`), else
  lookups^2 (beyond that a sample of n lookups expects fewer than one coincidence among
  the rows it has not seen: it cannot tell more rows apart). The rows of a table are not
  known from a sample, and the rows-touched statistics (final and curve) are what tell
  them: where the tail below the hot values is flatter than the one power law, Chao1's
  rows leave the fitted trace touching 15-20% fewer rows than the sample (Criteo's C1,
  C11, C20 in batches of 50). A simulation at other rows draws other ranks (the
  sampler's and the permutation's bounds change), so common random numbers do not steady
  the finite differences in log rows: a grid over the bracket gives the solver its start.
  A table whose Chao1 is its rows touched (no row seen once), of one row, or of one
  batch keeps Chao1's rows.
- **hot_shares**, first: how many of the most frequent rows stand out from the power law
  of the rows below them, by likelihood-ratio tests at level 0.001 (`fit_stats.
  hot_values_test`, whose docstring derives them: rank j's point mass against the
  power law over ranks >= j, ranks 1..j-1 free, the boundary law 1/2 chi2_0 + 1/2
  chi2_1; the nested models M_0 < M_1 < M_2 < M_3 tested from the largest down,
  Anderson 1962). Where j rows stand out, the MLE of their shares is their observed
  shares c_i / n, and the fit keeps them: every simulation and the fitted spec give
  ranks 1..j exactly those shares, whatever alpha the fit settles on, and the exponent
  below is the rest's (ranks j + 1..rows). Elsewhere there are none.
- **alpha_mle**: the maximum-likelihood exponent of a discrete bounded power law over
  ranks 1..rows fitted to the observed frequencies ranked in decreasing order
  (`power_law_mle`): the classic estimator, biased by rows seen only a few times, by
  reuse and by drift.
- **alpha, reuse, drift**: by indirect inference (Gouriéroux, Monfort & Renault, J.
  Applied Econometrics 8, 1993): statistics computed identically on the trace and on
  synthetic traces of the same shape (tables, rows, lookups per batch, batches, from the
  generator itself) are matched by moving the parameters. Whatever bias a statistic has,
  it has on both sides. The statistics (`STATISTICS`): the mean log-rank within windows
  (alpha's), the consecutive-batch reuse (reuse's), the rows touched by the whole sample
  and the rows-touched curve (drift's), and the lookup-weighted overlaps with earlier
  batches (which tell reuse from drift).
  A start comes from bisecting each parameter alone (alpha on the log-rank, reuse on the
  consecutive reuse, drift on the rows touched), then a grid over drift's whole bracket
  (a drift that moves the hot rows is a plateau no local step leaves), and under `--rows
  extrapolate` a grid over log rows (see rows). Then Levenberg-Marquardt steps on all
  three (four with `--rows extrapolate`) at once, with a forward-difference Jacobian
  (every table in the same simulations: tables draw independent streams), each
  statistic weighted by its noise (the spread over `_NOISE_SEEDS` traces at the start).
  A simulation averages the statistics of up to `MAX_REPEATS` traces of the sample's
  shape (enough for `SIMULATED_LOOKUPS` lookups), so that a small sample's fit does not
  carry as much simulation noise as sampling noise; all simulations share their seeds
  (common random numbers), offset from the spec's seed so that `--check` sees an
  independent trace.
- **alpha_ci**: the delta method of indirect inference: the statistics' covariance over
  `BOOTSTRAP_REPLICATES` single traces with other seeds at the fitted parameters, times
  1 + 1/repeats (the trace's statistics are as noisy as one trace, the simulation's
  average 1/repeats of that) and mapped through the noise-weighted pseudo-inverse
  Jacobian (the sandwich of the weighted least squares the solver runs); 95% =
  alpha +/- 1.96 se.
- **notes**: a table is **too small** when it has fewer than `MIN_FIT_LOOKUPS` lookups
  or the interval is wider than `MAX_CI_WIDTH`; **too flat** when the uniform law (alpha
  0, its own reuse, Chao1's rows under `--rows extrapolate`) matches the statistics
  about as well as the fit (its misfit at most `FLAT_MARGIN` above; the spec then
  generates that uniform law) or the interval reaches 0; **not converged** when its
  statistics stay more than `MAX_MISFIT` (squared noise units, the noise pooled over the
  start's traces and the replicates, 22 degrees of freedom; for the rows-touched
  statistics at least a count's rounding error, `_TOUCHED`) from the sample's. `alpha`
  is then null in the report, while the spec keeps the point estimate as the best guess
  to generate with.

Known limits: the 10% agreement `--check` shows needs a sample whose own statistics
are steadier than that: on a table of 256 lookups per batch whose few hot rows drift,
two 50-batch halves of one trace differ by about 7% in consecutive reuse. The 95%
interval is too narrow: on 150 synthetic tables of known alpha it held the truth 126
times (84%); the delta method leaves out the solver's own error (about 0.01 in alpha).

Shape. The fit reads at most `max_lookups` lookups (a prefix of whole batches); a
trailing batch shorter than the others (the last batch of `replay ingest`) is left out,
and lookups per batch per table are taken as constant (their mean, rounded; the
diagnostics say when they vary).

`replay.workload.fit_stats` holds the statistics (one kernel for the trace and every
simulation, each statistic's reasons) and the power law's estimators with their
derivations and sources; `replay.workload.fit_check` the check (`replay fit --check`);
`replay.workload.fit_toml` the spec file with the diagnostics as comments;
`replay.workload.fit_sample` the sample read from the trace.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from replay.errors import ConfigError
from replay.trace.reader import Trace
from replay.workload.fit_sample import Sample, read_sample
from replay.workload.fit_stats import (
    HOT_CRITICAL,
    STATISTICS,
    WINDOW_LOOKUPS,
    _lags,
    chao1,
    hot_values_test,
    power_law_mle,
    table_statistics,
)
from replay.workload.generator import CompiledWorkload
from replay.workload.spec import MAX_ROWS, TableSpec, UpdateRule, WorkloadSpec, spec_from_dict

ROWS_MODES = ("auto", "declared", "observed", "extrapolate")
DEFAULT_MAX_LOOKUPS = 1 << 24
LM_STEPS = 15
_LM_TRIES = 4  # damped retries within a step before the Jacobian is taken again
_LM_DAMPING = 1e-2
_LM_DAMPING_MAX = 1e4
DRIFT_GRID = 9
ROWS_GRID = 13
_NOISE_SEEDS = 8
# the fit's simulations draw from seed + this, the spec (and --check) from the seed:
# the check is then a trace the fit never saw
_SIMULATION_SEED_OFFSET = 1 << 20
# each simulation averages this many traces of the sample's shape (seeds a stride apart),
# enough for about SIMULATED_LOOKUPS lookups: a small sample's fit would otherwise
# carry as much simulation noise as sampling noise
SIMULATED_LOOKUPS = 1 << 19
MAX_REPEATS = 4
_REPEAT_SEED_STRIDE = 1 << 16
ALPHA_MAX = 4.0
REUSE_MAX = 0.95
BOOTSTRAP_REPLICATES = 16
MIN_FIT_LOOKUPS = 100
FLAT_MARGIN = 6.63  # chi-square, 1 degree of freedom, 99%
MAX_CI_WIDTH = 1.0
# a fit whose statistics stay further than this (sum of squared misfits in noise units,
# over the 8 statistics less 3 parameters: a chi-square(5) 99.9% point is 20.5, and the
# noise is itself estimated from 22 degrees of freedom, the start's traces and the
# replicates pooled: with 10, as before issue 28, the misfit of one table of 1,000 Criteo
# lookups moved from 42 to 118 with the seed alone) did not converge. `--rows
# extrapolate` fits a fourth parameter (log rows): 4 degrees of freedom there, whose
# chi-square 99.9% point is 18.5; the threshold is the same for every mode
MAX_MISFIT = 25.0
FULL_STEPS = 11  # bisection steps over a whole bracket
ALPHA, REUSE, DRIFT, ROWS = range(4)
_PARAM_NAMES = ("alpha", "reuse", "drift", "rows")
# Levenberg-Marquardt: forward-difference steps, largest steps and convergence, in the
# solver's coordinates (alpha, reuse, log10 drift, log rows)
_FD_STEP = np.array([0.05, 0.03, 0.3, 0.2])
_MAX_STEP = np.array([0.3, 0.15, 1.0, 0.7])
_TOLERANCE = np.array([0.002, 0.002, 0.02, 0.02])
_SCALE_FLOOR = 1e-3  # statistics' noise estimates are at least this
# the rows-touched statistics are logs of counts: their noise is at least the rounding
# error of a count, 1 / sqrt(12) rows (Sheppard's correction for grouping, Biometrika
# 1898), i.e. 1 / (sqrt(12) D) in log at D rows touched. On a small table every
# simulation can touch every row, the spread is then 0, and a sample one row short
# would count (0.07 / 0.001)^2 = 4,400 noise units (Criteo's C25, 13 of 14 rows)
_TOUCHED = [STATISTICS.index("touched_log_final"), STATISTICS.index("touched_log_mean")]


# -- the fit ---------------------------------------------------------------------------


@dataclass(frozen=True)
class TableFit:
    """One table's fitted parameters and the diagnostics behind them."""

    name: str
    rows: int
    rows_source: str  # [auto: ]declared | observed | extrapolated (chao1 | fitted, ...)
    declared_rows: int
    lookups: int
    distinct_rows: int
    pooling: int
    alpha: float | None  # None: too small or too flat to fit (see alpha_note)
    alpha_ci: tuple[float, float] | None
    alpha_note: str
    alpha_spec: float  # what the spec generates with (the point estimate, also when null)
    alpha_mle: float | None  # the plain MLE over the ranked frequencies
    alpha_mle_se: float | None
    reuse: float
    drift: float
    observed: tuple[float, ...]  # the matched statistics (STATISTICS)
    fitted: tuple[float, ...]  # the same on the fitted spec's synthetic trace
    misfit: float  # sum of squared (fitted - observed) / simulation noise
    # the hot values (`fit_stats.hot_values_test`): per rank tested (1, 2, 3), the j-th
    # most frequent row's observed share and the test's statistic LR_j; the spec's
    # hot_shares are the observed shares of the ranks kept (none where none stands out)
    hot_tests: tuple[tuple[float, float], ...] = ()
    hot_shares: tuple[float, ...] = ()

    @property
    def top_share(self) -> float:
        """The most frequent row's observed share of the table's lookups."""
        return self.hot_tests[0][0] if self.hot_tests else 0.0

    @property
    def hot_stands_out(self) -> bool:
        return bool(self.hot_shares)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "rows": self.rows,
            "rows_source": self.rows_source,
            "declared_rows": self.declared_rows,
            "lookups": self.lookups,
            "distinct_rows": self.distinct_rows,
            "pooling": self.pooling,
            "alpha": self.alpha,
            "alpha_ci": list(self.alpha_ci) if self.alpha_ci is not None else None,
            "alpha_note": self.alpha_note,
            "alpha_spec": self.alpha_spec,
            "alpha_mle": self.alpha_mle,
            "alpha_mle_se": self.alpha_mle_se,
            "hot_shares": list(self.hot_shares),
            "hot_values": {
                "critical": HOT_CRITICAL,
                "kept": len(self.hot_shares),
                "ranks": [
                    {"rank": i + 1, "share": share, "lr": lr, "stands_out": lr > HOT_CRITICAL}
                    for i, (share, lr) in enumerate(self.hot_tests)
                ],
            },
            "reuse": self.reuse,
            "drift": self.drift,
            "misfit": self.misfit,
            "converged": self.misfit <= MAX_MISFIT,
            "matched": {
                name: {"observed": o, "fitted": f}
                for name, o, f in zip(STATISTICS, self.observed, self.fitted, strict=True)
            },
        }


@dataclass(frozen=True)
class FitResult:
    """A fitted workload spec and its diagnostics."""

    trace: str
    spec: WorkloadSpec
    tables: tuple[TableFit, ...]
    batches: int  # batches the fit used
    first_batch: int
    max_lookups: int
    lookups: int
    steps: int  # Levenberg-Marquardt steps taken
    simulations: int
    notes: tuple[str, ...]

    @property
    def reuse(self) -> float:
        """Lookup-weighted mean of the tables' reuse."""
        return _weighted([t.reuse for t in self.tables], [t.lookups for t in self.tables])

    @property
    def drift(self) -> float:
        """Lookup-weighted mean of the tables' drift."""
        return _weighted([t.drift for t in self.tables], [t.lookups for t in self.tables])

    def to_dict(self) -> dict[str, Any]:
        return {
            "trace": self.trace,
            "batches": self.batches,
            "first_batch": self.first_batch,
            "batch_size": self.spec.batch_size,
            "lookups": self.lookups,
            "reuse": self.reuse,
            "drift": self.drift,
            "reuse_window_batches": 1,
            "drift_period_batches": 1,
            "steps": self.steps,
            "simulations": self.simulations,
            "notes": list(self.notes),
            "tables": [t.to_dict() for t in self.tables],
        }


def _misfit(stats: np.ndarray, observed: np.ndarray, scale: np.ndarray) -> np.ndarray:
    return (((stats - observed) / scale) ** 2).sum(axis=1)


def _weighted(values: Sequence[float], weights: Sequence[int]) -> float:
    total = sum(weights)
    return float(sum(v * w for v, w in zip(values, weights, strict=True)) / total) if total else 0.0


class _Simulator:
    """Synthetic traces of the sample's shape, and their statistics per table."""

    def __init__(
        self,
        sample: Sample,
        windows: np.ndarray,
        repeats: int,
        hot_shares: list[tuple[float, ...]],
    ) -> None:
        self.sample = sample
        self.windows = windows
        self.repeats = repeats
        self.hot_shares = hot_shares  # per table: the hot ranks' shares, kept at any alpha
        self.count = 0

    def spec(self, params: np.ndarray, seed: int, batches: int | None = None) -> WorkloadSpec:
        s = self.sample
        tables = tuple(
            TableSpec(
                name=f"t{t}",
                rows=int(params[t, ROWS]),
                alpha=float(params[t, ALPHA]),
                hot_shares=self.hot_shares[t],
                reuse=float(params[t, REUSE]),
                drift=float(params[t, DRIFT]),
                pooling=int(s.pooling[t]),
            )
            for t in range(len(params))
        )
        return WorkloadSpec(
            name="fit", tables=tables, batch_size=s.batch_size,
            batches=batches or s.num_batches, seed=seed,
        )  # fmt: skip

    def lookups(self, params: np.ndarray, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per table (batch, row) of a synthetic trace with the sample's shape."""
        s = self.sample
        compiled = CompiledWorkload.from_spec(self.spec(params, seed))
        _, _, row = compiled.lookups(0, s.num_batches)
        per_batch = int(s.lookups_per_batch.sum())
        grid = row.reshape(s.num_batches, per_batch)
        out = []
        offset = 0
        for n_t in s.lookups_per_batch.tolist():
            rows_t = grid[:, offset : offset + n_t].ravel()
            out.append((np.repeat(np.arange(s.num_batches, dtype=np.int64), n_t), rows_t))
            offset += n_t
        return out

    def statistics(self, params: np.ndarray, seed: int) -> np.ndarray:
        """The statistics averaged over `repeats` traces (seeds seed, seed + stride, ...):
        the fit carries a simulation's noise as well as the sample's, 1 / repeats of it."""
        return np.mean(
            [self.single(params, seed + j * _REPEAT_SEED_STRIDE) for j in range(self.repeats)],
            axis=0,
        )

    def single(self, params: np.ndarray, seed: int) -> np.ndarray:
        """Per table, the statistics of one synthetic trace of the sample's shape."""
        self.count += 1
        return np.array(
            [
                table_statistics(
                    b, r, int(params[t, ROWS]), self.sample.num_batches, int(self.windows[t])
                )
                for t, (b, r) in enumerate(self.lookups(params, seed))
            ]
        )


def fit_trace(
    trace: Trace,
    *,
    rows_mode: str = "auto",
    max_lookups: int = DEFAULT_MAX_LOOKUPS,
    seed: int = 0,
    batch_range: tuple[int, int] | None = None,
    progress: Callable[[str], None] | None = None,
) -> FitResult:
    """Fit every table of `trace` (see the module docstring); pure: no output written.

    `batch_range` = (first, stop) fits those batches only (e.g. one half, to check the
    fit on the other). `rows_mode` "auto" picks the rows per table (`_auto_rows`)."""
    if rows_mode not in ROWS_MODES:
        raise ConfigError(f"--rows: {rows_mode!r} is not one of {', '.join(ROWS_MODES)}")
    if max_lookups < 1:
        raise ConfigError(f"--max-lookups: {max_lookups} must be at least 1")
    if rows_mode != "auto":
        return _fit_trace(trace, rows_mode, max_lookups, seed, batch_range, progress)
    declared = _fit_trace(trace, "declared", max_lookups, seed, batch_range, progress)
    if all(t.misfit <= MAX_MISFIT for t in declared.tables):
        return declared
    say = progress or (lambda _: None)
    say("the declared rows miss: the rows fitted too (--rows extrapolate)")
    fitted = _fit_trace(trace, "extrapolate", max_lookups, seed, batch_range, progress)
    return _auto_rows(declared, fitted)


def _auto_rows(declared: FitResult, fitted: FitResult) -> FitResult:
    """Per table, the declared rows where their fit converges, else the fitted rows
    (`--rows extrapolate`) where those converge or lower the misfit by more than
    FLAT_MARGIN (a chi-square(1) 99% point: one parameter more); `rows_source` says
    which and why. Tables are fitted independently (own streams, own solver state), so
    each table's pick is its own."""
    tables, specs = [], []
    for d, f, ds, fs in zip(
        declared.tables, fitted.tables, declared.spec.tables, fitted.spec.tables, strict=True
    ):
        if d.misfit > MAX_MISFIT and (f.misfit <= MAX_MISFIT or f.misfit + FLAT_MARGIN < d.misfit):
            why = f"the declared {d.declared_rows:,} rows missed by {d.misfit:.0f} noise units"
            tables.append(replace(f, rows_source=f"auto: {f.rows_source}; {why}"))
            specs.append(fs)
        else:
            tables.append(replace(d, rows_source="auto: declared"))
            specs.append(ds)
    return replace(
        declared,
        spec=replace(declared.spec, tables=tuple(specs)),
        tables=tuple(tables),
        steps=declared.steps + fitted.steps,
        simulations=declared.simulations + fitted.simulations,
    )


def _fit_trace(
    trace: Trace,
    rows_mode: str,
    max_lookups: int,
    seed: int,
    batch_range: tuple[int, int] | None,
    progress: Callable[[str], None] | None,
) -> FitResult:
    say = progress or (lambda _: None)
    sample = read_sample(trace, max_lookups, batch_range)
    num_tables = len(sample.names)
    counts = [np.unique(r, return_counts=True)[1] for _, r in sample.per_table]
    distinct = np.array([len(c) for c in counts], dtype=np.int64)
    rows = sample.declared_rows.copy()
    rows_source = ["declared"] * num_tables
    if rows_mode == "observed":
        rows = np.maximum(distinct, 1)
        rows_source = ["observed"] * num_tables
    elif rows_mode == "extrapolate":
        rows = np.array([min(max(chao1(c), 1), MAX_ROWS) for c in counts], dtype=np.int64)
        rows_source = ["extrapolated (chao1)"] * num_tables
    lookups = sample.lookups_per_batch * sample.num_batches
    # --rows extrapolate fits log(rows) with the others, from Chao1 (a lower bound) up to
    # the declared rows where they are above it (a hash cap), else lookups^2 (module
    # docstring); a table of one row, or whose Chao1 is the rows it touched, keeps it
    fit_rows = np.zeros(num_tables, dtype=bool)
    rows_cap = rows.astype(np.float64)
    if rows_mode == "extrapolate":
        chao = rows.copy()
        identifiable = np.minimum(lookups.astype(np.float64) ** 2, float(MAX_ROWS))
        rows_cap = np.where(
            sample.declared_rows > chao, sample.declared_rows.astype(np.float64), identifiable
        )
        rows_cap = np.maximum(rows_cap, chao)
        fit_rows = (chao > 1) & (chao > distinct) & (sample.num_batches > 1)
        rows_source = [
            f"extrapolated (fitted, at least chao1 {int(c):,})" if f else "extrapolated (chao1)"
            for c, f in zip(chao, fit_rows, strict=True)
        ]
    windows = np.clip(-(-WINDOW_LOOKUPS // sample.lookups_per_batch), 1, sample.num_batches)
    observed = np.array(
        [
            table_statistics(b, r, int(rows[t]), sample.num_batches, int(windows[t]))
            for t, (b, r) in enumerate(sample.per_table)
        ]
    )
    mle = [power_law_mle(c, int(rows[t])) for t, c in enumerate(counts)]
    # the hot values first (module docstring): the ranks that stand out keep their
    # observed shares, and the exponent starts from the rest's MLE
    hot = [hot_values_test(c, int(rows[t])) for t, c in enumerate(counts)]
    start = [
        h.alpha_rest if h.stands_out and h.alpha_rest is not None else a
        for h, (a, _) in zip(hot, mle, strict=True)
    ]
    params = np.zeros((num_tables, 4))
    start_rows = rows.copy()
    params[:, ROWS] = rows
    params[:, ALPHA] = [min(a, ALPHA_MAX) if a is not None else 1.0 for a in start]
    # rows == 1 has nothing to fit; a single batch shows no reuse or drift
    fit_alpha = rows > 1
    fit_time = np.full(num_tables, sample.num_batches > 1)
    repeats = int(np.clip(-(-SIMULATED_LOOKUPS // max(int(lookups.sum()), 1)), 1, MAX_REPEATS))
    sim = _Simulator(sample, windows, repeats, [h.shares for h in hot])
    spec_seed, seed = seed, seed + _SIMULATION_SEED_OFFSET
    drift_floor = np.log10(0.25 / (rows.astype(np.float64) * sample.num_batches))
    # beyond one whole table over the trace the ranking wraps round and old hot rows
    # come back: the touched curve stops rising with drift
    drift_ceiling = math.log10(1.0 / sample.num_batches) if sample.num_batches > 1 else 0.0

    def to_param(k: int, x: np.ndarray) -> np.ndarray:
        if k == DRIFT:  # bisected in log10; the bracket's floor (< 1 place moved) is 0
            return np.where(x <= drift_floor + 1e-9, 0.0, 10.0**x)
        if k == ROWS:  # natural log; whole rows
            return np.clip(np.rint(np.exp(x)), 1.0, float(MAX_ROWS))
        return x

    def from_param(k: int, p: np.ndarray) -> np.ndarray:
        if k == DRIFT:
            return np.where(p > 0, np.log10(np.maximum(p, 1e-300)), drift_floor)
        if k == ROWS:
            return np.log(np.maximum(p, 1.0))
        return p

    def full_bracket(k: int) -> tuple[np.ndarray, np.ndarray]:
        if k == ALPHA:
            return np.zeros(num_tables), np.full(num_tables, ALPHA_MAX)
        if k == REUSE:
            return np.zeros(num_tables), np.full(num_tables, REUSE_MAX)
        if k == ROWS:
            return np.log(np.maximum(rows, 1)), np.log(rows_cap)
        return drift_floor.copy(), np.full(num_tables, drift_ceiling)

    def solve(base: np.ndarray, k: int, active: np.ndarray) -> np.ndarray:
        """`base` with parameter k (where `active`) bisected on statistic k."""
        sign = -1.0 if k == ALPHA else 1.0  # the log-rank falls as alpha rises
        lo, hi = full_bracket(k)
        for _ in range(FULL_STEPS):
            mid = 0.5 * (lo + hi)
            trial = base.copy()
            trial[active, k] = to_param(k, mid)[active]
            stats = sim.statistics(trial, seed)
            low = sign * stats[:, k] < sign * observed[:, k]
            lo = np.where(low, mid, lo)
            hi = np.where(low, hi, mid)
        out = base.copy()
        out[active, k] = to_param(k, 0.5 * (lo + hi))[active]
        return out

    # 1. a start: each parameter alone by bisection, in the order of least coupling
    for k, active in ((ALPHA, fit_alpha), (REUSE, fit_time), (DRIFT, fit_time)):
        if active.any():
            say(f"start: {STATISTICS[k]} -> {_PARAM_NAMES[k]}")
            params = solve(params, k, active)
    free = np.stack([fit_alpha, fit_time, fit_time, fit_rows], axis=1)
    lower = np.stack([full_bracket(k)[0] for k in range(4)], axis=1)
    upper = np.stack([full_bracket(k)[1] for k in range(4)], axis=1)
    x = np.stack([from_param(k, params[:, k]) for k in range(4)], axis=1)

    def params_of(x: np.ndarray) -> np.ndarray:
        return np.stack([to_param(k, x[:, k]) for k in range(4)], axis=1)

    # the statistics' noise at the start (single traces of the sample's shape): the
    # weights of the misfit the solver lowers
    noise = np.array([sim.single(params_of(x), seed + 1000 + i) for i in range(_NOISE_SEEDS)])
    floor = np.full((num_tables, len(STATISTICS)), _SCALE_FLOOR)
    floor[:, _TOUCHED] = np.maximum(
        _SCALE_FLOOR, 1.0 / (math.sqrt(12.0) * np.maximum(distinct, 1))
    )[:, None]
    scale = np.maximum(np.std(noise, axis=0, ddof=1), floor)
    # a short sample clamps the long lags to its length: a lag counted twice would weigh
    # twice, so its copies get no weight
    lags = _lags(sample.num_batches)
    repeated = np.zeros(len(STATISTICS), dtype=bool)
    repeated[len(STATISTICS) - len(lags) :] = [lag in lags[:q] for q, lag in enumerate(lags)]
    scale[:, repeated] = np.inf

    # 2. drift by a grid over its whole bracket: the touched curve alone (the bisection)
    # can land on a drift that moves the hot rows, which the lag overlaps see at once, and
    # no local step gets out of that plateau
    current = sim.statistics(params_of(x), seed)

    def grid(k: int, active: np.ndarray, points: int) -> None:
        """Parameter k (where `active`) moved to the best of `points` evenly spaced over
        its bracket in the solver's coordinates, where one lowers the misfit."""
        nonlocal x, current
        say(f"start: a {_PARAM_NAMES[k]} grid")
        best = _misfit(current, observed, scale)
        for point in np.linspace(0.0, 1.0, points):
            trial_x = x.copy()
            trial_x[:, k] = np.where(
                active, lower[:, k] + point * (upper[:, k] - lower[:, k]), x[:, k]
            )
            trial = sim.statistics(params_of(trial_x), seed)
            misfit = _misfit(trial, observed, scale)
            x = np.where((misfit < best)[:, None], trial_x, x)
            current = np.where((misfit < best)[:, None], trial, current)
            best = np.minimum(misfit, best)

    if fit_time.any():
        grid(DRIFT, fit_time, DRIFT_GRID)
    # the rows too: a simulation at other rows draws other ranks and rows (the sampler's
    # and the permutation's bounds change), so common random numbers do not steady the
    # finite differences in log rows, and the solver needs a start near the best rows
    if fit_rows.any():
        grid(ROWS, fit_rows, ROWS_GRID)

    # 3. Levenberg-Marquardt on all three at once: reuse and drift pull the consecutive
    # reuse and the touched curve in opposite directions, so one at a time wanders along
    # the ridge between them; the Jacobian (forward differences, every table in the same
    # three simulations) takes the coupling into account, and the damping turns a step
    # that does not lower the misfit into a shorter, steeper one
    damping = np.full(num_tables, _LM_DAMPING)
    jacobian = np.zeros((num_tables, len(STATISTICS), 4))
    steps = 0
    for steps in range(1, LM_STEPS + 1):
        say(f"Levenberg-Marquardt step {steps}")
        for k in np.flatnonzero(free.any(axis=0)).tolist():
            step = np.full(num_tables, _FD_STEP[k])
            if k == DRIFT:  # near the floor drift does nothing: look further up
                step = np.where(x[:, k] < drift_floor + 1.0, 1.5, step)
            h = np.where(x[:, k] + step <= upper[:, k], step, -step)
            moved = x.copy()
            moved[:, k] += h
            jacobian[:, :, k] = (sim.statistics(params_of(moved), seed) - current) / h[:, None]
        residual = (current - observed) / scale
        misfit = _misfit(current, observed, scale)
        pending = np.asarray(free.any(axis=1))
        moved_by = np.zeros_like(x)
        for _ in range(_LM_TRIES):
            change = np.zeros_like(x)
            for t in np.flatnonzero(pending).tolist():
                cols = np.flatnonzero(free[t])
                weighted = jacobian[t][:, cols] / scale[t][:, None]
                normal = weighted.T @ weighted
                lhs = normal + damping[t] * np.diag(np.diag(normal) + 1e-12)
                solution = np.linalg.lstsq(lhs, -weighted.T @ residual[t], rcond=1e-10)[0]
                # the whole step shrunk to the largest allowed: its direction is kept
                shrink = np.max(np.abs(solution) / _MAX_STEP[cols])
                change[t, cols] = solution / max(shrink, 1.0)
            trial_x = np.where(pending[:, None], np.clip(x + change, lower, upper), x)
            trial = sim.statistics(params_of(trial_x), seed)
            better = pending & (_misfit(trial, observed, scale) < misfit)
            moved_by = np.where(better[:, None], trial_x - x, moved_by)
            x = np.where(better[:, None], trial_x, x)
            current = np.where(better[:, None], trial, current)
            damping = np.where(better, damping / 3.0, np.where(pending, damping * 4.0, damping))
            pending &= ~better
            if not pending.any():
                break
        stuck = damping > _LM_DAMPING_MAX
        if ((np.abs(moved_by) <= _TOLERANCE).all(axis=1) | stuck).all():
            break
    params = params_of(x)
    rows = params[:, ROWS].astype(np.int64)
    # a drift that moves the ranking by less than one place over the sample is none
    params[:, DRIFT] = np.where(
        params[:, DRIFT] * rows * sample.num_batches < 1.0, 0.0, params[:, DRIFT]
    )

    # 4. the confidence interval (delta method of indirect inference): the statistics'
    # covariance from single-trace replicates at the fitted parameters, mapped through the
    # Jacobian; the trace's statistics carry it once and the simulation's (an average of
    # `sim.repeats` traces) 1 / repeats of it
    say("replicates: the confidence interval")
    fitted = current
    replicates = np.array([sim.single(params, seed + 1 + i) for i in range(BOOTSTRAP_REPLICATES)])
    inflation = 1.0 + 1.0 / sim.repeats
    alpha_se = np.full(num_tables, np.nan)
    for t in range(num_tables):
        cols = np.flatnonzero(free[t])
        if not free[t, ALPHA] or len(cols) == 0:
            continue
        cov = inflation * np.cov(replicates[:, t, :].T)
        # the sandwich of the weighted least squares the solver ran
        inverse = np.linalg.pinv(jacobian[t][:, cols] / scale[t][:, None], rcond=1e-6)
        inverse = inverse / scale[t][None, :]
        theta_cov = inverse @ cov @ inverse.T
        alpha_se[t] = math.sqrt(max(float(theta_cov[cols.tolist().index(ALPHA), ALPHA]), 0.0))
    # the misfit in units of the noise of (sample - fitted), measured on the replicates
    # and the start's noise traces together
    # pooled: the noise traces ran at the start, the replicates at the fit
    spread = np.sqrt(
        (
            ((replicates - replicates.mean(axis=0)) ** 2).sum(axis=0)
            + ((noise - noise.mean(axis=0)) ** 2).sum(axis=0)
        )
        / (len(replicates) + len(noise) - 2)
    )
    spread = np.maximum(spread, floor)
    spread[:, repeated] = np.inf
    misfits = _misfit(fitted, observed, spread) / inflation

    # 5. is the skew real? The uniform law (alpha 0, where drift changes nothing) with
    # its own reuse, against the fit: where it matches the statistics about as well (its
    # misfit at most a chi-square(1) 99% point above), alpha is not told from 0. The
    # delta-method interval misses this when drift sits at its ceiling: there a small
    # alpha and the fastest drift look uniform too.
    uniform = np.zeros_like(params)
    uniform[:, ROWS] = start_rows  # the uniform law at the rows the fit started from
    if (fit_time & fit_alpha).any():
        uniform = solve(uniform, REUSE, fit_time & fit_alpha)
    uniform_stats = sim.statistics(uniform, seed)
    uniform_misfits = _misfit(uniform_stats, observed, spread) / inflation
    flat = fit_alpha & (uniform_misfits <= misfits + FLAT_MARGIN)
    flat_misfits = misfits.copy()
    params = np.where(flat[:, None], uniform, params)
    fitted = np.where(flat[:, None], uniform_stats, fitted)
    misfits = np.where(flat, uniform_misfits, misfits)
    rows = params[:, ROWS].astype(np.int64)
    mle = [
        power_law_mle(c, int(rows[t])) if rows[t] != start_rows[t] else mle[t]
        for t, c in enumerate(counts)
    ]
    tables = []
    for t in range(num_tables):
        alpha = float(params[t, ALPHA])
        ci: tuple[float, float] | None = None
        note = "fitted"
        if not fit_alpha[t]:
            note = "a table of one row has no exponent"
        elif lookups[t] < MIN_FIT_LOOKUPS:
            note = f"too small to fit: {int(lookups[t])} lookups (< {MIN_FIT_LOOKUPS})"
        elif flat[t]:
            note = (
                "too flat to fit: the uniform law (alpha 0) matches the statistics as well"
                f" (misfit {uniform_misfits[t]:.1f}, the fit's {flat_misfits[t]:.1f})"
            )
        elif not np.isfinite(alpha_se[t]) or jacobian[t, ALPHA, ALPHA] >= 0:
            note = "too flat to fit: the statistics do not respond to alpha here"
        else:
            half = 1.96 * float(alpha_se[t])
            ci = (alpha - half, alpha + half)
            if 2 * half > MAX_CI_WIDTH:
                note = f"too small to fit: the 95% interval is {2 * half:.2f} wide"
            elif ci[0] <= 0.0:
                note = "too flat to fit: the 95% interval reaches 0 (uniform)"
            elif misfits[t] > MAX_MISFIT:
                note = (
                    f"not converged: the fitted law's statistics stay {misfits[t]:,.0f} "
                    "squared noise units from the sample's statistics"
                )
            elif alpha >= ALPHA_MAX - 0.01:
                note = f"at the fit's upper bound {ALPHA_MAX} (nearly all lookups on a few rows)"
        ok = note == "fitted"
        tables.append(
            TableFit(
                name=sample.names[t],
                rows=int(rows[t]),
                rows_source=rows_source[t],
                declared_rows=int(sample.declared_rows[t]),
                lookups=int(lookups[t]),
                distinct_rows=int(distinct[t]),
                pooling=int(sample.pooling[t]),
                alpha=round(alpha, 4) if ok else None,
                alpha_ci=(round(max(ci[0], 0.0), 4), round(ci[1], 4)) if ok and ci else None,
                alpha_note=note,
                alpha_spec=round(alpha, 4),
                alpha_mle=None if (a_mle := mle[t][0]) is None else round(a_mle, 4),
                alpha_mle_se=None if mle[t][1] is None else float(f"{mle[t][1]:.3g}"),
                reuse=round(float(params[t, REUSE]), 4),
                drift=float(f"{params[t, DRIFT]:.4g}"),
                observed=tuple(float(v) for v in observed[t]),
                fitted=tuple(float(v) for v in fitted[t]),
                misfit=round(float(misfits[t]), 3),
                hot_tests=tuple((r.share, round(r.lr, 3)) for r in hot[t].ranks),
                hot_shares=hot[t].shares,
            )
        )
    spec = _fitted_spec(trace, sample, tables, spec_seed)
    return FitResult(
        trace=str(trace.path),
        spec=spec,
        tables=tuple(tables),
        batches=sample.num_batches,
        first_batch=batch_range[0] if batch_range else 0,
        max_lookups=max_lookups,
        lookups=int(lookups.sum()),
        steps=steps,
        simulations=sim.count,
        notes=tuple(sample.notes),
    )


def _fitted_spec(trace: Trace, sample: Sample, tables: list[TableFit], seed: int) -> WorkloadSpec:
    workload = trace.workload if isinstance(trace.workload, dict) else {}
    embedding_dim = workload.get("embedding_dim", 16)
    update = workload.get("update", {})
    frozen = {
        t.get("name"): bool(t.get("frozen", False))
        for t in workload.get("tables", [])
        if isinstance(t, dict)
    }
    data = {
        "name": f"fit-{trace.path.name}",
        "source": f"replay fit of {trace.path.name} ({sample.num_batches} batches)",
        "batch_size": sample.batch_size,
        "batches": sample.num_batches,
        "seed": seed,
        "embedding_dim": embedding_dim,
        "update": update if isinstance(update, dict) else asdict(UpdateRule()),
        "tables": [
            {
                "name": t.name,
                "rows": t.rows,
                "alpha": t.alpha_spec,
                **({"hot_shares": list(t.hot_shares)} if t.hot_shares else {}),
                "drift": t.drift,
                "reuse": t.reuse,
                "pooling": t.pooling,
                "frozen": frozen.get(t.name, False),
            }
            for t in tables
        ],
    }
    return spec_from_dict(data, where="fitted spec")
