"""Writing outputs so that a reader never sees half of one, and no two commands write
one at once: atomic folders and files, output claims, JSON, and the digests that bind a
run folder's files together.

A command builds its output folder as `.NAME.partial` beside the target and renames it
into place when complete (`atomic_folder`); a single file is written under a temporary
name and renamed (`_whole`). The partial folder's name is fixed, not per process, so a
killed command leaves a folder the next one finds: it is reported, resumed (`--resume`)
or replaced (`--force`), never silently overwritten. An existing output is replaced only
with `force`, and only when everything in it, sub-folders included, is what replay
writes there (`owned`: a tree of names and patterns, `foreign_entry`).

Claims (`claim_output`): the fixed partial name alone did not keep two commands apart:
two `plan --force` into one folder each deleted the other's partial folder and both
renamed theirs into place, leaving plan.json of one and plan.md of the other. A command
therefore claims its target first: an advisory `flock(LOCK_EX | LOCK_NB)` on
`.NAME.lock` beside it (its parent folder is made for it, and removed again if the
command fails). A second command finds the lock held and is refused with one line ("in
use", the holder's pid), before it deletes or writes anything. Claims are per target
and re-entrant within a process (a registry keyed by the lock file), so a command may
claim early (`check_output_folder`, before its work) and again where it writes
(`atomic_folder`, the trace writer); targets nested in a partial folder (compare's run
folders) are other targets with locks of their own. A claim ends when its output is
renamed into place or the write fails (`release_output`), and at the latest when the
process ends: an atexit hook releases what is left, and for a process killed outright
the kernel drops the lock, so a stale lock file never blocks anyone (it is reused).
The lock file is removed while the lock is still held, and a claimer checks after
locking that the path still names the file it locked (else it locked a file the holder
was removing, and tries again).

Every layer that writes uses this module: trace folders (`replay.trace.writer`), run
folders (`replay.runs.results`), reports (`replay.report.build`).
"""

from __future__ import annotations

import atexit
import errno
import fcntl
import fnmatch
import hashlib
import json
import os
import shutil
import threading
from collections.abc import Callable, Iterator, Mapping, Set
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeAlias

import numpy as np

from replay._files import RESULT_JSON, read_bytes
from replay.errors import OutputError, ReplayError, opt


def partial_path(out: Path) -> Path:
    return out.parent / f".{out.name}.partial"


def partial_folder(out: Path) -> Path:
    """The temporary folder a command builds `out` in: `.NAME.partial` beside it, the
    name trace folders use too (`partial_path`).

    The name is fixed (not per process), so a run that was killed leaves a folder the next
    run finds: it is reported, resumed (`--resume`) or replaced (`--force`), never silently
    overwritten. Two commands writing one target at once are kept apart by its claim
    (`claim_output`), taken before anything touches the partial folder.
    """
    return partial_path(out)


def _previous_folder(out: Path) -> Path:
    """Where the previous `out` waits while its replacement is renamed into place."""
    return out.parent / f".{out.name}.old"


# -- what an output may hold ----------------------------------------------------------------

# What replay writes in an output folder: a set of names (or `fnmatch` patterns) of files,
# or a mapping from a name (or pattern) to None (a file) or to what that sub-folder holds.
Owned: TypeAlias = "Set[str] | Mapping[str, Owned | None]"


def _specs(owned: Owned, name: str) -> list[Owned | None]:
    """What `owned` says an entry called `name` may be (none: it is not replay's)."""
    if isinstance(owned, Set):
        return [None] if any(_named(key, name) for key in owned) else []
    return [spec for key, spec in owned.items() if _named(key, name)]


def _named(key: str, name: str) -> bool:
    # an exact name first: names of run folders may hold `[`, which fnmatch reads as a class
    return key == name or fnmatch.fnmatchcase(name, key)


def foreign_entry(folder: Path, owned: Owned) -> str | None:
    """The first entry under `folder` (its path relative to `folder`) that `owned` does
    not describe, or None when everything in it is replay's.

    Symbolic links and special files are never replay's (it writes neither), and links
    are not followed, so the walk goes no deeper than `owned` does.
    """
    for entry in sorted(folder.iterdir()):
        specs = _specs(owned, entry.name)
        if not specs or entry.is_symlink():
            return entry.name
        if entry.is_dir():
            inside = [foreign_entry(entry, spec) for spec in specs if spec is not None]
            if not inside:
                return entry.name
            if None not in inside:
                return f"{entry.name}/{inside[0]}"
        elif not (entry.is_file() and None in specs):
            return entry.name
    return None


def listed_names(path: Path, key: str) -> frozenset[str]:
    """The names a JSON file lists as `{key: [{"name": ...}, ...]}` (a report's figures in
    its summary.json): what an earlier output says it wrote, for its `Owned`.

    Names only, never patterns (a listed `*` would claim a person's files); a missing,
    hostile or huge file lists nothing, so nothing in it is replaced."""
    try:
        document = json.loads(read_bytes(path, RESULT_JSON))
        names = {str(entry["name"]) for entry in document[key]}
    except (OSError, ValueError, TypeError, KeyError, RecursionError, ReplayError):
        return frozenset()
    return frozenset(name for name in names if not set("*?[") & set(name))


# -- claims: one writer per output ----------------------------------------------------------


@dataclass
class _Claim:
    fd: int  # -1: the file system has no locks (the claim still tracks `made`)
    path: Path  # the lock file
    made: Path | None  # the topmost folder made for it, removed if the command fails
    pid: int  # a forked child inherits the registry, but not the claim


_claims: dict[Path, _Claim] = {}
_claims_guard = threading.Lock()
# file systems that cannot lock (some network mounts): the output is written unclaimed,
# as before claims existed, rather than refused
_NO_LOCKS = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL}


def lock_path(out: Path) -> Path:
    """The lock file of `out`: `.NAME.lock` beside it (normalized: `a/..` is `.`)."""
    out = Path(os.path.abspath(out))
    return out.parent / f".{out.name}.lock"


def _key(path: Path) -> Path:
    # one lock file reached through two spellings (a symlinked parent) is one claim: a
    # process holding it must not refuse itself
    return Path(os.path.realpath(path.parent)) / path.name


def _in_use(out: Path, fd: int) -> OutputError:
    try:
        pid = int(os.pread(fd, 32, 0).decode("ascii").strip())
    except (OSError, ValueError, UnicodeDecodeError):
        pid = 0  # the holder has locked but not yet written its pid
    who = f" (pid {pid})" if pid > 0 else ""
    return OutputError(
        f"{out}: another replay command is writing this output{who}; wait for it or "
        f"choose another {opt('--out', 'out')}"
    )


def _writable_ancestor(out: Path, folder: Path) -> Path:
    """The nearest existing folder at or above `folder`; OutputError (naming `out`) when
    it is a file or cannot be written."""
    probe = folder
    while not (probe.exists() or probe.is_symlink()):
        probe = probe.parent
    if not probe.is_dir():
        raise OutputError(f"{out}: cannot write there ({probe} is a file, not a folder)")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise OutputError(f"{out}: cannot write there (permission denied)")
    return probe


def _make_parents(out: Path, folder: Path) -> Path | None:
    """Make `folder` (the lock's and the output's parent); the topmost folder made, or None.

    Refuses as the checks of a target always did: a file on the way, no permission."""
    probe = _writable_ancestor(out, folder)
    if probe == folder:
        return None
    made = folder
    while made.parent != probe:
        made = made.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"{out}: cannot write there ({exc.strerror or exc})") from None
    return made


def _lock(out: Path, path: Path) -> int:
    """The descriptor of `path`, locked; OutputError if another process holds it."""
    for _ in range(100):  # each retry means a holder removed the file as we opened it
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        except OSError as exc:  # a link or a folder in its place, a read-only folder
            raise OutputError(
                f"{out}: cannot claim the output ({path.name}: {exc.strerror or exc})"
            ) from None
        locked = False
        try:
            locked = _flock(out, path, fd)
            if not locked:  # no locks here: nothing to hold, so no file to leave either
                os.close(fd)
                with suppress(OSError):
                    path.unlink()
                return -1
            if _same_file(fd, path):
                # the pid only makes the "in use" line more useful: a full disk is no error
                with suppress(OSError):
                    os.ftruncate(fd, 0)
                    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
                return fd
        except BaseException:  # an interrupt as it locked: no lock file left behind
            if locked and _same_file(fd, path):
                with suppress(OSError):
                    path.unlink()
            os.close(fd)
            raise
        os.close(fd)
    raise OutputError(f"{out}: cannot claim the output ({path.name} keeps changing)")


def _flock(out: Path, path: Path, fd: int) -> bool:
    """Lock `fd`: True, or False where the file system has no locks; OutputError if
    another process holds the lock."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise _in_use(out, fd) from None
    except OSError as exc:
        if exc.errno in _NO_LOCKS:
            return False
        raise OutputError(
            f"{out}: cannot claim the output ({path.name}: {exc.strerror or exc})"
        ) from None
    return True


def _same_file(fd: int, path: Path) -> bool:
    try:
        held, named = os.fstat(fd), os.stat(path, follow_symlinks=False)
    except OSError:
        return False
    return (held.st_dev, held.st_ino) == (named.st_dev, named.st_ino)


def claim_output(out: Path) -> bool:
    """Claim `out` for this process: True if this call took the claim, False if the
    process already held it. OutputError if another process holds it (or `out` cannot
    be written: a file on the way, no permission).

    The claim lasts until `release_output` (or the process's end)."""
    path = lock_path(out)
    with _claims_guard:
        if path.parent.is_dir() and _key(path) in _claims:
            return False
        made = _make_parents(Path(out), path.parent)
        try:
            fd = _lock(Path(out), path)
        except BaseException:
            _remove_made(path.parent, made)
            raise
        _claims[_key(path)] = _Claim(fd, path, made, os.getpid())
        return True


def release_output(out: Path, *, failed: bool) -> None:
    """End this process's claim of `out` (nothing if it holds none): remove the lock file
    while still holding it, then unlock; with `failed`, also the folders made for it if
    they are empty (what the failed command wrote is gone by then, or kept for --resume)."""
    path = lock_path(out)
    with _claims_guard:
        claim = _claims.pop(_key(path), None) if path.parent.is_dir() else None
        if claim is None:  # its parent was renamed or removed since: find it by name
            key = next((k for k, c in _claims.items() if c.path == path), None)
            claim = _claims.pop(key) if key is not None else None
        if claim is not None:
            _release(claim, failed=failed)


def _release(claim: _Claim, *, failed: bool) -> None:
    if claim.fd >= 0:
        # unlinked only if it is still the file this claim locked (never another's)
        if _same_file(claim.fd, claim.path):
            with suppress(OSError):  # a read-only folder now: a stale lock file blocks no one
                claim.path.unlink()
        os.close(claim.fd)
    if failed:
        _remove_made(claim.path.parent, claim.made)


def _remove_made(folder: Path, made: Path | None) -> None:
    """Remove `folder` and its parents up to `made`, each only if it is empty."""
    if made is None:
        return
    probe = folder
    while True:
        try:
            probe.rmdir()
        except OSError:
            return  # not empty (a partial folder kept for --resume) or gone
        if probe == made:
            return
        probe = probe.parent


@contextmanager
def claimed(out: Path) -> Iterator[None]:
    """Hold the claim of `out` for a block that ends the command's use of it: released at
    the end, as failed if the block raised."""
    claim_output(out)
    try:
        yield
    except BaseException:
        release_output(out, failed=True)
        raise
    release_output(out, failed=False)


def release_claims() -> None:
    """End every claim this process still holds, as failed: what a command claimed and
    never wrote (an error after its checks, an interrupted `generate` keeping its partial
    folder for --resume). `replay.cli.main` calls it as a command returns (in a test or a
    notebook the process lives on), and it runs at exit."""
    with _claims_guard:
        claims = [c for c in _claims.values() if c.pid == os.getpid()]
        _claims.clear()
    for claim in claims:
        _release(claim, failed=True)


def _forget_in_child() -> None:
    # a forked worker must neither unlock nor unlink its parent's claims: it closes its
    # copies of the descriptors (the lock stays with the parent's) and starts afresh
    global _claims_guard
    _claims_guard = threading.Lock()
    for claim in _claims.values():
        if claim.fd >= 0:
            with suppress(OSError):
                os.close(claim.fd)
    _claims.clear()


atexit.register(release_claims)
os.register_at_fork(after_in_child=_forget_in_child)


# -- output folders -------------------------------------------------------------------------


def check_output_folder(
    out: Path,
    *,
    force: bool,
    owned: Owned | None = None,
    what: str = "output",
    resume: bool | None = None,
) -> None:
    """Fail early (before any work) if `out` cannot become a result folder, and claim it
    (`claim_output`): a second command writing `out` is refused from here on.

    An existing non-empty folder is replaced only with `force`, and, when `owned` says
    what a folder of this kind holds (sub-folders included), only if it holds nothing
    else (so --force never wipes an unrelated folder, nor a file a person put in its
    `figures/`). A leftover `.NAME.partial` (or `.NAME.old`) from an interrupted run is
    an error unless `force` (start over) or `resume` (finish it) is given; `resume=None`
    means the command cannot resume. A refused check leaves no claim it took.
    """
    try:
        took = claim_output(out)
        try:
            _check_output_folder(out, force=force, owned=owned, what=what, resume=resume)
        except BaseException:
            if took:
                release_output(out, failed=True)
            raise
    except OSError as exc:  # e.g. a name too long for the file system
        raise OutputError(f"{out}: cannot use this output path ({exc.strerror or exc})") from None


def _check_output_folder(
    out: Path, *, force: bool, owned: Owned | None, what: str, resume: bool | None
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
        foreign = foreign_entry(out, owned) if entries and owned is not None else None
        if foreign is not None:
            raise OutputError(
                f"{out}: holds other files, not only an earlier {what} ({foreign} is not "
                "replay's); replay replaces only its own outputs or an empty folder"
            )
    check_leftover(out, force=force, resume=resume)
    _writable_ancestor(out, out.parent)


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
    owned: Owned | None = None,
    what: str = "output",
    resume: bool | None = None,
) -> Iterator[Path]:
    """Yield the temporary folder `.NAME.partial` beside `out`; on success it replaces
    `out` in one rename.

    With `resume`, a leftover temporary folder is yielded as it is (the caller decides
    what in it can be kept); otherwise it starts empty. On an error the temporary folder
    and any parent folders made for it are removed and an earlier `out` is left as it
    was; a process killed outright leaves the temporary folder for `--resume`. The claim
    of `out` (taken here, or earlier by `check_output_folder`) ends with the block.
    """
    try:
        check_output_folder(out, force=force, owned=owned, what=what, resume=resume)
    except BaseException:
        release_output(out, failed=True)  # claimed by an earlier check: this is its end
        raise
    claim = out
    out = out.absolute()
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
        release_output(claim, failed=True)  # and the parent folders made for it
        raise OutputError(f"{out}: cannot write the output ({exc.strerror or exc})") from None
    except BaseException:
        _remove(tmp)
        release_output(claim, failed=True)
        raise
    release_output(claim, failed=False)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.is_symlink() or path.exists():
        # a file, a link, or a FIFO or a socket: `rmtree` of a FIFO opens it, and waits
        path.unlink()


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
    "Owned",
    "atomic_folder",
    "canonical_sha256",
    "check_leftover",
    "check_output_folder",
    "claim_output",
    "claimed",
    "foreign_entry",
    "listed_names",
    "lock_path",
    "partial_folder",
    "partial_path",
    "release_claims",
    "release_output",
    "trace_sha256",
    "write_json",
]
