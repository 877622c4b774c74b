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

import json
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import replay
from replay.errors import OutputError


def check_output_folder(
    out: Path, *, force: bool, owned: frozenset[str] | None = None, what: str = "output"
) -> None:
    """Fail early (before any work) if `out` cannot become a result folder.

    An existing non-empty folder is replaced only with `force`, and, when `owned` names
    the files a folder of this kind holds, only if it holds nothing else (so --force never
    wipes an unrelated folder).
    """
    if out.exists() or out.is_symlink():
        if not out.is_dir():
            raise OutputError(f"{out}: exists and is not a folder")
        entries = list(out.iterdir())
        if entries and not force:
            raise OutputError(f"{out}: already holds files (use --force to replace it)")
        if entries and owned is not None and not all(e.name in owned for e in entries):
            raise OutputError(
                f"{out}: --force replaces only an earlier {what} or an empty folder; "
                "this one holds other files"
            )
    probe = out.parent
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir() or not os.access(probe, os.W_OK | os.X_OK):
        raise OutputError(f"{out}: cannot write there (permission denied)")


@contextmanager
def atomic_folder(
    out: Path, *, force: bool, owned: frozenset[str] | None = None, what: str = "output"
) -> Iterator[Path]:
    """Yield a temporary folder beside `out`; on success it replaces `out` in one rename.

    On any error the temporary folder and any parent folders made for it are removed and
    an earlier `out` is left as it was.
    """
    check_output_folder(out, force=force, owned=owned, what=what)
    out = out.absolute()
    created = out.parent
    while not created.parent.exists():
        created = created.parent
    made: Path | None = None if created.exists() else created  # topmost folder we make
    tmp = out.parent / f".{out.name}.partial-{os.getpid()}"
    old = out.parent / f".{out.name}.old-{os.getpid()}"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
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
        shutil.rmtree(tmp, ignore_errors=True)
        if made is not None:
            shutil.rmtree(made, ignore_errors=True)
        raise OutputError(f"{out}: cannot write the output ({exc.strerror or exc})") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if made is not None:
            shutil.rmtree(made, ignore_errors=True)
        raise


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
    table = pa.table({name: pa.array(values) for name, values in columns.items()})
    pq.write_table(table, path, compression="zstd")


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
        config = {
            "system": result.system.to_dict(),
            "origin": origin,
            "overrides": list(overrides),
        }
        write_json(tmp / "config.json", config)
        meta = {"tool": "replay", "version": replay.__version__, **result.meta}
        write_json(tmp / "meta.json", meta)
        write_columns(tmp / "batches.parquet", result.columns)
        write_columns(tmp / "checkpoints.parquet", result.checkpoints)
        write_json(tmp / "summary.json", {"system": result.system.name, **result.summary})
        if workload is not None:
            write_json(tmp / "workload.json", workload)
        if extra is not None:
            extra(tmp)
    return out


__all__ = ["atomic_folder", "check_output_folder", "write_json", "write_run"]
