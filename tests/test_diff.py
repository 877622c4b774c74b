"""`replay diff A B` (issue 56, part 3): answers side by side, and `--fail-on` as a gate.

Two small plans of one workload at two cache budgets (the smaller budget hits less), and
two tiny runs; the thresholds' arithmetic is pinned on hand-made rows."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from replay.cli import main
from replay.errors import InputError
from replay.runs.diff import Row, broken, diff, format_change, format_value, parse_threshold

PLAN = ["--workload", "tiny", "--batches", "60", "--system", "hbm-lru", "--hit-target", "0.5",
        "--cluster-mtbf", "6h", "--time-per-batch", "200ms", "--draws", "50"]  # fmt: skip


@pytest.fixture(scope="module")
def plans(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("plans")
    for name, budget in (("big", "64KiB"), ("small", "32KiB")):
        assert main(["plan", *PLAN, "--cache-budget", budget, "--out", str(root / name)]) == 0
    return root / "big", root / "small"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("runs")
    for name, rows in (("big", "4096"), ("small", "256")):
        code = main([
            "run", "--workload", "tiny", "--batches", "30", "--system", "hbm-lru",
            "--set", f"policy.capacity_rows={rows}", "--out", str(root / name),
        ])  # fmt: skip
        assert code == 0
    return root / "big", root / "small"


def test_two_plans_show_every_answer_and_its_change(
    plans: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    big, small = plans
    result = diff(big, small)
    assert result.kind == "plan"
    paths = [r.path for r in result.rows]
    for path in ("cache.hit_at_budget", "cache.bytes_for_hit[0.5]", "checkpoint.goodput",
                 "checkpoint.interval_s", "memory.peak_bytes", "memory.peak_bytes[0]",
                 "systems.time_per_batch_s[hbm-lru]", "cache.budget_bytes"):  # fmt: skip
        assert path in paths
    budget = result.row("cache.budget_bytes")
    assert budget is not None and budget.a == 64 << 10 and budget.b == 32 << 10
    assert budget.relative == pytest.approx(-0.5)
    hit = result.row("cache.hit_at_budget")
    assert hit is not None and hit.b < hit.a  # type: ignore[operator]
    # the same target needs the same bytes whatever the budget (one curve)
    row = result.row("cache.bytes_for_hit[0.5]")
    assert row is not None and row.a == row.b and not row.changed

    assert main(["diff", str(big), str(small), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["kind"] == "plan" and len(doc["answers"]) == len(result.rows)
    entry = next(a for a in doc["answers"] if a["path"] == "cache.hit_at_budget")
    assert entry["unit"] == "ratio" and entry["change"] == pytest.approx(hit.b - hit.a)  # type: ignore[operator]

    assert main(["diff", str(big), str(small)]) == 0
    table = capsys.readouterr().out
    assert "cache.budget_bytes" in table and "64 KiB" in table and "-32 KiB (-50%)" in table
    assert " pt" in table  # a ratio's change in points


def test_fail_on_gates_a_smaller_cache(
    plans: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    big, small = plans
    gate = ["--fail-on", "cache.hit_at_budget < -1pt"]
    assert main(["diff", str(big), str(small), *gate]) == 1
    err = capsys.readouterr().err
    assert "threshold broken: cache.hit_at_budget < -1pt: changed by -" in err
    assert main(["diff", str(big), str(big), *gate]) == 0
    assert "holds: cache.hit_at_budget < -1pt" in capsys.readouterr().out
    # several: each broken one named, the holding one not
    code = main([
        "diff", str(big), str(small), "--fail-on", "cache.budget_bytes < -10%",
        "--fail-on", "memory.peak_bytes > 1TiB", "--fail-on", "cache.split_hit < 0.99",
    ])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 1 and "cache.budget_bytes < -10%" in err and "cache.split_hit < 0.99" in err
    assert "memory.peak_bytes" not in err


def test_two_runs(runs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    big, small = runs
    result = diff(big, small)
    assert result.kind == "run"
    hit = result.row("policy.hit_ratio")
    assert hit is not None and hit.b < hit.a  # type: ignore[operator]
    assert main(["diff", str(big), str(small), "--fail-on", "policy.hit_ratio < -1pt"]) == 1
    assert main(["diff", str(big), str(small), "--fail-on", "policy.hit_ratio < -99pt"]) == 0
    capsys.readouterr()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["plans:big", "runs:big"], "a plan folder and"),
        (["plans:big", "empty"], "neither a run folder (summary.json) nor a plan folder"),
        (["plans:big", "missing"], "no such folder"),
        (["plans:big", "plans:small", "--fail-on", "cache.hit_at_budget ~ 1"], "not a threshold"),
        (["plans:big", "plans:small", "--fail-on", "cache.nothing > 1"], "no answer"),
        (["plans:big", "plans:small", "--fail-on", "cache.hit_at_budget < 1GiB"], "not a value"),
        (["plans:big", "plans:small", "--fail-on", "memory.peak_bytes > +1pt"], "for ratios"),
        (["plans:big", "plans:small", "--fail-on", "checkpoint.best > 1"], "is text"),
        (["plans:big", "badjson"], "not readable JSON"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    args: list[str],
    message: str,
    plans: tuple[Path, Path],
    runs: tuple[Path, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "badjson").mkdir()
    (tmp_path / "badjson" / "plan.json").write_text("{not json")
    folders = {"plans:big": plans[0], "plans:small": plans[1], "runs:big": runs[0]}
    argv = [str(folders.get(a, tmp_path / a)) if i < 2 else a for i, a in enumerate(args)]
    assert main(["diff", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("replay: error: ") and err.count("\n") == 1 and message in err


def test_a_plan_copy_with_an_answer_gone_breaks_its_threshold(
    plans: tuple[Path, Path], tmp_path: Path
) -> None:
    """A hit target out of reach in B (its bytes null) breaks a threshold on it."""
    copy = tmp_path / "copy"
    shutil.copytree(plans[0], copy)
    doc = json.loads((copy / "plan.json").read_text())
    doc["cache"]["bytes_for_hit"]["lru"]["0.5"] = None
    (copy / "plan.json").write_text(json.dumps(doc))
    result = diff(plans[0], copy)
    t = parse_threshold("cache.bytes_for_hit[0.5] > +10%", result.rows)
    row = result.row(t.path)
    assert row is not None and broken(t, row) is not None and "no value in B" in str(broken(t, row))


def _row(a: float, b: float, unit: str = "bytes") -> Row:
    return Row("x", unit, "", a, b)


def test_threshold_forms() -> None:
    rows = (_row(100.0, 111.0), _row(0.90, 0.884, "ratio"))
    rel = parse_threshold("x > +10%", rows[:1])
    assert (rel.measure, rel.value) == ("relative", pytest.approx(0.10))
    assert broken(rel, rows[0]) is not None
    assert broken(parse_threshold("x > +12%", rows[:1]), rows[0]) is None
    assert parse_threshold("x > +1KiB", rows[:1]).value == 1024.0
    assert parse_threshold("x < -1KiB", rows[:1]).value == -1024.0
    assert parse_threshold("x >= 2GiB", rows[:1]).measure == "value"
    points = Row("h", "ratio", "", 0.90, 0.884)
    t = parse_threshold("h < -1pt", (points,))
    assert (t.measure, t.value) == ("points", pytest.approx(-0.01))
    assert broken(t, points) is not None  # -1.6 pt
    assert broken(parse_threshold("h < -2pt", (points,)), points) is None
    assert broken(parse_threshold("h < 0.89", (points,)), points) is not None
    seconds = Row("s", "s", "", 60.0, 30.0)
    assert parse_threshold("s < -10min", (seconds,)).value == -600.0
    assert format_change(seconds) == "-30 s (-50%)"
    with pytest.raises(InputError):
        parse_threshold("s < -10parsecs", (seconds,))


def test_multiples_read_as_multiples() -> None:
    """A factor is `×`; a ratio past 1 (a checkpoint overhead of 16 times the training
    time) is a multiple, not `1633.56%` changed by points."""
    assert format_value(1.2345, "x") == "1.234×"
    assert format_value(0.9, "ratio") == "90.00%"
    assert format_value(1.0, "ratio") == "100.00%"
    assert format_value(16.3356, "ratio") == "16.336×"
    overhead = Row("checkpoint.overhead", "ratio", "", 1.3, 16.3356)
    assert format_change(overhead) == "+15.036× (+1,157%)"  # never an exponent
    assert format_change(Row("o", "ratio", "", 0.5, 0.25)) == "-25.00 pt"
    assert format_change(Row("i", "x", "", 1.2, 1.5)) == "+0.300× (+25%)"
    # the gate's points still measure a ratio past 1
    t = parse_threshold("checkpoint.overhead > +100pt", (overhead,))
    assert broken(t, overhead) == (
        "checkpoint.overhead > +100pt: changed by +1,504 pt (1.300× to 16.336×)"
    )
    big = Row("b", "bytes", "", 1024.0, 100 * 1024.0**2)
    assert broken(parse_threshold("b > +10%", (big,)), big) == (
        "b > +10%: changed by +10,239,900% (1 KiB to 100 MiB)"
    )


@given(
    a=st.floats(0.0, 1e12, allow_nan=False),
    b=st.floats(0.0, 1e12, allow_nan=False),
    pct=st.floats(-200.0, 200.0, allow_nan=False),
)
def test_a_relative_threshold_breaks_exactly_when_the_change_passes_it(
    a: float, b: float, pct: float
) -> None:
    row = _row(a, b)
    t = parse_threshold(f"x > {pct:+f}%", (row,))
    why = broken(t, row)
    # any growth from 0 is an infinite relative change, none a change of 0
    change = (b - a) / a if a else (float("inf") if b > 0 else 0.0)
    assert (why is not None) == (change > t.value)


def test_the_docs_list_every_answer(plans: tuple[Path, Path], runs: tuple[Path, Path]) -> None:
    """docs/diff.md's tables name every path these folders give (a key in brackets stands
    for its kind: TARGET, POLICY, RANK; `time.PART` for the run's time by part)."""
    text = (Path(__file__).resolve().parent.parent / "docs" / "diff.md").read_text()
    rows = diff(*plans).rows + diff(*runs).rows
    stems = {r.path.split("[")[0] for r in rows}
    missing = sorted(s for s in stems if f"`{s}" not in text and not s.startswith("time."))
    assert not missing, missing
    assert "`time.PART`" in text
