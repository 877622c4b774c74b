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


def test_ssd_tbe_l2_counts_its_table_and_the_slots_a_source_can_fill() -> None:
    """The L2's key -> slot table is allocated and touched whole (8 B an entry, 4 x its
    slots rounded up to a power of two); its slots' arrays only as rows fill them, at most
    one a lookup: a 200-batch span of a 14.3 M-row L2 fills at most its lookups."""
    from replay.engine.systems import resolve_system
    from replay.policies.lru import table_shape
    from replay.policies.tbe import TBEPolicy
    from replay.runs.run_memory import cache_bytes
    from replay.system import cachelib

    system = resolve_system("ssd-tbe", [])
    rows, state = 187_767_399, 512
    l2 = cachelib.capacity_rows(system.policy.l2_capacity_bytes, state)
    assert l2 == 14_308_530  # 8 GiB of 600 B chunks
    ways = TBEPolicy.capacity(system, 1, state, rows) * 16
    table = 8 * table_shape(rows, l2)[0]
    assert table == 512 << 20
    got, how = cache_bytes(system, [rows], state, lookups=1_000_000)
    assert got == ways + table + 1_000_000 * 17
    assert "L2 table 512 MiB and 1,000,000 of its 14,308,530 rows filled x 17 B" in how
    assert cache_bytes(system, [rows], state, lookups=10**9)[0] == ways + table + l2 * 17
