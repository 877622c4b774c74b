"""The `replay` console script (and `python -m replay`).

It installs the interrupt handlers (`replay._signals`) before anything heavy is imported:
an interrupt while numpy, typer, pyarrow or numba load (the first fraction of a second
of every command) then ends the command with one line and 130/143, like one during its
work, never with a `KeyboardInterrupt` traceback.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys

from replay import GC_THRESHOLDS, _signals


def main() -> None:
    _signals.install()
    if sys.argv[1:] == ["--version"]:
        _print_version()
    # OpenBLAS starts a thread per core when numpy loads, and they spin for a while
    # waiting for work: ~0.1 s of the second core in a `replay run` (2.6% of its samples),
    # which uses no multi-threaded BLAS. A user's own setting is kept.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    if sys.argv[1:2] in (["plan"], ["generate"]):
        # numpy asks for transparent huge pages (madvise) on every array of 4 MiB or more,
        # and each such fault zeroes 2 MiB whole; these commands' large arrays come and go
        # by the thousand. meta-2021's day plan: 16.7-22.7 s of system CPU with them,
        # 3.7-6.1 s without; its one batch generated: 7.3-8.7 -> 2.5-2.7 s, wall 24-31 ->
        # 21-27 s; user time no higher, same bytes (2-core VM, load 1.5-7). Read when
        # numpy loads; a user's own setting is kept.
        os.environ.setdefault("NUMPY_MADVISE_HUGEPAGE", "0")
    # pyarrow's own allocator (mimalloc) hands freed row groups back to the OS and asks
    # for transparent huge pages, so the next row group's buffers fault in again with 2 MiB
    # of zeroing each: half the CPU of generating meta-2021 (perf: clear_page_erms under
    # folio_zero_user) was the kernel's. The system allocator keeps freed blocks for reuse
    # (`replay._malloc.retain_freed_memory`): system time 1.4-2.2 -> 0.2-0.4 s on 27.7 M
    # lookups, bytes unchanged. Read when pyarrow loads; a user's own setting is kept.
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
    try:
        # the collector's thresholds of the whole command (`replay.cli`) from here: with
        # Python's own, the imports before `replay.cli` (hashlib, json, dataclasses, ...)
        # made 13 collections, 2-3 ms
        gc.set_threshold(*GC_THRESHOLDS)
        from replay._malloc import retain_freed_memory

        # before any thread allocates (the checksums' below): the generator's worker
        # threads share one arena, which keeps their freed row groups (`replay._malloc`)
        retain_freed_memory(one_arena=sys.argv[1:2] == ["generate"])
        from replay import _prehash  # hashlib, pathlib: after the handlers, not before

        # the checksums of a trace named on the command line, on the core the imports
        # leave idle
        _prehash.start(sys.argv[1:])
        from replay.cli import console_main

        console_main()
    except KeyboardInterrupt:  # outside `main`'s own handling: the imports, the exit
        _interrupted()
    except Exception:
        # an interrupt that a C extension reports as an error of its own (numba's
        # `_dispatcher` raises "ImportError: numba._devicearray failed to import" when
        # the import it makes is interrupted): the signal's line, not that traceback
        if _signals.received() is None:
            raise
        _interrupted()


def _print_version() -> None:
    # answered before typer loads and builds every command's options (0.3 s on the 2-core
    # VM, against 0.03 s of Python for this); the option stays on the app, for `--help`
    # and for `--version` given with other arguments, and prints the same line
    from replay._version import __version__

    with contextlib.suppress(OSError):  # a closed pipe (`replay --version | head -c 1`)
        sys.stdout.write(f"replay {__version__}\n")
        sys.stdout.flush()
    os._exit(0)


def _interrupted() -> None:
    print(_signals.message(), file=sys.stderr)
    os._exit(_signals.exit_code())


__all__ = ["main"]
