"""`replay plan --dry-run` within 25% of the plan's measured peak on the docs' plans: the
rows a run touches come from the workload's pmf (`expected_distinct`), not one a lookup.

The peaks themselves are a benchmark (`pytest -m bench tests/test_plan_dry_run_peaks.py`):
each plan takes minutes."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from replay.runs.plan_memory import DISTINCT_SPARE, DISTINCT_SPARE_ROWS, expected_distinct
from replay.trace.stream import iter_batch_ranges
from replay.workload.generator import resolve_workload
from replay.workload.onthefly import GeneratedTrace
from replay.workload.spec import WorkloadSpec

# docs/plan.md's plan of FBGEMM's TBE cache (criteo-kaggle, 2,000 batches of 2,048)
KAGGLE = [
    "plan", "--workload", "criteo-kaggle", "--batches", "2000", "--batch-size", "2048",
    "--system", "hbm-lru", "--system", "hbm-tbe-lru", "--system", "hbm-tbe-lfu",
    "--cache-budget", "32MiB", "--hit-target", "0.9", "--cluster-mtbf", "6h",
    "--time-per-batch", "100ms",
]  # fmt: skip
# docs/cluster.md's 64-GPU plan of Criteo Terabyte's epoch
CLUSTER = [
    "plan", "--workload", "criteo-terabyte", "--batches", "2135484", "--system", "hbm-lru",
    "--set", "cluster.preset=dgx-h100", "--set", "cluster.nodes=8",
    "--set", "cluster.gpu_memory_bytes=40e9", "--set", "checkpoint.replicas=1",
    "--cache-budget", "8GiB", "--hit-target", "0.9", "--hit-target", "0.95",
    "--node-mtbf", "30d", "--time-per-batch", "50ms",
]  # fmt: skip

# docs/cluster.md's 8-GPU plan with TorchRec's default proposer at a 1.5 GiB budget: its
# peak is TorchRec's plan replayed beside ours (torch imported, six caches of its plan)
TORCHREC_8 = [
    "plan", "--workload", "criteo-terabyte", "--batches", "2135484", "--system", "hbm-lru",
    "--set", "cluster.preset=dgx-h100", "--set", "cluster.gpu_memory_bytes=80GiB",
    "--set", "cluster.torchrec_proposer=default", "--cache-budget", "1.5GiB",
    "--node-mtbf", "30d", "--time-per-batch", "50ms",
]  # fmt: skip


# docs/torchrec.md's plan: 200 batches of 512 in Criteo Terabyte's 188 M rows, at R = 1
TORCHREC_PAGE = [
    "plan", "--workload", "criteo-terabyte", "--batches", "200", "--batch-size", "512",
    "--system", "hbm-lru", "--cache-budget", "64MiB", "--cluster-mtbf", "1d",
    "--time-per-batch", "50ms",
]  # fmt: skip


def _gib(text: str) -> float:
    number, unit = re.search(r"about ([\d.]+) (GiB|MiB)", text).groups()  # type: ignore[union-attr]
    return float(number) / {"GiB": 1, "MiB": 1024}[unit]


def _dry_run(argv: list[str], out: Path) -> float:
    done = subprocess.run(
        [sys.executable, "-m", "replay", *argv, "--out", str(out), "--dry-run"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return _gib(done.stdout)


def _iid(spec: WorkloadSpec) -> WorkloadSpec:
    """`spec` with its batches i.i.d.: no reuse of earlier rows, no drift."""
    tables = tuple(dataclasses.replace(t, reuse=0.0, drift=0.0) for t in spec.tables)
    return dataclasses.replace(spec, tables=tables)


def _distinct_generated(spec: WorkloadSpec) -> int:
    keys = [np.unique(r.keys) for r in iter_batch_ranges(GeneratedTrace(spec), with_updates=False)]
    return len(np.unique(np.concatenate(keys)))


def test_expected_distinct_bounds_the_generated_count() -> None:
    """The expectation (with its spare) is at least what the generator draws and far
    below one row a lookup, and it never passes the rows or the lookups."""
    spec = _iid(resolve_workload("tiny").with_overrides(batches=300))
    counted = _distinct_generated(spec)
    bound = expected_distinct(spec, 300)
    assert counted <= bound
    # the expectation itself (without its spare) is the count to within a few percent
    expectation = (bound - DISTINCT_SPARE_ROWS) / DISTINCT_SPARE
    assert abs(expectation - counted) <= 0.03 * counted, (expectation, counted)
    rows = sum(int(t.rows) for t in spec.tables)
    assert bound <= min(rows, 300 * spec.lookups_per_batch)
    assert expected_distinct(spec, 1) <= expected_distinct(spec, 10) <= bound
    big = resolve_workload("criteo-kaggle").with_overrides(batches=2000, batch_size=2048)
    # 106 M lookups over 33.8 M rows: about 4.1 M of them distinct
    assert 3.5e6 < expected_distinct(big, 2000) < 5e6


def test_reuse_or_drift_takes_one_row_a_lookup() -> None:
    spec = resolve_workload("tiny").with_overrides(batches=50)
    tables = tuple(dataclasses.replace(t, drift=0.1) for t in spec.tables)
    drifted = dataclasses.replace(spec, tables=tables)
    rows = sum(int(t.rows) for t in spec.tables)
    assert expected_distinct(drifted, 50) == min(rows, 50 * spec.lookups_per_batch)


def test_kaggle_tbe_plan_estimate_is_near_its_measured_peak(tmp_path: Path) -> None:
    """docs/plan.md's TBE plan peaked at 1.75 GiB (`/usr/bin/time`, idle 2-core VM,
    2026-12-07; 1.64 GiB earlier); the estimate was 2.53
    GiB while every lookup counted as a new row."""
    estimate = _dry_run(KAGGLE, tmp_path / "p")
    assert abs(estimate - 1.75) <= 0.25 * 1.75, estimate


def test_a_short_exact_run_in_a_large_row_space_counts_a_map(tmp_path: Path) -> None:
    """docs/torchrec.md's plan: 2.7 M lookups in 188 M rows, whose exact curves keep a map
    of the rows seen (`replay.analysis.stack.dense_rows`), peaked at 325 MiB
    (`/usr/bin/time`, idle 2-core VM, 2026-12-07); the estimate counted an array over every
    row, 966 MiB."""
    estimate = _dry_run(TORCHREC_PAGE, tmp_path / "p")
    assert abs(estimate - 325 / 1024) <= 0.25 * 325 / 1024, estimate


def _peak(argv: list[str], out: Path) -> float:
    done = subprocess.run(
        ["/usr/bin/time", "-f", "peak %M KB", sys.executable, "-m", "replay", *argv,
         "--out", str(out)],
        capture_output=True, text=True, timeout=3600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return int(re.search(r"peak (\d+) KB", done.stderr).group(1)) / 2**20  # type: ignore[union-attr]


@pytest.mark.bench
@pytest.mark.parametrize(
    "argv", [KAGGLE, CLUSTER, TORCHREC_8], ids=["kaggle-tbe", "cluster-64", "cluster-8-torchrec"]
)
def test_docs_plan_estimate_within_25_percent_of_its_peak(argv: list[str], tmp_path: Path) -> None:
    estimate = _dry_run(argv, tmp_path / "dry")
    peak = _peak(argv, tmp_path / "p")
    assert abs(estimate - peak) <= 0.25 * peak, (estimate, peak)


def test_torchrec_beside_counts_torch_and_the_caches_of_its_plan() -> None:
    """TorchRec's plan beside ours adds torch's import and, where the tables do not fit
    the GPUs' budgets, a cache of one budget per table larger than a budget (an LRU's key
    table: 4 slots' worth of 8 B entries, a power of two); nothing where it is not run."""
    from types import SimpleNamespace

    from replay.runs.plan_memory import TORCH_IMPORT_BYTES, torchrec_beside_bytes
    from replay.system.spec import apply_overrides, build_system, load_system_data
    from replay.workload.presets import get_preset

    spec = get_preset("criteo-terabyte")
    rows = [int(t.rows) for t in spec.tables]

    def beside(budget: int, *sets: str) -> int:
        data = apply_overrides(load_system_data("hbm-lru")[0], ["cluster.preset=dgx-h100", *sets])
        request = SimpleNamespace(cache_budget_bytes=budget)
        return torchrec_beside_bytes(build_system(data), rows, spec, request)

    # 1.5 GiB of 512 B rows: 3.1 M slots, a key table of 2^24 entries; five tables larger
    one = (1 << 24) * 8
    assert beside(3 << 29, "cluster.gpu_memory_bytes=80GiB") == TORCH_IMPORT_BYTES + 5 * one
    # 64 GPUs of 8 GiB hold every table's rows: TorchRec keeps them whole, torch alone
    assert beside(8 << 30, "cluster.nodes=8") == TORCH_IMPORT_BYTES
    assert beside(3 << 29, "cluster.torchrec_proposer=none") == 0
    assert beside(3 << 29, "cluster.torchrec_max_table_gpus=100") == 0  # 26 x 8 > 100
    # the scale-up proposer caches row blocks on every GPU
    assert beside(3 << 29, "cluster.torchrec_proposer=scaleup") == TORCH_IMPORT_BYTES + 8 * one


def test_dry_run_does_not_say_it_fits_what_is_not_available_now(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The physical memory holds the plan but MemAvailable does not: the last line says
    both, not a bare "fits" under a line that says MORE."""
    from replay.cli import main
    from replay.runs import plan_memory

    monkeypatch.delenv("REPLAY_MEMORY_LIMIT", raising=False)
    monkeypatch.setattr(plan_memory, "available_memory", lambda: (64 << 30, "physical memory"))
    monkeypatch.setattr(plan_memory, "memory_available_now", lambda: 1 << 20)
    argv = ["plan", "--workload", "tiny", "--system", "hbm-lru", "--cache-budget", "1MiB",
            "--cluster-mtbf", "6h", "--out", str(tmp_path / "p"), "--dry-run"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    assert "is MORE than the 1 MiB" in out[-2]
    assert out[-1] == (
        "fits this machine's memory, though not in what it has available now; nothing "
        "written (--dry-run)"
    )
