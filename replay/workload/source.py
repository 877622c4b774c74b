"""What a command replays: a trace folder, or a workload generated on the fly.

A `SourceRef` is the picklable description that goes to worker processes (a folder path,
or a `WorkloadSpec` with the overrides applied); `open_source` turns it into the object
the engine reads (`Trace` or `GeneratedTrace`, which offer the same reading interface).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias, TypeGuard

from replay.trace.reader import Trace, open_trace
from replay.workload.spec import WorkloadSpec

if TYPE_CHECKING:
    from replay.workload.onthefly import GeneratedTrace

SourceRef = str | WorkloadSpec
# a name for annotations (which no module evaluates): the on-the-fly generator (its
# modules and the sampler's kernels) is imported where a workload is generated, not by
# every command that reads a trace folder
Source: TypeAlias = "Trace | GeneratedTrace"


def open_source(ref: SourceRef | Path, *, threads: int | None = None) -> Source:
    """The readable source of a reference; `threads` generate an on-the-fly workload."""
    if isinstance(ref, WorkloadSpec):
        from replay.workload.onthefly import GeneratedTrace

        return GeneratedTrace(ref, threads=threads)
    return open_trace(ref)  # refuses an empty trace: there is nothing to replay


def is_generated(source: object) -> TypeGuard[GeneratedTrace]:
    """`isinstance(source, GeneratedTrace)` without importing the generator: nothing is
    generated on the fly before its module is imported."""
    onthefly = sys.modules.get("replay.workload.onthefly")
    return onthefly is not None and isinstance(source, onthefly.GeneratedTrace)


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
    "is_generated",
    "open_source",
    "source_document",
    "source_label",
]
