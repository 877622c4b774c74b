"""Command-line interface: `replay SUBCOMMAND ...`, one module per sub-command.

`main()` is the console script. It turns every `ReplayError` (bad input) into one line
on stderr and exit code 2; usage errors from the parser also exit with 2.
"""

from __future__ import annotations

import sys

import click

# Importing a command module registers its sub-command on `app`.
from replay.cli import bench, generate, ingest, inspect, presets  # noqa: F401
from replay.cli.app import app
from replay.errors import ReplayError


def main(argv: list[str] | None = None) -> int:
    try:
        app(args=argv, prog_name="replay", standalone_mode=False)
    except ReplayError as exc:
        print(f"replay: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.ClickException as exc:
        exc.show()
        return 2
    except (click.exceptions.Abort, KeyboardInterrupt):
        print("replay: interrupted", file=sys.stderr)
        return 130
    return 0


__all__ = ["app", "main"]
