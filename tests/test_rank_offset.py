"""The Zipf-Mandelbrot head (`rank_offset` q: p(k) ~ (k + q)^-alpha) in the generator,
its Python twin, the sampled generator's weights and the analytic curves (issue 43)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from replay.errors import ConfigError
from replay.workload import reference, sampler
from replay.workload.spec import TableSpec, WorkloadSpec, spec_from_dict, spec_to_toml


def _tables(specs: list[TableSpec], seed: int = 11) -> tuple[int, sampler.SamplerTables]:
    root = sampler.root_key(seed)
    return root, sampler.build_sampler_tables(specs, root)


def _draws(root: int, tables: sampler.SamplerTables, n: int, t: int = 0) -> np.ndarray:
    return sampler.sample_ranks(
        np.uint64(root), t, n, tables.iparams, tables.fparams, tables.alias_prob,
        tables.alias_index,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("rows", "alpha", "q"),
    [(50_000, 1.1, 20.0), (3_000_000, 1.0, 7.5), (3_000_000, 1.5, 30_000.0), (2_000_000, 0.8, 0.3)],
)
def test_draws_follow_the_shifted_law(rows: int, alpha: float, q: float) -> None:
    """Total variation to the exact pmf (k + q)^-alpha over log-spaced rank buckets <=
    0.002 on 4 M draws, and ranks 1-3 within 4.5 binomial standard errors (fixed seed)."""
    root, tables = _tables([TableSpec(name="t", rows=rows, alpha=alpha, rank_offset=q)])
    n = 4_000_000
    draws = _draws(root, tables, n)
    assert draws.min() >= 1 and draws.max() <= rows
    pmf = reference.exact_pmf(rows, alpha, q=q)
    edges = np.unique(np.concatenate([np.geomspace(1, rows + 1, 40).astype(np.int64), [rows + 1]]))
    cdf = np.concatenate([[0.0], np.cumsum(pmf)])
    expected = cdf[edges[1:] - 1] - cdf[edges[:-1] - 1]
    observed = np.histogram(draws, bins=edges)[0] / n
    assert 0.5 * np.abs(observed - expected).sum() <= 0.002
    for k in (1, 2, 3):
        p = pmf[k - 1]
        assert abs(np.mean(draws == k) - p) <= 4.5 * math.sqrt(p * (1 - p) / n), (k, p)


@pytest.mark.parametrize("alpha", [0.5, 1.0, 1.3, 2.0])
@pytest.mark.parametrize("q", [0.3, 10.0, 5000.0])
def test_squeeze_is_valid_on_the_shifted_hat(alpha: float, q: float) -> None:
    """The quick accept `k - x <= s` only accepts what the exact test accepts (k >= 2)."""
    _, _, s = sampler.zipf_constants(10**9, alpha, q)
    for k in np.unique(np.geomspace(2, 10**9, 300).astype(np.int64)):
        k = float(k)
        lowest = reference.h_integral(k + 0.5 + q, alpha) - (k + q) ** -alpha
        assert reference.h_integral(k - s + q, alpha) >= lowest - 1e-12 * abs(lowest)


def test_kernel_draws_are_the_reference_draws() -> None:
    """The numba draw is the Python twin's, rank for rank, head and tail, q != 0."""
    specs = [
        TableSpec(name="a", rows=3_000_000, alpha=1.2, rank_offset=40.0),
        TableSpec(name="b", rows=70_000, alpha=0.9, rank_offset=2.5, hot_shares=(0.2,)),
    ]
    root, tables = _tables(specs)
    for t in range(len(specs)):
        n = 3000
        got = _draws(root, tables, n, t)
        key = reference.stream_key(root, 0, t, sampler.PURPOSE_FRESH)
        want = [
            reference.draw_rank(reference.mix64(key + (j + 1) * int(sampler.GAMMA)), t, tables)
            for j in range(n)
        ]
        assert got.tolist() == want


def test_zero_offset_is_the_plain_law_bit_for_bit() -> None:
    """rank_offset = 0 builds the very sampler tables of a spec without the key, and
    leaves the key out of the plain data (manifests, digests, TOML)."""
    plain = WorkloadSpec("w", (TableSpec("a", 100_000, 1.05), TableSpec("b", 500, 0.7)))
    zero = spec_from_dict({**plain.to_dict(), "defaults": {"rank_offset": 0.0}})
    assert zero == plain
    root = sampler.root_key(3)
    a = sampler.build_sampler_tables(plain.tables, root)
    b = sampler.build_sampler_tables(zero.tables, root)
    for name in ("iparams", "alias_prob", "alias_index", "perm"):
        assert getattr(a, name).tobytes() == getattr(b, name).tobytes()
    assert "rank_offset" not in spec_to_toml(plain)
    shifted = spec_from_dict({**plain.to_dict(), "defaults": {"rank_offset": 12.5}})
    assert all(t["rank_offset"] == 12.5 for t in shifted.to_dict()["tables"])
    assert spec_from_dict(shifted.to_dict()) == shifted
    for bad in (-1.0, "3", float("nan"), 2.0**41):
        with pytest.raises(ConfigError, match="rank_offset"):
            spec_from_dict({"tables": [{"name": "t", "rows": 10, "rank_offset": bad}]})


def test_analytic_sums_honour_the_offset() -> None:
    """Che's popularity, the sampled generator's normaliser and the generator's sums are
    those of (k + q)^-alpha."""
    from replay.analysis.che import table_popularity
    from replay.workload.sampled import _hot_weights

    rows, alpha, q = 300_000, 1.1, 25.0
    direct = math.fsum(((np.arange(1, rows + 1) + q) ** -alpha).tolist())
    assert sampler.power_law_sum(rows, alpha, q) == pytest.approx(direct, rel=1e-10)
    assert _hot_weights(rows, alpha, (), q)[1] == pytest.approx(direct, rel=1e-10)
    pop = table_popularity(rows, alpha, rank_offset=q)
    assert float(pop.counts @ pop.probabilities) == pytest.approx(1.0, rel=1e-9)
    exact = reference.exact_pmf(rows, alpha, q=q)
    assert pop.probabilities[0] == pytest.approx(exact[0], rel=1e-9)
    assert pop.probabilities[0] < table_popularity(rows, alpha).probabilities[0]
