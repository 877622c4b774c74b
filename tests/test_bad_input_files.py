"""Hostile files (issue 39, items 6 and 9): manifests, plan and run folders and
`torchrec.json` files that crashed a command (exit 1) or were accepted though wrong.

The command-line cases run through `test_bad_input`'s harness: exit 2, exactly one
`replay: error:` line naming what was wrong and what would do, no traceback, nothing
written (no output folder, no `.partial`). The TorchRec files have no command: their
reader raises `InputError` (one line) from Python.
"""

from __future__ import annotations

import json
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_bad_input import (  # noqa: F401
    Case,
    Shared,
    _json_edit,
    _refresh_checksums,
    case,
    shared,
)
from test_bad_input import test_bad_input as run_case

from replay._json import MAX_DEPTH, parse_json
from replay.cli import main
from replay.errors import InputError, TraceError
from replay.trace.format import PARQUET_WRITE_OPTIONS

ROWS_MAX = 2**63 - 1
PLAN_ARGS = "--system hbm-lru --cache-budget 1MiB --cluster-mtbf 6h --time-per-batch 1s"
PLAN_OUT = f"{PLAN_ARGS} --draws 20 --out {{out}}"


def _manifest(edit: Callable[[dict[str, Any]], None]) -> Callable[[Path, Shared], dict]:
    """A copy of the shared trace at {bad} whose manifest.json got `edit` (the part
    files are untouched, so their checksums still match)."""

    def setup(tmp: Path, s: Shared) -> dict[str, Path]:
        bad = tmp / "bad"
        shutil.copytree(s.trace, bad)
        _json_edit(bad / "manifest.json", edit)
        return {"bad": bad}

    return setup


def _set(*path: str | int, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(document: dict[str, Any]) -> None:
        node: Any = document
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value

    return edit


def _update_row(row: int, *, footer_counts: bool) -> Callable[[Path, Shared], dict]:
    """The shared trace with one update row of table 0 set to `row`, checksums made to
    match again: only the range check can refuse it. The shared trace declares its
    updates to be each batch's distinct lookups, so `hbm-lru` replays without their keys.
    `footer_counts=False`: the update file without its footer's (batch, table) counts,
    as another tool would write it (the reader then decodes every column)."""

    def setup(tmp: Path, s: Shared) -> dict[str, Path]:
        bad = tmp / "bad"
        shutil.copytree(s.trace, bad)
        manifest = json.loads((bad / "manifest.json").read_text())
        part = bad / manifest["files"]["updates"][0]["path"]
        table = pq.read_table(part)
        rows = table.column("row").to_numpy().copy()
        first = int(np.flatnonzero(table.column("table").to_numpy() == 0)[0])
        rows[first] = row
        table = table.set_column(
            table.schema.get_field_index("row"),
            "row",
            pa.array(rows, table.schema.field("row").type),
        )
        if not footer_counts:
            table = table.replace_schema_metadata(None)
        pq.write_table(table, part, **PARQUET_WRITE_OPTIONS)
        _refresh_checksums(bad)
        return {"bad": bad}

    return setup


@pytest.fixture(scope="module")
def plan_folder(shared: Shared) -> Path:  # noqa: F811
    out = shared.base.parent / "bad-files-plan"
    if not out.exists():
        assert main(["plan", str(shared.trace), *PLAN_OUT.format(out=out).split()]) == 0
    return out


def _plan_copy(edit: Callable[[Path], None]) -> Callable[[Path, Shared], dict]:
    def setup(tmp: Path, s: Shared) -> dict[str, Path]:
        bad = tmp / "plan"
        shutil.copytree(s.base.parent / "bad-files-plan", bad)
        edit(bad / "plan.json")
        return {"bad": bad}

    return setup


def _plan_text(text: str) -> Callable[[Path], None]:
    return lambda path: path.write_text(text)


def _plan_value(*path: str, value: Any) -> Callable[[Path], None]:
    return lambda p: _json_edit(p, _set(*path, value=value))


def _run_copy(*path: str, value: Any) -> Callable[[Path, Shared], dict]:
    def setup(tmp: Path, s: Shared) -> dict[str, Path]:
        bad = tmp / "run"
        shutil.copytree(s.run, bad)
        _json_edit(bad / "summary.json", _set(*path, value=value))
        return {"bad": bad}

    return setup


DIM = ("workload.embedding_dim", "a whole number from 1 to 65,536")
BATCH = ("batch_size", "1,000,000,000", "1 to 67,108,864")
TOO_LONG = "4" * 5000
UPDATES_OOB = ("{bad} (updates)", "row id 3000000000 is out of range", "table 0 has")

CASES: list[Case] = [
    # -- item 6: manifests that crashed `plan` and `run` (exit 1) -------------------------
    case("plan-manifest-rows-max", f"plan {{bad}} {PLAN_OUT}", "{bad}/manifest.json",
         "9.22e18 rows in all", "2^63 - 1", setup=_manifest(_set("tables", 0, "rows",
                                                                  value=ROWS_MAX))),
    case("run-manifest-rows-max", "run {bad} --system hbm-lru --out {out}", "2^63 - 1",
         setup=_manifest(_set("tables", 0, "rows", value=ROWS_MAX))),
    case("plan-embedding-dim-string", f"plan {{bad}} {PLAN_OUT}", "{bad}/manifest.json",
         '"sixteen"', *DIM, setup=_manifest(_set("workload", "embedding_dim", value="sixteen"))),
    case("run-embedding-dim-string", "run {bad} --system hbm-lru --out {out}", '"sixteen"',
         *DIM, setup=_manifest(_set("workload", "embedding_dim", value="sixteen"))),
    case("run-embedding-dim-bool", "run {bad} --system hbm-lru --out {out}", "true", *DIM,
         setup=_manifest(_set("workload", "embedding_dim", value=True))),
    case("run-embedding-dim-float", "run {bad} --system hbm-lru --out {out}", "8.5", *DIM,
         setup=_manifest(_set("workload", "embedding_dim", value=8.5))),
    case("inspect-embedding-dim-huge", "inspect {bad}", "workload.embedding_dim", "65,536",
         setup=_manifest(_set("workload", "embedding_dim", value=10**30))),
    case("run-workload-not-an-object", "run {bad} --system hbm-lru --out {out}",
         "workload is [1, 2]", "not an object", setup=_manifest(_set("workload", value=[1, 2]))),
    # an explicit null where a command reads `int(manifest.get(key, default))`
    case("run-batch-size-null", "run {bad} --system hbm-lru --out {out}", "batch_size is null",
         setup=_manifest(_set("batch_size", value=None))),
    case("run-embedding-dim-null", "run {bad} --system hbm-lru --out {out}",
         "workload.embedding_dim is null", setup=_manifest(_set("workload", "embedding_dim",
                                                                 value=None))),
    case("run-workload-null", "run {bad} --system hbm-lru --out {out}", "workload is null",
         setup=_manifest(_set("workload", value=None))),
    case("fit-workload-tables-null", "fit {bad} --out {tmp}/fit.toml", "workload.tables is null",
         setup=_manifest(_set("workload", "tables", value=None))),
    case("fit-workload-table-name-a-list", "fit {bad} --out {tmp}/fit.toml",
         "workload.tables[0]", setup=_manifest(_set("workload", "tables", 0, "name", value=[]))),
    case("run-workload-tables-not-objects", "run {bad} --system hbm-lru --out {out}",
         "workload.tables", setup=_manifest(_set("workload", "tables", value=[1, 2]))),
    # -- item 9: accepted and wrong --------------------------------------------------------
    case("plan-batch-size-1e9", f"plan {{bad}} {PLAN_OUT}", "{bad}/manifest.json", *BATCH,
         setup=_manifest(_set("batch_size", value=10**9))),
    case("run-batch-size-1e9", "run {bad} --system hbm-lru --out {out}", *BATCH,
         setup=_manifest(_set("batch_size", value=10**9))),
    case("run-workload-batch-size-1e9", "run {bad} --system hbm-lru --out {out}",
         "workload.batch_size", "67,108,864",
         setup=_manifest(_set("workload", "batch_size", value=10**9))),
    case("inspect-batch-size-400-digits", "inspect {bad}", "batch_size is 1000", "67,108,864",
         setup=_manifest(_set("batch_size", value=10**400))),
    case("inspect-batch-size-string", "inspect {bad}", "batch_size", '"16"',
         setup=_manifest(_set("batch_size", value="16"))),
    case("run-update-row-out-of-its-table", "run {bad} --system hbm-lru --out {out}",
         *UPDATES_OOB, setup=_update_row(3_000_000_000, footer_counts=True)),
    case("run-update-row-out-of-its-table-no-footer", "run {bad} --system hbm-lru --out {out}",
         *UPDATES_OOB, setup=_update_row(3_000_000_000, footer_counts=False)),
    # -- item 6: plan folders that crashed `report` ----------------------------------------
    case("report-plan-nested-100000-deep", "report {bad} --out {out}", "{bad}/plan.json",
         "nested too deeply", setup=_plan_copy(_plan_text("[" * 100_000 + "]" * 100_000))),
    case("report-plan-nested-past-the-limit", "report {bad} --out {out}", "{bad}/plan.json",
         f"more than {MAX_DEPTH} levels", setup=_plan_copy(_plan_text("[" * 500 + "]" * 500))),
    case("report-plan-5000-digit-integer", "report {bad} --out {out}", "{bad}/plan.json",
         "a number is too long", setup=_plan_copy(_plan_text('{"horizon": ' + TOO_LONG + "}"))),
    case("report-plan-400-digit-batches", "report {bad} --out {out}", "{bad}/plan.json",
         "batches", setup=_plan_copy(_plan_value("horizon", "batches", value=10**400))),
    case("report-plan-error-bound-string", "report {bad} --out {out}", "mrc.error_bound",
         setup=_plan_copy(_plan_value("mrc", "error_bound", value="x"))),
    case("report-plan-error-bound-400-digits", "report {bad} --out {out}", "mrc.error_bound",
         setup=_plan_copy(_plan_value("mrc", "error_bound", value=10**400))),
    case("report-plan-analytic-not-numbers", "report {bad} --out {out}",
         "mrc.analytic_miss_ratio",
         setup=_plan_copy(_plan_value("mrc", "analytic_miss_ratio", value=["x"]))),
    # a run folder: a total of 400 digits, a unit of rows past int64
    case("report-run-total-400-digits", "report {bad} --out {out}", "{bad}/summary.json",
         "time_s", setup=_run_copy("time_s", value=10**400)),
    case("report-run-unit-rows-400-digits", "report {bad} --out {out}", "{bad}/summary.json",
         "policy.unit_rows", "2^63", setup=_run_copy("policy", "unit_rows", value=10**400)),
]  # fmt: skip


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_bad_file(
    c: Case,
    shared: Shared,  # noqa: F811
    plan_folder: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run_case(c, shared, tmp_path, capsys, monkeypatch)


def test_the_shared_trace_declares_its_updates(shared: Shared) -> None:  # noqa: F811
    """The update cases above test the path that replays without update keys."""
    from replay.trace.reader import open_trace

    assert open_trace(shared.trace).updates_are_lookups


# -- the TBE figure with associativity 4096 -------------------------------------------------


def test_plan_tbe_4096_ways_draws_its_figure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Whole sets of 4096 ways round every load factor from 0.001 to 0.1 of `tiny`'s
    25,324 rows up to one set: seven load factors, one cache. The LRU curve answers each
    distinct size once, so the figure got 1 LRU point for 7 load factors (a crash)."""
    out = tmp_path / "plan"
    code = main([
        "plan", "--workload", "tiny", "--batches", "120", "--system", "hbm-tbe-lfu",
        "--set", "policy.associativity=4096", "--cache-budget", "64KiB", "--cluster-mtbf", "6h",
        "--time-per-batch", "200ms", "--draws", "20", "--out", str(out),
    ])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 0 and "Traceback" not in err, err
    assert (out / "figures" / "tbe.png").stat().st_size > 0
    (curve,) = json.loads((out / "plan.json").read_text())["cache"]["tbe"]
    assert curve["associativity"] == 4096
    assert len(curve["rows"]) > len(set(curve["rows"])) >= 1  # load factors sharing a cache
    assert len(curve["lru_hit"]) == len(curve["tbe_hit"]) == len(curve["load_factors"])
    by_rows: dict[int, tuple[float, float]] = {}
    for rows, lru, tbe in zip(curve["rows"], curve["lru_hit"], curve["tbe_hit"], strict=True):
        assert by_rows.setdefault(rows, (lru, tbe)) == (lru, tbe)  # one cache, one answer


def test_the_tbe_figure_without_a_curve_warns_of_nothing(
    tmp_path: Path, recwarn: pytest.WarningsRecorder
) -> None:
    """Every load factor holds all the rows touched: nothing is drawn, and matplotlib's
    "No artists with labels" warning (a second line on stderr) is not raised."""
    from replay.plan.write import _tbe_figure

    document = {"cache": {"tbe": [{"load_factors": [], "lru_hit": [], "tbe_hit": [],
                                   "algorithm": "lfu", "associativity": 4096}]}}  # fmt: skip
    _tbe_figure(document, tmp_path / "tbe.png")
    assert (tmp_path / "tbe.png").stat().st_size > 0
    assert not [w for w in recwarn if "legend" in str(w.message)]


# -- the JSON helper ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ('{"a": ' * 5_000 + "1" + "}" * 5_000, "nested too deeply"),
        ("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), f"more than {MAX_DEPTH} levels"),
        ("[" + "9" * 5000 + "]", "a number is too long"),
        (b'{"a": "\xff"}', "not UTF-8"),
        ("{", "Expecting property name"),
    ],
    ids=["deep-arrays", "deep-objects", "past-the-limit", "5000-digits", "not-utf8", "cut"],
)
def test_parse_json_refuses_in_one_line(text: str | bytes, why: str) -> None:
    with pytest.raises(TraceError) as info:
        parse_json(text, "f.json", TraceError)
    message = str(info.value)
    assert message.startswith("f.json: not valid JSON (") and why in message, message
    assert "\n" not in message


def test_parse_json_keeps_what_replay_writes() -> None:
    nested: Any = 1
    for _ in range(MAX_DEPTH - 1):
        nested = [nested]
    assert parse_json(json.dumps(nested), "f", TraceError) == nested
    assert parse_json('{"a": 1e400, "b": 10}', "f", TraceError) == {"a": float("inf"), "b": 10}


# -- TorchRec statistics (`read_torchrec_stats`, `parameter_constraints`) -----------------


@pytest.fixture(scope="module")
def torchrec_file(plan_folder: Path) -> dict[str, Any]:
    return json.loads((plan_folder / "torchrec.json").read_text())


def _table_with(document: dict[str, Any], key: str, value: Any) -> str:
    bad = json.loads(json.dumps(document))
    bad["tables"][next(iter(bad["tables"]))][key] = value
    return json.dumps(bad)


TORCHREC_CASES: list[tuple[str, Callable[[dict[str, Any]], str], str]] = [
    ("deep-arrays", lambda d: "[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ("deep-objects", lambda d: '{"a": ' * 5_000 + "1" + "}" * 5_000, "nested too deeply"),
    ("5000-digits", lambda d: json.dumps(d).replace('"version": 2', '"version": ' + TOO_LONG),
     "a number is too long"),
    ("height-true", lambda d: _table_with(d, "height", True), "height true"),
    ("height-400-digits", lambda d: _table_with(d, "height", 10**400), "2^63 - 1"),
    ("height-1e400", lambda d: _table_with(d, "height", 1e400).replace("Infinity", "1e400"),
     "height Infinity"),
    ("bins-true", lambda d: _table_with(d, "bins", True), "bins true"),
    ("load-factor-true", lambda d: _table_with(d, "load_factor", True), "load_factor true"),
    ("load-factor-1e400",
     lambda d: _table_with(d, "load_factor", 1e400).replace("Infinity", "1e400"),
     "load_factor Infinity"),
    ("expected-lookups-400-digits", lambda d: _table_with(d, "expected_lookups", 10**400),
     "expected_lookups 1000"),
    ("cacheability-true", lambda d: _table_with(d, "cacheability", True), "cacheability true"),
    ("histogram-a-string", lambda d: _table_with(d, "mrc_hist_counts", "1,2,3"),
     "must hold 5 counts"),
    ("histogram-of-strings", lambda d: _table_with(d, "mrc_hist_counts", ["1"] * 5), '"1"'),
    ("histogram-2d", lambda d: _table_with(d, "mrc_hist_counts", [[1, 2]] * 5), "[1, 2]"),
    ("histogram-of-bools", lambda d: _table_with(d, "mrc_hist_counts", [True] * 5), "true"),
    ("histogram-400-digits", lambda d: _table_with(d, "mrc_hist_counts", [10**400] * 5),
     "1000"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("make", "why"), [c[1:] for c in TORCHREC_CASES], ids=[c[0] for c in TORCHREC_CASES]
)
def test_torchrec_readers_refuse_in_one_line(
    torchrec_file: dict[str, Any],
    make: Callable[[dict[str, Any]], str],
    why: str,
    tmp_path: Path,
) -> None:
    from replay.plan.torchrec import parameter_constraints, read_torchrec_stats

    document = json.loads(json.dumps(torchrec_file))
    for table in document["tables"].values():  # 5 bins, so the lists above fit
        table["bins"], table["mrc_hist_counts"] = 5, [1, 2, 3, 4, 5]
    path = tmp_path / "torchrec.json"
    path.write_text(make(document))
    for reader in (read_torchrec_stats, parameter_constraints):
        with pytest.raises(InputError) as info:
            reader(path)
        message = str(info.value)
        assert str(path) in message and why in message and "\n" not in message, message


def test_torchrec_reader_keeps_the_plans_file(
    torchrec_file: dict[str, Any], plan_folder: Path
) -> None:
    from replay.plan.torchrec import read_torchrec_stats

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert read_torchrec_stats(plan_folder) == torchrec_file
