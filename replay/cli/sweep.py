"""`replay sweep TRACE --system S --grid key=v1,v2 [--grid ...] [--set ...] --out DIR`.

One run per point of the cross product of the grids (the last `--grid` varies fastest),
in parallel over `--workers` processes. Values are parsed like `--set` values, and every
point is validated before anything runs. DIR gets a run folder per point,
`<index>-<key=value,...>` (zero-padded index, filesystem-safe), `sweep.parquet` (one row
per point: `point`, a string column per grid key, then the metrics of
`comparison.parquet`) and `sweep.json`; it is written atomically like `replay compare`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from replay.cli._progress import display
from replay.cli.app import app, show_progress
from replay.cli.compare import (
    ForceOption,
    OutOption,
    SchedulerOption,
    WorkersOption,
    folders_text,
    print_table,
    run_and_write,
)
from replay.cli.run import InspectOption
from replay.cli.source import (
    CACHE_SIZE_KEYS,
    AlphaOption,
    BatchesOption,
    BatchSizeOption,
    CacheBudgetOption,
    DriftOption,
    ReuseOption,
    SeedOption,
    SetsOption,
    SystemOption,
    TraceArgument,
    VerifyOption,
    WorkloadOption,
    checksums_verified,
    one_system,
    resolve_source,
    with_cache_budget,
)
from replay.errors import ConfigError, shown

# Runs a sweep does without --max-runs: each run replays the whole trace (0.5 s for a
# tiny one, minutes for a large one), so more is a typo in a grid, not a plan; listing
# and validating the points alone takes ~1 ms each
DEFAULT_MAX_RUNS = 10_000
# grids from this many points say so while their points are checked (~1 ms each)
_ANNOUNCE_CHECKING = 1_000


def _echo(json_output: bool) -> Callable[[str], None] | None:
    """Where the sweep's progress lines go: stdout beside its table; with --json (whose
    stdout is the JSON) stderr, and only on a terminal."""
    if not json_output:
        return typer.echo
    if show_progress():
        return lambda line: typer.echo(line, err=True)
    return None


def _resolve(system: str, parsed: Any, sets: list[str], total: int) -> Any:
    """`resolve_sweep`, with a progress bar on a terminal for a large grid."""
    from replay.runs.compare import resolve_sweep

    if total < _ANNOUNCE_CHECKING:
        return resolve_sweep(system, parsed, sets)
    with display("sweep") as progress:
        progress.stage("checking points", total=total, unit="points")
        return resolve_sweep(system, parsed, sets, progress.batches)


@app.command("sweep", short_help="Replay one trace on a system over a grid of settings.")
def sweep_command(
    trace: TraceArgument = None,
    *,
    system: SystemOption,
    grid: Annotated[
        list[str],
        typer.Option(
            "--grid",
            metavar="KEY=V1,V2,...",
            help="A system key by dotted path and its values, e.g. "
            "policy.capacity_rows=1000,10000 (repeatable: the cross product is run).",
        ),
    ],
    out: OutOption,
    overrides: SetsOption = None,
    cache_budget: CacheBudgetOption = None,
    workers: WorkersOption = None,
    force: ForceOption = False,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the sweep's rows as JSON.")
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
    max_runs: Annotated[
        int,
        typer.Option(
            "--max-runs",
            metavar="N",
            help="Refuse a grid of more runs than this (each replays the whole trace).",
        ),
    ] = DEFAULT_MAX_RUNS,
) -> None:
    """Replay one trace (or on-the-fly workload) on a system over a grid of settings: a
    run folder per point."""
    name = one_system(system)
    from replay._schema_stamp import stamp
    from replay.runs.compare import (
        SWEEP_FILES,
        check_grid_size,
        parse_grid,
        sweep_columns,
        sweep_document,
        sweep_rows,
        to_columns,
    )
    from replay.runs.results import write_columns, write_json

    ref = resolve_source(
        trace, workload, batches=batches, batch_size=batch_size, seed=seed,
        alpha=alpha, drift=drift, reuse=reuse, verify=verify,
    )  # fmt: skip
    sets = with_cache_budget(cache_budget, overrides)
    # counted before a value is parsed or a point listed: an absurd grid is refused at once
    total = check_grid_size(grid, max_runs)
    parsed = parse_grid(grid)
    sized = [key for key in parsed if key in CACHE_SIZE_KEYS]
    if cache_budget is not None and sized:
        raise ConfigError(
            f"--cache-budget {shown(cache_budget)} and --grid {sized[0]} both size the cache: "
            "give one"
        )
    echo = _echo(json_output)
    if echo is not None and total >= _ANNOUNCE_CHECKING:
        echo(f"sweep: checking {total:,} points")
    points = _resolve(name, parsed, sets, total)
    document = sweep_document(ref, name, parsed, points, sets)
    document["checksums_verified"] = checksums_verified(ref, verify)

    def finish(tmp: Path, metrics: list[dict[str, Any]]) -> list[dict[str, Any]]:
        rows = sweep_rows(points, metrics)
        write_columns(tmp / "sweep.parquet", to_columns(rows, sweep_columns(points)))
        write_json(tmp / "sweep.json", stamp("sweep", document))
        return rows

    rows = run_and_write(
        ref,
        [p.job for p in points],
        out,
        own_files=SWEEP_FILES,
        workers=workers,
        force=force,
        finish=finish,
        inspect=inspect,
        scheduler=scheduler,
        what="replay sweep",
        echo=echo,
    )
    if json_output:
        typer.echo(json.dumps(rows, indent=2))
    else:
        numbered = [{**row, "#": row["point"].partition("-")[0]} for row in rows]
        print_table(
            f"sweep of {points[0].job.system.name}",
            numbered,
            [("#", "#"), *((key, key) for key in parsed)],
            speedup=False,
            footer=f"wrote {out}/: sweep.parquet, sweep.json and {folders_text(len(rows))}",
        )
