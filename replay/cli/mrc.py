"""`replay mrc TRACE`: the LRU miss-ratio curve of a trace (algorithms in `replay.analysis`).

`--out DIR` writes mrc.parquet, mrc.json and mrc.png atomically: everything is built in a
temporary folder beside DIR (`.DIR.partial-PID`) and renamed into place, so after an
error no output folder (and no half-written one) remains.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from replay.cli._progress import display
from replay.cli.app import SCHEDULER_HELP, app, shown
from replay.cli.source import (
    AlphaOption,
    BatchesOption,
    BatchSizeOption,
    DriftOption,
    ReuseOption,
    SeedOption,
    TraceArgument,
    VerifyOption,
    WorkloadOption,
    checksums_verified,
    memory_check,
    resolve_source,
)
from replay.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from rich.console import Console

    from replay._memory import Estimate
    from replay.analysis.mrc import MrcResult

_SHOWN_POINTS = 12  # curve points in the human-readable table


@app.command("mrc", short_help="LRU miss ratio against cache size, in rows and bytes.")
def mrc_command(
    trace: TraceArgument = None,
    sizes: Annotated[
        str | None,
        typer.Option(
            "--sizes",
            metavar="SIZE,...",
            help="Cache sizes, comma-separated, in rows (1000,50000) or bytes of fp32 rows "
            "(8MiB,1GiB) (default: ~64 log-spaced sizes up to the rows the trace touches).",
        ),
    ] = None,
    sample_rate: Annotated[
        float | None,
        typer.Option(
            "--sample-rate",
            metavar="R",
            help="SHARDS spatial sampling rate in (0, 1] (default: the exact curve).",
        ),
    ] = None,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print one JSON object instead of a table.")
    ] = False,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            "-o",
            metavar="DIR",
            help="Write mrc.parquet, mrc.json and mrc.png here (default: print only).",
        ),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Replace an earlier output folder.")
    ] = False,
    scheduler: Annotated[
        str | None, typer.Option("--scheduler", metavar="local|ADDRESS", help=SCHEDULER_HELP)
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(
            "--workers",
            "-j",
            metavar="N",
            help="Workers of --scheduler local (default: all cores).",
        ),
    ] = None,
    workload: WorkloadOption = None,
    batches: BatchesOption = None,
    batch_size: BatchSizeOption = None,
    seed: SeedOption = None,
    alpha: AlphaOption = None,
    drift: DriftOption = None,
    reuse: ReuseOption = None,
    verify: VerifyOption = True,
) -> None:
    """LRU miss ratio against cache size in rows and bytes, from one pass over the lookups (exact
    stack distances) or from a SHARDS sample with its expected error."""
    from replay._memory import mrc_estimate, row_space
    from replay._schema_stamp import stamp
    from replay.analysis.mrc import mrc_source, validate_options
    from replay.analysis.stack import dense_rows
    from replay.workload.source import source_document, source_label

    def estimate(rows: Sequence[int], lookups: int, batches: int) -> Estimate:
        # the exact pass keeps a map of the rows seen where the row space is large against
        # the lookups (`dense_rows`, as `replay.analysis.mrc` chooses), an array otherwise
        dense = lookups <= 0 or dense_rows(row_space(rows), lookups)
        return mrc_estimate(rows, lookups, sample_rate, dense=dense)

    with display("mrc") as progress:
        progress.stage("checking the inputs")
        # the memory estimate refuses a row space this machine cannot hold before anything
        # is read (the exact curve keeps 4-8 B per row, or per row seen in a large space)
        ref = resolve_source(
            trace, workload, batches=batches, batch_size=batch_size, seed=seed,
            alpha=alpha, drift=drift, reuse=reuse, verify=verify, check=memory_check(estimate),
        )  # fmt: skip
        row_bytes = source_row_bytes(ref)
        chosen = parse_sizes(sizes, row_bytes) if sizes is not None else None
        validate_options(chosen, sample_rate)
        if scheduler is None and workers is not None:
            raise ConfigError("--workers sizes a --scheduler local cluster; give --scheduler local")
        if workers is not None:  # before a local cluster of that many processes starts
            from replay.workload.generator import check_workers

            check_workers(workers)
        if scheduler is not None and sample_rate is None:
            raise ConfigError(
                "the exact curve is one sequential pass; --scheduler spreads --sample-rate curves"
            )
        if out is not None:
            check_target(out, force)

        def on_progress(done: int, total: int) -> None:
            progress.update(done, total)
            if done >= total:  # what follows has no count (a sample's exact head)
                progress.stage("finishing the curve")

        if scheduler is None:
            progress.stage("reading the lookups", unit="lookups")
            result = mrc_source(ref, chosen, sample_rate, on_progress=on_progress)
        else:
            from replay._distributed import dask_client

            progress.stage("starting the Dask cluster")
            with dask_client(scheduler, workers) as client:
                progress.stage("reading the lookups", unit="lookups")
                result = mrc_source(
                    ref, chosen, sample_rate, client=client, on_progress=on_progress
                )
        document = {**result.to_json(), **source_document(ref)}
        if row_bytes:
            document["row_bytes"] = row_bytes
            document["cache_bytes"] = [int(c) * row_bytes for c in result.sizes.tolist()]
        document["checksums_verified"] = checksums_verified(ref, verify)
        document = stamp("mrc", document)  # the file's document, printed by --json too
        if out is not None:
            progress.stage(f"writing {shown(out, markup=False)}")
            from replay.runs.mrc_files import write_outputs

            write_outputs(result, document, out, force)
    if json_output:
        typer.echo(json.dumps(document, indent=2))
    else:
        print_report(result, source_label(ref), out, row_bytes=row_bytes)


def parse_sizes(text: str, row_bytes: int | None = None) -> list[int]:
    """'1000,20000' -> [1000, 20000] rows; '8MiB,1GiB' -> bytes / `row_bytes` rows
    (whole rows, at least 1). ConfigError for anything else, or for bytes when the row
    size is unknown."""
    from replay._units import parse_bytes

    values = []
    for part in text.split(","):
        item = part.strip()
        try:
            values.append(int(item))
            continue
        except ValueError:
            pass
        try:
            nbytes = parse_bytes(item, "--sizes")
        except ConfigError:
            raise ConfigError(
                f"--sizes: {item!r} is not an integer number of rows or a size with a unit "
                "(give e.g. 1000,50000 or 8MiB,1GiB)"
            ) from None
        if not any(c.isalpha() for c in item):  # a fraction such as 1.5: not whole rows
            raise ConfigError(f"--sizes: {item!r} is not an integer number of rows")
        if not row_bytes:
            raise ConfigError(
                f"--sizes: {item!r} is in bytes, but the source does not give its embedding "
                "dimension (give the sizes in rows)"
            )
        values.append(max(1, nbytes // row_bytes))
    return values


def source_row_bytes(ref: Any) -> int | None:
    """The bytes of one row a cache holds (fp32 embedding values) of a trace folder or a
    workload spec, None when the source does not say its dimension."""
    from replay.trace.reader import open_trace
    from replay.workload.spec import WorkloadSpec

    dim: object
    if isinstance(ref, WorkloadSpec):
        dim = ref.embedding_dim
    else:
        dim = (open_trace(ref, allow_empty=True).workload or {}).get("embedding_dim")
    return 4 * int(dim) if isinstance(dim, int) and dim > 0 else None


# -- output folder ------------------------------------------------------------------------


def check_target(out: Path, force: bool) -> None:
    """OutputError unless `out` can become the output folder (checked before the work)."""
    from replay.runs.mrc_files import OUTPUT_FILES
    from replay.runs.results import check_output_folder

    check_output_folder(out, force=force, owned=OUTPUT_FILES, what="`replay mrc` output")


def print_report(
    result: MrcResult,
    trace: str,
    out: Path | None,
    console: Console | None = None,
    *,
    row_bytes: int | None = None,
) -> None:
    from rich.console import Console
    from rich.table import Table

    from replay._units import format_bytes

    console = console or Console(width=None if sys.stdout.isatty() else 120)
    kind = "exact" if result.exact else f"SHARDS {result.sample_rate:.4g}"
    table = Table(title=f"LRU miss ratio ({kind})", title_justify="left")
    table.add_column("cache rows", justify="right")
    if row_bytes:
        table.add_column("cache bytes", justify="right")
    table.add_column("miss ratio", justify="right")
    table.add_column("hit ratio", justify="right")
    if not result.exact:
        table.add_column("± error", justify="right")
    n = len(result.sizes)
    picks = (
        range(n)
        if n <= _SHOWN_POINTS
        else sorted({round(i * (n - 1) / (_SHOWN_POINTS - 1)) for i in range(_SHOWN_POINTS)})
    )
    for i in picks:
        miss = float(result.miss_ratios[i])
        cells = [f"{int(result.sizes[i]):,}"]
        if row_bytes:
            cells.append(format_bytes(int(result.sizes[i]) * row_bytes))
        cells += [f"{miss:.4f}", f"{1 - miss:.4f}"]
        if not result.exact:
            cells.append(f"{float(result.point_errors[i]):.4f}")
        table.add_row(*cells)
    console.print(table)
    from replay._units import format_bytes as fmt

    distinct = "distinct rows" if result.exact else "distinct rows (estimated)"
    if row_bytes:
        distinct += f" ({fmt(result.distinct_keys * row_bytes)} at {row_bytes} B per row)"
    lines = [
        f"trace: {shown(trace, markup=False)}   lookups: {result.lookups:,}   "
        f"{distinct}: {result.distinct_keys:,}"
    ]
    if not result.exact:
        lines.append(
            f"sampled lookups: {result.sampled_lookups:,}   expected error: "
            f"±{result.expected_error:.4f} (about 95%, largest over the curve)"
        )
        head = result.extra.get("head")
        if head:
            how = "the whole stream" if head["exact"] else f"{head['blocks']} blocks of it"
            lines.append(
                f"sizes up to {head['capacity_rows']:,} rows: exact stack distances ({how})"
            )
        else:
            lines.append(
                f"smallest size a sample at this rate resolves: {result.resolution_rows:,} rows"
            )
    if n > len(picks):
        lines.append(f"{len(picks)} of {n} points shown; --json or --out for all")
    if int(result.sizes[-1]) >= result.distinct_keys:
        lines.append(
            f"note: sizes from {result.distinct_keys:,} rows hold every row the source touches: "
            "their miss ratio is the cold misses (a bigger cache buys nothing)"
        )
    if out is not None:
        from replay.runs.mrc_files import OUTPUT_FILES

        lines.append(f"wrote {out}/: {', '.join(sorted(OUTPUT_FILES))}")
    for line in lines:
        console.print(line, highlight=False, markup=False)
