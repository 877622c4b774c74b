"""`replay report RESULT_DIR... --out DIR`: a report from result folders (DESIGN section 8).

RESULT_DIR is a run folder (`replay run`), a comparison (`replay compare`), a sweep
(`replay sweep`), a miss-ratio curve (`replay mrc --out`), or a folder of those. The
report is written atomically: after an error there is no DIR (an earlier one is kept).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from replay.cli._progress import display
from replay.cli.app import app, shown


@app.command("report", short_help="Write a report (Markdown, HTML, figures) from results.")
def report_command(
    results: Annotated[
        list[Path],
        typer.Argument(
            metavar="RESULT_DIR...",
            help="Run, compare, sweep or mrc folders, or folders holding them.",
        ),
    ],
    out: Annotated[Path, typer.Option("--out", "-o", metavar="DIR", help="Report folder.")],
    force: Annotated[bool, typer.Option("--force", help="Replace an earlier report.")] = False,
) -> None:
    """Write report.md, a self-contained report.html, figures/*.png and summary.json."""
    from replay.report.build import build_report

    with display("report") as progress:
        # no count: loading, the figures and the document are one call
        progress.stage(f"writing {shown(out, markup=False)}")
        summary = build_report(list(results), out, force=force)
    from replay._units import plural

    what = [plural(len(summary[key]), noun) for key, noun in (("runs", "run"), ("plans", "plan"))]
    sources = " and ".join(w for w in what if not w.startswith("0 ")) or "no result"
    typer.echo(
        f"wrote {out}/: report.md, report.html, summary.json and "
        f"{plural(len(summary['figures']), 'figure')} from {sources}"
    )
