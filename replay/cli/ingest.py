"""`replay ingest FILE... --out DIR`: turn real traces into a trace folder: Criteo TSV
click logs (`--format criteo`, the default) or Meta's FBGEMM embedding traces
(`--format fbgemm`, `torch.save` files of indices, offsets and lengths)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from replay._units import plural
from replay.cli._progress import display
from replay.cli.app import app
from replay.errors import ConfigError

FORMATS = ("criteo", "fbgemm")


@app.command("ingest", short_help="Turn real Criteo click logs or FBGEMM traces into a trace.")
def ingest_command(
    files: Annotated[
        list[Path],
        typer.Argument(
            help="Input files, taken in the order given: Criteo TSV (label, 13 integer and "
            "26 categorical features, tab-separated; .gz read as a stream), or FBGEMM "
            "torch.save files (one batch each).",
            show_default=False,
            metavar="FILE...",
        ),
    ],
    out: Annotated[Path, typer.Option("--out", "-o", metavar="DIR", help="Trace folder to write.")],
    input_format: Annotated[
        str,
        typer.Option(
            "--format",
            metavar="criteo|fbgemm",
            help="Input format: Criteo TSV, or FBGEMM (dlrm_datasets) torch.save files.",
        ),
    ] = "criteo",
    batch_size: Annotated[
        int | None,
        typer.Option(
            "--batch-size",
            metavar="N",
            help="Criteo: samples per batch, the last may be partial (default: 2048).",
            show_default=False,
        ),
    ] = None,
    max_ind_range: Annotated[
        int | None,
        typer.Option(
            "--max-ind-range",
            metavar="M",
            help="Criteo: row = 1 + hash % M, tables of M+1 rows (as DLRM's --max-ind-range); "
            "row 0 is the missing value (default: give --dictionary).",
            show_default=False,
        ),
    ] = None,
    dictionary: Annotated[
        bool,
        typer.Option(
            "--dictionary",
            help="Criteo: row = first-seen order per table (1, 2, ...); row 0 is the "
            "missing value.",
        ),
    ] = False,
    skip_bad_lines: Annotated[
        bool,
        typer.Option(
            "--skip-bad-lines", help="Criteo: skip and count malformed lines instead of failing."
        ),
    ] = False,
    table_rows: Annotated[
        str | None,
        typer.Option(
            "--table-rows",
            metavar="ROWS,...",
            help="FBGEMM: rows of every table, or one per table (default: largest row id "
            "+ 1 per table over all files).",
            show_default=False,
        ),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing output.")] = False,
) -> None:
    """Turn real Criteo click logs (exactly one of --max-ind-range, --dictionary) or
    FBGEMM embedding traces (--format fbgemm) into a trace."""
    if input_format not in FORMATS:
        raise ConfigError(f"--format must be criteo or fbgemm, not {input_format!r}")
    given = {
        "--batch-size": batch_size is not None,
        "--max-ind-range": max_ind_range is not None,
        "--dictionary": dictionary,
        "--skip-bad-lines": skip_bad_lines,
        "--table-rows": table_rows is not None,
    }
    applies: dict[str, tuple[str, ...]] = {
        "criteo": ("--batch-size", "--max-ind-range", "--dictionary", "--skip-bad-lines")
    }
    applies["fbgemm"] = ("--table-rows",)
    wrong = [flag for flag, on in given.items() if on and flag not in applies[input_format]]
    if wrong:
        other = "fbgemm" if input_format == "criteo" else "criteo"
        why = " (each FBGEMM file is one batch)" if "--batch-size" in wrong else ""
        raise ConfigError(f"{wrong[0]} applies to --format {other} only{why}")
    if input_format == "fbgemm":
        _ingest_fbgemm(files, out, table_rows, force)
        return
    from replay.trace.criteo import DEFAULT_BATCH_SIZE, ingest

    with display("ingest") as progress:
        progress.stage("reading Criteo TSV", unit="bytes")
        result = ingest(
            files,
            out,
            batch_size=DEFAULT_BATCH_SIZE if batch_size is None else batch_size,
            max_ind_range=max_ind_range,
            dictionary=dictionary,
            skip_bad_lines=skip_bad_lines,
            force=force,
            progress=progress.update if progress.shown else False,
        )
    skipped = f"{result.bad_lines:,} bad lines skipped"
    if result.first_bad_line is not None:
        skipped += f" (first at {result.first_bad_line})"
    typer.echo(
        f"ingested {plural(result.samples, 'sample')}: {plural(result.batches, 'batch')}, "
        f"{result.lookups:,} lookups, {skipped} -> {result.path}"
    )


def _ingest_fbgemm(files: list[Path], out: Path, table_rows: str | None, force: bool) -> None:
    from replay.trace.fbgemm import ROWS_GIVEN, ingest_fbgemm

    with display("ingest") as progress:
        progress.stage("reading FBGEMM trace files", unit="files")
        result = ingest_fbgemm(
            files,
            out,
            table_rows=table_rows,
            force=force,
            progress=progress.update if progress.shown else False,
        )
    rows = "rows given" if result.rows_rule == ROWS_GIVEN else "rows = largest id + 1"
    typer.echo(
        f"ingested {plural(result.files, 'file')}: {plural(result.batches, 'batch')} of "
        f"{result.batch_size:,} samples, {result.lookups:,} lookups, "
        f"{plural(result.tables, 'table')} ({rows}) -> {result.path}"
    )
