"""The `replay` console script (and `python -m replay`).

It installs the interrupt handlers (`replay._signals`) before anything heavy is imported:
an interrupt while numpy, typer, pyarrow or numba load (the first fraction of a second
of every command) then ends the command with one line and 130/143, like one during its
work, never with a `KeyboardInterrupt` traceback.
"""

from __future__ import annotations

import os
import sys

from replay import _signals


def main() -> None:
    _signals.install()
    # OpenBLAS starts a thread per core when numpy loads, and they spin for a while
    # waiting for work: ~0.1 s of the second core in a `replay run` (2.6% of its samples),
    # which uses no multi-threaded BLAS. A user's own setting is kept.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    try:
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


def _interrupted() -> None:
    print(_signals.message(), file=sys.stderr)
    os._exit(_signals.exit_code())


__all__ = ["main"]
