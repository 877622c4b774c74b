"""`replay diff A B [--json] [--fail-on EXPR ...]`: two run folders' or two plan folders'
answers side by side with their changes (`replay.runs.diff`), and a gate for pipelines:
exit 1 when a `--fail-on` threshold breaks, naming each, 0 when none does, 2 on bad input.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from replay.cli.app import app, shown

if TYPE_CHECKING:
    from replay.runs.diff import Diff


@app.command("diff", short_help="Two runs' or two plans' answers side by side; a CI gate.")
def diff_command(
    a: Annotated[Path, typer.Argument(metavar="A", help="A run folder or a plan folder.")],
    b: Annotated[Path, typer.Argument(metavar="B", help="One of the same kind, compared to A.")],
    *,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the answers and changes as JSON.")
    ] = False,
    fail_on: Annotated[
        list[str] | None,
        typer.Option(
            "--fail-on",
            metavar="EXPR",
            help="Exit 1 when this breaks, e.g. 'cache.bytes_for_hit[0.95] > +10%', "
            "'checkpoint.goodput < -0.5pt', 'cluster.imbalance > 1.3' (repeatable; see "
            "docs/diff.md; default: none, exit 0).",
        ),
    ] = None,
    all_rows: Annotated[
        bool, typer.Option("--all", help="List unchanged answers too (the table only).")
    ] = False,
) -> None:
    """Every answer of A beside B's, with its change (B - A) in the answer's units: bytes,
    durations, percentages, and percentage points for ratios."""
    from replay.runs.diff import check, diff, to_json

    result = diff(a, b)
    thresholds, messages = check(result, list(fail_on or []))
    if as_json:
        typer.echo(json.dumps(to_json(result, thresholds, messages), indent=2, allow_nan=False))
    else:
        _table(result, all_rows)
        for t in thresholds:
            if not any(m.startswith(t.text + ":") for m in messages):
                typer.echo(f"holds: {shown(t.text, markup=False)}")
    for message in messages:
        typer.echo(f"replay: threshold broken: {shown(message, markup=False)}", err=True)
    if messages:
        raise typer.Exit(1)


def _table(result: Diff, all_rows: bool) -> None:
    from rich.console import Console
    from rich.table import Table

    from replay.runs.diff import format_change, format_value

    console = Console(width=None if sys.stdout.isatty() else 120)
    changed = [r for r in result.rows if r.changed]
    rows = result.rows if all_rows else changed
    title = f"{result.kind}s: A = {result.a}, B = {result.b}"
    table = Table(title=shown(title), title_justify="left")
    for header in ("answer", "A", "B", "change"):
        table.add_column(header, justify="left" if header == "answer" else "right")
    for r in rows:
        table.add_row(
            shown(r.path), shown(format_value(r.a, r.unit)), shown(format_value(r.b, r.unit)),
            shown(format_change(r)),
        )  # fmt: skip
    if rows:
        console.print(table)
    same = len(result.rows) - len(changed)
    if not all_rows:
        typer.echo(
            f"{len(changed)} of {len(result.rows)} answers changed"
            + (f" ({same} the same; --all lists them)" if same else "")
        )
