"""`replay inspect` table group by table group (`replay.analysis.table_major`), the path
of a row space above `INSPECT_TABLE_MAJOR_ROWS` (meta-2021). These tests force it on
small workloads with a tiny threshold and tiny groups and compare with the one pass over
the trace: the `inspect --json` output byte for byte, on the fly and from a trace folder,
over several batches (consecutive-batch reuse, rows touched), with whole batches and with
batches cut in pieces of tables."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _pieces_helpers import cut_in_pieces, cycled_spec

from replay import _memory
from replay.analysis import stats
from replay.analysis.stats import inspect_trace
from replay.cli import main
from replay.errors import TraceError
from replay.trace.writer import write_trace_from_arrays
from replay.workload.onthefly import GeneratedTrace
from replay.workload.spec import WorkloadSpec, spec_to_toml

GROUP_ROWS = 3500  # rows of a group at most: 4 to 6 groups of the spec's tables


def small_spec(batches: int = 10) -> WorkloadSpec:
    rows = (50, 3000, 200, 10_000, 7)  # small and large tables (one above a group)
    return cycled_spec("tm", rows, tables=11, batches=batches, batch_size=16, seed=5, alpha=1.1)


def force(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Forces the table-major path (threshold 10 rows, groups of <= GROUP_ROWS rows);
    returns the sizes of the inspectors' row states, as they are made."""
    sizes: list[int] = []
    monkeypatch.setattr(_memory, "INSPECT_TABLE_MAJOR_ROWS", 10)
    monkeypatch.setattr(_memory, "INSPECT_GROUP_ROWS", GROUP_ROWS)
    made = stats.Inspector.__init__

    def init(self: stats.Inspector, *args: Any, **kwargs: Any) -> None:
        made(self, *args, **kwargs)
        sizes.append(len(self.state))

    monkeypatch.setattr(stats.Inspector, "__init__", init)
    return sizes


def cli_json(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["inspect", *args, "--json"]) == 0
    return capsys.readouterr().out


def check_groups(sizes: list[int], spec: WorkloadSpec, pieces: bool = False) -> None:
    """Several groups were taken, each a state of its own rows only: at most
    GROUP_ROWS, or one table (one piece of a batch where batches are cut) alone."""
    rows = [t.rows for t in spec.tables]
    units = GeneratedTrace(spec).pieces if pieces else ()
    largest = max(sum(rows[t0:t1]) for t0, t1 in units or [(t, t + 1) for t in range(len(rows))])
    assert len(sizes) >= 4
    assert sum(sizes) == sum(rows)
    assert max(sizes) <= max(GROUP_ROWS, largest) < sum(rows)


@pytest.mark.parametrize("pieces", [False, True], ids=["whole", "pieces"])
def test_on_the_fly_equals_one_pass(
    pieces: bool,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    spec = small_spec()
    path = tmp_path / "spec.toml"
    path.write_text(spec_to_toml(spec))
    if pieces:
        cut_in_pieces(monkeypatch)
        assert GeneratedTrace(spec).pieces
    args = ["--workload", str(path)]
    want = cli_json(args, capsys)
    sizes = force(monkeypatch)
    got = cli_json(args, capsys)
    check_groups(sizes, spec, pieces)
    assert got == want
    result = json.loads(got)
    assert result["consecutive_reuse_mean"] > 0 and len(result["touched_curve"]) > 2
    assert result["updates"] == GeneratedTrace(spec, threads=1).num_updates


@pytest.mark.parametrize("pieces", [False, True], ids=["whole", "pieces"])
def test_trace_folder_equals_one_pass(
    pieces: bool,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from replay.trace.reader import open_trace
    from replay.workload.generator import generate

    spec = small_spec(batches=7)
    if pieces:
        cut_in_pieces(monkeypatch)
    trace = generate(spec, tmp_path / "trace", workers=1)
    assert bool(open_trace(trace).pieces) == pieces
    want = cli_json([str(trace)], capsys)
    force(monkeypatch)
    read: list[int] = []
    groups = open_trace(trace).iter_table_lookups

    def counted(self: Any, tables: tuple[int, int]) -> Any:
        for chunk in groups.__func__(self, tables):  # type: ignore[attr-defined]
            read.append(len(chunk))
            yield chunk

    monkeypatch.setattr(type(open_trace(trace)), "iter_table_lookups", counted)
    got = cli_json([str(trace)], capsys)
    assert got == want
    lookups = json.loads(got)["lookups"]
    if pieces:  # a group reads its pieces' row groups only: every lookup read once
        assert sum(read) == lookups
    else:  # row groups of every table: read once per group
        assert sum(read) >= 4 * lookups


def test_inspect_trace_equals_one_pass_with_its_state_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spec = small_spec(batches=12)
    want = inspect_trace(GeneratedTrace(spec, threads=2), batch_reuse=True)
    grouped = force(monkeypatch)
    seen: list[tuple[int, int]] = []
    got = inspect_trace(
        GeneratedTrace(spec, threads=2),
        batch_reuse=True,
        on_progress=lambda done, total: seen.append((done, total)),
    )
    check_groups(grouped, spec)
    assert json.dumps(got) == json.dumps(want)
    assert seen[-1][0] == seen[-1][1] == len(grouped) * spec.batches


TABLES = [("a", 5), ("b", 9), ("c", 4)]


def tiny(tmp_path: Path, batch: list[int], table: list[int], row: list[int]) -> Path:
    return write_trace_from_arrays(
        tmp_path / "t",
        tables=TABLES,
        batch=np.array(batch, dtype=np.uint32),
        table=np.array(table, dtype=np.uint16),
        row=np.array(row, dtype=np.uint32),
        batch_size=2,
    )


def test_errors_are_trace_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Out-of-range rows are found as in the one pass (named by the trace's table
    numbers), tables out of range too; the CLI says so in one line, exit 2."""
    monkeypatch.setattr(_memory, "INSPECT_TABLE_MAJOR_ROWS", 10)
    monkeypatch.setattr(_memory, "INSPECT_GROUP_ROWS", 6)
    good = tiny(tmp_path / "good", [0, 0, 1, 1, 2], [0, 2, 1, 2, 1], [1, 3, 8, 3, 2])
    with pytest.MonkeyPatch.context() as m:
        m.setattr(_memory, "INSPECT_TABLE_MAJOR_ROWS", 1 << 40)
        want = inspect_trace(good, batch_reuse=True)
    assert inspect_trace(good, batch_reuse=True) == want
    bad_row = tiny(tmp_path / "row", [0, 0, 1], [0, 2, 1], [1, 3, 8])
    manifest = json.loads((bad_row / "manifest.json").read_text())
    manifest["tables"][2]["rows"] = 3
    (bad_row / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(TraceError, match=r"row id 3 is out of range \(table 2 'c' has 3 rows\)"):
        inspect_trace(bad_row)
    assert main(["inspect", str(bad_row), "--json", "--no-verify"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    bad_table = tiny(tmp_path / "table", [0, 0, 1], [0, 2, 1], [1, 3, 8])
    manifest = json.loads((bad_table / "manifest.json").read_text())
    manifest["tables"].pop()
    (bad_table / "manifest.json").write_text(json.dumps(manifest))
    # the footer's counts of the row group (3 tables) say it before its rows are read
    with pytest.raises(TraceError, match=r"counts do not match its 3 rows of 2 tables"):
        inspect_trace(bad_table)


def test_groups_and_estimate() -> None:
    """Groups are consecutive whole pieces (or tables) of at most the group's rows, one
    at least; the estimate counts the largest group's state, not the row space's."""
    rows = [5, 9, 4, 30, 2, 2]
    assert _memory.inspect_groups(rows, (), 14) == [(0, 2), (2, 3), (3, 4), (4, 6)]
    assert _memory.inspect_groups(rows, ((0, 3), (3, 4), (4, 6)), 14) == [
        (0, 3),
        (3, 4),
        (4, 6),
    ]
    big = [1 << 30] * 3 + [1 << 29] * 2
    one = _memory.inspect_estimate(big[:1], 1 << 20)
    grouped = _memory.inspect_estimate(big, 1 << 20, batches=10)
    states = {name: size for name, size in grouped.parts}
    assert states["row state"] == 1 << 30 == dict(one.parts)["row state"]
    assert states["per-batch sums"] == 10 * _memory.INSPECT_BATCH_SUMS_BYTES
    assert "4 groups of tables" in grouped.detail
