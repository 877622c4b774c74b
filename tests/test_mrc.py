"""LRU miss-ratio curves: the stack-distance kernel against references, SHARDS, the CLI."""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import replay
from replay.analysis.mrc import (
    bench_mrc,
    default_sizes,
    mrc_keys,
    mrc_trace,
    validate_options,
    validate_sizes,
)
from replay.analysis.shards import (
    SHARDS_MODULUS,
    ShardsSampler,
    resolution_rows,
    shards_threshold,
)
from replay.analysis.stack import (
    StackDistances,
    reference_lru_misses,
    reference_stack_distances,
    stack_distances,
)
from replay.cli import main
from replay.errors import ConfigError, TraceError
from replay.trace.keys import flat_keys, table_offsets
from replay.trace.writer import write_trace_from_arrays
from replay.workload.presets import get_preset

FAST = settings(
    max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)

# a small key space makes reuse (and every distance) likely; long traces over a tiny
# window force many compactions
traces = st.integers(1, 40).flatmap(
    lambda keys: st.tuples(
        st.just(keys), st.lists(st.integers(0, keys - 1), max_size=400).map(np.array)
    )
)
windows = st.sampled_from([1, 64, 65, 200, 1 << 16])


def _ref(keys: np.ndarray) -> list[int]:
    return [-1 if d is None else d for d in reference_stack_distances(keys)]


# -- the exact kernel ---------------------------------------------------------------------


def test_reference_on_a_worked_example() -> None:
    keys = [1, 2, 1, 3, 2, 2, 1]
    assert reference_stack_distances(keys) == [None, None, 1, None, 2, 0, 2]
    assert [reference_lru_misses(keys, c) for c in (1, 2, 3)] == [6, 5, 3]


@FAST
@given(traces, windows, st.booleans())
def test_kernel_distances_equal_the_reference(
    case: tuple[int, np.ndarray], window: int, direct: bool
) -> None:
    total, keys = case
    got = stack_distances(keys, total, direct=direct, min_window=window)
    assert got.tolist() == _ref(keys)


@FAST
@given(traces, st.integers(0, 6), st.booleans())
def test_a_state_started_small_grows_to_the_same_distances(
    case: tuple[int, np.ndarray], log_keys: int, direct: bool
) -> None:
    """A state whose key map and histogram start at `initial_keys` (as a plan's many
    per-shard states do, `replay.plan.torchrec_shards`) grows them and gives the
    reference's distances."""
    total, keys = case
    state = StackDistances(total, direct=direct, min_window=64, initial_keys=1 << log_keys)
    out = np.empty(len(keys), dtype=np.int64)
    state.feed(keys, out)
    assert out.tolist() == _ref(keys)


def test_initial_keys_must_be_a_power_of_two() -> None:
    for bad in (0, 3, 1000):
        with pytest.raises(ValueError, match="power of two"):
            StackDistances(10, direct=False, initial_keys=bad)


def test_tiny_window_compacts_many_times() -> None:
    rng = np.random.default_rng(7)
    keys = rng.integers(0, 30, 5000)
    state = StackDistances(30, min_window=1)
    out = np.empty(len(keys), dtype=np.int64)
    state.feed(keys, out)
    assert state.compactions > 50
    assert out.tolist() == _ref(keys)


@FAST
@given(traces, st.lists(st.integers(1, 45), min_size=1, max_size=5))
def test_miss_ratio_equals_lru_simulation(case: tuple[int, np.ndarray], sizes: list[int]) -> None:
    total, keys = case
    result = mrc_keys(keys, total, sizes, min_window=64)
    assert result.exact and result.expected_error == 0.0
    for size, ratio in zip(result.sizes.tolist(), result.miss_ratios.tolist(), strict=True):
        misses = reference_lru_misses(keys, size)
        assert ratio == (misses / len(keys) if len(keys) else 0.0)


@FAST
@given(traces, st.lists(st.integers(0, 400), max_size=6), windows)
def test_chunked_feeding_equals_one_pass(
    case: tuple[int, np.ndarray], cuts: list[int], window: int
) -> None:
    total, keys = case
    one = StackDistances(total, min_window=window)
    one.feed(keys)
    chunked = StackDistances(total, min_window=window)
    bounds = [0, *sorted(c for c in cuts if c <= len(keys)), len(keys)]
    for lo, hi in itertools.pairwise(bounds):
        chunked.feed(keys[lo:hi])
    assert np.array_equal(one.histogram(), chunked.histogram())
    assert (one.cold, one.requests, one.distinct) == (
        chunked.cold,
        chunked.requests,
        len(set(keys.tolist())),
    )


def test_wide_row_space_uses_int64_state() -> None:
    rng = np.random.default_rng(11)
    keys = rng.integers(0, 50, 3000) * (1 << 33)  # keys far beyond 2^31, map mode
    state = StackDistances(1 << 40, direct=False, min_window=1)
    assert state.index_dtype == np.int64
    out = np.empty(len(keys), dtype=np.int64)
    state.feed(keys, out)
    assert out.tolist() == _ref(keys) and state.compactions > 10


def test_histogram_grows_past_its_first_size() -> None:
    keys = np.concatenate([np.arange(5000), np.arange(5000)])  # every distance is 4999
    state = StackDistances(5000)
    state.feed(keys)
    hist = state.histogram()
    assert len(hist) == 5000 and hist[4999] == 5000 and hist.sum() == 5000
    result = mrc_keys(keys, 5000, [4999, 5000])
    assert result.miss_ratios.tolist() == [1.0, 0.5]


def test_key_outside_the_row_space_is_a_trace_error() -> None:
    with pytest.raises(TraceError, match="outside the row space"):
        mrc_keys(np.array([0, 1, 7]), 5)
    with pytest.raises(TraceError, match="outside the row space"):
        mrc_keys(np.array([0, 1, -1]), 5, sample_rate=0.5)


def test_default_sizes_and_validation() -> None:
    sizes = default_sizes(2_500_000)
    assert sizes[0] == 1 and sizes[-1] == 2_500_000 and 50 <= len(sizes) <= 65
    assert np.all(np.diff(sizes) > 0)
    assert default_sizes(0).tolist() == [1]
    assert default_sizes(10, smallest=100).tolist() == [100]
    assert validate_sizes([30, 10, 10.0]).tolist() == [10, 30]
    for bad in ([], [0], [-3], [1.5], ["7"], [True]):
        with pytest.raises(ConfigError):
            validate_sizes(bad)


def test_empty_input() -> None:
    result = mrc_keys(np.empty(0, dtype=np.int64), 10)
    assert result.sizes.tolist() == [1] and result.miss_ratios.tolist() == [0.0]
    assert result.to_json()["curve"] == [[1, 0.0]]


# -- SHARDS ---------------------------------------------------------------------------------


@FAST
@given(traces)
def test_shards_at_rate_one_equals_exact(case: tuple[int, np.ndarray]) -> None:
    total, keys = case
    sizes = list(range(1, total + 2))
    exact = mrc_keys(keys, total, sizes)
    sampled = mrc_keys([keys[:7], keys[7:]], total, sizes, sample_rate=1.0)
    assert sampled.exact and sampled.expected_error == 0.0 and sampled.sample_rate == 1.0
    assert np.array_equal(sampled.miss_ratios, exact.miss_ratios)
    assert sampled.distinct_keys == exact.distinct_keys


def test_rates_and_resolution() -> None:
    assert shards_threshold(1.0) == SHARDS_MODULUS
    assert shards_threshold(0.01) == 167772
    assert resolution_rows(SHARDS_MODULUS) == 1
    assert resolution_rows(shards_threshold(0.01)) == 1585
    for bad in (0.0, -0.1, 1.5, float("nan"), 1e-9, "x"):
        with pytest.raises(ConfigError):
            shards_threshold(bad)  # type: ignore[arg-type]
    # without an exact head, sizes below the resolution are refused before any work
    with pytest.raises(ConfigError, match=r"below what a sample at rate 0\.01 resolves"):
        validate_options([100], 0.01, head=False)
    # with one (every sampled curve here), they are exact: 10 keys fit in the head
    keys = np.random.default_rng(3).integers(0, 10, 500)
    sampled = mrc_keys(keys, 10, [1, 5, 100], sample_rate=0.01)
    exact = mrc_keys(keys, 10, [1, 5, 100])
    assert np.array_equal(sampled.miss_ratios, exact.miss_ratios)
    assert sampled.expected_error == 0.0 and sampled.resolution_rows == 1


def test_shards_sample_is_by_key_with_the_adjustment() -> None:
    rng = np.random.default_rng(1)
    keys = rng.integers(0, 100_000, 200_000)
    sampler = ShardsSampler(100_000, 0.1)
    sampler.feed(keys)
    sampled = sampler.full.requests
    # every request of a sampled key is kept: the sampled distinct keys are ~R of all
    assert 0.08 < sampler.full.distinct / len(set(keys.tolist())) < 0.12
    assert sum(g.requests for g in sampler.groups) == sampled
    # SHARDS_adj normalizes by N R, not by the sampled count
    curve, _ = sampler.miss_ratios(np.array([10**9]))
    expected = sampler.requests * sampler.threshold / SHARDS_MODULUS
    assert curve[0] == pytest.approx(min(1.0, sampler.full.cold / expected))


@pytest.fixture(scope="module")
def kaggle_like(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Criteo Kaggle's 26 tables, 200 batches of 2,048: 10.6 M lookups, 0.8 M rows."""
    spec = get_preset("criteo-kaggle").with_overrides(batches=200, batch_size=2048, seed=0)
    return replay.generate(spec, tmp_path_factory.mktemp("mrc") / "kaggle", workers=2)


def test_shards_one_percent_against_exact(kaggle_like: Path) -> None:
    """At R = 0.01: exact up to the head's capacity (the cliff near one batch's distinct
    rows lies below it), largest error <= 0.01 above, and the stated error covers it."""
    sampled = mrc_trace(kaggle_like, sample_rate=0.01)
    exact = mrc_trace(kaggle_like, sizes=sampled.sizes)
    assert sampled.lookups == exact.lookups == 200 * 2048 * 26
    assert sampled.sizes[0] == 1 and len(sampled.sizes) >= 50
    cx = sampled.extra["exact_below_rows"]
    assert sampled.extra["head"]["exact"] and cx >= 4 * 2048  # >= 4 x one batch's rows
    low = sampled.sizes <= cx
    assert np.array_equal(sampled.miss_ratios[low], exact.miss_ratios[low])
    assert not sampled.point_errors[low].any()
    err = np.abs(sampled.miss_ratios - exact.miss_ratios)
    assert err.mean() <= 0.002 and err.max() <= 0.01
    assert err.max() <= sampled.expected_error
    assert np.mean(err <= sampled.point_errors) >= 0.9
    assert abs(sampled.distinct_keys / exact.distinct_keys - 1) < 0.05
    # the fused (table, row) path of a trace agrees with the flat-key path
    trace = replay.open_trace(kaggle_like)
    look = trace.lookups()
    offsets = table_offsets(trace.table_rows)
    flat = flat_keys(look.table, look.row, offsets)
    again = mrc_keys(flat, int(offsets[-1]), sampled.sizes, sample_rate=0.01, head_rows=cx)
    assert np.array_equal(again.miss_ratios, sampled.miss_ratios)


# -- trace path and CLI ---------------------------------------------------------------------

TABLES = [("a", 5), ("b", 40)]


@pytest.fixture(scope="module")
def small_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rng = np.random.default_rng(5)
    batches, per = 60, 12
    batch = np.repeat(np.arange(batches), per)
    table = np.tile(np.repeat([0, 1], per // 2), batches)
    row = np.where(table == 0, rng.integers(0, 5, len(batch)), rng.zipf(1.5, len(batch)) % 40)
    return write_trace_from_arrays(
        tmp_path_factory.mktemp("mrc") / "small",
        tables=TABLES,
        batch=batch,
        table=table,
        row=row,
        batch_size=per,
    )


def _flat(path: Path) -> np.ndarray:
    look = replay.open_trace(path).lookups()
    return np.where(look.table == 0, 0, 5) + look.row.astype(np.int64)


def test_trace_path_equals_reference(small_trace: Path) -> None:
    keys = _flat(small_trace)
    result = mrc_trace(small_trace, sizes=[1, 2, 5, 10, 45])
    assert result.lookups == len(keys) and result.distinct_keys == len(set(keys.tolist()))
    for size, ratio in zip([1, 2, 5, 10, 45], result.miss_ratios.tolist(), strict=True):
        assert ratio == reference_lru_misses(keys, size) / len(keys)
    assert np.array_equal(
        mrc_trace(small_trace, sizes=[1, 2, 5, 10, 45], sample_rate=1.0).miss_ratios,
        result.miss_ratios,
    )


def test_cli_json(small_trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["mrc", str(small_trace), "--json", "--sizes", "10,1,5"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["exact"] is True
    assert [c for c, _ in doc["curve"]] == [1, 5, 10]
    assert all(isinstance(c, int) and 0.0 <= m <= 1.0 for c, m in doc["curve"])
    assert main(["mrc", str(small_trace), "--json", "--sample-rate", "0.5"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["exact"] is False and doc["expected_error"] >= 0.0
    # the exact head covers the small sizes: the curve starts at one row
    assert doc["curve"][0][0] == doc["resolution_rows"] == 1


def test_cli_table(small_trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["mrc", str(small_trace), "--sample-rate", "0.5"]) == 0
    out = capsys.readouterr().out
    assert "miss ratio" in out and "expected error" in out


def test_cli_out_writes_three_files(
    small_trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "deep" / "curve"
    assert main(["mrc", str(small_trace), "--json", "--out", str(out)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert sorted(p.name for p in out.iterdir()) == ["mrc.json", "mrc.parquet", "mrc.png"]
    assert json.loads((out / "mrc.json").read_text()) == printed
    table = pq.read_table(out / "mrc.parquet")
    assert table.schema.names == ["cache_rows", "miss_ratio"]
    assert str(table.schema.field("cache_rows").type) == "int64"
    assert str(table.schema.field("miss_ratio").type) == "double"
    assert [[int(c), m] for c, m in zip(*table.to_pydict().values(), strict=True)] == printed[
        "curve"
    ]
    assert (out / "mrc.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(tmp_path.glob("deep/.*"))  # no partial folder left

    # an existing output needs --force; --force replaces it
    assert main(["mrc", str(small_trace), "--out", str(out)]) == 2
    assert "use --force" in capsys.readouterr().err
    assert main(["mrc", str(small_trace), "--out", str(out), "--force", "--sizes", "3"]) == 0
    assert json.loads((out / "mrc.json").read_text())["curve"][0][0] == 3
    assert not list(tmp_path.glob("deep/.*"))


def _fails(args: list[str], capsys: pytest.CaptureFixture[str], needle: str) -> None:
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("replay: error:") and needle in err[0], err


def test_cli_errors_leave_no_output(
    small_trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "o"
    base = ["mrc", str(small_trace), "--out", str(out)]
    _fails([*base, "--sizes", "1,x"], capsys, "not an integer")
    _fails([*base, "--sizes", "0"], capsys, "positive")
    _fails([*base, "--sizes", ""], capsys, "not an integer")
    _fails([*base, "--sample-rate", "0"], capsys, "(0, 1]")
    _fails([*base, "--sample-rate", "1.5"], capsys, "(0, 1]")
    _fails(["mrc", str(tmp_path / "missing"), "--out", str(out)], capsys, "missing")
    assert not out.exists() and not list(tmp_path.iterdir())
    afile = tmp_path / "file"
    afile.write_text("x")
    _fails(["mrc", str(small_trace), "--out", str(afile)], capsys, "not a folder")
    _fails(["mrc", str(small_trace), "--out", str(afile), "--force"], capsys, "not a folder")
    assert afile.read_text() == "x"
    other = tmp_path / "other"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    _fails(["mrc", str(small_trace), "--out", str(other), "--force"], capsys, "other files")
    assert (other / "keep.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "other"]


def test_cli_failure_while_writing_leaves_nothing(
    small_trace: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import replay.runs.mrc_files as cli_mrc

    def broken(*args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cli_mrc, "_write_png", broken)
    _fails(["mrc", str(small_trace), "--out", str(tmp_path / "new" / "o")], capsys, "No space")
    assert not list(tmp_path.iterdir())
    # an earlier output survives a failed --force
    monkeypatch.undo()
    assert main(["mrc", str(small_trace), "--out", str(tmp_path / "o")]) == 0
    before = (tmp_path / "o" / "mrc.json").read_text()
    monkeypatch.setattr(cli_mrc, "_write_png", broken)
    _fails(["mrc", str(small_trace), "--out", str(tmp_path / "o"), "--force"], capsys, "No space")
    assert (tmp_path / "o" / "mrc.json").read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o"]


def test_row_out_of_range_is_a_trace_error(
    small_trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad"
    shutil.copytree(small_trace, bad)
    manifest = json.loads((bad / "manifest.json").read_text())
    manifest["tables"][0]["rows"] = 3  # rows 3 and 4 of table "a" no longer fit
    (bad / "manifest.json").write_text(json.dumps(manifest))
    for rate in (None, 0.5):
        with pytest.raises(TraceError, match=r"row id [34] is out of range \(table 0 has 3 rows\)"):
            mrc_trace(bad, sample_rate=rate)
    _fails(["mrc", str(bad)], capsys, "out of range")


def test_bench_mrc_reports_rates(small_trace: Path) -> None:
    result = bench_mrc(small_trace, 0.5)
    assert result["lookups"] == 720 and result["lookups_per_s"] > 0
    assert result["peak_rss_bytes"] > 0


@pytest.mark.bench
def test_mrc_speed_goals(tmp_path: Path) -> None:
    """DESIGN s.10 on the 2-core machine: exact >= 7.7 M lookups/s, SHARDS 0.01 >= 100 M/s."""
    spec = get_preset("criteo-kaggle").with_overrides(batches=1000, batch_size=2048)
    path = replay.generate(spec, tmp_path / "kaggle")
    exact = bench_mrc(path)
    sampled = max((bench_mrc(path, 0.01) for _ in range(3)), key=lambda r: r["lookups_per_s"])
    assert exact["lookups_per_s"] >= 7.7e6, exact
    assert sampled["lookups_per_s"] >= 100e6, sampled
