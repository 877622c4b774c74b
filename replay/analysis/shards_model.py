"""A model-assisted SHARDS curve: Che's approximation as a control variate (issue 54).

Why. A spatially sampled curve (`replay.analysis.shards`) at rate R keeps about R of the
rows, and which rows it keeps is luck: a sample that happens to hold a few more hot rows
of a 40 M-row table reads the whole curve high or low. Near the sizes a plan answers for
(a few batches' distinct rows to a few percent of the rows) that luck dominates the
error: on 20 seeds of criteo-terabyte (20,000 batches of 2,048, R = 2^-12) the plain
estimate was off by up to 0.021 in miss ratio at 100,000 rows and its answer for a hit
of 0.9 by -23% to +25%, while the streams' own randomness given the rows is far smaller.

What. For a workload spec without reuse or drift (the only ones a sampled workload
generates, `replay.workload.sampled`) both populations are known exactly: every row's
probability π_i in the full stream, and which rows the sample holds. Che's approximation
(`replay.analysis.che`, Che, Tung, Wang, IEEE JSAC 2002; finite horizon from an empty
cache) then gives the expected curve of each:

- m_full(C): the full stream's N lookups through an LRU of C rows;
- m_sample(C): what SHARDS_adj reads from this very sample: its N S lookups (S = the sum of
  π_i over the sampled rows) through an LRU of C R sampled rows, misses over N R, i.e.
  (1 - hit_S(C R)) S / R with hit_S Che's over the sampled rows' probabilities π_i / S.

The estimate is the difference estimator of model-assisted survey sampling (Särndal,
Swensson, Wretman, "Model Assisted Survey Sampling", Springer 1992, s.6.3):

    m(C) = m_SHARDS(C) + (m_full(C) - m_sample(C)),

which corrects the luck of the draw by what the model says that luck is worth. It stays
unbiased whatever the model's error (the correction's expectation over samples is zero
to first order: Che's curve of a random sample averages to the full one), and where the
model is good the correction removes most of the variance: measured on the 20 seeds
above, the error at 185,000 rows fell from a standard deviation of 0.0045 to 0.0006
(`tests/test_shards_model.py`, bench). Each random group (`ShardsSampler.group_curves`,
rate R / K) gets its own correction over its own rows, so the error stated for the
corrected curve is the random-group spread of corrected estimates: what is left.

The sampled rows' probabilities come from the sampled workload's alias tables: slot j of
a table's m slots gives prob_j / m to row j and (1 - prob_j) / m to alias_j (Vose 1991),
times the table's sampled mass S_t and its share n_t / n of a batch's lookups. Cost: one
Che solve over the sampled rows (R x rows: 46 K rows at R = 2^-12 on criteo-terabyte) and
K more over the groups' rows, plus the full curve's (`che_miss_ratios`, the plan's
analytic curve).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from replay.analysis.che import che_hit_ratios, che_miss_ratios, finite_horizon_hits
from replay.analysis.shards import SUBSAMPLES, _shards_filter
from replay.trace.keys import table_offsets
from replay.workload.spec import WorkloadSpec

METHOD = "SHARDS with Che's approximation as a control variate (the difference estimator)"
RANK_POINTS = 48  # sizes a GPU's correction is solved at (`rank_correction`)
RANK_TOLERANCE = 1e-2  # its tables' rank buckets (`che.table_popularity`: second-order error)


def applicable(source: Any) -> bool:
    """Whether `source` is a sampled workload whose rows' probabilities are known and
    whose references are independent (Che's assumption): a `SampledWorkload` at R < 1."""
    spec = getattr(source, "spec", None)
    tables = getattr(source, "tables", None)
    return (
        isinstance(spec, WorkloadSpec)
        and tables is not None
        and all(t.reuse == 0 and t.drift == 0 for t in spec.tables)
    )


def sampled_population(source: Any) -> tuple[np.ndarray, np.ndarray]:
    """(flat keys, π) of the sampled rows: each row's probability in the full stream."""
    spec: WorkloadSpec = source.spec
    tables = source.tables
    rows = np.array([t.rows for t in spec.tables], dtype=np.int64)
    offsets = table_offsets(rows)
    n_t = tables.lookups_per_table.astype(np.float64)
    share = n_t / max(float(n_t.sum()), 1.0)
    keys, probs = [], []
    for t in range(len(rows)):
        a, b = int(tables.row_off[t]), int(tables.row_off[t + 1])
        if b == a:
            continue
        prob = np.asarray(tables.row_prob[a:b], dtype=np.float64)
        w = prob.copy()
        np.add.at(w, np.asarray(tables.row_alias[a:b], dtype=np.int64), 1.0 - prob)
        probs.append(share[t] * float(tables.sampled_mass[t]) * w / (b - a))
        keys.append(offsets[t] + np.asarray(tables.row_ids[a:b], dtype=np.int64))
    if not keys:
        return np.empty(0, dtype=np.int64), np.empty(0)
    return np.concatenate(keys), np.concatenate(probs)


BUCKET_LOG_WIDTH = 1e-3  # rows whose probabilities agree within 0.1% solve as one group


# bins of the counting pass, at most: 16,777 in log, more than float64's probabilities
# span (about 1,490), so only a probability of 0 (log -inf) takes the sort
_BUCKET_SPAN = 1 << 24


def _buckets(pi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rows, sum of their probabilities) per group of `pi` within `BUCKET_LOG_WIDTH` in
    log, the groups in ascending order: np.unique's groups and np.bincount's sums, each
    group summed in the rows' order, so the same floats; counted in one pass over integer
    buckets (np.unique's sort of a plan's millions of sampled rows took 4.3 of a
    Criteo 1TB plan's 17 s)."""
    bucket = np.floor(np.log(pi) / BUCKET_LOG_WIDTH)
    if np.isfinite(bucket).all():
        lo = float(bucket.min())
        if float(bucket.max()) - lo < _BUCKET_SPAN:
            index = (bucket - lo).astype(np.int64)
            counts = np.bincount(index)
            sums = np.bincount(index, weights=pi)
            used = counts > 0
            return counts[used], sums[used]
    _, which, counts = np.unique(bucket, return_inverse=True, return_counts=True)
    return counts, np.bincount(which, weights=pi)


def _sample_curve(pi: np.ndarray, sizes: np.ndarray, rate: float, lookups: float) -> np.ndarray:
    """m_sample(C) (module docstring) for the rows of probabilities `pi` at rate `rate`.
    Rows are grouped by probability within 0.1% (count and mean: Che's own bucketing,
    `replay.analysis.che`, error of second order) so the solve is over groups."""
    s = float(pi.sum())
    if s <= 0.0 or not len(pi):
        return np.zeros(len(sizes))
    counts, sums = _buckets(pi)
    q = sums / counts / s
    m = counts.astype(np.float64)
    _, times = che_hit_ratios(m, q, sizes.astype(np.float64) * rate)
    hits = finite_horizon_hits(m, q, times, lookups * s)
    return (1.0 - hits) * s / rate


def full_che(source: Any, sizes: np.ndarray, lookups: float) -> np.ndarray:
    """Che's miss ratios of the full stream of `source`'s spec over `lookups` from an empty
    cache (`che_miss_ratios`), kept on the source by size: the control variate and the
    plan's analytic curve read the same sizes, and a solve costs seconds."""
    sizes = np.asarray(sizes, dtype=np.int64)
    memo: dict[tuple[int, float], float] = source.__dict__.setdefault("_replay_che", {})
    want = [int(c) for c in sizes.tolist() if (int(c), float(lookups)) not in memo]
    if want:
        got = che_miss_ratios(source.spec, np.array(want), horizon_lookups=lookups)
        memo.update({(c, float(lookups)): float(v) for c, v in zip(want, got, strict=True)})
    return np.array([memo[(int(c), float(lookups))] for c in sizes.tolist()])


def che_correction(
    source: Any, sizes: np.ndarray, rate: float, lookups: float, salt: int, threshold: int
) -> tuple[np.ndarray, np.ndarray]:
    """(m_full - m_sample at each size for the whole sample, the same for each of the K
    random groups [K, sizes]): what `ShardsSampler.group_curves` adds to its curves."""
    sizes = np.asarray(sizes, dtype=np.int64)
    full = full_che(source, sizes, lookups)
    keys, pi = sampled_population(source)
    total = int(np.asarray(source.table_rows, dtype=np.int64).sum())
    return _corrections(keys, pi, full, total, threshold, salt, sizes, rate, lookups)


def rank_correction(
    source: Any,
    shards: list[tuple[int, float]],
    sizes: np.ndarray,
    rate: float,
    salt: int,
    threshold: int,
) -> tuple[np.ndarray, np.ndarray]:
    """`che_correction` for one GPU's cache (`replay.plan.rank_curves`) whose shards are
    whole tables: `shards` = (table index, the share of the table's lookups that reach the
    GPU: 1 for a table-wise table or a column block, 1 / W for a data-parallel one). Its
    full population is those tables' rows, each table weighted by the lookups it brings;
    its sample, their sampled rows (a column block of a table the GPU holds twice counts
    twice, as the GPU looks it up in two caches' worth of keys)."""
    sizes = np.asarray(sizes, dtype=np.int64)
    if len(sizes) > RANK_POINTS:
        # the correction is a difference of two smooth curves: solved at RANK_POINTS sizes
        # (log-spaced, both ends in) and read in between linearly in log size, so a plan of
        # 64 GPUs solves 64 x RANK_POINTS sizes, not 64 x its whole grid
        coarse = np.unique(sizes[np.rint(np.linspace(0, len(sizes) - 1, RANK_POINTS)).astype(int)])
        whole, groups = rank_correction(source, shards, coarse, rate, salt, threshold)
        x, at = np.log(coarse.astype(np.float64)), np.log(sizes.astype(np.float64))
        return np.interp(at, x, whole), np.array([np.interp(at, x, g) for g in groups])
    from replay.analysis.che import table_popularity

    spec: WorkloadSpec = source.spec
    per_table = np.array([spec.batch_size * t.pooling for t in spec.tables], dtype=np.float64)
    brought = np.array([per_table[t] * f for t, f in shards]) * float(spec.batches)
    lookups = float(brought.sum())
    if lookups <= 0.0 or not shards:
        return np.zeros(len(sizes)), np.zeros((SUBSAMPLES, len(sizes)))
    counts, probs = [], []
    for (t, _), n in zip(shards, brought, strict=True):
        table = spec.tables[t]
        part = table_popularity(
            table.rows, float(table.alpha), n / lookups, RANK_TOLERANCE,
            hot_shares=table.hot_shares, rank_offset=float(table.rank_offset),
        )  # fmt: skip
        counts.append(part.counts)
        probs.append(part.probabilities)
    m, q = np.concatenate(counts), np.concatenate(probs)
    _, times = che_hit_ratios(m, q, sizes.astype(np.float64))
    full = 1.0 - finite_horizon_hits(m, q, times, lookups)
    keys, pi, _ = _rank_population(source, shards)
    total = int(sum(t.rows for t in spec.tables))
    return _corrections(keys, pi, full, total, threshold, salt, sizes, rate, lookups)


def _rank_population(
    source: Any, shards: list[tuple[int, float]]
) -> tuple[np.ndarray, np.ndarray, float]:
    """(global keys, π, lookups) of one GPU's sampled rows (`rank_correction`'s shards):
    π a row's probability in a lookup of the GPU's own full stream, `lookups` that
    stream's length. A table the GPU holds twice (two column blocks) gives its rows twice."""
    spec: WorkloadSpec = source.spec
    per_table = np.array([spec.batch_size * t.pooling for t in spec.tables], dtype=np.float64)
    brought = np.array([per_table[t] * f for t, f in shards]) * float(spec.batches)
    lookups = float(brought.sum())
    keys, pi = sampled_population(source)
    if lookups <= 0.0 or not shards:
        return keys[:0], pi[:0], 0.0
    rows = np.array([t.rows for t in spec.tables], dtype=np.int64)
    table_of = np.searchsorted(table_offsets(rows), keys, side="right") - 1
    share = per_table / per_table.sum()
    parts_k, parts_p = [], []
    for (t, _), n in zip(shards, brought, strict=True):
        mine = table_of == t
        # pi is the row's probability in a lookup of the whole stream: within the table
        # pi / share_t, then the table's weight on this GPU
        parts_k.append(keys[mine])
        parts_p.append(pi[mine] / share[t] * (n / lookups))
    return np.concatenate(parts_k), np.concatenate(parts_p), lookups


def rank_expected_distinct(
    source: Any, shards: list[tuple[int, float]], salt: int, threshold: int
) -> tuple[float, np.ndarray]:
    """The distinct rows one GPU's sample is expected to hold over the run, given which
    rows it sampled (whole sample, each of the K groups [K]): sum over its sampled rows of
    1 - exp(-π_i N), N the GPU's full lookups (a row's lookups are Binomial(N, π_i), the
    Poisson form Che's finite horizon uses, `che.finite_horizon_hits`). What the sample
    realizes less this has mean zero whatever rows were drawn: the auxiliary variable
    that `replay.plan.rank_curves` removes from a GPU's curve (its cold misses)."""
    keys, pi, lookups = _rank_population(source, shards)
    out_keys = np.empty(len(keys), dtype=np.int64)
    group = np.empty(len(keys), dtype=np.uint8)
    total = int(sum(t.rows for t in source.spec.tables))
    _shards_filter(keys, threshold, np.uint64(salt), total, out_keys, group)
    touched = -np.expm1(-pi * lookups)
    per_group = np.bincount(group, weights=touched, minlength=SUBSAMPLES)[:SUBSAMPLES]
    return float(touched.sum()), per_group


def _corrections(
    keys: np.ndarray, pi: np.ndarray, full: np.ndarray, total_rows: int, threshold: int,
    salt: int, sizes: np.ndarray, rate: float, lookups: float,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """(full - the sample's curve, the same for each SHARDS group): the sampled keys
    `keys` of rates `pi` grouped as the sampler groups them (`_shards_filter`)."""
    out_keys = np.empty(len(keys), dtype=np.int64)
    group = np.empty(len(keys), dtype=np.uint8)
    _shards_filter(keys, threshold, np.uint64(salt), total_rows, out_keys, group)
    whole = full - _sample_curve(pi, sizes, rate, lookups)
    groups = np.array(
        [
            full - _sample_curve(pi[group == g], sizes, rate / SUBSAMPLES, lookups)
            for g in range(SUBSAMPLES)
        ]
    ).reshape(SUBSAMPLES, len(sizes))
    return whole, groups


__all__ = [
    "METHOD",
    "applicable",
    "che_correction",
    "full_che",
    "rank_correction",
    "rank_expected_distinct",
    "sampled_population",
]
