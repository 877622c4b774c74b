"""Spatially sampled generation (`replay.workload.sampled`): the sampled rows are SHARDS's,
S_t is the pmf's mass on them, and the stream has the law of the full stream filtered."""

from __future__ import annotations

import math

import numpy as np
import pytest

from replay.errors import ConfigError
from replay.trace.keys import table_offsets
from replay.trace.stream import iter_batch_ranges
from replay.trace.updates import update_sets_reference
from replay.workload import reference, sampled, sampler
from replay.workload.onthefly import GeneratedTrace
from replay.workload.sampled import (
    BINOMIAL_CUT,
    SampledWorkload,
    _binomial_window,
    open_sampled_workload,
)
from replay.workload.spec import TableSpec, UpdateRule, WorkloadSpec

RATE = 0.25
# Chi-square statistics are turned into z scores by Wilson-Hilferty; a table fails above
# Z_LIMIT (one-sided p = 3.4e-6 per test; the seeds are fixed, so the test is repeatable)
Z_LIMIT = 4.5


def _spec(**kw: object) -> WorkloadSpec:
    tables = (
        TableSpec(name="small", rows=50, alpha=0.8),
        TableSpec(name="mid", rows=500, alpha=1.2, pooling=3),
        TableSpec(name="big", rows=5000, alpha=1.0),
        TableSpec(name="flat", rows=300, alpha=0.0, mapping="contiguous"),
    )
    base: dict[str, object] = dict(name="s", tables=tables, batch_size=128, batches=400, seed=3)
    base.update(kw)
    return WorkloadSpec(**base)  # type: ignore[arg-type]


def _hot(
    spec: WorkloadSpec,
    shares: tuple[tuple[float, ...], ...] = ((0.37, 0.1), (0.2,), (0.46, 0.3), (0.3,), (0.1,)),
) -> WorkloadSpec:
    """`spec` with hot values on each table (issue 28): ranks 1 (and 2) with their own
    shares. Seed 5 puts rank 1's row of tables mid, big and large among the rows SHARDS
    keeps at RATE (`_hot_rows_sampled`), so the hot mass is on sampled rows as well as
    off them."""
    tables = tuple(
        TableSpec(**{**vars(t), "hot_shares": h}) for t, h in zip(spec.tables, shares, strict=False)
    )
    return WorkloadSpec(**{**vars(spec), "tables": tables, "seed": 5})


def _hot_rows_sampled(spec: WorkloadSpec, keeps: list[np.ndarray]) -> list[bool]:
    return [bool(keeps[t][_rank_rows(spec, t)[0]]) for t in range(len(spec.tables))]


def _all(source: GeneratedTrace, start: int = 0, stop: int | None = None) -> np.ndarray:
    """(batch, table, row) of every lookup, as one int64 [n, 3] array."""
    parts = [
        np.stack([c.batch.astype(np.int64), c.table.astype(np.int64), c.row.astype(np.int64)], 1)
        for c in source.iter_lookups(start, stop)
    ]
    return np.concatenate(parts) if parts else np.zeros((0, 3), dtype=np.int64)


def _keeps(spec: WorkloadSpec, threshold: int) -> list[np.ndarray]:
    """Per table: a boolean per row, SHARDS's verdict (the analysis filter, all rows)."""
    from replay.analysis.shards import shards_sample_columns

    rows = np.array([t.rows for t in spec.tables], dtype=np.int64)
    offsets = table_offsets(rows)
    out = []
    for t, n in enumerate(rows.tolist()):
        _, keys, _ = shards_sample_columns(
            np.full(n, t, dtype=np.uint16), np.arange(n, dtype=np.uint32), offsets, rows, threshold
        )
        mask = np.zeros(n, dtype=bool)
        mask[keys - offsets[t]] = True
        out.append(mask)
    return out


def _z(stat: float, df: int) -> float:
    """Wilson-Hilferty: a chi-square(df) statistic as a standard normal score."""
    v = 2.0 / (9.0 * df)
    return ((stat / df) ** (1.0 / 3.0) - (1.0 - v)) / math.sqrt(v)


def _rank_rows(spec: WorkloadSpec, t: int) -> np.ndarray:
    """Row of each rank 1..rows, as the full generator maps them."""
    table = spec.tables[t]
    if table.mapping == "contiguous":
        return np.arange(table.rows)
    root = sampler.root_key(spec.seed)
    bits = sampler.permutation_bits(table.rows)
    keys = sampler.feistel_round_keys(root, t)
    return sampler._explicit_permutation(table.rows, table.rows, bits, keys).astype(np.int64)


def test_shards_constants_live_in_the_sampler() -> None:
    from replay.analysis import shards

    assert shards.SHARDS_SALT is sampler.SHARDS_SALT
    assert shards.shards_threshold is sampler.shards_threshold
    assert shards.SHARDS_MODULUS == sampler.SHARDS_MODULUS == 1 << 24


def test_sampled_rows_are_the_rows_shards_keeps() -> None:
    spec = _spec(tables=(*_spec().tables, TableSpec(name="large", rows=100_000, alpha=1.05)))
    w = open_sampled_workload(spec, RATE, threads=2)
    assert w.threshold == sampler.shards_threshold(RATE)
    assert w.sample_rate == w.threshold / 2**24
    assert w.tables is not None
    for t, mask in enumerate(_keeps(spec, w.threshold)):
        lo, hi = int(w.tables.row_off[t]), int(w.tables.row_off[t + 1])
        assert np.array_equal(w.tables.row_ids[lo:hi].astype(np.int64), np.flatnonzero(mask))
        assert int(w.sampled_rows[t]) == int(mask.sum())


@pytest.mark.parametrize("hot", [False, True])
def test_sampled_mass_is_the_pmf_on_the_sampled_rows(hot: bool) -> None:
    """S_t against the brute force: every rank mapped to its row, pmf summed (1e-12);
    with hot values, ranks 1 and 2's rows carry their shares."""
    spec = _spec(tables=(*_spec().tables, TableSpec(name="large", rows=100_000, alpha=1.05)))
    spec = _hot(spec) if hot else spec
    w = open_sampled_workload(spec, RATE, threads=1)
    if hot:
        sampled_hot = _hot_rows_sampled(spec, _keeps(spec, w.threshold))
        assert sampled_hot == [False, True, True, False, True]
    for t, mask in enumerate(_keeps(spec, w.threshold)):
        table = spec.tables[t]
        pmf = reference.exact_pmf(table.rows, table.alpha, table.hot_shares)
        brute = math.fsum(pmf[mask[_rank_rows(spec, t)]].tolist())
        assert w.sampled_mass[t] == pytest.approx(brute, rel=1e-12), table.name


@pytest.mark.parametrize(
    ("n", "p"), [(128, 0.001), (384, 0.3), (2048, 0.999), (6144, 0.5), (5, 1.0), (7, 0.0)]
)
def test_binomial_table_is_the_binomial_pmf(n: int, p: float) -> None:
    lo, w = _binomial_window(n, p)
    k = np.arange(n + 1)
    if p in (0.0, 1.0):
        exact = (k == round(n * p)).astype(np.float64)
    else:
        exact = np.array(
            [
                math.exp(
                    math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1)
                    + i * math.log(p) + (n - i) * math.log1p(-p)
                )
                for i in k.tolist()
            ]
        )  # fmt: skip
    got = np.zeros(n + 1)
    got[lo : lo + len(w)] = w / w.sum()
    assert exact.sum() - exact[lo : lo + len(w)].sum() < BINOMIAL_CUT + 1e-15
    assert np.abs(got - exact).max() < 1e-12


@pytest.mark.parametrize("hot", [False, True])
def test_stream_has_the_law_of_the_filtered_full_stream(hot: bool) -> None:
    """Per table: rows of the sampled stream vs the full stream filtered (two-sample
    chi-square) and vs the exact restricted pmf (one-sample); per-batch counts vs
    Binomial(n_t, S_t) (mean and variance within 5 standard errors). With hot values
    (issue 28) too: the hot row is rank 1's row, sampled or not like any other."""
    spec = _spec(batches=1500)
    spec = _hot(spec) if hot else spec
    full = _all(GeneratedTrace(spec, threads=2))
    w = open_sampled_workload(spec.with_overrides(batches=20_000), RATE, threads=2)
    got = _all(w)
    keeps = _keeps(spec, w.threshold)
    if hot:
        assert _hot_rows_sampled(spec, keeps) == [False, True, True, False]
    for t, table in enumerate(spec.tables):
        mine = full[full[:, 1] == t, 2]
        a = np.bincount(mine[keeps[t][mine]], minlength=table.rows).astype(np.float64)
        b = np.bincount(got[got[:, 1] == t, 2], minlength=table.rows).astype(np.float64)
        assert not b[~keeps[t]].any(), f"{table.name}: a row outside the sample"
        # restricted pmf by row
        pmf = np.zeros(table.rows)
        pmf[_rank_rows(spec, t)] = reference.exact_pmf(table.rows, table.alpha, table.hot_shares)
        pmf = np.where(keeps[t], pmf, 0.0)
        pmf /= pmf.sum()
        # bins: sampled rows by decreasing pmf, the smallest merged until each expects >= 20
        order = np.argsort(-pmf)[: int(keeps[t].sum())]
        cut = np.cumsum(pmf[order]) * min(a.sum(), b.sum())
        bins = np.minimum(np.floor(cut / 20).astype(np.int64), int(cut[-1] // 20) - 1)
        bins = np.unique(np.maximum(bins, 0), return_inverse=True)[1]
        ab, bb = np.bincount(bins, a[order]), np.bincount(bins, b[order])
        pb = np.bincount(bins, pmf[order])
        df = len(ab) - 1
        if df < 1:
            continue
        na, nb = ab.sum(), bb.sum()
        two = float(np.sum((ab * math.sqrt(nb / na) - bb * math.sqrt(na / nb)) ** 2 / (ab + bb)))
        one = float(np.sum((bb - nb * pb) ** 2 / (nb * pb)))
        assert _z(two, df) < Z_LIMIT, f"{table.name}: two-sample z = {_z(two, df):.2f}"
        assert _z(one, df) < Z_LIMIT, f"{table.name}: one-sample z = {_z(one, df):.2f}"
        # per-batch counts
        n, s = spec.batch_size * table.pooling, float(w.sampled_mass[t])
        counts = np.bincount(got[got[:, 1] == t, 0], minlength=w.num_batches).astype(float)
        mean, var = n * s, n * s * (1 - s)
        mu4 = var * (1 + 3 * (n - 2) * s * (1 - s))
        m = len(counts)
        assert abs(counts.mean() - mean) < 5 * math.sqrt(var / m), table.name
        assert abs(counts.var(ddof=1) - var) < 5 * math.sqrt((mu4 - var**2) / m), table.name
        # the filtered full stream's counts agree too
        filt = np.bincount(full[full[:, 1] == t][keeps[t][mine], 0], minlength=spec.batches)
        assert abs(filt.mean() - mean) < 5 * math.sqrt(var / spec.batches), table.name


def test_deterministic_whatever_threads_and_ranges(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sampled, "ROW_GROUP_TARGET_LOOKUPS", 5000)  # many row groups
    spec = _spec(batches=3000)
    one = open_sampled_workload(spec, 0.05, threads=1)
    two = open_sampled_workload(spec, 0.05, threads=2)
    assert len(one.row_groups) > 1
    everything = _all(one)
    assert np.array_equal(everything, _all(two))
    pieces = np.concatenate([_all(two, 0, 777), _all(two, 777, 1234), _all(two, 1234, None)])
    assert np.array_equal(everything, pieces)
    assert one.num_lookups == len(everything) == two.num_lookups
    sd = math.sqrt(one.expected_lookups)  # about: the counts are binomial, sd <= sqrt(mean)
    assert abs(one.num_lookups - one.expected_lookups) < 5 * sd
    assert one.digest() == two.digest() != GeneratedTrace(spec).digest()
    assert one.digest() != open_sampled_workload(spec, 0.06, threads=1).digest()
    # the replay stream: flat keys and per-batch bounds of the same lookups
    offsets = table_offsets(one.table_rows)
    keys = np.concatenate(
        [r.keys for r in iter_batch_ranges(two, 100, 2900, with_updates=False)]
    ).astype(np.int64)
    part = _all(one, 100, 2900)
    assert np.array_equal(keys, offsets[part[:, 1]] + part[:, 2])


def test_rate_one_is_the_full_stream() -> None:
    """At R = 1 every row is sampled: the very same lookups, even with reuse and drift."""
    tables = tuple(
        TableSpec(name=t.name, rows=t.rows, alpha=t.alpha, pooling=t.pooling, reuse=0.3, drift=0.01)
        for t in _spec().tables
    )
    spec = _spec(tables=tables, batches=50)
    w = open_sampled_workload(spec, 1.0, threads=2)
    assert w.sample_rate == 1.0 and np.array_equal(w.sampled_rows, w.table_rows)
    assert np.all(w.sampled_mass == 1.0)
    assert np.array_equal(_all(w), _all(GeneratedTrace(spec, threads=1)))
    assert w.num_lookups == spec.lookups
    assert w.digest() == GeneratedTrace(spec).digest()


@pytest.mark.parametrize(("option", "value"), [("reuse", 0.1), ("drift", 0.001)])
def test_reuse_and_drift_are_refused_below_rate_one(option: str, value: float) -> None:
    spec = _spec().with_overrides(**{option: value})
    with pytest.raises(ConfigError) as info:
        open_sampled_workload(spec, 0.5)
    message = str(info.value)
    assert "\n" not in message and f"{option} = {value:g}" in message
    with pytest.raises(ConfigError, match="sample_rate"):
        open_sampled_workload(_spec(), 0.0)


def test_updates_are_the_distinct_sampled_lookups_per_window(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sampled, "ROW_GROUP_TARGET_LOOKUPS", 500)  # many row groups
    tables = (*_spec().tables[:3], TableSpec(name="frozen", rows=400, alpha=1.0, frozen=True))
    spec = _spec(tables=tables, batches=301, update=UpdateRule(accumulate_batches=3))
    w = SampledWorkload(spec, 0.02, threads=2)
    assert len(w.row_groups) > 1 and all((g1 - g0) % 3 == 0 for g0, g1 in w.row_groups[:-1])
    looked = _all(w)
    want = update_sets_reference(
        looked[:, 0].astype(np.uint32), looked[:, 1].astype(np.uint16),
        looked[:, 2].astype(w.row_dtype), 0, spec.batches, w.table_rows,
        np.array([t.frozen for t in tables]), 3,
    )  # fmt: skip
    chunks = list(w.iter_updates())
    got = [np.concatenate([getattr(c, f) for c in chunks]) for f in ("batch", "table", "row")]
    got.append(np.concatenate([c.count for c in chunks]))
    for g, e in zip(got, want, strict=True):
        assert np.array_equal(g.astype(np.int64), e.astype(np.int64))
    assert len(got[0]) and not np.any(got[1] == 3)
