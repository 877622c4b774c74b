"""`replay presets`: list the built-in workload and system presets, one line each."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from replay.cli.app import app


@app.command("presets", short_help="List the built-in workload and system presets.")
def presets_command(
    name: Annotated[
        str | None,
        typer.Argument(
            metavar="[NAME]",
            help="A preset to print as TOML: the same as --show NAME.",
            show_default=False,
        ),
    ] = None,
    show: Annotated[
        str | None,
        typer.Option(
            "--show",
            metavar="NAME",
            help="Print this workload, system or cluster preset as TOML to copy, edit and "
            "pass back with --spec or --system FILE.toml (default: list them all).",
        ),
    ] = None,
) -> None:
    """List the built-in workload presets and system presets (with their sources), or
    print one as TOML (replay presets NAME, or --show NAME)."""
    if name is not None and show is not None and name != show:
        from replay.errors import InputError, opt

        raise InputError(f"give one preset: NAME {name!r} or {opt('--show')} {show!r}")
    show = show if show is not None else name
    if show is not None:
        from replay.cli._presets_show import preset_toml

        typer.echo(preset_toml(show), nl=False)
        return
    from replay.engine.systems import system_preset_summary
    from replay.workload.presets import PRESETS, preset_summary

    typer.echo("Workload presets:")
    width = max(len(name) for name in PRESETS)
    for name, spec in PRESETS.items():
        typer.echo(f"  {name:<{width}}  {preset_summary(spec)}")
    rows = system_preset_summary()
    typer.echo(
        "\nSystem presets (numbers and sources: replay/system/devices.toml, presets/*.toml):"
    )
    width = max(len(r["name"]) for r in rows)
    for r in rows:
        typer.echo(
            f"  {r['name']:<{width}}  policy {r['policy']}, lookups on {r['lookup']}: "
            f"{r['description']}"
        )
    from replay.system.presets import cluster_preset_summary

    clusters = cluster_preset_summary()
    typer.echo(
        "\nCluster presets (--set cluster.preset=NAME with any system; replay/system/"
        "clusters.toml):"
    )
    width = max(len(r["name"]) for r in clusters)
    for r in clusters:
        typer.echo(f"  {r['name']:<{width}}  {r['gpus']} GPUs, {r['fabric']}: {r['description']}")
    from replay.checkpoint import STRATEGIES

    typer.echo("\nCheckpoint strategies (--set checkpoint.strategy=NAME; replay/checkpoint/):")
    width = max(len(name) for name in STRATEGIES)
    for name, cls in sorted(STRATEGIES.items()):
        doc = (sys.modules[cls.__module__].__doc__ or "").strip()  # its first paragraph
        summary = " ".join(doc.split("\n\n")[0].split()).split(": ", 1)[-1]
        typer.echo(f"  {name:<{width}}  {summary}")
