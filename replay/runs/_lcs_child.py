"""libCacheSim's LRU over an exported key file: the libCacheSim side of
`replay bench libcachesim` (`replay.runs.bench_lcs`).

    python _lcs_child.py KEYS_FILE CAPACITY

Run by path with an interpreter that has `libcachesim` (PyPI 0.3.5), usually a separate
virtual environment without `replay`: so this file imports only the standard library and
`libcachesim`, and never `replay`. KEYS_FILE holds one little-endian uint64 flat key per
request (`replay.runs.bench_lcs.export_keys`). The cache is driven exactly as
`benchmarks/libcachesim_lru.py` drives it (its README says why each setting):

- the binary reader, `TraceType.BIN_TRACE` with `ReaderInitParam(binary_fmt_str="<Q",
  ignore_obj_size=True)` and `obj_id_field = 1`: every request has size 1;
- `libcachesim.LRU(CAPACITY, consider_obj_metadata=False)`: cache_size is in bytes, so
  with size-1 objects and no metadata charged it holds exactly CAPACITY objects;
- `cache.process_trace(reader)`: libCacheSim's C loop, no per-request Python.

Prints one JSON line: requests, misses (`round(miss_ratio * requests)`, since
`process_trace` returns the ratio; exact in double precision at these sizes), seconds
(the simulation alone, `process_trace`), and libCacheSim's version. Bad arguments: one
line on stderr, exit code 2.
"""

from __future__ import annotations

import json
import os
import sys
import time

KEY_FORMAT = "<Q"  # must start with "<": any other byte order makes the C library abort
KEY_BYTES = 8
USAGE = "usage: _lcs_child.py KEYS_FILE CAPACITY"


def parse_args(argv: list[str]) -> tuple[str, int, int]:
    """(keys file, capacity, requests in the file); raises ValueError with the message."""
    if len(argv) != 2:
        raise ValueError(f"expected 2 arguments, got {len(argv)} ({USAGE})")
    path, text = argv
    try:
        capacity = int(text)
    except ValueError:
        raise ValueError(f"CAPACITY must be an integer, not {text!r}") from None
    if capacity < 1:
        raise ValueError(f"CAPACITY must be at least 1, not {capacity}")
    try:
        size = os.stat(path).st_size
    except OSError as exc:
        raise ValueError(f"{path}: {exc.strerror or exc}") from None
    if size == 0 or size % KEY_BYTES:
        raise ValueError(f"{path}: size {size} is not a positive multiple of {KEY_BYTES}")
    return path, capacity, size // KEY_BYTES


def simulate(path: str, capacity: int, requests: int) -> dict[str, object]:
    """libCacheSim's LRU of `capacity` objects over the keys in `path`."""
    import libcachesim as lcs

    params = lcs.ReaderInitParam(binary_fmt_str=KEY_FORMAT, ignore_obj_size=True)
    params.obj_id_field = 1  # 1-based field index into the format string
    reader = lcs.TraceReader(path, lcs.TraceType.BIN_TRACE, params)
    counted = int(reader.get_num_of_req())
    if counted != requests:
        raise ValueError(f"{path}: libCacheSim counts {counted} requests, the file has {requests}")
    cache = lcs.LRU(capacity, consider_obj_metadata=False)
    started = time.perf_counter()
    miss_ratio, _byte_miss_ratio = cache.process_trace(reader)
    seconds = time.perf_counter() - started
    return {
        "requests": requests,
        "misses": round(miss_ratio * requests),
        "seconds": round(seconds, 4),
        "capacity": capacity,
        "version": str(lcs.__version__),
    }


def main(argv: list[str]) -> int:
    try:
        # the arguments are checked before libcachesim is imported, so that a bad call
        # fails the same way with any interpreter
        path, capacity, requests = parse_args(argv)
        result = simulate(path, capacity, requests)
    except ValueError as exc:
        print(f"_lcs_child.py: error: {exc}", file=sys.stderr)
        return 2
    except ImportError as exc:
        print(f"_lcs_child.py: error: cannot import libcachesim ({exc})", file=sys.stderr)
        return 2
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
