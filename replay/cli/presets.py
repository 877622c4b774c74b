"""`replay presets`: list the built-in workload presets, one line each, with sources."""

from __future__ import annotations

import typer

from replay.cli.app import app


@app.command("presets")
def presets_command() -> None:
    """List the built-in workload presets (and, later, system presets)."""
    from replay.workload.presets import PRESETS, preset_summary

    typer.echo("Workload presets:")
    width = max(len(name) for name in PRESETS)
    for name, spec in PRESETS.items():
        typer.echo(f"  {name:<{width}}  {preset_summary(spec)}")
