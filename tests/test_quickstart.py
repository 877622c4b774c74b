"""`replay quickstart`: every study's result folder and a complete report on a small
trace, the same bytes when run again (whatever --workers), and no harm to a folder that
holds anything else."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _quickstart_once import BATCH_SIZE, BATCHES, Quick, quickstart_once
from _quickstart_once import files_of as _files
from _quickstart_once import quickstart_args as _args

from replay.cli import main
from replay.report.build import build_report

RESULT_FOLDERS = [
    "caches",
    "check-n-run",
    "chunk-size",
    "fastpersist",
    "fastpersist-grid",
    "ladder",
    "mrc",
    "plan",
    "sens-copy-cxl",
    "sens-copy-pmem-host",
    "sens-raw-cxl",
    "sens-raw-cxl-b",
    "sync-full",
]
CLAIM_SOURCES = [
    "TrainingCXL abstract",
    "TrainingCXL evaluation",
    "cited by TrainingCXL",
    "FastPersist abstract",
    "Check-N-Run abstract",
    "CheckFreq abstract",
]


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> Quick:
    return quickstart_once(tmp_path_factory)


def test_quickstart_writes_results_and_report(quick: Quick) -> None:
    out = quick.out
    assert sorted(p.name for p in out.iterdir()) == [
        "figures",
        "report.html",
        "report.md",
        "results",
        "summary.json",
    ]
    assert not list(out.parent.glob(".*"))  # no temporary folder left behind
    figures = sorted(p.name for p in (out / "figures").iterdir())
    assert figures and all(name.endswith(".png") for name in figures)
    assert sorted(p.name for p in (out / "results").iterdir()) == RESULT_FOLDERS
    plan = json.loads((out / "results" / "plan" / "plan.json").read_text())
    assert plan["horizon"]["batches"] == 2_135_484 and plan["horizon"]["sample_rate"] < 1
    assert plan["checkpoint"]["cluster_mtbf_s"] == pytest.approx(30 * 86400 / 16)
    # the recommended checkpoint setting of the default scenario keeps the run above 90%
    assert plan["checkpoint"]["strategies"][0]["goodput"] > 0.9
    for name in ("ladder", "fastpersist", "caches"):
        assert (out / "results" / name / "compare.json").is_file()
        assert (out / "results" / name / "comparison.parquet").is_file()
    for name in ("check-n-run", "fastpersist-grid", "chunk-size"):
        assert (out / "results" / name / "sweep.json").is_file()
    assert (out / "results" / "sync-full" / "summary.json").is_file()
    assert (out / "results" / "sync-full" / "workload.json").is_file()
    # one workload: the replayed trace is the start of the planned run
    assert plan["horizon"]["workload"] == "criteo-terabyte"
    assert json.loads((quick.trace / "manifest.json").read_text())["workload"]["name"] == (
        "criteo-terabyte"
    )
    assert (out / "results" / "mrc" / "mrc.parquet").is_file()

    summary = json.loads((out / "summary.json").read_text())
    assert sorted(f["name"] for f in summary["figures"]) == figures
    assert summary["sources"] == [f"{out.name}/results"]  # not where the results lie
    assert summary["workload"]["batches"] == BATCHES
    assert summary["workload"]["lookups"] == BATCHES * BATCH_SIZE * 26
    claims = summary["claims"]
    assert len(claims) == 6
    assert [c["source"] for c in claims] == CLAIM_SOURCES
    for claim in claims:  # the quickstart gives every claim the runs it needs
        assert not claim["model"].startswith("not computed"), claim
    assert [s["system"] for s in summary["ladder"]["steps"]] == [
        "ssd",
        "pmem-host",
        "pcie-ndp",
        "cxl-d",
        "cxl-b",
        "cxl",
    ]
    assert summary["ladder"]["monotone"] is True
    assert summary["fastpersist"]["baseline"]["system"] == "torch-save"
    assert len(summary["check_n_run"]["runs"]) == 12  # 3 increment modes x 4 bit widths
    assert {s["folders"][1] for s in summary["sensitivity"]} == {
        "sens-copy-cxl",
        "sens-raw-cxl",
    }
    assert summary["caches"]["compare"] == "caches"
    md = (out / "report.md").read_text()
    assert md.startswith("# replay report\n")
    assert "data:image/png;base64," in (out / "report.html").read_text()


def test_quickstart_report_is_replay_report_of_its_results(quick: Quick, tmp_path: Path) -> None:
    again = tmp_path / "again"
    build_report([quick.out / "results"], again, names=[f"{quick.out.name}/results"])
    assert _files(again) == quick.files


def test_quickstart_again_replaces_its_output(
    quick: Quick, capsys: pytest.CaptureFixture[str]
) -> None:
    out = quick.out
    # what an earlier version wrote: a figure its summary.json lists, a run folder of a
    # system no longer in the ladder (a person's files there are refused, never deleted:
    # tests/test_output_lock.py)
    summary = json.loads((out / "summary.json").read_text())
    summary["figures"].append({"name": "stale.png"})
    (out / "summary.json").write_text(json.dumps(summary))
    (out / "figures" / "stale.png").write_bytes(b"old")
    (out / "results" / "ladder" / "stale").mkdir()
    (out / "results" / "ladder" / "stale" / "summary.json").write_text("{}")
    capsys.readouterr()
    # one worker this time: the output does not depend on --workers either
    assert main(_args(out, quick.trace, workers=1)) == 0
    printed = capsys.readouterr().out
    # the report's summary, answers first
    assert "wrote" in printed and "  Cache (plan: " in printed and "  Checkpoint (plan: " in printed
    assert not (out / "figures" / "stale.png").exists()
    assert not (out / "results" / "ladder" / "stale").exists()
    files = {k: v for k, v in _files(out).items() if not k.startswith("results/")}
    assert files["report.md"] == quick.files["report.md"]
    assert files == quick.files
    assert sorted(p.name for p in (out / "results").iterdir()) == RESULT_FOLDERS
    assert not list(out.parent.glob(".*"))


@pytest.mark.parametrize(
    "case",
    ["unrelated-file", "user-file-in-results", "user-file-in-figures", "out-is-file",
     "workers-0", "batches-0"],
)  # fmt: skip
def test_quickstart_refuses(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, trace = tmp_path / "qs", tmp_path / "t"
    args = _args(out, trace, workers=1)
    if case == "unrelated-file":
        out.mkdir()
        (out / "notes.txt").write_text("mine")
        (out / "report.md").write_text("old")
    elif case in ("user-file-in-results", "user-file-in-figures"):
        # names a quickstart output holds, but with a person's file inside
        inner = out / case.rpartition("-")[2]
        inner.mkdir(parents=True)
        (inner / "precious.txt").write_text("mine")
    elif case == "out-is-file":
        out.write_text("x")
    elif case == "workers-0":
        args[-1] = "0"
    else:
        args[args.index("--batches") + 1] = "0"
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("replay: error: "), err
    if case == "unrelated-file":
        assert "holds other files" in err
        assert sorted(p.name for p in out.iterdir()) == ["notes.txt", "report.md"]
        assert (out / "notes.txt").read_text() == "mine"
        assert (out / "report.md").read_text() == "old"
    elif case in ("user-file-in-results", "user-file-in-figures"):
        assert "precious.txt" in err
        assert (out / case.rpartition("-")[2] / "precious.txt").read_text() == "mine"
    elif case == "out-is-file":
        assert out.read_text() == "x"
    else:
        assert not out.exists()
    assert not trace.exists()  # refused before generating anything
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [p.name for p in (out,) if p.exists()]
    )
