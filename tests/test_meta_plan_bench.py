"""Issue 43 item 3's acceptance: one day of `meta-2021` training (856 tables, 887 M lookups
a batch, 5.16 G rows) on 128 H100s (16 DGX nodes) planned within 5 minutes and 4 GiB of
peak RSS on the 2-core VM (`pytest -m bench tests/test_meta_plan_bench.py`); within 60 s
since (issue 57), timed as a user runs it.

The step time is given, as a user would give their measured one: 400 ms a global batch of
65,536 samples (ASSUMPTION: the issue's own command line; no published step time of this
model is used), so a day is 216,000 batches.
The cache budget is 8 GiB per GPU, a node fails every 30 days. The plan stands on the
production-scale bases of docs/methods.md ("At production scale"), which plan.json must
name.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ARGV = [
    "--workload", "meta-2021", "--system", "hbm-lru", "--set", "cluster.preset=dgx-h100",
    "--set", "cluster.nodes=16", "--node-mtbf", "30d", "--cache-budget", "8GiB",
    "--duration", "1d", "--time-per-batch", "400ms",
]  # fmt: skip
# within 60 s (the goal since issue 43's 5 minutes: 37-41 s measured idle, 2026-12-07)
WALL_S = 60.0
PEAK_GIB = 4.0


@pytest.mark.bench
def test_meta_2021_day_on_128_gpus_in_60_s_and_4_gib(tmp_path: Path) -> None:
    out = tmp_path / "metaplan"
    argv = [
        "/usr/bin/time", "-f", "peak %M KB wall %e s cpu %U+%S s", sys.executable, "-m",
        "replay", "plan", *ARGV, "--out", str(out),
    ]  # fmt: skip
    # timed as a user runs it: without the suite's schema checks of every output
    # (conftest's REPLAY_CHECK_SCHEMAS), which validating this plan's documents adds
    # ~48 s to (86.5 s against 37.0 s, 2026-12-07)
    env = {k: v for k, v in os.environ.items() if k != "REPLAY_CHECK_SCHEMAS"}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=1200, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    found = re.search(r"peak (\d+) KB wall ([\d.]+) s", done.stderr)
    assert found, done.stderr[-3000:]
    peak_gib, wall = int(found.group(1)) / 2**20, float(found.group(2))
    estimate = _estimate_gib()
    print(f"meta-2021 day plan: {wall:.0f} s wall, {peak_gib:.2f} GiB peak RSS "
          f"(estimated {estimate:.2f} GiB)")  # fmt: skip
    assert wall <= WALL_S, wall
    assert peak_gib <= PEAK_GIB, peak_gib
    # the memory estimate (`replay plan --dry-run`) within 25% of the measured peak
    assert abs(estimate - peak_gib) <= 0.25 * peak_gib, (estimate, peak_gib)
    plan = json.loads((out / "plan.json").read_text())
    assert plan["horizon"]["batches"] == 216_000
    cluster = plan["cluster"]
    assert cluster["world"] == 128 and len(cluster["per_gpu"]) == 128
    bases = [n for n in plan["notes"] if "basis:" in n]
    # the heads, the systems' steady state and the cluster's routed span say their basis
    assert any("pieces of tables" in n and "exact heads" in n for n in bases), bases
    assert any("modelled, not replayed" in n for n in bases), bases
    assert any("routed in pieces" in n for n in bases), bases
    assert "closed form" in plan["touched"]["basis"]["exact_from"]
    assert "production scale" in cluster["methods"]["steady"]
    assert (out / "plan.md").read_text().count("basis:") >= 3


def _dry_run() -> str:
    argv = [sys.executable, "-m", "replay", "plan", *ARGV, "--out", "/nonexistent/p", "--dry-run"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "pieces" in done.stdout
    return done.stdout


def _estimate_gib(stdout: str | None = None) -> float:
    first = (stdout or _dry_run()).splitlines()[0]
    found = re.search(r"about ([\d.]+) GiB", first)
    assert found, first
    return float(found.group(1))


def test_the_memory_estimate_at_production_scale_fits_4_gib() -> None:
    """`--dry-run` says the plan fits (fast: no work is done), and which case of the
    routing it counts: the batch's pieces, read only where a sharding splits a table."""
    out = _dry_run()
    assert _estimate_gib(out) <= PEAK_GIB
    assert "pieces counted as if a sharding splits a table" in out, out


def test_the_routed_pieces_are_read_whatever_the_sharding_where_the_draws_cannot_serve() -> None:
    """The estimate says the pieces are read for sure where the distinct rows counted from
    the draws cannot route the batch: update rows that are not each batch's own
    (accumulated steps); a frozen table or no sampled heads change nothing."""
    import dataclasses

    from replay.runs.plan_memory import _routed_pieces_note
    from replay.workload.presets import get_preset

    spec = get_preset("meta-2021")
    n, per = 216_000, int(spec.lookups_per_batch)
    accumulated = dataclasses.replace(
        spec, update=dataclasses.replace(spec.update, accumulate_batches=2)
    )
    frozen = dataclasses.replace(
        spec, tables=(dataclasses.replace(spec.tables[0], frozen=True), *spec.tables[1:])
    )
    for other, rate in [(spec, 2.0**-23), (spec, 1.0), (frozen, 2.0**-23)]:
        assert "as if a sharding splits" in _routed_pieces_note(other, n, per, rate)
    assert "reads a batch in pieces (counted)" in _routed_pieces_note(accumulated, n, per, 2.0**-23)


# -- what the plan's speed-ups keep the same (fast) -----------------------------------------


def test_che_tail_buckets_are_the_python_loops() -> None:
    """The compiled bucket cutter gives the buckets of the loop it replaced."""
    import math

    from replay.analysis.che import _tail_buckets

    for rows, alpha in [(10, 1.1), (5_000, 0.3), (10**9, 1.05), (123_457, 2.4), (70, 0.9)]:
        tolerance = 1e-3
        growth = (1.0 + tolerance) ** (1.0 / alpha)
        head = min(rows, max(64, math.ceil(1.0 / (growth - 1.0)) + 1))
        starts, ends = [], []
        a = head + 1
        while a <= rows:
            e = min(rows, max(a, math.floor(a * growth)))
            while e > a and (e / a) ** alpha > 1.0 + tolerance:
                e -= 1
            starts.append(a)
            ends.append(e)
            a = e + 1
        lo, hi = _tail_buckets(rows, head, growth, alpha, tolerance)
        assert lo.tolist() == starts and hi.tolist() == ends, (rows, alpha)


def test_che_unique_misses_in_chunks_is_the_whole_grid() -> None:
    """Che's curve evaluated in chunks on threads equals the grid evaluated whole."""
    import numpy as np

    from replay.plan import torchrec_unique as tu
    from replay.workload.presets import get_preset

    spec = get_preset("criteo-kaggle")
    table = max(spec.tables, key=lambda t: t.rows)
    sizes = np.unique(np.geomspace(1, table.rows, 40).astype(np.int64))
    got, unique = tu.che_unique_misses(table, spec.batch_size, 500, sizes)
    m, rate = tu._che_rates(table, spec.batch_size)
    q = -np.expm1(-rate)
    times = np.geomspace(1e-3 / float(np.sum(m * rate)), 500.0, tu.CHE_GRID)
    stay = np.exp(-rate[None, :] * times[:, None])
    occupancy = float(np.sum(m)) - stay @ m
    misses = occupancy + (500.0 - times) * (stay @ (m * q))
    k, first = np.unique(np.maximum.accumulate(np.concatenate([[0.0], occupancy])),
                         return_index=True)  # fmt: skip
    want = np.interp(sizes.astype(np.float64), k, np.concatenate([[unique], misses])[first])
    np.testing.assert_allclose(got, np.maximum(want, misses[-1]), rtol=1e-12, atol=0)


def test_compiled_workloads_share_their_sampler_tables() -> None:
    """A spec compiled again (another batch count) reuses the tables some object holds;
    another seed does not."""
    import dataclasses

    from replay.workload.generator import CompiledWorkload
    from replay.workload.presets import get_preset

    spec = get_preset("criteo-kaggle")
    one = CompiledWorkload.from_spec(spec)
    assert CompiledWorkload.from_spec(spec.with_overrides(batches=3)).tables is one.tables
    other = CompiledWorkload.from_spec(dataclasses.replace(spec, seed=spec.seed + 1))
    assert other.tables is not one.tables


def test_che_curves_of_alike_tables_are_kept_per_law() -> None:
    """A table of the same law, batch size and run reads the grid computed for another,
    at its own sizes (the same values as computing it anew); another law its own."""
    import dataclasses

    import numpy as np

    from replay.plan import torchrec_unique as tu
    from replay.workload.presets import get_preset

    spec = get_preset("criteo-kaggle")
    table = max(spec.tables, key=lambda t: t.rows)
    alike = dataclasses.replace(table, name=table.name + "-alike")
    other = dataclasses.replace(table, alpha=table.alpha + 0.1)
    sizes = np.unique(np.geomspace(1, table.rows, 30).astype(np.int64))
    mine = np.unique(np.geomspace(3, table.rows // 2, 17).astype(np.int64))
    tu._che_curves.clear()
    fresh_mine, u0 = tu.che_unique_misses(alike, spec.batch_size, 300, mine)
    tu._che_curves.clear()
    first, u1 = tu.che_unique_misses(table, spec.batch_size, 300, sizes)
    again, u2 = tu.che_unique_misses(alike, spec.batch_size, 300, mine)
    assert len(tu._che_curves) == 1 and u1 == u2 == u0
    assert again.tobytes() == fresh_mine.tobytes()
    assert tu.che_unique_misses(alike, spec.batch_size, 300, sizes)[0].tobytes() == first.tobytes()
    again[:] = -1  # a fresh array: what is kept stays
    assert tu.che_unique_misses(alike, spec.batch_size, 300, mine)[0].tobytes() == (
        fresh_mine.tobytes()
    )
    tu.che_unique_misses(other, spec.batch_size, 300, sizes)
    tu.che_unique_misses(table, spec.batch_size, 301, sizes)
    assert len(tu._che_curves) == 3


@pytest.mark.parametrize(("command", "huge"), [("plan", False), ("generate", False), ("run", True)])
def test_plan_asks_numpy_for_no_huge_pages(command: str, huge: bool) -> None:
    """`replay plan` and `replay generate` start numpy without transparent huge pages
    (`replay._console`: each fault zeroes 2 MiB whole, 12-18 s of system CPU in
    meta-2021's day plan); other commands keep numpy's default."""
    code = (
        "import sys, types\n"
        f"sys.argv = ['replay', {command!r}, '--help']\n"
        # the console script up to the command itself (which ends the process)
        "cli = types.ModuleType('replay.cli')\n"
        "cli.console_main = lambda: None\n"
        "sys.modules['replay.cli'] = cli\n"
        "from replay import _console\n"
        "_console.main()\n"
        "from numpy._core import multiarray\n"
        "print('huge', multiarray._get_madvise_hugepage())\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "NUMPY_MADVISE_HUGEPAGE"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines()[-1] == f"huge {huge}"
