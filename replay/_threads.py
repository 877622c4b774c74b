"""`read_ahead`: produce an iterator's items in a background thread.

pyarrow's Parquet decoding and the numba kernels (`nogil=True`) release the GIL, so a
reader thread decoding the next chunk overlaps the caller's kernel on this one. Used by
the replay stream, `replay mrc` and `replay inspect`.

Helper threads (this reader, `OrderedWorker`, the checksum hashers) run at a lower
priority than the caller (`lower_priority`): the caller's kernel is the critical path
they feed, and with three runnable threads on two cores the OS otherwise shares the
cores evenly and takes a third of the caller's. 20 interleaved runs of `replay run` (30 M
lookups, 2-core VM): min 1.05 -> 0.96 s, median 1.18 -> 1.14 s at nice +5 (+10 alike).

Interrupts (`worker_pool`, `wait_for`): a command stops within 2 s of SIGINT or SIGTERM
whatever its threads are doing. A `with ThreadPoolExecutor()` block that an interrupt
leaves waits for every call in flight, and for every call queued: `replay generate
--preset meta-2021 --batches 1` took 70 s to stop, its one file (567 pieces of a batch)
being written to the end. A `worker_pool` left by an interrupt cancels what is queued
and waits for nothing: the calls in flight (a numba kernel cannot be stopped halfway)
are abandoned, their results dropped, and the process ends without joining them (the
console script). Left by an error, it still waits, so the caller's clean-up (removing a
partial output) never races a thread still writing into it; a caller whose calls run
long checks a stop flag between pieces of work (`replay.workload.generator`).
The main thread waits for a result in slices (`wait_for`): Python runs a signal's
handler in the main thread only, and a wait that no timeout ends lets it run only when
the kernel happens to interrupt that very thread.
"""

from __future__ import annotations

import contextlib
import os
import queue
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from typing import TypeVar

from replay import _signals

Item = TypeVar("Item")
Result = TypeVar("Result")

HELPER_NICE = 5
WAIT_SLICE_S = 0.1  # the longest a waiting main thread goes without running its handlers


def lower_priority() -> None:
    """Make the calling thread a helper: its nice value + `HELPER_NICE` (Linux sets it
    per thread); elsewhere, or where the OS refuses, nothing."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError):
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + HELPER_NICE)


def read_ahead(
    items: Iterator[Item], depth: int = 2, name: str = "replay-reader"
) -> Iterator[Item]:
    """Yield `items`, produced by a background thread up to `depth` ahead.

    An exception of the producer is raised here, in the consumer's thread; a consumer
    that stops early (break, error, garbage collection) stops the thread.
    """
    slots: queue.Queue = queue.Queue(maxsize=depth)
    done = object()
    cancel = threading.Event()

    def put(item: object) -> bool:
        while not cancel.is_set():
            try:
                slots.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        lower_priority()
        try:
            for item in items:
                if not put(item):
                    return
        except BaseException as exc:  # handed to the consumer
            put(exc)
            return
        put(done)

    worker = threading.Thread(target=produce, name=name, daemon=True)
    worker.start()
    try:
        while True:
            try:
                item = slots.get(timeout=WAIT_SLICE_S)  # in slices: `wait_for`
            except queue.Empty:
                continue
            if item is done:
                break
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        cancel.set()
        # interrupted: the producer's item in flight is abandoned (a daemon thread, it
        # ends with the process), not waited for
        while worker.is_alive() and _signals.received() is None:
            with contextlib.suppress(queue.Empty):
                slots.get(timeout=0.05)


def wait_for(future: Future[Result]) -> Result:
    """`future.result()`, waited for in slices of `WAIT_SLICE_S` (see the module's notes)."""
    while not future.done():
        wait_futures((future,), timeout=WAIT_SLICE_S, return_when=FIRST_COMPLETED)
    return future.result()


@contextlib.contextmanager
def worker_pool(
    workers: int, name: str, initializer: Callable[[], object] | None = None
) -> Iterator[ThreadPoolExecutor]:
    """A thread pool that an interrupt leaves at once: what is queued is cancelled and
    the calls in flight are abandoned; an error or a normal end waits for them (see the
    module's notes)."""
    pool = ThreadPoolExecutor(workers, thread_name_prefix=name, initializer=initializer)
    try:
        yield pool
    except BaseException as exc:
        # a generator that holds the pool is closed (GeneratorExit) by the interrupt
        # that unwinds its consumer: interrupted too
        interrupted = isinstance(exc, KeyboardInterrupt) or _signals.received() is not None
        pool.shutdown(wait=not interrupted, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


class OrderedWorker:
    """One background thread that runs submitted calls in order, at most `depth` behind.

    `submit` blocks while `depth` calls are pending (so the arguments they hold stay
    bounded), and raises, in the caller's thread, the exception of any call that failed.
    `drain` waits for every call; `close` drops what has not started. Used by the replay
    to run the trace statistics beside the policy: a third thread on two cores, which
    the OS schedules into the time the reader and the policy spend waiting (measured
    1.1-1.25 s against 1.4-1.55 s for 53 M lookups with the statistics in the reader).
    """

    def __init__(self, depth: int = 4, name: str = "replay-worker") -> None:
        self._pool = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix=name, initializer=lower_priority
        )
        self._pending: deque[Future[object]] = deque()
        self._depth = max(1, int(depth))

    def submit(self, fn: Callable[..., object], *args: object) -> Future[object]:
        while self._pending and (len(self._pending) >= self._depth or self._pending[0].done()):
            self._pending.popleft().result()
        future = self._pool.submit(fn, *args)
        self._pending.append(future)
        return future

    def drain(self) -> None:
        while self._pending:
            self._pending.popleft().result()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._pending.clear()

    def __enter__(self) -> OrderedWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
