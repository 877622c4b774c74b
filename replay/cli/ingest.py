"""`replay ingest FILE... --out DIR`: stream real Criteo TSV files into a trace."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from replay.cli.app import app, show_progress


@app.command("ingest", short_help="Turn real Criteo click logs (TSV) into a trace.")
def ingest_command(
    files: Annotated[
        list[Path],
        typer.Argument(
            help="Criteo TSV files (label, 13 integer and 26 categorical features, tab-"
            "separated; .gz read as a stream), taken in the order given.",
            show_default=False,
            metavar="FILE...",
        ),
    ],
    out: Annotated[Path, typer.Option("--out", "-o", metavar="DIR", help="Trace folder to write.")],
    batch_size: Annotated[
        int,
        typer.Option(
            "--batch-size", metavar="N", help="Samples per batch (the last may be partial)."
        ),
    ] = 2048,
    max_ind_range: Annotated[
        int | None,
        typer.Option(
            "--max-ind-range",
            metavar="M",
            help="Row = 1 + hash % M, tables of M+1 rows (as DLRM's --max-ind-range); "
            "row 0 is the missing value (default: give --dictionary).",
            show_default=False,
        ),
    ] = None,
    dictionary: Annotated[
        bool,
        typer.Option(
            "--dictionary",
            help="Row = first-seen order per table (1, 2, ...); row 0 is the missing value.",
        ),
    ] = False,
    skip_bad_lines: Annotated[
        bool,
        typer.Option("--skip-bad-lines", help="Skip and count malformed lines instead of failing."),
    ] = False,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing output.")] = False,
) -> None:
    """Turn real Criteo click logs into a trace (exactly one of --max-ind-range, --dictionary)."""
    from replay.trace.criteo import ingest

    result = ingest(
        files,
        out,
        batch_size=batch_size,
        max_ind_range=max_ind_range,
        dictionary=dictionary,
        skip_bad_lines=skip_bad_lines,
        force=force,
        progress=show_progress(),
    )
    skipped = f"{result.bad_lines:,} bad lines skipped"
    if result.first_bad_line is not None:
        skipped += f" (first at {result.first_bad_line})"
    typer.echo(
        f"ingested {result.samples:,} samples: {result.batches:,} batches, "
        f"{result.lookups:,} lookups, {skipped} -> {result.path}"
    )
