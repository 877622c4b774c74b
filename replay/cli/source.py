"""The options that choose what a command replays: a TRACE folder or `--workload`.

`run`, `mrc`, `compare` and `sweep` take either a trace folder or `--workload
PRESET_OR_SPEC` with `replay generate`'s shape overrides, in which case the batches are
generated in memory as they are replayed (`replay.workload.onthefly`), with results
identical to generating the trace first.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from replay.errors import ConfigError, shown

if TYPE_CHECKING:  # loaded by the command that opens one: `--help` reads no trace
    from replay.workload.source import Source, SourceRef

_PANEL = "On-the-fly workload (instead of TRACE)"

TraceArgument = Annotated[
    Path | None,
    typer.Argument(metavar="[TRACE]", help="Trace folder (or give --workload)."),
]
WorkloadOption = Annotated[
    str | None,
    typer.Option(
        "--workload",
        metavar="PRESET_OR_SPEC",
        help="Generate this workload preset or TOML spec in memory instead of reading a "
        "trace (same results as `replay generate` then TRACE; default: read TRACE).",
        rich_help_panel=_PANEL,
    ),
]
# what the shape options default to: the preset's or spec's own value (`replay presets`)
WORKLOAD_DEFAULT = "(default: the workload's; see `replay presets`)"
BatchesOption = Annotated[
    int | None,
    typer.Option(
        metavar="N", help=f"Number of batches {WORKLOAD_DEFAULT}.", rich_help_panel=_PANEL
    ),
]
BatchSizeOption = Annotated[
    int | None,
    typer.Option(
        metavar="N", help=f"Samples per batch {WORKLOAD_DEFAULT}.", rich_help_panel=_PANEL
    ),
]
SeedOption = Annotated[
    int | None,
    typer.Option(metavar="N", help=f"Random seed {WORKLOAD_DEFAULT}.", rich_help_panel=_PANEL),
]
AlphaOption = Annotated[
    float | None,
    typer.Option(
        metavar="X",
        help=f"Power-law exponent for every table {WORKLOAD_DEFAULT}.",
        rich_help_panel=_PANEL,
    ),
]
DriftOption = Annotated[
    float | None,
    typer.Option(
        metavar="X",
        help=f"Popularity drift for every table, share of rows per batch; 0 = off "
        f"{WORKLOAD_DEFAULT}.",
        rich_help_panel=_PANEL,
    ),
]
ReuseOption = Annotated[
    float | None,
    typer.Option(
        metavar="P",
        help=f"Probability of repeating a recent lookup; 0 = off {WORKLOAD_DEFAULT}.",
        rich_help_panel=_PANEL,
    ),
]
SystemOption = Annotated[
    list[str],
    typer.Option("--system", "-s", metavar="SYSTEM", help="System preset name or TOML file."),
]


# the keys that size a system's cache, which --cache-budget gives
CACHE_SIZE_KEYS = ("policy.capacity_bytes", "policy.capacity_rows")


def with_cache_budget(budget: str | None, overrides: Sequence[str] | None) -> list[str]:
    """The `--set` overrides with `--cache-budget` as the first: the cache's bytes
    (refused in one line when they are no size, or when a --set also sizes the cache)."""
    sets = list(overrides or [])
    if budget is None:
        return sets
    from replay._units import parse_bytes

    if parse_bytes(budget, "--cache-budget") <= 0:
        raise ConfigError(f"--cache-budget: {budget!r} must be more than 0 bytes")
    for given in sets:
        if given.partition("=")[0].strip() in CACHE_SIZE_KEYS:
            raise ConfigError(
                f"--cache-budget {shown(budget)} and --set {shown(given)} both size the "
                "cache: give one"
            )
    return [f"policy.capacity_bytes={budget}", *sets]


def one_system(given: Sequence[str]) -> str:
    """The `--system` of a command that replays one system. Click keeps the last value of
    an option given twice, so `-s a -s b` ran b alone without a word; it is refused."""
    if len(given) != 1:
        raise ConfigError(
            f"--system: given {len(given)} times ({', '.join(given)}); this command replays "
            "one system (`replay compare -s a,b` replays several side by side)"
        )
    return given[0]


SetsOption = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        metavar="KEY=VALUE",
        help="Override a system field by dotted path, e.g. policy.capacity_bytes=8GiB or "
        "checkpoint.interval_s=30min (repeatable; applies to every run; default: the "
        "system as given).",
    ),
]
CacheBudgetOption = Annotated[
    str | None,
    typer.Option(
        "--cache-budget",
        metavar="SIZE",
        help="Cache bytes, e.g. 8GiB or 512MiB (per GPU with a [cluster]), as `replay plan` "
        "takes them: the same as --set policy.capacity_bytes=SIZE (default: the "
        "system's own cache).",
    ),
]
VerifyOption = Annotated[
    bool,
    typer.Option(
        "--verify/--no-verify",
        help="Check every trace file's SHA-256 against the manifest before reading "
        "(about 0.1 s per 100 MB; a file unchanged since it matched on this machine is not "
        "hashed again, REPLAY_CACHE_DIR= hashes every file); --no-verify skips it and the "
        "output says so.",
    ),
]


# check(rows per table, lookups, batches): refuses a source before anything is read
ShapeCheck = Callable[[Sequence[int], int, int], None]


def resolve_source(trace: Path | None, workload: str | None, **options: Any) -> SourceRef:
    """A trace folder path, or the workload spec with its overrides (validated); options
    as `resolve_opened`'s."""
    return resolve_opened(trace, workload, **options)[0]


def resolve_opened(
    trace: Path | None,
    workload: str | None,
    *,
    check: ShapeCheck | None = None,
    batches: int | None = None,
    batch_size: int | None = None,
    seed: int | None = None,
    alpha: float | None = None,
    drift: float | None = None,
    reuse: float | None = None,
    verify: bool | None = None,
) -> tuple[SourceRef, Source | None]:
    """`resolve_source`, with the trace it opened (None for a workload spec).

    A trace is opened here, so a bad or empty one fails before any output is made, and
    with `verify` its files are checked against the manifest's SHA-256s. `check` sees
    the shape (from the manifest or the spec) first: a command's memory estimate.
    """
    overrides = {
        "--batches": batches, "--batch-size": batch_size, "--seed": seed,
        "--alpha": alpha, "--drift": drift, "--reuse": reuse,
    }  # fmt: skip
    if workload is None:
        if trace is None:
            raise ConfigError("give a TRACE folder or --workload PRESET_OR_SPEC")
        given = [name for name, value in overrides.items() if value is not None]
        if given:
            raise ConfigError(f"{given[0]} applies only with --workload (a trace is fixed)")
        from replay.trace.reader import open_trace

        opened = open_trace(trace)  # refuses an empty trace: there is nothing to replay
        if check is not None:
            check(opened.table_rows.tolist(), opened.num_lookups, opened.num_batches)
        if verify:
            opened.verify()
        return str(trace), opened
    if trace is not None:
        raise ConfigError("give a TRACE folder or --workload, not both")
    from replay.workload.generator import resolve_workload

    spec = resolve_workload(workload).with_overrides(
        batches=batches, batch_size=batch_size, seed=seed, alpha=alpha, drift=drift, reuse=reuse
    )
    if check is not None:
        check([t.rows for t in spec.tables], spec.lookups, spec.batches)
    return spec, None


def checksums_verified(ref: SourceRef, verify: bool) -> bool | None:
    """What outputs record: True (checked), False (--no-verify) or None (a workload
    generated on the fly has no files to check)."""
    return verify if isinstance(ref, str) else None


def resolve_source_verified_later(
    trace: Path | None,
    workload: str | None,
    *,
    verify: bool | None = None,
    check: Callable[[Source], None] | None = None,
    **overrides: Any,
) -> tuple[SourceRef, Source, Callable[[], None]]:
    """`resolve_source` (same `overrides`: batches, batch_size, seed, alpha, drift, reuse)
    with the checksums (`verify`) checked in the background: returns the reference, its
    opened source (which reads no file before that file's checksum has matched) and the
    check to call (it raises TraceError) before any output is final. The caller must also
    call it before reporting a TraceError of its own, since a checksum mismatch explains
    a corrupt file best. `check(opened source)` runs before the checksums start (a
    command's memory estimate: a refused command hashes nothing)."""
    from replay.trace.reader import Trace
    from replay.workload.source import open_source

    ref, trace_opened = resolve_opened(trace, workload, verify=False, **overrides)
    opened = trace_opened if trace_opened is not None else open_source(ref)
    if check is not None:
        check(opened)
    if verify and isinstance(opened, Trace):
        return ref, opened, opened.verify_in_background()
    return ref, opened, _no_check


def memory_check(estimate: Callable[[Sequence[int], int, int], Any]) -> ShapeCheck:
    """A `check` for `resolve_source`: refuses (ConfigError, with the figure) a source
    whose `estimate(rows, lookups, batches)` does not fit this machine's memory."""
    from replay._memory import check_fits, check_row_space

    def check(rows: Sequence[int], lookups: int, batches: int) -> None:
        check_row_space(rows)
        check_fits(estimate(rows, lookups, batches))

    return check


def _no_check() -> None:
    return None


def inspect_default(ref: SourceRef, inspect: bool | None) -> bool:
    """workload.json by default for a trace; for an on-the-fly workload only when asked,
    since it costs another generation pass and a byte per row of the model."""
    if inspect is not None:
        return inspect
    return isinstance(ref, str)
