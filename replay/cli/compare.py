"""`replay compare TRACE --systems a,b,c [--set key=value ...] --out DIR`.

Every system is resolved (and checked against the trace) before anything runs; the runs
go in parallel over `--workers` processes (`replay.runs.compare`). DIR gets one run folder
per system, named by the system's `name`, exactly as `replay run` writes it, plus
`comparison.parquet` (one row per system, in the order given) and `compare.json`. DIR
is built beside its final place and renamed when complete, so after an error there is
no DIR (and an earlier one is left as it was).
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from replay.cli._progress import Display, display
from replay.cli.app import SCHEDULER_HELP, app, default_workers, shown, warn
from replay.cli.run import InspectOption
from replay.cli.source import (
    AlphaOption,
    BatchesOption,
    BatchSizeOption,
    CacheBudgetOption,
    DriftOption,
    ReuseOption,
    SeedOption,
    SetsOption,
    TraceArgument,
    VerifyOption,
    WorkloadOption,
    checksums_verified,
    inspect_default,
    resolve_source,
    with_cache_budget,
)

if TYPE_CHECKING:
    from replay._output import Owned
    from replay.engine.replay import RunResult
    from replay.runs.compare import RunJob
    from replay.workload.source import SourceRef

WHAT = "`replay compare` or `replay sweep` output"
_PROGRESS_EVERY_S = 5.0
_MARKERS = ("compare.json", "sweep.json")

WorkersOption = Annotated[
    int | None,
    typer.Option(
        "--workers",
        "-j",
        metavar="N",
        help="Runs at once, one process each (default: all cores); with --scheduler local, "
        "the cluster's workers.",
    ),
]
SchedulerOption = Annotated[
    str | None, typer.Option("--scheduler", metavar="local|ADDRESS", help=SCHEDULER_HELP)
]
OutOption = Annotated[Path, typer.Option("--out", "-o", metavar="DIR", help="Folder to write.")]
ForceOption = Annotated[
    bool, typer.Option("--force", help="Replace an earlier compare or sweep output.")
]


@app.command("compare", short_help="Replay one trace on several systems, side by side.")
def compare_command(
    trace: TraceArgument = None,
    *,
    systems: Annotated[
        list[str],
        typer.Option(
            "--systems",
            "-s",
            metavar="SYSTEM,...",
            help="System presets or TOML files, comma-separated or the option repeated "
            "(-s a,b or -s a -s b); the first is the baseline of speedup and energy saving.",
        ),
    ],
    out: OutOption,
    overrides: SetsOption = None,
    cache_budget: CacheBudgetOption = None,
    workers: WorkersOption = None,
    force: ForceOption = False,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the comparison rows as JSON.")
    ] = False,
    inspect: InspectOption = None,
    scheduler: SchedulerOption = None,
    workload: WorkloadOption = None,
    batches: BatchesOption = None,
    batch_size: BatchSizeOption = None,
    seed: SeedOption = None,
    alpha: AlphaOption = None,
    drift: DriftOption = None,
    reuse: ReuseOption = None,
    verify: VerifyOption = True,
) -> None:
    """Replay one trace (or on-the-fly workload) on several systems, in parallel: a run
    folder each and a table."""
    from replay._schema_stamp import stamp
    from replay.runs.compare import (
        COMPARE_COLUMNS,
        COMPARE_FILES,
        compare_document,
        comparison_rows,
        resolve_systems,
        split_list,
        to_columns,
    )
    from replay.runs.results import write_columns, write_json

    ref = resolve_source(
        trace, workload, batches=batches, batch_size=batch_size, seed=seed,
        alpha=alpha, drift=drift, reuse=reuse, verify=verify,
    )  # fmt: skip
    sets = with_cache_budget(cache_budget, overrides)
    # `-s a -s b` as `-s a,b`: a single-valued option would keep only the last one given
    given = [name for text in systems for name in split_list(text, "--systems")]
    jobs = resolve_systems(given, sets)
    document = compare_document(ref, jobs, given, sets)
    document["checksums_verified"] = checksums_verified(ref, verify)

    def finish(tmp: Path, metrics: list[dict[str, Any]]) -> list[dict[str, Any]]:
        rows = comparison_rows(metrics)
        write_columns(tmp / "comparison.parquet", to_columns(rows, COMPARE_COLUMNS))
        write_json(tmp / "compare.json", stamp("compare", document))
        return rows

    rows = run_and_write(
        ref,
        jobs,
        out,
        own_files=COMPARE_FILES,
        workers=workers,
        force=force,
        finish=finish,
        inspect=inspect,
        scheduler=scheduler,
    )
    if json_output:
        typer.echo(json.dumps(rows, indent=2))
    else:
        print_table(
            "comparison",
            rows,
            [("system", "system")],
            speedup=True,
            footer=f"wrote {out}/: comparison.parquet, compare.json and {folders_text(len(rows))}",
        )


# -- shared with `replay sweep` -----------------------------------------------------------


def owned_entries(out: Path, own_files: frozenset[str]) -> Owned:
    """What `--force` may replace (`replay._output.Owned`): in an earlier compare or sweep
    output, its tables and run folders holding only a run folder's files (a person's
    notes beside them or inside one are refused, never deleted); in any other folder,
    nothing but this command's own files."""
    from replay.runs.compare import COMPARE_FILES, SWEEP_FILES
    from replay.runs.results import RUN_FOLDER_FILES

    if out.is_dir() and any((out / marker).is_file() for marker in _MARKERS):
        return {**dict.fromkeys(COMPARE_FILES | SWEEP_FILES), "*": RUN_FOLDER_FILES}
    return own_files


def run_and_write(
    trace: SourceRef,
    jobs: Sequence[RunJob],
    out: Path,
    *,
    own_files: frozenset[str],
    workers: int | None,
    force: bool,
    finish: Callable[[Path, list[dict[str, Any]]], list[dict[str, Any]]],
    inspect: bool | None = None,
    scheduler: str | None = None,
    what: str = "replay compare",
    echo: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """Check DIR and the trace, run every job and write its run folder as it finishes;
    then `finish(tmp, metrics rows in job order)` writes the tables and returns its rows.
    With `inspect` (default: for a trace, not a workload), the trace's statistics
    (computed once) go in every run folder as workload.json. `scheduler` runs the jobs
    on a Dask cluster (`--workers` then sizes a local one). DIR appears, complete, at
    the end. The memory the runs need at once (`what` names the command in a refusal)
    is checked first; `echo` gets the number of runs, then progress lines where no
    progress bar is shown."""
    from replay.runs.compare import check_run_memory, check_workers, preflight
    from replay.runs.results import check_output_folder

    with display(what.removeprefix("replay ")) as progress:
        progress.stage("checking the inputs")
        say = None if echo is None else progress.around(echo)
        n = check_workers(default_workers() if workers is None else workers)
        check_output_folder(out, force=force, owned=owned_entries(out, own_files), what=WHAT)
        placements: list[Any] = []
        opened = preflight(trace, jobs, placements)
        with_stats = inspect_default(trace, inspect)
        # the runs at once, each its row state, and first the statistics: refused with the
        # figure before anything is allocated (a remote cluster's workers are not this
        # machine: there only the statistics are computed here)
        here = scheduler is None or scheduler == "local"
        check_run_memory(
            opened, [job.system for job in jobs] if here else [], parallel=n,
            statistics=with_stats, what=what, placements=placements if here else [],
        )  # fmt: skip
        if say is not None:
            at_once = min(n, len(jobs))
            noun = "run" if len(jobs) == 1 else "runs"
            say(f"{what.removeprefix('replay ')}: {len(jobs):,} {noun}, {at_once} at once")
        workload = None
        if with_stats:
            from replay.analysis.stats import inspect_trace

            progress.stage("trace statistics", total=opened.num_batches, unit="batches")
            workload = inspect_trace(opened, on_progress=progress.batches)
        with contextlib.ExitStack() as stack:
            client = None
            if scheduler is not None:
                from replay._distributed import dask_client

                progress.stage("starting the Dask cluster")
                client = stack.enter_context(dask_client(scheduler, workers))
            return _run_into(
                trace, jobs, out, own_files, n, force, finish, workload, client, say, progress
            )


def _run_into(
    trace: SourceRef,
    jobs: Sequence[RunJob],
    out: Path,
    own_files: frozenset[str],
    n: int,
    force: bool,
    finish: Callable[[Path, list[dict[str, Any]]], list[dict[str, Any]]],
    workload: dict[str, Any] | None,
    client: Any,
    echo: Callable[[str], None] | None,
    progress: Display,
) -> list[dict[str, Any]]:
    from replay.runs.compare import iter_runs, metrics_row
    from replay.runs.results import atomic_folder, write_run

    metrics: dict[int, dict[str, Any]] = {}
    warnings: dict[int, list[str]] = {}
    # the ownership is checked again inside: DIR may have changed during the runs
    owned = owned_entries(out, own_files)
    with atomic_folder(out, force=force, owned=owned, what=WHAT) as tmp:

        def write(index: int, result: RunResult) -> None:
            job = jobs[index]
            write_run(
                tmp / job.folder,
                result,
                overrides=list(job.overrides),
                origin=job.origin,
                workload=workload,
            )
            metrics[index] = metrics_row(result)
            warnings[index] = list(result.summary.get("warnings", []))

        runs = iter_runs(trace, jobs, workers=n, client=client)
        progress.stage("replaying", total=len(jobs), unit="runs")
        last = time.perf_counter()
        for done, (index, result) in enumerate(runs, start=1):
            write(index, result)
            progress.update(done)
            # in a log, where no display is drawn: a line every 5 s at most, as
            # `replay quickstart` does
            logged = echo is not None and not progress.shown
            if logged and echo is not None and time.perf_counter() - last > _PROGRESS_EVERY_S:
                last = time.perf_counter()
                echo(f"  {done:,}/{len(jobs):,} runs done")
        progress.stage("writing the tables")
        rows = finish(tmp, [metrics[i] for i in range(len(jobs))])
    warn_runs([(jobs[i].folder, warnings[i]) for i in range(len(jobs))])
    return rows


def warn_runs(runs: Sequence[tuple[str, Sequence[str]]], *, most: int = 10) -> None:
    """The runs' warnings (summary.json's `warnings`) on stderr, a line each and at most
    `most` lines: a sweep of hundreds of degenerate points says so without a flood."""
    lines = [f"{folder}: {w}" for folder, ws in runs for w in ws]
    for line in lines[:most]:
        warn(line)
    if len(lines) > most:
        warn(f"{len(lines) - most:,} more warnings: see the runs' summary.json")


def folders_text(n: int) -> str:
    return f"{n} run folder" if n == 1 else f"{n} run folders"


def print_table(
    title: str,
    rows: Sequence[dict[str, Any]],
    label_columns: Sequence[tuple[str, str]],
    *,
    speedup: bool,
    footer: str,
) -> None:
    """A small table: the label columns, then time, (speedup,) energy, hit ratio (and
    checkpoint overhead and goodput when any row has them)."""
    from rich.console import Console
    from rich.table import Table

    from replay._units import format_hit_ratio
    from replay.cli._run_text import (
        energy_text,
        goodput_text,
        ratio_text,
        si_text,
        speedup_text,
    )

    console = Console(width=None if sys.stdout.isatty() else 120)
    table = Table(title=shown(title), title_justify="left")
    for _, header in label_columns:
        table.add_column(header)
    table.add_column("time (total)", justify="right")
    if speedup:
        table.add_column("speedup", justify="right")
    table.add_column("energy (total)", justify="right")
    table.add_column("hit ratio", justify="right")
    checkpoints = any(row["checkpoint_strategy"] != "none" for row in rows)
    goodput = any(row["goodput_mean"] is not None for row in rows)
    if checkpoints:
        table.add_column("checkpoint overhead", justify="right")
    if goodput:
        table.add_column("goodput", justify="right")
    for row in rows:
        cells = [shown(row[key]) for key, _ in label_columns]
        cells.append(si_text(row["time_s"], "s", 4))
        if speedup:
            cells.append("-" if row["speedup"] is None else speedup_text(row["speedup"]))
        cells.append(energy_text(row["energy_j"]))
        cells.append(format_hit_ratio(row["hit_ratio"]))
        if checkpoints:
            cells.append(ratio_text(row["checkpoint_overhead"]))
        if goodput:
            cells.append("-" if row["goodput_mean"] is None else goodput_text(row["goodput_mean"]))
        table.add_row(*cells)
    console.print(table)
    console.print(footer, highlight=False, soft_wrap=True)
