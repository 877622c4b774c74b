"""What a command replays: a trace folder, or a workload generated on the fly.

A `SourceRef` is the picklable description that goes to worker processes (a folder path,
or a `WorkloadSpec` with the overrides applied); `open_source` turns it into the object
the engine reads (`Trace` or `GeneratedTrace`, which offer the same reading interface).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from replay.trace.reader import Trace, open_trace
from replay.workload.onthefly import GeneratedTrace
from replay.workload.spec import WorkloadSpec

SourceRef = str | WorkloadSpec
Source = Trace | GeneratedTrace


def open_source(ref: SourceRef | Path, *, threads: int | None = None) -> Source:
    """The readable source of a reference; `threads` generate an on-the-fly workload."""
    if isinstance(ref, WorkloadSpec):
        return GeneratedTrace(ref, threads=threads)
    return open_trace(ref)  # refuses an empty trace: there is nothing to replay


def source_label(ref: SourceRef | Path) -> str:
    """How outputs name the source: the folder, or `workload:NAME`."""
    return f"workload:{ref.name}" if isinstance(ref, WorkloadSpec) else str(ref)


def source_document(ref: SourceRef | Path) -> dict[str, Any]:
    """The source in compare.json / sweep.json / mrc.json: `trace`, plus `workload` (the
    spec) when generated on the fly."""
    if isinstance(ref, WorkloadSpec):
        return {"trace": source_label(ref), "workload": ref.to_dict()}
    return {"trace": str(ref)}


__all__ = [
    "Source",
    "SourceRef",
    "open_source",
    "source_document",
    "source_label",
]
