"""One small quickstart per test session, shared by the test modules that read it
(tests/test_quickstart.py, test_quickstart_report.py, test_report_chromium.py), so the
suite pays for it once, not once per module or per xdist worker: the first process to
need it runs it into the session's shared temporary folder (under a lock), and every
process works on its own copy of that output (test_quickstart.py runs the quickstart
again over its copy). The trace is not copied: the report names its path, and only
test_quickstart.py reads it (its one file runs in one process: `--dist loadfile`)."""

from __future__ import annotations

import atexit
import fcntl
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

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


def session_shared(factory: pytest.TempPathFactory) -> Path | None:
    """The folder every xdist worker of this run sees (pytest's numbered base folder,
    which pytest itself prunes), or None outside xdist (one process: nothing to share)."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return None
    return factory.getbasetemp().parent


_once: list[Quick] = []


def quickstart_once(factory: pytest.TempPathFactory) -> Quick:
    if _once:
        return _once[0]
    from replay.cli import main

    base = Path(tempfile.mkdtemp(prefix="replay-quickstart-"))
    atexit.register(shutil.rmtree, base, True)
    out, trace = base / "qs", base / "t"
    shared = session_shared(factory)
    if shared is None:
        assert main(quickstart_args(out, trace, workers=2)) == 0
    else:
        made = shared / "quickstart"
        with (shared / "quickstart.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            if not (made / "done").exists():
                shutil.rmtree(made, ignore_errors=True)
                assert main(quickstart_args(made / "qs", made / "t", workers=2)) == 0
                (made / "done").touch()
        shutil.copytree(made / "qs", out, symlinks=True)
        trace = made / "t"
    files = {k: v for k, v in files_of(out).items() if not k.startswith("results/")}
    _once.append(Quick(out, trace, files))
    return _once[0]
