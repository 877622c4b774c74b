"""Benchmarks behind `replay bench` (and `pytest -m bench`).

Each benchmark returns plain numbers; the CLI prints them. Timings are wall-clock on
whatever machine runs them: quote them with the machine (`machine_description()`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from replay._machine import machine_description, peak_rss_bytes
from replay.trace.format import LOOKUPS_DIR, UPDATES_DIR


def bench_generate(
    preset: str = "criteo-kaggle",
    batches: int = 1000,
    batch_size: int = 2048,
    workers: int | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """Generation rate against writing the same tables to Parquet from memory.

    - generation: `replay.generate` end to end (sampling, update sets, Parquet writing,
      checksums, manifest) with `workers` threads;
    - write-only: the same lookups and updates tables, materialized in memory first, then
      written by one stream through the same writer (same settings and layout, checksums);
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

        writer = TraceFolderWriter(tmp / "write-only", {"bench": True}, force=False, resume=None)
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


@dataclass(frozen=True)
class ProcessUsage:
    """What one finished child process cost, from wait4's rusage (its threads included)."""

    wall_s: float
    user_s: float
    sys_s: float
    peak_rss_bytes: int
    stdout: str  # empty unless asked for


def run_with_usage(args: list[str], *, capture_stdout: bool = False) -> ProcessUsage:
    """Run one child process to its end: wall, user and system seconds and peak RSS.

    stdout and stderr go to temporary files, not pipes: wait4 reaps the child before
    anything is read, and a pipe left unread would block a child that writes more than
    the pipe's buffer. A non-zero exit raises RuntimeError with the child's stderr.
    """
    import subprocess

    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        proc = subprocess.Popen(
            args, stdout=out if capture_stdout else subprocess.DEVNULL, stderr=err
        )
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            err.seek(0)
            text = err.read().decode(errors="replace").strip()
            raise RuntimeError(f"{' '.join(args)} failed (exit {proc.returncode}): {text}")
        out.seek(0)
        stdout = out.read().decode(errors="replace") if capture_stdout else ""
    return ProcessUsage(
        wall_s=wall,
        user_s=usage.ru_utime,
        sys_s=usage.ru_stime,
        peak_rss_bytes=usage.ru_maxrss * 1024,  # Linux reports KiB
        stdout=stdout,
    )


def _run_with_rusage(args: list[str]) -> tuple[float, int]:
    """Wall seconds and peak RSS (bytes) of one child process, from wait4."""
    usage = run_with_usage(args)
    return usage.wall_s, usage.peak_rss_bytes


def _kaggle_trace(out: Path, batches: int, batch_size: int) -> Path:
    from replay.workload.generator import generate
    from replay.workload.presets import get_preset

    spec = get_preset("criteo-kaggle").with_overrides(batches=batches, batch_size=batch_size)
    return generate(spec, out)


def bench_replay(
    trace: Path | None = None,
    *,
    batches: int = 1000,
    batch_size: int = 2048,
    systems: tuple[str, ...] = ("hbm-lru", "hbm-hot"),
    capacity_rows: int = 150_000,
    repeats: int = 3,
    mrc_sample_rate: float = 0.01,
) -> dict[str, Any]:
    """Speed of `replay run` per system preset, whole process, and of `replay mrc`.

    The trace is a criteo-kaggle trace of `batches` x `batch_size` (generated into a
    temporary folder unless `trace` is given). Each `replay run` is a fresh process (the
    way a user runs it, numba kernels loaded from the on-disk cache after a first warm-up
    run); `lookups_per_s` is over the whole process, `stream_lookups_per_s` over the
    replay loop alone (meta.json timings: reading Parquet included).
    """
    import json
    import sys

    from replay.trace.reader import open_trace

    tmp = Path(tempfile.mkdtemp(prefix="replay-bench-"))
    try:
        if trace is None:
            trace = _kaggle_trace(tmp / "trace", batches, batch_size)
        opened = open_trace(trace)
        lookups = opened.num_lookups
        results: dict[str, Any] = {
            "trace": str(trace),
            "lookups": lookups,
            "capacity_rows": capacity_rows,
            "machine": machine_description(),
            "runs": {},
        }
        for system in systems:
            out = tmp / f"run-{system}"
            args = [
                sys.executable,
                "-m",
                "replay",
                "run",
                str(trace),
                "--system",
                system,
                "--set",
                f"policy.capacity_rows={capacity_rows}",
                "--out",
                str(out),
                "--force",
            ]
            _run_with_rusage(args)  # warm-up: compile or load the kernels' disk cache
            walls, peaks, streams = [], [], []
            for _ in range(repeats):
                wall, peak = _run_with_rusage(args)
                meta = json.loads((out / "meta.json").read_text())
                walls.append(wall)
                peaks.append(peak)
                streams.append(meta["timings"]["replay_s"] + meta["timings"]["prepare_s"])
            summary = json.loads((out / "summary.json").read_text())
            best = min(walls)
            results["runs"][system] = {
                "process_s_min": best,
                "process_s_median": sorted(walls)[len(walls) // 2],
                "lookups_per_s": lookups / best,
                "stream_lookups_per_s": lookups / min(streams),
                "peak_rss_bytes": max(peaks),
                "misses": summary["policy"]["misses"],
            }
        from replay.analysis.mrc import bench_mrc

        results["mrc_exact"] = bench_mrc(trace, None)
        results["mrc_sampled"] = bench_mrc(trace, mrc_sample_rate)
        return results
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


CHECKPOINT_CASES: dict[str, tuple[str, tuple[str, ...]]] = {
    "none": ("hbm-lru", ("checkpoint.strategy=none",)),
    "sync-full": ("hbm-lru", ("checkpoint.strategy=sync-full", "checkpoint.interval_batches=100")),
    "checkfreq": ("hbm-lru", ("checkpoint.strategy=checkfreq", "checkpoint.interval_batches=50")),
    "check-n-run consecutive": (
        "hbm-lru",
        ("checkpoint.strategy=check-n-run", "checkpoint.interval_batches=10"),
    ),
    "check-n-run intermittent, 4 bits": (
        "hbm-lru",
        (
            "checkpoint.strategy=check-n-run",
            "checkpoint.interval_batches=10",
            "checkpoint.increment=intermittent",
            "checkpoint.quantize_bits=4",
        ),
    ),
    "fastpersist": (
        "hbm-lru",
        ("checkpoint.strategy=fastpersist", "checkpoint.interval_batches=1"),
    ),
    "trainingcxl": ("pmem-host", ("checkpoint.strategy=trainingcxl",)),
}


def bench_checkpoint(
    trace: Path | None = None,
    *,
    batches: int = 1000,
    batch_size: int = 2048,
    mtbf_s: float = 14400.0,
    horizon_s: float = 86400.0,
    draws: int = 1000,
) -> dict[str, Any]:
    """Share of a replay's run time spent in the checkpoint and failure models.

    In-process runs (kernels compiled by a warm-up run) of each strategy in
    `CHECKPOINT_CASES` on a criteo-kaggle trace, with failure draws (MTBF `mtbf_s`, a
    `horizon_s` day of training); the share is meta.json's `checkpoint_s` (strategy work
    during the replay loop plus after it, failures included) over `total_s`.
    """
    from replay.engine.replay import replay_trace
    from replay.engine.systems import resolve_system
    from replay.trace.reader import open_trace

    tmp = Path(tempfile.mkdtemp(prefix="replay-bench-"))
    try:
        if trace is None:
            trace = _kaggle_trace(tmp / "trace", batches, batch_size)
        opened = open_trace(trace)
        failures = (
            f"failures.mtbf_s={mtbf_s}",
            f"failures.horizon_s={horizon_s}",
            f"failures.draws={draws}",
        )
        results: dict[str, Any] = {
            "trace": str(trace),
            "lookups": opened.num_lookups,
            "machine": machine_description(),
            "cases": {},
        }
        for label, (system, sets) in CHECKPOINT_CASES.items():
            spec_ = resolve_system(system, [*sets, *failures])
            replay_trace(opened, spec_)  # warm-up
            result = replay_trace(opened, spec_)
            timings = result.meta["timings"]
            ck = result.summary["checkpoint"]
            results["cases"][label] = {
                "system": system,
                "total_s": timings["total_s"],
                "checkpoint_s": timings["checkpoint_s"],
                "share": timings["checkpoint_s"] / timings["total_s"],
                "checkpoints": ck["count"],
                "overhead": ck["overhead"],
                "goodput_mean": result.summary["failures"]["goodput_mean"],
            }
        return results
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# -- the whole table: `replay bench all` ----------------------------------------------------

TERABYTE_BATCHES = 2000  # issue 6's acceptance run: 106 M lookups of criteo-terabyte
BILLION_BATCHES = 18_781  # x 2048 x 26 = 1,000,050,688 lookups of criteo-terabyte


@dataclass(frozen=True)
class BenchCase:
    """One row of `replay bench all`: a `replay` command line and the lookups it handles."""

    group: str
    label: str
    args: tuple[str, ...]  # after `python -m replay`
    lookups: int


def bench_cases(
    trace: Path,
    out: Path,
    *,
    batches: int,
    batch_size: int,
    dask: bool,
) -> list[BenchCase]:
    """The rows: generation, replay per policy, checkpoint models, mrc exact and sampled,
    and the on-the-fly path, on criteo-kaggle `batches` x `batch_size` (the trace) and
    criteo-terabyte (on the fly)."""
    kaggle = f"--batches {batches} --batch-size {batch_size}".split()
    n = batches * batch_size * 26  # criteo-kaggle: 26 one-hot tables
    tb = TERABYTE_BATCHES * 2048 * 26
    billion = BILLION_BATCHES * 2048 * 26
    run_out = ["--out", str(out / "run"), "--force"]
    run_trace = ["run", str(trace), *run_out, "--no-inspect"]
    policies = {
        "lru": "hbm-lru", "lfu": "hbm-lfu", "hot (oracle)": "hbm-hot",
        "belady": "hbm-belady", "chunk (PatrickStar)": "chunk", "static (dram)": "dram",
    }  # fmt: skip
    checkpoints = {
        "sync-full every 100": "hbm-lru --set checkpoint.strategy=sync-full "
        "--set checkpoint.interval_batches=100",
        "check-n-run every 10": "hbm-lru --set checkpoint.strategy=check-n-run "
        "--set checkpoint.interval_batches=10",
        "fastpersist every batch": "fastpersist",
        "trainingcxl undo log": "cxl",
    }
    generate = ["generate", "--preset", "criteo-kaggle", *kaggle, "--out", str(out / "gen")]
    cases = [
        BenchCase(
            "generation",
            "generate criteo-kaggle (8 files at once, LZ4 Parquet)",
            (*generate, "--force"),
            n,
        )
    ]
    for label, system in policies.items():
        args = (*run_trace, "--system", system)
        cases.append(BenchCase("replay", f"run {system}: {label}", args, n))
    for label, system_and_sets in checkpoints.items():
        system = system_and_sets.split()[0]
        args = (*run_trace, "--system", *system_and_sets.split())
        cases.append(BenchCase("checkpoint", f"run {system}: {label}", args, n))
    terabyte = f"--workload criteo-terabyte --batch-size 2048 --batches {TERABYTE_BATCHES}"
    billion_mrc = (
        f"mrc --workload criteo-terabyte --batch-size 2048 --batches {BILLION_BATCHES} "
        "--sample-rate 0.01 --json"
    ).split()
    cases += [
        BenchCase("mrc", "mrc exact", ("mrc", str(trace), "--json"), n),
        BenchCase(
            "mrc", "mrc SHARDS 0.01", ("mrc", str(trace), "--sample-rate", "0.01", "--json"), n
        ),
        BenchCase(
            "on the fly",
            "run --workload criteo-kaggle hbm-lru (same batches as the trace)",
            ("run", "--workload", "criteo-kaggle", *kaggle, "--system", "hbm-lru", *run_out),
            n,
        ),
        BenchCase(
            "on the fly",
            f"run --workload criteo-terabyte {TERABYTE_BATCHES} x 2048 hbm-lru",
            ("run", *terabyte.split(), "--system", "hbm-lru", *run_out),
            tb,
        ),
        BenchCase(
            "on the fly",
            "mrc --workload criteo-terabyte 1 B lookups, SHARDS 0.01",
            tuple(billion_mrc),
            billion,
        ),
    ]
    if dask:
        cases.append(
            BenchCase(
                "on the fly",
                "the same, Dask --scheduler local --workers 2",
                (*billion_mrc, "--scheduler", "local", "--workers", "2"),
                billion,
            )
        )
    return cases


def bench_all(
    *,
    batches: int = 1000,
    batch_size: int = 2048,
    repeats: int = 2,
    only: str | None = None,
    on_case: Any = None,
) -> dict[str, Any]:
    """Every row of `bench_cases`, each a fresh `python -m replay` process: a warm-up run
    (numba's disk cache), then the best of `repeats` wall times and the largest peak RSS.
    `only` keeps the rows whose group or label contains it. on_case(case, row) after each.
    """
    import importlib.util
    import sys

    tmp = Path(tempfile.mkdtemp(prefix="replay-bench-"))
    try:
        trace = _kaggle_trace(tmp / "trace", batches, batch_size)
        dask = importlib.util.find_spec("distributed") is not None
        cases = bench_cases(trace, tmp, batches=batches, batch_size=batch_size, dask=dask)
        if only:
            cases = [c for c in cases if only in c.group or only in c.label]
        rows = []
        for case in cases:
            args = [sys.executable, "-m", "replay", *case.args]
            _run_with_rusage(args)  # warm-up
            walls, peaks = [], []
            for _ in range(repeats):
                wall, peak = _run_with_rusage(args)
                walls.append(wall)
                peaks.append(peak)
            row = {
                "group": case.group,
                "operation": case.label,
                "command": "replay " + " ".join(a.replace(str(tmp), "$TMP") for a in case.args),
                "lookups": case.lookups,
                "seconds": min(walls),
                "lookups_per_s": case.lookups / min(walls),
                "peak_rss_bytes": max(peaks),
            }
            rows.append(row)
            if on_case is not None:
                on_case(case, row)
        return {"machine": machine_description(), "repeats": repeats, "rows": rows}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def markdown_table(result: dict[str, Any]) -> str:
    """The table docs/performance.md quotes."""
    lines = [
        f"Measured on {result['machine']}; whole `replay` processes, best of "
        f"{result['repeats']} after a warm-up run.",
        "",
        "| | operation | lookups | seconds | M lookups/s | peak memory |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['group']} | {r['operation']} | {r['lookups'] / 1e6:,.1f} M | "
            f"{r['seconds']:.2f} | {r['lookups_per_s'] / 1e6:.1f} | "
            f"{r['peak_rss_bytes'] / 2**30:.2f} GiB |"
        )
    return "\n".join(lines)
