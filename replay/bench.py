"""Benchmarks behind `replay bench` (and `pytest -m bench`).

Each benchmark returns plain numbers; the CLI prints them. Timings are wall-clock on
whatever machine runs them: quote them with the machine (`machine_description()`).
"""

from __future__ import annotations

import os
import platform
import resource
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from replay.trace.format import LOOKUPS_DIR, UPDATES_DIR


def machine_description() -> str:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{platform.processor() or platform.machine()}, {cores} cores, {mem_gib:.0f} GiB"


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def bench_generate(
    preset: str = "criteo-kaggle",
    batches: int = 1000,
    batch_size: int = 2048,
    workers: int | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """Generation rate against writing the same tables to zstd Parquet from memory.

    - generation: `replay.generate` end to end (sampling, update sets, Parquet writing,
      checksums, manifest) with `workers` threads;
    - write-only: the same lookups and updates tables, materialized in memory first, then
      written by one stream through the same writer (zstd, same layout, checksums);
    - sampling-only: the sampling and update-set kernels alone, one thread.
    The acceptance ratio is generation / write-only (>= 0.8: sampling hides behind writing).
    """
    from replay._malloc import retain_freed_memory
    from replay.trace.writer import TraceFolderWriter
    from replay.workload.generator import CompiledWorkload, generate, plan_files
    from replay.workload.presets import get_preset

    retain_freed_memory()

    spec = get_preset(preset).with_overrides(batches=batches, batch_size=batch_size, seed=seed)
    workers = workers or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1)
    compiled = CompiledWorkload.from_spec(spec)
    compiled.row_group(0, 1)  # compile (or load cached) kernels outside the timings
    layout, tasks = plan_files(spec)
    tmp = Path(tempfile.mkdtemp(prefix="replay-bench-"))
    try:
        started = time.perf_counter()
        generate(spec, tmp / "generated", workers=workers)
        generate_s = time.perf_counter() - started

        started = time.perf_counter()
        for task in tasks:
            for g0, g1 in task.row_groups:
                compiled.row_group(g0, g1)  # made and dropped, as in generation
        sample_s = time.perf_counter() - started

        groups = [[compiled.row_group(g0, g1) for g0, g1 in task.row_groups] for task in tasks]
        update_rows = sum(g[UPDATES_DIR].num_rows for file in groups for g in file)

        writer = TraceFolderWriter(tmp / "write-only", {"bench": True}, force=False, resume=False)
        schemas = {LOOKUPS_DIR: compiled.lookups_schema, UPDATES_DIR: compiled.updates_schema}
        started = time.perf_counter()
        for task, file_groups in zip(tasks, groups, strict=True):
            writer.write_parts(task.index, schemas, file_groups)
        write_s = time.perf_counter() - started
        written = sum(p.stat().st_size for p in (tmp / "generated").rglob("*.parquet"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    lookups = spec.lookups
    return {
        "preset": preset,
        "batches": batches,
        "batch_size": batch_size,
        "workers": workers,
        "lookups": lookups,
        "update_rows": update_rows,
        "generate_lookups_per_s": lookups / generate_s,
        "write_only_lookups_per_s": lookups / write_s,
        "sample_only_lookups_per_s": lookups / sample_s,
        "ratio_generate_to_write_only": write_s / generate_s,
        "parquet_bytes_per_lookup": written / lookups,
        "peak_rss_bytes": peak_rss_bytes(),
        "machine": machine_description(),
        "layout": layout,
    }
