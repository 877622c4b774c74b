"""Every example of the README and of each page of docs/ runs, in order, as written: each
page in its own empty folder, its `bash` blocks through the command line, its `python`
blocks as Python, a `toml` block that names its file on its first line (`# my-gpu.toml`)
as that file (a `toml` block that names none is a fragment: it must parse). Only sizes
shrink (`SMALLER`: a few batches where a page says thousands) and `day_0.gz` is a small
synthetic Criteo file; the quick start's install commands are CI's own job. Whatever the
examples write is git-ignored."""

from __future__ import annotations

import gzip
import re
import shlex
import shutil
import subprocess
import tomllib
from pathlib import Path

import numpy as np
import pytest
from _report_checks import check_report
from _tutorial_claims import check_tutorial_claims

from replay.cli import main

ROOT = Path(__file__).resolve().parent.parent
# the README, then every page of the site, in a fixed order (each runs in its own folder)
PAGES = ["README.md", *sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))]
# the sizes the pages give, and the ones the test runs (whole examples in seconds); a
# `python` block that cannot run alone (a snippet for another library) is fenced `py`
SMALLER = {
    "--batches 1000 --batch-size 2048 --out traces/k": (
        "--batches 20 --batch-size 2048 --out traces/k"
    ),
    "quickstart --batches 1000": "quickstart --batches 100 --batch-size 256",
    "--batches 100000": "--batches 20",
    "--batches 2135484": "--batches 100",
    "--batches 88978": "--batches 8",
    "--batches 18781": "--batches 8",
    "batches=200": "batches=8",
    # your own model: the batches it records (fit's cost grows with them) and its run
    "for _ in range(100):": "for _ in range(10):",
    "--samples 10000000 --sample-rate 1": "--samples 102400 --sample-rate 1",
    # the tutorial: its model's replays, and its plans' epoch of 976,563 batches
    "batches = 500 ": "batches = 20 ",
    "--epochs 1 ": "--batches 200 ",
    # the SSD TBE plan: the preset's 1,000 batches of Criteo Terabyte
    "--workload criteo-terabyte --system ssd-tbe": (
        "--workload criteo-terabyte --batches 20 --system ssd-tbe"
    ),
}
INSTALL = ("python3 -m venv", "pip install")
# what the examples read that a user brings: not outputs, so not git-ignored
INPUTS = {"my-system.toml", "my-model.toml", "my-gpu.toml", "day_0.gz"}
# what each page's examples must have written when they ran (so a page whose examples
# were dropped, or silently skipped, fails)
WRITES = {
    "docs/checkpoints.md": ["runs/cnr/summary.json"],
    "docs/cluster.md": ["plans/cluster/sharding.json"],
    "docs/criteo.md": ["traces/day0-x100/manifest.json", "traces/day0-fit.toml"],
    "docs/from_training_stack.md": [
        "plans/my-model/plan.json",
        "specs/my-model-cli.toml",
        "specs/from-tbe.toml",
        "exports/criteo-kaggle.tbe.json",
    ],
    "docs/own_model.md": [
        "traces/mine/manifest.json",
        "plans/mine/plan.json",
        "plans/mine-run/plan.json",
        "traces/mine-torchrec/manifest.json",
    ],
    "docs/plan.md": ["plans/tb/plan.json", "plans/tb/torchrec.json"],
    "docs/python.md": ["traces/api/manifest.json"],
    "docs/reports.md": ["reports/example/report.md"],
    "docs/scale.md": ["runs/day/summary.json"],
    "docs/systems.md": ["runs/lru/summary.json", "runs/mine/summary.json"],
    "docs/ssd_tbe_plan.md": ["plans/ssd/plan.json"],
    "docs/torchrec.md": ["plans/tb/torchrec.json"],
    "docs/trace_format.md": ["traces/k/manifest.json"],
    "docs/tutorial.md": [
        "runs/my-model/compare.json",
        "plans/my-model/plan.json",
        "plans/my-cluster/plan.json",
        "reports/my-model/report.md",
    ],
}
TOML_FILE = re.compile(r"# (\S+\.toml)\n")


def _blocks(page: str) -> list[tuple[str, str]]:
    text = (ROOT / page).read_text()
    return [(m[1], m[2]) for m in re.finditer(r"^```(\w+)\n(.*?)^```", text, re.M | re.S)]


def _smaller(code: str) -> str:
    for big, small in SMALLER.items():
        code = code.replace(big, small)
    return code


def _commands(block: str) -> list[str]:
    """The shell commands of a block: comments dropped, continuation lines joined."""
    joined = re.sub(r"\\\n\s*", " ", block)
    lines = [line.split(" #")[0].strip() for line in joined.splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def _criteo_day(path: Path, lines: int = 12_000, seed: int = 0) -> None:
    """A small Criteo file: label, 13 integers, 26 skewed hex categories per line."""
    rng = np.random.default_rng(seed)
    ints = rng.integers(0, 100, size=(lines, 13))
    cats = rng.zipf(1.3, size=(lines, 26)) % 5000
    rows = (
        "\t".join(
            [str(i % 2), *map(str, ints[i]), *(f"{0x10000000 + 97 * c:08x}" for c in cats[i])]
        )
        for i in range(lines)
    )
    path.write_bytes(gzip.compress(("\n".join(rows) + "\n").encode(), mtime=0))


def _run_page(page: str, folder: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, int]:
    """Runs the page's examples in `folder` (the working directory), in order; returns
    how many blocks of each kind ran."""
    if "day_0.gz" in (ROOT / page).read_text():
        _criteo_day(folder / "day_0.gz")
    ran = {"bash": 0, "python": 0, "toml": 0}
    for lang, code in _blocks(page):
        code = _smaller(code)
        if lang == "toml":
            named = TOML_FILE.match(code)
            if named is None:
                tomllib.loads(code)  # a fragment of a file: it must still be TOML
                continue
            assert not (folder / named[1]).exists(), f"{page}: two blocks write {named[1]}"
            (folder / named[1]).write_text(code)
        elif lang == "python":
            exec(compile(code, page, "exec"), {"__name__": "docs_example"})
        elif lang in ("bash", "sh"):
            for command in _commands(code):
                if command.startswith(INSTALL):
                    continue
                argv = shlex.split(command)
                assert argv[0] == "replay", f"{page}: {command}"
                code_ = main(argv[1:])
                err = capsys.readouterr().err
                assert code_ == 0, f"{page}: {command}\n{err}"
            lang = "bash"
        else:
            continue
        ran[lang] += 1
    return ran


@pytest.mark.parametrize("page", PAGES)
def test_the_examples_of_each_page_run_in_order(
    page: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    _run_page(page, tmp_path, capsys)
    missing = [path for path in WRITES.get(page, []) if not (tmp_path / path).exists()]
    assert not missing, f"{page}: its examples did not write {missing}"
    # every report the page writes keeps its plans' answers in one unit per quantity
    for report in sorted(tmp_path.rglob("report.md")):
        check_report(report.parent)
    if page == "docs/tutorial.md":  # what the page says its runs show, they show
        check_tutorial_claims(tmp_path)


def test_the_pages_hold_the_examples_the_test_expects() -> None:
    """The examples are there to run: the pages that WRITES names exist, and together the
    pages hold the runnable blocks they held when they were the README's (and more)."""
    assert set(WRITES) <= set(PAGES), set(WRITES) - set(PAGES)
    counts = {"bash": 0, "python": 0, "toml": 0}
    for page in PAGES:
        for lang, code in _blocks(page):
            if lang in ("bash", "sh"):
                counts["bash"] += 1
            elif lang == "python":
                counts["python"] += 1
            elif lang == "toml" and TOML_FILE.match(code):
                counts["toml"] += 1
    assert counts["bash"] >= 16 and counts["python"] >= 2 and counts["toml"] >= 3, counts


def test_what_the_examples_write_is_git_ignored(tmp_path: Path) -> None:
    """Each path the examples write (a folder after --out, or a Python example's path)
    is ignored by the repository's .gitignore, but for the committed example report."""
    written = set()
    for page in PAGES:
        for lang, code in _blocks(page):
            if lang in ("bash", "sh"):
                written |= set(re.findall(r"--out\s+(\S+)", code))
                written |= set(re.findall(r"--trace\s+(\S+)", code))
            elif lang == "python":
                written |= set(re.findall(r'generate\([^,]+,\s*"([^"]+)"', code))
    written -= {"reports/example"}  # committed: the pages show it
    # a fitted spec (traces/NAME.toml) is a small input to keep, as the presets' are
    written = {path for path in written if not path.endswith(".toml")}
    assert {"traces/k", "runs/lru", "plans/tb", "traces/api", "runs/my-model"} <= written
    shutil.copy(ROOT / ".gitignore", tmp_path / ".gitignore")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    for path in sorted(written):
        (tmp_path / path).mkdir(parents=True, exist_ok=True)
        (tmp_path / path / "file").write_text("x")
    out = subprocess.run(
        ["git", "-C", str(tmp_path), "status", "--porcelain", "--untracked-files=all"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert out.splitlines() == ["?? .gitignore"], out


def test_every_size_the_examples_shrink_is_still_in_the_pages() -> None:
    """A size a page changes (a day of batches, say) must change here too, or the
    example runs at full size inside the suite (a Terabyte day once did: 80 s)."""
    text = "\n".join(re.sub(r"\\\n\s*", " ", (ROOT / page).read_text()) for page in PAGES)
    missing = [big for big in SMALLER if big not in text]
    assert not missing, f"SMALLER keys no longer in the pages: {missing}"
