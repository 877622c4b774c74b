"""Rows touched, touched(k), for a plan over a sampled workload: the first batches of the
full stream counted exactly for the small windows, the spatial sample for the rest
(issue 40).

touched(k) is the mean number of distinct rows updated in k consecutive batches
(`replay.analysis.horizon`), what sizes an incremental checkpoint. From a SHARDS sample
at rate R (`replay.workload.sampled`: only the rows whose hash passes R) it is the
sample's count / R, and at small k that is badly off: which of the few hot rows land in
the sample decides it. On the quickstart's plan (criteo-terabyte, batches of 2048,
R = 2^-12) the sample read touched(1) = 10,917 rows against 14,529 (-25%), and 0 for
eleven small tables.

The exact prefix. A sampled workload has neither reuse nor drift (`sampled.py` refuses
them at R < 1), so its batches are independent and identically distributed. The first P
batches of the full stream, generated in full (`GeneratedTrace(spec.with_overrides(
batches=P))`: the very batches the run starts with) and counted exactly
(`TouchedCounter`, R = 1), give for every k <= P the mean over P - k + 1 windows of k
batches, each window with the law of every window of the run: an unbiased estimate of
E D(k), the expected distinct rows of a window, as the run's own exact count is.

Why the prefix wins for every k <= P. Let p_r = Pr(row r is in a window of k batches),
T = sum p_r = E D(k), V = sum p_r (1 - p_r) <= T.

- One window: D(k) is a sum of indicators "row r drawn in the window"; the draws are
  i.i.d., so the indicators are negatively associated and Var D(k) <= V <= T. The window
  counts of a stream are k-dependent (windows k or more batches apart share no batch),
  so the mean over the n - k + 1 windows of n batches has variance at most
  m(k, n) V with m(k, n) = min(1, (2k - 1) / (n - k + 1)). The prefix: s.d. / T <=
  sqrt(m(k, P) / T) <= 1 / sqrt(T).
- The sample keeps each row independently with probability R (its hash), for all the
  windows at once. With c_r the share of the run's windows that hold row r (sum c_r = T),
  the rows kept add variance (1 - R) / R x sum c_r^2 to the count / R, and the sample's
  own draws (the kept rows' indicators / R) add about m(k, B) V / R over the B batches.
  The first term is what fails at small k: hot rows have c_r near 1, so sum c_r^2 is a
  good part of T.
- Hence, the prefix's variance m(k, P) V against the sample's >= m(k, B) V / R + (1 - R)
  / R sum c_r^2: the prefix is the better estimate at every k <= P as soon as
  P >= 3 R B / 2, whatever the rows kept add on top. (R B is how many full batches the
  sample's lookups make up. With m(k, B) = 1 the claim is m(k, P) <= 1 / R. Else both
  branches of m(k, P) come down to P - k + 1 >= R (B - k + 1) where (2k - 1) < P - k + 1,
  and to 2k - 1 >= R (B - k + 1) where not; the worst k is near P / 3 in either, and
  both hold for P >= 3 R B / 2.)

P, the hand-off (`prefix_batches`): about `PREFIX_LOOKUPS` = 2^24 lookups' worth of
batches, at least one, and at least ceil(3 R B / 2) so that the argument above holds, but
that raised part never past `PREFIX_MAX_LOOKUPS` = 2^25 lookups, and never more than the
run. The bound is memory: the counter keeps every distinct key of the prefix in a map of
up to 64 B a key (`replay.runs.plan_memory`), and on tables of billions of rows nearly
every lookup is a new key (2^26 lookups asked for 4 GiB on 12 tables of 4 G rows). Where
the cap binds (the quickstart's 2.1 M batches of 53,248 lookups at R = 2^-12: 782
batches asked, 630 counted) the argument holds up to about 2P / 3 and the stated error
(`stated_errors`, from m(k, P)) says what the prefix gives beyond.

Above P only the sample is left. Not its count / R itself, though, but its growth from
the hand-off h (the longest window of the grid within P) on, added to the exact value
there: touched(k) = exact(h) + sample(k) - sample(h), per table and in total (`above=
"increment"`, the default). It has the same expectation as the sample's count / R
(exact(h) and sample(h) both estimate touched(h)), and the rows kept by the hash add to
it only through the rows that enter between h and k: with c_r(k) the share of windows of
k that hold row r, non-decreasing in k, its selection variance is (1 - R) / R x
sum (c_r(k) - c_r(h))^2 <= (1 - R) / R x (touched(k) - touched(h)), against the sample's
(1 - R) / R x sum c_r(k)^2, always at least as large (sum c_r(k)^2 = sum (c_r(h) + d_r)^2
>= sum d_r^2). The hot rows, whose luck in the hash is what throws the sample off, are in
both ends of the increment and cancel. (Criteo Terabyte, 20,000 batches, R = 2^-12,
P = 1,260, the plan's grid: just above P the sample alone was 2.0% high, the increment
0.14%; above P the increment was at most 0.64% off (at k = B, where the sample was
0.37% off), the sample up to 2.0%. Per table the worst error above P fell from 165% to
15%. `above="sample"` gives the count / R, for comparison.) A table the sample holds
no row of keeps its exact value at h: at a small table, all its rows (the sample read
0).

The joined curve: exact for k <= h, the increment above, then each table and the total
made non-decreasing in k (a running maximum). The batch grid is `touched_curve
(horizon)`'s (about `DEFAULT_CURVE_POINTS` log-spaced k in [1, B]) unless given.

Stated error (`info["relative_error"]["stated"]`, one relative standard error per k of
the grid, from the bounds above with the curve's own T(k) = touched(k), as sum c_r^2 <=
T and V <= T): sqrt(m(k, P) / T(k)) for k <= h; above h, with the sample's own draws in
sample(k) and sample(h) (m(k, B) T(k) / R and m(h, B) T(h) / R at most, positively
correlated, so their difference has at most the sum) and the prefix's at h,
sqrt(((1 - R) (T(k) - T(h)) + m(k, B) T(k) + m(h, B) T(h)) / R + m(h, P) T(h)) / T(k)
(`above="sample"`: sqrt(((1 - R) + m(k, B)) / (R T(k)))). Upper-bound-style estimates:
the run's own count differs from E D(k) by a further sqrt(m(k, B) / T(k)) at most.
Measured (`MEASURED`, the acceptance test in tests/test_touched_plan.py): criteo-terabyte,
20,000 batches of 2048, R = 2^-12, against the exact count of the whole run: +0.04%,
+0.04%, +0.09% at k = 1, 10, 100 (the exact prefix, P = 315 batches), +0.98% and +0.21% at
k = 1,000 and 10,000 (the increment); the sample alone was off by -25%, -0.01%, +3.7%,
+2.2% and +0.43%. (With P = 1,260 batches, 2^26 lookups, k = 1,000 was within 0.013%: the
memory bound on P costs accuracy just above it.)

Accumulation: with a step every a batches, windows of k batches hold floor(k / a) or
ceil(k / a) steps depending on where they start, so a window's law depends on its phase.
P is then a multiple of a (every step of the prefix is a whole accumulation window, as in
the run) and the prefix's windows start at every phase equally but for the last
(P - k + 1) mod a of them: a bias of at most a / (P - k + 1) of the difference between
one step more or less, small for k well below P. Frozen tables are never updated, in
both.

At R = 1 (no sampling) or for a source without a workload spec (a trace folder, a
sampled source built otherwise) the result is `touched_curve(horizon)` itself, with an
empty info dict when it is exact, so an exact plan stays byte for byte what it was.

Cost: the prefix's P x L lookups are generated and counted once (numba kernels, the
generator's threads): on the quickstart's plan (1,260 batches of 53,248 lookups) about
4 s of CPU (4.5 to 6 s of wall time on 2 busy cores) and 170 MB more peak memory; on
the 400-table production workload (batches of 26.2 M lookups, P = 2) 10 s of CPU and
a peak of 2.1 GB, most of it the two batches generated in full (the steady stage holds
as many). Memory: `TouchedCounter`'s state over the keys the prefix updates (a map of
12 B slots, at most 4 per key, when the row space is over `DENSE_MAX_ROWS` rows; else
4 B a row) plus the generated row groups in flight: bounded by the prefix's lookups,
whatever the run's length.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from replay.analysis.horizon import (
    KINDS,
    TouchedCounter,
    TouchedCurve,
    source_sample_rate,
    touched_curve,
)
from replay.analysis.mrc import stream_lookups
from replay.analysis.touched_model import closed_form_wanted, expected_touched
from replay.errors import ConfigError
from replay.trace.keys import curve_batches
from replay.workload.spec import WorkloadSpec

PREFIX_LOOKUPS = 1 << 24  # lookups of the full stream counted exactly, about
PREFIX_MAX_LOOKUPS = 1 << 25  # ... and at most, where 3 R B / 2 batches ask for more
ABOVE = ("increment", "sample")  # how touched(k) above the prefix is read from the sample
# Measured by tests/test_touched_plan.py's acceptance test: the relative error of
# touched(k) against the exact count of the whole run, k -> error.
MEASURED_ON = (
    "criteo-terabyte, 20,000 batches of 2048, R = 2^-12, against touched_curve of the "
    "whole run at R = 1"
)
MEASURED: dict[int, float] = {
    1: 0.0003829,
    10: 0.0004188,
    100: 0.0008838,
    1_000: 0.0098125,
    10_000: 0.0021102,
}  # the sample alone: -25.0%, -0.01%, +3.7%, +2.2%, +0.43%


def prefix_batches(spec: WorkloadSpec, rate: float, batches: int | None = None) -> int:
    """P, the run's first batches counted in full: about `PREFIX_LOOKUPS` lookups and at
    least ceil(3 R B / 2) batches up to `PREFIX_MAX_LOOKUPS` lookups (module docstring),
    at least one, a whole number of accumulation windows where the run has one, never
    more than the run's `batches` (default: the spec's)."""
    run = int(spec.batches if batches is None else batches)
    if run < 1:
        return 0
    every = max(1, int(spec.update.accumulate_batches))
    per_batch = max(int(spec.lookups_per_batch), 1)
    fit = PREFIX_LOOKUPS // per_batch
    fit = max(fit, min(math.ceil(1.5 * float(rate) * run), PREFIX_MAX_LOOKUPS // per_batch))
    fit = -(-fit // every) * every  # whole accumulation windows (rounded up)
    return max(1, min(run, fit))


def iid_batches(spec: WorkloadSpec) -> bool:
    """Whether the spec's batches are i.i.d.: no table reuses earlier rows or drifts."""
    return not any(t.reuse > 0.0 or t.drift > 0.0 for t in spec.tables)


def _window_share(k: np.ndarray, n: int) -> np.ndarray:
    """m(k, n) = min(1, (2k - 1) / (n - k + 1)): the variance of the mean window count
    over an n-batch stream against one window's (module docstring)."""
    k = np.asarray(k, dtype=np.float64)
    return np.minimum(1.0, (2.0 * k - 1.0) / np.maximum(n - k + 1.0, 1.0))


def stated_errors(
    batches: np.ndarray | Sequence[int],
    rows: np.ndarray | Sequence[float],
    prefix: int,
    num_batches: int,
    rate: float,
    above: str = "increment",
) -> np.ndarray:
    """The relative standard error stated for each touched(k) of a joined curve (module
    docstring): the exact prefix's up to the hand-off h (the last k <= `prefix`), the
    increment's or the sample's above; 0 where touched(k) = 0. `prefix` 0: all sample."""
    ks = np.asarray(batches, dtype=np.float64)
    t = np.asarray(rows, dtype=np.float64)
    safe = np.where(t > 0, t, 1.0)
    low = ks <= prefix
    out = np.sqrt(((1.0 - rate) + _window_share(ks, num_batches)) / (rate * safe))
    if low.any():
        out[low] = np.sqrt(_window_share(ks[low], prefix) / safe[low])
        if above == "increment":
            j = int(low.sum()) - 1
            th, h = float(t[j]), float(ks[j])
            var = (1.0 - rate) * np.maximum(t - th, 0.0) + _window_share(ks, num_batches) * t
            var += float(_window_share(np.array([h]), num_batches)[0]) * th
            var = var / rate + float(_window_share(np.array([h]), prefix)[0]) * th
            out[~low] = np.sqrt(var[~low]) / safe[~low]
    return np.where(t > 0, out, 0.0)


def _sampled_curve(src: Any, batches: np.ndarray, kind: str, rate: float) -> TouchedCurve:
    """`touched_curve(src)` at the window lengths `batches`."""
    counter = TouchedCounter(
        src.table_rows, int(src.num_batches), batches=batches, lookups=stream_lookups(src)
    )
    counter.feed_source(src, kind)
    return counter.curve(rate, kind, tuple(getattr(src, "table_names", ())))


def prefix_curve(
    spec: WorkloadSpec,
    batches: np.ndarray | Sequence[int],
    prefix: int,
    *,
    kind: str = "updates",
    threads: int | None = None,
) -> TouchedCurve:
    """touched(k) at the window lengths `batches` (all <= `prefix`) over the first
    `prefix` batches of the full stream, exact (R = 1)."""
    from replay.workload.onthefly import GeneratedTrace

    full = GeneratedTrace(spec.with_overrides(batches=int(prefix)), threads=threads)
    counter = TouchedCounter(
        full.table_rows, int(prefix), batches=batches, lookups=stream_lookups(full)
    )
    counter.feed_source(full, kind)
    return counter.curve(1.0, kind, tuple(full.table_names))


def join_curves(
    exact: TouchedCurve, sampled: TouchedCurve, prefix: int, above: str = "increment"
) -> TouchedCurve:
    """`exact` (its windows: `sampled`'s up to `prefix`) up to the hand-off h, the
    last of them; above h `sampled`'s increment from h added to exact(h) (`above=
    "increment"`) or `sampled` itself (`"sample"`); each table and the total then made
    non-decreasing in k (module docstring)."""
    if above not in ABOVE:
        raise ConfigError(f"above {above!r} is not one of {', '.join(ABOVE)}")
    ks = sampled.batches
    j = int((ks <= prefix).sum())
    if not np.array_equal(exact.batches, ks[:j]):
        raise ValueError("the exact curve's windows are not the sampled grid's up to P")
    per_table = np.array(sampled.per_table, dtype=np.float64, copy=True)
    rows = np.array(sampled.rows, dtype=np.float64, copy=True)
    if j and above == "increment":
        h = j - 1
        per_table[:, j:] += (exact.per_table[:, h] - sampled.per_table[:, h])[:, None]
        rows[j:] += float(exact.rows[h]) - float(sampled.rows[h])
    per_table[:, :j] = exact.per_table
    rows[:j] = exact.rows
    return TouchedCurve(
        batches=ks.copy(),
        rows=np.maximum.accumulate(rows),
        per_table=np.maximum.accumulate(per_table, axis=1),
        sample_rate=sampled.sample_rate,
        num_batches=sampled.num_batches,
        kind=sampled.kind,
        table_names=sampled.table_names,
    )


def _rate_text(rate: float) -> str:
    power = math.log2(rate)
    return f"SHARDS at R = {rate:.9g}" + (f" (2^{int(power)})" if power.is_integer() else "")


def plan_touched(
    horizon: Any,
    spec: WorkloadSpec | None = None,
    *,
    kind: str = "updates",
    threads: int | None = None,
    batches: np.ndarray | Sequence[int] | None = None,
    above: str = "increment",
    sampled: TouchedCurve | None = None,
) -> tuple[TouchedCurve, dict[str, Any]]:
    """The plan's touched(k) curve of `horizon` (an opened source, as `touched_curve`
    reads it) and the basis it stands on (module docstring).

    `spec`: the workload the horizon was sampled from (None for a trace folder). At
    R = 1, or without a spec, or for a spec whose batches are not i.i.d., the curve is
    the horizon's own (`touched_curve(horizon)`, with an empty info dict at R = 1). Else
    windows up to P = `prefix_batches(spec, R, B)` are counted exactly over the full
    stream's first P batches, and the longer ones read from the sample (`above`).
    `batches`: the window lengths (default: `touched_curve`'s grid). `sampled`: the
    horizon's curve on that grid when already read (else read here). `threads`: the
    generator's threads for the prefix (default: the horizon's).

    Info keys (R < 1): exact_up_to_batches, exact_from, sampled_above, sample_rate,
    relative_error {batches, stated, stated_from, measured, measured_on}.
    """
    if kind not in KINDS:
        raise ConfigError(f"kind {kind!r} is not one of {', '.join(KINDS)}")
    if above not in ABOVE:
        raise ConfigError(f"above {above!r} is not one of {', '.join(ABOVE)}")
    rate = source_sample_rate(horizon)
    if threads is None:
        threads = getattr(horizon, "threads", None)
    wanted = isinstance(spec, WorkloadSpec) and closed_form_wanted(spec, PREFIX_MAX_LOOKUPS)
    if rate < 1.0 and wanted and spec is not None:
        # production scale: one batch is more than the prefix may count (`touched_model`)
        return _closed_form(horizon, spec, kind, batches, rate)
    if sampled is None:
        if batches is None:
            sampled = touched_curve(horizon, kind=kind, threads=threads)
        else:
            grid = np.unique(np.asarray(batches, dtype=np.int64))
            sampled = _sampled_curve(horizon, grid, kind, rate)
    if rate >= 1.0:
        return sampled, {}
    run = int(sampled.num_batches)
    ks = sampled.batches
    if not isinstance(spec, WorkloadSpec) or not iid_batches(spec) or run < 1:
        why = (
            "no workload spec to generate the full stream from"
            if not isinstance(spec, WorkloadSpec)
            else "the workload's batches are not i.i.d. (reuse or drift)"
        )
        errors = stated_errors(ks, sampled.rows, 0, run, rate)
        return sampled, _info(0, None, f"{_rate_text(rate)}: its count / R at every k ({why})",
                              rate, ks, errors, "sample")  # fmt: skip
    prefix = prefix_batches(spec, rate, run)
    exact = prefix_curve(spec, ks[ks <= prefix], prefix, kind=kind, threads=threads)
    joined = join_curves(exact, sampled, prefix, above)
    errors = stated_errors(ks, joined.rows, prefix, run, rate, above)
    hand = int(exact.batches[-1]) if len(exact.batches) else 0
    how = (
        f"the exact value at {hand:,} batches plus the sample's growth from there"
        if above == "increment" and hand
        else "its count / R"
    )
    exact_from = (
        f"the first {prefix:,} batches of the full stream ({prefix * spec.lookups_per_batch:,} "
        "lookups generated in full, counted exactly; its batches are i.i.d.)"
    )
    above_text = f"{_rate_text(rate)}: {how}, above {prefix:,} batches"
    return joined, _info(prefix, exact_from, above_text, rate, ks, errors, above)


def _closed_form(
    horizon: Any, spec: WorkloadSpec, kind: str, batches: Any, rate: float
) -> tuple[TouchedCurve, dict[str, Any]]:
    """touched(k) at every window of the grid from the spec in closed form
    (`replay.analysis.touched_model`), with its basis; nothing is generated or read."""
    run = int(horizon.num_batches)
    ks = curve_batches(run) if batches is None else np.unique(np.asarray(batches, dtype=np.int64))
    per_table = expected_touched(spec, ks, kind)
    curve = TouchedCurve(
        batches=ks, rows=per_table.sum(axis=0), per_table=per_table, sample_rate=rate,
        num_batches=run, kind=kind, table_names=tuple(getattr(horizon, "table_names", ())),
    )  # fmt: skip
    # the run's own mean over its windows differs from E D(k) by this much at most
    m = np.minimum(1.0, (2 * ks - 1) / np.maximum(run - ks + 1, 1))
    errors = np.sqrt(m / np.maximum(curve.rows, 1.0))
    info = _info(run, None, "none: the closed form at every k", rate, ks, errors, "sample")
    info["exact_from"] = (
        f"the spec in closed form at every k (one batch is {spec.lookups_per_batch:,} lookups, "
        f"more than the {PREFIX_MAX_LOOKUPS:,} the exact prefix may count): E D(k) = sum over "
        "ranks of 1 - exp(-k L p), per table, its batches i.i.d. (replay.analysis.touched_model)"
    )
    info["relative_error"]["stated_from"] = (
        "the run's own mean over its windows about E D(k): sqrt(m(k, B) / T(k)) at most; "
        "m(k, n) = min(1, (2k - 1) / (n - k + 1)), T = touched"
    )
    return curve, info


def _info(
    prefix: int,
    exact_from: str | None,
    above_text: str,
    rate: float,
    ks: np.ndarray,
    errors: np.ndarray,
    above: str,
) -> dict[str, Any]:
    stated_from = (
        "one relative standard error: sqrt(m(k, P) / T(k)) up to P (the exact prefix); "
        + (
            "above, sqrt(((1 - R) (T(k) - T(h)) + m(k, B) T(k) + m(h, B) T(h)) / R "
            "+ m(h, P) T(h)) / T(k) "
            "(h the last k <= P)"
            if above == "increment" and prefix
            else "above, sqrt(((1 - R) + m(k, B)) / (R T(k))) (the sample)"
        )
        + "; m(k, n) = min(1, (2k - 1) / (n - k + 1)), T = touched"
    )
    measured = bool(prefix) and above == "increment"  # what `MEASURED` was measured on
    return {
        "exact_up_to_batches": int(prefix),
        "exact_from": exact_from,
        "sampled_above": above_text,
        "sample_rate": float(rate),
        "relative_error": {
            "batches": [int(k) for k in ks],
            "stated": [float(e) for e in errors],
            "stated_from": stated_from,
            "measured": {str(k): float(e) for k, e in MEASURED.items()} if measured else {},
            "measured_on": MEASURED_ON if measured else None,
        },
    }


__all__ = [
    "ABOVE",
    "MEASURED",
    "PREFIX_LOOKUPS",
    "iid_batches",
    "join_curves",
    "plan_touched",
    "prefix_batches",
    "prefix_curve",
    "stated_errors",
]
