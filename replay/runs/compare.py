"""Many runs over one trace: the runner behind `replay compare` and `replay sweep`.

Pure: it resolves systems, runs them (in parallel across processes) and returns
`RunResult`s and table rows; `replay.runs.results` writes the folders. Every run is
deterministic and results come back keyed by their position in the job list, so the
output does not depend on the number of workers or on which run finishes first.

Workers are processes of a `ProcessPoolExecutor` started with `forkserver` (`spawn`
where there is none): a clean, single-threaded server that has imported the engine once
forks each worker, so no thread or numba state of the caller is copied into a child.
Each worker opens the trace itself; only the system spec goes out and the `RunResult`
comes back. With one worker (or one job) everything runs in this process.
"""

from __future__ import annotations

import itertools
import json
import math
import multiprocessing
import os
import re
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from multiprocessing import resource_tracker
from pathlib import Path
from typing import Any, Literal

import numpy as np

from replay._signals import deferred, ignore_in_worker
from replay.engine.cluster_run import replay_system
from replay.engine.placement import resolve_placement
from replay.engine.replay import (
    RunResult,
    workload_shape,
)
from replay.engine.systems import (
    refuse_cluster,
    refuse_cluster_checkpoint,
    resolve_system_with_origin,
    system_from_dict,
)
from replay.errors import ConfigError, shown
from replay.policies import POLICIES
from replay.policies.base import capacity_units
from replay.runs.run_memory import _cores, check_run_memory, in_flight_bytes, run_state
from replay.system.optimizer import with_workload_rule
from replay.system.spec import (
    BYTES_PER_VALUE,
    SystemSpec,
    apply_overrides,
    load_system_data,
    optimizer_bytes_per_row,
    parse_value,
)
from replay.workload.generator import MAX_WORKERS, check_workers
from replay.workload.source import Source, SourceRef, open_source, source_document
from replay.workload.spec import WorkloadSpec

COMPARE_FILES = frozenset({"comparison.parquet", "compare.json"})
SWEEP_FILES = frozenset({"sweep.parquet", "sweep.json"})
_MAX_FOLDER_CHARS = 120  # well under the 255-byte name limit of common filesystems
_SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._+=,-]*")
_UNSAFE_CHARS = re.compile(r"[^A-Za-z0-9._+-]")

Kind = Literal["str", "int", "float"]

# the metric columns of comparison.parquet and sweep.parquet, in order, with their types
METRIC_COLUMNS: tuple[tuple[str, Kind], ...] = (
    ("system", "str"),
    ("lookups", "int"),
    ("batches", "int"),
    ("time_s", "float"),
    ("energy_j", "float"),
    ("time_compute_s", "float"),
    ("time_embedding_exposed_s", "float"),
    ("time_checkpoint_s", "float"),
    ("time_other_s", "float"),
    ("hit_ratio", "float"),
    ("misses", "int"),
    ("checkpoint_strategy", "str"),
    ("checkpoint_overhead", "float"),
    ("checkpoint_bytes_written", "int"),
    ("goodput_mean", "float"),  # null without a failure model
)
COMPARE_COLUMNS: tuple[tuple[str, Kind], ...] = (
    *METRIC_COLUMNS,
    ("speedup", "float"),  # time_s of the first system / this one's
    ("energy_saving", "float"),  # 1 - energy_j / the first system's
)

_RESERVED_COLUMNS = frozenset({"point", *(name for name, _ in METRIC_COLUMNS)})


@dataclass(frozen=True)
class RunJob:
    """One run: a resolved system, where it came from, and the run folder it goes to."""

    folder: str  # the run folder's name inside the output folder
    system: SystemSpec
    origin: str  # "preset NAME" or a TOML path (config.json's `origin`)
    overrides: tuple[str, ...]  # every key=value applied (config.json's `overrides`)


@dataclass(frozen=True)
class SweepPoint:
    """One point of a sweep's grid, with its run."""

    index: int
    values: dict[str, Any]  # grid key -> parsed value
    labels: dict[str, str]  # grid key -> the value as a string (sweep.parquet's columns)
    job: RunJob


# -- resolving ------------------------------------------------------------------------


# processes at once, each with its own row state: `replay.workload.generator`'s bound


def check_folder_name(name: str, what: str) -> str:
    """`name` if it can name a run folder inside an output folder, else ConfigError."""
    if (
        not _SAFE_NAME.fullmatch(name)
        or len(name) > _MAX_FOLDER_CHARS
        or name in COMPARE_FILES | SWEEP_FILES
    ):
        raise ConfigError(
            f"{what}: system name {name!r} cannot name a run folder (use letters, digits "
            f"and ._+=,- only, at most {_MAX_FOLDER_CHARS} characters)"
        )
    return name


def split_list(text: str, what: str) -> list[str]:
    """'a,b,c' -> ['a', 'b', 'c']; commas inside [...], {...} or quotes do not split."""
    items: list[str] = []
    depth = 0
    quote = ""
    start = 0
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0:
            items.append(text[start:i].strip())
            start = i + 1
    items.append(text[start:].strip())
    if any(not item for item in items):
        raise ConfigError(f"{what}: an empty item in {text!r}")
    return items


def resolve_systems(names: Sequence[str], overrides: Sequence[str]) -> list[RunJob]:
    """Every system of a comparison, validated before anything runs; a run folder each.

    A system is a preset name or a TOML file; its folder is the resolved spec's `name`,
    so two systems with one name are an error.
    """
    if not names:
        raise ConfigError("--systems: name at least one system")
    jobs: list[RunJob] = []
    seen: dict[str, str] = {}
    for given in names:
        spec, origin = resolve_system_with_origin(given, list(overrides))
        refuse_cluster_checkpoint(spec, origin)
        folder = check_folder_name(spec.name, f"--systems {given}")
        if folder in seen:
            raise ConfigError(
                f"--systems: {given!r} and {seen[folder]!r} are both named {folder!r}; "
                "each system needs its own name (set `name` in the TOML file)"
            )
        seen[folder] = given
        jobs.append(RunJob(folder, spec, origin, tuple(overrides)))
    return jobs


def value_label(value: Any) -> str:
    """A grid value as a string: TOML spelling for booleans, repr for numbers."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(value, separators=(",", ":"), default=str)


def parse_grid(items: Sequence[str]) -> dict[str, list[tuple[str, Any]]]:
    """`key=v1,v2,...` strings -> {key: [(text, parsed value), ...]} in the order given.

    Values are parsed like `--set` values (numbers, booleans, strings, arrays).
    """
    if not items:
        raise ConfigError("--grid: give at least one key=v1,v2,...")
    grid: dict[str, list[tuple[str, Any]]] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key or not raw.strip() or any(not p for p in key.split(".")):
            raise ConfigError(f"--grid {item!r}: expected key.path=v1,v2,...")
        if key in grid:
            raise ConfigError(f"--grid {key}: given twice (list every value in one --grid)")
        if key in _RESERVED_COLUMNS:
            raise ConfigError(f"--grid {key}: not a system key (a column of sweep.parquet)")
        values: list[tuple[str, Any]] = []
        labels: set[str] = set()
        for text in split_list(raw, f"--grid {key}"):
            value = parse_value(text)
            label = value_label(value)
            if label in labels:
                raise ConfigError(f"--grid {key}: value {label!r} given twice")
            labels.add(label)
            values.append((text, value))
        grid[key] = values
    return grid


def point_folder(index: int, width: int, labels: dict[str, str]) -> str:
    """`<index>-<key-value+...>`, zero-padded, of letters, digits and `._+-` only: a name
    every shell takes unquoted (no `=`, which starts an assignment in sh and an expansion
    in zsh) and every filesystem stores (the index keeps it unique; sweep.json holds the
    values as given)."""
    text = "+".join(f"{key}-{label}" for key, label in labels.items())
    name = f"{index:0{width}d}-{_UNSAFE_CHARS.sub('_', text)}"
    return name[:_MAX_FOLDER_CHARS]


def resolve_sweep(
    system: str,
    grid: dict[str, list[tuple[str, Any]]],
    overrides: Sequence[str],
    on_point: Callable[[int, int], None] | None = None,
) -> list[SweepPoint]:
    """Every point of the cross product of `grid` (the last key varies fastest), resolved.

    A key or value the spec rejects is a ConfigError before anything runs.
    on_point(points resolved, points) after each (about 1 ms each).
    """
    for item in overrides:
        key = item.partition("=")[0].strip()
        if key in grid:
            raise ConfigError(f"--grid {key}: also given with --set")
    data, origin = load_system_data(system)
    sets = list(overrides)
    base = apply_overrides(data, sets)
    keys = list(grid)
    total = grid_size(grid)
    base_error: ConfigError | None = None
    try:
        _validated(base, origin, f"with --set {' '.join(shown(s) for s in sets)}" if sets else "")
    except ConfigError as exc:
        # the grid may supply what --set alone leaves invalid (a strategy's interval):
        # then every point must validate, below; otherwise this is the error to show
        base_error = exc
    width = len(str(total - 1))
    points = []
    # one validation per point, in order (the product is walked, never listed whole)
    for index, combo in enumerate(itertools.product(*(grid[key] for key in keys))):
        point_sets = [f"{key}={text}" for key, (text, _) in zip(keys, combo, strict=True)]
        given = f"with --grid {' '.join(shown(s) for s in point_sets)}"
        try:
            spec = _validated(apply_overrides(base, point_sets), origin, given)
        except ConfigError:
            if base_error is not None:
                raise base_error from None
            raise
        try:
            refuse_cluster(spec, origin, "`replay sweep`")
        except ConfigError as exc:
            raise ConfigError(f"{exc.args[0]} ({given})") from None
        labels = {key: value_label(value) for key, (_, value) in zip(keys, combo, strict=True)}
        values = {key: value for key, (_, value) in zip(keys, combo, strict=True)}
        job = RunJob(point_folder(index, width, labels), spec, origin, (*sets, *point_sets))
        points.append(SweepPoint(index, values, labels, job))
        if on_point is not None:
            on_point(index + 1, total)
    return points


def _validated(data: dict[str, Any], origin: str, given: str) -> SystemSpec:
    """The spec of `data`; a ConfigError names the field's path, then the options that
    gave it (`given`: "with --grid policy.capacity_rows=0"), not a fused "--grid.policy"."""
    try:
        return system_from_dict(data, where=origin)
    except ConfigError as exc:
        if not given:
            raise
        raise ConfigError(f"{exc.args[0]} ({given})") from None


def grid_size(grid: dict[str, list[tuple[str, Any]]] | Sequence[str]) -> int:
    """Points of the cross product: of a parsed grid, or of raw `key=v1,v2` items (their
    values counted, not parsed, so that an absurd grid is refused at once)."""
    if isinstance(grid, dict):
        return math.prod(len(values) for values in grid.values())
    return math.prod(_count_values(item) for item in grid)


def _count_values(item: str) -> int:
    try:
        return len(split_list(item.partition("=")[2], "--grid"))
    except ConfigError:  # `parse_grid` says what is wrong with it
        return 1


def check_grid_size(items: Sequence[str], max_runs: int) -> int:
    """The number of runs of raw --grid items; ConfigError above `max_runs`."""
    if max_runs < 1:
        raise ConfigError(f"--max-runs must be at least 1, got {max_runs}")
    total = grid_size(items)
    if total > max_runs:
        shape = " x ".join(f"{_count_values(item):,}" for item in items)
        raise ConfigError(
            f"--grid: {total:,} runs ({shape} values) is more than the limit of "
            f"{max_runs:,} runs; give --max-runs {total} to run them all"
        )
    return total


def preflight(
    ref: SourceRef | Path, jobs: Sequence[RunJob], placements: list[Any] | None = None
) -> Source:
    """Open the source and check each system fits it (embedding dim, cache capacity),
    before any worker starts; the checks a run makes again, without allocating state.
    Returns the opened source (for the caller's own pass, e.g. its statistics);
    `placements` gets each job's placement (None for one GPU), for the memory estimate."""
    opened = open_source(ref)
    for job in jobs:
        spec = with_workload_rule(job.system, opened.workload)  # the run's optimizer
        dim = workload_shape(opened, spec).embedding_dim
        cls = POLICIES[spec.policy.name]
        if cls.cached:
            state = BYTES_PER_VALUE * dim + optimizer_bytes_per_row(spec.model.optimizer, dim)
            capacity_units(spec, cls.unit_rows(spec.policy), state)
        placed = None
        if spec.cluster is not None:  # a bad sharding, before any run folder exists
            placed = resolve_placement(spec, opened).placement
        if placements is not None:
            placements.append(placed)
    return opened


def compare_document(
    trace: SourceRef | Path, jobs: Sequence[RunJob], given: Sequence[str], overrides: Sequence[str]
) -> dict[str, Any]:
    """compare.json: the source, each system (name, as given, origin) and the --set list."""
    return {
        "kind": "compare",
        **source_document(trace),
        "systems": [
            {"name": job.system.name, "given": name, "origin": job.origin}
            for job, name in zip(jobs, given, strict=True)
        ],
        "overrides": list(overrides),
    }


def sweep_document(
    trace: SourceRef | Path,
    system: str,
    grid: dict[str, list[tuple[str, Any]]],
    points: Sequence[SweepPoint],
    overrides: Sequence[str],
) -> dict[str, Any]:
    """sweep.json: the source, the system, the --set list, the grid and every point."""
    first = points[0].job
    return {
        "kind": "sweep",
        **source_document(trace),
        "system": {"name": first.system.name, "given": system, "origin": first.origin},
        "overrides": list(overrides),
        "grid": {key: [value for _, value in values] for key, values in grid.items()},
        "points": [
            {
                "index": p.index,
                "folder": p.job.folder,
                "values": p.values,
                "overrides": list(p.job.overrides),
            }
            for p in points
        ],
    }


# -- running --------------------------------------------------------------------------


def _start_worker(cwd: str) -> None:
    from replay._malloc import retain_freed_memory

    ignore_in_worker()  # Ctrl-C reaches the whole group: the parent stops the pool
    os.chdir(cwd)  # the caller's: relative paths mean the same in every worker
    retain_freed_memory()


def _run_one(ref: SourceRef, system: SystemSpec, threads: int | None = None) -> RunResult:
    return replay_system(open_source(ref, threads=threads), system)


def _pool_context() -> multiprocessing.context.BaseContext:
    if "forkserver" in multiprocessing.get_all_start_methods():
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["replay.runs.compare"])  # imported once, in the server
        return ctx
    return multiprocessing.get_context("spawn")


def iter_runs(
    trace: SourceRef | Path, jobs: Sequence[RunJob], *, workers: int, client: Any = None
) -> Iterator[tuple[int, RunResult]]:
    """(job index, result) for every job, as runs finish (in job order with one worker).

    With a Dask `client` the runs go to its cluster instead of a process pool. The first
    error (a `ReplayError` of a worker included) cancels the runs not started and is
    raised here.
    """
    ref: SourceRef = trace if isinstance(trace, WorkloadSpec) else str(trace)
    if client is not None:
        from replay._distributed import map_as_completed

        # one thread per Dask worker: an on-the-fly workload is generated on it too
        yield from map_as_completed(client, _run_one, [(ref, job.system, 1) for job in jobs])
        return
    check_workers(workers)
    workers = min(workers, len(jobs))
    if workers <= 1:
        for index, job in enumerate(jobs):
            yield index, _run_one(ref, job.system)
        return
    # each process generates an on-the-fly workload with its share of the cores
    threads = max(1, _cores() // workers)
    pool: ProcessPoolExecutor | None = None
    # CPython starts its resource tracker at the pool's first semaphore and then unblocks
    # SIGINT and SIGTERM in the starting thread (it restores no mask), which would undo
    # `deferred`: start it first (later calls find it running and do nothing)
    if os.name == "posix":
        resource_tracker.ensure_running()
    try:
        # The forkserver and every worker start in the first `workers` submits (the first
        # waits for the server to import the engine, a second or more on a busy machine).
        # An interrupt meanwhile is held until they are all known to the pool, so that
        # stopping it stops them all, and none of them sees it (`replay._signals`).
        with deferred():
            pool = ProcessPoolExecutor(
                workers,
                mp_context=_pool_context(),
                initializer=_start_worker,
                initargs=(os.getcwd(),),
            )
            pending: dict[Future[RunResult], int] = {
                pool.submit(_run_one, ref, job.system, threads): index
                for index, job in enumerate(jobs)
            }
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in sorted(done, key=pending.__getitem__):
                index = pending.pop(future)
                yield index, future.result()
    except BaseException:
        # a run in flight cannot be cancelled: stop the workers, or an error or a SIGTERM
        # would wait for the longest run (minutes) before the command could end
        if pool is not None:
            for process in list((getattr(pool, "_processes", None) or {}).values()):
                process.terminate()
            pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


def run_jobs(
    trace: SourceRef | Path,
    jobs: Sequence[RunJob],
    *,
    workers: int,
    on_done: Callable[[int, RunResult], None] | None = None,
    client: Any = None,
) -> list[RunResult]:
    """Every job's result, in job order. on_done(index, result) as each run finishes."""
    results: dict[int, RunResult] = {}
    for index, result in iter_runs(trace, jobs, workers=workers, client=client):
        results[index] = result
        if on_done is not None:
            on_done(index, result)
    return [results[i] for i in range(len(jobs))]


# -- tables ---------------------------------------------------------------------------


def metrics_row(result: RunResult) -> dict[str, Any]:
    """One row of METRIC_COLUMNS from a run's summary."""
    s = result.summary
    t = s["time"]
    pol = s["policy"]
    ck = s.get("checkpoint") or {}
    fail = s.get("failures")
    return {
        "system": result.system.name,
        "lookups": int(s["lookups"]),
        "batches": int(s["batches"]),
        "time_s": float(s["time_s"]),
        "energy_j": float(s["energy_j"]),
        "time_compute_s": float(t["compute_s"]),
        "time_embedding_exposed_s": float(t["embedding_exposed_s"]),
        "time_checkpoint_s": float(t["checkpoint_s"]),
        "time_other_s": float(t["other_s"]),
        "hit_ratio": None if pol["hit_ratio"] is None else float(pol["hit_ratio"]),
        "misses": int(pol["misses"]),
        "checkpoint_strategy": str(ck.get("strategy", "none")),
        "checkpoint_overhead": float(ck.get("overhead", 0.0)),
        "checkpoint_bytes_written": int(ck.get("bytes_written", 0)),
        "goodput_mean": None if not fail else float(fail["goodput_mean"]),
    }


def _ratio(num: float, den: float) -> float | None:
    return num / den if den > 0 and math.isfinite(num / den) else None


def comparison_rows(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """`metrics_row`s plus speedup and energy saving against the first row's system."""
    out = [dict(row) for row in rows]
    if not out:
        return out
    first = out[0]
    for row in out:
        row["speedup"] = _ratio(first["time_s"], row["time_s"])
        saved = _ratio(row["energy_j"], first["energy_j"])
        row["energy_saving"] = None if saved is None else 1.0 - saved
    return out


def sweep_rows(
    points: Sequence[SweepPoint], rows: Sequence[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Per point: its folder, a string column per grid key, then its `metrics_row`."""
    return [
        {"point": point.job.folder, **point.labels, **row}
        for point, row in zip(points, rows, strict=True)
    ]


def sweep_columns(points: Sequence[SweepPoint]) -> tuple[tuple[str, Kind], ...]:
    keys = list(points[0].labels) if points else []
    return (("point", "str"), *((key, "str") for key in keys), *METRIC_COLUMNS)


def to_columns(
    rows: Sequence[dict[str, Any]], kinds: Sequence[tuple[str, Kind]]
) -> dict[str, np.ndarray]:
    """Typed columns for `replay.runs.results.write_columns`; None becomes a null."""
    columns: dict[str, np.ndarray] = {}
    for name, kind in kinds:
        values = [row[name] for row in rows]
        if kind == "str":
            columns[name] = np.array(values, dtype=object)
            continue
        mask = np.array([v is None for v in values], dtype=bool)
        dtype = np.int64 if kind == "int" else np.float64
        data = np.array([0 if v is None else v for v in values], dtype=dtype)
        columns[name] = np.ma.masked_array(data, mask=mask) if mask.any() else data
    return columns


__all__ = [
    "COMPARE_COLUMNS",
    "COMPARE_FILES",
    "MAX_WORKERS",
    "METRIC_COLUMNS",
    "SWEEP_FILES",
    "RunJob",
    "SweepPoint",
    "check_grid_size",
    "check_run_memory",
    "check_workers",
    "compare_document",
    "comparison_rows",
    "grid_size",
    "in_flight_bytes",
    "iter_runs",
    "metrics_row",
    "parse_grid",
    "point_folder",
    "preflight",
    "resolve_sweep",
    "resolve_systems",
    "run_jobs",
    "run_state",
    "split_list",
    "sweep_columns",
    "sweep_document",
    "sweep_rows",
    "to_columns",
    "value_label",
]
