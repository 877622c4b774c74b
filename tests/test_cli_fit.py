"""`replay fit` end to end: the spec file, its diagnostics, --json, --check and its figure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from replay.cli import main
from replay.workload.spec import load_spec


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("fit-cli") / "trace"
    argv = ["generate", "--preset", "tiny", "--batches", "40", "--batch-size", "64",
            "--workers", "1", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    return out


def test_fit_writes_a_spec_that_generates(
    trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec_path = tmp_path / "fitted.toml"
    argv = ["fit", str(trace), "--out", str(spec_path), "--check", "--json"]
    assert main(argv) == 0
    document = json.loads(capsys.readouterr().out)
    assert {"tables", "reuse", "drift", "check", "spec"} <= set(document)
    for table in document["tables"]:
        assert {"name", "rows", "lookups", "alpha", "alpha_ci"} <= set(table)
        if table["alpha"] is not None:
            lo, hi = table["alpha_ci"]
            assert lo <= table["alpha"] <= hi
    assert [t["name"] for t in document["tables"]] == ["user", "item", "category", "hour"]
    text = spec_path.read_text()
    assert text.startswith("# replay ")
    assert '# table "user"' in text and "95% CI" in text
    spec = load_spec(spec_path)
    assert [t.name for t in spec.tables] == ["user", "item", "category", "hour"]
    assert spec.batch_size == 64 and spec.batches == 40
    assert [t.pooling for t in spec.tables] == [1, 3, 1, 1]
    figure = tmp_path / "fitted.check.png"
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert document["figure"] == str(figure)
    check = document["check"]
    assert [t["name"] for t in check["tables"]] == ["user", "item", "category", "hour"]
    overall = check["overall"]["stats"]
    for key in ("distinct_per_batch", "consecutive_reuse", "top1pct_share", "touched_rows"):
        assert abs(overall[key]["rel_diff"]) < 0.15, (key, overall[key])
    # a 100x longer trace from the fitted spec
    longer = tmp_path / "longer"
    assert main(["generate", "--spec", str(spec_path), "--batches", "4000", "--workers", "1",
                 "--out", str(longer)]) == 0  # fmt: skip
    manifest = json.loads((longer / "manifest.json").read_text())
    assert manifest["batches"] == 4000


def test_fit_is_deterministic_and_refuses_to_overwrite(
    trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = tmp_path / "a.toml", tmp_path / "b.toml"
    assert main(["fit", str(trace), "--out", str(first)]) == 0
    assert main(["fit", str(trace), "--out", str(second)]) == 0
    assert first.read_bytes() == second.read_bytes()
    capsys.readouterr()
    assert main(["fit", str(trace), "--out", str(first)]) == 2
    assert "--force" in capsys.readouterr().err
    assert main(["fit", str(trace), "--out", str(first), "--force", "--rows", "observed"]) == 0
    assert first.read_bytes() != second.read_bytes()
    assert not list(tmp_path.glob(".*"))


def test_fit_prints_tables(trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fit", str(trace), "--out", str(tmp_path / "s.toml"), "--check"]) == 0
    out = capsys.readouterr().out
    assert "plain MLE" in out and "overall" in out and "rows touched" in out
    assert "spec written to" in out and "figure written to" in out


CRITEO_ROWS = Path(__file__).resolve().parents[2] / "shared/data/criteo/criteo1tb_head1000.tsv"


@pytest.mark.skipif(not CRITEO_ROWS.exists(), reason="the real Criteo rows are not here")
def test_the_default_rows_are_the_declared_where_they_converge_else_fitted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Real Criteo rows ingested with a dictionary (its declared rows are only the values
    the sample saw): with no --rows flag the tables whose declared rows miss get fitted
    rows, the others keep the declared, and the command and the spec say which."""
    from replay.trace.criteo import ingest

    out = tmp_path / "criteo"
    ingest(CRITEO_ROWS, out, batch_size=50, dictionary=True)
    spec_path = tmp_path / "fit.toml"
    assert main(["fit", str(out), "--out", str(spec_path), "--max-lookups", "13000"]) == 0
    printed = capsys.readouterr().out
    assert "rows: fitted (--rows extrapolate; the declared rows missed) for " in printed
    text = spec_path.read_text()  # each table's diagnostics comment says which rows
    assert "auto: declared" in text and "auto: extrapolated" in text
    assert "the declared" in text.split("auto: extrapolated", 1)[1].splitlines()[0]
