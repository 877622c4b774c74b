"""The one way replay opens a file a user can name: regular files only, each kind of file
under a size limit stated here, checked before a byte is read.

Every command reads files whose names come from its arguments: system and workload specs
(TOML), sharding plans, locality statistics, TorchRec statistics, trace manifests and
the JSON files of result folders, Criteo and FBGEMM inputs. Any of them can be a FIFO
(opening it waits for a writer, forever), a device such as `/dev/zero` (it never ends:
reading it whole takes all the memory there is), a socket or a folder. So:

- `check_regular(path)` looks without opening (`os.stat`, which never blocks): a FIFO,
  a character or block device, a socket or a folder is refused in one line naming what
  it is (`ReplayError`, exit 2); links are followed, so a link to a regular file is one.
- `open_regular(path)` checks so, then opens with `O_NONBLOCK` (opening a FIFO put
  there since the check returns at once rather than waiting for a writer) and checks
  the opened descriptor again (`fstat`): what was swapped between the look and the open
  is refused as well. The file it returns blocks as usual (for streaming readers: the
  Criteo and FBGEMM ingesters).
- `read_bytes(path, kind)` / `read_text` / `read_json` read a whole file of `kind`: its
  size (from the opened descriptor) is compared with the kind's limit before reading,
  and at most limit + 1 bytes are read, so a file that grows while it is read, or one
  whose size the kernel does not know (`/proc`), cannot make replay allocate past it.

A reader of a new file names its kind and its own error class, e.g. for `torchrec.json`::

    document = read_json(path, TORCHREC_STATS, InputError, bad="not TorchRec statistics")

(missing, a FIFO, a device, too large, not UTF-8, malformed JSON: each one line of that
class, naming `path`); a new kind goes in `KINDS` and in the documented table.

The limits (`KINDS`, listed in docs/troubleshooting.md) are 16 times or more the largest
such file replay writes or that has been published, so a real file never meets one;
they bound what a hostile file can cost, since parsing holds several times the text in
memory (2-core VM): 4 MiB of TOML (a spec of 22,000 tables) parses in 0.85 s; 16 MiB of
JSON in 0.2 s and 190 MB as lists of ranks, and at worst (`[[], [], ...]`, 5.6 M empty
lists) in 2.3 s and 450 MB, where 64 MiB would take 10.6 s and 1.7 GB.

Files that replay ships (its presets) are read directly. This module imports only the
standard library and `replay.errors`, so the console's early helpers (`_prehash`,
`_verified`) may use it.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from replay.errors import InputError, ReplayError

KiB, MiB = 1 << 10, 1 << 20


@dataclass(frozen=True)
class FileKind:
    """A kind of file replay reads whole, and the most bytes one may hold."""

    name: str  # what the file is, in messages: "a workload spec"
    limit_bytes: int
    largest_known: str  # the largest such file replay writes or knows of: why this limit


SPEC = FileKind(
    "a system or workload spec (TOML)", 4 * MiB, "170 KiB: the meta-2021 spec of 856 tables"
)
LOCALITY_STATS = FileKind(
    "a locality statistics file", 1 * MiB, "22 KiB: Meta's locality_stats.txt, 17 records"
)
SHARDING_PLAN = FileKind(
    "a sharding plan (JSON)",
    16 * MiB,
    "about 50 KiB for 856 tables table-wise; a table on all of 65,536 ranks adds 0.4 MiB",
)
TORCHREC_STATS = FileKind(
    "TorchRec statistics (torchrec.json)", 16 * MiB, "one entry per table and shard"
)
MANIFEST = FileKind(
    "a trace manifest (manifest.json)",
    16 * MiB,
    "about 0.25 KiB per table and 0.2 KiB per part file: 0.2 MiB for 856 tables",
)
RESULT_JSON = FileKind(
    "a result folder's JSON file",
    16 * MiB,
    "under 1 MiB: summary.json, meta.json, config.json, workload.json, sharding.json",
)
STATE_JSON = FileKind(
    "replay's own bookkeeping (a .plan.json, a record of verified checksums)",
    16 * MiB,
    "a few KiB",
)
TBE_CONFIG = FileKind(
    "an FBGEMM TBE config (TBEDataConfig JSON)",
    16 * MiB,
    "about 1 KiB per feature (indented, 20 heavy hitters each): 0.9 MiB for 856 features",
)
TORCHREC_CONFIGS = FileKind(
    "TorchRec table configs (JSON)", 16 * MiB, "about 0.2 KiB per table: 0.2 MiB for 856"
)
KINDS = (
    SPEC, LOCALITY_STATS, SHARDING_PLAN, TORCHREC_STATS, MANIFEST, RESULT_JSON, STATE_JSON,
    TBE_CONFIG, TORCHREC_CONFIGS,
)  # fmt: skip


def file_kind(mode: int) -> str:
    """What a file that is not a regular file is, in words (from its `st_mode`)."""
    kinds = (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    )
    return next((name for test, name in kinds if test(mode)), "a special file")


def _refuse_mode(path: str | Path, mode: int, error: type[ReplayError], noun: str) -> None:
    if stat.S_ISDIR(mode):
        raise error(f"{path}: is a folder, not a {noun}")
    if not stat.S_ISREG(mode):
        raise error(f"{path}: is {file_kind(mode)}, not a regular file")


def _os_error(
    path: str | Path, exc: OSError, error: type[ReplayError], noun: str = "file"
) -> ReplayError:
    if isinstance(exc, FileNotFoundError | NotADirectoryError):
        return error(f"{path}: no such {noun}")
    if isinstance(exc, IsADirectoryError):
        return error(f"{path}: is a folder, not a {noun}")
    if isinstance(exc, PermissionError):
        return error(f"{path}: cannot read (permission denied)")
    return error(f"{path}: cannot read ({exc.strerror or exc})")


# Every function takes `error`, the caller's subclass of ReplayError for its messages
# (ConfigError for specs, TraceError for manifests, ...), and `noun`, the file as its
# messages name it: "PATH: no such NOUN", "PATH: is a folder, not a NOUN".


def check_regular(
    path: str | Path, error: type[ReplayError] = InputError, *, noun: str = "file"
) -> os.stat_result:
    """The status of `path`, a regular file (or a link to one); else `error` in one line:
    missing, a folder, a FIFO, a device, a socket, unreadable. Opens nothing."""
    try:
        st = os.stat(path)
    except OSError as exc:  # missing, a name too long, a folder on the way not searchable
        raise _os_error(path, exc, error, noun) from None
    except ValueError as exc:  # a NUL in the name (from the API; argv holds none)
        raise error(f"{str(path)!r}: not a valid file name ({exc})") from None
    _refuse_mode(path, st.st_mode, error, noun)
    return st


def _open_fd(path: str | Path, error: type[ReplayError], noun: str) -> tuple[int, os.stat_result]:
    """A descriptor of the regular file `path` (blocking again) and its status."""
    check_regular(path, error, noun=noun)
    try:
        # O_NONBLOCK: a FIFO swapped in since the check opens at once, without a writer
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise _os_error(path, exc, error, noun) from None
    try:
        st = os.fstat(fd)
        _refuse_mode(path, st.st_mode, error, noun)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def open_regular(
    path: str | Path, error: type[ReplayError] = InputError, *, noun: str = "file"
) -> BinaryIO:
    """`path` opened for reading in binary, if it is a regular file (see the module
    docstring); the caller closes it. For files read as a stream, with no size limit."""
    fd, _ = _open_fd(path, error, noun)
    return os.fdopen(fd, "rb")


def read_bytes(
    path: str | Path, kind: FileKind, error: type[ReplayError] = InputError, *, noun: str = "file"
) -> bytes:
    """The whole regular file `path`, of at most `kind.limit_bytes` (else `error` in one
    line, before anything is read)."""
    fd, st = _open_fd(path, error, noun)
    limit = kind.limit_bytes
    with os.fdopen(fd, "rb") as handle:
        if st.st_size > limit:
            raise error(_too_large(path, kind, st.st_size))
        try:
            data = handle.read(limit + 1)
        except OSError as exc:
            raise _os_error(path, exc, error, noun) from None
    if len(data) > limit:  # it grew since, or the kernel did not know its size
        raise error(_too_large(path, kind, None))
    return data


def read_text(
    path: str | Path, kind: FileKind, error: type[ReplayError] = InputError, *, noun: str = "file"
) -> str:
    """`read_bytes` decoded as UTF-8 (else `error`: not UTF-8 text)."""
    data = read_bytes(path, kind, error, noun=noun)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not UTF-8 text (byte {exc.start})") from None


def read_json(
    path: str | Path,
    kind: FileKind,
    error: type[ReplayError] = InputError,
    *,
    noun: str = "file",
    bad: str = "not valid JSON",
) -> Any:
    """`read_bytes` parsed as JSON (`replay._json.parse_json`: one line for any way the
    text is malformed; `bad` the caller's words for such a file)."""
    from replay._json import parse_json

    return parse_json(read_bytes(path, kind, error, noun=noun), path, error, bad=bad)


def _size(n: int) -> str:
    """`1 MiB`, `2.58 MiB`, `1 GiB`: binary units, 3 significant digits."""
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", MiB), ("KiB", KiB)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n} B"


def _too_large(path: str | Path, kind: FileKind, size: int | None) -> str:
    held = f"{_size(size)}, more" if size is not None else "more"
    return (
        f"{path}: {held} than the {_size(kind.limit_bytes)} that {kind.name} may hold; "
        "is it the right file?"
    )


__all__ = [
    "KINDS",
    "LOCALITY_STATS",
    "MANIFEST",
    "RESULT_JSON",
    "SHARDING_PLAN",
    "SPEC",
    "STATE_JSON",
    "TORCHREC_STATS",
    "FileKind",
    "check_regular",
    "file_kind",
    "open_regular",
    "read_bytes",
    "read_json",
    "read_text",
]
