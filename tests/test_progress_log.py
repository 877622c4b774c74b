"""Progress where stderr is no terminal (`nohup`, a pipe, a CI log): a timestamped line
every `LOG_INTERVAL_S` from a thread, naming the stage and its count; nothing from a
command shorter than that."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from replay.cli import _progress, main
from replay.cli._progress import display

LINE = re.compile(
    r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ replay (\w+):(.*), stage \d+m\d\ds, \d+m\d\ds in all$"
)


@pytest.fixture
def piped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_progress, "show_progress", lambda: False)
    monkeypatch.setattr(_progress, "LOG_INTERVAL_S", 0.05)


def test_lines_every_interval_with_the_stage_and_count(
    piped: None, capsys: pytest.CaptureFixture[str]
) -> None:
    with display("plan") as shown:
        shown.stage("cache curves", total=10, unit="batches")
        shown.update(3)
        time.sleep(0.3)
        shown.stage("checkpoint strategies")  # a stage without callbacks is reported too
        time.sleep(0.3)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) >= 4, lines
    parsed = [LINE.match(line) for line in lines]
    assert all(parsed), lines
    stages = [m[2] for m in parsed if m]
    assert " cache curves 3/10 batches" in stages and " checkpoint strategies" in stages
    assert {m[1] for m in parsed if m} == {"plan"}
    # the thread stops with the command: nothing more is written
    time.sleep(0.2)
    assert capsys.readouterr().err == ""


def test_a_command_under_nohup_writes_progress_a_short_one_nothing(
    piped: None, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    argv = ["run", "--workload", "tiny", "--batches", "40", "--system", "hbm-lru", "--out"]
    real_stage = _progress.Display.stage

    def slow_stage(self: _progress.Display, name: str, **kw: object) -> None:
        real_stage(self, name, **kw)  # type: ignore[arg-type]
        time.sleep(0.15)  # the command outlasts the interval

    monkeypatch.setattr(_progress.Display, "stage", slow_stage)
    assert main([*argv, str(tmp_path / "a")]) == 0
    err = capsys.readouterr().err.splitlines()
    logged = [line for line in err if LINE.match(line)]
    assert logged and all("replay run:" in line for line in logged), err
    monkeypatch.setattr(_progress, "LOG_INTERVAL_S", 60.0)
    monkeypatch.setattr(_progress.Display, "stage", real_stage)
    assert main([*argv, str(tmp_path / "b")]) == 0
    assert not any(LINE.match(line) for line in capsys.readouterr().err.splitlines())
