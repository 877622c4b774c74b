"""`replay bench`: measured speeds (lookups/s) of the tool's hot paths on this machine."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from replay._units import format_percent
from replay.cli._progress import display
from replay.cli.app import app

bench_app = typer.Typer(help="Measure speeds on this machine.", no_args_is_help=True)
app.add_typer(bench_app, name="bench")


@bench_app.command("generate")
def bench_generate_command(
    preset: Annotated[str, typer.Option(metavar="NAME", help="Workload preset.")] = "criteo-kaggle",
    batches: Annotated[int, typer.Option(metavar="N", help="Number of batches.")] = 1000,
    batch_size: Annotated[int, typer.Option(metavar="N", help="Samples per batch.")] = 2048,
    workers: Annotated[
        int | None,
        typer.Option("--workers", "-j", metavar="N", help="Workers (default: all cores)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Generation rate against writing the same columns to Parquet from memory."""
    from replay.errors import ConfigError
    from replay.runs.bench import bench_generate

    if batches < 1 or batch_size < 1:
        raise ConfigError("--batches and --batch-size must be positive")
    with display("bench generate") as progress:
        progress.stage("measuring")
        result = bench_generate(preset, batches, batch_size, workers)
    if as_json:
        typer.echo(json.dumps(result, indent=2))
        return
    typer.echo(
        f"bench generate: {preset}, {batches} batches x {batch_size} samples = "
        f"{result['lookups']:,} lookups, {result['workers']} workers, on {result['machine']}"
    )
    rows = [
        ("generation (sample + updates + write)", result["generate_lookups_per_s"]),
        ("write-only (same tables, from memory, 1 stream)", result["write_only_lookups_per_s"]),
        ("sampling + update sets only (1 thread)", result["sample_only_lookups_per_s"]),
    ]
    for label, rate in rows:
        typer.echo(f"  {label:<50} {rate / 1e6:8.1f} M lookups/s")
    typer.echo(
        f"  {'ratio generation / write-only':<50} {result['ratio_generate_to_write_only']:8.2f}"
    )
    typer.echo(
        f"  {'Parquet bytes per lookup (lookups + updates)':<50} "
        f"{result['parquet_bytes_per_lookup']:8.2f}"
    )
    typer.echo(f"  {'peak RSS':<50} {result['peak_rss_bytes'] / 2**20:8.0f} MiB")


@bench_app.command("replay")
def bench_replay_command(
    trace: Annotated[
        str | None,
        typer.Option(metavar="DIR", help="Trace folder (default: generate criteo-kaggle)."),
    ] = None,
    batches: Annotated[
        int, typer.Option(metavar="N", help="Batches of the generated trace.")
    ] = 1000,
    batch_size: Annotated[int, typer.Option(metavar="N", help="Samples per batch.")] = 2048,
    capacity_rows: Annotated[
        int, typer.Option(metavar="ROWS", help="Cache capacity in rows.")
    ] = 150_000,
    repeats: Annotated[int, typer.Option(metavar="N", help="Timed runs per system.")] = 3,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Lookups/s of whole `replay run` processes (hbm-lru, hbm-hot) and of `replay mrc`."""
    from pathlib import Path

    from replay.errors import ConfigError
    from replay.runs.bench import bench_replay

    if batches < 1 or batch_size < 1 or capacity_rows < 1 or repeats < 1:
        raise ConfigError("--batches, --batch-size, --capacity-rows and --repeats must be > 0")
    with display("bench replay") as progress:
        progress.stage("measuring")
        result = bench_replay(
            Path(trace) if trace else None,
            batches=batches,
            batch_size=batch_size,
            capacity_rows=capacity_rows,
            repeats=repeats,
        )
    if as_json:
        typer.echo(json.dumps(result, indent=2))
        return
    typer.echo(
        f"bench replay: {result['lookups']:,} lookups, cache {capacity_rows:,} rows, "
        f"on {result['machine']}"
    )
    for system, r in result["runs"].items():
        typer.echo(
            f"  replay run --system {system:<10} whole process {r['lookups_per_s'] / 1e6:6.1f} "
            f"M lookups/s ({r['process_s_min']:.2f} s), streaming "
            f"{r['stream_lookups_per_s'] / 1e6:6.1f} M/s, peak RSS "
            f"{r['peak_rss_bytes'] / 2**20:.0f} MiB"
        )
    for key, label in (("mrc_exact", "mrc exact"), ("mrc_sampled", "mrc SHARDS")):
        if key in result:
            r = result[key]
            typer.echo(f"  {label:<28} {r['lookups_per_s'] / 1e6:6.1f} M lookups/s")


@bench_app.command("checkpoint")
def bench_checkpoint_command(
    trace: Annotated[
        str | None,
        typer.Option(metavar="DIR", help="Trace folder (default: generate criteo-kaggle)."),
    ] = None,
    batches: Annotated[
        int, typer.Option(metavar="N", help="Batches of the generated trace.")
    ] = 1000,
    batch_size: Annotated[int, typer.Option(metavar="N", help="Samples per batch.")] = 2048,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Share of the replay's run time taken by the checkpoint and failure models."""
    from pathlib import Path

    from replay.errors import ConfigError
    from replay.runs.bench import bench_checkpoint

    if batches < 1 or batch_size < 1:
        raise ConfigError("--batches and --batch-size must be > 0")
    with display("bench checkpoint") as progress:
        progress.stage("measuring")
        result = bench_checkpoint(
            Path(trace) if trace else None, batches=batches, batch_size=batch_size
        )
    if as_json:
        typer.echo(json.dumps(result, indent=2))
        return
    typer.echo(f"bench checkpoint: {result['lookups']:,} lookups on {result['machine']}")
    for label, r in result["cases"].items():
        typer.echo(
            f"  {label:<34} {r['checkpoint_s']:7.3f} s of {r['total_s']:6.2f} s "
            f"({100 * r['share']:5.1f}%), {r['checkpoints']:>5} checkpoints, "
            f"goodput {format_percent(r['goodput_mean'])}"
        )


@bench_app.command("all")
def bench_all_command(
    batches: Annotated[
        int, typer.Option(metavar="N", help="Batches of the criteo-kaggle trace.")
    ] = 1000,
    batch_size: Annotated[int, typer.Option(metavar="N", help="Samples per batch.")] = 2048,
    repeats: Annotated[
        int, typer.Option(metavar="N", help="Timed runs per row (after a warm-up).")
    ] = 2,
    only: Annotated[
        str | None,
        typer.Option(
            metavar="TEXT",
            help="Only rows whose group or operation contains this (default: every row).",
        ),
    ] = None,
    markdown: Annotated[
        bool,
        typer.Option("--markdown", help="Print the table as Markdown (docs/performance.md's)."),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """The table of lookups/s and peak memory: generation, replay per policy, checkpoint
    models, mrc exact and sampled, and on-the-fly workloads (a few minutes)."""
    from replay.errors import ConfigError
    from replay.runs.bench import bench_all, markdown_table

    if batches < 1 or batch_size < 1 or repeats < 1:
        raise ConfigError("--batches, --batch-size and --repeats must be > 0")

    if not (as_json or markdown):
        typer.echo("bench all: whole processes, best of --repeats after a warm-up")
    with display("bench all") as progress:
        echo = progress.around(typer.echo)
        done = [0]

        def show(case: object, row: dict) -> None:
            if not (as_json or markdown):
                echo(
                    f"  {row['group']:<11} {row['operation']:<62} {row['lookups'] / 1e6:8.1f} M "
                    f"{row['seconds']:7.2f} s {row['lookups_per_s'] / 1e6:7.1f} M/s "
                    f"{row['peak_rss_bytes'] / 2**30:6.2f} GiB"
                )
            done[0] += 1
            progress.stage(f"measuring ({done[0]} rows done)")

        progress.stage("measuring")
        result = bench_all(
            batches=batches, batch_size=batch_size, repeats=repeats, only=only, on_case=show
        )
    if as_json:
        typer.echo(json.dumps(result, indent=2))
    elif markdown:
        typer.echo(markdown_table(result))
    else:
        typer.echo(f"on {result['machine']}")


@bench_app.command("libcachesim")
def bench_libcachesim_command(
    batches: Annotated[int, typer.Option(metavar="N", help="Batches of each trace.")] = 2000,
    batch_size: Annotated[int, typer.Option(metavar="N", help="Samples per batch.")] = 2048,
    capacity_rows: Annotated[
        int, typer.Option(metavar="ROWS", help="Cache capacity in rows (objects).")
    ] = 1_000_000,
    pairs: Annotated[
        int, typer.Option(metavar="N", help="Timed pairs (replay, then libCacheSim).")
    ] = 3,
    lcs_python: Annotated[
        str | None,
        typer.Option(
            metavar="PATH",
            help="Python that has libcachesim (default: $REPLAY_LCS_PYTHON, else this one "
            "if it has it, else /tmp/lcs-venv/bin/python).",
        ),
    ] = None,
    key_space: Annotated[
        list[str] | None,
        typer.Option(
            metavar="PRESET",
            help="Workload preset to compare on (repeatable; default: criteo-kaggle and "
            "criteo-terabyte).",
        ),
    ] = None,
    day: Annotated[
        bool,
        typer.Option(
            "--day/--no-day",
            help="Also time one Criteo Terabyte day file on the fly (88,978 x 2048, 4.7 B "
            "lookups: a day of click logs, not a day of training).",
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """`replay run --system hbm-lru` against libCacheSim's LRU (a C library, run in its own
    interpreter) on the same keys: whole processes, miss counts checked equal."""
    from replay.errors import ConfigError
    from replay.runs.bench_lcs import (
        KEY_SPACES,
        TERABYTE_DAY_BATCHES,
        bench_vs_libcachesim,
        find_lcs_python,
        markdown_table,
        pairs_text,
    )
    from replay.workload.presets import get_preset

    if batches < 1 or batch_size < 1 or capacity_rows < 1 or pairs < 1:
        raise ConfigError("--batches, --batch-size, --capacity-rows and --pairs must be > 0")
    spaces = tuple(key_space) if key_space else KEY_SPACES
    for name in spaces:
        get_preset(name)  # an unknown preset: one line, before any work
    python = find_lcs_python(lcs_python)  # no libCacheSim: one line, before any work

    with display("bench libcachesim") as progress:
        err = progress.around(lambda line: typer.echo(line, err=True))

        def show(name: str, row: dict) -> None:
            progress.stage(f"measuring (after {name})")
            # progress on stderr: stdout holds only the table (or the JSON)
            if as_json:
                return
            if name == "day":
                err(f"  day on the fly: {row['wall_s']:.1f} s")
            else:
                err(
                    f"  {name}: replay run {row['replay']['wall_s_median']:.2f} s, libCacheSim "
                    f"{row['libcachesim']['wall_s_median']:.2f} s (medians)"
                )

        progress.stage("measuring")
        result = bench_vs_libcachesim(
            key_spaces=spaces,
            batches=batches,
            batch_size=batch_size,
            capacity_rows=capacity_rows,
            pairs=pairs,
            lcs_python=python,
            day_batches=TERABYTE_DAY_BATCHES if day else None,
            on_row=show,
        )
    if as_json:
        typer.echo(json.dumps(result, indent=2))
        return
    typer.echo(markdown_table(result))
    typer.echo("")
    for row in result["rows"]:
        typer.echo(
            f"{row['key_space']}: replay run is {row['ratio_median']:.1f} x libCacheSim "
            f"(median of {pairs_text(pairs)})"
        )
