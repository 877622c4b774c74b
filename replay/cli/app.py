"""The typer application object; each sub-command lives in its own module of this package."""

from __future__ import annotations

import os
import sys

import typer

app = typer.Typer(
    name="replay",
    help="Trace-driven replay analyzer for the memory and fault tolerance of "
    "recommendation-model training.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def default_workers() -> int:
    """All cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def show_progress() -> bool:
    """A progress bar only on a terminal; quiet in pipes, files and CI logs."""
    return sys.stderr.isatty()


SCHEDULER_HELP = (
    "Run on a Dask cluster: 'local' starts one of --workers processes, an address "
    "(tcp://host:8786) uses a running one. Needs pip install 'replay[distributed]' "
    "(default: no cluster, threads in this process)."
)


_CONTROL = dict.fromkeys([*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0), 0x200E, 0x200F,
                          *range(0x202A, 0x202F), *range(0x2066, 0x206A)], "\ufffd")  # fmt: skip


def shown(name: object, *, markup: bool = True) -> str:
    """A name from a trace or a config as a terminal may show it: control characters
    (ANSI escapes, bidi overrides) become U+FFFD and, for rich output (`markup`), square
    brackets cannot open rich markup."""
    text = str(name).translate(_CONTROL)
    if markup:
        from rich.markup import escape

        text = escape(text)
    return text


def warn(message: str) -> None:
    """A one-line warning on stderr: a result stands but the replayed span makes it
    degenerate (summary.json's `warnings` says the same)."""
    typer.echo(f"replay: warning: {shown(message, markup=False)}", err=True)


def _print_version(value: bool) -> None:
    if value:
        from replay import __version__

        typer.echo(f"replay {__version__}")
        raise typer.Exit(0)


@app.callback()
def _commands(
    version: bool = typer.Option(
        False,
        "--version",
        is_eager=True,
        callback=_print_version,
        help="Print replay's version and exit.",
    ),
) -> None:
    # A callback keeps `app` a group of sub-commands even when `main` registered only
    # the one it runs (typer runs a lone command as the whole program otherwise).
    pass
