"""Batches streamed in pieces of tables (`replay.trace.format.plan_pieces`): a batch too
large for a row group (meta-2021: 887 M lookups) is generated, replayed and inspected
piece by piece. Tables never share a row, so the results are those of whole batches:
these tests force pieces on small workloads (a tiny row-group target) and compare with
the normal path, byte for byte where the layout is the same."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from _pieces_helpers import cut_in_pieces, cycled_spec

import replay.trace.format as fmt
from replay.engine.replay import replay_trace, streams_pieces
from replay.engine.systems import resolve_system
from replay.trace.format import plan_pieces
from replay.trace.stream import iter_batch_ranges
from replay.workload.onthefly import GeneratedTrace
from replay.workload.spec import WorkloadSpec, spec_from_dict

# rows and pooling per table, cycled: small and large tables, 1-3 lookups per sample
_ROWS = (50, 3000, 200, 10_000, 7)


def small_spec(tables: int = 9, batches: int = 12, batch_size: int = 16) -> WorkloadSpec:
    return cycled_spec(
        "pieces", _ROWS, tables=tables, batches=batches, batch_size=batch_size, seed=3
    )


@pytest.fixture
def tiny_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    """Row groups of ~60 lookups; batches of more than 120 are cut into pieces."""
    cut_in_pieces(monkeypatch)


def test_plan_pieces_cuts_between_tables_only_when_large() -> None:
    target = fmt.ROW_GROUP_TARGET_LOOKUPS
    assert plan_pieces([target // 4] * 4) == ()  # fits a row group: whole batches
    assert plan_pieces([target] * 3, accumulate_batches=2) == ()  # windows are never cut
    big = [target // 2, target // 2, target // 3, 3 * target, target // 4]
    assert plan_pieces(big) == ((0, 2), (2, 3), (3, 4), (4, 5))
    looks = [int(x) for x in np.random.default_rng(1).integers(1, target, 200)]
    pieces = plan_pieces(looks)
    assert pieces[0][0] == 0 and pieces[-1][1] == len(looks)
    assert all(a[1] == b[0] for a, b in itertools.pairwise(pieces))
    assert all(t1 - t0 == 1 or sum(looks[t0:t1]) <= target for t0, t1 in pieces)


def _whole_ranges(g: GeneratedTrace, **kw):  # type: ignore[no-untyped-def]
    return list(iter_batch_ranges(g, read_ahead=0, **kw))


@pytest.mark.parametrize("threads", [1, 2])
def test_pieces_hold_the_batches_lookups_and_updates(tiny_pieces: None, threads: int) -> None:
    spec = small_spec()
    g = GeneratedTrace(spec, threads=threads)
    assert g.pieces and g.piece_lookups <= 3 * spec.batch_size
    whole = _whole_ranges(g, with_distinct=True)  # without `pieces`: whole batches
    assert all(r.tables is None and r.ends_batch for r in whole)
    for derived in (False, True):
        parts = list(
            iter_batch_ranges(
                g, read_ahead=0, with_distinct=True, pieces=True, updates_from_lookups=derived
            )
        )
        assert all(r.batches == 1 and r.tables is not None for r in parts)
        for b in range(spec.batches):
            mine = [r for r in parts if r.batch_start == b]
            assert [r.tables for r in mine] == list(g.pieces)
            assert [r.ends_batch for r in mine] == [False] * (len(mine) - 1) + [True]
            w = next(r for r in whole if r.batch_start <= b < r.batch_stop)
            i = b - w.batch_start
            keys = w.keys[w.bounds[i] : w.bounds[i + 1]]
            assert np.array_equal(np.concatenate([r.keys for r in mine]), keys)
            assert w.distinct is not None
            assert sum(int(r.distinct[0]) for r in mine) == w.distinct[i]  # type: ignore[index]
            ukeys = w.update_keys[w.update_bounds[i] : w.update_bounds[i + 1]]
            assert sum(int(r.update_bounds[-1]) for r in mine) == len(ukeys)
            if not derived:
                assert np.array_equal(np.concatenate([r.update_keys for r in mine]), ukeys)


@pytest.mark.parametrize("capacity_bytes", [1200, 4000, 100_000])
def test_lru_replay_in_pieces_equals_whole_batches(
    monkeypatch: pytest.MonkeyPatch, capacity_bytes: int
) -> None:
    """summary.json's dict and every per-batch column, with caches smaller than a piece,
    than a batch, and larger than the workload."""
    spec = small_spec(batches=20)
    system = resolve_system("hbm-lru", [f"policy.capacity_bytes={capacity_bytes}"])
    whole = replay_trace(GeneratedTrace(spec, threads=2), system)
    cut_in_pieces(monkeypatch)
    g = GeneratedTrace(spec, threads=2)
    assert streams_pieces(g, system)
    calls: list[int] = []
    cut = replay_trace(g, system, on_progress=lambda done, _: calls.append(done))
    assert calls == list(range(1, spec.batches + 1))  # once per batch, at its last piece
    assert json.dumps(cut.summary, sort_keys=True) == json.dumps(whole.summary, sort_keys=True)
    assert whole.columns.keys() == cut.columns.keys()
    for name, column in whole.columns.items():
        assert np.array_equal(column, cut.columns[name]), name


def test_pieces_only_where_every_consumer_adds_them_up(tiny_pieces: None) -> None:
    g = GeneratedTrace(small_spec(), threads=1)
    assert streams_pieces(g, resolve_system("hbm-lru"))
    assert not streams_pieces(g, resolve_system("hbm-lfu"))  # no piece support: whole
    frozen = small_spec().to_dict()
    frozen["tables"][0]["frozen"] = True  # update rows are not the distinct lookups
    assert not streams_pieces(GeneratedTrace(spec_from_dict(frozen)), resolve_system("hbm-lru"))


def test_inspect_in_pieces_equals_whole_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """`replay inspect`'s result (statistics and reuse within a batch in Meta's bins),
    identical whether the batches come whole or in pieces; its update count (each
    batch's distinct lookups, counted in the pass) that of the generated update rows."""
    from replay.analysis.stats import inspect_trace

    spec = small_spec(batches=10)
    whole = inspect_trace(GeneratedTrace(spec, threads=2), batch_reuse=True)
    cut_in_pieces(monkeypatch)
    g = GeneratedTrace(spec, threads=2)
    assert g.pieces
    seen: list[int] = []
    cut = inspect_trace(g, batch_reuse=True, on_progress=lambda done, _: seen.append(done))
    assert json.dumps(cut, sort_keys=True) == json.dumps(whole, sort_keys=True)
    assert seen == list(range(1, spec.batches + 1))
    assert cut["updates"] == GeneratedTrace(spec, threads=1).num_updates > 0


@pytest.mark.parametrize("list_min", [1, 3, 1 << 16])
def test_inspector_lists_that_overflow_are_swept(
    monkeypatch: pytest.MonkeyPatch, list_min: int
) -> None:
    """The per-batch lists of first-looked-up rows are capped (`_list_cap`); a batch with
    more rows has its tags cleared by a sweep of the state: the same statistics."""
    from replay import _memory
    from replay.analysis import stats

    rng = np.random.default_rng(11)
    rows = [40, 7, 300]
    n = 3000
    batch = np.sort(rng.integers(0, 25, n)).astype(np.uint32)
    table = rng.integers(0, 3, n).astype(np.uint16)
    order = np.lexsort((table, batch))
    batch, table = batch[order], table[order]
    row = (rng.zipf(1.3, n) % np.array(rows)[table]).astype(np.uint32)
    want = stats.inspect_arrays(batch, table, row, rows, num_batches=26, min_lookups=1 << 30)
    monkeypatch.setattr(_memory, "INSPECT_LIST_MIN", list_min)
    monkeypatch.setattr(_memory, "INSPECT_LIST_DIVISOR", 1 << 40)
    for min_lookups in (1, 97, 1 << 30):
        got = stats.inspect_arrays(batch, table, row, rows, num_batches=26, min_lookups=min_lookups)
        assert got == want
    ref = stats.inspect_reference(batch, table, row, rows, num_batches=26)
    assert 0 < want["consecutive_reuse_mean"] == pytest.approx(ref["consecutive_reuse_mean"])
    assert want["distinct_rows"] == ref["distinct_rows"]


def _files(path: Path) -> dict[str, bytes]:
    return {str(f.relative_to(path)): f.read_bytes() for f in sorted(path.rglob("*.parquet"))}


def test_generated_trace_in_pieces_reads_back_as_the_whole_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`replay generate` writes a row group per piece; the reader gives the same
    lookups, update rows, replay and statistics as a trace of whole batches, in pieces
    or whole; the bytes do not depend on the workers."""
    from replay.analysis.stats import inspect_trace
    from replay.trace.reader import open_trace
    from replay.workload.generator import generate

    spec = small_spec(batches=10)
    whole = open_trace(generate(spec, tmp_path / "whole", workers=2))
    assert not whole.pieces
    cut_in_pieces(monkeypatch)
    cut = open_trace(generate(spec, tmp_path / "cut", workers=2))
    one = generate(spec, tmp_path / "one", workers=1)
    assert _files(one) == _files(cut.path)
    g = GeneratedTrace(spec, threads=1)
    assert cut.pieces == g.pieces and cut.piece_lookups == g.piece_lookups > 0
    assert cut.manifest["layout"]["batch_pieces"] == [list(p) for p in g.pieces]
    for kind in ("lookups", "updates"):
        a, b = getattr(whole, kind)(), getattr(cut, kind)()
        for name in ("batch", "table", "row"):
            assert np.array_equal(getattr(a, name), getattr(b, name)), (kind, name)
    # the replay stream, in pieces (as on the fly) and whole (as the whole trace)
    for derived in (False, True):
        kw = {"read_ahead": 0, "with_distinct": True, "updates_from_lookups": derived}
        mine = list(iter_batch_ranges(cut, pieces=True, **kw))
        fly = list(iter_batch_ranges(g, pieces=True, **kw))
        assert [(r.batch_start, r.tables, r.ends_batch) for r in mine] == [
            (r.batch_start, r.tables, r.ends_batch) for r in fly
        ]
        for x, y in zip(mine, fly, strict=True):
            assert np.array_equal(x.keys, y.keys) and np.array_equal(x.distinct, y.distinct)
        assert sum(int(r.update_bounds[-1]) for r in mine) == whole.num_updates
        w = list(iter_batch_ranges(whole, **kw))
        c = list(iter_batch_ranges(cut, **kw))  # pieces not asked: whole batches
        assert all(r.tables is None for r in c)
        assert np.array_equal(
            np.concatenate([r.keys for r in w]), np.concatenate([r.keys for r in c])
        )
        assert np.array_equal(
            np.concatenate([r.update_keys for r in w]), np.concatenate([r.update_keys for r in c])
        )
    # replay (with the statistics from its own pass) and inspect
    system = resolve_system("hbm-lru", ["policy.capacity_bytes=4000"])
    assert streams_pieces(cut, system)
    a = replay_trace(whole, system, inspect=True)
    b = replay_trace(cut, system, inspect=True)
    assert json.dumps(a.summary, sort_keys=True) == json.dumps(b.summary, sort_keys=True)
    for name, column in a.columns.items():
        assert np.array_equal(column, b.columns[name]), name
    assert a.workload is not None and b.workload is not None
    assert {**a.workload, "trace": ""} == {**b.workload, "trace": ""}
    x = inspect_trace(whole, batch_reuse=True)
    y = inspect_trace(cut, batch_reuse=True)
    assert {**x, "trace": ""} == {**y, "trace": ""}
