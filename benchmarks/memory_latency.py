"""The machine's random-access memory latency and throughput, for the LRU kernel's bound.

    python benchmarks/memory_latency.py [--sizes-mib 8 32 2048] [--hops 4000000] [--trials 5]

Per area size (each in huge pages, `replay._malloc.state_array`, so TLB misses are not
what is measured; `--small-pages` asks for 4 KiB pages instead), two numba kernels over
one uint32 per 64-byte line of the area:

- dependent loads (a pointer chase): each load's address is the value the previous one
  read, over one random cycle through every line (each line of a random order points at
  the next), so no two loads overlap: the round trip of one random access, what a lookup
  would cost if nothing overlapped it;
- independent loads: the same number of loads at random lines whose addresses are known
  in advance (a sum of `area[index[i]]`), which the CPU keeps in flight together: the
  throughput of random accesses on one core, what a kernel whose lookups overlap can
  approach.

Each figure is the least of `--trials` runs, in ns per load of the thread's CPU time
(`time.thread_time`: a load the core waits for counts, time the thread spends descheduled
by other jobs on the machine does not). An area much larger than the last-level cache
(`lscpu`) gives DRAM's figure; one the size of a kernel's state gives what that kernel's
accesses meet. Not part of the package, not run by the tests.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from replay._intrinsics import ix
from replay._jit import kernel
from replay._malloc import populate, state_array

LINE_WORDS = 16  # uint32 per 64-byte cache line


@kernel
def chase(area: np.ndarray, start: int, hops: int) -> int:
    at = start
    for _ in range(hops):
        at = area[ix(at)]
    return at


@kernel
def gather(area: np.ndarray, index: np.ndarray) -> int:
    total = 0
    for i in range(len(index)):
        total += area[ix(index[i])]
    return total


def _area(size_mib: int, huge: bool, rng: np.random.Generator) -> np.ndarray:
    lines = size_mib * 2**20 // 64
    area = state_array(lines * LINE_WORDS, np.uint32, huge=huge)
    populate(area)
    # each line of a random order points at the next: one cycle through every line
    order = rng.permutation(lines).astype(np.uint32) * np.uint32(LINE_WORDS)
    area[order] = np.roll(order, -1)
    return area


def measure(size_mib: int, hops: int, trials: int, huge: bool, seed: int) -> tuple[float, float]:
    """(dependent, independent) ns per load over an area of size_mib MiB."""
    rng = np.random.default_rng(seed)
    area = _area(size_mib, huge, rng)
    lines = len(area) // LINE_WORDS
    index = rng.integers(0, lines, hops, dtype=np.uint64) * np.uint64(LINE_WORDS)
    chase(area, 0, 1000)  # compiled or loaded from the cache, and the first lines touched
    gather(area, index[:1000])
    dep, ind = [], []
    for _ in range(trials):
        started = time.thread_time()
        chase(area, 0, hops)
        dep.append(time.thread_time() - started)
        started = time.thread_time()
        gather(area, index)
        ind.append(time.thread_time() - started)
    return min(dep) / hops * 1e9, min(ind) / hops * 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mib", type=int, nargs="+", default=[8, 32, 2048])
    parser.add_argument("--hops", type=int, default=4_000_000)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--small-pages", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    pages = "4 KiB pages" if args.small_pages else "huge pages"
    print(f"| area ({pages}) | dependent loads (chase) | independent loads |")
    print("|---:|---:|---:|")
    for size in args.sizes_mib:
        dep, ind = measure(size, args.hops, args.trials, not args.small_pages, args.seed)
        print(f"| {size:,} MiB | {dep:.1f} ns | {ind:.1f} ns |", flush=True)


if __name__ == "__main__":
    main()
