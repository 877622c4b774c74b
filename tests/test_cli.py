"""The command line as a whole: version, exit codes the shell sees."""

from __future__ import annotations

import subprocess
import sys

import pytest

import replay
from replay.cli import main


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"replay {replay.__version__}\n"


def test_console_script_exit_codes() -> None:
    """What a shell sees from `python -m replay` (the console script's path)."""
    ok = subprocess.run(
        [sys.executable, "-m", "replay", "--version"], capture_output=True, text=True, check=False
    )
    assert (ok.returncode, ok.stdout, ok.stderr) == (0, f"replay {replay.__version__}\n", "")
    bad = subprocess.run(
        [sys.executable, "-m", "replay", "inspect", "/nonexistent/trace"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert bad.returncode == 2
    assert bad.stderr == "replay: error: /nonexistent/trace: no such trace folder\n"
