"""`replay inspect TRACE` (or `--workload PRESET_OR_SPEC`): access statistics of a trace
(definitions in `replay.analysis.stats`) and the reuse within a batch in Meta's bins
(`replay.analysis.batch_reuse`), printed as Meta's locality statistics print them."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any

import typer

from replay.cli._progress import display
from replay.cli.app import app, shown
from replay.cli.source import (
    BatchesOption,
    BatchSizeOption,
    SeedOption,
    TraceArgument,
    VerifyOption,
    WorkloadOption,
)
from replay.trace.curve_points import DEFAULT_CURVE_POINTS, MAX_CURVE_POINTS

if TYPE_CHECKING:  # rich loads with the tables it prints: `--help` draws none
    from rich.console import Console

# touched-curve points shown in the human-readable output
_SHOWN_CURVE_POINTS = 6


@app.command("inspect", short_help="Statistics of a trace: skew, reuse, rows touched.")
def inspect_command(
    trace: TraceArgument = None,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print one JSON object instead of tables.")
    ] = False,
    verify: VerifyOption = True,
    curve_points: Annotated[
        int,
        typer.Option(
            "--curve-points",
            metavar="N",
            min=2,
            max=MAX_CURVE_POINTS,
            help="About how many log-spaced points the touched curve has "
            f"(2 to {MAX_CURVE_POINTS:,}).",
        ),
    ] = DEFAULT_CURVE_POINTS,
    workload: WorkloadOption = None,
    batches: BatchesOption = None,
    batch_size: BatchSizeOption = None,
    seed: SeedOption = None,
) -> None:
    """Lookups, distinct rows, top-1% share, per-batch distinct fraction, consecutive-batch
    reuse and the rows-touched curve, per table and overall; and the reuse within a batch
    in Meta's bins (share of distinct rows and of lookups per bin)."""
    from replay._memory import check_fits, check_row_space, inspect_estimate
    from replay.analysis.stats import inspect_trace
    from replay.cli.source import checksums_verified, resolve_opened
    from replay.trace.reader import Trace
    from replay.workload.source import open_source

    def check(rows: Sequence[int], lookups: int, batches_: int) -> None:
        # 1 B per row of the row space: refused with the figure before anything is read
        check_row_space(rows, str(trace) if trace is not None else "")
        check_fits(inspect_estimate(rows, lookups, batches=batches_))

    with display("inspect") as progress:
        progress.stage("checking the inputs")
        ref, opened = resolve_opened(
            trace, workload, check=check, batches=batches, batch_size=batch_size, seed=seed
        )
        if opened is None:
            opened = open_source(ref)
        # and the batches held, a piece of each where the source cuts them (`pieces`)
        from replay.runs.compare import in_flight_bytes

        piece = int(getattr(opened, "piece_lookups", 0))
        held = in_flight_bytes(opened.num_lookups, opened.num_batches, piece)
        # a (batch, table) run is within a piece, or else within a batch
        run = piece or -(-int(opened.num_lookups) // max(int(opened.num_batches), 1))
        rows = opened.table_rows.tolist()
        # above `INSPECT_TABLE_MAJOR_ROWS` rows, the state of one group of tables at a
        # time (groups of whole pieces where the source cuts its batches)
        pieces = tuple(getattr(opened, "pieces", ()) or ())
        estimate = inspect_estimate(
            rows, opened.num_lookups, held, run, batches=opened.num_batches, pieces=pieces
        )
        check_fits(estimate)
        if verify and isinstance(opened, Trace):
            progress.stage("checking the trace's checksums")
            opened.verify()
            # inspect reports the update count without reading those files: check it
            # against their footers (after the checksums matched: no damaged footer
            # reaches pyarrow)
            opened.check_row_counts("updates")
        progress.stage("reading the lookups", total=opened.num_batches, unit="batches")
        result = inspect_trace(
            opened, curve_points=curve_points, batch_reuse=True, on_progress=progress.batches
        )
    result["checksums_verified"] = checksums_verified(ref, verify)
    if json_output:
        typer.echo(json.dumps(result, indent=2))
    else:
        print_report(result)


def _pct(value: float) -> str:
    return f"{100.0 * value:.2f}%"


def _named(names: list[str]) -> str:
    """`C3, C4 and all` (the first few, then how many more)."""
    shown_names = [shown(n) for n in names[:4]]
    if len(names) > 4:
        shown_names.append(f"{len(names) - 4:,} more")
    return (
        ", ".join(shown_names[:-1]) + " and " + shown_names[-1]
        if len(names) > 1
        else shown_names[0]
    )


def print_report(result: dict[str, Any], console: Console | None = None) -> None:
    """The human-readable form: one table (per table and overall) and a few lines."""
    from rich.console import Console
    from rich.table import Table

    # a terminal's own width; 120 columns in pipes and files, where rich would take 80
    console = console or Console(width=None if sys.stdout.isatty() else 120)
    table = Table(title=f"trace {shown(result.get('trace', ''))}", title_justify="left")
    table.add_column("table")
    for name in ("rows", "lookups", "distinct rows", "touched"):
        table.add_column(name, justify="right")
    table.add_column("top 1% share", justify="right")
    table.add_column("distinct/batch", justify="right")
    table.add_column("reuse n-1", justify="right")

    vacuous = []

    def add(name: str, stats: dict[str, Any], *, end: bool = False) -> None:
        top = _pct(stats["top1pct_share"])
        if stats["lookups"] and stats.get("top1pct_rows", 0) >= stats["distinct_rows"]:
            vacuous.append(name)
            top = "-"
        table.add_row(
            shown(name),
            f"{stats['rows']:,}",
            f"{stats['lookups']:,}",
            f"{stats['distinct_rows']:,}",
            _pct(stats["touched_fraction"]),
            top,
            _pct(stats["distinct_per_batch_mean"]),
            _pct(stats["consecutive_reuse_mean"]),
            end_section=end,
        )

    for i, stats in enumerate(result["tables"]):
        add(stats["name"], stats, end=i == len(result["tables"]) - 1)
    add("all", result)
    console.print(table)
    lines = [
        f"batches: {result['batches']:,}   lookups: {result['lookups']:,}   "
        f"updates: {result.get('updates', 0):,}"
        + ("   checksums: verified" if result.get("checksums_verified") else ""),
        "top 1% share: share of lookups taken by the ceil(rows/100) hottest rows"
        + (
            f"; -: {_named(vacuous)}, where that many rows are at least all the rows the "
            "trace touched: they take every lookup, which says nothing of the skew (replay a "
            "longer trace, or fit the skew with replay fit)"
            if vacuous
            else ""
        ),
        "distinct/batch: mean of |U_n| / lookups of batch n; reuse n-1: mean of "
        "|U_n ∩ U_n-1| / |U_n| (U_n: distinct rows of batch n)",
    ]
    curve = result["touched_curve"]
    if curve:
        picks = sorted(
            {
                round(i * (len(curve) - 1) / (_SHOWN_CURVE_POINTS - 1))
                for i in range(_SHOWN_CURVE_POINTS)
            }
        )
        points = ", ".join(f"{curve[i][0]:,}: {_pct(curve[i][1])}" for i in picks)
        lines.append(f"rows touched after N batches (N: share of all rows): {points}")
    for line in lines:
        console.print(line, highlight=False, markup=False)
    if "batch_reuse" in result:
        print_batch_reuse(result["batch_reuse"], console)


def print_batch_reuse(reuse: dict[str, Any], console: Console) -> None:
    """The reuse within a batch as Meta's locality statistics print it, both histograms
    side by side (means over batches)."""
    from rich.table import Table

    console.print(
        f"within a batch (mean over batches): lookups {reuse['lookups_per_batch']:,.0f}, "
        f"distinct rows {reuse['distinct_per_batch']:,.0f}",
        highlight=False,
        markup=False,
    )
    table = Table(title="reuse within a batch, Meta's bins", title_justify="left")
    table.add_column("lookups of a row")
    table.add_column("share of distinct rows", justify="right")
    table.add_column("share of lookups", justify="right")
    edges = reuse["bins"]
    for j, edge in enumerate(edges):
        label = f"({edge}, {edges[j + 1]}]" if j + 1 < len(edges) else f"({edge}+"
        table.add_row(label, f"{reuse['rows_share'][j]:.3f}", f"{reuse['lookups_share'][j]:.3f}")
    console.print(table)
