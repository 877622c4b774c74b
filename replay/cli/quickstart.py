"""`replay quickstart [--out DIR]`: the quick start's main command (`replay.runs.quickstart`).

Generates the first batches of `criteo-terabyte` into traces/quickstart, runs the
per-batch comparisons on them, plans the whole epoch of the same workload and writes a
report to DIR (default reports/quickstart), replacing an
earlier quickstart output there (never a folder holding anything else).
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Annotated

import typer

from replay.cli.app import app, default_workers, show_progress
from replay.errors import ConfigError
from replay.runs.quickstart_shape import (
    CHECKPOINT_INTERVAL_BATCHES,
    DEFAULT_BATCH_SIZE,
    DEFAULT_BATCHES,
    DEFAULT_SEED,
    DEFAULT_WORKLOAD,
    MIN_BATCHES,
)


@app.command("quickstart", short_help="Plan criteo-terabyte, compare systems on its start, report.")
def quickstart_command(
    out: Annotated[
        Path, typer.Option("--out", "-o", metavar="DIR", help="Report folder to write.")
    ] = Path("reports/quickstart"),
    trace: Annotated[
        Path, typer.Option("--trace", metavar="DIR", help="Where to generate the trace.")
    ] = Path("traces/quickstart"),
    batches: Annotated[
        int, typer.Option("--batches", metavar="N", help="Batches of the generated trace.")
    ] = DEFAULT_BATCHES,
    batch_size: Annotated[
        int, typer.Option("--batch-size", metavar="N", help="Samples per batch.")
    ] = DEFAULT_BATCH_SIZE,
    seed: Annotated[
        int, typer.Option("--seed", metavar="N", help="Generator seed.")
    ] = DEFAULT_SEED,
    workers: Annotated[
        int | None,
        typer.Option("--workers", "-j", metavar="N", help="Runs at once (default: all cores)."),
    ] = None,
) -> None:
    """Plan one epoch of criteo-terabyte (cache, checkpoints, goodput), replay its first
    batches on the papers' systems, and write a report of both."""
    import replay
    from replay.errors import Interrupted
    from replay.runs.compare import check_workers
    from replay.runs.quickstart import check_quickstart_folder, run_quickstart
    from replay.trace.writer import partial_path

    if batches < MIN_BATCHES:
        # a span too short for the studies is no result: refuse it rather than report it
        raise ConfigError(
            f"--batches: {batches} is out of range: the studies checkpoint every "
            f"{CHECKPOINT_INTERVAL_BATCHES} batches and average the second half of the "
            f"run, so they need at least {MIN_BATCHES}"
        )
    n = check_workers(default_workers() if workers is None else workers)
    check_quickstart_folder(out)
    start = time.perf_counter()

    def step(message: str) -> None:
        typer.echo(f"[{time.perf_counter() - start:5.1f} s] {message}")

    step(f"generating {DEFAULT_WORKLOAD}: {batches:,} batches of {batch_size:,} into {trace}")
    try:
        replay.generate(
            DEFAULT_WORKLOAD, trace, batches=batches, batch_size=batch_size, seed=seed,
            force=True, workers=n,
        )  # fmt: skip
    except Interrupted:
        # quickstart generates afresh every time (it has no --resume): keep nothing
        shutil.rmtree(partial_path(trace), ignore_errors=True)
        raise KeyboardInterrupt from None
    if show_progress():
        from rich.progress import Progress

        with Progress(transient=True) as progress:
            task = progress.add_task("runs", total=None)

            def advance(done: int, total: int) -> None:
                progress.update(task, completed=done, total=total)

            summary = run_quickstart(
                out, trace, workers=n, force=True, on_step=step, on_run=advance
            )
    else:
        last = [0.0]

        def report_runs(done: int, total: int) -> None:
            now = time.perf_counter()
            if done == total or now - last[0] > 5.0:
                last[0] = now
                step(f"  {done}/{total} runs done")

        summary = run_quickstart(
            out, trace, workers=n, force=True, on_step=step, on_run=report_runs
        )
    step(f"wrote {out}/report.md, report.html and {len(summary['figures'])} figures")
    # the report's summary, answers first (its claims follow in the report)
    for line in summary.get("summary", []):
        typer.echo(f"  {line}")
