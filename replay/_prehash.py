"""Checksums of the trace a command names, hashed while the command imports.

A command such as `replay run TRACE` spends its first ~0.3 s importing numpy, numba,
pyarrow and typer on one core while the other idles, and the first thing its reader then
needs is the SHA-256 of the trace's files (0.2 s of CPU for the 289 MB of 106 M lookups,
2-core VM), which `replay.trace.reader.Verification` computes on helper threads that
compete with the reader and the statistics for that second core. `start(argv)`, called
by the console script before those imports (this module imports only the standard
library, `replay.errors`, and `replay._verified` and `replay._files`, which import no
more), looks for a trace folder among the arguments of a command that verifies
checksums, reads its manifest (`replay._files`: a regular file under the manifests'
size limit) and hashes the listed files on one thread, in the order a replay reads
them (a file unchanged since its digest was recorded as verified takes that digest
instead). `Verification` asks `claim_or_wait(path)` before hashing a file: it gets the
digest when this thread hashed (or is hashing) that very file, and otherwise hashes the
file itself, the claim keeping the two from hashing one file twice.

A guess never changes a result. The manifest is read again, and validated, by the
reader; a folder that is no trace, or a file not listed, is never hashed here; a file
whose size, modification time or inode differ from when it was registered is hashed again
by its reader. `--no-verify` hashes nothing.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import threading
from pathlib import Path, PurePosixPath

from replay import _verified
from replay._files import MANIFEST, read_bytes
from replay.errors import ReplayError

# the commands that verify a trace folder's checksums (their --verify/--no-verify)
COMMANDS = frozenset({"run", "inspect", "mrc", "compare", "sweep", "fit"})
KINDS = ("lookups", "updates")
HELPER_NICE = 5  # as replay._threads' helpers


class _File:
    __slots__ = ("done", "key", "owner", "result")

    def __init__(self, key: tuple[int, int, int]) -> None:
        self.key = key  # (size, mtime_ns, inode) when registered
        self.owner: str | None = None  # "prehash" or "reader" once claimed
        self.done = threading.Event()
        self.result: str | OSError | None = None


_lock = threading.Lock()
_files: dict[str, _File] = {}


def _stat_key(path: str) -> tuple[int, int, int]:
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns, st.st_ino


def _listed(root: Path) -> list[str]:
    """The real paths of the files a trace folder's manifest lists, in reading order
    (by batch range, lookups before updates); [] for anything that is not a trace."""
    try:
        manifest = json.loads(read_bytes(root / "manifest.json", MANIFEST))
        files = manifest["files"]
        entries = [e for kind in KINDS for e in files[kind]]
        entries.sort(key=lambda e: int(e["batch_start"]))  # stable: lookups first
        real_root = os.path.realpath(root)
        out = []
        for entry in entries:
            pure = PurePosixPath(str(entry["path"]))
            if pure.is_absolute() or ".." in pure.parts or not pure.parts:
                continue
            real = os.path.realpath(root.joinpath(*pure.parts))
            if real.startswith(real_root + os.sep) and os.path.isfile(real):
                out.append(real)
        return out
    except (OSError, ValueError, TypeError, KeyError, AttributeError, RecursionError):
        return []
    except ReplayError:  # not a regular file, or too large: the reader says so
        return []


def start(argv: list[str]) -> threading.Thread | None:
    """Begin hashing the trace folder among `argv` (the command's arguments, without the
    program name) on a background thread; None when there is nothing to hash."""
    if not argv or argv[0] not in COMMANDS or "--no-verify" in argv:
        return None
    for arg in argv[1:]:
        if arg.startswith("-") or not os.path.isfile(os.path.join(arg, "manifest.json")):
            continue
        paths = _listed(Path(arg))
        with _lock:
            for path in paths:
                with contextlib.suppress(OSError):
                    _files.setdefault(path, _File(_stat_key(path)))
        if not paths:
            continue
        records = _verified.Records(arg)  # files matched before and unchanged since
        thread = threading.Thread(target=_hash_all, args=(paths, records), name="replay-prehash")
        thread.daemon = True
        thread.start()
        return thread
    return None


def _claim(path: str, owner: str) -> _File | None:
    with _lock:
        entry = _files.get(path)
        if entry is None or entry.owner is not None:
            return None
        entry.owner = owner
        return entry


def _hash_all(paths: list[str], records: _verified.Records) -> None:
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError):
            tid = threading.get_native_id()
            os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + HELPER_NICE)
    buffer = bytearray(_CHUNK_BYTES)  # one for every file: no fresh pages per file
    for path in paths:
        entry = _claim(path, "prehash")
        if entry is None:
            continue
        try:
            recorded = records.digest(path, _verified.identity(path))
            entry.result = recorded if recorded is not None else _sha256(path, buffer)
        except OSError as exc:
            entry.result = exc
        finally:
            entry.done.set()


_CHUNK_BYTES = 8 << 20


def _sha256(path: str, buffer: bytearray) -> str:
    """SHA-256 of a file, read into `buffer` (8 MiB) at a time: each read and each
    update releases the GIL and takes it back, and while the console imports on the
    other thread every taking it back waits for the importer to let it go.
    `hashlib.file_digest`'s 256 KiB made 2,200 such round trips for the 289 MB of a
    106 M-lookup trace, and the hashing ended 0.59-0.64 s into the command, after the
    replay had started, against 0.42-0.48 s (criteo-kaggle, 2-core VM)."""
    digest = hashlib.sha256()
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as handle:
        while size := handle.readinto(buffer):
            digest.update(view[:size])
    return digest.hexdigest()


def claim_or_wait(path: str | Path) -> str | None:
    """The SHA-256 of `path` from the background hashing (waiting for it if under way),
    when that hashed this very file; else None, and the caller hashes it (this call
    claims the file, so the background thread leaves it alone)."""
    real = os.path.realpath(path)
    entry = _claim(real, "reader")
    if entry is not None:
        return None  # the caller's now
    with _lock:
        entry = _files.get(real)
    if entry is None or entry.owner != "prehash":
        return None
    entry.done.wait()
    if not isinstance(entry.result, str):
        return None  # the reader reports the error as it meets it
    try:
        if _stat_key(real) != entry.key:
            return None
    except OSError:
        return None
    return entry.result
