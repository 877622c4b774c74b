"""Writing outputs so that a reader never sees half of one: atomic folders and files, JSON,
and the digests that bind a run folder's files together.

A command builds its output folder as `.NAME.partial` beside the target and renames it
into place when complete (`atomic_folder`); a single file is written under a temporary
name and renamed (`_whole`). The partial folder's name is fixed, not per process, so a
killed command leaves a folder the next one finds: it is reported, resumed (`--resume`)
or replaced (`--force`), never silently overwritten, and two commands cannot write one
target at once. An existing output is replaced only with `force`, and only when it holds
nothing but what replay writes there (`owned`).

Every layer that writes uses this module: trace folders (`replay.trace.writer`), run
folders (`replay.runs.results`), reports (`replay.report.build`).
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

from replay.errors import OutputError, opt


def partial_path(out: Path) -> Path:
    return out.parent / f".{out.name}.partial"


def partial_folder(out: Path) -> Path:
    """The temporary folder a command builds `out` in: `.NAME.partial` beside it, the
    name trace folders use too (`partial_path`).

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
            raise OutputError(
                f"{out}: already holds files (use {opt('--force', 'force=True')} to replace it)"
            )
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


__all__ = [
    "atomic_folder",
    "canonical_sha256",
    "check_leftover",
    "check_output_folder",
    "partial_folder",
    "partial_path",
    "trace_sha256",
    "write_json",
]
