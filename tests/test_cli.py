"""The command line as a whole: version, exit codes the shell sees."""

from __future__ import annotations

import json
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


def test_sizes_and_durations_with_units(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--sizes 8KiB` converts with the row's bytes and prints rows and bytes; a system
    field in bytes or seconds takes a unit (`--set policy.capacity_bytes=8GiB`)."""
    from replay.engine.systems import resolve_system

    trace = tmp_path / "t"
    assert main(["generate", "--preset", "tiny", "--batches", "20", "--batch-size", "32",
                 "--workers", "1", "--out", str(trace)]) == 0  # fmt: skip
    capsys.readouterr()
    assert main(["mrc", str(trace), "--sizes", "8KiB,64KiB", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    row_bytes = document["row_bytes"]  # tiny: fp32 rows of its embedding dimension
    assert [c for c, _ in document["curve"]] == [8192 // row_bytes, 65536 // row_bytes]
    assert document["cache_bytes"] == [8192, 65536]
    assert main(["mrc", str(trace), "--sizes", "8KiB"]) == 0
    assert "8 KiB" in capsys.readouterr().out
    system = resolve_system(
        "hbm-lru", ["policy.capacity_bytes=8GiB", "failures.mtbf_s=6h", "failures.restart_s=90s"]
    )
    assert system.policy.capacity_bytes == 8 * 2**30
    assert system.failures.mtbf_s == 6 * 3600 and system.failures.restart_s == 90
