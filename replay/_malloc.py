"""Process-level allocator tuning for the tool's large, short-lived arrays.

Each row group allocates ~10-25 MB of numpy arrays that live until pyarrow has written
them. glibc hands such blocks back to the OS on free (mmap threshold, heap trimming), so
the next row group page-faults its memory in again; on the 2-core VM that cost ~12 ns per
lookup, a third of the sampling time (measured: kaggle generation 40 -> 46 M lookups/s at
200 batches, 50 -> 54 M at 1000, with the settings below). Keeping freed memory in the
heap makes the next row group reuse it. Peak memory is unchanged: it is still bounded by
the row groups in flight.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import mmap
import sys
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # numpy loads with the arrays' first use: `replay --help` needs none
    import numpy as np

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
_KEEP_BYTES = 1 << 30
_done = False


@functools.cache
def _libc() -> ctypes.CDLL | None:
    """The C library (for mallopt and madvise; its callers run on Linux only), or None
    where it cannot be loaded.

    The process's own symbols (`dlopen(NULL)`) include the C library Python is linked
    with: `ctypes.util.find_library` would import `tempfile` and `subprocess` and run
    `ldconfig -p`, ~10 ms at the start of every command on the 2-core VM."""
    try:
        return ctypes.CDLL(None)
    except OSError:
        return None


def retain_freed_memory(*, one_arena: bool = False) -> bool:
    """Ask glibc to keep freed blocks up to 1 GiB for reuse (`one_arena`: in one arena
    for all threads); no-op elsewhere. Idempotent: the first call decides; it must come
    before the process starts threads for `one_arena` to hold.

    `one_arena` (`replay generate`): a thread's own arena lives in heaps of at most
    64 MiB, which glibc unmaps as they empty and maps for a block that does not fit,
    whatever the thresholds say, so the buffers the generator's worker threads allocate
    per row group were faulted in afresh every time: 3.9 M page faults for meta-2021's
    887 M-lookup batch, against 0.2 M in one arena (2-core VM; same bytes, peak RSS 1.14
    -> 1.2 GB; the system time, 3.8-19.8 s, followed the machine's load more than the
    faults: docs/performance.md). Those threads allocate a few large
    arrays per row group, so they hardly contend for the arena's lock. Not for `replay
    run`, whose reader thread allocates pyarrow's many small buffers beside the others:
    with one arena it measured slower (3 pairs against the code before, CPU 3.69 -> 4.04 s
    on a 106 M-lookup trace, loaded machine; 3.7 -> 3.3 s without it)."""
    global _done
    if _done or not sys.platform.startswith("linux"):
        return _done
    libc = _libc()
    if libc is None:
        return False
    try:
        ok = libc.mallopt(_M_MMAP_THRESHOLD, _KEEP_BYTES) == 1
        ok = libc.mallopt(_M_TRIM_THRESHOLD, _KEEP_BYTES) == 1 and ok
        if one_arena:
            ok = libc.mallopt(_M_ARENA_MAX, 1) == 1 and ok
    except AttributeError:  # not glibc (e.g. musl has no mallopt)
        return False
    _done = ok
    return ok


def trim_freed_memory() -> bool:
    """Give the heap's free memory back to the OS (glibc's malloc_trim; no-op elsewhere).

    `retain_freed_memory` keeps blocks up to 1 GiB in the heap for the next row group;
    between the stages of a long job whose batches are large (a plan of 26 M lookups a
    batch frees arrays of 200 MB each) the kept blocks add up: a 400-table plan held
    ~1.7 GiB it no longer used when its steady-state stage began (issue 39)."""
    if not sys.platform.startswith("linux"):
        return False
    libc = _libc()
    if libc is None:
        return False
    try:
        return bool(libc.malloc_trim(0))
    except AttributeError:  # not glibc
        return False


# Per-key state arrays (100+ MB for the larger presets) are faulted in 4 KiB pages on
# first touch; on the 2-core VM a fault costs ~6.5 us, so np.full over 135 MB took 0.22 s,
# most of a short run's set-up. Anonymous memory advised MADV_HUGEPAGE is faulted in
# 2 MiB pages instead, but only where a 2 MiB-aligned 2 MiB range lies inside the mapping:
# mmap aligns only mappings whose length is a multiple of 2 MiB, so an array of 135,050,348
# bytes came back 4 KiB-aligned and filled in 0.26 s, against 0.016 s when aligned
# (measured). The mapping is therefore padded to whole huge pages plus one, and the array
# starts at the first 2 MiB boundary inside it.
# Huge pages are not always the cheaper ones. Right after another process freed its
# memory (a libCacheSim run, 2-core Firecracker VM with free page reporting), 188 MB in
# huge pages took 0.38-0.39 s to fault in and in 4 KiB pages 0.08 s (45,899 faults; the
# next process, huge pages again: 0.03 s): a 2 MiB page comes from the free blocks the
# guest has handed back to the host, which backs them again page by page, while 4 KiB
# pages come from the memory just freed. Huge pages pay off where the random accesses
# are on the critical path (the LRU's table: 12.2-12.5 against 13.2-13.4 ns per lookup on
# criteo-terabyte); `huge=False` suits state that a helper thread updates (the trace
# statistics' byte per row).
_HUGE_MIN_BYTES = 1 << 25
_HUGE_PAGE_BYTES = 1 << 21


_MADV_POPULATE_WRITE = 23  # Linux >= 5.14
_POPULATE_CHUNK_BYTES = _HUGE_PAGE_BYTES


_SMALL_PAGE_BYTES = 4096


def touches_most_pages(nbytes: int, writes: int) -> bool:
    """Whether `writes` scattered over an array of `nbytes` (4 KiB pages) may touch most
    of its pages: at least one per two pages. Where not (a short trace of a large row
    space), faulting the whole array in ahead costs the memory and the time of pages it
    never uses, and its kernel faults in the few it touches: 26,000 lookups of Criteo
    1TB over 1.04 G rows (the statistics' byte per row) took 1.3 GiB of peak RSS."""
    return 2 * int(writes) >= -(-int(nbytes) // _SMALL_PAGE_BYTES)


def populate(array: np.ndarray) -> bool:
    """Fault in every page of `array` now (its contents unchanged), so that a kernel that
    touches it later pays no page faults; False where the OS cannot (not Linux, or a
    kernel older than 5.14). The call releases the GIL (ctypes), so a helper thread can
    do it while the caller's threads wait for something else."""
    if not sys.platform.startswith("linux") or not array.nbytes:
        return False
    return _populate_range(array.ctypes.data, array.nbytes)


def _populate_range(start: int, nbytes: int) -> bool:
    libc = _libc()
    if libc is None:
        return False
    first = start - start % mmap.PAGESIZE
    end = start + nbytes
    # in chunks of one huge page: the kernel holds the process's memory-map lock while
    # it faults a range in, and a thread that maps memory meanwhile (the reader's next
    # buffers, numba loading a kernel) waits for the whole range (0.5 s for 188 MB of
    # huge pages on the 2-core VM right after a process that freed 1 GB: the host backs
    # the pages again)
    for at in range(first, end, _POPULATE_CHUNK_BYTES):
        length = ctypes.c_size_t(min(_POPULATE_CHUNK_BYTES, end - at))
        if libc.madvise(ctypes.c_void_p(at), length, _MADV_POPULATE_WRITE) != 0:
            return False
    return True


def _map_area(nbytes: int, huge: bool) -> tuple[mmap.mmap, int]:
    """An anonymous mapping that holds `nbytes` from its first 2 MiB boundary on (the
    note above `populate`), and that boundary's offset in it."""
    pages = -(-nbytes // _HUGE_PAGE_BYTES) + 1
    area = mmap.mmap(-1, pages * _HUGE_PAGE_BYTES, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    with contextlib.suppress(AttributeError, OSError):  # no THP here: 4 KiB pages anyway
        area.madvise(mmap.MADV_HUGEPAGE if huge else mmap.MADV_NOHUGEPAGE)
    view = ctypes.c_char.from_buffer(area)
    start = ctypes.addressof(view)
    del view  # the mapping can be closed again (`release_reserved`)
    return area, -start % _HUGE_PAGE_BYTES


# Areas mapped ahead for `state_array` (`reserve_state`), by (bytes, huge), each with the
# faulting in progress.
_reserved: dict[tuple[int, bool], tuple[mmap.mmap, int, _Faulting]] = {}
_reserved_lock = threading.Lock()
_RESERVE_MIN_BYTES = 1 << 20
# `_Faulting` writes zeros in pieces of this size: `state_array` waits for one piece at
# most (4,096 page faults, 10-30 ms on the 2-core VM), and during the imports each piece
# waits at most one switch interval (5 ms) for the GIL
_PIECE_BYTES = 1 << 24


class _Faulting:
    """Faults a reserved area in on a helper thread: zeros written from /dev/zero piece
    by piece until `state_array` takes the area (`hand_over`), then, for the rest,
    MADV_POPULATE_WRITE, which faults pages in without writing them, so the array's
    users may write it meanwhile. `replay run`'s caller thus waits for one piece, not for
    the whole area: at load 5-6 on the 2-core VM it waited 0.1-0.35 s for the statistics'
    188 MB (Criteo Terabyte) when it made its arrays."""

    def __init__(self, area: mmap.mmap, skip: int, nbytes: int) -> None:
        self.area, self.skip, self.nbytes = area, skip, nbytes
        self._piece = threading.Lock()  # held while a piece of zeros is being written
        self._taken = False
        self.thread = threading.Thread(target=self._run, name="replay-prefault", daemon=True)

    def _run(self) -> None:
        view = memoryview(self.area)
        done = 0
        try:
            with open("/dev/zero", "rb", buffering=0) as zero:
                while done < self.nbytes:
                    with self._piece:
                        if self._taken:
                            break
                        end = min(done + _PIECE_BYTES, self.nbytes)
                        with view[self.skip + done : self.skip + end] as rest:
                            got = zero.readinto(rest)
                    if not got:
                        return
                    done += got
        except OSError:  # no /dev/zero: the pages fault in where they are first used
            return
        finally:
            view.release()
        if done < self.nbytes:  # taken: the rest without writing it
            start = ctypes.addressof(ctypes.c_char.from_buffer(self.area, self.skip + done))
            _populate_range(start, self.nbytes - done)

    def hand_over(self) -> None:
        """No zeros written from now on (waits for the piece being written)."""
        with self._piece:
            self._taken = True


def reserve_state(nbytes: int, *, huge: bool = True) -> bool:
    """Map the memory of a `state_array` of `nbytes` bytes (and the same `huge`) that this
    process makes soon, and fault it in from now on, on a helper thread; the
    `state_array` call takes it (once). False where nothing was reserved (not Linux, too
    small, or that size already reserved).

    For `replay run`, which knows the sizes of its policy's table and of the trace
    statistics' state from the trace's manifest and the system before it imports numpy,
    numba and pyarrow: faulting them in then uses the core that those imports (0.2 s of
    one thread holding the GIL) leave idle, where it otherwise took the replay's first
    0.05-0.2 s (right after another process freed its memory), on the caller's thread for
    the table, which the policy's kernel touches at random from its first lookups."""
    if nbytes < _RESERVE_MIN_BYTES or not sys.platform.startswith("linux") or _libc() is None:
        return False
    key = (int(nbytes), bool(huge))
    with _reserved_lock:
        if key in _reserved:
            return False
        area, skip = _map_area(key[0], key[1])
        faulting = _Faulting(area, skip, key[0])
        _reserved[key] = (area, skip, faulting)
    faulting.thread.start()
    return True


def release_reserved() -> None:
    """Unmap what `reserve_state` mapped and no `state_array` took (after its thread)."""
    with _reserved_lock:
        left = list(_reserved.values())
        _reserved.clear()
    for area, _skip, faulting in left:
        faulting.thread.join()
        with contextlib.suppress(BufferError):  # still viewed: freed with its last view
            area.close()


def state_array(
    length: int, dtype: object, fill: int | float = 0, *, huge: bool = True
) -> np.ndarray:
    """A 1-D array of `length` items set to `fill`, in huge pages when it is large and
    `huge` (see the note above `populate` for when 4 KiB pages are the better choice)."""
    import numpy as np

    dt = np.dtype(dtype)  # type: ignore[call-overload]  # any dtype-like; numpy checks it
    nbytes = int(length) * dt.itemsize
    with _reserved_lock:
        reserved = _reserved.pop((nbytes, bool(huge)), None)
    if reserved is not None:
        area, skip, faulting = reserved
        faulting.hand_over()  # no zeros written once the array is anyone's
    elif nbytes < _HUGE_MIN_BYTES or not sys.platform.startswith("linux"):
        # zeros come from calloc, untouched until used or `populate`d (on a helper
        # thread): np.full wrote every page on the caller's thread
        return np.zeros(length, dtype=dt) if fill == 0 else np.full(length, fill, dtype=dt)
    else:
        area, skip = _map_area(nbytes, huge)
    array = np.frombuffer(area, dtype=dt, count=int(length), offset=skip)
    if fill != 0:  # fresh anonymous memory is zero already
        array.fill(fill)
    return array
