"""What `replay run`, `compare` and `sweep` print for a person: durations, bytes, goodput
and multiples in the user's units (never `6.752e-05 s`, `1318869.60%`, `3e-05%` or `0.0 M
lookups/s`), and the systems named as given (`compare -s a -s b` runs both; `run -s a
-s b` is refused, where click alone would run b without a word)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl
import pytest

from replay._units import (
    format_duration,
    format_number,
    format_percent,
    format_target,
    plural,
)
from replay.cli import main
from replay.cli._run_text import (
    energy_text,
    goodput_text,
    overhead_text,
    rate_text,
    ratio_text,
    si_text,
    speedup_text,
)


@pytest.fixture
def trace(tiny_trace_40: Path) -> Path:
    return tiny_trace_40


def test_the_cells() -> None:
    assert [ratio_text(x) for x in (0.0, 0.1912, 1.0, 1.5, 999.4, 12868.2)] == [
        "0%", "19.1%", "100%", "1.5×", "999×", "12,868×",
    ]  # fmt: skip
    assert overhead_text(0.012) == "1.2% of the time without checkpoints"
    assert overhead_text(12868.2) == "12,868× the time without checkpoints"
    # a goodput just under 100% keeps the digits that tell it from 100%
    assert [goodput_text(x) for x in (1.0, 0.99996, 0.9921, 0.0000755)] == [
        "100%", "99.996%", "99.2%", "0.00755%",
    ]  # fmt: skip
    assert [speedup_text(x) for x in (1.0, 0.366, 2345.6, 7.77e-05, 0.0)] == [
        "1×", "0.366×", "2,346×", "1/12,870×", "0×",
    ]  # fmt: skip
    assert [rate_text(x) for x in (2.5e7, 456_343.0, 41_600.0, 999.0)] == [
        "25.0 M lookups/s", "0.46 M lookups/s", "0.042 M lookups/s", "999 lookups/s",
    ]  # fmt: skip
    assert [energy_text(x) for x in (0.0352, 3610.0, 2.0)] == ["35.2 mJ", "3.61 kJ", "2 J"]
    assert si_text(100.83e-6, "s", 4) == "100.8 µs"
    # a plan's chance of a failure in a short run: digits, not `3e-05%`
    assert [format_percent(x) for x in (0.973, 0.0012, 3e-7, 1.234e-9, 0.0)] == [
        "97.3%", "0.12%", "0.00003%", "0.000000123%", "0%",
    ]  # fmt: skip
    # two digits: a plan's points of goodput between checkpoint modes
    points = [format_percent(x, 2) for x in (0.000053, 2.6e-7, 0.5)]
    assert points == ["0.0053%", "0.000026%", "50%"]
    # counts and load factors: `1.46e+05 failures during restores` read as 146,000
    numbers = (145_678.0, 1357.6, 0.102, 0.1, 12.0, 6.771e-05, 999.7, 0.0, 2**28)
    assert [format_number(x) for x in numbers] == [
        "146,000", "1,360", "0.102", "0.1", "12", "0.0000677", "1,000", "0", "268,000,000",
    ]  # fmt: skip
    assert [format_number(x, 4) for x in (0.9527, 6.771e-05, 1.0)] == ["0.9527", "0.00006771", "1"]
    # a duration far below a millisecond keeps its digits: 20 ps is not `0 ms`
    assert [format_duration(x) for x in (2e-8, 3.77e-5, 0.0, 90.0)] == [
        "0.00002 ms", "0.0377 ms", "0 ms", "1.5 min",
    ]  # fmt: skip
    # a hit target as the user gave it, in %: 0.9999 is not rounded up to 100%
    assert [format_target(t) for t in (0.9, "0.95", 0.999, 0.9999, 0.07)] == [
        "90%", "95%", "99.9%", "99.99%", "7%",
    ]  # fmt: skip
    assert [plural(n, w) for n, w in ((1, "batch"), (2, "batch"), (1_000, "run"))] == [
        "1 batch", "2 batches", "1,000 runs",
    ]  # fmt: skip


def test_a_run_prints_its_answers_in_units(
    trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A checkpointed failure study on 40 tiny batches: every duration with its unit, bytes
    in binary units, the overhead as a multiple past 100%, goodput in %."""
    capsys.readouterr()
    sets = [
        "policy.capacity_rows=200",
        "checkpoint.strategy=sync-full",
        "checkpoint.interval_batches=2",
        "failures.mtbf_s=4h",
        "failures.horizon_s=1d",
    ]
    out = tmp_path / "r"
    args = ["run", str(trace), "-s", "hbm-lru", "-o", str(out)]
    assert main([*args, *[x for s in sets for x in ("--set", s)]]) == 0
    text = capsys.readouterr().out
    assert not re.search(r"\de[-+]\d", text), text  # no exponents
    lines = {line.split(":")[0].strip().split(" ")[0]: line for line in text.splitlines()}
    assert re.search(r"  time [\d.]+ ms \(compute [\d.]+ ms, embedding exposed [\d.]+ ms, ", text)
    assert re.search(r"; energy [\d.]+ (m|k)?J$", lines["time"])
    size = r"[\d.]+ (KiB|MiB|GiB)"
    assert re.search(rf"  tier hbm: read {size}, write {size}\n", text)
    stall = r"stall [\d.]+ ms, [\d.,]+× the time without checkpoints$"
    assert re.search(stall, lines["checkpoint"])
    assert re.search(r"goodput [\d.]+% mean, [\d.]+% p5 over 1,000 draws", lines["failures"])
    assert re.search(r"Young/Daly interval [\d.]+ s \(used [\d.]+ ms\)$", lines["failures"])
    assert re.search(r"lost work [\d.]+ m?s per failure of training, ", lines["failures"])
    assert re.search(r"restore [\d.]+ (s|min) per failure", lines["failures"])
    assert re.search(r"replayed at [\d.]+ M lookups/s; wrote ", text)


def test_a_cluster_run_prints_its_imbalance_as_multiples(
    trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    out = tmp_path / "c"
    args = ["run", str(trace), "-s", "hbm-lru", "-o", str(out), "--set", "cluster.preset=dgx-h100"]
    assert main(args) == 0
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("  cluster ")]
    cl = json.loads((out / "summary.json").read_text())["cluster"]
    mean, worst = cl["imbalance_mean"], cl["imbalance_max"]
    assert line.endswith(
        f"; imbalance (max / mean lookups per GPU) {mean:.3g}× on the mean batch, "
        f"{worst:.3g}× on the worst"
    )
    assert worst > 1.0  # tiny's 4 tables on 8 GPUs: 3 whole, on 3 of the GPUs


def test_compare_takes_systems_repeated_or_comma_separated(
    trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["compare", str(trace), "--set", "policy.capacity_rows=200", "-j", "1"]
    assert main([*base, "-s", "hbm-lru", "-s", "dram,cxl", "-o", str(tmp_path / "a")]) == 0
    assert main([*base, "-s", "hbm-lru,dram,cxl", "-o", str(tmp_path / "b")]) == 0
    a = pl.read_parquet(tmp_path / "a" / "comparison.parquet")
    b = pl.read_parquet(tmp_path / "b" / "comparison.parquet")
    assert a["system"].to_list() == ["hbm-lru", "dram", "cxl"]
    assert a.equals(b)
    table = capsys.readouterr().out
    assert "×" in table and not re.search(r"\d\.\d+x\b|\d+\.\d\d%", table)


@pytest.mark.parametrize("command", ["run", "sweep"])
def test_one_system_commands_refuse_a_second_system(
    trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    capsys.readouterr()
    args = [command, str(trace), "-s", "hbm-lru", "-s", "dram", "-o", str(tmp_path / "o")]
    if command == "sweep":
        args += ["--grid", "policy.capacity_rows=100,200"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err == (
        "replay: error: --system: given 2 times (hbm-lru, dram); this command replays one "
        "system (`replay compare -s a,b` replays several side by side)\n"
    )
    assert not (tmp_path / "o").exists()
