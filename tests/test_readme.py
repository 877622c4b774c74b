"""Every example of the README runs, in order, as written, in an empty folder: its
`bash` blocks through the command line, its `python` blocks as Python, its `toml` block
as the `my-system.toml` the text names. Only sizes shrink (`SMALLER`: a few batches where
the README says thousands) and `day_0.gz` is a small synthetic Criteo file; the quick
start's install commands are CI's own job. Whatever the examples write is git-ignored."""

from __future__ import annotations

import gzip
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from replay.cli import main

ROOT = Path(__file__).resolve().parent.parent
# the sizes the README gives, and the ones the test runs (whole examples in seconds)
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
}
INSTALL = ("python3 -m venv", "pip install")
# what the examples read that a user brings: not outputs, so not git-ignored
INPUTS = {"my-system.toml", "day_0.gz"}


def _blocks() -> list[tuple[str, str]]:
    text = (ROOT / "README.md").read_text()
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


def test_the_readme_examples_run_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    _criteo_day(tmp_path / "day_0.gz")
    ran = {"bash": 0, "python": 0, "toml": 0}
    for lang, code in _blocks():
        code = _smaller(code)
        if lang == "toml":
            assert not (tmp_path / "my-system.toml").exists(), "one system file"
            (tmp_path / "my-system.toml").write_text(code)
        elif lang == "python":
            exec(compile(code, "README.md", "exec"), {"__name__": "readme"})
        elif lang in ("bash", "sh"):
            for command in _commands(code):
                if command.startswith(INSTALL):
                    continue
                argv = shlex.split(command)
                assert argv[0] == "replay", command
                code_ = main(argv[1:])
                err = capsys.readouterr().err
                assert code_ == 0, f"{command}\n{err}"
            lang = "bash"
        else:
            continue
        ran[lang] += 1
    assert ran["bash"] >= 7 and ran["python"] == 2 and ran["toml"] == 1, ran
    assert (tmp_path / "runs" / "mine" / "summary.json").is_file()
    assert (tmp_path / "traces" / "day0-x100" / "manifest.json").is_file()


def test_what_the_examples_write_is_git_ignored(tmp_path: Path) -> None:
    """Each path the examples write (a folder after --out, or a Python example's path)
    is ignored by the repository's .gitignore, but for the committed example report."""
    written = set()
    for lang, code in _blocks():
        if lang in ("bash", "sh"):
            written |= set(re.findall(r"--out\s+(\S+)", code))
            written |= set(re.findall(r"--trace\s+(\S+)", code))
        elif lang == "python":
            written |= set(re.findall(r'generate\([^,]+,\s*"([^"]+)"', code))
    written -= {"reports/example"}  # committed: the README links it
    # a fitted spec (traces/NAME.toml) is a small input to keep, as the presets' are
    written = {path for path in written if not path.endswith(".toml")}
    assert {"traces/k", "runs/lru", "plans/tb", "traces/api"} <= written
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


def test_every_size_the_examples_shrink_is_still_in_the_readme() -> None:
    """A size the README changes (a day of batches, say) must change here too, or the
    example runs at full size inside the suite (a Terabyte day once did: 80 s)."""
    text = re.sub(r"\\\n\s*", " ", (ROOT / "README.md").read_text())
    missing = [big for big in SMALLER if big not in text]
    assert not missing, f"SMALLER keys no longer in README.md: {missing}"
