"""`replay plan --dry-run` compares its estimate with what the machine has available now
(MemAvailable), not only its physical memory."""

from __future__ import annotations

from pathlib import Path

import pytest

from replay import _memory
from replay._memory import MARGIN_BYTES, Estimate
from replay.cli import main
from replay.runs import plan_memory
from replay.runs.plan_memory import available_line, estimate_lines

GIB = 1 << 30


def test_the_figure_is_memavailable_where_it_is_the_least(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(_memory.ENV_LIMIT, raising=False)
    monkeypatch.setattr(plan_memory, "available_memory", lambda: (64 * GIB, "physical memory"))
    monkeypatch.setattr(plan_memory, "memory_available_now", lambda: 6 * GIB)
    assert available_line(5 * GIB) == (
        "this estimate and a 512 MiB margin fits in the 6 GiB this machine has (available "
        "now: MemAvailable, of 64 GiB (physical memory))"
    )
    assert "is MORE than the 6 GiB" in available_line(6 * GIB - MARGIN_BYTES + 1)
    # a lower limit (a cgroup's, REPLAY_MEMORY_LIMIT) is the figure where it is lower
    monkeypatch.setattr(
        plan_memory, "available_memory", lambda: (4 * GIB, "REPLAY_MEMORY_LIMIT=4G")
    )
    assert available_line(GIB).endswith("the 4 GiB this machine has (REPLAY_MEMORY_LIMIT=4G)")
    lines = estimate_lines(Estimate("replay plan", (("a", 5 * GIB),), "detail"))
    assert lines[-1].startswith("this estimate and a 512 MiB margin is MORE than the 4 GiB")


def test_memavailable_is_read_from_proc_meminfo() -> None:
    now = _memory.memory_available_now()
    if Path("/proc/meminfo").exists():
        text = Path("/proc/meminfo").read_text()
        assert now is not None and "MemAvailable:" in text
        assert 0 < now <= (_memory.physical_memory() or now)


def test_dry_run_prints_the_comparison(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "--workload", "tiny", "--system", "hbm-lru", "--cache-budget", "1MiB",
            "--cluster-mtbf", "6h", "--out", str(tmp_path / "p"), "--dry-run"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    assert any(line.startswith("this estimate and a 512 MiB margin fits in the") for line in out)
    assert not (tmp_path / "p").exists()
