"""Checksums this machine has verified: a file unchanged since is not hashed again.

Every command that reads a trace folder checks each file's SHA-256 against the manifest
(`--verify`, the default): 0.26 s of CPU for the 289 MB of a 106 M-lookup trace on the
2-core VM, on the core the reader and the statistics share, and while the command imports
(`replay._prehash`) it slows the imports from 0.33 to 0.39 s. A trace is replayed many times
(sweeps, comparisons, benchmarks) and its files do not change in between.

Once a command has matched a trace's files with its manifest, it records each file's digest
with the file's identity when it was hashed: device, inode, size, modification time and
change time (ns). A later command takes the recorded digest of a file whose identity is
the same and hashes the others; the manifest's checksums are compared as always, so an
edited manifest is still caught. Any write to a file sets its change time, which no user
call can set back (`touch -d` and `os.utime` set it to now); a copy or a replacement is a
new inode. What a record cannot see is damage below the file system (a disk's bit rot):
`REPLAY_CACHE_DIR=` (empty) turns the records off and hashes every file, every time.

A file changed within a timestamp's granularity of being hashed could keep its times; as
git does for its index, a file whose change time is less than 2 s before the hashing
began is hashed again next time rather than recorded.

Records live in `$REPLAY_CACHE_DIR/verified/` (default `$XDG_CACHE_HOME/replay`, else
`~/.cache/replay`), one JSON file per trace folder (named by the SHA-256 of its real path),
written to a temporary name and renamed; past 256 records, those of folders that no longer
exist are deleted when a record is written. A record that cannot be read or written is no
error: it only saves time. This module imports only the standard library, `replay._files`
and `replay.errors`, which do too (the console script uses it before the heavy imports).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import time
from pathlib import Path

from replay import _files
from replay.errors import ReplayError

RACY_NS = 2_000_000_000
PRUNE_ABOVE = 256  # records kept before those of folders that are gone are deleted
Identity = tuple[int, int, int, int, int]  # (st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns)


def records_dir() -> Path | None:
    """Where the records live; None when `REPLAY_CACHE_DIR` is set empty (off)."""
    chosen = os.environ.get("REPLAY_CACHE_DIR")
    if chosen is not None:
        return Path(chosen) / "verified" if chosen else None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "replay" / "verified"


def identity(path: str | Path) -> Identity | None:
    """The file's identity now, or None where it cannot be read."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _record_path(root: str | Path) -> Path | None:
    where = records_dir()
    if where is None:
        return None
    name = hashlib.sha256(os.path.realpath(root).encode()).hexdigest()
    return where / f"{name}.json"


class Records:
    """The recorded digests of one trace folder's files (empty when there are none)."""

    def __init__(self, root: str | Path) -> None:
        self.root = os.path.realpath(root)
        self.path = _record_path(root)
        self.entries: dict[str, tuple[Identity, str]] = {}
        if self.path is None:
            return
        try:
            data = json.loads(_files.read_bytes(self.path, _files.STATE_JSON))
            if data.get("root") != self.root:
                return
            for name, (ident, digest) in data["files"].items():
                if len(ident) == 5 and isinstance(digest, str) and len(digest) == 64:
                    self.entries[name] = (tuple(int(v) for v in ident), digest)  # type: ignore[assignment]  # five ints: len(ident) == 5
        except (OSError, ValueError, TypeError, KeyError, AttributeError, RecursionError):
            self.entries = {}
        except ReplayError:  # not a regular file, or too large: as if there were none
            self.entries = {}

    def digest(self, path: str | Path, now: Identity | None) -> str | None:
        """The recorded digest of `path` when its identity is still `now`."""
        if now is None:
            return None
        found = self.entries.get(os.path.realpath(path))
        return found[1] if found is not None and found[0] == now else None

    def save(self, hashed: dict[str, tuple[Identity, str]], started_ns: int) -> None:
        """Record `hashed` (real path -> (identity when hashed, digest)), files all matched
        with the manifest; `started_ns` is when the hashing began (time.time_ns()). Files
        racy then are left out; other records of the folder are kept."""
        if self.path is None:
            return
        entries = dict(self.entries)
        for name, (ident, digest) in hashed.items():
            if max(ident[3], ident[4]) < started_ns - RACY_NS:
                entries[name] = (ident, digest)
        if entries == self.entries:
            return
        text = json.dumps({"root": self.root, "files": entries}, sort_keys=True)
        with contextlib.suppress(OSError):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, temp = tempfile.mkstemp(dir=self.path.parent, prefix=".tmp-")
            try:
                with os.fdopen(fd, "w") as handle:
                    handle.write(text)
                os.replace(temp, self.path)
            except OSError:
                with contextlib.suppress(OSError):
                    os.unlink(temp)
                return
            _prune(self.path.parent)


def _prune(where: Path) -> None:
    """Delete the records of trace folders that no longer exist (benchmarks and scratch
    traces come and go), once there are more than `PRUNE_ABOVE` of them."""
    with contextlib.suppress(OSError):
        records = list(where.glob("*.json"))
        if len(records) <= PRUNE_ABOVE:
            return
        for record in records:
            try:
                root = json.loads(_files.read_bytes(record, _files.STATE_JSON)).get("root")
            except (OSError, ValueError, AttributeError, RecursionError, ReplayError):
                root = None
            if not isinstance(root, str) or not os.path.isdir(root):
                with contextlib.suppress(OSError):
                    record.unlink()


def now_ns() -> int:
    return time.time_ns()
