"""The report's "Warnings": each run's summary.json `warnings`, the ways its replayed span
makes its result degenerate (a cache that never evicted, so every policy ties; no
checkpoint in the span). The report shows them first, and its summary says how many runs
carry one, so no degenerate number is read as a property of the system."""

from __future__ import annotations

from replay.report.document import Block, Bullets, Heading, Paragraph, Text
from replay.report.load import Results, RunData

WARNINGS = "Warnings"


def run_warnings(run: RunData) -> list[str]:
    """The run's summary.json `warnings`: ways the replayed span makes its result
    degenerate (a cache that never evicted, no checkpoint in the span)."""
    found = run.summary.get("warnings")
    return [w for w in found if isinstance(w, str)] if isinstance(found, list) else []


def warning_blocks(results: Results) -> list[Block]:
    items: list[Text] = [
        f"{run.label}: {w}" for run in results.all_runs() for w in run_warnings(run)
    ]
    if not items:
        return []
    return [
        Heading(WARNINGS),
        Paragraph(
            "These runs' results are degenerate on the replayed span; the numbers below "
            "for them stand as replayed, but do not read them as properties of the system:"
        ),
        Bullets(tuple(items)),
    ]


def warning_line(results: Results) -> str | None:
    """The summary's line: how many runs carry a warning (None: none does)."""
    warned = [run.label for run in results.all_runs() if run_warnings(run)]
    if not warned:
        return None
    n = len(warned)
    return (
        f"{n} run{'s' * (n > 1)} ({', '.join(warned[:3])}{', ...' * (n > 3)}) "
        f"{'carry' if n > 1 else 'carries'} a warning about the replayed span: read it first."
    )


__all__ = ["WARNINGS", "run_warnings", "warning_blocks", "warning_line"]
