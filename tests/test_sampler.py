"""The access model's kernels: exact distribution, bijection, and kernel == reference."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.workload import draws, reference, sampler
from replay.workload.spec import TableSpec


def _tables(specs: list[TableSpec], seed: int = 7) -> tuple[int, sampler.SamplerTables]:
    root = sampler.root_key(seed)
    return root, sampler.build_sampler_tables(specs, root)


def _log_buckets(rows: int, count: int = 40) -> np.ndarray:
    edges = np.unique(np.geomspace(1, rows + 1, count).astype(np.int64))
    return np.unique(np.concatenate([edges, [rows + 1]]))


@pytest.mark.parametrize("alpha", [0.9, 1.05, 1.3])
@pytest.mark.parametrize("rows", [50_000, 10_000_000])
def test_rank_draws_match_exact_pmf(alpha: float, rows: int) -> None:
    """Total-variation distance to the exact pmf over log-spaced rank buckets <= 0.002."""
    root, tables = _tables([TableSpec(name="t", rows=rows, alpha=alpha)])
    n = 8_000_000
    draws = sampler.sample_ranks(
        np.uint64(root), 0, n, tables.iparams, tables.fparams, tables.alias_prob,
        tables.alias_index,
    )  # fmt: skip
    assert draws.min() >= 1 and draws.max() <= rows
    edges = _log_buckets(rows)
    cdf = np.concatenate([[0.0], np.cumsum(reference.exact_pmf(rows, alpha))])
    expected = cdf[edges[1:] - 1] - cdf[edges[:-1] - 1]
    observed = np.histogram(draws, bins=edges)[0] / n
    tv = 0.5 * np.abs(observed - expected).sum()
    assert tv <= 0.002, tv
    # the very top ranks carry the most mass: each within 1% of its exact probability
    for k in (1, 2, 3):
        p = reference.exact_pmf(rows, alpha)[k - 1]
        assert abs(np.mean(draws == k) - p) <= 0.01 * p + 3 * math.sqrt(p / n)


def test_uniform_when_alpha_zero() -> None:
    root, tables = _tables([TableSpec(name="t", rows=10, alpha=0.0)])
    draws = sampler.sample_ranks(
        np.uint64(root), 0, 100_000, tables.iparams, tables.fparams, tables.alias_prob,
        tables.alias_index,
    )  # fmt: skip
    counts = np.bincount(draws, minlength=11)[1:]
    assert counts.min() > 9_500 and counts.max() < 10_500


@pytest.mark.parametrize("alpha", [0.5, 0.9, 1.0, 1.05, 1.3, 2.0])
def test_rejection_squeeze_is_valid_beyond_the_head(alpha: float) -> None:
    """The quick accept `k - x <= s` only accepts what the exact test accepts (k >= 2)."""
    _, _, s = sampler.zipf_constants(10**9, alpha)
    for k in np.unique(np.geomspace(2, 10**9, 400).astype(np.int64)):
        k = float(k)
        lowest_accepted = reference.h_integral(k + 0.5, alpha) - k**-alpha
        assert reference.h_integral(k - s, alpha) >= lowest_accepted - 1e-12 * abs(lowest_accepted)


def test_tail_sum_matches_direct_sum() -> None:
    for alpha in (0.9, 1.0, 1.3):
        direct = math.fsum((np.arange(4097, 300_001, dtype=np.float64) ** -alpha).tolist())
        assert sampler.tail_sum(4097, 300_000, alpha) == pytest.approx(direct, rel=1e-12)


@given(rows=st.integers(1, 5000), seed=st.integers(0, 2**32))
@settings(max_examples=60, deadline=None)
def test_feistel_permutation_is_a_bijection(rows: int, seed: int) -> None:
    keys = sampler.feistel_round_keys(sampler.root_key(seed), 3)
    bits = sampler.permutation_bits(rows)
    image = [int(sampler.permute_index(p, rows, bits, keys)) for p in range(rows)]
    assert sorted(image) == list(range(rows))
    assert image == [reference.permute(p, rows, bits, keys) for p in range(rows)]


def test_hot_rows_are_scattered_not_contiguous() -> None:
    rows = 10_000_000
    keys = sampler.feistel_round_keys(sampler.root_key(1), 0)
    bits = sampler.permutation_bits(rows)
    hot = np.array([sampler.permute_index(p, rows, bits, keys) for p in range(1000)])
    # the 1000 hottest rows land all over the table, not in the first chunk
    assert hot.max() - hot.min() > rows // 2
    assert len(np.unique(hot // (rows // 100))) > 90


MODEL_TABLES = [
    TableSpec(name="big", rows=200_003, alpha=1.1, drift=0.001, reuse=0.3, reuse_window_batches=3),
    TableSpec(name="multi", rows=5000, alpha=0.9, pooling=3, reuse=0.5),
    TableSpec(name="flat", rows=7, alpha=0.0, drift=0.05, drift_period_batches=2),
    TableSpec(name="ordered", rows=100_000, alpha=1.3, mapping="contiguous", drift=0.0001),
    TableSpec(name="one", rows=1),
]


def _kernel_and_reference(
    specs: list[TableSpec], seed: int, batch_size: int, start: int, stop: int
) -> tuple[list[tuple[int, int, int]], list[tuple[int, int, int]], np.ndarray, np.ndarray]:
    """(kernel's lookups, reference's lookups, kernel's table and row columns) of
    batches [start, stop)."""
    root, tables = _tables(specs, seed=seed)
    n = (stop - start) * batch_size * sum(t.pooling for t in specs)
    out_b, out_t, out_r = np.empty(n, np.uint32), np.empty(n, np.uint16), np.empty(n, np.uint32)
    draws.generate_lookups(
        np.uint64(root), start, stop, batch_size, tables.iparams, tables.fparams,
        tables.round_keys, tables.alias_prob, tables.alias_index, tables.perm, tables.guide,
        out_b, out_t, out_r,
    )  # fmt: skip
    expected = [
        (b, t, r)
        for b in range(start, stop)
        for t, r in reference.batch_lookups(root, b, batch_size, tables)
    ]
    got = list(zip(out_b.tolist(), out_t.tolist(), out_r.tolist(), strict=True))
    return got, expected, out_t, out_r


def test_generate_kernel_matches_reference() -> None:
    got, expected, out_t, out_r = _kernel_and_reference(MODEL_TABLES, 11, 6, 3, 7)
    assert got == expected
    for t, spec in enumerate(MODEL_TABLES):
        assert out_r[out_t == t].max() < spec.rows


# -- the hot values (issue 28): ranks 1..j with their own shares ---------------------------


@pytest.mark.parametrize(
    ("rows", "alpha", "hot"),
    [
        (50_000, 1.05, (0.37,)),
        (10_000_000, 0.9, (0.46,)),
        (200_000, 0.0, (0.3,)),
        (10, 0.0, (0.5,)),
        (100_000, 1.1, (0.46, 0.37)),
        (2_000, 0.8, (0.374, 0.077, 0.074)),
        (4, 1.05, (0.461, 0.459)),
    ],
)
def test_hot_values_take_their_shares_and_the_power_law_the_rest(
    rows: int, alpha: float, hot: tuple[float, ...]
) -> None:
    """Rank i <= j's frequency is s_i, rank k above j's (1 - sum s) k^-alpha / H_(j+1):
    within 4.5 binomial standard errors (one-sided p about 3.4e-6 per check; the seed is
    fixed, so the test is repeatable); the log-bucket total variation <= 0.002."""
    root, tables = _tables([TableSpec(name="t", rows=rows, alpha=alpha, hot_shares=hot)])
    n = 4_000_000
    draws = sampler.sample_ranks(
        np.uint64(root), 0, n, tables.iparams, tables.fparams, tables.alias_prob,
        tables.alias_index,
    )  # fmt: skip
    assert draws.min() >= 1 and draws.max() <= rows
    j = len(hot)
    rest = sampler.power_law_sum(rows, alpha) - sum(i**-alpha for i in range(1, j + 1))
    for k in range(1, min(j + 2, rows) + 1):
        p = hot[k - 1] if k <= j else (1.0 - sum(hot)) * k**-alpha / rest
        assert abs(np.mean(draws == k) - p) <= 4.5 * math.sqrt(p * (1 - p) / n), (k, p)
    if rows <= 10_000_000:
        edges = _log_buckets(rows)
        cdf = np.concatenate([[0.0], np.cumsum(reference.exact_pmf(rows, alpha, hot))])
        expected = cdf[edges[1:] - 1] - cdf[edges[:-1] - 1]
        observed = np.histogram(draws, bins=edges)[0] / n
        assert 0.5 * np.abs(observed - expected).sum() <= 0.002


def test_no_hot_values_change_nothing() -> None:
    """hot_shares = [] or [0.0] builds the very tables (so the very lookups) of a spec
    without them, and the spec's plain data (manifests, digests, TOML) has no key."""
    from replay.workload.spec import WorkloadSpec, spec_from_dict, spec_to_toml

    root = sampler.root_key(5)
    plain = sampler.build_sampler_tables(MODEL_TABLES, root)
    spec = WorkloadSpec("w", tuple(MODEL_TABLES))
    zero = spec_from_dict({**spec.to_dict(), "defaults": {"hot_shares": [0.0]}})
    assert all(t.hot_shares == () for t in zero.tables)
    built = sampler.build_sampler_tables(zero.tables, root)
    for name in ("iparams", "fparams", "round_keys", "alias_prob", "alias_index", "perm"):
        assert getattr(plain, name).tobytes() == getattr(built, name).tobytes(), name
    assert all("hot_shares" not in t for t in spec.to_dict()["tables"])
    assert "hot" not in spec_to_toml(spec)
    several = WorkloadSpec("w", tuple(t for t in MODEL_TABLES if t.rows > 2))
    hot = spec_from_dict({**several.to_dict(), "defaults": {"hot_shares": [0.25, 0.0625]}})
    assert [t.hot_shares for t in hot.tables] == [(0.25, 0.0625)] * len(several.tables)
    assert all(t["hot_shares"] == [0.25, 0.0625] for t in hot.to_dict()["tables"])
    assert spec_from_dict(hot.to_dict()) == hot


def test_hot_generate_kernel_matches_reference() -> None:
    """With hot values, drift, reuse and both mappings the kernel is the reference,
    lookup for lookup (the hot row is rank 1's row: drift moves it like any rank)."""
    specs = [
        TableSpec(**{**vars(t), "hot_shares": (0.4, 0.1)[: min(2, t.rows - 1)]})
        for t in MODEL_TABLES
    ]
    got, expected, _, _ = _kernel_and_reference(specs, 13, 6, 2, 6)
    assert got == expected


def test_hot_shares_are_validated() -> None:
    from replay.errors import ConfigError
    from replay.workload.spec import spec_from_dict

    for bad in ([1.0], [-0.1], [1.5], ["0.3"], [True], 0.3, [0.6, 0.4], [0.01] * 21):
        with pytest.raises(ConfigError, match="hot_shares"):
            spec_from_dict({"tables": [{"name": "t", "rows": 10, "hot_shares": bad}]})
    # up to 20 (FBGEMM's heavy hitters)
    spec_from_dict({"tables": [{"name": "t", "rows": 100, "hot_shares": [0.01] * 20}]})
    with pytest.raises(ConfigError, match="no rank to the power law"):
        spec_from_dict({"tables": [{"name": "t", "rows": 2, "hot_shares": [0.5, 0.3]}]})
    # the first version's key, whose share was on top of the power law: refused, pointed
    with pytest.raises(ConfigError, match="replaced by hot_shares"):
        spec_from_dict({"tables": [{"name": "t", "rows": 10, "hot_share": 0.3}]})


def test_a_law_built_again_under_another_seed_is_the_one_built_before() -> None:
    """`build_sampler_tables` keeps the laws it built lately (`sampler._LAWS_KEPT`): the
    same laws under another root give the arrays a build from nothing gives, bit for bit,
    and the kept arrays are read-only; only the seed's parts (round keys, permutations)
    differ between the roots."""
    specs = [
        TableSpec("small", 5_000, alpha=1.1),
        TableSpec("hot", 2_000_000, alpha=0.9, hot_shares=(0.2, 0.05)),
        TableSpec("offset", 300_000, alpha=1.3, rank_offset=7.5),
        TableSpec("flat", 1_000, alpha=0.0),
    ]
    sampler._LAWS_KEPT.clear()
    fresh = sampler.build_sampler_tables(specs, 11, draws=[1 << 21] * len(specs))
    assert len(sampler._LAWS_KEPT) == 4
    assert sum(law.guide is not None for law in sampler._LAWS_KEPT.values()) == 2  # tails
    for law in sampler._LAWS_KEPT.values():
        assert all(a is None or not a.flags.writeable for a in (law.prob, law.alias, law.guide))
    kept = dict(sampler._LAWS_KEPT)
    again = sampler.build_sampler_tables(specs, 12, draws=[1 << 21] * len(specs))
    assert all(sampler._LAWS_KEPT[key] is law for key, law in kept.items())
    sampler._LAWS_KEPT.clear()
    alone = sampler.build_sampler_tables(specs, 12, draws=[1 << 21] * len(specs))
    for field in ("iparams", "fparams", "round_keys", "alias_prob", "alias_index", "perm", "guide"):
        np.testing.assert_array_equal(getattr(again, field), getattr(alone, field))
    for field in ("iparams", "fparams", "alias_prob", "alias_index", "guide"):
        np.testing.assert_array_equal(getattr(again, field), getattr(fresh, field))
    assert not np.array_equal(again.round_keys, fresh.round_keys)
