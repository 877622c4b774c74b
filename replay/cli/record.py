"""`replay record merge RANK_DIRS... --out DIR`: the traces the ranks of a sharded
training job recorded (`replay.record` under `torch.distributed`) joined into one trace
(`replay/trace/record_merge.py`). Recording itself is the Python API `replay.record`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from replay._units import plural
from replay.cli.app import app, shown

record_app = typer.Typer(
    help="Merge the traces a sharded training job recorded.",
    no_args_is_help=True,
)
app.add_typer(record_app, name="record")


@record_app.command("merge")
def record_merge_command(
    rank_dirs: Annotated[
        list[Path],
        typer.Argument(
            metavar="RANK_DIRS...",
            help="The trace folders replay.record wrote on each rank of one job.",
        ),
    ],
    out: Annotated[
        Path, typer.Option("--out", "-o", metavar="DIR", help="The merged trace folder to write.")
    ],
    force: Annotated[
        bool, typer.Option("--force", help="Replace an existing trace in DIR.")
    ] = False,
) -> None:
    """Merge the ranks' recorded traces of one job into the job's trace (each global
    batch is the ranks' batches, rank by rank; update sets computed again)."""
    from replay.cli._outputs import _refuse_overlap
    from replay.trace.record_merge import merge_records

    for given in rank_dirs:
        _refuse_overlap(out, given, "an input of this command")
    path = merge_records(rank_dirs, out, force=force)
    from replay.trace.reader import open_trace

    trace = open_trace(path)
    typer.echo(
        f"wrote {shown(path, markup=False)}: {plural(trace.num_batches, 'batch')} of "
        f"{trace.manifest['batch_size']:,} samples from {plural(len(rank_dirs), 'rank')}, "
        f"{trace.num_lookups:,} lookups, {trace.num_updates:,} updated rows"
    )
