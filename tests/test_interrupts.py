"""Ctrl-C and SIGTERM (issue 31, "Interrupts"; issue 27): one line, 130 or 143, no
traceback, nothing half-written.

Each command runs as the console script does (`python -m replay`, which installs the
signal handlers before the heavy imports) in a session of its own; SIGINT goes to the
whole process group, as a terminal's Ctrl-C does (worker processes included), SIGTERM to
the main process only, as `kill PID` or a batch scheduler does. The workloads are far too
large to finish before the signal (hundreds of thousands of batches generated on the
fly), so every case interrupts real work; the early cases interrupt the imports.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from replay.cli import main

BIG = "--workload criteo-kaggle --batches 400000"


@dataclass(frozen=True)
class Interrupt:
    id: str
    argv: str  # formatted with {trace}, {run}
    signum: int
    delay_s: float
    kept: tuple[str, ...] = ()  # what the command keeps on purpose (for --resume)


CASES = [
    Interrupt("run-sigint", f"run {BIG} --system hbm-lru --out out", signal.SIGINT, 2.0),
    Interrupt("run-sigterm", f"run {BIG} --system hbm-lru --out out", signal.SIGTERM, 2.0),
    Interrupt("run-sigint-early", f"run {BIG} --system hbm-lru --out out", signal.SIGINT, 0.3),
    Interrupt("mrc-sigint", f"mrc {BIG} --out out", signal.SIGINT, 2.0),
    Interrupt("mrc-sigterm", f"mrc {BIG} --out out", signal.SIGTERM, 2.0),
    Interrupt(
        "compare-sigint",
        f"compare {BIG} --systems hbm-lru,dram --workers 2 --out out",
        signal.SIGINT,
        2.5,
    ),
    Interrupt(
        "compare-sigterm",
        f"compare {BIG} --systems hbm-lru,dram --workers 2 --out out",
        signal.SIGTERM,
        2.5,
    ),
    Interrupt(
        "generate-sigint",
        "generate --preset criteo-kaggle --batches 400000 --workers 2 --out out",
        signal.SIGINT,
        2.0,
        kept=(".out.partial",),
    ),
    Interrupt(
        "generate-sigterm",
        "generate --preset criteo-kaggle --batches 400000 --workers 2 --out out",
        signal.SIGTERM,
        2.0,
        kept=(".out.partial",),
    ),
    Interrupt(
        "quickstart-sigint",
        "quickstart --batches 400000 --workers 1 --trace qtrace --out out",
        signal.SIGINT,
        2.0,
        kept=(),
    ),
    Interrupt("inspect-sigint-early", "inspect {trace}", signal.SIGINT, 0.2),
    Interrupt("report-sigint", "report {run} --out out", signal.SIGINT, 0.8),
]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("interrupt-inputs")
    trace, run = base / "trace", base / "run"
    assert main(["generate", "--preset", "tiny", "--batches", "6", "--batch-size", "16",
                 "--workers", "1", "--out", str(trace)]) == 0  # fmt: skip
    assert main(["run", str(trace), "--system", "hbm-lru", "--out", str(run)]) == 0
    return {"trace": trace, "run": run}


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_interrupt(c: Interrupt, inputs: dict[str, Path], tmp_path: Path) -> None:
    argv = c.argv.format(**{k: str(v) for k, v in inputs.items()}).split()
    proc = subprocess.Popen(
        [sys.executable, "-m", "replay", *argv],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    time.sleep(c.delay_s)
    assert proc.poll() is None, f"finished before the signal: {proc.stderr.read()!r}"
    if c.signum == signal.SIGINT:
        os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C: the whole group
    else:
        proc.send_signal(c.signum)
    try:
        _, stderr = proc.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise AssertionError(f"replay {c.argv}: still running 90 s after the signal") from None
    shown = f"replay {' '.join(argv)}\nexit {proc.returncode}\nstderr: {stderr!r}"
    assert proc.returncode == 128 + c.signum, shown
    assert "Traceback" not in stderr, shown
    assert stderr.count("\n") == 1 and stderr.endswith("\n"), "not one line\n" + shown
    word = "interrupted" if c.signum == signal.SIGINT else "terminated"
    assert stderr.startswith(f"replay: {word}"), shown
    left = sorted(p.name for p in tmp_path.iterdir())
    assert set(left) <= set(c.kept), f"left behind: {left}\n{shown}"
    if ".out.partial" in c.kept:  # generate: kept for --resume, and the line says so
        assert left == [".out.partial"] and "--resume" in stderr, shown
