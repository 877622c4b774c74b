"""Writing result folders: the one module that writes what the engine computed.

A run folder holds `config.json` (the resolved system spec and the overrides given),
`meta.json` (tool version, trace manifest digest, seed, timings), `batches.parquet` (one
row per batch), `checkpoints.parquet` (one row per checkpoint), `summary.json`, for a
cluster `sharding.json` (the placement, as `cluster.sharding_file` reads it) and
`ranks.parquet` (one row per batch and GPU), and, unless
the caller skipped it, `workload.json` (the trace's statistics, `replay inspect --json`,
so that `replay report` can describe the workload without the trace). Folders are built
under a temporary name beside the target and renamed into place when complete, so a
reader never sees half a result; an existing target is replaced only with `force`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from replay import _arrow
from replay._faults import kill_point
from replay._files import RESULT_JSON, STATE_JSON, read_bytes
from replay._output import (
    _json_default,
    _remove,
    _whole,
    atomic_folder,
    canonical_sha256,
    check_leftover,
    check_output_folder,
    claimed,
    partial_folder,
    trace_sha256,
    write_json,
)
from replay._schema_stamp import stamp
from replay._version import __version__
from replay.errors import OutputError, ReplayError


def write_columns(path: Path, columns: dict[str, np.ndarray]) -> None:
    table = _arrow.table(columns)
    pq.write_table(table, path, compression="zstd")


def write_run_files(
    folder: Path,
    result: Any,
    *,
    overrides: list[str],
    origin: str,
    meta_extra: dict[str, Any] | None = None,
) -> None:
    """The files of a run folder that the replay computed, each written whole;
    summary.json comes last, so its presence says the others are complete.

    summary.json's `digests` bind it to its config.json (the SHA-256 of its canonical
    JSON) and to the trace (meta.json's digest): `replay report` refuses a folder whose
    files no longer agree.
    """
    config = stamp(
        "run-config",
        {"system": result.system.to_dict(), "origin": origin, "overrides": list(overrides)},
    )
    meta = {"tool": "replay", "version": __version__, **result.meta, **(meta_extra or {})}
    summary = {
        "system": result.system.name,
        **result.summary,
        "digests": {
            "config_sha256": canonical_sha256(config),
            "trace_sha256": trace_sha256(meta),
        },
    }
    summary = stamp("run-summary", summary)
    # what report checks the summary's fields it cannot recompute against (goodput,
    # stalls, intervals): summary.json itself stays as it was
    meta = stamp("run-meta", {**meta, "summary_sha256": canonical_sha256(summary)})
    _whole(folder / "config.json", lambda p: write_json(p, config))
    _whole(folder / "meta.json", lambda p: write_json(p, meta))
    _whole(folder / "batches.parquet", lambda p: write_columns(p, result.columns))
    rank_columns = getattr(result, "rank_columns", None)
    if rank_columns:  # a cluster (`replay.engine.cluster_run`)
        sharding = stamp("sharding", result.sharding)
        _whole(folder / "sharding.json", lambda p: write_json(p, sharding))
        _whole(folder / "ranks.parquet", lambda p: write_columns(p, rank_columns))
    kill_point("run:files")
    _whole(folder / "checkpoints.parquet", lambda p: write_columns(p, result.checkpoints))
    _whole(folder / "summary.json", lambda p: write_json(p, summary))


def write_run(
    out: Path,
    result: Any,
    *,
    overrides: list[str],
    origin: str,
    force: bool = False,
    extra: Callable[[Path], None] | None = None,
    workload: dict[str, Any] | None = None,
) -> Path:
    """Write a `RunResult` as a run folder at `out` (atomically)."""
    with atomic_folder(out, force=force) as tmp:
        write_run_files(tmp, result, overrides=overrides, origin=origin)
        if workload is not None:
            write_json(tmp / "workload.json", stamp("run-workload", workload))
        if extra is not None:
            extra(tmp)
    return out


PLAN_NAME = ".plan.json"


class RunStages:
    """`replay run`'s folder, built in stages so that `--resume` keeps the finished ones.

    Stages: (1) the replay's files (`write_run_files`; done when summary.json exists),
    (2) workload.json, when asked for. The plan (the resolved system, overrides, trace
    digest and options) is kept in the partial folder as `.plan.json` and its digest in
    meta.json; a resumed run must present the same plan, so finished stages are only
    reused for identical output.
    """

    def __init__(self, folder: Path, plan_sha256: str, *, finished: bool = False) -> None:
        self.folder = folder
        self.plan_sha256 = plan_sha256
        self.finished = finished  # `out` was already complete: nothing to do

    @property
    def replayed(self) -> bool:
        return (self.folder / "summary.json").is_file()

    @property
    def inspected(self) -> bool:
        return (self.folder / "workload.json").is_file()

    def write_replay(
        self, result: Any, *, overrides: list[str], origin: str, verified: bool | None
    ) -> None:
        """The replay stage; meta.json records whether the trace's checksums were
        verified (False: skipped with --no-verify; None: generated on the fly)."""
        trace = {**result.meta["trace"], "checksums_verified": verified}
        write_run_files(
            self.folder,
            result,
            overrides=overrides,
            origin=origin,
            meta_extra={"trace": trace, "plan_sha256": self.plan_sha256},
        )

    def write_workload(self, stats: dict[str, Any]) -> None:
        _whole(self.folder / "workload.json", lambda p: write_json(p, stamp("run-workload", stats)))

    def read(self, name: str) -> dict[str, Any]:
        return json.loads(read_bytes(self.folder / name, RESULT_JSON))


def _finished_run(out: Path, plan_sha256: str) -> bool:
    try:
        meta = json.loads(read_bytes(out / "meta.json", RESULT_JSON))
    except (OSError, ValueError, RecursionError, ReplayError):  # as if not written
        return False
    return (
        isinstance(meta, dict)
        and meta.get("plan_sha256") == plan_sha256
        and (out / "summary.json").is_file()
    )


# a run folder's files (`Owned`: files only); compare's and sweep's outputs hold such folders
RUN_FOLDER_FILES = frozenset(
    {"config.json", "meta.json", "batches.parquet", "checkpoints.parquet", "summary.json",
     "workload.json", "sharding.json", "ranks.parquet"}
)  # fmt: skip


def _kept_plan(partial: Path, plan: dict[str, Any], digest: str, out: Path) -> bool:
    """Whether `--resume` can keep what the partial folder holds: its plan is this one
    (OutputError if it is another's, before anything is touched)."""
    plan_file = partial / PLAN_NAME
    if not plan_file.is_file():
        # killed after the plan was removed, just before the final rename
        return _finished_run(partial, digest)
    try:
        old = json.loads(read_bytes(plan_file, STATE_JSON))
    except (OSError, ValueError, RecursionError, ReplayError):  # as if not written
        return False  # killed while writing it: nothing finished yet
    if old != json.loads(json.dumps(plan, default=_json_default)):
        raise OutputError(
            f"{out}: --resume needs the same inputs as the interrupted run "
            f"(its plan is in {plan_file})"
        )
    return True


@contextmanager
def run_stages(
    out: Path, plan: dict[str, Any], *, force: bool, resume: bool
) -> Iterator[RunStages]:
    """The staged run folder of `replay run` (see `RunStages`), renamed into place when
    the caller's block ends without an error.

    With `resume`: a leftover partial folder with the same plan is continued; an `out`
    that a run with the same plan already finished is left as it is (`finished`).
    `force` replaces only an earlier run folder (or an empty one).
    """
    digest = canonical_sha256(plan)
    partial = partial_folder(out)
    # claimed before the partial folder is read: another `run --resume` may be writing it;
    # the claim ends with the block (atomic_folder ends it first when it renames)
    with claimed(out):
        if resume and not partial.exists() and _finished_run(out, digest):
            yield RunStages(out, digest, finished=True)
            return
        if resume and not force and out.is_dir() and any(out.iterdir()):
            raise OutputError(
                f"{out}: already holds files that are not this run (use --force to replace them)"
            )
        kept = resume and partial.is_dir() and _kept_plan(partial, plan, digest, out)
        with atomic_folder(
            out, force=force, resume=resume, owned=RUN_FOLDER_FILES, what="run folder"
        ) as tmp:
            plan_file = tmp / PLAN_NAME
            if not kept:
                for entry in list(tmp.iterdir()):
                    _remove(entry)
                _whole(plan_file, lambda p: write_json(p, plan))
            kill_point("run:planned")
            yield RunStages(tmp, digest)
            plan_file.unlink(missing_ok=True)
            kill_point("run:before-rename")


__all__ = [
    "RUN_FOLDER_FILES",
    "RunStages",
    "atomic_folder",
    "canonical_sha256",
    "check_leftover",
    "check_output_folder",
    "partial_folder",
    "run_stages",
    "trace_sha256",
    "write_json",
    "write_run",
    "write_run_files",
]
