"""`read_ahead`: produce an iterator's items in a background thread.

pyarrow's Parquet decoding and the numba kernels (`nogil=True`) release the GIL, so a
reader thread decoding the next chunk overlaps the caller's kernel on this one. Used by
the replay stream, `replay mrc` and `replay inspect`.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Iterator
from typing import TypeVar

Item = TypeVar("Item")


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
            item = slots.get()
            if item is done:
                break
            if isinstance(item, BaseException):
                raise item
            yield item  # type: ignore[misc]
    finally:
        cancel.set()
        while worker.is_alive():
            with contextlib.suppress(queue.Empty):
                slots.get(timeout=0.05)
        worker.join()
