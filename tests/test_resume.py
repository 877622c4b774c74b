"""Kill and resume: `replay generate` and `replay run` killed with SIGKILL at several points,
then finished with `--resume`, give the same bytes as an uninterrupted run.

A killed process runs as a subprocess with `REPLAY_KILL_AT` naming a kill point
(`replay._faults`); `generate` is also killed after fixed delays, wherever it happens to
be. Between the kill and the resume, the same command without `--resume` must report the
leftover and leave it untouched.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from replay.cli import main

GENERATE = ["generate", "--preset", "tiny", "--batches", "700", "--batch-size", "1024"]
RUN = ["--system", "hbm-lru", "--set", "policy.capacity_rows=2000"]


def tree(folder: Path) -> dict[str, str]:
    """SHA-256 of every file below `folder`, hidden ones included, by relative path."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def run_folder(folder: Path) -> dict[str, object]:
    """A run folder's content; meta.json without its timings (the only bytes that depend
    on when the work ran)."""
    content: dict[str, object] = dict(tree(folder))
    meta = json.loads((folder / "meta.json").read_text())
    del meta["timings"]
    content["meta.json"] = meta
    return content


def killed(args: list[str], *, at: str | None = None, after_s: float | None = None) -> int:
    """Run `replay ARGS` in a subprocess killed at kill point `at` or after `after_s`."""
    env = {k: v for k, v in os.environ.items() if k != "REPLAY_KILL_AT"}
    if at is not None:
        env["REPLAY_KILL_AT"] = at
    proc = subprocess.Popen(
        [sys.executable, "-m", "replay", *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    if after_s is not None:
        try:
            proc.wait(timeout=after_s)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
    _, err = proc.communicate(timeout=300)
    assert b"Traceback" not in err, err.decode()
    return proc.returncode


def refuses_leftover(args: list[str], partial: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Without --resume or --force the leftover is reported, not touched."""
    before = tree(partial)
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and partial.name in err and "--resume" in err
    assert tree(partial) == before


@pytest.fixture(scope="module")
def reference_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ref") / "trace"
    assert main([*GENERATE, "--out", str(out)]) == 0
    assert len(list((out / "lookups").glob("*.parquet"))) >= 2  # a resume can skip a file
    return out


@pytest.mark.parametrize(
    "at",
    [
        "trace:row-group#2",  # half-way through the first file
        "trace:part#1",  # one file done
        "trace:row-group#5",  # in the second file
        "trace:manifest",  # every file and the manifest written, not yet renamed
        "trace:before-rename",
    ],
)
def test_generate_killed_at_a_point_resumes_to_the_same_bytes(
    tmp_path: Path, reference_trace: Path, capsys: pytest.CaptureFixture[str], at: str
) -> None:
    out = tmp_path / "trace"
    args = [*GENERATE, "--out", str(out)]
    assert killed(args, at=at) == -signal.SIGKILL
    partial = tmp_path / ".trace.partial"
    assert not out.exists() and partial.is_dir()
    refuses_leftover(args, partial, capsys)
    assert main([*args, "--resume"]) == 0
    assert not partial.exists()
    assert tree(out) == tree(reference_trace)


@pytest.mark.parametrize("after_s", [1.5, 3.0, 4.5])
def test_generate_killed_any_time_resumes_to_the_same_bytes(
    tmp_path: Path, reference_trace: Path, after_s: float
) -> None:
    out = tmp_path / "trace"
    args = [*GENERATE, "--out", str(out)]
    code = killed(args, after_s=after_s)
    assert code in (0, -signal.SIGKILL)  # it may have finished first
    assert main([*args, "--resume"]) == 0
    assert tree(out) == tree(reference_trace)
    assert not (tmp_path / ".trace.partial").exists()


@pytest.fixture(scope="module")
def small_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("small") / "trace"
    assert main(["generate", "--preset", "tiny", "--batches", "64", "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def reference_run(small_trace: Path) -> Path:
    out = small_trace.parent / "run"
    assert main(["run", str(small_trace), *RUN, "--out", str(out)]) == 0
    return out


@pytest.mark.parametrize(
    "at",
    [
        "run:planned",  # plan written, nothing replayed
        "run:batches",  # during the replay
        "run:files",  # half of the replay's files written
        "run:replayed",  # replay stage done, workload.json not yet
        "run:before-rename",  # complete in the partial folder
    ],
)
def test_run_killed_at_a_point_resumes_to_the_same_bytes(
    tmp_path: Path,
    small_trace: Path,
    reference_run: Path,
    capsys: pytest.CaptureFixture[str],
    at: str,
) -> None:
    out = tmp_path / "run"
    args = ["run", str(small_trace), *RUN, "--out", str(out)]
    assert killed(args, at=at) == -signal.SIGKILL
    partial = tmp_path / ".run.partial"
    assert not out.exists() and partial.is_dir()
    refuses_leftover(args, partial, capsys)
    assert main([*args, "--resume"]) == 0
    assert not partial.exists()
    assert run_folder(out) == run_folder(reference_run)


def test_run_killed_after_the_rename_resume_is_a_no_op(
    tmp_path: Path, small_trace: Path, reference_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    args = ["run", str(small_trace), *RUN, "--out", str(out)]
    assert killed(args, at="run:done") == -signal.SIGKILL
    finished = tree(out)
    assert main(args) == 2 and "--force" in capsys.readouterr().err
    assert main([*args, "--resume"]) == 0
    assert tree(out) == finished
    assert run_folder(out) == run_folder(reference_run)


def test_resume_with_other_inputs_is_refused(
    tmp_path: Path, small_trace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    args = ["run", str(small_trace), *RUN, "--out", str(out)]
    assert killed(args, at="run:replayed") == -signal.SIGKILL
    partial = tmp_path / ".run.partial"
    before = tree(partial)
    other = ["run", str(small_trace), "--system", "hbm-lfu", "--out", str(out), "--resume"]
    assert main(other) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "same inputs" in err
    assert tree(partial) == before
    # a finished run with other inputs is not replaced by --resume either
    assert main([*args, "--resume"]) == 0
    assert main(other) == 2 and "--force" in capsys.readouterr().err
    # --force starts over
    assert main([*other[:-1], "--force"]) == 0
    assert json.loads((out / "summary.json").read_text())["system"] == "hbm-lfu"


def test_force_replaces_a_leftover(tmp_path: Path, small_trace: Path, reference_run: Path) -> None:
    out = tmp_path / "run"
    args = ["run", str(small_trace), *RUN, "--out", str(out)]
    assert killed(args, at="run:files") == -signal.SIGKILL
    assert main([*args, "--force"]) == 0
    assert not (tmp_path / ".run.partial").exists()
    assert run_folder(out) == run_folder(reference_run)


@pytest.mark.parametrize(
    "argv",
    [
        ["generate", "--preset", "tiny", "--batches", "20"],
        ["run", "--workload", "tiny", "--batches", "20", "--system", "hbm-lru"],
    ],
    ids=["generate", "run"],
)
def test_resume_over_a_hostile_partial_plan_starts_over(tmp_path: Path, argv: list[str]) -> None:
    """A `.plan.json` or `meta.json` in the partial folder nested past the recursion limit
    is unreadable, as a half-written one is: --resume starts over, without a traceback
    (issue 39: it raised RecursionError)."""
    out = tmp_path / "out"
    partial = tmp_path / ".out.partial"
    partial.mkdir()
    for name in (".plan.json", "meta.json"):
        (partial / name).write_text("[" * 200_000 + "]" * 200_000)
    done = subprocess.run(
        [sys.executable, "-m", "replay", *argv, "--out", str(out), "--resume"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert out.is_dir() and not partial.exists()
