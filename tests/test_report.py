"""`replay report`: golden summary.json on a tiny trace, byte-identical rebuilds, a
self-contained HTML file, escaping of names from result folders, the analysis'
invariants, and bad input (one error line, exit code 2, no output folder)."""

from __future__ import annotations

import base64
import html
import itertools
import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from markdown_it import MarkdownIt

import replay
from replay.cli import main
from replay.report.analysis import (
    TERMS,
    analyse,
    check_n_run,
    check_n_run_basis,
    claims,
    fastpersist,
    ladder,
    time_terms,
)
from replay.report.build import build_report
from replay.report.document import (
    Bullets,
    Heading,
    Image,
    Paragraph,
    Table,
    md_escape,
    to_html,
    to_markdown,
)
from replay.report.load import Results, load_results
from replay.runs.compare import COMPARE_COLUMNS

LADDER = ["ssd", "pmem-host", "pcie-ndp", "cxl-d", "cxl-b", "cxl"]
FASTPERSIST = ["torch-save", "fastpersist-1", "fastpersist", "fastpersist-8"]
REPORT_FILES = ["figures", "report.html", "report.md", "summary.json"]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
EVIL_NAME = "x<b>y_*z|w"
EVIL_FOLDER = "run<i>1"  # a folder name is the user's too, and shows in labels


def _ok(*args: object) -> None:
    argv = [str(a) for a in args]
    assert main(argv) == 0, argv


@dataclass(frozen=True)
class Built:
    trace: Path
    results: Path  # holds ladder/, fastpersist/, caches/ (compares), check-n-run/ (a
    # sweep), sync-full/ and checkfreq/ (runs) and mrc/
    report: Path  # `replay report RESULTS --out REPORT`


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """Every kind of result folder on one tiny trace (20 batches of 64 samples, seed 0),
    and the report of all of them. Everything runs in this process (--workers 1)."""
    base = tmp_path_factory.mktemp("report")
    trace = replay.generate("tiny", base / "tiny", batches=20, seed=0, workers=1)
    res = base / "results"
    one = ["--workers", "1"]
    _ok("compare", trace, "--systems", ",".join(LADDER), *one, "--out", res / "ladder")
    _ok("compare", trace, "--systems", ",".join(FASTPERSIST), *one, "--out", res / "fastpersist")
    systems = "hbm-lru,hbm-belady,chunk"
    rows = "policy.capacity_rows=1024"  # one chunk; fewer rows than the 1,496 touched
    _ok("compare", trace, "--systems", systems, "--set", rows, *one, "--out", res / "caches")
    # tiny's embeddings (25,324 rows x 8 floats, 0.8 MB) are smaller than DLRM's dense
    # parameters (1.9 MB), which would dominate every checkpoint: leave those out here
    lean = ["--set", "model.dense_params=0", "--set", "checkpoint.interval_batches=5"]
    _ok(
        "sweep", trace, "--system", "hbm-lru",
        "--grid", "checkpoint.increment=consecutive,one-shot",
        "--grid", "checkpoint.quantize_bits=0,4,8",
        "--set", "checkpoint.strategy=check-n-run", *lean, *one, "--out", res / "check-n-run",
    )  # fmt: skip
    _ok("run", trace, "--system", "hbm-lru", "--set", "checkpoint.strategy=sync-full", *lean,
        "--out", res / "sync-full")  # fmt: skip
    _ok("run", trace, "--system", "hbm-lru", "--set", "checkpoint.strategy=checkfreq",
        "--out", res / "checkfreq")  # fmt: skip
    _ok("mrc", trace, "--out", res / "mrc")
    report = base / "report"
    _ok("report", res, "--out", report)
    return Built(trace, res, report)


@pytest.fixture(scope="module")
def summary(built: Built) -> dict:
    return json.loads((built.report / "summary.json").read_text())


def _stderr_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("replay: error: "), err
    return err


def _files(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


# -- golden values ------------------------------------------------------------------------
# The numbers below were printed once from the `built` fixture's output and pasted as
# literals (that is the point: a change of any model shows here). After a deliberate
# change, regenerate them: `pytest tests/test_report.py --basetemp=/tmp/golden`, then
# print the keys asserted here with repr() from /tmp/golden/report0/report/summary.json
# (e.g. `[s["batch_time_s"] for s in summary["ladder"]["steps"]]`) and
# /tmp/golden/report0/results/ladder/comparison.parquet (`pq.read_table(...).to_pylist()`).

GOLDEN_FIGURES = [
    ("workload_skew.png", "workload"),
    ("workload_reuse.png", "workload"),
    ("workload_distinct.png", "workload"),
    ("workload_touched.png", "workload"),
    ("hierarchy_hits.png", "hierarchy"),
    ("hierarchy_traffic.png", "hierarchy"),
    ("mrc.png", "hierarchy"),
    ("time_runs.png", "time"),
    ("time_caches.png", "time"),
    ("time_fastpersist.png", "time"),
    ("time_ladder.png", "time"),
    ("energy_runs.png", "energy"),
    ("energy_caches.png", "energy"),
    ("energy_fastpersist.png", "energy"),
    ("energy_ladder.png", "energy"),
    ("checkpoint_bytes.png", "checkpoints"),
    ("sweep_check-n-run.png", "sweeps"),
    ("ladder_time.png", "ladder"),
    ("ladder_gain.png", "ladder"),
    ("fastpersist.png", "checkpoints"),
    ("checknrun.png", "checkpoints"),
]
CLAIM_SOURCES = [
    "TrainingCXL abstract",
    "TrainingCXL evaluation",
    "cited by TrainingCXL",
    "FastPersist abstract",
    "Check-N-Run abstract",
    "CheckFreq abstract",
]
CNR_POINTS = [(inc, bits) for inc in ("consecutive", "one-shot") for bits in (0, 4, 8)]


def approx(value: object) -> object:
    return pytest.approx(value, rel=1e-9, abs=0.0)


def test_summary_golden(built: Built, summary: dict) -> None:
    assert summary["tool"] == "replay" and summary["version"] == replay.__version__
    assert summary["sources"] == [str(built.results)]
    assert summary["ladder_systems"] == LADDER
    # run folders alone (in name order), then each comparison's, then each sweep's
    cnr = [f"check-n-run/{i}-checkpoint.increment-{inc}+checkpoint.quantize_bits-{bits}"
           for i, (inc, bits) in enumerate(CNR_POINTS)]  # fmt: skip
    assert [r["folder"] for r in summary["runs"]] == [
        "checkfreq",
        "sync-full",
        "caches/hbm-lru",
        "caches/hbm-belady",
        "caches/chunk",
        *(f"fastpersist/{s}" for s in FASTPERSIST),
        *(f"ladder/{s}" for s in LADDER),
        *cnr,
    ]
    assert [r["label"] for r in summary["runs"][:2]] == [
        "hbm-lru (checkfreq)",
        "hbm-lru (sync-full)",
    ]
    assert summary["runs"][-1]["label"] == (
        "hbm-lru checkpoint.increment=one-shot checkpoint.quantize_bits=8"
    )

    work = summary["workload"]
    assert work["trace"] == str(built.trace)
    assert (work["batches"], work["lookups"], work["rows"]) == (20, 7680, 25324)
    assert work["distinct_rows"] == 1496
    assert work["consecutive_reuse_mean"] == approx(0.4261506800491889)
    assert work["top1pct_share"] == approx(0.742578125)
    assert work["distinct_per_batch_mean"] == approx(0.5180989583333334)

    lad = summary["ladder"]
    assert [s["system"] for s in lad["steps"]] == LADDER
    assert lad["monotone"] is True
    assert [s["batch_time_s"] for s in lad["steps"]] == approx(
        [
            0.001204490671084559,
            0.000557504439375,
            0.00018826231541666666,
            0.00014509847541666665,
            0.00013485847541666666,
            2.855982611111111e-05,
        ]
    )
    assert [s["raw_lookups"] for s in lad["steps"]] == [0, 0, 4719, 4719, 4719, 0]
    assert lad["cxl_over_pmem_host"] == approx(
        {
            "speedup": 19.520582415524746,
            "energy_saving": 0.8960563611809096,
            "speedup_whole_trace": 20.63008208434982,
            "energy_saving_whole_trace": 0.9014250658716402,
        }
    )
    assert lad["cxl_d_vs_pcie_time_saved"] == approx(0.2292749874262875)
    assert lad["cxl_vs_cxl_b_time_saved"] == approx(0.7882237210314665)
    # the term each step moves most
    assert [s["changes"][0]["term"] for s in lad["steps"][1:]] == [
        "memory",
        "checkpoint",
        "link",
        "checkpoint",
        "checkpoint",
    ]

    fp = summary["fastpersist"]
    assert fp["baseline"]["label"] == "torch-save"
    assert fp["baseline"]["write_s"] == approx(0.002734316)
    assert [(r["label"], r["drives"]) for r in fp["runs"]] == [
        ("fastpersist-1", 1),
        ("fastpersist", 4),
        ("fastpersist-8", 8),
    ]
    assert [r["speedup"] for r in fp["runs"]] == approx(
        [1.2477184085370217, 4.857869549830226, 21.98060300848773]
    )
    assert fp["max_speedup"] == approx(21.98060300848773)
    assert fp["best"] == "fastpersist-8"
    assert fp["per_batch_free"] is False

    cn = summary["check_n_run"]
    assert [(r["increment"], r["quantize_bits"]) for r in cn["runs"]] == CNR_POINTS
    assert {r["baseline"] for r in cn["runs"]} == {"hbm-lru (sync-full)"}
    assert cn["bandwidth_reduction_range"] == approx([23.890801886792453, 114.91435053885422])
    assert cn["capacity_reduction_range"] == approx([1.8054736166685976, 4.880254378146605])

    cf = summary["checkfreq"]
    assert cf["runs"][0]["rule_interval_batches"] == 32 and cf["runs"][0]["count"] == 0
    assert cf["runs"][0]["rule_overhead"] == approx(0.03248823121918983)
    # no checkpoint in 20 batches: no measured overhead, and what it would take instead
    assert cf["max_overhead"] is None
    assert cf["runs"][0]["needs"].startswith("needs ≥ 3 checkpoints (this run took 0)")
    assert [r["needs"] for r in cn["runs"]] == [None] * len(CNR_POINTS)

    caches = summary["caches"]
    assert caches["compare"] == "caches"
    assert [(r["policy"], r["capacity_rows"]) for r in caches["runs"]] == [
        ("lru", 1024),
        ("belady", 1024),
        ("chunk", 1024),
    ]
    assert [r["hit_ratio"] for r in caches["runs"]] == approx(
        [0.7990885416666667, 0.8052083333333333, 0.4752604166666667]
    )
    assert summary["sensitivity"] == []

    assert [(f["name"], f["section"]) for f in summary["figures"]] == GOLDEN_FIGURES
    assert [c["source"] for c in summary["claims"]] == CLAIM_SOURCES
    assert summary["claims"][0]["model"] == (
        "19.5× faster and 89.6% less energy per batch (steady state)"
    )


def test_ladder_comparison_parquet_golden(built: Built) -> None:
    table = pq.read_table(built.results / "ladder" / "comparison.parquet")
    assert table.column_names == [name for name, _ in COMPARE_COLUMNS]
    rows = table.to_pylist()
    assert [r["system"] for r in rows] == LADDER
    assert {(r["lookups"], r["batches"], r["misses"], r["hit_ratio"]) for r in rows} == {
        (7680, 20, 0, None)
    }
    assert [r["checkpoint_strategy"] for r in rows] == [
        "check-n-run",
        "check-n-run",
        *["trainingcxl"] * 4,
    ]
    assert [r["checkpoint_bytes_written"] for r in rows] == [
        40920604,
        40920604,
        38206128,
        38206128,
        38206128,
        3935208,
    ]
    assert [r["goodput_mean"] for r in rows] == [None] * 6
    assert [r["time_s"] for r in rows] == approx(
        [
            0.024114599463051473,
            0.011788992958194444,
            0.003765590567013889,
            0.0029023137670138887,
            0.002697513767013889,
            0.0005714467305555555,
        ]
    )
    assert [r["energy_j"] for r in rows] == approx(
        [
            4.824596721990626,
            2.411653634222361,
            0.8761585995515971,
            0.7147258379515972,
            0.6764282379515973,
            0.2377285981338889,
        ]
    )
    assert [r["speedup"] for r in rows] == approx(
        [
            1.0,
            2.045518183662124,
            6.403935593607123,
            8.308749983246065,
            8.939564927502115,
            42.19920803397977,
        ]
    )
    assert [r["time_checkpoint_s"] for r in rows] == approx(
        [
            0.009951572,
            0.010590101111666667,
            0.002562053454861111,
            0.002562053454861111,
            0.002357253454861111,
            0.00023583168402777776,
        ]
    )
    for row in rows:
        assert row["speedup"] == rows[0]["time_s"] / row["time_s"]
        assert row["energy_saving"] == 1 - row["energy_j"] / rows[0]["energy_j"]


# -- determinism and the HTML file ----------------------------------------------------------


def test_rebuild_is_byte_identical(built: Built, tmp_path: Path) -> None:
    again = tmp_path / "again"
    summary = build_report([built.results], again)
    assert summary == json.loads((built.report / "summary.json").read_text())
    first, second = _files(built.report), _files(again)
    assert sorted(p.name for p in again.iterdir()) == REPORT_FILES
    assert list(first) == list(second)
    for name in first:
        assert first[name] == second[name], name
    pngs = [n for n in first if n.startswith("figures/")]
    assert sorted(pngs) == sorted(f"figures/{name}" for name, _ in GOLDEN_FIGURES)
    assert all(first[n].startswith(PNG_MAGIC) for n in pngs)
    assert not list(tmp_path.glob(".*"))  # no temporary folder left behind


def test_html_is_self_contained(built: Built, summary: dict) -> None:
    text = (built.report / "report.html").read_text()
    assert text.startswith("<!DOCTYPE html>")
    images = re.findall(r"<img\b[^>]*>", text)
    names = [f["name"] for f in summary["figures"]]
    assert len(images) == len(names) == len(list((built.report / "figures").iterdir()))
    titles = {html.escape(f["title"]): f["name"] for f in summary["figures"]}
    assert len(titles) == len(names)  # an image is known by its alt text
    prefix = "data:image/png;base64,"
    embedded = []
    for tag in images:
        src = re.fullmatch(r'<img alt="([^"]*)" src="([^"]*)">', tag)
        assert src is not None, tag[:200]
        assert src[2].startswith(prefix)
        data = base64.b64decode(src[2][len(prefix) :], validate=True)
        assert data.startswith(PNG_MAGIC)
        name = titles[src[1]]
        assert data == (built.report / "figures" / name).read_bytes(), name
        embedded.append(name)
    assert sorted(embedded) == sorted(names)  # each figure once (in section order)
    for url in re.findall(r'\b(?:src|href)\s*=\s*["\']?([^"\'\s>]*)', text, re.IGNORECASE):
        # no http://, https:// or //host: images are data, links go to the page's headings
        assert url.startswith(prefix) or re.fullmatch(r"#[a-z0-9_-]+", url), url[:80]
    lowered = text.lower()
    for banned in ("<script", "<link", "@import", "url(", "http://", "https://", "<iframe"):
        assert banned not in lowered, banned
    # the Markdown file points at the same figures, relative to itself
    md = (built.report / "report.md").read_text()
    assert re.findall(r"\]\((figures/[^)]+)\)", md) == [f"figures/{n}" for n in embedded]


def test_report_md_sections(built: Built) -> None:
    md = (built.report / "report.md").read_text()
    headings = [line for line in md.splitlines() if line.startswith("#")]
    assert headings[0] == "# replay report"
    for title in (
        "## Claims: the papers beside this model",
        "## Workload",
        "## Memory hierarchy",
        "## Time per batch",
        "## TrainingCXL ladder",
        "## Checkpoints",
        "### FastPersist against torch.save",
        "### Check-N-Run against full checkpoints",
        "### CheckFreq",
        "## Result folders",
    ):
        assert title in headings, title
    assert "is no slower than the one before" in md
    # the claims table: a header, a rule and one row per claim
    start = md.index("| claim | source | this model | assumptions |")
    table = md[start:].split("\n\n", 1)[0].splitlines()
    assert len(table) == 2 + len(CLAIM_SOURCES)


# -- escaping -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def evil(built: Built, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A run of a system whose name (and folder name) hold markup, and its report."""
    base = tmp_path_factory.mktemp("evil")
    spec = base / "evil.toml"
    spec.write_text(f'extends = "hbm-lru"\nname = "{EVIL_NAME}"\n')
    run = base / EVIL_FOLDER
    _ok("run", built.trace, "--system", spec, "--out", run)
    report = base / "report"
    _ok("report", run, "--out", report)
    return run, report


def test_names_are_escaped(evil: tuple[Path, Path]) -> None:
    _, report = evil
    summary = json.loads((report / "summary.json").read_text())
    label = f"{EVIL_NAME} ({EVIL_FOLDER})"
    (run,) = summary["runs"]
    assert {k: run[k] for k in ("label", "system", "folder")} == {
        "label": label,
        "system": EVIL_NAME,
        "folder": ".",
    }
    assert [w.split(" (")[0] for w in run["warnings"]] == ["the cache"]  # 8 M rows: all fit
    page = (report / "report.html").read_text()
    assert "x&lt;b&gt;y_*z|w (run&lt;i&gt;1)" in page
    assert "<b>" not in page and "<i>" not in page and "<b>y" not in page
    md = (report / "report.md").read_text()
    assert r"x\<b\>y\_\*z\|w (run\<i\>1)" in md
    assert EVIL_NAME not in md and "<b>" not in md and "<i>" not in md
    # a Markdown renderer shows the name as written and makes no tag of it
    rendered = MarkdownIt().enable("table").render(md)
    assert "x&lt;b&gt;y_*z|w (run&lt;i&gt;1)" in rendered
    assert "<b>" not in rendered and "<i>" not in rendered  # (captions are <em> as a whole)
    # the table row with the name keeps its cells (the | in the name is no separator)
    row = next(line for line in md.splitlines() if line.startswith(r"| x\<b\>"))
    assert len(re.findall(r"(?<!\\)\|", row)) == 8  # 7 cells of the time table


@pytest.mark.parametrize(
    ("text", "escaped"),
    [
        ("# heading", r"\# heading"),
        ("## two", r"\## two"),
        ("- item", r"\- item"),
        ("+ item", r"\+ item"),
        ("= underline", r"\= underline"),
        ("> quote", r"\> quote"),
        ("1. item", r"1\. item"),
        ("12) item", r"12\) item"),
        ("a <b>c</b>", r"a \<b\>c\</b\>"),
        (
            "snake_case *star* `code` [x](y) ~z~ a|b",
            r"snake\_case \*star\* \`code\` \[x\](y) \~z\~ a\|b",
        ),
        ("back\\slash", r"back\\slash"),
        ("two\nlines\t and  spaces", "two lines and spaces"),
        ("plain text 3.5 ms", "plain text 3.5 ms"),
        ("in # the - middle 1.", "in # the - middle 1."),
    ],
)
def test_md_escape(text: str, escaped: str) -> None:
    assert md_escape(text) == escaped


def test_md_escape_table_cells() -> None:
    for cell in ("0.5", "-1", "+2", "1.", "# 3", "= 4", "12.5 ms"):
        assert md_escape(cell, line_start=False) == cell
    assert md_escape("0.5") == r"0\.5"  # harmless in prose, but not wanted in a cell
    assert md_escape("a|b", line_start=False) == r"a\|b"
    assert md_escape("> q", line_start=False) == r"\> q"
    md = to_markdown([Table(("x", "y|z"), (("0.5", "-1"), ("1. a", "<b>")))])
    assert md == "| x | y\\|z |\n|---|---|\n| 0.5 | -1 |\n| 1. a | \\<b\\> |\n"


def test_to_markdown_blocks() -> None:
    blocks = [
        Heading("# a", 1),
        Heading("b_c", 3),
        Paragraph("- not a list"),
        Bullets(("1. one", "*two*")),
        Image("f.png", "t[1]", "cap_tion"),
    ]
    assert to_markdown(blocks) == (
        "# \\# a\n\n### b\\_c\n\n\\- not a list\n\n- 1\\. one\n- \\*two\\*\n\n"
        "![t\\[1\\]](figures/f.png)\n\n*cap\\_tion*\n"
    )


def test_to_html_escapes(tmp_path: Path) -> None:
    (tmp_path / "f.png").write_bytes(PNG_MAGIC + b"data")
    nasty = "a & b < c > d \"e\" 'f'"
    blocks = [
        Heading(nasty, 9),
        Paragraph(nasty),
        Bullets((nasty,)),
        Table((nasty,), ((nasty,),)),
        Image("f.png", nasty, nasty),
    ]
    page = to_html(blocks, tmp_path, title='t<"&>')
    escaped = "a &amp; b &lt; c &gt; d &quot;e&quot; &#x27;f&#x27;"
    assert page.count(escaped) == 7  # heading, paragraph, item, th, td, alt, caption
    assert "<title>t&lt;&quot;&amp;&gt;</title>" in page
    assert f"<h6>{escaped}</h6>" in page  # levels are clamped to 1..6
    assert f'src="data:image/png;base64,{base64.b64encode(PNG_MAGIC + b"data").decode()}"' in page
    for raw in (nasty, '"e"', "< c >", "& b"):
        assert raw not in page


# -- the analysis ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def loaded(built: Built) -> Results:
    return load_results([built.results])


def test_time_terms_add_up(loaded: Results) -> None:
    runs = loaded.all_runs()
    assert len(runs) == 21
    for run in runs:
        for steady in (True, False):
            terms = time_terms(run, steady=steady)
            assert set(terms) == {*TERMS, "total"}
            assert all(terms[t] >= 0 for t in TERMS), (run.label, terms)
            parts = sum(terms[t] for t in TERMS)
            assert parts == pytest.approx(terms["total"], rel=1e-9), (run.label, steady)
        whole = time_terms(run, steady=False)["total"]
        assert whole * run.summary["batches"] == pytest.approx(run.summary["time_s"], rel=1e-9)


def test_ladder_invariants(loaded: Results) -> None:
    lad = ladder(loaded)
    assert lad is not None and lad["monotone"] is True
    times = [s["batch_time_s"] for s in lad["steps"]]
    assert all(b <= a for a, b in itertools.pairwise(times))
    for prev, step in itertools.pairwise(lad["steps"]):
        assert step["no_slower"] is True
        assert step["speedup_over_previous"] == pytest.approx(
            prev["batch_time_s"] / step["batch_time_s"], rel=1e-12
        )
        moved = sum(c["delta_s"] for c in step["changes"])
        assert moved <= 0  # the terms that moved made the step faster
    head = lad["cxl_over_pmem_host"]
    assert head["speedup"] > 1 and 0 < head["energy_saving"] < 1


def test_fastpersist_invariants(loaded: Results) -> None:
    fp = fastpersist(loaded)
    assert fp is not None
    base = fp["baseline"]
    assert base["system"] == "torch-save" and base["writers"] == 1
    # torch.save writes at 1 GB/s from one writer; a Gen4 drive takes 1.25 GB/s
    assert base["write_bw_bytes_per_s"] == pytest.approx(1e9, rel=0.01)
    assert base["write_bw_bytes_per_s"] <= 1e9
    for row in fp["runs"]:
        assert row["drives"] >= 1 and row["drive_write_bw_bytes_per_s"] >= 1.25e9
        assert row["bytes_per_checkpoint"] == base["bytes_per_checkpoint"]
        assert row["speedup"] >= 1
        assert row["speedup"] == pytest.approx(base["write_s"] / row["write_s"], rel=1e-12)
    assert fp["max_speedup"] == max(r["speedup"] for r in fp["runs"])
    one = next(r for r in fp["runs"] if r["drives"] == 1)
    assert one["speedup"] <= 1.25 * 1.001  # one drive is bounded by its own rate


def test_check_n_run_invariants(loaded: Results) -> None:
    cn = check_n_run(loaded)
    assert cn is not None and len(cn["runs"]) == len(CNR_POINTS)
    by = {(r["increment"], r["quantize_bits"]): r for r in cn["runs"]}
    for (increment, bits), row in by.items():
        assert row["bandwidth_reduction"] > 1 and row["capacity_reduction"] > 1, row
        if bits:
            # fewer bits, fewer bytes than the same increment mode in fp32
            assert row["bytes_per_checkpoint"] < by[(increment, 0)]["bytes_per_checkpoint"]
            assert row["quantization_error"] > 0
        else:
            assert row["quantization_error"] == 0
    assert (
        by[("consecutive", 4)]["bytes_per_checkpoint"]
        < by[("consecutive", 8)]["bytes_per_checkpoint"]
    )
    lo, hi = cn["bandwidth_reduction_range"]
    assert lo == min(r["bandwidth_reduction"] for r in cn["runs"])
    assert hi == max(r["bandwidth_reduction"] for r in cn["runs"])
    # the comparison names the interval and the span it was measured over
    assert cn["interval_batches"] == sorted({r["interval_batches"] for r in cn["runs"]})
    assert cn["span_batches"] == sorted({r["batches"] for r in cn["runs"]})
    basis = check_n_run_basis(cn)
    assert basis == (
        f"at an interval of {cn['interval_batches'][0]:,} batches over a "
        f"{cn['span_batches'][0]:,}-batch trace"
    )
    claim = next(r for r in claims(loaded, {"check_n_run": cn}) if r["claim"].startswith("6–17×"))
    assert claim["model"].endswith(basis)


def test_analysis_is_what_summary_json_holds(loaded: Results, summary: dict) -> None:
    analysis = json.loads(json.dumps(analyse(loaded)))
    for key, value in analysis.items():
        assert summary[key] == value, key


def test_claims_without_the_runs_they_need(built: Built) -> None:
    only = load_results([built.results / "sync-full"])
    sections = analyse(only)
    assert sections["ladder"] is None and sections["fastpersist"] is None
    assert sections["check_n_run"] is None and sections["checkfreq"] is None
    rows = claims(only, sections)
    assert [r["source"] for r in rows] == CLAIM_SOURCES
    assert [r["model"].startswith("not computed") for r in rows] == [
        True,
        True,
        False,  # the workload's reuse is measured on any run with workload.json
        True,
        True,
        True,
    ]


# -- bad input ------------------------------------------------------------------------------


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


@pytest.mark.parametrize(
    "case",
    [
        "missing-folder",
        "not-a-result-folder",
        "empty-folder",
        "run-without-summary",
        "compare-run-without-summary",
        "compare-names-missing-system",
        "corrupt-batches",
        "corrupt-summary",
        "summary-not-an-object",
        "out-is-file",
        "out-not-empty",
        "force-over-unrelated",
        "no-results",
    ],
)
def test_bad_input(
    case: str, built: Built, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    res = built.results
    out = tmp_path / "out" / "report"
    given = res / "sync-full"
    extra: list[str] = []
    if case == "missing-folder":
        given = tmp_path / "nope"
    elif case == "not-a-result-folder":
        given = tmp_path / "notes"
        (given / "sub").mkdir(parents=True)
        (given / "readme.txt").write_text("hello")
    elif case == "empty-folder":
        given = tmp_path / "empty"
        given.mkdir()
    elif case == "run-without-summary":
        given = _copy(res / "sync-full", tmp_path / "run")
        (given / "summary.json").unlink()
    elif case == "compare-run-without-summary":
        given = _copy(res / "fastpersist", tmp_path / "cmp")
        (given / "fastpersist-8" / "summary.json").unlink()
    elif case == "compare-names-missing-system":
        given = _copy(res / "fastpersist", tmp_path / "cmp")
        document = json.loads((given / "compare.json").read_text())
        document["systems"].append({"name": "fastpersist-16"})
        (given / "compare.json").write_text(json.dumps(document))
    elif case == "corrupt-batches":
        given = _copy(res / "sync-full", tmp_path / "run")
        (given / "batches.parquet").write_bytes(b"PAR1 this is not parquet \x00\xff" * 10)
    elif case == "corrupt-summary":
        given = _copy(res / "sync-full", tmp_path / "run")
        (given / "summary.json").write_text('{"system": ')
    elif case == "summary-not-an-object":
        given = _copy(res / "sync-full", tmp_path / "run")
        (given / "summary.json").write_text("[1, 2]")
    elif case == "out-is-file":
        out.parent.mkdir()
        out.write_text("x")
    elif case in ("out-not-empty", "force-over-unrelated"):
        out.mkdir(parents=True)
        (out / "notes.txt").write_text("mine")
        (out / "report.md").write_text("old")
        if case == "force-over-unrelated":
            extra = ["--force"]
    args = ["report", *([] if case == "no-results" else [str(given)]), "--out", str(out)]
    assert main([*args, *extra]) == 2
    err = _stderr_line(capsys)
    if case == "missing-folder":
        assert "no such result folder" in err
    elif case in ("not-a-result-folder", "empty-folder"):
        assert "not a result folder" in err
    elif case == "run-without-summary":  # config.json marks it a run folder
        assert "not a complete run folder (summary.json is missing)" in err
    elif case == "compare-run-without-summary":
        assert "fastpersist-8: not a complete run folder (summary.json is missing)" in err
    elif case == "compare-names-missing-system":
        assert "fastpersist-16: not a complete run folder" in err
    elif case == "corrupt-batches":
        assert "batches.parquet: not a readable Parquet file" in err
    elif case == "corrupt-summary":
        assert "summary.json: not readable JSON" in err
    elif case == "summary-not-an-object":
        assert "summary.json: expected a JSON object" in err
    elif case == "out-is-file":
        assert "exists and is not a folder" in err
        assert out.read_text() == "x"
    elif case == "out-not-empty":
        assert "already holds files" in err
    elif case == "force-over-unrelated":
        assert "holds other files" in err
    if case in ("out-not-empty", "force-over-unrelated"):
        assert sorted(p.name for p in out.iterdir()) == ["notes.txt", "report.md"]
        assert (out / "report.md").read_text() == "old"
    elif case != "out-is-file":
        assert not out.parent.exists()  # not even the parent folder was made
    if out.parent.exists():
        assert sorted(p.name for p in out.parent.iterdir()) == ["report"]  # nothing hidden


def test_force_replaces_an_earlier_report(
    evil: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run, report = evil
    out = _copy(report, tmp_path / "report")
    # a figure an earlier version drew: listed in its summary.json, so replay's own (an
    # unlisted PNG is a person's, refused: tests/test_output_lock.py)
    summary = json.loads((out / "summary.json").read_text())
    summary["figures"].append({"name": "stale.png"})
    (out / "summary.json").write_text(json.dumps(summary))
    (out / "figures" / "stale.png").write_bytes(b"old")
    args = ["report", str(run), "--out", str(out)]
    assert main(args) == 2
    assert "already holds files" in _stderr_line(capsys)
    assert main([*args, "--force"]) == 0
    printed = capsys.readouterr().out
    assert f"wrote {out}/" in printed and printed.rstrip().endswith("figures from 1 run")
    assert _files(out) == _files(report)  # the stale figure is gone, the rest identical
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report"]
    # an empty folder is no earlier output, but may be written into without --force
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["report", str(run), "--out", str(empty)]) == 0
    assert _files(empty) == _files(report)


def test_dollar_signs_in_names_draw_as_written(built: Built, tmp_path: Path) -> None:
    # matplotlib reads $...$ as math: an unbalanced or bad formula must not crash
    spec = tmp_path / "dollar.toml"
    spec.write_text('extends = "hbm-lru"\nname = "a$\\\\frac$b"\n')
    run = tmp_path / "run"
    _ok("run", built.trace, "--system", spec, "--out", run)
    _ok("report", run, "--out", tmp_path / "report")
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert summary["runs"][0]["system"] == "a$\\frac$b"
