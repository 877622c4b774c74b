"""One small quickstart per test process, shared by the test modules that read it
(tests/test_quickstart.py, test_quickstart_report.py, test_report_chromium.py), so the
suite pays for it once, not once per module."""

from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

# 101 batches, not fewer: the studies checkpoint every 20 batches and average the second
# half of a run (the quickstart refuses fewer than 100); at 64 samples per batch the
# whole quickstart takes about 10 s of CPU on two cores.
BATCHES, BATCH_SIZE = 101, 64


def quickstart_args(out: Path, trace: Path, workers: int) -> list[str]:
    return [
        "quickstart",
        "--out",
        str(out),
        "--trace",
        str(trace),
        "--batches",
        str(BATCHES),
        "--batch-size",
        str(BATCH_SIZE),
        "--workers",
        str(workers),
    ]


def files_of(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@dataclass(frozen=True)
class Quick:
    out: Path
    trace: Path
    files: dict[str, bytes]  # the report's files (results/ left out), after the first run


@functools.cache
def quickstart_once() -> Quick:
    from replay.cli import main

    base = Path(tempfile.mkdtemp(prefix="replay-quickstart-"))
    atexit.register(shutil.rmtree, base, True)
    out, trace = base / "qs", base / "t"
    assert main(quickstart_args(out, trace, workers=2)) == 0
    files = {k: v for k, v in files_of(out).items() if not k.startswith("results/")}
    return Quick(out, trace, files)
