"""`replay inspect`: the numba kernel against the reference, golden values, the CLI."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replay.analysis.stats import (
    _COUNT_WRAP,
    Inspector,
    _top_sum,
    curve_batches,
    inspect_arrays,
    inspect_reference,
    inspect_trace,
    table_runs,
    trace_inspector,
    trace_statistics,
)
from replay.analysis.stats_kernels import _G_D_PERIOD, _TAG_PERIOD
from replay.cli import main
from replay.errors import TraceError
from replay.trace.keys import RUN_BATCH, RUN_START, RUN_TABLE
from replay.trace.reader import open_trace
from replay.trace.writer import write_trace_from_arrays


@pytest.fixture(
    scope="module", autouse=True, params=[0, 50, 1 << 16], ids=["counts", "mixed", "small"]
)
def small_table_limit(request: pytest.FixtureRequest) -> Any:
    """Every test of the module three times: no table counted apart (every count in the
    state word's 6 bits, with wraps), tables of at most 50 rows apart (mixed), and the
    default (every table of the tests' traces apart)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("replay.analysis.stats._DENSE_ROWS", request.param)
        yield request.param


INT_KEYS = ("batches", "lookups", "rows", "distinct_rows", "top1pct_rows")
FLOAT_KEYS = (
    "touched_fraction",
    "top1pct_share",
    "distinct_per_batch_mean",
    "consecutive_reuse_mean",
)


def assert_same(got: dict[str, Any], want: dict[str, Any], tol: float = 1e-12) -> None:
    """Integer counts exactly equal, ratios within `tol`."""
    for key in INT_KEYS:
        assert got[key] == want[key], key
    for key in FLOAT_KEYS:
        assert got[key] == pytest.approx(want[key], abs=tol, rel=0), key
    assert len(got["tables"]) == len(want["tables"])
    for g, w in zip(got["tables"], want["tables"], strict=True):
        for key in ("name", "rows", "lookups", "distinct_rows", "top1pct_rows"):
            assert g[key] == w[key], (g["name"], key)
        for key in FLOAT_KEYS:
            assert g[key] == pytest.approx(w[key], abs=tol, rel=0), (g["name"], key)
    assert [x for x, _ in got["touched_curve"]] == [x for x, _ in want["touched_curve"]]
    for (_, g), (_, w) in zip(got["touched_curve"], want["touched_curve"], strict=True):
        assert g == pytest.approx(w, abs=tol, rel=0)


def assert_invariants(res: dict[str, Any]) -> None:
    assert res["distinct_rows"] <= res["lookups"]
    assert res["distinct_rows"] <= res["rows"]
    assert res["lookups"] == sum(t["lookups"] for t in res["tables"])
    assert res["distinct_rows"] == sum(t["distinct_rows"] for t in res["tables"])
    for stats in [res, *res["tables"]]:
        assert stats["distinct_rows"] <= stats["lookups"]
        for key in FLOAT_KEYS:
            assert 0.0 <= stats[key] <= 1.0, key
        if stats["lookups"]:
            assert stats["distinct_per_batch_mean"] > 0.0
            assert stats["top1pct_share"] > 0.0
    curve = res["touched_curve"]
    if res["batches"] == 0:
        assert curve == []
        return
    xs = [x for x, _ in curve]
    fractions = [f for _, f in curve]
    assert xs[0] == 1
    assert xs[-1] == res["batches"]
    assert all(a < b for a, b in itertools.pairwise(xs))
    assert all(a <= b for a, b in itertools.pairwise(fractions))
    assert fractions[-1] == res["distinct_rows"] / res["rows"]


# -- a tiny trace with every value computed by hand ------------------------------------
#
# tables: t0 with 4 rows (top 1%: k = 1), t1 with 150 rows (k = 2); 154 rows (k = 2)
#   batch 0: t0 rows 0 0 1   t1 row 5
#   batch 1: t0 rows 1 2     t1 rows 5 5 7
#   batch 2: t0 row 3
TINY_TABLES = [("t0", 4), ("t1", 150)]
TINY_BATCH = np.array([0, 0, 0, 0, 1, 1, 1, 1, 1, 2], dtype=np.uint32)
TINY_TABLE = np.array([0, 0, 0, 1, 0, 0, 1, 1, 1, 0], dtype=np.uint16)
TINY_ROW = np.array([0, 0, 1, 5, 1, 2, 5, 5, 7, 3], dtype=np.uint32)


def tiny_golden() -> dict[str, Any]:
    return {
        "batches": 3,
        "lookups": 10,
        "rows": 154,
        "distinct_rows": 6,  # t0: 0 1 2 3, t1: 5 7
        "touched_fraction": 6 / 154,
        "top1pct_rows": 2,
        "top1pct_share": (3 + 2) / 10,  # t1 row 5 (3 lookups), then a t0 row with 2
        # |U_n| / L_n: 3/4, 4/5, 1/1
        "distinct_per_batch_mean": (3 / 4 + 4 / 5 + 1) / 3,
        # batch 1: U_1 ∩ U_0 = {t0:1, t1:5} of 4; batch 2: {t0:3} shares nothing
        "consecutive_reuse_mean": (2 / 4 + 0) / 2,
        "tables": [
            {
                "name": "t0",
                "rows": 4,
                "lookups": 6,
                "distinct_rows": 4,
                "touched_fraction": 1.0,
                "top1pct_rows": 1,
                "top1pct_share": 2 / 6,
                "distinct_per_batch_mean": (2 / 3 + 2 / 2 + 1 / 1) / 3,
                "consecutive_reuse_mean": (1 / 2 + 0) / 2,
            },
            {
                "name": "t1",
                "rows": 150,
                "lookups": 4,
                "distinct_rows": 2,
                "touched_fraction": 2 / 150,
                "top1pct_rows": 2,
                "top1pct_share": (3 + 1) / 4,
                "distinct_per_batch_mean": (1 / 1 + 2 / 3) / 2,  # t1 has no lookup in batch 2
                "consecutive_reuse_mean": 1 / 2,  # batch 1 only: {5, 7} ∩ {5}
            },
        ],
        "touched_curve": [[1, 3 / 154], [2, 5 / 154], [3, 6 / 154]],
    }


@pytest.fixture(scope="module")
def tiny_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("inspect") / "tiny"
    return write_trace_from_arrays(
        out, tables=TINY_TABLES, batch=TINY_BATCH, table=TINY_TABLE, row=TINY_ROW, batch_size=2
    )


def test_golden_tiny_trace(tiny_trace: Path) -> None:
    res = inspect_trace(tiny_trace)
    assert_same(res, tiny_golden(), tol=1e-15)
    assert res["updates"] == 3 + 4 + 1  # SGD: the distinct rows of each batch, per table
    assert res["trace"] == str(tiny_trace)
    assert_invariants(res)


def test_golden_reference_and_arrays() -> None:
    rows = [n for _, n in TINY_TABLES]
    names = [n for n, _ in TINY_TABLES]
    assert_same(inspect_reference(TINY_BATCH, TINY_TABLE, TINY_ROW, rows), tiny_golden(), 1e-15)
    for min_lookups in (1, 4, 5, 100):
        got = inspect_arrays(
            TINY_BATCH, TINY_TABLE, TINY_ROW, rows, names=names, min_lookups=min_lookups
        )
        assert_same(got, tiny_golden(), 1e-15)


# -- property tests against the reference ----------------------------------------------
@st.composite
def small_traces(draw: st.DrawFn) -> dict[str, Any]:
    num_tables = draw(st.integers(1, 4))
    rows = [draw(st.sampled_from([1, 2, 3, 7, 50, 99, 100, 101, 250])) for _ in range(num_tables)]
    num_batches = draw(st.integers(0, 10))
    # a small pool of hot rows per table makes repeats and cross-batch reuse likely
    pools = [
        draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=5, unique=True)) for n in rows
    ]
    batch: list[int] = []
    table: list[int] = []
    row: list[int] = []
    for b in range(num_batches):
        for t in range(num_tables):
            k = draw(st.integers(0, 8))
            for _ in range(k):
                r = (
                    draw(st.sampled_from(pools[t]))
                    if draw(st.booleans())
                    else draw(st.integers(0, rows[t] - 1))
                )
                batch.append(b)
                table.append(t)
                row.append(r)
    extra = draw(st.integers(0, 2))  # empty batches at the end still count
    return {
        "batch": np.array(batch, dtype=np.uint32),
        "table": np.array(table, dtype=np.uint16),
        "row": np.array(row, dtype=draw(st.sampled_from([np.uint32, np.uint64]))),
        "rows": rows,
        "num_batches": num_batches + extra,
        "min_lookups": draw(st.integers(1, 40)),
        "curve_points": draw(st.integers(2, 6)),
    }


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_traces())
def test_kernel_matches_reference(case: dict[str, Any]) -> None:
    want = inspect_reference(
        case["batch"],
        case["table"],
        case["row"],
        case["rows"],
        num_batches=case["num_batches"],
        curve_points=case["curve_points"],
    )
    got = inspect_arrays(
        case["batch"],
        case["table"],
        case["row"],
        case["rows"],
        num_batches=case["num_batches"],
        curve_points=case["curve_points"],
        min_lookups=case["min_lookups"],
    )
    assert_same(got, want)
    assert_invariants(got)
    assert_invariants(want)
    # one chunk or many: running sums in batch order give bit-identical results
    whole = inspect_arrays(
        case["batch"],
        case["table"],
        case["row"],
        case["rows"],
        num_batches=case["num_batches"],
        curve_points=case["curve_points"],
        min_lookups=1 << 30,
    )
    assert whole == got


@pytest.mark.parametrize("fold", [1, 3, 1 << 22])
def test_count_wraps_are_added_back(fold: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Narrow per-row counters wrap; the top-1% must still see the true counts, whether
    the wrap events are folded into (row, wraps) pairs early (`fold`) or at the end."""
    monkeypatch.setattr("replay.analysis.stats._WRAP_FOLD", fold)
    rng = np.random.default_rng(7)
    rows = [300, 5]  # k = 3 and 1; overall 305 rows, k = 4
    counts = {(0, 0): 700, (0, 1): 256, (0, 2): 255, (0, 3): 513, (0, 9): 3, (1, 4): 1000}
    pairs = [p for p, c in counts.items() for _ in range(c)]
    order = rng.permutation(len(pairs))
    num_batches = 40
    batch = np.sort(rng.integers(0, num_batches, len(pairs))).astype(np.uint32)
    per_batch: list[tuple[int, int, int]] = []
    for b, i in zip(batch.tolist(), order.tolist(), strict=True):
        per_batch.append((b, *pairs[i]))
    per_batch.sort(key=lambda x: (x[0], x[1]))
    arr = np.array(per_batch, dtype=np.int64)
    args = (arr[:, 0], arr[:, 1], arr[:, 2].astype(np.uint32), rows)
    want = inspect_reference(*args, num_batches=num_batches)
    assert want["tables"][0]["top1pct_share"] == (700 + 513 + 256) / (700 + 256 + 255 + 513 + 3)
    for min_lookups in (1, 100, 1 << 20):
        got = inspect_arrays(*args, num_batches=num_batches, min_lookups=min_lookups)
        assert_same(got, want)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 3), max_size=12), min_size=1, max_size=8),
    st.integers(0, 9),
)
def test_table_runs_are_the_batch_table_runs(per_batch: list[list[int]], first: int) -> None:
    """`table_runs` (the replay's input to the statistics) = one run per maximal stretch
    of equal (batch, table) in trace order, then an end row."""
    tables = [sorted(t) for t in per_batch]
    table = np.array([t for ts in tables for t in ts], dtype=np.uint16)
    bounds = np.zeros(len(tables) + 1, dtype=np.int64)
    np.cumsum([len(ts) for ts in tables], out=bounds[1:])
    want = []
    pairs = [(first + b, t) for b, ts in enumerate(tables) for t in ts]
    for i, pair in enumerate(pairs):
        if i == 0 or pair != pairs[i - 1]:
            want.append([i, pair[1], pair[0]])
    runs = table_runs(table, bounds, first)
    assert runs[:-1, [RUN_START, RUN_TABLE, RUN_BATCH]].tolist() == want
    assert runs[-1, RUN_START] == len(table)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.one_of(st.just(0), st.integers(1, 300), st.integers(0, 5000)), max_size=80),
    st.integers(0, 90),
)
def test_top_sum_matches_sort(counts: list[int], k: int) -> None:
    """Histogram of the counts up to 255 plus the wrapped rows' true counts = sorting."""
    hist = np.bincount([c for c in counts if c <= _COUNT_WRAP], minlength=256)
    wrapped = np.array(sorted((c for c in counts if c > _COUNT_WRAP), reverse=True), np.int64)
    assert _top_sum(hist, wrapped, k) == sum(sorted(counts, reverse=True)[:k])


@pytest.mark.parametrize("gap", [0, 1, 2, 3, 4, 300])
def test_batch_tags_never_alias(gap: int) -> None:
    """The state word keeps a 2-bit batch tag that repeats every _TAG_PERIOD batches; a
    row looked up again exactly one period (or one period + 1) later must not count as
    repeated in its batch or as reused from the batch before, with and without empty
    batches in between (`gap`), however the trace is chunked."""
    rng = np.random.default_rng(gap)
    period = _TAG_PERIOD
    lookups: list[tuple[int, int, int]] = []
    for b in range(0, 3 * period + 40):
        if gap and 100 <= b < 100 + gap:
            continue  # empty batches
        # row 0 every batch; row b % 7 in table 0; in table 1, row 1 every `period`
        # batches and row 2 every `period` + 1 (the distances at which a tag repeats the
        # batch's own or the previous batch's)
        lookups.append((b, 0, 0))
        lookups.append((b, 0, 1 + b % 7))
        if b % period == 0:
            lookups.append((b, 1, 1))
        if b % (period + 1) == 0:
            lookups.append((b, 1, 2))
        for r in rng.integers(0, 40, 3):
            lookups.append((b, 1, 3 + int(r)))
    lookups.sort(key=lambda x: (x[0], x[1]))
    arr = np.array(lookups, dtype=np.int64)
    args = (arr[:, 0], arr[:, 1], arr[:, 2].astype(np.uint32), [10, 50])
    num_batches = int(arr[-1, 0]) + 3
    want = inspect_reference(*args, num_batches=num_batches)
    for min_lookups in (1, 37, 1 << 20):
        got = inspect_arrays(*args, num_batches=num_batches, min_lookups=min_lookups)
        assert_same(got, want)


@pytest.mark.parametrize(
    ("period", "gap", "fold"),
    [(2, 0, 1), (2, 3, None), (3, 1, 7), (5, 0, None), (5, 4, 1), (0, 2, 7)],
)
def test_small_table_tags_repeat_and_counts_fold(
    period: int, gap: int, fold: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The small tables' words tag a row with its last batch (the tag repeating every
    `period` batches here, swept before it can; 0: the default) and hold its count (moved
    out every `fold` lookups fed): rows looked up again one or two periods later, across
    empty batches (`gap`), give the reference's statistics however the trace is chunked."""
    if fold is not None:
        monkeypatch.setattr("replay.analysis.stats._DENSE_FOLD_AT", fold)
    rng = np.random.default_rng(period * 10 + gap)
    lookups: list[tuple[int, int, int]] = []
    p = max(period, 2)
    for b in range(4 * p + 30):
        if gap and 10 <= b < 10 + gap:
            continue  # empty batches
        lookups.append((b, 0, b % 3))
        for distance, r in ((p, 1), (p + 1, 2), (p - 1, 3), (2 * p, 4)):
            if b % distance == 0:
                lookups.append((b, 1, r))
        for r in rng.integers(0, 40, 4):
            lookups.append((b, 1 + int(r) % 2, 5 + int(r)))
    lookups.sort(key=lambda x: (x[0], x[1]))
    arr = np.array(lookups, dtype=np.int64)
    args = (arr[:, 0], arr[:, 1], arr[:, 2].astype(np.uint32), [10, 50, 400])
    num_batches = int(arr[-1, 0]) + 2
    want = inspect_reference(*args, num_batches=num_batches)
    for chunk in (1, 29, len(arr)):
        inspector = Inspector(args[3], num_batches)
        inspector.gi[_G_D_PERIOD] = period
        for lo in range(0, len(arr), chunk):
            inspector.feed(*(a[lo : lo + chunk] for a in args[:3]))
        assert_same(inspector.result(), want)


def test_curve_batches_bounded_and_log_spaced() -> None:
    assert curve_batches(0, 64).tolist() == []
    assert curve_batches(1, 64).tolist() == [1]
    assert curve_batches(3, 64).tolist() == [1, 2, 3]
    for n in (10, 1000, 10**7, 2**31 - 2):
        xs = curve_batches(n, 64)
        assert xs[0] == 1 and xs[-1] == n
        assert len(xs) <= 64
        assert np.all(np.diff(xs) > 0)
    assert len(curve_batches(10**7, 64)) >= 60  # about the asked number of points


# -- streaming over a real trace -------------------------------------------------------
@pytest.fixture(scope="module")
def two_group_trace(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """~1.2 M lookups: two Parquet row groups, so the reader's chunks vary."""
    rng = np.random.default_rng(3)
    tables = [("small", 40), ("mid", 5000), ("big", 2_000_000)]
    num_batches, per_table = 600, 700
    batch = np.repeat(np.arange(num_batches, dtype=np.uint32), per_table * len(tables))
    table = np.tile(np.repeat(np.arange(len(tables), dtype=np.uint16), per_table), num_batches)
    cards = np.array([n for _, n in tables])[table]
    # skewed: squared uniform draws favour low ids, scattered by a multiplicative hash
    rank = (rng.random(len(batch)) ** 3 * cards).astype(np.int64)
    row = ((rank * 2654435761) % cards).astype(np.uint32)
    path = write_trace_from_arrays(
        tmp_path_factory.mktemp("inspect") / "two",
        tables=tables,
        batch=batch,
        table=table,
        row=row,
        batch_size=per_table,
    )
    want = inspect_arrays(batch, table, row, [n for _, n in tables], names=[n for n, _ in tables])
    return path, want


def test_trace_chunking_does_not_change_results(two_group_trace: tuple[Path, Any]) -> None:
    path, want = two_group_trace
    results = [inspect_trace(path, min_lookups=m) for m in (1, 300_000, 1 << 20, 1 << 24)]
    for res in results:
        res.pop("trace")
        res.pop("updates")
        assert res == results[0]
    assert_same(results[0], want, tol=0.0)
    assert_invariants(results[0])
    assert results[0]["top1pct_share"] > 0.2  # the skew shows


def test_warm_up_changes_nothing(two_group_trace: tuple[Path, Any]) -> None:
    """`replay_trace` warms the inspector up on a helper thread (before or between
    feeds): the statistics are the same."""
    path, want = two_group_trace
    trace = open_trace(path)
    inspector = trace_inspector(trace)
    inspector.warm_up()
    for i, chunk in enumerate(trace.iter_lookups(min_lookups=1)):
        inspector.feed(chunk.batch, chunk.table, chunk.row)
        if i == 0:
            inspector.warm_up()
    got = trace_statistics(trace, inspector)
    got.pop("trace")
    got.pop("updates")
    assert_same(got, want, tol=0.0)


def test_empty_trace_gives_zeros(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = np.empty(0, dtype=np.uint32)
    path = write_trace_from_arrays(
        tmp_path / "empty", tables=[("a", 10)], batch=empty, table=empty, row=empty, batch_size=1
    )
    res = inspect_trace(open_trace(path, allow_empty=True))  # the library opts in
    assert res["batches"] == 0 and res["lookups"] == 0 and res["distinct_rows"] == 0
    assert res["top1pct_share"] == 0.0 and res["consecutive_reuse_mean"] == 0.0
    assert res["touched_curve"] == []
    assert_invariants(res)
    # the command refuses an empty trace, like every other command (issue 31, item 8)
    assert main(["inspect", str(path), "--json"]) == 2
    assert "empty (no lookups)" in capsys.readouterr().err


def _rewrite_manifest(path: Path, edit: Any) -> None:
    manifest_path = path / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    edit(manifest)
    manifest_path.write_text(json.dumps(manifest))


def test_row_out_of_range_is_a_trace_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_trace_from_arrays(
        tmp_path / "bad",
        tables=TINY_TABLES,
        batch=TINY_BATCH,
        table=TINY_TABLE,
        row=TINY_ROW,
        batch_size=2,
    )
    _rewrite_manifest(path, lambda m: m["tables"][1].update(rows=6))  # row 7 no longer fits
    with pytest.raises(TraceError, match=r"row id 7 is out of range \(table 1 't1' has 6 rows\)"):
        inspect_trace(path)
    assert main(["inspect", str(path), "--json"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert str(path) in err and "row id 7" in err


def test_table_out_of_range_is_a_trace_error(tmp_path: Path) -> None:
    path = write_trace_from_arrays(
        tmp_path / "bad",
        tables=TINY_TABLES,
        batch=TINY_BATCH,
        table=TINY_TABLE,
        row=TINY_ROW,
        batch_size=2,
    )
    _rewrite_manifest(path, lambda m: m["tables"].pop())
    with pytest.raises(TraceError, match=r"table index 1 is out of range \(the trace has 1"):
        inspect_trace(path)


def test_array_order_errors() -> None:
    rows = [10]
    with pytest.raises(TraceError, match="not sorted by batch"):
        inspect_arrays(np.array([1, 0]), np.array([0, 0]), np.array([1, 1]), rows)
    with pytest.raises(TraceError, match=r"beyond the manifest's 1 batch$"):
        inspect_arrays(np.array([0, 1]), np.array([0, 0]), np.array([1, 1]), rows, num_batches=1)


# -- the command line ------------------------------------------------------------------
def test_cli_json(tiny_trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(tiny_trace), "--json", "--verify"]) == 0
    out = capsys.readouterr().out
    res = json.loads(out)
    for key in (
        "batches",
        "lookups",
        "distinct_rows",
        "distinct_per_batch_mean",
        "consecutive_reuse_mean",
        "top1pct_share",
        "tables",
        "touched_curve",
        "updates",
    ):
        assert key in res, key
    assert_same(res, tiny_golden(), tol=1e-15)
    assert res["checksums_verified"] is True
    assert res["updates"] == 8
    assert math.isclose(res["touched_curve"][-1][1], 6 / 154)


def test_cli_table_output(tiny_trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(tiny_trace)]) == 0
    out = capsys.readouterr().out
    for text in ("t0", "t1", "all", "batches: 3", "lookups: 10", "33.33%", "rows touched"):
        assert text in out, text


def test_cli_leaves_out_a_top_share_of_every_row_touched(
    tiny_trace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """t1's hottest 1% is 2 rows, both rows it touched: 100% of its lookups, which says
    nothing of its skew, so the table shows `-` and says why; t0 (1 of its 4 rows touched)
    and all (2 of 6) keep their shares."""
    assert main(["inspect", str(tiny_trace)]) == 0
    out = capsys.readouterr().out
    first_table = out.split("└")[0].splitlines()
    cells = {
        line.split("│")[1].strip(): line.split("│")[6].strip()
        for line in first_table
        if line.startswith("│")
    }
    assert cells == {"t0": "33.33%", "t1": "-", "all": "50.00%"}
    assert "; -: t1, where that many rows are at least all the rows the trace touched" in (
        " ".join(out.split())
    )
    assert inspect_trace(tiny_trace)["tables"][1]["top1pct_share"] == 1.0  # JSON keeps it


def test_cli_missing_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope"
    assert main(["inspect", str(missing)]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1
    assert str(missing) in lines[0]
    assert captured.out == ""


def test_cli_verify_catches_corruption(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_trace_from_arrays(
        tmp_path / "t",
        tables=TINY_TABLES,
        batch=TINY_BATCH,
        table=TINY_TABLE,
        row=TINY_ROW,
        batch_size=2,
    )
    part = next((path / "updates").glob("*.parquet"))
    part.write_bytes(part.read_bytes() + b"\0")
    # verified by default; --no-verify reads the intact lookups and says it did not check
    assert main(["inspect", str(path), "--json"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "checksum" in err[0] and str(part) in err[0]
    assert main(["inspect", str(path), "--json", "--no-verify"]) == 0
    assert json.loads(capsys.readouterr().out)["checksums_verified"] is False


def test_unreadable_lookups_file_is_a_trace_error(tmp_path: Path) -> None:
    """Reader errors come out of the read-ahead thread as they are."""
    path = write_trace_from_arrays(
        tmp_path / "t",
        tables=TINY_TABLES,
        batch=TINY_BATCH,
        table=TINY_TABLE,
        row=TINY_ROW,
        batch_size=2,
    )
    part = next((path / "lookups").glob("*.parquet"))
    part.write_bytes(b"not parquet")
    with pytest.raises(TraceError, match="not a readable Parquet file"):
        inspect_trace(path)


@pytest.mark.bench
@pytest.mark.parametrize("skewed", [True, False])
def test_bench_inspect_kernel(skewed: bool) -> None:
    """About 50 M lookups through the kernel on one core: well above 50 M lookups/s."""
    from replay.analysis.stats import bench_inspect_kernel

    res = bench_inspect_kernel(50_000_000, skewed=skewed)
    print(res)
    assert res["kernel_lookups_per_s"] > 50e6


@pytest.mark.parametrize("first_bad", [0, 5, 399, 599])
def test_first_bad_row_is_reported(first_bad: int) -> None:
    """The kernel names the first bad lookup, however the trace is chunked."""
    rng = np.random.default_rng(first_bad)
    batch = np.repeat(np.arange(20), 30)
    table = np.tile(np.repeat(np.arange(3), 10), 20)
    rows = [50, 60, 70]
    row = rng.integers(0, 50, len(batch))
    row[first_bad] = rows[table[first_bad]] + 3
    row[first_bad + 1 :: 7] = 10**6
    expected = (
        f"lookup \\(batch {batch[first_bad]}, table {table[first_bad]}, "
        f"row {row[first_bad]}\\): row id {row[first_bad]} is out of range"
    )
    for min_lookups in (1, 100, 1 << 20):
        with pytest.raises(TraceError, match=expected):
            inspect_arrays(batch, table, row, rows, min_lookups=min_lookups)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(1, 300), min_size=1, max_size=6),
    st.integers(0, 2**16),
    st.floats(0.0, 1.0),
)
def test_count_histograms_split_in_two_halves_match_one_pass(rows, seed, zeros) -> None:
    """The per-table histograms of the state words' counts are the same counted on two
    threads (two halves of the row space, cut at a word) as in one pass, and as numpy's."""
    from replay.analysis import stats as stats_module

    rng = np.random.default_rng(seed)
    bounds = np.concatenate([[0], np.cumsum(rows)]).astype(np.int64)
    state = rng.integers(0, 256, int(bounds[-1]), dtype=np.uint8)
    state[rng.random(len(state)) < zeros] = 0  # whole zero words take the fast path
    want = np.zeros((len(rows), 256), dtype=np.int64)
    for t in range(len(rows)):
        want[t] = np.bincount(state[bounds[t] : bounds[t + 1]] & 0x3F, minlength=256)
    one = stats_module._histograms(state, bounds)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(stats_module, "_SPLIT_HISTOGRAM_ROWS", 0)
        two = stats_module._histograms(state, bounds)
    assert np.array_equal(one, want)
    assert np.array_equal(two, want)


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(st.integers(0, 60), st.integers(1, 9), max_size=20),
    st.lists(st.lists(st.integers(0, 80), max_size=15), max_size=4),
)
def test_wrap_folding_sums_events_per_row(folded: dict[int, int], chunks: list[list[int]]) -> None:
    """`_fold_wraps` against a Counter: (row, wraps) pairs folded before plus the new
    events, one pair per row, sorted by row."""
    inspector = Inspector([100], 1)
    inspector.wrapped_rows = np.array(sorted(folded), dtype=np.int64)
    inspector.wrapped_counts = np.array([folded[r] for r in sorted(folded)], dtype=np.int64)
    inspector.wraps = [np.array(c, dtype=np.int64) for c in chunks]
    inspector.wraps_pending = sum(len(c) for c in chunks)
    inspector._fold_wraps()
    want = dict(folded)
    for row in itertools.chain.from_iterable(chunks):
        want[row] = want.get(row, 0) + 1
    assert inspector.wrapped_rows.tolist() == sorted(want)
    assert inspector.wrapped_counts.tolist() == [want[r] for r in sorted(want)]
    assert inspector.wrapped_rows.dtype == inspector.wrapped_counts.dtype == np.int64
    assert inspector.wraps == [] and inspector.wraps_pending == 0


@pytest.mark.parametrize("list_min", [1, 4, 1 << 16])
def test_pending_tag_clears_across_chunks(list_min: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The rows batch b - 2 looked up first lose their tag while batch b runs, one beside
    each small-table lookup, and what is left when b ends: batches with no, few or many
    small-table lookups (so the clears finish early, late or at the batch's end), tables
    interleaved within a batch, rows back after 1-4 batches (where a tag left in place
    would alias), empty batches, lists that overflow (`list_min`) and chunks that end
    mid-batch give the reference's statistics."""
    from replay import _memory

    monkeypatch.setattr(_memory, "INSPECT_LIST_MIN", list_min)
    monkeypatch.setattr(_memory, "INSPECT_LIST_DIVISOR", 1 << 40)
    rng = np.random.default_rng(list_min)
    rows = [5, 300, 40]
    lookups: list[tuple[int, int, int]] = []
    for b in range(60):
        if 30 <= b < 32:
            continue  # empty batches
        mine = [(1, int(r)) for r in rng.integers(0, 300, 12)]
        mine += [(1, 290 + d) for d in (1, 2, 3, 4) if b % d == 0]
        small = int(rng.choice([0, 1, 3, 40]))
        mine += [(0, int(r)) for r in rng.integers(0, 5, small)]
        mine += [(2, int(r)) for r in rng.integers(0, 40, 4)]
        rng.shuffle(mine)  # tables interleaved: many short runs a batch
        lookups += [(b, t, r) for t, r in mine]
    arr = np.array(lookups, dtype=np.int64)
    args = (arr[:, 0].astype(np.uint32), arr[:, 1].astype(np.uint16), arr[:, 2].astype(np.uint32))
    num_batches = 62
    want = inspect_reference(*args, rows, num_batches=num_batches)
    for chunk in (1, 5, 64, len(arr)):
        inspector = Inspector(rows, num_batches)
        for lo in range(0, len(arr), chunk):
            inspector.feed(*(a[lo : lo + chunk] for a in args))
        assert_same(inspector.result(), want)
