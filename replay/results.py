"""Writing result folders: the one module that writes what the engine computed.

A run folder holds `config.json` (the resolved system spec and the overrides given),
`meta.json` (tool version, trace manifest digest, seed, timings), `batches.parquet` (one
row per batch), `checkpoints.parquet` (one row per checkpoint), `summary.json`, and, unless
the caller skipped it, `workload.json` (the trace's statistics, `replay inspect --json`,
so that `replay report` can describe the workload without the trace). Folders are built
under a temporary name beside the target and renamed into place when complete, so a
reader never sees half a result; an existing target is replaced only with `force`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

import replay
from replay import _arrow
from replay._faults import kill_point
from replay.errors import OutputError
from replay.trace.writer import partial_path


def partial_folder(out: Path) -> Path:
    """The temporary folder a command builds `out` in: `.NAME.partial` beside it, the
    name trace folders use too (`replay.trace.writer.partial_path`).

    The name is fixed (not per process), so a run that was killed leaves a folder the next
    run finds: it is reported, resumed (`--resume`) or replaced (`--force`), never silently
    overwritten. The same name also keeps two commands from writing one target at once.
    """
    return partial_path(out)


def _previous_folder(out: Path) -> Path:
    """Where the previous `out` waits while its replacement is renamed into place."""
    return out.parent / f".{out.name}.old"


def check_output_folder(
    out: Path,
    *,
    force: bool,
    owned: frozenset[str] | None = None,
    what: str = "output",
    resume: bool | None = None,
) -> None:
    """Fail early (before any work) if `out` cannot become a result folder.

    An existing non-empty folder is replaced only with `force`, and, when `owned` names
    the files a folder of this kind holds, only if it holds nothing else (so --force never
    wipes an unrelated folder). A leftover `.NAME.partial` (or `.NAME.old`) from an
    interrupted run is an error unless `force` (start over) or `resume` (finish it) is
    given; `resume=None` means the command cannot resume.
    """
    try:
        _check_output_folder(out, force=force, owned=owned, what=what, resume=resume)
    except OSError as exc:  # e.g. a name too long for the file system
        raise OutputError(f"{out}: cannot use this output path ({exc.strerror or exc})") from None


def _check_output_folder(
    out: Path, *, force: bool, owned: frozenset[str] | None, what: str, resume: bool | None
) -> None:
    if out.exists() or out.is_symlink():
        if not out.is_dir():
            raise OutputError(f"{out}: exists and is not a folder")
        entries = list(out.iterdir())
        # with `resume` the caller decides: it may hold the finished output being resumed
        if entries and not force and not resume:
            raise OutputError(f"{out}: already holds files (use --force to replace it)")
        if entries and owned is not None and not all(e.name in owned for e in entries):
            raise OutputError(
                f"{out}: holds other files, not only an earlier {what}; replay replaces "
                "only its own outputs or an empty folder"
            )
    check_leftover(out, force=force, resume=resume)
    probe = out.parent
    while not (probe.exists() or probe.is_symlink()):
        probe = probe.parent
    if not probe.is_dir():
        raise OutputError(f"{out}: cannot write there ({probe} is a file, not a folder)")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise OutputError(f"{out}: cannot write there (permission denied)")


def check_leftover(
    out: Path, *, force: bool, resume: bool | None = None, force_hint: bool = True
) -> None:
    """OutputError if an interrupted run left `.NAME.partial` (or `.NAME.old`) beside
    `out`, unless `force` (start over) or `resume` (finish it); the message offers only
    the options the command has (`resume=None`: none; `force_hint`: --force)."""
    if force or resume:
        return
    for leftover in (partial_folder(out), _previous_folder(out)):
        if leftover.exists() or leftover.is_symlink():
            how = [
                *(["finish it with --resume"] if resume is not None else []),
                *(["start over with --force"] if force_hint else []),
            ]
            how_text = " or ".join(how) if how else f"remove it ({leftover}) and run again"
            raise OutputError(
                f"{out}: an interrupted run (or one still running) left {leftover.name} "
                f"beside it; {how_text}"
            )


@contextmanager
def atomic_folder(
    out: Path,
    *,
    force: bool,
    owned: frozenset[str] | None = None,
    what: str = "output",
    resume: bool | None = None,
) -> Iterator[Path]:
    """Yield the temporary folder `.NAME.partial` beside `out`; on success it replaces
    `out` in one rename.

    With `resume`, a leftover temporary folder is yielded as it is (the caller decides
    what in it can be kept); otherwise it starts empty. On an error the temporary folder
    and any parent folders made for it are removed and an earlier `out` is left as it
    was; a process killed outright leaves the temporary folder for `--resume`.
    """
    check_output_folder(out, force=force, owned=owned, what=what, resume=resume)
    out = out.absolute()
    created = out.parent
    while not created.parent.exists():
        created = created.parent
    made: Path | None = None if created.exists() else created  # topmost folder we make
    tmp = partial_folder(out)
    old = _previous_folder(out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        if old.exists():  # only with force or resume (checked above)
            if out.exists():
                shutil.rmtree(old)
            else:  # killed between the two renames below: the old output is all there is
                old.rename(out)
        if not (resume and tmp.is_dir()):
            _remove(tmp)
            tmp.mkdir()
        yield tmp
        if out.is_dir() and any(out.iterdir()):
            out.rename(old)
            try:
                tmp.rename(out)
            except OSError:
                old.rename(out)  # put the earlier output back
                raise
            shutil.rmtree(old, ignore_errors=True)
        else:
            if out.is_dir():
                out.rmdir()
            tmp.rename(out)
    except OSError as exc:
        _remove(tmp)
        if made is not None:
            shutil.rmtree(made, ignore_errors=True)
        raise OutputError(f"{out}: cannot write the output ({exc.strerror or exc})") from None
    except BaseException:
        _remove(tmp)
        if made is not None:
            shutil.rmtree(made, ignore_errors=True)
        raise


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)


def _json_default(value: Any) -> Any:
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


def write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2, default=_json_default) + "\n")


def write_columns(path: Path, columns: dict[str, np.ndarray]) -> None:
    table = _arrow.table(columns)
    pq.write_table(table, path, compression="zstd")


def _whole(path: Path, write: Callable[[Path], None]) -> None:
    """`write(tmp)` then rename to `path`: after a kill the file is whole or absent."""
    tmp = path.with_name(f".{path.name}.tmp")
    write(tmp)
    tmp.replace(path)


def canonical_sha256(obj: Any) -> str:
    """SHA-256 of `obj` as canonical JSON (sorted keys, no spaces): a digest of content
    that does not depend on how a file was indented."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=_json_default)
    return hashlib.sha256(text.encode()).hexdigest()


def trace_sha256(meta: dict[str, Any]) -> str | None:
    """The digest of what a run replayed, from its meta.json: the trace manifest's
    SHA-256, or the on-the-fly workload spec's."""
    trace = meta.get("trace") or {}
    return trace.get("manifest_sha256") or trace.get("workload_sha256")


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
    config = {"system": result.system.to_dict(), "origin": origin, "overrides": list(overrides)}
    meta = {"tool": "replay", "version": replay.__version__, **result.meta, **(meta_extra or {})}
    summary = {
        "system": result.system.name,
        **result.summary,
        "digests": {
            "config_sha256": canonical_sha256(config),
            "trace_sha256": trace_sha256(meta),
        },
    }
    # what report checks the summary's fields it cannot recompute against (goodput,
    # stalls, intervals): summary.json itself stays as it was
    meta["summary_sha256"] = canonical_sha256(summary)
    _whole(folder / "config.json", lambda p: write_json(p, config))
    _whole(folder / "meta.json", lambda p: write_json(p, meta))
    _whole(folder / "batches.parquet", lambda p: write_columns(p, result.columns))
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
            write_json(tmp / "workload.json", workload)
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
        _whole(self.folder / "workload.json", lambda p: write_json(p, stats))

    def read(self, name: str) -> dict[str, Any]:
        return json.loads((self.folder / name).read_text())


def _finished_run(out: Path, plan_sha256: str) -> bool:
    try:
        meta = json.loads((out / "meta.json").read_text())
    except (OSError, ValueError):
        return False
    return (
        isinstance(meta, dict)
        and meta.get("plan_sha256") == plan_sha256
        and (out / "summary.json").is_file()
    )


RUN_FOLDER_FILES = frozenset(
    {"config.json", "meta.json", "batches.parquet", "checkpoints.parquet", "summary.json",
     "workload.json"}
)  # fmt: skip


def _kept_plan(partial: Path, plan: dict[str, Any], digest: str, out: Path) -> bool:
    """Whether `--resume` can keep what the partial folder holds: its plan is this one
    (OutputError if it is another's, before anything is touched)."""
    plan_file = partial / PLAN_NAME
    if not plan_file.is_file():
        # killed after the plan was removed, just before the final rename
        return _finished_run(partial, digest)
    try:
        old = json.loads(plan_file.read_text())
    except (OSError, ValueError):
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
