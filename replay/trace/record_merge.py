"""`replay record merge`: the traces that the ranks of one sharded training job recorded
(`replay.record` under `torch.distributed`) joined into the job's trace.

Each rank recorded its own part of every global batch, with global row ids (the ids its
model's input held, before TorchRec's input distribution), and the optimizer steps. The
job's batch b is the ranks' batches b together: per table, rank 0's lookups, then rank
1's, and so on (so a global batch cut into consecutive slices, one per rank, reads back
in its own order), and its batch size is the sum of the ranks'. A data-parallel step
updates the union of the ranks' rows, so the update sets are computed again from the
joined lookups at the steps the ranks recorded (`replay.trace.record_writer`).

Checks (one line each, `InputError`): every folder is a trace that `replay.record` wrote
under `torch.distributed`, one per rank 0..W-1 of one world, with the same tables (name,
rows, dimension), the same number of batches and the same steps; the output follows the
trace writer's rules (`OutputError`). Memory: one batch range of about
`ROW_GROUP_TARGET_LOOKUPS` lookups per rank at a time, and the writer's queue.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from replay.errors import InputError
from replay.trace.format import ROW_GROUP_TARGET_LOOKUPS
from replay.trace.reader import Trace, open_trace
from replay.trace.record_writer import RecordedTable, RecordWriter, steps_from_runs


def _rank_of(trace: Trace) -> tuple[int, int]:
    source = trace.manifest.get("source")
    where = trace.path
    if (
        trace.manifest.get("created_by") != "record"
        or not isinstance(source, dict)
        or source.get("kind") != "record"
    ):
        raise InputError(f"{where}: not a trace that replay.record wrote")
    rank, world = source.get("rank"), source.get("world_size")
    if type(rank) is not int or type(world) is not int or not 0 <= rank < world:
        raise InputError(
            f"{where}: recorded without torch.distributed (no rank in its manifest's source); "
            "there is nothing to merge"
        )
    return rank, world


def _tables(trace: Trace) -> list[RecordedTable]:
    where = trace.path
    workload = trace.manifest.get("workload") or {}
    frozen = {
        t.get("name"): bool(t.get("frozen", False))
        for t in workload.get("tables", [])
        if isinstance(t, dict)
    }
    out = []
    for t in trace.manifest["tables"]:
        dim = t.get("dim")
        if type(dim) is not int or not 1 <= dim <= 1 << 16:
            raise InputError(f"{where}: table {t['name']!r} has no dimension (dim) in its manifest")
        out.append(RecordedTable(t["name"], int(t["rows"]), dim, frozen.get(t["name"], False)))
    return out


def merge_records(rank_dirs: Sequence[str | Path], out: str | Path, *, force: bool = False) -> Path:
    """Join the ranks' recorded traces `rank_dirs` into one trace `out` (see the module)."""
    if not rank_dirs:
        raise InputError("no rank folders to merge")
    traces = [open_trace(Path(d)) for d in rank_dirs]
    ranks = [_rank_of(t) for t in traces]
    world = ranks[0][1]
    if any(w != world for _, w in ranks):
        raise InputError(
            "the folders come from worlds of different sizes: "
            + ", ".join(f"{t.path} ({w} ranks)" for t, (_, w) in zip(traces, ranks, strict=True))
        )
    seen = sorted(r for r, _ in ranks)
    if seen != list(range(world)):
        missing = sorted(set(range(world)) - set(seen))
        doubled = sorted({r for r in seen if seen.count(r) > 1})
        what = f"rank {doubled[0]} given twice" if doubled else f"rank {missing[0]} missing"
        raise InputError(f"the {world}-rank job needs one folder per rank: {what}")
    order = sorted(range(len(traces)), key=lambda i: ranks[i][0])
    traces = [traces[i] for i in order]
    first = traces[0]
    tables = _tables(first)
    steps = steps_from_runs(first.manifest["source"].get("steps", []), str(first.path))
    for trace in traces[1:]:
        if [t.to_dict() for t in _tables(trace)] != [t.to_dict() for t in tables]:
            raise InputError(f"{trace.path}: its tables differ from {first.path}'s")
        if trace.num_batches != first.num_batches:
            raise InputError(
                f"{trace.path}: {trace.num_batches:,} batches, {first.path} "
                f"{first.num_batches:,}; the ranks recorded different runs"
            )
        runs = trace.manifest["source"].get("steps", [])
        if steps_from_runs(runs, str(trace.path)) != steps:
            raise InputError(f"{trace.path}: its optimizer steps differ from {first.path}'s")
    source: dict[str, Any] = {
        "kind": "record-merge",
        "world_size": world,
        "ranks": [str(t.path) for t in traces],
    }
    writer = RecordWriter(out, tables, created_by="record", source=source, force=force)
    try:
        _join(traces, steps, writer)
        name = str((first.manifest.get("workload") or {}).get("name", "recorded"))
        return writer.close(workload_name=name)
    except BaseException:
        writer.abort()
        raise


def _join(traces: list[Trace], steps: list[int], writer: RecordWriter) -> None:
    batches = traces[0].num_batches
    per_batch = max(1, sum(t.num_lookups for t in traces) // max(batches, 1))
    span = max(1, ROW_GROUP_TARGET_LOOKUPS // per_batch)
    sizes = [int(t.manifest.get("batch_size", 1)) for t in traces]
    step_at = set(steps)
    for b0 in range(0, batches, span):
        b1 = min(b0 + span, batches)
        chunks = [t.lookups(b0, b1) for t in traces]
        cuts = [np.searchsorted(c.batch, np.arange(b0, b1 + 1)) for c in chunks]
        for b in range(b0, b1):
            parts = []
            for c, cut in zip(chunks, cuts, strict=True):
                lo, hi = int(cut[b - b0]), int(cut[b - b0 + 1])
                parts.append((c.table[lo:hi], c.row[lo:hi]))
            writer.add_batch(parts, sum(sizes))
            if b in step_at:
                writer.step()
