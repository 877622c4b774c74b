"""Unbounded work and memory (issue 31, items 4-7): refused at once, with the limit.

The bad-input cases run through `test_bad_input`'s harness (exit 2, one `replay: error:`
line naming the limit, no traceback, nothing written). A workload whose row state does
not fit is refused by its memory estimate before anything is allocated, so these cases
allocate nothing large; the cases that depend on the machine's size pin it with
REPLAY_MEMORY_LIMIT. `test_peak_rss_within_the_estimate` checks the other side: a
command that is let through holds no more than its estimate plus a stated margin.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_bad_input import Case, Shared, _json_edit, case, shared  # noqa: F401
from test_bad_input import test_bad_input as run_case

from replay import _memory
from replay.cli import main

ROWS_MAX = 9223372036854775807


def _spec(tables: int, rows: int, batch_size: int = 4, batches: int = 2) -> str:
    head = f'name = "w"\nbatch_size = {batch_size}\nbatches = {batches}\n'
    return head + "".join(f'[[tables]]\nname = "t{i}"\nrows = {rows}\n' for i in range(tables))


def _files(**files: str) -> object:
    def setup(tmp: Path, s: Shared) -> dict[str, Path]:
        for name, text in files.items():
            (tmp / name).write_text(text)
        return {}

    return setup


def _manifest_rows(rows: int) -> object:
    """A copy of the shared trace whose manifest declares `rows` rows per table (the
    lookups stay in range: only the row space grows)."""

    def setup(tmp: Path, s: Shared) -> dict[str, Path]:
        import shutil

        bad = tmp / "bad"
        shutil.copytree(s.trace, bad)

        def edit(manifest: dict) -> None:
            for table in manifest["tables"]:
                table["rows"] = rows

        _json_edit(bad / "manifest.json", edit)
        return {"bad": bad}

    return setup


BIG = _files(**{"big.toml": _spec(1, ROWS_MAX)})
E14 = _files(**{"e14.toml": _spec(1, 10**14)})
W12 = _files(**{"w12.toml": _spec(12, 4 * 10**9)})
# lookups enough for 2^17 cache slots (a cache holds at most one row per lookup:
# `PolicyContext.slots`), whose slot numbers no longer pack beside a 47-bit key
E14_WIDE = _files(**{"e14.toml": _spec(1, 10**14, 1 << 16, 2)})
# as many lookups as an eighth of the rows: the exact curve's state is an array over the
# row space (`replay.analysis.stack.dense_rows`), not a map of the rows seen
E14_LONG = _files(**{"e14.toml": _spec(1, 10**14, 1 << 26, 1 << 21)})
W12_LONG = _files(**{"w12.toml": _spec(12, 4 * 10**9, 1 << 26, 100)})
ROWS_LIMIT = ("rows", "2^53")
NEEDS = ("needs about", "this machine has")
PINNED = "this machine has 16 GiB"  # REPLAY_MEMORY_LIMIT=16G (`PINNED_CASES`)
GRID = ",".join(str(i) for i in range(1, 2001))

CASES: list[Case] = [
    # -- item 4: rows beyond what the generator and the kernels hold ----------------------
    case("bounds-generate-rows-max", "generate --spec {tmp}/big.toml --out {out}",
         "{tmp}/big.toml", "tables[0].rows", "9223372036854775807", *ROWS_LIMIT, setup=BIG),
    case("bounds-run-workload-rows-max",
         "run --workload {tmp}/big.toml --system hbm-lru --out {out}",
         "tables[0].rows", *ROWS_LIMIT, setup=BIG),
    case("bounds-mrc-workload-rows-max", "mrc --workload {tmp}/big.toml --out {out}",
         "tables[0].rows", *ROWS_LIMIT, setup=BIG),
    case("bounds-compare-workload-rows-max",
         "compare --workload {tmp}/big.toml --systems hbm-lru,dram --out {out}",
         "tables[0].rows", *ROWS_LIMIT, setup=BIG),
    # a trace may declare 2^63 - 1 rows per table, but 4 of them overflow the int64 keys
    case("bounds-inspect-trace-rows-max", "inspect {bad}", "{bad}", "3.69e19 rows", "2^63 - 1",
         setup=_manifest_rows(ROWS_MAX)),
    case("bounds-run-trace-rows-max", "run {bad} --system hbm-lru --out {out}", "2^63 - 1",
         setup=_manifest_rows(ROWS_MAX)),
    case("bounds-mrc-trace-rows-max", "mrc {bad} --out {out}", "2^63 - 1",
         setup=_manifest_rows(ROWS_MAX)),
    case("bounds-inspect-trace-rows-2e18", "inspect {bad}", "replay inspect", *NEEDS, "EiB",
         setup=_manifest_rows(ROWS_MAX // 4)),
    # -- item 5: count options ------------------------------------------------------------
    case("bounds-inspect-curve-points", "inspect {trace} --curve-points 1000000000",
         "--curve-points", "1000000000", "100000"),
    case("bounds-compare-workers", "compare {trace} --systems hbm-lru,dram -j 100000 "
         "--out {out}", "--workers", "100000", "1,024"),
    case("bounds-generate-workers", "generate --preset tiny --workers 5000 --out {out}",
         "--workers", "5000", "1,024"),
    # -- item 6: sweep grids --------------------------------------------------------------
    case("bounds-sweep-grid-4m",
         f"sweep {{trace}} --system hbm-lru --grid policy.capacity_rows={GRID} "
         f"--grid checkpoint.interval_batches={GRID} --out {{out}}",
         "4,000,000 runs", "2,000 x 2,000", "10,000", "--max-runs"),
    case("bounds-sweep-grid-over-max-runs",
         "sweep {trace} --system hbm-lru --grid policy.capacity_rows=1,2,3 --max-runs 2 "
         "--out {out}", "3 runs", "limit of 2 runs", "--max-runs 3"),
    case("bounds-sweep-max-runs-zero",
         "sweep {trace} --system hbm-lru --grid policy.capacity_rows=1,2 --max-runs 0 "
         "--out {out}", "--max-runs", "at least 1"),
    # -- item 7: more memory than the machine has -----------------------------------------
    # on the fly, `dram` and `hbm-lru` keep nothing per row: the statistics do
    case("bounds-run-1e14-rows", "run --workload {tmp}/e14.toml --system dram --inspect "
         "--out {out}", "replay run", *NEEDS, "1e14 rows", "TiB", setup=E14),
    case("bounds-mrc-1e14-rows", "mrc --workload {tmp}/e14.toml --out {out}",
         "replay mrc", *NEEDS, "1e14 rows", setup=E14_LONG),
    case("bounds-inspect-1e14-rows", "inspect {bad}", "replay inspect", *NEEDS, "TiB",
         setup=_manifest_rows(10**14)),
    case("bounds-compare-1e14-rows",
         "compare --workload {tmp}/e14.toml --systems hbm-lru,dram --inspect --out {out}",
         "replay compare", *NEEDS, setup=E14),
    # without the statistics nothing is kept per row, and the LRU's table entry (key and
    # slot in 64 bits) is the limit
    case("bounds-compare-1e14-rows-lru-entry",
         "compare --workload {tmp}/e14.toml --systems hbm-lru,dram --out {out}",
         "policy", "100,000,000,000,000 rows", "64-bit table entries", setup=E14_WIDE),
    case("bounds-sweep-1e14-rows",
         "sweep --workload {tmp}/e14.toml --system hbm-lfu "
         "--grid policy.capacity_rows=100,1000 --out {out}", "replay sweep", *NEEDS,
         setup=E14),
    # hbm-lru itself keeps nothing per row (its key map is sized to the cache): the
    # statistics. 1 B per row is what does not fit
    case("bounds-run-12x4e9-rows", "run --workload {tmp}/w12.toml --system hbm-lru --inspect "
         "--out {out}", "replay run", "12 tables x 4,000,000,000 rows x 1 B", PINNED, setup=W12),
    case("bounds-run-lfu-12x4e9-rows", "run --workload {tmp}/w12.toml --system hbm-lfu "
         "--out {out}", "replay run", "12 tables x 4,000,000,000 rows x 4 B", PINNED, setup=W12),
    case("bounds-mrc-12x4e9-rows", "mrc --workload {tmp}/w12.toml --out {out}",
         "replay mrc", "12 tables x 4,000,000,000 rows x 8 B", PINNED, setup=W12_LONG),
    case("bounds-inspect-4x20e9-rows", "inspect {bad}", "replay inspect",
         "4 groups of tables taken in turn, the largest 2e10 rows x 1 B", PINNED,
         setup=_manifest_rows(20 * 10**9)),
]  # fmt: skip
PINNED_CASES = {c.id for c in CASES if any(PINNED in str(e) for e in c.expect)}


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_bound(
    c: Case,
    shared: Shared,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if c.id in PINNED_CASES:
        monkeypatch.setenv(_memory.ENV_LIMIT, "16G")
    else:
        monkeypatch.delenv(_memory.ENV_LIMIT, raising=False)
    run_case(c, shared, tmp_path, capsys, monkeypatch)


@pytest.mark.parametrize("tables,rows", [(12, 4 * 10**9), (1, 10**14)])
def test_a_short_stream_in_a_large_row_space_gets_its_exact_curve(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tables: int, rows: int
) -> None:
    """The exact curve of 96 (or 8) lookups keeps a map of the rows seen, not 8 B for each
    of 4.8e10 (1e14) rows: `replay mrc` estimates that map and runs, on a 16 GiB machine
    too, where it used to refuse the row space."""
    monkeypatch.setenv(_memory.ENV_LIMIT, "16G")
    spec = tmp_path / "w.toml"
    spec.write_text(_spec(tables, rows))
    out = tmp_path / "m"
    assert main(["mrc", "--workload", str(spec), "--out", str(out)]) == 0
    curve = json.loads((out / "mrc.json").read_text())
    lookups = tables * 4 * 2
    assert curve["exact"] and curve["lookups"] == lookups
    assert 0 < curve["distinct_keys"] <= lookups


def test_sweep_says_its_runs_and_runs(
    shared: Shared,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "sweep"
    args = ["sweep", str(shared.trace), "--system", "hbm-lru", "--workers", "1",
            "--grid", "policy.capacity_rows=100,1000", "--grid", "model.optimizer=sgd,adagrad",
            "--out", str(out)]  # fmt: skip
    capsys.readouterr()
    assert main(args) == 0
    stdout = capsys.readouterr().out
    assert stdout.splitlines()[0] == "sweep: 4 runs, 1 at once"
    assert len(json.loads((out / "sweep.json").read_text())["points"]) == 4
    assert len([p for p in out.iterdir() if p.is_dir()]) == 4


def test_grid_counted_without_listing_points() -> None:
    from replay.runs.compare import check_grid_size, grid_size

    grid = ["policy.capacity_rows=" + ",".join(map(str, range(1, 2001)))] * 3
    assert grid_size(grid) == 2000**3  # 8e9 points: counted, never listed
    with pytest.raises(Exception, match="8,000,000,000 runs"):
        check_grid_size(grid, 10_000)


def test_memory_helpers(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _memory.format_bytes(96 * 2**30) == "96 GiB"
    assert _memory.format_bytes(1.5 * 2**30) == "1.5 GiB"
    assert _memory.format_bytes(512 * 2**20) == "512 MiB"
    assert _memory.parse_size("16G") == _memory.parse_size("16GiB") == 16 * 2**30
    assert _memory.row_space([2**62, 2**62]) == 2**63  # no int64 wrap
    monkeypatch.delenv(_memory.ENV_LIMIT, raising=False)
    have, what = _memory.available_memory()
    physical = _memory.physical_memory()
    assert have is not None and physical is not None and 0 < have <= physical, what
    monkeypatch.setenv(_memory.ENV_LIMIT, "3M")
    assert _memory.available_memory()[0] == 3 * 2**20


# -- the estimate holds: peak RSS <= baseline + estimate + margin --------------------------

# Beyond the estimate: allocator slack, the on-the-fly row groups and arrays of a few MB
# that no estimate counts. The estimate itself is an upper bound, so this is small.
RSS_MARGIN = 64 << 20
BIG_ROWS = 40_000_000  # ~165 MB of lru key map and bitmaps, 160 MB of mrc last positions
CHILD = (
    "import resource, sys\n"
    "from replay.cli import main\n"
    "code = main(sys.argv[1:])\n"
    "print('MAXRSS', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, file=sys.stderr)\n"
    "sys.exit(code)\n"
)


def _peak_rss(argv: list[str], cwd: Path) -> int:
    env = {k: v for k, v in os.environ.items() if k != _memory.ENV_LIMIT}
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, *argv],
        cwd=cwd, capture_output=True, text=True, timeout=120, check=False, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stderr.splitlines() if x.startswith("MAXRSS "))
    return int(line.split()[1])


def test_peak_rss_within_the_estimate(tmp_path: Path) -> None:
    from replay.engine.systems import resolve_system_with_origin
    from replay.runs.compare import check_run_memory
    from replay.workload.source import open_source

    small, big = tmp_path / "small.toml", tmp_path / "big.toml"
    small.write_text(_spec(1, 1000).replace("batches = 2", "batches = 4"))
    big.write_text(_spec(1, BIG_ROWS).replace("batches = 2", "batches = 4"))
    system, _ = resolve_system_with_origin("hbm-lru", [])
    opened = open_source(_memory_spec(big))
    estimate = check_run_memory(opened, [system], inspect=False)
    common = ["--system", "hbm-lru"]
    # a first run compiles whatever numba's cache lacks (more memory than any row state)
    _peak_rss(["run", "--workload", str(small), *common, "--out", str(tmp_path / "warm")], tmp_path)
    runs = {}
    for name, spec in (("small", small), ("big", big)):
        argv = ["run", "--workload", str(spec), *common, "--out", str(tmp_path / name)]
        runs[name] = _peak_rss(argv, tmp_path)
    grown = runs["big"] - runs["small"]
    # An upper bound only: row state is mapped zeroed and paged in as rows are touched,
    # so how much of it shows in RSS depends on the pages the few batches reach (0 to
    # all of it, from one run to the next).
    assert grown <= estimate.total + RSS_MARGIN, (grown, estimate)

    mrc = {}
    for name, spec in (("small", small), ("big", big)):
        mrc[name] = _peak_rss(["mrc", "--workload", str(spec), "--json"], tmp_path)
    exact = _memory.mrc_estimate([BIG_ROWS], opened.num_lookups, None)
    assert mrc["big"] - mrc["small"] <= exact.total + RSS_MARGIN, (mrc, exact)


def _memory_spec(path: Path) -> object:
    from replay.workload.spec import load_spec

    return load_spec(path)
