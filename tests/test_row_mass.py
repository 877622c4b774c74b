"""`RowMass.from_spec` (`replay.workload.row_mass`): each law's head shares built once and
shared, the head's rows sorted by a radix kernel that also gathers the shares and sums
them, no O(n) check on its own sorted output. Pinned against the code it replaced, kept
here as the reference: every field and index array the same bytes and dtype, on small
tables that reach each path of the kernel, on random laws, and on meta-2021's and the
criteo presets' tables (a sample here, all of them under `-m bench`). User-built RowMass
still refuses bad top rows."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replay.workload import row_mass, sampler
from replay.workload.presets import get_preset
from replay.workload.row_mass import SHARE_HEAD_RANKS, RowMass
from replay.workload.sampled import _hot_weights
from replay.workload.spec import TableSpec, WorkloadSpec

FAST = settings(
    max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)


def _reference(spec: WorkloadSpec, t: int, head_ranks: int = SHARE_HEAD_RANKS) -> RowMass:
    """`RowMass.from_spec` as it was: the weights per table, numpy's argsort, the
    validating constructor."""
    table = spec.tables[t]
    rows = int(table.rows)
    q = float(getattr(table, "rank_offset", 0.0))
    hot, norm = _hot_weights(rows, float(table.alpha), table.hot_shares, q)
    head = min(rows, int(head_ranks))
    out_row = np.empty(head, dtype=np.int64)
    weight = np.empty(head, dtype=np.float64)
    row_mass._head_rows(
        rows, head, table.mapping == "contiguous", sampler.permutation_bits(rows),
        sampler.feistel_round_keys(sampler.root_key(spec.seed), t), float(table.alpha),
        hot, out_row, weight, q,
    )  # fmt: skip
    order = np.argsort(out_row)
    tail = max(norm - float(weight.sum()), 0.0) if rows > head else 0.0
    return RowMass(rows, out_row[order], weight[order] / norm, np.array([tail / norm]))


def _assert_same(got: RowMass, want: RowMass) -> None:
    assert got.rows == want.rows
    for name in ("top_rows", "top_mass", "bin_mass"):
        a, b = getattr(got, name), getattr(want, name)
        assert a.dtype == b.dtype and np.array_equal(a, b), name
    assert sorted(got._index) == sorted(want._index)
    for name, b in want._index.items():
        a = got._index[name]
        assert a.dtype == b.dtype and np.array_equal(a, b), name


def _spec(*tables: TableSpec, seed: int = 11) -> WorkloadSpec:
    return WorkloadSpec("rm", tables, batch_size=64, batches=2, seed=seed)


# (table, head ranks): each path of the kernel. A whole table (head = rows, no sort);
# the radix sort at 1, 2, 3 and 4 passes of the row's bits; a row and a rank too wide for
# one int64 (numpy's sort); contiguous rows; hot shares, an offset, alpha 0, tiny tables.
CASES = [
    (TableSpec("whole", rows=1000, alpha=1.05, hot_shares=(0.3, 0.1)), SHARE_HEAD_RANKS),
    (TableSpec("one-pass", rows=1000, alpha=0.8), 50),
    (TableSpec("two-pass", rows=70_001, alpha=1.2, rank_offset=3.5), 3000),
    (TableSpec("three-pass", rows=(1 << 30) + 7, alpha=0.9, hot_shares=(0.2,)), 2000),
    (TableSpec("four-pass", rows=1 << 44, alpha=1.1), 1000),
    (TableSpec("packed-edge", rows=1 << 53, alpha=1.0), 1024),  # 53 + 10 bits: fits
    (TableSpec("unpacked", rows=1 << 53, alpha=1.0), 1025),  # 53 + 11 bits: numpy's sort
    (TableSpec("contiguous", rows=5000, alpha=1.3, mapping="contiguous"), 100),
    (TableSpec("contiguous-whole", rows=64, alpha=1.3, mapping="contiguous"), 4096),
    (TableSpec("flat", rows=3000, alpha=0.0), 700),
    (TableSpec("one-row", rows=1, alpha=1.0), SHARE_HEAD_RANKS),
    (TableSpec("two-rows", rows=2, alpha=0.5), 1),
]


@pytest.mark.parametrize(("table", "head"), CASES, ids=[c[0].name for c in CASES])
def test_from_spec_is_the_reference_bit_for_bit(table: TableSpec, head: int) -> None:
    spec = _spec(TableSpec("other", rows=10), table)
    got = RowMass.from_spec(spec, 1, head_ranks=head)
    _assert_same(got, _reference(spec, 1, head))
    top = got.top_rows
    assert len(top) == min(table.rows, head) and (np.diff(top) > 0).all()


@FAST
@given(
    rows=st.one_of(st.integers(1, 5000), st.integers(5000, 1 << 53)),
    head=st.integers(1, 3000),
    alpha=st.sampled_from([0.0, 0.5, 0.95, 1.0, 1.4]),
    offset=st.sampled_from([0.0, 0.5, 40.0]),
    hot=st.sampled_from([(), (0.25,), (0.3, 0.05)]),
    contiguous=st.booleans(),
    seed=st.integers(0, 2**31),
    t=st.integers(0, 2),
)
def test_random_laws_match_the_reference(
    rows: int, head: int, alpha: float, offset: float, hot: tuple[float, ...],
    contiguous: bool, seed: int, t: int,
) -> None:  # fmt: skip
    hot = hot if len(hot) < rows else ()
    table = TableSpec(
        "x", rows=rows, alpha=alpha, rank_offset=offset, hot_shares=hot,
        mapping="contiguous" if contiguous else "permuted",
    )  # fmt: skip
    spec = _spec(*[table] * 3, seed=seed)
    _assert_same(RowMass.from_spec(spec, t, head_ranks=head), _reference(spec, t, head))


def test_a_law_is_built_once_and_shared_read_only() -> None:
    table = TableSpec("x", rows=50_000, alpha=1.07, hot_shares=(0.1,))
    spec = _spec(*[table] * 8)
    masses = [RowMass.from_spec(spec, t, head_ranks=4000) for t in range(8)]
    key = (50_000, 1.07, (0.1,), 0.0, 4000)
    share, _ = row_mass._LAWS[key]
    assert not share.flags.writeable
    assert row_mass._law(*key)[0] is share
    for m in masses:  # the tables' own arrays, not views of the shared one
        assert not np.shares_memory(m.top_mass, share)
    assert not np.array_equal(masses[0].top_rows, masses[1].top_rows)  # keyed per table
    with ThreadPoolExecutor(4) as pool:  # the plan builds tables on threads
        again = list(pool.map(lambda t: RowMass.from_spec(spec, t, head_ranks=4000), range(8)))
    for a, b in zip(again, masses, strict=True):
        _assert_same(a, b)


def _law_sample(spec: WorkloadSpec) -> list[int]:
    """The first table of each (rows, alpha, hot shares, offset, mapping) law."""
    first: dict[tuple[object, ...], int] = {}
    for t, x in enumerate(spec.tables):
        first.setdefault((x.rows, x.alpha, x.hot_shares, x.rank_offset, x.mapping), t)
    return list(first.values())


def test_meta_2021_one_table_of_each_law_matches() -> None:
    spec = get_preset("meta-2021")
    sample = _law_sample(spec)
    assert len(sample) == 4  # the day plan builds 856 tables of these 4 laws
    for t in sample:
        _assert_same(RowMass.from_spec(spec, t), _reference(spec, t))


def test_criteo_largest_and_smallest_tables_match() -> None:
    spec = get_preset("criteo-terabyte")
    rows = [x.rows for x in spec.tables]
    for t in (int(np.argmax(rows)), int(np.argmin(rows))):
        _assert_same(RowMass.from_spec(spec, t), _reference(spec, t))


@pytest.mark.bench
@pytest.mark.parametrize(
    "preset", ["meta-2021", "criteo-kaggle", "criteo-terabyte", "criteo-mlperf-dcnv2", "tiny"]
)
def test_every_preset_table_matches(preset: str) -> None:
    spec = get_preset(preset)
    for t in range(len(spec.tables)):
        _assert_same(RowMass.from_spec(spec, t), _reference(spec, t))


@pytest.mark.parametrize(
    ("top", "mass", "bins"),
    [
        ([3, 3], [0.1, 0.2], [1.0]),  # duplicate
        ([5, 2], [0.1, 0.2], [1.0]),  # descending
        ([-1, 4], [0.1, 0.2], [1.0]),  # below the table
        ([4, 10], [0.1, 0.2], [1.0]),  # past the table (10 rows)
        ([1, 2], [0.1], [1.0]),  # lengths differ
        ([1, 2], [0.1, 0.2], []),  # no bins
    ],
)
def test_a_user_built_row_mass_is_still_checked(
    top: list[int], mass: list[float], bins: list[float]
) -> None:
    with pytest.raises(ValueError, match="RowMass"):
        RowMass(10, np.array(top, dtype=np.int64), np.array(mass), np.array(bins))
