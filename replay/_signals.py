"""Interrupts: Ctrl-C (SIGINT) and SIGTERM end a command with one line and 128 + signal.

Both signals raise `KeyboardInterrupt` in the main thread, so every `finally` and every
atomic writer (`replay._output.atomic_folder`, the trace writer) removes what the command
had begun, exactly as for an error; `replay.cli.main` then prints `replay: interrupted`
and returns 130 (SIGINT) or 143 (SIGTERM), the shell's convention. Python's default
SIGTERM action kills the process on the spot, leaving temporary folders behind and no
message; a batch scheduler's `kill` or a container's stop sends SIGTERM.

A second signal while the first is being handled (the clean-up of a large partial
folder) is recorded but raises nothing, so clean-up is not cut short with a traceback;
SIGKILL still ends the process at once (and `--resume`/`--force` deal with what it
leaves). A signal that lands where Python prints and drops the exception (a weakref
or ctypes callback, a `__del__`: `sys.unraisablehook`) is sent again 10 ms later instead.

This module imports nothing heavy: the console script installs the handlers before it
imports numpy, typer or numba, so an interrupt during those imports is handled too.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

HANDLED = (signal.SIGINT, signal.SIGTERM)

_received: int | None = None
_raised = False


def _handler(signum: int, frame: FrameType | None) -> None:
    global _received, _raised
    if _raised:
        return  # already unwinding from the first one
    if _received is None:
        _received = signum
    _raised = True
    raise KeyboardInterrupt


def _unraisable(hook: Any) -> Callable[[Any], None]:
    """A `sys.unraisablehook` that catches the interrupt Python would print and drop: a
    signal that landed in a weakref callback (importlib's module locks, during the
    imports), a ctypes callback (llvmlite's object cache, while numba loads) or a
    `__del__`. Nothing is printed; the signal is sent again 10 ms later, when the main
    thread is past that frame, and raised there."""

    def handle(unraisable: Any) -> None:
        global _raised
        if _received is not None and issubclass(unraisable.exc_type, KeyboardInterrupt):
            _raised = False
            threading.Timer(0.01, os.kill, (os.getpid(), _received)).start()
            return
        hook(unraisable)

    return handle


def install() -> None:
    """Route SIGINT and SIGTERM to `KeyboardInterrupt` (main thread only: Python runs
    signal handlers there, and `signal.signal` may only be called from it)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in HANDLED:
        signal.signal(signum, _handler)
    sys.unraisablehook = _unraisable(sys.unraisablehook)


def received() -> int | None:
    """The first signal received since `install` (or `reset`), if any."""
    return _received


def reset() -> None:
    global _received, _raised
    _received = None
    _raised = False


def exit_code() -> int:
    """128 + the signal that interrupted the command (SIGINT when none was recorded: a
    `KeyboardInterrupt` raised some other way)."""
    return 128 + (_received if _received is not None else signal.SIGINT)


def message() -> str:
    return "replay: terminated" if _received == signal.SIGTERM else "replay: interrupted"


def ignore_in_worker() -> None:
    """For worker processes of a pool: leave SIGINT to the parent (a terminal sends it to
    the whole process group; the parent cancels the pool), so workers print nothing."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


__all__ = ["HANDLED", "exit_code", "ignore_in_worker", "install", "message", "received", "reset"]
