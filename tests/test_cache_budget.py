"""`--cache-budget SIZE` on `run`, `compare` and `sweep`: the cache's bytes, as `replay
plan` takes them, the same run as `--set policy.capacity_bytes=SIZE`; refused in one line
with another size of the cache. A `policy.capacity_bytes` override resizes a cache that its
file sized in rows (rows otherwise take precedence): the later size given wins."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from replay.cli import main
from replay.engine.systems import resolve_system


def _read(folder: Path, name: str) -> dict:
    return json.loads((folder / name).read_text())


def _error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("replay: error: ")
    return err.removeprefix("replay: error: ")


def test_run_with_a_budget_is_the_run_with_its_bytes(tiny_trace_40: Path, tmp_path: Path) -> None:
    budget, sets = tmp_path / "budget", tmp_path / "sets"
    args = ["run", str(tiny_trace_40), "-s", "hbm-lru"]
    assert main([*args, "--cache-budget", "8KiB", "-o", str(budget)]) == 0
    assert main([*args, "--set", "policy.capacity_bytes=8KiB", "-o", str(sets)]) == 0
    for name in ("summary.json", "config.json"):
        assert (budget / name).read_bytes() == (sets / name).read_bytes()
    policy = _read(budget, "summary.json")["policy"]
    row_state = _read(budget, "summary.json")["row_state_bytes"]
    assert policy["capacity_units"] == 8 * 1024 // row_state
    assert policy["evictions"] > 0  # small enough to choose: the budget took effect


def test_compare_gives_the_budget_to_every_system(tiny_trace_40: Path, tmp_path: Path) -> None:
    out = tmp_path / "c"
    args = ["compare", str(tiny_trace_40), "-s", "hbm-lru,hbm-lfu", "--cache-budget", "8KiB"]
    assert main([*args, "-o", str(out)]) == 0
    for system in ("hbm-lru", "hbm-lfu"):
        config = _read(out / system, "config.json")
        assert config["system"]["policy"]["capacity_bytes"] == 8192
    assert "policy.capacity_bytes=8KiB" in _read(out, "compare.json")["overrides"]


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--cache-budget", "0"], "--cache-budget: '0' must be more than 0 bytes"),
        (["--cache-budget", "8 apples"], "--cache-budget"),
        (
            ["--cache-budget", "8KiB", "--set", "policy.capacity_rows=10"],
            "--cache-budget 8KiB and --set policy.capacity_rows=10 both size the cache: give one",
        ),
        (
            ["--cache-budget", "8KiB", "--set", "policy.capacity_bytes=1MiB"],
            "--cache-budget 8KiB and --set policy.capacity_bytes=1MiB both size the cache",
        ),
    ],
)
def test_a_budget_beside_another_size_is_refused(
    tiny_trace_40: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    extra: list[str],
    said: str,
) -> None:
    out = tmp_path / "r"
    capsys.readouterr()
    assert main(["run", str(tiny_trace_40), "-s", "hbm-lru", "-o", str(out), *extra]) == 2
    assert said in _error(capsys) and not out.exists()


def test_a_sweep_of_the_cache_with_a_budget_is_refused(
    tiny_trace_40: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "s"
    args = ["sweep", str(tiny_trace_40), "-s", "hbm-lru", "--cache-budget", "8KiB"]
    capsys.readouterr()
    assert main([*args, "--grid", "policy.capacity_rows=10,20", "-o", str(out)]) == 2
    assert _error(capsys) == (
        "--cache-budget 8KiB and --grid policy.capacity_rows both size the cache: give one"
    )
    assert not out.exists()


def test_a_byte_override_resizes_a_cache_sized_in_rows(tmp_path: Path) -> None:
    toml = tmp_path / "rows.toml"
    toml.write_text('extends = "hbm-lru"\nname = "rows"\n\n[policy]\ncapacity_rows = 100\n')
    assert resolve_system(toml).policy.capacity_rows == 100
    spec = resolve_system(toml, ["policy.capacity_bytes=1MiB"])
    assert (spec.policy.capacity_rows, spec.policy.capacity_bytes) == (0, 1024**2)
    # the later size wins, either way round
    spec = resolve_system("hbm-lru", ["policy.capacity_rows=100", "policy.capacity_bytes=1MiB"])
    assert spec.policy.capacity_rows == 0
    spec = resolve_system("hbm-lru", ["policy.capacity_bytes=1MiB", "policy.capacity_rows=100"])
    assert spec.policy.capacity_rows == 100
