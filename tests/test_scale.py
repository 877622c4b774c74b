"""On-the-fly workloads and the Dask engine give exactly what a generated trace folder and
a single process give: run results, lookups and update rows, CLI outputs, curves."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import distributed
import numpy as np
import pyarrow.parquet as pq
import pytest

import replay
import replay.analysis.mrc
from replay.analysis.mrc import mrc_source
from replay.cli import main
from replay.engine.replay import RunResult, replay_trace
from replay.engine.systems import resolve_system_with_origin
from replay.system.spec import SystemSpec
from replay.trace.reader import LookupChunk, Trace, UpdateChunk, open_trace
from replay.workload.onthefly import GeneratedTrace, open_workload
from replay.workload.source import Source, open_source
from replay.workload.spec import WorkloadSpec, load_spec, spec_from_dict, spec_to_toml

TINY_BATCHES = 40
MRC_BATCHES = 60
# explicit curve sizes (rows), all above what a 5% sample resolves (304 rows)
MRC_SIZES = [400, 5_000, 60_000, 253_000]
SYSTEMS = [
    "hbm-lru",
    "hbm-lfu",
    "hbm-hot",
    "hbm-belady",
    "dram",
    "pmem-host",
    "chunk",
    "cxl",
    "fastpersist",
]
# cached policies with a cache smaller than the rows the tiny trace touches: evictions
SMALL_CACHE = {
    "hbm-lru": ["policy.capacity_rows=1500"],
    "hbm-lfu": ["policy.capacity_rows=1500"],
    "hbm-hot": ["policy.capacity_rows=1500"],
    "hbm-belady": ["policy.capacity_rows=1500"],
    "chunk": ["policy.capacity_rows=4096"],
}
RUN_FILES = ["batches.parquet", "checkpoints.parquet", "config.json", "summary.json"]

# Gradient accumulation over 3 batches, a frozen table, reuse and drift; 4,096 samples of
# 64 lookups = 262,144 lookups a batch, so a row group holds 6 batches (4 rounded up to a
# whole accumulation window) and a file 24: row groups [0,6) ... [18,24) [24,26), files
# [0,24) [24,26), and a last, partial accumulation window that takes no step.
ACCUM: dict[str, Any] = {
    "name": "accum",
    "batch_size": 4096,
    "batches": 26,
    "seed": 7,
    "embedding_dim": 8,
    "update": {"accumulate_batches": 3},
    "tables": [
        {"name": "A", "rows": 50_000, "pooling": 32, "reuse": 0.3, "reuse_window_batches": 2},
        {
            "name": "B",
            "rows": 200_000,
            "pooling": 16,
            "frozen": True,
            "drift": 0.05,
            "drift_period_batches": 5,
        },
        {"name": "C", "rows": 3_000, "pooling": 16, "mapping": "contiguous", "alpha": 0.8},
    ],
}
ACCUM_ROW_GROUPS = [(0, 6), (6, 12), (12, 18), (18, 24), (24, 26)]
ACCUM_FILES = [(0, 24), (24, 26)]
# batch ranges that cut row groups ([3, 17), [12, 18) ...), cross the file boundary at
# 24, hold one batch, none, or run past the end
RANGES: list[tuple[int, int | None]] = [
    (0, None),
    (3, 17),
    (5, 25),
    (12, 18),
    (13, 14),
    (23, 26),
    (25, 99),
    (7, 7),
]

# criteo-kaggle, 10,240 samples a batch: 4 batches a row group, 16 a file; 18 batches
# make two files, the second one short (it tends to finish first on a cluster)
KAGGLE = ["--preset", "criteo-kaggle", "--batch-size", "10240", "--batches", "18"]


# -- helpers --------------------------------------------------------------------------


def _system(name: str, sets: list[str] | None = None) -> SystemSpec:
    return resolve_system_with_origin(name, list(sets or []))[0]


def _assert_same_arrays(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert list(a) == list(b)
    for name in a:
        assert a[name].dtype == b[name].dtype, name
        assert np.array_equal(a[name], b[name]), name


def _assert_same_run(a: RunResult, b: RunResult) -> None:
    assert a.summary == b.summary
    _assert_same_arrays(a.columns, b.columns)
    _assert_same_arrays(a.checkpoints, b.checkpoints)


def _stderr_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("replay: error: ")
    return err


def _json_out(capsys: pytest.CaptureFixture[str], args: list[str]) -> Any:
    capsys.readouterr()
    assert main(args) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def _files(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` by relative path, with its bytes."""
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def _concat(chunks: list[Any], names: tuple[str, ...]) -> dict[str, np.ndarray]:
    if not chunks:
        return {name: np.empty(0, dtype=np.int64) for name in names}
    return {name: np.concatenate([getattr(c, name) for c in chunks]) for name in names}


def _assert_same_columns(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert list(a) == list(b)
    for name in a:
        assert len(a[name]) == len(b[name]), name
        if len(a[name]):
            assert a[name].dtype == b[name].dtype, name
        assert np.array_equal(a[name], b[name]), name


def _check_chunks(chunks: list[LookupChunk] | list[UpdateChunk], start: int, stop: int) -> None:
    """Chunks hold whole batches of [start, stop), in order, inside their own range."""
    last = start
    for chunk in chunks:
        assert len(chunk)
        assert last <= chunk.batch_start < chunk.batch_stop <= stop
        assert chunk.batch_start <= int(chunk.batch[0]) and int(chunk.batch[-1]) < chunk.batch_stop
        assert np.all(np.diff(chunk.batch.astype(np.int64)) >= 0)
        last = chunk.batch_stop


def _content(path: Path) -> object:
    """A run file's content as the two sources must agree on it: summary.json's
    trace digest names the source (manifest or workload spec), so it is left out."""
    if path.name != "summary.json":
        return path.read_bytes()
    summary = json.loads(path.read_text())
    del summary["digests"]["trace_sha256"]
    return summary


def _run_folders(out: Path) -> list[str]:
    return sorted(p.name for p in out.iterdir() if p.is_dir())


def _assert_same_run_folders(a: Path, b: Path, files: list[str]) -> None:
    assert _run_folders(a) == _run_folders(b)
    for folder in _run_folders(a):
        for name in files:
            assert _content(a / folder / name) == _content(b / folder / name), (
                folder,
                name,
            )


def _without(document: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in document.items() if k not in keys}


# -- fixtures -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return replay.generate("tiny", tmp_path_factory.mktemp("tiny") / "t", batches=TINY_BATCHES)


@pytest.fixture(scope="module")
def tiny_mrc(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return replay.generate("tiny", tmp_path_factory.mktemp("tiny60") / "t", batches=MRC_BATCHES)


@pytest.fixture(scope="module")
def accum_spec(tmp_path_factory: pytest.TempPathFactory) -> WorkloadSpec:
    spec = spec_from_dict(ACCUM)
    assert spec.update.accumulate_batches == 3
    assert [t.frozen for t in spec.tables] == [False, True, False]
    # the same spec through a TOML file
    path = tmp_path_factory.mktemp("spec") / "accum.toml"
    path.write_text(spec_to_toml(spec))
    assert load_spec(path) == spec
    return spec


@pytest.fixture(scope="module")
def accum(tmp_path_factory: pytest.TempPathFactory, accum_spec: WorkloadSpec) -> Path:
    path = replay.generate(accum_spec, tmp_path_factory.mktemp("accum") / "t")
    manifest = open_trace(path).manifest
    assert manifest["layout"] == {"batches_per_row_group": 6, "batches_per_file": 24}
    spans = [(e["batch_start"], e["batch_stop"]) for e in manifest["files"]["lookups"]]
    assert spans == ACCUM_FILES
    return path


@pytest.fixture(scope="module")
def kaggle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """criteo-kaggle written by one process with one worker: the reference bytes."""
    out = tmp_path_factory.mktemp("kaggle") / "single"
    assert main(["generate", *KAGGLE, "--workers", "1", "--out", str(out)]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    for kind in ("lookups", "updates"):
        spans = [(e["batch_start"], e["batch_stop"]) for e in manifest["files"][kind]]
        assert spans == [(0, 16), (16, 18)]
    return out


@pytest.fixture(scope="module")
def scheduler() -> Iterator[str]:
    """The address of a local Dask cluster of two worker processes."""
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
    )
    try:
        yield cluster.scheduler_address
    finally:
        cluster.close()


# -- 1. replay: on the fly == trace folder ----------------------------------------------


@pytest.mark.parametrize(
    ("system", "sets"),
    [(name, None) for name in SYSTEMS] + [(name, sets) for name, sets in SMALL_CACHE.items()],
    ids=[*SYSTEMS, *(f"{name}-small" for name in SMALL_CACHE)],
)
def test_tiny_workload_replays_like_its_trace(
    system: str, sets: list[str] | None, tiny: Path
) -> None:
    spec = _system(system, sets)
    trace = open_trace(tiny)
    generated = open_workload("tiny", batches=TINY_BATCHES)
    a = replay_trace(trace, spec)
    b = replay_trace(generated, spec)
    _assert_same_run(a, b)
    if sets:  # the small cache matters: rows are evicted (or bypass a pinned set)
        policy = a.summary["policy"]
        assert policy["evictions"] + policy["bypass"] > 0
    ta, tb = a.meta["trace"], b.meta["trace"]
    manifest_sha = hashlib.sha256((tiny / "manifest.json").read_bytes()).hexdigest()
    assert ta["manifest_sha256"] == manifest_sha and "on_the_fly" not in ta
    assert tb["on_the_fly"] is True and tb["workload_sha256"] == generated.digest()
    assert "manifest_sha256" not in tb and "workload_sha256" not in ta
    assert tb["path"] == "workload:tiny" and ta["path"] == str(tiny)
    for key in ("format_version", "workload", "seed", "batches", "lookups"):
        assert ta[key] == tb[key], key


@pytest.mark.parametrize(
    ("system", "sets", "threads"),
    [
        ("hbm-lru", ["policy.capacity_rows=20000"], 1),
        ("hbm-belady", ["policy.capacity_rows=20000"], None),
        ("pmem-host", None, 3),
        ("fastpersist", None, None),
    ],
    ids=["hbm-lru-small", "hbm-belady-small", "pmem-host", "fastpersist"],
)
def test_accumulating_workload_with_a_frozen_table_replays_like_its_trace(
    system: str,
    sets: list[str] | None,
    threads: int | None,
    accum: Path,
    accum_spec: WorkloadSpec,
) -> None:
    spec = _system(system, sets)
    a = replay_trace(open_trace(accum), spec)
    b = replay_trace(GeneratedTrace(accum_spec, threads=threads), spec)
    _assert_same_run(a, b)
    # update rows only on the steps of full windows: every third batch, none after 23
    steps = np.flatnonzero(a.columns["updates"])
    assert steps.tolist() == list(range(2, 24, 3))
    if sets:
        assert a.summary["policy"]["evictions"] > 0


# -- 2. GeneratedTrace reads like Trace -------------------------------------------------


@pytest.mark.parametrize("threads", [1, 3])
def test_generated_chunks_equal_the_trace_chunks(
    threads: int, accum: Path, accum_spec: WorkloadSpec
) -> None:
    trace = open_trace(accum)
    generated = GeneratedTrace(accum_spec, threads=threads)
    assert generated.row_groups == ACCUM_ROW_GROUPS
    assert generated.layout == trace.manifest["layout"]
    assert generated.num_batches == trace.num_batches == 26
    assert generated.num_lookups == trace.num_lookups == 26 * 4096 * 64
    assert generated.num_updates == trace.num_updates > 0
    assert generated.table_names == trace.table_names == ["A", "B", "C"]
    assert np.array_equal(generated.table_rows, trace.table_rows)
    assert generated.row_dtype == trace.row_dtype
    assert generated.workload == trace.workload == accum_spec.to_dict()
    per_batch = accum_spec.lookups_per_batch
    lookups = ("batch", "table", "row")
    updates = ("batch", "table", "row", "count")
    for start, stop in RANGES:
        end = 26 if stop is None else min(stop, 26)
        ours = list(generated.iter_lookups(start, stop))
        theirs = list(trace.iter_lookups(start, stop))
        _check_chunks(ours, start, end)
        got = _concat(ours, lookups)
        _assert_same_columns(got, _concat(theirs, lookups))
        assert len(got["row"]) == (end - start) * per_batch
        assert np.array_equal(np.unique(got["batch"]), np.arange(start, end))
        # map_lookups: the same row groups, cut the same way
        mapped = list(generated.map_lookups(lambda c: c, start, stop))
        _assert_same_columns(_concat([c for c in mapped if len(c)], lookups), got)

        ours_u = list(generated.iter_updates(start, stop))
        theirs_u = list(trace.iter_updates(start, stop))
        _check_chunks(ours_u, start, end)
        got_u = _concat(ours_u, updates)
        _assert_same_columns(got_u, _concat(theirs_u, updates))
        # steps of full windows only, and never the frozen table
        assert set(got_u["batch"].tolist()) == {b for b in range(2, 24, 3) if start <= b < end}
        assert 1 not in set(got_u["table"].tolist())


def test_tiny_generated_lookups_equal_the_trace_whatever_the_threads(tiny: Path) -> None:
    trace = open_trace(tiny)
    names = ("batch", "table", "row")
    reference = _concat(list(trace.iter_lookups()), names)
    reference_u = _concat(list(trace.iter_updates()), ("batch", "table", "row", "count"))
    for threads in (1, 2, 4):
        generated = open_workload("tiny", batches=TINY_BATCHES, threads=threads)
        assert generated.num_lookups == trace.num_lookups
        assert generated.num_updates == trace.num_updates
        _assert_same_columns(_concat(list(generated.iter_lookups()), names), reference)
        _assert_same_columns(
            _concat(list(generated.iter_updates()), ("batch", "table", "row", "count")),
            reference_u,
        )
        # one row group of 2,731 batches holds all 40: [3, 17) cuts it on both sides
        assert generated.row_groups == [(0, TINY_BATCHES)]
        _assert_same_columns(
            _concat(list(generated.iter_lookups(3, 17)), names),
            _concat(list(trace.iter_lookups(3, 17)), names),
        )


def test_digest_is_stable_and_names_the_spec() -> None:
    a = open_workload("tiny", batches=TINY_BATCHES)
    b = open_workload("tiny", batches=TINY_BATCHES, threads=1)
    assert a.digest() == b.digest()
    assert len(a.digest()) == 64 and int(a.digest(), 16) >= 0
    text = json.dumps(a.spec.to_dict(), sort_keys=True, separators=(",", ":"))
    assert a.digest() == hashlib.sha256(text.encode()).hexdigest()
    assert open_workload(a.spec).digest() == a.digest()
    source = open_source(a.spec)
    assert isinstance(source, GeneratedTrace) and source.digest() == a.digest()
    others = [
        open_workload("tiny", batches=TINY_BATCHES, seed=1),
        open_workload("tiny", batches=TINY_BATCHES + 1),
        open_workload("tiny", batches=TINY_BATCHES, alpha=1.2),
    ]
    digests = {a.digest(), *(o.digest() for o in others)}
    assert len(digests) == 4
    # a different seed is a different workload, not only a different digest
    first = next(a.iter_lookups()).row
    assert not np.array_equal(first, next(others[0].iter_lookups()).row)


def test_open_source_reads_both_kinds(tiny: Path) -> None:
    spec = open_workload("tiny", batches=TINY_BATCHES).spec
    folder: Source = open_source(str(tiny))
    generated: Source = open_source(spec, threads=1)
    assert isinstance(folder, Trace) and isinstance(generated, GeneratedTrace)
    assert generated.threads == 1 and generated.spec == spec
    assert str(generated.path) == "workload:tiny"
    assert folder.workload == generated.workload


# -- 3. replay run --workload ----------------------------------------------------------


def test_cli_run_workload_equals_generate_then_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "trace"
    assert main(["generate", "--preset", "tiny", "--batches", "40", "--out", str(trace)]) == 0
    system = ["--system", "hbm-lru", "--set", "policy.capacity_rows=1500"]
    assert main(["run", str(trace), *system, "--out", str(tmp_path / "folder")]) == 0
    workload = ["--workload", "tiny", "--batches", "40"]
    assert main(["run", *workload, *system, "--out", str(tmp_path / "fly")]) == 0
    assert main(["run", *workload, *system, "--inspect", "--out", str(tmp_path / "fly-i")]) == 0
    folder, fly, fly_i = tmp_path / "folder", tmp_path / "fly", tmp_path / "fly-i"
    for other in (fly, fly_i):
        for name in RUN_FILES:
            assert _content(folder / name) == _content(other / name), name
    assert (folder / "workload.json").is_file()
    assert not (fly / "workload.json").exists()
    expected = json.loads((folder / "workload.json").read_text())
    got = json.loads((fly_i / "workload.json").read_text())
    assert expected["trace"] == str(trace) and got["trace"] == "workload:tiny"
    assert _without(got, "trace") == _without(expected, "trace")
    meta = json.loads((fly / "meta.json").read_text())["trace"]
    assert meta["on_the_fly"] is True
    assert meta["workload_sha256"] == open_workload("tiny", batches=40).digest()
    assert "manifest_sha256" in json.loads((folder / "meta.json").read_text())["trace"]
    summary = json.loads((fly / "summary.json").read_text())
    assert summary["lookups"] == 40 * 64 * 6 and summary["policy"]["evictions"] > 0
    # --no-inspect on a trace leaves workload.json out
    out = tmp_path / "folder-n"
    assert main(["run", str(trace), *system, "--no-inspect", "--out", str(out)]) == 0
    assert not (out / "workload.json").exists()
    assert (out / "summary.json").read_bytes() == (folder / "summary.json").read_bytes()


BAD_SOURCES = {
    "neither": ([], "give a TRACE folder or --workload"),
    "both": (["TRACE", "--workload", "tiny"], "not both"),
    "batches-without-workload": (["TRACE", "--batches", "5"], "--batches applies only with"),
    "seed-without-workload": (["TRACE", "--seed", "5"], "--seed applies only with"),
    "unknown-preset": (["--workload", "nope"], "unknown workload preset 'nope'"),
    "missing-spec-file": (["--workload", "NOPE.toml"], "no such spec file"),
    "bad-override": (["--workload", "tiny", "--batches", "0"], "out of range"),
}
COMMANDS = {
    "run": ["run", "--system", "hbm-lru"],
    "mrc": ["mrc"],
    "compare": ["compare", "--systems", "hbm-lru,dram"],
    "sweep": ["sweep", "--system", "hbm-lru", "--grid", "policy.capacity_rows=100,1000"],
}


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("case", list(BAD_SOURCES))
def test_bad_source_arguments_exit_2_and_write_nothing(
    case: str, command: str, tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    extra, message = BAD_SOURCES[case]
    extra = [
        str(tiny) if a == "TRACE" else str(tmp_path / "nope.toml") if a == "NOPE.toml" else a
        for a in extra
    ]
    out = tmp_path / "out"
    assert main([*COMMANDS[command], *extra, "--out", str(out)]) == 2
    assert message in _stderr_line(capsys)
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == []


# -- 4. replay mrc --workload ----------------------------------------------------------


@pytest.mark.parametrize("rate", [None, 0.05])
def test_cli_mrc_workload_equals_trace(
    rate: float | None, tiny_mrc: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    extra = [] if rate is None else ["--sample-rate", str(rate)]
    folder = _json_out(capsys, ["mrc", str(tiny_mrc), *extra, "--json"])
    fly = _json_out(
        capsys, ["mrc", "--workload", "tiny", "--batches", str(MRC_BATCHES), *extra, "--json"]
    )
    for key in ("curve", "expected_error", "lookups"):
        assert fly[key] == folder[key], key
    assert _without(fly, "trace", "workload", "checksums_verified") == _without(
        folder, "trace", "checksums_verified"
    )
    assert folder["checksums_verified"] is True and fly["checksums_verified"] is None
    assert folder["trace"] == str(tiny_mrc) and "workload" not in folder
    assert fly["trace"] == "workload:tiny"
    assert fly["workload"] == open_workload("tiny", batches=MRC_BATCHES).spec.to_dict()
    assert fly["lookups"] == MRC_BATCHES * 64 * 6 and len(fly["curve"]) > 1
    assert fly["exact"] is (rate is None)
    if rate is not None:
        # tiny's rows all fit in the exact head: no error is left to state
        assert fly["expected_error"] >= 0 and fly["sampled_lookups"] < fly["lookups"]


def test_mrc_source_workload_equals_trace(accum: Path, accum_spec: WorkloadSpec) -> None:
    """Over several row groups and files, exact and sampled, with explicit sizes."""
    sizes = MRC_SIZES
    for rate in (None, 0.05):
        a = mrc_source(str(accum), sizes, rate).to_json()
        b = mrc_source(accum_spec, sizes, rate, threads=3).to_json()
        assert a == b
        assert [c for c, _ in a["curve"]] == sizes


# -- 5. compare and sweep --workload ---------------------------------------------------

COMPARE_SYSTEMS = "hbm-lru,dram,pmem-host,fastpersist"
SWEEP_GRID = ["--grid", "policy.capacity_rows=500,2000,8000", "--grid", "policy.name=lru,lfu"]


def test_cli_compare_workload_equals_trace(
    tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = tmp_path / "folder", tmp_path / "fly"
    args = ["compare", "--systems", COMPARE_SYSTEMS, "--json"]
    rows_a = _json_out(capsys, [*args, str(tiny), "--workers", "1", "--out", str(a)])
    workload = ["--workload", "tiny", "--batches", str(TINY_BATCHES)]
    rows_b = _json_out(capsys, [*args, *workload, "--workers", "2", "--out", str(b)])
    assert rows_a == rows_b
    table_a = pq.read_table(a / "comparison.parquet").to_pylist()
    assert table_a == pq.read_table(b / "comparison.parquet").to_pylist() == rows_a
    assert _run_folders(a) == sorted(COMPARE_SYSTEMS.split(","))
    _assert_same_run_folders(a, b, RUN_FILES)
    for system in _run_folders(a):
        assert (a / system / "workload.json").is_file()
        assert not (b / system / "workload.json").exists()
    doc_a = json.loads((a / "compare.json").read_text())
    doc_b = json.loads((b / "compare.json").read_text())
    assert doc_a["trace"] == str(tiny) and "workload" not in doc_a
    assert doc_b["trace"] == "workload:tiny"
    assert doc_b["workload"] == open_workload("tiny", batches=TINY_BATCHES).spec.to_dict()
    assert _without(doc_a, "trace", "checksums_verified") == _without(
        doc_b, "trace", "workload", "checksums_verified"
    )
    assert doc_a["checksums_verified"] is True and doc_b["checksums_verified"] is None


def test_cli_sweep_workload_equals_trace(
    tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = tmp_path / "folder", tmp_path / "fly"
    args = ["sweep", "--system", "hbm-lru", *SWEEP_GRID, "--json"]
    rows_a = _json_out(capsys, [*args, str(tiny), "--workers", "1", "--out", str(a)])
    workload = ["--workload", "tiny", "--batches", str(TINY_BATCHES)]
    rows_b = _json_out(capsys, [*args, *workload, "--workers", "1", "--out", str(b)])
    assert rows_a == rows_b and len(rows_a) == 6
    table_a = pq.read_table(a / "sweep.parquet").to_pylist()
    assert table_a == pq.read_table(b / "sweep.parquet").to_pylist() == rows_a
    assert len(_run_folders(a)) == 6
    _assert_same_run_folders(a, b, RUN_FILES)
    doc_a = json.loads((a / "sweep.json").read_text())
    doc_b = json.loads((b / "sweep.json").read_text())
    assert doc_b["trace"] == "workload:tiny" and "workload" in doc_b
    assert _without(doc_a, "trace", "checksums_verified") == _without(
        doc_b, "trace", "workload", "checksums_verified"
    )
    assert doc_a["checksums_verified"] is True and doc_b["checksums_verified"] is None
    # the cache sizes matter: the hit ratios differ along the grid
    assert len({row["hit_ratio"] for row in rows_a}) > 1


# -- 6. the Dask engine ----------------------------------------------------------------


def test_generate_on_a_cluster_is_byte_identical(
    kaggle: Path, scheduler: str, tmp_path: Path
) -> None:
    out = tmp_path / "cluster"
    assert main(["generate", *KAGGLE, "--scheduler", scheduler, "--out", str(out)]) == 0
    expected = _files(kaggle)
    assert sorted(expected) == [
        "lookups/part-00000.parquet",
        "lookups/part-00001.parquet",
        "manifest.json",
        "updates/part-00000.parquet",
        "updates/part-00001.parquet",
    ]
    assert _files(out) == expected
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cluster"]  # no partial left


def test_generate_api_on_a_cluster_is_byte_identical(
    accum: Path, accum_spec: WorkloadSpec, scheduler: str, tmp_path: Path
) -> None:
    with distributed.Client(scheduler) as client:
        out = replay.generate(accum_spec, tmp_path / "cluster", client=client)
    assert _files(out) == _files(accum)


def test_generate_scheduler_local_is_byte_identical(kaggle: Path, tmp_path: Path) -> None:
    """The only test that starts a cluster through the CLI (a few seconds)."""
    out = tmp_path / "local"
    args = ["generate", *KAGGLE, "--scheduler", "local", "--workers", "2", "--out", str(out)]
    assert main(args) == 0
    assert _files(out) == _files(kaggle)


@pytest.mark.parametrize("source", ["folder", "workload"])
def test_compare_on_a_cluster_equals_one_process(
    source: str, tiny: Path, scheduler: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    where = (
        [str(tiny)]
        if source == "folder"
        else ["--workload", "tiny", "--batches", str(TINY_BATCHES)]
    )
    a, b = tmp_path / "one", tmp_path / "cluster"
    args = ["compare", *where, "--systems", COMPARE_SYSTEMS, "--json"]
    rows_a = _json_out(capsys, [*args, "--workers", "1", "--out", str(a)])
    rows_b = _json_out(capsys, [*args, "--scheduler", scheduler, "--out", str(b)])
    assert rows_a == rows_b
    for name in ("comparison.parquet", "compare.json"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    assert pq.read_table(b / "comparison.parquet").to_pylist() == rows_a
    files = RUN_FILES + (["workload.json"] if source == "folder" else [])
    _assert_same_run_folders(a, b, files)
    assert _run_folders(b) == sorted(COMPARE_SYSTEMS.split(","))


@pytest.mark.parametrize("source", ["folder", "workload"])
def test_sweep_on_a_cluster_equals_one_process(
    source: str, tiny: Path, scheduler: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    where = (
        [str(tiny)]
        if source == "folder"
        else ["--workload", "tiny", "--batches", str(TINY_BATCHES)]
    )
    a, b = tmp_path / "one", tmp_path / "cluster"
    args = ["sweep", *where, "--system", "hbm-lru", *SWEEP_GRID, "--json"]
    rows_a = _json_out(capsys, [*args, "--workers", "1", "--out", str(a)])
    rows_b = _json_out(capsys, [*args, "--scheduler", scheduler, "--out", str(b)])
    assert rows_a == rows_b and len(rows_a) == 6
    for name in ("sweep.parquet", "sweep.json"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    assert pq.read_table(b / "sweep.parquet").to_pylist() == rows_a
    files = RUN_FILES + (["workload.json"] if source == "folder" else [])
    _assert_same_run_folders(a, b, files)


@pytest.mark.parametrize("source", ["folder", "workload"])
def test_sampled_mrc_on_a_cluster_equals_one_process(
    source: str, tiny_mrc: Path, scheduler: str, capsys: pytest.CaptureFixture[str]
) -> None:
    where = (
        [str(tiny_mrc)]
        if source == "folder"
        else ["--workload", "tiny", "--batches", str(MRC_BATCHES)]
    )
    args = ["mrc", *where, "--sample-rate", "0.05", "--json"]
    one = _json_out(capsys, args)
    cluster = _json_out(capsys, [*args, "--scheduler", scheduler])
    assert cluster == one
    assert cluster["exact"] is False and cluster["lookups"] == MRC_BATCHES * 64 * 6


def test_sampled_mrc_in_many_tasks_equals_one_process(
    accum: Path,
    accum_spec: WorkloadSpec,
    scheduler: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Tasks of one row group (workload) or one file (trace): folded in trace order."""
    tasks: list[list[tuple[int, int]]] = []
    task_ranges: Callable[..., list[tuple[int, int]]] = replay.analysis.mrc.task_ranges

    def small_tasks(source: Source) -> list[tuple[int, int]]:
        ranges = task_ranges(source, task_lookups=1)
        tasks.append(ranges)
        return ranges

    monkeypatch.setattr(replay.analysis.mrc, "task_ranges", small_tasks)
    sizes = MRC_SIZES
    one = mrc_source(str(accum), sizes, 0.05).to_json()
    assert mrc_source(accum_spec, sizes, 0.05).to_json() == one
    with distributed.Client(scheduler) as client:
        assert mrc_source(str(accum), sizes, 0.05, client=client).to_json() == one
        assert mrc_source(accum_spec, sizes, 0.05, client=client).to_json() == one
    assert tasks == [ACCUM_FILES, ACCUM_ROW_GROUPS]


@pytest.mark.parametrize("where", ["local", "address"])
def test_exact_mrc_with_a_scheduler_exits_2(
    where: str,
    tiny_mrc: Path,
    scheduler: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    address = "local" if where == "local" else scheduler
    out = tmp_path / "out"
    for source in ([str(tiny_mrc)], ["--workload", "tiny", "--batches", "10"]):
        assert main(["mrc", *source, "--scheduler", address, "--out", str(out)]) == 2
        assert "--scheduler spreads --sample-rate curves" in _stderr_line(capsys)
        assert not out.exists()
    assert list(tmp_path.iterdir()) == []


def test_scheduler_address_refuses_workers(
    tiny: Path, scheduler: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    commands = [
        ["generate", "--preset", "tiny", "--batches", "5"],
        ["compare", str(tiny), "--systems", "hbm-lru,dram"],
        ["mrc", str(tiny), "--sample-rate", "0.05"],
    ]
    for args in commands:
        assert main([*args, "--scheduler", scheduler, "--workers", "2", "--out", str(out)]) == 2
        assert "--workers" in _stderr_line(capsys)
        assert not out.exists()
    assert list(tmp_path.iterdir()) == []
