"""Writing result folders: the one module that writes what the engine computed.

A run folder holds `config.json` (the resolved system spec and the overrides given),
`meta.json` (tool version, trace manifest digest, seed, timings), `batches.parquet` (one
row per batch) and `summary.json`. Folders are built under a temporary name beside the
target and renamed into place when complete, so a reader never sees half a result; an
existing target is replaced only with `force`.
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


def check_output_folder(out: Path, *, force: bool) -> None:
    """Fail early (before any work) if `out` cannot become a result folder."""
    if out.exists() and not out.is_dir():
        raise OutputError(f"{out}: exists and is not a folder")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise OutputError(f"{out}: already holds files (use --force to replace it)")
    parent = out.parent if str(out.parent) else Path(".")
    if parent.exists() and not parent.is_dir():
        raise OutputError(f"{parent}: is not a folder")
    if parent.exists() and not os.access(parent, os.W_OK):
        raise OutputError(f"{parent}: not writable")


@contextmanager
def atomic_folder(out: Path, *, force: bool) -> Iterator[Path]:
    """Yield a temporary folder beside `out`; on success it replaces `out`."""
    check_output_folder(out, force=force)
    out = out.absolute()
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"{out.parent}: cannot create ({exc.strerror})") from None
    tmp = out.parent / f".{out.name}.partial-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir()
    except OSError as exc:
        raise OutputError(f"{out.parent}: cannot write ({exc.strerror})") from None
    try:
        yield tmp
        if out.exists():
            old = out.parent / f".{out.name}.old-{os.getpid()}"
            out.rename(old)
            tmp.rename(out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
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
        write_json(tmp / "summary.json", {"system": result.system.name, **result.summary})
        if extra is not None:
            extra(tmp)
    return out


__all__ = ["atomic_folder", "check_output_folder", "write_json", "write_run"]
