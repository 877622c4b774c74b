"""Atomic writing of trace folders.

A trace is built in a partial folder beside the target (`.NAME.partial/`) that holds a
plan file; each part file is written under a temporary name and renamed when complete.
When every part is done the manifest is written and the partial folder is renamed to the
target, so a folder named like the target is always a whole trace. A run killed part-way
leaves the partial folder: `--resume` keeps its complete parts (same plan, same bytes)
and writes the rest; `--force` starts over.

The writer claims the target (`replay._output.claim_output`) before it looks at or
deletes a partial folder: two `ingest --force` into one folder each deleted the other's
parts and left a trace that failed its own checksums. The claim ends when `finish`
renames the folder into place or `abort` removes it (or the process ends: an interrupted
`generate` keeps its partial folder for --resume).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from replay import _arrow
from replay._faults import kill_point
from replay._files import MANIFEST, STATE_JSON, read_bytes
from replay._output import claim_output, partial_path, release_output
from replay._schema_stamp import stamp
from replay.errors import OutputError, ReplayError, opt
from replay.trace.counts import COUNTS_KEY, encode_counts, group_counts
from replay.trace.format import (
    KINDS,
    LOOKUPS_DIR,
    MANIFEST_NAME,
    PARQUET_WRITE_OPTIONS,
    UPDATES_DIR,
    build_manifest,
    lookups_schema,
    part_name,
    plan_layout,
    row_dtype_for,
    updates_schema,
    write_json_atomic,
)
from replay.trace.updates import update_sets

PLAN_NAME = ".plan.json"


def sha256_file(path: Path) -> str:
    # file_digest reads into one reused 256 KiB buffer: reading 4 MiB chunks made a fresh
    # bytes object (new pages to fault in) per chunk, 8,000 faults per 141 MB verified
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _is_replaceable(out: Path) -> bool:
    """A folder --force may replace: empty, or a replay trace and nothing else.

    A trace is `manifest.json` (a JSON object with `format_version` and `files`), and
    `lookups/` and `updates/` holding only the part files the manifest lists. A folder
    that merely looks like one (a `{}` manifest, a stray file in `lookups/`, the user's
    `NOTES.md` beside the parts) is not replaced: --force must never delete what replay
    did not write.
    """
    entries = {e.name: e for e in out.iterdir()}
    if not entries:
        return True
    if MANIFEST_NAME not in entries or not set(entries) <= {MANIFEST_NAME, *KINDS}:
        return False
    try:
        manifest = json.loads(read_bytes(entries[MANIFEST_NAME], MANIFEST))
        listed = {str(entry["path"]) for kind in KINDS for entry in manifest["files"].get(kind, [])}
        valid = isinstance(manifest, dict) and isinstance(manifest["format_version"], int)
    except (OSError, ValueError, TypeError, KeyError, AttributeError, RecursionError):
        return False
    except ReplayError:  # a FIFO, a device or a huge file: replay wrote no such manifest
        return False
    if not valid:
        return False
    for kind in KINDS:
        folder = entries.get(kind)
        if folder is None:
            continue
        if folder.is_symlink() or not folder.is_dir():
            return False
        for member in folder.iterdir():
            if member.is_symlink() or not member.is_file():
                return False
            if f"{kind}/{member.name}" not in listed:
                return False
    return True


def write_parts(
    partial: Path,
    index: int,
    schemas: dict[str, pa.Schema],
    groups: Iterable[dict[str, pa.Table]],
) -> dict[str, dict[str, Any]]:
    """`TraceFolderWriter.write_parts` into the partial folder `partial` (also what a
    worker process that holds no writer calls)."""
    finals = {kind: partial / kind / part_name(index) for kind in schemas}
    tmps = {kind: f.with_name(f".{f.name}.tmp") for kind, f in finals.items()}
    rows = dict.fromkeys(schemas, 0)
    writers = {
        kind: pq.ParquetWriter(tmps[kind], schema, **PARQUET_WRITE_OPTIONS)
        for kind, schema in schemas.items()
    }
    # each row group's (batch, table) counts go into the footer (`replay.trace.counts`),
    # unless a group is not sorted by (batch, table): then the file has none
    counted: dict[str, list[tuple[int, np.ndarray]] | None] = {kind: [] for kind in schemas}
    try:
        for group in groups:
            for kind, table in group.items():
                writers[kind].write_table(table, row_group_size=max(table.num_rows, 1))
                rows[kind] += table.num_rows
                kept = counted[kind]
                if kept is not None:
                    counts = group_counts(
                        _arrow.to_numpy(table.column("batch")),
                        _arrow.to_numpy(table.column("table")),
                    )
                    if counts is None:
                        counted[kind] = None
                    else:
                        kept.append(counts)
            kill_point("trace:row-group")
        for kind, kept in counted.items():
            if kept is not None:
                writers[kind].add_key_value_metadata({COUNTS_KEY: encode_counts(kept)})
    finally:
        for w in writers.values():
            w.close()
    entries = {}
    for kind in schemas:
        digest = sha256_file(tmps[kind])
        tmps[kind].replace(finals[kind])
        entries[kind] = {
            "path": f"{kind}/{finals[kind].name}",
            "rows": rows[kind],
            "sha256": digest,
        }
        kill_point("trace:part")
    return entries


class TraceFolderWriter:
    """Builds a trace folder in `.NAME.partial/` and moves it into place when done.

    `plan` is any JSON object that fixes the content (the spec and layout); a resumed run
    must present the same plan, so finished parts are only reused for identical output.
    """

    def __init__(
        self, out: Path, plan: dict[str, Any], *, force: bool, resume: bool | None
    ) -> None:
        """`resume=None`: the command cannot resume (errors do not offer --resume)."""
        self.out = Path(out)
        self.partial = partial_path(self.out)
        self.plan = plan
        self.resumed = False
        claim_output(self.out)  # before the partial folder is looked at, let alone deleted
        try:
            self._start(force=force, resume=resume)
        except BaseException:
            release_output(self.out, failed=True)
            raise

    def _start(self, *, force: bool, resume: bool | None) -> None:
        self._check_target(force=force, resume=resume)
        if self.partial.exists():
            if resume and self._plan_matches():
                self.resumed = True
            elif self.partial.is_dir() and not self.partial.is_symlink():
                shutil.rmtree(self.partial)
            else:  # a file, a link or a FIFO in its place (`rmtree` of a FIFO waits on it)
                self.partial.unlink()
        if not self.resumed:
            try:
                self.partial.mkdir(parents=True)
            except OSError as exc:
                raise OutputError(f"{self.out}: cannot create output ({exc.strerror})") from None
            write_json_atomic(self.partial / PLAN_NAME, self.plan)
        for kind in KINDS:
            (self.partial / kind).mkdir(exist_ok=True)
            for leftover in (self.partial / kind).glob(".*.tmp"):
                leftover.unlink()

    def _check_target(self, *, force: bool, resume: bool | None) -> None:
        out = self.out
        if out.exists() and not out.is_dir():
            raise OutputError(f"{out}: exists and is not a folder")
        if out.exists() and any(out.iterdir()):
            if not force:
                raise OutputError(
                    f"{out}: already exists and is not empty (use {opt('--force', 'force=True')} "
                    "to replace it)"
                )
            if not _is_replaceable(out):
                raise OutputError(
                    f"{out}: holds other files, not a replay trace; replay replaces only "
                    "a trace or an empty folder"
                )
        if self.partial.exists() and not (force or resume):
            how = (
                f"finish it with {opt('--resume', 'resume=True')} or " if resume is not None else ""
            )
            raise OutputError(
                f"{out}: an interrupted run (or one still running) left {self.partial.name}; "
                f"{how}start over with {opt('--force', 'force=True')}"
            )
        parent = out.parent if out.parent != Path("") else Path(".")
        probe = parent
        while not probe.exists():
            probe = probe.parent
        if not probe.is_dir():
            raise OutputError(f"{out}: cannot write there ({probe} is a file, not a folder)")
        if not os.access(probe, os.W_OK | os.X_OK):
            raise OutputError(f"{out}: cannot write there (permission denied)")

    def _plan_matches(self) -> bool:
        plan_file = self.partial / PLAN_NAME
        try:
            old = json.loads(read_bytes(plan_file, STATE_JSON))
        except (OSError, ValueError, RecursionError, ReplayError):  # as if not written
            return False
        if old != json.loads(json.dumps(self.plan)):
            raise OutputError(
                f"{self.out}: {opt('--resume', 'resume=True')} needs the same inputs as the "
                f"interrupted run (its plan is in {plan_file})"
            )
        return True

    def done_part(self, kind: str, index: int) -> dict[str, Any] | None:
        """The manifest entry of a part a previous run completed, or None."""
        path = self.partial / kind / part_name(index)
        # a regular file only: a FIFO put there would block the Parquet reader (the part
        # is written again, renamed over it)
        if not self.resumed or not path.is_file():
            return None
        try:
            rows = pq.ParquetFile(path).metadata.num_rows
        except (OSError, pa.ArrowException):
            path.unlink()
            return None
        return {"path": f"{kind}/{path.name}", "rows": rows, "sha256": sha256_file(path)}

    def write_part(
        self, kind: str, index: int, schema: pa.Schema, tables: Iterable[pa.Table]
    ) -> dict[str, Any]:
        """Write one part file, one Parquet row group per table; return its manifest entry."""
        return self.write_parts(index, {kind: schema}, ({kind: t} for t in tables))[kind]

    def write_parts(
        self,
        index: int,
        schemas: dict[str, pa.Schema],
        groups: Iterable[dict[str, pa.Table]],
    ) -> dict[str, dict[str, Any]]:
        """Write part `index` of several kinds at once from a stream of row groups.

        Each item of `groups` maps a kind to the table of one row group. Returns the
        manifest entries (path, rows, sha256) by kind. Files appear under their final
        names only when complete.
        """
        return write_parts(self.partial, index, schemas, groups)

    def finish(self, manifest: dict[str, Any]) -> Path:
        """Write the manifest and move the finished folder into place."""
        write_json_atomic(self.partial / MANIFEST_NAME, stamp("trace-manifest", manifest))
        kill_point("trace:manifest")
        (self.partial / PLAN_NAME).unlink()
        kill_point("trace:before-rename")
        old = self.out.parent / f".{self.out.name}.old"
        if old.exists():
            shutil.rmtree(old)
        if self.out.exists():
            self.out.replace(old)
            self.partial.replace(self.out)
            shutil.rmtree(old)
        else:
            self.out.parent.mkdir(parents=True, exist_ok=True)
            self.partial.replace(self.out)
        release_output(self.out, failed=False)
        return self.out

    def abort(self) -> None:
        """Remove the partial folder (after an error, not after a kill), and the folders
        made for it."""
        shutil.rmtree(self.partial, ignore_errors=True)
        release_output(self.out, failed=True)


def write_trace_from_arrays(
    out: str | Path,
    *,
    tables: list[tuple[str, int]],
    batch: np.ndarray,
    table: np.ndarray,
    row: np.ndarray,
    batch_size: int,
    workload: dict[str, Any] | None = None,
    frozen: list[bool] | None = None,
    accumulate_batches: int = 1,
    created_by: str = "arrays",
    source: dict[str, Any] | None = None,
    force: bool = False,
) -> Path:
    """Write a whole trace from in-memory lookups (sorted by batch, then table).

    Update sets follow `replay.trace.updates`. Meant for small traces: tests, examples,
    and tools that already hold the lookups; `generate` and `ingest` stream instead.
    """
    out = Path(out)
    batch = np.asarray(batch, dtype=np.uint32)
    table = np.asarray(table, dtype=np.uint16)
    rows = np.array([r for _, r in tables], dtype=np.int64)
    row_dtype = row_dtype_for(int(rows.max()))
    row = np.asarray(row).astype(row_dtype)
    if len(batch) and np.any(np.diff(batch.astype(np.int64) * 65536 + table) < 0):
        raise ValueError("lookups must be sorted by (batch, table)")
    if len(table) and (int(table.max()) >= len(rows) or np.any(row >= rows[table])):
        # the update-set kernel indexes per-row state by these ids
        raise ValueError("a table index or row id is outside its table")
    num_batches = int(batch[-1]) + 1 if len(batch) else 0
    lookups_per_batch = max(1, len(row) // max(num_batches, 1))
    layout = plan_layout(lookups_per_batch, accumulate_batches)
    frozen_arr = np.zeros(len(tables), dtype=bool) if frozen is None else np.array(frozen)
    plan = {"created_by": created_by, "layout": layout, "batches": num_batches}
    writer = TraceFolderWriter(out, plan, force=force, resume=None)
    files: dict[str, list[dict[str, Any]]] = {kind: [] for kind in KINDS}
    per_file = layout["batches_per_file"]
    per_group = layout["batches_per_row_group"]
    try:
        for index, start in enumerate(range(0, num_batches, per_file)):
            stop = min(start + per_file, num_batches)
            groups = []
            for g0 in range(start, stop, per_group):
                g1 = min(g0 + per_group, stop)
                lo, hi = np.searchsorted(batch, [g0, g1])
                groups.append((g0, g1, batch[lo:hi], table[lo:hi], row[lo:hi]))
            look_tables = [
                _arrow.table({"batch": b, "table": t, "row": r}, lookups_schema(row_dtype))
                for _, _, b, t, r in groups
            ]
            upd_tables = []
            for g0, g1, b, t, r in groups:
                ub, ut, ur, uc = update_sets(b, t, r, g0, g1, rows, frozen_arr, accumulate_batches)
                upd_tables.append(
                    _arrow.table(
                        {"batch": ub, "table": ut, "row": ur, "count": uc},
                        updates_schema(row_dtype),
                    )
                )
            for kind, schema, parts in (
                (LOOKUPS_DIR, lookups_schema(row_dtype), look_tables),
                (UPDATES_DIR, updates_schema(row_dtype), upd_tables),
            ):
                entry = writer.write_part(kind, index, schema, parts)
                files[kind].append({**entry, "batch_start": start, "batch_stop": stop})
        manifest = build_manifest(
            created_by=created_by,
            workload=workload or {},
            tables=[{"name": n, "rows": r} for n, r in tables],
            batches=num_batches,
            batch_size=batch_size,
            row_dtype=row_dtype,
            layout=layout,
            files=files,
            source=source,
        )
        return writer.finish(manifest)
    except BaseException:
        writer.abort()
        raise
