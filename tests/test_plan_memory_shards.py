"""`replay plan`'s memory estimate of the exact heads, of TorchRec's statistics per shard
and of exact curves over large row spaces (`replay.runs.plan_memory`): a plan keeps the
heads' counts, not the state they were read with; a cluster plan's per-shard statistics
grow with its shards; a short exact stream in a large row space keeps a map.

The estimates against measured peaks are benchmarks (`tests/test_meta_plan_bench.py`,
`tests/test_plan_dry_run_peaks.py`, `tests/test_big_plan.py`)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from replay.analysis.head import ExactHead, head_counts_bytes
from replay.analysis.head_pieces import RunsHead, runs_state_bytes
from replay.cli import main
from replay.engine.placement import shard_count
from replay.runs.plan_memory import SHARD_STATS_BYTES, _heads
from replay.system.spec import apply_overrides, build_system, load_system_data
from replay.workload.generator import resolve_workload
from replay.workload.onthefly import GeneratedTrace


def _blocks(head: ExactHead | RunsHead, rng: np.random.Generator, rows: int) -> int:
    blocks = 3
    for _ in range(blocks):
        if isinstance(head, ExactHead):
            head.start_block(warm=True)
            head.feed(rng.integers(0, rows, 5000, dtype=np.int64))
        else:
            head.start_block()
            for table in range(2):
                head.feed(table, rng.integers(0, rows, 2000, dtype=np.int64), rows)
    return blocks


@pytest.mark.parametrize("kind", ["exact", "runs"])
def test_a_head_gives_its_counts_and_lets_its_blocks_go(kind: str) -> None:
    rng = np.random.default_rng(7)
    rows, capacity = 900, 64
    head = ExactHead(rows, capacity) if kind == "exact" else RunsHead(capacity, rows, 4000)
    blocks = _blocks(head, rng, rows)
    counts = head.block_counts()
    taken = head.take_counts()
    assert np.array_equal(taken, counts) and taken.shape == (blocks, capacity + 2)
    assert head.blocks == []
    assert taken.nbytes == head_counts_bytes([capacity], blocks)


def test_runs_state_bytes_is_what_a_runs_head_holds() -> None:
    for rows, run in ((1, 1), (1000, 63), (16_173_309, 2_097_152)):
        head = RunsHead(8, rows, run)
        held = sum(a.nbytes for a in (head.last, head.bits, head.tree, head.sc))
        assert held == runs_state_bytes(rows, run)
        assert RunsHead(8, 0, 0, share=head).last is head.last  # a sharing head holds none


def test_the_heads_kept_are_their_counts_and_their_reading_is_the_curves_stage() -> None:
    rows = [10**6] * 4 + [3 * 10**7]
    kept, reading, how = _heads(rows, 10**6, 10**4, 2.0**-20, None)
    whole, tables, blocks = (int(x.replace(",", "")) for x in re.findall(r"[\d,]+", how)[:3])
    assert kept == 8 * (whole + 2 + tables + 2 * len(rows)) * blocks
    # read in pieces: two RunsHead states over the largest table's rows, where each of
    # many tables' maps would hold a window of 2^16 positions at least
    many = [10**5] * 200 + [10**6]
    _, maps, _ = _heads(many, 10**6, 10**4, 2.0**-20, None)
    _, in_pieces, _ = _heads(many, 10**6, 10**4, 2.0**-20, [5000] * 201)
    assert 2 * runs_state_bytes(10**6, 5000) <= in_pieces < maps / 2
    assert reading > 0


def _system(*sets: str) -> Any:
    base = ["cluster.nodes=2", "cluster.gpus_per_node=4"]
    return build_system(apply_overrides(load_system_data("hbm-lru")[0], [*base, *sets]))


@pytest.mark.parametrize(
    "sharding",
    ["row-wise", "table-row-wise", "column-wise", "data-parallel", "table-wise", "file", "auto"],
)
def test_the_shards_counted_are_the_placements(sharding: str, tmp_path: Path) -> None:
    from replay.engine.placement import resolve_placement

    spec = resolve_workload("tiny").with_overrides(batches=20)
    rows = [int(t.rows) for t in spec.tables]
    sets = [f"cluster.sharding={sharding}"]
    if sharding == "file":  # a row-wise plan written out and read back
        plan = resolve_placement(_system("cluster.sharding=row-wise"), GeneratedTrace(spec))
        path = tmp_path / "sharding.json"
        path.write_text(json.dumps(plan.placement.plan.to_json()))
        sets = [f"cluster.sharding_file={path}"]
    system = _system(*sets)
    placed = resolve_placement(system, GeneratedTrace(spec)).placement
    real = sum(1 for s in placed.shards if s.rows > 0)
    counted = shard_count(system, [t.name for t in spec.tables], rows, int(spec.embedding_dim))
    if sharding == "auto":  # the sharder's splits are its own answer, not the estimate's
        assert counted == len(rows) <= real
    else:
        assert counted == real
    if sharding in ("row-wise", "data-parallel", "file"):
        assert real > 2 * len(rows)


def test_the_dry_run_counts_torchrecs_statistics_per_shard(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    argv = ["plan", "--workload", "tiny", "--system", "hbm-lru", "--cache-budget", "1MiB"]
    argv += ["--set", "cluster.nodes=2", "--set", "cluster.sharding=row-wise"]
    main([*argv, "--cluster-mtbf", "6h", "--out", str(tmp_path / "p"), "--dry-run"])
    found = re.search(r"TorchRec's statistics of ([\d,]+) shards", capsys.readouterr().out)
    assert found
    spec = resolve_workload("tiny")
    system = build_system(apply_overrides(load_system_data("hbm-lru")[0], argv[8::2]))
    names, rows = [t.name for t in spec.tables], [int(t.rows) for t in spec.tables]
    counted = shard_count(system, names, rows, int(spec.embedding_dim))
    assert int(found.group(1).replace(",", "")) == counted
    assert SHARD_STATS_BYTES >= 4300  # meta-2021's measured 4.3 KB a shard at least


def test_more_bins_a_shard_grow_its_stage(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """tiny on 128 GPUs, every table row-wise (377 shards): 100 -> 20,000 bins measured
    563 -> 730 MiB of peak RSS; the estimate 570 -> 742 MiB."""
    argv = ["plan", "--workload", "tiny", "--system", "hbm-lru", "--cache-budget", "1MiB"]
    argv += ["--set", "cluster.nodes=16", "--set", "cluster.sharding=row-wise"]
    argv += ["--cluster-mtbf", "6h", "--out", str(tmp_path / "p"), "--dry-run"]
    said = []
    for bins in (100, 20_000):
        main([*argv, "--torchrec-bins", str(bins)])
        said.append(capsys.readouterr().out)
    assert "then TorchRec's statistics per shard)" in said[1]
    mib = [float(re.search(r"about ([\d.]+) MiB", s).group(1)) for s in said]  # type: ignore[union-attr]  # said in MiB
    assert 563 <= mib[0] <= 1.25 * 563 and 730 <= mib[1] <= 1.25 * 730, mib


def test_an_exact_curve_over_a_large_row_space_counts_the_rows_seen() -> None:
    """The exact state is a map of the rows seen where the row space is large against the
    lookups (`dense_rows`): the estimate counts it so, not 4 B for every row."""
    from replay._memory import mrc_estimate
    from replay.analysis.stack import dense_rows

    rows, lookups = [187_767_399], 2_662_400  # docs/torchrec.md's plan
    assert not dense_rows(rows[0], lookups)
    dense = mrc_estimate(rows, lookups, None)
    mapped = mrc_estimate(rows, lookups, None, dense=False)
    assert dict(dense.parts)["row state"] == 4 * rows[0]
    assert dict(mapped.parts)["rows seen"] == lookups * (2 * 4 + 4 * (8 + 4))
    assert mapped.total < dense.total / 2
