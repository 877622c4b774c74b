"""Where a `replay run` of a trace folder spends its CPU: each stage alone, one thread.

    python benchmarks/replay_stages.py TRACE_DIR [--capacity-rows 1000000]

Stages, each timed twice in this process (the second run is the steady state; the
first of the statistics also pays the first touch of their per-row state):

- checksums: the SHA-256 of every Parquet file (what `replay run` checks before reading);
- reader: decoding the lookups and update rows into flat keys, batch bounds and the
  (batch, table) runs the statistics take (`replay.trace.stream.iter_batch_ranges`);
- the hbm-lru policy's kernel over every range (update rows included);
- the trace statistics' feed and result (`workload.json`).

`replay run` overlaps them on threads (reader and statistics beside the policy), so its
wall time is about the start-up (~0.45 s) plus the larger of the policy and the helpers'
share of two cores. Not part of the package, not run by the tests.
"""

from __future__ import annotations

import argparse
import hashlib
import time
from pathlib import Path

import numpy as np

from replay._malloc import retain_freed_memory
from replay.analysis.stats import trace_inspector
from replay.engine.replay import make_policy, workload_shape
from replay.engine.systems import resolve_system
from replay.policies.base import NUM_COUNTERS
from replay.trace.reader import open_trace
from replay.trace.stream import empty_range, iter_batch_ranges


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("--capacity-rows", type=int, default=1_000_000)
    args = parser.parse_args()
    retain_freed_memory()  # as the CLI does: freed row groups are reused, not faulted again
    trace = open_trace(args.trace)
    n = trace.num_lookups

    started = time.perf_counter()
    for part in sorted(args.trace.rglob("*.parquet")):
        hashlib.sha256(part.read_bytes()).hexdigest()
    print(f"checksums: {time.perf_counter() - started:.2f} s")

    for _ in range(2):
        started = time.perf_counter()
        for _range in iter_batch_ranges(trace, with_updates=True, with_runs=True, read_ahead=0):
            pass
        took = time.perf_counter() - started
        print(f"reader (decode, flat keys, runs, update rows): {took:.2f} s")

    ranges = list(iter_batch_ranges(trace, with_updates=True, with_runs=True, read_ahead=0))
    system = resolve_system("hbm-lru", [f"policy.capacity_rows={args.capacity_rows}"])
    for _ in range(2):
        policy = make_policy(system, trace, workload_shape(trace, system))
        policy.warm_up(empty_range(policy.ctx.total_keys))
        out = np.zeros((trace.num_batches, NUM_COUNTERS), dtype=np.int64)
        started = time.perf_counter()
        for br in ranges:
            policy.process(br, out[br.batch_start : br.batch_stop])
        took = time.perf_counter() - started
        print(f"hbm-lru kernel: {took:.2f} s ({took / n * 1e9:.1f} ns per lookup)")

    for attempt in range(2):
        inspector = trace_inspector(trace)
        inspector.warm_up()
        distinct = np.zeros(trace.num_batches, dtype=np.int64)
        started = time.perf_counter()
        for br in ranges:
            assert br.runs is not None
            inspector.feed_runs(
                br.keys, br.runs, distinct[br.batch_start : br.batch_stop], br.batch_start
            )
        fed = time.perf_counter()
        inspector.result()
        done = time.perf_counter()
        first = ", first touch of the state included" if attempt == 0 else ""
        print(
            f"statistics: feed {fed - started:.2f} s ({(fed - started) / n * 1e9:.1f} ns per "
            f"lookup{first}), result {done - fed:.2f} s"
        )


if __name__ == "__main__":
    main()
