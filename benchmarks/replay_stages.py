"""Where a `replay run` of a trace folder spends its CPU: each stage alone, one thread.

    python benchmarks/replay_stages.py TRACE_DIR [--capacity-rows 1000000]

Stages, each timed twice in this process (the second run is the steady state):

- checksums: the SHA-256 of every Parquet file (what `replay run` checks before reading);
- reader: decoding the lookups (only their `row` column where the files' footers hold the
  row groups' counts) into flat keys, batch bounds and the (batch, table) runs the
  statistics take, and the update rows: as `replay run` reads them for hbm-lru (their
  count per batch, where the trace declares them the batches' distinct lookups), then
  with their keys (`replay.trace.stream.iter_batch_ranges`);
- the hbm-lru policy's kernel over every range (update rows from the lookups);
- the trace statistics' warm-up (faulting their per-row state in), feed and result
  (`workload.json`).

`replay run` overlaps them on threads (reader and statistics beside the policy, the
checksums while it imports), so its wall time is about the start-up (~0.4 s) plus the
larger of the policy and the helpers' share of two cores. Not part of the package, not
run by the tests.
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

    # as `replay run` reads for hbm-lru: update rows taken from the lookups where the trace
    # declares so (their footer counts only), and the update keys decoded
    for from_lookups in (True, False):
        for _ in range(2):
            started = time.perf_counter()
            for _range in iter_batch_ranges(
                trace, with_updates=True, with_runs=True, read_ahead=0,
                updates_from_lookups=from_lookups,
            ):  # fmt: skip
                pass
            took = time.perf_counter() - started
            what = "update counts" if from_lookups and trace.updates_are_lookups else "update keys"
            print(f"reader (decode, flat keys, runs, {what}): {took:.2f} s")

    ranges = list(
        iter_batch_ranges(
            trace, with_updates=True, with_runs=True, read_ahead=0, updates_from_lookups=True
        )
    )
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

    for _ in range(2):
        inspector = trace_inspector(trace)
        started = time.perf_counter()
        inspector.warm_up()
        warm = time.perf_counter() - started
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
        print(
            f"statistics: warm-up {warm:.2f} s, feed {fed - started:.2f} s "
            f"({(fed - started) / n * 1e9:.1f} ns per lookup), result {done - fed:.2f} s"
        )


if __name__ == "__main__":
    main()
