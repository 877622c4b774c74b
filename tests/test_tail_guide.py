"""The power law's tail guide (`replay.workload.sampler.build_tail_guide`): every rank it
gives is the rank the rejection inversion computes with log1p and exp, at random
uniforms, at the guide's bucket edges and at the uniforms where the draw's x crosses a
rank's rounding boundary or its squeeze; and whole workloads draw the same keys as the
generator did before it had a guide (golden digests)."""

from __future__ import annotations

import hashlib

import numba
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.workload import draws, reference
from replay.workload import sampler as S
from replay.workload.generator import CompiledWorkload, resolve_workload
from replay.workload.spec import TableSpec


@numba.njit(cache=True)
def _exact(
    u: float, rows: int, head: int, alpha: float, lo: float, hi: float, s: float, q: float
) -> int:
    """One tail attempt as `draw_rank_scalar` makes it without a guide: k if it takes k
    at the squeeze, -k where it would test k further (which the guide never claims)."""
    w = hi + u * (lo - hi)
    x = S._h_integral_inverse(w, alpha) - q
    k = np.int64(x + 0.5)
    if k <= head:
        k = head + 1
    elif k > rows:
        k = rows
    return k if k - x <= s else -k


@numba.njit(cache=True)
def _compare(
    units: np.ndarray, guide: np.ndarray, goff: int, rows: int, head: int, alpha: float,
    lo: float, hi: float, s: float, q: float,
) -> tuple[int, int]:  # fmt: skip
    """(draws the guide answered, of those the ones whose rank differs), at u = units
    * 2^-53 (the draws' 53-bit uniforms)."""
    answered = wrong = 0
    for n in units:
        u = np.int64(n) * S.INV_2_53
        k = S.guided_rank(u, guide, goff, head, rows, s)
        if k:
            answered += 1
            if k != _exact(u, rows, head, alpha, lo, hi, s, q):
                wrong += 1
    return answered, wrong


def _law(rows: int, alpha: float, q: float = 0.0) -> tuple[S.SamplerTables, tuple]:
    tables = S.build_sampler_tables([TableSpec(name="t", rows=rows, alpha=alpha, rank_offset=q)], 5)
    ip, fp = tables.iparams[0], tables.fparams[0]
    args = (
        int(ip[S.I_GUIDE_OFF]), rows, int(ip[S.I_HEAD]), alpha,
        float(fp[S.F_TAIL_LO]), float(fp[S.F_TAIL_HI]), float(fp[S.F_TAIL_S]), q,
    )  # fmt: skip
    return tables, args


def _edge_units(
    rows: int, head: int, alpha: float, lo: float, hi: float, s: float, q: float, ranks: int
) -> np.ndarray:
    """53-bit uniforms at and 2^0..2^44 units either side of every bucket's edge and of
    where x crosses k + 1/2 and k - s, for `ranks` ranks k spread over the tail."""
    top = 1 << 53
    steps = np.array([0] + [(1 << e) * sign for e in range(45) for sign in (1, -1)], np.int64)
    edges = np.arange(S.GUIDE_BUCKETS, dtype=np.int64) << (53 - 14)
    ks = np.unique(np.geomspace(head + 1, rows, ranks).astype(np.int64))
    centres = []
    for target in (ks + 0.5, ks - s):
        w = np.array([S._h_integral(float(y) + q, alpha) for y in target])
        centres.append(((w - hi) / (lo - hi) * top).astype(np.int64))
    near = (np.concatenate(centres)[:, None] + steps[None, :]).ravel()
    units = np.concatenate([edges, (edges[:, None] + steps[None, :20]).ravel(), near])
    return units[(units >= 0) & (units < top)]


LAWS = [
    (440_123, 0.5799, 0.0),  # meta-2021's four laws' three with a tail
    (16_173_309, 1.1281, 10.475),
    (256_110, 0.9121, 3.707),
    (1_000_000, 1.0, 0.0),  # H^-1 = exp, the helpers' series near 0
    (70_000, 0.5, 0.0),  # the quadratic is exact
    (40_000_000, 1.2, 0.0),
    (2**31, 0.9, 0.0),
    (300_000, 1.5, 1e5),
]


@pytest.mark.parametrize(("rows", "alpha", "q"), LAWS)
def test_guided_ranks_are_the_exact_draws(rows: int, alpha: float, q: float) -> None:
    tables, (goff, *law) = _law(rows, alpha, q)
    assert goff == 0
    units = np.random.default_rng(rows).integers(0, 1 << 53, 200_000, dtype=np.int64)
    answered, wrong = _compare(units, tables.guide, goff, *law)
    # the squeeze (k - x <= s) alone refuses 0-2.5% of the attempts
    assert wrong == 0 and answered > 0.97 * len(units)
    edges = _edge_units(*law, ranks=2_000)
    answered, wrong = _compare(edges, tables.guide, goff, *law)
    assert wrong == 0 and answered > len(edges) // 3


@settings(max_examples=25, deadline=None)
@given(
    rows=st.integers(65_537, 1 << 40),
    alpha=st.floats(0.05, 3.0),
    q=st.one_of(st.just(0.0), st.floats(0.0, 1e6)),
)
def test_guided_ranks_of_any_law(rows: int, alpha: float, q: float) -> None:
    tables, (goff, *law) = _law(rows, alpha, q)
    if goff < 0:  # no guide (H^-1 would clamp): every draw computes its x
        assert len(tables.guide) == 1
        return
    units = np.random.default_rng(7).integers(0, 1 << 53, 20_000, dtype=np.int64)
    units = np.concatenate([units, _edge_units(*law, ranks=50)])
    assert _compare(units, tables.guide, goff, *law)[1] == 0


def test_one_law_one_alias_table_and_guide() -> None:
    """Tables of one law share its alias table and guide; the permutations stay each
    table's own."""
    specs = [TableSpec(name=f"t{i}", rows=100_000, alpha=0.8) for i in range(3)]
    specs.append(TableSpec(name="small", rows=5_000, alpha=0.8))
    tables = S.build_sampler_tables(specs, 3)
    ip = tables.iparams
    assert ip[:3, S.I_ALIAS_OFF].tolist() == [0, 0, 0]
    assert ip[:3, S.I_GUIDE_OFF].tolist() == [0, 0, 0] and ip[3, S.I_GUIDE_OFF] == -1
    assert len(tables.alias_prob) == S.HEAD_RANKS + 5_000
    assert tables.guide.shape == (S.GUIDE_BUCKETS, 4)
    assert len(set(ip[:, S.I_PERM_OFF].tolist())) == 4


# SHA-256 of (batch, table, row as uint64) of each workload's first batches, as the
# generator drew them before the tail had a guide (and so since)
KEYS_SHA256 = {
    ("meta-2021", 16, 1): "c6368045688ceba09721a5d8cdb4675a23afbaac012f54d16470359e293c33f5",
    (
        "criteo-terabyte",
        2048,
        5,
    ): "c0b29e3269112e95f1b07548620ca9d62193c3fc6c11e4085d3ce620f43550ee",
    ("criteo-kaggle", 128, 50): "7e43bdca40ab5f650a3a3b5d58aeaf0413dbcc394581320f7e73c3dff9f41e24",
    ("tiny", 64, 50): "e27495d615805419f4aac294a37df58a054c9b65ce3b7b23a52f0d3cecac8f53",
}


@pytest.mark.parametrize("guided", [False, True])
@pytest.mark.parametrize(("name", "batch_size", "batches"), list(KEYS_SHA256))
def test_workloads_draw_the_keys_they_drew_before(
    name: str, batch_size: int, batches: int, guided: bool
) -> None:
    # the same first batches of a workload of these few batches (its laws drawn too
    # rarely to pay for a guide) and of one of a million (every tail law guided)
    spec = resolve_workload(name).with_overrides(
        batch_size=batch_size, batches=10**6 if guided else batches
    )
    compiled = CompiledWorkload.from_spec(spec)
    head = compiled.tables.iparams[:, 2]
    tails = (head > 0) & (head < compiled.rows)  # an alias head short of the rows
    has_guide = compiled.tables.iparams[:, 10] >= 0
    assert has_guide.any() == (guided and bool(tails.any())), (has_guide, tails)
    b, t, r = compiled.lookups(0, batches)
    digest = hashlib.sha256(b.tobytes() + t.tobytes() + r.astype(np.uint64).tobytes())
    assert digest.hexdigest() == KEYS_SHA256[name, batch_size, batches]


BLOCK_TABLES = [
    TableSpec(name="flat", rows=440_123, alpha=0.5799, pooling=3),
    TableSpec(name="steep", rows=16_173_309, alpha=1.1281, rank_offset=10.475),
    TableSpec(name="small", rows=33_113, alpha=0.7071, rank_offset=2327.08),  # all head
    TableSpec(name="mid", rows=256_110, alpha=0.9121, rank_offset=3.707, pooling=2),
    TableSpec(name="wide", rows=70_001, alpha=1.0),  # 19% of its Feistel passes walk on
]


def _generate(tables: S.SamplerTables, fp: np.ndarray, batch_size: int) -> np.ndarray:
    n = batch_size * sum(t.pooling for t in BLOCK_TABLES)
    b, t, r = np.empty(n, np.uint32), np.empty(n, np.uint16), np.empty(n, np.uint32)
    draws.generate_lookups(
        np.uint64(11), 0, 1, batch_size, tables.iparams, fp, tables.round_keys,
        tables.alias_prob, tables.alias_index, tables.perm, tables.guide, b, t, r,
    )  # fmt: skip
    return r


def test_blocks_draw_the_rows_of_the_one_at_a_time_loop() -> None:
    """The tables with a guide and fresh draws go through `_fill_blocks`; with a reuse
    probability (batch 0 has no history, so its draws are all fresh: the same rows) they
    go through `_fill_table`, one lookup at a time."""
    tables = S.build_sampler_tables(BLOCK_TABLES, 11)
    assert (tables.iparams[:, S.I_GUIDE_OFF] >= 0).sum() == 4
    blocks = _generate(tables, tables.fparams, 20_000)
    fp = tables.fparams.copy()
    fp[:, S.F_REUSE] = 0.5
    assert np.array_equal(blocks, _generate(tables, fp, 20_000))
    expected = [r for _, r in reference.batch_lookups(11, 0, 300, tables)]
    assert _generate(tables, tables.fparams, 300).tolist() == expected
