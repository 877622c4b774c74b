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


def test_the_api_shows_only_what_it_documents() -> None:
    from replay.engine.replay import RunResult

    assert dir(replay) == sorted(replay.__all__)
    assert "GC_THRESHOLDS" not in dir(replay) and "_gc" not in dir(replay)
    result = replay.replay_trace(
        replay.open_workload("tiny", batches=3), replay.resolve_system("hbm-lru")
    )
    again = replay.replay_trace(
        replay.open_workload("tiny", batches=3), replay.resolve_system("hbm-lru")
    )
    assert isinstance(result, RunResult)
    assert result == result and result != again  # identity; no ValueError from arrays
    assert result.summary == again.summary  # equal results: compare their summaries


def test_help_lists_the_commands_in_workflow_order(capsys: pytest.CaptureFixture[str]) -> None:
    from replay.cli import COMMANDS

    assert main(["--help"]) == 0
    listed = [
        line.split()[0]
        for line in capsys.readouterr().out.split("Commands:")[1].splitlines()
        if line.strip()
    ]
    assert listed == list(COMMANDS)
    assert COMMANDS[:8] == (
        "generate",
        "ingest",
        "inspect",
        "run",
        "mrc",
        "compare",
        "sweep",
        "plan",
    )
