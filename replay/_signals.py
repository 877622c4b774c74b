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

Worker processes (`deferred`, `ignore_in_worker`): a terminal's Ctrl-C reaches the whole
process group, a pool's server and its workers included, from the moment they exist. A
pool is therefore started inside `deferred()`, which blocks both signals in the starting
thread: the processes it starts inherit the blocked mask (across fork and exec), so a
signal can reach none of them before `ignore_in_worker` (the first thing a worker runs)
ignores SIGINT and unblocks; and the parent takes the signal only once every worker it
started is known to its pool, which can then stop them all. Without it a Ctrl-C during
the pool's start printed the `KeyboardInterrupt` traceback of the forkserver importing
the engine, and a SIGTERM while a worker was being forked left a worker the pool did not
know, which then failed to unpickle its queues (the parent had gone) with a traceback.

An interrupt that never ends the command (`_redeliver`): code that catches every
exception, or a C extension that clears it, can drop the `KeyboardInterrupt` on its way
up; the command then ran on, deaf to further signals. From the first interrupt on, a
thread of its own sends the signal again while the main thread handles no exception and
the interrupt is not yet reported (`message`).
"""

from __future__ import annotations

import _thread
import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

HANDLED = (signal.SIGINT, signal.SIGTERM)

_received: int | None = None
_raised = False
_deferring = 0  # depth of `deferred` blocks in the main thread
_held = False  # a signal arrived in such a block: raised when the outermost one ends
_reported = False  # the interrupt's line is being printed: the command is ending
_watching = False  # `_redeliver` runs
REDELIVER_S = 1.0


def _handler(signum: int, frame: FrameType | None) -> None:
    global _received, _held
    if _raised or _reported:
        return  # already unwinding from the first one
    if _received is None:
        _received = signum
    if _deferring:
        _held = True  # another thread took it (the main thread blocks it): raised later
        return
    raise _interrupt()


def _interrupt() -> KeyboardInterrupt:
    """The interrupt to raise in the main thread, and from the first one on a watch
    that it is not dropped."""
    global _raised, _watching
    _raised = True
    if not _watching and hasattr(sys, "_current_exceptions"):
        _watching = True
        # `_thread`, not `threading`: the main thread may hold threading's locks here
        _thread.start_new_thread(_redeliver, (threading.get_ident(),))
    return KeyboardInterrupt()


def _redeliver(main: int) -> None:
    """Send the signal again, once a second, while the main thread handles no exception
    (it is neither unwinding from the interrupt nor cleaning up after it) and the
    interrupt is not reported: its `KeyboardInterrupt` was dropped on the way up."""
    global _raised
    while not _reported:
        time.sleep(REDELIVER_S)
        current = sys._current_exceptions().get(main)
        handling = current[0] if isinstance(current, tuple) else current  # 3.11: a tuple
        if handling is None and _raised and not _reported and _received is not None:
            _raised = False
            os.kill(os.getpid(), _received)


def _unraisable(hook: Any) -> Callable[[Any], None]:
    """A `sys.unraisablehook` that catches the interrupt Python would print and drop: a
    signal that landed in a weakref callback (importlib's module locks, during the
    imports), a ctypes callback (llvmlite's object cache, while numba loads) or a
    `__del__`. Nothing is printed; the signal is sent again 10 ms later, when the main
    thread is past that frame, and raised there. Once a signal has arrived, any other
    error Python would print this way is its aftermath (a finalizer of an object the
    interrupt left half-built: llvmlite's `ObjectRef.__del__` raised AttributeError
    when Ctrl-C landed in numba's compilation) and is dropped too: the command ends
    with its one line and 130/143, never a traceback."""

    def handle(unraisable: Any) -> None:
        global _raised
        if _received is not None and issubclass(unraisable.exc_type, KeyboardInterrupt):
            _raised = False
            threading.Timer(0.01, os.kill, (os.getpid(), _received)).start()
            return
        if _received is not None:
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
    global _received, _raised, _held, _reported
    _received = None
    _raised = False
    _held = False
    _reported = False


def exit_code() -> int:
    """128 + the signal that interrupted the command (SIGINT when none was recorded: a
    `KeyboardInterrupt` raised some other way)."""
    return 128 + (_received if _received is not None else signal.SIGINT)


def message() -> str:
    """The interrupt's line; once asked for, the interrupt counts as reported (the
    command ends), and further signals are ignored."""
    global _reported
    _reported = True
    return "replay: terminated" if _received == signal.SIGTERM else "replay: interrupted"


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Hold SIGINT and SIGTERM for the block: processes started in it begin with both
    blocked (see the module's notes; `ignore_in_worker` takes them back), and a signal
    that arrives meanwhile interrupts the caller as the block ends (in the main thread,
    with the handlers installed), not halfway through starting a process.

    A command that reaches the block after a signal was taken lost that interrupt on its
    way up (a library that dropped the exception): it is raised again here, before any
    process starts, rather than leaving the command running, deaf to a second signal."""
    global _deferring, _held
    if not hasattr(signal, "pthread_sigmask"):  # Windows: no signal masks
        yield
        return
    main = threading.current_thread() is threading.main_thread()
    if main and _received is not None:
        raise _interrupt()
    if main:
        _deferring += 1  # first: `_handler` then holds what comes from here on
    old = None
    try:
        old = signal.pthread_sigmask(signal.SIG_BLOCK, [])  # the mask as it is
        signal.pthread_sigmask(signal.SIG_BLOCK, HANDLED)
        yield
    finally:
        held = False
        if main:
            _deferring -= 1
            if not _deferring:
                held, _held = _held, False
        if old is not None:  # a signal pending for this thread is raised here by `_handler`
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
        if held and not _raised:
            raise _interrupt()


def ignore_in_worker() -> None:
    """The first thing a worker process of a pool does: leave SIGINT to the parent (a
    terminal sends it to the whole process group; the parent stops the pool), so workers
    print nothing, then take back the signals `deferred` blocked (a SIGTERM the parent
    sent meanwhile to stop the pool ends the worker now, SIGTERM's default action)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, HANDLED)


__all__ = [
    "HANDLED",
    "deferred",
    "exit_code",
    "ignore_in_worker",
    "install",
    "message",
    "received",
    "reset",
]
