"""`replay generate`: write a synthetic trace from a preset or a TOML workload spec."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from replay._units import plural
from replay.cli._progress import Display, display
from replay.cli.app import SCHEDULER_HELP, app, default_workers
from replay.cli.source import (
    AlphaOption,
    BatchesOption,
    BatchSizeOption,
    DriftOption,
    ReuseOption,
    SeedOption,
)
from replay.errors import ConfigError

if TYPE_CHECKING:
    from replay.workload.spec import WorkloadSpec


@app.command("generate", short_help="Write a synthetic access and update trace (Parquet).")
def generate_command(
    out: Annotated[Path, typer.Option("--out", "-o", metavar="DIR", help="Trace folder to write.")],
    preset: Annotated[
        str | None,
        typer.Option(
            metavar="NAME", help="Workload preset (`replay presets`; default: give --spec)."
        ),
    ] = None,
    spec: Annotated[
        Path | None,
        typer.Option(metavar="FILE", help="Workload spec TOML file (default: give --preset)."),
    ] = None,
    batches: BatchesOption = None,
    batch_size: BatchSizeOption = None,
    seed: SeedOption = None,
    alpha: AlphaOption = None,
    drift: DriftOption = None,
    reuse: ReuseOption = None,
    workers: Annotated[
        int | None,
        typer.Option(
            "--workers",
            "-j",
            metavar="N",
            help="Parallel workers (default: all cores): threads here, or the processes of "
            "--scheduler local.",
        ),
    ] = None,
    scheduler: Annotated[
        str | None, typer.Option("--scheduler", metavar="local|ADDRESS", help=SCHEDULER_HELP)
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing output.")] = False,
    resume: Annotated[
        bool, typer.Option("--resume", help="Finish an interrupted generation.")
    ] = False,
) -> None:
    """Generate an embedding access and update trace (Parquet + manifest.json)."""
    from replay.workload.presets import resolve_spec

    if preset is None and spec is None:
        raise ConfigError("give --preset NAME or --spec FILE.toml (see `replay presets`)")
    base = resolve_spec(preset, spec)
    resolved = base.with_overrides(
        batches=batches, batch_size=batch_size, seed=seed, alpha=alpha, drift=drift, reuse=reuse
    )
    if workers is not None:  # before a local cluster of that many processes starts
        from replay.workload.generator import check_workers

        check_workers(workers)
    with display("generate") as progress, contextlib.ExitStack() as stack:
        client = None
        if scheduler is not None:
            from replay._distributed import dask_client

            progress.stage("starting the Dask cluster")
            client = stack.enter_context(dask_client(scheduler, workers))
        path, elapsed = _generate(resolved, out, workers, force, resume, client, progress)
    typer.echo(
        f"wrote {path}: {plural(resolved.batches, 'batch')}, {resolved.lookups:,} lookups "
        f"in {elapsed:.1f} s ({resolved.lookups / max(elapsed, 1e-9):,.0f} lookups/s)"
    )


def _generate(
    resolved: WorkloadSpec,
    out: Path,
    workers: int | None,
    force: bool,
    resume: bool,
    client: Any,
    progress: Display,
) -> tuple[Path, float]:
    from replay.workload.generator import generate

    workers = default_workers() if workers is None or client is not None else workers
    started = time.perf_counter()
    progress.stage("generating", total=resolved.lookups, unit="lookups")
    path = generate(
        resolved, out, workers=workers, force=force, resume=resume,
        progress=progress.advance if progress.shown else None, client=client,
    )  # fmt: skip
    return path, time.perf_counter() - started
